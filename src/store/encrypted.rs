use super::{Entry, KeyValueStore};
use crate::codec::Bytes;
use crate::context::{AadPolicy, Context};
use crate::error::Error;
use crate::keyset::Keyset;
use crate::serde::{
    DecryptingDeserializer, Deserializer as _, EncryptingSerializer, Serializer as _,
};

/// The bytes-level encrypting wrapper (contract point 3): values are
/// encrypted with the store name and the record key as context; a `None`
/// value is a delete, never encrypted; a delete never writes a value.
///
/// It encrypts through [`EncryptingSerializer`] and decrypts through
/// [`DecryptingDeserializer`] over [`Bytes`]: the same path, the same bytes
/// and the same tombstone rule as the serde wrappers.
///
/// Keys are stored in the clear: the inner store orders, ranges and compacts
/// by them.
///
/// ```
/// use tombstone_crypt::{EncryptedStore, KeyValueStore, Keyset, MemoryStore};
///
/// let mut store = EncryptedStore::new(MemoryStore::new(), "events", Keyset::generate());
/// store.put(b"k", Some(b"secret"))?;
/// assert_ne!(store.inner().get(b"k")?.as_deref(), Some(&b"secret"[..])); // ciphertext below
/// assert_eq!(store.get(b"k")?, Some(b"secret".to_vec()));
/// store.put(b"k", None)?; // a delete
/// assert_eq!(store.inner().get(b"k")?, None); // gone below too
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Debug)]
pub struct EncryptedStore<S> {
    inner: S,
    name: String,
    ser: EncryptingSerializer<Bytes>,
    de: DecryptingDeserializer<Bytes>,
}

impl<S: KeyValueStore> EncryptedStore<S> {
    /// Wraps `inner`; `name` (the store name) and each record key are bound
    /// into the values' associated data.
    pub fn new(inner: S, name: impl Into<String>, keyset: Keyset) -> Self {
        EncryptedStore {
            inner,
            name: name.into(),
            ser: EncryptingSerializer::new(Bytes, keyset.clone()),
            de: DecryptingDeserializer::new(Bytes, keyset),
        }
    }

    /// The same store with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        EncryptedStore {
            ser: self.ser.with_aad(aad),
            de: self.de.with_aad(aad),
            ..self
        }
    }

    /// Replaces the keyset (after a rotation); values under the old keys
    /// stay readable as long as the new keyset holds them.
    pub fn set_keyset(&mut self, keyset: Keyset) {
        let aad = self.ser.aad_policy();
        self.ser = EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(aad);
        self.de = DecryptingDeserializer::new(Bytes, keyset).with_aad(aad);
    }

    /// The keyset in use.
    pub fn keyset(&self) -> &Keyset {
        self.ser.keyset()
    }

    /// The store name bound into the associated data.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The store underneath, holding ciphertext.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The store underneath, mutably (writes there bypass the encryption).
    pub fn inner_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Unwraps the store underneath.
    pub fn into_inner(self) -> S {
        self.inner
    }

    fn open(&self, key: &[u8], ct: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        self.de
            .deserialize(&Context::new(&self.name).with_key(key), ct)
    }

    fn open_all(&self, entries: Vec<Entry>) -> Result<Vec<Entry>, Error> {
        let ctx = Context::new(&self.name);
        entries
            .into_iter()
            .map(|(k, ct)| {
                let v = self.de.deserialize_owned(&ctx.with_key(&k), ct)?;
                Ok((k, v))
            })
            .collect()
    }
}

impl<S: KeyValueStore> KeyValueStore for EncryptedStore<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.open(key, self.inner.get(key)?.as_deref())
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        // The serde wrapper's rule: a null stays a null, so a delete goes
        // down as a delete, never encrypted.
        let ct = self
            .ser
            .serialize(&Context::new(&self.name).with_key(key), value)?;
        self.inner.put(key, ct.as_deref())
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let old = self.inner.delete(key)?;
        self.open(key, old.as_deref())
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.open_all(self.inner.all()?)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.open_all(self.inner.range(from, to)?)
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush()
    }
}
