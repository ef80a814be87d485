use super::{Entry, KeyValueStore};
use crate::context::{AadPolicy, Context};
use crate::envelope::{self, AadBuf};
use crate::error::Error;
use crate::keyset::Keyset;

/// The bytes-level encrypting wrapper (contract point 3): values are
/// encrypted with the store name and the record key as context; a `None`
/// value is a delete, never encrypted; a delete never writes a value.
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
    keyset: Keyset,
    aad: AadPolicy,
}

impl<S: KeyValueStore> EncryptedStore<S> {
    /// Wraps `inner`; `name` (the store name) and each record key are bound
    /// into the values' associated data.
    pub fn new(inner: S, name: impl Into<String>, keyset: Keyset) -> Self {
        EncryptedStore {
            inner,
            name: name.into(),
            keyset,
            aad: AadPolicy::TopicAndKey,
        }
    }

    /// The same store with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        EncryptedStore { aad, ..self }
    }

    /// Replaces the keyset (after a rotation); values under the old keys
    /// stay readable as long as the new keyset holds them.
    pub fn set_keyset(&mut self, keyset: Keyset) {
        self.keyset = keyset;
    }

    /// The keyset in use.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
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

    /// The associated data for `key`, built in `buf` (on the stack for
    /// short names and keys).
    fn aad<'b>(&self, buf: &'b mut AadBuf, key: &[u8]) -> Result<&'b [u8], Error> {
        buf.encode(self.aad, &Context::new(&self.name).with_key(key))
    }

    fn open(&self, key: &[u8], ct: &[u8]) -> Result<Vec<u8>, Error> {
        envelope::open(&self.keyset, self.aad(&mut AadBuf::new(), key)?, ct)
    }

    fn open_all(&self, entries: Vec<Entry>) -> Result<Vec<Entry>, Error> {
        entries
            .into_iter()
            .map(|(k, ct)| {
                let v = self.open(&k, &ct)?;
                Ok((k, v))
            })
            .collect()
    }
}

impl<S: KeyValueStore> KeyValueStore for EncryptedStore<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self.inner.get(key)? {
            Some(ct) => self.open(key, &ct).map(Some),
            None => Ok(None),
        }
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        match value {
            // A null is a delete: it goes down as a delete, never encrypted.
            None => self.inner.put(key, None),
            Some(v) => {
                let ct = envelope::seal(&self.keyset, self.aad(&mut AadBuf::new(), key)?, v)?;
                self.inner.put(key, Some(&ct))
            }
        }
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self.inner.delete(key)? {
            Some(ct) => self.open(key, &ct).map(Some),
            None => Ok(None),
        }
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
