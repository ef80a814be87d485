//! AES-GCM with a 96-bit nonce and a 128-bit tag on one key, on the backend
//! chosen when the key is built. Nothing here knows about the wire format.
//!
//! Two implementations plug in here, and neither changes a byte on the wire:
//!
//! - RustCrypto's `aes-gcm`, always compiled;
//! - with the cargo feature `aws-lc`, `aws-lc-rs` (the provider rustls uses
//!   by default), the default backend under the feature.
//!
//! A key is expanded for exactly one backend: [`AesGcmKey`] holds one
//! [`Cipher`], an enum with one variant per (backend, key size), so there is
//! no second key schedule to keep in memory or to zeroize. Both backends check
//! the tag themselves, in constant time; nothing here compares tags by hand.

use std::sync::{Arc, Mutex};

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce, Tag};
#[cfg(feature = "aws-lc")]
use aws_lc_rs::aead as awslc;
use zeroize::Zeroizing;

use crate::error::{Error, KeysetErrorKind};
use crate::stats::{slot_of, slots};

/// Length of the nonce (IV) in bytes.
pub(crate) const NONCE_LEN: usize = 12;
/// Length of the authentication tag in bytes.
pub(crate) const TAG_LEN: usize = 16;

/// Which AES-GCM implementation a keyset's keys are expanded for. Both write
/// and read exactly the same bytes; the choice is made once, when a keyset is
/// built or with [`Keyset::with_backend`](crate::Keyset::with_backend).
///
/// ```
/// use tombstone_crypt::{Backend, Keyset};
///
/// let keyset = Keyset::generate().with_backend(Backend::RustCrypto);
/// assert_eq!(keyset.backend(), Backend::RustCrypto);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// RustCrypto's `aes-gcm` (AES-NI and CLMUL when the CPU has them).
    RustCrypto,
    /// `aws-lc-rs` (cargo feature `aws-lc`).
    #[cfg(feature = "aws-lc")]
    #[cfg_attr(docsrs, doc(cfg(feature = "aws-lc")))]
    AwsLc,
}

impl Backend {
    /// The backend new keysets use: aws-lc when the feature `aws-lc` is on,
    /// else RustCrypto.
    #[cfg(feature = "aws-lc")]
    pub const DEFAULT: Backend = Backend::AwsLc;
    /// The backend new keysets use: aws-lc when the feature `aws-lc` is on,
    /// else RustCrypto.
    #[cfg(not(feature = "aws-lc"))]
    pub const DEFAULT: Backend = Backend::RustCrypto;

    /// A short name: `"rustcrypto"` or `"aws-lc"`.
    pub fn name(self) -> &'static str {
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

/// One AES-GCM key: its bytes (kept for export, zeroized on drop) and its
/// cipher, expanded for one backend. RustCrypto's round keys are zeroized on
/// drop by `aes`'s `zeroize` feature; aws-lc's key schedule lives in memory
/// aws-lc allocated, and aws-lc cleanses that memory when it frees it.
#[derive(Clone)]
pub(crate) struct AesGcmKey {
    bytes: Zeroizing<Vec<u8>>,
    cipher: Cipher,
}

/// The expanded key: exactly one backend's.
#[derive(Clone)]
enum Cipher {
    Aes128(Box<Aes128Gcm>),
    Aes256(Box<Aes256Gcm>),
    /// Not `Clone` in aws-lc-rs (by design); clones of a key share it.
    #[cfg(feature = "aws-lc")]
    AwsLc(Arc<awslc::LessSafeKey>),
}

impl AesGcmKey {
    /// A key from 16 (AES-128) or 32 (AES-256) bytes, expanded for
    /// `backend`.
    pub(crate) fn new(bytes: &[u8], backend: Backend) -> Result<Self, Error> {
        if bytes.len() != 16 && bytes.len() != 32 {
            return Err(bad_len(bytes.len()));
        }
        let cipher = match backend {
            Backend::RustCrypto if bytes.len() == 16 => Cipher::Aes128(Box::new(
                Aes128Gcm::new_from_slice(bytes).map_err(|_| bad_len(bytes.len()))?,
            )),
            Backend::RustCrypto => Cipher::Aes256(Box::new(
                Aes256Gcm::new_from_slice(bytes).map_err(|_| bad_len(bytes.len()))?,
            )),
            #[cfg(feature = "aws-lc")]
            Backend::AwsLc => {
                let alg = if bytes.len() == 16 {
                    &awslc::AES_128_GCM
                } else {
                    &awslc::AES_256_GCM
                };
                let key = awslc::UnboundKey::new(alg, bytes).map_err(|_| bad_len(bytes.len()))?;
                Cipher::AwsLc(Arc::new(awslc::LessSafeKey::new(key)))
            }
        };
        Ok(AesGcmKey {
            bytes: Zeroizing::new(bytes.to_vec()),
            cipher,
        })
    }

    /// The raw key bytes (for cleartext export only).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The backend this key is expanded for.
    pub(crate) fn backend(&self) -> Backend {
        match self.cipher {
            Cipher::Aes128(_) | Cipher::Aes256(_) => Backend::RustCrypto,
            #[cfg(feature = "aws-lc")]
            Cipher::AwsLc(_) => Backend::AwsLc,
        }
    }

    /// The same key expanded for `backend` (itself if it already is).
    pub(crate) fn with_backend(&self, backend: Backend) -> Result<Self, Error> {
        if self.backend() == backend {
            return Ok(self.clone());
        }
        AesGcmKey::new(&self.bytes, backend)
    }

    /// Encrypts `buf` in place and returns the tag.
    #[inline]
    pub(crate) fn seal_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
    ) -> Result<[u8; TAG_LEN], Error> {
        let rust_crypto_nonce = || Nonce::from(*nonce);
        let tag = match &self.cipher {
            Cipher::Aes128(c) => c
                .encrypt_inout_detached(&rust_crypto_nonce(), aad, buf.into())
                .map(Into::into),
            Cipher::Aes256(c) => c
                .encrypt_inout_detached(&rust_crypto_nonce(), aad, buf.into())
                .map(Into::into),
            #[cfg(feature = "aws-lc")]
            Cipher::AwsLc(k) => {
                return k
                    .seal_in_place_separate_tag(
                        awslc::Nonce::assume_unique_for_key(*nonce),
                        awslc::Aad::from(aad),
                        buf,
                    )
                    .map_err(|_| Error::Encryption)?
                    .as_ref()
                    .try_into()
                    .map_err(|_| Error::Encryption)
            }
        };
        tag.map_err(|_| Error::Encryption)
    }

    /// Verifies the tag (in constant time, inside the backend) and decrypts
    /// `buf` in place. On failure `buf` holds no plaintext.
    #[inline]
    pub(crate) fn open_in_place(
        &self,
        nonce: &[u8; NONCE_LEN],
        aad: &[u8],
        buf: &mut [u8],
        tag: &[u8; TAG_LEN],
    ) -> Result<(), Error> {
        let rust_crypto_nonce = || Nonce::from(*nonce);
        // `aes-gcm` checks the tag before it decrypts: on failure `buf` still
        // holds the ciphertext.
        match &self.cipher {
            Cipher::Aes128(c) => {
                c.decrypt_inout_detached(&rust_crypto_nonce(), aad, buf.into(), &Tag::from(*tag))
            }
            Cipher::Aes256(c) => {
                c.decrypt_inout_detached(&rust_crypto_nonce(), aad, buf.into(), &Tag::from(*tag))
            }
            #[cfg(feature = "aws-lc")]
            Cipher::AwsLc(k) => {
                let opened = k.open_in_place_separate_tag(
                    awslc::Nonce::assume_unique_for_key(*nonce),
                    awslc::Aad::from(aad),
                    tag,
                    buf,
                );
                return match opened {
                    Ok(_) => Ok(()),
                    Err(_) => {
                        // aws-lc decrypts while it authenticates and clears
                        // the output when the tag does not match; aws-lc-rs
                        // documents the buffer as unspecified then, so clear
                        // it here as well.
                        zeroize::Zeroize::zeroize(buf);
                        Err(Error::Decryption)
                    }
                };
            }
        }
        .map_err(|_| Error::Decryption)
    }
}

fn bad_len(n: usize) -> Error {
    Error::keyset(
        KeysetErrorKind::KeyFormat,
        format!("AES-GCM key must be 16 or 32 bytes, got {n}"),
    )
}

/// Length of an AES-SIV key (two AES-256 keys: CMAC, then CTR), as Tink's
/// `AesSivKey` holds it.
pub(crate) const SIV_KEY_LEN: usize = 64;
/// Length of the synthetic IV that starts an AES-SIV ciphertext.
pub(crate) const SIV_LEN: usize = 16;

/// One AES-SIV key (RFC 5297, CMAC-AES-256 and CTR-AES-256): deterministic
/// authenticated encryption, for record keys. Its bytes are zeroized on
/// drop.
///
/// RustCrypto's `Siv` needs `&mut` for every call and is not `Clone`, and
/// building one expands the CMAC key and derives its subkeys. So each key
/// keeps a few built ciphers in [`SivPool`], shared by its clones: a call
/// takes its thread's slot without waiting (`try_lock`) and builds a cipher
/// for that call only when the slot is busy. No thread ever waits on
/// another, and two threads use two slots on two cache lines.
#[derive(Clone)]
pub(crate) struct AesSivKey {
    bytes: Zeroizing<Vec<u8>>,
    pool: Arc<SivPool>,
}

type Siv = aes_siv::siv::Aes256Siv;

/// Built AES-SIV ciphers of one key, one slot per thread slot (see
/// `stats::slot_of`), each built on first use. Every `Siv` zeroizes its key
/// copy and its CMAC state when dropped, with the key's last clone. Boxed:
/// an empty slot is a null pointer (no uninitialized payload copied into
/// the heap), and an unused slot costs its 128 bytes only.
struct SivPool {
    slots: Box<[PoolSlot]>,
}

/// A slot on 128 bytes of its own (two 64-byte lines: what adjacent-line
/// prefetching pulls in together), filled with zeros rather than padded:
/// a slot is built on the stack and moved to the heap, and padding would
/// carry whatever the stack held there before (a key, say) along.
#[repr(C, align(128))]
struct PoolSlot {
    slot: Slot,
    _fill: [u8; SLOT_FILL],
}

const SLOT_FILL: usize = 128 - std::mem::size_of::<Slot>();

/// One slot: empty until a thread first uses it.
type Slot = Mutex<Option<Box<Siv>>>;

impl AesSivKey {
    /// A key from 64 bytes.
    pub(crate) fn new(bytes: &[u8]) -> Result<Self, Error> {
        if bytes.len() != SIV_KEY_LEN {
            return Err(Error::keyset(
                KeysetErrorKind::KeyFormat,
                format!(
                    "AES-SIV key must be {SIV_KEY_LEN} bytes, got {}",
                    bytes.len()
                ),
            ));
        }
        let slots = (0..slots())
            .map(|_| PoolSlot {
                slot: Mutex::new(None),
                _fill: [0; SLOT_FILL],
            })
            .collect();
        Ok(AesSivKey {
            bytes: Zeroizing::new(bytes.to_vec()),
            pool: Arc::new(SivPool { slots }),
        })
    }

    /// The raw key bytes (for cleartext export only).
    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    fn build(&self) -> Result<Siv, Error> {
        use aes_siv::KeyInit as _;
        Siv::new_from_slice(&self.bytes).map_err(|_| Error::Encryption)
    }

    /// Runs `f` on a built cipher of this key: this thread's slot's, or,
    /// when another thread holds that slot, one built for this call.
    #[inline]
    fn with_cipher<R>(&self, f: impl FnOnce(&mut Siv) -> R) -> Result<R, Error> {
        let slot = &self.pool.slots[slot_of(self.pool.slots.len())].slot;
        // A poisoned slot (a panic while it was held) is only busy: its
        // cipher is not trusted again, and this call builds its own.
        if let Ok(mut held) = slot.try_lock() {
            if held.is_none() {
                *held = Some(Box::new(self.build()?));
            }
            if let Some(siv) = held.as_mut() {
                return Ok(f(siv));
            }
        }
        Ok(f(&mut self.build()?))
    }

    /// Encrypts `buf` in place with exactly one associated-data component
    /// (`ad`, even when empty, as Tink does) and returns the synthetic IV.
    pub(crate) fn seal_in_place(&self, ad: &[u8], buf: &mut [u8]) -> Result<[u8; SIV_LEN], Error> {
        let tag = self
            .with_cipher(|siv| siv.encrypt_inout_detached([ad], buf.into()))?
            .map_err(|_| Error::Encryption)?;
        Ok(tag.into())
    }

    /// Verifies the synthetic IV (in constant time, inside `aes-siv`) and
    /// decrypts `buf` in place. On failure `buf` holds no plaintext
    /// (`aes-siv` encrypts it again).
    pub(crate) fn open_in_place(
        &self,
        ad: &[u8],
        buf: &mut [u8],
        siv: &[u8; SIV_LEN],
    ) -> Result<(), Error> {
        let tag = aes_siv::Tag::from(*siv);
        self.with_cipher(|siv| siv.decrypt_inout_detached([ad], buf.into(), &tag))?
            .map_err(|_| Error::Decryption)
    }
}
