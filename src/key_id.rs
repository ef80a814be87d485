//! Key ids: the 32-bit number that names a key in a keyset and in every
//! ciphertext. At the bottom with the errors, which name keys by it.

use core::fmt;

/// A key's id: the 32-bit number that Tink writes, big-endian, after the
/// version byte of every ciphertext.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KeyId(pub u32);

impl fmt::Display for KeyId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
