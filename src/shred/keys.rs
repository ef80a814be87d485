//! [`SubjectKeys`]: a subject's DEK created, found, opened and shredded
//! through a key store.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use zeroize::Zeroizing;

use crate::cipher::{AesGcmKey, AesSivKey, NONCE_LEN, SIV_KEY_LEN, TAG_LEN};
use crate::error::Error;
use crate::keyset::Keyset;
use crate::kms::dek::hooks;

use super::cache::*;
use super::format::*;
use super::{DekLookup, KeyStore, Shred};

/// The default bound of a cached DEK's age.
const DEFAULT_FENCE: Duration = Duration::from_secs(5);
/// The default number of DEKs kept.
const DEFAULT_CACHE: usize = 65_536;

/// One DEK per data subject, wrapped by a keyset (the KEK) in a
/// [`KeyStore`]: see the [module](crate::shred).
pub struct SubjectKeys {
    pub(super) kek: Keyset,
    pub(super) store: Arc<dyn KeyStore>,
    /// The naming key and its record's id (random, as a DEK's: two
    /// instances that make one at once write two records, and the store
    /// keeps the first).
    pub(super) naming: OnceLock<(AesSivKey, [u8; DEK_ID])>,
    /// A test's control: `create` takes the naming key it made without
    /// reading the store's back, and nothing checks it later.
    pub(super) unchecked_naming: bool,
    /// A test's control: the rule before, where a DEK the store does not
    /// hold reads as shredded, evidence or not.
    pub(super) unknown_as_shredded: bool,
    pub(super) caches: Mutex<Caches>,
    pub(super) cache_capacity: usize,
    pub(super) fence: Duration,
    /// `fence` in ns.
    pub(super) fence_ns: u64,
    pub(super) strict: bool,
    pub(super) counters: Counters,
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

    pub(super) fn creating(
        kek: Keyset,
        store: Arc<dyn KeyStore>,
        unchecked: bool,
    ) -> Result<Self, Error> {
        let mut keys = Self::unopened(kek, store);
        keys.unchecked_naming = unchecked;
        if keys.naming_key_to_make()? {
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

    /// Whether the store lacks a naming key that this instance should
    /// make: `false` when the store has one.
    ///
    /// # Errors
    /// [`Error::Store`] when the store holds subjects' keys or records of
    /// shreds but no naming key; what the store reports when it is read.
    fn naming_key_to_make(&self) -> Result<bool, Error> {
        if self.store.get(&NAMING_ID)?.is_some() {
            return Ok(false);
        }
        // A store with subjects' keys or records of shreds and no naming
        // key lost it (a record withdrawn, a store made again over an old
        // one): a new naming key would name its subjects by other tags,
        // and a shred would miss their values.
        let held = self.store.records()?.iter().any(|(t, _)| *t != NAMING_ID)
            || !self.store.shreds()?.is_empty();
        if !held {
            return Ok(true);
        }
        // Another maker may have stored its naming key, and named subjects
        // with it, between the first read and these: a maker stores its
        // naming key before anything it names, so the store has one now.
        if self.store.get(&NAMING_ID)?.is_some() {
            return Ok(false);
        }
        Err(Error::store(
            "the key store holds subjects' keys or records of shreds but no naming key: a new one would name its subjects by other tags, so it is not made (restore the store's naming key)",
            "naming key lost",
        ))
    }

    pub(super) fn unopened(kek: Keyset, store: Arc<dyn KeyStore>) -> Self {
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
    pub(super) fn tag_uncached(&self, subject: &[u8]) -> Result<SubjectTag, Error> {
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
    pub(super) fn shred_everywhere(
        &self,
        subject: &[u8],
        tag: &SubjectTag,
    ) -> Result<Shred, Error> {
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
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Caches> {
        self.caches.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `subject`'s tag under the naming key `naming`.
    pub(super) fn tag_under(naming: &AesSivKey, subject: &[u8]) -> Result<SubjectTag, Error> {
        let mut scratch = Zeroizing::new(subject.to_vec());
        naming.seal_in_place(b"tombstone-crypt subject tag", &mut scratch)
    }

    /// The naming key, read from the store once (the store's: on a shared
    /// store, the one stored first).
    pub(super) fn naming(&self) -> Result<&AesSivKey, Error> {
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
    pub(super) fn open_naming(&self, record: &[u8]) -> Result<(AesSivKey, [u8; DEK_ID]), Error> {
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
    pub(super) fn check_naming(&self) -> Result<(), Error> {
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
    pub(super) fn shred_ad(tag: &SubjectTag, ids: &[[u8; DEK_ID]]) -> Vec<u8> {
        let mut ad = b"tombstone-crypt subject shred".to_vec();
        ad.extend_from_slice(tag);
        for id in ids {
            ad.extend_from_slice(id);
        }
        ad
    }

    /// The evidence of a shred of `tag` covering `ids`: the ids, sealed
    /// under the KEK's primary (its ciphertext of nothing, bound to them).
    pub(super) fn seal_shred(
        &self,
        tag: &SubjectTag,
        ids: &[[u8; DEK_ID]],
    ) -> Result<Vec<u8>, Error> {
        let seal = self.kek.encrypt(&[], &Self::shred_ad(tag, ids))?;
        Ok(super::store::evidence(ids, &seal))
    }

    /// Every DEK id the pieces of evidence that open name; `None` if none
    /// opens.
    pub(super) fn opened_ids(
        &self,
        tag: &SubjectTag,
        pieces: &[Vec<u8>],
    ) -> Option<Vec<[u8; DEK_ID]>> {
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
    pub(super) fn open_shred(
        &self,
        tag: &SubjectTag,
        evidence: &[u8],
    ) -> Option<Vec<[u8; DEK_ID]>> {
        let (ids, seal) = super::store::split_evidence(evidence)?;
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
    pub(super) fn dek_ad(&self, tag: &SubjectTag, id: &[u8; DEK_ID]) -> Vec<u8> {
        let mut ad = b"tombstone-crypt subject dek".to_vec();
        ad.extend_from_slice(&self.naming.get().map_or([0; DEK_ID], |(_, n)| *n));
        ad.extend_from_slice(tag);
        ad.extend_from_slice(id);
        ad
    }

    /// Opens a key-store record: `DEK id | wrapped DEK`.
    pub(super) fn open_record(&self, tag: &SubjectTag, record: &[u8]) -> Result<Dek, Error> {
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
    pub(super) fn cached(&self, tag: &SubjectTag) -> (Option<Arc<Dek>>, u64) {
        let mut caches = self.lock();
        (caches.deks.fresh(tag, self.fence_ns), caches.deks.removals)
    }

    /// `subject`'s tag and the DEK to write its values with: both from
    /// the caches under one lock when they are there (the DEK within the
    /// fence), else as [`tag`](SubjectKeys::tag) and `dek_to_write`.
    #[inline]
    pub(super) fn to_write(&self, subject: &[u8]) -> Result<(SubjectTag, Arc<Dek>), Error> {
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
    pub(super) fn keep(&self, tag: SubjectTag, dek: Arc<Dek>, since: u64) {
        let mut caches = self.lock();
        if caches.deks.removals == since {
            caches.deks.insert(tag, dek, self.cache_capacity);
        }
    }

    /// The DEK of `tag` as the key store holds it now (`None`: there is
    /// none: never made, or shredded); `since` as for
    /// [`keep`](SubjectKeys::keep).
    pub(super) fn stored(&self, tag: &SubjectTag, since: u64) -> Result<Option<Arc<Dek>>, Error> {
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
    pub(super) fn dek_to_write(&self, tag: &SubjectTag) -> Result<Arc<Dek>, Error> {
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
    pub(super) fn dek_to_read(&self, tag: &SubjectTag, id: &[u8; DEK_ID]) -> Result<ToRead, Error> {
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
    pub(super) fn seal_into(
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

    pub(super) fn seal_at(
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
    pub(super) fn open_value(
        &self,
        ad: &[u8],
        value: &[u8],
    ) -> Result<Option<Zeroizing<Vec<u8>>>, Error> {
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
