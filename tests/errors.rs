//! Errors keep their cause: a store's or a changelog's failure is one
//! `source()` away, while `Display` says what the crate was doing; errors
//! stay `Clone`; key management errors are not decryption errors.

use std::error::Error as _;

use tombstone_crypt::{
    ChangeLoggingStore, Changelog, EncryptedStore, Error, KeyId, KeyValueStore, Keyset,
    KeysetErrorKind, MemoryStore, Record,
};

#[cfg(feature = "redb")]
#[test]
fn opening_a_directory_as_a_database_keeps_the_io_error() {
    let dir = std::env::temp_dir().join(format!("tc-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = tombstone_crypt::RedbStore::open(&dir).unwrap_err();
    assert!(matches!(err, Error::Store { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with("store failed: redb: open"),
        "{err}"
    );
    let source = err.source().expect("a store error has a source");
    // redb's error, which in turn wraps the operating system's.
    assert!(!source.to_string().is_empty());
    let clone = err.clone();
    assert_eq!(clone, err);
    assert!(clone.source().is_some());
    std::fs::remove_dir_all(&dir).ok();
}

/// A changelog whose appends fail with an I/O error.
struct Broken;

impl Changelog for Broken {
    fn append(&mut self, _: &[u8], _: Option<&[u8]>) -> Result<(), Error> {
        Err(Error::changelog(
            "append",
            std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the log is gone"),
        ))
    }
    fn records(&self) -> Result<Vec<Record>, Error> {
        Ok(Vec::new())
    }
}

#[test]
fn a_changelog_error_reaches_the_caller_with_its_source() {
    let logged = ChangeLoggingStore::new(MemoryStore::new(), Broken);
    let mut store = EncryptedStore::new(logged, "s", Keyset::generate());
    let err = store.put(b"k", Some(b"v")).unwrap_err();
    assert_eq!(err.to_string(), "changelog failed: append");
    let io = err
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .expect("the io::Error is the source");
    assert_eq!(io.kind(), std::io::ErrorKind::BrokenPipe);
    assert_eq!(err.source().unwrap().to_string(), "the log is gone");
    // Other errors have no source.
    assert!(Error::Decryption.source().is_none());
}

#[test]
fn key_management_errors_are_not_decryption_errors() {
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let second = keyset.rotate();
    keyset.disable(first).unwrap();
    let missing = KeyId(first.0.wrapping_add(second.0).wrapping_add(1));
    assert_eq!(keyset.set_primary(first), Err(Error::KeyNotEnabled(first)));
    assert_eq!(
        keyset.set_primary(missing),
        Err(Error::KeyNotFound(missing))
    );
    assert_eq!(keyset.disable(second), Err(Error::PrimaryKey(second)));
    assert_eq!(keyset.remove(second), Err(Error::PrimaryKey(second)));
    // The decryption side reports the same key differently.
    let other = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    let mut ct = other.encrypt(b"v", b"").unwrap();
    ct[1..5].copy_from_slice(&first.0.to_be_bytes());
    assert_eq!(keyset.decrypt(&ct, b""), Err(Error::KeyDisabled(first)));
    ct[1..5].copy_from_slice(&missing.0.to_be_bytes());
    assert_eq!(keyset.decrypt(&ct, b""), Err(Error::UnknownKeyId(missing)));
}

#[test]
fn keyset_errors_have_a_kind() {
    let err = Keyset::from_tink_json("[").unwrap_err();
    assert_eq!(err.keyset_kind(), Some(KeysetErrorKind::Json));
    assert_eq!(Error::Decryption.keyset_kind(), None);
}
