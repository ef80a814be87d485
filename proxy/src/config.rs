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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use tombstone_crypt::files::{open_key_store, KeyStoreAt, KeyStorePart};
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
pub use tombstone_crypt::policy::TopicPolicy;
use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::Keyset;

use crate::error::ProxyError;

/// The largest frame the proxy reads by default: 100 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 100 << 20;

/// A request's decoding budget by default: 4 times the frame limit.
pub(crate) fn decoded_per_request(max_frame_bytes: usize) -> usize {
    max_frame_bytes.saturating_mul(4)
}

/// The configuration file, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Where clients connect (the bootstrap listener). Broker node `N` is
    /// served on the same address, port + 1 + `N`.
    pub listen: SocketAddr,
    /// The real cluster's bootstrap address, `host:port`.
    pub bootstrap: String,
    /// The host the proxy advertises to clients for its broker listeners
    /// (default: the IP address of `listen`).
    #[serde(default)]
    pub advertised_host: Option<String>,
    /// The largest frame (request or response) the proxy reads, in bytes;
    /// a longer one closes its connection (default 100 MiB).
    #[serde(default)]
    pub max_frame_bytes: Option<usize>,
    /// What decoding one request's record batches (or one Fetch
    /// response's) may take in memory, in bytes: decompressed records,
    /// decoded records and headers, their re-encodings (default 4 times
    /// `max_frame_bytes`). A batch that would take more is refused,
    /// `CORRUPT_MESSAGE`.
    #[serde(default)]
    pub max_decoded_bytes_per_request: Option<usize>,
    /// What decoding may take in memory for all requests in flight
    /// together, in bytes (default 8 times `max_frame_bytes`; at least
    /// `max_decoded_bytes_per_request`). A batch that finds it full is
    /// refused, `CORRUPT_MESSAGE` (retriable).
    #[serde(default)]
    pub max_decoded_bytes: Option<usize>,
    /// Let DeleteTopics, DeleteRecords, CreatePartitions, AlterConfigs and
    /// IncrementalAlterConfigs that name a key-store topic of subject keys
    /// (`subject_key_topic`) pass (default: refused,
    /// `TOPIC_AUTHORIZATION_FAILED`: a client could destroy live subjects'
    /// keys, or undo a shred).
    #[serde(default)]
    pub key_store_admin: bool,
    /// How long a client connection may send no whole request, or take no
    /// response, before the proxy closes it (and its broker connection),
    /// in milliseconds (default 600,000, a Kafka broker's
    /// `connections.max.idle.ms`).
    #[serde(default)]
    pub connections_max_idle_ms: Option<u64>,
    /// TLS on the listeners (the bootstrap and every broker node's):
    /// without it they speak plaintext.
    #[serde(default)]
    pub tls: Option<ListenerTls>,
    /// TLS to the brokers: without it the proxy connects in plaintext.
    #[serde(default)]
    pub upstream_tls: Option<UpstreamTls>,
    /// librdkafka settings of the proxy's own client of key-store topics
    /// (`subject_key_topic`), applied after `upstream_tls`'s: only
    /// `security.protocol`, `sasl.*` and `ssl.*` (SASL credentials, a
    /// client certificate); the brokers are `bootstrap`'s, and the key
    /// store's writes keep their own acknowledgement settings.
    #[serde(default)]
    pub key_store_client: std::collections::BTreeMap<String, String>,
    /// The topics to encrypt, first match wins.
    #[serde(default)]
    pub topics: Vec<TopicEntry>,
}

/// The certificate and key the proxy's listeners present (PEM files,
/// relative to the configuration file).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListenerTls {
    /// The certificate chain, leaf first.
    pub cert_file: PathBuf,
    /// The private key (PKCS#8, PKCS#1 or SEC1).
    pub key_file: PathBuf,
}

/// How the proxy checks the brokers' certificates.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpstreamTls {
    /// The CA certificates to trust (PEM; the system's roots are not
    /// used).
    pub ca_file: PathBuf,
    /// The name every broker's certificate must hold (default: the host
    /// of the broker's address, a DNS name or an IP address).
    #[serde(default)]
    pub server_name: Option<String>,
}

/// One entry of the topic policy, as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TopicEntry {
    /// An exact topic name.
    #[serde(default)]
    pub topic: Option<String>,
    /// A topic-name prefix.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The keyset (Tink cleartext JSON) record values are encrypted with.
    /// Exactly one of `value_keyset` and `subject_keyset`.
    #[serde(default)]
    pub value_keyset: Option<PathBuf>,
    /// The KMS key (`hcvault://...`, `aws-kms://...`) `value_keyset` is
    /// encrypted with (Tink's encrypted keyset); without it the file is
    /// cleartext.
    #[serde(default)]
    pub value_keyset_kms_uri: Option<String>,
    /// The KEK keyset of subject keys: each value is encrypted under its
    /// subject's key, the subject being the record key's plaintext
    /// (`tombstone_crypt::shred`; the command line's `--subject-keyset`).
    /// Needs `subject_key_topic` or `subject_key_store`.
    #[serde(default)]
    pub subject_keyset: Option<PathBuf>,
    /// The KMS key `subject_keyset` is encrypted with, as
    /// `value_keyset_kms_uri`.
    #[serde(default)]
    pub subject_keyset_kms_uri: Option<String>,
    /// The compacted topic on the proxy's cluster (`bootstrap`) that keeps
    /// the subject keys: `tombstone-crypt shred --subject-key-topic` with
    /// the same KEK shreds while the proxy runs. It must exist and hold a
    /// naming key the KEK opens (`tombstone-crypt shred create-key-store`).
    /// The proxy's own client reaches it at `bootstrap`, with
    /// `upstream_tls`'s CA when that is set and the `key_store_client`
    /// settings.
    #[serde(default)]
    pub subject_key_topic: Option<String>,
    /// The subject keys in a redb file instead (the proxy holds it open:
    /// shred through a key-store topic to shred while the proxy runs).
    #[serde(default)]
    pub subject_key_store: Option<PathBuf>,
    /// A directory for the key-store topic's view on disk (a redb file,
    /// for many subjects; the command line's `--subject-key-view`): one
    /// per running instance.
    #[serde(default)]
    pub subject_key_view: Option<PathBuf>,
    /// How stale, in milliseconds, the proxy's view of the key store and
    /// its cached subject keys may be (default 5000 each): a shred made
    /// elsewhere reaches the proxy's readers within twice this, and a
    /// value the proxy writes for the subject within that time after the
    /// shred goes out under the shredded key, and reads as deleted too.
    /// Smaller: shreds seen sooner, more reads of the key-store topic.
    #[serde(default)]
    pub subject_key_fence_ms: Option<u64>,
    /// The keyset (AES-SIV, Tink cleartext JSON) record keys are encrypted
    /// with, deterministically; record keys stay plaintext without it.
    #[serde(default)]
    pub key_keyset: Option<PathBuf>,
    /// The KMS key `key_keyset` is encrypted with, as
    /// `value_keyset_kms_uri`.
    #[serde(default)]
    pub key_keyset_kms_uri: Option<String>,
    /// Names of record headers whose values are encrypted under the value
    /// keyset (a null header value stays null; other headers pass as they
    /// are). Not with `subject_keyset`.
    #[serde(default)]
    pub headers: Vec<String>,
}

impl ProxyConfig {
    /// Parses a configuration from JSON text.
    ///
    /// # Errors
    /// [`ProxyError::Config`] when the text is not a configuration.
    pub fn from_json(text: &str) -> Result<Self, ProxyError> {
        serde_json::from_str(text).map_err(|e| ProxyError::Config(format!("{e}")))
    }

    /// Reads a configuration file; its keyset paths become relative to its
    /// directory.
    ///
    /// # Errors
    /// [`ProxyError::Config`] when the file cannot be read or parsed.
    pub fn from_file(path: &Path) -> Result<Self, ProxyError> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ProxyError::Config(format!("reading {}: {e}", path.display())))?;
        let mut config = Self::from_json(&text)
            .map_err(|e| ProxyError::Config(format!("{}: {e}", path.display())))?;
        let base = path.parent().unwrap_or(Path::new("."));
        if let Some(tls) = &mut config.tls {
            tls.cert_file = base.join(&tls.cert_file);
            tls.key_file = base.join(&tls.key_file);
        }
        if let Some(tls) = &mut config.upstream_tls {
            tls.ca_file = base.join(&tls.ca_file);
        }
        for entry in &mut config.topics {
            for path in [
                &mut entry.value_keyset,
                &mut entry.key_keyset,
                &mut entry.subject_keyset,
                &mut entry.subject_key_store,
                &mut entry.subject_key_view,
            ]
            .into_iter()
            .flatten()
            {
                *path = base.join(&*path);
            }
        }
        Ok(config)
    }

    /// The largest frame the proxy reads.
    pub fn max_frame_bytes(&self) -> usize {
        self.max_frame_bytes.unwrap_or(DEFAULT_MAX_FRAME_BYTES)
    }

    /// Checks the limits: `max_frame_bytes` from 1 KiB to 2 GiB - 1 (a
    /// Kafka frame's length is a 32-bit signed count; a smaller limit
    /// cannot hold a request), and the decoding budgets at least
    /// `max_frame_bytes` (else no batch of a full frame could decode).
    ///
    /// # Errors
    /// [`ProxyError::Config`] naming the limit.
    pub fn check_limits(&self) -> Result<(), ProxyError> {
        let frame = self.max_frame_bytes();
        if !(1024..=i32::MAX as usize).contains(&frame) {
            return Err(ProxyError::Config(format!(
                "max_frame_bytes {frame}: from 1024 to {} (a frame's length is a 32-bit signed count)",
                i32::MAX
            )));
        }
        if self.connections_max_idle_ms() < 1000 {
            return Err(ProxyError::Config(format!(
                "connections_max_idle_ms {}: at least 1000",
                self.connections_max_idle_ms()
            )));
        }
        for (name, value) in [
            (
                "max_decoded_bytes_per_request",
                self.max_decoded_bytes_per_request(),
            ),
            ("max_decoded_bytes", self.max_decoded_bytes()),
        ] {
            if value < frame {
                return Err(ProxyError::Config(format!(
                    "{name} {value} is less than max_frame_bytes {frame}"
                )));
            }
        }
        Ok(())
    }

    /// `connections_max_idle_ms`, or its default: 600,000.
    pub fn connections_max_idle_ms(&self) -> u64 {
        self.connections_max_idle_ms.unwrap_or(600_000)
    }

    /// `max_decoded_bytes_per_request`, or its default: 4 times
    /// `max_frame_bytes`.
    pub fn max_decoded_bytes_per_request(&self) -> usize {
        self.max_decoded_bytes_per_request
            .unwrap_or_else(|| decoded_per_request(self.max_frame_bytes()))
    }

    /// `max_decoded_bytes`, or its default: 8 times `max_frame_bytes`
    /// (and never less than a request's budget).
    pub fn max_decoded_bytes(&self) -> usize {
        self.max_decoded_bytes
            .unwrap_or_else(|| self.max_frame_bytes().saturating_mul(8))
            .max(self.max_decoded_bytes_per_request())
    }
}

/// Which topics are encrypted, and how.
#[derive(Clone, Debug, Default)]
pub struct Policies {
    entries: Vec<(Match, Arc<TopicPolicy>)>,
    /// The key-store topics of subject keys: no client writes or reads
    /// them through the proxy.
    guarded: Vec<String>,
}

#[derive(Clone, Debug)]
enum Match {
    Exact(String),
    Prefix(String),
}

impl Match {
    /// As the configuration names it.
    fn show(&self) -> String {
        match self {
            Match::Exact(t) => format!("topic {t:?}"),
            Match::Prefix(p) => format!("prefix {p:?}"),
        }
    }
}

impl Policies {
    /// No topic encrypted.
    pub fn new() -> Self {
        Policies::default()
    }

    /// Adds an exact topic name (later entries match after earlier ones).
    #[must_use]
    pub fn with_topic(mut self, topic: &str, policy: TopicPolicy) -> Self {
        self.entries
            .push((Match::Exact(topic.to_owned()), Arc::new(policy)));
        self
    }

    /// Adds a topic-name prefix.
    #[must_use]
    pub fn with_prefix(mut self, prefix: &str, policy: TopicPolicy) -> Self {
        self.entries
            .push((Match::Prefix(prefix.to_owned()), Arc::new(policy)));
        self
    }

    /// The policies of a configuration, its keysets loaded.
    ///
    /// # Errors
    /// [`ProxyError::Config`] when an entry names neither or both of
    /// `topic` and `prefix`, or a keyset does not load.
    pub fn load(config: &ProxyConfig) -> Result<Self, ProxyError> {
        check_entries(config)?;
        let mut policies = Policies::new();
        for entry in &config.topics {
            if let Some(topic) = &entry.subject_key_topic {
                policies = policies.with_guarded_topic(topic);
            }
        }
        for entry in &config.topics {
            let policy = entry_policy(config, entry)?;
            policies = match (&entry.topic, &entry.prefix) {
                (Some(t), None) => policies.with_topic(t, policy),
                (None, Some(p)) => policies.with_prefix(p, policy),
                _ => {
                    return Err(ProxyError::Config(
                        "each topics entry names exactly one of \"topic\" and \"prefix\"".into(),
                    ))
                }
            };
        }
        Ok(policies)
    }

    /// The same policies, and `topic` (a key-store topic of subject keys)
    /// guarded: a client's Produce to it is refused and its Fetch gets no
    /// records (`TOPIC_AUTHORIZATION_FAILED`). A record written there
    /// could remove a subject's key, or, with a record read there before a
    /// shred, undo the shred once the topic is compacted.
    #[must_use]
    pub fn with_guarded_topic(mut self, topic: &str) -> Self {
        self.guarded.push(topic.to_owned());
        self
    }

    /// Whether `topic` is a guarded key-store topic.
    pub fn guards(&self, topic: &str) -> bool {
        self.guarded.iter().any(|t| t == topic)
    }

    /// Whether any topic is guarded.
    pub fn guards_any(&self) -> bool {
        !self.guarded.is_empty()
    }

    /// The policy of `topic`, if one names it.
    pub fn get(&self, topic: &str) -> Option<&Arc<TopicPolicy>> {
        self.entries
            .iter()
            .find(|(m, _)| match m {
                Match::Exact(t) => t == topic,
                Match::Prefix(p) => topic.starts_with(p.as_str()),
            })
            .map(|(_, p)| p)
    }

    /// Whether encrypting or decrypting under a policy may block on I/O
    /// (see [`TopicPolicy::may_block`]).
    pub fn may_block(&self) -> bool {
        self.entries.iter().any(|(_, p)| p.may_block())
    }

    /// Whether no topic is encrypted.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

/// Refuses entries that cannot be meant: one that an earlier entry
/// shadows (its topics would get the earlier entry's policy), and one that
/// names a key-store topic of subject keys (the proxy would encrypt the
/// key store's own records, and pass its tombstones).
fn check_entries(config: &ProxyConfig) -> Result<(), ProxyError> {
    let named = |e: &TopicEntry| match (&e.topic, &e.prefix) {
        (Some(t), None) => Some(Match::Exact(t.clone())),
        (None, Some(p)) => Some(Match::Prefix(p.clone())),
        _ => None,
    };
    let covers = |m: &Match, topic: &str| match m {
        Match::Exact(t) => t == topic,
        Match::Prefix(p) => topic.starts_with(p.as_str()),
    };
    let key_stores: Vec<&str> = config
        .topics
        .iter()
        .filter_map(|e| e.subject_key_topic.as_deref())
        .collect();
    for (i, entry) in config.topics.iter().enumerate() {
        let Some(this) = named(entry) else { continue };
        for earlier in config.topics[..i].iter().filter_map(named) {
            let shadowed = match &this {
                Match::Exact(t) => covers(&earlier, t),
                Match::Prefix(p) => {
                    matches!(&earlier, Match::Prefix(q) if p.starts_with(q.as_str()))
                }
            };
            if shadowed {
                return Err(ProxyError::Config(format!(
                    "the topics entry of {} is shadowed by the earlier entry of {}: its topics would get that entry's policy (put the narrower entry first)",
                    this.show(),
                    earlier.show()
                )));
            }
        }
        if let Some(ks) = key_stores.iter().find(|ks| covers(&this, ks)) {
            return Err(ProxyError::Config(format!(
                "the topics entry of {} names the key-store topic {ks:?} of subject keys: a key store is not a data topic",
                this.show()
            )));
        }
    }
    Ok(())
}

/// The policy of one entry, its keysets loaded and its key store opened.
fn entry_policy(config: &ProxyConfig, entry: &TopicEntry) -> Result<TopicPolicy, ProxyError> {
    let named = entry
        .topic
        .as_deref()
        .or(entry.prefix.as_deref())
        .unwrap_or_default();
    let bad = |what: &str| ProxyError::Config(format!("the topics entry {named:?}: {what}"));
    let policy_error = |e: tombstone_crypt::Error| {
        ProxyError::Config(format!("the topics entry {named:?}: {}", chain(&e)))
    };
    if let Some(t) = &entry.topic {
        legal_topic(t, false).map_err(|why| bad(&format!("\"topic\" {why}")))?;
    }
    if let Some(p) = &entry.prefix {
        legal_topic(p, true).map_err(|why| bad(&format!("\"prefix\" {why}")))?;
    }
    if let Some(t) = &entry.subject_key_topic {
        legal_topic(t, false).map_err(|why| bad(&format!("\"subject_key_topic\" {why}")))?;
    }
    if entry.key_keyset.is_none() && entry.key_keyset_kms_uri.is_some() {
        return Err(bad("\"key_keyset_kms_uri\" without \"key_keyset\""));
    }
    if entry.value_keyset.is_none() && entry.value_keyset_kms_uri.is_some() {
        return Err(bad("\"value_keyset_kms_uri\" without \"value_keyset\""));
    }
    if entry.subject_keyset.is_none()
        && (entry.subject_keyset_kms_uri.is_some()
            || entry.subject_key_topic.is_some()
            || entry.subject_key_store.is_some()
            || entry.subject_key_view.is_some()
            || entry.subject_key_fence_ms.is_some())
    {
        return Err(bad(
            "\"subject_keyset_kms_uri\", \"subject_key_topic\", \"subject_key_store\", \"subject_key_view\" and \"subject_key_fence_ms\" need \"subject_keyset\"",
        ));
    }
    // A value keyset and a KEK are randomized (AES-GCM, envelope); a key
    // keyset deterministic (AES-SIV): the other way round, every write
    // would be refused while producers retry forever.
    let randomized = |k: Keyset, what: &str| {
        if k.is_deterministic() {
            Err(bad(&format!(
                "\"{what}\" is a deterministic (AES-SIV) keyset: values need a randomized one \
                 (AES-GCM or a KMS envelope); AES-SIV is for \"key_keyset\""
            )))
        } else {
            Ok(k)
        }
    };
    let policy = match (&entry.value_keyset, &entry.subject_keyset) {
        (Some(values), None) => TopicPolicy::keyset(randomized(
            load_keyset_with(values, entry.value_keyset_kms_uri.as_deref())?,
            "value_keyset",
        )?),
        (None, Some(kek)) => {
            let kek = randomized(
                load_keyset_with(kek, entry.subject_keyset_kms_uri.as_deref())?,
                "subject_keyset",
            )?;
            TopicPolicy::subject_keys(Arc::new(subject_keys(config, entry, kek, &bad)?))
        }
        _ => {
            return Err(bad(
                "name exactly one of \"value_keyset\" (values under a keyset) and \"subject_keyset\" (values under subject keys)",
            ))
        }
    };
    let policy = match &entry.key_keyset {
        Some(k) => {
            let keys = load_keyset_with(k, entry.key_keyset_kms_uri.as_deref())?;
            if !keys.is_deterministic() {
                return Err(bad(
                    "\"key_keyset\" is a randomized keyset: record keys need a deterministic \
                     (AES-SIV) one, or compaction would never meet a key's tombstone",
                ));
            }
            policy.with_record_keys(keys).map_err(policy_error)?
        }
        None => policy,
    };
    policy
        .with_headers(entry.headers.clone())
        .map_err(policy_error)
}

/// Whether `name` is a topic name Kafka allows (or, `prefix`, the start of
/// one): 1 to 249 characters of `a-z A-Z 0-9 . _ -`, and not `.` or `..`.
/// A name Kafka cannot hold (`"pay "`) would never match a topic, and the
/// topic meant would pass in plaintext.
fn legal_topic(name: &str, prefix: bool) -> Result<(), String> {
    let shown = printable(name);
    if name.is_empty() {
        return Err("is empty".into());
    }
    if name.len() > 249 {
        return Err(format!("{shown:?} is longer than Kafka's 249 characters"));
    }
    if let Some(c) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        return Err(format!(
            "{shown:?} holds {c:?}, which Kafka does not allow in a topic name \
             (letters, digits, '.', '_' and '-')"
        ));
    }
    if !prefix && (name == "." || name == "..") {
        return Err(format!("{name:?} is not a topic name Kafka allows"));
    }
    Ok(())
}

/// At most 64 printable characters of `s`, for an error.
fn printable(s: &str) -> String {
    s.chars().filter(|c| !c.is_control()).take(64).collect()
}

/// The subject keys of `entry` under `kek`: its key-store topic on the
/// proxy's cluster, or its redb file. The store must exist and hold a
/// naming key `kek` opens: a mistyped topic or path is an error, never an
/// empty store.
fn subject_keys(
    config: &ProxyConfig,
    entry: &TopicEntry,
    kek: Keyset,
    bad: &dyn Fn(&str) -> ProxyError,
) -> Result<SubjectKeys, ProxyError> {
    let failed = |what: String, e: &tombstone_crypt::Error| bad(&format!("{what}: {}", chain(e)));
    let fence = std::time::Duration::from_millis(entry.subject_key_fence_ms.unwrap_or(5000));
    let at = match (&entry.subject_key_topic, &entry.subject_key_store) {
        (Some(topic), None) => {
            let mut client = ClientConfig::new();
            client.set("bootstrap.servers", &config.bootstrap);
            if let Some(tls) = &config.upstream_tls {
                if tls.server_name.is_some() {
                    return Err(bad(
                        "\"subject_key_topic\" with \"upstream_tls\".\"server_name\": the key store's client checks each broker's certificate for its own host name",
                    ));
                }
                client.set("security.protocol", "ssl");
                client.set("ssl.ca.location", tls.ca_file.to_string_lossy());
            }
            for (name, value) in &config.key_store_client {
                let allowed = name == "security.protocol"
                    || name.starts_with("sasl.")
                    || name.starts_with("ssl.");
                if !allowed {
                    // Names only: a value may be a secret.
                    return Err(ProxyError::Config(format!(
                        "\"key_store_client\": {name:?} is not a setting it takes (security.protocol, sasl.*, ssl.*)"
                    )));
                }
                client.set(name, value);
            }
            KeyStoreAt::Topic {
                config: client,
                topic: topic.clone(),
                view: entry.subject_key_view.clone(),
                fence: Some(fence),
            }
        }
        (None, Some(path)) => {
            if entry.subject_key_view.is_some() {
                return Err(bad("\"subject_key_view\" is for a \"subject_key_topic\""));
            }
            KeyStoreAt::File(path.clone())
        }
        _ => {
            return Err(bad(
                "\"subject_keyset\" needs exactly one of \"subject_key_topic\" and \"subject_key_store\"",
            ))
        }
    };
    // Each part named by its setting.
    let store = open_key_store(&at, false).map_err(|(part, e)| {
        let named = match (part, &entry.subject_key_topic, &entry.subject_key_store) {
            (KeyStorePart::View, _, _) => format!(
                "\"subject_key_view\" {}",
                entry
                    .subject_key_view
                    .as_deref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_default()
            ),
            (_, Some(topic), _) => format!("\"subject_key_topic\" {topic:?}"),
            (_, None, Some(path)) => format!("\"subject_key_store\" {}", path.display()),
            (_, None, None) => String::new(),
        };
        failed(named, &e)
    })?;
    SubjectKeys::open(kek, store)
        .map(|keys| keys.with_fence(fence))
        .map_err(|e| failed("the subject keys".into(), &e))
}

/// Loads a Tink cleartext JSON keyset file (its text zeroized when
/// dropped).
///
/// # Errors
/// [`ProxyError::Config`] naming the file when it cannot be read or is not
/// a keyset (never with key bytes).
pub fn load_keyset(path: &Path) -> Result<Keyset, ProxyError> {
    load_keyset_with(path, None)
}

/// Loads a keyset file: Tink's cleartext JSON, or with `kms_uri` Tink's
/// encrypted keyset under that KMS key (decrypted now, through the KMS
/// clients configured from the environment; empty associated data, as the
/// command line writes it). The library's loader
/// ([`tombstone_crypt::files::load_keyset`]), the command line's too.
///
/// # Errors
/// [`ProxyError::Config`] naming the file when it cannot be read, is not a
/// keyset, or the KMS does not decrypt it (never with key bytes).
pub fn load_keyset_with(path: &Path, kms_uri: Option<&str>) -> Result<Keyset, ProxyError> {
    tombstone_crypt::files::load_keyset(path, kms_uri).map_err(|e| ProxyError::Config(chain(&e)))
}

/// An error and its causes, one line.
fn chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_match_wins_and_unknown_fields_are_refused() {
        let ks = Keyset::generate();
        let p = Policies::new()
            .with_topic("a", TopicPolicy::keyset(ks.clone()))
            .with_prefix("orders.", TopicPolicy::keyset(ks));
        assert!(p.get("a").is_some());
        assert!(p.get("orders.x").is_some());
        assert!(p.get("orders").is_none());
        assert!(p.get("b").is_none());
        let bad = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1","topcs":[]}"#;
        assert!(ProxyConfig::from_json(bad).is_err());
        let good = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1",
            "topics":[{"prefix":"o.","value_keyset":"k.json"}]}"#;
        let c = ProxyConfig::from_json(good).unwrap();
        assert_eq!(c.max_frame_bytes(), DEFAULT_MAX_FRAME_BYTES);
        assert_eq!(c.topics.len(), 1);
    }

    #[test]
    fn tls_kms_and_header_fields_parse_and_paths_follow_the_file() {
        let dir = std::env::temp_dir().join(format!("px-config-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
        let text = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1",
            "tls":{"cert_file":"c.pem","key_file":"k.pem"},
            "upstream_tls":{"ca_file":"ca.pem","server_name":"kafka"},
            "topics":[{"topic":"t","value_keyset":"v.json","headers":["x-ssn"]}]}"#;
        std::fs::write(dir.join("p.json"), text).unwrap();
        let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
        let tls = c.tls.as_ref().unwrap();
        assert_eq!(
            (&tls.cert_file, &tls.key_file),
            (&dir.join("c.pem"), &dir.join("k.pem"))
        );
        let up = c.upstream_tls.as_ref().unwrap();
        assert_eq!(up.ca_file, dir.join("ca.pem"));
        assert_eq!(up.server_name.as_deref(), Some("kafka"));
        let p = Policies::load(&c).unwrap();
        assert_eq!(p.get("t").unwrap().headers(), ["x-ssn"]);
        assert!(!p.may_block());
        // A KMS key for a key keyset that is not there is refused.
        let mut bad = c.clone();
        bad.topics[0].key_keyset_kms_uri = Some("hcvault://h/transit/keys/k".into());
        assert!(Policies::load(&bad).is_err());
        // An unknown field inside tls is refused.
        let typo = text.replace("\"key_file\"", "\"keyfile\"");
        assert!(ProxyConfig::from_json(&typo).is_err());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn an_entry_names_one_kind_of_values_and_a_key_store_that_exists() {
        let dir = std::env::temp_dir().join(format!("px-config-subj-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
        std::fs::write(dir.join("kek.json"), Keyset::generate().to_tink_json()).unwrap();
        let load = |entry: &str| load_entry(&dir, entry);
        for (entry, says) in [
            (r#"{"topic":"t"}"#, "exactly one of"),
            (
                r#"{"topic":"t","value_keyset":"v.json","subject_keyset":"kek.json","subject_key_store":"s.redb"}"#,
                "exactly one of",
            ),
            (
                r#"{"topic":"t","subject_keyset":"kek.json"}"#,
                "subject_key_topic",
            ),
            (
                r#"{"topic":"t","value_keyset":"v.json","subject_key_store":"s.redb"}"#,
                "need \"subject_keyset\"",
            ),
            // A mistyped key-store path is an error, never an empty store.
            (
                r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"missing.redb"}"#,
                "missing.redb",
            ),
        ] {
            let e = load(entry).unwrap_err();
            assert!(e.contains(says), "{entry}: {e}");
        }
        assert!(!dir.join("missing.redb").exists(), "a key store was made");
        // The key store's client takes its security settings, and no other
        // (a value is never shown: it may be a secret).
        let text = r#"{"listen":"127.0.0.1:1","bootstrap":"127.0.0.1:1",
            "key_store_client":{"acks":"0","sasl.password":"s3cret"},
            "topics":[{"topic":"t","subject_keyset":"kek.json","subject_key_topic":"ks"}]}"#;
        std::fs::write(dir.join("p.json"), text).unwrap();
        let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
        let e = Policies::load(&c).unwrap_err().to_string();
        assert!(e.contains("\"acks\"") && !e.contains("s3cret"), "{e}");
        // A setting it takes reaches the client: librdkafka refuses this
        // value when the client is made.
        let bogus = text.replace(r#""acks":"0","#, r#""security.protocol":"bogus","#);
        std::fs::write(dir.join("p.json"), bogus).unwrap();
        let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
        let e = Policies::load(&c).unwrap_err().to_string();
        assert!(
            e.contains("security.protocol") && !e.contains("s3cret"),
            "{e}"
        );
        // Headers under subject keys are refused.
        let store = dir.join("s.redb");
        let kek = Keyset::from_tink_json(&std::fs::read_to_string(dir.join("kek.json")).unwrap())
            .unwrap();
        SubjectKeys::create(
            kek,
            Arc::new(tombstone_crypt::shred::RedbKeyStore::create(&store).unwrap()),
        )
        .unwrap();
        load(r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"s.redb"}"#).unwrap();
        let e = load(
            r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"s.redb","headers":["x"]}"#,
        )
        .unwrap_err();
        assert!(e.contains("headers"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The policies of a configuration (written to `dir`) of one topics
    /// entry, or why not.
    fn load_entry(dir: &std::path::Path, entry: &str) -> Result<(), String> {
        let text =
            format!(r#"{{"listen":"127.0.0.1:1","bootstrap":"127.0.0.1:1","topics":[{entry}]}}"#);
        std::fs::write(dir.join("p.json"), text).unwrap();
        let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
        Policies::load(&c).map(|_| ()).map_err(|e| e.to_string())
    }

    /// A topic Kafka cannot name, and a keyset of the wrong kind for its
    /// place, are refused at load, naming the entry.
    #[test]
    fn illegal_names_and_keysets_of_the_wrong_kind_are_refused_at_load() {
        let dir = std::env::temp_dir().join(format!("px-config-legal-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let siv = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv()).unwrap();
        std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
        std::fs::write(dir.join("siv.json"), siv.to_tink_json()).unwrap();
        let load = |entry: &str| load_entry(&dir, entry);
        load(r#"{"topic":"pay","value_keyset":"v.json","key_keyset":"siv.json"}"#).unwrap();
        load(r#"{"prefix":"pay.","value_keyset":"v.json"}"#).unwrap();
        for (entry, named) in [
            (r#"{"topic":"pay ","value_keyset":"v.json"}"#, "' '"),
            (r#"{"topic":"","value_keyset":"v.json"}"#, "empty"),
            (r#"{"topic":"..","value_keyset":"v.json"}"#, "\"..\""),
            (r#"{"prefix":"pay/","value_keyset":"v.json"}"#, "'/'"),
            (
                r#"{"topic":"pay","value_keyset":"siv.json"}"#,
                "value_keyset",
            ),
            (
                r#"{"topic":"pay","value_keyset":"v.json","key_keyset":"v.json"}"#,
                "key_keyset",
            ),
        ] {
            let e = load(entry).unwrap_err();
            assert!(
                e.contains(named) && e.contains("topics entry"),
                "{entry}: {e}"
            );
        }
        let long = format!(
            r#"{{"topic":"{}","value_keyset":"v.json"}}"#,
            "a".repeat(250)
        );
        assert!(load(&long).unwrap_err().contains("249"));
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn no_debug_prints_key_material() {
        let values = Keyset::generate();
        let keys = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv()).unwrap();
        let p = Policies::new().with_topic(
            "t",
            TopicPolicy::keyset(values.clone())
                .with_record_keys(keys.clone())
                .unwrap(),
        );
        let shown = format!("{p:?}");
        for ks in [values, keys] {
            let json: serde_json::Value = serde_json::from_str(&ks.to_tink_json()).unwrap();
            let value = json["key"][0]["keyData"]["value"].as_str().unwrap();
            let proto =
                base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value).unwrap();
            // The key bytes: after the proto's tag and length (1a 20 or 12 40).
            let key = &proto[2..10];
            let decimal = format!("{key:?}");
            let decimal = decimal.trim_matches(|c| c == '[' || c == ']');
            let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
            assert!(!shown.contains(decimal) && !shown.contains(&hex), "{shown}");
            assert!(!shown.contains(&value[..24]), "{shown}");
        }
    }
}
