//! The test kit's Kafka plumbing, shared by the library's, the command
//! line's and the proxy's suites (each includes this file, never a copy):
//! the broker address, fresh topic names, creating a topic, writing raw
//! records.
#![allow(dead_code)]

use std::time::{SystemTime, UNIX_EPOCH};

use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;

/// The shared broker (`TOMBSTONE_KAFKA_BOOTSTRAP`); `None` when
/// `TOMBSTONE_SKIP_KAFKA` is set.
pub fn bootstrap() -> Option<String> {
    if std::env::var_os("TOMBSTONE_SKIP_KAFKA").is_some() {
        eprintln!("TOMBSTONE_SKIP_KAFKA is set: Kafka tests skipped");
        return None;
    }
    Some(std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP").expect(
        "TOMBSTONE_KAFKA_BOOTSTRAP is not set: run ./scripts/test.sh (it starts a broker), or set TOMBSTONE_SKIP_KAFKA=1",
    ))
}

/// Apache Kafka's own broker (`TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`, started
/// by `scripts/kafka.sh`); `None` when `TOMBSTONE_SKIP_KAFKA` is set.
pub fn apache_kafka() -> Option<String> {
    if std::env::var_os("TOMBSTONE_SKIP_KAFKA").is_some() {
        eprintln!("TOMBSTONE_SKIP_KAFKA is set: Kafka tests skipped");
        return None;
    }
    Some(std::env::var("TOMBSTONE_APACHE_KAFKA_BOOTSTRAP").expect(
        "TOMBSTONE_APACHE_KAFKA_BOOTSTRAP is not set: run ./scripts/test.sh (it starts Apache Kafka \
         with scripts/kafka.sh), or set TOMBSTONE_SKIP_KAFKA=1",
    ))
}

/// A topic name no other test uses.
pub fn fresh_topic(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tc-{name}-{}-{nanos}", std::process::id())
}

/// A client configuration for `bootstrap`.
pub fn client_config(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

/// Creates `topic` with `partitions` partitions.
pub fn create_topic(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let results =
        futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap();
    for r in results {
        r.unwrap();
    }
    wait_for_partitions(&admin, topic, partitions);
}

/// Waits (30 s at most) until the broker's metadata shows `topic` with
/// `partitions` partitions, each with a leader. Apache Kafka answers a
/// CreateTopics (or CreatePartitions) once its controller has the change,
/// and its broker's metadata follows a moment later: a client that asks
/// in between is told the topic does not exist, or has fewer partitions.
pub fn wait_for_partitions(
    admin: &AdminClient<DefaultClientContext>,
    topic: &str,
    partitions: i32,
) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let md = admin
            .inner()
            .fetch_metadata(Some(topic), std::time::Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
        let shown = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .is_some_and(|t| {
                t.error().is_none()
                    && t.partitions().len() == partitions as usize
                    && t.partitions()
                        .iter()
                        .all(|p| p.error().is_none() && p.leader() >= 0)
            });
        if shown {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{topic} never showed {partitions} partitions with leaders"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

/// A free port on the loopback address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A free loopback port `p` for a proxy's bootstrap listener, with its
/// broker nodes' listeners (`p + 1 + node id`) free too: Apache Kafka's
/// node 1 (`p + 2`) and tansu's node 111 (`p + 112`).
pub fn free_base_port() -> u16 {
    use std::net::TcpListener;
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let p = l.local_addr().unwrap().port();
        if p > 65000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 2)).is_ok()
            && TcpListener::bind(("127.0.0.1", p + 112)).is_ok()
        {
            return p;
        }
    }
    panic!("no free port with its nodes' ports free");
}

/// Writes `records` (key, value; `None` a tombstone) to `topic` with an
/// idempotent producer, in order, waiting for each: each key where the
/// producer's partitioner puts it (partition 0 of a topic of one).
pub fn produce<K: AsRef<[u8]>, V: AsRef<[u8]>>(
    bootstrap: &str,
    topic: &str,
    records: &[(K, Option<V>)],
) {
    use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
    let p: FutureProducer = client_config(bootstrap)
        .set("enable.idempotence", "true")
        .create()
        .unwrap();
    for (k, v) in records {
        let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).key(k.as_ref());
        if let Some(v) = v {
            r = r.payload(v.as_ref());
        }
        futures_executor::block_on(p.send(r, std::time::Duration::from_secs(30)))
            .unwrap_or_else(|(e, _)| panic!("produce to {topic}: {e}"));
    }
}

/// A typed producer with record keys encrypted under `keys` (AES-SIV) and
/// values under `values`, following `rule` (the write rule, or a broken one
/// for a negative control).
pub type SivProducer = tombstone_crypt::kafka::TypedProducer<
    [u8],
    [u8],
    tombstone_crypt::DeterministicSerializer<tombstone_crypt::Bytes>,
    tombstone_crypt::EncryptingSerializer<tombstone_crypt::Bytes>,
>;

/// A [`SivProducer`] for `bootstrap` (made inside a tokio runtime or not).
pub fn siv_producer(
    bootstrap: &str,
    values: &tombstone_crypt::Keyset,
    keys: &tombstone_crypt::Keyset,
    rule: tombstone_crypt::record_key::WriteRule,
) -> SivProducer {
    use tombstone_crypt::kafka::TypedProducer;
    use tombstone_crypt::{Bytes, DeterministicSerializer, EncryptingSerializer};
    TypedProducer::new(
        &client_config(bootstrap),
        DeterministicSerializer::new(Bytes, keys.clone()),
        EncryptingSerializer::new(Bytes, values.clone()),
    )
    .unwrap()
    .with_write_rule(rule)
}

/// A key store on `log`'s topic, its view where `TOMBSTONE_KEY_STORE_VIEW`
/// says: `disk` (a redb file in a directory of its own, as each instance
/// of a service has) or `memory` (the default). The key-store tests run
/// once with each (`scripts/test.sh`).
pub fn key_store(
    log: tombstone_crypt::kafka::KafkaChangelog,
) -> tombstone_crypt::kafka::KafkaKeyStore {
    use tombstone_crypt::kafka::KafkaKeyStore;
    match std::env::var("TOMBSTONE_KEY_STORE_VIEW").as_deref() {
        Ok("disk") => KafkaKeyStore::new(log)
            .with_view_dir(fresh_view_dir())
            .unwrap(),
        Ok("memory") | Err(_) => KafkaKeyStore::new(log),
        Ok(other) => panic!("TOMBSTONE_KEY_STORE_VIEW={other}: expected disk or memory"),
    }
}

/// A directory no other test uses, for a key-store view on disk.
pub fn fresh_view_dir() -> std::path::PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    std::env::temp_dir().join(format!(
        "tc-view-{}-{nanos}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

/// The last record of each wire key of `topic` (partitions
/// `0..partitions`, each read to its end): whether it has a value.
pub fn last_is_value(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
) -> std::collections::BTreeMap<Vec<u8>, bool> {
    use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
    use tombstone_crypt::kafka::rdkafka::error::KafkaError;
    use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};
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
    let mut out = std::collections::BTreeMap::new();
    let mut at_end = 0;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while at_end < partitions {
        assert!(std::time::Instant::now() < deadline, "reading {topic}");
        match consumer.poll(std::time::Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => at_end += 1,
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => {
                out.insert(m.key().unwrap().to_vec(), m.payload().is_some());
            }
        }
    }
    out
}
