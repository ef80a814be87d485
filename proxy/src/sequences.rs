//! The sequence numbers of idempotent producers' batches on topics whose
//! batches the write rule makes longer.
//!
//! The write rule puts the tombstones of a key's older forms at the front
//! of the client's own batch, so that the broker takes or refuses both at
//! once. An idempotent (or transactional) batch then holds more records
//! than its producer counted, and the broker expects the producer's next
//! batch in that partition at a later sequence than the producer sends.
//! This table keeps, per producer id, epoch and partition, the producer's
//! recent batches (its base sequence and record count, the base sequence
//! and record count forwarded), so that each later batch goes to the
//! broker at the sequence the broker expects, and a retry goes at the
//! sequence its first attempt went at (the broker then recognizes it as a
//! duplicate).
//!
//! **Never a guess.** The broker takes a batch whose first and last
//! sequences match one of the producer's last five as a duplicate: it
//! answers success and writes nothing. A batch forwarded at a guessed
//! sequence could match one and be dropped without a word (a delete lost).
//! So on a topic whose key keyset is in rotation (more than one enabled
//! key: where batches grow), every idempotent producer is followed from the
//! first batch of its epoch (sequence 0), and a batch is forwarded only as
//! that first batch, as the batch right after the last one seen, or as the
//! retry of one seen (the same base sequence, count and tombstones). Any
//! other batch (a producer this process has not followed from its start:
//! after the proxy restarted, through another proxy process, or after its
//! line was evicted from the table, which holds at most [`MAX_LINES`]
//! lines; or a batch at a seen sequence with other contents) is answered
//! `UNKNOWN_PRODUCER_ID` (this process holds no record of it) and not
//! forwarded: its producer starts a new epoch at sequence 0 (an idempotent
//! producer on its own, a transactional one once it aborts), which this
//! process then follows. A
//! batch of another producer id or epoch never touches a line but its own.
//! On a topic with one enabled record key, or none, batches never grow and
//! nothing is kept.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The most producer-partition lines kept; past it the least recently
/// used tenth is dropped.
pub(crate) const MAX_LINES: usize = 65_536;
/// The batches kept per line: a producer has at most 5 in flight per
/// partition, and retries them in order.
const KEPT: usize = 16;
/// Sequences run from 0 to `i32::MAX` and wrap to 0.
const WRAP: i64 = 1 << 31;

/// A batch's producer fields and counts, as the client sent them.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Batch {
    /// The producer id (-1: not idempotent).
    pub(crate) producer_id: i64,
    /// The producer epoch.
    pub(crate) producer_epoch: i16,
    /// The client's base sequence (-1: none).
    pub(crate) base_sequence: i32,
    /// The client's record count.
    pub(crate) records: i32,
}

impl Batch {
    /// Whether the batch carries a producer id and a sequence.
    pub(crate) fn idempotent(&self) -> bool {
        self.producer_id >= 0 && self.base_sequence >= 0
    }
}

#[derive(Clone, Copy, Debug)]
struct Seen {
    client_base: i32,
    client_records: i32,
    base: i32,
    added: i32,
}

#[derive(Debug)]
struct Line {
    seen: VecDeque<Seen>,
    used: u64,
    /// Whether the broker took one of its batches. A full table drops
    /// unconfirmed lines first: lines a client makes up (producer ids no
    /// broker issued, batches the proxy or the broker refuses) never push
    /// out a producer the broker took batches from.
    confirmed: bool,
}

type Key = (i64, i16, String, i32);

/// The table, shared by every connection of one proxy process.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    lines: HashMap<Key, Line>,
    clock: u64,
}

fn advance(sequence: i32, by: i64) -> i32 {
    // The result is below 2^31.
    ((i64::from(sequence) + by).rem_euclid(WRAP)) as i32
}

impl Sequences {
    /// The base sequence to forward `batch` to `topic`-`partition` at,
    /// `added` records (the write rule's tombstones) put at its front;
    /// `grows`: the topic's batches can grow (its key keyset is in
    /// rotation). A batch that is not idempotent, or on a topic whose
    /// batches never grow, keeps its base sequence.
    ///
    /// # Errors
    /// Why the batch cannot be forwarded at a sequence the broker is known
    /// to expect: answer it `UNKNOWN_PRODUCER_ID`.
    pub(crate) fn forward(
        &self,
        topic: &str,
        partition: i32,
        batch: Batch,
        added: i32,
        grows: bool,
    ) -> Result<i32, String> {
        if !batch.idempotent() || !grows {
            return Ok(batch.base_sequence);
        }
        if batch.records <= 0 || added < 0 {
            return Err(format!("a batch of {} records", batch.records));
        }
        // A panic elsewhere while holding the lock leaves the table as it
        // was between two calls: go on with it.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (
            batch.producer_id,
            batch.producer_epoch,
            topic.to_owned(),
            partition,
        );
        inner.clock += 1;
        let now = inner.clock;
        let unfollowed = || {
            format!(
                "producer {} (epoch {}) at sequence {} in {topic}-{partition}: this proxy process \
                 has not followed it from the start of its epoch, and the write rule's \
                 tombstones make its batches longer than it counts (it starts a new epoch)",
                batch.producer_id, batch.producer_epoch, batch.base_sequence
            )
        };
        let Some(line) = inner.lines.get_mut(&key) else {
            if batch.base_sequence != 0 {
                return Err(unfollowed());
            }
            if inner.lines.len() >= MAX_LINES {
                evict(&mut inner.lines);
            }
            let seen = VecDeque::from([Seen {
                client_base: 0,
                client_records: batch.records,
                base: 0,
                added,
            }]);
            inner.lines.insert(
                key,
                Line {
                    seen,
                    used: now,
                    confirmed: false,
                },
            );
            return Ok(0);
        };
        line.used = now;
        if let Some(s) = line
            .seen
            .iter()
            .find(|s| s.client_base == batch.base_sequence)
        {
            if s.client_records == batch.records && s.added == added {
                // A retry: where its first attempt went.
                return Ok(s.base);
            }
            return Err(format!(
                "producer {} (epoch {}) sent another batch at sequence {} in {topic}-{partition} \
                 ({} records, {} tombstones in front; first {} and {})",
                batch.producer_id,
                batch.producer_epoch,
                batch.base_sequence,
                batch.records,
                added,
                s.client_records,
                s.added
            ));
        }
        let next = line.seen.back().and_then(|last| {
            (advance(last.client_base, i64::from(last.client_records)) == batch.base_sequence).then(
                || {
                    advance(
                        last.base,
                        i64::from(last.client_records) + i64::from(last.added),
                    )
                },
            )
        });
        let Some(base) = next else {
            return Err(unfollowed());
        };
        line.seen.push_back(Seen {
            client_base: batch.base_sequence,
            client_records: batch.records,
            base,
            added,
        });
        if line.seen.len() > KEPT {
            line.seen.pop_front();
        }
        Ok(base)
    }

    /// Marks the line of `producer_id` at `epoch` in `topic`-`partition`
    /// confirmed: the broker took one of its batches.
    pub(crate) fn confirm(&self, topic: &str, partition: i32, producer_id: i64, epoch: i16) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (producer_id, epoch, topic.to_owned(), partition);
        if let Some(line) = inner.lines.get_mut(&key) {
            line.confirmed = true;
        }
    }

    /// How many producer-partition lines are kept.
    #[cfg(test)]
    fn lines(&self) -> usize {
        self.inner.lock().map(|i| i.lines.len()).unwrap_or(0)
    }
}

/// Drops a tenth of the lines: the least recently used of the
/// unconfirmed ones, then (when fewer are unconfirmed) of the confirmed.
fn evict(lines: &mut HashMap<Key, Line>) {
    let cut = (lines.len() / 10).max(1);
    let unconfirmed: Vec<u64> = lines
        .values()
        .filter(|l| !l.confirmed)
        .map(|l| l.used)
        .collect();
    if unconfirmed.len() >= cut {
        drop_oldest(lines, unconfirmed, cut, false);
        return;
    }
    let rest = cut - unconfirmed.len();
    lines.retain(|_, l| l.confirmed);
    let confirmed: Vec<u64> = lines.values().map(|l| l.used).collect();
    drop_oldest(lines, confirmed, rest, true);
}

/// Drops the `n` least recently used lines whose `confirmed` is `which`
/// (`used`: their times of use, each line's its own).
fn drop_oldest(lines: &mut HashMap<Key, Line>, mut used: Vec<u64>, n: usize, which: bool) {
    if n == 0 || used.is_empty() {
        return;
    }
    if used.len() <= n {
        lines.retain(|_, l| l.confirmed != which);
        return;
    }
    let (_, nth, _) = used.select_nth_unstable(n - 1);
    let nth = *nth;
    lines.retain(|_, l| l.confirmed != which || l.used > nth);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(base: i32, records: i32) -> Batch {
        Batch {
            producer_id: 7,
            producer_epoch: 0,
            base_sequence: base,
            records,
        }
    }

    #[test]
    fn batches_after_a_grown_one_move_up_and_retries_go_where_they_went() {
        let t = Sequences::default();
        let f = |b, added| t.forward("t", 0, b, added, true);
        assert_eq!(f(batch(0, 3), 0), Ok(0));
        // 2 tombstones in front: the broker now expects 3 + 2 + 5 = 10.
        assert_eq!(f(batch(3, 5), 2), Ok(3));
        assert_eq!(f(batch(8, 4), 0), Ok(10));
        assert_eq!(f(batch(12, 1), 1), Ok(14));
        // Retries of each, in order: the same sequences.
        assert_eq!(f(batch(3, 5), 2), Ok(3));
        assert_eq!(f(batch(8, 4), 0), Ok(10));
        assert_eq!(f(batch(12, 1), 1), Ok(14));
        assert_eq!(f(batch(13, 2), 0), Ok(16));
        // Not idempotent, or a topic whose batches never grow: as sent.
        let mut plain = batch(-1, 2);
        plain.producer_id = -1;
        assert_eq!(f(plain, 3), Ok(-1));
        assert_eq!(t.forward("u", 0, batch(40, 2), 0, false), Ok(40));
    }

    #[test]
    fn a_producer_not_followed_from_sequence_0_is_refused_never_guessed() {
        let t = Sequences::default();
        let f = |b, added| t.forward("t", 0, b, added, true);
        // Seen first in the middle (a restart, another proxy process).
        assert!(f(batch(5, 1), 1).is_err());
        assert_eq!(t.lines(), 0);
        assert_eq!(f(batch(0, 1), 1), Ok(0));
        // A gap, a batch at a seen sequence with other contents, a
        // sequence 0 again: refused, and the line is as it was.
        assert!(f(batch(3, 1), 1).is_err());
        assert!(f(batch(0, 2), 1).is_err());
        assert!(f(batch(0, 1), 0).is_err());
        assert_eq!(f(batch(1, 1), 1), Ok(2));
        // Another epoch or producer id: its own line, from 0 only.
        let mut foreign = batch(1000, 1);
        foreign.producer_epoch = 7;
        assert!(f(foreign, 1).is_err());
        assert_eq!(f(batch(2, 1), 0), Ok(4), "a foreign batch changed the line");
        let mut bumped = batch(0, 1);
        bumped.producer_epoch = 1;
        assert_eq!(f(bumped, 1), Ok(0));
        assert_eq!(f(batch(3, 1), 0), Ok(5));
    }

    #[test]
    fn sequences_wrap_at_2_to_the_31() {
        let t = Sequences::default();
        let f = |b, added| t.forward("t", 0, b, added, true);
        assert_eq!(f(batch(0, i32::MAX), 1), Ok(0));
        // The client's next is i32::MAX; the broker's 0 (wrapped past it).
        assert_eq!(f(batch(i32::MAX, 2), 0), Ok(0));
        assert_eq!(f(batch(1, 1), 0), Ok(2));
    }

    #[test]
    fn the_table_is_bounded() {
        let t = Sequences::default();
        for p in 0..(MAX_LINES as i32 + 100) {
            t.forward("t", p, batch(0, 1), 1, true).unwrap();
        }
        assert!(t.lines() <= MAX_LINES, "{} lines", t.lines());
        // The newest is kept; an evicted one is refused, never guessed.
        assert_eq!(
            t.forward("t", MAX_LINES as i32 + 99, batch(1, 1), 0, true),
            Ok(2)
        );
        assert!(t.forward("t", 0, batch(1, 1), 0, true).is_err());
    }

    #[test]
    fn lines_the_broker_never_took_cannot_push_out_one_it_took() {
        let t = Sequences::default();
        // A producer the broker took a batch from.
        assert_eq!(t.forward("t", 0, batch(0, 1), 1, true), Ok(0));
        t.confirm("t", 0, 7, 0);
        // A client makes up a table's worth of producers (never taken).
        for id in 0..(MAX_LINES as i64 + 10) {
            let mut b = batch(0, 1);
            b.producer_id = 1000 + id;
            t.forward("t", 1, b, 1, true).unwrap();
        }
        assert!(t.lines() <= MAX_LINES, "{} lines", t.lines());
        // The confirmed line is followed still: its next batch goes where
        // the broker expects it (1 record + 1 tombstone: 2).
        assert_eq!(t.forward("t", 0, batch(1, 1), 0, true), Ok(2));
    }
}
