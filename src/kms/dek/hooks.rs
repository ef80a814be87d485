//! The clock DEK ages are measured on, and (feature `test-hooks`) a way to
//! move it and to count the DEKs held: tests of expiry without sleeping.

use std::time::Instant;
#[cfg(feature = "test-hooks")]
use std::{
    sync::atomic::{AtomicU64, AtomicUsize, Ordering},
    time::Duration,
};

#[cfg(feature = "test-hooks")]
static SKEW_NANOS: AtomicU64 = AtomicU64::new(0);
#[cfg(feature = "test-hooks")]
static HELD: AtomicUsize = AtomicUsize::new(0);

/// Now: the monotonic clock.
#[cfg(not(feature = "test-hooks"))]
#[inline]
pub(crate) fn now() -> Instant {
    Instant::now()
}

/// Now: the monotonic clock, moved forward by [`advance_clock`].
#[cfg(feature = "test-hooks")]
#[inline]
pub(crate) fn now() -> Instant {
    let now = Instant::now();
    let skew = Duration::from_nanos(SKEW_NANOS.load(Ordering::Relaxed));
    now.checked_add(skew).unwrap_or(now)
}

/// Moves the clock of every envelope key in the process forward.
#[cfg(feature = "test-hooks")]
pub(crate) fn advance_clock(by: Duration) {
    let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
    let _ = SKEW_NANOS.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |s| {
        Some(s.saturating_add(by))
    });
}

/// DEKs (unwrapped data keys) held by the envelope keys of the process.
#[cfg(feature = "test-hooks")]
pub(crate) fn deks_in_memory() -> usize {
    HELD.load(Ordering::SeqCst)
}

/// One DEK held by an envelope key (shared by the writer's DEK and its
/// cache entry): counted under `test-hooks`, nothing otherwise.
pub(crate) struct Held(());

impl Held {
    pub(crate) fn new() -> Self {
        #[cfg(feature = "test-hooks")]
        HELD.fetch_add(1, Ordering::SeqCst);
        Held(())
    }
}

#[cfg(feature = "test-hooks")]
impl Drop for Held {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}
