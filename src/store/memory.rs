use std::collections::BTreeMap;

use super::{Entry, KeyValueStore};
use crate::error::Error;

/// An in-memory bytes store on a `BTreeMap`.
///
/// ```
/// use tombstone_crypt::store::{KeyValueStore, MemoryStore};
///
/// let mut store = MemoryStore::new();
/// store.put(b"a", Some(b"1"))?;
/// store.put(b"a", None)?; // None deletes
/// assert_eq!(store.get(b"a")?, None);
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Debug, Default)]
pub struct MemoryStore {
    map: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// How many keys the store holds.
    pub fn len(&self) -> usize {
        self.map.len()
    }

    /// Whether the store holds no key.
    pub fn is_empty(&self) -> bool {
        self.map.is_empty()
    }

    /// Removes every key.
    pub fn clear(&mut self) {
        self.map.clear();
    }
}

impl KeyValueStore for MemoryStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.map.get(key).cloned())
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        match value {
            Some(v) => {
                self.map.insert(key.to_vec(), v.to_vec());
            }
            None => {
                self.map.remove(key);
            }
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.map.remove(key))
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        Ok(self
            .map
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        if from > to {
            return Ok(Vec::new());
        }
        Ok(self
            .map
            .range::<[u8], _>((
                core::ops::Bound::Included(from),
                core::ops::Bound::Included(to),
            ))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect())
    }

    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }

    fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.map.is_empty())
    }
}
