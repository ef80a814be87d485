//! The writer's DEK: one at a time per envelope key, used until a limit
//! (values, bytes, age), then replaced by one made and wrapped by the KMS.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, PoisonError};
use std::time::Instant;

use zeroize::Zeroizing;

use super::*;
use crate::cipher::AesGcmKey;
use crate::error::Error;
use crate::kms::printable_uri;
use crate::stats::{KmsOp, Rare};

impl EnvelopeKey {
    /// The DEK the next value is encrypted under, with its turn taken: the
    /// current one if within its limits, else a new one (one KMS call,
    /// made by one thread while the others needing a DEK wait).
    ///
    /// `f` borrows the DEK: no reference count is touched and no lock is
    /// taken per value, only the DEK's own counters.
    #[inline]
    pub(crate) fn with_writer_dek<R>(
        &self,
        f: impl FnOnce(&WriterDek) -> Result<R, Error>,
    ) -> Result<R, Error> {
        let s = &self.state;
        let now = s.now();
        s.sweep_if_due(now);
        {
            let current = s.current.load();
            if let Some(d) = current.as_deref() {
                if d.take(&s.policy, now) {
                    return f(d);
                }
            }
        }
        f(&*self.refill()?)
    }

    /// Whether the next value would need a new DEK (a KMS call).
    pub(crate) fn writer_needs_kms(&self) -> bool {
        let s = &self.state;
        !s.current().is_some_and(|d| d.has_turn(&s.policy, s.now()))
    }

    /// Makes the DEK the next values are encrypted under, if one is due,
    /// without taking a turn: the KMS call of a `writer_dek` done ahead
    /// (on a thread where blocking is allowed).
    pub(crate) fn prepare_writer(&self) -> Result<(), Error> {
        self.state.sweep_if_due(self.state.now());
        self.refill_locked(false).map(drop)
    }

    #[cold]
    pub(super) fn refill(&self) -> Result<Arc<WriterDek>, Error> {
        self.refill_locked(true)
    }

    /// Under the refill lock: the current DEK if it has a turn (taking it
    /// when `take`), made by another thread while this one waited; or the
    /// failure another thread met meanwhile, at once; else a new DEK, with
    /// one turn taken when `take`.
    pub(super) fn refill_locked(&self, take: bool) -> Result<Arc<WriterDek>, Error> {
        let s = &self.state;
        let waited_from = Instant::now();
        let mut last_failure = s.refill.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(d) = s.current() {
            let now = s.now();
            let has_turn = if take {
                d.take(&s.policy, now)
            } else {
                d.has_turn(&s.policy, now)
            };
            if has_turn {
                return Ok(d);
            }
        }
        if let Some((at, e)) = &*last_failure {
            if *at >= waited_from {
                return Err(e.clone());
            }
        }
        let made = self.make_dek(u64::from(take));
        if let Err(e) = &made {
            *last_failure = Some((Instant::now(), e.clone()));
        }
        made
    }

    /// A fresh DEK, wrapped by the KMS, made current, with `turns_taken`
    /// of its values already counted.
    pub(super) fn make_dek(&self, turns_taken: u64) -> Result<Arc<WriterDek>, Error> {
        let s = &self.state;
        #[cfg(feature = "tracing")]
        let _span =
            tracing::debug_span!("dek_create", key_uri = %printable_uri(&s.kek_uri)).entered();
        // Its age counts from before the KMS call.
        let made = s.now_precise();
        let mut bytes = Zeroizing::new([0u8; 32]);
        crate::random::fill_from_os(&mut bytes[..]);
        let bytes = &bytes[..usize::from(s.dek_len)];
        let proto = crate::proto::aes_gcm_key_proto(bytes);
        let uri = printable_uri(&s.kek_uri);
        let wrapped = s
            .counted
            .load()
            .kms_call(KmsOp::Encrypt, &uri, || s.remote.encrypt(&proto, b""));
        let edek = wrapped.map_err(|e| {
            wrap(
                format!(
                    "wrapping a new data key under {}",
                    printable_uri(&s.kek_uri)
                ),
                e,
            )
        })?;
        if edek.is_empty() || edek.len() > MAX_EDEK_LEN {
            return Err(Error::kms_msg(format!(
                "{} returned an encrypted data key of {} bytes (expected 1 to {MAX_EDEK_LEN})",
                printable_uri(&s.kek_uri),
                edek.len()
            )));
        }
        let key = Arc::new(AesGcmKey::new(bytes, s.backend)?);
        let dek = Arc::new(WriterDek {
            key: Arc::clone(&key),
            edek: edek.into_boxed_slice(),
            expires: made.saturating_add(hooks::nanos(s.policy.max_age())),
            used: DekUse {
                values: AtomicU64::new(turns_taken),
                bytes: AtomicU64::new(0),
                _fill: [0; 14],
            },
            held: Arc::new(hooks::Held::new()),
        });
        // The writer reads its own values without asking the KMS.
        let cached = Cached {
            key,
            expires: made.saturating_add(hooks::nanos(s.policy.cache_ttl())),
            _held: Arc::clone(&dek.held),
        };
        self.insert_cached(&dek.edek, cached);
        s.edek_len.store(dek.edek.len(), Ordering::Relaxed);
        // Lowered before the DEK is seen, so a use that finds it reads the
        // clock its expiry needs (`State::now`), and again after, in case
        // a sweep that did not see it raised the bound in between.
        s.next_expiry.fetch_min(dek.expires, Ordering::AcqRel);
        s.current.store(Some(Arc::clone(&dek)));
        s.next_expiry.fetch_min(dek.expires, Ordering::AcqRel);
        s.counted.load().count(Rare::DekCreated);
        #[cfg(feature = "tracing")]
        tracing::debug!(
            key_uri = %printable_uri(&s.kek_uri),
            edek_len = dek.edek.len(),
            max_values = s.policy.max_values(),
            "a new data key (DEK) is current"
        );
        Ok(dek)
    }
}

/// The writer's current DEK and what it has encrypted.
pub(crate) struct WriterDek {
    pub(crate) key: Arc<AesGcmKey>,
    pub(crate) edek: Box<[u8]>,
    /// When it encrypts no more ([`State::now`]'s time).
    pub(super) expires: u64,
    pub(super) used: DekUse,
    pub(super) held: Arc<hooks::Held>,
}

/// What a writer DEK has encrypted: the one thing threads sharing the key
/// write per value, on cache lines of its own (128 bytes: adjacent-line
/// prefetching pulls two 64-byte lines together), so the DEK's fields
/// every value reads (key, EDEK, expiry) stay shared in both cores' caches
/// instead of moving with each count.
///
/// Filled to its 128 bytes with zeros, not padded: it is built on the
/// stack and moved to the heap, and padding would carry along whatever the
/// stack held there before (a key, say).
#[repr(C, align(128))]
pub(super) struct DekUse {
    pub(super) values: AtomicU64,
    pub(super) bytes: AtomicU64,
    pub(super) _fill: [u64; 14],
}

impl WriterDek {
    /// Takes one value's turn if the DEK is within its limits at `now`.
    #[inline]
    pub(super) fn take(&self, policy: &DekPolicy, now: u64) -> bool {
        if now >= self.expires || self.used.bytes.load(Ordering::Relaxed) >= policy.max_bytes() {
            return false;
        }
        self.used.values.fetch_add(1, Ordering::Relaxed) < policy.max_values()
    }

    /// Whether the DEK still has a turn at `now`, without taking it.
    pub(super) fn has_turn(&self, policy: &DekPolicy, now: u64) -> bool {
        now < self.expires
            && self.used.bytes.load(Ordering::Relaxed) < policy.max_bytes()
            && self.used.values.load(Ordering::Relaxed) < policy.max_values()
    }

    /// Counts `n` plaintext bytes encrypted under this DEK.
    #[inline]
    pub(crate) fn add_bytes(&self, n: usize) {
        self.used
            .bytes
            .fetch_add(u64::try_from(n).unwrap_or(u64::MAX), Ordering::Relaxed);
    }
}
