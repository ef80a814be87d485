//! An in-process KMS for tests, benches and fuzzing (feature `test-hooks`):
//! `fake-kms://NAME` keys, AES-GCM under a key that lives in this process,
//! calls counted, and a switch that makes it fail as a KMS that is down.
//! It wraps with a [`Keyset`] and reaches into the envelope key's clock, so
//! it sits on top of the layers, beside the other test hooks, not among the
//! KMS clients.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use zeroize::Zeroizing;

use crate::error::Error;
use crate::keyset::Keyset;
use crate::kms::{KmsAead, KmsClient};

/// The URI scheme of [`FakeKms`] keys.
pub const FAKE_KMS_SCHEME: &str = "fake-kms://";

/// An in-process KMS: every `fake-kms://...` URI is one key of this
/// instance (the URI is bound as associated data, so keys of different
/// URIs do not open each other's blobs). Clones share the key and the
/// counters.
#[derive(Clone, Debug)]
pub struct FakeKms {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    keyset: Keyset,
    encrypts: AtomicUsize,
    decrypts: AtomicUsize,
    down: AtomicBool,
    delay_ms: AtomicU64,
    /// When not `usize::MAX`: every wrapped key is cut or zero-padded to
    /// this length (a faulty KMS).
    wrapped_len: AtomicUsize,
}

impl Default for FakeKms {
    fn default() -> Self {
        FakeKms::new()
    }
}

impl FakeKms {
    /// A KMS with a fresh key.
    pub fn new() -> Self {
        FakeKms {
            inner: Arc::new(Inner {
                keyset: Keyset::generate(),
                encrypts: AtomicUsize::new(0),
                decrypts: AtomicUsize::new(0),
                down: AtomicBool::new(false),
                delay_ms: AtomicU64::new(0),
                wrapped_len: AtomicUsize::new(usize::MAX),
            }),
        }
    }

    /// Encrypt calls so far (failed ones included).
    pub fn encrypt_calls(&self) -> usize {
        self.inner.encrypts.load(Ordering::SeqCst)
    }

    /// Decrypt calls so far (failed ones included).
    pub fn decrypt_calls(&self) -> usize {
        self.inner.decrypts.load(Ordering::SeqCst)
    }

    /// While `down`, every call fails with a connection-refused cause.
    pub fn set_down(&self, down: bool) {
        self.inner.down.store(down, Ordering::SeqCst);
    }

    /// Every call takes `delay` first (a slow KMS).
    pub fn set_delay(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.inner.delay_ms.store(ms, Ordering::SeqCst);
    }

    /// A faulty KMS: every ciphertext it returns is cut or zero-padded to
    /// `len` bytes (`None`: as made).
    pub fn set_wrapped_len(&self, len: Option<usize>) {
        self.inner
            .wrapped_len
            .store(len.unwrap_or(usize::MAX), Ordering::SeqCst);
    }

    /// Moves the clock that DEK ages are measured on forward by `by`, for
    /// every envelope key of the process (not only this KMS's): DEK and
    /// cache expiry without sleeping. Tests that use it must not run
    /// beside tests that depend on DEK ages.
    pub fn advance_clock(by: Duration) {
        crate::kms::dek::hooks::advance_clock(by);
    }

    /// Unwrapped DEKs held by the envelope keys of the process: writers'
    /// current DEKs and readers' cache entries, each DEK once (a writer's
    /// DEK is also in its own cache), and a DEK dropped by both but still
    /// held by a value being encrypted right now.
    pub fn deks_in_memory() -> usize {
        crate::kms::dek::hooks::deks_in_memory()
    }

    fn check_up(&self) -> Result<(), Error> {
        let ms = self.inner.delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            std::thread::sleep(Duration::from_millis(ms));
        }
        if self.inner.down.load(Ordering::SeqCst) {
            return Err(Error::kms(
                "fake KMS is down",
                std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "connection refused"),
            ));
        }
        Ok(())
    }
}

/// The AEAD of one `fake-kms://` key.
#[derive(Debug)]
struct FakeKey {
    kms: FakeKms,
    uri: String,
}

impl FakeKey {
    fn ad(&self, associated_data: &[u8]) -> Vec<u8> {
        let mut ad = (self.uri.len() as u64).to_be_bytes().to_vec();
        ad.extend_from_slice(self.uri.as_bytes());
        ad.extend_from_slice(associated_data);
        ad
    }
}

impl KmsAead for FakeKey {
    fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        self.kms.inner.encrypts.fetch_add(1, Ordering::SeqCst);
        self.kms.check_up()?;
        let mut wrapped = self
            .kms
            .inner
            .keyset
            .encrypt(plaintext, &self.ad(associated_data))?;
        let len = self.kms.inner.wrapped_len.load(Ordering::SeqCst);
        if len != usize::MAX {
            wrapped.resize(len, 0);
        }
        Ok(wrapped)
    }

    fn decrypt(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        self.kms.inner.decrypts.fetch_add(1, Ordering::SeqCst);
        self.kms.check_up()?;
        self.kms
            .inner
            .keyset
            .decrypt(ciphertext, &self.ad(associated_data))
            .map(Zeroizing::new)
            .map_err(|e| Error::kms("fake KMS refused to decrypt", e))
    }
}

impl KmsClient for FakeKms {
    fn supports(&self, key_uri: &str) -> bool {
        key_uri.starts_with(FAKE_KMS_SCHEME)
    }

    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        if !self.supports(key_uri) {
            return Err(Error::kms_msg("not a fake-kms:// URI"));
        }
        Ok(Arc::new(FakeKey {
            kms: self.clone(),
            uri: key_uri.to_owned(),
        }))
    }
}
