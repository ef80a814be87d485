use core::borrow::Borrow;
use core::fmt;

use super::KeyValueStore;
use crate::context::Context;
use crate::error::Error;
use crate::serde::{Deserializer, Serializer};

type SerFn<T> =
    Box<dyn Fn(&Context<'_>, Option<&T>) -> Result<Option<Vec<u8>>, Error> + Send + Sync>;

fn ser_fn<T, Q, S>(ser: S) -> SerFn<T>
where
    T: Borrow<Q>,
    Q: ?Sized,
    S: Serializer<Q> + Send + Sync + 'static,
{
    Box::new(move |ctx, value| ser.serialize(ctx, value.map(Borrow::borrow)))
}

/// A key-value store of typed keys and values over a bytes store, through
/// any serde pair (plain, or the encrypting wrappers).
///
/// As in Kafka Streams, [`delete`](TypedStore::delete) is
/// `put(key, None)`: the value serializer sees the `None`, and whatever it
/// returns is what the bytes store gets. With this crate's serdes that is a
/// `None`, so the bytes store deletes the key; a serde that turns the `None`
/// into bytes turns the delete into a write (the bug this crate exists to
/// prevent).
///
/// The value serde's [`Context`] is the store name and the serialized key.
///
/// ```
/// use tombstone_crypt::{Bincode, DecryptingDeserializer, EncryptingSerializer, Keyset, Utf8};
/// use tombstone_crypt::store::{MemoryStore, TypedStore};
///
/// let keyset = Keyset::generate();
/// let mut store = TypedStore::new(
///     MemoryStore::new(),
///     "orders",
///     (Utf8, Utf8),
///     EncryptingSerializer::new(Bincode::<u64>::new(), keyset.clone()),
///     DecryptingDeserializer::new(Bincode::<u64>::new(), keyset),
/// );
/// store.put(&"a".to_owned(), Some(&7))?;
/// assert_eq!(store.get(&"a".to_owned())?, Some(7));
/// store.delete(&"a".to_owned())?;
/// assert_eq!(store.get(&"a".to_owned())?, None);
/// assert!(store.inner().is_empty()); // the delete reached the bytes store
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct TypedStore<K, V, S> {
    store: S,
    name: String,
    key_ser: SerFn<K>,
    key_de: Box<dyn Deserializer<K> + Send + Sync>,
    value_ser: SerFn<V>,
    value_de: Box<dyn Deserializer<V> + Send + Sync>,
}

impl<K, V, S: fmt::Debug> fmt::Debug for TypedStore<K, V, S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedStore")
            .field("name", &self.name)
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

impl<K, V, S: KeyValueStore> TypedStore<K, V, S> {
    /// A typed store named `name` over `store`. `keys` is a
    /// `(serializer, deserializer)` pair for the keys (keys are stored as
    /// their serialized bytes, in the clear); `value_ser` and `value_de`
    /// encode the values. A serializer may take a borrowed form of the type
    /// (`Utf8` serializes a `String` key as `str`, `Bytes` a `Vec<u8>` value
    /// as `[u8]`).
    pub fn new<KQ, VQ, KS, KD, VS, VD>(
        store: S,
        name: impl Into<String>,
        keys: (KS, KD),
        value_ser: VS,
        value_de: VD,
    ) -> Self
    where
        K: Borrow<KQ>,
        V: Borrow<VQ>,
        KQ: ?Sized,
        VQ: ?Sized,
        KS: Serializer<KQ> + Send + Sync + 'static,
        KD: Deserializer<K> + Send + Sync + 'static,
        VS: Serializer<VQ> + Send + Sync + 'static,
        VD: Deserializer<V> + Send + Sync + 'static,
    {
        TypedStore {
            store,
            name: name.into(),
            key_ser: ser_fn(keys.0),
            key_de: Box::new(keys.1),
            value_ser: ser_fn(value_ser),
            value_de: Box::new(value_de),
        }
    }

    /// The store name (the value serde's topic).
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The bytes store underneath.
    pub fn inner(&self) -> &S {
        &self.store
    }

    /// The bytes store underneath, mutably.
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.store
    }

    /// Unwraps the bytes store underneath.
    pub fn into_inner(self) -> S {
        self.store
    }

    fn key_bytes(&self, key: &K) -> Result<Vec<u8>, Error> {
        (self.key_ser)(&Context::new(&self.name), Some(key))?.ok_or(Error::InnerReturnedNone)
    }

    fn decode_key(&self, bytes: &[u8]) -> Result<K, Error> {
        self.key_de
            .deserialize_slice(&Context::new(&self.name), bytes)
    }

    fn decode_value(&self, key: &[u8], bytes: &[u8]) -> Result<Option<V>, Error> {
        self.value_de
            .deserialize(&Context::new(&self.name).with_key(key), Some(bytes))
    }

    /// The value under `key`, as the value deserializer yields it.
    ///
    /// # Errors
    /// The store failed, or a serde failed (a value that does not decrypt).
    pub fn get(&self, key: &K) -> Result<Option<V>, Error> {
        let k = self.key_bytes(key)?;
        match self.store.get(&k)? {
            Some(bytes) => self.decode_value(&k, &bytes),
            None => Ok(None),
        }
    }

    /// Stores `value` under `key`. `None` is a delete, passed to the value
    /// serializer exactly as Kafka Streams does; the bytes it returns (a
    /// `None` for every serde of this crate) go to the bytes store.
    ///
    /// # Errors
    /// The store failed, or a serde failed; [`Error::InnerReturnedNone`] if
    /// the value serializer returned no bytes for a present value (a present
    /// value never silently becomes a delete).
    pub fn put(&mut self, key: &K, value: Option<&V>) -> Result<(), Error> {
        let k = self.key_bytes(key)?;
        let bytes = (self.value_ser)(&Context::new(&self.name).with_key(&k), value)?;
        if value.is_some() && bytes.is_none() {
            return Err(Error::InnerReturnedNone);
        }
        self.store.put(&k, bytes.as_deref())
    }

    /// Deletes `key`: exactly `put(key, None)`.
    ///
    /// # Errors
    /// As [`put`](TypedStore::put).
    pub fn delete(&mut self, key: &K) -> Result<(), Error> {
        self.put(key, None)
    }

    /// Every entry in key-bytes order. As with Kafka Streams' iterators, the
    /// value is what the value deserializer yields: with this crate's serdes
    /// `Some`, but for a value under a subject key whose subject was
    /// shredded ([`shred`](crate::shred)), which reads as a delete; any
    /// other `None` is a deleted key that a broken serde stored as a value.
    ///
    /// # Errors
    /// The store failed, or a serde failed.
    #[allow(clippy::type_complexity)]
    pub fn all(&self) -> Result<Vec<(K, Option<V>)>, Error> {
        self.decode_entries(self.store.all()?)
    }

    /// The entries with `from <= key <= to` (compared as serialized bytes),
    /// as [`all`](TypedStore::all) yields them.
    ///
    /// # Errors
    /// The store failed, or a serde failed.
    #[allow(clippy::type_complexity)]
    pub fn range(&self, from: &K, to: &K) -> Result<Vec<(K, Option<V>)>, Error> {
        let (f, t) = (self.key_bytes(from)?, self.key_bytes(to)?);
        self.decode_entries(self.store.range(&f, &t)?)
    }

    #[allow(clippy::type_complexity)]
    fn decode_entries(
        &self,
        entries: Vec<(Vec<u8>, Vec<u8>)>,
    ) -> Result<Vec<(K, Option<V>)>, Error> {
        entries
            .into_iter()
            .map(|(k, v)| Ok((self.decode_key(&k)?, self.decode_value(&k, &v)?)))
            .collect()
    }

    /// Flushes the bytes store.
    ///
    /// # Errors
    /// The store failed.
    pub fn flush(&mut self) -> Result<(), Error> {
        self.store.flush()
    }
}
