//! The cipher backends under the envelope: AES-GCM with a 96-bit nonce and a
//! 128-bit tag, on one key. Nothing here knows about the wire format.
//!
//! Two implementations plug in here, and neither changes a byte on the wire:
//!
//! - RustCrypto's `aes-gcm`, always compiled;
//! - with the cargo feature `aws-lc`, `aws-lc-rs` (the provider rustls uses
//!   by default). The layer then uses it for every key, AES-128 and AES-256
//!   alike: `Backend::DEFAULT` is `Backend::AwsLc`. The RustCrypto path
//!   stays compiled and reachable (each key is expanded for both), so one
//!   process can measure both and check that each reads what the other
//!   writes; the serializers' hidden `with_rustcrypto_backend` selects it.
//!
//! Both backends check the tag themselves, in constant time; nothing here
//! compares tags by hand.

#[cfg(feature = "aws-lc")]
use std::sync::Arc;

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce, Tag};
#[cfg(feature = "aws-lc")]
use aws_lc_rs::aead as awslc;
use zeroize::Zeroizing;

use crate::error::Error;

/// Length of the nonce (IV) in bytes.
pub(crate) const NONCE_LEN: usize = 12;
/// Length of the authentication tag in bytes.
pub(crate) const TAG_LEN: usize = 16;

/// Which AES-GCM implementation does the work. Both write and read exactly
/// the same bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Backend {
    /// RustCrypto's `aes-gcm` (AES-NI and CLMUL when the CPU has them).
    RustCrypto,
    /// `aws-lc-rs` (feature `aws-lc`).
    #[cfg(feature = "aws-lc")]
    AwsLc,
}

impl Backend {
    /// The backend the layer uses: aws-lc when the feature is on, else
    /// RustCrypto.
    #[cfg(feature = "aws-lc")]
    pub(crate) const DEFAULT: Backend = Backend::AwsLc;
    /// The backend the layer uses: aws-lc when the feature is on, else
    /// RustCrypto.
    #[cfg(not(feature = "aws-lc"))]
    pub(crate) const DEFAULT: Backend = Backend::RustCrypto;
}

impl Backend {
    /// A short name, for tests and benchmarks.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Backend::RustCrypto => "rustcrypto",
            #[cfg(feature = "aws-lc")]
            Backend::AwsLc => "aws-lc",
        }
    }
}

impl Default for Backend {
    fn default() -> Self {
        Backend::DEFAULT
    }
}

/// One AES-GCM key: its bytes (kept for export, zeroized on drop) and the
/// expanded cipher of each backend. RustCrypto's round keys are zeroized on
/// drop by `aes`'s `zeroize` feature; aws-lc's key schedule lives in memory
/// aws-lc allocated, and aws-lc cleanses that memory when it frees it.
#[derive(Clone)]
pub(crate) struct KeyMaterial {
    bytes: Zeroizing<Vec<u8>>,
    cipher: Cipher,
    /// Not `Clone` in aws-lc-rs (by design); clones of a key share it.
    #[cfg(feature = "aws-lc")]
    aws_lc: Arc<awslc::LessSafeKey>,
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
        #[cfg(feature = "aws-lc")]
        let aws_lc = {
            let alg = match cipher {
                Cipher::Aes128(_) => &awslc::AES_128_GCM,
                Cipher::Aes256(_) => &awslc::AES_256_GCM,
            };
            let key = awslc::UnboundKey::new(alg, bytes).map_err(|_| bad_len(bytes.len()))?;
            Arc::new(awslc::LessSafeKey::new(key))
        };
        Ok(KeyMaterial {
            bytes: Zeroizing::new(bytes.to_vec()),
            cipher,
            #[cfg(feature = "aws-lc")]
            aws_lc,
        })
    }

    /// The raw key bytes (for cleartext export only).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// Encrypts `buf` in place with the default backend and returns the tag.
    pub(crate) fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        self.seal_in_place_with(Backend::DEFAULT, nonce, aad, buf)
    }

    /// Encrypts `buf` in place with `backend` and returns the tag.
    #[inline]
    pub(crate) fn seal_in_place_with(
        &self,
        backend: Backend,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        match backend {
            Backend::RustCrypto => self.seal_rustcrypto(nonce, aad, buf),
            #[cfg(feature = "aws-lc")]
            Backend::AwsLc => self.seal_aws_lc(nonce, aad, buf),
        }
    }

    #[inline]
    fn seal_rustcrypto(
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

    #[cfg(feature = "aws-lc")]
    #[inline]
    fn seal_aws_lc(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        let tag = self
            .aws_lc
            .seal_in_place_separate_tag(
                awslc::Nonce::assume_unique_for_key(*nonce),
                awslc::Aad::from(aad),
                buf,
            )
            .map_err(|_| Error::Encryption)?;
        tag.as_ref().try_into().map_err(|_| Error::Encryption)
    }

    /// Verifies the tag and decrypts `buf` in place with the default
    /// backend. On failure `buf` holds no plaintext.
    pub(crate) fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        self.open_in_place_with(Backend::DEFAULT, nonce, aad, buf, tag)
    }

    /// Verifies the tag (in constant time, inside the backend) and decrypts
    /// `buf` in place with `backend`. On failure `buf` holds no plaintext.
    #[inline]
    pub(crate) fn open_in_place_with(
        &self,
        backend: Backend,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        match backend {
            Backend::RustCrypto => self.open_rustcrypto(nonce, aad, buf, tag),
            #[cfg(feature = "aws-lc")]
            Backend::AwsLc => self.open_aws_lc(nonce, aad, buf, tag),
        }
    }

    #[inline]
    fn open_rustcrypto(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        let nonce = Nonce::from(*nonce);
        let tag = Tag::from(*tag);
        // `aes-gcm` checks the tag before it decrypts: on failure `buf` still
        // holds the ciphertext.
        match &self.cipher {
            Cipher::Aes128(c) => c.decrypt_inout_detached(&nonce, aad, buf.into(), &tag),
            Cipher::Aes256(c) => c.decrypt_inout_detached(&nonce, aad, buf.into(), &tag),
        }
        .map_err(|_| Error::Decryption)
    }

    #[cfg(feature = "aws-lc")]
    #[inline]
    fn open_aws_lc(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        let opened = self.aws_lc.open_in_place_separate_tag(
            awslc::Nonce::assume_unique_for_key(*nonce),
            awslc::Aad::from(aad),
            tag,
            buf,
        );
        match opened {
            Ok(_) => Ok(()),
            Err(_) => {
                // aws-lc decrypts while it authenticates and clears the
                // output when the tag does not match; aws-lc-rs documents the
                // buffer as unspecified then, so clear it here as well.
                zeroize::Zeroize::zeroize(buf);
                Err(Error::Decryption)
            }
        }
    }
}

fn bad_len(n: usize) -> Error {
    Error::Keyset(format!("AES-GCM key must be 16 or 32 bytes, got {n}"))
}
