#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The lints live in Cargo.toml's [lints]; this one is allowed in tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod cipher;
pub mod codec;
#[cfg(feature = "confluent")]
#[cfg_attr(docsrs, doc(cfg(feature = "confluent")))]
pub mod confluent;
mod context;
mod envelope;
pub mod error;
#[cfg(feature = "test-hooks")]
mod fake_kms;
pub mod field;
mod json_text;
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub mod kafka;
mod key_id;
mod keyset;
pub mod kms;
mod primitive;
mod proto;
mod random;
pub mod record_key;
mod serde;
pub mod shred;
pub mod stats;
pub mod store;
mod work;

// The root: what every user needs. The feature areas are the public
// modules above (`codec`, `error`, `kafka`, `kms`, `record_key`, `stats`, `store`)
// and `format`.
pub use crate::cipher::Backend;
pub use crate::codec::{Bincode, Bytes, Json, Utf8};
pub use crate::context::{AadPolicy, Context};
pub use crate::error::Error;
pub use crate::key_id::KeyId;
pub use crate::keyset::{KeyStatus, Keyset, MAX_KEYS};
pub use crate::primitive::KeyTemplate;
pub use crate::serde::{
    DecryptingDeserializer, Deserializer, DeterministicDeserializer, DeterministicSerializer,
    EncryptingSerializer, Serializer, Unencrypted,
};
pub use crate::work::BlockingWork;

#[doc = include_str!("../docs/FORMAT.md")]
pub mod format {
    pub use crate::envelope::OVERHEAD;
}

/// Test hooks (cargo feature `test-hooks`, never for production): the
/// AES-GCM core with an explicit nonce, for the fuzz targets, the
/// known-answer vectors and Wycheproof; an in-process KMS (`FakeKms`). A fixed nonce destroys AES-GCM's
/// security; nothing outside tests may call these.
#[cfg(feature = "test-hooks")]
#[doc(hidden)]
pub mod __fuzz {
    use crate::cipher::{AesGcmKey, Backend, NONCE_LEN, TAG_LEN};
    use crate::Error;

    pub use crate::fake_kms::{FakeKms, FAKE_KMS_SCHEME};

    /// AES-GCM encryption with an explicit nonce on `backend`:
    /// `ciphertext | tag`.
    pub fn aes_gcm_seal_with(
        backend: Backend,
        key: &[u8],
        nonce: &[u8],
        aad: &[u8],
        pt: &[u8],
    ) -> Result<Vec<u8>, Error> {
        let key = AesGcmKey::new(key, backend)?;
        let nonce: &[u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Encryption)?;
        let mut buf = pt.to_vec();
        let tag = key.seal_in_place(nonce, aad, &mut buf)?;
        buf.extend_from_slice(&tag);
        Ok(buf)
    }

    /// AES-GCM encryption with an explicit nonce on the default backend.
    pub fn aes_gcm_seal(key: &[u8], nonce: &[u8], aad: &[u8], pt: &[u8]) -> Result<Vec<u8>, Error> {
        aes_gcm_seal_with(Backend::DEFAULT, key, nonce, aad, pt)
    }

    /// AES-GCM decryption with an explicit nonce of `ciphertext | tag` on
    /// `backend`.
    pub fn aes_gcm_open_with(
        backend: Backend,
        key: &[u8],
        nonce: &[u8],
        aad: &[u8],
        ct_and_tag: &[u8],
    ) -> Result<Vec<u8>, Error> {
        let key = AesGcmKey::new(key, backend)?;
        let nonce: &[u8; NONCE_LEN] = nonce.try_into().map_err(|_| Error::Decryption)?;
        let split = ct_and_tag
            .len()
            .checked_sub(TAG_LEN)
            .ok_or(Error::Decryption)?;
        let (ct, tag) = ct_and_tag.split_at(split);
        let tag: &[u8; TAG_LEN] = tag.try_into().map_err(|_| Error::Decryption)?;
        let mut buf = ct.to_vec();
        key.open_in_place(nonce, aad, &mut buf, tag)?;
        Ok(buf)
    }

    /// AES-GCM decryption with an explicit nonce on the default backend.
    pub fn aes_gcm_open(
        key: &[u8],
        nonce: &[u8],
        aad: &[u8],
        ct_and_tag: &[u8],
    ) -> Result<Vec<u8>, Error> {
        aes_gcm_open_with(Backend::DEFAULT, key, nonce, aad, ct_and_tag)
    }
}
