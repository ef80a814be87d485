//! One write's records on their way to librdkafka: owned, partitioned
//! (an encrypted key by the murmur2 hash of its plaintext, from a kept
//! partition count), queued and delivered.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::OwnedHeaders;
use rdkafka::producer::future_producer::OwnedDeliveryResult;
use rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord, Producer as _};

use super::{kafka_err, Delivered};
use crate::error::Error;

/// Partition counts by topic, each kept for `refresh` after it was read
/// from the broker. The clock is the caller's: `now` comes in.
#[derive(Debug)]
pub(super) struct PartitionCounts {
    pub(super) refresh: Duration,
    pub(super) counts: HashMap<String, (u32, Instant)>,
}

impl PartitionCounts {
    pub(super) fn new(refresh: Duration) -> Self {
        PartitionCounts {
            refresh,
            counts: HashMap::new(),
        }
    }

    /// The count of `topic` if it was read less than `refresh` before `now`.
    pub(super) fn fresh(&self, topic: &str, now: Instant) -> Option<u32> {
        let (n, read_at) = self.counts.get(topic)?;
        (now.saturating_duration_since(*read_at) < self.refresh).then_some(*n)
    }

    /// `topic` has `n` partitions, read from the broker at `now`.
    pub(super) fn record(&mut self, topic: &str, n: u32, now: Instant) {
        self.counts.insert(topic.to_owned(), (n, now));
    }

    /// Forgets the count of `topic`: the next write reads it again.
    pub(super) fn forget(&mut self, topic: &str) {
        self.counts.remove(topic);
    }
}

/// Whether a produce error says the partition does not exist (a count
/// that changed under the producer, a topic re-created).
pub(super) fn is_unknown_partition(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(
            RDKafkaErrorCode::UnknownPartition | RDKafkaErrorCode::UnknownTopicOrPartition
        )
    )
}

/// Why a write's records were not all delivered.
pub(super) struct SendFailure {
    pub(super) error: Error,
    /// The partition was unknown.
    pub(super) unknown_partition: bool,
    /// No record of the write reached the producer's queue.
    pub(super) nothing_queued: bool,
}

/// One write's records, owned, on their way: what is queued and what is
/// left. It owns everything it needs, so the part that waits can run in a
/// task of its own, whatever happens to the caller's future.
pub(super) struct Outgoing {
    pub(super) producer: FutureProducer,
    pub(super) topic: String,
    pub(super) records: Vec<crate::kafka::KafkaRecord>,
    pub(super) partition: Option<i32>,
    pub(super) headers: Option<OwnedHeaders>,
    pub(super) queue_timeout: Duration,
    /// Queued records' delivery reports, in order.
    pub(super) queued: Vec<DeliveryFuture>,
    /// The next record to queue.
    pub(super) next: usize,
    /// An encrypted key's partition, still to be chosen from the topic's
    /// partition count (read when the write's turn comes, never awaited
    /// before the write is handed over).
    pub(super) choose: Option<Choose>,
}

/// How an encrypted key's partition is chosen once the partition count is
/// known: the murmur2 hash of its plaintext (positive), modulo the count.
pub(super) struct Choose {
    pub(super) hash: u32,
    pub(super) counts: std::sync::Arc<Mutex<PartitionCounts>>,
    /// Chosen already: the count it was chosen from.
    pub(super) chosen: Option<u32>,
    /// Chosen again after the partition was unknown (once at most).
    pub(super) retried: bool,
}

impl Outgoing {
    pub(super) fn record(&self, i: usize) -> FutureRecord<'_, [u8], [u8]> {
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

    pub(super) fn choose_with(&mut self, n: u32) {
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
    pub(super) fn choose_now(&mut self) -> bool {
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
    pub(super) fn choose_waiting(&mut self) -> Result<(), SendFailure> {
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
    pub(super) fn choose_again(&mut self, failure: &SendFailure) -> bool {
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

    pub(super) fn failure(&self, error: KafkaError) -> SendFailure {
        SendFailure {
            unknown_partition: is_unknown_partition(&error),
            nothing_queued: self.queued.is_empty() && self.next == 0,
            error: kafka_err(&format!("produce to {}", self.topic), error),
        }
    }

    /// Queues every record it can now, in order, without waiting: stops at
    /// a full queue. On an idempotent producer the records then go out in
    /// this order whatever happens to any future.
    pub(super) fn queue_now(&mut self) -> Result<(), SendFailure> {
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

    pub(super) fn is_queued(&self) -> bool {
        self.next == self.records.len()
    }

    /// Waits for the queued records' delivery reports, in order (every
    /// record of the write is queued: see [`Line`]).
    pub(super) async fn finish(mut self) -> Result<Delivered, SendFailure> {
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
    pub(super) fn queue_waiting(&mut self) -> Result<(), SendFailure> {
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
    pub(super) fn deliver_one_by_one(mut self) -> Result<Delivered, SendFailure> {
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

    pub(super) fn delivery<E>(
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

    pub(super) fn delivered(&self, result: OwnedDeliveryResult) -> Result<Delivered, SendFailure> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use rdkafka::error::{KafkaError, RDKafkaErrorCode};

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
