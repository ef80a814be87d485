//! Writing: the records of `repair` and `reencrypt`, in the write rule's
//! order, on an idempotent producer ([`produce`]), only if no partition
//! grew since the topic was read ([`check_unchanged`]), and never under a
//! producer configuration that could reorder a key's records
//! ([`check_ordered`]).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use indicatif::ProgressBar;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tombstone_crypt::kafka::rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};

use crate::read::{consumer, end_offsets, progress, Setup};
use crate::report::Audit;
use crate::{fail, Fail};

/// Whether `value` (a librdkafka boolean) is true.
fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "t" | "1"
    )
}

/// Refuses a producer configuration under which a retry could reorder a
/// key's records (a value landing after the tombstone written after it):
/// idempotence off with more than one request in flight. Order per key is
/// the write rule.
pub(crate) fn check_ordered(config: &ClientConfig) -> Result<(), Fail> {
    let idempotent = config.get("enable.idempotence").is_none_or(is_true);
    let one_in_flight = ["max.in.flight.requests.per.connection", "max.in.flight"]
        .iter()
        .any(|k| config.get(k).is_some_and(|v| v.trim() == "1"));
    if idempotent || one_in_flight {
        return Ok(());
    }
    Err(fail(
        "-X enable.idempotence=false with more than one request in flight: a retried record could land after the next record of its key (a value after its delete). The commands write each key's records in order; leave idempotence on, or add -X max.in.flight.requests.per.connection=1",
    ))
}

/// A record to write.
pub(crate) struct Write {
    /// The key's partition.
    pub(crate) partition: i32,
    /// The record key, as on the wire.
    pub(crate) key: Vec<u8>,
    /// The value; `None` for a tombstone.
    pub(crate) value: Option<Vec<u8>>,
}

/// A producer with `-X`'s settings, idempotent unless they say otherwise.
fn producer(s: &Setup) -> Result<FutureProducer, Fail> {
    let mut config = s.config.clone();
    if config.get("enable.idempotence").is_none() {
        config.set("enable.idempotence", "true");
    }
    config
        .create()
        .map_err(|e| fail(format!("creating a producer: {e}")))
}

/// Refuses to write if a partition grew since the scan: a record written
/// meanwhile may be newer than what the scan saw, and a tombstone or an
/// old value written now would undo it.
pub(crate) fn check_unchanged(s: &Setup, a: &Audit) -> Result<(), Fail> {
    let consumer = consumer(s)?;
    let now: Vec<(i32, i64)> = end_offsets(&consumer, s)?
        .into_iter()
        .map(|(p, _, h)| (p, h))
        .collect();
    if now != a.highs {
        return Err(fail(format!(
            "{} changed while it was read (end offsets {:?}, now {now:?}): stop its producers and run again",
            s.topic, a.highs
        )));
    }
    Ok(())
}

/// The most records in flight at once: well under librdkafka's default
/// queue (100,000 messages).
const CHUNK_RECORDS: usize = 10_000;
/// About the most bytes in flight at once: well under librdkafka's default
/// queue (1 GiB).
const CHUNK_BYTES: usize = 64 << 20;

/// Records enqueued and not yet acknowledged, in the order they were.
#[derive(Default)]
struct InFlight {
    /// Each record's index in the writes, and its delivery.
    deliveries: VecDeque<(usize, DeliveryFuture)>,
    /// Their keys' and values' bytes.
    bytes: usize,
}

impl InFlight {
    /// Waits for every record in flight, in order.
    fn wait(&mut self, topic: &str, writes: &[Write], bar: &ProgressBar) -> Result<(), Fail> {
        while let Some((i, delivery)) = self.deliveries.pop_front() {
            match futures_executor::block_on(delivery) {
                Ok(Ok(_)) => bar.inc(1),
                Ok(Err((e, _))) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: {e} (the records before it were acknowledged; run again to finish)",
                        writes[i].partition
                    )));
                }
                Err(_) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: the producer stopped before the record was acknowledged (run again to finish)",
                        writes[i].partition
                    )));
                }
            }
        }
        self.bytes = 0;
        Ok(())
    }
}

/// Produces `writes` to `topic`, in order, and waits for every
/// acknowledgement.
///
/// The order is explicit: each record is enqueued (`send_result`) only
/// once the one before it is, and librdkafka keeps the enqueue order within
/// a partition on an idempotent producer (or one with a single request in
/// flight: [`check_ordered`]), so a key's records land in the order of
/// the write rule. When the producer's queue is full, every record in
/// flight is acknowledged before the next is enqueued: nothing is retried
/// out of turn. At most [`CHUNK_RECORDS`] records (or about
/// [`CHUNK_BYTES`]) are in flight at once.
pub(crate) fn produce(s: &Setup, topic: &str, writes: &[Write], quiet: bool) -> Result<u64, Fail> {
    if writes.is_empty() {
        return Ok(0);
    }
    check_ordered(&s.config)?;
    let producer = producer(s)?;
    let bar = progress(writes.len() as u64, quiet, "write");
    let mut in_flight = InFlight::default();
    for (i, w) in writes.iter().enumerate() {
        let mut full_since: Option<Instant> = None;
        loop {
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
                .partition(w.partition)
                .key(&w.key[..]);
            if let Some(v) = &w.value {
                record = record.payload(&v[..]);
            }
            match producer.send_result(record) {
                Ok(delivery) => {
                    in_flight.deliveries.push_back((i, delivery));
                    in_flight.bytes += w.key.len() + w.value.as_ref().map_or(0, Vec::len);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if in_flight.deliveries.is_empty() {
                        // Nothing of ours to wait for: the queue is full of
                        // what librdkafka still holds; wait a little.
                        let since = *full_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > s.timeout {
                            bar.abandon();
                            return Err(fail(format!(
                                "writing to {topic}/{}: the producer's queue stayed full for {} s",
                                w.partition,
                                s.timeout.as_secs()
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    } else {
                        in_flight.wait(topic, writes, &bar)?;
                    }
                }
                Err((e, _)) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: {e} (the records before it were acknowledged; run again to finish)",
                        w.partition
                    )));
                }
            }
        }
        if in_flight.deliveries.len() >= CHUNK_RECORDS || in_flight.bytes >= CHUNK_BYTES {
            in_flight.wait(topic, writes, &bar)?;
        }
    }
    in_flight.wait(topic, writes, &bar)?;
    bar.finish_and_clear();
    Ok(writes.len() as u64)
}
