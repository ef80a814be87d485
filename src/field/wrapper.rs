//! [`FieldEncrypting`]: the record's serde wrapper that puts the keys and
//! the record's [`Context`] in scope for its fields, and [`FieldFormat`],
//! the serde formats it writes.

use std::sync::atomic::{AtomicUsize, Ordering};

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::path::{Tracked, TrackedRef};
use super::scope::{self, FieldKeys};
use crate::codec::{Bincode, Json};
use crate::context::{AadPolicy, Context};
use crate::error::Error;
use crate::keyset::Keyset;
use crate::serde::{Deserializer, Serializer};
use crate::stats::Event;
use crate::work::BlockingWork;

/// A serde format a record with encrypted fields is written in:
/// [`Json`] and [`Bincode`] here; implement it to add another (CBOR,
/// MessagePack). The value handed to it is the record wrapped so that its
/// fields find their path: pass it to the format's serde entry points as
/// it is.
pub trait FieldFormat {
    /// The record type (`Order` for `Json<Order>`).
    type Value;

    /// Appends `value` to `out`.
    ///
    /// # Errors
    /// The format failed, or a field did (the wrapper then reports the
    /// field's own error, with its path).
    fn encode<T: ?Sized + Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), Error>;

    /// Reads a `T` from all of `data`.
    ///
    /// # Errors
    /// As [`encode`](FieldFormat::encode).
    fn decode<T: DeserializeOwned>(&self, data: &[u8]) -> Result<T, Error>;

    /// Whether an encoding of `len` bytes always decodes (bincode's decode
    /// limit counts claims, not bytes: a long one is decoded once to
    /// check). `true` by default.
    fn always_decodes(&self, len: usize) -> bool {
        let _ = len;
        true
    }
}

impl<X> FieldFormat for Json<X> {
    type Value = X;

    fn encode<T: ?Sized + Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        crate::codec::json_encode(value, out)
    }

    fn decode<T: DeserializeOwned>(&self, data: &[u8]) -> Result<T, Error> {
        crate::codec::json_decode(data)
    }
}

impl<X> FieldFormat for Bincode<X> {
    type Value = X;

    fn encode<T: ?Sized + Serialize>(&self, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        crate::codec::bincode_encode(value, out).map(|_| ())
    }

    fn decode<T: DeserializeOwned>(&self, data: &[u8]) -> Result<T, Error> {
        crate::codec::bincode_decode(data)
    }

    fn always_decodes(&self, len: usize) -> bool {
        crate::codec::bincode_always_decodes(len)
    }
}

/// Writes and reads records whose fields are [`Encrypted`](super::Encrypted)
/// (or [`Deterministic`](super::Deterministic), or plain fields with
/// [`encrypted`](super::encrypted)): for the duration of each call it puts
/// its keys, the record's [`Context`] and each value's path in scope for
/// the fields (see the [module](super) for why a scope).
///
/// A tombstone (`None`) is `None` both ways, with no field touched, as for
/// every serializer here; a record whose fields are all `None` is a
/// present record. Built with [`sealed`](FieldEncrypting::sealed), it holds
/// no keys: it reads every encrypted field as sealed ciphertext and writes
/// sealed fields back byte for byte, and refuses to write an open one.
///
/// ```
/// use serde::{Deserialize, Serialize};
/// use tombstone_crypt::field::{Encrypted, FieldEncrypting};
/// use tombstone_crypt::{Context, Deserializer as _, Json, Keyset, Serializer as _};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Payment {
///     order: u64,
///     card: Encrypted<String>,
///     note: Option<Encrypted<String>>,
/// }
///
/// let keyset = Keyset::generate();
/// let codec = FieldEncrypting::new(Json::<Payment>::new(), keyset);
/// let ctx = Context::new("payments").with_key(b"order-17");
/// let p = Payment { order: 17, card: Encrypted::new("4111 1111".into()), note: None };
///
/// let bytes = codec.serialize(&ctx, Some(&p))?.unwrap();
/// let text = std::str::from_utf8(&bytes).unwrap();
/// assert!(text.starts_with(r#"{"order":17,"card":"A"#)); // base64 of 0x01 | key id | ...
/// assert!(text.ends_with(r#","note":null}"#)); // a null field stays null
/// assert_eq!(codec.deserialize(&ctx, Some(&bytes))?, Some(p));
/// assert_eq!(codec.serialize(&ctx, None)?, None); // a tombstone stays one
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct FieldEncrypting<F> {
    format: F,
    values: Option<Keyset>,
    deterministic: Option<Keyset>,
    aad: AadPolicy,
    deterministic_aad: AadPolicy,
    binding_name: Option<String>,
    last_len: LastLen,
}

/// The length of the last record written, as the next one's allocation
/// hint (records of a topic are mostly of one size; the hint is capped
/// where it is used, and a wrong one costs only a reallocation).
#[derive(Debug, Default)]
struct LastLen(AtomicUsize);

impl Clone for LastLen {
    fn clone(&self) -> Self {
        LastLen(AtomicUsize::new(self.0.load(Ordering::Relaxed)))
    }
}

impl<F> FieldEncrypting<F> {
    /// Records in `format` whose encrypted fields use `keyset` (its
    /// primary key encrypts; every enabled key decrypts), bound to topic,
    /// record key and path ([`AadPolicy::TopicAndKey`]).
    pub fn new(format: F, keyset: Keyset) -> Self {
        FieldEncrypting {
            format,
            values: Some(keyset),
            deterministic: None,
            aad: AadPolicy::TopicAndKey,
            deterministic_aad: AadPolicy::Topic,
            binding_name: None,
            last_len: LastLen::default(),
        }
    }

    /// Records in `format` read and written by a service that holds no
    /// keys: encrypted fields stay sealed, and pass through unchanged.
    pub fn sealed(format: F) -> Self {
        FieldEncrypting {
            format,
            values: None,
            deterministic: None,
            aad: AadPolicy::TopicAndKey,
            deterministic_aad: AadPolicy::Topic,
            binding_name: None,
            last_len: LastLen::default(),
        }
    }

    /// The keyset of [`Deterministic`](super::Deterministic) fields (an
    /// AES-SIV keyset: [`KeyTemplate::aes256_siv`](crate::KeyTemplate::aes256_siv)).
    #[must_use]
    pub fn with_deterministic(self, keyset: Keyset) -> Self {
        FieldEncrypting {
            deterministic: Some(keyset),
            ..self
        }
    }

    /// What randomized fields are bound to besides their path (default
    /// [`AadPolicy::TopicAndKey`]).
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        FieldEncrypting { aad, ..self }
    }

    /// What deterministic fields are bound to besides their path (default
    /// [`AadPolicy::Topic`]: equal values of one field are equal across the
    /// records of a topic, which is what lookups and joins need;
    /// [`AadPolicy::None`] makes them equal across topics).
    #[must_use]
    pub fn with_deterministic_aad(self, aad: AadPolicy) -> Self {
        FieldEncrypting {
            deterministic_aad: aad,
            ..self
        }
    }

    /// Binds fields to `name` instead of the record's topic (the record
    /// key and the path stay bound): for records that a pipeline moves
    /// from topic to topic (`orders` → `orders-routed`) and that every
    /// stage reads and writes with the same name. Without it a field read
    /// from another topic than the one it was written to does not decrypt.
    #[must_use]
    pub fn with_binding_name(self, name: impl Into<String>) -> Self {
        FieldEncrypting {
            binding_name: Some(name.into()),
            ..self
        }
    }

    /// The keyset of randomized fields, `None` if sealed.
    pub fn keyset(&self) -> Option<&Keyset> {
        self.values.as_ref()
    }

    /// The format.
    pub fn format(&self) -> &F {
        &self.format
    }

    fn keys(&self, ctx: &Context<'_>) -> Result<Option<FieldKeys>, Error> {
        let renamed;
        let ctx = match (&self.binding_name, ctx.key()) {
            (None, _) => ctx,
            (Some(name), key) => {
                renamed = match key {
                    Some(k) => Context::new(name).with_key(k),
                    None => Context::new(name),
                };
                &renamed
            }
        };
        let keys = match &self.values {
            None => None,
            Some(values) => {
                let mut record_aad = scope::spare_bytes();
                let mut deterministic_aad = scope::spare_bytes();
                crate::context::aad_into(self.aad, ctx, &mut record_aad)?;
                if self.deterministic.is_some() {
                    crate::context::aad_into(self.deterministic_aad, ctx, &mut deterministic_aad)?;
                }
                Some(FieldKeys {
                    values: values.clone(),
                    deterministic: self.deterministic.clone(),
                    record_aad,
                    deterministic_aad,
                })
            }
        };
        Ok(keys)
    }

    fn scope(&self, ctx: &Context<'_>) -> Result<scope::ScopeGuard, Error> {
        Ok(scope::enter(self.keys(ctx)?))
    }

    fn count_tombstone(&self, event: Event) {
        if let Some(k) = &self.values {
            k.counters().bump(event);
        }
    }
}

impl<T, F> Serializer<T> for FieldEncrypting<F>
where
    T: Serialize + DeserializeOwned,
    F: FieldFormat<Value = T>,
{
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let start = out.len();
        let guard = self.scope(ctx)?;
        let mut result = self.format.encode(&TrackedRef(value), out);
        if result.is_ok() && !self.format.always_decodes(out.len() - start) {
            // Read back once, in this scope, to refuse what would not.
            result = self.format.decode::<Tracked<T>>(&out[start..]).map(|_| ());
        }
        match result {
            Ok(()) => {
                self.last_len.0.store(out.len() - start, Ordering::Relaxed);
                Ok(())
            }
            Err(e) => {
                out.truncate(start);
                Err(guard.take_error().unwrap_or(e))
            }
        }
    }

    fn tombstone_passed(&self) {
        self.count_tombstone(Event::TombstoneSerialized);
    }

    /// The length of the last record written (records of a topic are
    /// mostly of one size).
    fn size_hint(&self, _: &T) -> Option<usize> {
        Some(self.last_len.0.load(Ordering::Relaxed))
    }

    /// A new data key's KMS call, when the values keyset's primary is a
    /// KMS envelope key and a new DEK is due.
    fn blocking_work(&self) -> Option<BlockingWork> {
        self.values
            .as_ref()
            .and_then(crate::envelope::blocking_work_to_seal)
    }
}

impl<T, F> Deserializer<T> for FieldEncrypting<F>
where
    T: DeserializeOwned,
    F: FieldFormat<Value = T>,
{
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        let guard = self.scope(ctx)?;
        match self.format.decode::<Tracked<T>>(data) {
            Ok(Tracked(v)) => Ok(v),
            Err(e) => Err(guard.take_error().unwrap_or(e)),
        }
    }

    fn tombstone_passed(&self) {
        self.count_tombstone(Event::TombstoneDeserialized);
    }

    /// With an envelope key in the keyset: the KMS calls that reading
    /// `data` would make for DEKs not cached, found by reading the record
    /// once without opening a field (the typed Kafka consumer runs them
    /// off its worker first). `None` for other keysets, at no cost.
    fn blocking_work(&self, data: &[u8]) -> Option<BlockingWork> {
        if !self.values.as_ref().is_some_and(has_envelope_key) {
            return None;
        }
        // The context does not matter to a probe: nothing is opened.
        let keys = self.keys(&Context::new("")).ok()??;
        let guard = scope::enter_probe(keys);
        let _ = self.format.decode::<Tracked<T>>(data);
        guard.take_work()
    }
}

/// Whether `keyset` holds a KMS envelope key (whose reads may call a KMS).
fn has_envelope_key(keyset: &Keyset) -> bool {
    keyset.keys().any(|(id, _)| {
        keyset
            .key_type_url(id)
            .is_some_and(|u| u.ends_with("KmsEnvelopeAeadKey"))
    })
}
