//! How long a DEK lives: [`DekPolicy`] (when a writer replaces its DEK,
//! how many unwrapped DEKs a reader keeps and for how long) and the hard
//! limits on DEKs and EDEKs.

use std::time::Duration;

/// The longest encrypted DEK (EDEK) accepted in a ciphertext or from a KMS.
/// AWS KMS blobs are under 300 bytes, Vault's `vault:v1:...` about 90.
pub const MAX_EDEK_LEN: usize = 4096;

/// The most values one DEK may ever encrypt: 2^32, NIST SP 800-38D's bound
/// for random 96-bit nonces.
pub const MAX_DEK_VALUES: u64 = 1 << 32;

/// When a writer replaces its data key (DEK), and how many unwrapped DEKs a
/// reader keeps and for how long. A DEK is replaced when it has encrypted
/// `max_values` values, or `max_bytes` bytes of plaintext, or is `max_age`
/// old, whichever comes first. A reader's unwrapped DEK is used for
/// `cache_ttl` (by default `max_age`) from its unwrap, then unwrapped again
/// through the KMS. Expired DEKs are dropped (zeroized) on the next use of
/// their key. See SECURITY.md for the defaults' reasons.
///
/// Ages are exact on the monotonic clock (`Instant`'s). Far from an
/// expiry, a use reads the kernel's coarse clock instead (a few ns against
/// ~27 ns): one that lags by less than a second cannot change the answer
/// there.
///
/// ```
/// use std::time::Duration;
/// use tombstone_crypt::kms::DekPolicy;
///
/// let p = DekPolicy::default().with_max_values(1000).with_max_age(Duration::from_secs(60));
/// assert_eq!(p.max_values(), 1000);
/// assert_eq!(p.cache_ttl(), Duration::from_secs(60));
/// let p = p.with_cache_ttl(Duration::from_secs(600));
/// assert_eq!((p.max_age(), p.cache_ttl()), (Duration::from_secs(60), Duration::from_secs(600)));
/// assert_eq!(DekPolicy::default().with_max_values(u64::MAX).max_values(), 1 << 32);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DekPolicy {
    max_values: u64,
    max_bytes: u64,
    max_age: Duration,
    cache_capacity: usize,
    /// `None`: `max_age`.
    cache_ttl: Option<Duration>,
}

impl Default for DekPolicy {
    /// 2^20 values, 2^32 bytes (4 GiB), one hour; a reader cache of 1024
    /// DEKs, each kept for one hour (the `max_age`).
    fn default() -> Self {
        DekPolicy {
            max_values: 1 << 20,
            max_bytes: 1 << 32,
            max_age: Duration::from_secs(3600),
            cache_capacity: 1024,
            cache_ttl: None,
        }
    }
}

impl DekPolicy {
    /// At most `n` values per DEK, clamped to 1..=2^32
    /// ([`MAX_DEK_VALUES`]).
    #[must_use]
    pub fn with_max_values(self, n: u64) -> Self {
        DekPolicy {
            max_values: n.clamp(1, MAX_DEK_VALUES),
            ..self
        }
    }

    /// At most `n` plaintext bytes per DEK (checked before each value, so
    /// the last value may cross it), at least 1.
    #[must_use]
    pub fn with_max_bytes(self, n: u64) -> Self {
        DekPolicy {
            max_bytes: n.max(1),
            ..self
        }
    }

    /// A DEK older than `age` (counted from its making, before the KMS
    /// call that wraps it) encrypts no more, and the writer drops it on the
    /// next use of the key. Unless [`with_cache_ttl`](Self::with_cache_ttl)
    /// says otherwise, readers keep an unwrapped DEK this long too.
    /// `Duration::ZERO`: a new DEK per value.
    #[must_use]
    pub fn with_max_age(self, age: Duration) -> Self {
        DekPolicy {
            max_age: age,
            ..self
        }
    }

    /// A reader keeps at most `n` unwrapped DEKs per envelope key (at least
    /// 1); the least recently used is evicted and zeroized.
    #[must_use]
    pub fn with_cache_capacity(self, n: usize) -> Self {
        DekPolicy {
            cache_capacity: n.max(1),
            ..self
        }
    }

    /// A reader uses an unwrapped DEK for `ttl` from its unwrap (counted
    /// from the KMS call), however often it is used, then drops it
    /// (zeroized) and unwraps it again through the KMS for the next value
    /// under it. Default: the `max_age`. `Duration::ZERO`: one KMS call per
    /// value read.
    #[must_use]
    pub fn with_cache_ttl(self, ttl: Duration) -> Self {
        DekPolicy {
            cache_ttl: Some(ttl),
            ..self
        }
    }

    /// Values per DEK.
    pub fn max_values(&self) -> u64 {
        self.max_values
    }

    /// Plaintext bytes per DEK.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// Age of a DEK after which it encrypts no more.
    pub fn max_age(&self) -> Duration {
        self.max_age
    }

    /// Unwrapped DEKs a reader keeps.
    pub fn cache_capacity(&self) -> usize {
        self.cache_capacity
    }

    /// How long a reader uses an unwrapped DEK (the `max_age` unless set).
    pub fn cache_ttl(&self) -> Duration {
        self.cache_ttl.unwrap_or(self.max_age)
    }
}
