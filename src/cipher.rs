//! The cipher backend under the envelope: AES-GCM with a 96-bit nonce and a
//! 128-bit tag, on one key. Nothing here knows about the wire format.
//!
//! A second backend plugs in here and changes no byte on the wire.

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce, Tag};
use zeroize::Zeroizing;

use crate::error::Error;

/// Length of the nonce (IV) in bytes.
pub(crate) const NONCE_LEN: usize = 12;
/// Length of the authentication tag in bytes.
pub(crate) const TAG_LEN: usize = 16;

/// One AES-GCM key: its bytes (kept for export, zeroized on drop) and the
/// expanded cipher (round keys zeroized on drop by `aes`'s `zeroize` feature).
#[derive(Clone)]
pub(crate) struct KeyMaterial {
    bytes: Zeroizing<Vec<u8>>,
    cipher: Cipher,
}

#[derive(Clone)]
enum Cipher {
    Aes128(Box<Aes128Gcm>),
    Aes256(Box<Aes256Gcm>),
}

impl KeyMaterial {
    /// A key from 16 (AES-128) or 32 (AES-256) bytes.
    pub(crate) fn from_bytes(bytes: &[u8]) -> Result<Self, Error> {
        let cipher = match bytes.len() {
            16 => Cipher::Aes128(Box::new(
                Aes128Gcm::new_from_slice(bytes).map_err(|_| bad_len(bytes.len()))?,
            )),
            32 => Cipher::Aes256(Box::new(
                Aes256Gcm::new_from_slice(bytes).map_err(|_| bad_len(bytes.len()))?,
            )),
            n => return Err(bad_len(n)),
        };
        Ok(KeyMaterial {
            bytes: Zeroizing::new(bytes.to_vec()),
            cipher,
        })
    }

    /// The raw key bytes (for cleartext export only).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Encrypts `buf` in place and returns the tag.
    pub(crate) fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        let nonce = Nonce::from(*nonce);
        let tag = match &self.cipher {
            Cipher::Aes128(c) => c.encrypt_inout_detached(&nonce, aad, buf.into()),
            Cipher::Aes256(c) => c.encrypt_inout_detached(&nonce, aad, buf.into()),
        }
        .map_err(|_| Error::Encryption)?;
        Ok(tag.into())
    }

    /// Verifies the tag (in constant time, inside `aes-gcm`) and decrypts
    /// `buf` in place. On failure `buf` holds no plaintext.
    pub(crate) fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        let nonce = Nonce::from(*nonce);
        let tag = Tag::from(*tag);
        match &self.cipher {
            Cipher::Aes128(c) => c.decrypt_inout_detached(&nonce, aad, buf.into(), &tag),
            Cipher::Aes256(c) => c.decrypt_inout_detached(&nonce, aad, buf.into(), &tag),
        }
        .map_err(|_| Error::Decryption)
    }
}

fn bad_len(n: usize) -> Error {
    Error::Keyset(format!("AES-GCM key must be 16 or 32 bytes, got {n}"))
}
