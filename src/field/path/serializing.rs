//! Serializing with the path tracked: the format's serializer wrapped, a
//! segment pushed for each field, variant, element and map entry.

use core::fmt;

use serde::ser::{self, Serialize, Serializer};

use super::*;
use crate::field::scope::{self, Segment};

pub(super) struct PathSer<S>(pub(super) S);

macro_rules! forward_ser {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method(self, $($arg: $ty),*) -> Result<S::Ok, S::Error> {
                self.0.$method($($arg),*)
            }
        )*
    };
}

impl<S: Serializer> Serializer for PathSer<S> {
    type Ok = S::Ok;
    type Error = S::Error;
    type SerializeSeq = Elements<S::SerializeSeq>;
    type SerializeTuple = Elements<S::SerializeTuple>;
    type SerializeTupleStruct = Elements<S::SerializeTupleStruct>;
    type SerializeTupleVariant = Variant<Elements<S::SerializeTupleVariant>>;
    type SerializeMap = Entries<S::SerializeMap>;
    type SerializeStruct = Fields<S::SerializeStruct>;
    type SerializeStructVariant = Variant<Fields<S::SerializeStructVariant>>;

    forward_ser! {
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
        serialize_f32(v: f32);
        serialize_f64(v: f64);
        serialize_char(v: char);
        serialize_str(v: &str);
        serialize_bytes(v: &[u8]);
        serialize_unit();
        serialize_unit_struct(name: &'static str);
        serialize_unit_variant(name: &'static str, index: u32, variant: &'static str);
    }

    fn serialize_none(self) -> Result<S::Ok, S::Error> {
        scope::null_passed();
        self.0.serialize_none()
    }

    fn serialize_some<T: ?Sized + Serialize>(self, v: &T) -> Result<S::Ok, S::Error> {
        self.0.serialize_some(&TrackedRef(v))
    }

    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        self.0.serialize_newtype_struct(name, &TrackedRef(v))
    }

    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        v: &T,
    ) -> Result<S::Ok, S::Error> {
        let _g = scope::push(Segment::Name(variant));
        self.0
            .serialize_newtype_variant(name, index, variant, &TrackedRef(v))
    }

    fn serialize_seq(self, len: Option<usize>) -> Result<Self::SerializeSeq, S::Error> {
        Ok(Elements::new(self.0.serialize_seq(len)?))
    }

    fn serialize_tuple(self, len: usize) -> Result<Self::SerializeTuple, S::Error> {
        Ok(Elements::new(self.0.serialize_tuple(len)?))
    }

    fn serialize_tuple_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleStruct, S::Error> {
        Ok(Elements::new(self.0.serialize_tuple_struct(name, len)?))
    }

    fn serialize_tuple_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeTupleVariant, S::Error> {
        Ok(Variant {
            inner: Elements::new(self.0.serialize_tuple_variant(name, index, variant, len)?),
            variant,
        })
    }

    fn serialize_map(self, len: Option<usize>) -> Result<Self::SerializeMap, S::Error> {
        Ok(Entries {
            inner: self.0.serialize_map(len)?,
            key: None,
        })
    }

    fn serialize_struct(
        self,
        name: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStruct, S::Error> {
        Ok(Fields(self.0.serialize_struct(name, len)?))
    }

    fn serialize_struct_variant(
        self,
        name: &'static str,
        index: u32,
        variant: &'static str,
        len: usize,
    ) -> Result<Self::SerializeStructVariant, S::Error> {
        Ok(Variant {
            inner: Fields(self.0.serialize_struct_variant(name, index, variant, len)?),
            variant,
        })
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

/// The elements of a sequence or tuple, each under its index.
pub(super) struct Elements<S> {
    pub(super) inner: S,
    pub(super) index: u128,
}

impl<S> Elements<S> {
    fn new(inner: S) -> Self {
        Elements { inner, index: 0 }
    }

    fn next(&mut self) -> scope::PathGuard {
        let g = scope::push(Segment::Index(self.index));
        self.index += 1;
        g
    }
}

macro_rules! elements {
    ($trait:ident, $method:ident) => {
        impl<S: ser::$trait> ser::$trait for Elements<S> {
            type Ok = S::Ok;
            type Error = S::Error;

            fn $method<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), S::Error> {
                let _g = self.next();
                self.inner.$method(&TrackedRef(v))
            }

            fn end(self) -> Result<S::Ok, S::Error> {
                self.inner.end()
            }
        }
    };
}

elements!(SerializeSeq, serialize_element);

elements!(SerializeTuple, serialize_element);

elements!(SerializeTupleStruct, serialize_field);

/// A variant's elements or fields, under the variant's name.
pub(super) struct Variant<I> {
    pub(super) inner: I,
    pub(super) variant: &'static str,
}

impl<S: ser::SerializeTupleVariant> ser::SerializeTupleVariant for Variant<Elements<S>> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_field<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), S::Error> {
        let _v = scope::push(Segment::Name(self.variant));
        let _g = self.inner.next();
        self.inner.inner.serialize_field(&TrackedRef(v))
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.inner.end()
    }
}

impl<S: ser::SerializeStructVariant> ser::SerializeStructVariant for Variant<Fields<S>> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), S::Error> {
        let _v = scope::push(Segment::Name(self.variant));
        let _g = scope::push(Segment::Name(key));
        self.inner.0.serialize_field(key, &TrackedRef(v))
    }

    fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
        self.inner.0.skip_field(key)
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.0.end()
    }
}

/// A struct's fields, each under its name.
pub(super) struct Fields<S>(S);

impl<S: ser::SerializeStruct> ser::SerializeStruct for Fields<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_field<T: ?Sized + Serialize>(
        &mut self,
        key: &'static str,
        v: &T,
    ) -> Result<(), S::Error> {
        let _g = scope::push(Segment::Name(key));
        self.0.serialize_field(key, &TrackedRef(v))
    }

    fn skip_field(&mut self, key: &'static str) -> Result<(), S::Error> {
        self.0.skip_field(key)
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.0.end()
    }
}

/// A map's entries, each under its key's name.
pub(super) struct Entries<S> {
    pub(super) inner: S,
    pub(super) key: Option<KeyName>,
}

impl<S: ser::SerializeMap> ser::SerializeMap for Entries<S> {
    type Ok = S::Ok;
    type Error = S::Error;

    fn serialize_key<T: ?Sized + Serialize>(&mut self, key: &T) -> Result<(), S::Error> {
        self.key = Some(key_name(key));
        self.inner.serialize_key(key)
    }

    fn serialize_value<T: ?Sized + Serialize>(&mut self, v: &T) -> Result<(), S::Error> {
        let _g = self.key.take().unwrap_or(KeyName::Unnamed).push();
        self.inner.serialize_value(&TrackedRef(v))
    }

    fn serialize_entry<K: ?Sized + Serialize, V: ?Sized + Serialize>(
        &mut self,
        key: &K,
        v: &V,
    ) -> Result<(), S::Error> {
        let _g = key_name(key).push();
        self.inner.serialize_entry(key, &TrackedRef(v))
    }

    fn end(self) -> Result<S::Ok, S::Error> {
        self.inner.end()
    }
}

/// The name of a serialized map key.
pub(super) fn key_name<T: ?Sized + Serialize>(key: &T) -> KeyName {
    key.serialize(KeyNamer).unwrap_or(KeyName::Unnamed)
}

/// Not a key that has a name.
#[derive(Debug)]
pub(super) struct NoName;

impl fmt::Display for NoName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a map key with no name")
    }
}

impl std::error::Error for NoName {}

impl ser::Error for NoName {
    fn custom<T: fmt::Display>(_: T) -> Self {
        NoName
    }
}

/// Names a map key: strings, chars, bools, integers, unit variants.
pub(super) struct KeyNamer;

pub(super) type NoCompound = ser::Impossible<KeyName, NoName>;

macro_rules! key_unsigned {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method(self, v: $ty) -> Result<KeyName, NoName> {
            Ok(KeyName::unsigned(u128::from(v)))
        })*
    };
}

macro_rules! key_signed {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method(self, v: $ty) -> Result<KeyName, NoName> {
            Ok(KeyName::signed(i128::from(v)))
        })*
    };
}

impl Serializer for KeyNamer {
    type Ok = KeyName;
    type Error = NoName;
    type SerializeSeq = NoCompound;
    type SerializeTuple = NoCompound;
    type SerializeTupleStruct = NoCompound;
    type SerializeTupleVariant = NoCompound;
    type SerializeMap = NoCompound;
    type SerializeStruct = NoCompound;
    type SerializeStructVariant = NoCompound;

    key_unsigned! {
        serialize_u8(u8);
        serialize_u16(u16);
        serialize_u32(u32);
        serialize_u64(u64);
        serialize_u128(u128);
    }

    key_signed! {
        serialize_i8(i8);
        serialize_i16(i16);
        serialize_i32(i32);
        serialize_i64(i64);
        serialize_i128(i128);
    }

    fn serialize_bool(self, v: bool) -> Result<KeyName, NoName> {
        Ok(KeyName::Name(v.to_string()))
    }
    fn serialize_f32(self, _: f32) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_f64(self, _: f64) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_char(self, v: char) -> Result<KeyName, NoName> {
        Ok(KeyName::Name(v.to_string()))
    }
    fn serialize_str(self, v: &str) -> Result<KeyName, NoName> {
        Ok(KeyName::Name(v.to_owned()))
    }
    fn serialize_bytes(self, _: &[u8]) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_none(self) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_some<T: ?Sized + Serialize>(self, _: &T) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_unit(self) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_unit_struct(self, _: &'static str) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    // A variant as a map key is read back through an enum access, which
    // names nothing: unnamed on both sides.
    fn serialize_unit_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
    ) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_newtype_struct<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        v: &T,
    ) -> Result<KeyName, NoName> {
        v.serialize(self)
    }
    fn serialize_newtype_variant<T: ?Sized + Serialize>(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: &T,
    ) -> Result<KeyName, NoName> {
        Err(NoName)
    }
    fn serialize_seq(self, _: Option<usize>) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_tuple(self, _: usize) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_tuple_struct(self, _: &'static str, _: usize) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_tuple_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_map(self, _: Option<usize>) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_struct(self, _: &'static str, _: usize) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
    fn serialize_struct_variant(
        self,
        _: &'static str,
        _: u32,
        _: &'static str,
        _: usize,
    ) -> Result<NoCompound, NoName> {
        Err(NoName)
    }
}
