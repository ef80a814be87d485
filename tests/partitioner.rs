//! Where `TypedProducer` puts a key, against the loopback broker: a plain
//! (not encrypted) record key goes to the murmur2 partition of its bytes,
//! the partition a Java-compatible peer (Python's confluent-kafka with
//! `partitioner=murmur2_random`, as the Java client and Kafka Streams
//! partition) picks, so the same key written by both lives in one
//! partition; a `partitioner` the configuration sets is kept; a writer
//! reads a partition count again after its refresh interval, and at once
//! after an unknown-partition error.
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::{ClientConfig, Message as _, Offset, TopicPartitionList};
use tombstone_crypt::kafka::TypedProducer;
use tombstone_crypt::record_key::murmur2_partition;
use tombstone_crypt::{
    Bytes, DeterministicSerializer, EncryptingSerializer, KeyTemplate, Keyset, Utf8,
};

type Producer = TypedProducer<str, [u8], Utf8, EncryptingSerializer<Bytes>>;

const PARTITIONS: i32 = 6;

fn keys() -> Vec<String> {
    (0..48).map(|i| format!("customer-{i}")).collect()
}

fn producer(config: &ClientConfig) -> Producer {
    TypedProducer::new(
        config,
        Utf8,
        EncryptingSerializer::new(Bytes, Keyset::generate()),
    )
    .unwrap()
}

/// Every record key of every partition of `topic`, read to each
/// partition's end: key -> the partitions it is in.
fn partitions_of_keys(bootstrap: &str, topic: &str) -> BTreeMap<Vec<u8>, BTreeSet<i32>> {
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", format!("partitions-{topic}"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..PARTITIONS {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out: BTreeMap<Vec<u8>, BTreeSet<i32>> = BTreeMap::new();
    let mut ended = BTreeSet::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while ended.len() < PARTITIONS as usize {
        assert!(Instant::now() < deadline, "timed out reading {topic}");
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                ended.insert(p);
            }
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => {
                out.entry(m.key().unwrap().to_vec())
                    .or_default()
                    .insert(m.partition());
            }
        }
    }
    out
}

/// The Java-compatible peer writes `keys` to `topic`: key -> the partition
/// its delivery report gave.
fn peer_writes(bootstrap: &str, topic: &str, keys: &[String]) -> BTreeMap<Vec<u8>, i32> {
    let Some(py) = common::tink::python() else {
        return BTreeMap::new();
    };
    let input: String = keys
        .iter()
        .map(|k| {
            let hex: String = k.bytes().map(|b| format!("{b:02x}")).collect();
            hex + "\n"
        })
        .collect();
    let out = common::tink::run_script(
        &py,
        "tests/interop/kafka_murmur2_peer.py",
        &[bootstrap, topic],
        &input,
    );
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    v["partitions"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(hex, p)| {
            let key = (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap())
                .collect();
            (key, i32::try_from(p.as_i64().unwrap()).unwrap())
        })
        .collect()
}

/// The same plain keys through `TypedProducer` (default configuration) and
/// through the Java-compatible peer: every key is in exactly one partition,
/// the murmur2 partition of its bytes.
#[tokio::test(flavor = "current_thread")]
async fn a_plain_key_lands_where_a_java_compatible_peer_puts_it() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("murmur2-plain");
    create_topic(&bootstrap, &topic, PARTITIONS);
    let keys = keys();
    let ours = producer(&client_config(&bootstrap));
    let mut ours_at = BTreeMap::new();
    for (i, key) in keys.iter().enumerate() {
        // A delete now and then: a tombstone goes where the value went.
        let value = format!("ours-{i}");
        let value = (i % 5 != 3).then_some(value.as_bytes());
        let d = ours.send(&topic, key, value).await.unwrap();
        ours_at.insert(key.as_bytes().to_vec(), d.partition);
    }
    let peer_at = peer_writes(&bootstrap, &topic, &keys);
    if peer_at.is_empty() {
        return; // interop skipped knowingly
    }
    assert_eq!(peer_at.len(), keys.len());
    for key in &keys {
        let want = murmur2_partition(key.as_bytes(), PARTITIONS as u32);
        assert_eq!(peer_at[key.as_bytes()], want, "the peer is murmur2: {key}");
    }
    let found = partitions_of_keys(&bootstrap, &topic);
    assert_eq!(found.len(), keys.len());
    let split: Vec<_> = found
        .iter()
        .filter(|(_, ps)| ps.len() != 1)
        .map(|(k, ps)| (String::from_utf8_lossy(k).into_owned(), ps.clone()))
        .collect();
    assert!(
        split.is_empty(),
        "{} of {} keys are in more than one partition (ours then the peer's): {split:?}",
        split.len(),
        keys.len()
    );
    for (key, p) in &ours_at {
        assert_eq!(Some(p), peer_at.get(key), "ours and the peer's delivery");
    }
}

/// A `partitioner` the configuration sets is kept: with librdkafka's
/// `consistent` (CRC32 of the key) some keys land outside their murmur2
/// partition. The control of the default above.
#[tokio::test(flavor = "current_thread")]
async fn a_partitioner_the_configuration_sets_is_kept() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("crc32-plain");
    create_topic(&bootstrap, &topic, PARTITIONS);
    let mut config = client_config(&bootstrap);
    config.set("partitioner", "consistent");
    let crc = producer(&config);
    let mut elsewhere = 0;
    for key in keys() {
        let d = crc.send(&topic, &key, Some(b"v")).await.unwrap();
        if d.partition != murmur2_partition(key.as_bytes(), PARTITIONS as u32) {
            elsewhere += 1;
        }
    }
    assert!(elsewhere > 0, "CRC32 and murmur2 agreed on every key");
}

type SivProducer =
    TypedProducer<str, [u8], DeterministicSerializer<Utf8>, EncryptingSerializer<Bytes>>;

fn siv_producer(bootstrap: &str, keys: &Keyset, values: &Keyset) -> SivProducer {
    siv_producer_with(&client_config(bootstrap), keys, values)
}

fn siv_producer_with(config: &ClientConfig, keys: &Keyset, values: &Keyset) -> SivProducer {
    TypedProducer::new(
        config,
        DeterministicSerializer::new(Utf8, keys.clone()),
        EncryptingSerializer::new(Bytes, values.clone()),
    )
    .unwrap()
}

/// Grows `topic` to `partitions` partitions (CreatePartitions, as an
/// operator does), then waits until the broker's metadata says so.
fn grow_topic(bootstrap: &str, topic: &str, partitions: i32) {
    use tombstone_crypt::kafka::rdkafka::admin::{AdminClient, AdminOptions, NewPartitions};
    use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let grown = NewPartitions::new(topic, partitions as usize);
    for r in
        futures_executor::block_on(admin.create_partitions([&grown], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    common::kafka::wait_for_partitions(&admin, topic, partitions);
}

/// Deletes `topic` and creates it again with `partitions` partitions (the
/// way a partition count shrinks), then waits until the broker's metadata
/// says so.
fn recreate_topic(bootstrap: &str, topic: &str, partitions: i32) {
    use tombstone_crypt::kafka::rdkafka::admin::{AdminClient, AdminOptions};
    use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    for r in
        futures_executor::block_on(admin.delete_topics(&[topic], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        assert!(Instant::now() < deadline, "{topic} was not re-created");
        let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
        let new = tombstone_crypt::kafka::rdkafka::admin::NewTopic::new(
            topic,
            partitions,
            tombstone_crypt::kafka::rdkafka::admin::TopicReplication::Fixed(1),
        );
        let created =
            futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap();
        if created.iter().all(Result::is_ok) {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    common::kafka::wait_for_partitions(&admin, topic, partitions);
}

/// The partition count of a topic changes under two writers that already
/// wrote to it (from 2 to 6 partitions, by CreatePartitions): a writer that
/// reads the count again (its refresh interval elapsed, here set to zero)
/// puts every encrypted key where a fresh writer does, the murmur2
/// partition of the plaintext among 6; a writer that keeps the count it
/// read (an interval of an hour) still uses 2, and some keys land
/// elsewhere: two partitions for one key, which the refresh bounds.
#[tokio::test(flavor = "current_thread")]
async fn after_the_partition_count_changes_an_old_writer_agrees_with_a_fresh_one() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("grown");
    create_topic(&bootstrap, &topic, 2);
    let keys_keyset = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let values = Keyset::generate();
    let refreshing =
        siv_producer(&bootstrap, &keys_keyset, &values).with_partition_refresh(Duration::ZERO);
    let keeping = siv_producer(&bootstrap, &keys_keyset, &values)
        .with_partition_refresh(Duration::from_secs(3600));
    for old in [&refreshing, &keeping] {
        let d = old.send(&topic, "warm-up", Some(b"v")).await.unwrap();
        assert_eq!(d.partition, murmur2_partition(b"warm-up", 2));
    }
    grow_topic(&bootstrap, &topic, PARTITIONS);
    let fresh = siv_producer(&bootstrap, &keys_keyset, &values);
    let mut kept_old_modulus = 0;
    for key in keys() {
        let want = murmur2_partition(key.as_bytes(), PARTITIONS as u32);
        let f = fresh.send(&topic, &key, Some(b"fresh")).await.unwrap();
        assert_eq!(f.partition, want, "a fresh writer: {key}");
        let r = refreshing.send(&topic, &key, Some(b"old")).await.unwrap();
        assert_eq!(
            r.partition, f.partition,
            "an old writer that refreshes: {key}"
        );
        let k = keeping.send(&topic, &key, Some(b"old")).await.unwrap();
        assert_eq!(k.partition, murmur2_partition(key.as_bytes(), 2));
        if k.partition != f.partition {
            kept_old_modulus += 1;
        }
    }
    assert!(
        kept_old_modulus > 0,
        "the control: a writer that keeps its count should have put some key elsewhere"
    );
}

/// The partition count shrinks under a writer that keeps its count for an
/// hour (from 6 to 2: the topic deleted and created again): a write to a
/// partition that no longer exists fails as an unknown partition, the
/// writer forgets its count, reads it again and writes the key to its
/// murmur2 partition among 2, where a fresh writer puts it.
#[tokio::test(flavor = "current_thread")]
async fn an_unknown_partition_makes_a_writer_read_the_count_again() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("shrunk");
    create_topic(&bootstrap, &topic, PARTITIONS);
    let keys_keyset = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let values = Keyset::generate();
    let mut config = client_config(&bootstrap);
    // A record the broker keeps refusing fails in 20 s, not librdkafka's 300.
    config.set("message.timeout.ms", "20000");
    let old = siv_producer_with(&config, &keys_keyset, &values)
        .with_partition_refresh(Duration::from_secs(3600));
    old.send(&topic, "warm-up", Some(b"v")).await.unwrap();
    recreate_topic(&bootstrap, &topic, 2);
    // The refusal of a record for a partition the topic no longer has
    // comes from librdkafka, once its own metadata (read here) says 2
    // partitions.
    {
        use tombstone_crypt::kafka::rdkafka::producer::Producer as _;
        let md = old
            .producer()
            .client()
            .fetch_metadata(Some(&topic), Duration::from_secs(10))
            .unwrap();
        assert_eq!(md.topics()[0].partitions().len(), 2);
    }
    let moved: Vec<String> = keys()
        .into_iter()
        .filter(|k| murmur2_partition(k.as_bytes(), PARTITIONS as u32) >= 2)
        .take(8)
        .collect();
    assert!(!moved.is_empty());
    for key in &moved {
        let d = old.send(&topic, key, Some(b"old")).await.unwrap();
        assert_eq!(d.partition, murmur2_partition(key.as_bytes(), 2), "{key}");
    }
}
