//! `TypedProducer` writes land in the order they were started, whatever
//! the caller does with their futures and whatever the queue does: a put
//! dropped while the queue is full never lands after the later delete of
//! its key (idempotent, not idempotent with one request in flight, not
//! idempotent with many, and `enable.idempotence=1`), and a model of random
//! writes whose futures are polled once then dropped, awaited at once or
//! awaited later out of order, under a queue of two records, ends with
//! each key's last record equal to its last write started: on the plain
//! broker every write in the order started, through Apache Kafka's log
//! cleaner (`common::compacting::wait_compacted`) the one record each key
//! keeps once compacted. A put whose value needs a new data key from the KMS,
//! polled once before its key's delete, never lands after the delete.
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;
use std::time::Duration;

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use common::rng::Rng;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};
use tombstone_crypt::kafka::TypedProducer;
use tombstone_crypt::{Bytes, Utf8};

// Plain values: what is checked is which write each record is, read back
// byte for byte (encryption changes nothing of the order).
type Producer = TypedProducer<str, [u8], Utf8, Bytes>;

fn producer(bootstrap: &str, settings: &[(&str, &str)]) -> Producer {
    let mut config = client_config(bootstrap);
    for (k, v) in settings {
        config.set(*k, *v);
    }
    TypedProducer::new(&config, Utf8, Bytes).unwrap()
}

/// Waits until every write started is acknowledged.
async fn settle(producer: &Producer) {
    tokio::task::block_in_place(|| producer.flush(Duration::from_secs(60))).unwrap();
}

/// Every record of `topic` (partitions `0..partitions`), read to each
/// partition's end: partition, key and value (`None`: a tombstone), in
/// offset order per partition.
fn read_topic(bootstrap: &str, topic: &str, partitions: i32) -> Vec<(i32, String, Option<String>)> {
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", format!("read-{topic}"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut at_end = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while at_end < partitions {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out reading {topic}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => at_end += 1,
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => out.push((
                m.partition(),
                String::from_utf8(m.key().unwrap().to_vec()).unwrap(),
                m.payload().map(|p| String::from_utf8(p.to_vec()).unwrap()),
            )),
        }
    }
    out
}

/// Polls `f` once (its write starts) and hands it back with what the poll
/// gave.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
}

/// Ten keys, each: another record waiting in a queue of one record
/// (`queue.buffering.max.messages=1`, `linger.ms=300`), then `send(k,
/// Some(v))` given up after 20 to 245 ms (the queue is full: it waits) and
/// dropped, then `send(k, None)` awaited. The topic must end each key
/// with its tombstone: the put goes out before the delete, never after.
async fn a_dropped_put_never_lands_after_the_later_delete(settings: &[(&str, &str)]) {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("dropped-put");
    create_topic(&bootstrap, &topic, 1);
    let mut all = vec![("queue.buffering.max.messages", "1"), ("linger.ms", "300")];
    all.extend_from_slice(settings);
    let producer = producer(&bootstrap, &all);
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let mut put_waited = 0;
    for (i, key) in (0u64..).zip(&keys) {
        let other_key = format!("other-{key}");
        let mut other = Box::pin(producer.send(&topic, &other_key, Some(b"o")));
        assert!(
            poll_once(&mut other).await.is_pending(),
            "the other record is acknowledged before the linger"
        );
        // Given up after 20 to 245 ms: the delete starts at every phase
        // of whatever retries the put (the queue frees after ~300 ms).
        let put = producer.send(&topic, key, Some(b"value"));
        let patience = Duration::from_millis(20 + 25 * i);
        if tokio::time::timeout(patience, put).await.is_err() {
            put_waited += 1;
        }
        producer.send(&topic, key, None).await.unwrap();
        other.await.unwrap();
    }
    assert!(
        put_waited > 0,
        "no put was still waiting when dropped: the test proves nothing"
    );
    settle(&producer).await;
    let mut last: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (_, key, value) in read_topic(&bootstrap, &topic, 1) {
        last.insert(key, value);
    }
    let live: Vec<&String> = keys.iter().filter(|k| last[*k].is_some()).collect();
    assert!(
        live.is_empty(),
        "{} of {} deleted keys end live (their dropped put landed after the delete): {live:?}",
        live.len(),
        keys.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_put_never_lands_after_the_later_delete_idempotent() {
    a_dropped_put_never_lands_after_the_later_delete(&[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_put_never_lands_after_the_later_delete_not_idempotent_one_in_flight() {
    a_dropped_put_never_lands_after_the_later_delete(&[
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "1"),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_put_never_lands_after_the_later_delete_not_idempotent_many_in_flight() {
    a_dropped_put_never_lands_after_the_later_delete(&[("enable.idempotence", "false")]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_put_never_lands_after_the_later_delete_idempotence_1() {
    a_dropped_put_never_lands_after_the_later_delete(&[("enable.idempotence", "1")]).await;
}

/// Whether the last record of each key of `topic` (one partition) is a
/// value (`true`) or a tombstone.
fn last_is_value(bootstrap: &str, topic: &str) -> BTreeMap<String, bool> {
    common::kafka::last_is_value(bootstrap, topic, 1)
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), v))
        .collect()
}

/// Six keys, each: `send(k, Some(v))` whose value needs a new data key (an
/// envelope key over a KMS that takes 150 ms a call, a new data key for
/// every value), polled once, then `send(k, None)` awaited, then the put
/// awaited, or dropped (every other key). Each key must end on its
/// tombstone: the put's KMS call runs in its first poll, so the put takes
/// its place before the delete starts. Awaiting the KMS call on the
/// blocking pool instead let the delete go first and the put land after it.
async fn a_put_whose_data_key_is_due_never_lands_after_the_later_delete() {
    use tombstone_crypt::kms::{DekPolicy, KmsClients};
    use tombstone_crypt::{EncryptingSerializer, KeyTemplate, Keyset};
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("kms-put-then-delete");
    create_topic(&bootstrap, &topic, 1);
    let kms = tombstone_crypt::__fuzz::FakeKms::new();
    let keyset = Keyset::generate_with(
        KeyTemplate::kms_envelope("fake-kms://put-then-delete")
            .with_kms_clients(KmsClients::new().with(kms.clone()))
            .with_dek_policy(DekPolicy::default().with_max_values(1)),
    )
    .unwrap();
    let producer: TypedProducer<str, [u8], Utf8, EncryptingSerializer<Bytes>> = TypedProducer::new(
        &client_config(&bootstrap),
        Utf8,
        EncryptingSerializer::new(Bytes, keyset),
    )
    .unwrap();
    producer.send(&topic, "warm", None).await.unwrap();
    kms.set_delay(Duration::from_millis(150));
    let keys: Vec<String> = (0..6).map(|i| format!("k{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let mut put = Box::pin(producer.send(&topic, key, Some(b"value")));
        let first = poll_once(&mut put).await;
        producer.send(&topic, key, None).await.unwrap();
        if i % 2 == 0 {
            match first {
                Poll::Ready(done) => {
                    done.unwrap();
                }
                Poll::Pending => {
                    put.await.unwrap();
                }
            }
        } else {
            drop(put);
        }
    }
    // Blocks this thread: the writes go out on librdkafka's own threads
    // and the producer's writer thread.
    producer.flush(Duration::from_secs(60)).unwrap();
    let last = last_is_value(&bootstrap, &topic);
    let live: Vec<&String> = keys.iter().filter(|k| last[*k]).collect();
    assert!(
        live.is_empty(),
        "{} of {} deleted keys end live (the put landed after the delete): {live:?}",
        live.len(),
        keys.len()
    );
    assert!(
        kms.encrypt_calls() >= keys.len(),
        "the puts made {} KMS calls: the test proves nothing",
        kms.encrypt_calls()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_put_whose_data_key_is_due_never_lands_after_the_later_delete_multi_thread() {
    a_put_whose_data_key_is_due_never_lands_after_the_later_delete().await;
}

#[tokio::test(flavor = "current_thread")]
async fn a_put_whose_data_key_is_due_never_lands_after_the_later_delete_current_thread() {
    a_put_whose_data_key_is_due_never_lands_after_the_later_delete().await;
}

/// What the model does with a write's future once it has started it.
#[derive(Clone, Copy, Debug)]
enum Fate {
    Dropped,
    AwaitedNow,
    Kept,
}

/// Random writes (puts and deletes) on six keys of a 3-partition topic,
/// under a queue of two records, each future polled once (the write
/// starts) then dropped, awaited at once, or kept and awaited later in a
/// random order; every record of the topic is then read back: each key's
/// last record must be its last write started (by value), and a key never
/// written has no record.
async fn the_last_write_started_is_each_keys_last_record(settings: &[(&str, &str)], seeds: u64) {
    let Some(bootstrap) = bootstrap() else { return };
    model(&bootstrap, false, settings, seeds).await;
}

/// The model on `bootstrap`; with `compacting` (the compacting broker), on
/// compacted topics, each key's one record left once the broker has
/// compacted must be its last write started.
async fn model(bootstrap: &str, compacting: bool, settings: &[(&str, &str)], seeds: u64) {
    let bootstrap = bootstrap.to_owned();
    let mut all = vec![("queue.buffering.max.messages", "2"), ("linger.ms", "5")];
    all.extend_from_slice(settings);
    for seed in 1..=seeds {
        let values: Vec<String> = (0..120).map(|i| format!("v{seed}-{i}")).collect();
        let keys: Vec<String> = (0..6).map(|i| format!("key-{i}")).collect();
        let topic = fresh_topic("write-order-model");
        if compacting {
            common::compacting::create_compacted_topic(&bootstrap, &topic, 3);
        } else {
            create_topic(&bootstrap, &topic, 3);
        }
        let producer = producer(&bootstrap, &all);
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ seed);
        let mut started: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
        let mut kept: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = Vec::new();
        let mut pending_drops = 0;
        for (i, value) in values.iter().enumerate() {
            let key = &keys[rng.below(6) as usize];
            let value = (rng.below(3) != 0).then_some(value);
            let mut write = Box::pin(producer.send(&topic, key, value.map(|v| v.as_bytes())));
            let first = poll_once(&mut write).await;
            started.entry(key.clone()).or_default().push(value.cloned());
            let fate = match rng.below(3) {
                0 => Fate::Dropped,
                1 => Fate::AwaitedNow,
                _ => Fate::Kept,
            };
            match (first, fate) {
                (Poll::Ready(done), _) => {
                    done.unwrap();
                }
                (Poll::Pending, Fate::Dropped) => {
                    pending_drops += 1;
                    drop(write);
                }
                (Poll::Pending, Fate::AwaitedNow) => {
                    write.await.unwrap();
                }
                (Poll::Pending, Fate::Kept) => kept.push(write),
            }
            // Now and then, await some kept futures, latest first or at
            // random.
            if i % 17 == 16 {
                while kept.len() > 2 {
                    let at = rng.below(kept.len() as u64) as usize;
                    kept.swap_remove(at).await.unwrap();
                }
            }
        }
        while !kept.is_empty() {
            let at = rng.below(kept.len() as u64) as usize;
            kept.swap_remove(at).await.unwrap();
        }
        assert!(
            pending_drops > 0,
            "no future was dropped while pending: the model proves nothing"
        );
        settle(&producer).await;
        if compacting {
            let compacted =
                common::compacting::wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
            assert!(
                (compacted.after as i64) < compacted.offsets,
                "seed {seed}: nothing was compacted: the test proves nothing"
            );
            let mut left: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
            for r in &compacted.records {
                left.entry(String::from_utf8(r.key.clone().unwrap()).unwrap())
                    .or_default()
                    .push(r.value.clone().map(|v| String::from_utf8(v).unwrap()));
            }
            let want: BTreeMap<String, Vec<Option<String>>> = started
                .iter()
                .map(|(k, writes)| (k.clone(), writes.last().cloned().into_iter().collect()))
                .collect();
            assert_eq!(
                left, want,
                "seed {seed}: after compaction, each key's one record is its last write started"
            );
            continue;
        }
        // Each key's records, in offset order (a key lives in one
        // partition), must be its writes in the order they were started:
        // the last one above all, and none cut or lost.
        let records = read_topic(&bootstrap, &topic, 3);
        let mut landed: BTreeMap<String, Vec<Option<String>>> = BTreeMap::new();
        for (_, key, value) in &records {
            landed.entry(key.clone()).or_default().push(value.clone());
        }
        let last_wrong: Vec<String> = started
            .iter()
            .filter(|(key, writes)| landed.get(*key).and_then(|l| l.last()) != writes.last())
            .map(|(key, writes)| {
                format!(
                    "{key}: last started {:?}, last on the topic {:?}",
                    writes.last(),
                    landed.get(key).and_then(|l| l.last())
                )
            })
            .collect();
        assert!(
            last_wrong.is_empty(),
            "seed {seed}: {} of {} keys end on another write than the last one started: {last_wrong:?}",
            last_wrong.len(),
            started.len()
        );
        assert_eq!(
            landed, started,
            "seed {seed}: each key's writes in the order started"
        );
        assert_eq!(
            records.len(),
            values.len(),
            "seed {seed}: every write lands once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_started_is_each_keys_last_record_idempotent() {
    the_last_write_started_is_each_keys_last_record(&[], 4).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_started_is_each_keys_last_record_not_idempotent_one_in_flight() {
    the_last_write_started_is_each_keys_last_record(
        &[
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "1"),
        ],
        4,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_started_is_each_keys_last_record_not_idempotent_many_in_flight() {
    the_last_write_started_is_each_keys_last_record(&[("enable.idempotence", "false")], 2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_last_write_started_is_each_keys_record_after_compaction_on_the_compacting_broker() {
    if bootstrap().is_none() {
        return;
    }
    let compacting = common::compacting::compacting_bootstrap();
    model(&compacting, true, &[], 3).await;
    model(
        &compacting,
        true,
        &[
            ("enable.idempotence", "false"),
            ("max.in.flight.requests.per.connection", "1"),
        ],
        2,
    )
    .await;
}

/// `queuing.strategy=lifo` (or `topic.queuing.strategy`), not idempotent
/// with one request in flight (librdkafka refuses LIFO only with
/// idempotence): ten keys, each `send(k, Some(v))` then `send(k, None)`,
/// both queued within one linger. A LIFO queue sends the newer record
/// first: the put lands after the delete. The producer must refuse the
/// setting (as the command line does) or keep the order.
async fn a_lifo_queue_never_puts_a_value_after_its_delete(name: &str) {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("lifo");
    create_topic(&bootstrap, &topic, 1);
    let mut config = client_config(&bootstrap);
    for (k, v) in [
        ("enable.idempotence", "false"),
        ("max.in.flight.requests.per.connection", "1"),
        ("linger.ms", "200"),
        (name, "lifo"),
    ] {
        config.set(k, v);
    }
    let Ok(producer) = TypedProducer::<str, [u8], Utf8, Bytes>::new(&config, Utf8, Bytes) else {
        return; // refused: nothing can be reordered
    };
    let keys: Vec<String> = (0..10).map(|i| format!("k{i}")).collect();
    let mut futures = Vec::new();
    for key in &keys {
        let mut put = Box::pin(producer.send(&topic, key, Some(b"value")));
        let _ = poll_once(&mut put).await;
        let mut delete = Box::pin(producer.send(&topic, key, None));
        let _ = poll_once(&mut delete).await;
        futures.push(put);
        futures.push(delete);
    }
    for f in futures {
        f.await.unwrap();
    }
    settle(&producer).await;
    let last = last_is_value(&bootstrap, &topic);
    let live: Vec<&String> = keys.iter().filter(|k| last[*k]).collect();
    assert!(
        live.is_empty(),
        "{} of {} deleted keys end live under {name}=lifo (the put landed after the delete): {live:?}",
        live.len(),
        keys.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifo_queue_never_puts_a_value_after_its_delete_queuing_strategy() {
    a_lifo_queue_never_puts_a_value_after_its_delete("queuing.strategy").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifo_queue_never_puts_a_value_after_its_delete_topic_queuing_strategy() {
    a_lifo_queue_never_puts_a_value_after_its_delete("topic.queuing.strategy").await;
}
