//! A field's plaintext: what its value is before it is encrypted, and what
//! kind of value that is, so that a reader never has to guess.
//!
//! - A value that serde writes as a **string** is its UTF-8 bytes, nothing
//!   more (so a `String` field is what Tink and Confluent's field
//!   encryption encrypt, and a string such a tool encrypted reads as one).
//! - A value written as **bytes** is `0xFE` then the bytes.
//! - **Any other value** is `0xFF` then its JSON text, whatever the
//!   record's format, so one field reads the same in every format and in
//!   the command line.
//!
//! `0xFE` and `0xFF` never occur in UTF-8, so the first byte tells the
//! three apart: a string is never taken for JSON text (the string `"12"`
//! stays a string, it does not read back as the number 12) nor JSON text
//! for a string. The other bytes that cannot begin UTF-8 (`0x80` to
//! `0xBF`, `0xC0`, `0xC1`, `0xF5` to `0xFD`) begin no plaintext.
//!
//! A value that would not read back as itself is refused when it is
//! written, never written to read back as another: a null (`None`, unit:
//! a null field is written `Option<Encrypted<T>>`, where `None` is the
//! format's null and no cipher is touched); in JSON text, a float that is
//! NaN or infinite (JSON has no such number) and an `Option` holding a
//! null (`Some(None)`, `Some(())`: JSON writes both as `null`, which reads
//! back as `None`).

use core::cell::Cell;
use core::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{self, Impossible, Serialize, Serializer};

use crate::error::Error;

/// The first byte of a plaintext that holds bytes.
pub(crate) const BYTES: u8 = 0xFE;

/// The first byte of a plaintext that holds JSON text.
pub(crate) const JSON: u8 = 0xFF;

/// Appends `value`'s plaintext to `out`.
///
/// # Errors
/// A value that would not read back as itself (a null; in JSON text, a
/// float that is NaN or infinite, or `Some` of a null), or the value's
/// `Serialize` failing (the message names the kind of failure, never the
/// value).
pub(crate) fn encode<T: ?Sized + Serialize>(value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
    let probed = value.serialize(Probe {
        out: &mut *out,
        in_some: false,
    });
    match probed {
        Ok(()) => Ok(()),
        Err(Probed::Refused(why)) => Err(why.error()),
        Err(Probed::Failed) => Err(failed()),
        Err(Probed::NotRaw) => {
            extend_zeroizing(out, &[JSON]);
            let refused = Cell::new(None);
            let mut json = serde_json::Serializer::new(Growing(out));
            let checked = Checked {
                s: &mut json,
                refused: &refused,
                in_some: false,
            };
            value.serialize(checked).map_err(|e| match refused.get() {
                Some(why) => why.error(),
                None => Error::codec(
                    "field",
                    format!("cannot encode the field's value as JSON: {}", json_kind(&e)),
                ),
            })
        }
    }
}

/// Reads a value from its plaintext.
///
/// # Errors
/// The plaintext is not the value's (the message names the kind of
/// failure, never the text).
pub(crate) fn decode<T: DeserializeOwned>(plain: &[u8]) -> Result<T, Error> {
    let held = Held::of(plain).map_err(PlainError::into_error)?;
    T::deserialize(Plain(held)).map_err(PlainError::into_error)
}

/// Reads bytes from a plaintext: bytes, a string's UTF-8, or a JSON
/// array of bytes.
///
/// # Errors
/// As [`decode`].
pub(crate) fn decode_bytes(plain: &[u8]) -> Result<Vec<u8>, Error> {
    decode::<ByteBuf>(plain).map(|b| b.0)
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

impl fmt::Write for Growing<'_> {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        extend_zeroizing(self.0, s.as_bytes());
        Ok(())
    }
}

fn failed() -> Error {
    Error::codec("field", "the field value's Serialize impl failed")
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

/// Why a value is refused when it is written: it would not read back as
/// itself.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Refusal {
    /// The value is null.
    Null,
    /// `Some` of a null (`Some(None)`, `Some(())`): it would be the null
    /// that `None` is.
    Collapses,
    /// A float that is NaN or infinite, in JSON text.
    NotFinite,
}

impl Refusal {
    fn message(self) -> &'static str {
        match self {
            Refusal::Null => {
                "an encrypted field's value is null: write Option<Encrypted<T>>, so that a null field stays the format's null"
            }
            Refusal::Collapses => {
                "an encrypted field's value holds Some(None) (or Some of another null): it would be written as the null that None is, and read back as None, so it is refused"
            }
            Refusal::NotFinite => {
                "an encrypted field's value holds a float that is NaN or infinite, which JSON cannot hold: refused rather than written as null"
            }
        }
    }

    fn error(self) -> Error {
        Error::codec("field", self.message())
    }
}

/// How probing a value for a raw plaintext ended, when it did not write one.
#[derive(Debug)]
enum Probed {
    /// The value is not a string or bytes: write its JSON.
    NotRaw,
    /// The value cannot be written.
    Refused(Refusal),
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

/// Writes a string as it is and bytes after [`BYTES`]; stops at anything
/// else (having written nothing). `Some` and newtypes add nothing.
struct Probe<'a> {
    out: &'a mut Vec<u8>,
    /// Inside a `Some`: a null here is refused as collapsing.
    in_some: bool,
}

impl Probe<'_> {
    fn null(&self) -> Probed {
        Probed::Refused(if self.in_some {
            Refusal::Collapses
        } else {
            Refusal::Null
        })
    }
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

    fn collect_str<T: ?Sized + fmt::Display>(self, v: &T) -> Result<(), Probed> {
        // Formatted straight into the plaintext's buffer: serde's default
        // formats into a `String` first, freed without being zeroized.
        fmt::Write::write_fmt(&mut Growing(self.out), format_args!("{v}"))
            .map_err(|_| Probed::Failed)
    }

    fn serialize_bytes(self, v: &[u8]) -> Result<(), Probed> {
        extend_zeroizing(self.out, &[BYTES]);
        extend_zeroizing(self.out, v);
        Ok(())
    }

    fn serialize_none(self) -> Result<(), Probed> {
        Err(self.null())
    }

    fn serialize_unit(self) -> Result<(), Probed> {
        Err(self.null())
    }

    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<(), Probed> {
        // A field is never null, so a present `Option` is its value.
        v.serialize(Probe {
            out: self.out,
            in_some: true,
        })
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<(), Probed> {
        v.serialize(self)
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

/// The JSON serializer, refusing what JSON would not give back: a float
/// that is NaN or infinite (serde_json writes `null`), and `Some` of a
/// null (written as `null`, the `None` it would read back as). The reason
/// is kept in `refused`; the format gets a message of its own.
struct Checked<'r, S> {
    s: S,
    refused: &'r Cell<Option<Refusal>>,
    /// The value is the content of a `Some` (through newtypes).
    in_some: bool,
}

impl<S: Serializer> Checked<'_, S> {
    fn refuse(&self, why: Refusal) -> S::Error {
        self.refused.set(Some(why));
        ser::Error::custom(why.message())
    }

    /// A null: refused inside a `Some`.
    fn null(&self) -> Result<(), S::Error> {
        if self.in_some {
            Err(self.refuse(Refusal::Collapses))
        } else {
            Ok(())
        }
    }
}

/// A value to serialize through [`Checked`].
struct Check<'a, 'r, T: ?Sized> {
    value: &'a T,
    refused: &'r Cell<Option<Refusal>>,
    in_some: bool,
}

impl<T: ?Sized + Serialize> Serialize for Check<'_, '_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.value.serialize(Checked {
            s,
            refused: self.refused,
            in_some: self.in_some,
        })
    }
}

/// A compound value (sequence, map, struct) of [`Checked`]: each part
/// checked.
struct CheckedParts<'r, C> {
    c: C,
    refused: &'r Cell<Option<Refusal>>,
}

impl<'r, C> CheckedParts<'r, C> {
    fn part<'a, T: ?Sized>(&self, value: &'a T) -> Check<'a, 'r, T> {
        Check {
            value,
            refused: self.refused,
            in_some: false,
        }
    }
}

macro_rules! forward {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(fn $method(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
            self.s.$method($($arg),*)
        })*
    };
}

impl<'r, S: Serializer> Serializer for Checked<'r, S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = CheckedParts<'r, S::SerializeSeq>;
    type SerializeTuple = CheckedParts<'r, S::SerializeTuple>;
    type SerializeTupleStruct = CheckedParts<'r, S::SerializeTupleStruct>;
    type SerializeTupleVariant = CheckedParts<'r, S::SerializeTupleVariant>;
    type SerializeMap = CheckedParts<'r, S::SerializeMap>;
    type SerializeStruct = CheckedParts<'r, S::SerializeStruct>;
    type SerializeStructVariant = CheckedParts<'r, S::SerializeStructVariant>;

    forward! {
        serialize_bool(v: bool);
        serialize_i8(v: i8);
        serialize_i16(v: i16);
        serialize_i32(v: i32);
        serialize_i64(v: i64);
        serialize_i128(v: i128);
        serialize_u8(v: u8);
        serialize_u16(v: u16);
        serialize_u32(v: u32);
        serialize_u64(v: u64);
        serialize_u128(v: u128);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_f32(self, v: f32) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(self.refuse(Refusal::NotFinite));
        }
        self.s.serialize_f32(v)
    }

    fn serialize_f64(self, v: f64) -> Result<S::Ok, S::Error> {
        if !v.is_finite() {
            return Err(self.refuse(Refusal::NotFinite));
        }
        self.s.serialize_f64(v)
    }

    fn collect_str<T: ?Sized + fmt::Display>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.s.collect_str(v)
    }

    fn is_human_readable(&self) -> bool {
        self.s.is_human_readable()
    }

    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        self.null()?;
        self.s.serialize_none()
    }

    fn serialize_unit(self) -> Result<S::Ok, S::Error> {
        self.null()?;
        self.s.serialize_unit()
    }

    fn serialize_unit_struct(self, name: &'static str) -> Result<S::Ok, S::Error> {
        self.null()?;
        self.s.serialize_unit_struct(name)
    }

    fn serialize_some<T: ?Sized + Serialize>(self, value: &T) -> Result<S::Ok, S::Error> {
        self.s.serialize_some(&Check {
            value,
            refused: self.refused,
            in_some: true,
        })
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.s.serialize_newtype_struct(
            name,
            &Check {
                value,
                refused: self.refused,
                in_some: self.in_some,
            },
        )
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        value: &T,
    ) -> Result<S::Ok, S::Error> {
        self.s.serialize_newtype_variant(
            name,
            index,
            variant,
            &Check {
                value,
                refused: self.refused,
                in_some: false,
            },
        )
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_seq(len)?,
            refused: self.refused,
        })
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_tuple(len)?,
            refused: self.refused,
        })
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_tuple_struct(name, len)?,
            refused: self.refused,
        })
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_tuple_variant(name, index, variant, len)?,
            refused: self.refused,
        })
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_map(len)?,
            refused: self.refused,
        })
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_struct(name, len)?,
            refused: self.refused,
        })
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Ok(CheckedParts {
            c: self.s.serialize_struct_variant(name, index, variant, len)?,
            refused: self.refused,
        })
    }
}

macro_rules! checked_parts {
    ($($trait:ident { $($method:ident($($name:ident: &'static str)?);)* })*) => {
        $(impl<C: ser::$trait> ser::$trait for CheckedParts<'_, C> {
            type Ok = C::Ok;
            type Error = C::Error;
            $(fn $method<T: ?Sized + Serialize>(&mut self, $($name: &'static str,)? value: &T) -> Result<(), C::Error> {
                let part = self.part(value);
                self.c.$method($($name,)? &part)
            })*
            fn end(self) -> Result<C::Ok, C::Error> {
                self.c.end()
            }
        })*
    };
}

checked_parts! {
    SerializeSeq { serialize_element(); }
    SerializeTuple { serialize_element(); }
    SerializeTupleStruct { serialize_field(); }
    SerializeTupleVariant { serialize_field(); }
    SerializeMap { serialize_key(); serialize_value(); }
    SerializeStruct { serialize_field(key: &'static str); }
    SerializeStructVariant { serialize_field(key: &'static str); }
}

/// Why a plaintext did not read as the value.
#[derive(Debug)]
enum PlainError {
    Null,
    NoKind,
    Json(serde_json::Error),
    Custom,
}

impl PlainError {
    fn into_error(self) -> Error {
        match self {
            PlainError::Null => Refusal::Null.error(),
            PlainError::NoKind => Error::codec(
                "field",
                "a field's plaintext is neither UTF-8 text nor marked as bytes or JSON text",
            ),
            PlainError::Json(e) => Error::codec(
                "field",
                format!(
                    "cannot decode the field's value from JSON: {} at column {}",
                    json_kind(&e),
                    e.column()
                ),
            ),
            PlainError::Custom => {
                Error::codec("field", "the field value's Deserialize impl failed")
            }
        }
    }
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

/// What a plaintext holds, told by its first byte.
#[derive(Clone, Copy)]
enum Held<'a> {
    /// A string (the plaintext is its UTF-8).
    Str(&'a str),
    /// Bytes (after [`BYTES`]).
    Bytes(&'a [u8]),
    /// JSON text (after [`JSON`]).
    Json(&'a [u8]),
}

impl<'a> Held<'a> {
    fn of(plain: &'a [u8]) -> Result<Self, PlainError> {
        match plain.split_first() {
            Some((&JSON, json)) => Ok(Held::Json(json)),
            Some((&BYTES, bytes)) => Ok(Held::Bytes(bytes)),
            _ => core::str::from_utf8(plain)
                .map(Held::Str)
                .map_err(|_| PlainError::NoKind),
        }
    }
}

/// A plaintext, read as the kind of value it says it holds: a string or
/// bytes as they are (to whatever the value's type asks), JSON text by
/// serde_json.
struct Plain<'a>(Held<'a>);

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

macro_rules! by_kind {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, PlainError> {
                match self.0 {
                    Held::Json(json) => Plain::json::<V>(json, |de| de.$method($($arg,)* v)),
                    _ => self.deserialize_any(v),
                }
            }
        )*
    };
}

impl<'de> Deserializer<'de> for Plain<'de> {
    type Error = PlainError;

    fn deserialize_any<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        match self.0 {
            Held::Str(s) => v.visit_borrowed_str(s),
            Held::Bytes(b) => v.visit_borrowed_bytes(b),
            Held::Json(json) => Plain::json::<V>(json, |de| de.deserialize_any(v)),
        }
    }

    fn deserialize_option<V: Visitor<'de>>(self, v: V) -> Result<V::Value, PlainError> {
        // A field is never null: an `Option` is present, and its value is
        // the plaintext's.
        v.visit_some(self)
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

    by_kind! {
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
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
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

/// Bytes read from a plaintext (bytes, a string's UTF-8, or a JSON array).
struct ByteBuf(Vec<u8>);

impl<'de> de::Deserialize<'de> for ByteBuf {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_byte_buf(ByteBufVisitor)
    }
}

struct ByteBufVisitor;

impl<'de> Visitor<'de> for ByteBufVisitor {
    type Value = ByteBuf;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("bytes")
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<ByteBuf, E> {
        Ok(ByteBuf(v.to_vec()))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<ByteBuf, E> {
        Ok(ByteBuf(v.as_bytes().to_vec()))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<ByteBuf, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(ByteBuf(out))
    }
}
