//! What decoding may cost in memory, per request and across the process.
//!
//! A Produce request's record batches (and a Fetch response's) are
//! decompressed, decoded into records, checked by encoding them again, and
//! encrypted or decrypted into new batches. All of that is memory sized
//! by what a client (or a record planted on a broker) sent: a gzip batch
//! of 140 KiB inflates to 93.5 MiB of 14 million records, 2.4 GiB once
//! decoded. So every allocation decoding makes is taken from a [`Budget`]
//! first:
//! - the decompressed bytes, as the buffer grows ([`crate::inflate`]);
//! - then, before any record is decoded, the batch's cost as
//!   [`crate::records`] computes it from the counts it checked against the
//!   bytes: its records' in-memory size and its bytes three times more (the
//!   re-encoding that checks it, the new batch, the new keys and values),
//!   then its headers' in-memory size once they are counted.
//!
//! A request's budget is `max_decoded_bytes_per_request`; the process's,
//! shared by every request in flight, `max_decoded_bytes`. What a request
//! took is given back as soon as its decoding is done (the request
//! encrypted, the response decrypted), never held while a peer is slow to
//! take the result: a connection holds one request and one response in
//! hand at a time, outside the budget. A request that would go over
//! either is refused at once (its partition `CORRUPT_MESSAGE`, retriable),
//! counted in [`stats`](crate::stats) as `decode_budget_refused`: never
//! decoded, never an abort. So a request's decoding takes at most its
//! budget beside its frame, and all requests together at most the
//! process's, whatever the clients send.

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::stats::{self, Event};

/// The process's budget, shared by every request in flight.
#[derive(Debug)]
pub(crate) struct Pool {
    in_flight: AtomicUsize,
    max: usize,
}

impl Pool {
    /// A pool of `max` bytes.
    pub(crate) fn new(max: usize) -> Arc<Pool> {
        Arc::new(Pool {
            in_flight: AtomicUsize::new(0),
            max,
        })
    }

    /// Takes `n` bytes if they fit.
    fn take(&self, n: usize) -> bool {
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(n).filter(|total| *total <= self.max)
            })
            .is_ok()
    }

    fn give_back(&self, n: usize) {
        self.in_flight.fetch_sub(n, Ordering::AcqRel);
    }

    /// The bytes taken now (for tests).
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Acquire)
    }
}

/// One request's (or one Fetch response's) budget: what its decoding took
/// is held until it is dropped.
#[derive(Debug)]
pub(crate) struct Budget {
    pool: Arc<Pool>,
    /// The most a batch decompresses to (`max_frame_bytes`).
    pub(crate) decompress_limit: usize,
    max: usize,
    taken: Cell<usize>,
    /// What decoding the batches written so far (`note_written`) would
    /// take on the way back, and the longest of them decompressed.
    written: Cell<(usize, usize)>,
}

impl Budget {
    /// A request's budget of `max` bytes from `pool`; batches decompress
    /// to at most `decompress_limit` bytes.
    pub(crate) fn new(pool: &Arc<Pool>, max: usize, decompress_limit: usize) -> Budget {
        Budget {
            pool: Arc::clone(pool),
            decompress_limit,
            max,
            taken: Cell::new(0),
            written: Cell::new((0, 0)),
        }
    }

    /// A budget of its own (a pool of `max` bytes), for the fuzz targets
    /// and tests.
    pub(crate) fn alone(max: usize, decompress_limit: usize) -> Budget {
        Budget::new(&Pool::new(max), max, decompress_limit)
    }

    /// Takes `n` bytes for `what`, held until the budget is dropped.
    ///
    /// # Errors
    /// Why, when the request's budget or the process's cannot hold them
    /// (counted as `decode_budget_refused`).
    pub(crate) fn take(&self, n: usize, what: &str) -> Result<(), String> {
        let taken = self.taken.get();
        let fits = taken.checked_add(n).is_some_and(|t| t <= self.max);
        if !fits {
            stats::add(Event::DecodeBudgetRefused, 1);
            return Err(format!(
                "{what} would take {n} bytes to decode, past the request's budget \
                 ({taken} of {} taken; max_decoded_bytes_per_request)",
                self.max
            ));
        }
        if !self.pool.take(n) {
            stats::add(Event::DecodeBudgetRefused, 1);
            return Err(format!(
                "{what} would take {n} bytes to decode, past what the proxy holds for all \
                 requests at once ({} bytes; max_decoded_bytes): retry",
                self.pool.max
            ));
        }
        self.taken.set(taken + n);
        Ok(())
    }
}

impl Budget {
    /// Notes a batch written (encrypted on Produce) of `records` records,
    /// `bytes` long uncompressed, with `headers` headers, `compressed` or
    /// not: what a Fetch of it will take to decode, as
    /// [`take`](Budget::take) is charged then (decompressing counted at
    /// twice its length, the room a growing buffer takes).
    pub(crate) fn note_written(
        &self,
        records: usize,
        bytes: usize,
        headers: usize,
        compressed: bool,
    ) {
        let cost = crate::records::record_cost(records, bytes)
            .saturating_add(crate::records::header_cost(headers))
            .saturating_add(if compressed {
                bytes.saturating_mul(2)
            } else {
                0
            });
        let (total, longest) = self.written.get();
        self.written
            .set((total.saturating_add(cost), longest.max(bytes)));
    }

    /// Forgets the batches noted written (a new partition).
    pub(crate) fn clear_written(&self) {
        self.written.set((0, 0));
    }

    /// Whether the batches noted written can be read back: a Fetch of them
    /// alone fits a request's budget, and none decompresses past the
    /// limit. A batch that could not would be taken by the broker and then
    /// refused to every reader, on every Fetch, until retention removes it.
    ///
    /// # Errors
    /// Why not.
    pub(crate) fn written_fits(&self) -> Result<(), String> {
        let (total, longest) = self.written.get();
        if longest > self.decompress_limit {
            return Err(format!(
                "encrypted, the partition's records are {longest} bytes uncompressed, past the \
                 {} a batch may decompress to (max_frame_bytes): a Fetch could not read them back",
                self.decompress_limit
            ));
        }
        if total > self.max {
            return Err(format!(
                "encrypted, the partition's records would take {total} bytes to decode on Fetch, \
                 past a request's budget of {} (max_decoded_bytes_per_request): a Fetch could \
                 not read them back; write smaller batches",
                self.max
            ));
        }
        Ok(())
    }
}

impl Drop for Budget {
    fn drop(&mut self) {
        self.pool.give_back(self.taken.get());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_and_the_process_are_each_bounded_and_given_back() {
        let pool = Pool::new(100);
        let a = Budget::new(&pool, 60, 10);
        a.take(50, "a").unwrap();
        assert!(a.take(11, "a").unwrap_err().contains("request's budget"));
        let b = Budget::new(&pool, 60, 10);
        assert!(b.take(51, "b").unwrap_err().contains("all requests"));
        b.take(50, "b").unwrap();
        assert_eq!(pool.in_flight(), 100);
        drop(a);
        assert_eq!(pool.in_flight(), 50);
        drop(b);
        assert_eq!(pool.in_flight(), 0);
        // A count that would overflow is refused, not wrapped.
        let c = Budget::new(&pool, usize::MAX, 10);
        c.take(1, "c").unwrap();
        assert!(c.take(usize::MAX, "c").is_err());
    }
}
