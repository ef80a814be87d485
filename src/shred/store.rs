//! Where subject keys are kept: [`KeyStore`], in memory and in redb.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use super::SubjectTag;
use crate::error::Error;

/// A store of wrapped subject keys by subject tag: what
/// [`SubjectKeys`](super::SubjectKeys) keeps and shreds. Its records are
/// wrapped by the KEK and name subjects only by tag.
pub trait KeyStore: Send + Sync {
    /// The record stored for `tag`, if any.
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

    /// Removes `tag`'s record (nothing if there is none); returns once the
    /// removal is durable.
    ///
    /// # Errors
    /// The store's own failure: the record may still be there.
    fn remove(&self, tag: &SubjectTag) -> Result<(), Error>;

    /// Every record, with its tag (each of a tag's records where a store
    /// keeps several): what [`SubjectKeys::rewrap`](super::SubjectKeys::rewrap)
    /// wraps again.
    ///
    /// # Errors
    /// The store's own failure.
    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error>;

    /// Replaces `tag`'s record whose DEK id (first 8 bytes) is `record`'s
    /// with `record` (the same key wrapped again); durable when it returns.
    ///
    /// # Errors
    /// The store's own failure.
    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error>;

    /// The record of `tag` whose DEK id (its first 8 bytes) is `dek_id`,
    /// for reading a value written under it. The default is
    /// [`get`](KeyStore::get) if its id matches: a store that keeps one
    /// record per tag. A store where several writers can make a subject's
    /// DEK at once and keeps each (a shared topic) overrides it.
    ///
    /// # Errors
    /// The store's own failure.
    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.get(tag)?.filter(|r| r.get(..8) == Some(&dek_id[..])))
    }
}

/// A key store in this process's memory: for tests, and for subject keys
/// that need not outlive the process.
#[derive(Default)]
pub struct MemoryKeyStore {
    records: Mutex<HashMap<SubjectTag, Vec<u8>>>,
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

    /// How many records it holds (the naming key included).
    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Whether it holds no record.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    /// Every record's tag and bytes (what a backup of the store holds).
    pub fn records(&self) -> Vec<(SubjectTag, Vec<u8>)> {
        self.lock().iter().map(|(t, r)| (*t, r.clone())).collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<SubjectTag, Vec<u8>>> {
        self.records.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KeyStore for MemoryKeyStore {
    fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.lock().get(tag).cloned())
    }

    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        Ok(self
            .lock()
            .entry(*tag)
            .or_insert_with(|| record.to_vec())
            .clone())
    }

    fn remove(&self, tag: &SubjectTag) -> Result<(), Error> {
        self.lock().remove(tag);
        Ok(())
    }

    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        Ok(MemoryKeyStore::records(self))
    }

    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        let mut records = self.lock();
        if let Some(r) = records.get_mut(tag) {
            if r.get(..8) == record.get(..8) {
                *r = record.to_vec();
            }
        }
        Ok(())
    }
}

#[cfg(feature = "redb")]
pub use self::redb_store::RedbKeyStore;

#[cfg(feature = "redb")]
mod redb_store {
    use std::path::Path;

    use redb::{Database, ReadableDatabase as _, ReadableTable as _, TableDefinition};

    use super::{KeyStore, SubjectTag};
    use crate::error::Error;

    const TABLE: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("subject_keys");

    fn store_err<E: Into<redb::Error>>(what: &'static str) -> impl FnOnce(E) -> Error {
        move |e| Error::store(format!("redb: {what}"), e.into())
    }

    /// A key store in a redb file (the embedded default): each insert and
    /// removal is committed durably before it returns. One process at a
    /// time opens it (redb locks the file).
    pub struct RedbKeyStore {
        db: Database,
    }

    impl std::fmt::Debug for RedbKeyStore {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("RedbKeyStore").finish_non_exhaustive()
        }
    }

    impl RedbKeyStore {
        /// Opens the store at `path`, creating it if missing.
        ///
        /// # Errors
        /// [`Error::Store`] if the file cannot be opened or is not a redb
        /// file.
        pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
            let db = Database::create(path).map_err(store_err("open the key store"))?;
            let txn = db.begin_write().map_err(store_err("begin a write"))?;
            txn.open_table(TABLE).map_err(store_err("open the table"))?;
            txn.commit().map_err(store_err("commit"))?;
            Ok(RedbKeyStore { db })
        }

        fn write<R>(
            &self,
            f: impl FnOnce(&mut redb::Table<'_, &[u8], &[u8]>) -> Result<R, redb::StorageError>,
        ) -> Result<R, Error> {
            // The default durability: committed to disk before it returns.
            let txn = self.db.begin_write().map_err(store_err("begin a write"))?;
            let r = {
                let mut table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
                f(&mut table).map_err(store_err("write"))?
            };
            txn.commit().map_err(store_err("commit"))?;
            Ok(r)
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
            self.write(|t| {
                if let Some(old) = t.get(&tag[..])? {
                    return Ok(old.value().to_vec());
                }
                t.insert(&tag[..], record)?;
                Ok(record.to_vec())
            })
        }

        fn remove(&self, tag: &SubjectTag) -> Result<(), Error> {
            self.write(|t| t.remove(&tag[..]).map(|_| ()))
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

        fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
            self.write(|t| {
                let same = t
                    .get(&tag[..])?
                    .is_some_and(|old| old.value().get(..8) == record.get(..8));
                if same {
                    t.insert(&tag[..], record)?;
                }
                Ok(())
            })
        }
    }
}
