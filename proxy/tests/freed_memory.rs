//! The proxy leaves no plaintext behind in freed memory: this binary's
//! global allocator (`freed-scan`, as in the library's
//! `tests/freed_memory.rs`) looks into every block freed, and into the old
//! block of every `realloc` (which always moves while it scans), for a
//! marker that only the records' plaintext holds.
//!
//! A batch of records whose values and a named header hold the marker goes
//! through the proxy's Produce path (the batch encrypted; a client's
//! Produce request frame read, encrypted, and wiped as the proxy does once
//! it forwarded it) and its Fetch path (the encrypted batch decrypted; a
//! broker's Fetch response frame decrypted into the response frame for
//! the client, wiped as the proxy does once it wrote it), through the
//! proxy's `__fuzz` functions: no broker. Then no freed block may hold the
//! marker. The negative controls run the same paths with the test hook
//! `skip_wipe` (the proxy's wiping off) and must find it.
//!
//! Scope: what the proxy owns, on uncompressed batches. A compressed batch
//! also passes through the codecs' own buffers and kafka-protocol's
//! buffer of the records it compresses, which the proxy cannot wipe (the
//! crate's "Limits of this version"); the TLS and socket buffers are
//! rustls' and tokio's. Record keys are not marked (keys are not
//! encrypted by this policy).
//!
//! `TOMBSTONE_FREED_SCAN_TRACE=1` (with `--nocapture`) prints a backtrace
//! for every block found holding the marker.

use std::io::Read as _;

use bytes::{Bytes, BytesMut};
use freed_scan::{FreedScan, Report, Session};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, FetchResponse, ProduceRequest, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::Keyset;
use tombstone_crypt_proxy::{__fuzz, Hooks, Policies, TopicPolicy};
use zeroize::{Zeroize, Zeroizing};

#[global_allocator]
static ALLOC: FreedScan = FreedScan;

const TOPIC: &str = "orders";
const HEADER: &str = "x-card";
const LIMIT: usize = 1 << 20;
const PRODUCE_VERSION: i16 = 9;
const FETCH_VERSION: i16 = 12;
/// Records in the batch, and their values' length.
const RECORDS: usize = 32;
const VALUE_LEN: usize = 300;

/// A marker only the plaintext holds: a fixed prefix and 8 random bytes,
/// so that no other test's leftovers (each test has its own) match.
const MARKER_LEN: usize = 24;
type Marker = Zeroizing<[u8; MARKER_LEN]>;

fn marker() -> Marker {
    let mut m = Zeroizing::new([0u8; MARKER_LEN]);
    m[..16].copy_from_slice(b"tc-proxy-secret:");
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut m[16..]))
        .expect("random bytes");
    m
}

fn session(marker: &Marker) -> Session {
    let s = Session::start();
    freed_scan::trace_hits(std::env::var_os("TOMBSTONE_FREED_SCAN_TRACE").is_some());
    s.add(&[&marker[..]]);
    s
}

#[track_caller]
fn assert_clean(report: &Report, what: &str) {
    assert!(report.blocks_scanned > 0, "{what}: nothing was scanned");
    assert_eq!(
        report.blocks_with_needle, 0,
        "{what}: freed blocks held plaintext (block sizes and needles: {:?}; \
         TOMBSTONE_FREED_SCAN_TRACE=1 with --nocapture prints where they were freed)",
        report.hits
    );
}

fn wiping() -> Hooks {
    Hooks::default()
}

fn not_wiping() -> Hooks {
    let mut hooks = Hooks::default();
    hooks.skip_wipe = true;
    hooks
}

fn policy() -> TopicPolicy {
    TopicPolicy::keyset(Keyset::generate())
        .with_headers([HEADER])
        .unwrap()
}

/// The test's own buffers of plaintext, wiped whole (they are their
/// buffers' only handles).
fn wipe_own(b: Bytes) {
    let mut v = Vec::<u8>::from(b.try_into_mut().expect("the only handle"));
    v.zeroize();
}

/// How many times `haystack` holds the marker.
fn count(haystack: &[u8], marker: &Marker) -> usize {
    haystack
        .windows(MARKER_LEN)
        .filter(|w| *w == &marker[..])
        .count()
}

/// A value of `VALUE_LEN` bytes that starts with the marker.
fn marked_value(marker: &Marker, i: usize) -> Bytes {
    let mut v = Vec::with_capacity(VALUE_LEN);
    v.extend_from_slice(&marker[..]);
    v.resize(VALUE_LEN, b'a' + (i % 26) as u8);
    Bytes::from(v)
}

/// One uncompressed batch: `RECORDS` records, each value and each named
/// header marked, but a tombstone (its header marked) and an empty value.
/// How many markers it holds, with it. Every buffer of it is sized up
/// front and the records' own are wiped: only the batch holds the marker.
fn marked_batch(marker: &Marker) -> (Bytes, usize) {
    let mut marks = 0;
    let records: Vec<Record> = (0..RECORDS)
        .map(|i| {
            let value = match i {
                3 => None,
                5 => Some(Bytes::new()),
                _ => {
                    marks += 1;
                    Some(marked_value(marker, i))
                }
            };
            let mut headers = IndexMap::with_capacity(2);
            let mut card = Vec::with_capacity(MARKER_LEN);
            card.extend_from_slice(&marker[..]);
            headers.insert(StrBytes::from_static_str(HEADER), Some(Bytes::from(card)));
            headers.insert(
                StrBytes::from_static_str("trace"),
                Some(Bytes::from_static(b"t-1")),
            );
            marks += 1;
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: 4242,
                producer_epoch: 0,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                sequence: i as i32,
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("key-{i}"))),
                value,
                headers,
            }
        })
        .collect();
    let capacity = RECORDS * (VALUE_LEN + 2 * MARKER_LEN + 64) + 128;
    let mut out = BytesMut::with_capacity(capacity);
    let options = RecordEncodeOptions {
        version: 2,
        compression: Compression::None,
    };
    RecordBatchEncoder::encode(&mut out, records.iter(), &options).unwrap();
    assert_eq!(out.capacity(), capacity, "the batch did not grow");
    for r in records {
        for field in r.value.into_iter().chain(r.headers.into_values().flatten()) {
            if field.len() >= MARKER_LEN {
                wipe_own(field);
            }
        }
    }
    let batch = out.freeze();
    assert_eq!(count(&batch, marker), marks);
    (batch, marks)
}

/// A client's Produce request for `batch` (partition 0 of `TOPIC`), with
/// its 4-byte size: what the proxy reads off the socket.
fn produce_input(batch: &Bytes) -> Zeroizing<Vec<u8>> {
    let mut header = RequestHeader::default();
    header.request_api_key = ApiKey::Produce as i16;
    header.request_api_version = PRODUCE_VERSION;
    header.correlation_id = 7;
    header.client_id = Some(StrBytes::from_static_str("freed-memory"));
    let mut partition = PartitionProduceData::default();
    partition.index = 0;
    partition.records = Some(batch.clone());
    let mut topic = TopicProduceData::default();
    topic.name = TopicName(StrBytes::from_static_str(TOPIC));
    topic.partition_data.push(partition);
    let mut request = ProduceRequest::default();
    request.acks = -1;
    request.timeout_ms = 5000;
    request.topic_data.push(topic);
    let hv = ApiKey::Produce.request_header_version(PRODUCE_VERSION);
    let size = header.compute_size(hv).unwrap() + request.compute_size(PRODUCE_VERSION).unwrap();
    let mut out = BytesMut::with_capacity(4 + size);
    out.extend_from_slice(&(size as i32).to_be_bytes());
    header.encode(&mut out, hv).unwrap();
    request.encode(&mut out, PRODUCE_VERSION).unwrap();
    assert_eq!(out.capacity(), 4 + size, "the frame did not grow");
    drop(request);
    Zeroizing::new(Vec::from(out))
}

/// A broker's Fetch response frame (no size) with `records` for partition 0
/// of `TOPIC`.
fn fetch_frame(records: &Bytes) -> Bytes {
    let mut partition = PartitionData::default();
    partition.partition_index = 0;
    partition.high_watermark = RECORDS as i64;
    partition.records = Some(records.clone());
    let mut topic = FetchableTopicResponse::default();
    topic.topic = TopicName(StrBytes::from_static_str(TOPIC));
    topic.partitions.push(partition);
    let mut body = FetchResponse::default();
    body.responses.push(topic);
    let mut header = ResponseHeader::default();
    header.correlation_id = 8;
    let hv = ApiKey::Fetch.response_header_version(FETCH_VERSION);
    let mut out = BytesMut::new();
    header.encode(&mut out, hv).unwrap();
    body.encode(&mut out, FETCH_VERSION).unwrap();
    out.freeze()
}

/// The Produce path with `hooks`: the batch encrypted, and a client's
/// request frame read, encrypted and done with. The ciphertext.
fn produce(marker: &Marker, batch: &Bytes, policies: &Policies, hooks: &Hooks) -> Bytes {
    let policy = policies.get(TOPIC).unwrap();
    let (sealed, added) = __fuzz::encrypt_with(TOPIC, policy, batch, LIMIT, hooks).unwrap();
    assert_eq!(added, 0);
    assert_eq!(count(&sealed, marker), 0, "encrypted");

    let mut input = produce_input(batch);
    let frame = __fuzz::read_frame(&input, LIMIT).expect("a frame");
    input.zeroize();
    drop(input);
    __fuzz::produce_with(&frame, policies, LIMIT, hooks).unwrap();
    // The proxy's end of a request: the client's frame wiped.
    assert_eq!(__fuzz::wipe(frame, hooks), !hooks.skip_wipe);
    sealed
}

/// The Fetch path with `hooks`: the encrypted batch decrypted, and a
/// broker's response frame decrypted into the client's, then done with.
/// With `own_wipe`, the test wipes the outputs itself (only the proxy's
/// internal buffers are left to the hooks).
fn fetch(
    marker: &Marker,
    marks: usize,
    sealed: &Bytes,
    policies: &Policies,
    hooks: &Hooks,
    own_wipe: bool,
) {
    let done = |b: Bytes| {
        if own_wipe {
            wipe_own(b);
        } else {
            assert_eq!(__fuzz::wipe(b, hooks), !hooks.skip_wipe);
        }
    };
    let policy = policies.get(TOPIC).unwrap();
    let plain = __fuzz::decrypt_with(TOPIC, policy, sealed, LIMIT, hooks).unwrap();
    assert_eq!(count(&plain, marker), marks, "decrypted");
    done(plain);

    let frame = fetch_frame(sealed);
    let (out, failed) = __fuzz::fetch_with(&frame, FETCH_VERSION, policies, LIMIT, hooks).unwrap();
    assert_eq!(failed, 0);
    let out = out.expect("a response with decrypted records");
    assert_eq!(count(&out, marker), marks, "the client's response");
    // The proxy's end of a response: written to the client, then wiped.
    done(out);
}

// ---------------------------------------------------------------------------

/// The scanner finds plaintext freed without wiping, and not once wiped.
#[test]
fn a_plaintext_freed_without_wiping_is_found() {
    let marker = marker();
    let s = session(&marker);
    let (batch, _) = marked_batch(&marker);
    assert_eq!(s.report().blocks_with_needle, 0, "{:?}", s.report().hits);
    wipe_own(batch);
    drop(marked_batch(&marker).0);
    let r = s.finish();
    assert_eq!(r.blocks_with_needle, 1, "only the batch not wiped: {r:?}");
}

#[test]
fn the_produce_path_leaves_no_plaintext_in_freed_memory() {
    let marker = marker();
    let policies = Policies::new().with_topic(TOPIC, policy());
    let s = session(&marker);
    let (batch, _) = marked_batch(&marker);
    for _ in 0..3 {
        drop(produce(&marker, &batch, &policies, &wiping()));
    }
    assert_clean(&s.report(), "the Produce path");

    // The negative control, last (what it leaves unwiped may be reused by
    // later blocks): the same path without the proxy's wiping.
    drop(produce(&marker, &batch, &policies, &not_wiping()));
    wipe_own(batch);
    let r = s.finish();
    eprintln!("the Produce path without wiping: {r:?}");
    // The client's frame (the encode-back check compares as it encodes:
    // it makes no copy of the records).
    assert!(r.blocks_with_needle >= 1, "the client's frame: {r:?}");
}

#[test]
fn the_fetch_path_leaves_no_plaintext_in_freed_memory() {
    let marker = marker();
    let policies = Policies::new().with_topic(TOPIC, policy());
    let s = session(&marker);
    let (batch, marks) = marked_batch(&marker);
    let sealed = produce(&marker, &batch, &policies, &wiping());
    wipe_own(batch);
    for _ in 0..3 {
        fetch(&marker, marks, &sealed, &policies, &wiping(), false);
    }
    assert_clean(&s.report(), "the Fetch path");

    // The negative controls, last: the proxy's internal buffers unwiped
    // (the test wipes what it is handed), then everything.
    fetch(&marker, marks, &sealed, &policies, &not_wiping(), true);
    let inner = s.report();
    eprintln!("the Fetch path, its internal buffers not wiped: {inner:?}");
    assert!(
        inner.blocks_with_needle >= RECORDS,
        "the records' decrypted values and headers, the batch in the response: {inner:?}"
    );
    fetch(&marker, marks, &sealed, &policies, &not_wiping(), false);
    let r = s.finish();
    eprintln!("the Fetch path without wiping: {r:?}");
    assert!(
        r.blocks_with_needle >= inner.blocks_with_needle + 2,
        "and the batch and the response frame handed out: {r:?}"
    );
}
