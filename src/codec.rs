//! Codecs: the plain inner serdes that turn a value into bytes and back,
//! with no crypto and no keys. Wrap one in an
//! [`EncryptingSerializer`](crate::EncryptingSerializer) /
//! [`DecryptingDeserializer`](crate::DecryptingDeserializer) to encrypt
//! what it writes.
//!
//! - [`Bytes`]: bytes as they are; [`Utf8`]: strings;
//! - [`Json`]: any serde type as JSON; [`Bincode`]: as bincode 2, decoding
//!   at most [`BINCODE_DECODE_LIMIT`] bytes of allocations.
//!
//! Each implements only the present-value methods; the traits' provided
//! methods map `None` (a tombstone) to `None` without calling the codec.
//! bincode is pinned to 2.x: 3.0.0 is a deliberate compile error, the
//! project being unmaintained (see `SECURITY.md`).
//!
//! ```
//! use tombstone_crypt::{Context, Deserializer, Json, Serializer};
//!
//! let ctx = Context::new("orders");
//! let bytes = Json::<Vec<u32>>::new().serialize(&ctx, Some(&vec![1, 2]))?;
//! assert_eq!(bytes.as_deref(), Some(&b"[1,2]"[..]));
//! let back: Option<Vec<u32>> = Json::new().deserialize(&ctx, bytes.as_deref())?;
//! assert_eq!(back, Some(vec![1, 2]));
//! assert_eq!(Json::<Vec<u32>>::new().serialize(&ctx, None)?, None); // a tombstone
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```
//!
//! # A codec of your own
//!
//! Any codec implementing [`Serializer`] /
//! [`Deserializer`] can be wrapped. A codec implements
//! only the present-value methods, `serialize_into` and
//! `deserialize_owned`; the traits provide `serialize` and `deserialize`,
//! where the tombstone rule lives, so a codec never sees a `None` and
//! cannot turn one into bytes:
//!
//! ```
//! use tombstone_crypt::{
//!     Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, Keyset, Serializer,
//! };
//!
//! /// A codec of our own: no `None` branch anywhere.
//! struct Upper;
//!
//! impl Serializer<str> for Upper {
//!     fn serialize_into(&self, _: &Context<'_>, v: &str, out: &mut Vec<u8>) -> Result<(), Error> {
//!         out.extend_from_slice(v.to_uppercase().as_bytes());
//!         Ok(())
//!     }
//! }
//!
//! impl Deserializer<String> for Upper {
//!     fn deserialize_owned(&self, _: &Context<'_>, data: Vec<u8>) -> Result<String, Error> {
//!         String::from_utf8(data).map_err(|_| Error::codec("upper", "invalid UTF-8"))
//!     }
//! }
//!
//! let keyset = Keyset::generate();
//! let ser = EncryptingSerializer::new(Upper, keyset.clone());
//! let de = DecryptingDeserializer::new(Upper, keyset);
//! let ctx = Context::new("t").with_key(b"k");
//! let ct = ser.serialize(&ctx, Some("shout"))?;
//! assert_eq!(de.deserialize(&ctx, ct.as_deref())?, Some("SHOUT".to_owned()));
//! assert_eq!(ser.serialize(&ctx, None)?, None);
//! # Ok::<(), Error>(())
//! ```

use core::fmt;
use core::marker::PhantomData;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::context::Context;
use crate::error::Error;
use crate::serde::{Deserializer, Serializer};

/// The most bytes a [`Bincode`] decode may claim for its containers; a
/// hostile length prefix beyond it is an error, not an allocation.
pub const BINCODE_DECODE_LIMIT: usize = 16 * 1024 * 1024;

type BincodeConfig = bincode::config::Configuration<
    bincode::config::LittleEndian,
    bincode::config::Varint,
    bincode::config::Limit<BINCODE_DECODE_LIMIT>,
>;

fn bincode_config() -> BincodeConfig {
    bincode::config::standard().with_limit::<BINCODE_DECODE_LIMIT>()
}

/// Raw bytes, unchanged: `Serializer<[u8]>` and `Deserializer<Vec<u8>>`.
///
/// ```
/// use tombstone_crypt::{Bytes, Context, Serializer as _};
///
/// let ctx = Context::new("t");
/// assert_eq!(Bytes.serialize(&ctx, Some(&b"ab"[..]))?, Some(b"ab".to_vec()));
/// assert_eq!(Bytes.serialize(&ctx, None)?, None);
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone, Copy, Debug, Default)]
pub struct Bytes;

impl Serializer<[u8]> for Bytes {
    #[inline]
    fn serialize_into(
        &self,
        _: &Context<'_>,
        value: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<(), Error> {
        out.extend_from_slice(value);
        Ok(())
    }

    #[inline]
    fn size_hint(&self, value: &[u8]) -> Option<usize> {
        Some(value.len())
    }
}

impl Deserializer<Vec<u8>> for Bytes {
    #[inline]
    fn deserialize_owned(&self, _: &Context<'_>, data: Vec<u8>) -> Result<Vec<u8>, Error> {
        Ok(data)
    }
}

/// UTF-8 text: `Serializer<str>` and `Deserializer<String>`.
///
/// Invalid UTF-8 is an error naming the byte offset, never the text.
#[derive(Clone, Copy, Debug, Default)]
pub struct Utf8;

impl Serializer<str> for Utf8 {
    #[inline]
    fn serialize_into(&self, _: &Context<'_>, value: &str, out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(value.as_bytes());
        Ok(())
    }

    #[inline]
    fn size_hint(&self, value: &str) -> Option<usize> {
        Some(value.len())
    }
}

fn utf8_error(e: &std::str::Utf8Error) -> Error {
    Error::codec("utf8", format!("invalid UTF-8 at byte {}", e.valid_up_to()))
}

impl Deserializer<String> for Utf8 {
    fn deserialize_owned(&self, _: &Context<'_>, data: Vec<u8>) -> Result<String, Error> {
        String::from_utf8(data).map_err(|e| utf8_error(&e.utf8_error()))
    }

    fn deserialize_slice(&self, _: &Context<'_>, data: &[u8]) -> Result<String, Error> {
        std::str::from_utf8(data)
            .map(str::to_owned)
            .map_err(|e| utf8_error(&e))
    }
}

/// Any serde type through bincode 2 (standard configuration: little endian,
/// variable-length integers), with a decode limit of
/// [`BINCODE_DECODE_LIMIT`] bytes and no trailing bytes allowed.
///
/// bincode is pinned to the 2.x line: 3.0 is a deliberate compile error
/// (the project is unmaintained). The codec sits behind the same traits as
/// every other, so it can be swapped without touching the encryption.
pub struct Bincode<T>(PhantomData<fn() -> T>);

impl<T> Bincode<T> {
    /// A bincode codec for `T`.
    pub fn new() -> Self {
        Bincode(PhantomData)
    }
}

impl<T> Default for Bincode<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for Bincode<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Bincode<T> {}

impl<T> fmt::Debug for Bincode<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Bincode<{}>", core::any::type_name::<T>())
    }
}

fn bincode_encode_error(e: &bincode::error::EncodeError) -> Error {
    use bincode::error::EncodeError as E;
    let kind = match e {
        E::UnexpectedEnd => "unexpected end",
        E::RefCellAlreadyBorrowed { .. } => "RefCell already borrowed",
        E::Io { .. } => "I/O error",
        E::OtherString(_) | E::Other(_) => "the value's Serialize impl failed",
        _ => "encode error",
    };
    Error::codec("bincode", format!("cannot encode: {kind}"))
}

fn bincode_decode_error(e: &bincode::error::DecodeError) -> Error {
    use bincode::error::DecodeError as D;
    let kind = match e {
        D::UnexpectedEnd { .. } => "unexpected end of input",
        D::LimitExceeded => "decode limit exceeded",
        D::InvalidIntegerType { .. } => "invalid integer type",
        D::NonZeroTypeIsZero { .. } => "zero in a non-zero type",
        D::UnexpectedVariant { .. } => "unexpected enum variant",
        D::Utf8 { .. } => "invalid UTF-8 in a string",
        D::InvalidCharEncoding(_) => "invalid char",
        D::InvalidBooleanValue(_) => "invalid bool",
        D::ArrayLengthMismatch { .. } => "array length mismatch",
        D::OutsideUsizeRange(_) => "length outside usize range",
        D::EmptyEnum { .. } => "empty enum",
        D::InvalidDuration { .. } => "invalid duration",
        D::InvalidSystemTime { .. } => "invalid system time",
        D::OtherString(_) => "the type's Deserialize impl failed",
        _ => "decode error",
    };
    Error::codec("bincode", format!("cannot decode: {kind}"))
}

impl<T: Serialize + DeserializeOwned> Serializer<T> for Bincode<T> {
    /// Encodes `value`, refusing one that could be stored but never read
    /// back under [`BINCODE_DECODE_LIMIT`].
    ///
    /// bincode's decode limit counts the memory a decode *claims*, not the
    /// input bytes: every length prefix and every `u64` claims 8 bytes and
    /// every `u128` 16, even when its varint is one byte. A claim is at most
    /// 16 times the bytes it was read from, so an encoding of at most
    /// `BINCODE_DECODE_LIMIT / 16` bytes always reads back; a longer one is
    /// decoded once, here, with the same limit, and refused if that fails.
    /// (That is why the codec's `Serializer` needs `T: DeserializeOwned`.)
    fn serialize_into(&self, _: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let start = out.len();
        let written = bincode_encode(value, out)?;
        if !bincode_always_decodes(written) {
            if let Err(e) =
                bincode::serde::decode_from_slice::<T, _>(&out[start..], bincode_config())
            {
                out.truncate(start);
                let why = bincode_decode_error(&e);
                return Err(Error::codec(
                    "bincode",
                    format!(
                        "cannot encode: {written} bytes that would not read back under the decode limit of {BINCODE_DECODE_LIMIT} bytes ({why})"
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// The most bytes bincode's decoder claims per input byte (a `u128` whose
/// varint is one byte claims 16).
const MAX_CLAIM_PER_BYTE: usize = 16;

/// Appends `value`'s bincode to `out`: how many bytes.
pub(crate) fn bincode_encode<T: ?Sized + Serialize>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<usize, Error> {
    bincode::serde::encode_into_std_write(value, out, bincode_config())
        .map_err(|e| bincode_encode_error(&e))
}

/// Whether a bincode encoding of `len` bytes always decodes under the limit.
pub(crate) fn bincode_always_decodes(len: usize) -> bool {
    len <= BINCODE_DECODE_LIMIT / MAX_CLAIM_PER_BYTE
}

/// Reads a `T` from all of `data`.
pub(crate) fn bincode_decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, Error> {
    let (value, used) = bincode::serde::decode_from_slice(data, bincode_config())
        .map_err(|e| bincode_decode_error(&e))?;
    if used != data.len() {
        return Err(Error::codec(
            "bincode",
            format!("{} trailing bytes after the value", data.len() - used),
        ));
    }
    Ok(value)
}

impl<T: DeserializeOwned> Deserializer<T> for Bincode<T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, _: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        bincode_decode(data)
    }
}

/// Any serde type as JSON (serde_json).
///
/// Decode errors name the kind and position of the problem, never the
/// offending text.
pub struct Json<T>(PhantomData<fn() -> T>);

impl<T> Json<T> {
    /// A JSON codec for `T`.
    pub fn new() -> Self {
        Json(PhantomData)
    }
}

impl<T> Default for Json<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> Clone for Json<T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Json<T> {}

impl<T> fmt::Debug for Json<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Json<{}>", core::any::type_name::<T>())
    }
}

fn json_error(op: &str, e: &serde_json::Error) -> Error {
    use serde_json::error::Category;
    let kind = match e.classify() {
        Category::Io => "I/O error",
        Category::Syntax => "syntax error",
        Category::Data => "wrong type or shape",
        Category::Eof => "unexpected end of input",
    };
    Error::codec(
        "json",
        format!(
            "cannot {op}: {kind} at line {} column {}",
            e.line(),
            e.column()
        ),
    )
}

/// Appends `value`'s JSON to `out`.
pub(crate) fn json_encode<T: ?Sized + Serialize>(
    value: &T,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    serde_json::to_writer(out, value).map_err(|e| json_error("encode", &e))
}

/// Reads a `T` from the JSON `data`.
pub(crate) fn json_decode<T: DeserializeOwned>(data: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(data).map_err(|e| json_error("decode", &e))
}

impl<T: Serialize> Serializer<T> for Json<T> {
    fn serialize_into(&self, _: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        json_encode(value, out)
    }
}

impl<T: DeserializeOwned> Deserializer<T> for Json<T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, _: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        json_decode(data)
    }
}
