//! Randomness, at the bottom: key bytes from the operating system, and the
//! nonces of values from a generator that stays apart across `fork()`.
//!
//! Nonces come from a ChaCha12 generator per thread (`rand`'s `StdRng`),
//! seeded from the OS, that knows the process it was seeded in: when the
//! process id is not that one (a child made by `fork()`, which copies the
//! parent's memory, generator state included), it is seeded again from the
//! OS before it gives a byte. A parent and a child that go on encrypting
//! under one key after `fork()` never draw the same nonce
//! (`tests/fork_nonces.rs`). `rand`'s `ThreadRng`, used before, is not
//! reseeded on `fork()`: a child repeated its parent's nonces.
//!
//! The check costs one `getpid` per nonce (about 80 ns measured here, a
//! system call), where aws-lc's own generator, fork-safe too, took about
//! 400 ns per 12 bytes and the OS's `getrandom` about 230 ns.

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
    /// This thread's nonce generator and the process it was seeded in.
    static NONCES: RefCell<Option<(u32, StdRng)>> = const { RefCell::new(None) };
}

/// Fills `out` with a fresh nonce (see the module docs: fork-safe).
///
/// # Panics
/// If the operating system cannot provide randomness to seed it.
#[inline]
pub(crate) fn nonce(out: &mut [u8]) {
    let pid = std::process::id();
    NONCES.with(|cell| {
        let mut slot = cell.borrow_mut();
        match &mut *slot {
            Some((seeded_in, rng)) if *seeded_in == pid => rng.fill_bytes(out),
            slot => {
                let mut seed = [0u8; 32];
                // Never from another user-space generator: its state may be
                // the parent's.
                if rand::rngs::SysRng.try_fill_bytes(&mut seed).is_err() {
                    panic!("no randomness from the operating system to seed the nonces");
                }
                let mut rng = StdRng::from_seed(seed);
                zeroize::Zeroize::zeroize(&mut seed);
                rng.fill_bytes(out);
                *slot = Some((pid, rng));
            }
        }
    });
}
