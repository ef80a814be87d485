//! Keys and statuses: the [`Keyset`] type, [`KeyStatus`], [`MAX_KEYS`],
//! and the API that generates, rotates, enables, disables and removes
//! keys. Nothing here knows about values, codecs or stores.
//!
//! Tink's cleartext JSON keyset format is in `tink_json`; encrypting and
//! decrypting with a keyset in `encrypt`.

use core::fmt;
use std::sync::Arc;

use rand::Rng as _;

use crate::cipher::Backend;
use crate::error::{Error, KeysetErrorKind};
use crate::key_id::KeyId;
use crate::kms::dek::DekPolicy;
use crate::primitive::{Family, KeyTemplate, Primitive};
use crate::stats::{Counters, Snapshot, Stats};

mod encrypt;
mod encrypted;
mod tink_json;

/// The most keys a keyset may hold (a bound on hostile keyset JSON).
pub const MAX_KEYS: usize = 4096;

/// A key's status, as in Tink.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum KeyStatus {
    /// The key decrypts (and encrypts, when primary).
    Enabled,
    /// The key is kept but never decrypts; it can be enabled again.
    Disabled,
}

/// One key of a keyset: its id, its status and its primitive (the key's
/// type is data: the primitive was chosen by its Tink type URL).
#[derive(Clone)]
pub(crate) struct Entry {
    pub(crate) id: KeyId,
    pub(crate) status: KeyStatus,
    pub(crate) primitive: Primitive,
}

#[derive(Clone)]
struct Inner {
    primary: usize,
    keys: Vec<Entry>,
    backend: Backend,
    /// The shortest ciphertext any key writes (kept up to date by `new`).
    min_len: usize,
    /// What was done with the keyset: shared by its clones, its rotations
    /// and the keysets made from it with another backend or DEK policy.
    stats: Arc<Stats>,
    /// `stats`' counters, what every value counts on.
    counters: Arc<Counters>,
}

impl Inner {
    /// The keyset of `keys`, counting on `stats`.
    fn new(primary: usize, keys: Vec<Entry>, backend: Backend, stats: Arc<Stats>) -> Self {
        let mut inner = Inner {
            primary,
            keys,
            backend,
            min_len: 0,
            counters: stats.shared_counters(),
            stats,
        };
        inner.update();
        inner
    }

    /// Recomputes what is derived from the keys, and has every envelope
    /// key count its DEKs and KMS calls in the keyset's counters.
    fn update(&mut self) {
        self.min_len = self
            .keys
            .iter()
            .map(|e| e.primitive.min_ciphertext_len())
            .min()
            .unwrap_or(crate::envelope::OVERHEAD);
        for e in &self.keys {
            if let Primitive::KmsEnvelope(k) = &e.primitive {
                k.count_on(self.stats.cold());
            }
        }
    }
}

/// A set of keys with one primary: values are encrypted under the primary
/// key and decrypted under whichever enabled key their key id names.
///
/// Each key's type is data, as in Tink: an AES-GCM key (128 or 256 bits) is
/// an AEAD for values. Keys are made from a [`KeyTemplate`] or read from
/// Tink's JSON.
///
/// Cheap to clone: clones share the same immutable key material. Calls that
/// change a keyset ([`rotate`](Keyset::rotate), [`disable`](Keyset::disable),
/// ...) change only the handle they are called on; serializers built from
/// another clone keep the keys they were built with.
///
/// # Security
/// Key bytes are zeroized when the last clone is dropped (best effort: copies
/// the allocator or the OS made earlier are out of reach). `Debug` shows key
/// ids, statuses and types only.
///
/// ```
/// use tombstone_crypt::Keyset;
///
/// let mut keyset = Keyset::generate();
/// let old = keyset.primary();
/// let new = keyset.rotate();
/// assert_ne!(old, new);
/// assert_eq!(keyset.primary(), new);
/// assert_eq!(keyset.len(), 2);
/// ```
#[derive(Clone)]
pub struct Keyset {
    inner: Arc<Inner>,
}

impl fmt::Debug for Keyset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        struct Keys<'a>(&'a [Entry]);
        impl fmt::Debug for Keys<'_> {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_list()
                    .entries(
                        self.0
                            .iter()
                            .map(|e| (e.id, e.status, e.primitive.describe())),
                    )
                    .finish()
            }
        }
        f.debug_struct("Keyset")
            .field("primary", &self.primary())
            .field("keys (id, status, type)", &Keys(&self.inner.keys))
            .field("backend", &self.inner.backend)
            .finish_non_exhaustive()
    }
}

impl Keyset {
    /// A new keyset with one fresh AES-256-GCM key, which is primary.
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn generate() -> Self {
        let primitive = Primitive::generate(&KeyTemplate::aes256_gcm(), Backend::DEFAULT)
            .expect("an AES-256-GCM key from 32 fresh bytes");
        Keyset::with_primary(primitive, Backend::DEFAULT)
    }

    /// A new keyset with one fresh key made from `template`, which is
    /// primary.
    ///
    /// # Errors
    /// [`Error::Keyset`] if the template cannot make a key.
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn generate_with(template: KeyTemplate) -> Result<Self, Error> {
        let primitive = Primitive::generate(&template, Backend::DEFAULT)?;
        Ok(Keyset::with_primary(primitive, Backend::DEFAULT))
    }

    fn with_primary(primitive: Primitive, backend: Backend) -> Self {
        Keyset {
            inner: Arc::new(Inner::new(
                0,
                vec![Entry {
                    id: KeyId(rand::rng().next_u32()),
                    status: KeyStatus::Enabled,
                    primitive,
                }],
                backend,
                Stats::new(),
            )),
        }
    }

    /// The same keys, expanded for `backend` (AES-GCM only: it decides
    /// which implementation does the work). Keys added later use it too.
    /// The bytes written and read are the same on every backend.
    #[must_use]
    pub fn with_backend(self, backend: Backend) -> Self {
        if self.inner.backend == backend {
            return self;
        }
        let keys = self
            .inner
            .keys
            .iter()
            .map(|e| Entry {
                primitive: e
                    .primitive
                    .with_backend(backend)
                    .unwrap_or_else(|_| e.primitive.clone()),
                ..e.clone()
            })
            .collect();
        Keyset {
            inner: Arc::new(Inner::new(
                self.inner.primary,
                keys,
                backend,
                Arc::clone(&self.inner.stats),
            )),
        }
    }

    /// The backend the keys are expanded for.
    pub fn backend(&self) -> Backend {
        self.inner.backend
    }

    /// Adds a fresh key of the primary's type, enabled but not primary, and
    /// returns its id. Use this to stage a key everywhere before making it
    /// primary with [`set_primary`](Keyset::set_primary).
    ///
    /// # Panics
    /// If the operating system cannot provide randomness, or the keyset
    /// already holds [`MAX_KEYS`] keys (use
    /// [`add_key_with`](Keyset::add_key_with) for an error instead; remove
    /// destroyed keys first).
    pub fn add_key(&mut self) -> KeyId {
        let template = self.primary_entry().primitive.template();
        self.add_key_with(template)
            .expect("a keyset below MAX_KEYS takes a key of its primary's kind")
    }

    /// Adds a fresh key made from `template`, enabled but not primary, and
    /// returns its id.
    ///
    /// # Errors
    /// [`Error::Keyset`] if the template cannot make a key, or makes a key
    /// for another purpose than the keyset's (a deterministic key in a
    /// keyset for values, or the reverse), or the keyset already holds
    /// [`MAX_KEYS`] keys (more would export JSON no import reads).
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn add_key_with(&mut self, template: KeyTemplate) -> Result<KeyId, Error> {
        if self.inner.keys.len() >= MAX_KEYS {
            // A keyset over the cap would export JSON that no import reads.
            return Err(Error::keyset(
                KeysetErrorKind::TooManyKeys,
                format!("the keyset already holds {MAX_KEYS} keys, the most a keyset may hold: remove old keys first"),
            ));
        }
        let family = self.primary_entry().primitive.family();
        if template.family() != family {
            return Err(Error::keyset(
                KeysetErrorKind::Template,
                format!(
                    "a {} key cannot join a keyset of {} keys",
                    template.type_name(),
                    family.name()
                ),
            ));
        }
        let primitive = Primitive::generate(&template, self.inner.backend)?;
        Ok(self.push(primitive))
    }

    fn push(&mut self, primitive: Primitive) -> KeyId {
        let mut id = KeyId(rand::rng().next_u32());
        while self.find(id).is_some() {
            id = KeyId(rand::rng().next_u32());
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.keys.push(Entry {
            id,
            status: KeyStatus::Enabled,
            primitive,
        });
        inner.update();
        id
    }

    /// Adds a fresh key of the primary's type and makes it primary; the old
    /// keys stay and keep decrypting. Returns the new primary's id.
    ///
    /// # Panics
    /// If the operating system cannot provide randomness, or the keyset
    /// already holds [`MAX_KEYS`] keys (use
    /// [`rotate_with`](Keyset::rotate_with) for an error instead).
    pub fn rotate(&mut self) -> KeyId {
        let id = self.add_key();
        self.make_last_primary();
        id
    }

    /// Adds a fresh key made from `template` and makes it primary; the old
    /// keys stay and keep decrypting. Returns the new primary's id.
    ///
    /// # Errors
    /// As [`add_key_with`](Keyset::add_key_with).
    ///
    /// # Panics
    /// If the operating system cannot provide randomness.
    pub fn rotate_with(&mut self, template: KeyTemplate) -> Result<KeyId, Error> {
        let id = self.add_key_with(template)?;
        self.make_last_primary();
        Ok(id)
    }

    fn make_last_primary(&mut self) {
        let inner = Arc::make_mut(&mut self.inner);
        inner.primary = inner.keys.len() - 1;
    }

    /// Makes the enabled key `id` primary.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::KeyNotEnabled`] if it
    /// is disabled.
    pub fn set_primary(&mut self, id: KeyId) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if self.inner.keys[i].status != KeyStatus::Enabled {
            return Err(Error::KeyNotEnabled(id));
        }
        Arc::make_mut(&mut self.inner).primary = i;
        Ok(())
    }

    /// Disables key `id`: it stays in the keyset but decrypts nothing.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::PrimaryKey`] if it is
    /// the primary.
    pub fn disable(&mut self, id: KeyId) -> Result<(), Error> {
        self.set_status(id, KeyStatus::Disabled)
    }

    /// Enables key `id` again.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key.
    pub fn enable(&mut self, id: KeyId) -> Result<(), Error> {
        self.set_status(id, KeyStatus::Enabled)
    }

    /// A copy with every disabled key enabled, to tell which key a value or
    /// a record key is under when no reader uses that key any more (an
    /// audit); `None` when no key is disabled. The primary stays.
    ///
    /// ```
    /// use tombstone_crypt::Keyset;
    /// let mut keys = Keyset::generate();
    /// let old = keys.primary();
    /// keys.rotate();
    /// assert!(keys.widened().is_none());
    /// keys.disable(old)?;
    /// let all = keys.widened().expect("a disabled key");
    /// assert_eq!(all.primary(), keys.primary());
    /// assert!(all.keys().all(|(_, s)| s == tombstone_crypt::KeyStatus::Enabled));
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn widened(&self) -> Option<Keyset> {
        let disabled: Vec<KeyId> = self
            .keys()
            .filter(|&(_, status)| status == KeyStatus::Disabled)
            .map(|(id, _)| id)
            .collect();
        if disabled.is_empty() {
            return None;
        }
        let mut all = self.clone();
        for id in disabled {
            all.enable(id).ok()?;
        }
        Some(all)
    }

    /// Removes key `id` for good (Tink's "destroy"): values under it can no
    /// longer be decrypted by this keyset.
    ///
    /// # Errors
    /// [`Error::KeyNotFound`] if no such key, [`Error::PrimaryKey`] if it is
    /// the primary.
    pub fn remove(&mut self, id: KeyId) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if i == self.inner.primary {
            return Err(Error::PrimaryKey(id));
        }
        let inner = Arc::make_mut(&mut self.inner);
        inner.keys.remove(i);
        if inner.primary > i {
            inner.primary -= 1;
        }
        inner.update();
        Ok(())
    }

    fn set_status(&mut self, id: KeyId, status: KeyStatus) -> Result<(), Error> {
        let i = self.find(id).ok_or(Error::KeyNotFound(id))?;
        if i == self.inner.primary && status != KeyStatus::Enabled {
            return Err(Error::PrimaryKey(id));
        }
        Arc::make_mut(&mut self.inner).keys[i].status = status;
        Ok(())
    }

    fn find(&self, id: KeyId) -> Option<usize> {
        self.inner.keys.iter().position(|e| e.id == id)
    }

    /// The primary key's id: every new value is encrypted under it.
    pub fn primary(&self) -> KeyId {
        self.primary_entry().id
    }

    /// The ids and statuses of all keys, in keyset order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = (KeyId, KeyStatus)> + '_ {
        self.inner.keys.iter().map(|e| (e.id, e.status))
    }

    /// Tink's type URL of key `id`, if the keyset holds it.
    pub fn key_type_url(&self, id: KeyId) -> Option<&'static str> {
        self.find(id)
            .map(|i| self.inner.keys[i].primitive.type_url())
    }

    /// The type of the key with this id, `None` when the keyset has no
    /// such key.
    pub fn key_type(&self, id: KeyId) -> Option<crate::header::KeyType> {
        self.key_type_url(id)
            .and_then(crate::header::KeyType::from_type_url)
    }

    /// How many keys the keyset holds (enabled and disabled).
    pub fn len(&self) -> usize {
        self.inner.keys.len()
    }

    /// Always `false`: a keyset has at least its primary key.
    pub fn is_empty(&self) -> bool {
        self.inner.keys.is_empty()
    }

    /// What has been done with this keyset so far, counted exactly: values
    /// encrypted and decrypted, tombstones passed through, failures by
    /// kind, and its envelope keys' DEKs, cache and KMS calls. The counts
    /// are shared by the keyset's clones, its rotations and the keysets
    /// made from it by [`with_backend`](Keyset::with_backend) and
    /// [`with_dek_policy`](Keyset::with_dek_policy). See
    /// [`stats`](crate::stats) for the whole process and the metric names.
    ///
    /// ```
    /// let keyset = tombstone_crypt::Keyset::generate();
    /// let ct = keyset.encrypt(b"v", b"")?;
    /// keyset.decrypt(&ct, b"")?;
    /// assert!(keyset.decrypt(&ct[..20], b"").is_err());
    /// let s = keyset.stats();
    /// assert_eq!((s.values_encrypted, s.values_decrypted), (1, 1));
    /// assert_eq!(s.decrypt_failures.truncated, 1);
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn stats(&self) -> Snapshot {
        let entries = self
            .inner
            .keys
            .iter()
            .map(|e| match &e.primitive {
                Primitive::KmsEnvelope(k) => k.cache_entries(),
                _ => 0,
            })
            .sum();
        crate::stats::keyset_snapshot(&self.inner.stats, entries)
    }

    /// The keyset's counters, shared.
    pub(crate) fn stats_handle(&self) -> Arc<Stats> {
        Arc::clone(&self.inner.stats)
    }

    /// Whether this is the keyset's first plaintext value passed through
    /// (logged at WARN, the later ones at TRACE).
    #[cfg(feature = "tracing")]
    pub(crate) fn first_plaintext_passed(&self) -> bool {
        self.inner.stats.first_plaintext_passed()
    }

    /// The keyset's counters, to count on.
    #[inline]
    pub(crate) fn counters(&self) -> &Counters {
        &self.inner.counters
    }

    /// Whether the keyset's keys are deterministic (AES-SIV, for record
    /// keys) rather than randomized AEAD keys (for values).
    pub fn is_deterministic(&self) -> bool {
        self.primary_entry().primitive.family() == Family::Deterministic
    }

    /// How recent key `id` is among the enabled keys: 0 for the primary,
    /// then newer keys (later in the keyset) before older ones: its place
    /// in the order of [`enabled_entries`](Keyset::enabled_entries), the
    /// one reading order of a record key's forms.
    pub(crate) fn recency(&self, id: KeyId) -> usize {
        if self.primary() == id {
            return 0;
        }
        match self.find(id) {
            Some(i) => self.inner.keys.len() - i,
            None => usize::MAX,
        }
    }

    /// The enabled keys, the primary first, then the others from the newest
    /// (the last added) to the oldest: the one order in which a record
    /// key's forms are read (`get`, `all`, `delete` of the encrypted store
    /// agree on it, with [`recency`](Keyset::recency)).
    pub(crate) fn enabled_entries(&self) -> impl Iterator<Item = &Entry> + '_ {
        let primary = self.inner.primary;
        std::iter::once(self.primary_entry()).chain(
            self.inner
                .keys
                .iter()
                .enumerate()
                .rev()
                .filter(move |(i, e)| *i != primary && e.status == KeyStatus::Enabled)
                .map(|(_, e)| e),
        )
    }

    /// Every key, in keyset order.
    pub(crate) fn entries(&self) -> &[Entry] {
        &self.inner.keys
    }

    pub(crate) fn primary_entry(&self) -> &Entry {
        &self.inner.keys[self.inner.primary]
    }

    /// The same keys, with `policy` deciding when the envelope keys
    /// (`KmsEnvelopeAeadKey`) replace their data keys and how many
    /// unwrapped data keys they cache. Envelope keys start afresh (a new
    /// data key on the next value, an empty cache); other keys are
    /// unchanged. Keys added later from the keyset's own template keep it.
    #[must_use]
    pub fn with_dek_policy(self, policy: DekPolicy) -> Self {
        let keys = self
            .inner
            .keys
            .iter()
            .map(|e| Entry {
                primitive: match &e.primitive {
                    Primitive::KmsEnvelope(k) => {
                        Primitive::KmsEnvelope(k.reconfigured(policy, self.inner.backend))
                    }
                    other => other.clone(),
                },
                ..e.clone()
            })
            .collect();
        Keyset {
            inner: Arc::new(Inner::new(
                self.inner.primary,
                keys,
                self.inner.backend,
                Arc::clone(&self.inner.stats),
            )),
        }
    }
}
