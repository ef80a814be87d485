//! The crate's one error type.

use core::fmt;

use crate::keyset::KeyId;

/// Everything that can go wrong in tombstone-crypt.
///
/// No variant ever carries key bytes or plaintext. Every authentication
/// failure is the same [`Error::Decryption`]: an attacker learns nothing about
/// which check failed. The version byte and key id of a ciphertext are public,
/// so [`Error::UnsupportedVersion`] and [`Error::UnknownKeyId`] are distinct.
///
/// Codec failures keep only a redacted description (the kind of failure and
/// where it happened), never the inner codec's own message: serde's messages
/// quote the offending values, which would put plaintext into logs.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The ciphertext is shorter than the 33 bytes every value carries
    /// (prefix, key id, nonce and tag).
    Truncated {
        /// How many bytes were given.
        len: usize,
        /// How many bytes a ciphertext has at least.
        min: usize,
    },
    /// The first byte is not the Tink prefix `0x01`.
    UnsupportedVersion(u8),
    /// No key with this id is in the keyset.
    UnknownKeyId(KeyId),
    /// The key with this id is in the keyset but disabled: it never decrypts.
    KeyDisabled(KeyId),
    /// Authentication failed: wrong key, wrong context (topic or record key),
    /// or a tampered ciphertext. Deliberately says nothing more.
    Decryption,
    /// The cipher refused to encrypt (the value or the associated data is
    /// longer than AES-GCM allows).
    Encryption,
    /// An inner codec failed to encode or decode a value.
    Codec {
        /// The codec's name (`"bincode"`, `"json"`, `"utf8"`, ...).
        codec: &'static str,
        /// A redacted description: the kind of failure, never a value.
        detail: String,
    },
    /// An inner serializer returned `None` for a present value: a present
    /// value must never silently become a tombstone.
    InnerReturnedNone,
    /// A context field is too long to be encoded in the associated data.
    ContextTooLong,
    /// A keyset (or its Tink JSON) is malformed or unsupported.
    Keyset(String),
    /// A key management call named a key id that is not in the keyset.
    KeyNotFound(KeyId),
    /// A key management call would disable or remove the primary key.
    PrimaryKey(KeyId),
    /// The backing store failed (I/O, corruption, a closed database).
    Store(String),
    /// A changelog failed (I/O or a broker error).
    Changelog(String),
}

impl Error {
    /// A codec error for an inner codec written outside this crate.
    ///
    /// `detail` must describe the kind of failure only: never put the value,
    /// or a message that quotes it, into an error.
    pub fn codec(codec: &'static str, detail: impl Into<String>) -> Self {
        Error::Codec {
            codec,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { len, min } => write!(
                f,
                "ciphertext truncated: {len} bytes, a ciphertext has at least {min}"
            ),
            Error::UnsupportedVersion(v) => write!(
                f,
                "unsupported ciphertext version byte 0x{v:02x} (expected 0x01)"
            ),
            Error::UnknownKeyId(id) => write!(f, "unknown key id {id}"),
            Error::KeyDisabled(id) => write!(f, "key id {id} is disabled"),
            Error::Decryption => f.write_str("decryption failed"),
            Error::Encryption => f.write_str("encryption failed: value too long for AES-GCM"),
            Error::Codec { codec, detail } => write!(f, "{codec} codec failed: {detail}"),
            Error::InnerReturnedNone => f.write_str(
                "inner serde returned no value for a present value (a present value never becomes a tombstone)",
            ),
            Error::ContextTooLong => f.write_str("context too long for the associated data"),
            Error::Keyset(msg) => write!(f, "invalid keyset: {msg}"),
            Error::KeyNotFound(id) => write!(f, "no key with id {id} in the keyset"),
            Error::PrimaryKey(id) => {
                write!(f, "key id {id} is the primary key and cannot be disabled or removed")
            }
            Error::Store(msg) => write!(f, "store failed: {msg}"),
            Error::Changelog(msg) => write!(f, "changelog failed: {msg}"),
        }
    }
}

impl std::error::Error for Error {}
