//! The clock DEK ages are measured on, and (feature `test-hooks`) a way to
//! move it and to count the DEKs held: tests of expiry without sleeping.
//!
//! The clock is read once per value on both sides (expiry is checked on
//! use), and `Instant::now()` costs ~27 ns, a tenth of a 1 KiB value's
//! AES-GCM. So it is read in two grades: [`coarse`], on Linux
//! `CLOCK_MONOTONIC_COARSE` (the monotonic clock as of the kernel's last
//! timer tick, ~3 ns from the vDSO), and [`precise`], `CLOCK_MONOTONIC`
//! (what `Instant` reads). The coarse one lags by about a tick (4 ms at
//! 250 Hz; 7 ms seen under load) and is used only while every DEK of the
//! key expires more than [`COARSE_MARGIN`] later than it says, where a lag
//! cannot change the answer; nearer an expiry, and for the time an age
//! starts from, the precise one. Elsewhere than Linux both are `Instant`.

#[cfg(feature = "test-hooks")]
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

#[cfg(feature = "test-hooks")]
static SKEW_NANOS: AtomicU64 = AtomicU64::new(0);
#[cfg(feature = "test-hooks")]
static HELD: AtomicUsize = AtomicUsize::new(0);

/// How far the coarse clock may lag the precise one for expiry to stay
/// exact: a second, some hundred ticks.
pub(crate) const COARSE_MARGIN: u64 = 1_000_000_000;

/// Nanoseconds on the monotonic clock, as of the last timer tick.
#[inline]
pub(crate) fn coarse() -> u64 {
    skewed(read_coarse())
}

/// Nanoseconds on the monotonic clock.
#[inline]
pub(crate) fn precise() -> u64 {
    skewed(read_precise())
}

#[cfg(target_os = "linux")]
#[inline]
fn read_coarse() -> u64 {
    timespec_nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::MonotonicCoarse,
    ))
}

#[cfg(target_os = "linux")]
#[inline]
fn read_precise() -> u64 {
    timespec_nanos(rustix::time::clock_gettime(
        rustix::time::ClockId::Monotonic,
    ))
}

#[cfg(target_os = "linux")]
#[inline]
fn timespec_nanos(t: rustix::time::Timespec) -> u64 {
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(t.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn read_coarse() -> u64 {
    read_precise()
}

#[cfg(not(target_os = "linux"))]
#[inline]
fn read_precise() -> u64 {
    static EPOCH: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
    let epoch = *EPOCH.get_or_init(std::time::Instant::now);
    nanos(epoch.elapsed())
}

/// A duration in nanoseconds, `u64::MAX` past 584 years.
pub(crate) fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(not(feature = "test-hooks"))]
#[inline]
fn skewed(t: u64) -> u64 {
    t
}

/// The clock moved forward by [`advance_clock`].
#[cfg(feature = "test-hooks")]
#[inline]
fn skewed(t: u64) -> u64 {
    t.saturating_add(SKEW_NANOS.load(Ordering::Relaxed))
}

/// Moves the clock of every envelope key in the process forward.
#[cfg(feature = "test-hooks")]
pub(crate) fn advance_clock(by: Duration) {
    let by = nanos(by);
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
