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
//!
//! One file per job: this one holds the envelope key, its shared state and
//! the sweep of what expired; `writer` (the writer's DEK) and `reader` (the
//! readers' cache).

use core::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Instant;

use arc_swap::{ArcSwap, ArcSwapOption};

use crate::cipher::Backend;
use crate::error::Error;
use crate::kms::{KmsAead, KmsClients};
use crate::stats::{self, ColdCounters};

pub(crate) mod hooks;
mod policy;
mod reader;
mod writer;

pub use policy::{DekPolicy, MAX_DEK_VALUES, MAX_EDEK_LEN};
use reader::*;
pub(crate) use writer::WriterDek;

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
