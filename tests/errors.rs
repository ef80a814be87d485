//! Errors keep their cause: a store's or a changelog's failure is one
//! `source()` away, while `Display` says what the crate was doing; errors
//! stay `Clone`; key management errors are not decryption errors.

use std::error::Error as _;

use tombstone_crypt::error::KeysetErrorKind;
use tombstone_crypt::store::{
    ChangeLoggingStore, Changelog, EncryptedStore, KeyValueStore, MemoryStore, Record,
};
use tombstone_crypt::{Bincode, Context, Deserializer, Error, Json, KeyId, Keyset, Serializer};

#[cfg(feature = "redb")]
#[test]
fn opening_a_directory_as_a_database_keeps_the_io_error() {
    let dir = std::env::temp_dir().join(format!("tc-errors-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let err = tombstone_crypt::store::RedbStore::open(&dir).unwrap_err();
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

/// The codecs' `Debug` names the codec and its type (tests/debug_redaction.rs
/// only checks that no key bytes appear).
#[test]
fn codec_debug_names_the_codec_and_its_type() {
    assert_eq!(format!("{:?}", Bincode::<u32>::new()), "Bincode<u32>");
    assert_eq!(format!("{:?}", Json::<u32>::new()), "Json<u32>");
}

fn codec_detail(e: Error) -> String {
    match e {
        Error::Codec { codec, .. } => {
            assert_eq!(codec, "bincode");
            e.to_string()
        }
        other => panic!("expected a bincode codec error, got {other:?}"),
    }
}

/// A bincode error names its kind, for every kind a serde-driven decode can
/// produce, and for a `Serialize` impl that fails; never the bytes.
#[test]
fn bincode_errors_name_their_kind() {
    let c = Context::new("errors").with_key(b"k");
    let cases: Vec<(Error, &str)> = vec![
        (
            Bincode::<u32>::new()
                .deserialize(&c, Some(&[]))
                .unwrap_err(),
            "unexpected end of input",
        ),
        (
            // bincode's limit counts *claimed* bytes: a u64 claims 8 even
            // when its varint is 1 byte. 2.1M zero u64s are 2.1 MB of input
            // but claim 16.8 MB > 16 MiB. (A hostile length prefix does not
            // reach the limit: serde's cautious size hint stops it, and it
            // ends as "unexpected end of input".)
            {
                let n: u32 = 2_100_000;
                let mut buf = vec![0xfc];
                buf.extend_from_slice(&n.to_le_bytes());
                buf.resize(buf.len() + n as usize, 0);
                Bincode::<Vec<u64>>::new()
                    .deserialize(&c, Some(&buf))
                    .unwrap_err()
            },
            "decode limit exceeded",
        ),
        (
            // 252 announces a u32 where a u16 is expected.
            Bincode::<u16>::new()
                .deserialize(&c, Some(&[252, 0, 0, 0, 0]))
                .unwrap_err(),
            "invalid integer type",
        ),
        (
            Bincode::<Option<u8>>::new()
                .deserialize(&c, Some(&[2]))
                .unwrap_err(),
            "unexpected enum variant",
        ),
        (
            Bincode::<String>::new()
                .deserialize(&c, Some(&[1, 0xff]))
                .unwrap_err(),
            "invalid UTF-8 in a string",
        ),
        (
            Bincode::<char>::new()
                .deserialize(&c, Some(&[0xff]))
                .unwrap_err(),
            "invalid char",
        ),
        (
            Bincode::<bool>::new()
                .deserialize(&c, Some(&[2]))
                .unwrap_err(),
            "invalid bool",
        ),
        (
            // serde's NonZero impl reports a zero through Error::custom.
            Bincode::<std::num::NonZeroU8>::new()
                .deserialize(&c, Some(&[0]))
                .unwrap_err(),
            "the type's Deserialize impl failed",
        ),
    ];
    for (err, want) in cases {
        let text = codec_detail(err);
        assert!(text.contains(want), "{text:?} should say {want:?}");
    }

    // Encoding: a Serialize impl that fails (a RefCell already mutably
    // borrowed reports through serde's Error::custom).
    let cell = std::cell::RefCell::new(1u32);
    let _guard = cell.borrow_mut();
    let err = Bincode::<std::cell::RefCell<u32>>::new()
        .serialize(&c, Some(&cell))
        .unwrap_err();
    let text = codec_detail(err);
    assert!(text.contains("the value's Serialize impl failed"), "{text}");
}

/// `Utf8` reads borrowed bytes (`deserialize_slice`, what record keys go
/// through) as it reads owned ones, and refuses bytes that are not UTF-8
/// without quoting them.
#[test]
fn utf8_reads_borrowed_bytes_as_owned_ones() {
    use tombstone_crypt::Utf8;
    let ctx = Context::new("t");
    for s in ["", "order-17", "ünïcödé ✓"] {
        assert_eq!(Utf8.deserialize_slice(&ctx, s.as_bytes()).unwrap(), s);
        assert_eq!(
            Utf8.deserialize_owned(&ctx, s.as_bytes().to_vec()).unwrap(),
            s
        );
    }
    let err = Utf8.deserialize_slice(&ctx, b"ab\xffcd").unwrap_err();
    assert!(matches!(err, Error::Codec { .. }), "{err:?}");
    assert!(!err.to_string().contains("ab"), "{err}");
}
