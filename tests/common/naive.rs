//! The deliberately broken layers: the failure this crate exists to prevent.
//!
//! `NaiveSerde` encrypts a tombstone (`None`) as the ciphertext of an empty
//! payload, and decrypts an empty payload back to `None`, as the reported
//! encryption library did. `NaiveBytesStore` does the same at the bytes level.
//! Used as the negative control of the property suite and in the demo. Never
//! use them for anything else.
#![allow(dead_code)]

use tombstone_crypt::store::{Entry, KeyValueStore};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, Keyset,
    Serializer,
};

/// A value serde that turns every delete into a write.
#[derive(Clone, Debug)]
pub struct NaiveSerde<C> {
    inner: C,
    ser: EncryptingSerializer<Bytes>,
    de: DecryptingDeserializer<Bytes>,
}

impl<C> NaiveSerde<C> {
    /// Wraps `inner` with the broken encryption.
    pub fn new(inner: C, keyset: Keyset) -> Self {
        NaiveSerde {
            inner,
            ser: EncryptingSerializer::new(Bytes, keyset.clone()),
            de: DecryptingDeserializer::new(Bytes, keyset),
        }
    }
}

// The traits provide `serialize` and `deserialize`, where the tombstone rule
// lives; a codec implements only the present-value methods. Overriding the
// provided methods, as below, is the only way to break the rule: this
// negative control has to do it on purpose.
impl<T: ?Sized, C: Serializer<T>> Serializer<T> for NaiveSerde<C> {
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut plain = Vec::new();
        self.inner.serialize_into(ctx, value, &mut plain)?;
        self.ser.serialize_into(ctx, &plain[..], out)
    }

    fn serialize(&self, ctx: &Context<'_>, value: Option<&T>) -> Result<Option<Vec<u8>>, Error> {
        // The bug: "encrypt the empty payload" for a null.
        let plain = match value {
            Some(v) => self.inner.serialize(ctx, Some(v))?.unwrap_or_default(),
            None => Vec::new(),
        };
        self.ser.serialize(ctx, Some(&plain[..]))
    }
}

impl<T, C: Deserializer<T>> Deserializer<T> for NaiveSerde<C> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        let plain = self.de.deserialize_owned(ctx, data)?;
        self.inner.deserialize_owned(ctx, plain)
    }

    fn deserialize(&self, ctx: &Context<'_>, data: Option<&[u8]>) -> Result<Option<T>, Error> {
        match self.de.deserialize(ctx, data)? {
            // The other half of the bug: an empty payload reads back as null.
            Some(plain) if plain.is_empty() => Ok(None),
            Some(plain) => self.inner.deserialize(ctx, Some(&plain)),
            None => Ok(None),
        }
    }
}

/// A bytes store wrapper with the same bug: `put(key, None)` stores the
/// ciphertext of an empty payload.
#[derive(Debug)]
pub struct NaiveBytesStore<S> {
    pub inner: S,
    name: String,
    serde: NaiveSerde<Bytes>,
}

impl<S> NaiveBytesStore<S> {
    /// Wraps `inner` with the broken encryption.
    pub fn new(inner: S, name: &str, keyset: Keyset) -> Self {
        NaiveBytesStore {
            inner,
            name: name.to_owned(),
            serde: NaiveSerde::new(Bytes, keyset),
        }
    }

    fn decode(&self, key: &[u8], ct: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.serde
            .deserialize(&Context::new(&self.name).with_key(key), Some(ct))
    }
}

impl<S: KeyValueStore> KeyValueStore for NaiveBytesStore<S> {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        match self.inner.get(key)? {
            Some(ct) => self.decode(key, &ct),
            None => Ok(None),
        }
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        let ct = self
            .serde
            .serialize(&Context::new(&self.name).with_key(key), value)?;
        self.inner.put(key, ct.as_deref())
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let old = self.get(key)?;
        self.put(key, None)?;
        Ok(old)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        // A null value shows up as an empty one: the key is still there.
        self.inner
            .all()?
            .into_iter()
            .map(|(k, ct)| Ok((k.clone(), self.decode(&k, &ct)?.unwrap_or_default())))
            .collect()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.inner
            .range(from, to)?
            .into_iter()
            .map(|(k, ct)| Ok((k.clone(), self.decode(&k, &ct)?.unwrap_or_default())))
            .collect()
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.inner.flush()
    }
}
