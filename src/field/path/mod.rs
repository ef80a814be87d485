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
//!
//! One file per side: `serializing` and `deserializing`; this one holds
//! the wrappers the codecs call and a map key's name, which both use.

use serde::de::{self, Deserializer};
use serde::ser::{Serialize, Serializer};

use super::scope::{self, Segment};

mod deserializing;
mod serializing;

use deserializing::*;
use serializing::*;

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
