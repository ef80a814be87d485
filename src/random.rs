//! Randomness, at the bottom: key bytes from the operating system, and the
//! nonces of values from a generator that stays apart across `fork()`.
//!
//! Nonces: with the feature `aws-lc` (the default), from aws-lc's
//! generator (`aws_lc_rs::rand::fill`): a per-thread DRBG seeded from the
//! OS, which aws-lc reseeds when the process forks (its fork detection), so
//! a parent and a child that go on encrypting under one key after `fork()`
//! never draw the same nonce. Without it (the RustCrypto backend), from
//! the OS for each nonce (`getrandom`): fork-safe too, at the cost of a
//! system call per value. `rand`'s `ThreadRng`, used before, is not
//! reseeded on `fork()`: a child repeated its parent's nonces
//! (`tests/fork_nonces.rs`).

use rand::TryRng as _;

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

/// Fills `out` with a fresh nonce (see the module docs: fork-safe).
///
/// # Panics
/// If no randomness can be had at all (aws-lc's generator and the OS both
/// fail).
#[inline]
pub(crate) fn nonce(out: &mut [u8]) {
    #[cfg(feature = "aws-lc")]
    if aws_lc_rs::rand::fill(out).is_ok() {
        return;
    }
    if rand::rngs::SysRng.try_fill_bytes(out).is_err() {
        panic!("no randomness for a nonce: the operating system gave none");
    }
}
