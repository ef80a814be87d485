//! A Kafka protocol proxy that encrypts record values and keys per topic
//! with tombstone-crypt, and keeps tombstones null.
//!
//! Kafka clients in any language connect to the proxy as to a cluster; the
//! proxy connects to the real brokers. On Produce it encrypts the records
//! of the topics its policy names (values whole under a keyset, with the
//! library's default associated data: the topic and the plaintext record
//! key; record keys deterministically under an AES-SIV keyset, optionally);
//! on Fetch it decrypts them. Every other API passes through byte for byte.
//! A topic written through the proxy reads with the library's
//! `TypedConsumer` and `tombstone-crypt consume`/`audit` with the same
//! keysets, and the other way round.
//!
//! # The promises
//! - **A tombstone stays a tombstone**: a null value is forwarded null,
//!   byte for byte, and never reaches a cipher; an empty value is a value
//!   and is encrypted.
//! - **Never plaintext**: a partition of a policy topic that cannot be
//!   encrypted (a batch the proxy cannot decode, a keyset that fails) is
//!   not forwarded; the proxy answers it with `CORRUPT_MESSAGE`
//!   (retriable). A fetched value that does not authenticate makes its
//!   partition `CORRUPT_MESSAGE`, never a null and never ciphertext.
//! - **Batches keep their header**: producer id, epoch, base sequence,
//!   transactional and control flags, timestamps, codec and record count
//!   are the client's (idempotent and transactional producers work).
//!
//! # Limits of this version
//! - A key keyset with more than one enabled key (a rotation in progress)
//!   is refused on Produce: the write rule's tombstones of a key's older
//!   forms are not written by the proxy yet. Fetch reads every enabled key.
//! - Record headers are not encrypted.
//! - Produce and Fetch are offered up to v12 (v13 names topics by id).
//! - SASL passes through (SaslHandshake v1 and SaslAuthenticate); TLS is
//!   not terminated.
//!
//! # Use
//! ```no_run
//! use tombstone_crypt_proxy::{Policies, Proxy, ProxyConfig};
//!
//! # async fn run() -> Result<(), tombstone_crypt_proxy::ProxyError> {
//! let config = ProxyConfig::from_file("proxy.json".as_ref())?;
//! let policies = Policies::load(&config)?;
//! let proxy = Proxy::bind(&config, policies).await?;
//! proxy
//!     .run(async { let _ = tokio::signal::ctrl_c().await; }, std::time::Duration::from_secs(30))
//!     .await
//! # }
//! ```
#![forbid(unsafe_code)]
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod api;
mod batch;
mod config;
mod error;
mod frame;
mod hooks;
mod inflate;
mod server;

pub use config::{
    load_keyset, Policies, ProxyConfig, TopicEntry, TopicPolicy, DEFAULT_MAX_FRAME_BYTES,
};
pub use error::ProxyError;
#[doc(hidden)]
pub use hooks::Hooks;
pub use server::Proxy;
