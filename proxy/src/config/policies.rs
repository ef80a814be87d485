//! The topics' policies a configuration names: each entry checked, its
//! keysets loaded and its key store opened, and the topics matched to
//! them.

use std::path::Path;
use std::sync::Arc;

use tombstone_crypt::files::{open_key_store, KeyStoreAt, KeyStorePart};
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::Keyset;

use super::file::{ProxyConfig, TopicEntry};
use crate::error::ProxyError;

pub use tombstone_crypt::policy::TopicPolicy;

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
