//! The forms of a record key on the wire, and the one write rule every
//! writer of a topic follows.
//!
//! A record key encrypted deterministically ([`DeterministicSerializer`])
//! has one form per enabled AES-SIV key of its keyset: after a rotation the
//! same logical key is written under the new primary key while records
//! under the older keys are still on the log. Compaction keeps the newest
//! record *per form*, so a value left under an old form would outlive a
//! delete written under the new one.
//!
//! **The write rule.** Every write of a logical key, put or delete, by any
//! writer (the typed producer, a store over a changelog, the command line's
//! `repair`, `reencrypt` and `--to-topic`), is: a tombstone for each
//! non-primary enabled form first, then the record under the primary form;
//! all in the partition of the *plaintext* key (the Java client's murmur2
//! of the plaintext bytes), in that order, on an idempotent producer.
//! [`KeyForms::writes`] computes those records, and every writer calls it.
//!
//! **The reading rule.** A logical key's state in its partition is its
//! record with the highest offset among all its forms, as a consumer
//! replaying the partition in order sees it.
//!
//! The cost: one extra tombstone per write for each older enabled key of
//! the key keyset, only while such keys are enabled. Re-encrypt the topic
//! under the new key and disable the old ones, and writes are one record
//! again.
//!
//! ```
//! use tombstone_crypt::record_key::KeyBinding;
//! use tombstone_crypt::{Context, DeterministicSerializer, KeyTemplate, Keyset, Serializer, Utf8};
//!
//! let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
//! keys.rotate(); // a new primary; the old key stays enabled
//! let ser = DeterministicSerializer::new(Utf8, keys);
//! let forms = ser.key_forms(&Context::new("orders"), "alice")?;
//! assert_eq!(forms.all().count(), 2);
//! // A delete: a tombstone under the old form first, then under the primary,
//! // both in the partition of the plaintext key.
//! let writes: Vec<_> = forms.writes(None).collect();
//! assert_eq!(writes.len(), 2);
//! assert_eq!(writes[1].0, forms.primary());
//! assert_eq!(forms.partition(6), Some(tombstone_crypt::record_key::murmur2_partition(b"alice", 6)));
//! assert_eq!(forms.bound(KeyBinding::Plaintext), b"alice");
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```
//!
//! [`DeterministicSerializer`]: crate::DeterministicSerializer

use std::sync::Arc;

use crate::error::Error;
use crate::keyset::Keyset;
use crate::stats::{Event, Stats};

/// Kafka's murmur2 hash, exactly as the Java client's `Utils.murmur2`
/// computes it (and librdkafka's `murmur2` partitioners).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const SEED: u32 = 0x9747_b28c;
    // Java hashes the length as an int; a key over 2 GiB is not a Kafka key.
    let mut h: u32 = SEED ^ (data.len() as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> 24;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let rest = chunks.remainder();
    if rest.len() == 3 {
        h ^= u32::from(rest[2]) << 16;
    }
    if rest.len() >= 2 {
        h ^= u32::from(rest[1]) << 8;
    }
    if !rest.is_empty() {
        h ^= u32::from(rest[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition the Java client's default partitioner gives `key` on a
/// topic of `partitions` partitions: `(murmur2(key) & 0x7fffffff) %
/// partitions`. 0 when `partitions` is 0.
pub fn murmur2_partition(key: &[u8], partitions: u32) -> i32 {
    if partitions == 0 {
        return 0;
    }
    let positive = (murmur2(key) & 0x7fff_ffff) as u32;
    (positive % partitions) as i32
}

/// Which bytes of a record key a value's associated data binds
/// ([`AadPolicy::TopicAndKey`](crate::AadPolicy)).
///
/// For keys that are not encrypted both are the same bytes. For keys
/// encrypted deterministically they differ, and every writer and reader of
/// a topic must make the same choice:
///
/// - [`Plaintext`](KeyBinding::Plaintext) (the default, and what
///   [`EncryptedStore`](crate::store::EncryptedStore) always does): the value is
///   bound to the key as its codec writes it, before encryption. A key can
///   then be re-encrypted under a new key-keyset key (a rotation) without
///   touching its value, and a value still cannot be moved to another key.
/// - [`Wire`](KeyBinding::Wire): the value is bound to the key's bytes on
///   the wire (its ciphertext). This is what the typed clients did before
///   0.2; choose it only to read or extend a topic written that way.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyBinding {
    /// The key's plaintext bytes (the default).
    #[default]
    Plaintext,
    /// The key's bytes on the wire.
    Wire,
}

/// Which write rule a writer follows. Always [`WriteRule::FanOut`] but in
/// the negative controls of the tests (feature `test-hooks`).
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum WriteRule {
    /// The rule: tombstones for the older forms, then the record.
    #[default]
    FanOut,
    /// Broken (negative control): the record under the primary form only.
    PrimaryOnly,
    /// Broken (negative control): the record first, then the tombstones.
    ValueFirst,
}

/// The forms of one logical record key: its plaintext bytes, its form on
/// the wire under the primary key, and its forms under the other enabled
/// keys of a deterministic key keyset.
///
/// A key that is not encrypted has one form, its plaintext. Get one from
/// any serializer with [`Serializer::key_forms`](crate::Serializer::key_forms).
///
/// ```
/// use tombstone_crypt::{Context, DeterministicSerializer, KeyTemplate, Keyset, Serializer, Utf8};
///
/// let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
/// keys.rotate();
/// let ser = DeterministicSerializer::new(Utf8, keys);
/// let forms = ser.key_forms(&Context::new("users"), "alice")?;
/// assert_eq!(forms.plaintext(), b"alice");
/// assert_eq!(forms.older().len(), 1); // the key before the rotation
///
/// // A write: a tombstone for the old form first, then the value.
/// let writes: Vec<_> = forms.writes(Some(&b"ciphertext"[..])).collect();
/// assert_eq!(writes.len(), 2);
/// assert_eq!(writes[0], (&forms.older()[0][..], None));
/// assert_eq!(writes[1], (forms.primary(), Some(&b"ciphertext"[..])));
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
#[derive(Clone)]
pub struct KeyForms {
    plaintext: Vec<u8>,
    /// The forms under the enabled keys, the primary's first; empty when
    /// the key is not encrypted (its one form is its plaintext).
    forms: Vec<Vec<u8>>,
    rule: WriteRule,
    /// Where the fan-out tombstones of [`writes`](KeyForms::writes) are
    /// counted: the keyset that made the forms.
    counted_by: Option<Arc<Stats>>,
}

/// Equal forms of the same key, whoever counts them.
impl PartialEq for KeyForms {
    fn eq(&self, other: &Self) -> bool {
        (&self.plaintext, &self.forms, self.rule) == (&other.plaintext, &other.forms, other.rule)
    }
}

impl Eq for KeyForms {}

impl core::fmt::Debug for KeyForms {
    /// Lengths only: a key's plaintext may be personal data.
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_struct("KeyForms")
            .field("plaintext_len", &self.plaintext.len())
            .field("older", &self.older().len())
            .field("encrypted", &self.is_encrypted())
            .finish_non_exhaustive()
    }
}

impl KeyForms {
    /// A key that is not encrypted: one form, its bytes.
    pub fn plain(bytes: Vec<u8>) -> Self {
        KeyForms {
            plaintext: bytes,
            forms: Vec::new(),
            rule: WriteRule::FanOut,
            counted_by: None,
        }
    }

    /// A key encrypted deterministically: its plaintext, then its forms
    /// under every enabled key, the primary's first.
    ///
    /// # Errors
    /// [`Error::Encryption`] if `forms` is empty.
    pub fn encrypted(plaintext: Vec<u8>, forms: Vec<Vec<u8>>) -> Result<Self, Error> {
        if forms.is_empty() {
            return Err(Error::Encryption);
        }
        Ok(KeyForms {
            plaintext,
            forms,
            rule: WriteRule::FanOut,
            counted_by: None,
        })
    }

    /// The forms of a record key whose plaintext is `plaintext` under the
    /// enabled keys of `keyset` (`forms`, the primary's first), their
    /// fan-out tombstones counted in the keyset's counters when there are
    /// any (more than one form: no reference count is touched per key
    /// otherwise).
    pub(crate) fn encrypted_by(
        keyset: &Keyset,
        plaintext: Vec<u8>,
        forms: Vec<Vec<u8>>,
    ) -> Result<Self, Error> {
        let fan_out = forms.len() > 1;
        let mut forms = KeyForms::encrypted(plaintext, forms)?;
        if fan_out {
            forms.counted_by = Some(keyset.stats_handle());
        }
        Ok(forms)
    }

    /// The same forms written by a broken rule (negative controls only).
    #[doc(hidden)]
    #[must_use]
    pub fn with_rule(self, rule: WriteRule) -> Self {
        KeyForms { rule, ..self }
    }

    /// The key's plaintext bytes (what its codec writes).
    pub fn plaintext(&self) -> &[u8] {
        &self.plaintext
    }

    /// The key's form on the wire under the primary key (its plaintext when
    /// it is not encrypted).
    pub fn primary(&self) -> &[u8] {
        self.forms.first().unwrap_or(&self.plaintext)
    }

    /// The key's forms under the other enabled keys, oldest last.
    pub fn older(&self) -> &[Vec<u8>] {
        self.forms.get(1..).unwrap_or_default()
    }

    /// Whether the key is encrypted.
    pub fn is_encrypted(&self) -> bool {
        !self.forms.is_empty()
    }

    /// Every form on the wire, the primary's first.
    pub fn all(&self) -> impl Iterator<Item = &[u8]> {
        core::iter::once(self.primary()).chain(self.older().iter().map(Vec::as_slice))
    }

    /// The bytes a value's associated data binds for `binding`.
    pub fn bound(&self, binding: KeyBinding) -> &[u8] {
        match binding {
            KeyBinding::Plaintext => &self.plaintext,
            KeyBinding::Wire => self.primary(),
        }
    }

    /// The partition every record of this key goes to on a topic of
    /// `partitions` partitions: for an encrypted key, murmur2 of its
    /// **plaintext** (so a rotation never moves it, and a plaintext
    /// producer with the Java client's default partitioner agrees); for a
    /// key that is not encrypted, `None` (the producer's partitioner).
    pub fn partition(&self, partitions: u32) -> Option<i32> {
        self.is_encrypted()
            .then(|| murmur2_partition(&self.plaintext, partitions))
    }

    /// The records one write of this key puts on the log, in order: a
    /// tombstone for each older form, then `value` (a tombstone when
    /// `None`) under the primary form. This is the write rule; every
    /// writer of a topic produces exactly these, in this order, to
    /// [`partition`](KeyForms::partition).
    pub fn writes<'a>(
        &'a self,
        value: Option<&'a [u8]>,
    ) -> impl Iterator<Item = (&'a [u8], Option<&'a [u8]>)> + 'a {
        let older = match self.rule {
            WriteRule::PrimaryOnly => &[][..],
            _ => self.older(),
        };
        if let Some(stats) = &self.counted_by {
            let n = u64::try_from(older.len()).unwrap_or(u64::MAX);
            stats.counters().add(Event::FanoutTombstone, n);
        }
        let tombstones = older.iter().map(|f| (&f[..], None));
        let record = core::iter::once((self.primary(), value));
        let (before, after) = match self.rule {
            WriteRule::ValueFirst => (None, Some(tombstones)),
            _ => (Some(tombstones), None),
        };
        before
            .into_iter()
            .flatten()
            .chain(record)
            .chain(after.into_iter().flatten())
    }

    /// How many records [`writes`](KeyForms::writes) gives.
    pub fn write_count(&self) -> usize {
        match self.rule {
            WriteRule::PrimaryOnly => 1,
            _ => 1 + self.older().len(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The Java client's own test vectors (`UtilsTest.testMurmur2`).
    #[test]
    fn murmur2_matches_the_java_client() {
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{}", String::from_utf8_lossy(data));
        }
        assert_eq!(murmur2_partition(b"abc", 0), 0);
        assert_eq!(
            murmur2_partition(b"foobar", 3),
            ((-790_332_482i32 & 0x7fff_ffff) % 3)
        );
    }

    fn forms() -> KeyForms {
        KeyForms::encrypted(
            b"k".to_vec(),
            vec![b"new".to_vec(), b"mid".to_vec(), b"old".to_vec()],
        )
        .unwrap()
    }

    #[test]
    fn the_rule_is_old_tombstones_first_then_the_record() {
        let f = forms();
        let w: Vec<_> = f.writes(Some(b"v")).collect();
        assert_eq!(
            w,
            [
                (&b"mid"[..], None),
                (&b"old"[..], None),
                (&b"new"[..], Some(&b"v"[..]))
            ]
        );
        let d: Vec<_> = f.writes(None).collect();
        assert_eq!(d.len(), 3);
        assert!(d.iter().all(|(_, v)| v.is_none()));
        assert_eq!(d[2].0, b"new");
        assert_eq!(f.write_count(), 3);
    }

    #[test]
    fn the_broken_rules_are_what_they_say() {
        let f = forms().with_rule(WriteRule::PrimaryOnly);
        assert_eq!(
            f.writes(Some(b"v")).collect::<Vec<_>>(),
            [(&b"new"[..], Some(&b"v"[..]))]
        );
        assert_eq!(f.write_count(), 1);
        let f = forms().with_rule(WriteRule::ValueFirst);
        let w: Vec<_> = f.writes(Some(b"v")).collect();
        assert_eq!(w[0], (&b"new"[..], Some(&b"v"[..])));
        assert_eq!(w.len(), 3);
    }

    #[test]
    fn partitions_follow_the_plaintext_of_encrypted_keys_only() {
        let f = forms();
        assert_eq!(f.partition(3), Some(murmur2_partition(b"k", 3)));
        assert_eq!(KeyForms::plain(b"k".to_vec()).partition(3), None);
        assert_eq!(f.bound(KeyBinding::Plaintext), b"k");
        assert_eq!(f.bound(KeyBinding::Wire), b"new");
        assert!(KeyForms::encrypted(b"k".to_vec(), vec![]).is_err());
        assert_eq!(f.all().count(), 3);
        assert!(!format!("{f:?}").contains("new"));
    }
}
