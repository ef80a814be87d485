//! A changelog on a Kafka topic ([`KafkaChangelog`]), the settings of the
//! topic it creates, and which consumer errors are transient.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message};
use rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use rdkafka::{Offset, TopicPartitionList};

use crate::error::Error;
use crate::store::{Changelog, Record};

/// A Kafka error, kept as the cause; `what` says what the changelog was
/// doing.
fn kafka_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> Error {
    Error::changelog(format!("kafka: {what}"), e)
}

/// One failed delivery: which append it was (counted from 1 since the
/// changelog was opened) and why. Never the key or the value.
#[derive(Clone, Debug)]
struct Failure {
    seq: u64,
    error: KafkaError,
}

/// Collects delivery failures reported by the producer's thread, until the
/// next flush takes them.
#[derive(Clone, Default)]
struct Deliveries {
    failed: Arc<Mutex<Vec<Failure>>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, seq: usize) {
        if let Err((error, _)) = result {
            if let Ok(mut failed) = self.failed.lock() {
                failed.push(Failure {
                    seq: seq as u64,
                    error: error.clone(),
                });
            }
        }
    }
}

/// How [`KafkaChangelog`] creates its topic when it is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct TopicSettings {
    /// The replication factor; `-1` asks for the broker's
    /// `default.replication.factor` (Kafka 2.4 and later).
    pub replication_factor: i32,
    /// How many partitions a missing topic gets (1 by default; one per
    /// store task, as Kafka Streams creates them).
    pub partitions: i32,
}

impl TopicSettings {
    /// The same settings with `partitions` partitions.
    #[must_use]
    pub fn with_partitions(self, partitions: i32) -> Self {
        TopicSettings { partitions, ..self }
    }

    /// The same settings with another replication factor.
    #[must_use]
    pub fn with_replication_factor(self, replication_factor: i32) -> Self {
        TopicSettings {
            replication_factor,
            ..self
        }
    }
}

impl Default for TopicSettings {
    /// One partition, the broker's default replication factor.
    fn default() -> Self {
        TopicSettings {
            replication_factor: -1,
            partitions: 1,
        }
    }
}

/// A [`Changelog`] on one partition of a Kafka topic (0 unless
/// [`on_partition`](KafkaChangelog::on_partition) says otherwise), created with
/// `cleanup.policy=compact` when missing; an existing topic must be
/// compacted too (a `delete`-policy topic drops old records, and a restore
/// from it would be incomplete).
///
/// `append` queues a record; `flush` waits until every queued record is
/// acknowledged by the broker and fails if any was not, naming which appends
/// (counted from 1 since the changelog was opened) failed and why; the
/// failures are then cleared, so a later flush reports only its own.
///
/// The producer is idempotent (`enable.idempotence=true` whatever the
/// configuration says) with `acks=all` (a configuration with `acks` or
/// `request.required.acks` set to anything else is refused: a delivery
/// report would not mean the record is stored): retries never reorder a
/// tombstone and an older value of its key. A write of an encrypted store
/// key is several appends (a tombstone for each older form, then the
/// record), pipelined; if one fails, a later one may still be delivered
/// (librdkafka's `enable.gapless.guarantee`, which this changelog sets,
/// stops the producer rather than let that happen, except for a record
/// that fails by `message.timeout.ms`). It is never silent: the flush
/// fails, names the failed appends and says that later ones may be on the
/// log; a [`ChangeLoggingStore`](crate::store::ChangeLoggingStore) then
/// refuses to serve until restored from the log. A producer stopped by a
/// fatal error is replaced by a new one at the next append or flush, and
/// that flush fails saying so. Without a transaction, a failed write can
/// leave the tombstones of its key's older forms on the log without its
/// record: restored, the key reads deleted.
///
/// **Transactions.** With a `transactional.id` in the configuration, each
/// flush is one transaction: the first append after a flush begins it,
/// the flush commits it once every append is delivered, and a flush that
/// fails aborts it, so the write rule's tombstones and the records they
/// precede are on the log together or not at all; a restore reads
/// `read_committed` (always), so an aborted or unfinished flush (a
/// process killed in its middle) leaves nothing it sees. Opening fences
/// an earlier changelog of the same id (and aborts what it left open);
/// a fenced changelog fails every append and flush from then on, never
/// replaced by a new producer (that would fence the newer one in turn).
/// Use one id per store task, stable across restarts, as Kafka Streams'
/// `exactly_once_v2` does per thread. Flush within
/// `transaction.timeout.ms` (60 s by default) of a transaction's first
/// append: the coordinator aborts a transaction open longer and fences its
/// producer (the flush then fails, saying so, and so does every later one).
///
/// **Partitions.** Every record goes to the changelog's one partition,
/// named explicitly ([`on_partition`](KafkaChangelog::on_partition)), as
/// Kafka Streams writes a store's changelog: the partition of the store's
/// task, which is the input partition the task reads, so no partitioner
/// (and no `partitioner` setting) is involved. Keys reach a task by the
/// partitioning of its input topic, murmur2 for Java writers and for
/// [`TypedProducer`](crate::kafka::TypedProducer).
/// `records` and `replay` read the partition from the beginning to its end;
/// `replay` streams, and gives up only when no record has arrived for the
/// timeout (30 s), however long the whole read takes.
///
/// A broker compacts on its own schedule (and some never do, such as a
/// memory-only test broker): apply [`compact`](crate::store::compact) to what
/// `records` returns to see what compaction will leave.
pub struct KafkaChangelog {
    producer: ThreadedProducer<Deliveries>,
    deliveries: Deliveries,
    config: ClientConfig,
    topic: String,
    timeout: Duration,
    partition: i32,
    appended: u64,
    /// Every append up to this one was acknowledged by a successful flush.
    flushed: u64,
    /// Why the producer was stopped and replaced, until a flush reports it.
    stopped: Option<(RDKafkaErrorCode, String)>,
    /// The configuration names a `transactional.id`: each flush commits
    /// the appends since the last one as one transaction.
    transactional: bool,
    /// A transaction is open (an append since the last flush).
    in_transaction: bool,
    /// Why no producer could be made after an abort: every append fails.
    broken: Option<String>,
}

impl core::fmt::Debug for KafkaChangelog {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KafkaChangelog")
            .field("topic", &self.topic)
            .finish_non_exhaustive()
    }
}

impl KafkaChangelog {
    /// Opens the changelog on `topic` at `bootstrap_servers`, creating the
    /// topic (one partition, compacted, the broker's default replication
    /// factor) if it does not exist.
    ///
    /// # Errors
    /// [`Error::Changelog`] if the broker cannot be reached or refuses, or
    /// the topic exists without `cleanup.policy=compact`.
    pub fn open(bootstrap_servers: &str, topic: &str) -> Result<Self, Error> {
        let mut config = ClientConfig::new();
        config.set("bootstrap.servers", bootstrap_servers);
        Self::with_config(config, topic)
    }

    /// As [`open`](KafkaChangelog::open), with a client configuration of
    /// your own (security settings and the like); it must set
    /// `bootstrap.servers`. `enable.idempotence` is set to `true` over it,
    /// `acks` to `all` when it does not say, and
    /// `enable.gapless.guarantee` to `true`: the changelog's ordering
    /// depends on them.
    ///
    /// # Errors
    /// As [`open`](KafkaChangelog::open); also [`Error::Changelog`] if the
    /// configuration sets `acks` (or `request.required.acks`) to anything
    /// but `all`.
    pub fn with_config(config: ClientConfig, topic: &str) -> Result<Self, Error> {
        Self::with_settings(config, topic, TopicSettings::default())
    }

    /// As [`with_config`](KafkaChangelog::with_config), creating a missing
    /// topic with `settings`.
    ///
    /// # Errors
    /// As [`open`](KafkaChangelog::open).
    pub fn with_settings(
        config: ClientConfig,
        topic: &str,
        settings: TopicSettings,
    ) -> Result<Self, Error> {
        Self::opened(config, topic, Some(settings))
    }

    /// As [`with_config`](KafkaChangelog::with_config) for a topic that
    /// must exist: a missing topic is an error, never created (a key store
    /// or a changelog named by hand, where a mistyped name must not start
    /// an empty one).
    ///
    /// # Errors
    /// As [`open`](KafkaChangelog::open); [`Error::Changelog`] if the topic
    /// does not exist.
    pub fn existing(config: ClientConfig, topic: &str) -> Result<Self, Error> {
        Self::opened(config, topic, None)
    }

    /// Opens the changelog; creates a missing topic with `settings`, or
    /// refuses it without.
    fn opened(
        config: ClientConfig,
        topic: &str,
        settings: Option<TopicSettings>,
    ) -> Result<Self, Error> {
        if let Some(why) = super::acks_refused(&config) {
            return Err(Error::changelog_msg(format!("kafka: {why}")));
        }
        let timeout = Duration::from_secs(30);
        ensure_compacted_topic(&config, topic, settings, timeout)?;
        let deliveries = Deliveries::default();
        let producer = create_producer(&config, &deliveries)?;
        let transactional = is_transactional(&config);
        if transactional {
            // Fences an earlier producer of the same id, and aborts what it
            // left open.
            producer
                .init_transactions(timeout)
                .map_err(|e| kafka_err("init transactions", e))?;
        }
        Ok(KafkaChangelog {
            producer,
            deliveries,
            config,
            topic: topic.to_owned(),
            timeout,
            partition: 0,
            appended: 0,
            flushed: 0,
            stopped: None,
            transactional,
            in_transaction: false,
            broken: None,
        })
    }

    /// The same changelog on partition `partition` of its topic (0 by
    /// default): one changelog partition per store task, as Kafka Streams
    /// has it. Appends go to it; `records`, `replay` and restores read it
    /// alone.
    #[must_use]
    pub fn on_partition(self, partition: i32) -> Self {
        KafkaChangelog { partition, ..self }
    }

    /// The partition this changelog reads and writes.
    pub fn partition(&self) -> i32 {
        self.partition
    }

    /// The same changelog with another timeout (30 s by default) for a
    /// flush, and for a read to make progress.
    #[must_use]
    pub fn with_timeout(self, timeout: Duration) -> Self {
        KafkaChangelog { timeout, ..self }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The topic's id, asked of the broker with this changelog's client
    /// settings ([`topic_identity`](crate::kafka::topic_identity)), within
    /// the timeout (at most 10 s).
    ///
    /// # Errors
    /// As [`topic_identity`](crate::kafka::topic_identity).
    pub fn topic_identity(&self) -> Result<crate::kafka::TopicIdentity, Error> {
        crate::kafka::topic_identity(
            &self.config,
            &self.topic,
            self.timeout.min(Duration::from_secs(10)),
        )
    }

    /// A producer stopped by a fatal error (the gapless guarantee: a
    /// record failed where a later one could have been stored after it)
    /// has failed every record queued after it, each reported to
    /// [`Deliveries`]; it is replaced by a new one (a new producer id), and
    /// the next flush fails, saying so.
    ///
    /// A transactional producer stopped by a fatal error (fenced by a newer
    /// one of its id) is not replaced: a new one would fence that one in
    /// turn. Every append and flush fails from then on.
    fn renew_if_stopped(&mut self) -> Result<(), Error> {
        if let Some(fatal) = self.producer.client().fatal_error() {
            if self.transactional {
                let lost = if self.appended > self.flushed {
                    format!(
                        "appends #{}..#{} are not on the log for a read_committed reader",
                        self.flushed + 1,
                        self.appended
                    )
                } else {
                    format!("no append after #{} can be written", self.flushed)
                };
                return Err(Error::changelog(
                    format!(
                        "kafka: the transactional producer of {} stopped ({}): {lost}; open the \
                         changelog again (and restore) to go on",
                        self.topic, fatal.1
                    ),
                    fatal.0,
                ));
            }
            self.producer = create_producer(&self.config, &self.deliveries)?;
            self.stopped.get_or_insert(fatal);
        }
        Ok(())
    }

    /// Waits until every queued record is delivered (or failed) and
    /// reported, for at most the timeout. rdkafka's own flush waits on the
    /// producer's event queue, whose events the producer's polling thread
    /// takes first: it wakes every 100 ms, so a flush took 100 ms however
    /// soon the broker answered. This asks every millisecond instead.
    fn wait_for_deliveries(&self) -> Result<(), KafkaError> {
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.producer.flush(Duration::ZERO) {
                Ok(()) => return Ok(()),
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut))
                    if Instant::now() < deadline =>
                {
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Takes the delivery failures reported since the last call.
    fn take_failures(&self) -> Result<(), Error> {
        let failed = {
            let mut failed = self
                .deliveries
                .failed
                .lock()
                .map_err(|_| Error::changelog_msg("kafka: delivery report lock poisoned"))?;
            std::mem::take(&mut *failed)
        };
        let Some(first) = failed.iter().min_by_key(|f| f.seq) else {
            return Ok(());
        };
        let seqs: Vec<String> = failed.iter().take(8).map(|f| f.seq.to_string()).collect();
        Err(Error::changelog(
            format!(
                "kafka: {} record(s) not delivered to {} (appends #{}{}), first #{}; appends after a failed one may have been delivered (a key's record without the tombstones appended before it): the log, not the store, is the truth now",
                failed.len(),
                self.topic,
                seqs.join(", #"),
                if failed.len() > 8 { ", ..." } else { "" },
                first.seq
            ),
            first.error.clone(),
        ))
    }

    fn consumer(&self, from: u64, wait_ms: &str) -> Result<BaseConsumer, Error> {
        let mut config = self.config.clone();
        // A read runs to the end of the partition, where the broker holds
        // the last, empty fetch for `fetch.wait.max.ms` (500 ms by
        // default) before librdkafka can tell it reached the end: wait 50
        // ms at most, unless the configuration says otherwise. A fetch with
        // records to return never waits.
        if config.get("fetch.wait.max.ms").is_none() {
            config.set("fetch.wait.max.ms", wait_ms);
        }
        // A restore's memory is the store it fills, not the log: librdkafka
        // prefetches up to 64 MiB of the partition by default; 8 MiB keeps
        // the reader's share small.
        if config.get("queued.max.messages.kbytes").is_none() {
            config.set("queued.max.messages.kbytes", "8192");
        }
        // And 20,000 records, not 100,000 (small records cost librdkafka
        // more than their bytes).
        if config.get("queued.min.messages").is_none() {
            config.set("queued.min.messages", "20000");
        }
        // With the queue full, librdkafka holds its fetches back for
        // `fetch.queue.backoff.ms` (1 s by default), which a store that
        // puts a little slower than the broker sends would wait a second
        // at a time: 10 ms.
        if config.get("fetch.queue.backoff.ms").is_none() {
            config.set("fetch.queue.backoff.ms", "10");
        }
        let consumer: BaseConsumer = config
            .set(
                "group.id",
                format!("tombstone-crypt-restore-{}-{}", self.topic, self.partition),
            )
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            // What a transaction committed, never what one aborted or
            // left open (librdkafka's default, said here).
            .set("isolation.level", "read_committed")
            // Offset 0, not `Beginning`: librdkafka looks `Beginning` up
            // with a ListOffsets request that it schedules about 0.5 s after
            // the assignment, on every read. Below the log start offset (a
            // compacted or truncated log) the broker answers out of range
            // and this resets to the earliest offset.
            .set("auto.offset.reset", "earliest")
            .create()
            .map_err(|e| kafka_err("consumer", e))?;
        let mut tpl = TopicPartitionList::new();
        let from =
            i64::try_from(from).map_err(|_| Error::changelog_msg("kafka: offset out of range"))?;
        tpl.add_partition_offset(&self.topic, self.partition, Offset::Offset(from))
            .map_err(|e| kafka_err("assign", e))?;
        consumer.assign(&tpl).map_err(|e| kafka_err("assign", e))?;
        Ok(consumer)
    }

    /// Streams the partition from offset `from` to its end, as
    /// [`replay`](Changelog::replay) does from the beginning; says where
    /// the next read starts, and whether the partition restarted below
    /// `from` (nothing applied then: read it again from 0).
    pub(crate) fn replay_from(
        &self,
        from: u64,
        apply: &mut dyn FnMut(Record) -> Result<(), Error>,
    ) -> Result<Replayed, Error> {
        self.replay_with(&self.consumer(from, "50")?, from, apply)
    }

    /// A reader of the partition for [`replay_with`](Self::replay_with):
    /// one kept between reads saves a new consumer's connections each time
    /// (about 100 ms a read on the test broker), and its last, empty fetch
    /// at the end waits 5 ms, not 50 (unless the configuration says): a
    /// reader that reads the last few records many times a second.
    pub(crate) fn reader(&self) -> Result<BaseConsumer, Error> {
        self.consumer(0, "5")
    }

    /// [`replay_from`](Self::replay_from) with `consumer` (from
    /// [`reader`](Self::reader)), assigned again at `from`.
    pub(crate) fn replay_with(
        &self,
        consumer: &BaseConsumer,
        from: u64,
        apply: &mut dyn FnMut(Record) -> Result<(), Error>,
    ) -> Result<Replayed, Error> {
        self.replay_until(consumer, from, None, apply)
    }

    /// [`replay_with`](Self::replay_with), stopping after the first record
    /// at or above `until` (`None`: at the end of the partition).
    pub(crate) fn replay_until(
        &self,
        consumer: &BaseConsumer,
        from: u64,
        until: Option<u64>,
        apply: &mut dyn FnMut(Record) -> Result<(), Error>,
    ) -> Result<Replayed, Error> {
        let from_i64 = i64::try_from(from).unwrap_or(i64::MAX);
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&self.topic, self.partition, Offset::Offset(from_i64))
            .map_err(|e| kafka_err("assign", e))?;
        consumer.assign(&tpl).map_err(|e| kafka_err("assign", e))?;
        let mut last_progress = Instant::now();
        let mut n = 0u64;
        let mut last: Option<i64> = None;
        loop {
            if last_progress.elapsed() > self.timeout {
                return Err(Error::changelog_msg(format!(
                    "kafka: read {n} records of {}, then none for {} s before the end of the partition",
                    self.topic,
                    self.timeout.as_secs()
                )));
            }
            match consumer.poll(Duration::from_millis(200)) {
                None => {}
                Some(Err(KafkaError::PartitionEOF(_))) => {
                    return Ok(Replayed {
                        records: n,
                        next: last.map_or(from, |l| l.unsigned_abs() + 1),
                        restarted: false,
                    })
                }
                // librdkafka reconnects; the progress deadline above bounds
                // how long that may take.
                Some(Err(e)) if is_transient_kafka_error(&e) => {}
                Some(Err(e)) => return Err(kafka_err("consume", e)),
                Some(Ok(m)) => {
                    last_progress = Instant::now();
                    // A record at or below an offset already applied is a
                    // repeat (a broker that, after compacting, answered
                    // one fetch with the kept records several times over):
                    // applying it again could undo a later record.
                    if last.is_some_and(|l| m.offset() <= l) {
                        continue;
                    }
                    // Below where it was asked to start: the partition
                    // restarted (a topic created again, or `from` past a
                    // shorter log's end, read again from its start).
                    if last.is_none() && m.offset() < from_i64 {
                        return Ok(Replayed {
                            records: n,
                            next: 0,
                            restarted: true,
                        });
                    }
                    last = Some(m.offset());
                    let key = m.key().ok_or_else(|| {
                        Error::changelog_msg(format!(
                            "kafka: the changelog record at offset {} has no key",
                            m.offset()
                        ))
                    })?;
                    let offset = u64::try_from(m.offset())
                        .map_err(|_| Error::changelog_msg("kafka: negative offset"))?;
                    apply(Record {
                        offset,
                        key: key.to_vec(),
                        value: m.payload().map(<[u8]>::to_vec),
                    })?;
                    n += 1;
                    if until.is_some_and(|u| offset >= u) {
                        return Ok(Replayed {
                            records: n,
                            next: offset + 1,
                            restarted: false,
                        });
                    }
                }
            }
        }
    }
}

/// Where a [`KafkaChangelog::replay_from`] ended.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Replayed {
    /// Records applied.
    pub(crate) records: u64,
    /// The offset to read from next: one past the last record applied
    /// (`from` when there was none).
    pub(crate) next: u64,
    /// The partition's first record was below `from`: nothing was applied.
    pub(crate) restarted: bool,
}

/// The changelog's producer: idempotent, `acks=all` (`acks_refused` has
/// turned any other value away), and gapless: an error that could leave a
/// gap in a partition's records (a later record stored after an earlier
/// one failed) stops the producer with a fatal error instead, so nothing
/// queued after the failed record is delivered. librdkafka does not cover
/// records that fail by `message.timeout.ms` with that guarantee: those,
/// like every failure, make the next flush fail and name them.
fn create_producer(
    config: &ClientConfig,
    deliveries: &Deliveries,
) -> Result<ThreadedProducer<Deliveries>, Error> {
    let mut config = config.clone();
    if config.get("request.required.acks").is_none() {
        config.set("acks", "all");
    }
    config.set("enable.idempotence", "true");
    // A transaction is the unit of all or nothing: a failed record makes
    // it abortable (the flush aborts it), which the gapless guarantee would
    // make fatal instead.
    if !is_transactional(&config) {
        config.set("enable.gapless.guarantee", "true");
    }
    config
        .set("linger.ms", "5")
        .create_with_context(deliveries.clone())
        .map_err(|e| kafka_err("producer", e))
}

/// Creates `topic` compacted (with `settings`; without, a missing topic is
/// an error), or checks that the existing one is.
fn ensure_compacted_topic(
    config: &ClientConfig,
    topic: &str,
    settings: Option<TopicSettings>,
    timeout: Duration,
) -> Result<(), Error> {
    use rdkafka::admin::{ConfigSource, ResourceSpecifier};
    let admin: AdminClient<DefaultClientContext> =
        config.create().map_err(|e| kafka_err("admin client", e))?;
    let opts = AdminOptions::new().operation_timeout(Some(timeout));
    if let Some(settings) = settings {
        let new = NewTopic::new(
            topic,
            settings.partitions,
            TopicReplication::Fixed(settings.replication_factor),
        )
        .set("cleanup.policy", "compact");
        let results = futures_executor::block_on(admin.create_topics([&new], &opts))
            .map_err(|e| kafka_err("create topic", e))?;
        for r in results {
            match r {
                Ok(_) => return Ok(()),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(kafka_err(&format!("create topic {t}"), code)),
            }
        }
    } else {
        topic_exists(config, topic, timeout)?;
    }
    // It exists: it must be compacted.
    let described = futures_executor::block_on(
        admin.describe_configs([&ResourceSpecifier::Topic(topic)], &opts),
    )
    .map_err(|e| kafka_err("describe topic", e))?;
    for r in described {
        let resource = r.map_err(|code| kafka_err(&format!("describe topic {topic}"), code))?;
        let policy = resource
            .get("cleanup.policy")
            .filter(|e| !matches!(e.source, ConfigSource::Unknown))
            .and_then(|e| e.value.clone())
            .unwrap_or_else(|| "delete".to_owned());
        if !policy.split(',').any(|p| p.trim() == "compact") {
            return Err(Error::changelog_msg(format!(
                "kafka: topic {topic} has cleanup.policy={policy}, not compact: old records would be deleted and a restore from it would be incomplete"
            )));
        }
    }
    Ok(())
}

/// Checks that `topic` exists, by a metadata request that does not create
/// it (a consumer's: `allow.auto.create.topics` is false).
fn topic_exists(config: &ClientConfig, topic: &str, timeout: Duration) -> Result<(), Error> {
    let mut config = config.clone();
    config.set("allow.auto.create.topics", "false");
    let consumer: BaseConsumer = config
        .create()
        .map_err(|e| kafka_err("metadata client", e))?;
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| kafka_err(&format!("metadata of {topic}"), e))?;
    let found = metadata
        .topics()
        .iter()
        .any(|t| t.name() == topic && t.error().is_none() && !t.partitions().is_empty());
    if found {
        Ok(())
    } else {
        Err(Error::changelog_msg(format!(
            "kafka: topic {topic} does not exist (a mistyped name? it is not created here)"
        )))
    }
}

impl Changelog for KafkaChangelog {
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        if let Some(why) = &self.broken {
            return Err(Error::changelog_msg(format!(
                "kafka: no transactional producer of {} since an abort ({why}): open the \
                 changelog again (and restore) to go on",
                self.topic
            )));
        }
        self.renew_if_stopped()?;
        if self.transactional && !self.in_transaction {
            self.producer
                .begin_transaction()
                .map_err(|e| kafka_err("begin transaction", e))?;
            self.in_transaction = true;
        }
        self.appended += 1;
        let mut record = BaseRecord::with_opaque_to(&self.topic, self.appended as usize)
            .key(key)
            .partition(self.partition);
        if let Some(v) = value {
            record = record.payload(v);
        }
        let deadline = Instant::now() + self.timeout;
        loop {
            match self.producer.send(record) {
                Ok(()) => return Ok(()),
                Err((e, back)) if Instant::now() < deadline && is_queue_full(&e) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(10));
                }
                Err((e, _)) => {
                    return Err(kafka_err(&format!("produce append #{}", self.appended), e))
                }
            }
        }
    }

    fn records(&self) -> Result<Vec<Record>, Error> {
        let mut out = Vec::new();
        self.replay(&mut |r| {
            out.push(r);
            Ok(())
        })?;
        Ok(out)
    }

    /// Streams the partition from the beginning until librdkafka reports
    /// its end (the high watermark it learned while fetching). A separately
    /// fetched watermark is not used: some Kafka-compatible brokers report it
    /// per batch, not per record. A record whose offset is not above the
    /// last one applied is skipped: one such broker (tansu 0.6.0 on SQLite)
    /// answered a fetch after compaction with the kept records several
    /// times over. A transient consumer error (a broker connection down
    /// for a moment: [`is_transient_kafka_error`]) is waited out. Fails when
    /// no record arrives for the timeout (30 s), however long the whole read
    /// takes.
    fn replay(&self, apply: &mut dyn FnMut(Record) -> Result<(), Error>) -> Result<u64, Error> {
        self.replay_from(0, apply).map(|r| r.records)
    }

    fn flush(&mut self) -> Result<(), Error> {
        let flushed = self.wait_for_deliveries().map_err(|e| {
            kafka_err(
                &format!(
                    "flush: {} record(s) of appends #{}..#{} still unacknowledged after {} s",
                    self.producer.in_flight_count(),
                    self.flushed + 1,
                    self.appended,
                    self.timeout.as_secs()
                ),
                e,
            )
        });
        self.renew_if_stopped()?;
        if self.transactional {
            return self.end_transaction(flushed);
        }
        // Failures first: they name the records. A stop is reported with
        // them, by the same flush: both cover this flush's appends, and a
        // later flush (a recovery's) must not fail again for them.
        let failures = self.take_failures();
        let stopped = self.stopped.take().map(|(code, reason)| {
            Error::changelog(
                format!(
                    "kafka: the producer of {} stopped ({reason}): appends #{}..#{} may not all be delivered",
                    self.topic,
                    self.flushed + 1,
                    self.appended
                ),
                code,
            )
        });
        if failures.is_err() || stopped.is_some() {
            self.flushed = self.appended;
        }
        failures?;
        if let Some(e) = stopped {
            return Err(e);
        }
        flushed?;
        self.flushed = self.appended;
        Ok(())
    }
}

impl KafkaChangelog {
    /// A transactional flush: the open transaction committed once every
    /// append is delivered, or aborted (a delivery failed, the wait timed
    /// out, the commit failed) and the flush fails: none of its appends,
    /// the write rule's tombstones among them, is then on the log for a
    /// `read_committed` reader (a restore).
    fn end_transaction(&mut self, flushed: Result<(), Error>) -> Result<(), Error> {
        if !self.in_transaction {
            self.take_failures()?;
            flushed?;
            self.flushed = self.appended;
            return Ok(());
        }
        self.in_transaction = false;
        let failed = self.take_failures().and(flushed);
        let aborted = |why: &str, this: &Self| {
            format!(
                "kafka: the transaction of appends #{}..#{} to {} was aborted ({why}): none of \
                 them is on the log for a read_committed reader",
                this.flushed + 1,
                this.appended,
                this.topic
            )
        };
        if let Err(e) = failed {
            self.abort();
            let message = aborted("a record was not delivered", self);
            self.flushed = self.appended;
            return Err(Error::changelog(message, e));
        }
        match self.producer.commit_transaction(self.timeout) {
            Ok(()) => {
                self.flushed = self.appended;
                Ok(())
            }
            Err(e) => {
                let abortable = matches!(&e, KafkaError::Transaction(t) if t.txn_requires_abort());
                // Fenced: a newer producer of the id, or the coordinator
                // that aborted the transaction once it outlived
                // `transaction.timeout.ms` (and bumped the epoch).
                let fenced = matches!(
                    e.rdkafka_error_code(),
                    Some(
                        RDKafkaErrorCode::Fenced
                            | RDKafkaErrorCode::ProducerFenced
                            | RDKafkaErrorCode::InvalidProducerEpoch
                    )
                );
                let message = if abortable {
                    self.abort();
                    aborted("the commit failed", self)
                } else if fenced {
                    aborted(
                        "the producer was fenced: a newer one of its id, or a transaction open \
                         longer than transaction.timeout.ms, which the coordinator aborted",
                        self,
                    )
                } else {
                    format!(
                        "kafka: the commit of appends #{}..#{} to {} failed, and whether it \
                         is on the log is not known: the log, not the store, is the truth now",
                        self.flushed + 1,
                        self.appended,
                        self.topic
                    )
                };
                self.flushed = self.appended;
                Err(Error::changelog(message, e))
            }
        }
    }

    /// Aborts the open transaction, forgets the delivery failures of its
    /// records (the abort purges those still queued: each reports a
    /// failure, which belongs to the aborted flush, not to the next), and
    /// starts a new producer of the same id: after a record the broker
    /// refused, librdkafka bumps the producer's epoch once the abort
    /// returns, and purged the first record of the next transaction while
    /// it did (seen with librdkafka 2.12 on Apache Kafka 4.4). A producer
    /// that cannot be made leaves the changelog failing every append.
    fn abort(&mut self) {
        let _ = self.producer.abort_transaction(self.timeout);
        let _ = self.wait_for_deliveries();
        let _ = self.take_failures();
        let renewed = create_producer(&self.config, &self.deliveries).and_then(|p| {
            p.init_transactions(self.timeout)
                .map_err(|e| kafka_err("init transactions", e))
                .map(|()| p)
        });
        match renewed {
            Ok(p) => self.producer = p,
            Err(e) => self.broken = Some(e.to_string()),
        }
    }
}

/// Whether a configuration names a `transactional.id`.
fn is_transactional(config: &ClientConfig) -> bool {
    config
        .get("transactional.id")
        .is_some_and(|id| !id.trim().is_empty())
}

/// Whether a consumer error is one librdkafka recovers from by itself: a
/// broker connection that dropped or is not up yet ("all broker
/// connections are down" is reported between the bootstrap connection
/// closing and the partition leader's opening), a request that timed out, a
/// leader that moved. A reader that meets one goes on polling; its progress
/// deadline, not the error, decides when to give up. Every other error is
/// final.
///
/// ```
/// use tombstone_crypt::kafka::is_transient_kafka_error;
/// use tombstone_crypt::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
///
/// let down = KafkaError::MessageConsumption(RDKafkaErrorCode::AllBrokersDown);
/// assert!(is_transient_kafka_error(&down));
/// let denied = KafkaError::MessageConsumption(RDKafkaErrorCode::TopicAuthorizationFailed);
/// assert!(!is_transient_kafka_error(&denied));
/// ```
pub fn is_transient_kafka_error(e: &KafkaError) -> bool {
    use RDKafkaErrorCode as C;
    matches!(
        e,
        KafkaError::MessageConsumption(
            C::AllBrokersDown
                | C::BrokerTransportFailure
                | C::Resolve
                | C::OperationTimedOut
                | C::RequestTimedOut
                | C::NetworkException
                | C::BrokerNotAvailable
                | C::LeaderNotAvailable
                | C::NotLeaderForPartition
        )
    )
}

fn is_queue_full(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
    )
}
