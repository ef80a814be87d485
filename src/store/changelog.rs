use std::collections::HashMap;

use super::{Entry, KeyValueStore};
use crate::error::Error;

/// One changelog record: a key and its new value, `None` being a tombstone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Position in the changelog (Kafka's offset), increasing.
    pub offset: u64,
    /// The record key.
    pub key: Vec<u8>,
    /// The value as stored (ciphertext under an encrypting layer), or `None`
    /// for a tombstone.
    pub value: Option<Vec<u8>>,
}

/// An append-only log of `(key, Option<value>)` records: what a Kafka
/// Streams changelog topic holds.
///
/// A Kafka topic implements it (the `kafka` feature); [`MemoryChangelog`]
/// does in memory, with Kafka's compaction rule.
pub trait Changelog {
    /// Appends a record (`None`: a tombstone). It may only be queued: it is
    /// durable and visible to [`records`](Changelog::records) after
    /// [`flush`](Changelog::flush).
    ///
    /// # Errors
    /// [`Error::Changelog`] if the record could not be appended.
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error>;

    /// Every record from the beginning to the current end, in offset order.
    ///
    /// # Errors
    /// [`Error::Changelog`] if the log could not be read.
    fn records(&self) -> Result<Vec<Record>, Error>;

    /// Makes every appended record durable and visible to readers.
    ///
    /// # Errors
    /// [`Error::Changelog`] if that failed.
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

/// Kafka's log compaction rule applied to `records`: the newest record per
/// key is kept (at its own offset, in offset order) and tombstones are
/// dropped (as they are once `delete.retention.ms` has passed).
///
/// ```
/// use tombstone_crypt::{compact, Record};
///
/// let r = |offset, key: &[u8], value: Option<&[u8]>| Record {
///     offset,
///     key: key.to_vec(),
///     value: value.map(<[u8]>::to_vec),
/// };
/// let log = [r(0, b"a", Some(b"1")), r(1, b"b", Some(b"2")), r(2, b"a", None)];
/// assert_eq!(compact(&log), [r(1, b"b", Some(b"2"))]);
/// ```
pub fn compact(records: &[Record]) -> Vec<Record> {
    let mut newest: HashMap<&[u8], usize> = HashMap::with_capacity(records.len());
    for (i, r) in records.iter().enumerate() {
        newest.insert(&r.key, i);
    }
    records
        .iter()
        .enumerate()
        .filter(|(i, r)| newest.get(&r.key[..]) == Some(i) && r.value.is_some())
        .map(|(_, r)| r.clone())
        .collect()
}

/// Replays `records` in order into `store`: each value is put, each
/// tombstone deletes. Restoring into an empty store rebuilds exactly the
/// state the log describes. Returns how many records were replayed.
///
/// Restore into the bytes store *beneath* any encrypting layer: the log
/// holds the stored bytes (ciphertext), which go back unchanged.
///
/// # Errors
/// The store failed.
pub fn restore<S: KeyValueStore + ?Sized>(
    store: &mut S,
    records: &[Record],
) -> Result<usize, Error> {
    for r in records {
        store.put(&r.key, r.value.as_deref())?;
    }
    store.flush()?;
    Ok(records.len())
}

/// An in-memory changelog.
#[derive(Clone, Debug, Default)]
pub struct MemoryChangelog {
    records: Vec<Record>,
    next: u64,
}

impl MemoryChangelog {
    /// An empty changelog.
    pub fn new() -> Self {
        Self::default()
    }

    /// Compacts the log in place with Kafka's rule (see [`compact`]).
    pub fn compact(&mut self) {
        self.records = compact(&self.records);
    }

    /// The records, in offset order.
    pub fn as_slice(&self) -> &[Record] {
        &self.records
    }
}

impl Changelog for MemoryChangelog {
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        let offset = self.next;
        self.next += 1;
        self.records.push(Record {
            offset,
            key: key.to_vec(),
            value: value.map(<[u8]>::to_vec),
        });
        Ok(())
    }

    fn records(&self) -> Result<Vec<Record>, Error> {
        Ok(self.records.clone())
    }
}

/// A bytes store that appends every put and delete to a changelog, after
/// applying it to the store underneath (Kafka Streams'
/// `ChangeLoggingKeyValueBytesStore`). A `None` is logged as a tombstone.
#[derive(Debug)]
pub struct ChangeLoggingStore<S, C> {
    inner: S,
    log: C,
}

impl<S: KeyValueStore, C: Changelog> ChangeLoggingStore<S, C> {
    /// Logs every change made to `inner` into `log`.
    pub fn new(inner: S, log: C) -> Self {
        ChangeLoggingStore { inner, log }
    }

    /// The changelog.
    pub fn changelog(&self) -> &C {
        &self.log
    }

    /// The changelog, mutably (for compaction).
    pub fn changelog_mut(&mut self) -> &mut C {
        &mut self.log
    }

    /// The store underneath.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps into the store and the changelog.
    pub fn into_parts(self) -> (S, C) {
        (self.inner, self.log)
    }
}

impl<S: KeyValueStore, C: Changelog> KeyValueStore for ChangeLoggingStore<S, C> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(key)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.inner.put(key, value)?;
        self.log.append(key, value)?;
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let old = self.inner.delete(key)?;
        self.log.append(key, None)?;
        Ok(old)
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.inner.all()
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.inner.range(from, to)
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush()?;
        self.log.flush()
    }
}
