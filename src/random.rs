//! Key bytes from the operating system. At the bottom: the key types and
//! the envelope key's data keys take their key material from here.

use rand::{Rng as _, TryRng as _};

/// Fills `out` with key bytes from the OS.
///
/// # Panics
/// If the operating system cannot provide randomness at all.
pub(crate) fn fill_from_os(out: &mut [u8]) {
    // Keys come straight from the OS; values' nonces use a thread-local CSPRNG.
    if rand::rngs::SysRng.try_fill_bytes(out).is_err() {
        // Fall back to the OS-seeded thread RNG, which panics only if the OS
        // cannot provide randomness at all.
        rand::rng().fill_bytes(out);
    }
}
