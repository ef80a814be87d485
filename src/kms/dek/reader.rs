//! The readers' cache: EDEK to DEK, bounded, each entry live for a TTL
//! from its unwrap, the recent ones a lock-free lookup.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Instant;

use super::*;
use crate::cipher::AesGcmKey;
use crate::error::Error;
use crate::kms::printable_uri;
use crate::stats;
use crate::stats::{Counters, Event, KmsOp, Rare};

impl EnvelopeKey {
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

    pub(super) fn insert_cached(&self, edek: &[u8], cached: Cached) {
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
    pub(super) fn make_room(&self, cache: &mut Cache, incoming: &[u8]) {
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
    pub(super) fn lookup(
        &self,
        edek: &[u8],
        hits: Option<&Counters>,
    ) -> Result<Arc<AesGcmKey>, Error> {
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
    pub(super) fn new_slot(&self, edek: &[u8], now: u64) -> Arc<Slot> {
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
    pub(super) fn fetch(&self, edek: &[u8], slot: &Arc<Slot>) -> Result<Arc<AesGcmKey>, Error> {
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

/// EDEK -> DEK.
pub(super) type Cache = HashMap<Box<[u8]>, Arc<Slot>, TailHash>;

/// Hashes an EDEK by its length and its last 16 bytes only, with the
/// process's random SipHash key: EDEKs end in a KMS ciphertext's random
/// tag or IV, so the tail tells them apart, and a lookup does not hash a
/// few hundred bytes per value. Equality still compares whole EDEKs, and
/// the keyed hash leaves an attacker no way to aim collisions.
#[derive(Clone, Default)]
pub(super) struct TailHash(std::collections::hash_map::RandomState);

impl std::hash::BuildHasher for TailHash {
    type Hasher = Tail;
    fn build_hasher(&self) -> Tail {
        Tail(self.0.build_hasher())
    }
}

pub(super) struct Tail(std::collections::hash_map::DefaultHasher);

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
pub(super) const RECENT: usize = 8;

/// Which recent entry an EDEK goes in: its last byte's.
#[inline]
pub(super) fn recent_index(edek: &[u8]) -> usize {
    edek.last().map_or(0, |&b| usize::from(b) % RECENT)
}

/// A recent reader cache entry, with its EDEK.
pub(super) struct Recent {
    pub(super) edek: Box<[u8]>,
    pub(super) slot: Arc<Slot>,
}

/// A reader cache entry: the DEK once unwrapped, and a lock that makes one
/// thread (not one per value) call the KMS for it.
pub(super) struct Slot {
    pub(super) dek: OnceLock<Cached>,
    /// Keeps the last failure, as `State::refill` does.
    pub(super) fetch: Mutex<Option<(Instant, Error)>>,
    pub(super) last_used: AtomicU64,
}

/// An unwrapped DEK in the reader cache.
pub(super) struct Cached {
    pub(super) key: Arc<AesGcmKey>,
    /// When it decrypts no more ([`State::now`]'s time).
    pub(super) expires: u64,
    pub(super) _held: Arc<hooks::Held>,
}

impl Slot {
    pub(super) fn new(last_used: u64) -> Self {
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
    pub(super) fn stamp(&self, tick: u64) {
        if self.last_used.load(Ordering::Relaxed) != tick {
            self.last_used.store(tick, Ordering::Relaxed);
        }
    }

    /// The DEK if it is unwrapped and not expired at `now`.
    #[inline]
    pub(super) fn live(&self, now: u64) -> Option<&Arc<AesGcmKey>> {
        self.dek.get().filter(|c| now < c.expires).map(|c| &c.key)
    }

    /// Whether the DEK is unwrapped and expired at `now`.
    pub(super) fn expired(&self, now: u64) -> bool {
        self.dek.get().is_some_and(|c| now >= c.expires)
    }
}
