//! The proxy's configuration file (JSON) and the per-topic policy it names.
//!
//! ```json
//! {
//!   "listen": "127.0.0.1:29192",
//!   "bootstrap": "127.0.0.1:9092",
//!   "tls": { "cert_file": "proxy.pem", "key_file": "proxy.key" },
//!   "upstream_tls": { "ca_file": "brokers-ca.pem" },
//!   "topics": [
//!     { "topic": "payments", "value_keyset": "keys/payments.json" },
//!     { "prefix": "orders.", "value_keyset": "keys/orders.json",
//!       "key_keyset": "keys/order-ids.json", "headers": ["x-ssn"] },
//!     { "topic": "audit", "value_keyset": "keys/audit.enc.json",
//!       "value_keyset_kms_uri": "hcvault://vault:8200/transit/keys/kek" },
//!     { "topic": "profiles", "subject_keyset": "keys/kek.json",
//!       "subject_key_topic": "profiles-subject-keys" }
//!   ]
//! }
//! ```
//!
//! Keyset and certificate paths are relative to the configuration file's directory. A
//! topic matches the first entry that names it (an exact `topic`, or a
//! `prefix`); a topic that no entry names passes through untouched.
//!
//! A keyset file is Tink's cleartext JSON, or, with
//! `value_keyset_kms_uri` / `key_keyset_kms_uri`, Tink's encrypted keyset
//! under that KMS key (the command line's `--keyset-kms-uri`; the KMS is
//! called once, when the configuration loads). A value keyset may hold
//! `kms-envelope` keys: their data keys are made and read through the KMS
//! clients configured from the environment (`VAULT_ADDR`, `VAULT_TOKEN`;
//! the `AWS_*` variables), as the command line's are.
//!
//! An entry's values are under a keyset (`value_keyset`) or under subject
//! keys (`subject_keyset`, the KEK, with `subject_key_topic` or
//! `subject_key_store`), never both: a value's format comes from the
//! policy ([`TopicPolicy`], the library's, which the command line reads
//! with too).
//!
//! One file per job: `file` (the configuration as written) and `policies`
//! (the topics' policies it names).
mod file;
mod policies;
#[cfg(test)]
mod tests;

pub(crate) use file::decoded_per_request;
pub use file::{ListenerTls, ProxyConfig, TopicEntry, UpstreamTls, DEFAULT_MAX_FRAME_BYTES};
pub use policies::{load_keyset, load_keyset_with, Policies, TopicPolicy};
