//! [`TypedProducer`]: keys and values through their serializers, a key's
//! records under the write rule, writes in order through the line.

use core::fmt;
use core::marker::PhantomData;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::config::ClientConfig;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, Producer as _};

use super::line::*;
use super::outgoing::*;
use super::{in_place, kafka_err, Delivered};
use crate::error::Error;
use crate::kafka::record::encode_forms;
use crate::record_key::{KeyBinding, WriteRule};
use crate::serde::Serializer;
use crate::work::BlockingWork;

/// A typed producer: keys and values go through their serializers (plain,
/// [`EncryptingSerializer`](crate::EncryptingSerializer),
/// [`DeterministicSerializer`](crate::DeterministicSerializer)) into an
/// rdkafka `FutureProducer`.
///
/// **Partitions.** Every key goes to the murmur2 partition of its
/// plaintext bytes, the partition the Java client's default partitioner
/// and Kafka Streams choose, so a key written by them and by this producer
/// lives in one partition:
/// - a key that is not encrypted is one record, partitioned by librdkafka
///   with `partitioner=murmur2_random` (the Java client's murmur2 of the
///   key bytes), which this producer sets unless the configuration sets
///   `partitioner` itself (then yours is used, and a Java writer of the same
///   topic may put a key elsewhere);
/// - an encrypted key follows the write rule (see
///   [`KeyForms`](crate::record_key::KeyForms)): with a key keyset of
///   several enabled keys, a tombstone for each older form of the key goes
///   first, then the record under the primary form, all to the murmur2
///   partition of the **plaintext** key, computed here from the topic's
///   partition count, so a rotation never moves a key and a delete deletes
///   every form.
///
/// **Partition counts that change.** The partition count of a topic is read
/// from the broker and kept for an interval: the configuration's
/// `topic.metadata.refresh.interval.ms` (librdkafka's interval for the
/// metadata its own partitioner uses; 300 s when unset), or
/// [`with_partition_refresh`](TypedProducer::with_partition_refresh). A
/// delivery error saying the partition is unknown forgets it at once (and
/// a write refused before any of its records was queued is tried again,
/// once, in its place, with the count read again). The count is read when
/// a write's turn comes, never before the write has taken its place. Until a producer reads the new count it keeps
/// the old modulus: after partitions are added, a writer may put a key in
/// its old partition for up to that interval, and the records a key had
/// before stay where they were (see the [guide's Kafka chapter](crate::guide::kafka),
/// "Adding partitions").
///
/// Values are bound to the plaintext key ([`KeyBinding::Plaintext`], the
/// default; see [`with_binding`](TypedProducer::with_binding)).
///
/// Idempotence is on by default (`enable.idempotence=true`, so retries never
/// reorder a key's records); an explicit setting in the configuration wins
/// (read as librdkafka reads a boolean: `true`, `t`, `1`, any case), and
/// [`is_idempotent`](TypedProducer::is_idempotent) says which it is.
/// `acks` must be `all` (it is set when absent): a configuration with
/// `acks` or `request.required.acks` set to `0` or `1` is refused, since a
/// delivery report would then not mean the record is stored.
///
/// **Write order.** The writes of one producer reach the broker in the
/// order they were started (see [`send`](TypedProducer::send)), whatever
/// the caller does with their futures (awaits them in any order, drops
/// them, times them out) and whatever the queue does: a write whose
/// records the queue cannot take now (`queue.buffering.max.messages` or
/// `queue.buffering.max.kbytes` reached) waits in the producer's line, and
/// every write started after it goes behind it, never into the queue
/// directly; one writer thread of the producer's own queues the line, in
/// order, as the queue drains (for up to 30 s per write, then the write
/// fails with `QueueFull` and the next goes on). When nothing waits, a
/// write is queued at once, all its records in one go. Once queued,
/// librdkafka keeps that order on the broker per partition when the
/// producer is idempotent or has at most one request in flight
/// (`max.in.flight.requests.per.connection=1`). A producer with neither
/// (`enable.idempotence=false` and librdkafka's default of many requests
/// in flight), whose retries could land a record after a later one, sends
/// every record alone: the next is queued only once the broker
/// acknowledged it, across writes too (one round trip per record: set
/// `max.in.flight.requests.per.connection=1`, or keep idempotence, for
/// throughput). A write that fails (its future, if still there, says why)
/// has its records that were delivered stay; later writes still go out in
/// order after it.
pub struct TypedProducer<K: ?Sized, V: ?Sized, KS, VS> {
    producer: FutureProducer,
    key_ser: KS,
    value_ser: VS,
    idempotent: bool,
    queue_timeout: Duration,
    binding: KeyBinding,
    rule: WriteRule,
    partitions: std::sync::Arc<Mutex<PartitionCounts>>,
    line: std::sync::Arc<Line>,
    types: PhantomData<fn(&K, &V)>,
}

impl<K: ?Sized, V: ?Sized, KS, VS> fmt::Debug for TypedProducer<K, V, KS, VS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedProducer")
            .field("idempotent", &self.idempotent)
            .field("release", &self.line.release)
            .finish_non_exhaustive()
    }
}

/// How long a partition count is kept when the configuration does not say
/// (`topic.metadata.refresh.interval.ms`): librdkafka's default for that
/// setting, 5 minutes.
pub(super) const DEFAULT_PARTITION_REFRESH: Duration = Duration::from_secs(300);

impl<K, V, KS, VS> TypedProducer<K, V, KS, VS>
where
    K: ?Sized,
    V: ?Sized,
    KS: Serializer<K>,
    VS: Serializer<V>,
{
    /// A producer from `config` (your `bootstrap.servers` and security
    /// settings are kept) and a serializer for keys and one for values.
    /// Sets `enable.idempotence=true`, `acks=all` and
    /// `partitioner=murmur2_random` where the configuration does not set
    /// them.
    ///
    /// # Errors
    /// [`Error::Kafka`] if the configuration sets `acks` (or
    /// `request.required.acks`, `topic.acks`, `topic.request.required.acks`)
    /// to anything but `all`, or `queuing.strategy` (or
    /// `topic.queuing.strategy`) to anything but `fifo`, or rdkafka refuses
    /// it.
    pub fn new(config: &ClientConfig, key_ser: KS, value_ser: VS) -> Result<Self, Error> {
        let mut config = config.clone();
        if let Some(why) =
            crate::kafka::acks_refused(&config).or_else(|| crate::kafka::queuing_refused(&config))
        {
            return Err(Error::Kafka {
                detail: format!("create the producer: {why}"),
                cause: None,
            });
        }
        if config.get("acks").is_none() && config.get("request.required.acks").is_none() {
            config.set("acks", "all");
        }
        if config.get("partitioner").is_none() {
            config.set("partitioner", "murmur2_random");
        }
        let idempotent = match config.get("enable.idempotence") {
            // As librdkafka reads it (`1`, `t`, `TRUE` are true): a value
            // it refuses fails `create` below.
            Some(v) => crate::kafka::librdkafka_bool(v) == Some(true),
            None => {
                config.set("enable.idempotence", "true");
                true
            }
        };
        // librdkafka's default is 1,000,000 requests in flight.
        // `max.in.flight` is librdkafka's alias of the other: given both,
        // either may win, so every one given must be 1.
        let in_flight: Vec<&str> = ["max.in.flight.requests.per.connection", "max.in.flight"]
            .into_iter()
            .filter_map(|name| config.get(name))
            .collect();
        let one_in_flight = !in_flight.is_empty() && in_flight.iter().all(|v| v.trim() == "1");
        let release = if idempotent || one_in_flight {
            Release::Queued
        } else {
            Release::Acknowledged
        };
        let refresh = config
            .get("topic.metadata.refresh.interval.ms")
            .and_then(|ms| ms.trim().parse::<u64>().ok())
            .filter(|&ms| ms > 0)
            .map_or(DEFAULT_PARTITION_REFRESH, Duration::from_millis);
        // The line holds at most what librdkafka's queue holds by default
        // (100,000 messages, 1 GiB): a queue configured smaller still has
        // a line of that size behind it.
        let bounds = Bounds {
            records: 100_000,
            bytes: 1 << 30,
        };
        let producer: FutureProducer = config
            .create()
            .map_err(|e| kafka_err("create the producer", e))?;
        if config
            .get("transactional.id")
            .is_some_and(|id| !id.trim().is_empty())
        {
            // Fences an earlier producer of the same id, and aborts what it
            // left open.
            producer
                .init_transactions(Duration::from_secs(30))
                .map_err(|e| kafka_err("init transactions", e))?;
        }
        Ok(TypedProducer {
            producer,
            key_ser,
            value_ser,
            idempotent,
            queue_timeout: Duration::from_secs(30),
            binding: KeyBinding::default(),
            rule: WriteRule::default(),
            partitions: std::sync::Arc::new(Mutex::new(PartitionCounts::new(refresh))),
            line: std::sync::Arc::new(Line::new(release, bounds)),
            types: PhantomData,
        })
    }

    /// The same producer with a line of writes waiting for the queue that
    /// holds at most `records` records and `bytes` bytes of keys and values
    /// (default: 100,000 and 1 GiB, librdkafka's default queue bounds); a
    /// write
    /// that finds it full fails at once with `QueueFull` (see
    /// [`send`](TypedProducer::send)). Set before the first write.
    #[must_use]
    pub fn with_line_bounds(self, records: usize, bytes: usize) -> Self {
        let line = std::sync::Arc::new(Line::new(self.line.release, Bounds { records, bytes }));
        TypedProducer { line, ..self }
    }

    /// The same producer binding values to the key bytes that `binding`
    /// names ([`KeyBinding::Plaintext`] by default). Its readers must use
    /// the same.
    #[must_use]
    pub fn with_binding(self, binding: KeyBinding) -> Self {
        TypedProducer { binding, ..self }
    }

    /// The same producer keeping a topic's partition count (read from the
    /// broker for an encrypted key's partition) for `interval` before
    /// reading it again; the configuration's
    /// `topic.metadata.refresh.interval.ms` by default, else 300 s. Keep it
    /// no longer than that setting: plain keys are partitioned by
    /// librdkafka with the count it refreshes at that interval.
    #[must_use]
    pub fn with_partition_refresh(self, interval: Duration) -> Self {
        let partitions = std::sync::Arc::new(Mutex::new(PartitionCounts::new(interval)));
        TypedProducer { partitions, ..self }
    }

    /// The same producer following a broken write rule: the negative
    /// controls of the tests. Never use it.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn with_write_rule(self, rule: WriteRule) -> Self {
        TypedProducer { rule, ..self }
    }

    /// Whether the producer is idempotent (see the type's docs).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The rdkafka producer underneath (its metadata, say). To wait for
    /// every write, use [`flush`](TypedProducer::flush): this producer's
    /// own flush does not see writes still in the line.
    pub fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Sends `(key, value)` to `topic`; `None` is a tombstone, produced with
    /// no payload. Resolves once the broker acknowledged the record (and,
    /// with an encrypted key under a rotated key keyset, the tombstones of
    /// its older forms first): the result is where the record landed.
    ///
    /// **Order.** Writes are queued into librdkafka in the order they were
    /// started, whatever happens to their futures (see the type's docs). A
    /// write is started when its records are handed to the producer: in
    /// its first poll, before anything is awaited. A KMS call it needs (a
    /// new data key) runs in that poll too, never awaited: on a
    /// multi-thread tokio runtime in `block_in_place` (the worker's other
    /// tasks move to another thread meanwhile); on a current-thread runtime
    /// or another executor inline, holding up that runtime for the call,
    /// once per data key. An encrypted key's partition count
    /// is never awaited there: when the count kept is older than the
    /// refresh interval, the write takes its place first and the count is
    /// read when its turn comes (holding every later write behind it). A
    /// future never polled has started nothing, so a later write polled
    /// first goes first.
    ///
    /// **A dropped future.** Once a write is started, it goes out whole and
    /// in its place, whether or not its future is still polled: a dropped
    /// future (a timeout, a `select!`) cancels nothing and reorders
    /// nothing; to know it landed, [`flush`](TypedProducer::flush). A
    /// future dropped before its first poll has sent nothing. What no
    /// write survives:
    /// the process ending before its records are queued and delivered.
    ///
    /// **A full line.** Writes waiting behind a full queue (a broker that
    /// does not answer) are held in the producer's line, which holds at
    /// most 100,000 records and 1 GiB of keys and values (librdkafka's own
    /// default queue bounds, whatever the queue is set to;
    /// [`with_line_bounds`](TypedProducer::with_line_bounds) sets others).
    /// A write that finds it full fails at once, in its first poll, with
    /// `QueueFull` (an [`Error::Kafka`] whose source is rdkafka's
    /// `QueueFull`), before it takes a place: nothing of it was sent, and
    /// the writes started before it keep their order. A fire-and-forget
    /// caller (each future polled once and dropped) sees nothing of that
    /// failure: its write was dropped, and memory stays bounded; to know,
    /// keep the futures, or [`flush`](TypedProducer::flush) and read
    /// back.
    ///
    /// # Errors
    /// A serializer failed, or [`Error::Kafka`] if a record was not
    /// delivered. Outside a transaction the tombstones of the key's older
    /// forms sent before it may have been: a failed write can leave the key
    /// deleted; send it again. In a transaction
    /// ([`begin_transaction`](TypedProducer::begin_transaction)), abort it:
    /// nothing of the write is then seen by a `read_committed` reader.
    pub async fn send(&self, topic: &str, key: &K, value: Option<&V>) -> Result<Delivered, Error> {
        self.send_with(topic, key, value, None, &[]).await
    }

    /// [`send`](TypedProducer::send) to a given partition (`None`: the
    /// murmur2 partition of the plaintext key, see the type's docs) with
    /// headers, kept on a tombstone too (and on the tombstones of older
    /// forms).
    ///
    /// # Errors
    /// As [`send`](TypedProducer::send).
    pub async fn send_with(
        &self,
        topic: &str,
        key: &K,
        value: Option<&V>,
        partition: Option<i32>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Result<Delivered, Error> {
        // A KMS call for a new data key runs here, in this poll, so that the
        // write takes its place in the producer's order before anything is
        // awaited (awaited on the blocking pool, a later write polled
        // meanwhile would go first): on a multi-thread runtime in
        // `block_in_place` (the worker's other tasks move on), elsewhere
        // inline. The encryption below then finds the key.
        let value_work = value.and_then(|_| self.value_ser.blocking_work());
        if let Some(work) = BlockingWork::both(self.key_ser.blocking_work(), value_work) {
            in_place(work)?;
        }
        let forms = self
            .key_ser
            .key_forms(&crate::context::Context::new(topic), key)?
            .with_rule(self.rule);
        let headers = (!headers.is_empty()).then(|| {
            let mut h = OwnedHeaders::new_with_capacity(headers.len());
            for (name, value) in headers {
                h = h.insert(Header {
                    key: name,
                    value: *value,
                });
            }
            h
        });
        // The partition count chooses an encrypted key's partition; an
        // explicit partition wins over it (and needs no lookup). The count
        // is read (when the one kept is not fresh) once the write's turn
        // comes, never awaited here: the write takes its place in the
        // producer's order now, in this poll.
        let counted = partition.is_none() && forms.is_encrypted();
        let records = encode_forms(topic, 1, self.binding, &forms, &self.value_ser, value)?;
        let choose = counted.then(|| Choose {
            // The positive murmur2 hash itself: below 2^31.
            hash: forms
                .partition(u32::MAX)
                .and_then(|p| u32::try_from(p).ok())
                .unwrap_or(0),
            counts: std::sync::Arc::clone(&self.partitions),
            chosen: None,
            retried: false,
        });
        let out = Outgoing {
            producer: self.producer.clone(),
            topic: topic.to_owned(),
            records,
            partition,
            headers,
            queue_timeout: self.queue_timeout,
            queued: Vec::new(),
            next: 0,
            choose,
        };
        self.deliver(out).await.map_err(|failure| {
            // A delivery report saying the partition is unknown: the count
            // is read again for the next write.
            if failure.unknown_partition {
                if let Ok(mut counts) = self.partitions.lock() {
                    counts.forget(topic);
                }
            }
            failure.error
        })
    }

    /// Hands a write's records to the producer's line (see
    /// [`send`](TypedProducer::send)).
    async fn deliver(&self, out: Outgoing) -> Result<Delivered, SendFailure> {
        match self.line.hand(out) {
            Err(failure) => Err(failure),
            Ok(Hand::Direct(out)) => out.finish().await,
            Ok(Hand::Behind(answer)) => match answer.await {
                Ok(Ok(Handed::Queued(out))) => out.finish().await,
                Ok(Ok(Handed::Delivered(delivered))) => Ok(delivered),
                Ok(Err(failure)) => Err(failure),
                Err(_) => Err(SendFailure {
                    error: Error::Kafka {
                        detail: "the producer's writer thread ended before the write was released"
                            .to_owned(),
                        cause: None,
                    },
                    unknown_partition: false,
                    nothing_queued: false,
                }),
            },
        }
    }

    /// Waits until every write handed over so far is queued (writes still
    /// in the line behind a full queue included), then flushes the
    /// producer: when it returns `Ok`, every write started before the call
    /// was acknowledged, futures dropped or not. Blocks the calling thread
    /// (as rdkafka's `flush`): from async code, call it on a blocking task.
    ///
    /// Flushing [`producer`](TypedProducer::producer) directly does not
    /// wait for writes still in the line.
    ///
    /// # Errors
    /// [`Error::Kafka`] if `timeout` passed first, or the flush failed.
    pub fn flush(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = self.line_queued("flush", timeout)?;
        self.producer
            .flush(deadline.saturating_duration_since(Instant::now()))
            .map_err(|e| kafka_err("flush", e))
    }

    /// Waits until every write in the line is queued into librdkafka, for
    /// at most `timeout`; the deadline, for what comes next.
    fn line_queued(&self, what: &str, timeout: Duration) -> Result<Instant, Error> {
        let deadline = Instant::now() + timeout;
        if self.line.wait_idle(deadline) {
            return Ok(deadline);
        }
        Err(Error::Kafka {
            detail: format!(
                "{what}: writes were still waiting for the producer's queue after {timeout:?}"
            ),
            cause: None,
        })
    }

    /// Begins a transaction (the configuration names a `transactional.id`:
    /// [`new`](TypedProducer::new) then initialized it, fencing an earlier
    /// producer of the id). Every write started until
    /// [`commit_transaction`](TypedProducer::commit_transaction) or
    /// [`abort_transaction`](TypedProducer::abort_transaction) is in it,
    /// the write rule's tombstones of a key's older forms with the record
    /// they precede: committed together, or aborted together, so a refused
    /// or abandoned write never leaves a key deleted for a `read_committed`
    /// reader.
    ///
    /// # Errors
    /// [`Error::Kafka`]: not transactional, a transaction already open, or
    /// the producer was fenced.
    pub fn begin_transaction(&self) -> Result<(), Error> {
        self.producer
            .begin_transaction()
            .map_err(|e| kafka_err("begin transaction", e))
    }

    /// Commits the open transaction once every write started in it is
    /// queued (writes still in the line included, as
    /// [`flush`](TypedProducer::flush) waits for them) and delivered. A
    /// write that failed makes the commit fail; then
    /// [`abort_transaction`](TypedProducer::abort_transaction).
    ///
    /// # Errors
    /// [`Error::Kafka`]: the wait or the commit failed or timed out.
    pub fn commit_transaction(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = self.line_queued("commit", timeout)?;
        self.producer
            .commit_transaction(deadline.saturating_duration_since(Instant::now()))
            .map_err(|e| kafka_err("commit transaction", e))
    }

    /// Aborts the open transaction: none of its writes is seen by a
    /// `read_committed` reader. Writes still in the line are queued first
    /// (they are aborted with it). After a write the broker refused,
    /// librdkafka bumps the producer's epoch once the abort returns, and
    /// may fail a write of the next transaction meanwhile (`PurgeQueue`):
    /// its future says so; [`KafkaChangelog`](crate::kafka::KafkaChangelog)
    /// starts a new producer after an abort instead.
    ///
    /// # Errors
    /// [`Error::Kafka`]: the abort failed or timed out.
    pub fn abort_transaction(&self, timeout: Duration) -> Result<(), Error> {
        let deadline = Instant::now() + timeout;
        let _ = self.line.wait_idle(deadline);
        self.producer
            .abort_transaction(deadline.saturating_duration_since(Instant::now()))
            .map_err(|e| kafka_err("abort transaction", e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_refresh_interval_is_the_configurations_metadata_interval() {
        let refresh_of = |ms: Option<&str>| {
            let mut config = ClientConfig::new();
            config.set("bootstrap.servers", "127.0.0.1:1");
            if let Some(ms) = ms {
                config.set("topic.metadata.refresh.interval.ms", ms);
            }
            let p: TypedProducer<str, str, crate::Utf8, crate::Utf8> =
                TypedProducer::new(&config, crate::Utf8, crate::Utf8).unwrap();
            let refresh = p.partitions.lock().unwrap().refresh;
            refresh
        };
        assert_eq!(refresh_of(None), DEFAULT_PARTITION_REFRESH);
        assert_eq!(refresh_of(Some("1000")), Duration::from_secs(1));
        // librdkafka's -1 turns its periodic refresh off; ours stays bounded.
        assert_eq!(refresh_of(Some("-1")), DEFAULT_PARTITION_REFRESH);
    }
}
