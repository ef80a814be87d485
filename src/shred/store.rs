//! Where subject keys are kept: [`KeyStore`], in memory and in redb.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::SubjectTag;

/// A record of a subject's shreds: its tag and the evidence (the DEK ids
/// they covered, sealed under the KEK: see [`covered_ids`]), one piece or,
/// in a store that keeps each (a topic), several.
pub type ShredRecord = (SubjectTag, Vec<Vec<u8>>);

/// Seals the DEK ids a shred covers into the evidence a store keeps
/// ([`KeyStore::remove`] calls it with the ids).
pub type Seal<'a> = &'a dyn Fn(&[[u8; 8]]) -> Result<Vec<u8>, Error>;

/// The DEK ids a shred's evidence names (`n: u32be | n DEK ids | seal`),
/// or `None` if the bytes are not evidence. The ids are in the clear (a
/// store needs them); the seal, under the KEK, is what
/// [`SubjectKeys`](super::SubjectKeys) checks before a value reads as a
/// delete.
pub fn covered_ids(evidence: &[u8]) -> Option<Vec<[u8; 8]>> {
    split_evidence(evidence).map(|(ids, _)| ids)
}

/// The evidence's ids and seal.
pub(crate) fn split_evidence(evidence: &[u8]) -> Option<(Vec<[u8; 8]>, &[u8])> {
    let (n, rest) = evidence.split_first_chunk::<4>()?;
    let n = usize::try_from(u32::from_be_bytes(*n)).ok()?;
    let ids = rest.get(..n.checked_mul(8)?)?;
    let seal = &rest[ids.len()..];
    if seal.is_empty() {
        return None;
    }
    Some((ids.chunks_exact(8).filter_map(id_of).collect(), seal))
}

/// The id of the KEK key that sealed `evidence` (its seal's Tink key id).
#[cfg(feature = "kafka")]
pub(crate) fn sealing_key(evidence: &[u8]) -> Option<[u8; 4]> {
    let (_, seal) = split_evidence(evidence)?;
    seal.get(1..5)?.try_into().ok()
}

/// Evidence bytes: `n: u32be | ids | seal`.
pub(crate) fn evidence(ids: &[[u8; 8]], seal: &[u8]) -> Vec<u8> {
    let n = u32::try_from(ids.len()).unwrap_or(u32::MAX);
    let mut out = n.to_be_bytes().to_vec();
    for id in ids {
        out.extend_from_slice(id);
    }
    out.extend_from_slice(seal);
    out
}
use crate::error::Error;

/// What a key store knows of a value's DEK: its record, the record of its
/// shred, or neither. Only [`Shredded`](DekLookup::Shredded) lets a value
/// read as a delete; [`Unknown`](DekLookup::Unknown) is an error (the
/// wrong key store, a lost one, or a changed value).
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum DekLookup {
    /// The DEK's record (`DEK id | wrapped DEK`).
    Found(Vec<u8>),
    /// A shred of the subject covers this DEK: it is gone on purpose. The
    /// evidence (see [`covered_ids`]; a store that keeps several pieces
    /// gives each) is checked under the KEK before the value reads as a
    /// delete.
    Shredded(Vec<Vec<u8>>),
    /// The store neither holds this DEK nor records its shred.
    Unknown,
}

impl std::fmt::Debug for DekLookup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            DekLookup::Found(_) => "Found(..)",
            DekLookup::Shredded(_) => "Shredded(..)",
            DekLookup::Unknown => "Unknown",
        })
    }
}

/// What a shred found: DEKs it removed, or none and whether an earlier
/// shred had removed them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Shred {
    /// This many DEK records removed (the subject had a key).
    Removed(usize),
    /// No DEK left, and a record of an earlier shred: shredded before.
    AlreadyShredded,
    /// No DEK and no record of a shred: the store never had a key for this
    /// subject (spelled otherwise than when it was written, or the wrong
    /// key store).
    NoKey,
}

impl Shred {
    /// The DEK records removed.
    pub fn removed(self) -> usize {
        match self {
            Shred::Removed(n) => n,
            _ => 0,
        }
    }
}

/// A store of wrapped subject keys by subject tag: what
/// [`SubjectKeys`](super::SubjectKeys) keeps and shreds. Its records are
/// wrapped by the KEK and name subjects only by tag. Beside the records it
/// keeps the **evidence of each shred**: which DEK ids a shred removed, so
/// that a value under one of them reads as a delete and a value under a
/// DEK it never knew is an error.
pub trait KeyStore: Send + Sync {
    /// The record stored for `tag`, if any (its current DEK).
    ///
    /// # Errors
    /// The store's own failure ([`Error::Store`]).
    fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error>;

    /// Stores `record` for `tag` unless a record is there; returns the
    /// record stored (`record`, or the earlier one), once durable.
    ///
    /// # Errors
    /// The store's own failure.
    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error>;

    /// Shreds `tag`: removes each of its DEK records and, in the same
    /// write, keeps the record of the shred: the evidence `seal` makes of
    /// the DEK ids it covers (with those of its earlier shreds). Says what
    /// it found, once durable. A subject with no DEK and no earlier shred
    /// gets no record.
    ///
    /// # Errors
    /// The store's own failure (the records may still be there), or
    /// `seal`'s.
    fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error>;

    /// Keeps `evidence` (the ids of `was`, sealed again: a KEK rotation)
    /// as `tag`'s record of its shreds: a store that keeps one piece
    /// replaces it only if it is still `was` (a shred since then wins), in
    /// one step; a store that keeps each adds it.
    ///
    /// # Errors
    /// The store's own failure.
    fn reseal(&self, tag: &SubjectTag, was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error>;

    /// Every record, with its tag (each of a tag's records where a store
    /// keeps several): what [`SubjectKeys::rewrap`](super::SubjectKeys::rewrap)
    /// wraps again.
    ///
    /// # Errors
    /// The store's own failure.
    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error>;

    /// Every subject tag with a record of a shred, and its evidence (what
    /// [`SubjectKeys::check`](super::SubjectKeys::check) checks and
    /// [`SubjectKeys::rewrap`](super::SubjectKeys::rewrap) seals again).
    ///
    /// # Errors
    /// The store's own failure.
    fn shreds(&self) -> Result<Vec<ShredRecord>, Error>;

    /// Replaces `tag`'s record whose DEK id (first 8 bytes) is `record`'s
    /// with `record` (the same key wrapped again), in one step that a
    /// shred cannot slip between: a DEK that a shred covers is never
    /// written again. Durable when it returns.
    ///
    /// # Errors
    /// The store's own failure.
    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error>;

    /// Every live record of `tag`, the current one first. The default is
    /// [`get`](KeyStore::get)'s: a store that keeps one record per tag. A
    /// store where several writers can make a record at once and keeps
    /// each (a shared topic) overrides it.
    ///
    /// # Errors
    /// The store's own failure.
    fn all_records(&self, tag: &SubjectTag) -> Result<Vec<Vec<u8>>, Error> {
        Ok(self.get(tag)?.into_iter().collect())
    }

    /// What the store knows of `tag`'s DEK `dek_id`, for reading a value
    /// written under it.
    ///
    /// # Errors
    /// The store's own failure.
    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<DekLookup, Error>;
}

/// The DEK id a record starts with.
fn id_of(record: &[u8]) -> Option<[u8; 8]> {
    record.get(..8).and_then(|id| id.try_into().ok())
}

/// Adds `id` to `ids` unless it is there.
fn add_id(ids: &mut Vec<[u8; 8]>, id: [u8; 8]) {
    if !ids.contains(&id) {
        ids.push(id);
    }
}

/// What a store that keeps one record per tag answers for `dek_id`.
fn lookup(record: Option<Vec<u8>>, evidence: Option<&[u8]>, dek_id: &[u8; 8]) -> DekLookup {
    match record {
        Some(r) if r.get(..8) == Some(&dek_id[..]) => DekLookup::Found(r),
        _ => match evidence {
            Some(e) if covered_ids(e).is_some_and(|ids| ids.contains(dek_id)) => {
                DekLookup::Shredded(vec![e.to_vec()])
            }
            _ => DekLookup::Unknown,
        },
    }
}

/// What a store that keeps one record per tag does on a shred: the
/// evidence to keep (`None`: nothing to remove and no earlier shred), and
/// what it found.
fn shred_one(
    removed: Option<&[u8]>,
    earlier: Option<&[u8]>,
    seal: Seal<'_>,
) -> Result<(Option<Vec<u8>>, Shred), Error> {
    let mut ids = earlier.and_then(covered_ids).unwrap_or_default();
    let Some(id) = removed.and_then(id_of) else {
        let found = if earlier.is_some() {
            Shred::AlreadyShredded
        } else {
            Shred::NoKey
        };
        return Ok((None, found));
    };
    add_id(&mut ids, id);
    Ok((Some(seal(&ids)?), Shred::Removed(1)))
}

#[derive(Default)]
struct Memory {
    records: HashMap<SubjectTag, Vec<u8>>,
    shreds: HashMap<SubjectTag, Vec<u8>>,
}

/// A key store in this process's memory: for tests, and for subject keys
/// that need not outlive the process.
#[derive(Default)]
pub struct MemoryKeyStore {
    inner: Mutex<Memory>,
}

impl std::fmt::Debug for MemoryKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryKeyStore").finish_non_exhaustive()
    }
}

impl MemoryKeyStore {
    /// An empty store.
    pub fn new() -> Self {
        MemoryKeyStore::default()
    }

    /// How many records it holds (the naming key included; records of
    /// shreds not counted).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.lock().records.is_empty()
    }

    /// Every record's tag and bytes (what a backup of the store holds).
    pub fn records(&self) -> Vec<(SubjectTag, Vec<u8>)> {
        self.lock()
            .records
            .iter()
            .map(|(t, r)| (*t, r.clone()))
            .collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Memory> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KeyStore for MemoryKeyStore {
    fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.lock().records.get(tag).cloned())
    }

    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(self
            .lock()
            .records
            .entry(*tag)
            .or_insert_with(|| record.to_vec())
            .clone())
    }

    fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error> {
        let mut m = self.lock();
        let (evidence, found) = shred_one(
            m.records.get(tag).map(Vec::as_slice),
            m.shreds.get(tag).map(Vec::as_slice),
            seal,
        )?;
        if let Some(e) = evidence {
            m.records.remove(tag);
            m.shreds.insert(*tag, e);
        }
        Ok(found)
    }

    fn reseal(&self, tag: &SubjectTag, was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error> {
        if let Some(e) = self.lock().shreds.get_mut(tag) {
            if was == std::slice::from_ref(e) {
                *e = evidence.to_vec();
            }
        }
        Ok(())
    }

    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        Ok(MemoryKeyStore::records(self))
    }

    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        Ok(self
            .lock()
            .shreds
            .iter()
            .map(|(t, e)| (*t, vec![e.clone()]))
            .collect())
    }

    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        let mut m = self.lock();
        if let Some(r) = m.records.get_mut(tag) {
            if r.get(..8) == record.get(..8) {
                *r = record.to_vec();
            }
        }
        Ok(())
    }

    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<DekLookup, Error> {
        let m = self.lock();
        Ok(lookup(
            m.records.get(tag).cloned(),
            m.shreds.get(tag).map(Vec::as_slice),
            dek_id,
        ))
    }
}

#[cfg(feature = "redb")]
pub use self::redb_store::RedbKeyStore;

#[cfg(feature = "redb")]
mod redb_store {
    use std::path::Path;

    use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};

    use super::{
        id_of, lookup, shred_one, DekLookup, KeyStore, Seal, Shred, ShredRecord, SubjectTag,
    };
    use crate::error::Error;

    const TABLE: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("subject_keys");
    /// The records of shreds: subject tag -> its evidence (the DEK ids
    /// shredded, sealed under the KEK).
    const SHREDS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("subject_shreds");

    fn store_err<E: Into<redb::Error>>(what: &'static str) -> impl FnOnce(E) -> Error {
        move |e| Error::store(format!("redb: {what}"), e.into())
    }

    /// A key store in a redb file (the embedded default): each insert and
    /// removal is committed durably before it returns, a shred and the
    /// record of it in one transaction. One process at a time opens it
    /// (redb locks the file). [`open`](RedbKeyStore::open) opens a store
    /// that exists; [`create`](RedbKeyStore::create) makes a new one.
    pub struct RedbKeyStore {
        db: Database,
    }

    impl std::fmt::Debug for RedbKeyStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RedbKeyStore").finish_non_exhaustive()
        }
    }

    impl RedbKeyStore {
        /// Opens the key store at `path`, which must exist: a mistyped
        /// path is an error, never a new, empty store (whose every value
        /// would be unknown).
        ///
        /// # Errors
        /// [`Error::Store`] if the file does not exist, cannot be opened,
        /// is not a redb file or holds no key store.
        pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
            let path = path.as_ref();
            if !path.exists() {
                return Err(Error::store(
                    format!(
                        "redb: no key store at {} (make one with RedbKeyStore::create, or `shred create-key-store`)",
                        path.display()
                    ),
                    "not found",
                ));
            }
            let db = Database::open(path).map_err(store_err("open the key store"))?;
            let txn = db.begin_read().map_err(store_err("begin a read"))?;
            match txn.open_table(TABLE) {
                Ok(_) => {}
                Err(redb::TableError::TableDoesNotExist(_)) => {
                    return Err(Error::store(
                        "redb: the file holds no key store (no subject_keys table)",
                        "not a key store",
                    ))
                }
                Err(e) => return Err(store_err("open the table")(e)),
            }
            drop(txn);
            Ok(RedbKeyStore { db })
        }

        /// Makes a new key store at `path`: the file is created exclusively
        /// (an existing file is an error) and readable by its owner alone
        /// (0600 on Unix).
        ///
        /// # Errors
        /// [`Error::Store`] if the file exists or cannot be made.
        pub fn create(path: impl AsRef<Path>) -> Result<Self, Error> {
            let path = path.as_ref();
            let mut options = std::fs::OpenOptions::new();
            options.read(true).write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
            let file = options.open(path).map_err(|e| {
                Error::store(format!("redb: make the key store {}", path.display()), e)
            })?;
            let backend =
                redb::backends::FileBackend::new(file).map_err(store_err("make the key store"))?;
            let db = redb::Builder::new()
                .create_with_backend(backend)
                .map_err(store_err("make the key store"))?;
            let txn = db.begin_write().map_err(store_err("begin a write"))?;
            txn.open_table(TABLE).map_err(store_err("open the table"))?;
            txn.open_table(SHREDS)
                .map_err(store_err("open the table"))?;
            txn.commit().map_err(store_err("commit"))?;
            Ok(RedbKeyStore { db })
        }

        fn write<R>(
            &self,
            f: impl FnOnce(
                &mut redb::Table<'_, &[u8], &[u8]>,
                &mut redb::Table<'_, &[u8], &[u8]>,
            ) -> Result<R, redb::StorageError>,
        ) -> Result<R, Error> {
            // The default durability: committed to disk before it returns.
            let txn = self.db.begin_write().map_err(store_err("begin a write"))?;
            let r = {
                let mut table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
                let mut shreds = txn
                    .open_table(SHREDS)
                    .map_err(store_err("open the table"))?;
                f(&mut table, &mut shreds).map_err(store_err("write"))?
            };
            txn.commit().map_err(store_err("commit"))?;
            Ok(r)
        }

        /// `tag`'s evidence of its shreds.
        fn evidence(
            shreds: &impl redb::ReadableTable<&'static [u8], &'static [u8]>,
            tag: &SubjectTag,
        ) -> Result<Option<Vec<u8>>, redb::StorageError> {
            Ok(shreds.get(&tag[..])?.map(|v| v.value().to_vec()))
        }
    }

    impl KeyStore for RedbKeyStore {
        fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error> {
            let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
            let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
            let got = table.get(&tag[..]).map_err(store_err("read"))?;
            Ok(got.map(|v| v.value().to_vec()))
        }

        fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
            self.write(|t, _| {
                if let Some(old) = t.get(&tag[..])? {
                    return Ok(old.value().to_vec());
                }
                t.insert(&tag[..], record)?;
                Ok(record.to_vec())
            })
        }

        fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error> {
            let mut sealed = Ok(Shred::NoKey);
            self.write(|t, shreds| {
                let removed = t.get(&tag[..])?.map(|v| v.value().to_vec());
                let earlier = Self::evidence(shreds, tag)?;
                match shred_one(removed.as_deref(), earlier.as_deref(), seal) {
                    Ok((Some(e), found)) => {
                        t.remove(&tag[..])?;
                        shreds.insert(&tag[..], &e[..])?;
                        sealed = Ok(found);
                    }
                    Ok((None, found)) => sealed = Ok(found),
                    // Nothing written: the transaction commits no change.
                    Err(e) => sealed = Err(e),
                }
                Ok(())
            })?;
            sealed
        }

        fn reseal(&self, tag: &SubjectTag, was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error> {
            self.write(|_, shreds| {
                let same = shreds
                    .get(&tag[..])?
                    .is_some_and(|e| was == [e.value().to_vec()]);
                if same {
                    shreds.insert(&tag[..], evidence)?;
                }
                Ok(())
            })
        }

        fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
            let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
            let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
            let mut out = Vec::new();
            for entry in table.iter().map_err(store_err("iterate"))? {
                let (k, v) = entry.map_err(store_err("read an entry"))?;
                if let Ok(tag) = SubjectTag::try_from(k.value()) {
                    out.push((tag, v.value().to_vec()));
                }
            }
            Ok(out)
        }

        fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
            let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
            let table = match txn.open_table(SHREDS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(store_err("open the table")(e)),
            };
            let mut out = Vec::new();
            for entry in table.iter().map_err(store_err("iterate"))? {
                let (k, v) = entry.map_err(store_err("read an entry"))?;
                if let Ok(tag) = SubjectTag::try_from(k.value()) {
                    out.push((tag, vec![v.value().to_vec()]));
                }
            }
            Ok(out)
        }

        fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
            self.write(|t, _| {
                let same = t
                    .get(&tag[..])?
                    .is_some_and(|old| old.value().get(..8) == record.get(..8));
                if same {
                    t.insert(&tag[..], record)?;
                }
                Ok(())
            })
        }

        fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<DekLookup, Error> {
            let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
            let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
            let record = table
                .get(&tag[..])
                .map_err(store_err("read"))?
                .map(|v| v.value().to_vec());
            if record.as_deref().and_then(id_of) == Some(*dek_id) {
                return Ok(DekLookup::Found(record.unwrap_or_default()));
            }
            let evidence = match txn.open_table(SHREDS) {
                Ok(shreds) => Self::evidence(&shreds, tag).map_err(store_err("read"))?,
                Err(redb::TableError::TableDoesNotExist(_)) => None,
                Err(e) => return Err(store_err("open the table")(e)),
            };
            Ok(lookup(record, evidence.as_deref(), dek_id))
        }
    }
}
