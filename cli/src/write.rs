//! Writing: the records of `repair` and `reencrypt`, in the write rule's
//! order, one partition at a time in chunks ([`Sink`]), each chunk
//! journaled before it is produced and checkpointed once acknowledged, on
//! an idempotent producer, and never under a producer configuration that
//! could reorder a key's records ([`check_ordered`]).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tombstone_crypt::kafka::rdkafka::message::{Header, OwnedHeaders};
use tombstone_crypt::kafka::rdkafka::producer::{
    DeliveryFuture, FutureProducer, FutureRecord, Producer as _,
};

use crate::args::CHUNK_RECORDS;
use crate::checkpoint::{Checkpoint, Progress};
use crate::outcome::{fail, Fail};
use crate::read::{Setup, RUN_HEADER};
use crate::record::Write;

/// Whether `value` (a librdkafka boolean) is true, as librdkafka reads it
/// (the library's reading, shared with `TypedProducer`).
fn is_true(value: &str) -> bool {
    tombstone_crypt::kafka::librdkafka_bool(value) == Some(true)
}

/// Refuses a producer configuration under which a retry could reorder a
/// key's records (a value landing after the tombstone written after it):
/// idempotence off with more than one request in flight; and one under
/// which an acknowledgement does not mean the record is stored (`acks`
/// other than `all`). Order per key is the write rule.
pub(crate) fn check_ordered(config: &ClientConfig) -> Result<(), Fail> {
    let idempotent = config.get("enable.idempotence").is_none_or(is_true);
    // `max.in.flight` is librdkafka's alias of the other: given both,
    // either may win, so every one given must be 1.
    let in_flight: Vec<&str> = ["max.in.flight.requests.per.connection", "max.in.flight"]
        .iter()
        .filter_map(|k| config.get(k))
        .collect();
    let one_in_flight = !in_flight.is_empty() && in_flight.iter().all(|v| v.trim() == "1");
    // A delivery report means the record is stored only with acks=all: a
    // checkpoint that moved on after acks=1 (or 0) could lose a chunk.
    for k in ["acks", "request.required.acks"] {
        if let Some(v) = config.get(k) {
            if !matches!(v.trim().to_ascii_lowercase().as_str(), "all" | "-1") {
                return Err(fail(format!(
                    "-X {k}={v}: the commands need acks=all, so that an acknowledged chunk is stored (the checkpoint moves on after it); leave it out or set it to all"
                )));
            }
        }
    }
    // The order of a partition's records rests on librdkafka's queue being
    // first in, first out.
    if let Some(v) = config.get("queuing.strategy") {
        if !v.trim().eq_ignore_ascii_case("fifo") {
            return Err(fail(format!(
                "queuing.strategy={v}: the commands write each key's records in order, which needs the queue first in, first out; leave it out"
            )));
        }
    }
    if idempotent || one_in_flight {
        return Ok(());
    }
    Err(fail(
        "-X enable.idempotence=false with more than one request in flight: a retried record could land after the next record of its key (a value after its delete). The commands write each key's records in order; leave idempotence on, or add -X max.in.flight.requests.per.connection=1",
    ))
}

/// Whether `-X transactional.id` is given: each chunk is then written in
/// a transaction of its own, one chunk at a time.
pub(crate) fn is_transactional(s: &Setup) -> bool {
    s.config
        .get("transactional.id")
        .is_some_and(|id| !id.trim().is_empty())
}

/// A producer with `-X`'s settings, idempotent unless they say otherwise;
/// with a `transactional.id`, initialized (fencing a run of the same id
/// that was stopped, and aborting what it left open).
pub(crate) fn producer(s: &Setup) -> Result<FutureProducer, Fail> {
    check_ordered(&s.config)?;
    let mut config = s.config.clone();
    if config.get("enable.idempotence").is_none() {
        config.set("enable.idempotence", "true");
    }
    let producer: FutureProducer = config
        .create()
        .map_err(|e| fail(format!("creating a producer: {e}")))?;
    if is_transactional(s) {
        producer
            .init_transactions(s.timeout)
            .map_err(|e| fail(format!("initializing the producer's transactions: {e}")))?;
    }
    Ok(producer)
}

/// [`produce`] in a transaction of its own when `transactional`: committed
/// once every record is acknowledged, else aborted, so that the write
/// rule's tombstones of a chunk are never on the topic for a
/// `read_committed` reader without the records they precede.
pub(crate) fn produce_chunk(
    producer: &FutureProducer,
    transactional: bool,
    topic: &str,
    run: &[u8],
    writes: &[Write],
    timeout: Duration,
    fail_after: Option<u64>,
) -> Result<Vec<i64>, Fail> {
    if !transactional {
        return produce(producer, topic, run, writes, timeout, fail_after);
    }
    producer
        .begin_transaction()
        .map_err(|e| fail(format!("writing to {topic}: beginning a transaction: {e}")))?;
    match produce(producer, topic, run, writes, timeout, fail_after) {
        Ok(offsets) => {
            producer.commit_transaction(timeout).map_err(|e| {
                fail(format!(
                    "writing to {topic}: committing a chunk's transaction: {e} (run again with --resume to finish)"
                ))
            })?;
            Ok(offsets)
        }
        Err(Fail(msg)) => {
            let aborted = match producer.abort_transaction(timeout) {
                Ok(()) => "its transaction was aborted: none of the chunk is on the topic for a read_committed reader".to_owned(),
                Err(e) => format!("aborting its transaction failed too: {e}"),
            };
            Err(fail(format!("{msg}; {aborted}")))
        }
    }
}

/// About the most bytes of a chunk: held here and in librdkafka's queue
/// while in flight (twice this per partition written at once).
const CHUNK_BYTES: usize = 2 << 20;

/// One partition's writes, in order, in chunks: each chunk is journaled,
/// produced, acknowledged, then counted in the checkpoint as done through
/// the second pass's offset it was cut at.
pub(crate) struct Sink<'a> {
    /// The producer (shared by the partitions written at once).
    producer: &'a FutureProducer,
    /// The topic written.
    topic: &'a str,
    /// The partition written.
    partition: i32,
    /// The run's id, in every record's header.
    run: &'a [u8],
    /// The checkpoint.
    checkpoint: &'a Checkpoint,
    /// The partition's progress, as recorded after each chunk.
    base: Progress,
    /// How long the producer's queue may stay full.
    timeout: Duration,
    /// The chunk being gathered.
    chunk: Vec<Write>,
    /// Its bytes.
    bytes: usize,
    /// Records written.
    pub(crate) written: u64,
    /// The most records of a chunk.
    chunk_records: usize,
    /// The tests' fixed kill point.
    fail_after: Option<u64>,
    /// Each chunk in a transaction of its own (`-X transactional.id`).
    transactional: bool,
}

impl<'a> Sink<'a> {
    /// A sink for `partition` of `topic`, whose second pass is `base`.
    pub(crate) fn new(
        s: &Setup,
        producer: &'a FutureProducer,
        topic: &'a str,
        partition: i32,
        checkpoint: &'a Checkpoint,
        run: &'a [u8],
        base: Progress,
    ) -> Sink<'a> {
        Sink {
            producer,
            topic,
            partition,
            run,
            checkpoint,
            base,
            timeout: s.timeout,
            chunk: Vec::new(),
            bytes: 0,
            written: 0,
            chunk_records: CHUNK_RECORDS,
            fail_after: None,
            transactional: is_transactional(s),
        }
    }

    /// Aborts the process once `n` records are acknowledged, sending one
    /// at a time (the tests' fixed kill point).
    pub(crate) fn with_fail_after(self, n: Option<u64>) -> Self {
        Sink {
            fail_after: n,
            ..self
        }
    }

    /// Chunks of at most `n` records.
    pub(crate) fn with_chunk_records(self, n: usize) -> Self {
        Sink {
            chunk_records: n.max(1),
            ..self
        }
    }

    /// Adds one key's records (in the write rule's order) read at source
    /// offset `at`; a full chunk is written, done through `at` (the key's
    /// records are all in it).
    pub(crate) fn push(&mut self, at: i64, writes: Vec<Write>) -> Result<(), Fail> {
        self.bytes += writes.iter().map(Write::len).sum::<usize>();
        self.chunk.extend(writes);
        if self.chunk.len() >= self.chunk_records || self.bytes >= CHUNK_BYTES {
            self.flush(at + 1)?;
        }
        Ok(())
    }

    /// The partition's progress as last recorded.
    pub(crate) fn progress(&self) -> Progress {
        self.base
    }

    /// Writes the chunk gathered, if any, and records the partition done
    /// below `through`.
    pub(crate) fn flush(&mut self, through: i64) -> Result<(), Fail> {
        let chunk = std::mem::take(&mut self.chunk);
        self.bytes = 0;
        if !chunk.is_empty() {
            self.checkpoint.journal(self.partition, through, &chunk)?;
            if self.base.journal.is_none() {
                // Recorded once the partition's first journal is written
                // and before anything of its chunk is produced: a resume
                // then knows one must be there. A run stopped between the
                // two produced nothing, and its journal, if there, is
                // finished on resume all the same.
                self.base = Progress {
                    journal: Some(-1),
                    ..self.base
                };
                self.checkpoint.set(self.partition, self.base)?;
            }
            let offsets = produce_chunk(
                self.producer,
                self.transactional,
                self.topic,
                self.run,
                &chunk,
                self.timeout,
                self.fail_after,
            )?;
            self.written += offsets.len() as u64;
            self.base = Progress {
                journal: Some(through),
                ..self.base.after_writes(&chunk, &offsets)
            };
        }
        self.base = Progress {
            done: through,
            ..self.base
        };
        self.checkpoint.set(self.partition, self.base)
    }
}

/// Records enqueued and not yet acknowledged, in the order they were.
#[derive(Default)]
struct InFlight {
    /// Each record's partition, and its delivery.
    deliveries: VecDeque<(i32, DeliveryFuture)>,
    /// The offsets acknowledged so far, in order.
    offsets: Vec<i64>,
}

impl InFlight {
    /// Waits for every record in flight, in order.
    fn wait(&mut self, topic: &str) -> Result<(), Fail> {
        while let Some((p, delivery)) = self.deliveries.pop_front() {
            match futures_executor::block_on(delivery) {
                Ok(Ok(d)) => self.offsets.push(d.offset),
                Ok(Err((e, _))) => {
                    return Err(fail(format!(
                        "writing to {topic}/{p}: {e} (the records before it were acknowledged; run again with --resume to finish)"
                    )));
                }
                Err(_) => {
                    return Err(fail(format!(
                        "writing to {topic}/{p}: the producer stopped before the record was acknowledged (run again with --resume to finish)"
                    )));
                }
            }
        }
        Ok(())
    }
}

/// Records acknowledged in this process, for the tests' fixed kill point.
static ACKNOWLEDGED: AtomicU64 = AtomicU64::new(0);

/// Produces `writes` to `topic`, in order, each with the run's header, and
/// waits for every acknowledgement. Returns the offsets they landed at, in
/// order. With
/// `fail_after`, each record is acknowledged before the next is sent, and
/// the process aborts once that many are (the tests' fixed kill point).
///
/// The order is explicit: each record is enqueued (`send_result`) only
/// once the one before it is, and librdkafka keeps the enqueue order within
/// a partition on an idempotent producer (or one with a single request in
/// flight: [`check_ordered`]), so a key's records land in the order of
/// the write rule. When the producer's queue is full, every record in
/// flight is acknowledged before the next is enqueued: nothing is retried
/// out of turn.
pub(crate) fn produce(
    producer: &FutureProducer,
    topic: &str,
    run: &[u8],
    writes: &[Write],
    timeout: Duration,
    fail_after: Option<u64>,
) -> Result<Vec<i64>, Fail> {
    let mut in_flight = InFlight::default();
    for w in writes {
        let mut full_since: Option<Instant> = None;
        loop {
            let headers = OwnedHeaders::new().insert(Header {
                key: RUN_HEADER,
                value: Some(run),
            });
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
                .partition(w.partition)
                .key(&w.key[..])
                .headers(headers);
            if let Some(v) = &w.value {
                record = record.payload(&v[..]);
            }
            match producer.send_result(record) {
                Ok(delivery) => {
                    in_flight.deliveries.push_back((w.partition, delivery));
                    if let Some(n) = fail_after {
                        in_flight.wait(topic)?;
                        if ACKNOWLEDGED.fetch_add(1, Ordering::SeqCst) + 1 >= n {
                            std::process::abort();
                        }
                    }
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if in_flight.deliveries.is_empty() {
                        // Nothing of ours to wait for: the queue is full of
                        // what other partitions' writes hold; wait a little.
                        let since = *full_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > timeout {
                            return Err(fail(format!(
                                "writing to {topic}/{}: the producer's queue stayed full for {} s",
                                w.partition,
                                timeout.as_secs()
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    } else {
                        in_flight.wait(topic)?;
                    }
                }
                Err((e, _)) => {
                    return Err(fail(format!(
                        "writing to {topic}/{}: {e} (the records before it were acknowledged; run again with --resume to finish)",
                        w.partition
                    )));
                }
            }
        }
    }
    in_flight.wait(topic)?;
    Ok(in_flight.offsets)
}
