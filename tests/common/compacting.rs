//! The compacting broker (tansu 0.6.0 on SQLite, `scripts/broker.sh
//! start-compacting`): its address, a raw read of a whole topic that copes
//! with the broker's duplicated records, Kafka's compaction rule as a
//! reference, and a wait until the broker has compacted a topic.
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};

use super::kafka::{client_config, fresh_topic};

/// The compacting broker (`TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP`).
pub fn compacting_bootstrap() -> String {
    std::env::var("TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP").expect(
        "TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP is not set: run ./scripts/test.sh (it starts the \
         compacting broker), or `scripts/broker.sh start-compacting` and export its address",
    )
}

/// One record as the broker returned it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RawRecord {
    /// Partition.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Key; `None` for a record without one.
    pub key: Option<Vec<u8>>,
    /// Value; `None` for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// A whole topic read back, with the broker's duplicates dropped.
#[derive(Clone, Debug, Default)]
pub struct ReadBack {
    /// Every record, by partition then offset.
    pub records: Vec<RawRecord>,
    /// Records dropped because their offset was not above the last one seen
    /// in their partition (tansu 0.6.0 returns the records kept by a
    /// compaction several times over in one fetch response).
    pub duplicates: u64,
}

/// How many partitions `topic` has, from the broker's metadata.
pub fn partition_count(bootstrap: &str, topic: &str) -> i32 {
    let consumer: BaseConsumer = client_config(bootstrap).create().unwrap();
    let md = consumer
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("metadata of {topic}: {e}"));
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == topic)
        .unwrap_or_else(|| panic!("no metadata for {topic}"));
    assert!(t.error().is_none(), "metadata of {topic}: {:?}", t.error());
    t.partitions().len() as i32
}

/// Every record of every partition of `topic`, from the beginning to
/// partition EOF: by partition then offset, the broker's duplicates dropped.
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<RawRecord> {
    read_all_counted(bootstrap, topic).records
}

/// [`read_all`], and how many duplicates it dropped.
pub fn read_all_counted(bootstrap: &str, topic: &str) -> ReadBack {
    let partitions = partition_count(bootstrap, topic);
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", fresh_topic("read-all"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        // Offset 0 rather than `Beginning`, which librdkafka looks up with a
        // ListOffsets request about 0.5 s after the assignment; tansu answers
        // offset 0 of a compacted partition from its first kept record, and
        // an out-of-range answer would reset to the earliest offset.
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Offset(0))
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut last: HashMap<i32, i64> = HashMap::new();
    let mut at_end = std::collections::BTreeSet::new();
    let mut out = ReadBack::default();
    let deadline = Instant::now() + Duration::from_secs(30);
    while at_end.len() < partitions as usize {
        assert!(Instant::now() < deadline, "timed out reading {topic}");
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            // A broker connection down for a moment: librdkafka reconnects.
            Some(Err(e)) if tombstone_crypt::kafka::is_transient_kafka_error(&e) => {}
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => {
                let (p, offset) = (m.partition(), m.offset());
                at_end.remove(&p);
                if last.get(&p).is_some_and(|&l| offset <= l) {
                    out.duplicates += 1;
                    continue;
                }
                last.insert(p, offset);
                out.records.push(RawRecord {
                    partition: p,
                    offset,
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                });
            }
        }
    }
    out.records.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// Kafka's compaction of `records`: the newest record of each (partition,
/// key), tombstones kept (as if `delete.retention.ms` had not passed),
/// records without a key kept; by partition then offset.
pub fn kafka_compact(records: &[RawRecord]) -> Vec<RawRecord> {
    let mut newest: HashMap<(i32, &[u8]), i64> = HashMap::new();
    for r in records {
        if let Some(k) = &r.key {
            let e = newest
                .entry((r.partition, k.as_slice()))
                .or_insert(r.offset);
            *e = (*e).max(r.offset);
        }
    }
    let mut out: Vec<RawRecord> = records
        .iter()
        .filter(|r| match &r.key {
            Some(k) => newest[&(r.partition, k.as_slice())] == r.offset,
            None => true,
        })
        .cloned()
        .collect();
    out.sort_by_key(|r| (r.partition, r.offset));
    out
}

/// What [`wait_compacted`] saw.
#[derive(Clone, Debug)]
pub struct Compaction {
    /// From the call to the first read equal to its own compaction.
    pub elapsed: Duration,
    /// Offsets taken in the topic: the sum over partitions of the last
    /// offset read + 1 (compaction always keeps a partition's last record),
    /// the number of records written when no producer was transactional.
    pub offsets: i64,
    /// Records in the first read.
    pub before: usize,
    /// Records in the last read (the compacted topic).
    pub after: usize,
    /// Reads made.
    pub reads: u32,
    /// Duplicates dropped over all reads.
    pub duplicates: u64,
    /// The compacted topic, by partition then offset.
    pub records: Vec<RawRecord>,
}

static COMPACTION_RUNS: AtomicU64 = AtomicU64::new(0);

/// Compactions observed by [`wait_compacted`] in this test binary: calls
/// that found fewer records than offsets taken (records were removed).
pub fn compaction_runs() -> u64 {
    COMPACTION_RUNS.load(Ordering::SeqCst)
}

/// Reads `topic` until what the broker returns equals its own Kafka
/// compaction ([`kafka_compact`]): the broker has compacted everything
/// written so far. Panics after `timeout`.
pub fn wait_compacted(bootstrap: &str, topic: &str, timeout: Duration) -> Compaction {
    let start = Instant::now();
    let mut before = None;
    let mut reads = 0;
    let mut duplicates = 0;
    loop {
        let read = read_all_counted(bootstrap, topic);
        reads += 1;
        duplicates += read.duplicates;
        let before = *before.get_or_insert(read.records.len());
        let compacted = kafka_compact(&read.records);
        if compacted == read.records {
            let mut last: BTreeMap<i32, i64> = BTreeMap::new();
            for r in &read.records {
                last.insert(r.partition, r.offset);
            }
            let offsets: i64 = last.values().map(|o| o + 1).sum();
            if (read.records.len() as i64) < offsets {
                COMPACTION_RUNS.fetch_add(1, Ordering::SeqCst);
            }
            return Compaction {
                elapsed: start.elapsed(),
                offsets,
                before,
                after: read.records.len(),
                reads,
                duplicates,
                records: read.records,
            };
        }
        assert!(
            start.elapsed() < timeout,
            "{topic} on {bootstrap} not compacted after {timeout:?} ({reads} reads): {} records, \
             {} once compacted; is it the compacting broker (scripts/broker.sh start-compacting) \
             and the topic cleanup.policy=compact?",
            read.records.len(),
            compacted.len(),
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `topic` with `partitions` partitions and `cleanup.policy=compact`
/// through the admin API (CreateTopics).
pub fn create_compacted_topic(bootstrap: &str, topic: &str, partitions: i32) {
    create_topic_with(
        bootstrap,
        topic,
        partitions,
        &[("cleanup.policy", "compact")],
    );
}

/// Creates `topic` with `partitions` partitions and topic `config` through
/// the admin API (CreateTopics).
pub fn create_topic_with(bootstrap: &str, topic: &str, partitions: i32, config: &[(&str, &str)]) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let mut new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for (k, v) in config {
        new = new.set(k, v);
    }
    let results =
        futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap();
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("create {t}: {e}"));
    }
}

/// Low and high watermarks of every partition (ListOffsets EARLIEST and
/// LATEST): the low one is the log start offset.
pub fn watermarks(bootstrap: &str, topic: &str) -> BTreeMap<i32, (i64, i64)> {
    let consumer: BaseConsumer = client_config(bootstrap).create().unwrap();
    (0..partition_count(bootstrap, topic))
        .map(|p| {
            let w = consumer
                .fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap_or_else(|e| panic!("watermarks of {topic}/{p}: {e}"));
            (p, w)
        })
        .collect()
}
