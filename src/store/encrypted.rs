use super::{Entry, KeyValueStore};
use crate::codec::Bytes;
use crate::context::{AadPolicy, Context};
use crate::error::Error;
use crate::key_id::KeyId;
use crate::keyset::Keyset;
use crate::record_key::{KeyForms, WriteRule};
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
/// use tombstone_crypt::Keyset;
/// use tombstone_crypt::store::{EncryptedStore, KeyValueStore, MemoryStore};
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
    keys: Option<KeyEncryption>,
}

/// How record keys are encrypted, when they are.
#[derive(Debug)]
struct KeyEncryption {
    keyset: Keyset,
    /// The associated data of every key: the store name, `Topic` encoding.
    ad: Vec<u8>,
    /// The write rule (always the fan-out, but for the negative controls
    /// of the tests).
    rule: WriteRule,
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
            keys: None,
        }
    }

    /// The same store with its record keys encrypted deterministically under
    /// `keys` (an AES-SIV keyset, [`KeyTemplate::aes256_siv`]), bound to the
    /// store name. Values stay bound to their *plaintext* key, so a key can
    /// be re-encrypted under a new key without touching its value.
    ///
    /// While the key keyset has more than one enabled key, every logical key
    /// has one stored form per enabled key. Where several forms hold a
    /// value (a write interrupted between its records, a restore of a log
    /// not yet compacted), every reader takes the same one: the primary
    /// form's, else the newest older key's (later in the keyset: rotation
    /// adds keys at its end), so `get`, `all`, `range` and the value
    /// `delete` returns agree.
    ///
    /// Every write follows the write rule of
    /// [`KeyForms::writes`], as every other writer of a topic does: a
    /// delete (tombstone) for every older form first, then the value (or
    /// the delete) under the primary form. So after compaction at most one
    /// record per logical key is left, no old value survives under an old
    /// form, and a consumer replaying the changelog in order ends on the
    /// key's real state. The cost is one extra tombstone per older enabled
    /// key per write; disable an old key once every key has been rewritten
    /// under the new one, and it ends.
    ///
    /// `all` and `range` decrypt every stored key and return the entries in
    /// *plaintext* key order; `range` filters by plaintext key, so it reads
    /// the whole store (ciphertext order means nothing).
    ///
    /// # Errors
    /// [`Error::WrongKeyType`] if `keys` is not a deterministic keyset.
    ///
    /// [`KeyTemplate::aes256_siv`]: crate::KeyTemplate::aes256_siv
    ///
    /// ```
    /// use tombstone_crypt::{KeyTemplate, Keyset};
    /// use tombstone_crypt::store::{EncryptedStore, KeyValueStore, MemoryStore};
    ///
    /// let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
    /// let mut store = EncryptedStore::new(MemoryStore::new(), "users", Keyset::generate())
    ///     .with_encrypted_keys(keys.clone())?;
    /// store.put(b"alice@example.com", Some(b"v1"))?;
    /// assert!(store.inner().get(b"alice@example.com")?.is_none()); // no plaintext key below
    ///
    /// keys.rotate();
    /// store.set_key_keyset(keys)?;
    /// assert_eq!(store.get(b"alice@example.com")?, Some(b"v1".to_vec())); // old form found
    /// store.put(b"alice@example.com", Some(b"v2"))?; // new form written, old one deleted
    /// assert_eq!(store.inner().len(), 1);
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn with_encrypted_keys(mut self, keys: Keyset) -> Result<Self, Error> {
        self.set_key_keyset(keys)?;
        Ok(self)
    }

    /// Replaces the keyset that encrypts record keys (after a rotation).
    ///
    /// # Errors
    /// [`Error::WrongKeyType`] if `keys` is not a deterministic keyset.
    pub fn set_key_keyset(&mut self, keys: Keyset) -> Result<(), Error> {
        if !keys.is_deterministic() {
            return Err(Error::WrongKeyType {
                key_id: keys.primary(),
                operation: "encrypt record keys (an AES-SIV keyset is needed)",
            });
        }
        let ad = Context::new(&self.name).associated_data(AadPolicy::Topic)?;
        let rule = self.keys.as_ref().map_or(WriteRule::FanOut, |k| k.rule);
        self.keys = Some(KeyEncryption {
            keyset: keys,
            ad,
            rule,
        });
        Ok(())
    }

    /// The same store writing only the primary form of a key: the broken
    /// layer the tests use as their negative control (a delete after a
    /// rotation leaves the old form, and its value, alive). Test hook
    /// (feature `test-hooks`); never use it.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn without_key_fanout(self) -> Self {
        self.with_write_rule(WriteRule::PrimaryOnly)
    }

    /// The same store following `rule` for encrypted keys: the negative
    /// controls of the tests. Test hook (feature `test-hooks`); never use
    /// it.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn with_write_rule(mut self, rule: WriteRule) -> Self {
        if let Some(k) = &mut self.keys {
            k.rule = rule;
        }
        self
    }

    /// The forms of `key`, with the store's write rule.
    fn key_forms(&self, key: &[u8]) -> Result<KeyForms, Error> {
        match &self.keys {
            None => Ok(KeyForms::plain(key.to_vec())),
            Some(k) => Ok(KeyForms::encrypted_by(
                &k.keyset,
                key.to_vec(),
                k.keyset.deterministic_forms(key, &k.ad)?,
            )?
            .with_rule(k.rule)),
        }
    }

    /// The keyset that encrypts record keys, if they are encrypted.
    pub fn key_keyset(&self) -> Option<&Keyset> {
        self.keys.as_ref().map(|k| &k.keyset)
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

    /// Decrypts stored entries: keys (if encrypted) and values, in plaintext
    /// key order. Where one logical key is stored under several forms (a
    /// `put` interrupted between its writes), the reading order of `get`
    /// decides: the primary form, else the newest older key's (the key
    /// keyset's `recency`).
    fn open_entries(&self, entries: Vec<Entry>) -> Result<Vec<Entry>, Error> {
        let Some(k) = &self.keys else {
            return self.open_all(entries);
        };
        let mut by_key: std::collections::BTreeMap<Vec<u8>, (usize, Vec<u8>)> =
            std::collections::BTreeMap::new();
        for (stored, ct) in entries {
            let plain = k.keyset.decrypt_deterministically(&stored, &k.ad)?;
            let id = KeyId(u32::from_be_bytes([
                stored[1], stored[2], stored[3], stored[4],
            ]));
            let rank = k.keyset.recency(id);
            match by_key.get(&plain) {
                Some((r, _)) if *r <= rank => {}
                _ => {
                    by_key.insert(plain, (rank, ct));
                }
            }
        }
        self.open_all(by_key.into_iter().map(|(k, (_, ct))| (k, ct)).collect())
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
    /// The primary form's value, else the newest older key's form's: the
    /// order of [`KeyForms::all`].
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        for form in self.key_forms(key)?.all() {
            if let Some(ct) = self.inner.get(form)? {
                return self.open(key, Some(&ct));
            }
        }
        Ok(None)
    }

    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        // The serde wrapper's rule: a null stays a null, so a delete goes
        // down as a delete, never encrypted.
        let ct = self
            .ser
            .serialize(&Context::new(&self.name).with_key(key), value)?;
        // The write rule: older forms of the key deleted first (no old
        // value survives under them, and compaction leaves one record per
        // logical key), then the record under the primary form.
        for (form, value) in self.key_forms(key)?.writes(ct.as_deref()) {
            self.inner.put(form, value)?;
        }
        Ok(())
    }

    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let forms = self.key_forms(key)?;
        // What `get` saw: the primary form's value, else the newest older
        // form's (the tombstones go to the older forms newest first, as
        // `get` reads them).
        let (mut primary_old, mut older_old) = (None, None);
        for (form, _) in forms.writes(None) {
            let was = self.inner.delete(form)?;
            if form == forms.primary() {
                primary_old = was;
            } else if older_old.is_none() {
                older_old = was;
            }
        }
        self.open(key, primary_old.or(older_old).as_deref())
    }

    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.open_entries(self.inner.all()?)
    }

    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        if self.keys.is_none() {
            return self.open_all(self.inner.range(from, to)?);
        }
        if from > to {
            return Ok(Vec::new());
        }
        let mut all = self.open_entries(self.inner.all()?)?;
        all.retain(|(k, _)| from <= &k[..] && &k[..] <= to);
        Ok(all)
    }

    fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush()
    }

    fn is_empty(&self) -> Result<bool, Error> {
        self.inner.is_empty()
    }

    /// `false`: restore into the store beneath, which holds ciphertext.
    fn accepts_restore(&self) -> bool {
        false
    }
}
