//! The configuration file, as written: its listeners, TLS, limits and
//! topic entries, read and checked.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::Deserialize;

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
    /// What the frames in hand may claim past the first 64 KiB of each,
    /// all connections together, in bytes, for requests and again for
    /// responses (default 4 times `max_frame_bytes`; at least
    /// `max_frame_bytes`), taken before a frame's body is read. A
    /// connection whose frame finds it short is not read until frames are
    /// let go: a client that sends large frames on many connections and
    /// stalls cannot grow the process's memory with them; other large
    /// frames wait, smaller ones never do.
    #[serde(default)]
    pub max_buffered_bytes: Option<usize>,
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
            ("max_buffered_bytes", self.max_buffered_bytes()),
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

    /// `max_buffered_bytes`, or its default: 4 times `max_frame_bytes`
    /// (capped below tokio's limit on a semaphore's permits).
    pub fn max_buffered_bytes(&self) -> usize {
        self.max_buffered_bytes
            .unwrap_or_else(|| self.max_frame_bytes().saturating_mul(4))
            .min(tokio::sync::Semaphore::MAX_PERMITS)
    }

    /// `max_decoded_bytes`, or its default: 8 times `max_frame_bytes`
    /// (and never less than a request's budget).
    pub fn max_decoded_bytes(&self) -> usize {
        self.max_decoded_bytes
            .unwrap_or_else(|| self.max_frame_bytes().saturating_mul(8))
            .max(self.max_decoded_bytes_per_request())
    }
}
