//! The crate's one error type, [`Error`], with what it may carry: the
//! [`Cause`] from below the layer (a store, a changelog, a KMS, Kafka) and,
//! for a keyset that did not load, its [`KeysetErrorKind`].
//!
//! No error, and no `Debug` of one, holds key bytes, plaintext or
//! ciphertext: a message quotes input only as far as it is printable and
//! short.
//!
//! A store's or a changelog's failure keeps its cause, returned by
//! `source()` ([`Error::store`] and [`Error::changelog`] build them for
//! stores and changelogs of your own); keyset problems carry a
//! [`KeysetErrorKind`]; key management mistakes (`KeyNotFound`,
//! `KeyNotEnabled`, `PrimaryKey`) are distinct from decryption failures
//! (`UnknownKeyId`, `KeyDisabled`, `Decryption`). Codec errors keep only a
//! redacted description (kind and position), never the inner codec's own
//! message, because serde's messages quote values.
//!
//! ```
//! use tombstone_crypt::error::KeysetErrorKind;
//! use tombstone_crypt::{Error, Keyset};
//!
//! match Keyset::from_tink_json("{\"primaryKeyId\": 1}") {
//!     Err(Error::Keyset { kind, .. }) => assert_eq!(kind, KeysetErrorKind::Json),
//!     other => panic!("{other:?}"),
//! }
//! ```

use core::fmt;
use std::error::Error as StdError;
use std::sync::Arc;

use crate::key_id::KeyId;

/// A failure from below the layer (a store, a changelog, a KMS), kept so that
/// [`Error::source`](std::error::Error::source) can return it. Shared, so
/// that [`Error`] stays `Clone`.
pub type Cause = Arc<dyn StdError + Send + Sync + 'static>;

/// Everything that can go wrong in tombstone-crypt.
///
/// No variant ever carries key bytes or plaintext. Every authentication
/// failure is the same [`Error::Decryption`]: an attacker learns nothing about
/// which check failed. The version byte and key id of a ciphertext are public,
/// so [`Error::UnsupportedVersion`] and [`Error::UnknownKeyId`] are distinct.
///
/// Variants that wrap a failure from below ([`Error::Store`],
/// [`Error::Changelog`], [`Error::Kms`]) return it from
/// [`source()`](std::error::Error::source); their `Display` says what this
/// crate was doing, and the cause is one `source()` away (print the chain to
/// see both). Two such errors compare equal when their details and their
/// causes' messages are equal.
///
/// Codec failures keep only a redacted description (the kind of failure and
/// where it happened), never the inner codec's own message: serde's messages
/// quote the offending values, which would put plaintext into logs.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum Error {
    /// The ciphertext is shorter than the shortest ciphertext the keyset's
    /// keys write (33 bytes for AES-GCM: prefix, key id, nonce and tag).
    Truncated {
        /// How many bytes were given.
        len: usize,
        /// How many bytes a ciphertext has at least.
        min: usize,
    },
    /// The first byte is not the Tink prefix `0x01`: not a ciphertext of
    /// this format (a plaintext value written before encryption was turned
    /// on, say). The byte itself is not kept: it may be a byte of plaintext.
    UnsupportedVersion,
    /// No key with this id is in the keyset.
    UnknownKeyId(KeyId),
    /// The key with this id is in the keyset but disabled: it never decrypts.
    KeyDisabled(KeyId),
    /// Authentication failed: wrong key, wrong context (topic or record key),
    /// or a tampered ciphertext. Deliberately says nothing more.
    Decryption,
    /// The cipher refused to encrypt (the value or the associated data is
    /// longer than AES-GCM allows).
    Encryption,
    /// An in-place encryption was told that the first `head` bytes of a
    /// buffer are room for the header, but the buffer holds only `len`.
    Headroom {
        /// The room the caller said the buffer starts with.
        head: usize,
        /// The buffer's length.
        len: usize,
    },
    /// An inner codec failed to encode or decode a value.
    Codec {
        /// The codec's name (`"bincode"`, `"json"`, `"utf8"`, ...).
        codec: &'static str,
        /// A redacted description: the kind of failure, never a value.
        detail: String,
    },
    /// An inner serializer returned `None` for a present value: a present
    /// value must never silently become a tombstone.
    InnerReturnedNone,
    /// A context field is too long to be encoded in the associated data.
    ContextTooLong,
    /// A keyset (or its Tink JSON) is malformed or unsupported.
    Keyset {
        /// What kind of problem it is.
        kind: KeysetErrorKind,
        /// What exactly is wrong, naming the key id where there is one
        /// (never key bytes).
        detail: String,
    },
    /// A key management call named a key id that is not in the keyset.
    KeyNotFound(KeyId),
    /// A key management call would disable or remove the primary key.
    PrimaryKey(KeyId),
    /// A key management call would make a disabled key primary.
    KeyNotEnabled(KeyId),
    /// The keyset's primary key cannot do what was asked (for example a
    /// deterministic key asked for randomized encryption).
    WrongKeyType {
        /// The primary key's id.
        key_id: KeyId,
        /// What was asked of it.
        operation: &'static str,
    },
    /// A Kafka record that must have a key has none.
    MissingRecordKey,
    /// The backing store failed (I/O, corruption, a closed database).
    Store {
        /// What the store was doing.
        detail: String,
        /// The store's own error, returned by `source()`.
        cause: Option<Cause>,
    },
    /// A changelog failed (I/O or a broker error).
    Changelog {
        /// What the changelog was doing.
        detail: String,
        /// The underlying error, returned by `source()`.
        cause: Option<Cause>,
    },
    /// A Kafka client failed (to produce, to consume, to connect).
    Kafka {
        /// What the client was doing.
        detail: String,
        /// rdkafka's error, returned by `source()`.
        cause: Option<Cause>,
    },
    /// A consumed record could not be decoded (a value that does not
    /// decrypt, say): where it is, and why (returned by `source()`).
    Record {
        /// Its topic.
        topic: String,
        /// Its partition.
        partition: i32,
        /// Its offset.
        offset: i64,
        /// What went wrong.
        cause: Box<Error>,
    },
    /// A change-logging store refuses to serve: an append or a flush failed
    /// earlier, so the store and its changelog may disagree. Rebuild it from
    /// the changelog with
    /// [`ChangeLoggingStore::recover`](crate::store::ChangeLoggingStore::recover).
    NeedsRestore,
    /// An encrypted field could not be written or read (no keys in scope,
    /// a ciphertext that does not authenticate at this path, a plaintext
    /// that is not the field's value): which field, and why (returned by
    /// `source()`). The path names the record's structure (field names,
    /// indexes, map keys), never a field's value.
    Field {
        /// The field's path (`/customer/cards/0/number`).
        path: String,
        /// What went wrong.
        cause: Box<Error>,
    },
    /// A key management service (KMS) failed or refused (down, slow,
    /// denied, no client for a key URI), or an envelope ciphertext's
    /// encrypted DEK is malformed.
    Kms {
        /// What was being done, naming the key URI where there is one
        /// (never key bytes).
        detail: String,
        /// The KMS client's own error (HTTP, I/O, the service's answer),
        /// returned by `source()`.
        cause: Option<Cause>,
    },
    /// Confluent's format: a frame, a rule, a schema or a DEK that this
    /// crate cannot read or use (what is wrong, never a value or a key).
    Confluent {
        /// What is wrong.
        detail: String,
    },
    /// A Schema Registry (or its DEK registry) that did not answer, or
    /// answered with an error other than "not found": nothing is known of
    /// the record, which may be fine (a command stops, exit 2, rather than
    /// count it as unreadable).
    Registry {
        /// What was asked, and what went wrong (never a credential).
        detail: String,
    },
    /// A value under a subject key ([`shred`](crate::shred)) whose subject
    /// was shredded: its DEK is gone. With `as_delete`,
    /// [`Deserializer::deserialize`](crate::Deserializer::deserialize)
    /// reads the value as a delete (`None`) instead of returning this; a
    /// strict [`SubjectKeys`](crate::shred::SubjectKeys) returns it.
    Shredded {
        /// Whether the value reads as a delete.
        as_delete: bool,
    },
    /// A file a front end named could not be read or is not what it must
    /// be ([`files`](crate::files)): its path and what it should hold,
    /// with why (an I/O error, or the [`Error`] its contents gave, whose
    /// kind it takes).
    File {
        /// The file and what it was to hold ("the keyset PATH").
        detail: String,
        /// Why: an I/O error, or the error its contents gave.
        cause: Cause,
    },
    /// A value under a subject key ([`shred`](crate::shred)) whose DEK the
    /// key store neither holds nor records as shredded: the wrong key
    /// store, one that lost records, or a value whose header was changed.
    /// Never a delete: only a shred's record makes a value read as one.
    /// Its message names neither field: they are the value's bytes as
    /// read, a plaintext's when the value is not one of this format.
    UnknownSubjectKey {
        /// The value's subject tag (a keyed hash: never the subject).
        tag: [u8; 16],
        /// The DEK id the value names.
        dek_id: [u8; 8],
    },
}

/// What an [`Error`] tells its caller to do, grouped as rustls groups its
/// errors: so that a reader of many values need not list variants to tell
/// "stop" from "report this value and go on" ([`Error::kind`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Something outside the value failed or refused: a KMS, a Schema
    /// Registry, a store, a changelog, a Kafka client, or a store that must
    /// be restored first. Nothing is known of the value, and no other value
    /// gets past it either: a reader stops (the same call may work later)
    /// rather than count the value as unreadable.
    Environment,
    /// This value (or record) cannot be read or written as it is: not this
    /// format, too short, under a key the keyset lacks or has disabled, not
    /// authentic in its context, a codec's failure, Confluent's frame or
    /// rule refused, a shredded subject's value, a subject key the key store
    /// does not know, a record without the key it needs. A reader reports
    /// it and goes on.
    Value,
    /// The caller's keys or use of the API: a malformed keyset, a key
    /// management call refused, a primary key of the wrong type, an inner
    /// serializer that returned nothing, a buffer without its headroom.
    Usage,
}

/// The kind of an [`Error::Keyset`]: what is wrong with a keyset.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum KeysetErrorKind {
    /// The text is not JSON, or not of the shape of a Tink keyset.
    Json,
    /// The keyset names no primary key.
    NoPrimary,
    /// The primary key is missing, disabled or destroyed.
    BadPrimary,
    /// More keys than [`MAX_KEYS`](crate::MAX_KEYS).
    TooManyKeys,
    /// Two keys share an id.
    DuplicateKeyId,
    /// A key status other than `ENABLED`, `DISABLED` or `DESTROYED`.
    UnknownStatus,
    /// An output prefix other than `TINK` (`RAW`, `LEGACY`, `CRUNCHY`).
    UnsupportedOutputPrefix,
    /// A key type (type URL) this crate does not implement.
    UnsupportedKeyType,
    /// A key material type that does not fit the key type.
    KeyMaterialType,
    /// A key's value is not base64.
    Base64,
    /// A key's serialized proto is malformed, of an unsupported version, or
    /// holds a key of the wrong size.
    KeyFormat,
    /// A key template asks for something that cannot be built.
    Template,
    /// No KMS client supports an envelope key's KEK URI, or its client
    /// cannot be set up (a malformed URI, missing configuration).
    KmsClient,
}

impl Error {
    /// An [`Error::Confluent`].
    #[cfg(feature = "confluent")]
    pub(crate) fn confluent(detail: impl Into<String>) -> Self {
        Error::Confluent {
            detail: detail.into(),
        }
    }

    /// An [`Error::Registry`].
    #[cfg(feature = "confluent")]
    pub(crate) fn registry(detail: impl Into<String>) -> Self {
        Error::Registry {
            detail: detail.into(),
        }
    }

    /// A codec error for an inner codec written outside this crate.
    ///
    /// `detail` must describe the kind of failure only: never put the value,
    /// or a message that quotes it, into an error.
    pub fn codec(codec: &'static str, detail: impl Into<String>) -> Self {
        Error::Codec {
            codec,
            detail: detail.into(),
        }
    }

    /// A store error for a [`KeyValueStore`](crate::store::KeyValueStore) written
    /// outside this crate: what it was doing, and the error that stopped it
    /// (returned by `source()`).
    ///
    /// ```
    /// use std::error::Error as _;
    /// let io = std::io::Error::new(std::io::ErrorKind::Other, "disk full");
    /// let err = tombstone_crypt::Error::store("write", io);
    /// assert_eq!(err.to_string(), "store failed: write");
    /// assert_eq!(err.source().map(|s| s.to_string()), Some("disk full".to_owned()));
    /// ```
    pub fn store(
        detail: impl Into<String>,
        cause: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Error::Store {
            detail: detail.into(),
            cause: Some(Arc::from(cause.into())),
        }
    }

    /// A changelog error for a [`Changelog`](crate::store::Changelog) written
    /// outside this crate, with the error that caused it.
    pub fn changelog(
        detail: impl Into<String>,
        cause: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Error::Changelog {
            detail: detail.into(),
            cause: Some(Arc::from(cause.into())),
        }
    }

    /// A changelog error with no underlying error (a timeout, a record that
    /// breaks the changelog's rules).
    pub fn changelog_msg(detail: impl Into<String>) -> Self {
        Error::Changelog {
            detail: detail.into(),
            cause: None,
        }
    }

    /// A KMS error for a [`KmsClient`](crate::kms::KmsClient) or
    /// [`KmsAead`](crate::kms::KmsAead) written outside this crate: what it was
    /// doing, and the error that stopped it (returned by `source()`).
    pub fn kms(
        detail: impl Into<String>,
        cause: impl Into<Box<dyn StdError + Send + Sync + 'static>>,
    ) -> Self {
        Error::Kms {
            detail: detail.into(),
            cause: Some(Arc::from(cause.into())),
        }
    }

    /// A KMS error with no underlying error.
    pub fn kms_msg(detail: impl Into<String>) -> Self {
        Error::Kms {
            detail: detail.into(),
            cause: None,
        }
    }

    /// A keyset error of `kind`.
    pub(crate) fn keyset(kind: KeysetErrorKind, detail: impl Into<String>) -> Self {
        Error::Keyset {
            kind,
            detail: detail.into(),
        }
    }

    /// What this error tells its caller to do: stop (the environment
    /// failed), report the value and go on, or fix the keys or the call.
    /// A [`Record`](Error::Record) or [`Field`](Error::Field) error is of
    /// its cause's kind.
    ///
    /// ```
    /// use tombstone_crypt::error::ErrorKind;
    /// use tombstone_crypt::{Error, Keyset};
    ///
    /// let keyset = Keyset::generate();
    /// let read = keyset.decrypt(b"not a ciphertext of this format at all", b"payments");
    /// assert_eq!(read.unwrap_err().kind(), ErrorKind::Value);
    /// assert_eq!(Error::kms_msg("the KMS is down").kind(), ErrorKind::Environment);
    /// ```
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Store { .. }
            | Error::Changelog { .. }
            | Error::Kafka { .. }
            | Error::Kms { .. }
            | Error::Registry { .. }
            | Error::NeedsRestore => ErrorKind::Environment,
            Error::Record { cause, .. } | Error::Field { cause, .. } => cause.kind(),
            // What the file held decides; else reading it failed.
            Error::File { cause, .. } => cause
                .downcast_ref::<Error>()
                .map_or(ErrorKind::Environment, Error::kind),
            Error::Truncated { .. }
            | Error::UnsupportedVersion
            | Error::UnknownKeyId(_)
            | Error::KeyDisabled(_)
            | Error::Decryption
            | Error::Encryption
            | Error::Codec { .. }
            | Error::ContextTooLong
            | Error::MissingRecordKey
            | Error::Confluent { .. }
            | Error::Shredded { .. }
            | Error::UnknownSubjectKey { .. } => ErrorKind::Value,
            Error::Headroom { .. }
            | Error::InnerReturnedNone
            | Error::Keyset { .. }
            | Error::KeyNotFound(_)
            | Error::PrimaryKey(_)
            | Error::KeyNotEnabled(_)
            | Error::WrongKeyType { .. } => ErrorKind::Usage,
        }
    }

    /// The kind of a keyset error, `None` for every other error.
    pub fn keyset_kind(&self) -> Option<KeysetErrorKind> {
        match self {
            Error::Keyset { kind, .. } => Some(*kind),
            _ => None,
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Truncated { len, min } => write!(
                f,
                "ciphertext truncated: {len} bytes, a ciphertext has at least {min}"
            ),
            Error::UnsupportedVersion => f.write_str(
                "not a ciphertext of this format: the first byte is not the version byte 0x01",
            ),
            Error::UnknownKeyId(id) => write!(f, "unknown key id {id}"),
            Error::KeyDisabled(id) => write!(f, "key id {id} is disabled"),
            Error::Decryption => f.write_str("decryption failed"),
            Error::Encryption => f.write_str("encryption failed: value too long for AES-GCM"),
            Error::Headroom { head, len } => write!(
                f,
                "in-place encryption: {head} bytes of room for the header asked for, but the buffer holds {len}"
            ),
            Error::Codec { codec, detail } => write!(f, "{codec} codec failed: {detail}"),
            Error::InnerReturnedNone => f.write_str(
                "inner serde returned no value for a present value (a present value never becomes a tombstone)",
            ),
            Error::ContextTooLong => f.write_str("context too long for the associated data"),
            Error::Keyset { detail, .. } => write!(f, "invalid keyset: {detail}"),
            Error::KeyNotFound(id) => write!(f, "no key with id {id} in the keyset"),
            Error::PrimaryKey(id) => {
                write!(f, "key id {id} is the primary key and cannot be disabled or removed")
            }
            Error::KeyNotEnabled(id) => {
                write!(f, "key id {id} is disabled and cannot become primary")
            }
            Error::WrongKeyType { key_id, operation } => {
                write!(f, "the primary key {key_id} cannot {operation}")
            }
            Error::MissingRecordKey => f.write_str("the record has no key"),
            Error::Store { detail, .. } => write!(f, "store failed: {detail}"),
            Error::File { detail, .. } => f.write_str(detail),
            Error::Changelog { detail, .. } => write!(f, "changelog failed: {detail}"),
            Error::Kafka { detail, .. } => write!(f, "kafka failed: {detail}"),
            Error::Record {
                topic,
                partition,
                offset,
                ..
            } => write!(
                f,
                "record {topic}/{partition}@{offset} could not be decoded"
            ),
            Error::NeedsRestore => f.write_str(
                "the store may disagree with its changelog after a failed append or flush: recover it from the changelog",
            ),
            Error::Kms { detail, .. } => write!(f, "kms failed: {detail}"),
            Error::Confluent { detail } => write!(f, "confluent format: {detail}"),
            Error::Registry { detail } => write!(f, "schema registry: {detail}"),
            Error::Shredded { .. } => {
                f.write_str("the value's subject was shredded: its key is gone")
            }
            // Neither the tag nor the DEK id: they are the value's bytes,
            // which a value that is not one of this format (a plaintext
            // that starts with `S`) makes plaintext. They stay in the
            // variant's fields.
            Error::UnknownSubjectKey { .. } => f.write_str(
                "the key store has no key for the value's subject (its tag and DEK id are in the error's fields) and no record of its shred: the wrong key store, a lost one, or a changed value, or not a value under subject keys",
            ),
            Error::Field { path, cause } => write!(f, "field {path}: {cause}"),
        }
    }
}

impl StdError for Error {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Store { cause, .. }
            | Error::Changelog { cause, .. }
            | Error::Kafka { cause, .. }
            | Error::Kms { cause, .. } => cause.as_deref().map(|c| c as &(dyn StdError + 'static)),
            Error::Record { cause, .. } | Error::Field { cause, .. } => Some(&**cause),
            Error::File { cause, .. } => Some(&**cause),
            _ => None,
        }
    }
}

fn same_cause(a: &Option<Cause>, b: &Option<Cause>) -> bool {
    match (a, b) {
        (None, None) => true,
        (Some(a), Some(b)) => Arc::ptr_eq(a, b) || a.to_string() == b.to_string(),
        _ => false,
    }
}

impl PartialEq for Error {
    fn eq(&self, other: &Self) -> bool {
        use Error as E;
        match (self, other) {
            (E::Truncated { len: a, min: b }, E::Truncated { len: c, min: d })
            | (E::Headroom { head: a, len: b }, E::Headroom { head: c, len: d }) => {
                a == c && b == d
            }
            (E::UnknownKeyId(a), E::UnknownKeyId(b))
            | (E::KeyDisabled(a), E::KeyDisabled(b))
            | (E::KeyNotFound(a), E::KeyNotFound(b))
            | (E::PrimaryKey(a), E::PrimaryKey(b))
            | (E::KeyNotEnabled(a), E::KeyNotEnabled(b)) => a == b,
            (E::UnsupportedVersion, E::UnsupportedVersion)
            | (E::Decryption, E::Decryption)
            | (E::Encryption, E::Encryption)
            | (E::InnerReturnedNone, E::InnerReturnedNone)
            | (E::ContextTooLong, E::ContextTooLong)
            | (E::MissingRecordKey, E::MissingRecordKey)
            | (E::NeedsRestore, E::NeedsRestore) => true,
            (
                E::Codec {
                    codec: a,
                    detail: b,
                },
                E::Codec {
                    codec: c,
                    detail: d,
                },
            ) => a == c && b == d,
            (E::Keyset { kind: a, detail: b }, E::Keyset { kind: c, detail: d }) => {
                a == c && b == d
            }
            (
                E::WrongKeyType {
                    key_id: a,
                    operation: b,
                },
                E::WrongKeyType {
                    key_id: c,
                    operation: d,
                },
            ) => a == c && b == d,
            (
                E::File {
                    detail: a,
                    cause: b,
                },
                E::File {
                    detail: c,
                    cause: d,
                },
            ) => a == c && same_cause(&Some(b.clone()), &Some(d.clone())),
            (
                E::Store {
                    detail: a,
                    cause: b,
                },
                E::Store {
                    detail: c,
                    cause: d,
                },
            )
            | (
                E::Changelog {
                    detail: a,
                    cause: b,
                },
                E::Changelog {
                    detail: c,
                    cause: d,
                },
            )
            | (
                E::Kafka {
                    detail: a,
                    cause: b,
                },
                E::Kafka {
                    detail: c,
                    cause: d,
                },
            )
            | (
                E::Kms {
                    detail: a,
                    cause: b,
                },
                E::Kms {
                    detail: c,
                    cause: d,
                },
            ) => a == c && same_cause(b, d),
            (
                E::Record {
                    topic: a,
                    partition: b,
                    offset: c,
                    cause: d,
                },
                E::Record {
                    topic: e,
                    partition: f,
                    offset: g,
                    cause: h,
                },
            ) => a == e && b == f && c == g && d == h,
            (E::Field { path: a, cause: b }, E::Field { path: c, cause: d }) => a == c && b == d,
            (E::Shredded { as_delete: a }, E::Shredded { as_delete: b }) => a == b,
            (
                E::UnknownSubjectKey { tag: a, dek_id: b },
                E::UnknownSubjectKey { tag: c, dek_id: d },
            ) => a == c && b == d,
            _ => false,
        }
    }
}

impl Eq for Error {}

/// A value from the input, cut short and stripped of control characters, for
/// an error message (only used for fields that hold no secrets).
pub(crate) fn printable(s: &str) -> String {
    printable_long(s, 64)
}

/// [`printable`] with a longer limit (key URIs).
pub(crate) fn printable_long(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}
