//! A field's plaintext: what its value is before it is encrypted. A value
//! that serde writes as a string is its UTF-8 bytes, one written as bytes
//! is those bytes (so a `String` field is what Tink and Confluent's field
//! encryption encrypt); any other value is its JSON text, whatever the
//! record's format, so one field reads the same in every format and in the
//! command line.
//!
//! A value that is null (`None`, unit) is refused: a null field is written
//! `Option<Encrypted<T>>`, where `None` is the format's null and no cipher
//! is touched.

use core::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{self, Impossible, Serialize, Serializer};

use crate::error::Error;

/// Appends `value`'s plaintext to `out`.
///
/// # Errors
/// A null value, or the value's `Serialize` failing (the message names the
/// kind of failure, never the value).
pub(crate) fn encode<T: ?Sized + Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
    match value.serialize(Probe { out: &mut *out }) {
        Ok(()) => Ok(()),
        Err(Probed::Null) => Err(null_error()),
        Err(Probed::Failed) => Err(Error::codec(
            "field",
            "the field value's Serialize impl failed",
        )),
        Err(Probed::NotRaw) => serde_json::to_writer(Growing(out), value).map_err(|e| {
            Error::codec(
                "field",
                format!("cannot encode the field's value as JSON: {}", json_kind(&e)),
            )
        }),
    }
}

/// Reads a value from its plaintext.
///
/// # Errors
/// The plaintext is not the value's (the message names the kind of
/// failure, never the text).
pub(crate) fn decode<T: DeserializeOwned>(plain: &[u8]) -> Result<T, Error> {
    T::deserialize(Plain(plain)).map_err(|e| match e {
        PlainError::Null => null_error(),
        PlainError::Utf8 => Error::codec("field", "a string field's plaintext is not UTF-8"),
        PlainError::Json(e) => Error::codec(
            "field",
            format!(
                "cannot decode the field's value from JSON: {} at column {}",
                json_kind(&e),
                e.column()
            ),
        ),
        PlainError::Custom => Error::codec("field", "the field value's Deserialize impl failed"),
    })
}

/// Appends `bytes` to `out`; when `out` must grow, its contents move to a
/// new block and the old one is zeroized first (the plaintext is never left
/// in a block a reallocation frees).
pub(crate) fn extend_zeroizing(out: &mut Vec<u8>, bytes: &[u8]) {
    if out.capacity() - out.len() < bytes.len() {
        let want = out.len().saturating_add(bytes.len());
        let mut grown = Vec::with_capacity(want.max(out.capacity().saturating_mul(2)).max(64));
        grown.extend_from_slice(out);
        zeroize::Zeroize::zeroize(out);
        *out = grown;
    }
    out.extend_from_slice(bytes);
}

/// A writer into a plaintext buffer that grows with [`extend_zeroizing`].
struct Growing<'a>(&'a mut Vec<u8>);

impl std::io::Write for Growing<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        extend_zeroizing(self.0, bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn null_error() -> Error {
    Error::codec(
        "field",
        "an encrypted field's value is null: write Option<Encrypted<T>>, so that a null field stays the format's null",
    )
}

fn json_kind(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "I/O error",
        Category::Syntax => "syntax error",
        Category::Data => "wrong type or shape",
        Category::Eof => "unexpected end of input",
    }
}

/// How probing a value for a raw plaintext ended, when it did not write one.
#[derive(Debug)]
enum Probed {
    /// The value is not a string or bytes: write its JSON.
    NotRaw,
    /// The value is null.
    Null,
    /// Its `Serialize` impl failed.
    Failed,
}

impl fmt::Display for Probed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field plaintext probe")
    }
}

impl std::error::Error for Probed {}

impl ser::Error for Probed {
    fn custom<T: fmt::Display>(_: T) -> Self {
        Probed::Failed
    }
}

/// Writes a string or bytes as they are; stops at anything else.
struct Probe<'a> {
    out: &'a mut Vec<u8>,
}

type NoCompound = Impossible<(), Probed>;

macro_rules! not_raw {
    ($($method:ident($($ty:ty),*);)*) => {
        $(fn $method(self, $(_: $ty),*) -> Result<(), Probed> {
            Err(Probed::NotRaw)
        })*
    };
}

impl Serializer for Probe<'_> {
    type Ok = ();
    type Error = Probed;
    type SerializeSeq = NoCompound;
    type SerializeTuple = NoCompound;
    type SerializeTupleStruct = NoCompound;
    type SerializeTupleVariant = NoCompound;
    type SerializeMap = NoCompound;
    type SerializeStruct = NoCompound;
    type SerializeStructVariant = NoCompound;

    fn serialize_str(self, v: &str) -> Result<(), Probed> {
        extend_zeroizing(self.out, v.as_bytes());
        Ok(())
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Probed> {
        extend_zeroizing(self.out, v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Probed> {
        Err(Probed::Null)
    }

    fn serialize_unit(self) -> Result<(), Probed> {
        Err(Probed::Null)
    }

    not_raw! {
        serialize_bool(bool);
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_i128(i128);
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_u128(u128);
        serialize_f32(f32);
        serialize_f64(f64);
        serialize_char(char);
        serialize_unit_struct(&'static str);
        serialize_unit_variant(&'static str, u32, &'static str);
    }

    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<(), Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Probed> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<(), Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_tuple(self, _: usize) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<NoCompound, Probed> {
        Err(Probed::NotRaw)
    }
}

/// Why a plaintext did not read as the value.
#[derive(Debug)]
enum PlainError {
    Null,
    Utf8,
    Json(serde_json::Error),
    Custom,
}

impl fmt::Display for PlainError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("field plaintext")
    }
}

impl std::error::Error for PlainError {}

impl de::Error for PlainError {
    fn custom<T: fmt::Display>(_: T) -> Self {
        PlainError::Custom
    }
}

/// A plaintext, read as its value: a string or bytes as they are, anything
/// else as JSON.
struct Plain<'a>(&'a [u8]);

impl Plain<'_> {
    fn json<'de, V: Visitor<'de>>(
        data: &'de [u8],
        f: impl FnOnce(
            &mut serde_json::Deserializer<serde_json::de::SliceRead<'de>>,
        ) -> Result<V::Value, serde_json::Error>,
    ) -> Result<V::Value, PlainError> {
        let mut de = serde_json::Deserializer::from_slice(data);
        let value = f(&mut de).map_err(PlainError::Json)?;
        de.end().map_err(PlainError::Json)?;
        Ok(value)
    }
}

macro_rules! as_json {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, PlainError> {
                Plain::json::<V>(self.0, |de| de.$method($($arg,)* v))
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Plain<'de> {
    type Error = PlainError;

    fn deserialize_str<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        let s = core::str::from_utf8(self.0).map_err(|_| PlainError::Utf8)?;
        v.visit_borrowed_str(s)
    }

    fn deserialize_string<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        self.deserialize_str(v)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        v.visit_borrowed_bytes(self.0)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        v.visit_borrowed_bytes(self.0)
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        // A present option is its JSON; a null one was never written.
        if self.0.trim_ascii() == b"null" {
            return Err(PlainError::Null);
        }
        Plain::json::<V>(self.0, |de| de.deserialize_option(v))
    }

    fn deserialize_unit<V: Visitor<'de>>(self, _: V) -> Result<V::Value, PlainError> {
        Err(PlainError::Null)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _: &'static str,
        v: V,
    ) -> Result<V::Value, PlainError> {
        v.visit_newtype_struct(self)
    }

    as_json! {
        deserialize_any();
        deserialize_bool();
        deserialize_i8();
        deserialize_i16();
        deserialize_i32();
        deserialize_i64();
        deserialize_i128();
        deserialize_u8();
        deserialize_u16();
        deserialize_u32();
        deserialize_u64();
        deserialize_u128();
        deserialize_f32();
        deserialize_f64();
        deserialize_char();
        deserialize_unit_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }
}
