//! What one record is to the commands: its key ([`RecordKey`]: the
//! plaintext it decrypts to under the key keyset, its disabled keys
//! included, or its bytes on the wire) and its value ([`Value`]: a
//! plaintext, a ciphertext that does not decrypt, or not a ciphertext),
//! with the associated data `--value-key` binds it to; and a record to
//! write ([`Write`]).

use tombstone_crypt::error::ErrorKind;
use tombstone_crypt::format::{self, Header};
use tombstone_crypt::{Bytes, Context, Deserializer as _, DeterministicDeserializer, Keyset};
use zeroize::Zeroizing;

use crate::args::ValueKey;
use crate::outcome::{fail, Fail};
use crate::read::{Rec, Setup};

/// What a present value is, and its plaintext when it decrypts.
pub(crate) enum Value {
    /// It decrypts: its plaintext, and the key id it names.
    Plain(Zeroizing<Vec<u8>>, u32),
    /// A ciphertext that does not decrypt, under the key id it names.
    Undecryptable(u32),
    /// Not a ciphertext of the keyset (a plaintext value).
    NotCiphertext,
}

/// What the value `v` of record `r` is, its associated data bound to
/// `bound` (the bytes of the record key that `--value-key` names; `None`
/// when they are unknown: a record key that does not decrypt). A KMS error
/// (the KMS down, or refusing a data key) fails the command: the value
/// cannot be told apart.
pub(crate) fn open_value(
    s: &Setup,
    r: &Rec<'_>,
    v: &[u8],
    bound: Option<&[u8]>,
) -> Result<Value, Fail> {
    let Some(header) = Header::parse(v) else {
        return Ok(Value::NotCiphertext);
    };
    let id = header.key_id.0;
    if !s.keyset.names_a_key(v) {
        // A header and room for the shortest value ciphertext (AES-GCM's
        // nonce and tag), under a key this keyset lacks: a ciphertext it
        // cannot read, more likely than a plaintext value that starts so.
        return Ok(if v.len() >= format::OVERHEAD {
            Value::Undecryptable(id)
        } else {
            Value::NotCiphertext
        });
    }
    // Through the topic's policy, the reader `consume` and the proxy use.
    match s.values.read_value(&s.name, bound, Some(v)) {
        Ok(tombstone_crypt::policy::Read::Value(p)) => Ok(Value::Plain(p, id)),
        Err(e) if e.kind() == ErrorKind::Environment => Err(value_failed(s, r, &e)),
        _ => Ok(Value::Undecryptable(id)),
    }
}

/// The command's failure on the value of `r`: a KMS or key-store error
/// that no other value can get past either.
pub(crate) fn value_failed(s: &Setup, r: &Rec<'_>, e: &tombstone_crypt::Error) -> Fail {
    fail(format!(
        "the value at {}/{} offset {}: {}",
        s.topic,
        r.partition,
        r.offset,
        crate::outcome::chain(e)
    ))
}

/// The context a value is bound to: `name` and, when known, the key's
/// bytes.
pub(crate) fn value_context<'a>(name: &'a str, key: Option<&'a [u8]>) -> Context<'a> {
    match key {
        Some(k) => Context::new(name).with_key(k),
        None => Context::new(name),
    }
}

/// A record key as the commands see it.
pub(crate) struct RecordKey {
    /// What groups its records: its plaintext when the key keyset (its
    /// disabled keys included) decrypts it, else its bytes on the wire.
    pub(crate) group: Vec<u8>,
    /// Whether `group` is a plaintext decrypted with the key keyset.
    pub(crate) encrypted: bool,
    /// Whether it decrypts under the key keyset as given, as a reader's
    /// does (always, without a key keyset).
    pub(crate) readable: bool,
}

/// The plaintext of a record key under `keys`, if it decrypts.
fn open_key(keys: &Keyset, name: &str, wire: &[u8]) -> Option<Vec<u8>> {
    DeterministicDeserializer::new(Bytes, keys.clone())
        .deserialize(&Context::new(name), Some(wire))
        .ok()
        .flatten()
}

/// The record key `wire` as the commands see it: decrypted under the key
/// keyset, else under its disabled keys too, else its bytes.
pub(crate) fn key_of(s: &Setup, wire: &[u8]) -> RecordKey {
    let Some(keys) = &s.key_keyset else {
        return RecordKey {
            group: wire.to_vec(),
            encrypted: false,
            readable: true,
        };
    };
    if let Some(plain) = open_key(keys, &s.name, wire) {
        return RecordKey {
            group: plain,
            encrypted: true,
            readable: true,
        };
    }
    match s
        .widened_keys
        .as_ref()
        .and_then(|all| open_key(all, &s.name, wire))
    {
        Some(plain) => RecordKey {
            group: plain,
            encrypted: true,
            readable: false,
        },
        None => RecordKey {
            group: wire.to_vec(),
            encrypted: false,
            readable: false,
        },
    }
}

/// The bytes of a record key its value is bound to (`--value-key`): its
/// plaintext (the same bytes as on the wire without a key keyset), or its
/// bytes on the wire; `None` when its plaintext is unknown.
pub(crate) fn bound<'a>(s: &Setup, key: &'a RecordKey, wire: &'a [u8]) -> Option<&'a [u8]> {
    match s.value_key {
        ValueKey::Wire => Some(wire),
        ValueKey::Plaintext if key.encrypted || s.key_keyset.is_none() => Some(&key.group),
        ValueKey::Plaintext => None,
    }
}

/// A record to write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Write {
    /// The key's partition.
    pub(crate) partition: i32,
    /// The record key, as on the wire.
    pub(crate) key: Vec<u8>,
    /// The value; `None` for a tombstone.
    pub(crate) value: Option<Vec<u8>>,
}

impl Write {
    /// Its key's and value's bytes.
    pub(crate) fn len(&self) -> usize {
        self.key.len() + self.value.as_ref().map_or(0, Vec::len)
    }
}
