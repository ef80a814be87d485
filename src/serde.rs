//! The serde traits (Kafka's contract: a value is an `Option`, `None` is the
//! tombstone) and the encrypting wrappers.
//!
//! The tombstone rule lives in exactly one place: the provided methods
//! [`Serializer::serialize`] and [`Deserializer::deserialize`]. Codecs and
//! wrappers implement only the present-value methods, so none of them can
//! turn a `None` into bytes, or bytes into a `None`.

use crate::context::{AadBuf, AadPolicy, Context};
use crate::envelope::{self, MAX_PREALLOC};
use crate::error::Error;
use crate::keyset::Keyset;
use crate::record_key::KeyForms;
use crate::stats::Event;
use crate::work::BlockingWork;

/// Turns a value of type `T` into bytes; `None` is a tombstone.
///
/// Implement [`serialize_into`](Serializer::serialize_into), which only ever
/// sees a present value. [`serialize`](Serializer::serialize) is provided: it
/// returns `Ok(None)` for `None` without calling anything, and a present
/// value's bytes otherwise. Do not override it: it is where the tombstone
/// rule lives.
///
/// ```
/// use tombstone_crypt::{Context, Error, Serializer};
///
/// /// Little-endian `u32`s.
/// struct U32Le;
///
/// impl Serializer<u32> for U32Le {
///     fn serialize_into(&self, _: &Context<'_>, v: &u32, out: &mut Vec<u8>) -> Result<(), Error> {
///         out.extend_from_slice(&v.to_le_bytes());
///         Ok(())
///     }
///     fn size_hint(&self, _: &u32) -> Option<usize> {
///         Some(4)
///     }
/// }
///
/// let ctx = Context::new("t");
/// assert_eq!(U32Le.serialize(&ctx, Some(&7))?, Some(vec![7, 0, 0, 0]));
/// assert_eq!(U32Le.serialize(&ctx, None)?, None); // never called for a tombstone
/// # Ok::<(), Error>(())
/// ```
pub trait Serializer<T: ?Sized> {
    /// Appends the bytes of a present value to `out` (which may already hold
    /// bytes: leave them alone). An encrypting wrapper hands its own output
    /// buffer here, so the codec writes straight into it.
    ///
    /// # Errors
    /// Whatever the codec or the cipher reports; see [`Error`].
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error>;

    /// Serializes `value` for `ctx`. A tombstone (`None`) is `Ok(None)`,
    /// without calling [`serialize_into`](Serializer::serialize_into) or
    /// anything else; a present value, empty included, is `Ok(Some(_))`.
    ///
    /// # Errors
    /// Whatever [`serialize_into`](Serializer::serialize_into) reports.
    #[inline]
    fn serialize(&self, ctx: &Context<'_>, value: Option<&T>) -> Result<Option<Vec<u8>>, Error> {
        match value {
            // A tombstone costs the caller a branch (and a count) and
            // nothing else.
            None => {
                self.tombstone_passed();
                Ok(None)
            }
            Some(value) => serialize_present(self, ctx, value).map(Some),
        }
    }

    /// Called by [`serialize`](Serializer::serialize) for each tombstone it
    /// passes through: the encrypting wrappers count it
    /// ([`Keyset::stats`](crate::Keyset::stats)). The default does nothing.
    #[inline]
    fn tombstone_passed(&self) {}

    /// How many bytes `value` will take, if cheaply known. Only a hint for
    /// allocation: a wrong or huge hint never panics, and never reserves
    /// more than a bounded amount.
    fn size_hint(&self, value: &T) -> Option<usize> {
        let _ = value;
        None
    }

    /// The blocking work (a KMS call) that serializing the next present
    /// value would do inline, to run first off an async executor; `None`
    /// (the default) when there is none. See [`BlockingWork`].
    fn blocking_work(&self) -> Option<BlockingWork> {
        None
    }

    /// The forms of `key` as a **record key** on the wire (see
    /// [`KeyForms`]): by default one form, its serialized bytes, which are
    /// also its plaintext. [`DeterministicSerializer`] gives the forms
    /// under every enabled key of its keyset. Every writer of a topic
    /// writes through [`KeyForms::writes`].
    ///
    /// # Errors
    /// Whatever [`serialize_into`](Serializer::serialize_into) reports;
    /// [`Error::InnerReturnedNone`] never (a present key always has bytes).
    fn key_forms(&self, ctx: &Context<'_>, key: &T) -> Result<KeyForms, Error> {
        Ok(KeyForms::plain(serialize_present(self, ctx, key)?))
    }
}

/// Turns bytes back into a value of type `T`; `None` is a tombstone.
///
/// Implement [`deserialize_owned`](Deserializer::deserialize_owned), which
/// only ever sees present bytes, and, if the codec can read borrowed bytes
/// without a copy, [`deserialize_slice`](Deserializer::deserialize_slice).
/// [`deserialize`](Deserializer::deserialize) is provided: `None` is
/// `Ok(None)` without calling anything, present bytes are a value or an
/// error, never `None` (but a value whose subject was shredded: a delete,
/// see [`shred`](crate::shred)). Do not override it.
pub trait Deserializer<T> {
    /// Deserializes present bytes the caller owns (a decrypting wrapper's
    /// plaintext buffer), so a codec can take them without a copy.
    ///
    /// # Errors
    /// Whatever the codec or the cipher reports; see [`Error`].
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error>;

    /// Deserializes present borrowed bytes. The default copies them and
    /// calls [`deserialize_owned`](Deserializer::deserialize_owned).
    ///
    /// # Errors
    /// As [`deserialize_owned`](Deserializer::deserialize_owned).
    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        self.deserialize_owned(ctx, data.to_vec())
    }

    /// Deserializes `data` for `ctx`. A tombstone (`None`) is `Ok(None)`,
    /// without calling anything; present bytes, empty included, are
    /// `Ok(Some(_))` or an error, with one exception: a value whose
    /// subject key was shredded ([`shred`](crate::shred),
    /// [`Error::Shredded`] with `as_delete`) is `Ok(None)`, a delete.
    ///
    /// # Errors
    /// Whatever [`deserialize_slice`](Deserializer::deserialize_slice)
    /// reports.
    #[inline]
    fn deserialize(&self, ctx: &Context<'_>, data: Option<&[u8]>) -> Result<Option<T>, Error> {
        match data {
            None => {
                self.tombstone_passed();
                Ok(None)
            }
            Some(data) => match deserialize_present(self, ctx, data) {
                Ok(v) => Ok(Some(v)),
                // A value whose subject key was shredded reads as a delete
                // (crate::shred): every copy of it, wherever it is.
                Err(Error::Shredded { as_delete: true }) => Ok(None),
                Err(e) => Err(e),
            },
        }
    }

    /// Called by [`deserialize`](Deserializer::deserialize) for each
    /// tombstone it passes through: the decrypting wrappers count it
    /// ([`Keyset::stats`](crate::Keyset::stats)). The default does nothing.
    #[inline]
    fn tombstone_passed(&self) {}

    /// The blocking work (a KMS call) that deserializing `data` would do
    /// inline, to run first off an async executor; `None` (the default)
    /// when there is none. See [`BlockingWork`].
    fn blocking_work(&self, data: &[u8]) -> Option<BlockingWork> {
        let _ = data;
        None
    }

    /// Deserializes present bytes as a **record key**, with the key's
    /// plaintext bytes (what a value bound with
    /// [`KeyBinding::Plaintext`](crate::record_key::KeyBinding) binds): by default the
    /// bytes themselves; [`DeterministicDeserializer`] decrypts them once
    /// and returns the plaintext.
    ///
    /// # Errors
    /// As [`deserialize_slice`](Deserializer::deserialize_slice).
    fn deserialize_key(&self, ctx: &Context<'_>, data: &[u8]) -> Result<(T, Vec<u8>), Error> {
        Ok((self.deserialize_slice(ctx, data)?, data.to_vec()))
    }
}

/// The present-value half of [`Serializer::serialize`], out of line so that
/// the tombstone half inlines to a branch.
#[inline(never)]
fn serialize_present<T: ?Sized, S: Serializer<T> + ?Sized>(
    ser: &S,
    ctx: &Context<'_>,
    value: &T,
) -> Result<Vec<u8>, Error> {
    let hint = ser.size_hint(value).unwrap_or(0).min(MAX_PREALLOC);
    let mut out = Vec::with_capacity(hint);
    ser.serialize_into(ctx, value, &mut out)?;
    Ok(out)
}

/// The present-bytes half of [`Deserializer::deserialize`], out of line.
#[inline(never)]
fn deserialize_present<T, D: Deserializer<T> + ?Sized>(
    de: &D,
    ctx: &Context<'_>,
    data: &[u8],
) -> Result<T, Error> {
    de.deserialize_slice(ctx, data)
}

/// Wraps any [`Serializer`] and encrypts what it produces under the keyset's
/// primary key.
///
/// # Security
/// A tombstone (`None`) is returned as `None` without calling the inner
/// serializer or the cipher: a delete stays a delete. A present value, empty
/// included, always becomes a present ciphertext (33 bytes at least for
/// AES-GCM), under the keyset's primary key with a fresh random nonce, bound
/// to the context by the [`AadPolicy`]. The bytes are exactly
/// [`Keyset::encrypt`]'s for the context's
/// [`associated_data`](Context::associated_data).
///
/// ```
/// use tombstone_crypt::{Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Keyset};
/// use tombstone_crypt::{Deserializer as _, Serializer as _};
///
/// let keyset = Keyset::generate();
/// let ser = EncryptingSerializer::new(Bytes, keyset.clone());
/// let de = DecryptingDeserializer::new(Bytes, keyset);
/// let ctx = Context::new("events").with_key(b"k1");
///
/// let ct = ser.serialize(&ctx, Some(&b"hello"[..]))?;
/// assert_eq!(de.deserialize(&ctx, ct.as_deref())?, Some(b"hello".to_vec()));
/// assert_eq!(ser.serialize(&ctx, None)?, None); // a tombstone stays a tombstone
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct EncryptingSerializer<S> {
    inner: S,
    keyset: Keyset,
    aad: AadPolicy,
}

impl<S> EncryptingSerializer<S> {
    /// Encrypts what `inner` produces under `keyset`'s primary key, with the
    /// default [`AadPolicy::TopicAndKey`].
    pub fn new(inner: S, keyset: Keyset) -> Self {
        EncryptingSerializer {
            inner,
            keyset,
            aad: AadPolicy::default(),
        }
    }

    /// The same serializer with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        EncryptingSerializer { aad, ..self }
    }

    /// The keyset this serializer encrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }

    /// The associated-data policy.
    pub fn aad_policy(&self) -> AadPolicy {
        self.aad
    }

    /// The room to leave at the front of a buffer for
    /// [`encrypt_owned`](EncryptingSerializer::encrypt_owned): see
    /// [`Keyset::header_len`].
    pub fn header_len(&self) -> usize {
        self.keyset.header_len()
    }

    /// An empty plaintext buffer for
    /// [`encrypt_owned`](EncryptingSerializer::encrypt_owned): its first
    /// [`header_len`](EncryptingSerializer::header_len) bytes are the room
    /// for the header (zeros), and it has capacity for `capacity` bytes of
    /// plaintext (at most 1 MiB reserved up front) and the tag.
    pub fn plaintext_buffer(&self, capacity: usize) -> Vec<u8> {
        let head = self.header_len();
        let mut buf = Vec::with_capacity(
            head.saturating_add(capacity.min(MAX_PREALLOC))
                .saturating_add(crate::format::OVERHEAD),
        );
        buf.resize(head, 0);
        buf
    }

    /// Encrypts a value its caller already serialized into a buffer it owns,
    /// where it lies (no copy): the plaintext is `value[head..]` (for
    /// instance after a [`plaintext_buffer`](EncryptingSerializer::plaintext_buffer)),
    /// bound to `ctx` as [`serialize`](Serializer::serialize) binds it,
    /// and the same buffer comes back as the ciphertext. The inner codec is
    /// not called. A tombstone (`None`) is `Ok(None)`, untouched.
    ///
    /// [`serialize`](Serializer::serialize) already has the codec write the
    /// plaintext straight into the output buffer; this is for a caller who
    /// serialized a value into a `Vec` of its own (a codec's output): leave
    /// [`header_len`](EncryptingSerializer::header_len) bytes of room in
    /// front and 16 bytes of spare capacity, and the same allocation comes
    /// back as the ciphertext, byte for byte what `serialize` writes. Any
    /// other `head` works too, at the cost of one move of the plaintext; a
    /// buffer with too little capacity is copied once into one of the
    /// ciphertext's size and zeroized before it is freed, so no copy of the
    /// plaintext is left in freed memory or in the spare capacity
    /// (decryption zeroizes what its move leaves past the plaintext too). An
    /// envelope key's `header_len()` before its first data key is room for
    /// the longest wrapped key accepted (4 KiB), then the current one's
    /// length. [`Keyset::encrypt_in_place`] and
    /// [`Keyset::decrypt_in_place`] are the same without the context.
    ///
    /// # Errors
    /// As [`Keyset::encrypt_in_place`]; [`Error::ContextTooLong`]. On any
    /// error (a KMS that is down, a deterministic keyset, a `head` longer
    /// than the buffer: [`Error::Headroom`]) the buffer is zeroized and
    /// emptied before it is dropped.
    ///
    /// ```
    /// use tombstone_crypt::{Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Keyset};
    ///
    /// let keyset = Keyset::generate();
    /// let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    /// let de = DecryptingDeserializer::new(Bytes, keyset);
    /// let ctx = Context::new("events").with_key(b"k1");
    ///
    /// let mut buf = ser.plaintext_buffer(5);
    /// let head = buf.len();
    /// buf.extend_from_slice(b"hello"); // a codec writes here
    /// let ct = ser.encrypt_owned(&ctx, Some(buf), head)?;
    /// assert_eq!(de.decrypt_owned(&ctx, ct)?, Some(b"hello".to_vec()));
    /// assert_eq!(ser.encrypt_owned(&ctx, None, 0)?, None); // a tombstone stays one
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn encrypt_owned(
        &self,
        ctx: &Context<'_>,
        value: Option<Vec<u8>>,
        head: usize,
    ) -> Result<Option<Vec<u8>>, Error> {
        let Some(mut buf) = value else {
            self.keyset.counters().bump(Event::TombstoneSerialized);
            return Ok(None);
        };
        let mut aad = AadBuf::new();
        let aad = match aad.encode(self.aad, ctx) {
            Ok(aad) => aad,
            Err(e) => {
                zeroize::Zeroize::zeroize(&mut buf);
                return Err(e);
            }
        };
        self.keyset.encrypt_in_place(&mut buf, head, aad)?;
        Ok(Some(buf))
    }
}

impl<T: ?Sized, S: Serializer<T>> Serializer<T> for EncryptingSerializer<S> {
    #[inline]
    fn tombstone_passed(&self) {
        self.keyset.counters().bump(Event::TombstoneSerialized);
    }

    /// Appends the ciphertext to `out`: the associated data built on the
    /// stack, the inner codec writing its plaintext straight into `out`,
    /// encrypted there. On error nothing is left appended.
    #[inline]
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut aad = AadBuf::new();
        let aad = aad.encode(self.aad, ctx)?;
        let hint = self.inner.size_hint(value).unwrap_or(0);
        envelope::seal_into(&self.keyset, aad, out, hint, |out| {
            self.inner.serialize_into(ctx, value, out)
        })
    }

    #[inline]
    fn size_hint(&self, value: &T) -> Option<usize> {
        Some(
            self.keyset
                .primary_overhead()
                .saturating_add(self.inner.size_hint(value).unwrap_or(0)),
        )
    }

    /// A new data key's KMS call, when the primary is a KMS envelope key
    /// and a new DEK is due (see [`DekPolicy`](crate::kms::DekPolicy)).
    fn blocking_work(&self) -> Option<BlockingWork> {
        BlockingWork::both(
            self.inner.blocking_work(),
            envelope::blocking_work_to_seal(&self.keyset),
        )
    }
}

/// Wraps any [`Deserializer`] and decrypts its input first.
///
/// # Security
/// A tombstone (`None`) is returned as `None` without calling the cipher or
/// the inner deserializer. Present bytes either decrypt and authenticate
/// under an enabled key of the keyset and the same context, or fail with an
/// error; they never become `None` and never yield partial plaintext.
#[derive(Clone, Debug)]
pub struct DecryptingDeserializer<D> {
    inner: D,
    keyset: Keyset,
    aad: AadPolicy,
    unencrypted: Unencrypted,
}

/// What [`DecryptingDeserializer`] does with present bytes that are not a
/// ciphertext of its keyset: values written in plaintext before encryption
/// was turned on for a topic.
///
/// Bytes count as a ciphertext of the keyset when they start with the
/// version byte `0x01` followed by the id of a key of the keyset (enabled or
/// disabled); those always go through decryption, and a tampered or
/// truncated one is an error, never plaintext. Anything else is "not a
/// ciphertext".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Unencrypted {
    /// An error ([`Error::UnsupportedVersion`] or
    /// [`Error::UnknownKeyId`]): the default.
    #[default]
    Reject,
    /// Handed to the inner codec as plaintext, for a migration from a
    /// plaintext topic.
    ///
    /// # Security
    /// Values that are not ciphertexts are then read **without any
    /// authentication**: whoever can write to the topic can write a value
    /// that is accepted as is. A plaintext value that happens to start with
    /// `0x01` and a key id of the keyset is taken for a ciphertext and fails
    /// (an error, not a wrong value). Use it while old plaintext values are
    /// still live, re-encrypt them, then go back to `Reject`. Producers
    /// always encrypt.
    PassThrough,
}

impl<D> DecryptingDeserializer<D> {
    /// Decrypts with any enabled key of `keyset`, then hands the plaintext to
    /// `inner`, with the default [`AadPolicy::TopicAndKey`].
    pub fn new(inner: D, keyset: Keyset) -> Self {
        DecryptingDeserializer {
            inner,
            keyset,
            aad: AadPolicy::default(),
            unencrypted: Unencrypted::Reject,
        }
    }

    /// The same deserializer with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        DecryptingDeserializer { aad, ..self }
    }

    /// The same deserializer with another policy for values that are not
    /// ciphertexts ([`Unencrypted::Reject`] by default).
    ///
    /// ```
    /// use tombstone_crypt::{
    ///     Context, DecryptingDeserializer, Deserializer, Keyset, Unencrypted, Utf8,
    /// };
    ///
    /// let keyset = Keyset::generate();
    /// let ctx = Context::new("orders").with_key(b"o-1");
    /// let strict = DecryptingDeserializer::new(Utf8, keyset.clone());
    /// assert!(strict.deserialize(&ctx, Some(b"legacy plaintext")).is_err());
    /// let migrating = strict.with_unencrypted(Unencrypted::PassThrough);
    /// assert_eq!(
    ///     migrating.deserialize(&ctx, Some(b"legacy plaintext"))?.as_deref(),
    ///     Some("legacy plaintext")
    /// );
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    #[must_use]
    pub fn with_unencrypted(self, unencrypted: Unencrypted) -> Self {
        DecryptingDeserializer {
            unencrypted,
            ..self
        }
    }

    /// The policy for values that are not ciphertexts.
    pub fn unencrypted(&self) -> Unencrypted {
        self.unencrypted
    }

    /// The keyset this deserializer decrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }

    /// The associated-data policy.
    pub fn aad_policy(&self) -> AadPolicy {
        self.aad
    }

    /// Counts a plaintext value passed through, and with the feature
    /// `tracing` says so: at WARN for the keyset's first, then at TRACE
    /// (nothing per value above TRACE).
    fn plaintext_passed(&self, ctx: &Context<'_>) {
        #[cfg(feature = "tracing")]
        {
            if self.keyset.first_plaintext_passed() {
                tracing::warn!(
                    topic = %crate::error::printable(ctx.topic()),
                    "a value that is not a ciphertext of the keyset was passed through as \
                     plaintext (Unencrypted::PassThrough); later ones are logged at TRACE"
                );
            } else {
                tracing::trace!(
                    topic = %crate::error::printable(ctx.topic()),
                    "plaintext passed through"
                );
            }
        }
        #[cfg(not(feature = "tracing"))]
        let _ = ctx;
        self.keyset.counters().bump(Event::PlaintextPassed);
    }

    /// Decrypts a value whose bytes the caller owns, where they lie (no
    /// allocation), bound to `ctx` as [`deserialize`](Deserializer::deserialize)
    /// binds it, and returns the plaintext bytes in the same buffer; the
    /// inner codec is not called. A tombstone (`None`) is `Ok(None)`; bytes
    /// that are not a ciphertext of the keyset under
    /// [`Unencrypted::PassThrough`] come back as they are.
    ///
    /// # Errors
    /// As [`Keyset::decrypt_in_place`]; [`Error::ContextTooLong`]. On any
    /// error the buffer is zeroized before it is dropped.
    pub fn decrypt_owned(
        &self,
        ctx: &Context<'_>,
        data: Option<Vec<u8>>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let Some(mut buf) = data else {
            self.keyset.counters().bump(Event::TombstoneDeserialized);
            return Ok(None);
        };
        if self.unencrypted == Unencrypted::PassThrough && !self.keyset.names_a_key(&buf) {
            self.plaintext_passed(ctx);
            return Ok(Some(buf));
        }
        let mut aad = AadBuf::new();
        let aad = match aad.encode(self.aad, ctx) {
            Ok(aad) => aad,
            Err(e) => {
                zeroize::Zeroize::zeroize(&mut buf);
                return Err(e);
            }
        };
        self.keyset.decrypt_in_place(&mut buf, aad)?;
        Ok(Some(buf))
    }
}

impl<T, D: Deserializer<T>> Deserializer<T> for DecryptingDeserializer<D> {
    #[inline]
    fn tombstone_passed(&self) {
        self.keyset.counters().bump(Event::TombstoneDeserialized);
    }

    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    /// Decrypts into one new buffer, which the inner codec then owns.
    #[inline]
    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        if self.unencrypted == Unencrypted::PassThrough && !self.keyset.names_a_key(data) {
            self.plaintext_passed(ctx);
            return self.inner.deserialize_slice(ctx, data);
        }
        let mut aad = AadBuf::new();
        let aad = aad.encode(self.aad, ctx)?;
        let plaintext = envelope::open(&self.keyset, aad, data)?;
        self.inner.deserialize_owned(ctx, plaintext)
    }

    /// Unwrapping the data key of a KMS envelope ciphertext that is not in
    /// the cache. (The inner codec's work is not asked for: it would need
    /// the plaintext.)
    fn blocking_work(&self, data: &[u8]) -> Option<BlockingWork> {
        envelope::blocking_work_to_open(&self.keyset, data)
    }
}

/// Wraps any [`Serializer`] and encrypts what it produces
/// **deterministically** (AES-SIV), for record keys: equal keys give equal
/// ciphertexts, so Kafka's compaction and a store's lookups still see one
/// key. The keyset's primary key must be an AES-SIV key
/// ([`KeyTemplate::aes256_siv`](crate::KeyTemplate::aes256_siv)).
///
/// The associated data is the [`AadPolicy::Topic`] encoding of the context
/// by default (a key encrypted for one topic does not decrypt for another);
/// [`AadPolicy::None`] gives equal ciphertexts for equal keys across topics,
/// for joins. The context's record key is never part of it: this *is* the
/// key.
///
/// # Security
/// Deterministic encryption reveals which keys are equal (and how often a
/// key is written); it hides the keys themselves. Never use it for values.
///
/// ```
/// use tombstone_crypt::{
///     Context, DeterministicDeserializer, DeterministicSerializer, Deserializer, KeyTemplate,
///     Keyset, Serializer, Utf8,
/// };
///
/// let keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
/// let ser = DeterministicSerializer::new(Utf8, keys.clone());
/// let de = DeterministicDeserializer::new(Utf8, keys);
/// let ctx = Context::new("orders");
/// let a = ser.serialize(&ctx, Some("customer-17"))?;
/// assert_eq!(a, ser.serialize(&ctx, Some("customer-17"))?); // same key, same bytes
/// assert_eq!(de.deserialize(&ctx, a.as_deref())?.as_deref(), Some("customer-17"));
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Debug)]
pub struct DeterministicSerializer<S> {
    inner: S,
    keyset: Keyset,
    aad: AadPolicy,
}

impl<S> DeterministicSerializer<S> {
    /// Encrypts what `inner` produces under `keyset`'s primary key (AES-SIV),
    /// with the associated data of [`AadPolicy::Topic`].
    pub fn new(inner: S, keyset: Keyset) -> Self {
        DeterministicSerializer {
            inner,
            keyset,
            aad: AadPolicy::Topic,
        }
    }

    /// The same serializer with another associated-data policy
    /// ([`AadPolicy::TopicAndKey`] is the same as `Topic` here).
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        DeterministicSerializer { aad, ..self }
    }

    /// The keyset this serializer encrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }

    /// The inner codec (which gives the plaintext key bytes, for example to
    /// choose a partition from them).
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// The associated-data policy.
    pub fn aad_policy(&self) -> AadPolicy {
        self.aad
    }
}

/// The associated data of a record key: the policy applied to the topic
/// alone (a key is never bound to itself).
fn key_aad<'b>(
    buf: &'b mut AadBuf,
    policy: AadPolicy,
    ctx: &Context<'_>,
) -> Result<&'b [u8], Error> {
    buf.encode(policy, &Context::new(ctx.topic()))
}

impl<T: ?Sized, S: Serializer<T>> Serializer<T> for DeterministicSerializer<S> {
    #[inline]
    fn tombstone_passed(&self) {
        self.keyset.counters().bump(Event::TombstoneSerialized);
    }

    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let mut aad = AadBuf::new();
        let aad = key_aad(&mut aad, self.aad, ctx)?;
        let hint = self.inner.size_hint(value).unwrap_or(0);
        envelope::seal_deterministic_into(&self.keyset, aad, out, hint, |out| {
            self.inner.serialize_into(ctx, value, out)
        })
    }

    fn size_hint(&self, value: &T) -> Option<usize> {
        Some(
            self.keyset
                .primary_overhead()
                .saturating_add(self.inner.size_hint(value).unwrap_or(0)),
        )
    }

    fn blocking_work(&self) -> Option<BlockingWork> {
        self.inner.blocking_work()
    }

    /// The key's plaintext (what the inner codec writes) and its forms
    /// under every enabled key of the keyset, the primary's first.
    fn key_forms(&self, ctx: &Context<'_>, key: &T) -> Result<KeyForms, Error> {
        let plaintext = serialize_present(&self.inner, ctx, key)?;
        let mut aad = AadBuf::new();
        let aad = key_aad(&mut aad, self.aad, ctx)?;
        let forms = self.keyset.deterministic_forms(&plaintext, aad)?;
        KeyForms::encrypted_by(&self.keyset, plaintext, forms)
    }
}

/// Wraps any [`Deserializer`] and decrypts a deterministic ciphertext
/// (written by [`DeterministicSerializer`] or Tink's `DeterministicAead`)
/// under any enabled key of the keyset first.
#[derive(Clone, Debug)]
pub struct DeterministicDeserializer<D> {
    inner: D,
    keyset: Keyset,
    aad: AadPolicy,
}

impl<D> DeterministicDeserializer<D> {
    /// Decrypts with any enabled key of `keyset`, with the associated data
    /// of [`AadPolicy::Topic`], then hands the plaintext to `inner`.
    pub fn new(inner: D, keyset: Keyset) -> Self {
        DeterministicDeserializer {
            inner,
            keyset,
            aad: AadPolicy::Topic,
        }
    }

    /// The same deserializer with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        DeterministicDeserializer { aad, ..self }
    }

    /// The keyset this deserializer decrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }
}

impl<T, D: Deserializer<T>> Deserializer<T> for DeterministicDeserializer<D> {
    #[inline]
    fn tombstone_passed(&self) {
        self.keyset.counters().bump(Event::TombstoneDeserialized);
    }

    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        let mut aad = AadBuf::new();
        let aad = key_aad(&mut aad, self.aad, ctx)?;
        let plaintext = envelope::open_deterministic(&self.keyset, aad, data)?;
        self.inner.deserialize_owned(ctx, plaintext)
    }

    /// Decrypts once; the plaintext goes to the inner codec and back to
    /// the caller.
    fn deserialize_key(&self, ctx: &Context<'_>, data: &[u8]) -> Result<(T, Vec<u8>), Error> {
        let mut aad = AadBuf::new();
        let aad = key_aad(&mut aad, self.aad, ctx)?;
        let plaintext = envelope::open_deterministic(&self.keyset, aad, data)?;
        let key = self.inner.deserialize_slice(ctx, &plaintext)?;
        Ok((key, plaintext))
    }
}
