//! Broken behaviours for the negative controls of the tests (feature
//! `test-hooks`): with them, the tests that check the proxy's promises
//! must fail.

/// Test hooks. All off by default; settable only with the feature
/// `test-hooks` ([`Proxy::with_hooks`](crate::Proxy)). Never in production.
#[doc(hidden)]
#[derive(Clone, Copy, Debug, Default)]
#[non_exhaustive]
pub struct Hooks {
    /// Forward policy topics' records as they came (plaintext).
    pub skip_encryption: bool,
    /// Encrypt a tombstone as an empty value (the bug this project exists
    /// to prevent).
    pub tombstone_as_empty: bool,
    /// Leave out the write rule's tombstones of older key forms.
    pub skip_fanout: bool,
    /// Forward the policy's named headers as they came (plaintext).
    pub skip_header_encryption: bool,
    /// Make KMS calls on the runtime's worker, without `block_in_place`.
    pub kms_on_the_worker: bool,
    /// Free frames, records and batches that held plaintext without
    /// wiping them.
    pub skip_wipe: bool,
    /// Transform every batch, Produce and Fetch, through the general path
    /// (its records decoded into kafka-protocol's `Record` and encoded
    /// again), never the fast path that works on their bytes: not broken,
    /// the reference the fast path's tests compare it with.
    pub general_path: bool,
}

impl Hooks {
    /// Whether the proxy wipes the plaintext it frees (always, but for
    /// the test hook `skip_wipe`).
    pub(crate) fn wipes(&self) -> bool {
        !self.skip_wipe
    }
}
