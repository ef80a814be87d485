//! A ciphertext's header and layout, read without a key: the version byte,
//! the key id it names, and the lengths of its parts under a key type.
//! What the command line's `inspect` and `audit` show, so that no code
//! outside the library reads the format's bytes.
//!
//! A header says what the bytes would be if they are a ciphertext of this
//! format: a plaintext may start so too. A value's format comes from its
//! topic's policy, never from its first byte; this names the key id of a
//! value the policy could not read, and shows a value's shape.

use crate::cipher::{NONCE_LEN, SIV_LEN, TAG_LEN};
use crate::envelope::VERSION;
use crate::key_id::KeyId;
use crate::primitive::PREFIX_LEN;

/// The type of a key, as its keyset names it (Tink's type URL).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeyType {
    /// AES-256-GCM (`type.googleapis.com/google.crypto.tink.AesGcmKey`).
    AesGcm,
    /// AES-SIV, deterministic (`...AesSivKey`): record keys.
    AesSiv,
    /// A KMS envelope key (`...KmsEnvelopeAeadKey`).
    KmsEnvelope,
}

impl KeyType {
    /// The key type a Tink type URL names; `None` for one this crate does
    /// not know.
    pub fn from_type_url(url: &str) -> Option<KeyType> {
        match url.rsplit('.').next() {
            Some("AesGcmKey") => Some(KeyType::AesGcm),
            Some("AesSivKey") => Some(KeyType::AesSiv),
            Some("KmsEnvelopeAeadKey") => Some(KeyType::KmsEnvelope),
            _ => None,
        }
    }

    /// Its short name: `aes-gcm`, `aes-siv` or `kms-envelope`.
    pub fn name(self) -> &'static str {
        match self {
            KeyType::AesGcm => "aes-gcm",
            KeyType::AesSiv => "aes-siv",
            KeyType::KmsEnvelope => "kms-envelope",
        }
    }
}

/// The header of a ciphertext of this format: the version byte `0x01`,
/// then the id of the key it was written under (big-endian `u32`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Header {
    /// The key id it names.
    pub key_id: KeyId,
}

/// The length of a header: the version byte and the key id.
pub const HEADER_LEN: usize = PREFIX_LEN;

impl Header {
    /// The header `bytes` start with; `None` when they are shorter than a
    /// header or do not start with the version byte.
    ///
    /// ```
    /// use tombstone_crypt::format::Header;
    /// use tombstone_crypt::Keyset;
    ///
    /// let keyset = Keyset::generate();
    /// let ct = keyset.encrypt(b"balance=100", b"ad").unwrap();
    /// assert_eq!(Header::parse(&ct), Some(Header { key_id: keyset.primary() }));
    /// assert_eq!(Header::parse(b"{\"json\": 1}"), None);
    /// assert_eq!(Header::parse(&[1, 0, 0]), None);
    /// ```
    pub fn parse(bytes: &[u8]) -> Option<Header> {
        match bytes {
            [VERSION, a, b, c, d, ..] => Some(Header {
                key_id: KeyId(u32::from_be_bytes([*a, *b, *c, *d])),
            }),
            _ => None,
        }
    }
}

/// The parts of a ciphertext under a key of its type: their lengths in
/// bytes, never their bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Layout {
    /// `header | nonce | encrypted value | tag`.
    AesGcm {
        /// The nonce's length (12).
        nonce: usize,
        /// The encrypted value's length (the plaintext's).
        encrypted_value: usize,
        /// The tag's length (16).
        tag: usize,
    },
    /// `header | SIV | encrypted value`.
    AesSiv {
        /// The synthetic IV's length (16).
        siv: usize,
        /// The encrypted value's length (the plaintext's).
        encrypted_value: usize,
    },
    /// `header | u32be(EDEK length) | EDEK | nonce | encrypted value | tag`.
    KmsEnvelope {
        /// The encrypted data key's length, as the ciphertext says it.
        encrypted_data_key: usize,
        /// The nonce's length (12).
        nonce: usize,
        /// The encrypted value's length (the plaintext's).
        encrypted_value: usize,
        /// The tag's length (16).
        tag: usize,
    },
}

impl Layout {
    /// The layout of `bytes` as a ciphertext under a key of `key_type`;
    /// `None` when they do not start with a header or are too short for
    /// one (an envelope: for the encrypted data key it says it has).
    ///
    /// ```
    /// use tombstone_crypt::format::{KeyType, Layout};
    /// use tombstone_crypt::Keyset;
    ///
    /// let ct = Keyset::generate().encrypt(b"balance=100", b"ad").unwrap();
    /// assert_eq!(
    ///     Layout::of(&ct, KeyType::AesGcm),
    ///     Some(Layout::AesGcm { nonce: 12, encrypted_value: 11, tag: 16 })
    /// );
    /// assert_eq!(Layout::of(&ct[..20], KeyType::AesGcm), None);
    /// ```
    pub fn of(bytes: &[u8], key_type: KeyType) -> Option<Layout> {
        Header::parse(bytes)?;
        let body = &bytes[HEADER_LEN..];
        match key_type {
            KeyType::AesGcm => Some(Layout::AesGcm {
                nonce: NONCE_LEN,
                encrypted_value: body.len().checked_sub(NONCE_LEN + TAG_LEN)?,
                tag: TAG_LEN,
            }),
            KeyType::AesSiv => Some(Layout::AesSiv {
                siv: SIV_LEN,
                encrypted_value: body.len().checked_sub(SIV_LEN)?,
            }),
            KeyType::KmsEnvelope => {
                let n = body.get(..4)?;
                let edek = u32::from_be_bytes([n[0], n[1], n[2], n[3]]) as usize;
                let rest = body.len().checked_sub(4)?.checked_sub(edek)?;
                Some(Layout::KmsEnvelope {
                    encrypted_data_key: edek,
                    nonce: NONCE_LEN,
                    encrypted_value: rest.checked_sub(NONCE_LEN + TAG_LEN)?,
                    tag: TAG_LEN,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_urls_name_their_types() {
        let base = "type.googleapis.com/google.crypto.tink.";
        assert_eq!(
            KeyType::from_type_url(&format!("{base}AesGcmKey")),
            Some(KeyType::AesGcm)
        );
        assert_eq!(
            KeyType::from_type_url(&format!("{base}AesSivKey")),
            Some(KeyType::AesSiv)
        );
        assert_eq!(
            KeyType::from_type_url(&format!("{base}KmsEnvelopeAeadKey")),
            Some(KeyType::KmsEnvelope)
        );
        assert_eq!(KeyType::from_type_url(&format!("{base}HmacKey")), None);
    }

    #[test]
    fn an_envelope_too_short_for_its_edek_has_no_layout() {
        let mut ct = vec![1, 0, 0, 0, 7];
        ct.extend_from_slice(&100u32.to_be_bytes());
        ct.extend_from_slice(&[0; 60]);
        assert_eq!(Layout::of(&ct, KeyType::KmsEnvelope), None);
        let mut ok = vec![1, 0, 0, 0, 7];
        ok.extend_from_slice(&10u32.to_be_bytes());
        ok.extend_from_slice(&[0; 10 + 12 + 3 + 16]);
        assert_eq!(
            Layout::of(&ok, KeyType::KmsEnvelope),
            Some(Layout::KmsEnvelope {
                encrypted_data_key: 10,
                nonce: 12,
                encrypted_value: 3,
                tag: 16
            })
        );
        // A length past any memory: no overflow, no layout.
        let mut huge = vec![1, 0, 0, 0, 7];
        huge.extend_from_slice(&u32::MAX.to_be_bytes());
        assert_eq!(Layout::of(&huge, KeyType::KmsEnvelope), None);
    }
}
