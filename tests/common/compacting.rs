//! The compacting broker (Apache Kafka, `scripts/kafka.sh`, the test
//! command's broker): its address, a raw read of a whole topic, Kafka's
//! compaction rule as a reference, and a wait until the log cleaner has
//! compacted everything written to a topic (its active segments rolled by
//! abort markers no reader sees: [`roll`]).
#![allow(dead_code)]

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ConfigSource, NewTopic, ResourceSpecifier,
    TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};

use super::kafka::{client_config, fresh_topic};

/// The markers that roll segments (the file beside this one, wherever this
/// one is included from).
#[path = "roll.rs"]
mod roll;

/// The compacting broker: Apache Kafka (`TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`).
pub fn compacting_bootstrap() -> String {
    std::env::var("TOMBSTONE_APACHE_KAFKA_BOOTSTRAP").expect(
        "TOMBSTONE_APACHE_KAFKA_BOOTSTRAP is not set: run ./scripts/test.sh (it starts Apache \
         Kafka), or `scripts/kafka.sh start` and export the address it prints",
    )
}

/// The topic settings under which Apache Kafka's log cleaner compacts
/// within a second of a roll: a segment rolls at the first append 100 ms
/// after its first record, and any dirty part is worth a cleaning.
pub const FAST_COMPACTION: [(&str, &str); 3] = [
    ("segment.ms", "100"),
    ("min.cleanable.dirty.ratio", "0.01"),
    ("min.compaction.lag.ms", "0"),
];

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
/// partition EOF (`read_committed`, librdkafka's default: an aborted
/// transaction's records and every marker skipped), by partition then
/// offset. Panics on an offset returned twice.
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<RawRecord> {
    let partitions = partition_count(bootstrap, topic);
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", fresh_topic("read-all"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.wait.max.ms", "50")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut last: HashMap<i32, i64> = HashMap::new();
    let mut at_end = std::collections::BTreeSet::new();
    let mut out = Vec::new();
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
                if let Some(&l) = last.get(&p) {
                    assert!(
                        offset > l,
                        "{topic}/{p}: offset {offset} returned after offset {l}"
                    );
                }
                last.insert(p, offset);
                out.push(RawRecord {
                    partition: p,
                    offset,
                    key: m.key().map(<[u8]>::to_vec),
                    value: m.payload().map(<[u8]>::to_vec),
                });
            }
        }
    }
    out.sort_by_key(|r| (r.partition, r.offset));
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
    /// Offsets the topic's records took: the sum over partitions of the
    /// last offset read + 1, less the markers [`wait_compacted`] appended
    /// below it; the number of records written when no producer was
    /// transactional.
    pub offsets: i64,
    /// Records in the first read.
    pub before: usize,
    /// Records in the last read (the compacted topic).
    pub after: usize,
    /// Reads made.
    pub reads: u32,
    /// Rounds of markers appended.
    pub rolls: u32,
    /// The compacted topic, by partition then offset.
    pub records: Vec<RawRecord>,
}

static COMPACTION_RUNS: AtomicU64 = AtomicU64::new(0);

/// The offsets of the markers [`wait_compacted`] appended, by topic and
/// partition.
static MARKERS: Mutex<BTreeMap<(String, i32), Vec<i64>>> = Mutex::new(BTreeMap::new());

/// Compactions observed by [`wait_compacted`] in this test binary: calls
/// that found fewer records than offsets taken (records were removed).
pub fn compaction_runs() -> u64 {
    COMPACTION_RUNS.load(Ordering::SeqCst)
}

/// Waits (up to 30 s) until the broker describes `topic` with
/// `cleanup.policy=compact`: a topic deleted and created again at once may
/// be described, for a moment after its creation returned, without the
/// configuration it was made with (seen on Apache Kafka under load, the
/// tests four at a time), and a changelog opened then is refused.
pub fn wait_compact_policy(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let resource = ResourceSpecifier::Topic(topic);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let described =
            futures_executor::block_on(admin.describe_configs([&resource], &AdminOptions::new()))
                .unwrap();
        let policy = described.into_iter().next().and_then(|c| {
            c.ok()?
                .entries
                .iter()
                .find(|e| e.name == "cleanup.policy")
                .and_then(|e| e.value.clone())
        });
        if policy.as_deref().is_some_and(|p| p.contains("compact")) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{topic} is described with cleanup.policy {policy:?}, not compact"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Gives `topic` the settings of [`FAST_COMPACTION`] it lacks (a topic a
/// client or the command line created), keeping its other settings
/// (AlterConfigs replaces a topic's whole configuration).
pub fn ensure_fast_compaction(bootstrap: &str, topic: &str) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    let resource = ResourceSpecifier::Topic(topic);
    let described =
        futures_executor::block_on(admin.describe_configs([&resource], &AdminOptions::new()))
            .unwrap();
    let config = described
        .into_iter()
        .next()
        .unwrap()
        .unwrap_or_else(|e| panic!("describe {topic}: {e}"));
    let mut set: BTreeMap<String, String> = config
        .entries
        .iter()
        .filter(|e| e.source == ConfigSource::DynamicTopic)
        .filter_map(|e| Some((e.name.clone(), e.value.clone()?)))
        .collect();
    assert!(
        set.get("cleanup.policy")
            .is_some_and(|p| p.contains("compact")),
        "{topic} is not a compacted topic: {set:?}"
    );
    let missing: Vec<_> = FAST_COMPACTION
        .iter()
        .filter(|(k, _)| !set.contains_key(*k))
        .collect();
    if missing.is_empty() {
        return;
    }
    for (k, v) in missing {
        set.insert((*k).to_owned(), (*v).to_owned());
    }
    let mut alter = AlterConfig::new(ResourceSpecifier::Topic(topic));
    for (k, v) in &set {
        alter = alter.set(k, v);
    }
    for r in
        futures_executor::block_on(admin.alter_configs([&alter], &AdminOptions::new())).unwrap()
    {
        r.unwrap_or_else(|(t, e)| panic!("alter the configuration of {t:?}: {e}"));
    }
}

/// Appends an abort marker to every partition of `topic` (rolling each
/// active segment: [`roll`]) and notes the offsets they took.
fn roll(bootstrap: &str, topic: &str, partitions: i32) {
    // A segment rolls at the first append `segment.ms` after its first
    // record.
    std::thread::sleep(Duration::from_millis(150));
    let before = watermarks(bootstrap, topic);
    roll::append_markers(bootstrap, topic, partitions);
    let mut markers = MARKERS.lock().unwrap();
    for (p, (_, high)) in before {
        markers.entry((topic.to_owned(), p)).or_default().push(high);
    }
}

/// Rolls `topic`'s segments and reads it until what the broker returns
/// equals its own Kafka compaction ([`kafka_compact`]): the log cleaner
/// has compacted everything written so far. Panics after `timeout`. No
/// record may be written to `topic` meanwhile (the markers' offsets are
/// counted from the high watermarks).
pub fn wait_compacted(bootstrap: &str, topic: &str, timeout: Duration) -> Compaction {
    let start = Instant::now();
    ensure_fast_compaction(bootstrap, topic);
    let partitions = partition_count(bootstrap, topic);
    roll(bootstrap, topic, partitions);
    let mut rolled = Instant::now();
    let mut rolls = 1;
    let mut before = None;
    let mut reads = 0;
    loop {
        let read = read_all(bootstrap, topic);
        reads += 1;
        let before = *before.get_or_insert(read.len());
        let compacted = kafka_compact(&read);
        if compacted == read {
            let mut last: BTreeMap<i32, i64> = BTreeMap::new();
            for r in &read {
                last.insert(r.partition, r.offset);
            }
            let markers = MARKERS.lock().unwrap();
            let offsets: i64 = last
                .iter()
                .map(|(p, o)| {
                    let below = markers
                        .get(&(topic.to_owned(), *p))
                        .map_or(0, |m| m.iter().filter(|&&m| m < *o).count());
                    o + 1 - below as i64
                })
                .sum();
            if (read.len() as i64) < offsets {
                COMPACTION_RUNS.fetch_add(1, Ordering::SeqCst);
            }
            return Compaction {
                elapsed: start.elapsed(),
                offsets,
                before,
                after: read.len(),
                reads,
                rolls,
                records: read,
            };
        }
        assert!(
            start.elapsed() < timeout,
            "{topic} on {bootstrap} not compacted after {timeout:?} ({reads} reads, {rolls} \
             rolls): {} records, {} once compacted; is the topic cleanup.policy=compact?",
            read.len(),
            compacted.len(),
        );
        // A cleaning missed (the roll came before `segment.ms`, the
        // cleaner's backoff): roll again.
        if rolled.elapsed() > Duration::from_secs(3) {
            roll(bootstrap, topic, partitions);
            rolled = Instant::now();
            rolls += 1;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Creates `topic` with `partitions` partitions and `cleanup.policy=compact`
/// through the admin API (CreateTopics). Nothing is compacted before
/// [`wait_compacted`] sets [`FAST_COMPACTION`] (Apache Kafka's defaults
/// roll a segment after 7 days).
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
/// ([`wait_compacted`] gives a compacted topic the settings of
/// [`FAST_COMPACTION`] it lacks.)
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
    super::kafka::wait_for_partitions(&admin, topic, partitions);
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
