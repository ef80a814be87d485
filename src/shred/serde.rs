//! [`SubjectEncrypting`]: a serde wrapper whose values are sealed under
//! their subject's key.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::context::{AadBuf, AadPolicy, Context};
use crate::error::Error;
use crate::serde::{Deserializer, Serializer};

use super::format::*;
use super::keys::*;

/// What names a value's subject when it is written.
type SubjectFn<T> = dyn Fn(&Context<'_>, &T) -> Option<Vec<u8>> + Send + Sync;

/// Values of type `T` through the codec `C`, each encrypted under its
/// subject's key ([`SubjectKeys`]): a [`Serializer`] and [`Deserializer`]
/// pair for the Kafka clients and stores. The subject is the record key's
/// plaintext unless [`with_subject`](SubjectEncrypting::with_subject)
/// names it; values are bound to the topic and the record key.
pub struct SubjectEncrypting<C, T: ?Sized> {
    keys: Arc<SubjectKeys>,
    inner: C,
    subject: Option<Arc<SubjectFn<T>>>,
    _t: PhantomData<fn(&T)>,
}

impl<C: Clone, T: ?Sized> Clone for SubjectEncrypting<C, T> {
    fn clone(&self) -> Self {
        SubjectEncrypting {
            keys: Arc::clone(&self.keys),
            inner: self.inner.clone(),
            subject: self.subject.clone(),
            _t: PhantomData,
        }
    }
}

impl<C, T: ?Sized> std::fmt::Debug for SubjectEncrypting<C, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SubjectEncrypting")
            .field("keys", &self.keys)
            .finish_non_exhaustive()
    }
}

impl<C, T: ?Sized> SubjectEncrypting<C, T> {
    /// Values through `inner`, under the subject keys `keys`; the subject
    /// is the record key.
    pub fn new(keys: Arc<SubjectKeys>, inner: C) -> Self {
        SubjectEncrypting {
            keys,
            inner,
            subject: None,
            _t: PhantomData,
        }
    }

    /// The subject is what `subject` takes from the record's context and
    /// value (`None`: the record key). Reading needs no closure: a value
    /// carries its subject tag. With the subject the record key (no
    /// closure), a shredded subject's value read under another record key
    /// is an error, not a delete (its subject tag is not that key's); with
    /// a closure the reader cannot tell the value's subject from its
    /// record, so such a copy reads as a delete.
    #[must_use]
    pub fn with_subject(
        self,
        subject: impl Fn(&Context<'_>, &T) -> Option<Vec<u8>> + Send + Sync + 'static,
    ) -> Self {
        SubjectEncrypting {
            subject: Some(Arc::new(subject)),
            ..self
        }
    }

    /// The subject keys.
    pub fn keys(&self) -> &Arc<SubjectKeys> {
        &self.keys
    }
}

impl<T: ?Sized, C: Serializer<T>> Serializer<T> for SubjectEncrypting<C, T> {
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let named = self.subject.as_ref().and_then(|f| f(ctx, value));
        let subject = match &named {
            Some(s) => &s[..],
            None => ctx.key().ok_or_else(|| Error::MissingRecordKey)?,
        };
        let mut ad = AadBuf::new();
        let ad = ad.encode(AadPolicy::TopicAndKey, ctx)?;
        let hint = self.inner.size_hint(value).unwrap_or(0);
        self.keys.seal_into(subject, ad, out, hint, |out| {
            self.inner.serialize_into(ctx, value, out)
        })
    }

    fn size_hint(&self, value: &T) -> Option<usize> {
        self.inner
            .size_hint(value)
            .map(|n| n.saturating_add(OVERHEAD))
    }
}

// Read into any type the codec reads (a value carries its subject tag:
// no closure is needed), e.g. `String` for values written from `str`.
impl<T: ?Sized, U, C: Deserializer<U>> Deserializer<U> for SubjectEncrypting<C, T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<U, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<U, Error> {
        let mut ad = AadBuf::new();
        let ad = ad.encode(AadPolicy::TopicAndKey, ctx)?;
        match self.keys.open_value(ad, data)? {
            Some(mut plain) => self
                .inner
                .deserialize_owned(ctx, std::mem::take(&mut *plain)),
            None => {
                // A shred's record covers the value's DEK, so its GCM tag
                // cannot be checked against its record. Its subject tag
                // can: with the subject the record key, a value copied (or
                // forged) under another key names another subject, and is
                // an error, never a delete of that key.
                if self.subject.is_none() {
                    let key = ctx.key().ok_or(Error::MissingRecordKey)?;
                    let named = data.get(1..=TAG).ok_or(Error::Decryption)?;
                    if named != self.keys.tag_uncached(key)? {
                        return Err(Error::Decryption);
                    }
                }
                Err(Error::Shredded {
                    as_delete: !self.keys.strict,
                })
            }
        }
    }
}
