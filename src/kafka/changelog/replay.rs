//! The changelog read back: a consumer from an offset, replayed to the
//! end or to a point.

use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::KafkaError;
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::*;
use crate::error::Error;
use crate::store::Record;

impl KafkaChangelog {
    pub(super) fn consumer(&self, from: u64, wait_ms: &str) -> Result<BaseConsumer, Error> {
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
