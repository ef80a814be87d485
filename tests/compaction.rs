//! Apache Kafka's log cleaner, as the suites wait for it
//! (`common::compacting::wait_compacted`: segments rolled by abort markers
//! no reader sees), keeps the newest record per key; a topic without
//! compaction, given the same writes, keeps them all.
//! `TOMBSTONE_SKIP_KAFKA=1` skips it, as the other Kafka tests.
#![cfg(feature = "kafka")]

use crate::common;

use std::time::{Duration, Instant};

use common::compacting::{
    compacting_bootstrap, compaction_runs, create_topic_with, kafka_compact, read_all,
    wait_compacted, watermarks, RawRecord,
};
use common::kafka::{client_config, fresh_topic};
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::record_key::murmur2_partition;

const PARTITIONS: i32 = 3;

fn partition(key: &[u8]) -> i32 {
    murmur2_partition(key, PARTITIONS as u32)
}

/// Writes (key, value) to the partition murmur2 gives the key, waiting for
/// each; `None` is a tombstone.
fn produce(producer: &FutureProducer, topic: &str, records: &[(Vec<u8>, Option<Vec<u8>>)]) {
    for (k, v) in records {
        let mut r: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(topic).key(&k[..]).partition(partition(k));
        if let Some(v) = v {
            r = r.payload(&v[..]);
        }
        let d = futures_executor::block_on(producer.send(r, Duration::from_secs(30)))
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
        assert_eq!(
            d.partition,
            partition(k),
            "the explicit partition is respected"
        );
    }
}

fn idempotent_producer(bootstrap: &str) -> FutureProducer {
    client_config(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "0")
        .create()
        .unwrap()
}

fn rec(partition: i32, offset: i64, key: &[u8], value: Option<&[u8]>) -> RawRecord {
    RawRecord {
        partition,
        offset,
        key: Some(key.to_vec()),
        value: value.map(<[u8]>::to_vec),
    }
}

/// A key written once, before the rest, in `alpha`'s partition: its record
/// stays at offset 0, so the compaction leaves a gap after it (the case
/// where the broker repeats records in a fetch response).
fn first_key(alpha: &[u8]) -> Vec<u8> {
    (0..)
        .map(|n| format!("first-{n}").into_bytes())
        .find(|k| partition(k) == partition(alpha))
        .unwrap()
}

#[test]
fn the_log_cleaner_keeps_the_newest_record_per_key_after_a_roll_no_reader_sees_compacting_broker() {
    if common::kafka::bootstrap().is_none() {
        return;
    }
    let compacting = compacting_bootstrap();
    let (alpha, beta, gamma) = (b"alpha".to_vec(), b"beta".to_vec(), b"gamma".to_vec());
    let first = first_key(&alpha);
    assert_ne!(partition(&alpha), partition(&beta), "keys chosen apart");
    assert_eq!(partition(&alpha), partition(&gamma), "keys chosen together");

    // The scenario: a key once, 5 values each of two keys, a tombstone for
    // the first of them, one more key.
    let mut writes = vec![(first.clone(), Some(b"f0".to_vec()))];
    for i in 0..5 {
        writes.push((alpha.clone(), Some(format!("a{i}").into_bytes())));
        writes.push((beta.clone(), Some(format!("b{i}").into_bytes())));
    }
    writes.push((alpha.clone(), None));
    writes.push((gamma.clone(), Some(b"g0".to_vec())));

    // The same writes, with an idempotent producer, to a compacted topic
    // (created through the admin API, with the helpers' fast-compaction
    // settings) and to a topic without cleanup.policy.
    let topic = fresh_topic("compacted");
    let plain = fresh_topic("not-compacted");
    create_topic_with(
        &compacting,
        &topic,
        PARTITIONS,
        &[("cleanup.policy", "compact")],
    );
    common::kafka::create_topic(&compacting, &plain, PARTITIONS);

    let on_compacting = idempotent_producer(&compacting);
    produce(&on_compacting, &plain, &writes);
    produce(&on_compacting, &topic, &writes);
    let produced = Instant::now();

    let runs = compaction_runs();
    let c = wait_compacted(&compacting, &topic, Duration::from_secs(30));
    let latency = produced.elapsed();
    let (pa, pb) = (partition(&alpha), partition(&beta));
    // Kafka's result: the newest record per key, the tombstone kept
    // (`delete.retention.ms` has not passed).
    let expected = {
        let mut e = vec![
            rec(pa, 0, &first, Some(b"f0")),
            rec(pa, 6, &alpha, None),
            rec(pa, 7, &gamma, Some(b"g0")),
            rec(pb, 4, &beta, Some(b"b4")),
        ];
        e.sort_by_key(|r| (r.partition, r.offset));
        e
    };
    assert_eq!(c.records, expected);
    assert_eq!(c.offsets, writes.len() as i64, "every write took an offset");
    // A compaction was seen (other tests of this binary, run beside it,
    // count theirs too).
    assert!(compaction_runs() > runs);
    eprintln!(
        "compacted {} records to {} within {latency:?} of the last produce ({} reads, {} rolls, \
         first read {} records)",
        c.offsets, c.after, c.reads, c.rolls, c.before
    );

    // Each partition's marker took one offset after its records (the
    // markers of later rolls, if any, more); a compaction leaves the log
    // start offset where it was.
    let w = watermarks(&compacting, &topic);
    let rolls = i64::from(c.rolls);
    assert_eq!(w[&pa], (0, 8 + rolls), "{w:?}");
    assert_eq!(w[&pb], (0, 5 + rolls), "{w:?}");

    // The control: a topic without cleanup.policy=compact returns every
    // write.
    let all = read_all(&compacting, &plain);
    assert_eq!(all.len(), writes.len(), "{plain}");
    assert_eq!(
        kafka_compact(&all),
        expected,
        "{plain} holds the same writes"
    );

    // A later write is compacted again, and the tombstone survives that
    // second cleaning. The idempotent producer keeps working after its
    // earlier records were removed.
    produce(
        &on_compacting,
        &topic,
        &[(beta.clone(), Some(b"b5".to_vec()))],
    );
    let again = wait_compacted(&compacting, &topic, Duration::from_secs(30));
    let mut expected = expected;
    expected.retain(|r| r.key.as_deref() != Some(&beta[..]));
    expected.push(rec(pb, 5 + rolls, &beta, Some(b"b5")));
    expected.sort_by_key(|r| (r.partition, r.offset));
    assert_eq!(again.records, expected);
    assert!(compaction_runs() >= runs + 2);
}

/// Confluent's record keys (`ConfluentSerde::for_keys`) under a
/// deterministic rule (AES256_SIV, the only kind `for_keys` takes): each
/// key is the same bytes every time it is written, so compaction keeps one
/// record per key, and a delete's tombstone meets its value. Under a
/// randomized rule (refused: `tests/confluent_rules.rs`) each write would
/// be another key, and compaction would keep every value and the
/// tombstone apart: the control below writes such keys by hand and shows
/// the broker keeping them all.
#[cfg(feature = "confluent")]
#[test]
fn confluent_record_keys_meet_their_tombstones_on_the_compacting_broker() {
    use serde_json::json;
    use std::sync::Arc;
    use tombstone_crypt::confluent::{ConfluentJson, ConfluentSerde, LocalKms};
    use tombstone_crypt::{Context, Serializer as _};

    #[derive(serde::Serialize)]
    struct Key {
        id: i64,
        ssn: String,
    }
    let bootstrap = compacting_bootstrap();
    let topic = fresh_topic("confluent-keys");
    create_topic_with(
        &bootstrap,
        &topic,
        PARTITIONS,
        &[("cleanup.policy", "compact")],
    );
    let doc = json!({"type": "object", "properties": {
        "id": {"type": "integer"}, "ssn": {"type": "string", "confluent:tags": ["PII"]}}});
    let schema = |algorithm: &str| {
        json!({"schemaType": "JSON", "schema": doc.to_string(), "ruleSet": {"domainRules": [{
            "name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT", "tags": ["PII"],
            "params": {"encrypt.kek.name": "k1", "encrypt.dek.algorithm": algorithm}}]}})
    };
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(1, format!("{topic}-key").as_str(), &schema("AES256_SIV"))
        .unwrap();
    let keys = ConfluentSerde::<Key>::new(Arc::new(codec)).for_keys();
    let ctx = Context::new(&topic);
    let key = |id: i64| {
        keys.serialize(
            &ctx,
            Some(&Key {
                id,
                ssn: format!("078-05-112{id}"),
            }),
        )
        .unwrap()
        .unwrap()
    };
    // Key 1: two values, then deleted; key 2: two values.
    let writes = [
        (key(1), Some(b"v1".to_vec())),
        (key(2), Some(b"v1".to_vec())),
        (key(1), Some(b"v2".to_vec())),
        (key(2), Some(b"v2".to_vec())),
        (key(1), None),
    ];
    let producer = idempotent_producer(&bootstrap);
    produce(&producer, &topic, &writes);
    let compacted = wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    let mut left: Vec<(Vec<u8>, Option<Vec<u8>>)> = compacted
        .records
        .iter()
        .map(|r| (r.key.clone().unwrap(), r.value.clone()))
        .collect();
    left.sort();
    let mut want = vec![(key(1), None), (key(2), Some(b"v2".to_vec()))];
    want.sort();
    assert_eq!(left, want, "one record per key, key 1's the tombstone");

    // The control: keys written under a randomized rule (here, the SIV key
    // with a fresh random byte in front, as AES-GCM's nonce would make
    // every write differ): compaction keeps all five records.
    let control = fresh_topic("confluent-keys-control");
    create_topic_with(
        &bootstrap,
        &control,
        PARTITIONS,
        &[("cleanup.policy", "compact")],
    );
    let randomized: Vec<_> = writes
        .iter()
        .enumerate()
        .map(|(i, (k, v))| {
            let mut k = k.clone();
            k.insert(0, i as u8);
            (k, v.clone())
        })
        .collect();
    produce(&producer, &control, &randomized);
    let kept = wait_compacted(&bootstrap, &control, Duration::from_secs(60));
    assert_eq!(
        kept.records.len(),
        5,
        "every randomized key is a key of its own"
    );
}
