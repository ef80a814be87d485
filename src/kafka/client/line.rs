//! A producer's line: its writes reach the broker in the order they were
//! handed over, whatever becomes of their futures, within bounds.

use std::sync::Mutex;
use std::time::Instant;

use rdkafka::error::{KafkaError, RDKafkaErrorCode};

use super::outgoing::*;
use super::{kafka_err, Delivered};

/// How a producer's writes reach the broker in the order they were
/// started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Release {
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
pub(super) enum Handed {
    /// Every record queued: their delivery reports are still to come.
    Queued(Outgoing),
    /// Every record acknowledged.
    Delivered(Delivered),
}

pub(super) type Reply = Result<Handed, SendFailure>;

/// A write handed to the producer.
pub(super) enum Hand {
    /// Every record queued at once, nothing ahead of it.
    Direct(Outgoing),
    /// Behind earlier writes (or a full queue): the writer thread answers.
    Behind(futures_channel::oneshot::Receiver<Reply>),
}

/// A write waiting in the line, with where to answer (nowhere, once its
/// future is dropped: the write goes on).
pub(super) struct Waiting {
    pub(super) out: Outgoing,
    pub(super) reply: futures_channel::oneshot::Sender<Reply>,
}

#[derive(Default)]
pub(super) struct LineState {
    /// Writes not yet taken by the writer thread, in the order they were
    /// handed over.
    pub(super) waiting: std::collections::VecDeque<Waiting>,
    /// A writer thread is working through the line (the write it took from
    /// the front included): a new write goes behind it.
    pub(super) draining: bool,
    /// The records and bytes (keys and values) of the writes waiting.
    pub(super) records: usize,
    pub(super) bytes: usize,
}

/// How much a producer's line holds at most: records and bytes (keys and
/// values) of the writes waiting for the queue. A write that finds it full
/// is refused at once, `QueueFull`, before it takes a place.
#[derive(Clone, Copy, Debug)]
pub(super) struct Bounds {
    pub(super) records: usize,
    pub(super) bytes: usize,
}

impl Outgoing {
    /// The records and bytes (keys and values) of the write.
    pub(super) fn weight(&self) -> (usize, usize) {
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
pub(super) struct Line {
    pub(super) release: Release,
    pub(super) bounds: Bounds,
    pub(super) state: Mutex<LineState>,
    /// Signalled when the line is empty and no writer thread runs.
    pub(super) idle: std::sync::Condvar,
}

impl Line {
    pub(super) fn new(release: Release, bounds: Bounds) -> Self {
        Line {
            release,
            bounds,
            state: Mutex::new(LineState::default()),
            idle: std::sync::Condvar::new(),
        }
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, LineState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Hands `out` over: queued at once when nothing is ahead of it, its
    /// partition is known and the queue takes it, else behind the others.
    pub(super) fn hand(
        self: &std::sync::Arc<Self>,
        mut out: Outgoing,
    ) -> Result<Hand, SendFailure> {
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
    pub(super) fn drain(&self) {
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
    pub(super) fn wait_idle(&self, deadline: Instant) -> bool {
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
