//! Envelope keys: the data keys (DEKs) a `KmsEnvelopeAeadKey` encrypts
//! values with, when to make a new one, and the readers' cache of unwrapped
//! DEKs.
//!
//! Writers: one DEK at a time per envelope key, shared by every clone of the
//! keyset and every thread, used until a limit (values, bytes, age) and
//! then replaced: one KMS `encrypt` per DEK. Readers: EDEK -> DEK in a
//! bounded cache, one KMS `decrypt` per DEK per process, evicted DEKs
//! zeroized (when the last value using them is done). No lock is held
//! across a KMS call that other keys, or readers of other DEKs, wait on.

use core::fmt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, Backend};
use crate::error::Error;
use crate::kms::{printable_uri, KmsAead, KmsClients};

/// The longest encrypted DEK (EDEK) accepted in a ciphertext or from a KMS.
/// AWS KMS blobs are under 300 bytes, Vault's `vault:v1:...` about 90.
pub const MAX_EDEK_LEN: usize = 4096;

/// The most values one DEK may ever encrypt: 2^32, NIST SP 800-38D's bound
/// for random 96-bit nonces.
pub const MAX_DEK_VALUES: u64 = 1 << 32;

/// When a writer replaces its data key (DEK), and how many unwrapped DEKs a
/// reader keeps. A DEK is replaced when it has encrypted `max_values`
/// values, or `max_bytes` bytes of plaintext, or is `max_age` old, whichever
/// comes first. See SECURITY.md for the defaults' reasons.
///
/// ```
/// use std::time::Duration;
/// use tombstone_crypt::DekPolicy;
///
/// let p = DekPolicy::default().with_max_values(1000).with_max_age(Duration::from_secs(60));
/// assert_eq!(p.max_values(), 1000);
/// assert_eq!(DekPolicy::default().with_max_values(u64::MAX).max_values(), 1 << 32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DekPolicy {
    max_values: u64,
    max_bytes: u64,
    max_age: Duration,
    cache_capacity: usize,
}

impl Default for DekPolicy {
    /// 2^20 values, 2^32 bytes (4 GiB), one hour; a reader cache of 1024
    /// DEKs.
    fn default() -> Self {
        DekPolicy {
            max_values: 1 << 20,
            max_bytes: 1 << 32,
            max_age: Duration::from_secs(3600),
            cache_capacity: 1024,
        }
    }
}

impl DekPolicy {
    /// At most `n` values per DEK, clamped to 1..=2^32
    /// ([`MAX_DEK_VALUES`]).
    #[must_use]
    pub fn with_max_values(self, n: u64) -> Self {
        DekPolicy {
            max_values: n.clamp(1, MAX_DEK_VALUES),
            ..self
        }
    }

    /// At most `n` plaintext bytes per DEK (checked before each value, so
    /// the last value may cross it), at least 1.
    #[must_use]
    pub fn with_max_bytes(self, n: u64) -> Self {
        DekPolicy {
            max_bytes: n.max(1),
            ..self
        }
    }

    /// A DEK older than `age` encrypts no more.
    #[must_use]
    pub fn with_max_age(self, age: Duration) -> Self {
        DekPolicy {
            max_age: age,
            ..self
        }
    }

    /// A reader keeps at most `n` unwrapped DEKs per envelope key (at least
    /// 1); the least recently used is evicted and zeroized.
    #[must_use]
    pub fn with_cache_capacity(self, n: usize) -> Self {
        DekPolicy {
            cache_capacity: n.max(1),
            ..self
        }
    }

    /// Values per DEK.
    pub fn max_values(&self) -> u64 {
        self.max_values
    }

    /// Plaintext bytes per DEK.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Age of a DEK after which it encrypts no more.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Unwrapped DEKs a reader keeps.
    pub fn cache_capacity(&self) -> usize {
        self.cache_capacity
    }
}

/// A `KmsEnvelopeAeadKey`: its KEK URI, its DEK size, and the shared state
/// (the KMS AEAD, the writer's DEK, the reader cache). Clones share the
/// state.
#[derive(Clone)]
pub(crate) struct EnvelopeKey {
    state: Arc<State>,
}

struct State {
    kek_uri: String,
    dek_len: u8,
    clients: Option<KmsClients>,
    remote: Arc<dyn KmsAead>,
    policy: DekPolicy,
    backend: Backend,
    current: RwLock<Option<Arc<WriterDek>>>,
    /// Held by the one thread making a new DEK (across its KMS call): only
    /// threads of this key that need a new DEK wait on it.
    ///
    /// It keeps the last failure: threads that were waiting while the KMS
    /// call failed get that error at once, rather than each trying the
    /// KMS again in turn (N threads would wait N timeouts).
    refill: Mutex<Option<(Instant, Error)>>,
    cache: RwLock<Cache>,
    tick: AtomicU64,
    /// The current EDEK's length, for size hints (0 before the first DEK).
    edek_len: AtomicUsize,
}

/// The writer's current DEK and what it has encrypted.
pub(crate) struct WriterDek {
    pub(crate) key: Arc<AesGcmKey>,
    pub(crate) edek: Box<[u8]>,
    created: Instant,
    values: AtomicU64,
    bytes: AtomicU64,
}

impl WriterDek {
    /// Takes one value's turn if the DEK is within its limits.
    #[inline]
    fn take(&self, policy: &DekPolicy) -> bool {
        if self.bytes.load(Ordering::Relaxed) >= policy.max_bytes {
            return false;
        }
        if self.values.fetch_add(1, Ordering::Relaxed) >= policy.max_values {
            return false;
        }
        self.created.elapsed() < policy.max_age
    }

    /// Whether the DEK still has a turn, without taking it.
    fn has_turn(&self, policy: &DekPolicy) -> bool {
        self.bytes.load(Ordering::Relaxed) < policy.max_bytes
            && self.values.load(Ordering::Relaxed) < policy.max_values
            && self.created.elapsed() < policy.max_age
    }

    /// Counts `n` plaintext bytes encrypted under this DEK.
    #[inline]
    pub(crate) fn add_bytes(&self, n: usize) {
        self.bytes
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}

/// EDEK -> DEK.
type Cache = HashMap<Box<[u8]>, Arc<Slot>, TailHash>;

/// Hashes an EDEK by its length and its last 16 bytes only, with the
/// process's random SipHash key: EDEKs end in a KMS ciphertext's random
/// tag or IV, so the tail tells them apart, and a lookup does not hash a
/// few hundred bytes per value. Equality still compares whole EDEKs, and
/// the keyed hash leaves an attacker no way to aim collisions.
#[derive(Clone, Default)]
struct TailHash(std::collections::hash_map::RandomState);

impl std::hash::BuildHasher for TailHash {
    type Hasher = Tail;
    fn build_hasher(&self) -> Tail {
        Tail(self.0.build_hasher())
    }
}

struct Tail(std::collections::hash_map::DefaultHasher);

impl std::hash::Hasher for Tail {
    fn finish(&self) -> u64 {
        self.0.finish()
    }
    fn write(&mut self, bytes: &[u8]) {
        self.0.write(&bytes[bytes.len().saturating_sub(16)..]);
    }
    fn write_usize(&mut self, n: usize) {
        self.0.write_usize(n);
    }
}

/// A reader cache entry: the DEK once unwrapped, and a lock that makes one
/// thread (not one per value) call the KMS for it.
struct Slot {
    dek: OnceLock<Arc<AesGcmKey>>,
    /// Keeps the last failure, as `State::refill` does.
    fetch: Mutex<Option<(Instant, Error)>>,
    last_used: AtomicU64,
}

impl fmt::Debug for EnvelopeKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EnvelopeKey")
            .field("kek_uri", &self.state.kek_uri)
            .field("dek_len", &self.state.dek_len)
            .finish_non_exhaustive()
    }
}

impl EnvelopeKey {
    /// An envelope key for `kek_uri` with AES-GCM DEKs of `dek_len` bytes;
    /// the KMS AEAD is found now (no KMS call is made).
    pub(crate) fn new(
        kek_uri: &str,
        dek_len: u8,
        clients: Option<&KmsClients>,
        policy: DekPolicy,
        backend: Backend,
    ) -> Result<Self, Error> {
        if dek_len != 16 && dek_len != 32 {
            return Err(Error::kms_msg(format!(
                "DEK size {dek_len} is not 16 or 32 bytes"
            )));
        }
        let remote = crate::kms::resolve(kek_uri, clients)?;
        Ok(EnvelopeKey {
            state: Arc::new(State {
                kek_uri: kek_uri.to_owned(),
                dek_len,
                clients: clients.cloned(),
                remote,
                policy,
                backend,
                current: RwLock::new(None),
                refill: Mutex::new(None),
                cache: RwLock::new(Cache::default()),
                tick: AtomicU64::new(0),
                edek_len: AtomicUsize::new(0),
            }),
        })
    }

    /// The same key with other DEK limits or backend: a fresh state (a new
    /// DEK is made on the next value; nothing cached).
    pub(crate) fn reconfigured(&self, policy: DekPolicy, backend: Backend) -> Self {
        let s = &self.state;
        EnvelopeKey {
            state: Arc::new(State {
                kek_uri: s.kek_uri.clone(),
                dek_len: s.dek_len,
                clients: s.clients.clone(),
                remote: Arc::clone(&s.remote),
                policy,
                backend,
                current: RwLock::new(None),
                refill: Mutex::new(None),
                cache: RwLock::new(Cache::default()),
                tick: AtomicU64::new(0),
                edek_len: AtomicUsize::new(0),
            }),
        }
    }

    /// The length of the EDEK the next value most likely carries (a size
    /// hint; 0 before the first DEK).
    #[inline]
    pub(crate) fn edek_len_hint(&self) -> usize {
        self.state.edek_len.load(Ordering::Relaxed)
    }

    pub(crate) fn kek_uri(&self) -> &str {
        &self.state.kek_uri
    }

    pub(crate) fn dek_len(&self) -> u8 {
        self.state.dek_len
    }

    pub(crate) fn clients(&self) -> Option<&KmsClients> {
        self.state.clients.as_ref()
    }

    pub(crate) fn policy(&self) -> DekPolicy {
        self.state.policy
    }

    pub(crate) fn backend(&self) -> Backend {
        self.state.backend
    }

    /// The DEK the next value is encrypted under, with its turn taken: the
    /// current one if within its limits, else a new one (one KMS call,
    /// made by one thread while the others needing a DEK wait).
    #[inline]
    pub(crate) fn writer_dek(&self) -> Result<Arc<WriterDek>, Error> {
        let s = &self.state;
        if let Some(d) = s.current() {
            if d.take(&s.policy) {
                return Ok(d);
            }
        }
        self.refill()
    }

    /// Whether the next value would need a new DEK (a KMS call).
    pub(crate) fn writer_needs_kms(&self) -> bool {
        let s = &self.state;
        !s.current().is_some_and(|d| d.has_turn(&s.policy))
    }

    /// Makes the DEK the next values are encrypted under, if one is due,
    /// without taking a turn: the KMS call of a `writer_dek` done ahead
    /// (on a thread where blocking is allowed).
    pub(crate) fn prepare_writer(&self) -> Result<(), Error> {
        self.refill_locked(false).map(drop)
    }

    /// Whether the DEK of `edek` is cached (else opening a value under it
    /// is a KMS call).
    pub(crate) fn reader_has(&self, edek: &[u8]) -> bool {
        let cache = self
            .state
            .cache
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        cache.get(edek).is_some_and(|slot| slot.dek.get().is_some())
    }

    #[cold]
    fn refill(&self) -> Result<Arc<WriterDek>, Error> {
        self.refill_locked(true)
    }

    /// Under the refill lock: the current DEK if it has a turn (taking it
    /// when `take`), made by another thread while this one waited; or the
    /// failure another thread met meanwhile, at once; else a new DEK, with
    /// one turn taken when `take`.
    fn refill_locked(&self, take: bool) -> Result<Arc<WriterDek>, Error> {
        let s = &self.state;
        let waited_from = Instant::now();
        let mut last_failure = s.refill.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = s.current() {
            let has_turn = if take {
                d.take(&s.policy)
            } else {
                d.has_turn(&s.policy)
            };
            if has_turn {
                return Ok(d);
            }
        }
        if let Some((at, e)) = &*last_failure {
            if *at >= waited_from {
                return Err(e.clone());
            }
        }
        let made = self.make_dek(u64::from(take));
        if let Err(e) = &made {
            *last_failure = Some((Instant::now(), e.clone()));
        }
        made
    }

    /// A fresh DEK, wrapped by the KMS, made current, with `turns_taken`
    /// of its values already counted.
    fn make_dek(&self, turns_taken: u64) -> Result<Arc<WriterDek>, Error> {
        let s = &self.state;
        let mut bytes = Zeroizing::new([0u8; 32]);
        crate::keyset::fill_from_os(&mut bytes[..]);
        let bytes = &bytes[..usize::from(s.dek_len)];
        let proto = crate::primitive::aes_gcm_key_proto(bytes);
        let edek = s.remote.encrypt(&proto, b"").map_err(|e| {
            wrap(
                format!(
                    "wrapping a new data key under {}",
                    printable_uri(&s.kek_uri)
                ),
                e,
            )
        })?;
        if edek.is_empty() || edek.len() > MAX_EDEK_LEN {
            return Err(Error::kms_msg(format!(
                "{} returned an encrypted data key of {} bytes (expected 1 to {MAX_EDEK_LEN})",
                printable_uri(&s.kek_uri),
                edek.len()
            )));
        }
        let key = Arc::new(AesGcmKey::new(bytes, s.backend)?);
        let dek = Arc::new(WriterDek {
            key: Arc::clone(&key),
            edek: edek.into_boxed_slice(),
            created: Instant::now(),
            values: AtomicU64::new(turns_taken),
            bytes: AtomicU64::new(0),
        });
        // The writer reads its own values without asking the KMS.
        self.insert_cached(&dek.edek, key);
        s.edek_len.store(dek.edek.len(), Ordering::Relaxed);
        *s.current.write().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&dek));
        Ok(dek)
    }

    fn insert_cached(&self, edek: &[u8], key: Arc<AesGcmKey>) {
        let slot = Arc::new(Slot {
            dek: OnceLock::new(),
            fetch: Mutex::new(None),
            last_used: AtomicU64::new(self.state.tick.fetch_add(1, Ordering::Relaxed)),
        });
        let _ = slot.dek.set(key);
        let mut cache = self
            .state
            .cache
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        self.make_room(&mut cache, edek);
        cache.insert(edek.into(), slot);
    }

    /// Evicts the least recently used entries until one more fits.
    fn make_room(&self, cache: &mut Cache, incoming: &[u8]) {
        let cap = self.state.policy.cache_capacity;
        while cache.len() >= cap && !cache.contains_key(incoming) {
            let oldest = cache
                .iter()
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            match oldest {
                // Dropping the slot drops the DEK (zeroized) once no value
                // being decrypted holds it.
                Some(k) => {
                    cache.remove(&k);
                }
                None => break,
            }
        }
    }

    /// The DEK of `edek`: from the cache, else unwrapped by the KMS (one
    /// thread per EDEK calls it; no lock shared with other EDEKs is held
    /// during the call).
    #[inline]
    pub(crate) fn reader_dek(&self, edek: &[u8]) -> Result<Arc<AesGcmKey>, Error> {
        let s = &self.state;
        let slot = {
            let cache = s.cache.read().unwrap_or_else(PoisonError::into_inner);
            match cache.get(edek) {
                Some(slot) => {
                    // LRU-ish: a hit is stamped with the current tick
                    // (only misses advance it), so one shared counter is
                    // not written by every value.
                    slot.last_used
                        .store(s.tick.load(Ordering::Relaxed), Ordering::Relaxed);
                    if let Some(k) = slot.dek.get() {
                        return Ok(Arc::clone(k));
                    }
                    Some(Arc::clone(slot))
                }
                None => None,
            }
        };
        let slot = match slot {
            Some(slot) => slot,
            None => self.new_slot(edek),
        };
        self.fetch(edek, &slot)
    }

    #[cold]
    fn new_slot(&self, edek: &[u8]) -> Arc<Slot> {
        let s = &self.state;
        let mut cache = s.cache.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = cache.get(edek) {
            return Arc::clone(slot);
        }
        self.make_room(&mut cache, edek);
        let slot = Arc::new(Slot {
            dek: OnceLock::new(),
            fetch: Mutex::new(None),
            last_used: AtomicU64::new(s.tick.fetch_add(1, Ordering::Relaxed)),
        });
        cache.insert(edek.into(), Arc::clone(&slot));
        slot
    }

    #[cold]
    fn fetch(&self, edek: &[u8], slot: &Arc<Slot>) -> Result<Arc<AesGcmKey>, Error> {
        let s = &self.state;
        let waited_from = Instant::now();
        let mut last_failure = slot.fetch.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(k) = slot.dek.get() {
            return Ok(Arc::clone(k));
        }
        if let Some((at, e)) = &*last_failure {
            if *at >= waited_from {
                return Err(e.clone());
            }
        }
        let unwrapped = s.remote.decrypt(edek, b"").and_then(|proto| {
            let key = crate::primitive::parse_aes_gcm_key_proto(&proto).map_err(|why| {
                Error::kms_msg(format!("the unwrapped data key is not an AesGcmKey: {why}"))
            })?;
            AesGcmKey::new(key, s.backend)
        });
        match unwrapped {
            Ok(key) => {
                let key = Arc::new(key);
                let _ = slot.dek.set(Arc::clone(&key));
                Ok(key)
            }
            Err(e) => {
                // No empty slot stays behind for an EDEK that failed (a
                // hostile one, or a KMS that is down): the next value tries
                // again, and junk does not evict good DEKs for long.
                let mut cache = s.cache.write().unwrap_or_else(PoisonError::into_inner);
                if cache
                    .get(edek)
                    .is_some_and(|c| Arc::ptr_eq(c, slot) && c.dek.get().is_none())
                {
                    cache.remove(edek);
                }
                let e = wrap(
                    format!("unwrapping a data key under {}", printable_uri(&s.kek_uri)),
                    e,
                );
                *last_failure = Some((Instant::now(), e.clone()));
                Err(e)
            }
        }
    }
}

impl State {
    #[inline]
    fn current(&self) -> Option<Arc<WriterDek>> {
        self.current
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// A KMS error with what this crate was doing in front; a KMS error keeps
/// its cause, any other error becomes the cause.
fn wrap(what: String, e: Error) -> Error {
    match e {
        Error::Kms { detail, cause } => Error::Kms {
            detail: format!("{what}: {detail}"),
            cause,
        },
        other => Error::Kms {
            detail: what,
            cause: Some(Arc::new(other)),
        },
    }
}
