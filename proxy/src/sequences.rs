//! The sequence numbers of idempotent producers' batches that the write
//! rule made longer.
//!
//! The write rule puts the tombstones of a key's older forms at the front
//! of the client's own batch, so that the broker takes or refuses both at
//! once. An idempotent (or transactional) batch then holds more records
//! than its producer counted, and the broker expects the producer's next
//! batch in that partition at a later sequence than the producer sends.
//! This table keeps, per producer id and partition, the producer's recent
//! batches (its base sequence and record count, the base sequence and
//! record count forwarded), so that each later batch goes to the broker at
//! the sequence the broker expects, and a retry goes at the sequence its
//! first attempt went at (the broker then recognizes it as a duplicate).
//!
//! A producer whose batches never grew is never entered. A guess is never
//! a danger: the whole batch, tombstones and records, is taken or refused
//! by the broker at once, so a wrong sequence (after the proxy restarted,
//! or after a producer's entry was evicted from the table, which holds at
//! most [`MAX_LINES`] lines) costs the client an `OUT_OF_ORDER_SEQUENCE_NUMBER`,
//! on which its producer resets (a new epoch starts at 0), never a value.
//! Each proxy process keeps its own table: a producer whose connections
//! to one partition's leader go through two proxy processes during a
//! rotation gets that error too.

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
    epoch: i16,
    seen: VecDeque<Seen>,
    used: u64,
}

/// The table, shared by every connection of one proxy process.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    lines: HashMap<(i64, String, i32), Line>,
    clock: u64,
}

fn advance(sequence: i32, by: i32) -> i32 {
    // Both are non-negative here: the result is below 2^31.
    ((i64::from(sequence) + i64::from(by)).rem_euclid(WRAP)) as i32
}

impl Sequences {
    /// The base sequence to forward `batch` to `topic`-`partition` at,
    /// `added` records (the write rule's tombstones) put at its front.
    /// A batch that is not idempotent keeps its base sequence.
    pub(crate) fn forward(&self, topic: &str, partition: i32, batch: Batch, added: i32) -> i32 {
        if !batch.idempotent() || batch.records < 0 || added < 0 {
            return batch.base_sequence;
        }
        // A panic elsewhere while holding the lock leaves the table as
        // consistent as any guess: go on with it.
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (batch.producer_id, topic.to_owned(), partition);
        if added == 0 && !inner.lines.contains_key(&key) {
            return batch.base_sequence;
        }
        inner.clock += 1;
        let now = inner.clock;
        if !inner.lines.contains_key(&key) && inner.lines.len() >= MAX_LINES {
            evict(&mut inner.lines);
        }
        let line = inner.lines.entry(key).or_insert_with(|| Line {
            epoch: batch.producer_epoch,
            seen: VecDeque::new(),
            used: now,
        });
        line.used = now;
        if line.epoch != batch.producer_epoch {
            // A new epoch starts its sequences again at 0, unshifted.
            line.epoch = batch.producer_epoch;
            line.seen.clear();
        }
        if let Some(at) = line
            .seen
            .iter()
            .position(|s| s.client_base == batch.base_sequence)
        {
            let s = line.seen[at];
            if s.client_records == batch.records && s.added == added {
                // A retry: where its first attempt went.
                return s.base;
            }
            // Another batch at that sequence (the producer started over):
            // what was seen from there on no longer holds.
            line.seen.truncate(at);
        }
        let base = match line.seen.back() {
            Some(last) if advance(last.client_base, last.client_records) == batch.base_sequence => {
                advance(last.base, last.client_records.saturating_add(last.added))
            }
            Some(last) => {
                // Not the next batch: the same shift as the last one (a
                // guess the broker checks).
                let shift = (i64::from(advance(last.base, last.client_records))
                    + i64::from(last.added)
                    - i64::from(advance(last.client_base, last.client_records)))
                .rem_euclid(WRAP);
                advance(batch.base_sequence, shift as i32)
            }
            None => batch.base_sequence,
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
        base
    }

    /// How many producer-partition lines are kept.
    #[cfg(test)]
    fn lines(&self) -> usize {
        self.inner.lock().map(|i| i.lines.len()).unwrap_or(0)
    }
}

/// Drops the least recently used tenth of the lines.
fn evict(lines: &mut HashMap<(i64, String, i32), Line>) {
    let mut used: Vec<u64> = lines.values().map(|l| l.used).collect();
    let cut = used.len() / 10;
    if cut == 0 {
        lines.clear();
        return;
    }
    let (_, nth, _) = used.select_nth_unstable(cut);
    let nth = *nth;
    lines.retain(|_, l| l.used > nth);
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
        // Nothing grown yet: as sent, and nothing kept.
        assert_eq!(t.forward("t", 0, batch(0, 3), 0), 0);
        assert_eq!(t.lines(), 0);
        // 2 tombstones in front: the broker now expects 3 + 2 + 5 = 10.
        assert_eq!(t.forward("t", 0, batch(3, 5), 2), 3);
        assert_eq!(t.forward("t", 0, batch(8, 4), 0), 10);
        assert_eq!(t.forward("t", 0, batch(12, 1), 1), 14);
        // Retries of each, in order: the same sequences.
        assert_eq!(t.forward("t", 0, batch(8, 4), 0), 10);
        assert_eq!(t.forward("t", 0, batch(12, 1), 1), 14);
        assert_eq!(t.forward("t", 0, batch(13, 2), 0), 16);
        // Another partition, another producer: their own lines.
        assert_eq!(t.forward("t", 1, batch(8, 4), 0), 8);
        let mut other = batch(8, 4);
        other.producer_id = 8;
        assert_eq!(t.forward("t", 0, other, 0), 8);
        // A new epoch starts unshifted.
        let mut bumped = batch(0, 2);
        bumped.producer_epoch = 1;
        assert_eq!(t.forward("t", 0, bumped, 0), 0);
        // Not idempotent: as sent.
        let mut plain = batch(-1, 2);
        plain.producer_id = -1;
        assert_eq!(t.forward("t", 0, plain, 3), -1);
    }

    #[test]
    fn sequences_wrap_at_2_to_the_31() {
        let t = Sequences::default();
        assert_eq!(t.forward("t", 0, batch(i32::MAX - 1, 2), 1), i32::MAX - 1);
        // The client's next is 0; the broker's 1.
        assert_eq!(t.forward("t", 0, batch(0, 1), 0), 1);
        // A batch out of line keeps the last shift.
        assert_eq!(t.forward("t", 0, batch(50, 1), 0), 51);
    }

    #[test]
    fn another_batch_at_a_seen_sequence_replaces_what_followed() {
        let t = Sequences::default();
        assert_eq!(t.forward("t", 0, batch(0, 2), 1), 0);
        assert_eq!(t.forward("t", 0, batch(2, 2), 0), 3);
        // The producer sends a batch of 3 at 0 (not a retry): it and what
        // follows it are worked out again.
        assert_eq!(t.forward("t", 0, batch(0, 3), 0), 0);
        assert_eq!(t.forward("t", 0, batch(3, 1), 0), 3);
    }

    #[test]
    fn the_table_is_bounded() {
        let t = Sequences::default();
        for p in 0..(MAX_LINES as i32 + 100) {
            t.forward("t", p, batch(0, 1), 1);
        }
        assert!(t.lines() <= MAX_LINES, "{} lines", t.lines());
        // The newest is kept.
        assert_eq!(
            t.forward("t", MAX_LINES as i32 + 99, batch(1, 1), 0),
            2,
            "the newest line was evicted"
        );
    }
}
