//! Field-level encryption: encrypt the fields of a record that hold secrets
//! and keep the rest readable for routing, joins and analytics.
//!
//! - [`Encrypted<T>`]: a field encrypted under the keyset's primary key
//!   (AES-GCM or a KMS envelope key), with a fresh nonce each time.
//! - [`Deterministic<T>`]: a field encrypted with AES-SIV, so that equal
//!   values of one field give equal ciphertexts (lookups, joins); see its
//!   docs for exactly what that reveals.
//! - [`encrypted`] and [`deterministic`]: `#[serde(with = ...)]` modules for
//!   a plain `String` or `Vec<u8>` field (and their `option` submodules for
//!   `Option<String>`, `Option<Vec<u8>>`).
//! - [`FieldEncrypting`]: the record's serializer and deserializer (one of
//!   this crate's [`Serializer`](crate::Serializer)s, so it goes wherever a
//!   codec goes: stores, changelogs, the Kafka clients), around a serde
//!   format ([`Json`](crate::Json), [`Bincode`](crate::Bincode), or any
//!   [`FieldFormat`]).
//!
//! ```
//! use serde::{Deserialize, Serialize};
//! use tombstone_crypt::field::{Encrypted, FieldEncrypting};
//! use tombstone_crypt::{Context, Deserializer as _, Json, Keyset, Serializer as _};
//!
//! #[derive(Serialize, Deserialize, Debug, PartialEq)]
//! struct Customer {
//!     id: u64,
//!     ssn: Encrypted<String>,
//!     phone: Option<Encrypted<String>>,
//! }
//!
//! let keyset = Keyset::generate();
//! let codec = FieldEncrypting::new(Json::<Customer>::new(), keyset);
//! let ctx = Context::new("customers").with_key(b"c-1");
//! let c = Customer { id: 1, ssn: Encrypted::new("078-05-1120".into()), phone: None };
//! let bytes = codec.serialize(&ctx, Some(&c))?.unwrap();
//! assert_eq!(codec.deserialize(&ctx, Some(&bytes))?, Some(c));
//!
//! // A service with no keys reads the record with its field sealed,
//! // changes what it may, and writes it on: the field is the same bytes.
//! let router = FieldEncrypting::sealed(Json::<Customer>::new());
//! let mut seen = router.deserialize(&ctx, Some(&bytes))?.unwrap();
//! assert!(seen.ssn.is_sealed() && seen.ssn.get().is_none());
//! seen.id = 2;
//! let passed = router.serialize(&ctx, Some(&seen))?.unwrap();
//! let field = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).unwrap()["ssn"].clone();
//! assert_eq!(field(&passed), field(&bytes));
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```
//!
//! # The rules, by construction
//! - **A null field stays null.** `Option<Encrypted<T>>` with `None` is the
//!   format's null (`null` in JSON, a `0` tag in bincode) and reads back
//!   `None`; serde writes it without calling this module, so no cipher is
//!   touched. A present empty value is encrypted. A null *inside* the field
//!   (`Encrypted<Option<T>>` holding `None`) is refused: it would turn "no
//!   value" into a value. A record whose fields are all `None` is a present
//!   record; a record that is `None` is a tombstone, as everywhere here.
//! - **Fail closed.** A field written with no keys in scope (serialized by
//!   plain `serde_json`, say, or by a [`sealed`](FieldEncrypting::sealed)
//!   wrapper) is an error, never plaintext. A field that does not
//!   authenticate is an error ([`Error::Field`]), never
//!   a null and never dropped.
//! - **Bound to topic, record key and path.** A field's associated data is
//!   the record's (as [`Context::associated_data`](crate::Context::associated_data)
//!   gives it under the wrapper's [`AadPolicy`](crate::AadPolicy); topic and
//!   record key by default), then `0x46`, the path's length (u32,
//!   big-endian) and the path: a field moved to another field, another
//!   record or another topic does not decrypt.
//! - **Sealed pass-through.** With no keys in scope (a
//!   [`sealed`](FieldEncrypting::sealed) wrapper, or plain serde), a field
//!   reads as sealed ciphertext and is written back byte for byte.
//!
//! # Paths
//! A field's path is where serde finds it in the record, written like a
//! JSON Pointer (`/customer/cards/0/number`; `~` and `/` in a name are
//! `~0` and `~1`; the record itself is `/`):
//! - a struct field: its serialized name (after `#[serde(rename)]`);
//! - an enum variant's content: the variant's name, then the field or
//!   index inside it;
//! - an element of a `Vec`, array or tuple: its index;
//! - a map value: its key, when the key is a string, a char, a bool or an
//!   integer (a map with other keys can hold no encrypted field: writing
//!   one is an error);
//! - `Option`, `Box`, newtypes and `#[serde(transparent)]` add nothing.
//!
//! So an element moved within a list, or a value to another map key, is a
//! move: it no longer decrypts (re-encrypt it where it goes). The path is
//! the same in JSON and bincode, so a record can change format and keep its
//! fields. Internally tagged and untagged enums and `#[serde(flatten)]`
//! buffer their content before deserializing it, out of the path's sight:
//! an encrypted field there fails to read (loudly); keep encrypted fields
//! out of them.
//!
//! # What a field holds
//! Tink's AEAD output with the TINK prefix, exactly as a whole value
//! (`0x01 | key id | nonce | ciphertext | tag`, or the envelope or AES-SIV
//! form): a base64 string (standard alphabet, padded) in a human-readable
//! format such as JSON, a byte string in a binary one such as bincode.
//!
//! Its plaintext says what kind of value it holds, whatever the record's
//! format, so a reader never guesses ([`format`](crate::format#encrypted-fields)
//! has the details):
//! - a value serde writes as a string (`String`, `&str`, a string in a
//!   `serde_json::Value`, an untagged enum's text variant) is its UTF-8,
//!   nothing more: exactly what Tink and Confluent's field encryption
//!   encrypt for a string;
//! - a value serde writes as bytes (`serde_bytes`) is `0xFE` then the
//!   bytes;
//! - anything else (a number, a bool, a struct, a sequence, a `Vec<u8>`,
//!   which serde writes as a sequence) is `0xFF` then its JSON text.
//!
//! `0xFE` and `0xFF` never occur in UTF-8, so the string `"12"` reads back
//! as the string `"12"`, never as the number 12, and `Text("42")` of an
//! untagged enum as `Text("42")`, not as a `Num(42)` variant. `Some(v)`
//! and newtypes are their content's plaintext.
//!
//! A value that would not read back as itself is refused when the record
//! is written (`Error::Field`, with its path), never written to read back
//! as another: a null (`None`, `()`: see the null rule above), `Some` of a
//! null (`Some(None)`, anywhere in the value: JSON writes it as the `null`
//! that reads back `None`), and a float that is NaN or infinite (JSON has
//! no such number).
//!
//! # Why a scope
//! serde gives a field's `Serialize` impl nothing but the format's
//! serializer: no state of its own. A `DeserializeSeed` carries state only
//! to code that asks for it, and `#[derive(Deserialize)]` does not. So
//! [`FieldEncrypting`] sets a thread-local scope for the duration of each
//! call (restored when the call returns or unwinds, as `tracing` scopes a
//! dispatcher), and wraps the format's serializer so that each value's path
//! is in it. Its failure mode is loud: a field finds the scope or fails.
//! The scope never outlives the synchronous call, so async code is
//! unaffected.
//!
//! # Keys and counters
//! Rotation works as for whole values: the primary key encrypts, every
//! enabled key decrypts. An envelope key reuses its DEK across fields and
//! records as across values ([`DekPolicy`](crate::kms::DekPolicy)); the
//! wrapper reports a new DEK's KMS call as blocking work before a write,
//! and, before a read, the unwraps of DEKs not cached (found by reading the
//! record once without opening a field, only when the keyset holds an
//! envelope key): the typed Kafka clients run both off their worker.
//! [`Keyset::stats`](crate::Keyset::stats)
//! counts `fields_encrypted`, `fields_decrypted` and `field_nulls_passed`.
//! Plaintext on its way to and from the cipher is in zeroizing buffers;
//! `Debug` of a field never prints it.

mod path;
mod plain;
mod scope;
mod wrapper;

use core::fmt;

use serde::de::{self, DeserializeOwned, Deserializer, Visitor};
use serde::ser::{self, Serialize, Serializer};

use crate::error::Error;
use crate::key_id::KeyId;

pub use wrapper::{FieldEncrypting, FieldFormat};

use scope::Kind;

/// The associated data of a field at `path` (`/card`, `/items/0/sku`:
/// see [Paths](self#paths)) of a record in `ctx`, bound under `policy`:
/// the record's associated data, then `0x46`, the path's length (u32,
/// big-endian) and the path. What [`FieldEncrypting`] passes to the
/// cipher, for tools that find fields without the record's type (the
/// command line re-encrypts a JSON record's fields with it).
///
/// # Errors
/// [`Error::ContextTooLong`].
///
/// ```
/// use tombstone_crypt::{field, AadPolicy, Context, Keyset};
///
/// let ctx = Context::new("t").with_key(b"k");
/// let ad = field::associated_data(&ctx, AadPolicy::TopicAndKey, "/card")?;
/// assert_eq!(ad, b"\0\0\0\x01t\x01\0\0\0\x01kF\0\0\0\x05/card");
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub fn associated_data(
    ctx: &crate::Context<'_>,
    policy: crate::AadPolicy,
    path: &str,
) -> Result<Vec<u8>, Error> {
    scope::field_aad(&ctx.associated_data(policy)?, path)
}

/// The bytes of an encrypted field kept as they are: what a reader with no
/// keys holds, and writes back unchanged.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct SealedField {
    bytes: Vec<u8>,
}

impl SealedField {
    /// The ciphertext: `0x01 | key id | ...`.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The ciphertext, owned.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// The id of the key it was encrypted under.
    pub fn key_id(&self) -> KeyId {
        KeyId(u32::from_be_bytes([
            self.bytes[1],
            self.bytes[2],
            self.bytes[3],
            self.bytes[4],
        ]))
    }

    /// Checks the prefix: the version byte and a key id.
    fn new(bytes: Vec<u8>) -> Result<Self, Error> {
        match bytes.first() {
            _ if bytes.len() < 5 => Err(Error::Truncated {
                len: bytes.len(),
                min: 5,
            }),
            Some(&crate::envelope::VERSION) => Ok(SealedField { bytes }),
            _ => Err(Error::UnsupportedVersion),
        }
    }
}

impl fmt::Debug for SealedField {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "SealedField {{ key_id: {}, len: {} }}",
            self.key_id(),
            self.bytes.len()
        )
    }
}

/// A field's state.
#[derive(Clone, PartialEq, Eq, Hash)]
enum State<T> {
    Open(T),
    Sealed(SealedField),
}

/// Writes a field's ciphertext: base64 in a human-readable format, bytes
/// in a binary one.
fn write_sealed<S: Serializer>(s: S, bytes: &[u8]) -> Result<S::Ok, S::Error> {
    if s.is_human_readable() {
        use base64::Engine as _;
        let engine = base64::engine::general_purpose::STANDARD;
        let mut stack = [0u8; 512];
        match engine.encode_slice(bytes, &mut stack) {
            Ok(n) => match core::str::from_utf8(&stack[..n]) {
                Ok(text) => s.serialize_str(text),
                Err(_) => Err(ser::Error::custom("base64 is ASCII")),
            },
            Err(_) => s.serialize_str(&engine.encode(bytes)),
        }
    } else {
        s.serialize_bytes(bytes)
    }
}

/// Reads a field's ciphertext (base64 text or bytes).
fn read_sealed<'de, D: Deserializer<'de>>(d: D) -> Result<SealedField, D::Error> {
    let bytes = if d.is_human_readable() {
        d.deserialize_str(SealedVisitor)?
    } else {
        d.deserialize_byte_buf(SealedVisitor)?
    };
    SealedField::new(bytes).map_err(|e| de::Error::custom(format!("an encrypted field: {e}")))
}

struct SealedVisitor;

impl<'de> Visitor<'de> for SealedVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an encrypted field (base64 text or bytes)")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD
            .decode(v)
            .map_err(|_| E::custom("an encrypted field is not canonical base64"))
    }

    fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
        Ok(v.to_vec())
    }

    fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(v)
    }

    fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        let mut out = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(b) = seq.next_element::<u8>()? {
            out.push(b);
        }
        Ok(out)
    }
}

/// Writes an open field of `kind`, encrypted in the scope.
fn serialize_open<T: ?Sized + Serialize, S: Serializer>(
    kind: Kind,
    open: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    scope::seal(
        kind,
        |out| plain::encode(open, out),
        |ct| write_sealed(s, ct),
    )
    .map_err(ser::Error::custom)?
}

/// Reads a field of `kind`: opened with the scope's keys, or sealed.
fn deserialize_field<'de, T, D: Deserializer<'de>>(
    kind: Kind,
    d: D,
    decode: impl FnOnce(&[u8]) -> Result<T, Error>,
) -> Result<State<T>, D::Error> {
    let sealed = read_sealed(d)?;
    match scope::open(kind, sealed, decode).map_err(de::Error::custom)? {
        Ok(v) => Ok(State::Open(v)),
        Err(sealed) => Ok(State::Sealed(sealed)),
    }
}

macro_rules! field_type {
    ($(#[$doc:meta])* $name:ident, $kind:expr) => {
        $(#[$doc])*
        #[derive(Clone, PartialEq, Eq, Hash)]
        pub struct $name<T>(State<T>);

        impl<T> $name<T> {
            /// A field holding `value`, encrypted when the record is written.
            pub fn new(value: T) -> Self {
                $name(State::Open(value))
            }

            /// The value; `None` if the field was read sealed (with no keys).
            pub fn get(&self) -> Option<&T> {
                match &self.0 {
                    State::Open(v) => Some(v),
                    State::Sealed(_) => None,
                }
            }

            /// The value, mutably; `None` if sealed.
            pub fn get_mut(&mut self) -> Option<&mut T> {
                match &mut self.0 {
                    State::Open(v) => Some(v),
                    State::Sealed(_) => None,
                }
            }

            /// The value, or the sealed bytes.
            ///
            /// # Errors
            /// The field was read sealed: its bytes.
            pub fn into_inner(self) -> Result<T, SealedField> {
                match self.0 {
                    State::Open(v) => Ok(v),
                    State::Sealed(s) => Err(s),
                }
            }

            /// Whether the field was read sealed (by a reader with no keys).
            pub fn is_sealed(&self) -> bool {
                matches!(self.0, State::Sealed(_))
            }

            /// The sealed bytes, if the field was read sealed.
            pub fn sealed(&self) -> Option<&SealedField> {
                match &self.0 {
                    State::Sealed(s) => Some(s),
                    State::Open(_) => None,
                }
            }
        }

        impl<T> From<T> for $name<T> {
            fn from(value: T) -> Self {
                $name::new(value)
            }
        }

        impl<T> fmt::Debug for $name<T> {
            /// Never the value: `Encrypted(..)`, or the sealed bytes' key id
            /// and length.
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                match &self.0 {
                    State::Open(_) => write!(f, "{}(..)", stringify!($name)),
                    State::Sealed(s) => write!(f, "{}({s:?})", stringify!($name)),
                }
            }
        }

        impl<T: Serialize> Serialize for $name<T> {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                match &self.0 {
                    State::Open(v) => serialize_open($kind, v, s),
                    State::Sealed(sealed) => write_sealed(s, sealed.as_bytes()),
                }
            }
        }

        impl<'de, T: DeserializeOwned> de::Deserialize<'de> for $name<T> {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                deserialize_field($kind, d, plain::decode::<T>).map($name)
            }
        }
    };
}

field_type! {
    /// A field encrypted with the keyset's primary key and a fresh nonce
    /// (AES-GCM, or a KMS envelope key): equal values give different
    /// ciphertexts. Wrap it in `Option` for a field that may be null:
    /// `Option<Encrypted<T>>`'s `None` is the format's null, untouched.
    ///
    /// Written through [`FieldEncrypting`] (see the [module](self)); read
    /// with no keys it is [sealed](Encrypted::is_sealed), and written back
    /// as the same bytes.
    Encrypted, Kind::Randomized
}

field_type! {
    /// A field encrypted deterministically (AES-SIV, the keyset given to
    /// [`FieldEncrypting::with_deterministic`]), for fields that are looked
    /// up or joined on.
    ///
    /// # What it reveals
    /// Two fields with the same plaintext, under the same key, at the same
    /// path, in records of the same topic have the *same* ciphertext (by
    /// default the record key is not bound, or equal values in two records
    /// would differ: [`FieldEncrypting::with_deterministic_aad`]); so anyone
    /// who sees the records learns which of them share a value of that
    /// field, and how often each value occurs. Values at another path or in
    /// another topic, or under another key, do not compare. Like every
    /// field, the ciphertext's length gives away the plaintext's. Use it
    /// only where equality must be visible; never for a field with few
    /// possible values (a flag, a small enum), which it would give away.
    Deterministic, Kind::Deterministic
}

/// A plain `String` or `Vec<u8>` field's value, for the
/// `#[serde(with = ...)]` modules: a `String`'s plaintext is its UTF-8 (as
/// an `Encrypted<String>`'s), a `Vec<u8>`'s is its bytes after `0xFE` (as
/// a field that serde writes as bytes; see [What a field holds](self#what-a-field-holds)).
/// Implemented for these two types only.
pub trait PlainField: Sized + sealed::Sealed {}

mod sealed {
    use crate::error::Error;

    /// What a [`PlainField`](super::PlainField) is to its field, out of
    /// the public API.
    pub trait Sealed: Sized {
        /// Appends the plaintext to `out`.
        fn encode(&self, out: &mut Vec<u8>);
        /// The value from its plaintext.
        fn decode(plain: &[u8]) -> Result<Self, Error>;
    }

    impl Sealed for String {
        fn encode(&self, out: &mut Vec<u8>) {
            super::plain::extend_zeroizing(out, self.as_bytes());
        }

        fn decode(plain: &[u8]) -> Result<Self, Error> {
            super::plain::decode(plain)
        }
    }

    impl Sealed for Vec<u8> {
        fn encode(&self, out: &mut Vec<u8>) {
            super::plain::extend_zeroizing(out, &[super::plain::BYTES]);
            super::plain::extend_zeroizing(out, self);
        }

        fn decode(plain: &[u8]) -> Result<Self, Error> {
            super::plain::decode_bytes(plain)
        }
    }
}

impl PlainField for String {}

impl PlainField for Vec<u8> {}

/// Writes a plain field of `kind`.
fn with_serialize<T: PlainField, S: Serializer>(
    kind: Kind,
    v: &T,
    s: S,
) -> Result<S::Ok, S::Error> {
    scope::seal(
        kind,
        |out| {
            sealed::Sealed::encode(v, out);
            Ok(())
        },
        |ct| write_sealed(s, ct),
    )
    .map_err(ser::Error::custom)?
}

/// Reads a plain field of `kind`: it must open (a plain field cannot be
/// kept sealed).
fn with_deserialize<'de, T: PlainField, D: Deserializer<'de>>(
    kind: Kind,
    d: D,
) -> Result<T, D::Error> {
    match deserialize_field(kind, d, <T as sealed::Sealed>::decode)? {
        State::Open(v) => Ok(v),
        State::Sealed(_) => Err(de::Error::custom(
            "a plain field read with no keys in scope cannot be kept sealed: declare it Encrypted<T> to pass it through",
        )),
    }
}

/// `Option` of a plain field: `None` is the format's null.
struct OptionVisitor<T> {
    kind: Kind,
    marker: core::marker::PhantomData<fn() -> T>,
}

impl<'de, T: PlainField> Visitor<'de> for OptionVisitor<T> {
    type Value = Option<T>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an encrypted field or null")
    }

    fn visit_none<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_unit<E: de::Error>(self) -> Result<Option<T>, E> {
        Ok(None)
    }

    fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Option<T>, D::Error> {
        with_deserialize(self.kind, d).map(Some)
    }
}

macro_rules! with_module {
    ($(#[$doc:meta])* $name:ident, $kind:expr, $ty:literal) => {
        $(#[$doc])*
        pub mod $name {
            use serde::{Deserializer, Serializer};

            use super::{Kind, PlainField};

            /// Serializes the field (see the module).
            ///
            /// # Errors
            /// No keys in scope, or the cipher failed.
            pub fn serialize<T: PlainField, S: Serializer>(v: &T, s: S) -> Result<S::Ok, S::Error> {
                super::with_serialize($kind, v, s)
            }

            /// Deserializes the field (see the module).
            ///
            /// # Errors
            /// It does not open under the scope's keys at its path, or no
            /// keys are in scope.
            pub fn deserialize<'de, T: PlainField, D: Deserializer<'de>>(d: D) -> Result<T, D::Error> {
                super::with_deserialize($kind, d)
            }

            #[doc = concat!("`#[serde(with = \"tombstone_crypt::field::", stringify!($name), "::option\")]` for an `Option<String>` or `Option<Vec<u8>>` field: `None` is the format's null, untouched.")]
            pub mod option {
                use serde::{Deserializer, Serializer};

                use super::super::{Kind, OptionVisitor, PlainField};

                /// Serializes the field: `None` as the format's null.
                ///
                /// # Errors
                /// As the parent module's.
                pub fn serialize<T: PlainField, S: Serializer>(
                    v: &Option<T>,
                    s: S,
                ) -> Result<S::Ok, S::Error> {
                    match v {
                        None => s.serialize_none(),
                        Some(v) => s.serialize_some(&Some_(v)),
                    }
                }

                struct Some_<'a, T>(&'a T);

                impl<T: PlainField> serde::Serialize for Some_<'_, T> {
                    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                        super::super::with_serialize($kind, self.0, s)
                    }
                }

                /// Deserializes the field: the format's null as `None`.
                ///
                /// # Errors
                /// As the parent module's.
                pub fn deserialize<'de, T: PlainField, D: Deserializer<'de>>(
                    d: D,
                ) -> Result<Option<T>, D::Error> {
                    let kind: Kind = $kind;
                    d.deserialize_option(OptionVisitor {
                        kind,
                        marker: core::marker::PhantomData,
                    })
                }
            }
        }
    };
}

with_module! {
    /// `#[serde(with = "tombstone_crypt::field::encrypted")]` for a plain
    /// `String` or `Vec<u8>` field, encrypted as an [`Encrypted`] field is
    /// (the same bytes on the wire as `Encrypted<String>` for a `String`;
    /// a `Vec<u8>`'s plaintext is `0xFE` then its bytes, as for a field
    /// that serde writes as bytes). It cannot be read sealed:
    /// with no keys in scope reading it is an error.
    ///
    /// ```
    /// use serde::{Deserialize, Serialize};
    /// use tombstone_crypt::field::FieldEncrypting;
    /// use tombstone_crypt::{Context, Deserializer as _, Json, Keyset, Serializer as _};
    ///
    /// #[derive(Serialize, Deserialize, Debug, PartialEq)]
    /// struct Login {
    ///     user: String,
    ///     #[serde(with = "tombstone_crypt::field::encrypted")]
    ///     password_hash: Vec<u8>,
    ///     #[serde(with = "tombstone_crypt::field::encrypted::option")]
    ///     recovery_email: Option<String>,
    /// }
    ///
    /// let codec = FieldEncrypting::new(Json::<Login>::new(), Keyset::generate());
    /// let ctx = Context::new("logins").with_key(b"u1");
    /// let v = Login { user: "u1".into(), password_hash: vec![1, 2], recovery_email: None };
    /// let bytes = codec.serialize(&ctx, Some(&v))?;
    /// assert_eq!(codec.deserialize(&ctx, bytes.as_deref())?, Some(v));
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    encrypted, Kind::Randomized, "encrypted"
}

with_module! {
    /// `#[serde(with = "tombstone_crypt::field::deterministic")]` for a
    /// plain `String` or `Vec<u8>` field, encrypted as a [`Deterministic`]
    /// field is (read its docs for what equality it reveals).
    deterministic, Kind::Deterministic, "deterministic"
}
