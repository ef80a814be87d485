//! Attacks on the Fetch drop rule (the write rule's tombstones of older
//! key forms left out of a decrypted batch) and on the proxy's own record
//! decoder, from a hostile review.
//!
//! Most attacks go through the proxy's `__fuzz` entry points (its Fetch
//! path on a batch as a broker holds it: no broker needed); the last one
//! writes with the library's own producer to Apache Kafka
//! (`TOMBSTONE_KAFKA_BOOTSTRAP`) and reads through a proxy.
//!
//! The `finding_1_*` tests reproduce what the review found: the first rule
//! (a tombstone followed in its batch by another form of its key) left out
//! a library writer's delete followed by a put of the key in one batch,
//! and they failed on it; the rule now keeps every tombstone under the
//! form of its key's last record. The others are attacks the proxy
//! withstood, kept as regression tests.

mod common;

use std::io::Write as _;

use bytes::{Bytes, BytesMut};
use common::wire::{batch_of, decode_records, fix_crc, record};
use freed_scan::{FreedScan, Session};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, Record, RecordBatchEncoder, RecordEncodeOptions};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{__fuzz, Hooks, TopicPolicy};

#[global_allocator]
static ALLOC: FreedScan = FreedScan;

const T: &str = "review-drop";
const LIMIT: usize = 1 << 20;
const HEADER_LEN: usize = 61;
const LAST_OFFSET_DELTA: std::ops::Range<usize> = 23..27;
const RECORD_COUNT: std::ops::Range<usize> = 57..61;
const ATTRIBUTES: usize = 21;

type Op = (Vec<u8>, Option<Vec<u8>>);

/// A value keyset and an AES-SIV record-key keyset rotated `rotations`
/// times (every key enabled: `rotations + 1` forms per key).
fn rotated(rotations: usize) -> (Keyset, Keyset) {
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    for _ in 0..rotations {
        keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    }
    (Keyset::generate(), keys)
}

fn policy_of(values: &Keyset, keys: &Keyset) -> TopicPolicy {
    TopicPolicy::keyset(values.clone())
        .with_record_keys(keys.clone())
        .unwrap()
}

fn be32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

/// Every batch of `raw` has a CRC that matches its bytes.
#[track_caller]
fn crcs_hold(raw: &[u8]) {
    let mut rest = raw;
    while !rest.is_empty() {
        let len = be32(rest, 8) as usize + 12;
        let b = &rest[..len];
        assert_eq!(
            crc32c::crc32c(&b[21..]),
            be32(b, 17) as u32,
            "a batch whose CRC does not match"
        );
        rest = &rest[len..];
    }
}

/// The records of a batch as the library's writers put them on the log
/// (`KeyForms::writes`: a tombstone for each older form, then the record
/// under the primary form), keys and values sealed as the proxy seals
/// them, at offsets from 0. `headers` go on every record of a write,
/// tombstones of older forms included (as `TypedProducer::send_with`
/// does), sealed when the policy names them.
fn library_batch(policy: &TopicPolicy, ops: &[Op], headers: &[(&str, &[u8])]) -> Vec<Record> {
    let mut out = Vec::new();
    for (key, value) in ops {
        let forms = policy.write_key(T, key).unwrap().unwrap();
        let sealed = policy.write_value(T, Some(key), value.as_deref()).unwrap();
        for (form, v) in forms.writes(sealed.as_deref()) {
            let mut r = record(Some(form), v, out.len() as i64);
            for (name, hv) in headers {
                let hv = policy
                    .write_header(T, Some(key), name, hv)
                    .unwrap()
                    .unwrap_or_else(|| hv.to_vec());
                r.headers.insert(
                    StrBytes::from_string((*name).to_owned()),
                    Some(Bytes::from(hv)),
                );
            }
            out.push(r);
        }
    }
    out
}

/// What a reader gets of `ops` through the proxy's Fetch path: the batch
/// decrypted, as (plaintext key, value) in order; the batch's header is
/// checked to stay consistent (CRC, record count, last offset delta).
fn fetched(policy: &TopicPolicy, raw: &Bytes) -> Vec<Op> {
    let plain = __fuzz::decrypt(T, policy, raw, LIMIT).unwrap();
    crcs_hold(&plain);
    let recs = decode_records(&plain);
    assert_eq!(
        be32(&plain, RECORD_COUNT.start) as usize,
        recs.len(),
        "the record count says how many records the batch holds"
    );
    assert_eq!(
        plain[LAST_OFFSET_DELTA], raw[LAST_OFFSET_DELTA],
        "the last offset delta stays"
    );
    recs.into_iter()
        .map(|r| {
            (
                r.key.map(|k| k.to_vec()).unwrap_or_default(),
                r.value.map(|v| v.to_vec()),
            )
        })
        .collect()
}

fn op(k: &[u8], v: Option<&[u8]>) -> Op {
    (k.to_vec(), v.map(<[u8]>::to_vec))
}

/// A client's plaintext batch of `ops`, as a client hands it to the proxy.
fn client_batch(ops: &[Op]) -> Bytes {
    let recs: Vec<Record> = ops
        .iter()
        .enumerate()
        .map(|(i, (k, v))| record(Some(k), v.as_deref(), i as i64))
        .collect();
    batch_of(&recs).freeze()
}

// ---------------------------------------------------------------------------
// Finding 1: a delete written by the library's own writers is hidden.

/// Finding 1 (reproduces it; ignored until the fix). The library's
/// writers (`TypedProducer`, `KafkaChangelog`, the command line's
/// `repair`/`reencrypt`/`--to-topic`) write a delete of `k` under a key
/// keyset in rotation as `[t(k@A), t(k@B)]` and a put of `k` as
/// `[t(k@A), p(k@B)]`. Batched together (librdkafka batches a producer's
/// consecutive sends to one partition), the log holds
/// `[t(k@A), t(k@B), t(k@A), p(k@B)]`: the client's own delete is
/// `t(k@B)`, under the key's primary form. The drop rule's `several`
/// branch (a second form follows) drops it: a reader through the proxy
/// reads `k = v2` and never the delete, while the library's own reader
/// (and a reader beside the proxy) reads the delete. The crate docs
/// promise "every delete a client wrote is read".
#[test]
fn finding_1_a_library_writers_delete_then_put_in_one_batch_keeps_the_delete() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let ops = [op(b"k", None), op(b"k", Some(b"v2"))];
    let raw = batch_of(&library_batch(&policy, &ops, &[])).freeze();
    assert_eq!(
        be32(&raw, RECORD_COUNT.start),
        4,
        "[t(A), t(B), t(A), p(B)]"
    );
    assert_eq!(
        fetched(&policy, &raw),
        ops,
        "the reader through the proxy misses the delete the library wrote"
    );
}

/// Finding 1 with three forms, and a put before the delete: a consumer
/// of a changelog reads `v1` then `v2`, never that `k` was deleted in
/// between.
#[test]
fn finding_1_a_library_writers_delete_between_puts_is_read() {
    let (values, keys) = rotated(2);
    let policy = policy_of(&values, &keys);
    let ops = [
        op(b"k", Some(b"v1")),
        op(b"k", None),
        op(b"other", Some(b"x")),
        op(b"k", Some(b"v2")),
    ];
    let raw = batch_of(&library_batch(&policy, &ops, &[])).freeze();
    assert_eq!(fetched(&policy, &raw), ops);
}

/// The same writes through the proxy's Produce path are read as written
/// (the proxy puts every tombstone of older forms at the front of the
/// batch, so a client's delete is never followed by another form): the
/// promise holds for the proxy's own writers, with two and three forms.
#[test]
fn through_the_proxy_a_delete_then_put_in_one_batch_is_read_as_written() {
    for rotations in [1, 2] {
        let (values, keys) = rotated(rotations);
        let policy = policy_of(&values, &keys);
        let ops = [
            op(b"k", Some(b"v1")),
            op(b"k", None),
            op(b"other", None),
            op(b"k", Some(b"v2")),
            op(b"other", Some(b"o")),
            op(b"k", None),
        ];
        let (sealed, added) = __fuzz::encrypt(T, &policy, &client_batch(&ops), LIMIT).unwrap();
        assert_eq!(
            added,
            2 * rotations as i32,
            "one tombstone per older form per key"
        );
        assert_eq!(fetched(&policy, &sealed), ops, "{rotations} rotations");
    }
}

/// The library's writes that the drop rule was made for: a put alone, and
/// a delete alone, read as written (the delete under the primary form
/// stays).
#[test]
fn a_library_writers_put_or_delete_alone_reads_as_written() {
    let (values, keys) = rotated(2);
    let policy = policy_of(&values, &keys);
    for ops in [
        vec![op(b"k", Some(b"v"))],
        vec![op(b"k", None)],
        vec![op(b"k", Some(b"v")), op(b"k", None)],
        vec![op(b"k", Some(b"v1")), op(b"k", Some(b"v2"))],
    ] {
        let raw = batch_of(&library_batch(&policy, &ops, &[])).freeze();
        assert_eq!(fetched(&policy, &raw), ops);
    }
}

// ---------------------------------------------------------------------------
// The rule's invariants under random batches (what an attacker without
// keys can build from forms it copied off the log, and what any writer
// can put in one batch).

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Any sequence of records of a few keys under any of their forms, values
/// or tombstones, in any order (a writer beside the proxy with copies of
/// forms and ciphertexts from the log): what the proxy hands on is a
/// subsequence of the batch; only tombstones are left out; the last record
/// of each key is kept, so a key's state after the batch is the writer's
/// (no deleted key comes back, no value appears that the batch does not
/// end on); offsets are the records' own; count and CRC say what is there.
#[test]
fn random_batches_keep_every_keys_last_record_and_drop_only_tombstones() {
    let (values, keys) = rotated(2);
    let policy = policy_of(&values, &keys);
    let names: [&[u8]; 3] = [b"a", b"b", b"c"];
    let forms: Vec<Vec<Vec<u8>>> = names
        .iter()
        .map(|k| {
            let f = policy.write_key(T, k).unwrap().unwrap();
            f.all().map(<[u8]>::to_vec).collect()
        })
        .collect();
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for round in 0..400 {
        let n = 1 + rng.below(9) as usize;
        let mut recs = Vec::new();
        let mut plain = Vec::new();
        for i in 0..n {
            let k = rng.below(3) as usize;
            let form = &forms[k][rng.below(3) as usize];
            let value = (rng.below(2) == 0).then(|| format!("v{round}-{i}").into_bytes());
            let sealed = policy
                .write_value(T, Some(names[k]), value.as_deref())
                .unwrap();
            recs.push(record(Some(form), sealed.as_deref(), i as i64));
            plain.push((i as i64, names[k].to_vec(), value));
        }
        let raw = batch_of(&recs).freeze();
        let out = __fuzz::decrypt(T, &policy, &raw, LIMIT).unwrap();
        crcs_hold(&out);
        let got = decode_records(&out);
        assert_eq!(be32(&out, RECORD_COUNT.start) as usize, got.len());
        assert_eq!(out[LAST_OFFSET_DELTA], raw[LAST_OFFSET_DELTA]);
        // A subsequence, by offset, of the plaintext.
        let mut kept = vec![false; n];
        for r in &got {
            let (off, k, v) = &plain[r.offset as usize];
            assert_eq!(
                (r.key.as_deref(), r.value.as_deref()),
                (Some(&k[..]), v.as_deref()),
                "round {round}"
            );
            assert!(!kept[*off as usize]);
            kept[*off as usize] = true;
        }
        for (i, (_, k, v)) in plain.iter().enumerate() {
            let last = plain[i + 1..].iter().all(|(_, k2, _)| k2 != k);
            if !kept[i] {
                assert!(v.is_none(), "round {round}: a value left out");
                assert!(!last, "round {round}: a key's last record left out");
            }
        }
    }
}

/// Under a key keyset with one key (no rotation) nothing is ever left out:
/// every record has one form per key.
#[test]
fn without_a_rotation_nothing_is_left_out() {
    let (values, keys) = rotated(0);
    let policy = policy_of(&values, &keys);
    let ops = [op(b"k", None), op(b"k", Some(b"v")), op(b"k", None)];
    let raw = batch_of(&library_batch(&policy, &ops, &[])).freeze();
    assert_eq!(fetched(&policy, &raw), ops);
}

/// A batch of records whose keys are not encrypted (no key keyset): the
/// rule is off, a delete followed by a put of its key is read.
#[test]
fn without_record_keys_nothing_is_left_out() {
    let policy = TopicPolicy::keyset(Keyset::generate());
    let ops = [op(b"k", None), op(b"k", Some(b"v"))];
    let (sealed, added) = __fuzz::encrypt(T, &policy, &client_batch(&ops), LIMIT).unwrap();
    assert_eq!(added, 0);
    assert_eq!(fetched(&policy, &sealed), ops);
}

// ---------------------------------------------------------------------------
// Batches whose header or records lie, on the Fetch path, in a batch the
// drop rule rewrites.

/// The proxy's own batch `[t(k@A), p(k@B)]`, as the broker holds it.
fn sealed_put() -> (TopicPolicy, Bytes) {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let (sealed, added) =
        __fuzz::encrypt(T, &policy, &client_batch(&[op(b"k", Some(b"v"))]), LIMIT).unwrap();
    assert_eq!(added, 1);
    (policy, sealed)
}

#[track_caller]
fn refused(policy: &TopicPolicy, raw: &[u8], what: &str) -> String {
    match __fuzz::decrypt(T, policy, &Bytes::copy_from_slice(raw), LIMIT) {
        Ok(out) => panic!("{what}: handed on ({} bytes)", out.len()),
        Err(e) => e,
    }
}

/// Sets the batch length from the bytes, then the CRC.
fn fix_len_crc(b: &mut BytesMut) {
    let len = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    fix_crc(b);
}

#[test]
fn the_control_reads_back_with_the_tombstone_left_out() {
    let (policy, sealed) = sealed_put();
    assert_eq!(fetched(&policy, &sealed), [op(b"k", Some(b"v"))]);
}

#[test]
fn a_record_count_that_lies_is_refused_whatever_the_crc() {
    let (policy, sealed) = sealed_put();
    for count in [0, 1, 3, 1000, i32::MAX, -1, i32::MIN] {
        let mut b = BytesMut::from(&sealed[..]);
        b[RECORD_COUNT].copy_from_slice(&count.to_be_bytes());
        fix_crc(&mut b);
        refused(&policy, &b, &format!("count {count}"));
        // Without the CRC fixed too.
        let mut b = BytesMut::from(&sealed[..]);
        b[RECORD_COUNT].copy_from_slice(&count.to_be_bytes());
        refused(&policy, &b, &format!("count {count}, CRC stale"));
    }
}

#[test]
fn a_crc_that_does_not_match_is_refused_before_anything_is_decoded() {
    let (policy, sealed) = sealed_put();
    for at in [ATTRIBUTES, 30, 45, 58, HEADER_LEN, sealed.len() - 1] {
        let mut b = BytesMut::from(&sealed[..]);
        b[at] ^= 0x40;
        let e = refused(&policy, &b, &format!("byte {at} flipped"));
        assert!(e.contains("CRC"), "{at}: {e}");
    }
}

#[test]
fn trailing_bytes_after_the_last_record_are_refused() {
    let (policy, sealed) = sealed_put();
    for tail in [
        &[0u8][..],
        &[0, 0, 0, 0, 0, 0, 0],
        &[0x0e, 0, 0, 0, 1, 1, 0, 0],
    ] {
        let mut b = BytesMut::from(&sealed[..]);
        b.extend_from_slice(tail);
        fix_len_crc(&mut b);
        let e = refused(&policy, &b, "trailing bytes");
        assert!(e.contains("after the last"), "{e}");
    }
}

/// The first record's fields, forged one at a time: a negative key length
/// other than -1, a key length past the record, a varint of 6 bytes, a
/// timestamp varint of 11 bytes, an offset delta past `i32`, a negative
/// header count, a record length past the batch.
#[test]
fn lying_lengths_and_varints_in_a_record_are_refused() {
    let (policy, sealed) = sealed_put();
    let records = &sealed[HEADER_LEN..];
    // Record 0: length, attributes (0), timestamp delta (0), offset delta
    // (0), key length, key, value length (-1: the tombstone), headers (0).
    let len0 = records[0] as usize / 2;
    assert!(records[0] < 0x80);
    let rec0 = &records[1..1 + len0];
    let rest = &records[1 + len0..];
    assert_eq!(&rec0[..3], &[0, 0, 0]);
    let forge = |body: Vec<u8>| -> BytesMut {
        let mut b = BytesMut::from(&sealed[..HEADER_LEN]);
        let mut len = Vec::new();
        let z = ((body.len() as i64) << 1) as u64;
        let mut v = z;
        while v >= 0x80 {
            len.push((v as u8 & 0x7f) | 0x80);
            v >>= 7;
        }
        len.push(v as u8);
        b.extend_from_slice(&len);
        b.extend_from_slice(&body);
        b.extend_from_slice(rest);
        fix_len_crc(&mut b);
        b
    };
    // The unforged record passes the same way.
    let same = forge(rec0.to_vec());
    assert_eq!(&same[..], &sealed[..]);
    let key_at = 3;
    let key_len = rec0[key_at] as usize / 2;
    let after_key = &rec0[key_at + 1 + key_len..];
    let cases: Vec<(&str, Vec<u8>)> = vec![
        (
            "key length -2",
            [&rec0[..3], &[3u8][..], after_key].concat(),
        ),
        ("key length past the record", {
            let mut r = rec0.to_vec();
            r[key_at] = 0x7e;
            r
        }),
        ("a varint of 6 bytes for the key length", {
            [
                &rec0[..3],
                &[0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..],
                after_key,
            ]
            .concat()
        }),
        ("a timestamp delta of 11 bytes", {
            [&[0u8][..], &[0xff; 10][..], &[0x01], &rec0[2..]].concat()
        }),
        ("an offset delta past i32", {
            [&rec0[..2], &[0xfe, 0xff, 0xff, 0xff, 0x1f][..], &rec0[3..]].concat()
        }),
        ("a negative header count", {
            let mut r = rec0.to_vec();
            let last = r.len() - 1;
            r[last] = 0x01;
            r
        }),
        ("a header count past the record", {
            let mut r = rec0.to_vec();
            let last = r.len() - 1;
            r[last] = 0x7e;
            r
        }),
        ("a record with attributes", {
            let mut r = rec0.to_vec();
            r[0] = 1;
            r
        }),
        (
            "a value length of -1 written long (not as it encodes back)",
            {
                let mut r = rec0[..rec0.len() - 2].to_vec();
                r.extend_from_slice(&[0x81, 0x00, 0x00]);
                r
            },
        ),
    ];
    for (what, body) in cases {
        refused(&policy, &forge(body), what);
    }
    // A record length past the batch.
    let mut b = BytesMut::from(&sealed[..]);
    b[HEADER_LEN] = 0x7e;
    fix_crc(&mut b);
    refused(&policy, &b, "record length past the batch");
}

/// Two headers of one key on the write rule's tombstone (a writer beside
/// the proxy): the decoder keeps one, so the batch does not encode back
/// and is refused, never handed on with a header lost.
#[test]
fn duplicate_header_keys_on_a_left_out_tombstone_are_refused() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let mut recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[("h", b"1")]);
    let raw = batch_of(&recs);
    // The library's batch with headers reads back (the control).
    assert_eq!(
        fetched(&policy, &raw.clone().freeze()),
        [op(b"k", Some(b"v"))]
    );
    // Record 0 again with its header twice, by hand.
    recs.truncate(1);
    let one = batch_of(&recs);
    let body = &one[HEADER_LEN + 1..];
    // Its last bytes: the header count (1, zigzag), then `h` and `1`,
    // each with its length.
    assert_eq!(
        &body[body.len() - 5..],
        &[2, 2, b'h', 2, b'1'],
        "one header"
    );
    let mut rec = body.to_vec();
    let n = rec.len();
    rec[n - 5] = 4;
    rec.extend_from_slice(&body[body.len() - 4..]);
    let mut b = BytesMut::from(&raw[..HEADER_LEN]);
    b.extend_from_slice(&[(rec.len() * 2) as u8]);
    assert!(rec.len() * 2 < 0x80);
    b.extend_from_slice(&rec);
    let second = &raw[HEADER_LEN + 1 + body.len()..];
    b.extend_from_slice(second);
    fix_len_crc(&mut b);
    let e = refused(&policy, &b, "duplicate header keys");
    assert!(e.contains("encode back"), "{e}");
}

/// A gzip batch that needs the rule: decompressed, the tombstone left out,
/// compressed again with a count and CRC that hold. Then the same batch
/// whose compressed records lie about their count (a count the header
/// does not give, records cut short, a record more), each with its CRC
/// fixed: refused.
#[test]
fn compressed_batches_with_the_rule_and_with_lying_inner_records() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    for codec in [
        Compression::Gzip,
        Compression::Snappy,
        Compression::Lz4,
        Compression::Zstd,
    ] {
        let ops = [op(b"k", Some(b"v")), op(b"j", None), op(b"k", None)];
        let recs = library_batch(&policy, &ops, &[]);
        let mut raw = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut raw,
            recs.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: codec,
            },
        )
        .unwrap();
        let raw = raw.freeze();
        assert_eq!(fetched(&policy, &raw), ops, "{codec:?}");
        let out = __fuzz::decrypt(T, &policy, &raw, LIMIT).unwrap();
        assert_eq!(
            out[ATTRIBUTES + 1] & 7,
            raw[ATTRIBUTES + 1] & 7,
            "codec kept"
        );

        // The six compressed records under a header that claims 5, 7, 1.
        assert_eq!(be32(&raw, RECORD_COUNT.start), 6);
        for count in [5i32, 7, 1] {
            let mut b = BytesMut::from(&raw[..]);
            b[RECORD_COUNT].copy_from_slice(&count.to_be_bytes());
            fix_crc(&mut b);
            refused(&policy, &b, &format!("{codec:?}: count {count}"));
        }
    }
    // Gzip: the compressed records followed by a second gzip member of
    // plaintext records (a decoder that reads only the first member would
    // leave it out; one that reads both would see more records than the
    // count): never handed on as it came.
    let recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[]);
    let plain = batch_of(&recs);
    let inner = &plain[HEADER_LEN..];
    let gz = |data: &[u8]| {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    };
    let mut b = BytesMut::from(&plain[..HEADER_LEN]);
    b[ATTRIBUTES + 1] |= 1;
    b.extend_from_slice(&gz(inner));
    let extra = record(Some(b"PLAINTEXT-KEY"), Some(b"PLAINTEXT-VALUE"), 2);
    let extra = batch_of(&[extra]);
    b.extend_from_slice(&gz(&extra[HEADER_LEN..]));
    fix_len_crc(&mut b);
    match __fuzz::decrypt(T, &policy, &b.clone().freeze(), LIMIT) {
        Err(_) => {}
        Ok(out) => {
            assert!(
                !common::wire::contains(&out, b"PLAINTEXT-VALUE"),
                "a second gzip member handed on"
            );
            assert_eq!(decode_records(&out).len(), 1);
        }
    }
}

/// A transactional batch that needs the rule keeps its attributes,
/// producer fields and base sequence; only its count and CRC change.
#[test]
fn a_transactional_batch_keeps_its_header_but_count_and_crc() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let mut recs = library_batch(&policy, &[op(b"k", Some(b"v")), op(b"j", Some(b"w"))], &[]);
    for (i, r) in recs.iter_mut().enumerate() {
        r.transactional = true;
        r.producer_id = 77;
        r.producer_epoch = 3;
        r.sequence = 40 + i as i32;
    }
    let raw = batch_of(&recs).freeze();
    let out = __fuzz::decrypt(T, &policy, &raw, LIMIT).unwrap();
    assert_eq!(out[..8], raw[..8], "base offset");
    assert_eq!(out[12..17], raw[12..17], "leader epoch, magic");
    assert_eq!(out[21..57], raw[21..57], "attributes to base sequence");
    assert_eq!(be32(&out, RECORD_COUNT.start), 2);
    crcs_hold(&out);
    let got = decode_records(&out);
    assert!(got.iter().all(|r| r.transactional && r.producer_id == 77));
    assert_eq!(
        got.iter().map(|r| r.offset).collect::<Vec<_>>(),
        [1, 3],
        "the offsets keep their gaps"
    );
}

/// A control batch (a transaction marker, or one planted with records)
/// is handed on byte for byte: nothing of it is decrypted, and a client
/// never hands a control batch's records to the application.
#[test]
fn a_control_batch_passes_as_it_came() {
    let (policy, sealed) = sealed_put();
    let mut b = BytesMut::from(&sealed[..]);
    b[ATTRIBUTES + 1] |= 1 << 5;
    fix_crc(&mut b);
    let out = __fuzz::decrypt(T, &policy, &b.clone().freeze(), LIMIT).unwrap();
    assert_eq!(out, b);
}

/// A record whose key does not decrypt (a form of another topic, a
/// forged one) in a batch that needs the rule: the partition is refused,
/// never a tombstone dropped or kept on a guess.
#[test]
fn a_forged_form_in_front_of_a_real_record_is_refused() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let mut recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[]);
    let mut forged = recs[0].key.clone().unwrap().to_vec();
    let last = forged.len() - 1;
    forged[last] ^= 1;
    recs[0].key = Some(Bytes::from(forged));
    refused(&policy, &batch_of(&recs), "a forged form");
    // A form from another topic.
    let other = policy.write_key("another", b"k").unwrap().unwrap();
    let mut recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[]);
    recs[0].key = Some(Bytes::copy_from_slice(other.older()[0].as_slice()));
    let r = __fuzz::decrypt(T, &policy, &batch_of(&recs).freeze(), LIMIT);
    if let Ok(out) = r {
        // Key forms are not bound to the topic: it reads as `k`.
        assert_eq!(decode_records(&out).len(), 1);
    }
}

// ---------------------------------------------------------------------------
// Plaintext of a left-out record is wiped.

/// The library's writer keeps a write's headers on the tombstones of
/// older forms; a named header's plaintext, decrypted on a tombstone the
/// rule leaves out, must be wiped before it is freed (the negative
/// control: with `skip_wipe` it is found).
#[test]
fn a_left_out_tombstones_decrypted_header_is_wiped() {
    let run = |hooks: &Hooks| -> usize {
        let (values, keys) = rotated(1);
        let policy = TopicPolicy::keyset(values)
            .with_record_keys(keys)
            .unwrap()
            .with_headers(["x-secret"])
            .unwrap();
        let mut marker = [0u8; 24];
        marker[..16].copy_from_slice(b"review-drop-sec:");
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            .to_le_bytes();
        marker[16..].copy_from_slice(&nonce[..8]);
        // The marker on the left-out tombstone only.
        let mut recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[]);
        let sealed = policy
            .write_header(T, Some(b"k"), "x-secret", &marker)
            .unwrap()
            .unwrap();
        recs[0].headers.insert(
            StrBytes::from_static_str("x-secret"),
            Some(Bytes::from(sealed)),
        );
        let raw = batch_of(&recs).freeze();
        drop(recs);
        let s = Session::start();
        s.add(&[&marker[..]]);
        let out = __fuzz::decrypt_with(T, &policy, &raw, LIMIT, hooks).unwrap();
        assert!(!common::wire::contains(&out, &marker), "left out");
        assert_eq!(decode_records(&out).len(), 1);
        __fuzz::wipe(out, hooks);
        let found = s.finish().blocks_with_needle;
        marker.fill(0);
        found
    };
    assert_eq!(run(&Hooks::default()), 0, "a freed block held the header");
    let mut skip = Hooks::default();
    skip.skip_wipe = true;
    assert!(run(&skip) > 0, "the negative control finds it");
}

// ---------------------------------------------------------------------------
// Finding 1 end to end: the library's own producer, Apache Kafka, a proxy.

/// Finding 1 end to end (reproduces it; ignored until the fix): the
/// library's `TypedProducer` (idempotent, `linger.ms` 500) deletes `k`
/// and puts it again under a key keyset in rotation; both writes land in
/// one batch on Apache Kafka (`[t(k@A), t(k@B), t(k@A), p(k@B)]`). A
/// consumer beside the proxy reads the delete; an rdkafka consumer
/// through the proxy does not.
#[test]
fn finding_1_a_typed_producers_delete_is_lost_through_the_proxy() {
    use common::{consume_all, create_topic, fresh_topic, start_proxy};
    use tombstone_crypt::kafka::TypedProducer;
    use tombstone_crypt::{DeterministicSerializer, EncryptingSerializer};
    let Some(bootstrap) = common::bootstrap() else {
        return;
    };
    let topic = fresh_topic("review-drop");
    create_topic(&bootstrap, &topic, 1);
    let (values, keys) = rotated(1);
    let mut config = common::config(&bootstrap);
    config.set("linger.ms", "500");
    let producer: TypedProducer<[u8], [u8], _, _> = TypedProducer::new(
        &config,
        DeterministicSerializer::new(tombstone_crypt::Bytes, keys.clone()),
        EncryptingSerializer::new(tombstone_crypt::Bytes, values.clone()),
    )
    .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let (deleted, put) = tokio::join!(
            producer.send(&topic, b"k", None),
            producer.send(&topic, b"k", Some(&b"v2"[..])),
        );
        deleted.unwrap();
        put.unwrap();
    });
    // One batch of four records on the broker.
    let (code, raw) = common::wire::raw_fetch(&bootstrap, &topic);
    assert_eq!(code, 0);
    assert_eq!(be32(&raw, 8) as usize + 12, raw.len(), "one batch");
    assert_eq!(be32(&raw, RECORD_COUNT.start), 4);
    let direct = consume_all(&bootstrap, &topic, 1).unwrap();
    assert_eq!(direct.len(), 4);
    assert_eq!(direct[1].value, None, "the delete under the primary form");

    let proxy = start_proxy(
        &bootstrap,
        tombstone_crypt_proxy::Policies::new().with_topic(&topic, policy_of(&values, &keys)),
        Hooks::default(),
    );
    let through = consume_all(&proxy.addr, &topic, 1).unwrap();
    let read: Vec<Op> = through
        .iter()
        .map(|c| (c.key.clone().unwrap_or_default(), c.value.clone()))
        .collect();
    assert_eq!(
        read,
        [op(b"k", None), op(b"k", Some(b"v2"))],
        "through the proxy (offsets {:?})",
        through.iter().map(|c| c.offset).collect::<Vec<_>>()
    );
}

/// The rule looks inside one batch only: a write-rule tombstone whose
/// record went out in the next batch (a producer's batch full between
/// them) is kept, and read as a delete before the put (the safe side:
/// never a delete hidden by a record of another batch). Two batches in
/// one Fetch, each rewritten on its own.
#[test]
fn a_tombstone_is_never_left_out_for_a_record_in_another_batch() {
    let (values, keys) = rotated(1);
    let policy = policy_of(&values, &keys);
    let recs = library_batch(&policy, &[op(b"k", Some(b"v"))], &[]);
    let mut raw = batch_of(&recs[..1]);
    let mut second = recs[1].clone();
    second.offset = 1;
    second.sequence = 0;
    raw.extend_from_slice(&batch_of(&[second]));
    let raw = raw.freeze();
    let out = __fuzz::decrypt(T, &policy, &raw, LIMIT).unwrap();
    crcs_hold(&out);
    let got: Vec<Op> = decode_records(&out)
        .into_iter()
        .map(|r| (r.key.unwrap().to_vec(), r.value.map(|v| v.to_vec())))
        .collect();
    assert_eq!(got, [op(b"k", None), op(b"k", Some(b"v"))]);
    // The same two records in one batch: the tombstone is left out.
    assert_eq!(
        fetched(&policy, &batch_of(&recs).freeze()),
        [op(b"k", Some(b"v"))]
    );
}
