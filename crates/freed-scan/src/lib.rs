//! A global allocator for tests that looks into every block it frees for
//! registered byte strings ("needles": pieces of a key, of its base64).
//!
//! A test starts a [`Session`], registers the needles, runs the code under
//! test and reads the [`Report`]: a freed block that still held a needle is a
//! copy of a secret that zeroizing never reached, for example the old block
//! of a buffer that grew while it held a key.
//!
//! While needles are registered:
//! - every `dealloc` scans the block before the system allocator gets it
//!   back;
//! - every `realloc` moves: a new block, a copy, then the old block is
//!   scanned and freed. The system allocator may grow a block in place, or
//!   may not; the scan assumes the worse, so a result does not depend on
//!   the heap's layout.
//!
//! With no needle registered it is the system allocator plus one atomic load
//! per call.
//!
//! Scanning allocates nothing and waits on no lock the code under test could
//! hold: the needles live in a fixed table of atomics, read in place under
//! a spin lock, and the counters are atomics. No copy of a needle is ever
//! put on a stack: a thread's stack is reused by later threads, and a value
//! moved from it into the heap carries its padding along, so a needle left
//! on a stack could turn up in a block that never held a key. (The test
//! using this should zeroize the needles it computes on its stack.)
//!
//! ```
//! use freed_scan::{FreedScan, Session};
//!
//! #[global_allocator]
//! static ALLOC: FreedScan = FreedScan;
//!
//! fn main() {
//!     let secret = *b"0123456789abcdef";
//!     let session = Session::start();
//!     session.add(&[&secret[..]]);
//!     drop(secret.to_vec()); // a copy freed without zeroizing
//!     assert_eq!(session.finish().blocks_with_needle, 1);
//! }
//! ```

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::Ordering::{Acquire, Relaxed, Release, SeqCst};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The most needles registered at once.
pub const MAX_NEEDLES: usize = 64;
/// The longest needle, in bytes.
pub const MAX_NEEDLE_LEN: usize = 32;
/// The shortest needle, in bytes (shorter ones would match by chance).
pub const MIN_NEEDLE_LEN: usize = 6;
/// How many hits the [`Report`] describes one by one.
pub const HITS_KEPT: usize = 16;

/// The system allocator, scanning the blocks it frees while needles are
/// registered. Install it with `#[global_allocator]` in a test binary.
#[derive(Clone, Copy, Debug, Default)]
pub struct FreedScan;

// The needle table: written under LOCK, copied out under LOCK.
static LOCK: AtomicBool = AtomicBool::new(false);
static COUNT: AtomicUsize = AtomicUsize::new(0);
static LENS: [AtomicUsize; MAX_NEEDLES] = [const { AtomicUsize::new(0) }; MAX_NEEDLES];
static BYTES: [AtomicU8; MAX_NEEDLES * MAX_NEEDLE_LEN] =
    [const { AtomicU8::new(0) }; MAX_NEEDLES * MAX_NEEDLE_LEN];
/// Whether some needle starts with this byte.
static FIRST: [AtomicBool; 256] = [const { AtomicBool::new(false) }; 256];

static BLOCKS: AtomicUsize = AtomicUsize::new(0);
static SCANNED: AtomicUsize = AtomicUsize::new(0);
static HITS: AtomicUsize = AtomicUsize::new(0);
static HIT_SIZE: [AtomicUsize; HITS_KEPT] = [const { AtomicUsize::new(0) }; HITS_KEPT];
static HIT_NEEDLE: [AtomicUsize; HITS_KEPT] = [const { AtomicUsize::new(0) }; HITS_KEPT];

static TRACE: AtomicBool = AtomicBool::new(false);
thread_local! {
    /// Set while this thread prints a trace (which allocates): its own
    /// frees are not scanned meanwhile.
    static TRACING: Cell<bool> = const { Cell::new(false) };
}

/// Serializes sessions (tests of one binary run on several threads).
static SESSION: Mutex<()> = Mutex::new(());

fn lock() {
    let mut spins = 0u32;
    while LOCK
        .compare_exchange_weak(false, true, Acquire, Relaxed)
        .is_err()
    {
        spins += 1;
        if spins % 64 == 0 {
            // The holder may be descheduled (2 cores, many test threads).
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn unlock() {
    LOCK.store(false, Release);
}

/// Adds `needles` to the table; every freed block is scanned for them from
/// now on.
///
/// # Panics
/// If a needle is shorter than [`MIN_NEEDLE_LEN`] or longer than
/// [`MAX_NEEDLE_LEN`], or the table would hold more than [`MAX_NEEDLES`].
pub fn add_needles(needles: &[&[u8]]) {
    for n in needles {
        assert!(
            (MIN_NEEDLE_LEN..=MAX_NEEDLE_LEN).contains(&n.len()),
            "a needle of {} bytes (allowed: {MIN_NEEDLE_LEN} to {MAX_NEEDLE_LEN})",
            n.len()
        );
    }
    lock();
    let at = COUNT.load(Relaxed);
    let fits = at + needles.len() <= MAX_NEEDLES;
    if fits {
        for (j, n) in needles.iter().enumerate() {
            for (k, &b) in n.iter().enumerate() {
                BYTES[(at + j) * MAX_NEEDLE_LEN + k].store(b, Relaxed);
            }
            LENS[at + j].store(n.len(), Relaxed);
            FIRST[usize::from(n[0])].store(true, Relaxed);
        }
        COUNT.store(at + needles.len(), Relaxed);
    }
    unlock();
    assert!(fits, "more than {MAX_NEEDLES} needles");
}

/// Forgets every needle (their bytes in the table are overwritten): no
/// block is scanned any more.
pub fn clear_needles() {
    lock();
    for b in &BYTES {
        b.store(0, Relaxed);
    }
    for f in &FIRST {
        f.store(false, Relaxed);
    }
    COUNT.store(0, Relaxed);
    unlock();
}

/// Sets the counters of the [`Report`] to zero.
pub fn reset_report() {
    BLOCKS.store(0, SeqCst);
    SCANNED.store(0, SeqCst);
    HITS.store(0, SeqCst);
}

/// Prints a backtrace to stderr for every block found holding a needle
/// (run the test with `--nocapture`: the capture of test output takes a
/// lock the trace could wait on).
pub fn trace_hits(on: bool) {
    TRACE.store(on, SeqCst);
}

/// One freed block that held a needle.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Hit {
    /// The block's size in bytes.
    pub block_size: usize,
    /// The index of the first needle found in it, in the order they were
    /// added.
    pub needle: usize,
}

/// What the scans found since the last [`reset_report`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    /// Freed blocks scanned (on every thread).
    pub blocks_scanned: usize,
    /// Their bytes.
    pub bytes_scanned: usize,
    /// Freed blocks that held at least one needle.
    pub blocks_with_needle: usize,
    /// The first [`HITS_KEPT`] of those.
    pub hits: Vec<Hit>,
}

/// The counters now.
pub fn report() -> Report {
    let found = HITS.load(SeqCst);
    Report {
        blocks_scanned: BLOCKS.load(SeqCst),
        bytes_scanned: SCANNED.load(SeqCst),
        blocks_with_needle: found,
        hits: (0..found.min(HITS_KEPT))
            .map(|i| Hit {
                block_size: HIT_SIZE[i].load(SeqCst),
                needle: HIT_NEEDLE[i].load(SeqCst),
            })
            .collect(),
    }
}

/// One test's use of the scanner: holds a process-wide lock so sessions on
/// other threads wait, starts with no needle and zero counters, and clears
/// the needles when finished or dropped (a failing test leaves none
/// behind).
#[derive(Debug)]
pub struct Session {
    _one_at_a_time: MutexGuard<'static, ()>,
}

impl Session {
    /// Waits for other sessions to end, then starts afresh.
    pub fn start() -> Session {
        let guard = SESSION.lock().unwrap_or_else(PoisonError::into_inner);
        clear_needles();
        reset_report();
        Session {
            _one_at_a_time: guard,
        }
    }

    /// Adds needles (see [`add_needles`]).
    ///
    /// # Panics
    /// As [`add_needles`].
    pub fn add(&self, needles: &[&[u8]]) {
        add_needles(needles);
    }

    /// The report so far; scanning goes on.
    pub fn report(&self) -> Report {
        report()
    }

    /// Clears the needles and returns the report.
    pub fn finish(self) -> Report {
        clear_needles();
        report()
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        clear_needles();
    }
}

fn record(block_size: usize, needle: usize) {
    let i = HITS.fetch_add(1, SeqCst);
    if i < HITS_KEPT {
        HIT_SIZE[i].store(block_size, SeqCst);
        HIT_NEEDLE[i].store(needle, SeqCst);
    }
    if TRACE.load(Relaxed) {
        let _ = TRACING.try_with(|t| t.set(true));
        let trace = std::backtrace::Backtrace::force_capture();
        eprintln!("freed-scan: a freed block of {block_size} bytes held needle {needle}\n{trace}");
        let _ = TRACING.try_with(|t| t.set(false));
    }
}

/// Whether frees are scanned now, on this thread.
fn scanning() -> bool {
    COUNT.load(Relaxed) > 0 && !(TRACE.load(Relaxed) && TRACING.try_with(Cell::get).unwrap_or(true))
}

// Why unsafe here, in a crate of a workspace whose main crate forbids it:
// a global allocator is an `unsafe impl GlobalAlloc`, and looking into a
// block about to be freed reads through its raw pointer. Nothing else in
// this file is unsafe. The bytes are read with volatile loads: part of a
// block may never have been written (spare capacity), and the compiler must
// assume nothing about them.

/// Scans a block about to be freed.
///
/// # Safety
/// `ptr` must be valid for reads of `size` bytes.
#[allow(unsafe_code)]
unsafe fn scan(ptr: *const u8, size: usize) {
    if size == 0 || !scanning() {
        return;
    }
    // SAFETY: `i < size`, and the caller vouches for `size` bytes.
    let byte = |i: usize| unsafe { ptr.add(i).read_volatile() };
    let needle = |j: usize, k: usize| BYTES[j * MAX_NEEDLE_LEN + k].load(Relaxed);
    let mut found = None;
    lock();
    let n = COUNT.load(Relaxed);
    'block: for i in 0..size {
        if !FIRST[usize::from(byte(i))].load(Relaxed) {
            continue;
        }
        for (j, len) in LENS.iter().take(n).enumerate() {
            let len = len.load(Relaxed);
            if len <= size - i && (0..len).all(|k| byte(i + k) == needle(j, k)) {
                found = Some(j);
                break 'block;
            }
        }
    }
    unlock();
    BLOCKS.fetch_add(1, Relaxed);
    SCANNED.fetch_add(size, Relaxed);
    if let Some(j) = found {
        record(size, j);
    }
}

#[allow(unsafe_code)]
// SAFETY: every call is forwarded to `System` with the caller's layout; the
// only additions read a block before it is freed (`scan`) and, in
// `realloc`, allocate-copy-free with the same layout rules `realloc`'s
// default implementation follows.
unsafe impl GlobalAlloc for FreedScan {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the block is live until `System.dealloc`, `layout.size()`
        // bytes long.
        unsafe {
            scan(ptr, layout.size());
            System.dealloc(ptr, layout);
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !scanning() {
            // SAFETY: forwarded as is.
            return unsafe { System.realloc(ptr, layout, new_size) };
        }
        // SAFETY: the caller guarantees `new_size`, rounded up to
        // `layout.align()`, does not overflow `isize` (`realloc`'s contract).
        let new_layout = unsafe { Layout::from_size_align_unchecked(new_size, layout.align()) };
        // SAFETY: `new_size` is non-zero (`realloc`'s contract).
        let new = unsafe { System.alloc(new_layout) };
        if !new.is_null() {
            // SAFETY: both blocks are live, distinct, and at least
            // `min(old, new)` bytes long; the old one is then scanned and
            // freed with its own layout.
            unsafe {
                core::ptr::copy_nonoverlapping(ptr, new, layout.size().min(new_size));
                scan(ptr, layout.size());
                System.dealloc(ptr, layout);
            }
        }
        new
    }
}
