//! The path of each value as serde walks a record: a proxy around the
//! format's serializer and deserializer that pushes a segment for every
//! struct field, enum variant, sequence element and map entry, so that a
//! field's `Serialize` and `Deserialize` impls find their path in the scope
//! (see [`scope`](super::scope)).
//!
//! A path is named from what serde sees, identically on both sides and in
//! every format: a struct field by its serialized name (bincode, which
//! writes a struct as a tuple, is given the names serde's derive lists), an
//! enum variant by its name (bincode writes its index: the name is looked
//! up), an element by its index, a map entry by its key when the key is a
//! string, a character, a bool or an integer. `Option`, newtypes and boxes
//! add nothing.

use core::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};
use serde::ser::{self, Serialize, Serializer};

use super::scope::{self, Segment};

/// A value serialized with its path tracked.
pub(crate) struct TrackedRef<'a, T: ?Sized>(pub(crate) &'a T);

impl<T: ?Sized + Serialize> Serialize for TrackedRef<'_, T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(PathSer(s))
    }
}

/// A value deserialized with its path tracked.
pub(crate) struct Tracked<T>(pub(crate) T);

impl<'de, T: de::Deserialize<'de>> de::Deserialize<'de> for Tracked<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        T::deserialize(PathDe(d)).map(Tracked)
    }
}

// ---- serializing ----

struct PathSer<S>(S);

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
struct Elements<S> {
    inner: S,
    index: u128,
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
struct Variant<I> {
    inner: I,
    variant: &'static str,
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
struct Fields<S>(S);

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

/// A map key's name in a path.
#[derive(Clone, Debug, PartialEq, Eq)]
enum KeyName {
    Name(String),
    Index(u128),
    Signed(i128),
    Unnamed,
    /// No name yet, with a buffer that a name is written into (a map's
    /// keys reuse one buffer instead of allocating one per key).
    Spare(String),
}

impl KeyName {
    fn push(&self) -> scope::PathGuard {
        match self {
            KeyName::Name(n) => scope::push(Segment::Name(n)),
            KeyName::Index(i) => scope::push(Segment::Index(*i)),
            KeyName::Signed(i) => scope::push(Segment::Signed(*i)),
            KeyName::Unnamed | KeyName::Spare(_) => scope::push(Segment::Unnamed),
        }
    }

    /// Makes this the name `text`, in its own buffer when it has one.
    fn set(&mut self, text: &str) {
        match self {
            KeyName::Name(buf) | KeyName::Spare(buf) => {
                let mut buf = std::mem::take(buf);
                buf.clear();
                buf.push_str(text);
                *self = KeyName::Name(buf);
            }
            _ => *self = KeyName::Name(text.to_owned()),
        }
    }

    /// This name's buffer, for the next key.
    fn into_spare(self) -> String {
        match self {
            KeyName::Name(buf) | KeyName::Spare(buf) => buf,
            _ => String::new(),
        }
    }

    fn unsigned(v: u128) -> Self {
        KeyName::Index(v)
    }

    fn signed(v: i128) -> Self {
        match u128::try_from(v) {
            Ok(u) => KeyName::Index(u),
            Err(_) => KeyName::Signed(v),
        }
    }
}

/// A map's entries, each under its key's name.
struct Entries<S> {
    inner: S,
    key: Option<KeyName>,
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
fn key_name<T: ?Sized + Serialize>(key: &T) -> KeyName {
    key.serialize(KeyNamer).unwrap_or(KeyName::Unnamed)
}

/// Not a key that has a name.
#[derive(Debug)]
struct NoName;

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
struct KeyNamer;

type NoCompound = ser::Impossible<KeyName, NoName>;

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

// ---- deserializing ----

struct PathDe<D>(D);

/// A visitor wrapped so that what it visits is tracked; `fields` and
/// `variants` name a struct's elements and an enum's variants for formats
/// that write indexes.
struct Vis<V> {
    v: V,
    fields: Option<&'static [&'static str]>,
    variants: Option<&'static [&'static str]>,
}

impl<V> Vis<V> {
    fn new(v: V) -> Self {
        Vis {
            v,
            fields: None,
            variants: None,
        }
    }
}

macro_rules! forward_de {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, D::Error> {
                self.0.$method($($arg,)* Vis::new(v))
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for PathDe<D> {
    type Error = D::Error;

    forward_de! {
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
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_struct(
            name,
            fields,
            Vis {
                v,
                fields: Some(fields),
                variants: None,
            },
        )
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        name: &'static str,
        variants: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, D::Error> {
        self.0.deserialize_enum(
            name,
            variants,
            Vis {
                v,
                fields: None,
                variants: Some(variants),
            },
        )
    }

    fn is_human_readable(&self) -> bool {
        self.0.is_human_readable()
    }
}

macro_rules! forward_visit {
    ($($method:ident($ty:ty);)*) => {
        $(
            fn $method<E: de::Error>(self, x: $ty) -> Result<V::Value, E> {
                self.v.$method(x)
            }
        )*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for Vis<V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v.expecting(f)
    }

    forward_visit! {
        visit_bool(bool);
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
        visit_f32(f32);
        visit_f64(f64);
        visit_char(char);
        visit_str(&str);
        visit_borrowed_str(&'de str);
        visit_string(String);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        scope::null_passed();
        self.v.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_some(PathDe(d))
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_newtype_struct(PathDe(d))
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.v.visit_seq(SeqAcc {
            inner: seq,
            index: 0,
            fields: self.fields,
        })
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.v.visit_map(MapAcc {
            inner: map,
            key: None,
            spare: String::new(),
        })
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.v.visit_enum(EnumAcc {
            inner: data,
            variants: self.variants,
        })
    }
}

/// A seed whose value is tracked.
struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(PathDe(d))
    }
}

/// A sequence's elements, under their index (or, for a struct that the
/// format writes as a tuple, their field's name).
struct SeqAcc<A> {
    inner: A,
    index: usize,
    fields: Option<&'static [&'static str]>,
}

impl<'de, A: de::SeqAccess<'de>> de::SeqAccess<'de> for SeqAcc<A> {
    type Error = A::Error;

    fn next_element_seed<T: DeserializeSeed<'de>>(
        &mut self,
        seed: T,
    ) -> Result<Option<T::Value>, A::Error> {
        let _g = match self.fields.and_then(|f| f.get(self.index)) {
            Some(name) => scope::push(Segment::Name(name)),
            None => scope::push(Segment::Index(self.index as u128)),
        };
        self.index += 1;
        self.inner.next_element_seed(Seed(seed))
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// A map's entries, each value under its key's name.
struct MapAcc<A> {
    inner: A,
    key: Option<KeyName>,
    /// The buffer of the last key's name, reused for the next.
    spare: String,
}

impl<'de, A: de::MapAccess<'de>> de::MapAccess<'de> for MapAcc<A> {
    type Error = A::Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, A::Error> {
        let mut name = KeyName::Spare(std::mem::take(&mut self.spare));
        let key = self.inner.next_key_seed(NamingSeed {
            seed,
            name: &mut name,
            variants: None,
        })?;
        self.key = Some(name);
        Ok(key)
    }

    fn next_value_seed<V: DeserializeSeed<'de>>(&mut self, seed: V) -> Result<V::Value, A::Error> {
        let name = self.key.take().unwrap_or(KeyName::Unnamed);
        let value = {
            let _g = name.push();
            self.inner.next_value_seed(Seed(seed))
        };
        self.spare = name.into_spare();
        value
    }

    fn size_hint(&self) -> Option<usize> {
        self.inner.size_hint()
    }
}

/// An enum's variant, and what it holds under the variant's name.
struct EnumAcc<A> {
    inner: A,
    variants: Option<&'static [&'static str]>,
}

impl<'de, A: de::EnumAccess<'de>> de::EnumAccess<'de> for EnumAcc<A> {
    type Error = A::Error;
    type Variant = VariantAcc<A::Variant>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), A::Error> {
        let mut name = KeyName::Unnamed;
        let (value, variant) = self.inner.variant_seed(NamingSeed {
            seed,
            name: &mut name,
            variants: self.variants,
        })?;
        Ok((
            value,
            VariantAcc {
                inner: variant,
                name,
            },
        ))
    }
}

struct VariantAcc<A> {
    inner: A,
    name: KeyName,
}

impl<'de, A: de::VariantAccess<'de>> de::VariantAccess<'de> for VariantAcc<A> {
    type Error = A::Error;

    fn unit_variant(self) -> Result<(), A::Error> {
        self.inner.unit_variant()
    }

    fn newtype_variant_seed<T: DeserializeSeed<'de>>(self, seed: T) -> Result<T::Value, A::Error> {
        let _g = self.name.push();
        self.inner.newtype_variant_seed(Seed(seed))
    }

    fn tuple_variant<V: Visitor<'de>>(self, len: usize, v: V) -> Result<V::Value, A::Error> {
        let _g = self.name.push();
        self.inner.tuple_variant(len, Vis::new(v))
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        v: V,
    ) -> Result<V::Value, A::Error> {
        let _g = self.name.push();
        self.inner.struct_variant(
            fields,
            Vis {
                v,
                fields: Some(fields),
                variants: None,
            },
        )
    }
}

/// A seed that notes the name of the key (or variant) it reads; an
/// integer is a variant's index when `variants` is given.
struct NamingSeed<'n, S> {
    seed: S,
    name: &'n mut KeyName,
    variants: Option<&'static [&'static str]>,
}

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for NamingSeed<'_, S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.seed.deserialize(NamingDe {
            inner: d,
            name: self.name,
            variants: self.variants,
        })
    }
}

struct NamingDe<'n, D> {
    inner: D,
    name: &'n mut KeyName,
    variants: Option<&'static [&'static str]>,
}

macro_rules! forward_naming_de {
    ($($method:ident($($arg:ident: $ty:ty),*);)*) => {
        $(
            fn $method<V: Visitor<'de>>(self, $($arg: $ty,)* v: V) -> Result<V::Value, D::Error> {
                self.inner.$method($($arg,)* NamingVis { v, name: self.name, variants: self.variants })
            }
        )*
    };
}

impl<'de, D: Deserializer<'de>> Deserializer<'de> for NamingDe<'_, D> {
    type Error = D::Error;

    forward_naming_de! {
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
        deserialize_str();
        deserialize_string();
        deserialize_bytes();
        deserialize_byte_buf();
        deserialize_option();
        deserialize_unit();
        deserialize_unit_struct(name: &'static str);
        deserialize_newtype_struct(name: &'static str);
        deserialize_seq();
        deserialize_tuple(len: usize);
        deserialize_tuple_struct(name: &'static str, len: usize);
        deserialize_map();
        deserialize_struct(name: &'static str, fields: &'static [&'static str]);
        deserialize_enum(name: &'static str, variants: &'static [&'static str]);
        deserialize_identifier();
        deserialize_ignored_any();
    }

    fn is_human_readable(&self) -> bool {
        self.inner.is_human_readable()
    }
}

struct NamingVis<'n, V> {
    v: V,
    name: &'n mut KeyName,
    variants: Option<&'static [&'static str]>,
}

impl<V> NamingVis<'_, V> {
    fn index(&mut self, i: u128) {
        *self.name = match self
            .variants
            .and_then(|vs| usize::try_from(i).ok().and_then(|i| vs.get(i)))
        {
            Some(variant) => KeyName::Name((*variant).to_owned()),
            None => KeyName::unsigned(i),
        };
    }
}

macro_rules! naming_unsigned {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method<E: de::Error>(mut self, x: $ty) -> Result<V::Value, E> {
            self.index(u128::from(x));
            self.v.$method(x)
        })*
    };
}

macro_rules! naming_signed {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method<E: de::Error>(self, x: $ty) -> Result<V::Value, E> {
            *self.name = KeyName::signed(i128::from(x));
            self.v.$method(x)
        })*
    };
}

macro_rules! naming_plain {
    ($($method:ident($ty:ty);)*) => {
        $(fn $method<E: de::Error>(self, x: $ty) -> Result<V::Value, E> {
            self.v.$method(x)
        })*
    };
}

impl<'de, V: Visitor<'de>> Visitor<'de> for NamingVis<'_, V> {
    type Value = V::Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.v.expecting(f)
    }

    naming_unsigned! {
        visit_u8(u8);
        visit_u16(u16);
        visit_u32(u32);
        visit_u64(u64);
        visit_u128(u128);
    }

    naming_signed! {
        visit_i8(i8);
        visit_i16(i16);
        visit_i32(i32);
        visit_i64(i64);
        visit_i128(i128);
    }

    naming_plain! {
        visit_f32(f32);
        visit_f64(f64);
        visit_bytes(&[u8]);
        visit_borrowed_bytes(&'de [u8]);
        visit_byte_buf(Vec<u8>);
    }

    fn visit_bool<E: de::Error>(self, x: bool) -> Result<V::Value, E> {
        *self.name = KeyName::Name(x.to_string());
        self.v.visit_bool(x)
    }

    fn visit_char<E: de::Error>(self, x: char) -> Result<V::Value, E> {
        *self.name = KeyName::Name(x.to_string());
        self.v.visit_char(x)
    }

    fn visit_str<E: de::Error>(self, x: &str) -> Result<V::Value, E> {
        self.name.set(x);
        self.v.visit_str(x)
    }

    fn visit_borrowed_str<E: de::Error>(self, x: &'de str) -> Result<V::Value, E> {
        self.name.set(x);
        self.v.visit_borrowed_str(x)
    }

    fn visit_string<E: de::Error>(self, x: String) -> Result<V::Value, E> {
        self.name.set(&x);
        self.v.visit_string(x)
    }

    fn visit_none<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_none()
    }

    fn visit_unit<E: de::Error>(self) -> Result<V::Value, E> {
        self.v.visit_unit()
    }

    fn visit_some<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_some(d)
    }

    fn visit_newtype_struct<D2: Deserializer<'de>>(self, d: D2) -> Result<V::Value, D2::Error> {
        self.v.visit_newtype_struct(NamingDe {
            inner: d,
            name: self.name,
            variants: self.variants,
        })
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, seq: A) -> Result<V::Value, A::Error> {
        self.v.visit_seq(seq)
    }

    fn visit_map<A: de::MapAccess<'de>>(self, map: A) -> Result<V::Value, A::Error> {
        self.v.visit_map(map)
    }

    fn visit_enum<A: de::EnumAccess<'de>>(self, data: A) -> Result<V::Value, A::Error> {
        self.v.visit_enum(data)
    }
}
