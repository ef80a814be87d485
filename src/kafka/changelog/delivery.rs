//! The changelog's producer: its deliveries followed, a stopped one
//! replaced, a transaction committed or aborted, and which errors are
//! transient.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rdkafka::client::ClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::DeliveryResult;
use rdkafka::producer::{Producer as _, ProducerContext, ThreadedProducer};

use super::*;
use crate::error::Error;

impl KafkaChangelog {
    /// A producer stopped by a fatal error (the gapless guarantee: a
    /// record failed where a later one could have been stored after it)
    /// has failed every record queued after it, each reported to
    /// [`Deliveries`]; it is replaced by a new one (a new producer id), and
    /// the next flush fails, saying so.
    ///
    /// A transactional producer stopped by a fatal error (fenced by a newer
    /// one of its id) is not replaced: a new one would fence that one in
    /// turn. Every append and flush fails from then on.
    pub(super) fn renew_if_stopped(&mut self) -> Result<(), Error> {
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
    pub(super) fn wait_for_deliveries(&self) -> Result<(), KafkaError> {
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
    pub(super) fn take_failures(&self) -> Result<(), Error> {
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
}

/// One failed delivery: which append it was (counted from 1 since the
/// changelog was opened) and why. Never the key or the value.
#[derive(Clone, Debug)]
pub(super) struct Failure {
    seq: u64,
    error: KafkaError,
}

/// Collects delivery failures reported by the producer's thread, until the
/// next flush takes them.
#[derive(Clone, Default)]
pub(super) struct Deliveries {
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

/// The changelog's producer: idempotent, `acks=all` (`acks_refused` has
/// turned any other value away), and gapless: an error that could leave a
/// gap in a partition's records (a later record stored after an earlier
/// one failed) stops the producer with a fatal error instead, so nothing
/// queued after the failed record is delivered. librdkafka does not cover
/// records that fail by `message.timeout.ms` with that guarantee: those,
/// like every failure, make the next flush fail and name them.
pub(super) fn create_producer(
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

impl KafkaChangelog {
    /// A transactional flush: the open transaction committed once every
    /// append is delivered, or aborted (a delivery failed, the wait timed
    /// out, the commit failed) and the flush fails: none of its appends,
    /// the write rule's tombstones among them, is then on the log for a
    /// `read_committed` reader (a restore).
    pub(super) fn end_transaction(&mut self, flushed: Result<(), Error>) -> Result<(), Error> {
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
    pub(super) fn abort(&mut self) {
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
pub(super) fn is_transactional(config: &ClientConfig) -> bool {
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

pub(super) fn is_queue_full(e: &KafkaError) -> bool {
    matches!(
        e,
        KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull)
    )
}
