//! Envelope keys: the data keys (DEKs) a `KmsEnvelopeAeadKey` encrypts
//! values with, when to make a new one, and the readers' cache of unwrapped
//! DEKs.
//!
//! Writers: one DEK at a time per envelope key, shared by every clone of the
//! keyset and every thread, used until a limit (values, bytes, age) and
//! then replaced: one KMS `encrypt` per DEK. Readers: EDEK -> DEK in a
//! bounded cache whose entries live for a TTL from their unwrap, one KMS
//! `decrypt` per DEK per TTL per process. Evicted and expired DEKs are
//! zeroized (when the last value using them is done).
//!
//! Expiry is exact on use (a DEK past its age never encrypts, an entry
//! past its TTL never decrypts) and memory is swept on use: every use of
//! an envelope key (a value encrypted or decrypted under it) first drops
//! whatever of that key has expired, writer's DEK and cache entries alike;
//! the earliest expiry is kept in one atomic, so a use that finds nothing
//! due costs one clock read and one load. No thread runs in the
//! background: a key that is not used keeps its DEKs until its next use or
//! until its last clone is dropped. No lock is held across a KMS call that
//! other keys, or readers of other DEKs, wait on.
//!
//! The per-value path takes no lock and touches no reference count: the
//! writer's DEK and the reader's recent entries are `arc-swap` pointers,
//! borrowed for the value (`with_writer_dek`, `with_reader_dek`). The only
//! shared writes per value are the writer DEK's own counters (values and
//! bytes), which its limits need exactly.

use core::fmt;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};
use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, Backend};
use crate::error::Error;
use crate::kms::{printable_uri, KmsAead, KmsClients};
use crate::stats::{self, ColdCounters, Counters, Event, KmsOp, Rare};

pub(crate) mod hooks;
mod policy;

pub use policy::{DekPolicy, MAX_DEK_VALUES, MAX_EDEK_LEN};

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
    /// The writer's DEK: loaded per value with no shared write.
    current: ArcSwapOption<WriterDek>,
    /// Held by the one thread making a new DEK (across its KMS call): only
    /// threads of this key that need a new DEK wait on it.
    ///
    /// It keeps the last failure: threads that were waiting while the KMS
    /// call failed get that error at once, rather than each trying the
    /// KMS again in turn (N threads would wait N timeouts).
    refill: Mutex<Option<(Instant, Error)>>,
    cache: RwLock<Cache>,
    /// The reader entries used last, one per value of an EDEK's last byte
    /// (random KMS output) modulo [`RECENT`], read per value with no lock
    /// and no hash: a topic carries its writers' current DEKs, a few at a
    /// time. Set (when they change) and cleared only under the cache lock,
    /// so they never hold an entry the cache dropped (evicted or expired
    /// DEKs stay zeroized on schedule).
    recent: [ArcSwapOption<Recent>; RECENT],
    tick: AtomicU64,
    /// The current EDEK's length, for size hints (0 before the first DEK).
    edek_len: AtomicUsize,
    /// Times are nanoseconds since this reading of the precise DEK clock
    /// ([`State::now`], `hooks`).
    epoch: u64,
    /// No DEK of this key (writer's or cached) expires before this time:
    /// a use at or after it sweeps. Only lowered, except by the sweep.
    next_expiry: AtomicU64,
    /// A sweep is running (the others do not wait for it).
    sweeping: AtomicBool,
    /// Where DEKs made and unwrapped, cache misses and evictions and KMS
    /// calls are counted: the keyset's ([`EnvelopeKey::count_on`]).
    counted: ArcSwap<ColdCounters>,
}

impl Drop for State {
    fn drop(&mut self) {
        let cache = self.cache.get_mut().unwrap_or_else(PoisonError::into_inner);
        stats::cache_entries_changed(-len_i64(cache.len()));
    }
}

/// A cache length as a signed count.
fn len_i64(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// The writer's current DEK and what it has encrypted.
pub(crate) struct WriterDek {
    pub(crate) key: Arc<AesGcmKey>,
    pub(crate) edek: Box<[u8]>,
    /// When it encrypts no more ([`State::now`]'s time).
    expires: u64,
    used: DekUse,
    held: Arc<hooks::Held>,
}

/// What a writer DEK has encrypted: the one thing threads sharing the key
/// write per value, on cache lines of its own (128 bytes: adjacent-line
/// prefetching pulls two 64-byte lines together), so the DEK's fields
/// every value reads (key, EDEK, expiry) stay shared in both cores' caches
/// instead of moving with each count.
///
/// Filled to its 128 bytes with zeros, not padded: it is built on the
/// stack and moved to the heap, and padding would carry along whatever the
/// stack held there before (a key, say).
#[repr(C, align(128))]
struct DekUse {
    values: AtomicU64,
    bytes: AtomicU64,
    _fill: [u64; 14],
}

impl WriterDek {
    /// Takes one value's turn if the DEK is within its limits at `now`.
    #[inline]
    fn take(&self, policy: &DekPolicy, now: u64) -> bool {
        if now >= self.expires || self.used.bytes.load(Ordering::Relaxed) >= policy.max_bytes() {
            return false;
        }
        self.used.values.fetch_add(1, Ordering::Relaxed) < policy.max_values()
    }

    /// Whether the DEK still has a turn at `now`, without taking it.
    fn has_turn(&self, policy: &DekPolicy, now: u64) -> bool {
        now < self.expires
            && self.used.bytes.load(Ordering::Relaxed) < policy.max_bytes()
            && self.used.values.load(Ordering::Relaxed) < policy.max_values()
    }

    /// Counts `n` plaintext bytes encrypted under this DEK.
    #[inline]
    pub(crate) fn add_bytes(&self, n: usize) {
        self.used
            .bytes
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

/// How many recent reader entries a key keeps (see `State::recent`).
const RECENT: usize = 8;

/// Which recent entry an EDEK goes in: its last byte's.
#[inline]
fn recent_index(edek: &[u8]) -> usize {
    edek.last().map_or(0, |&b| usize::from(b) % RECENT)
}

/// A recent reader cache entry, with its EDEK.
struct Recent {
    edek: Box<[u8]>,
    slot: Arc<Slot>,
}

/// A reader cache entry: the DEK once unwrapped, and a lock that makes one
/// thread (not one per value) call the KMS for it.
struct Slot {
    dek: OnceLock<Cached>,
    /// Keeps the last failure, as `State::refill` does.
    fetch: Mutex<Option<(Instant, Error)>>,
    last_used: AtomicU64,
}

/// An unwrapped DEK in the reader cache.
struct Cached {
    key: Arc<AesGcmKey>,
    /// When it decrypts no more ([`State::now`]'s time).
    expires: u64,
    _held: Arc<hooks::Held>,
}

impl Slot {
    fn new(last_used: u64) -> Self {
        Slot {
            dek: OnceLock::new(),
            fetch: Mutex::new(None),
            last_used: AtomicU64::new(last_used),
        }
    }

    /// LRU-ish: a hit is stamped with the current tick (only misses
    /// advance it), so one shared counter is not written by every value;
    /// and only when the stamp changes, so threads reading under one DEK
    /// do not pass its slot's cache line back and forth.
    #[inline]
    fn stamp(&self, tick: u64) {
        if self.last_used.load(Ordering::Relaxed) != tick {
            self.last_used.store(tick, Ordering::Relaxed);
        }
    }

    /// The DEK if it is unwrapped and not expired at `now`.
    #[inline]
    fn live(&self, now: u64) -> Option<&Arc<AesGcmKey>> {
        self.dek.get().filter(|c| now < c.expires).map(|c| &c.key)
    }

    /// Whether the DEK is unwrapped and expired at `now`.
    fn expired(&self, now: u64) -> bool {
        self.dek.get().is_some_and(|c| now >= c.expires)
    }
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
            state: Arc::new(State::new(
                kek_uri.to_owned(),
                dek_len,
                clients.cloned(),
                remote,
                policy,
                backend,
            )),
        })
    }

    /// The same key with other DEK limits or backend: a fresh state (a new
    /// DEK is made on the next value; nothing cached).
    pub(crate) fn reconfigured(&self, policy: DekPolicy, backend: Backend) -> Self {
        let s = &self.state;
        EnvelopeKey {
            state: Arc::new(State::new(
                s.kek_uri.clone(),
                s.dek_len,
                s.clients.clone(),
                Arc::clone(&s.remote),
                policy,
                backend,
            )),
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
    ///
    /// `f` borrows the DEK: no reference count is touched and no lock is
    /// taken per value, only the DEK's own counters.
    #[inline]
    pub(crate) fn with_writer_dek<R>(
        &self,
        f: impl FnOnce(&WriterDek) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let s = &self.state;
        let now = s.now();
        s.sweep_if_due(now);
        {
            let current = s.current.load();
            if let Some(d) = current.as_deref() {
                if d.take(&s.policy, now) {
                    return f(d);
                }
            }
        }
        f(&*self.refill()?)
    }

    /// Has this key count its DEKs, cache misses and evictions and KMS
    /// calls in `cold` (its keyset's) from now on.
    pub(crate) fn count_on(&self, cold: &Arc<ColdCounters>) {
        let s = &self.state;
        if !Arc::ptr_eq(&s.counted.load(), cold) {
            s.counted.store(Arc::clone(cold));
        }
    }

    /// The DEKs (and DEKs being unwrapped) the reader cache holds now.
    pub(crate) fn cache_entries(&self) -> usize {
        self.state
            .cache
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }

    /// Whether the next value would need a new DEK (a KMS call).
    pub(crate) fn writer_needs_kms(&self) -> bool {
        let s = &self.state;
        !s.current().is_some_and(|d| d.has_turn(&s.policy, s.now()))
    }

    /// Makes the DEK the next values are encrypted under, if one is due,
    /// without taking a turn: the KMS call of a `writer_dek` done ahead
    /// (on a thread where blocking is allowed).
    pub(crate) fn prepare_writer(&self) -> Result<(), Error> {
        self.state.sweep_if_due(self.state.now());
        self.refill_locked(false).map(drop)
    }

    /// Whether the DEK of `edek` is cached and not expired (else opening a
    /// value under it is a KMS call).
    pub(crate) fn reader_has(&self, edek: &[u8]) -> bool {
        let s = &self.state;
        let now = s.now();
        let cache = s.cache.read().unwrap_or_else(PoisonError::into_inner);
        cache.get(edek).is_some_and(|slot| slot.live(now).is_some())
    }

    /// Runs `f` on the DEK of `edek`: the most recent entry's when it is
    /// that EDEK's (no lock, no hash, no reference count), else
    /// [`reader_dek`](EnvelopeKey::reader_dek)'s. A DEK found in the cache
    /// is a hit in `counters` (the keyset's per-thread blocks).
    #[inline]
    pub(crate) fn with_reader_dek<R>(
        &self,
        edek: &[u8],
        counters: &Counters,
        f: impl FnOnce(&AesGcmKey) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let s = &self.state;
        let now = s.now();
        s.sweep_if_due(now);
        {
            let recent = s.recent[recent_index(edek)].load();
            if let Some(r) = recent.as_deref() {
                if *r.edek == *edek {
                    if let Some(k) = r.slot.live(now) {
                        r.slot.stamp(s.tick.load(Ordering::Relaxed));
                        counters.bump(Event::EdekHit);
                        return f(k);
                    }
                }
            }
        }
        f(&*self.lookup(edek, Some(counters))?)
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
            let now = s.now();
            let has_turn = if take {
                d.take(&s.policy, now)
            } else {
                d.has_turn(&s.policy, now)
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
        #[cfg(feature = "tracing")]
        let _span =
            tracing::debug_span!("dek_create", key_uri = %printable_uri(&s.kek_uri)).entered();
        // Its age counts from before the KMS call.
        let made = s.now_precise();
        let mut bytes = Zeroizing::new([0u8; 32]);
        crate::random::fill_from_os(&mut bytes[..]);
        let bytes = &bytes[..usize::from(s.dek_len)];
        let proto = crate::proto::aes_gcm_key_proto(bytes);
        let uri = printable_uri(&s.kek_uri);
        let wrapped = s
            .counted
            .load()
            .kms_call(KmsOp::Encrypt, &uri, || s.remote.encrypt(&proto, b""));
        let edek = wrapped.map_err(|e| {
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
            expires: made.saturating_add(hooks::nanos(s.policy.max_age())),
            used: DekUse {
                values: AtomicU64::new(turns_taken),
                bytes: AtomicU64::new(0),
                _fill: [0; 14],
            },
            held: Arc::new(hooks::Held::new()),
        });
        // The writer reads its own values without asking the KMS.
        let cached = Cached {
            key,
            expires: made.saturating_add(hooks::nanos(s.policy.cache_ttl())),
            _held: Arc::clone(&dek.held),
        };
        self.insert_cached(&dek.edek, cached);
        s.edek_len.store(dek.edek.len(), Ordering::Relaxed);
        // Lowered before the DEK is seen, so a use that finds it reads the
        // clock its expiry needs (`State::now`), and again after, in case
        // a sweep that did not see it raised the bound in between.
        s.next_expiry.fetch_min(dek.expires, Ordering::AcqRel);
        s.current.store(Some(Arc::clone(&dek)));
        s.next_expiry.fetch_min(dek.expires, Ordering::AcqRel);
        s.counted.load().count(Rare::DekCreated);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            key_uri = %printable_uri(&s.kek_uri),
            edek_len = dek.edek.len(),
            max_values = s.policy.max_values(),
            "a new data key (DEK) is current"
        );
        Ok(dek)
    }

    fn insert_cached(&self, edek: &[u8], cached: Cached) {
        let s = &self.state;
        let expires = cached.expires;
        let slot = Arc::new(Slot::new(s.tick.fetch_add(1, Ordering::Relaxed)));
        let _ = slot.dek.set(cached);
        // Before the entry can be found, so a use that finds it reads the
        // clock its expiry needs (`State::now`).
        s.next_expiry.fetch_min(expires, Ordering::AcqRel);
        let mut cache = s.cache.write().unwrap_or_else(PoisonError::into_inner);
        self.make_room(&mut cache, edek);
        if cache.insert(edek.into(), Arc::clone(&slot)).is_none() {
            stats::cache_entries_changed(1);
        }
        s.set_recent(edek, &slot);
        // Under the cache lock: a sweep sees the entry or this.
        s.next_expiry.fetch_min(expires, Ordering::AcqRel);
    }

    /// Evicts the least recently used entries until one more fits.
    fn make_room(&self, cache: &mut Cache, incoming: &[u8]) {
        let cap = self.state.policy.cache_capacity();
        while cache.len() >= cap && !cache.contains_key(incoming) {
            let oldest = cache
                .iter()
                .min_by_key(|(_, s)| s.last_used.load(Ordering::Relaxed))
                .map(|(k, _)| k.clone());
            match oldest {
                // Dropping the slot drops the DEK (zeroized) once no value
                // being decrypted holds it.
                Some(k) => {
                    if let Some(gone) = cache.remove(&k) {
                        self.state.forget_recent(&gone);
                        self.state.counted.load().count(Rare::Eviction);
                        stats::cache_entries_changed(-1);
                    }
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
        self.lookup(edek, None)
    }

    /// [`reader_dek`](EnvelopeKey::reader_dek), a cache hit counted in
    /// `hits` when given (a value being opened; a lookup ahead of one,
    /// for blocking work, counts its miss only).
    fn lookup(&self, edek: &[u8], hits: Option<&Counters>) -> Result<Arc<AesGcmKey>, Error> {
        let s = &self.state;
        let now = s.now();
        s.sweep_if_due(now);
        let slot = {
            let cache = s.cache.read().unwrap_or_else(PoisonError::into_inner);
            match cache.get(edek) {
                Some(slot) => {
                    slot.stamp(s.tick.load(Ordering::Relaxed));
                    if let Some(k) = slot.live(now) {
                        // Under the cache lock, as every change to them.
                        s.set_recent(edek, slot);
                        if let Some(c) = hits {
                            c.bump(Event::EdekHit);
                        }
                        return Ok(Arc::clone(k));
                    }
                    // Expired: replaced by a new slot below.
                    (!slot.expired(now)).then(|| Arc::clone(slot))
                }
                None => None,
            }
        };
        let slot = match slot {
            Some(slot) => slot,
            None => self.new_slot(edek, now),
        };
        s.counted.load().count(Rare::Miss);
        self.fetch(edek, &slot)
    }

    /// The slot of `edek`: the one in the cache unless its DEK expired at
    /// `now`, else a new, empty one.
    #[cold]
    fn new_slot(&self, edek: &[u8], now: u64) -> Arc<Slot> {
        let s = &self.state;
        let mut cache = s.cache.write().unwrap_or_else(PoisonError::into_inner);
        if let Some(slot) = cache.get(edek) {
            if !slot.expired(now) {
                return Arc::clone(slot);
            }
            // Dropped: zeroized once no value being decrypted holds it.
            if let Some(gone) = cache.remove(edek) {
                s.forget_recent(&gone);
                stats::cache_entries_changed(-1);
            }
        }
        self.make_room(&mut cache, edek);
        let slot = Arc::new(Slot::new(s.tick.fetch_add(1, Ordering::Relaxed)));
        if cache.insert(edek.into(), Arc::clone(&slot)).is_none() {
            stats::cache_entries_changed(1);
        }
        slot
    }

    #[cold]
    fn fetch(&self, edek: &[u8], slot: &Arc<Slot>) -> Result<Arc<AesGcmKey>, Error> {
        let s = &self.state;
        #[cfg(feature = "tracing")]
        let _span = tracing::debug_span!(
            "dek_unwrap",
            key_uri = %printable_uri(&s.kek_uri),
            edek_len = edek.len()
        )
        .entered();
        let waited_from = Instant::now();
        let mut last_failure = slot.fetch.lock().unwrap_or_else(PoisonError::into_inner);
        // Unwrapped by another thread while this one waited (just now, so
        // not expired unless the TTL is zero: then it serves this value).
        if let Some(c) = slot.dek.get() {
            return Ok(Arc::clone(&c.key));
        }
        if let Some((at, e)) = &*last_failure {
            if *at >= waited_from {
                return Err(e.clone());
            }
        }
        // Its TTL counts from before the KMS call.
        let unwrapped_at = s.now_precise();
        let uri = printable_uri(&s.kek_uri);
        let unwrapped = s
            .counted
            .load()
            .kms_call(KmsOp::Decrypt, &uri, || s.remote.decrypt(edek, b""));
        let unwrapped = unwrapped.and_then(|proto| {
            let key = crate::proto::parse_aes_gcm_key_proto(&proto).map_err(|why| {
                Error::kms_msg(format!("the unwrapped data key is not an AesGcmKey: {why}"))
            })?;
            AesGcmKey::new(key, s.backend)
        });
        match unwrapped {
            Ok(key) => {
                s.counted.load().count(Rare::DekUnwrapped);
                #[cfg(feature = "tracing")]
                tracing::debug!(
                    key_uri = %printable_uri(&s.kek_uri),
                    edek_len = edek.len(),
                    "a data key (DEK) was unwrapped into the cache"
                );
                let key = Arc::new(key);
                let expires = unwrapped_at.saturating_add(hooks::nanos(s.policy.cache_ttl()));
                // Before the slot is filled, so a use that finds it reads
                // the clock its expiry needs (`State::now`).
                s.next_expiry.fetch_min(expires, Ordering::AcqRel);
                let _ = slot.dek.set(Cached {
                    key: Arc::clone(&key),
                    expires,
                    _held: Arc::new(hooks::Held::new()),
                });
                // After the slot is filled: a sweep that saw it empty
                // either lowers its bound to this or finds this lower.
                s.next_expiry.fetch_min(expires, Ordering::AcqRel);
                // The most recent entry, if the cache still holds it (under
                // its lock: an eviction or sweep after this clears it).
                let cache = s.cache.read().unwrap_or_else(PoisonError::into_inner);
                if cache.get(edek).is_some_and(|c| Arc::ptr_eq(c, slot)) {
                    s.set_recent(edek, slot);
                }
                drop(cache);
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
                    && cache.remove(edek).is_some()
                {
                    stats::cache_entries_changed(-1);
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
    fn new(
        kek_uri: String,
        dek_len: u8,
        clients: Option<KmsClients>,
        remote: Arc<dyn KmsAead>,
        policy: DekPolicy,
        backend: Backend,
    ) -> Self {
        State {
            kek_uri,
            dek_len,
            clients,
            remote,
            policy,
            backend,
            current: ArcSwapOption::empty(),
            refill: Mutex::new(None),
            cache: RwLock::new(Cache::default()),
            recent: std::array::from_fn(|_| ArcSwapOption::empty()),
            tick: AtomicU64::new(0),
            edek_len: AtomicUsize::new(0),
            epoch: hooks::precise(),
            next_expiry: AtomicU64::new(u64::MAX),
            sweeping: AtomicBool::new(false),
            counted: ArcSwap::from_pointee(ColdCounters::default()),
        }
    }

    /// The writer's DEK, as an owned handle (off the per-value path).
    fn current(&self) -> Option<Arc<WriterDek>> {
        self.current.load_full()
    }

    /// Makes `slot` the recent entry of `edek` unless it already is (no
    /// write when nothing changes). Called under the cache lock.
    fn set_recent(&self, edek: &[u8], slot: &Arc<Slot>) {
        let entry = &self.recent[recent_index(edek)];
        if entry
            .load()
            .as_deref()
            .is_some_and(|r| Arc::ptr_eq(&r.slot, slot))
        {
            return;
        }
        entry.store(Some(Arc::new(Recent {
            edek: edek.into(),
            slot: Arc::clone(slot),
        })));
    }

    /// Clears the recent reader entry that holds `gone` (dropped from the
    /// cache), if any. Called under the cache's write lock.
    fn forget_recent(&self, gone: &Arc<Slot>) {
        for entry in &self.recent {
            if entry
                .load()
                .as_deref()
                .is_some_and(|r| Arc::ptr_eq(&r.slot, gone))
            {
                entry.store(None);
            }
        }
    }

    /// Now, in nanoseconds since the key's state was made, for checking
    /// expiry: the coarse clock while no DEK of the key expires within
    /// [`hooks::COARSE_MARGIN`] of it (then every `now >= expires` is false
    /// on either clock), else the precise one.
    #[inline]
    fn now(&self) -> u64 {
        let coarse = hooks::coarse().saturating_sub(self.epoch);
        if coarse.saturating_add(hooks::COARSE_MARGIN) < self.next_expiry.load(Ordering::Acquire) {
            coarse
        } else {
            self.now_precise()
        }
    }

    /// Now, on the precise clock: where an age starts.
    fn now_precise(&self) -> u64 {
        hooks::precise().saturating_sub(self.epoch)
    }

    /// Sweeps if a DEK of this key may have expired by `now` and no other
    /// thread is sweeping (that one drops it).
    #[inline]
    fn sweep_if_due(&self, now: u64) {
        let due = self.next_expiry.load(Ordering::Acquire);
        if now >= due && !self.sweeping.swap(true, Ordering::Acquire) {
            let _done = Sweeping(&self.sweeping);
            self.sweep(now, due);
        }
    }

    /// Drops the writer's DEK and the cache entries expired at `now`, and
    /// sets the next expiry to the earliest left. `seen` is the bound that
    /// made the sweep due: if it was lowered meanwhile (a DEK made or
    /// unwrapped while this ran, perhaps unseen), it is only lowered.
    #[cold]
    fn sweep(&self, now: u64, seen: u64) {
        let mut next = u64::MAX;
        // The writer's DEK, taken out if it expired and no new one replaced
        // it meanwhile (zeroized once no value holds it).
        let current = self.current.load_full();
        match current.as_deref() {
            Some(d) if now >= d.expires => {
                drop(self.current.compare_and_swap(&current, None));
            }
            Some(d) => next = d.expires,
            None => {}
        }
        drop(current);
        let mut expired = Vec::new();
        {
            let mut cache = self.cache.write().unwrap_or_else(PoisonError::into_inner);
            cache.retain(|_, slot| match slot.dek.get() {
                Some(c) if now >= c.expires => {
                    expired.push(Arc::clone(slot));
                    false
                }
                Some(c) => {
                    next = next.min(c.expires);
                    true
                }
                // Being unwrapped: its bound comes with it.
                None => true,
            });
            for gone in &expired {
                self.forget_recent(gone);
            }
            stats::cache_entries_changed(-len_i64(expired.len()));
        }
        drop(expired);
        if self
            .next_expiry
            .compare_exchange(seen, next, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            self.next_expiry.fetch_min(next, Ordering::AcqRel);
        }
    }
}

/// Clears `State::sweeping` when the sweep is done (or unwinds).
struct Sweeping<'a>(&'a AtomicBool);

impl Drop for Sweeping<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
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
