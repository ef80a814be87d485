//! Crypto-shredding: a key per data subject, and a delete that reaches
//! every copy.
//!
//! A tombstone deletes a key from one compacted topic once its cleaner
//! runs; it does not reach the copies (segments not yet compacted, a
//! backup, a mirror, a consumer's store, a data lake). [`SubjectKeys`]
//! encrypts each data subject's values under a DEK of its own, kept wrapped
//! by a key-encryption keyset in a [`KeyStore`]; [`SubjectKeys::shred`]
//! removes that DEK, and every copy of the subject's values, wherever it
//! is, then reads as a delete.
//!
//! - The subject is the record key's plaintext by default
//!   ([`SubjectEncrypting`]), or what a closure takes from the value
//!   ([`SubjectEncrypting::with_subject`]).
//! - A subject is never written in cleartext: the key store and the values
//!   name it by a keyed hash, the **subject tag** (16 bytes, AES-SIV's
//!   synthetic IV of the subject under a naming key, itself kept in the
//!   key store wrapped by the KEK).
//! - A value is `0x53 | subject tag (16) | DEK id (8) | nonce (12) |
//!   ciphertext | GCM tag (16)`, AES-256-GCM, bound to the topic, the
//!   record key and its own header (`docs/FORMAT.md`).
//! - A value whose DEK was shredded reads as a delete: `deserialize`
//!   gives `None`, so a store restored from an old segment or a backup
//!   drops it and a consumer sees a delete; [`SubjectKeys::strict`] gives
//!   [`Error::Shredded`] instead. **Only a shred deletes**: the key store
//!   keeps a record of each shred (the DEK ids it covers), and a value
//!   reads as a delete only when such a record covers its DEK. A DEK the
//!   store neither holds nor records as shredded (the wrong key store, a
//!   lost one, a value whose header was changed or forged) is
//!   [`Error::UnknownSubjectKey`], never a delete.
//! - **Opening is not creating**: [`SubjectKeys::open`] needs a key store
//!   that holds a naming key the KEK opens (a mistyped path or another
//!   KEK is an error at once); [`SubjectKeys::create`] makes the naming key
//!   of a new store. [`RedbKeyStore::open`] needs the file,
//!   [`RedbKeyStore::create`] makes it (0600, exclusively).
//! - Caches are fenced: a DEK is served from this process's cache for at
//!   most [`SubjectKeys::with_fence`] (default 5 s) after it was last read
//!   from the key store; then the store is asked again, and an error there
//!   refuses the value (never a stale DEK).
//!
//! ```
//! use std::sync::Arc;
//! use tombstone_crypt::shred::{MemoryKeyStore, Shred, SubjectEncrypting, SubjectKeys};
//! use tombstone_crypt::{Context, Deserializer as _, Keyset, Serializer as _, Utf8};
//!
//! let keys = Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new()))?);
//! let values = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
//! let ctx = Context::new("customers").with_key(b"customer-17");
//! let bytes = values.serialize(&ctx, Some("Ada, 1 Main St"))?.unwrap();
//! assert_eq!(values.deserialize(&ctx, Some(&bytes))?.as_deref(), Some("Ada, 1 Main St"));
//!
//! assert_eq!(keys.shred(b"customer-17")?, Shred::Removed(1));
//! // Every copy of the value now reads as a delete.
//! assert_eq!(values.deserialize(&ctx, Some(&bytes))?, None);
//!
//! // Opening is not creating: a store with no naming key is an error.
//! assert!(SubjectKeys::open(Keyset::generate(), Arc::new(MemoryKeyStore::new())).is_err());
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

mod check;
mod store;

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::marker::PhantomData;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use zeroize::Zeroizing;

pub use check::KeyStoreCheck;
#[cfg(feature = "kafka")]
pub(crate) use store::sealing_key;
#[cfg(feature = "redb")]
pub use store::RedbKeyStore;
pub use store::{covered_ids, DekLookup, KeyStore, MemoryKeyStore, Seal, Shred, ShredRecord};

use crate::cipher::{AesGcmKey, AesSivKey, NONCE_LEN, SIV_KEY_LEN, TAG_LEN};
use crate::context::{AadBuf, AadPolicy, Context};
use crate::error::Error;
use crate::keyset::Keyset;
use crate::kms::dek::hooks;
use crate::serde::{Deserializer, Serializer};

/// The first byte of a subject-key value.
pub const FORMAT: u8 = 0x53;
/// A subject tag's length.
pub const TAG: usize = 16;
/// A DEK id's length.
const DEK_ID: usize = 8;
/// The header: format, subject tag, DEK id, nonce.
const HEADER: usize = 1 + TAG + DEK_ID + NONCE_LEN;
/// Bytes a value adds to its plaintext.
pub const OVERHEAD: usize = HEADER + TAG_LEN;
/// Whether `value` has the shape of a subject-key value: [`FORMAT`] first,
/// and room for the header and the tag. A hint only (a plaintext may start
/// so): a value's format comes from its topic's policy, never from this;
/// what a reader under a keyset tells apart from a plaintext value.
///
/// ```
/// use tombstone_crypt::shred::{has_subject_shape, FORMAT, OVERHEAD};
///
/// assert!(has_subject_shape(&[FORMAT; OVERHEAD]));
/// assert!(!has_subject_shape(&[FORMAT; OVERHEAD - 1]));
/// assert!(!has_subject_shape(b"{\"balance\": 100}"));
/// ```
pub fn has_subject_shape(value: &[u8]) -> bool {
    value.first() == Some(&FORMAT) && value.len() >= OVERHEAD
}

/// The key store's id of the naming key (no subject tag is this, but with
/// probability 2^-128).
const NAMING_ID: [u8; TAG] = [0xff; TAG];
/// The naming key's associated data under the KEK.
const NAMING_AD: &[u8] = b"tombstone-crypt subject naming key";
/// The naming key record `id`'s associated data under the KEK: a naming
/// key's ciphertext opens only under its own record id.
fn naming_ad(id: &[u8; DEK_ID]) -> Vec<u8> {
    let mut ad = NAMING_AD.to_vec();
    ad.extend_from_slice(id);
    ad
}

/// A DEK's length: AES-256.
const DEK_LEN: usize = 32;

/// The subject tag of a subject: a keyed hash, the only name a subject has
/// on the wire and in the key store.
pub type SubjectTag = [u8; TAG];

/// An opened DEK: its id and key.
struct Dek {
    id: [u8; DEK_ID],
    key: AesGcmKey,
}

/// How many shreds, DEKs, cache hits and shredded reads a
/// [`SubjectKeys`] has seen.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubjectStats {
    /// Subjects shredded here.
    pub shreds: u64,
    /// Values read whose subject's DEK is gone (a delete, or
    /// [`Error::Shredded`] when strict).
    pub shredded_reads: u64,
    /// DEKs made here (a subject's first write, or its first after a
    /// shred).
    pub deks_created: u64,
    /// DEKs served from the cache within the fence.
    pub cache_hits: u64,
    /// Key-store reads of a DEK.
    pub store_reads: u64,
}

#[derive(Default)]
struct Counters {
    shreds: AtomicU64,
    shredded_reads: AtomicU64,
    deks_created: AtomicU64,
    store_reads: AtomicU64,
}

/// A cached DEK: when it was last read from the key store (the fence's
/// clock, ns), and whether it was used since the clock hand last passed.
struct Cached {
    dek: Arc<Dek>,
    read_at: u64,
    used: bool,
}

/// The hasher of the maps keyed by subject tags: a tag's first 8 bytes
/// (XORed with what else is written, a slice's length prefix), no mixing.
///
/// A tag that is a key of such a map is an output of the subject naming
/// key's keyed PRF (AES-SIV): its bytes are already uniform and
/// independent of anything an attacker chooses, so a stronger hash buys
/// nothing. A DEK is cached only once its key-store record has opened
/// under the KEK, which authenticates the tag; a tag read from a value
/// that no such record names is only looked up (one probe sequence),
/// never inserted. Never use it for keys that are not such tags (the
/// subjects themselves are hashed with SipHash).
#[derive(Default, Clone, Copy)]
struct TagHasher(u64);

impl Hasher for TagHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }

    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut first = [0u8; 8];
        let n = bytes.len().min(8);
        first[..n].copy_from_slice(&bytes[..n]);
        self.0 ^= u64::from_ne_bytes(first);
    }
}

/// A map keyed by subject tags (see [`TagHasher`]).
type TagMap<V> = HashMap<SubjectTag, V, BuildHasherDefault<TagHasher>>;

/// The DEK cache: bounded, evicting by the CLOCK rule (second chance), so a
/// hot set stays while a stream of new subjects passes through, at a cost
/// that does not grow with the cache.
#[derive(Default)]
struct DekCache {
    entries: TagMap<Cached>,
    /// The clock's ring: each cached tag once, oldest insertion first.
    ring: std::collections::VecDeque<SubjectTag>,
    /// DEKs served from here ([`SubjectStats::cache_hits`]): counted under
    /// the lock a hit takes anyway, not with an atomic of its own.
    hits: u64,
    /// Bumped whenever a cached DEK is removed (a shred), evicted or
    /// replaced (read again from the store): a [`WriteHint`] of an older
    /// generation is never followed.
    generation: u64,
    /// Bumped whenever a cached DEK is removed (a shred): a DEK read from
    /// the key store is cached only if no removal happened since before
    /// the read (see [`SubjectKeys::keep`]).
    removals: u64,
}

impl DekCache {
    fn insert(&mut self, tag: SubjectTag, dek: Arc<Dek>, capacity: usize) {
        let entry = Cached {
            dek,
            read_at: hooks::precise(),
            used: false,
        };
        if let Some(e) = self.entries.get_mut(&tag) {
            *e = entry;
            self.generation = self.generation.wrapping_add(1);
            return;
        }
        while self.entries.len() >= capacity {
            let Some(old) = self.ring.pop_front() else {
                break;
            };
            match self.entries.get_mut(&old) {
                Some(e) if e.used => {
                    e.used = false;
                    self.ring.push_back(old);
                }
                Some(_) => {
                    self.entries.remove(&old);
                    self.generation = self.generation.wrapping_add(1);
                }
                None => {}
            }
        }
        self.entries.insert(tag, entry);
        self.ring.push_back(tag);
    }

    /// Forgets `tag` (a shred: rare, so the ring's scan is fine).
    fn remove(&mut self, tag: &SubjectTag) {
        self.generation = self.generation.wrapping_add(1);
        self.removals = self.removals.wrapping_add(1);
        if self.entries.remove(tag).is_some() {
            self.ring.retain(|t| t != tag);
        }
    }

    /// The cached DEK of `tag` if it was read from the key store at most
    /// `fence` ns ago, marked used and counted as a hit.
    #[inline]
    fn fresh(&mut self, tag: &SubjectTag, fence: u64) -> Option<Arc<Dek>> {
        self.fresh_with_hint(tag, fence).map(|(dek, _)| dek)
    }

    /// [`fresh`](DekCache::fresh), with a [`WriteHint`] to it.
    #[inline]
    fn fresh_with_hint(&mut self, tag: &SubjectTag, fence: u64) -> Option<(Arc<Dek>, WriteHint)> {
        let entry = self.entries.get_mut(tag)?;
        if within_fence(entry.read_at, fence) {
            entry.used = true;
            self.hits += 1;
            let hint = WriteHint {
                dek: Arc::downgrade(&entry.dek),
                read_at: entry.read_at,
                generation: self.generation,
            };
            Some((Arc::clone(&entry.dek), hint))
        } else {
            None
        }
    }

    /// The DEK a subject's [`WriteHint`] points to, if the cache has
    /// dropped or replaced no DEK since the hint was taken, the DEK is
    /// within the fence and still alive; counted as a hit. The hint is
    /// cleared when it is stale.
    #[inline]
    fn hinted(&mut self, hint: &mut Option<WriteHint>, fence: u64) -> Option<Arc<Dek>> {
        let h = hint.as_ref()?;
        let dek = (h.generation == self.generation && within_fence(h.read_at, fence))
            .then(|| h.dek.upgrade())
            .flatten();
        match dek {
            Some(dek) => {
                self.hits += 1;
                Some(dek)
            }
            None => {
                *hint = None;
                None
            }
        }
    }
}

/// Whether a DEK read from the store at `read_at` is within `fence` ns of
/// it: the kernel's coarse clock (a few ns a read) when far from the
/// fence, the precise one near it, so the bound is exact.
#[inline]
fn within_fence(read_at: u64, fence: u64) -> bool {
    let coarse_age = hooks::coarse().saturating_sub(read_at);
    coarse_age.saturating_add(hooks::COARSE_MARGIN) < fence
        || hooks::precise().saturating_sub(read_at) <= fence
}

/// Where a subject's last value found its DEK in the DEK cache, kept
/// beside the subject's tag so that a write finds its DEK with one lookup
/// (by subject) instead of two (subject, then tag). It holds no key: a
/// weak reference, dead once the cache drops the DEK and no value is
/// being written with it; and the cache's generation changes whenever it
/// drops or replaces any DEK (a shred, an eviction, a newer read), so a
/// hint taken before is never followed, even while its DEK is alive.
struct WriteHint {
    dek: std::sync::Weak<Dek>,
    read_at: u64,
    generation: u64,
}

/// A subject's entry in the tag cache.
struct Named {
    tag: SubjectTag,
    hint: Option<WriteHint>,
}

/// A subject as a key of the tag cache, in a heap block of its own: its
/// bytes are zeroized where they are when it leaves the cache (a shred,
/// the cache cleared, the keys dropped). Never in the cache's table
/// itself: the table moves its entries when it grows and frees the old
/// table as it is, and a removal moves the entry out of it, so bytes kept
/// in it would outlive their subject in freed or spare memory.
#[derive(PartialEq, Eq, Hash)]
struct Subject(Box<[u8]>);

impl Borrow<[u8]> for Subject {
    fn borrow(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Subject {
    fn drop(&mut self) {
        zeroize::Zeroize::zeroize(&mut *self.0);
    }
}

/// What a [`SubjectKeys`] keeps in memory, under one lock (a value takes
/// it once): the subjects' tags computed here and the DEK cache.
#[derive(Default)]
struct Caches {
    /// Subjects' tags computed here (the subjects are this process's own
    /// data: a tag never changes). Keyed by the subject: SipHash.
    tags: HashMap<Subject, Named>,
    deks: DekCache,
}

/// What a value's DEK is, to read it.
enum ToRead {
    Dek(Arc<Dek>),
    /// A shred covers it.
    Shredded,
}

/// Record associated data up to this long, with a value's header after
/// it, is built on the stack; longer takes one allocation.
const INLINE_AD: usize = 128;

/// Room for a value's associated data: the record's (its topic and key),
/// then the value's header; on the stack unless the record's is longer
/// than [`INLINE_AD`].
struct ValueAd {
    inline: [u8; INLINE_AD + HEADER],
    heap: Vec<u8>,
}

impl ValueAd {
    #[inline]
    fn new() -> Self {
        ValueAd {
            inline: [0; INLINE_AD + HEADER],
            heap: Vec::new(),
        }
    }

    /// `record`, then `HEADER` bytes for the header to be written in.
    #[inline]
    fn with_record(&mut self, record: &[u8]) -> &mut [u8] {
        let len = record.len() + HEADER;
        let out = match self.inline.get_mut(..len) {
            Some(out) => out,
            None => {
                self.heap.resize(len, 0);
                &mut self.heap[..]
            }
        };
        out[..record.len()].copy_from_slice(record);
        out
    }
}

/// The default bound of a cached DEK's age.
const DEFAULT_FENCE: Duration = Duration::from_secs(5);
/// The default number of DEKs kept.
const DEFAULT_CACHE: usize = 65_536;

/// One DEK per data subject, wrapped by a keyset (the KEK) in a
/// [`KeyStore`]: see the [module](self).
pub struct SubjectKeys {
    kek: Keyset,
    store: Arc<dyn KeyStore>,
    /// The naming key and its record's id (random, as a DEK's: two
    /// instances that make one at once write two records, and the store
    /// keeps the first).
    naming: OnceLock<(AesSivKey, [u8; DEK_ID])>,
    /// A test's control: `create` takes the naming key it made without
    /// reading the store's back, and nothing checks it later.
    unchecked_naming: bool,
    /// A test's control: the rule before, where a DEK the store does not
    /// hold reads as shredded, evidence or not.
    unknown_as_shredded: bool,
    caches: Mutex<Caches>,
    cache_capacity: usize,
    fence: Duration,
    /// `fence` in ns.
    fence_ns: u64,
    strict: bool,
    counters: Counters,
}

impl std::fmt::Debug for SubjectKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectKeys")
            .field("fence", &self.fence)
            .field("strict", &self.strict)
            .finish_non_exhaustive()
    }
}

impl SubjectKeys {
    /// Subject keys wrapped by `kek` (its primary key wraps; any enabled
    /// key unwraps, so the KEK rotates as a keyset does) in `store`, which
    /// must hold a naming key that `kek` opens (see
    /// [`create`](SubjectKeys::create) for a new store).
    ///
    /// # Errors
    /// [`Error::Store`] when the store holds no naming key (not a store of
    /// subject keys: a mistyped path or topic, or a store never created)
    /// or `kek` does not open it (another KEK's store, or a KEK key
    /// destroyed before a rewrap reached the naming key); what the store
    /// reports when it is read.
    pub fn open(kek: Keyset, store: Arc<dyn KeyStore>) -> Result<Self, Error> {
        let keys = Self::unopened(kek, store);
        keys.naming()?;
        Ok(keys)
    }

    /// As [`open`](SubjectKeys::open), making the store's naming key first
    /// if it has none: the explicit way to start a new key store. Several
    /// instances may create at once: the naming key stored first is the
    /// store's, for all of them.
    ///
    /// # Errors
    /// As [`open`](SubjectKeys::open); what the KEK reports when it wraps.
    pub fn create(kek: Keyset, store: Arc<dyn KeyStore>) -> Result<Self, Error> {
        Self::creating(kek, store, false)
    }

    /// A negative control for tests: as [`create`](SubjectKeys::create),
    /// but the instance keeps the naming key it made even when another
    /// instance's was stored first, and never checks the store's naming
    /// key again (two instances then name a subject by two tags).
    #[doc(hidden)]
    pub fn create_without_reading_back(
        kek: Keyset,
        store: Arc<dyn KeyStore>,
    ) -> Result<Self, Error> {
        Self::creating(kek, store, true)
    }

    fn creating(kek: Keyset, store: Arc<dyn KeyStore>, unchecked: bool) -> Result<Self, Error> {
        let mut keys = Self::unopened(kek, store);
        keys.unchecked_naming = unchecked;
        if keys.store.get(&NAMING_ID)?.is_none() {
            // A store with subjects' keys or records of shreds and no
            // naming key lost it (a record withdrawn, a store made again
            // over an old one): a new naming key would name its subjects
            // by other tags, and a shred would miss their values.
            let held = keys.store.records()?.iter().any(|(t, _)| *t != NAMING_ID)
                || !keys.store.shreds()?.is_empty();
            if held {
                return Err(Error::store(
                    "the key store holds subjects' keys or records of shreds but no naming key: a new one would name its subjects by other tags, so it is not made (restore the store's naming key)",
                    "naming key lost",
                ));
            }
            let mut key = Zeroizing::new([0u8; SIV_KEY_LEN]);
            crate::random::fill_from_os(&mut key[..]);
            // A random id, as a DEK's: the record keeps it when rewrapped,
            // and a second maker's record is a record of its own.
            let mut id = [0u8; DEK_ID];
            crate::random::fill_from_os(&mut id);
            let mut record = id.to_vec();
            record.extend_from_slice(&keys.kek.encrypt(&key[..], &naming_ad(&id))?);
            // Two makers at once: the first stored is the store's, and
            // each reads it back (`naming` below) before naming anything.
            let stored = keys.store.insert_if_absent(&NAMING_ID, &record)?;
            if unchecked && stored != record {
                let naming = AesSivKey::new(&key[..])?;
                drop(keys.naming.set((naming, id)));
            }
        }
        keys.naming()?;
        Ok(keys)
    }

    fn unopened(kek: Keyset, store: Arc<dyn KeyStore>) -> Self {
        SubjectKeys {
            kek,
            store,
            naming: OnceLock::new(),
            unchecked_naming: false,
            unknown_as_shredded: false,
            caches: Mutex::new(Caches::default()),
            cache_capacity: DEFAULT_CACHE,
            fence: DEFAULT_FENCE,
            fence_ns: hooks::nanos(DEFAULT_FENCE),
            strict: false,
            counters: Counters::default(),
        }
    }

    /// Serves a cached DEK for at most `bound` after it was read from the
    /// key store (default 5 s): a shred made through another
    /// [`SubjectKeys`] on the same store is seen here within it.
    #[must_use]
    pub fn with_fence(self, bound: Duration) -> Self {
        SubjectKeys {
            fence: bound,
            fence_ns: hooks::nanos(bound),
            ..self
        }
    }

    /// Keeps at most `n` DEKs in the cache (default 65 536).
    #[must_use]
    pub fn with_cache_capacity(self, n: usize) -> Self {
        SubjectKeys {
            cache_capacity: n.max(1),
            ..self
        }
    }

    /// A value whose subject was shredded is [`Error::Shredded`], not a
    /// delete.
    #[must_use]
    pub fn strict(self) -> Self {
        SubjectKeys {
            strict: true,
            ..self
        }
    }

    /// A negative control for tests: the rule this crate replaced, where
    /// a value whose DEK the store does not hold reads as shredded, with
    /// no record of a shred or one that does not open.
    #[doc(hidden)]
    #[must_use]
    pub fn reading_unknown_keys_as_shredded(self) -> Self {
        SubjectKeys {
            unknown_as_shredded: true,
            ..self
        }
    }

    /// The counters.
    pub fn stats(&self) -> SubjectStats {
        let c = &self.counters;
        SubjectStats {
            shreds: c.shreds.load(Ordering::Relaxed),
            shredded_reads: c.shredded_reads.load(Ordering::Relaxed),
            deks_created: c.deks_created.load(Ordering::Relaxed),
            cache_hits: self.lock().deks.hits,
            store_reads: c.store_reads.load(Ordering::Relaxed),
        }
    }

    /// The subject tag of `subject`.
    ///
    /// # Errors
    /// What the key store or the KEK reports when the naming key is first
    /// loaded or made.
    pub fn tag(&self, subject: &[u8]) -> Result<SubjectTag, Error> {
        if let Some(n) = self.lock().tags.get(subject) {
            return Ok(n.tag);
        }
        let tag = Self::tag_under(self.naming()?, subject)?;
        let tags = &mut self.lock().tags;
        if tags.len() >= self.cache_capacity {
            // Bounded: start again (tags are cheap to compute, ~0.5 us).
            tags.clear();
        }
        tags.insert(Subject(subject.into()), Named { tag, hint: None });
        Ok(tag)
    }

    /// The subject tag of `subject`, not kept in the tag cache: for a
    /// shredded subject's value, whose name a shred dropped from it.
    fn tag_uncached(&self, subject: &[u8]) -> Result<SubjectTag, Error> {
        if let Some(n) = self.lock().tags.get(subject) {
            return Ok(n.tag);
        }
        Self::tag_under(self.naming()?, subject)
    }

    /// Shreds `subject`: its DEK is removed from the key store, with a
    /// record of the shred that covers it, and from this process's caches
    /// (the subject's name too, zeroized); this returns once the store has
    /// acknowledged. Every value of the subject, wherever a copy is, then
    /// reads as a delete (here at once; through another [`SubjectKeys`] on
    /// the same store within its fence). A later write for the subject
    /// makes a new DEK; the old values stay unreadable. Says what it found:
    /// DEKs removed, none left since an earlier shred, or
    /// [`Shred::NoKey`] when the store never had a key for the subject (a
    /// subject spelled otherwise than when it was written, say).
    ///
    /// # Errors
    /// What the key store reports (the shred did not happen: try again).
    pub fn shred(&self, subject: &[u8]) -> Result<Shred, Error> {
        self.check_naming()?;
        let tag = self.tag(subject)?;
        let removed = self.shred_everywhere(subject, &tag);
        self.lock().tags.remove(subject);
        removed
    }

    /// Shreds `tag`, and the subject's tags under every other naming key
    /// the store holds (a second maker's record that was not withdrawn:
    /// no instance names subjects with it, but a shred covers it anyway).
    fn shred_everywhere(&self, subject: &[u8], tag: &SubjectTag) -> Result<Shred, Error> {
        let mut found = self.shred_tag(tag)?;
        let ours = self.naming.get().map(|(_, id)| *id);
        for record in self.store.all_records(&NAMING_ID)? {
            if record.get(..DEK_ID) == ours.as_ref().map(|id| &id[..]) {
                continue;
            }
            // A record that does not open names no subject (`check` reports
            // it).
            let Ok((naming, _)) = self.open_naming(&record) else {
                continue;
            };
            let other = Self::tag_under(&naming, subject)?;
            found = match (found, self.shred_tag(&other)?) {
                (Shred::Removed(a), Shred::Removed(b)) => Shred::Removed(a + b),
                (Shred::Removed(a), _) | (_, Shred::Removed(a)) => Shred::Removed(a),
                (Shred::AlreadyShredded, _) | (_, Shred::AlreadyShredded) => Shred::AlreadyShredded,
                _ => Shred::NoKey,
            };
        }
        Ok(found)
    }

    /// [`shred`](SubjectKeys::shred) by subject tag (for tools that hold
    /// tags, not subjects).
    ///
    /// # Errors
    /// What the key store reports; [`Error::Store`] for the naming key's
    /// own id (`0xff` x 16), which no subject has.
    pub fn shred_tag(&self, tag: &SubjectTag) -> Result<Shred, Error> {
        if *tag == NAMING_ID {
            return Err(Error::store(
                "the naming key's id is no subject's tag",
                "refused",
            ));
        }
        // The cache first: from here on nothing is served from it, and a
        // read that races the removal asks the store.
        self.lock().deks.remove(tag);
        let removed = self.store.remove(tag, &|ids| self.seal_shred(tag, ids))?;
        self.lock().deks.remove(tag);
        self.counters.shreds.fetch_add(1, Ordering::Relaxed);
        Ok(removed)
    }

    #[inline]
    fn lock(&self) -> std::sync::MutexGuard<'_, Caches> {
        self.caches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `subject`'s tag under the naming key `naming`.
    fn tag_under(naming: &AesSivKey, subject: &[u8]) -> Result<SubjectTag, Error> {
        let mut scratch = Zeroizing::new(subject.to_vec());
        naming.seal_in_place(b"tombstone-crypt subject tag", &mut scratch)
    }

    /// The naming key, read from the store once (the store's: on a shared
    /// store, the one stored first).
    fn naming(&self) -> Result<&AesSivKey, Error> {
        if let Some((k, _)) = self.naming.get() {
            return Ok(k);
        }
        let record = self.store.get(&NAMING_ID)?.ok_or_else(|| {
            Error::store(
                "the key store holds no naming key: not a store of subject keys (a mistyped path or topic?), or one never created (SubjectKeys::create, `shred create-key-store`)",
                "no naming key",
            )
        })?;
        let (naming, id) = self.open_naming(&record)?;
        Ok(&self.naming.get_or_init(|| (naming, id)).0)
    }

    /// Opens a naming key's record: `id | wrapped naming key`.
    fn open_naming(&self, record: &[u8]) -> Result<(AesSivKey, [u8; DEK_ID]), Error> {
        let (id, wrapped) = record.split_first_chunk::<DEK_ID>().ok_or_else(|| {
            Error::store("the naming key's record is too short", "corrupt record")
        })?;
        let key = Zeroizing::new(self.kek.decrypt(wrapped, &naming_ad(id)).map_err(|e| {
            Error::store(
                "the KEK does not open the key store's naming key: another KEK's store, or a KEK key destroyed before a rewrap reached it",
                e,
            )
        })?);
        Ok((AesSivKey::new(&key)?, *id))
    }

    /// Checks that the store's naming key is still the one this instance
    /// names subjects with (a shared store made again, or another
    /// instance's naming key stored first, is refused: this instance's
    /// tags would not be the store's). Run before a DEK is read from or
    /// written to the store.
    fn check_naming(&self) -> Result<(), Error> {
        if self.unchecked_naming {
            return Ok(());
        }
        self.naming()?;
        let ours = self.naming.get().map(|(_, id)| *id);
        let stored = self.store.get(&NAMING_ID)?;
        if stored.as_deref().and_then(|r| r.get(..DEK_ID)) == ours.as_ref().map(|id| &id[..]) {
            return Ok(());
        }
        Err(Error::store(
            "the key store's naming key is not the one this instance opened (the store was made again, or emptied): its subjects' tags would differ; open the key store again",
            "naming key changed",
        ))
    }

    /// Wraps every record of the key store (the naming key and each
    /// subject's DEKs) under the KEK's current primary key, in place (same
    /// DEK ids, same keys), and seals each record of a shred again: the KEK rotation that lets its old keys be
    /// destroyed. Rotate the KEK keyset first (`keyset rotate`), run this,
    /// then destroy the old keys (`keyset destroy`): from then on a copy
    /// of the key store made before (a backup, a key-store topic's segments
    /// not yet compacted) opens nothing, shredded subjects' DEKs included.
    /// Returns how many records were wrapped again.
    ///
    /// Records the KEK does not open are left as they are (and counted by
    /// [`check`](SubjectKeys::check)).
    ///
    /// # Errors
    /// What the key store or the KEK reports; records already wrapped
    /// again stay so (running it again is safe).
    pub fn rewrap(&self) -> Result<usize, Error> {
        let mut n = 0;
        for (tag, record) in self.store.records()? {
            let Some((id, wrapped)) = record.split_first_chunk::<DEK_ID>() else {
                continue;
            };
            let ad = if tag == NAMING_ID {
                naming_ad(id)
            } else {
                self.dek_ad(&tag, id)
            };
            // A record the KEK does not open (forged, or under a key
            // destroyed before) has nothing to wrap again: `check` reports
            // it; the others go on.
            let Ok(key) = self.kek.decrypt(wrapped, &ad) else {
                continue;
            };
            let key = Zeroizing::new(key);
            let mut again = id.to_vec();
            again.extend_from_slice(&self.kek.encrypt(&key, &ad)?);
            self.store.replace(&tag, &again)?;
            n += 1;
        }
        // The records of shreds, sealed again (every DEK id the pieces that
        // open name, in one): after the old KEK key is destroyed, a
        // shredded value must still read as a delete. Pieces that do not
        // open are left (`check` reports a subject none of whose pieces
        // opens).
        for (tag, pieces) in self.store.shreds()? {
            let Some(ids) = self.opened_ids(&tag, &pieces) else {
                continue;
            };
            self.store
                .reseal(&tag, &pieces, &self.seal_shred(&tag, &ids)?)?;
            n += 1;
        }
        Ok(n)
    }

    /// The associated data that seals a shred's evidence: what it is,
    /// whose, and the DEK ids it covers.
    fn shred_ad(tag: &SubjectTag, ids: &[[u8; DEK_ID]]) -> Vec<u8> {
        let mut ad = b"tombstone-crypt subject shred".to_vec();
        ad.extend_from_slice(tag);
        for id in ids {
            ad.extend_from_slice(id);
        }
        ad
    }

    /// The evidence of a shred of `tag` covering `ids`: the ids, sealed
    /// under the KEK's primary (its ciphertext of nothing, bound to them).
    fn seal_shred(&self, tag: &SubjectTag, ids: &[[u8; DEK_ID]]) -> Result<Vec<u8>, Error> {
        let seal = self.kek.encrypt(&[], &Self::shred_ad(tag, ids))?;
        Ok(store::evidence(ids, &seal))
    }

    /// Every DEK id the pieces of evidence that open name; `None` if none
    /// opens.
    fn opened_ids(&self, tag: &SubjectTag, pieces: &[Vec<u8>]) -> Option<Vec<[u8; DEK_ID]>> {
        let mut all: Option<Vec<[u8; DEK_ID]>> = None;
        for ids in pieces.iter().filter_map(|p| self.open_shred(tag, p)) {
            let all = all.get_or_insert_with(Vec::new);
            for id in ids {
                if !all.contains(&id) {
                    all.push(id);
                }
            }
        }
        all
    }

    /// The ids a shred's evidence covers, if the KEK opens its seal.
    fn open_shred(&self, tag: &SubjectTag, evidence: &[u8]) -> Option<Vec<[u8; DEK_ID]>> {
        let (ids, seal) = store::split_evidence(evidence)?;
        self.kek
            .decrypt(seal, &Self::shred_ad(tag, &ids))
            .ok()
            .map(|_| ids)
    }

    /// A DEK record's associated data: what it is and whose.
    /// It names the store's naming key by its record id too: a DEK record
    /// opens only in the store whose naming key named its subject (a
    /// naming key swapped in from another store under the same KEK makes
    /// the store's DEKs errors, never keys a shred cannot reach).
    fn dek_ad(&self, tag: &SubjectTag, id: &[u8; DEK_ID]) -> Vec<u8> {
        let mut ad = b"tombstone-crypt subject dek".to_vec();
        ad.extend_from_slice(&self.naming.get().map_or([0; DEK_ID], |(_, n)| *n));
        ad.extend_from_slice(tag);
        ad.extend_from_slice(id);
        ad
    }

    /// Opens a key-store record: `DEK id | wrapped DEK`.
    fn open_record(&self, tag: &SubjectTag, record: &[u8]) -> Result<Dek, Error> {
        let (id, wrapped) = record
            .split_first_chunk::<DEK_ID>()
            .ok_or_else(|| Error::store("a subject key record is too short", "corrupt record"))?;
        let key = Zeroizing::new(self.kek.decrypt(wrapped, &self.dek_ad(tag, id))?);
        Ok(Dek {
            id: *id,
            key: AesGcmKey::new(&key, self.kek.backend())?,
        })
    }

    /// The cached DEK of `tag` if it is within the fence, and the DEK
    /// cache's count of removals, for [`keep`](SubjectKeys::keep) after a
    /// read of the key store.
    fn cached(&self, tag: &SubjectTag) -> (Option<Arc<Dek>>, u64) {
        let mut caches = self.lock();
        (caches.deks.fresh(tag, self.fence_ns), caches.deks.removals)
    }

    /// `subject`'s tag and the DEK to write its values with: both from
    /// the caches under one lock when they are there (the DEK within the
    /// fence), else as [`tag`](SubjectKeys::tag) and `dek_to_write`.
    #[inline]
    fn to_write(&self, subject: &[u8]) -> Result<(SubjectTag, Arc<Dek>), Error> {
        let known = {
            let mut caches = self.lock();
            let Caches { tags, deks } = &mut *caches;
            match tags.get_mut(subject) {
                Some(named) => {
                    let tag = named.tag;
                    if let Some(dek) = deks.hinted(&mut named.hint, self.fence_ns) {
                        return Ok((tag, dek));
                    }
                    match deks.fresh_with_hint(&tag, self.fence_ns) {
                        Some((dek, hint)) => {
                            named.hint = Some(hint);
                            Some((tag, Some(dek)))
                        }
                        None => Some((tag, None)),
                    }
                }
                None => None,
            }
        };
        let tag = match known {
            Some((tag, Some(dek))) => return Ok((tag, dek)),
            Some((tag, None)) => tag,
            None => self.tag(subject)?,
        };
        Ok((tag, self.dek_to_write(&tag)?))
    }

    /// Caches `tag`'s DEK, read from the key store, unless the cache has
    /// removed a DEK (a shred) since `since`, its count of removals before
    /// the store was read. A shred that returned while the store was being
    /// read must not find the DEK it shredded cached again afterwards, for
    /// writes that start after it to use. (The read itself may still use
    /// the DEK: it began before the shred returned.)
    fn keep(&self, tag: SubjectTag, dek: Arc<Dek>, since: u64) {
        let mut caches = self.lock();
        if caches.deks.removals == since {
            caches.deks.insert(tag, dek, self.cache_capacity);
        }
    }

    /// The DEK of `tag` as the key store holds it now (`None`: there is
    /// none: never made, or shredded); `since` as for
    /// [`keep`](SubjectKeys::keep).
    fn stored(&self, tag: &SubjectTag, since: u64) -> Result<Option<Arc<Dek>>, Error> {
        self.check_naming()?;
        self.counters.store_reads.fetch_add(1, Ordering::Relaxed);
        match self.store.get(tag)? {
            None => Ok(None),
            Some(record) => {
                let dek = Arc::new(self.open_record(tag, &record)?);
                self.keep(*tag, Arc::clone(&dek), since);
                Ok(Some(dek))
            }
        }
    }

    /// The DEK to write `tag`'s values with: the current one, or a new one.
    fn dek_to_write(&self, tag: &SubjectTag) -> Result<Arc<Dek>, Error> {
        let since = match self.cached(tag) {
            (Some(d), _) => return Ok(d),
            (None, since) => since,
        };
        if let Some(d) = self.stored(tag, since)? {
            return Ok(d);
        }
        let mut id = [0u8; DEK_ID];
        crate::random::fill_from_os(&mut id);
        let mut key = Zeroizing::new([0u8; DEK_LEN]);
        crate::random::fill_from_os(&mut key[..]);
        let mut record = id.to_vec();
        record.extend_from_slice(&self.kek.encrypt(&key[..], &self.dek_ad(tag, &id))?);
        // Two writers making a subject's first DEK at once: the one stored
        // first is the subject's, for both.
        let stored = self.store.insert_if_absent(tag, &record)?;
        if stored == record {
            self.counters.deks_created.fetch_add(1, Ordering::Relaxed);
        }
        let dek = Arc::new(self.open_record(tag, &stored)?);
        self.keep(*tag, Arc::clone(&dek), since);
        Ok(dek)
    }

    /// The DEK `id` of `tag`, to read with, or the shred that covers it.
    ///
    /// # Errors
    /// [`Error::UnknownSubjectKey`] when the store neither holds it nor
    /// records its shred; what the store or the KEK reports.
    fn dek_to_read(&self, tag: &SubjectTag, id: &[u8; DEK_ID]) -> Result<ToRead, Error> {
        let since = match self.cached(tag) {
            (Some(d), _) if d.id == *id => return Ok(ToRead::Dek(d)),
            (_, since) => since,
        };
        self.check_naming()?;
        self.counters.store_reads.fetch_add(1, Ordering::Relaxed);
        match self.store.find(tag, id)? {
            // Only a shred deletes: its evidence must open under the KEK
            // and name this DEK (a forged or replayed record of a shred,
            // or a DEK a shred covered only by its offset, is an error).
            DekLookup::Shredded(pieces)
                if self
                    .opened_ids(tag, &pieces)
                    .is_some_and(|ids| ids.contains(id)) =>
            {
                Ok(ToRead::Shredded)
            }
            DekLookup::Shredded(_) | DekLookup::Unknown if self.unknown_as_shredded => {
                Ok(ToRead::Shredded)
            }
            DekLookup::Shredded(_) => Err(Error::UnknownSubjectKey {
                tag: *tag,
                dek_id: *id,
            }),
            DekLookup::Unknown => Err(Error::UnknownSubjectKey {
                tag: *tag,
                dek_id: *id,
            }),
            DekLookup::Found(record) => {
                let dek = Arc::new(self.open_record(tag, &record)?);
                if dek.id != *id {
                    return Err(Error::store(
                        "the key store answered with another DEK's record",
                        "corrupt store",
                    ));
                }
                self.keep(*tag, Arc::clone(&dek), since);
                Ok(ToRead::Dek(dek))
            }
        }
    }

    /// Appends a value of the [module](self)'s format for `subject`,
    /// bound to `ad` (the record's associated data), to `out`:
    /// `write_plaintext` writes the plaintext straight after the header
    /// (room for `size_hint` bytes reserved) and it is encrypted where it
    /// lies. On any error what was appended is zeroized and removed.
    fn seal_into(
        &self,
        subject: &[u8],
        ad: &[u8],
        out: &mut Vec<u8>,
        size_hint: usize,
        write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let start = out.len();
        let sealed = self.seal_at(subject, ad, out, size_hint, write_plaintext);
        if sealed.is_err() {
            if let Some(tail) = out.get_mut(start..) {
                zeroize::Zeroize::zeroize(tail);
            }
            out.truncate(start);
        }
        sealed
    }

    fn seal_at(
        &self,
        subject: &[u8],
        ad: &[u8],
        out: &mut Vec<u8>,
        size_hint: usize,
        write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let (tag, dek) = self.to_write(subject)?;
        let mut nonce = [0u8; NONCE_LEN];
        crate::random::nonce(&mut nonce);
        // The header is written once, at the end of the associated data,
        // and copied from there to the value.
        let mut full_ad = ValueAd::new();
        let full_ad = full_ad.with_record(ad);
        let header = &mut full_ad[ad.len()..];
        header[0] = FORMAT;
        header[1..=TAG].copy_from_slice(&tag);
        header[1 + TAG..1 + TAG + DEK_ID].copy_from_slice(&dek.id);
        header[1 + TAG + DEK_ID..].copy_from_slice(&nonce);
        out.reserve(OVERHEAD.saturating_add(size_hint.min(1 << 20)));
        out.extend_from_slice(header);
        let body = out.len();
        write_plaintext(out)?;
        let tag_bytes = dek.key.seal_in_place(&nonce, &*full_ad, &mut out[body..])?;
        out.extend_from_slice(&tag_bytes);
        Ok(())
    }

    /// Decrypts a value; `Ok(None)` when a shred covers its DEK.
    fn open_value(&self, ad: &[u8], value: &[u8]) -> Result<Option<Zeroizing<Vec<u8>>>, Error> {
        if value.len() < OVERHEAD {
            return Err(Error::Truncated {
                len: value.len(),
                min: OVERHEAD,
            });
        }
        if value[0] != FORMAT {
            return Err(Error::UnsupportedVersion);
        }
        let tag: SubjectTag = value[1..=TAG].try_into().map_err(|_| Error::Decryption)?;
        let id: [u8; DEK_ID] = value[1 + TAG..1 + TAG + DEK_ID]
            .try_into()
            .map_err(|_| Error::Decryption)?;
        let nonce: [u8; NONCE_LEN] = value[1 + TAG + DEK_ID..HEADER]
            .try_into()
            .map_err(|_| Error::Decryption)?;
        let dek = match self.dek_to_read(&tag, &id)? {
            ToRead::Dek(dek) => dek,
            ToRead::Shredded => {
                self.counters.shredded_reads.fetch_add(1, Ordering::Relaxed);
                return Ok(None);
            }
        };
        let mut full_ad = ValueAd::new();
        let full_ad = full_ad.with_record(ad);
        full_ad[ad.len()..].copy_from_slice(&value[..HEADER]);
        let (body, gcm_tag) = value[HEADER..].split_at(value.len() - HEADER - TAG_LEN);
        let gcm_tag: [u8; TAG_LEN] = gcm_tag.try_into().map_err(|_| Error::Decryption)?;
        let mut plain = Zeroizing::new(body.to_vec());
        dek.key
            .open_in_place(&nonce, &*full_ad, &mut plain, &gcm_tag)?;
        Ok(Some(plain))
    }
}

/// What names a value's subject when it is written.
type SubjectFn<T> = dyn Fn(&Context<'_>, &T) -> Option<Vec<u8>> + Send + Sync;

/// Values of type `T` through the codec `C`, each encrypted under its
/// subject's key ([`SubjectKeys`]): a [`Serializer`] and [`Deserializer`]
/// pair for the Kafka clients and stores. The subject is the record key's
/// plaintext unless [`with_subject`](SubjectEncrypting::with_subject)
/// names it; values are bound to the topic and the record key.
pub struct SubjectEncrypting<C, T: ?Sized> {
    keys: Arc<SubjectKeys>,
    inner: C,
    subject: Option<Arc<SubjectFn<T>>>,
    _t: PhantomData<fn(&T)>,
}

impl<C: Clone, T: ?Sized> Clone for SubjectEncrypting<C, T> {
    fn clone(&self) -> Self {
        SubjectEncrypting {
            keys: Arc::clone(&self.keys),
            inner: self.inner.clone(),
            subject: self.subject.clone(),
            _t: PhantomData,
        }
    }
}

impl<C, T: ?Sized> std::fmt::Debug for SubjectEncrypting<C, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectEncrypting")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl<C, T: ?Sized> SubjectEncrypting<C, T> {
    /// Values through `inner`, under the subject keys `keys`; the subject
    /// is the record key.
    pub fn new(keys: Arc<SubjectKeys>, inner: C) -> Self {
        SubjectEncrypting {
            keys,
            inner,
            subject: None,
            _t: PhantomData,
        }
    }

    /// The subject is what `subject` takes from the record's context and
    /// value (`None`: the record key). Reading needs no closure: a value
    /// carries its subject tag. With the subject the record key (no
    /// closure), a shredded subject's value read under another record key
    /// is an error, not a delete (its subject tag is not that key's); with
    /// a closure the reader cannot tell the value's subject from its
    /// record, so such a copy reads as a delete.
    #[must_use]
    pub fn with_subject(
        self,
        subject: impl Fn(&Context<'_>, &T) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        SubjectEncrypting {
            subject: Some(Arc::new(subject)),
            ..self
        }
    }

    /// The subject keys.
    pub fn keys(&self) -> &Arc<SubjectKeys> {
        &self.keys
    }
}

impl<T: ?Sized, C: Serializer<T>> Serializer<T> for SubjectEncrypting<C, T> {
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let named = self.subject.as_ref().and_then(|f| f(ctx, value));
        let subject = match &named {
            Some(s) => &s[..],
            None => ctx.key().ok_or_else(|| Error::MissingRecordKey)?,
        };
        let mut ad = AadBuf::new();
        let ad = ad.encode(AadPolicy::TopicAndKey, ctx)?;
        let hint = self.inner.size_hint(value).unwrap_or(0);
        self.keys.seal_into(subject, ad, out, hint, |out| {
            self.inner.serialize_into(ctx, value, out)
        })
    }

    fn size_hint(&self, value: &T) -> Option<usize> {
        self.inner
            .size_hint(value)
            .map(|n| n.saturating_add(OVERHEAD))
    }
}

// Read into any type the codec reads (a value carries its subject tag:
// no closure is needed), e.g. `String` for values written from `str`.
impl<T: ?Sized, U, C: Deserializer<U>> Deserializer<U> for SubjectEncrypting<C, T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<U, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<U, Error> {
        let mut ad = AadBuf::new();
        let ad = ad.encode(AadPolicy::TopicAndKey, ctx)?;
        match self.keys.open_value(ad, data)? {
            Some(mut plain) => self
                .inner
                .deserialize_owned(ctx, std::mem::take(&mut *plain)),
            None => {
                // A shred's record covers the value's DEK, so its GCM tag
                // cannot be checked against its record. Its subject tag
                // can: with the subject the record key, a value copied (or
                // forged) under another key names another subject, and is
                // an error, never a delete of that key.
                if self.subject.is_none() {
                    let key = ctx.key().ok_or(Error::MissingRecordKey)?;
                    let named = data.get(1..=TAG).ok_or(Error::Decryption)?;
                    if named != self.keys.tag_uncached(key)? {
                        return Err(Error::Decryption);
                    }
                }
                Err(Error::Shredded {
                    as_delete: !self.keys.strict,
                })
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> SubjectKeys {
        SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new()))
            .expect("subject keys")
            .with_fence(Duration::from_secs(3600))
    }

    fn write(keys: &SubjectKeys, subject: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        keys.seal_into(subject, b"record", &mut out, 1, |o| {
            o.push(7);
            Ok(())
        })
        .expect("sealed");
        out
    }

    fn dek_id(value: &[u8]) -> [u8; DEK_ID] {
        value[1 + TAG..1 + TAG + DEK_ID]
            .try_into()
            .expect("a DEK id")
    }

    /// A write hint (the subject's DEK found with one lookup) is followed
    /// only while the cache has dropped no DEK since it was taken. Here the
    /// shredded DEK is still alive (a value is being written with it
    /// elsewhere), so only the cache's generation stops the next write
    /// from using it; without the generation's bump on removal this fails.
    #[test]
    fn a_write_hint_is_never_followed_after_a_shred_even_while_its_dek_is_alive() {
        let keys = keys();
        let first = write(&keys, b"alice");
        // The second write finds the DEK by tag and leaves the hint; the
        // third follows it.
        assert_eq!(dek_id(&write(&keys, b"alice")), dek_id(&first));
        assert_eq!(dek_id(&write(&keys, b"alice")), dek_id(&first));
        let tag = keys.tag(b"alice").expect("tag");
        let in_flight = keys.cached(&tag).0.expect("the DEK is cached");
        assert_eq!(keys.shred_tag(&tag).expect("shred"), Shred::Removed(1));
        let after = write(&keys, b"alice");
        assert_ne!(dek_id(&after), dek_id(&first), "a shredded DEK wrote again");
        assert!(keys
            .open_value(b"record", &first)
            .expect("shredded")
            .is_none());
        drop(in_flight);
    }

    /// A tag cache entry stays small: 10^7 subjects pass through a cache
    /// of bounded entries, and a hot set's entries are what a write reads.
    #[test]
    fn a_tag_cache_entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<(Subject, Named)>(), 56);
    }

    /// The hint is kept and followed: once a subject's DEK has been found
    /// by tag, the subject's entry holds a hint, and the next write is a
    /// cache hit that leaves it in place (a stale hint is cleared).
    #[test]
    fn a_subjects_next_write_follows_its_hint() {
        let keys = keys();
        write(&keys, b"bob");
        write(&keys, b"bob");
        let hinted = |keys: &SubjectKeys| {
            keys.lock()
                .tags
                .get(&b"bob"[..])
                .is_some_and(|n| n.hint.is_some())
        };
        assert!(hinted(&keys));
        let hits = keys.stats().cache_hits;
        write(&keys, b"bob");
        assert_eq!(keys.stats().cache_hits, hits + 1);
        assert!(hinted(&keys));
    }
}
