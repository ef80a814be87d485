//! A refused write changes nothing, on Apache Kafka: under a key keyset in
//! rotation the proxy puts the write rule's tombstones of a key's older
//! forms at the front of the client's own batch, so that whatever the
//! broker answers to that batch (here `RECORD_TOO_LARGE`, and an aborted
//! transaction), the key keeps the value it had; an accepted write still
//! deletes the older form. For a producer that is not idempotent, an
//! idempotent one (whose later batches must go at the sequence the broker
//! expects once one batch grew: hundreds of batches after the rotation,
//! all delivered, all read back in order) and a transactional one, read
//! `read_committed` through the proxy and beside it.
//!
//! Before this rule, the proxy wrote the tombstones with a Produce of its
//! own first: these tests then read the key as deleted after the refused
//! write.

use crate::common;

use std::time::Duration;

use common::{config, consume_all, create_topic_with, fresh_topic, start_proxy, Consumed};
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

/// How a test writes through the proxy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// `enable.idempotence=false`.
    Plain,
    /// `enable.idempotence=true`.
    Idempotent,
    /// A `transactional.id`: every write in a transaction of its own.
    Transactional,
    /// Transactional, fenced by a newer producer of its id before it
    /// writes (the broker refuses its batch: a fenced epoch).
    Fenced,
}

fn producer(addr: &str, mode: Mode, batch: usize) -> FutureProducer {
    producer_with_id(addr, mode, batch, &fresh_topic("txn"))
}

/// [`producer`] with this `transactional.id` when the mode is
/// transactional.
fn producer_with_id(addr: &str, mode: Mode, batch: usize, id: &str) -> FutureProducer {
    let mut c = config(addr);
    c.set("linger.ms", "5")
        .set("batch.num.messages", batch.to_string())
        .set("message.timeout.ms", "15000")
        .set("acks", "all");
    match mode {
        Mode::Plain => {
            c.set("enable.idempotence", "false");
        }
        Mode::Idempotent => {
            c.set("enable.idempotence", "true");
        }
        Mode::Transactional | Mode::Fenced => {
            c.set("transactional.id", id);
        }
    }
    let p: FutureProducer = c.create().unwrap();
    if matches!(mode, Mode::Transactional | Mode::Fenced) {
        p.init_transactions(Duration::from_secs(30)).unwrap();
    }
    p
}

/// Writes `records` to partition 0 of `topic` with `producer`, in order;
/// in a transaction (committed, or aborted with `abort`) when the mode is
/// transactional. Each record's offset, or the first error.
fn write(
    producer: &FutureProducer,
    mode: Mode,
    topic: &str,
    records: &[(&[u8], Option<Vec<u8>>)],
    abort: bool,
) -> Result<Vec<i64>, String> {
    if matches!(mode, Mode::Transactional | Mode::Fenced) {
        producer.begin_transaction().map_err(|e| e.to_string())?;
    }

    let futures: Vec<_> = records
        .iter()
        .map(|(k, v)| {
            let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).partition(0).key(k);
            if let Some(v) = v {
                r = r.payload(&v[..]);
            }
            producer.send_result(r).map_err(|(e, _)| e.to_string())
        })
        .collect();
    let mut offsets = Vec::new();
    let mut failed = None;
    for f in futures {
        match futures_executor::block_on(f?) {
            Ok(Ok(d)) => offsets.push(d.offset),
            Ok(Err((e, _))) => {
                failed.get_or_insert(e.to_string());
            }
            Err(_) => {
                failed.get_or_insert("canceled".to_owned());
            }
        }
    }
    if matches!(mode, Mode::Transactional | Mode::Fenced) {
        let t = Duration::from_secs(30);
        if abort || failed.is_some() {
            producer.abort_transaction(t).map_err(|e| e.to_string())?;
            return Err(failed.unwrap_or_else(|| "aborted".into()));
        }
        producer.commit_transaction(t).map_err(|e| e.to_string())?;
    }
    match failed {
        Some(e) => Err(e),
        None => Ok(offsets),
    }
}

fn policies(topic: &str, values: &Keyset, keys: &Keyset) -> Policies {
    Policies::new().with_topic(
        topic,
        TopicPolicy::keyset(values.clone())
            .with_record_keys(keys.clone())
            .unwrap(),
    )
}

/// The last record of `key` read through the proxy (`read_committed`).
fn last_of<'a>(read: &'a [Consumed], key: &[u8]) -> Option<&'a Consumed> {
    read.iter().rev().find(|c| c.key.as_deref() == Some(key))
}

fn refused_write_keeps_the_value(mode: Mode) {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let topic = fresh_topic(&format!("refused-{mode:?}").to_lowercase());
    // A broker refusal any producer can meet: a record over the topic's
    // `max.message.bytes` (the whole batch is refused).
    create_topic_with(
        &broker,
        &topic,
        1,
        &[("cleanup.policy", "compact"), ("max.message.bytes", "2048")],
    );
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    {
        let proxy = start_proxy(&broker, policies(&topic, &values, &keys), Hooks::default());
        let p = producer(&proxy.addr, mode, 100);
        write(
            &p,
            mode,
            &topic,
            &[(b"acct-1", Some(b"BALANCE=100".to_vec()))],
            false,
        )
        .unwrap();
    }
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let proxy = start_proxy(&broker, policies(&topic, &values, &keys), Hooks::default());
    let p = producer(&proxy.addr, mode, 100);
    // Refused: too large, aborted by the client, or fenced.
    let refused = if mode == Mode::Fenced {
        let id = fresh_topic("fenced");
        let fenced = producer_with_id(&proxy.addr, mode, 100, &id);
        let _newer = producer_with_id(&proxy.addr, mode, 100, &id);
        write(
            &fenced,
            mode,
            &topic,
            &[(b"acct-1", Some(b"BALANCE=0".to_vec()))],
            false,
        )
    } else if mode == Mode::Transactional {
        write(
            &p,
            mode,
            &topic,
            &[(b"acct-1", Some(b"BALANCE=0".to_vec()))],
            true,
        )
    } else {
        write(
            &p,
            mode,
            &topic,
            &[(b"acct-1", Some(vec![b'x'; 4000]))],
            false,
        )
    };
    assert!(refused.is_err(), "{mode:?}: the write was not refused");
    let read = consume_all(&proxy.addr, &topic, 1).unwrap();
    assert_eq!(
        last_of(&read, b"acct-1").and_then(|c| c.value.as_deref()),
        Some(&b"BALANCE=100"[..]),
        "{mode:?}: after a refused write the key does not read as it was: {read:?}"
    );
    let raw = consume_all(&broker, &topic, 1).unwrap();
    assert!(
        raw.iter().all(|c| c.value.is_some()),
        "{mode:?}: a tombstone is on the broker after a refused write"
    );
    // Accepted: the older form's tombstone goes in, and the client's
    // record is where its delivery says.
    let p = if mode != Mode::Transactional {
        // librdkafka may have given up on the refused producer.
        producer(&proxy.addr, mode, 100)
    } else {
        p
    };
    let offsets = write(
        &p,
        mode,
        &topic,
        &[(b"acct-1", Some(b"BALANCE=50".to_vec()))],
        false,
    )
    .unwrap();
    let read = consume_all(&proxy.addr, &topic, 1).unwrap();
    let last = last_of(&read, b"acct-1").unwrap();
    assert_eq!(last.value.as_deref(), Some(&b"BALANCE=50"[..]));
    assert_eq!(last.offset, offsets[0], "{mode:?}: the delivery's offset");
    let raw = consume_all(&broker, &topic, 1).unwrap();
    let at = raw.iter().position(|c| c.offset == offsets[0]).unwrap();
    assert!(
        raw[at].value.is_some(),
        "{mode:?}: the delivered offset holds a tombstone"
    );
    let older = &raw[0];
    assert!(
        raw[..at]
            .iter()
            .any(|c| c.value.is_none() && c.key == older.key),
        "{mode:?}: no tombstone of the older form before the new value: {raw:?}"
    );
}

#[test]
fn a_refused_batch_after_a_rotation_deletes_nothing_plain_producer() {
    refused_write_keeps_the_value(Mode::Plain);
}

#[test]
fn a_refused_batch_after_a_rotation_deletes_nothing_idempotent_producer() {
    refused_write_keeps_the_value(Mode::Idempotent);
}

#[test]
fn an_aborted_transaction_after_a_rotation_deletes_nothing() {
    refused_write_keeps_the_value(Mode::Transactional);
}

#[test]
fn a_fenced_producers_batch_after_a_rotation_deletes_nothing() {
    refused_write_keeps_the_value(Mode::Fenced);
}

/// An idempotent (and a transactional) producer writes on after a rotation:
/// every batch after the first grown one goes at the sequence the broker
/// expects (else `UNKNOWN_PRODUCER_ID`), every record is delivered
/// where its delivery says, and the topic reads back through the proxy as
/// written (on the broker, the write rule's tombstones between them).
fn writes_on_after_a_rotation(mode: Mode) {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let topic = fresh_topic(&format!("seq-{mode:?}").to_lowercase());
    create_topic_with(&broker, &topic, 1, &[("cleanup.policy", "compact")]);
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let proxy = start_proxy(&broker, policies(&topic, &values, &keys), Hooks::default());
    // Batches of at most 7 records, of 13 keys: each batch has tombstones
    // in front, so each shifts the sequences further.
    let p = producer(&proxy.addr, mode, 7);
    let names: Vec<Vec<u8>> = (0..13).map(|i| format!("key-{i}").into_bytes()).collect();
    let mut written = Vec::new();
    let mut offsets = Vec::new();
    for round in 0..6 {
        let records: Vec<(&[u8], Option<Vec<u8>>)> = (0..70)
            .map(|i| {
                let k = &names[(i * 5 + round) % names.len()][..];
                let v = (i % 11 != 0).then(|| format!("{round}-{i}").into_bytes());
                (k, v)
            })
            .collect();
        offsets.extend(write(&p, mode, &topic, &records, false).unwrap());
        written.extend(records.into_iter().map(|(k, v)| (k.to_vec(), v)));
    }
    let read = consume_all(&proxy.addr, &topic, 1).unwrap();
    // The client's records, in order, each at its delivered offset, and
    // nothing else: the rule's tombstones are between them on the broker,
    // left out of a fetch through the proxy.
    assert_eq!(
        read.len(),
        written.len(),
        "{mode:?}: read through the proxy, not what was written"
    );
    let mut at = 0;
    for ((k, v), offset) in written.iter().zip(&offsets) {
        let found = read[at..]
            .iter()
            .position(|c| c.offset == *offset)
            .unwrap_or_else(|| panic!("{mode:?}: no record at delivered offset {offset}"));
        let c = &read[at + found];
        assert_eq!(
            (&c.key, &c.value),
            (&Some(k.clone()), v),
            "{mode:?} at {offset}"
        );
        at += found + 1;
    }
    let direct = consume_all(&broker, &topic, 1).unwrap();
    let tombstones = direct.len() - written.len();
    assert!(
        tombstones >= 60,
        "{mode:?}: {tombstones} tombstones of older forms: the rule did not run"
    );
}

#[test]
fn an_idempotent_producer_writes_on_through_a_rotation() {
    writes_on_after_a_rotation(Mode::Idempotent);
}

#[test]
fn a_transactional_producer_writes_on_through_a_rotation() {
    writes_on_after_a_rotation(Mode::Transactional);
}

/// A proxy restarted under a live idempotent producer after a rotation:
/// the new process has not followed the producer from sequence 0, so its
/// next batch is answered `UNKNOWN_PRODUCER_ID` (never forwarded at
/// a guessed sequence, which the broker could take as a duplicate and drop):
/// the writes of that batch fail, and say so; librdkafka starts a new epoch,
/// the writes after them are delivered, and every write acknowledged is on
/// the topic where its delivery says.
#[test]
fn an_idempotent_producer_writes_on_across_a_proxy_restart() {
    let Some(broker) = common::apache_kafka() else {
        return;
    };
    let topic = fresh_topic("seq-restart");
    create_topic_with(&broker, &topic, 1, &[("cleanup.policy", "compact")]);
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let mut first = common::start_proxy_at(
        &broker,
        policies(&topic, &values, &keys),
        Hooks::default(),
        None,
        "",
        None,
    );
    let port: u16 = first.addr.rsplit(':').next().unwrap().parse().unwrap();
    let p = producer(&first.addr, Mode::Idempotent, 5);
    let records = |from: usize| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        (from..from + 40)
            .map(|i| {
                (
                    format!("key-{}", i % 7).into_bytes(),
                    Some(format!("v{i}").into_bytes()),
                )
            })
            .collect()
    };
    let before = records(0);
    let refs: Vec<(&[u8], Option<Vec<u8>>)> =
        before.iter().map(|(k, v)| (&k[..], v.clone())).collect();
    write(&p, Mode::Idempotent, &topic, &refs, false).unwrap();
    first.join();
    drop(first);
    let _second = common::start_proxy_at(
        &broker,
        policies(&topic, &values, &keys),
        Hooks::default(),
        None,
        "",
        Some(port),
    );
    // The batches in flight at the restart are refused (the producer is
    // told: UNKNOWN_PRODUCER_ID), never acknowledged unwritten;
    // librdkafka starts a new epoch and what follows is delivered.
    let mut delivered = Vec::new();
    let mut refused = 0;
    for round in 1..4 {
        for (k, v) in records(40 * round) {
            let r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic)
                .partition(0)
                .key(&k[..])
                .payload(&v.as_ref().unwrap()[..]);
            match futures_executor::block_on(p.send(r, Duration::from_secs(30))) {
                Ok(d) => delivered.push((k, v, d.offset)),
                Err((e, _)) => {
                    assert!(
                        e.to_string().contains("OutOfOrderSequenceNumber"),
                        "a write after the restart failed otherwise: {e}"
                    );
                    refused += 1;
                }
            }
        }
    }
    eprintln!(
        "after the restart: {refused} writes refused, {} delivered",
        delivered.len()
    );
    assert!(
        delivered.len() >= 80,
        "the producer did not recover: {refused} refused"
    );
    let read = consume_all(&_second.addr, &topic, 1).unwrap();
    for (k, v, offset) in &delivered {
        let c = read
            .iter()
            .find(|c| c.offset == *offset)
            .unwrap_or_else(|| panic!("a write acknowledged at {offset} is not on the topic"));
        assert_eq!((&c.key, &c.value), (&Some(k.clone()), v));
    }
}
