//! The sequence table of the write rule (`proxy/src/sequences.rs`) against
//! the broker's duplicate detection, on Apache Kafka: the broker takes a
//! batch whose first and last sequences match one of the producer's last
//! five as a duplicate, answers success and writes nothing. A batch the
//! proxy forwarded at a guessed sequence (a producer it had not followed
//! from sequence 0: through another proxy process, or after a hostile
//! client's batch under the producer's id and another epoch) matched one,
//! and a client's delete was acknowledged and never written. Now such a
//! batch is answered `UNKNOWN_PRODUCER_ID`, the producer starts a
//! new epoch, and every acknowledged write is on the topic.

use crate::common;

use bytes::{Bytes, BytesMut};
use common::wire::{fetch_records, produce_body, send_frame};
use common::{create_topic_with, fresh_topic, start_proxy};
use kafka_protocol::messages::{ApiKey, ProduceResponse, ResponseHeader};
use kafka_protocol::protocol::Decodable;
use kafka_protocol::records::{
    Compression, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

const V: i16 = 9;

fn rec(pid: i64, epoch: i16, seq: i32, i: i64, key: &[u8], value: Option<&[u8]>) -> Record {
    Record {
        transactional: false,
        control: false,
        delete_horizon: false,
        partition_leader_epoch: -1,
        producer_id: pid,
        producer_epoch: epoch,
        timestamp_type: TimestampType::Creation,
        offset: i,
        sequence: seq + i as i32,
        timestamp: common::wire::now_ms() + i,
        key: Some(Bytes::copy_from_slice(key)),
        value: value.map(Bytes::copy_from_slice),
        headers: Default::default(),
    }
}

fn batch(records: &[Record]) -> Bytes {
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        records.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression: Compression::None,
        },
    )
    .unwrap();
    buf.freeze()
}

/// A Produce (v9, acks=-1) of `batch` to partition 0 of `topic`: the
/// partition's (index, error, base offset).
fn produce(addr: &str, topic: &str, batch: Bytes) -> (i32, i16, i64) {
    let body = produce_body(topic, batch, V);
    let mut f = send_frame(addr, &body).expect("no answer");
    ResponseHeader::decode(&mut f, ApiKey::Produce.response_header_version(V)).unwrap();
    let r = ProduceResponse::decode(&mut f, V).unwrap();
    let p = &r.responses[0].partition_responses[0];
    (p.index, p.error_code, p.base_offset)
}

fn rotating_policies(topic: &str) -> Policies {
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    Policies::new().with_topic(
        topic,
        TopicPolicy::keyset(values).with_record_keys(keys).unwrap(),
    )
}

fn show(addr: &str, topic: &str) -> Vec<(i64, String, Option<String>)> {
    let (code, recs) = fetch_records(addr, topic);
    assert_eq!(code, 0);
    recs.iter()
        .map(|r| {
            (
                r.offset,
                String::from_utf8_lossy(r.key.as_deref().unwrap_or(b"")).into_owned(),
                r.value
                    .as_ref()
                    .map(|v| String::from_utf8_lossy(v).into_owned()),
            )
        })
        .collect()
}

const UNKNOWN_PRODUCER_ID: i16 = 59;

/// Writes A, then B (through `first`), then the delete of A through
/// `second` after `between`; the delete's answer, and what A reads after.
fn delete_after(
    broker: &str,
    name: &str,
    two_proxies: bool,
    between: impl Fn(&str, &str, i64, i16),
) -> ((i32, i16, i64), Option<String>) {
    let topic = fresh_topic(name);
    create_topic_with(broker, &topic, 1, &[("cleanup.policy", "compact")]);
    let policies = rotating_policies(&topic);
    let a = start_proxy(broker, policies.clone(), Hooks::default());
    let b = two_proxies.then(|| start_proxy(broker, policies, Hooks::default()));
    let second = b.as_ref().map_or(a.addr.as_str(), |b| b.addr.as_str());
    let (pid, epoch) = common::wire::init_producer_id(broker);
    let r0 = produce(
        &a.addr,
        &topic,
        batch(&[rec(pid, epoch, 0, 0, b"A", Some(b"A=1"))]),
    );
    let r1 = produce(
        &a.addr,
        &topic,
        batch(&[rec(pid, epoch, 1, 0, b"B", Some(b"B=1"))]),
    );
    assert_eq!((r0.1, r1.1), (0, 0));
    between(&a.addr, &topic, pid, epoch);
    let r2 = produce(second, &topic, batch(&[rec(pid, epoch, 2, 0, b"A", None)]));
    let read = show(&a.addr, &topic);
    let last_a = read.iter().rev().find(|r| r.1 == "A").unwrap().clone();
    if r2.1 == 0 {
        // Acknowledged: the delete is on the topic, at the offset given.
        let at = read.iter().find(|r| r.0 == r2.2).unwrap();
        assert_eq!(
            (at.1.as_str(), &at.2),
            ("A", &None),
            "acknowledged at an offset that holds {at:?}"
        );
    }
    // A new epoch (a new producer id here) starts at 0 and is followed.
    let (pid, epoch) = common::wire::init_producer_id(broker);
    let r3 = produce(
        second,
        &topic,
        batch(&[rec(pid, epoch, 0, 0, b"C", Some(b"C=1"))]),
    );
    assert_eq!(r3.1, 0, "a new epoch was refused");
    (r2, last_a.2)
}

#[test]
fn a_producer_seen_first_through_another_proxy_is_refused_not_dropped_as_a_duplicate() {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let (answer, a) = delete_after(&broker, "seq-two-proxies", true, |_, _, _, _| {});
    assert_eq!(answer.1, UNKNOWN_PRODUCER_ID, "{answer:?}");
    assert_eq!(a.as_deref(), Some("A=1"), "a refused delete changed A");
}

#[test]
fn a_foreign_batch_under_the_producers_id_leaves_its_line_alone() {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let (answer, a) = delete_after(
        &broker,
        "seq-foreign-epoch",
        false,
        |addr, topic, pid, epoch| {
            // A hostile client: the victim's (guessable) id under another
            // epoch, at another sequence: refused, and nothing of it kept.
            let foreign = batch(&[rec(pid, epoch + 7, 1000, 0, b"x", Some(b"y"))]);
            let r = produce(addr, topic, foreign);
            assert_eq!(r.1, UNKNOWN_PRODUCER_ID, "{r:?}");
        },
    );
    assert_eq!(answer.1, 0, "{answer:?}");
    assert_eq!(a, None, "the acknowledged delete is not on the topic");
}
