//! Stores in Kafka Streams' layering: a bytes store, the encrypting bytes
//! wrapper, a typed store over any serde pair, and the changelog.
//!
//! The order that keeps ciphertext out of the changelog and tombstones in it:
//!
//! ```text
//! TypedStore<K, V, _>                      typed keys and values (serdes)
//!   EncryptedStore<_>                      bytes: encrypt values, None = delete
//!     ChangeLoggingStore<MemoryStore, _>   logs what is stored: ciphertext or a tombstone
//! ```
//!
//! (or a `TypedStore` with an encrypting value serde directly over a
//! `ChangeLoggingStore`: the same bytes reach the changelog).
//!
//! A delete is a tombstone all the way down: the changelog gets a record
//! with no value, never ciphertext, so compaction forgets the key and a
//! restore ([`restore`], [`restore_from`]) does not bring it back. The
//! changelog here is in memory ([`MemoryChangelog`]); a Kafka topic is
//! `kafka::KafkaChangelog` (feature `kafka`); a store on disk is
//! `RedbStore` (feature `redb`).
//!
//! ```
//! use tombstone_crypt::store::{
//!     compact, restore, ChangeLoggingStore, EncryptedStore, KeyValueStore, MemoryChangelog,
//!     MemoryStore,
//! };
//! use tombstone_crypt::Keyset;
//!
//! let logged = ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new());
//! let mut store = EncryptedStore::new(logged, "orders-store", Keyset::generate());
//! store.put(b"o-1", Some(b"book"))?;
//! store.put(b"o-1", None)?; // delete
//! store.flush()?;
//!
//! let log = store.inner().changelog().as_slice();
//! assert_eq!(log.last().unwrap().value, None); // a tombstone, not ciphertext
//! let mut fresh = MemoryStore::new();
//! restore(&mut fresh, &compact(log))?;
//! assert_eq!(fresh.get(b"o-1")?, None); // the delete survived
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

mod changelog;
mod encrypted;
mod memory;
#[cfg(feature = "redb")]
mod redb;
mod typed;

#[cfg(feature = "redb")]
pub use self::redb::RedbStore;
pub use changelog::{
    compact, restore, restore_from, ChangeLoggingStore, Changelog, MemoryChangelog, Record,
};
pub use encrypted::EncryptedStore;
pub use memory::MemoryStore;
pub use typed::TypedStore;

use crate::error::Error;

/// A key and its stored value, as iteration yields them.
pub type Entry = (Vec<u8>, Vec<u8>);

/// A bytes key-value store in Kafka Streams' bytes-store style: keys are
/// ordered byte strings, a `None` value is a delete.
///
/// Iteration (`all`, `range`) returns the entries in key order, collected
/// into a `Vec` (a snapshot: later writes do not change it).
pub trait KeyValueStore {
    /// The value stored under `key`, if any.
    ///
    /// # Errors
    /// The store failed, or (for an encrypting store) the value does not
    /// decrypt.
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;

    /// Stores `value` under `key`; `None` deletes the key.
    ///
    /// # Errors
    /// The store failed, or (for an encrypting store) encryption failed.
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error>;

    /// Deletes `key` and returns the value it had.
    ///
    /// # Errors
    /// The store failed. The delete is done before the old value is decoded:
    /// an encrypting store that cannot decrypt the old value still deletes
    /// the key, then reports the error.
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error>;

    /// Every entry, in key order.
    ///
    /// # Errors
    /// The store failed, or a value does not decrypt.
    fn all(&self) -> Result<Vec<Entry>, Error>;

    /// The entries with `from <= key <= to` (both inclusive, as in Kafka
    /// Streams), in key order. Empty if `from > to`.
    ///
    /// # Errors
    /// As [`all`](KeyValueStore::all).
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error>;

    /// Makes every write so far durable (a no-op for memory stores).
    ///
    /// # Errors
    /// The store failed.
    fn flush(&mut self) -> Result<(), Error>;

    /// Whether the store holds no key. The default reads every entry;
    /// stores override it with something cheaper.
    ///
    /// # Errors
    /// The store failed.
    fn is_empty(&self) -> Result<bool, Error> {
        Ok(self.all()?.is_empty())
    }

    /// Whether [`restore`] may write into this store: `true` for a bytes
    /// store. Layers that transform or log what they are given
    /// ([`EncryptedStore`], [`ChangeLoggingStore`]) say `false`: a changelog
    /// holds the bytes as stored beneath them, and replaying it through them
    /// would encrypt the ciphertext again or log every record twice.
    fn accepts_restore(&self) -> bool {
        true
    }
}

impl<S: KeyValueStore + ?Sized> KeyValueStore for Box<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        (**self).get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        (**self).put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        (**self).delete(key)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        (**self).all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        (**self).range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        (**self).flush()
    }
    fn is_empty(&self) -> Result<bool, Error> {
        (**self).is_empty()
    }
    fn accepts_restore(&self) -> bool {
        (**self).accepts_restore()
    }
}

impl<S: KeyValueStore + ?Sized> KeyValueStore for &mut S {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        (**self).get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        (**self).put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        (**self).delete(key)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        (**self).all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        (**self).range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        (**self).flush()
    }
    fn is_empty(&self) -> Result<bool, Error> {
        (**self).is_empty()
    }
    fn accepts_restore(&self) -> bool {
        (**self).accepts_restore()
    }
}
