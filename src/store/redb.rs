use std::path::Path;

use redb::{
    Database, Durability, ReadableDatabase as _, ReadableTable as _, ReadableTableMetadata as _,
    TableDefinition,
};

use super::{Entry, KeyValueStore};
use crate::error::Error;

const TABLE: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("kv");

/// A persistent bytes store on redb, an embedded pure-Rust database (the
/// default feature `redb`).
///
/// Each write is its own transaction, committed without an fsync;
/// [`flush`](KeyValueStore::flush) (and dropping the store) makes all writes
/// so far durable, as flushing a Kafka Streams store does.
///
/// ```
/// use tombstone_crypt::store::{KeyValueStore, RedbStore};
///
/// let dir = std::env::temp_dir().join(format!("tc-doc-{}", std::process::id()));
/// std::fs::create_dir_all(&dir).map_err(|e| tombstone_crypt::Error::store("create dir", e))?;
/// let path = dir.join("store.redb");
/// {
///     let mut store = RedbStore::open(&path)?;
///     store.put(b"k", Some(b"v"))?;
///     store.flush()?;
/// }
/// assert_eq!(RedbStore::open(&path)?.get(b"k")?, Some(b"v".to_vec()));
/// # std::fs::remove_dir_all(&dir).ok();
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct RedbStore {
    db: Database,
}

impl core::fmt::Debug for RedbStore {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("RedbStore").finish_non_exhaustive()
    }
}

/// A redb error, kept as the cause; `what` says what the store was doing.
fn store_err<E: Into<redb::Error>>(what: &'static str) -> impl FnOnce(E) -> Error {
    move |e| Error::store(format!("redb: {what}"), e.into())
}

impl RedbStore {
    /// Opens the store at `path`, creating it if missing.
    ///
    /// # Errors
    /// [`Error::Store`] if the file cannot be opened or is not a redb store.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, Error> {
        let db = Database::create(path).map_err(store_err("open the database"))?;
        let txn = db.begin_write().map_err(store_err("begin a write"))?;
        txn.open_table(TABLE).map_err(store_err("open the table"))?;
        txn.commit().map_err(store_err("commit"))?;
        Ok(RedbStore { db })
    }

    fn write<R>(
        &self,
        f: impl FnOnce(&mut redb::Table<'_, &[u8], &[u8]>) -> Result<R, redb::StorageError>,
    ) -> Result<R, Error> {
        let mut txn = self.db.begin_write().map_err(store_err("begin a write"))?;
        txn.set_durability(Durability::None)
            .map_err(store_err("set durability"))?;
        let r = {
            let mut table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
            f(&mut table).map_err(store_err("write"))?
        };
        txn.commit().map_err(store_err("commit"))?;
        Ok(r)
    }

    fn collect(&self, range: Option<(&[u8], &[u8])>) -> Result<Vec<Entry>, Error> {
        let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
        let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
        let iter = match range {
            None => table.iter().map_err(store_err("iterate"))?,
            Some((from, to)) => table
                .range::<&[u8]>(from..=to)
                .map_err(store_err("iterate"))?,
        };
        iter.map(|r| {
            r.map(|(k, v)| (k.value().to_vec(), v.value().to_vec()))
                .map_err(store_err("read an entry"))
        })
        .collect()
    }
}

impl KeyValueStore for RedbStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
        let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
        Ok(table
            .get(key)
            .map_err(store_err("read"))?
            .map(|v| v.value().to_vec()))
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.write(|t| {
            match value {
                Some(v) => {
                    t.insert(key, v)?;
                }
                None => {
                    t.remove(key)?;
                }
            }
            Ok(())
        })
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.write(|t| Ok(t.remove(key)?.map(|v| v.value().to_vec())))
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.collect(None)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        if from > to {
            return Ok(Vec::new());
        }
        self.collect(Some((from, to)))
    }

    fn flush(&mut self) -> Result<(), Error> {
        let txn = self.db.begin_write().map_err(store_err("begin a write"))?;
        txn.commit().map_err(store_err("commit"))
    }

    fn is_empty(&self) -> Result<bool, Error> {
        let txn = self.db.begin_read().map_err(store_err("begin a read"))?;
        let table = txn.open_table(TABLE).map_err(store_err("open the table"))?;
        table.is_empty().map_err(store_err("read"))
    }
}

impl Drop for RedbStore {
    fn drop(&mut self) {
        // Best effort: make the non-durable commits durable.
        let _ = self.flush();
    }
}
