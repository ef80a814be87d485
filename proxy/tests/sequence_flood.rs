//! Found, closed: one client emptied the proxy's table of idempotent
//! producers (`proxy/src/sequences.rs`) for everyone.
//!
//! On a topic whose key keyset is in rotation, the proxy follows every
//! idempotent producer from sequence 0 of its epoch, and answers a batch
//! of a producer it no longer follows `UNKNOWN_PRODUCER_ID`. The table
//! holds at most 65,536 producer-partition lines and drops a tenth when
//! full. Any client could fill it: a line is made for every batch at
//! sequence 0 under a producer id the proxy has not seen (any number,
//! never checked with the broker), before the broker answers, and kept
//! when the partition is refused; 65,536 of them fit in one Produce
//! request (the same partition named again and again, each with a second
//! batch, so that the proxy refuses them all and the broker never sees
//! them). Every other producer's line went: its next batch refused
//! `UNKNOWN_PRODUCER_ID` (an idempotent producer must start a new epoch; a
//! transactional one must abort its transaction).
//!
//! Now a line is confirmed once the broker takes one of its batches, and
//! a full table drops unconfirmed lines first: made-up producers push out
//! only each other. (A client that gets real producer ids from the broker
//! and writes a batch under each of 65,536 of them still can: each costs
//! it an InitProducerId and a write the broker takes.)

use crate::common;

use std::io::{Read as _, Write as _};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use common::{create_topic, fresh_topic, start_proxy};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    ApiKey, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

const V: i16 = 9;
const UNKNOWN_PRODUCER_ID: i16 = 59;

fn batch(pid: i64, epoch: i16, seq: i32, key: &[u8], value: Option<&[u8]>) -> Bytes {
    let r = Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: 0,
        sequence: seq,
        timestamp: common::wire::now_ms(),
        key: Some(Bytes::copy_from_slice(key)),
        value: value.map(Bytes::copy_from_slice),
        headers: Default::default(),
    };
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        [r].iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// A Produce (v9, acks=-1) with one entry per batch, all to partition 0
/// of `topic`.
fn produce_body(topic: &str, batches: Vec<Bytes>) -> BytesMut {
    let mut req = ProduceRequest::default();
    req.acks = -1;
    req.timeout_ms = 30000;
    for b in batches {
        let mut p = PartitionProduceData::default();
        p.index = 0;
        p.records = Some(b);
        let mut t = TopicProduceData::default();
        t.name = TopicName(StrBytes::from_string(topic.to_owned()));
        t.partition_data.push(p);
        req.topic_data.push(t);
    }
    let mut h = RequestHeader::default();
    h.request_api_key = ApiKey::Produce as i16;
    h.request_api_version = V;
    h.correlation_id = 7;
    h.client_id = Some(StrBytes::from_static_str("rv58"));
    let mut body = BytesMut::new();
    h.encode(&mut body, ApiKey::Produce.request_header_version(V))
        .unwrap();
    req.encode(&mut body, V).unwrap();
    body
}

/// One request, its answer waited for up to 10 minutes.
fn send_long(addr: &str, body: &[u8]) -> Option<Bytes> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(body).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(600))).unwrap();
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut frame = vec![0u8; i32::from_be_bytes(len) as usize];
    s.read_exact(&mut frame).ok()?;
    Some(Bytes::from(frame))
}

/// The first partition's error code of a Produce's answer.
fn produce_error(addr: &str, body: &[u8]) -> i16 {
    let mut f = send_long(addr, body).expect("no answer");
    ResponseHeader::decode(&mut f, ApiKey::Produce.response_header_version(V)).unwrap();
    let r = ProduceResponse::decode(&mut f, V).unwrap();
    r.responses[0].partition_responses[0].error_code
}

#[test]
fn one_client_cannot_make_the_proxy_forget_another_producer() {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let topic = fresh_topic("rv58-flush");
    create_topic(&broker, &topic, 1);
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let policies = Policies::new().with_topic(
        &topic,
        TopicPolicy::keyset(values).with_record_keys(keys).unwrap(),
    );
    let proxy = start_proxy(&broker, policies, Hooks::default());
    // The victim: an idempotent producer, its first batch.
    let (pid, epoch) = common::wire::init_producer_id(&broker);
    let first = produce_body(&topic, vec![batch(pid, epoch, 0, b"acct", Some(b"v1"))]);
    assert_eq!(produce_error(&proxy.addr, &first), 0);
    // The hostile client: one request of 65,536 partition entries, each
    // a batch at sequence 0 under a producer id of its own choosing
    // (never issued) followed by a second batch: the proxy refuses such
    // a partition (more than one batch with the write rule's tombstones),
    // nothing reaches the broker, and the line made for the first batch
    // stays.
    let flood: Vec<Bytes> = (0..65_536i64)
        .map(|i| {
            let pid = 1_000_000_000_000 + i;
            let mut two = BytesMut::from(&batch(pid, 0, 0, b"x", None)[..]);
            two.extend_from_slice(&batch(pid, 0, 1, b"x", None));
            two.freeze()
        })
        .collect();
    let refused = produce_error(&proxy.addr, &produce_body(&topic, flood));
    assert_eq!(
        refused, 2,
        "the flood's partitions: CORRUPT_MESSAGE, nothing forwarded"
    );
    // The victim's next batch, right after its first.
    let second = produce_body(&topic, vec![batch(pid, epoch, 1, b"acct", Some(b"v2"))]);
    let code = produce_error(&proxy.addr, &second);
    assert_ne!(
        code, UNKNOWN_PRODUCER_ID,
        "another client's flood of producer ids made the proxy forget this producer: its \
         next batch is refused UNKNOWN_PRODUCER_ID (a transactional producer must abort)"
    );
    assert_eq!(code, 0);
}
