//! Deserializing with the path tracked: the format's deserializer and the
//! visitors, seeds and accessors it hands wrapped, a segment pushed for
//! each field, variant, element and map entry.

use core::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, Visitor};

use super::*;
use crate::field::scope::{self, Segment};

pub(super) struct PathDe<D>(pub(super) D);

/// A visitor wrapped so that what it visits is tracked; `fields` and
/// `variants` name a struct's elements and an enum's variants for formats
/// that write indexes.
pub(super) struct Vis<V> {
    pub(super) v: V,
    pub(super) fields: Option<&'static [&'static str]>,
    pub(super) variants: Option<&'static [&'static str]>,
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
pub(super) struct Seed<S>(S);

impl<'de, S: DeserializeSeed<'de>> DeserializeSeed<'de> for Seed<S> {
    type Value = S::Value;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<S::Value, D::Error> {
        self.0.deserialize(PathDe(d))
    }
}

/// A sequence's elements, under their index (or, for a struct that the
/// format writes as a tuple, their field's name).
pub(super) struct SeqAcc<A> {
    pub(super) inner: A,
    pub(super) index: usize,
    pub(super) fields: Option<&'static [&'static str]>,
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
pub(super) struct MapAcc<A> {
    pub(super) inner: A,
    pub(super) key: Option<KeyName>,
    /// The buffer of the last key's name, reused for the next.
    pub(super) spare: String,
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
pub(super) struct EnumAcc<A> {
    pub(super) inner: A,
    pub(super) variants: Option<&'static [&'static str]>,
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

pub(super) struct VariantAcc<A> {
    pub(super) inner: A,
    pub(super) name: KeyName,
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
pub(super) struct NamingSeed<'n, S> {
    pub(super) seed: S,
    pub(super) name: &'n mut KeyName,
    pub(super) variants: Option<&'static [&'static str]>,
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

pub(super) struct NamingDe<'n, D> {
    pub(super) inner: D,
    pub(super) name: &'n mut KeyName,
    pub(super) variants: Option<&'static [&'static str]>,
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

pub(super) struct NamingVis<'n, V> {
    pub(super) v: V,
    pub(super) name: &'n mut KeyName,
    pub(super) variants: Option<&'static [&'static str]>,
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
