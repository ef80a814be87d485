//! What one record is to the commands: its key ([`RecordKey`]: the
//! plaintext it decrypts to under the key keyset, its disabled keys
//! included, or its bytes on the wire) and its value's plaintext, as the
//! topic's policy classifies them, with the associated data `--value-key`
//! binds it to; and a record to write ([`Write`]).

use tombstone_crypt::policy::{KeyRead, ValueRead};
use tombstone_crypt::Context;
use zeroize::Zeroizing;

use crate::args::ValueKey;
use crate::outcome::{fail, Fail};
use crate::read::{Rec, Setup};

/// The plaintext of the value `v` of record `r` under the topic's policy
/// ([`TopicPolicy::classify_value`](tombstone_crypt::policy::TopicPolicy::classify_value)),
/// its associated data bound to `bound` (the bytes of the record key that
/// `--value-key` names; `None` when they are unknown: a record key that
/// does not decrypt); `None` when it does not read. A KMS error (the KMS
/// down, or refusing a data key) fails the command: the value cannot be
/// told apart.
pub(crate) fn open_value(
    s: &Setup,
    r: &Rec<'_>,
    v: &[u8],
    bound: Option<&[u8]>,
) -> Result<Option<Zeroizing<Vec<u8>>>, Fail> {
    match s
        .values
        .classify_value(&s.name, bound, Some(v))
        .map_err(|e| value_failed(s, r, &e))?
    {
        ValueRead::Value { plaintext, .. } => Ok(Some(plaintext)),
        _ => Ok(None),
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

/// The record key `wire` as the commands see it, as the topic's policy
/// classifies it: decrypted under the key keyset, else under its disabled
/// keys too, else its bytes.
pub(crate) fn key_of(s: &Setup, wire: &[u8]) -> RecordKey {
    match s.values.classify_key(&s.name, wire) {
        KeyRead::AsWritten => RecordKey {
            group: wire.to_vec(),
            encrypted: false,
            readable: true,
        },
        KeyRead::Decrypted {
            plaintext, enabled, ..
        } => RecordKey {
            group: plaintext.to_vec(),
            encrypted: true,
            readable: enabled,
        },
        _ => RecordKey {
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
        ValueKey::Plaintext if key.encrypted || s.key_keyset().is_none() => Some(&key.group),
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
