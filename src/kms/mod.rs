//! Keys in a key management service (KMS): the seam a KMS plugs into
//! (Tink's `KmsClient` model), how a key URI finds its client, and the
//! retry loop the HTTP clients share.
//!
//! - [`KmsAead`]: what a KMS does for this crate, wrap (`encrypt`) and
//!   unwrap (`decrypt`) a few bytes under a key that never leaves it;
//! - [`KmsClient`]: gives the [`KmsAead`] of the key URIs it
//!   [`supports`](KmsClient::supports);
//! - [`KmsClients`]: an explicit list of clients, for code that does not
//!   want the process-wide registry ([`register_kms_client`]) or the
//!   environment.
//!
//! The clients built in are behind cargo features: `aws-kms`
//! (`AwsKmsClient`, `aws-kms://arn:aws:kms:...`) and `vault`
//! (`VaultClient`, `hcvault://HOST/MOUNT/keys/NAME`), both with
//! [`KmsTimeouts`].
//!
//! An envelope key ([`KeyTemplate::kms_envelope`](crate::KeyTemplate::kms_envelope))
//! encrypts values under data keys (DEKs) wrapped by a KMS key; a writer
//! reuses a DEK and a reader caches unwrapped ones as its [`DekPolicy`]
//! says, so the KMS is called once per DEK, not per value.
//!
//! ```no_run
//! # #[cfg(feature = "vault")] {
//! use std::time::Duration;
//! use tombstone_crypt::kms::{DekPolicy, KmsClients, VaultClient};
//! use tombstone_crypt::{KeyTemplate, Keyset};
//!
//! // VAULT_ADDR and VAULT_TOKEN from the environment.
//! let kms = KmsClients::new().with(VaultClient::from_env());
//! let template = KeyTemplate::kms_envelope("hcvault://vault:8200/transit/keys/orders")
//!     .with_kms_clients(kms)
//!     .with_dek_policy(DekPolicy::default().with_max_age(Duration::from_secs(3600)));
//! let keyset = Keyset::generate_with(template)?; // no KMS call until a value is written
//! # }
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

use core::fmt;
use std::panic::{RefUnwindSafe, UnwindSafe};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use zeroize::Zeroizing;

use crate::error::Error;

#[cfg(feature = "aws-kms")]
pub(crate) mod aws;
pub(crate) mod dek;
#[cfg(any(feature = "aws-kms", feature = "vault", feature = "confluent"))]
pub(crate) mod http;
#[cfg(feature = "vault")]
pub(crate) mod vault;

#[cfg(feature = "aws-kms")]
#[cfg_attr(docsrs, doc(cfg(feature = "aws-kms")))]
pub use aws::{AwsCredentials, AwsKmsClient};
pub use dek::{DekPolicy, MAX_DEK_VALUES, MAX_EDEK_LEN};
#[cfg(feature = "vault")]
#[cfg_attr(docsrs, doc(cfg(feature = "vault")))]
pub use vault::VaultClient;

/// A key held by a KMS, as an AEAD: Tink's "remote AEAD". The key never
/// leaves the KMS; this crate asks it to wrap and unwrap data keys (DEKs)
/// and encrypted keysets, never record values.
///
/// Implementations must be safe to call from many threads at once
/// (`Send + Sync`; and unwind-safe, so that a [`Keyset`](crate::Keyset)
/// stays `UnwindSafe`), must not panic, and should bound their own time (a timeout per call, a few
/// retries at most): the serde layer waits for them when a new DEK is made
/// or an unknown one is read.
pub trait KmsAead: Send + Sync + UnwindSafe + RefUnwindSafe + fmt::Debug {
    /// Encrypts `plaintext` bound to `associated_data` under the KMS key.
    ///
    /// # Errors
    /// [`Error::Kms`] when the KMS fails or refuses.
    fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error>;

    /// Decrypts what [`encrypt`](KmsAead::encrypt) returned, with the same
    /// associated data. The plaintext is a secret (a DEK or a keyset): it
    /// is returned in a buffer zeroized on drop.
    ///
    /// # Errors
    /// [`Error::Kms`] when the KMS fails or refuses (a damaged ciphertext, a
    /// different key or associated data).
    fn decrypt(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, Error>;
}

/// Gives the [`KmsAead`] of a key URI: Tink's `KmsClient`.
///
/// ```
/// use std::sync::Arc;
/// use tombstone_crypt::Error;
/// use tombstone_crypt::kms::{KmsAead, KmsClient};
///
/// #[derive(Debug)]
/// struct MyKms;
///
/// impl KmsClient for MyKms {
///     fn supports(&self, key_uri: &str) -> bool {
///         key_uri.starts_with("my-kms://")
///     }
///     fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
///         Err(Error::kms_msg(format!("{key_uri}: not wired in this example")))
///     }
/// }
/// assert!(MyKms.supports("my-kms://k1"));
/// ```
pub trait KmsClient: Send + Sync + UnwindSafe + RefUnwindSafe + fmt::Debug {
    /// Whether this client handles `key_uri` (usually a scheme prefix).
    fn supports(&self, key_uri: &str) -> bool;

    /// The AEAD of the key `key_uri`. Must not call the KMS: keysets are
    /// loaded without a network call, and the first call happens when a DEK
    /// is made or read.
    ///
    /// # Errors
    /// [`Error::Kms`] if the URI is malformed or the client cannot be set
    /// up (missing configuration).
    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error>;
}

/// An explicit list of [`KmsClient`]s, tried in order: for code that wires
/// its KMS by hand rather than through the process-wide registry and the
/// environment ([`Keyset::from_tink_json_with`](crate::Keyset::from_tink_json_with),
/// [`KeyTemplate::with_kms_clients`](crate::KeyTemplate::with_kms_clients)).
#[derive(Clone, Default)]
pub struct KmsClients {
    clients: Vec<Arc<dyn KmsClient>>,
}

impl fmt::Debug for KmsClients {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.clients.iter()).finish()
    }
}

impl PartialEq for KmsClients {
    fn eq(&self, other: &Self) -> bool {
        self.clients.len() == other.clients.len()
            && self
                .clients
                .iter()
                .zip(&other.clients)
                .all(|(a, b)| Arc::ptr_eq(a, b))
    }
}

impl Eq for KmsClients {}

impl KmsClients {
    /// An empty list.
    pub fn new() -> Self {
        KmsClients::default()
    }

    /// The same list with `client` added at the end.
    #[must_use]
    pub fn with(mut self, client: impl KmsClient + 'static) -> Self {
        self.clients.push(Arc::new(client));
        self
    }

    /// The same list with a shared `client` added at the end.
    #[must_use]
    pub fn with_shared(mut self, client: Arc<dyn KmsClient>) -> Self {
        self.clients.push(client);
        self
    }

    /// The AEAD of `key_uri` from the first client that supports it.
    ///
    /// # Errors
    /// [`Error::Kms`] if no client supports the URI, or the client's own.
    pub fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        match self.clients.iter().find(|c| c.supports(key_uri)) {
            Some(c) => c.get_aead(key_uri),
            None => Err(no_client(key_uri)),
        }
    }
}

fn no_client(key_uri: &str) -> Error {
    Error::kms_msg(format!(
        "no KMS client supports the key URI {:?} (register one with register_kms_client, \
         or enable the cargo feature aws-kms or vault)",
        printable_uri(key_uri)
    ))
}

/// A key URI, cut short and stripped of control characters, for errors.
pub(crate) fn printable_uri(uri: &str) -> String {
    crate::error::printable_long(uri, 200)
}

static REGISTRY: RwLock<Vec<Arc<dyn KmsClient>>> = RwLock::new(Vec::new());

/// Registers `client` for the whole process, as Tink's
/// `register_kms_client`: keysets read with
/// [`Keyset::from_tink_json`](crate::Keyset::from_tink_json) and templates
/// without explicit clients find their key URIs here. Clients registered
/// later are tried first; the clients built in (features `aws-kms`,
/// `vault`, configured from the environment) come last.
pub fn register_kms_client(client: impl KmsClient + 'static) {
    REGISTRY
        .write()
        .unwrap_or_else(PoisonError::into_inner)
        .push(Arc::new(client));
}

/// The AEAD of `key_uri` from `explicit` if given, else from the
/// registry, then the built-in clients configured from the environment.
pub(crate) fn resolve(
    key_uri: &str,
    explicit: Option<&KmsClients>,
) -> Result<Arc<dyn KmsAead>, Error> {
    if let Some(clients) = explicit {
        return clients.get_aead(key_uri);
    }
    let found = REGISTRY
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .rev()
        .find(|c| c.supports(key_uri))
        .cloned();
    if let Some(c) = found {
        return c.get_aead(key_uri);
    }
    #[cfg(feature = "aws-kms")]
    if key_uri.starts_with(aws::SCHEME) {
        return aws::AwsKmsClient::from_env().get_aead(key_uri);
    }
    #[cfg(feature = "vault")]
    if key_uri.starts_with(vault::SCHEME) {
        return vault::VaultClient::from_env().get_aead(key_uri);
    }
    Err(no_client(key_uri))
}

/// How a KMS client built in here bounds its calls: a timeout per HTTP
/// request and a few retries, with exponential backoff, of the failures
/// that may pass (connection errors, timeouts, HTTP 429 and 5xx).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KmsTimeouts {
    /// Time to connect, send and receive one request (default 5 s).
    pub request: Duration,
    /// Attempts per call, the first included (default 3, at least 1).
    pub attempts: u32,
    /// Wait before the first retry, doubled for each next one (default
    /// 100 ms).
    pub backoff: Duration,
}

impl Default for KmsTimeouts {
    fn default() -> Self {
        KmsTimeouts {
            request: Duration::from_secs(5),
            attempts: 3,
            backoff: Duration::from_millis(100),
        }
    }
}

/// One attempt's failure: whether to try again, and the error.
#[cfg(any(feature = "aws-kms", feature = "vault", feature = "confluent"))]
pub(crate) struct Failed {
    pub(crate) retry: bool,
    pub(crate) error: Error,
}

/// Runs `attempt` up to `t.attempts` times while it fails with a failure
/// worth retrying, sleeping `backoff`, `2 * backoff`, ... in between.
#[cfg(any(feature = "aws-kms", feature = "vault", feature = "confluent"))]
pub(crate) fn with_retries<T>(
    t: &KmsTimeouts,
    mut attempt: impl FnMut() -> Result<T, Failed>,
) -> Result<T, Error> {
    let mut wait = t.backoff;
    let mut left = t.attempts.max(1);
    #[cfg(feature = "tracing")]
    let mut n = 0u32;
    loop {
        left -= 1;
        #[cfg(feature = "tracing")]
        let _span = {
            n += 1;
            tracing::debug_span!("kms_attempt", attempt = n).entered()
        };
        match attempt() {
            Ok(v) => return Ok(v),
            Err(f) if f.retry && left > 0 => {
                #[cfg(feature = "tracing")]
                tracing::warn!(
                    error = %f.error,
                    retry_in_ms = u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
                    attempts_left = left,
                    "a KMS request failed; retrying"
                );
                std::thread::sleep(wait);
                wait = wait.saturating_mul(2).min(Duration::from_secs(5));
            }
            Err(f) => return Err(f.error),
        }
    }
}
