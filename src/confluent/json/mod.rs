//! Records of a JSON Schema in Confluent's format, with its encryption
//! rules: [`ConfluentJson`].
//!
//! One file per job: this one holds the codec's state and its builder;
//! `schemas` (registered or fetched, and the fields their rules reach),
//! `keks` (where each KEK lives), `deks` (opened, made, wrapped, rotated),
//! `records` (a record read and written) and `typed` ([`ConfluentSerde`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use super::kek::KekPlace;
use super::rule::Rule;
use super::{Dek, DekAlgorithm, LocalKms, Registry};
use crate::kms::KmsClients;

mod deks;
mod keks;
mod records;
mod schemas;
mod typed;

use records::*;
pub use typed::ConfluentSerde;

/// A registered schema: its subject, rules and the paths of its tagged
/// fields for each field rule.
#[derive(Debug)]
struct Registered {
    subject: String,
    /// Each field rule with what it reaches.
    fields: Vec<(Rule, Reached)>,
    payload: Option<Rule>,
    /// Fetched from the registry (may be evicted), not given here.
    fetched: bool,
    /// How many subschemas carry `confluent:tags` when no rule of the
    /// schema encrypts anything (a schema registered without its rules).
    unruled_tags: usize,
    /// An Avro schema's parsed form.
    #[cfg(feature = "confluent-avro")]
    avro: Option<Arc<super::avro::AvroSchema>>,
}

impl Registered {
    /// Every encryption rule of the schema: its field rules, then its
    /// payload rule.
    fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.fields.iter().map(|(r, _)| r).chain(&self.payload)
    }
}

/// What a field rule reaches ([`tags`](super::tags)).
#[derive(Debug, Default)]
struct Reached {
    /// JSON Schema: the paths of the strings it encrypts (`*`: every item
    /// of an array).
    paths: Vec<Vec<String>>,
    /// Avro: the full names of the fields it reaches.
    #[cfg(feature = "confluent-avro")]
    avro: std::collections::HashSet<String>,
}

/// An Avro schema's parsed form, where Avro is read.
#[cfg(feature = "confluent-avro")]
type AvroParsed = super::avro::AvroSchema;

#[cfg(not(feature = "confluent-avro"))]
type AvroParsed = std::convert::Infallible;

/// Whether a schema inserted is its subject's latest.
enum Latest {
    /// Given here ([`ConfluentJson::register`]): the latest, for good.
    Given,
    /// Fetched as the subject's latest: until the cache TTL passes.
    Fetched,
    /// Fetched by id: not the latest.
    No,
}

/// The most schemas, subjects and DEKs fetched from a registry that are
/// kept.
const MAX_CACHED: usize = 4096;

/// A DEK's registry key: KEK name, subject, algorithm, version.
type DekId = (String, String, DekAlgorithm, u32);

/// The DEKs known here: opened ones, their wrapped form, and when each
/// was made (for rotation by expiry).
#[derive(Default)]
struct Deks {
    open: HashMap<DekId, (Arc<Dek>, SystemTime)>,
    wrapped: HashMap<DekId, Vec<u8>>,
    /// Where each KEK lives, as given or fetched from the registry.
    keks: HashMap<String, KekPlace>,
}

/// Reads and writes the records of JSON Schemas (and, with the feature
/// `confluent-avro`, Avro schemas) in Confluent's format, with their field
/// and payload encryption rules; a record's value is its JSON form either
/// way: the schemas, rules and DEKs are
/// given to it ([`register`](ConfluentJson::register),
/// [`add_wrapped_dek`](ConfluentJson::add_wrapped_dek)) or made by it (a
/// writer makes a subject's DEK on first use and wraps it under the KEK, as
/// Confluent's clients do, and a new version when the rule's expiry has
/// passed).
///
/// ```
/// use serde_json::json;
/// use tombstone_crypt::confluent::{ConfluentJson, LocalKms};
///
/// let schema = json!({
///     "schema": r#"{"type":"object","properties":{"id":{"type":"integer"},
///                  "ssn":{"type":"string","confluent:tags":["PII"]}}}"#,
///     "schemaType": "JSON",
///     // As Confluent's documentation writes a rule: no kind or mode (a
///     // WRITEREAD transform), and a failed read would hand on the field as
///     // it lies (NONE), which this codec refuses: it fails the read instead.
///     "ruleSet": {"domainRules": [{"name": "encryptPII", "type": "ENCRYPT", "tags": ["PII"],
///         "params": {"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms",
///                    "encrypt.kms.key.id": "local-kms://k1"},
///         "onFailure": "ERROR,NONE"}]}
/// });
/// let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
/// codec.register(1, "customers-value", &schema)?;
/// let record = json!({"id": 7, "ssn": "078-05-1120"});
/// let bytes = codec.encode("customers-value", Some(&record))?.unwrap();
/// assert_eq!(&bytes[..5], &[0, 0, 0, 0, 1]); // 0x00 | schema id
/// assert!(!String::from_utf8_lossy(&bytes).contains("078-05-1120"));
/// assert_eq!(codec.decode(Some(&bytes))?, Some(record));
/// assert_eq!(codec.encode("customers-value", None)?, None); // a tombstone stays one
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct ConfluentJson {
    local: Option<LocalKms>,
    kms_clients: Option<KmsClients>,
    /// Vault addresses a KEK may be at, beside `VAULT_ADDR`.
    vault_addresses: Vec<String>,
    schemas: RwLock<HashMap<u32, Arc<Registered>>>,
    /// Each subject's latest schema id; with when it was fetched from the
    /// registry (`None`: given here, never stale).
    latest: RwLock<HashMap<String, (u32, Option<Instant>)>>,
    cache_ttl: Duration,
    plaintext_tags: bool,
    /// Avro `bytes` and `fixed` in the JSON form as base64 strings.
    #[cfg(feature = "confluent-avro")]
    avro_base64: bool,
    deks: Mutex<Deks>,
    registry: Option<Registry>,
}

impl std::fmt::Debug for ConfluentJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentJson")
            .field("schemas", &read(&self.schemas).len())
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// The longest record read or written (a bound on what one record may
/// allocate).
const MAX_RECORD: usize = 16 << 20;

impl ConfluentJson {
    /// Records whose DEKs are wrapped by `kms` (Confluent's `local-kms`
    /// KEKs), or by a KMS key: `aws-kms` and `hcvault` KEKs are opened with
    /// this crate's KMS clients (see
    /// [`with_kms_clients`](ConfluentJson::with_kms_clients)).
    pub fn new(kms: LocalKms) -> Self {
        ConfluentJson {
            local: Some(kms),
            ..Self::without_local_kms()
        }
    }

    /// Records whose DEKs are wrapped by KMS keys only (`aws-kms`,
    /// `hcvault`): a `local-kms` KEK is an error.
    pub fn without_local_kms() -> Self {
        ConfluentJson {
            local: None,
            kms_clients: None,
            vault_addresses: Vec::new(),
            schemas: RwLock::new(HashMap::new()),
            latest: RwLock::new(HashMap::new()),
            cache_ttl: Duration::from_secs(300),
            plaintext_tags: false,
            #[cfg(feature = "confluent-avro")]
            avro_base64: false,
            deks: Mutex::new(Deks::default()),
            registry: None,
        }
    }

    /// KEKs in a KMS (Confluent's KMS types `aws-kms`, whose key id is the
    /// key's ARN, and `hcvault`, whose key id is the key's URL
    /// `http(s)://HOST[:PORT]/MOUNT/keys/NAME`) are opened with `clients`
    /// (this crate's [`AwsKmsClient`](crate::kms::AwsKmsClient) and
    /// [`VaultClient`](crate::kms::VaultClient), with features `aws-kms`
    /// and `vault`, or a [`KmsClient`](crate::kms::KmsClient) of your own
    /// for the URIs `aws-kms://ARN` and `hcvault://HOST[:PORT]/MOUNT/keys/NAME`).
    /// Without this, they are opened with the clients registered for the
    /// process and the built-in ones configured from the environment (a
    /// Vault key then at the server its URL names unless `VAULT_ADDR` is
    /// set). With clients given, a KEK in Vault is opened only at
    /// `VAULT_ADDR` or an address given to
    /// [`allowing_vault_address`](ConfluentJson::allowing_vault_address):
    /// a Vault client may take its address from the key id, which whoever
    /// registers a schema or a KEK chooses.
    #[must_use]
    pub fn with_kms_clients(self, clients: KmsClients) -> Self {
        ConfluentJson {
            kms_clients: Some(clients),
            ..self
        }
    }

    /// Allows KEKs in Vault at `address` (`https://vault.example:8200`),
    /// beside `VAULT_ADDR`, for the clients of
    /// [`with_kms_clients`](ConfluentJson::with_kms_clients): a KEK whose
    /// key id names another address refuses the schema.
    #[must_use]
    pub fn allowing_vault_address(mut self, address: &str) -> Self {
        self.vault_addresses.push(address.to_owned());
        self
    }

    /// Schemas and DEKs not given here are fetched from `registry` (and
    /// kept: at most 4096 of each, a subject's latest schema for
    /// [`with_cache_ttl`](ConfluentJson::with_cache_ttl)), and the DEKs a
    /// writer makes are created there, as Confluent's clients do.
    #[must_use]
    pub fn with_registry(self, registry: Registry) -> Self {
        ConfluentJson {
            registry: Some(registry),
            ..self
        }
    }

    /// Avro `bytes` and `fixed` values as base64 strings in a record's JSON
    /// form, both ways, rather than arrays of numbers (the form serde gives
    /// a `Vec<u8>`, the default): a record read shows its bytes in base64,
    /// and a record written takes base64 where its schema has bytes (in a
    /// union that has a `string` branch too, a string stays a string). The
    /// command line reads with it.
    #[cfg(feature = "confluent-avro")]
    #[must_use]
    pub fn avro_bytes_as_base64(self) -> Self {
        ConfluentJson {
            avro_base64: true,
            ..self
        }
    }

    /// Writes records of a schema that has tagged fields and no encryption
    /// rule (or tags that only a disabled rule names), tagged fields in
    /// plaintext. By default such a write is refused: a schema registered
    /// again without its rules (Confluent's `auto.register.schemas` does
    /// that), or a rule turned off beside another, would otherwise send
    /// fields meant to be encrypted in the clear.
    #[must_use]
    pub fn writing_tagged_fields_in_plaintext(self) -> Self {
        ConfluentJson {
            plaintext_tags: true,
            ..self
        }
    }

    /// How long a subject's latest schema fetched from the registry is used
    /// before it is asked again (default 5 minutes): a schema registered
    /// later reaches a writer within this time. Schemas by id and DEK
    /// versions never change, and are kept.
    #[must_use]
    pub fn with_cache_ttl(self, ttl: Duration) -> Self {
        ConfluentJson {
            cache_ttl: ttl,
            ..self
        }
    }
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}
