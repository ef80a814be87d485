//! The serde traits (Kafka's contract: a value is an `Option`, `None` is the
//! tombstone) and the encrypting wrappers, where the tombstone rule lives.

use crate::cipher::Backend;
use crate::context::{AadPolicy, Context};
use crate::envelope::{self, AadBuf};
use crate::error::Error;
use crate::keyset::Keyset;

/// Turns a value of type `T` into bytes; `None` is a tombstone.
///
/// Implementations must map `None` to `Ok(None)` and a present value to
/// `Ok(Some(_))`. The two provided methods let a codec write straight into
/// the encrypting layer's output buffer; their defaults call
/// [`serialize`](Serializer::serialize).
pub trait Serializer<T: ?Sized> {
    /// Serializes `value` for `ctx`. `None` (a tombstone) stays `None`.
    ///
    /// # Errors
    /// Whatever the codec or the cipher reports; see [`Error`].
    fn serialize(&self, ctx: &Context<'_>, value: Option<&T>) -> Result<Option<Vec<u8>>, Error>;

    /// Appends the bytes of a present value to `out`.
    ///
    /// # Errors
    /// As [`serialize`](Serializer::serialize); [`Error::InnerReturnedNone`]
    /// if it returned `None` for the present value.
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let bytes = self
            .serialize(ctx, Some(value))?
            .ok_or(Error::InnerReturnedNone)?;
        out.extend_from_slice(&bytes);
        Ok(())
    }

    /// How many bytes `value` will take, if cheaply known (0 if not). Only a
    /// hint for allocation.
    fn size_hint(&self, value: &T) -> usize {
        let _ = value;
        0
    }
}

/// Turns bytes back into a value of type `T`; `None` is a tombstone.
///
/// Implementations must map `None` to `Ok(None)` and present bytes to
/// `Ok(Some(_))` or an error, never to `Ok(None)`.
pub trait Deserializer<T> {
    /// Deserializes `data` for `ctx`. `None` (a tombstone) stays `None`.
    ///
    /// # Errors
    /// Whatever the codec or the cipher reports; see [`Error`].
    fn deserialize(&self, ctx: &Context<'_>, data: Option<&[u8]>) -> Result<Option<T>, Error>;

    /// Deserializes present bytes the caller owns (the decrypting layer's
    /// plaintext buffer), so a codec can take them without a copy.
    ///
    /// # Errors
    /// As [`deserialize`](Deserializer::deserialize);
    /// [`Error::InnerReturnedNone`] if it returned `None` for present bytes.
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize(ctx, Some(&data))?
            .ok_or(Error::InnerReturnedNone)
    }
}

/// Wraps any [`Serializer`] and encrypts what it produces with AES-GCM.
///
/// # Security
/// A tombstone (`None`) is returned as `None` without calling the inner
/// serializer or the cipher: a delete stays a delete. A present value, empty
/// included, always becomes a present ciphertext (33 bytes at least), under
/// the keyset's primary key with a fresh random nonce, bound to the
/// context by the [`AadPolicy`].
///
/// # Backend
/// AES-GCM is RustCrypto's `aes-gcm`; with the cargo feature `aws-lc` it is
/// `aws-lc-rs` for every key, AES-128 and AES-256. The bytes on the wire are
/// the same either way: each backend reads what the other writes.
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
    backend: Backend,
}

impl<S> EncryptingSerializer<S> {
    /// Encrypts what `inner` produces under `keyset`'s primary key, with the
    /// default [`AadPolicy::TopicAndKey`].
    pub fn new(inner: S, keyset: Keyset) -> Self {
        EncryptingSerializer {
            inner,
            keyset,
            aad: AadPolicy::default(),
            backend: Backend::DEFAULT,
        }
    }

    /// The same serializer with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        EncryptingSerializer { aad, ..self }
    }

    /// The same serializer on RustCrypto's `aes-gcm` even when the `aws-lc`
    /// feature is on (without it, this changes nothing). Not part of the API:
    /// the benchmarks and the compatibility tests use it to run both
    /// backends in one process. The bytes written are the same either way.
    #[doc(hidden)]
    #[must_use]
    pub fn with_rustcrypto_backend(self) -> Self {
        EncryptingSerializer {
            backend: Backend::RustCrypto,
            ..self
        }
    }

    /// The name of the backend in use (`"aws-lc"` or `"rustcrypto"`). Not
    /// part of the API.
    #[doc(hidden)]
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The keyset this serializer encrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }

    /// The associated-data policy.
    pub fn aad_policy(&self) -> AadPolicy {
        self.aad
    }
}

impl<S> EncryptingSerializer<S> {
    /// Encrypts a present value: the associated data on the stack, the
    /// inner codec writing straight into the one output buffer.
    fn encrypt<T: ?Sized>(&self, ctx: &Context<'_>, value: &T) -> Result<Vec<u8>, Error>
    where
        S: Serializer<T>,
    {
        let mut aad = AadBuf::new();
        let aad = aad.encode(self.aad, ctx)?;
        let hint = self.inner.size_hint(value);
        envelope::seal_with(&self.keyset, self.backend, aad, hint, |out| {
            self.inner.serialize_into(ctx, value, out)
        })
    }
}

impl<T: ?Sized, S: Serializer<T>> Serializer<T> for EncryptingSerializer<S> {
    // Inlined so that a tombstone costs the caller a branch and nothing else;
    // the work for a present value stays out of line.
    #[inline]
    fn serialize(&self, ctx: &Context<'_>, value: Option<&T>) -> Result<Option<Vec<u8>>, Error> {
        match value {
            // Contract point 1: never touch the inner serde or the cipher.
            None => Ok(None),
            Some(value) => self.encrypt(ctx, value).map(Some),
        }
    }

    fn size_hint(&self, value: &T) -> usize {
        envelope::OVERHEAD + self.inner.size_hint(value)
    }
}

/// Wraps any [`Deserializer`] and decrypts its input first.
///
/// # Security
/// A tombstone (`None`) is returned as `None` without calling the cipher or
/// the inner deserializer. Present bytes either decrypt and authenticate
/// under an enabled key of the keyset and the same context, or fail with an
/// error; they never become `None` and never yield partial plaintext.
///
/// # Backend
/// As for [`EncryptingSerializer`]: RustCrypto's `aes-gcm`, or `aws-lc-rs`
/// with the cargo feature `aws-lc`; either reads what the other writes.
#[derive(Clone, Debug)]
pub struct DecryptingDeserializer<D> {
    inner: D,
    keyset: Keyset,
    aad: AadPolicy,
    backend: Backend,
}

impl<D> DecryptingDeserializer<D> {
    /// Decrypts with any enabled key of `keyset`, then hands the plaintext to
    /// `inner`, with the default [`AadPolicy::TopicAndKey`].
    pub fn new(inner: D, keyset: Keyset) -> Self {
        DecryptingDeserializer {
            inner,
            keyset,
            aad: AadPolicy::default(),
            backend: Backend::DEFAULT,
        }
    }

    /// The same deserializer with another associated-data policy.
    #[must_use]
    pub fn with_aad(self, aad: AadPolicy) -> Self {
        DecryptingDeserializer { aad, ..self }
    }

    /// The same deserializer on RustCrypto's `aes-gcm` even when the
    /// `aws-lc` feature is on; see
    /// [`EncryptingSerializer::with_rustcrypto_backend`]. Not part of the API.
    #[doc(hidden)]
    #[must_use]
    pub fn with_rustcrypto_backend(self) -> Self {
        DecryptingDeserializer {
            backend: Backend::RustCrypto,
            ..self
        }
    }

    /// The name of the backend in use (`"aws-lc"` or `"rustcrypto"`). Not
    /// part of the API.
    #[doc(hidden)]
    pub fn backend_name(&self) -> &'static str {
        self.backend.name()
    }

    /// The keyset this deserializer decrypts with.
    pub fn keyset(&self) -> &Keyset {
        &self.keyset
    }

    /// The associated-data policy.
    pub fn aad_policy(&self) -> AadPolicy {
        self.aad
    }
}

impl<D> DecryptingDeserializer<D> {
    /// Decrypts present bytes into one new buffer, which the inner codec
    /// then owns.
    fn decrypt<T>(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error>
    where
        D: Deserializer<T>,
    {
        let mut aad = AadBuf::new();
        let aad = aad.encode(self.aad, ctx)?;
        let plaintext = envelope::open_with(&self.keyset, self.backend, aad, data)?;
        self.inner.deserialize_owned(ctx, plaintext)
    }
}

impl<T, D: Deserializer<T>> Deserializer<T> for DecryptingDeserializer<D> {
    // Inlined for the same reason as `EncryptingSerializer::serialize`.
    #[inline]
    fn deserialize(&self, ctx: &Context<'_>, data: Option<&[u8]>) -> Result<Option<T>, Error> {
        match data {
            None => Ok(None), // contract point 1
            Some(data) => self.decrypt(ctx, data).map(Some),
        }
    }
}
