//! AES-GCM encryption for Kafka-style record values and keys, with Tink's
//! wire format and keysets, that never turns a delete into a write.
//!
//! In Kafka and Kafka Streams a *tombstone*, a record whose value is null,
//! is how a key is deleted. An encryption layer that encrypts the null (say,
//! as the ciphertext of an empty payload) breaks that silently: the store
//! still holds a value, the changelog receives a real record instead of a
//! tombstone, compaction keeps the key forever and a restore resurrects it.
//!
//! # The guarantee
//!
//! - **Tombstone in, tombstone out.** [`Serializer::serialize`] of `None` is
//!   `Ok(None)` and [`Deserializer::deserialize`] of `None` is `Ok(None)`,
//!   without touching the inner codec or the cipher. A store wrapper treats
//!   `None` as a delete and never writes a value for it.
//! - **Empty is not null.** A present empty value becomes a present 33-byte
//!   ciphertext and comes back as a present empty value; a present
//!   ciphertext never silently becomes a tombstone.
//! - **AEAD.** AES-256-GCM (AES-128 from imported keysets), a fresh random
//!   96-bit nonce per value; ciphertexts are Google Tink's (output prefix
//!   TINK), so Tink in any language reads them ([`format`](crate::format)).
//! - **Context binding.** By default a ciphertext is bound to its topic and
//!   record key ([`Context`], [`AadPolicy`]): copied to another key or
//!   topic, it fails to decrypt.
//! - **Rotation.** New values use the primary key; old values decrypt under
//!   any enabled key, picked by the key id in the ciphertext.
//! - **Secrets.** Key material is zeroized on drop (best effort) and never
//!   printed by `Debug`; errors carry no key bytes or plaintext.
//!
//! # Quick start
//!
//! With `cargo add tombstone-crypt serde --features serde/derive`, this is a
//! whole `src/main.rs` (the repository's `examples/quickstart.rs`):
//!
//! ```
#![doc = include_str!("../examples/quickstart.rs")]
//! ```
//!
//! # Where things are
//!
//! The crate root holds what every user needs: [`Keyset`], [`KeyStatus`],
//! [`KeyTemplate`], [`KeyId`], [`MAX_KEYS`]; [`Context`], [`AadPolicy`];
//! [`Error`]; [`Backend`]; the serde traits [`Serializer`] and
//! [`Deserializer`], the wrappers [`EncryptingSerializer`],
//! [`DecryptingDeserializer`], [`DeterministicSerializer`],
//! [`DeterministicDeserializer`], [`Unencrypted`] and [`BlockingWork`]; the
//! codecs [`Bytes`], [`Utf8`], [`Json`], [`Bincode`]. The rest is in
//! modules, each with a page and an example:
//!
//! | module | what it is for |
//! |---|---|
//! | [`guide`] | the guide: one chapter per topic, no code |
//! | [`codec`] | the codecs, a codec of your own, the bincode decode limit |
//! | [`error`] | [`Error`], the cause it carries, `ErrorKind` (stop, report the value, or fix the call), `KeysetErrorKind` |
//! | [`record_key`] | the forms of an encrypted record key, the write rule (`KeyForms`), `KeyBinding`, murmur2 partitioning |
//! | [`store`] | key-value stores, the encrypting and typed stores, changelogs, compaction and restore |
//! | [`kms`] | the KMS seam (`KmsClient`, `KmsAead`, `KmsClients`), the AWS KMS and Vault clients, `DekPolicy` |
//! | `kafka` | `encode_write`/`decode_message`, the typed producer and consumer, `KafkaChangelog`, `KafkaKeyStore` (feature `kafka`) |
//! | [`field`] | encrypted fields: `Encrypted<T>`, `Deterministic<T>`, `FieldEncrypting` |
//! | [`policy`] | `TopicPolicy`: how one topic's values and record keys are read and written (a keyset, subject keys, a codec of yours), as the proxy and the command line read a topic |
//! | `files` | keyset files read within a bound and zeroized, for front ends (feature `files`) |
//! | `confluent` | Confluent's format: `ConfluentJson` (JSON Schema, and Avro with `confluent-avro`), `ConfluentSerde`, `Registry` (feature `confluent`) |
//! | [`shred`] | crypto-shredding: `SubjectKeys`, `SubjectEncrypting`, key stores |
//! | [`format`](crate::format) | the wire format, the associated data and the keyset format; `OVERHEAD` |
//! | [`stats`] | the counters (`Snapshot`, `process`, `publish` with the feature `metrics`) |
//!
//! # Feature flags
//!
//! The library needs Rust 1.85 or later.
//!
//! | feature | what it adds |
//! |---|---|
//! | `redb` (default) | `store::RedbStore` and `shred::RedbKeyStore`, on the embedded database `redb` |
//! | `aws-lc` (default) | AES-GCM on `aws-lc-rs` for every key, same wire format (a C build, about a minute on 2 cores); without it, pure Rust on RustCrypto's `aes-gcm` |
//! | `kafka` | the `kafka` module, on rdkafka with its bundled librdkafka (a C build) |
//! | `aws-kms` | `kms::AwsKmsClient` (`aws-kms://`), SigV4 signed here, HTTP on `ureq` with rustls |
//! | `vault` | `kms::VaultClient` (`hcvault://`, Vault or OpenBao transit), same HTTP client |
//! | `confluent` | the `confluent` module: Confluent's CSFLE and CSPE for JSON Schema (adds `hkdf`) |
//! | `confluent-avro` | Avro schemas in the same codec (adds `apache-avro`) |
//! | `files` | the `files` module: keyset files for front ends (the command line and the proxy); no dependency of its own |
//! | `metrics` | [`stats::publish`](crate::stats) to the `metrics` facade, and KMS call durations |
//! | `tracing` | `tracing` spans and events at the KMS and DEK boundaries |
//! | `test-hooks` | an explicit AES-GCM nonce for fuzzing and vectors: **never in production** |
//!
//! # Read on
//!
//! The [`guide`] has a chapter per topic: stores and recovery, Kafka's write
//! and reading rules and the typed clients, key rotation as a runbook,
//! record keys, KMS, fields, Confluent's format, shredding, observability,
//! and the choices made where the design is silent. `SECURITY.md`, shipped
//! with the crate, holds the threat model and the limits.
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
#[cfg(feature = "files")]
#[cfg_attr(docsrs, doc(cfg(feature = "files")))]
pub mod files;
pub mod guide;
mod header;
mod json_text;
#[cfg(feature = "kafka")]
#[cfg_attr(docsrs, doc(cfg(feature = "kafka")))]
pub mod kafka;
mod key_id;
mod keyset;
pub mod kms;
pub mod policy;
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
// and `format`; `guide` is docs only.
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
    pub use crate::header::{Header, KeyType, Layout, HEADER_LEN};
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
