//! Typed async Kafka clients over rdkafka's `FutureProducer` and
//! `StreamConsumer` (feature `kafka`), built on the sans-IO
//! [`encode_write`](crate::kafka::encode_write) / [`decode_message`](crate::kafka::decode_message).
//!
//! A `None` value is produced with no payload at all (Kafka's null), with
//! its headers; a consumed record without a payload is `None` without
//! calling the value deserializer.

use core::fmt;
use core::marker::PhantomData;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures_util::stream::{Stream, StreamExt as _};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{BorrowedMessage, Header, Headers as _, Message as _, OwnedHeaders};
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _};
use rdkafka::TopicPartitionList;

use super::record::{decode_message, encode_forms};
use crate::error::Error;
use crate::record_key::{KeyBinding, WriteRule};
use crate::serde::{Deserializer, Serializer};
use crate::work::BlockingWork;

fn kafka_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> Error {
    Error::Kafka {
        detail: what.to_owned(),
        cause: Some(std::sync::Arc::new(e)),
    }
}

/// Runs `work` on tokio's blocking pool (a KMS call must not hold up the
/// worker, nor, on a current-thread runtime, everything else). Outside a
/// tokio runtime (another executor) there is no such pool: the work runs
/// inline, as a synchronous call would.
async fn off_the_worker(work: BlockingWork) -> Result<(), Error> {
    blocking(move || work.run())
        .await
        .map_err(|e| Error::kms("the blocking task of a KMS call ended", e))?
}

/// Runs a write's `work` where it stands, before the write takes its place:
/// on a multi-thread tokio runtime in `block_in_place` (the worker hands
/// its other tasks to another thread for the call), on a current-thread
/// runtime or outside tokio inline (the runtime waits for the KMS call,
/// once per data key). Never awaited: a write that awaited its KMS call
/// would be overtaken by a later write polled meanwhile.
fn in_place(work: BlockingWork) -> Result<(), Error> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| work.run())
        }
        _ => work.run(),
    }
}

/// Runs `f` on tokio's blocking pool, or inline outside a tokio runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(f).await,
        Err(_) => Ok(f()),
    }
}

/// Where a produced record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The partition.
    pub partition: i32,
    /// The offset in the partition.
    pub offset: i64,
}

/// Record headers: names and optional values, in order.
pub type RecordHeaders = Vec<(String, Option<Vec<u8>>)>;

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
const DEFAULT_PARTITION_REFRESH: Duration = Duration::from_secs(300);

/// Partition counts by topic, each kept for `refresh` after it was read
/// from the broker. The clock is the caller's: `now` comes in.
#[derive(Debug)]
struct PartitionCounts {
    refresh: Duration,
    counts: HashMap<String, (u32, Instant)>,
}

impl PartitionCounts {
    fn new(refresh: Duration) -> Self {
        PartitionCounts {
            refresh,
            counts: HashMap::new(),
        }
    }

    /// The count of `topic` if it was read less than `refresh` before `now`.
    fn fresh(&self, topic: &str, now: Instant) -> Option<u32> {
        let (n, read_at) = self.counts.get(topic)?;
        (now.saturating_duration_since(*read_at) < self.refresh).then_some(*n)
    }

    /// `topic` has `n` partitions, read from the broker at `now`.
    fn record(&mut self, topic: &str, n: u32, now: Instant) {
        self.counts.insert(topic.to_owned(), (n, now));
    }

    /// Forgets the count of `topic`: the next write reads it again.
    fn forget(&mut self, topic: &str) {
        self.counts.remove(topic);
    }
}

/// Whether a produce error says the partition does not exist (a count
/// that changed under the producer, a topic re-created).
fn is_unknown_partition(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(
            RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopicOrPartition
        )
    )
}

/// Why a write's records were not all delivered.
struct SendFailure {
    error: Error,
    /// The partition was unknown.
    unknown_partition: bool,
    /// No record of the write reached the producer's queue.
    nothing_queued: bool,
}

/// One write's records, owned, on their way: what is queued and what is
/// left. It owns everything it needs, so the part that waits can run in a
/// task of its own, whatever happens to the caller's future.
struct Outgoing {
    producer: FutureProducer,
    topic: String,
    records: Vec<super::KafkaRecord>,
    partition: Option<i32>,
    headers: Option<OwnedHeaders>,
    queue_timeout: Duration,
    /// Queued records' delivery reports, in order.
    queued: Vec<DeliveryFuture>,
    /// The next record to queue.
    next: usize,
    /// An encrypted key's partition, still to be chosen from the topic's
    /// partition count (read when the write's turn comes, never awaited
    /// before the write is handed over).
    choose: Option<Choose>,
}

/// How an encrypted key's partition is chosen once the partition count is
/// known: the murmur2 hash of its plaintext (positive), modulo the count.
struct Choose {
    hash: u32,
    counts: std::sync::Arc<Mutex<PartitionCounts>>,
    /// Chosen already: the count it was chosen from.
    chosen: Option<u32>,
    /// Chosen again after the partition was unknown (once at most).
    retried: bool,
}

impl Outgoing {
    fn record(&self, i: usize) -> FutureRecord<'_, [u8], [u8]> {
        let record = &self.records[i];
        let mut future = FutureRecord::to(&self.topic).key(&record.key[..]);
        if let Some(p) = &record.payload {
            future = future.payload(&p[..]);
        }
        if let Some(p) = self.partition.or(record.partition) {
            future = future.partition(p);
        }
        if let Some(h) = &self.headers {
            future = future.headers(h.clone());
        }
        future
    }

    fn choose_with(&mut self, n: u32) {
        if let Some(choose) = &mut self.choose {
            let partition = i32::try_from(choose.hash % n).unwrap_or(0);
            for record in &mut self.records {
                record.partition = Some(partition);
            }
            choose.chosen = Some(n);
        }
    }

    /// Whether the partition is chosen (or needs no choosing), from a
    /// partition count kept fresh if need be; never waits.
    fn choose_now(&mut self) -> bool {
        let Some(choose) = &self.choose else {
            return true;
        };
        if choose.chosen.is_some() {
            return true;
        }
        let fresh = choose
            .counts
            .lock()
            .ok()
            .and_then(|m| m.fresh(&self.topic, Instant::now()));
        match fresh {
            Some(n) => {
                self.choose_with(n);
                true
            }
            None => false,
        }
    }

    /// Chooses the partition, reading the partition count from the broker
    /// when the one kept is not fresh (on the writer thread).
    fn choose_waiting(&mut self) -> Result<(), SendFailure> {
        if self.choose_now() {
            return Ok(());
        }
        let nothing = |detail: String| SendFailure {
            error: Error::Kafka {
                detail,
                cause: None,
            },
            unknown_partition: false,
            nothing_queued: true,
        };
        let md = self
            .producer
            .client()
            .fetch_metadata(Some(&self.topic), self.queue_timeout)
            .map_err(|e| SendFailure {
                error: kafka_err(&format!("read the partitions of {}", self.topic), e),
                unknown_partition: false,
                nothing_queued: true,
            })?;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == self.topic)
            .filter(|t| t.error().is_none())
            .map_or(0, |t| t.partitions().len());
        let n = u32::try_from(n).unwrap_or(0);
        if n == 0 {
            return Err(nothing(format!(
                "the topic {} has no partitions the broker reports (create it first): an encrypted key's partition is chosen from the partition count",
                self.topic
            )));
        }
        if let Some(choose) = &self.choose {
            if let Ok(mut m) = choose.counts.lock() {
                m.record(&self.topic, n, Instant::now());
            }
        }
        self.choose_with(n);
        Ok(())
    }

    /// Whether `failure` (an unknown partition, nothing of the write
    /// queued) lets the write choose its partition again from a count read
    /// anew, once: in its place, on the writer thread. Forgets the count.
    fn choose_again(&mut self, failure: &SendFailure) -> bool {
        if !(failure.unknown_partition && failure.nothing_queued) {
            return false;
        }
        let Some(choose) = &mut self.choose else {
            return false;
        };
        if let Ok(mut m) = choose.counts.lock() {
            m.forget(&self.topic);
        }
        if choose.retried {
            return false;
        }
        choose.retried = true;
        choose.chosen = None;
        true
    }

    fn failure(&self, error: KafkaError) -> SendFailure {
        SendFailure {
            unknown_partition: is_unknown_partition(&error),
            nothing_queued: self.queued.is_empty() && self.next == 0,
            error: kafka_err(&format!("produce to {}", self.topic), error),
        }
    }

    /// Queues every record it can now, in order, without waiting: stops at
    /// a full queue. On an idempotent producer the records then go out in
    /// this order whatever happens to any future.
    fn queue_now(&mut self) -> Result<(), SendFailure> {
        if !self.choose_now() {
            // The partition count is to be read first: on the writer
            // thread, in the write's place.
            return Ok(());
        }
        while self.next < self.records.len() {
            match self.producer.send_result(self.record(self.next)) {
                Ok(delivery) => {
                    self.queued.push(delivery);
                    self.next += 1;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => break,
                Err((e, _)) => return Err(self.failure(e)),
            }
        }
        Ok(())
    }

    fn is_queued(&self) -> bool {
        self.next == self.records.len()
    }

    /// Waits for the queued records' delivery reports, in order (every
    /// record of the write is queued: see [`Line`]).
    async fn finish(mut self) -> Result<Delivered, SendFailure> {
        let mut delivered = None;
        for queued in std::mem::take(&mut self.queued) {
            delivered = Some(self.delivery(queued.await)?);
        }
        if !self.is_queued() {
            return Err(SendFailure {
                error: Error::Kafka {
                    detail: format!(
                        "produce to {}: a write's records were not all queued",
                        self.topic
                    ),
                    cause: None,
                },
                unknown_partition: false,
                nothing_queued: false,
            });
        }
        delivered.ok_or_else(|| SendFailure {
            error: Error::Kafka {
                detail: format!("produce to {}: no record to send", self.topic),
                cause: None,
            },
            unknown_partition: false,
            nothing_queued: true,
        })
    }

    /// Queues the rest of the write, in order, waiting while the queue is
    /// full (on the writer thread, never on a runtime's worker), at most
    /// the producer's queue timeout.
    fn queue_waiting(&mut self) -> Result<(), SendFailure> {
        let deadline = Instant::now() + self.queue_timeout;
        let mut pause = Duration::from_millis(1);
        loop {
            self.choose_waiting()?;
            match self.queue_now() {
                Ok(()) => {}
                Err(failure) if self.choose_again(&failure) => continue,
                Err(failure) => return Err(failure),
            }
            if self.is_queued() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(
                    self.failure(KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull))
                );
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(50));
        }
    }

    /// Sends the write one record at a time, each acknowledged before the
    /// next is queued (on the writer thread).
    fn deliver_one_by_one(mut self) -> Result<Delivered, SendFailure> {
        let mut delivered = None;
        self.choose_waiting()?;
        while !self.is_queued() {
            let before = self.next;
            let deadline = Instant::now() + self.queue_timeout;
            let mut pause = Duration::from_millis(1);
            while self.next == before {
                match self.producer.send_result(self.record(self.next)) {
                    Ok(report) => {
                        self.next += 1;
                        delivered = Some(self.delivery(futures_executor::block_on(report))?);
                    }
                    Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _))
                        if Instant::now() < deadline =>
                    {
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(50));
                    }
                    Err((e, _)) => {
                        let failure = self.failure(e);
                        if self.choose_again(&failure) {
                            self.choose_waiting()?;
                        } else {
                            return Err(failure);
                        }
                    }
                }
            }
        }
        delivered.ok_or_else(|| SendFailure {
            error: Error::Kafka {
                detail: format!("produce to {}: no record to send", self.topic),
                cause: None,
            },
            unknown_partition: false,
            nothing_queued: true,
        })
    }

    fn delivery<E>(
        &self,
        report: Result<OwnedDeliveryResult, E>,
    ) -> Result<Delivered, SendFailure> {
        match report {
            Ok(result) => self.delivered(result),
            Err(_) => Err(SendFailure {
                error: Error::Kafka {
                    detail: format!(
                        "produce to {}: the producer was closed before the record's delivery report",
                        self.topic
                    ),
                    cause: None,
                },
                unknown_partition: false,
                nothing_queued: false,
            }),
        }
    }

    fn delivered(&self, result: OwnedDeliveryResult) -> Result<Delivered, SendFailure> {
        match result {
            Ok(d) => Ok(Delivered {
                partition: d.partition,
                offset: d.offset,
            }),
            Err((e, _)) => {
                let mut failure = self.failure(e);
                failure.nothing_queued = false;
                Err(failure)
            }
        }
    }
}

/// How a producer's writes reach the broker in the order they were
/// started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Release {
    /// A write is released once all its records are queued: librdkafka
    /// keeps the queue's order per partition (idempotent, or at most one
    /// request in flight per connection).
    Queued,
    /// A write is released once its records are acknowledged, one at a
    /// time: a producer that is neither idempotent nor limited to one
    /// request in flight, whose retries could reorder queued records.
    Acknowledged,
}

/// What the writer thread hands a write's future back.
enum Handed {
    /// Every record queued: their delivery reports are still to come.
    Queued(Outgoing),
    /// Every record acknowledged.
    Delivered(Delivered),
}

type Reply = Result<Handed, SendFailure>;

/// A write handed to the producer.
enum Hand {
    /// Every record queued at once, nothing ahead of it.
    Direct(Outgoing),
    /// Behind earlier writes (or a full queue): the writer thread answers.
    Behind(futures_channel::oneshot::Receiver<Reply>),
}

/// A write waiting in the line, with where to answer (nowhere, once its
/// future is dropped: the write goes on).
struct Waiting {
    out: Outgoing,
    reply: futures_channel::oneshot::Sender<Reply>,
}

#[derive(Default)]
struct LineState {
    /// Writes not yet taken by the writer thread, in the order they were
    /// handed over.
    waiting: std::collections::VecDeque<Waiting>,
    /// A writer thread is working through the line (the write it took from
    /// the front included): a new write goes behind it.
    draining: bool,
    /// The records and bytes (keys and values) of the writes waiting.
    records: usize,
    bytes: usize,
}

/// How much a producer's line holds at most: records and bytes (keys and
/// values) of the writes waiting for the queue. A write that finds it full
/// is refused at once, `QueueFull`, before it takes a place.
#[derive(Clone, Copy, Debug)]
struct Bounds {
    records: usize,
    bytes: usize,
}

impl Outgoing {
    /// The records and bytes (keys and values) of the write.
    fn weight(&self) -> (usize, usize) {
        let bytes = self
            .records
            .iter()
            .map(|r| r.key.len() + r.payload.as_ref().map_or(0, Vec::len))
            .sum();
        (self.records.len(), bytes)
    }
}

/// A producer's writes, in the order they were handed over: one writer
/// thread queues into librdkafka (or, with [`Release::Acknowledged`],
/// delivers) a write only once every earlier one is released, so a write
/// that finds the queue full holds back every later one, and a write's
/// future, dropped or not, changes nothing of that.
struct Line {
    release: Release,
    bounds: Bounds,
    state: Mutex<LineState>,
    /// Signalled when the line is empty and no writer thread runs.
    idle: std::sync::Condvar,
}

impl Line {
    fn new(release: Release, bounds: Bounds) -> Self {
        Line {
            release,
            bounds,
            state: Mutex::new(LineState::default()),
            idle: std::sync::Condvar::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LineState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands `out` over: queued at once when nothing is ahead of it, its
    /// partition is known and the queue takes it, else behind the others.
    fn hand(self: &std::sync::Arc<Self>, mut out: Outgoing) -> Result<Hand, SendFailure> {
        let mut state = self.lock();
        if self.release == Release::Queued && !state.draining {
            // Nothing ahead: queue now, under the lock, so no later write
            // can pass.
            match out.queue_now() {
                Ok(()) if out.is_queued() => return Ok(Hand::Direct(out)),
                Ok(()) => {}
                // Its partition chosen again from a count read anew, on
                // the writer thread, in its place.
                Err(failure) if out.choose_again(&failure) => {}
                Err(failure) => return Err(failure),
            }
        }
        let (records, bytes) = out.weight();
        if state.draining {
            // Behind others: refused at once when the line is full. Nothing
            // of it was queued (the queue is tried only with nothing
            // ahead), so the writes that did start keep their order.
            let full = state.records.saturating_add(records) > self.bounds.records
                || state.bytes.saturating_add(bytes) > self.bounds.bytes;
            if full && !state.waiting.is_empty() {
                return Err(SendFailure {
                    error: kafka_err(
                        &format!(
                            "produce to {}: the producer's line is full ({} writes, {} records, {} bytes \
                             waiting for the queue; at most {} records and {} bytes): refused before it \
                             took a place",
                            out.topic,
                            state.waiting.len(),
                            state.records,
                            state.bytes,
                            self.bounds.records,
                            self.bounds.bytes
                        ),
                        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull),
                    ),
                    unknown_partition: false,
                    nothing_queued: true,
                });
            }
        }
        let (reply, answer) = futures_channel::oneshot::channel();
        let topic = out.topic.clone();
        state.records = state.records.saturating_add(records);
        state.bytes = state.bytes.saturating_add(bytes);
        state.waiting.push_back(Waiting { out, reply });
        if !state.draining {
            let line = std::sync::Arc::clone(self);
            let started = std::thread::Builder::new()
                .name("tombstone-crypt-writer".to_owned())
                .spawn(move || line.drain());
            if let Err(e) = started {
                let popped = state.waiting.pop_back();
                if let Some(w) = &popped {
                    let (records, bytes) = w.out.weight();
                    state.records = state.records.saturating_sub(records);
                    state.bytes = state.bytes.saturating_sub(bytes);
                }
                let nothing_queued =
                    popped.is_none_or(|w| w.out.queued.is_empty() && w.out.next == 0);
                return Err(SendFailure {
                    error: kafka_err(&format!("produce to {topic}: start the writer thread"), e),
                    unknown_partition: false,
                    nothing_queued,
                });
            }
            state.draining = true;
        }
        Ok(Hand::Behind(answer))
    }

    /// The writer thread: releases the waiting writes one after the other,
    /// then ends when the line is empty.
    fn drain(&self) {
        loop {
            let next = {
                let mut state = self.lock();
                match state.waiting.pop_front() {
                    Some(w) => {
                        let (records, bytes) = w.out.weight();
                        state.records = state.records.saturating_sub(records);
                        state.bytes = state.bytes.saturating_sub(bytes);
                        w
                    }
                    None => {
                        state.draining = false;
                        self.idle.notify_all();
                        return;
                    }
                }
            };
            let Waiting { mut out, reply } = next;
            let result = match self.release {
                Release::Queued => out.queue_waiting().map(|()| Handed::Queued(out)),
                Release::Acknowledged => out.deliver_one_by_one().map(Handed::Delivered),
            };
            // A dropped future no longer listens: its write is released all
            // the same.
            let _ = reply.send(result);
        }
    }

    /// Waits until every write handed over is released (or `deadline`).
    fn wait_idle(&self, deadline: Instant) -> bool {
        let mut state = self.lock();
        while state.draining {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .idle
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }
}

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
        if let Some(why) = super::acks_refused(&config).or_else(|| super::queuing_refused(&config))
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
            Some(v) => super::librdkafka_bool(v) == Some(true),
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

/// A consumed, decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord<K, V> {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The timestamp (milliseconds since the epoch), if the record has one.
    pub timestamp: Option<i64>,
    /// The headers, in order.
    pub headers: RecordHeaders,
    /// The key.
    pub key: K,
    /// The value; `None` for a tombstone (no payload).
    pub value: Option<V>,
}

/// What a [`TypedConsumer`] hands a record it cannot decode, once
/// [`on_undecodable`](TypedConsumer::on_undecodable) is set: the raw record
/// (to send on to a dead-letter topic, say) and the [`Error::Record`] that
/// names it. `Ok(())` goes on to the next record; an error is what `recv`
/// (or the stream) returns.
pub type UndecodableHook =
    Box<dyn Fn(&BorrowedMessage<'_>, &Error) -> Result<(), Error> + Send + Sync>;

/// A typed consumer over rdkafka's `StreamConsumer`: every record is decoded
/// with the topic and the record key (its plaintext by default,
/// [`KeyBinding`]) as context.
///
/// The reading rule: replayed in order, a key's state is its last record,
/// whatever form of an encrypted key it came under. Writers that follow
/// the write rule ([`KeyForms`](crate::record_key::KeyForms)) put the tombstones of a
/// key's older forms before its record, so the last record of a write is
/// the write itself, and a replaying consumer agrees with a store restored
/// from the topic.
///
/// A record that cannot be decoded (a value that does not decrypt, a
/// plaintext value under [`Unencrypted::Reject`](crate::Unencrypted)) is
/// never skipped silently: [`recv`](TypedConsumer::recv) returns
/// [`Error::Record`], naming its topic, partition and offset. The consumer
/// has moved past it: call `recv` again to go on, or stop. To go on
/// without handling the error at each call site, set a hook with
/// [`on_undecodable`](TypedConsumer::on_undecodable): it gets each such
/// record, raw, and decides.
pub struct TypedConsumer<K, V, KD, VD> {
    consumer: StreamConsumer,
    key_de: KD,
    value_de: VD,
    on_undecodable: Option<UndecodableHook>,
    binding: KeyBinding,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V, KD, VD> fmt::Debug for TypedConsumer<K, V, KD, VD> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedConsumer")
            .field("on_undecodable", &self.on_undecodable.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, V, KD, VD> TypedConsumer<K, V, KD, VD>
where
    KD: Deserializer<K>,
    VD: Deserializer<V>,
{
    /// A consumer from `config` (it must set `group.id`; your security
    /// settings are kept) and a deserializer for keys and one for values.
    ///
    /// # Errors
    /// [`Error::Kafka`] if rdkafka refuses the configuration.
    pub fn new(config: &ClientConfig, key_de: KD, value_de: VD) -> Result<Self, Error> {
        let consumer: StreamConsumer = config
            .create()
            .map_err(|e| kafka_err("create the consumer", e))?;
        Ok(TypedConsumer {
            consumer,
            key_de,
            value_de,
            on_undecodable: None,
            binding: KeyBinding::default(),
            types: PhantomData,
        })
    }

    /// The same consumer reading values bound to the key bytes that
    /// `binding` names ([`KeyBinding::Plaintext`] by default), as the
    /// topic's writers bound them.
    #[must_use]
    pub fn with_binding(self, binding: KeyBinding) -> Self {
        TypedConsumer { binding, ..self }
    }

    /// Hands every record that does not decode to `hook` instead of
    /// returning it as an error: the hook gets the raw record and the
    /// [`Error::Record`] naming it; `Ok(())` skips the record (the hook has
    /// kept it: a dead-letter topic, a log), an error stops `recv` or the
    /// stream with that error.
    ///
    /// A cause of [`Error::Kms`] may pass (the KMS was unreachable for a
    /// data key not yet cached) or not (the KMS refuses a forged or foreign
    /// encrypted data key): the error does not tell which. A hook that
    /// returns the error stops the consumer at that record, and a restart
    /// meets it again; the example below dead-letters everything, saying
    /// which were KMS failures, so they can be replayed once the KMS is
    /// back.
    ///
    /// The hook is synchronous and runs on the task that polls the
    /// consumer: keep it short. To dead-letter through Kafka, enqueue with
    /// a non-blocking producer (rdkafka's `ThreadedProducer`) and, if the
    /// dead letter must not be lost, commit offsets only after its
    /// delivery: with `enable.auto.commit` the offset moves past the record
    /// when `recv` returns the next one.
    ///
    /// ```no_run
    /// # use tombstone_crypt::{Bytes, DecryptingDeserializer, Error, Keyset, Utf8};
    /// # use tombstone_crypt::kafka::TypedConsumer;
    /// # use tombstone_crypt::kafka::rdkafka::{ClientConfig, Message as _};
    /// # fn demo(config: &ClientConfig, keyset: Keyset) -> Result<(), Error> {
    /// let consumer: TypedConsumer<String, Vec<u8>, _, _> =
    ///     TypedConsumer::new(config, Utf8, DecryptingDeserializer::new(Bytes, keyset))?
    ///         .on_undecodable(|raw, error| {
    ///             let kms = matches!(error, Error::Record { cause, .. }
    ///                 if matches!(**cause, Error::Kms { .. }));
    ///             // Enqueue `raw` to a dead-letter topic here, marked `kms`.
    ///             eprintln!("dead-lettered {error} (KMS: {kms}): {} bytes", raw.payload_len());
    ///             Ok(())
    ///         });
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn on_undecodable<F>(mut self, hook: F) -> Self
    where
        F: Fn(&BorrowedMessage<'_>, &Error) -> Result<(), Error> + Send + Sync + 'static,
    {
        self.on_undecodable = Some(Box::new(hook));
        self
    }

    /// Subscribes to `topics` (partitions assigned by the consumer group).
    ///
    /// # Errors
    /// [`Error::Kafka`].
    pub fn subscribe(&self, topics: &[&str]) -> Result<(), Error> {
        self.consumer
            .subscribe(topics)
            .map_err(|e| kafka_err("subscribe", e))
    }

    /// Reads exactly these partitions, from these offsets.
    ///
    /// # Errors
    /// [`Error::Kafka`].
    pub fn assign(&self, partitions: &TopicPartitionList) -> Result<(), Error> {
        self.consumer
            .assign(partitions)
            .map_err(|e| kafka_err("assign", e))
    }

    /// The rdkafka consumer underneath (offsets, commits, watermarks).
    pub fn consumer(&self) -> &StreamConsumer {
        &self.consumer
    }

    /// The next record, decoded.
    ///
    /// # Errors
    /// [`Error::Kafka`] from the consumer; [`Error::Record`] for a record
    /// that does not decode. A Kafka error whose cause
    /// [`is_transient_kafka_error`](crate::kafka::is_transient_kafka_error) says is
    /// transient (a broker connection down for a moment) is one librdkafka
    /// recovers from: call `recv` again.
    pub async fn recv(&self) -> Result<ConsumedRecord<K, V>, Error> {
        loop {
            let m = self
                .consumer
                .recv()
                .await
                .map_err(|e| kafka_err("consume", e))?;
            if let Some(record) = self.next_record(&m).await? {
                return Ok(record);
            }
        }
    }

    /// The records as a `Stream`, each as [`recv`](TypedConsumer::recv)
    /// gives it.
    pub fn stream(&self) -> impl Stream<Item = Result<ConsumedRecord<K, V>, Error>> + '_ {
        self.consumer.stream().filter_map(move |m| async move {
            match m {
                Ok(m) => self.next_record(&m).await.transpose(),
                Err(e) => Some(Err(kafka_err("consume", e))),
            }
        })
    }

    /// `m` decoded; `None` when it does not decode and the hook skipped it.
    async fn next_record(
        &self,
        m: &BorrowedMessage<'_>,
    ) -> Result<Option<ConsumedRecord<K, V>>, Error> {
        let decoded = match self.prepare(m).await {
            Ok(()) => self.decode(m),
            Err(e) => Err(e),
        };
        match (decoded, &self.on_undecodable) {
            (Err(e @ Error::Record { .. }), Some(hook)) => hook(m, &e).map(|()| None),
            (decoded, _) => decoded.map(Some),
        }
    }

    /// Runs the KMS call a record's key or value would need (a data key
    /// not in the cache) on tokio's blocking pool, so decoding does not
    /// block the worker.
    async fn prepare(&self, m: &BorrowedMessage<'_>) -> Result<(), Error> {
        let key_work = m.key().and_then(|k| self.key_de.blocking_work(k));
        let value_work = m.payload().and_then(|v| self.value_de.blocking_work(v));
        match BlockingWork::both(key_work, value_work) {
            None => Ok(()),
            Some(work) => off_the_worker(work).await.map_err(|cause| Error::Record {
                topic: m.topic().to_owned(),
                partition: m.partition(),
                offset: m.offset(),
                cause: Box::new(cause),
            }),
        }
    }

    fn decode(&self, m: &BorrowedMessage<'_>) -> Result<ConsumedRecord<K, V>, Error> {
        let (key, value) =
            decode_message(m, self.binding, &self.key_de, &self.value_de).map_err(|cause| {
                Error::Record {
                    topic: m.topic().to_owned(),
                    partition: m.partition(),
                    offset: m.offset(),
                    cause: Box::new(cause),
                }
            })?;
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ConsumedRecord {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            headers,
            key,
            value,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_partition_count_is_kept_for_the_refresh_interval_then_read_again() {
        let t0 = Instant::now();
        let interval = Duration::from_secs(300);
        let mut counts = PartitionCounts::new(interval);
        assert_eq!(counts.fresh("t", t0), None, "never read");
        counts.record("t", 4, t0);
        assert_eq!(counts.fresh("t", t0), Some(4));
        assert_eq!(
            counts.fresh("t", t0 + interval - Duration::from_millis(1)),
            Some(4)
        );
        assert_eq!(
            counts.fresh("t", t0 + interval),
            None,
            "the interval elapsed"
        );
        assert_eq!(counts.fresh("u", t0), None, "another topic");
        counts.record("t", 6, t0 + interval);
        assert_eq!(counts.fresh("t", t0 + interval), Some(6), "read again");
        // A clock read before the count was (another thread's): fresh.
        assert_eq!(counts.fresh("t", t0), Some(6));
        counts.forget("t");
        assert_eq!(
            counts.fresh("t", t0 + interval),
            None,
            "an unknown partition"
        );
        let mut every_write = PartitionCounts::new(Duration::ZERO);
        every_write.record("t", 4, t0);
        assert_eq!(every_write.fresh("t", t0), None);
    }

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

    #[test]
    fn unknown_partition_errors_are_recognised() {
        use RDKafkaErrorCode as C;
        for code in [C::UnknownPartition, C::UnknownTopicOrPartition] {
            assert!(is_unknown_partition(&KafkaError::MessageProduction(code)));
        }
        for code in [C::QueueFull, C::MessageTimedOut, C::UnknownTopic] {
            assert!(!is_unknown_partition(&KafkaError::MessageProduction(code)));
        }
    }
}
