//! What the layer did, counted exactly: values encrypted and decrypted,
//! tombstones passed through, failures by kind, envelope DEKs made and
//! unwrapped, the DEK cache, KMS calls. Read a [`Snapshot`] from a keyset
//! ([`Keyset::stats`](crate::Keyset::stats)) or for the whole process
//! ([`process`]); with the cargo feature `metrics`, `publish` hands the
//! process's counters to the `metrics` facade (Prometheus names below).
//!
//! Counting costs the value path one relaxed add on a cache line of the
//! thread's own (two for an envelope value read: the value and the DEK
//! cache hit) (each keyset keeps a few padded blocks of counters, one per
//! thread slot), and nothing else: a snapshot adds the blocks up. Counts
//! are exact: every event is counted once, in one block, and a snapshot
//! taken when no thread is encrypting or decrypting is the sum of all of
//! them. While threads work, a snapshot may miss their last few events,
//! never count one twice, and never goes down: a dropped keyset's counts
//! stay in the process's totals.
//!
//! ```
//! use tombstone_crypt::{Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Keyset};
//! use tombstone_crypt::{Deserializer as _, Serializer as _};
//!
//! let keyset = Keyset::generate();
//! let ser = EncryptingSerializer::new(Bytes, keyset.clone());
//! let de = DecryptingDeserializer::new(Bytes, keyset.clone());
//! let ctx = Context::new("events").with_key(b"k1");
//! let ct = ser.serialize(&ctx, Some(&b"v"[..]))?;
//! de.deserialize(&ctx, ct.as_deref())?;
//! ser.serialize(&ctx, None)?; // a tombstone
//! assert!(de.deserialize(&ctx, Some(&b"not a ciphertext"[..])).is_err());
//!
//! let s = keyset.stats();
//! assert_eq!((s.values_encrypted, s.values_decrypted), (1, 1));
//! assert_eq!(s.tombstones_serialized, 1);
//! assert_eq!(s.decrypt_failures.total(), 1);
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```
//!
//! | metric (`publish`) | [`Snapshot`] field |
//! |---|---|
//! | `tombstone_crypt_values_encrypted_total` | `values_encrypted` |
//! | `tombstone_crypt_values_decrypted_total` | `values_decrypted` |
//! | `tombstone_crypt_tombstones_passed_total{direction="serialize"}` | `tombstones_serialized` |
//! | `tombstone_crypt_tombstones_passed_total{direction="deserialize"}` | `tombstones_deserialized` |
//! | `tombstone_crypt_decrypt_failures_total{kind}` | `decrypt_failures` |
//! | `tombstone_crypt_encrypt_failures_total` | `encrypt_failures` |
//! | `tombstone_crypt_plaintext_passed_total` | `plaintext_passed` |
//! | `tombstone_crypt_record_keys_encrypted_total` | `record_keys_encrypted` |
//! | `tombstone_crypt_record_keys_decrypted_total` | `record_keys_decrypted` |
//! | `tombstone_crypt_fanout_tombstones_total` | `fanout_tombstones` |
//! | `tombstone_crypt_fields_encrypted_total` | `fields_encrypted` |
//! | `tombstone_crypt_fields_decrypted_total` | `fields_decrypted` |
//! | `tombstone_crypt_field_nulls_passed_total` | `field_nulls_passed` |
//! | `tombstone_crypt_deks_created_total` | `deks_created` |
//! | `tombstone_crypt_deks_unwrapped_total` | `deks_unwrapped` |
//! | `tombstone_crypt_edek_cache_hits_total` | `edek_cache_hits` |
//! | `tombstone_crypt_edek_cache_misses_total` | `edek_cache_misses` |
//! | `tombstone_crypt_edek_cache_evictions_total` | `edek_cache_evictions` |
//! | `tombstone_crypt_edek_cache_entries` (gauge) | `edek_cache_entries` |
//! | `tombstone_crypt_kms_requests_total{operation, outcome}` | `kms` |
//! | `tombstone_crypt_kms_request_duration_seconds{operation}` (histogram) | `kms` (count and sum) |

use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::error::Error;

/// Aligns its contents to 128 bytes (two 64-byte lines: what adjacent-line
/// prefetching pulls in together), so that no two blocks share a cache
/// line. Use it only for contents a multiple of 128 bytes long, with no
/// padding: a value built on the stack and moved to the heap carries its
/// padding bytes along, whatever the stack held there before (a key, say).
#[repr(align(128))]
pub(crate) struct Padded<T>(pub(crate) T);

/// Words per block of counters: the events, rounded up to whole 128-byte
/// lines, so a block has no padding (see [`Padded`]).
const BLOCK_WORDS: usize = EVENTS.div_ceil(16) * 16;

/// This thread's slot number: threads are numbered round-robin the first
/// time they ask. A constant-initialized thread local (no lazy-init check
/// or destructor registration on the value path).
#[inline]
pub(crate) fn thread_slot() -> usize {
    use std::cell::Cell;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static SLOT: Cell<usize> = const { Cell::new(usize::MAX) };
    }
    SLOT.with(|s| {
        let slot = s.get();
        if slot != usize::MAX {
            return slot;
        }
        let slot = NEXT.fetch_add(1, Ordering::Relaxed) & (usize::MAX >> 1);
        s.set(slot);
        slot
    })
}

/// Slots per sharded structure: every core twice over (threads map to
/// slots round-robin), at least 4, at most 64, a power of two (a slot is
/// `thread_slot() & (slots - 1)`, no division). Asked of the system once.
pub(crate) fn slots() -> usize {
    static SLOTS: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *SLOTS.get_or_init(|| {
        std::thread::available_parallelism()
            .map_or(4, |n| n.get().saturating_mul(2))
            .clamp(4, 64)
            .next_power_of_two()
    })
}

/// This thread's slot among `n`, a power of two.
#[inline]
pub(crate) fn slot_of(n: usize) -> usize {
    debug_assert!(n.is_power_of_two());
    thread_slot() & (n - 1)
}

/// The events counted per value, each one index of a block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Event {
    Encrypted,
    Decrypted,
    TombstoneSerialized,
    TombstoneDeserialized,
    PlaintextPassed,
    RecordKeyEncrypted,
    RecordKeyDecrypted,
    FanoutTombstone,
    FieldEncrypted,
    FieldDecrypted,
    FieldNullPassed,
    EdekHit,
    EncryptFailed,
    FailedTruncated,
    FailedUnsupportedVersion,
    FailedUnknownKeyId,
    FailedKeyDisabled,
    FailedAuthentication,
    FailedKms,
    FailedWrongKeyType,
    FailedOther,
}

const EVENTS: usize = Event::FailedOther as usize + 1;

impl Event {
    /// The failure event of a decryption error.
    pub(crate) fn failure(e: &Error) -> Event {
        match e {
            Error::Truncated { .. } => Event::FailedTruncated,
            Error::UnsupportedVersion => Event::FailedUnsupportedVersion,
            Error::UnknownKeyId(_) => Event::FailedUnknownKeyId,
            Error::KeyDisabled(_) => Event::FailedKeyDisabled,
            Error::Decryption => Event::FailedAuthentication,
            Error::Kms { .. } => Event::FailedKms,
            Error::WrongKeyType { .. } => Event::FailedWrongKeyType,
            _ => Event::FailedOther,
        }
    }
}

type Block = Padded<[AtomicU64; BLOCK_WORDS]>;

/// A keyset's per-value counters: one block per thread slot.
pub(crate) struct Counters {
    blocks: Box<[Block]>,
}

impl Counters {
    fn new() -> Self {
        Counters {
            blocks: (0..slots())
                .map(|_| Padded(std::array::from_fn(|_| AtomicU64::new(0))))
                .collect(),
        }
    }

    /// Counts `n` events `e` in this thread's block.
    #[inline]
    pub(crate) fn add(&self, e: Event, n: u64) {
        let block = &self.blocks[slot_of(self.blocks.len())];
        block.0[e as usize].fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one event `e`.
    #[inline]
    pub(crate) fn bump(&self, e: Event) {
        self.add(e, 1);
    }

    /// The sums of every block.
    fn totals(&self) -> [u64; EVENTS] {
        let mut sum = [0u64; EVENTS];
        for block in self.blocks.iter() {
            for (s, c) in sum.iter_mut().zip(block.0[..EVENTS].iter()) {
                *s = s.wrapping_add(c.load(Ordering::Relaxed));
            }
        }
        sum
    }
}

/// The process's keysets' counters (strong references: a keyset's block
/// leaves this list only when its counts are folded into `retired`, both
/// under the one lock, so the process's totals never go down).
struct Registry {
    live: Vec<(usize, Arc<Counters>)>,
    retired: [u64; EVENTS],
    next_id: usize,
}

static REGISTRY: Mutex<Registry> = Mutex::new(Registry {
    live: Vec::new(),
    retired: [0; EVENTS],
    next_id: 0,
});

/// A keyset's counters, registered with the process while it lives: what
/// a keyset holds (shared by its clones and by the keysets made from it
/// with another backend or DEK policy).
pub(crate) struct Stats {
    id: usize,
    counters: Arc<Counters>,
    /// Its envelope keys' DEKs, cache misses and evictions and KMS calls
    /// (they count here: a key reconfigured, moved to another backend or
    /// removed keeps what it counted).
    cold: Arc<ColdCounters>,
    /// A plaintext value was passed through (logged once at WARN).
    #[cfg(feature = "tracing")]
    plaintext_seen: std::sync::atomic::AtomicBool,
}

impl Stats {
    /// Fresh counters, counted in the process's totals.
    pub(crate) fn new() -> Arc<Self> {
        let counters = Arc::new(Counters::new());
        let mut r = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        let id = r.next_id;
        r.next_id = r.next_id.wrapping_add(1);
        r.live.push((id, Arc::clone(&counters)));
        Arc::new(Stats {
            id,
            counters,
            cold: Arc::new(ColdCounters::default()),
            #[cfg(feature = "tracing")]
            plaintext_seen: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Whether this is the keyset's first plaintext value passed through.
    #[cfg(feature = "tracing")]
    pub(crate) fn first_plaintext_passed(&self) -> bool {
        !self.plaintext_seen.load(Ordering::Relaxed)
            && !self.plaintext_seen.swap(true, Ordering::Relaxed)
    }

    /// The counters, to count on.
    #[inline]
    pub(crate) fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Where its envelope keys count their rare events.
    pub(crate) fn cold(&self) -> &Arc<ColdCounters> {
        &self.cold
    }

    /// The counters, shared (to count on with one pointer less to follow).
    pub(crate) fn shared_counters(&self) -> Arc<Counters> {
        Arc::clone(&self.counters)
    }
}

impl Drop for Stats {
    fn drop(&mut self) {
        let mut r = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(i) = r.live.iter().position(|(id, _)| *id == self.id) {
            let (_, counters) = r.live.swap_remove(i);
            let totals = counters.totals();
            for (s, t) in r.retired.iter_mut().zip(totals) {
                *s = s.wrapping_add(t);
            }
        }
    }
}

/// KMS calls of one operation: how many succeeded and failed, and how long
/// they took (successes and failures together).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KmsCalls {
    /// Calls that returned a result.
    pub ok: u64,
    /// Calls that failed (a call the client retried counts once, with its
    /// outcome).
    pub error: u64,
    /// Their total duration.
    pub duration: Duration,
}

impl KmsCalls {
    fn add(&mut self, other: &KmsCalls) {
        self.ok = self.ok.wrapping_add(other.ok);
        self.error = self.error.wrapping_add(other.error);
        self.duration = self.duration.saturating_add(other.duration);
    }
}

/// KMS calls by operation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KmsStats {
    /// `encrypt`: wrapping a new DEK (or a keyset).
    pub encrypt: KmsCalls,
    /// `decrypt`: unwrapping a DEK (or a keyset).
    pub decrypt: KmsCalls,
}

/// Values that did not decrypt, by the kind of error.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct DecryptFailures {
    /// Shorter than any ciphertext of the keyset (`kind="truncated"`).
    pub truncated: u64,
    /// A version byte this crate does not write (`unsupported_version`).
    pub unsupported_version: u64,
    /// A key id the keyset does not have (`unknown_key_id`).
    pub unknown_key_id: u64,
    /// A key id of a disabled key (`key_disabled`).
    pub key_disabled: u64,
    /// Authentication failed: tampered, or the wrong context or key
    /// (`authentication`).
    pub authentication: u64,
    /// The KMS could not unwrap the value's DEK (`kms`).
    pub kms: u64,
    /// A deterministic ciphertext under a randomized key or the reverse
    /// (`wrong_key_type`).
    pub wrong_key_type: u64,
    /// Anything else (`other`).
    pub other: u64,
}

impl DecryptFailures {
    /// All of them.
    pub fn total(&self) -> u64 {
        self.by_kind().iter().map(|(_, n)| n).sum()
    }

    /// `(kind label, count)` for each kind.
    pub fn by_kind(&self) -> [(&'static str, u64); 8] {
        [
            ("truncated", self.truncated),
            ("unsupported_version", self.unsupported_version),
            ("unknown_key_id", self.unknown_key_id),
            ("key_disabled", self.key_disabled),
            ("authentication", self.authentication),
            ("kms", self.kms),
            ("wrong_key_type", self.wrong_key_type),
            ("other", self.other),
        ]
    }
}

/// What a keyset (or the process) has done, counted exactly (see the
/// [module](self)). Every field only grows, except `edek_cache_entries`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// Present values encrypted (randomized encryption).
    pub values_encrypted: u64,
    /// Values decrypted and authenticated.
    pub values_decrypted: u64,
    /// Tombstones (nulls) passed through a serializer untouched.
    pub tombstones_serialized: u64,
    /// Tombstones passed through a deserializer untouched.
    pub tombstones_deserialized: u64,
    /// Values that did not decrypt, by kind.
    pub decrypt_failures: DecryptFailures,
    /// Values that could not be encrypted (a KMS that is down, say).
    pub encrypt_failures: u64,
    /// Plaintext values passed through by
    /// [`Unencrypted::PassThrough`](crate::Unencrypted::PassThrough).
    pub plaintext_passed: u64,
    /// Record keys encrypted deterministically (each form counts).
    pub record_keys_encrypted: u64,
    /// Record keys decrypted deterministically.
    pub record_keys_decrypted: u64,
    /// Tombstones for the older forms of an encrypted record key, in the
    /// writes built by [`KeyForms::writes`](crate::record_key::KeyForms::writes).
    pub fanout_tombstones: u64,
    /// Encrypted fields written (by a
    /// [`FieldEncrypting`](crate::field::FieldEncrypting) record; each is
    /// also a value encrypted, or, deterministic, a record key's form).
    pub fields_encrypted: u64,
    /// Encrypted fields read and authenticated.
    pub fields_decrypted: u64,
    /// Nulls that a field-encrypting record passed through untouched (every
    /// `None` in the record, encrypted type or not).
    pub field_nulls_passed: u64,
    /// Envelope DEKs made (each wrapped by one KMS call).
    pub deks_created: u64,
    /// Envelope DEKs unwrapped by the KMS.
    pub deks_unwrapped: u64,
    /// Envelope values opened with a DEK found in the reader cache.
    pub edek_cache_hits: u64,
    /// Lookups of a DEK not in the reader cache: a KMS call, or a wait for
    /// another thread's (a lookup ahead of a value, for the blocking work
    /// an async consumer runs first, counts here; the value then hits).
    pub edek_cache_misses: u64,
    /// Cache entries evicted for room (not by expiry).
    pub edek_cache_evictions: u64,
    /// Entries in the reader caches now: unwrapped DEKs, and DEKs being
    /// unwrapped.
    pub edek_cache_entries: u64,
    /// KMS calls.
    pub kms: KmsStats,
}

impl Snapshot {
    pub(crate) fn from_events(e: &[u64; EVENTS]) -> Self {
        let at = |ev: Event| e[ev as usize];
        Snapshot {
            values_encrypted: at(Event::Encrypted),
            values_decrypted: at(Event::Decrypted),
            tombstones_serialized: at(Event::TombstoneSerialized),
            tombstones_deserialized: at(Event::TombstoneDeserialized),
            decrypt_failures: DecryptFailures {
                truncated: at(Event::FailedTruncated),
                unsupported_version: at(Event::FailedUnsupportedVersion),
                unknown_key_id: at(Event::FailedUnknownKeyId),
                key_disabled: at(Event::FailedKeyDisabled),
                authentication: at(Event::FailedAuthentication),
                kms: at(Event::FailedKms),
                wrong_key_type: at(Event::FailedWrongKeyType),
                other: at(Event::FailedOther),
            },
            encrypt_failures: at(Event::EncryptFailed),
            plaintext_passed: at(Event::PlaintextPassed),
            record_keys_encrypted: at(Event::RecordKeyEncrypted),
            record_keys_decrypted: at(Event::RecordKeyDecrypted),
            fanout_tombstones: at(Event::FanoutTombstone),
            fields_encrypted: at(Event::FieldEncrypted),
            fields_decrypted: at(Event::FieldDecrypted),
            field_nulls_passed: at(Event::FieldNullPassed),
            edek_cache_hits: at(Event::EdekHit),
            ..Snapshot::default()
        }
    }

    /// Adds envelope keys' rare events.
    fn add_cold(&mut self, k: &KeySnapshot) {
        self.deks_created = self.deks_created.wrapping_add(k.deks_created);
        self.deks_unwrapped = self.deks_unwrapped.wrapping_add(k.deks_unwrapped);
        self.edek_cache_misses = self.edek_cache_misses.wrapping_add(k.misses);
        self.edek_cache_evictions = self.edek_cache_evictions.wrapping_add(k.evictions);
        self.edek_cache_entries = self.edek_cache_entries.wrapping_add(k.entries);
        self.kms.encrypt.add(&k.kms.encrypt);
        self.kms.decrypt.add(&k.kms.decrypt);
    }
}

/// A keyset's snapshot: its counters, with `entries` DEKs in its envelope
/// keys' caches now.
pub(crate) fn keyset_snapshot(stats: &Stats, entries: usize) -> Snapshot {
    let mut s = Snapshot::from_events(&stats.counters.totals());
    s.add_cold(&stats.cold.read(entries));
    s
}

/// Rare events, read.
#[derive(Clone, Copy, Debug, Default)]
struct KeySnapshot {
    pub(crate) deks_created: u64,
    pub(crate) deks_unwrapped: u64,
    pub(crate) misses: u64,
    pub(crate) evictions: u64,
    pub(crate) entries: u64,
    pub(crate) kms: KmsStats,
}

/// A KMS operation, for counting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum KmsOp {
    Encrypt,
    Decrypt,
}

impl KmsOp {
    /// Its label.
    #[cfg(any(feature = "metrics", feature = "tracing"))]
    fn label(self) -> &'static str {
        match self {
            KmsOp::Encrypt => "encrypt",
            KmsOp::Decrypt => "decrypt",
        }
    }
}

/// Counters of rare events (a DEK made, a KMS call): plain atomics, counted
/// for the key and for the process at once.
#[derive(Default)]
pub(crate) struct ColdCounters {
    deks_created: AtomicU64,
    deks_unwrapped: AtomicU64,
    misses: AtomicU64,
    evictions: AtomicU64,
    /// `[op][ok, error, nanos]`.
    kms: [[AtomicU64; 3]; 2],
}

/// The process's rare events (every key's, dropped ones included), and the
/// DEKs its reader caches hold.
static PROCESS_COLD: ColdCounters = ColdCounters {
    deks_created: AtomicU64::new(0),
    deks_unwrapped: AtomicU64::new(0),
    misses: AtomicU64::new(0),
    evictions: AtomicU64::new(0),
    kms: [
        [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
        [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)],
    ],
};
static PROCESS_ENTRIES: AtomicI64 = AtomicI64::new(0);

/// A rare event of an envelope key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Rare {
    DekCreated,
    DekUnwrapped,
    Miss,
    Eviction,
}

impl ColdCounters {
    fn cell(&self, e: Rare) -> &AtomicU64 {
        match e {
            Rare::DekCreated => &self.deks_created,
            Rare::DekUnwrapped => &self.deks_unwrapped,
            Rare::Miss => &self.misses,
            Rare::Eviction => &self.evictions,
        }
    }

    /// Counts `e` for this key and the process.
    pub(crate) fn count(&self, e: Rare) {
        self.cell(e).fetch_add(1, Ordering::Relaxed);
        PROCESS_COLD.cell(e).fetch_add(1, Ordering::Relaxed);
    }

    /// Makes the KMS call `call` of `op` to the key `key_uri` (printable,
    /// nothing secret): timed, counted for this key and the process, with
    /// the feature `metrics` its duration recorded in the histogram, and
    /// with the feature `tracing` in a span `kms_call` (operation, key URI,
    /// outcome, duration).
    pub(crate) fn kms_call<T>(
        &self,
        op: KmsOp,
        key_uri: &str,
        call: impl FnOnce() -> Result<T, Error>,
    ) -> Result<T, Error> {
        kms_call_counted(Some(self), op, key_uri, call)
    }

    fn record_kms(&self, op: KmsOp, ok: bool, took: Duration) {
        let cells = &self.kms[op as usize];
        cells[usize::from(!ok)].fetch_add(1, Ordering::Relaxed);
        let nanos = u64::try_from(took.as_nanos()).unwrap_or(u64::MAX);
        cells[2].fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counters, with `entries` DEKs held now.
    fn read(&self, entries: usize) -> KeySnapshot {
        let calls = |op: KmsOp| {
            let c = &self.kms[op as usize];
            KmsCalls {
                ok: c[0].load(Ordering::Relaxed),
                error: c[1].load(Ordering::Relaxed),
                duration: Duration::from_nanos(c[2].load(Ordering::Relaxed)),
            }
        };
        KeySnapshot {
            deks_created: self.deks_created.load(Ordering::Relaxed),
            deks_unwrapped: self.deks_unwrapped.load(Ordering::Relaxed),
            misses: self.misses.load(Ordering::Relaxed),
            evictions: self.evictions.load(Ordering::Relaxed),
            entries: u64::try_from(entries).unwrap_or(u64::MAX),
            kms: KmsStats {
                encrypt: calls(KmsOp::Encrypt),
                decrypt: calls(KmsOp::Decrypt),
            },
        }
    }
}

/// [`ColdCounters::kms_call`] counted for the process only (a keyset
/// wrapped or unwrapped by a KMS key).
pub(crate) fn process_kms_call<T>(
    op: KmsOp,
    key_uri: &str,
    call: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    kms_call_counted(None, op, key_uri, call)
}

fn kms_call_counted<T>(
    key: Option<&ColdCounters>,
    op: KmsOp,
    key_uri: &str,
    call: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    #[cfg(feature = "tracing")]
    let span = tracing::info_span!(
        "kms_call",
        operation = op.label(),
        key_uri,
        outcome = tracing::field::Empty,
        duration_ms = tracing::field::Empty,
    )
    .entered();
    #[cfg(not(feature = "tracing"))]
    let _ = key_uri;
    let started = std::time::Instant::now();
    let result = call();
    let took = started.elapsed();
    let ok = result.is_ok();
    for c in key.into_iter().chain([&PROCESS_COLD]) {
        c.record_kms(op, ok, took);
    }
    #[cfg(feature = "metrics")]
    metrics::histogram!(
        "tombstone_crypt_kms_request_duration_seconds",
        "operation" => op.label()
    )
    .record(took.as_secs_f64());
    #[cfg(feature = "tracing")]
    {
        span.record("outcome", if ok { "ok" } else { "error" });
        span.record("duration_ms", took.as_secs_f64() * 1e3);
        if let Err(e) = &result {
            tracing::warn!(error = %e, "the KMS call failed");
        }
    }
    result
}

/// Counts a change of `delta` in the DEKs the process's reader caches hold.
pub(crate) fn cache_entries_changed(delta: i64) {
    PROCESS_ENTRIES.fetch_add(delta, Ordering::Relaxed);
}

/// What the whole process has done: every keyset's counters, those of
/// keysets dropped since included.
pub fn process() -> Snapshot {
    let totals = {
        let r = REGISTRY.lock().unwrap_or_else(PoisonError::into_inner);
        let mut sum = r.retired;
        for (_, c) in &r.live {
            for (s, t) in sum.iter_mut().zip(c.totals()) {
                *s = s.wrapping_add(t);
            }
        }
        sum
    };
    let mut s = Snapshot::from_events(&totals);
    let entries = usize::try_from(PROCESS_ENTRIES.load(Ordering::Relaxed).max(0)).unwrap_or(0);
    s.add_cold(&PROCESS_COLD.read(entries));
    s
}

/// Hands the process's counters ([`process`]) to the `metrics` facade,
/// under the names in the [module](self)'s table: counters set to their
/// absolute values, the cache gauge set. Call it before each scrape (or on
/// a timer); the KMS duration histogram is recorded as calls happen.
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn publish() {
    publish_snapshot(&process());
}

/// Hands `s` to the `metrics` facade (see [`publish`]) under the same
/// names: for a process whose recorder holds one keyset's counters (two
/// keysets published this way would write the same series; publish
/// [`process`]'s totals instead, or read [`Snapshot`]s directly).
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub fn publish_snapshot(s: &Snapshot) {
    use metrics::{counter, gauge};
    counter!("tombstone_crypt_values_encrypted_total").absolute(s.values_encrypted);
    counter!("tombstone_crypt_values_decrypted_total").absolute(s.values_decrypted);
    counter!("tombstone_crypt_tombstones_passed_total", "direction" => "serialize")
        .absolute(s.tombstones_serialized);
    counter!("tombstone_crypt_tombstones_passed_total", "direction" => "deserialize")
        .absolute(s.tombstones_deserialized);
    for (kind, n) in s.decrypt_failures.by_kind() {
        counter!("tombstone_crypt_decrypt_failures_total", "kind" => kind).absolute(n);
    }
    counter!("tombstone_crypt_encrypt_failures_total").absolute(s.encrypt_failures);
    counter!("tombstone_crypt_plaintext_passed_total").absolute(s.plaintext_passed);
    counter!("tombstone_crypt_record_keys_encrypted_total").absolute(s.record_keys_encrypted);
    counter!("tombstone_crypt_record_keys_decrypted_total").absolute(s.record_keys_decrypted);
    counter!("tombstone_crypt_fanout_tombstones_total").absolute(s.fanout_tombstones);
    counter!("tombstone_crypt_fields_encrypted_total").absolute(s.fields_encrypted);
    counter!("tombstone_crypt_fields_decrypted_total").absolute(s.fields_decrypted);
    counter!("tombstone_crypt_field_nulls_passed_total").absolute(s.field_nulls_passed);
    counter!("tombstone_crypt_deks_created_total").absolute(s.deks_created);
    counter!("tombstone_crypt_deks_unwrapped_total").absolute(s.deks_unwrapped);
    counter!("tombstone_crypt_edek_cache_hits_total").absolute(s.edek_cache_hits);
    counter!("tombstone_crypt_edek_cache_misses_total").absolute(s.edek_cache_misses);
    counter!("tombstone_crypt_edek_cache_evictions_total").absolute(s.edek_cache_evictions);
    #[allow(clippy::cast_precision_loss)]
    gauge!("tombstone_crypt_edek_cache_entries").set(s.edek_cache_entries as f64);
    for (op, calls) in [("encrypt", s.kms.encrypt), ("decrypt", s.kms.decrypt)] {
        counter!("tombstone_crypt_kms_requests_total", "operation" => op, "outcome" => "ok")
            .absolute(calls.ok);
        counter!("tombstone_crypt_kms_requests_total", "operation" => op, "outcome" => "error")
            .absolute(calls.error);
    }
}
