//! Randomness, at the bottom: key bytes from the operating system, and the
//! nonces of values from a generator that stays apart across `fork()`.
//!
//! Nonces come from a ChaCha12 generator per thread (`rand`'s `StdRng`),
//! seeded from the OS, that knows whether the process forked since it was
//! seeded: a `pthread_atfork` child handler (the `forkguard` crate's)
//! bumps a process-wide counter in a child made by `fork()`, which copies
//! the parent's memory, generator state included; a generator that sees
//! the counter changed is seeded again from the OS before it gives a
//! byte. A parent and a child that go on encrypting under one key after
//! `fork()` never draw the same nonce (`tests/fork_nonces.rs`). `rand`'s
//! `ThreadRng`, used before, is not reseeded on `fork()`: a child repeated
//! its parent's nonces.
//!
//! The check is one relaxed atomic load per nonce. A `getpid` per nonce,
//! the check before it, cost 80 to 150 ns (a system call); aws-lc's own
//! generator, fork-safe too, took about 400 ns per 12 bytes and the OS's
//! `getrandom` about 230 ns. What the handler does not see: a child made
//! by a raw `clone` system call without `CLONE_VM` (not `fork()`, not
//! `posix_spawn`) that goes on running this process's code without `exec`.
//! Such a child must not encrypt with the parent's keys.

use std::cell::RefCell;

use rand::rngs::StdRng;
use rand::TryRng as _;
use rand::{Rng as _, SeedableRng as _};

/// Fills `out` with key bytes from the OS.
///
/// # Panics
/// If the operating system cannot provide randomness at all.
pub(crate) fn fill_from_os(out: &mut [u8]) {
    if rand::rngs::SysRng.try_fill_bytes(out).is_err() {
        // Fall back to the OS-seeded thread RNG, which panics only if the OS
        // cannot provide randomness at all.
        rand::Rng::fill_bytes(&mut rand::rng(), out);
    }
}

thread_local! {
    /// This thread's nonce generator, and the fork guard of the process it
    /// was seeded in.
    static NONCES: RefCell<Option<(forkguard::Guard, StdRng)>> = const { RefCell::new(None) };
}

/// Fills `out` with a fresh nonce (see the module docs: fork-safe).
///
/// # Panics
/// If the operating system cannot provide randomness to seed it, or the
/// fork handler cannot be registered.
#[inline]
pub(crate) fn nonce(out: &mut [u8]) {
    NONCES.with(|cell| {
        let mut slot = cell.borrow_mut();
        if let Some((guard, rng)) = &mut *slot {
            if !guard.detected_fork() {
                rng.fill_bytes(out);
                return;
            }
        }
        // None yet, or the process forked since: a generator of this
        // process's own. The guard first: a fork after it is seen.
        let guard = forkguard::Guard::try_new()
            .unwrap_or_else(|e| panic!("no fork detection for the nonces' generator: {e}"));
        let mut seed = [0u8; 32];
        // Never from another user-space generator: its state may be the
        // parent's.
        if rand::rngs::SysRng.try_fill_bytes(&mut seed).is_err() {
            panic!("no randomness from the operating system to seed the nonces");
        }
        let mut rng = StdRng::from_seed(seed);
        zeroize::Zeroize::zeroize(&mut seed);
        rng.fill_bytes(out);
        *slot = Some((guard, rng));
    });
}
