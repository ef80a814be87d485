//! One topic's policy: how every writer and reader of a topic treats its
//! record keys, values and named headers.
//!
//! A [`TopicPolicy`] says what a topic holds, and is the one place that
//! writes and reads it:
//! - **values**: encrypted whole under a keyset ([`TopicPolicy::keyset`]),
//!   or under data subjects' keys ([`TopicPolicy::subject_keys`], see
//!   [`shred`](crate::shred)), or in another format that its own codec
//!   reads (Confluent's: [`TopicPolicy::foreign_values`], which reads and
//!   writes tombstones only);
//! - **record keys**: as they are, or encrypted deterministically under an
//!   AES-SIV keyset ([`TopicPolicy::with_record_keys`]), written by the
//!   write rule ([`KeyForms::writes`]);
//! - **headers**: the values of the headers it names
//!   ([`TopicPolicy::with_headers`]), under the value keyset.
//!
//! The command line's `consume` and `audit` and the proxy
//! (`tombstone-crypt-proxy`) read a topic through it, built from their
//! options or configuration.
//!
//! # A value's format comes from the policy
//! A present value is read as the policy says, never by guessing from its
//! first byte: on a topic whose policy is subject keys, a value that is not
//! a subject-key value (a keyset's ciphertext, a plaintext that starts with
//! `S`) is an error, and on a topic whose policy is a keyset, a subject-key
//! value is an error too. Neither is ever a delete.
//!
//! # Tombstones
//! A tombstone (`None`) is written and read as a tombstone, without a
//! cipher. A present empty value is a value. Only a shred makes a present
//! value read as a delete ([`Read::Shredded`]), and only on a topic whose
//! policy is subject keys, for a value whose key the key store records as
//! shredded.
//!
//! # A record told apart completely
//! A reader that counts rather than reads (an audit, a repair's plan) asks
//! the policy what a record is, and never reads a format's bytes itself:
//! [`TopicPolicy::classify_value`] tells a tombstone, a value and the key
//! id it was under, a shredded subject's value, a value of the policy's
//! format that does not read (and why), and a value of another format (a
//! plaintext, a subject-key value on a keyset's topic) apart;
//! [`TopicPolicy::classify_key`] tells a record key's plaintext under an
//! enabled key from one under a key no reader uses any more.
//!
//! # Headers
//! A named header's value is the keyset's ciphertext
//! ([`Keyset::encrypt`]) with associated data the
//! [`AadPolicy::TopicAndKey`] encoding of the record's context (topic and
//! plaintext record key), then `u32be(len(name)) | name`: moved to another
//! name, key or topic, or a value's ciphertext put in a header, it does
//! not authenticate. A null header value stays null, on a tombstone too.
//! Headers need a value keyset: a policy of subject keys names none (a
//! header under a key that a shred does not reach would outlive the shred).
//!
//! ```
//! use tombstone_crypt::policy::{Read, TopicPolicy};
//! use tombstone_crypt::{KeyTemplate, Keyset};
//!
//! let policy = TopicPolicy::keyset(Keyset::generate())
//!     .with_record_keys(Keyset::generate_with(KeyTemplate::aes256_siv())?)?;
//! let key = policy.write_key("users", b"alice")?.expect("keys are encrypted");
//! let value = policy.write_value("users", Some(b"alice"), Some(b"{}"))?;
//!
//! // A reader of the topic, with the same policy.
//! let plain_key = policy.read_key("users", key.primary())?;
//! assert_eq!(&plain_key[..], b"alice");
//! let read = policy.read_value("users", Some(&plain_key), value.as_deref())?;
//! assert!(matches!(read, Read::Value(ref v) if &v[..] == b"{}"));
//! // A tombstone stays one.
//! assert_eq!(policy.write_value("users", Some(b"alice"), None)?, None);
//! assert!(matches!(policy.read_value("users", Some(b"alice"), None)?, Read::Tombstone));
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

use std::sync::Arc;

use zeroize::Zeroizing;

use crate::codec::Bytes;
use crate::context::{AadPolicy, Context};
use crate::error::{Error, KeysetErrorKind};
use crate::key_id::KeyId;
use crate::keyset::Keyset;
use crate::record_key::KeyForms;
use crate::serde::{
    DecryptingDeserializer, Deserializer, DeterministicDeserializer, DeterministicSerializer,
    EncryptingSerializer, Serializer,
};
use crate::shred::{SubjectEncrypting, SubjectKeys};

/// What a topic's present values are under.
#[derive(Clone, Debug)]
enum Values {
    /// Whole, under a keyset.
    Keyset {
        keyset: Keyset,
        aad: AadPolicy,
        ser: EncryptingSerializer<Bytes>,
        de: DecryptingDeserializer<Bytes>,
    },
    /// Under their subjects' keys.
    Subjects(SubjectEncrypting<Bytes, [u8]>),
    /// In another format, read and written by its own codec: only a
    /// tombstone is this policy's to read or write.
    Foreign,
}

/// A topic's policy: its values' keys, its record keys' keyset (if they
/// are encrypted) and the headers it encrypts. See the [module
/// docs](self).
#[derive(Clone, Debug)]
pub struct TopicPolicy {
    values: Values,
    keys: Option<(
        Keyset,
        DeterministicSerializer<Bytes>,
        DeterministicDeserializer<Bytes>,
    )>,
    headers: Vec<String>,
    /// The record keys' keyset with its disabled keys enabled, when it has
    /// any: to tell a key's plaintext under a key no reader uses any more
    /// ([`TopicPolicy::classify_key`]).
    widened: Option<DeterministicDeserializer<Bytes>>,
}

/// A present value or a tombstone, as a reader of the topic gets it.
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Read {
    /// A tombstone: the record's value is null.
    Tombstone,
    /// A present value's plaintext (zeroized when dropped).
    Value(Zeroizing<Vec<u8>>),
    /// A present value under the key of a subject that was shredded: a
    /// delete, told apart from a tombstone.
    Shredded,
}

impl Read {
    /// Whether a reader takes it as a delete (a tombstone or a shredded
    /// value).
    pub fn is_delete(&self) -> bool {
        !matches!(self, Read::Value(_))
    }
}

/// What a record's value is under a topic's policy, told completely
/// ([`TopicPolicy::classify_value`]): what a reader that counts (an audit,
/// a repair's plan) needs beside what [`Read`] gives, so that it never
/// reads a format's bytes itself.
#[derive(Debug)]
#[non_exhaustive]
pub enum ValueRead {
    /// A tombstone: the record's value is null.
    Tombstone,
    /// It reads: its plaintext, and the key id it was sealed under (a
    /// keyset's ciphertext; `None` under subject keys).
    Value {
        /// The plaintext (zeroized when dropped).
        plaintext: Zeroizing<Vec<u8>>,
        /// The key id its header names.
        key_id: Option<KeyId>,
    },
    /// A shredded subject's value: a delete ([`Read::Shredded`]).
    Shredded,
    /// A value of the policy's format that does not read: the key id it
    /// names (a keyset's ciphertext) and why: not authentic in its
    /// context, under a key the keyset lacks or has disabled, its subject's
    /// key unknown to the key store ([`Error::UnknownSubjectKey`]), a
    /// shredded subject's value under strict subject keys
    /// ([`Error::Shredded`]), no record key to name its subject. Never a
    /// delete.
    Unreadable {
        /// The key id its header names, if it has one.
        key_id: Option<KeyId>,
        /// Why it does not read.
        why: Error,
    },
    /// Not a value of a keyset's format: a plaintext (no header, or a
    /// header under a key the keyset lacks on bytes too short to be a
    /// ciphertext), or a value of subject keys' format on a keyset's topic.
    /// Under subject keys every present value is read as one (a value
    /// that is not is [`ValueRead::Unreadable`]).
    Foreign(Foreign),
}

/// What a present value is when it is not of a keyset policy's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Foreign {
    /// No ciphertext of this library: a plaintext value.
    Plaintext,
    /// A value of subject keys' format ([`shred`](crate::shred)), which a
    /// keyset does not read: never taken for a plaintext to encrypt again.
    SubjectKeys,
}

/// A record key as a reader of the topic knows it
/// ([`TopicPolicy::classify_key`]).
#[derive(Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyRead {
    /// The policy leaves record keys as they are: the bytes are the key.
    AsWritten,
    /// It decrypts: its plaintext, the key id its form names, and whether
    /// a reader decrypts it (under an enabled key) or only one that knows
    /// the keyset's disabled keys too.
    Decrypted {
        /// The key's plaintext (zeroized when dropped).
        plaintext: Zeroizing<Vec<u8>>,
        /// The key id its form names.
        key_id: KeyId,
        /// Whether the key it is under is enabled.
        enabled: bool,
    },
    /// It decrypts under no key of the record keys' keyset, enabled or
    /// disabled.
    Unreadable,
}

/// The context of a record of topic `name` with plaintext key `key`.
fn context<'a>(name: &'a str, key: Option<&'a [u8]>) -> Context<'a> {
    match key {
        Some(k) => Context::new(name).with_key(k),
        None => Context::new(name),
    }
}

/// Whether `keyset` holds a key whose data keys come from a KMS.
fn has_kms_keys(keyset: &Keyset) -> bool {
    keyset
        .keys()
        .any(|(id, _)| keyset.key_type(id) == Some(crate::header::KeyType::KmsEnvelope))
}

/// Why a policy of values in another format refuses a present value.
const FOREIGN: &str = "the topic's values are in another format, read and written by its own codec, not by this policy";

fn refused(detail: impl Into<String>) -> Error {
    Error::Keyset {
        kind: KeysetErrorKind::Template,
        detail: detail.into(),
    }
}

impl TopicPolicy {
    /// Values encrypted whole under `values` (bound to the topic and the
    /// record key: [`AadPolicy::TopicAndKey`]); record keys and headers as
    /// they are.
    pub fn keyset(values: Keyset) -> Self {
        TopicPolicy {
            values: Values::Keyset {
                ser: EncryptingSerializer::new(Bytes, values.clone()),
                de: DecryptingDeserializer::new(Bytes, values.clone()),
                keyset: values,
                aad: AadPolicy::TopicAndKey,
            },
            keys: None,
            headers: Vec::new(),
            widened: None,
        }
    }

    /// Values under their subjects' keys (the subject is the record key's
    /// plaintext; values are bound to the topic and the record key).
    pub fn subject_keys(keys: Arc<SubjectKeys>) -> Self {
        TopicPolicy {
            values: Values::Subjects(SubjectEncrypting::new(keys, Bytes)),
            keys: None,
            headers: Vec::new(),
            widened: None,
        }
    }

    /// A policy whose values are in another format (Confluent's, say),
    /// read and written by that format's own codec: a tombstone reads and
    /// writes as one, a present value is refused both ways (never taken for
    /// this library's ciphertext or written as a plaintext). Its record
    /// keys are read as any policy's ([`with_record_keys`](Self::with_record_keys)).
    ///
    /// ```
    /// use tombstone_crypt::policy::{Read, TopicPolicy};
    ///
    /// let policy = TopicPolicy::foreign_values();
    /// assert_eq!(policy.read_value("t", Some(b"k"), None)?, Read::Tombstone);
    /// assert_eq!(policy.write_value("t", Some(b"k"), None)?, None);
    /// assert!(policy.read_value("t", Some(b"k"), Some(b"\x00\x00\x00\x00\x01{}")).is_err());
    /// assert!(policy.write_value("t", Some(b"k"), Some(b"v")).is_err());
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn foreign_values() -> Self {
        TopicPolicy {
            values: Values::Foreign,
            keys: None,
            headers: Vec::new(),
            widened: None,
        }
    }

    /// The same policy with values bound to `aad` (a keyset's values only).
    ///
    /// # Errors
    /// [`Error::Keyset`] on a policy of subject keys: their values are
    /// always bound to the topic and the record key.
    pub fn with_aad(mut self, policy: AadPolicy) -> Result<Self, Error> {
        match &mut self.values {
            Values::Keyset {
                keyset,
                aad,
                ser,
                de,
            } => {
                *aad = policy;
                *ser = EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy);
                *de = DecryptingDeserializer::new(Bytes, keyset.clone()).with_aad(policy);
                Ok(self)
            }
            Values::Subjects(_) if policy == AadPolicy::TopicAndKey => Ok(self),
            Values::Subjects(_) => Err(refused(
                "values under subject keys are bound to the topic and the record key",
            )),
            Values::Foreign => Err(refused(FOREIGN)),
        }
    }

    /// The same policy with record keys encrypted deterministically under
    /// `keys` (AES-SIV; the write rule's older forms under its other
    /// enabled keys).
    ///
    /// # Errors
    /// [`Error::Keyset`] when `keys` is not deterministic.
    pub fn with_record_keys(mut self, keys: Keyset) -> Result<Self, Error> {
        if !keys.is_deterministic() {
            return Err(refused("record keys need a deterministic (AES-SIV) keyset"));
        }
        self.widened = keys
            .widened()
            .map(|all| DeterministicDeserializer::new(Bytes, all));
        self.keys = Some((
            keys.clone(),
            DeterministicSerializer::new(Bytes, keys.clone()),
            DeterministicDeserializer::new(Bytes, keys),
        ));
        Ok(self)
    }

    /// The same policy with the values of the headers named `names`
    /// encrypted under the value keyset (see the [module docs](self)).
    ///
    /// # Errors
    /// [`Error::Keyset`] on a policy of subject keys when `names` is not
    /// empty.
    pub fn with_headers<S: Into<String>>(
        mut self,
        names: impl IntoIterator<Item = S>,
    ) -> Result<Self, Error> {
        self.headers = names.into_iter().map(Into::into).collect();
        if !self.headers.is_empty() && matches!(self.values, Values::Subjects(_)) {
            return Err(refused(
                "headers are encrypted under a value keyset: a policy of subject keys has none (a header a shred does not reach would outlive the shred)",
            ));
        }
        if !self.headers.is_empty() && matches!(self.values, Values::Foreign) {
            return Err(refused(
                "headers are encrypted under a value keyset: a policy of values in another format has none",
            ));
        }
        Ok(self)
    }

    /// The value keyset (`None` under subject keys).
    pub fn value_keyset(&self) -> Option<&Keyset> {
        match &self.values {
            Values::Keyset { keyset, .. } => Some(keyset),
            Values::Subjects(_) | Values::Foreign => None,
        }
    }

    /// The subject keys (`None` under a keyset).
    pub fn subject_key_set(&self) -> Option<&Arc<SubjectKeys>> {
        match &self.values {
            Values::Keyset { .. } | Values::Foreign => None,
            Values::Subjects(s) => Some(s.keys()),
        }
    }

    /// The record keys' keyset (`None`: record keys as they are).
    pub fn record_keys(&self) -> Option<&Keyset> {
        self.keys.as_ref().map(|(k, _, _)| k)
    }

    /// Whether the header `name`'s values are encrypted.
    pub fn encrypts_header(&self, name: &str) -> bool {
        self.headers.iter().any(|n| n == name)
    }

    /// The headers whose values are encrypted.
    pub fn headers(&self) -> &[String] {
        &self.headers
    }

    /// Whether writing or reading may block on I/O: a keyset with
    /// `kms-envelope` keys (a KMS call for a data key), or subject keys (the
    /// key store).
    pub fn may_block(&self) -> bool {
        let values = match &self.values {
            Values::Keyset { keyset, .. } => has_kms_keys(keyset),
            Values::Subjects(_) => true,
            Values::Foreign => false,
        };
        values || self.keys.as_ref().is_some_and(|(k, _, _)| has_kms_keys(k))
    }

    /// The forms of the plaintext record key `key` on topic `name`: the
    /// write rule's records ([`KeyForms::writes`]); `None` when the policy
    /// leaves record keys as they are.
    ///
    /// # Errors
    /// As [`Serializer::key_forms`].
    pub fn write_key(&self, name: &str, key: &[u8]) -> Result<Option<KeyForms>, Error> {
        let Some((_, ser, _)) = &self.keys else {
            return Ok(None);
        };
        ser.key_forms(&Context::new(name), key).map(Some)
    }

    /// A value to write on topic `name` under plaintext record key `key`:
    /// `None` (a tombstone) stays `None`; a present value is encrypted.
    ///
    /// # Errors
    /// As the value keyset's or the subject keys' serializer
    /// ([`Error::MissingRecordKey`] under subject keys without a key).
    pub fn write_value(
        &self,
        name: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Option<Vec<u8>>, Error> {
        let ctx = context(name, key);
        let written = match &self.values {
            Values::Keyset { ser, .. } => ser.serialize(&ctx, value)?,
            Values::Subjects(s) => s.serialize(&ctx, value)?,
            Values::Foreign if value.is_none() => None,
            Values::Foreign => return Err(refused(FOREIGN)),
        };
        match (value, &written) {
            (Some(_), None) => Err(Error::InnerReturnedNone),
            _ => Ok(written),
        }
    }

    /// A header's value to write: its ciphertext when the policy names
    /// `header`, `None` when it does not (the value goes as it is).
    ///
    /// # Errors
    /// As [`Keyset::encrypt`]; [`Error::ContextTooLong`] for a name of
    /// 4 GiB or more.
    pub fn write_header(
        &self,
        name: &str,
        key: Option<&[u8]>,
        header: &str,
        value: &[u8],
    ) -> Result<Option<Vec<u8>>, Error> {
        let Some(keyset) = self.header_keyset(header) else {
            return Ok(None);
        };
        let ad = header_aad(&context(name, key), header)?;
        keyset.encrypt(value, &ad).map(Some)
    }

    /// The plaintext of the record key `wire` as it is on topic `name`
    /// (itself when the policy leaves record keys as they are).
    ///
    /// # Errors
    /// A key that does not decrypt under the record keys' keyset.
    pub fn read_key(&self, name: &str, wire: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        match &self.keys {
            None => Ok(Zeroizing::new(wire.to_vec())),
            Some((_, _, de)) => {
                let (_, plaintext) = de.deserialize_key(&Context::new(name), wire)?;
                Ok(Zeroizing::new(plaintext))
            }
        }
    }

    /// The value `value` of a record of topic `name` with plaintext record
    /// key `key`, read as the policy says.
    ///
    /// # Errors
    /// A present value that does not authenticate, is not of the policy's
    /// format, or under subject keys names a key the key store neither
    /// holds nor records as shredded ([`Error::UnknownSubjectKey`]); with
    /// strict subject keys, a shredded subject's value
    /// ([`Error::Shredded`]); a KMS or key-store failure. None of them is
    /// a delete.
    pub fn read_value(
        &self,
        name: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<Read, Error> {
        let Some(v) = value else {
            return Ok(Read::Tombstone);
        };
        let ctx = context(name, key);
        let read: Option<Vec<u8>> = match &self.values {
            Values::Keyset { de, .. } => de.deserialize(&ctx, Some(v))?,
            Values::Subjects(s) => s.deserialize(&ctx, Some(v))?,
            Values::Foreign => return Err(refused(FOREIGN)),
        };
        Ok(match read {
            Some(plain) => Read::Value(Zeroizing::new(plain)),
            // Only a shred's record reads a present value as a delete.
            None => match &self.values {
                Values::Subjects(_) => Read::Shredded,
                Values::Keyset { .. } | Values::Foreign => return Err(Error::InnerReturnedNone),
            },
        })
    }

    /// What the value `value` of a record of topic `name` with plaintext
    /// record key `key` is, told completely ([`ValueRead`]): under a
    /// keyset, a subject-key value or a plaintext is told apart from a
    /// ciphertext that does not read; under subject keys, every present
    /// value is read as one.
    ///
    /// # Errors
    /// Only what stops a reader ([`ErrorKind::Environment`](crate::error::ErrorKind::Environment):
    /// a KMS or key-store failure); every error of the value itself is a
    /// [`ValueRead::Unreadable`].
    pub fn classify_value(
        &self,
        name: &str,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Result<ValueRead, Error> {
        use crate::error::ErrorKind;
        let Some(v) = value else {
            return Ok(ValueRead::Tombstone);
        };
        let key_id = match &self.values {
            Values::Keyset { keyset, .. } => {
                if crate::shred::has_subject_shape(v) && !keyset.names_a_key(v) {
                    return Ok(ValueRead::Foreign(Foreign::SubjectKeys));
                }
                let Some(header) = crate::header::Header::parse(v) else {
                    return Ok(ValueRead::Foreign(Foreign::Plaintext));
                };
                let id = header.key_id;
                if !keyset.names_a_key(v) {
                    // Room for the shortest value ciphertext (AES-GCM's
                    // nonce and tag) under a key this keyset lacks: a
                    // ciphertext it cannot read, more likely than a
                    // plaintext value that starts so.
                    return Ok(if v.len() >= crate::envelope::OVERHEAD {
                        ValueRead::Unreadable {
                            key_id: Some(id),
                            why: Error::UnknownKeyId(id),
                        }
                    } else {
                        ValueRead::Foreign(Foreign::Plaintext)
                    });
                }
                Some(id)
            }
            Values::Subjects(_) => {
                if key.is_none() {
                    return Ok(ValueRead::Unreadable {
                        key_id: None,
                        why: Error::MissingRecordKey,
                    });
                }
                None
            }
            Values::Foreign => None,
        };
        match self.read_value(name, key, Some(v)) {
            Ok(Read::Value(plaintext)) => Ok(ValueRead::Value { plaintext, key_id }),
            Ok(Read::Shredded) => Ok(ValueRead::Shredded),
            Ok(Read::Tombstone) => Ok(ValueRead::Tombstone),
            Err(e) if e.kind() == ErrorKind::Environment => Err(e),
            Err(why) => Ok(ValueRead::Unreadable { key_id, why }),
        }
    }

    /// What the record key `wire` of topic `name` is, told completely
    /// ([`KeyRead`]): its plaintext under the record keys' keyset, its
    /// disabled keys included, and whether a reader decrypts it.
    pub fn classify_key(&self, name: &str, wire: &[u8]) -> KeyRead {
        let Some((_, _, de)) = &self.keys else {
            return KeyRead::AsWritten;
        };
        let Some(header) = crate::header::Header::parse(wire) else {
            return KeyRead::Unreadable;
        };
        let ctx = Context::new(name);
        let opened =
            |de: &DeterministicDeserializer<Bytes>| de.deserialize(&ctx, Some(wire)).ok().flatten();
        if let Some(plain) = opened(de) {
            return KeyRead::Decrypted {
                plaintext: Zeroizing::new(plain),
                key_id: header.key_id,
                enabled: true,
            };
        }
        match self.widened.as_ref().and_then(opened) {
            Some(plain) => KeyRead::Decrypted {
                plaintext: Zeroizing::new(plain),
                key_id: header.key_id,
                enabled: false,
            },
            None => KeyRead::Unreadable,
        }
    }

    /// A header's value as read: its plaintext when the policy names
    /// `header`, `None` when it does not (the value is as it is).
    ///
    /// # Errors
    /// A named header's value that does not authenticate.
    pub fn read_header(
        &self,
        name: &str,
        key: Option<&[u8]>,
        header: &str,
        value: &[u8],
    ) -> Result<Option<Zeroizing<Vec<u8>>>, Error> {
        let Some(keyset) = self.header_keyset(header) else {
            return Ok(None);
        };
        let ad = header_aad(&context(name, key), header)?;
        keyset.decrypt(value, &ad).map(|p| Some(Zeroizing::new(p)))
    }

    fn header_keyset(&self, header: &str) -> Option<&Keyset> {
        if !self.encrypts_header(header) {
            return None;
        }
        self.value_keyset()
    }
}

/// The associated data of a header value: the [`AadPolicy::TopicAndKey`]
/// associated data of the record's context, then
/// `u32be(len(name)) | name` (UTF-8). Longer than any value's associated
/// data of the same context, with the key's length field in the same
/// place, so a value never decrypts as a header, nor a header under
/// another name, key or topic.
fn header_aad(ctx: &Context<'_>, header: &str) -> Result<Vec<u8>, Error> {
    let mut ad = ctx.associated_data(AadPolicy::TopicAndKey)?;
    let len = u32::try_from(header.len()).map_err(|_| Error::ContextTooLong)?;
    ad.extend_from_slice(&len.to_be_bytes());
    ad.extend_from_slice(header.as_bytes());
    Ok(ad)
}

#[cfg(test)]
mod tests;
