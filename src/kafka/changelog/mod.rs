//! A changelog on a Kafka topic ([`KafkaChangelog`]), the settings of the
//! topic it creates, and which consumer errors are transient.
//!
//! One file per job: this one holds the changelog, its opening and its
//! appends and flushes; `topic` (the topic created compacted or checked),
//! `delivery` (the producer, its deliveries, transactions) and `replay`
//! (the log read back).

use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::error::RDKafkaErrorCode;
use rdkafka::producer::{BaseRecord, Producer as _, ThreadedProducer};

use crate::error::Error;
use crate::store::{Changelog, Record};

mod delivery;
mod replay;
mod topic;

pub use delivery::is_transient_kafka_error;
use delivery::*;
pub(crate) use replay::Replayed;
pub use topic::TopicSettings;
use topic::*;

/// A Kafka error, kept as the cause; `what` says what the changelog was
/// doing.
fn kafka_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> Error {
    Error::changelog(format!("kafka: {what}"), e)
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
