//! Crypto-shredding: a key per data subject, and a delete that reaches
//! every copy.
//!
//! A tombstone deletes a key from one compacted topic once its cleaner
//! runs; it does not reach the copies (segments not yet compacted, a
//! backup, a mirror, a consumer's store, a data lake). [`SubjectKeys`]
//! encrypts each data subject's values under a DEK of its own, kept wrapped
//! by a key-encryption keyset in a [`KeyStore`]; [`SubjectKeys::shred`]
//! removes that DEK, and every copy of the subject's values, wherever it
//! is, then reads as a delete.
//!
//! - The subject is the record key's plaintext by default
//!   ([`SubjectEncrypting`]), or what a closure takes from the value
//!   ([`SubjectEncrypting::with_subject`]).
//! - A subject is never written in cleartext: the key store and the values
//!   name it by a keyed hash, the **subject tag** (16 bytes, AES-SIV's
//!   synthetic IV of the subject under a naming key, itself kept in the
//!   key store wrapped by the KEK).
//! - A value is `0x53 | subject tag (16) | DEK id (8) | nonce (12) |
//!   ciphertext | GCM tag (16)`, AES-256-GCM, bound to the topic, the
//!   record key and its own header (`docs/FORMAT.md`).
//! - A value whose DEK was shredded reads as a delete: `deserialize`
//!   gives `None`, so a store restored from an old segment or a backup
//!   drops it and a consumer sees a delete; [`SubjectKeys::strict`] gives
//!   [`Error::Shredded`](crate::Error::Shredded) instead. **Only a shred deletes**: the key store
//!   keeps a record of each shred (the DEK ids it covers), and a value
//!   reads as a delete only when such a record covers its DEK. A DEK the
//!   store neither holds nor records as shredded (the wrong key store, a
//!   lost one, a value whose header was changed or forged) is
//!   [`Error::UnknownSubjectKey`](crate::Error::UnknownSubjectKey), never a delete.
//! - **Opening is not creating**: [`SubjectKeys::open`] needs a key store
//!   that holds a naming key the KEK opens (a mistyped path or another
//!   KEK is an error at once); [`SubjectKeys::create`] makes the naming key
//!   of a new store. [`RedbKeyStore::open`] needs the file,
//!   [`RedbKeyStore::create`] makes it (0600, exclusively).
//! - Caches are fenced: a DEK is served from this process's cache for at
//!   most [`SubjectKeys::with_fence`] (default 5 s) after it was last read
//!   from the key store; then the store is asked again, and an error there
//!   refuses the value (never a stale DEK).
//!
//! ```
//! use std::sync::Arc;
//! use tombstone_crypt::shred::{MemoryKeyStore, Shred, SubjectEncrypting, SubjectKeys};
//! use tombstone_crypt::{Context, Deserializer as _, Keyset, Serializer as _, Utf8};
//!
//! let keys = Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new()))?);
//! let values = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
//! let ctx = Context::new("customers").with_key(b"customer-17");
//! let bytes = values.serialize(&ctx, Some("Ada, 1 Main St"))?.unwrap();
//! assert_eq!(values.deserialize(&ctx, Some(&bytes))?.as_deref(), Some("Ada, 1 Main St"));
//!
//! assert_eq!(keys.shred(b"customer-17")?, Shred::Removed(1));
//! // Every copy of the value now reads as a delete.
//! assert_eq!(values.deserialize(&ctx, Some(&bytes))?, None);
//!
//! // Opening is not creating: a store with no naming key is an error.
//! assert!(SubjectKeys::open(Keyset::generate(), Arc::new(MemoryKeyStore::new())).is_err());
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

mod cache;
mod check;
mod format;
mod keys;
mod serde;
mod store;

pub use cache::SubjectStats;
pub use check::KeyStoreCheck;
use format::*;
pub use format::{has_subject_shape, SubjectTag, FORMAT, OVERHEAD, TAG};
pub use keys::SubjectKeys;
pub use serde::SubjectEncrypting;
#[cfg(feature = "kafka")]
pub(crate) use store::sealing_key;
#[cfg(feature = "redb")]
pub use store::RedbKeyStore;
pub use store::{covered_ids, DekLookup, KeyStore, MemoryKeyStore, Seal, Shred, ShredRecord};

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::cache::*;
    use super::*;
    use crate::keyset::Keyset;

    fn keys() -> SubjectKeys {
        SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new()))
            .expect("subject keys")
            .with_fence(Duration::from_secs(3600))
    }

    fn write(keys: &SubjectKeys, subject: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        keys.seal_into(subject, b"record", &mut out, 1, |o| {
            o.push(7);
            Ok(())
        })
        .expect("sealed");
        out
    }

    fn dek_id(value: &[u8]) -> [u8; DEK_ID] {
        value[1 + TAG..1 + TAG + DEK_ID]
            .try_into()
            .expect("a DEK id")
    }

    /// A write hint (the subject's DEK found with one lookup) is followed
    /// only while the cache has dropped no DEK since it was taken. Here the
    /// shredded DEK is still alive (a value is being written with it
    /// elsewhere), so only the cache's generation stops the next write
    /// from using it; without the generation's bump on removal this fails.
    #[test]
    fn a_write_hint_is_never_followed_after_a_shred_even_while_its_dek_is_alive() {
        let keys = keys();
        let first = write(&keys, b"alice");
        // The second write finds the DEK by tag and leaves the hint; the
        // third follows it.
        assert_eq!(dek_id(&write(&keys, b"alice")), dek_id(&first));
        assert_eq!(dek_id(&write(&keys, b"alice")), dek_id(&first));
        let tag = keys.tag(b"alice").expect("tag");
        let in_flight = keys.cached(&tag).0.expect("the DEK is cached");
        assert_eq!(keys.shred_tag(&tag).expect("shred"), Shred::Removed(1));
        let after = write(&keys, b"alice");
        assert_ne!(dek_id(&after), dek_id(&first), "a shredded DEK wrote again");
        assert!(keys
            .open_value(b"record", &first)
            .expect("shredded")
            .is_none());
        drop(in_flight);
    }

    /// A tag cache entry stays small: 10^7 subjects pass through a cache
    /// of bounded entries, and a hot set's entries are what a write reads.
    #[test]
    fn a_tag_cache_entry_is_56_bytes() {
        assert_eq!(std::mem::size_of::<(Subject, Named)>(), 56);
    }

    /// The hint is kept and followed: once a subject's DEK has been found
    /// by tag, the subject's entry holds a hint, and the next write is a
    /// cache hit that leaves it in place (a stale hint is cleared).
    #[test]
    fn a_subjects_next_write_follows_its_hint() {
        let keys = keys();
        write(&keys, b"bob");
        write(&keys, b"bob");
        let hinted = |keys: &SubjectKeys| {
            keys.lock()
                .tags
                .get(&b"bob"[..])
                .is_some_and(|n| n.hint.is_some())
        };
        assert!(hinted(&keys));
        let hits = keys.stats().cache_hits;
        write(&keys, b"bob");
        assert_eq!(keys.stats().cache_hits, hits + 1);
        assert!(hinted(&keys));
    }
}
