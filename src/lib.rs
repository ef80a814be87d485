#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]
// The lints live in Cargo.toml's [lints]; this one is allowed in tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod cipher;
mod codec;
mod context;
mod envelope;
mod error;
#[cfg(feature = "test-hooks")]
mod fake_kms;
mod json_text;
#[cfg(feature = "kafka")]
mod kafka;
#[cfg(feature = "kafka")]
mod kafka_client;
mod key_id;
mod keyset;
mod keyset_proto;
mod kms;
mod primitive;
mod proto;
mod random;
mod record_key;
mod serde;
mod store;
mod work;

pub use crate::cipher::Backend;
pub use crate::codec::{Bincode, Bytes, Json, Utf8, BINCODE_DECODE_LIMIT};
pub use crate::context::{AadPolicy, Context};
pub use crate::envelope::OVERHEAD;
pub use crate::error::{Cause, Error, KeysetErrorKind};
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub use crate::kafka::{
    decode_message, encode_write, is_transient_kafka_error, KafkaChangelog, KafkaRecord,
    TopicSettings,
};
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub use crate::kafka_client::{
    ConsumedRecord, Delivered, RecordHeaders, TypedConsumer, TypedProducer, UndecodableHook,
};
pub use crate::key_id::KeyId;
pub use crate::keyset::{KeyStatus, Keyset, MAX_KEYS};
#[cfg(feature = "aws-kms")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws-kms")))]
pub use crate::kms::aws::{AwsCredentials, AwsKmsClient};
pub use crate::kms::dek::{DekPolicy, MAX_DEK_VALUES, MAX_EDEK_LEN};
#[cfg(feature = "vault")]
#[cfg_attr(docsrs, doc(cfg(feature = "vault")))]
pub use crate::kms::vault::VaultClient;
pub use crate::kms::{register_kms_client, KmsAead, KmsClient, KmsClients, KmsTimeouts};
pub use crate::primitive::KeyTemplate;
#[doc(hidden)]
pub use crate::record_key::WriteRule;
pub use crate::record_key::{murmur2, murmur2_partition, KeyBinding, KeyForms};
pub use crate::serde::{
    DecryptingDeserializer, Deserializer, DeterministicDeserializer, DeterministicSerializer,
    EncryptingSerializer, Serializer, Unencrypted,
};
#[cfg(feature = "redb")]
#[cfg_attr(docsrs, doc(cfg(feature = "redb")))]
pub use crate::store::RedbStore;
pub use crate::store::{
    compact, restore, restore_from, ChangeLoggingStore, Changelog, EncryptedStore, Entry,
    KeyValueStore, MemoryChangelog, MemoryStore, Record, TypedStore,
};
pub use crate::work::BlockingWork;
/// The rdkafka crate this one is built on (feature `kafka`), for its
/// `ClientConfig`, producers and consumers.
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub use rdkafka;

#[doc = include_str!("../docs/FORMAT.md")]
pub mod format {}

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
