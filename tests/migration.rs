//! Migration from a plaintext topic: `DecryptingDeserializer` with
//! `Unencrypted::PassThrough` reads old plaintext values as plaintext and
//! still decrypts (and authenticates) every ciphertext; with the default
//! `Unencrypted::Reject` a plaintext value is an error. Tombstones stay
//! tombstones either way.

use serde::{Deserialize, Serialize};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, Json,
    Keyset, Serializer, Unencrypted,
};

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Order {
    id: u64,
    item: String,
}

fn ctx() -> Context<'static> {
    Context::new("orders").with_key(b"o-1")
}

#[test]
fn pass_through_reads_plaintext_and_still_authenticates_ciphertexts() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Json::<Order>::new(), keyset.clone());
    let strict = DecryptingDeserializer::new(Json::<Order>::new(), keyset.clone());
    assert_eq!(strict.unencrypted(), Unencrypted::Reject);
    let migrating = DecryptingDeserializer::new(Json::<Order>::new(), keyset.clone())
        .with_unencrypted(Unencrypted::PassThrough);
    let legacy = br#"{"id":1,"item":"a book with a long enough title"}"#;
    let order = Order {
        id: 2,
        item: "pen".into(),
    };
    let ct = ser.serialize(&ctx(), Some(&order)).unwrap().unwrap();

    // Reject (the default): the plaintext value is an error that quotes
    // nothing of it.
    assert_eq!(
        strict.deserialize(&ctx(), Some(legacy)),
        Err(Error::UnsupportedVersion)
    );
    // PassThrough: plaintext as plaintext, ciphertext decrypted.
    assert_eq!(
        migrating.deserialize(&ctx(), Some(legacy)).unwrap(),
        Some(Order {
            id: 1,
            item: "a book with a long enough title".into()
        })
    );
    assert_eq!(
        migrating.deserialize(&ctx(), Some(&ct)).unwrap(),
        Some(order)
    );
    // Tombstones are tombstones.
    assert_eq!(migrating.deserialize(&ctx(), None).unwrap(), None);
    // A ciphertext is never taken for plaintext: tampered, truncated or
    // moved to another key, it fails under PassThrough too.
    let mut bad = ct.clone();
    let last = bad.len() - 1;
    bad[last] ^= 1;
    assert_eq!(
        migrating.deserialize(&ctx(), Some(&bad)),
        Err(Error::Decryption)
    );
    assert!(migrating.deserialize(&ctx(), Some(&ct[..20])).is_err());
    let moved = Context::new("orders").with_key(b"o-2");
    assert_eq!(
        migrating.deserialize(&moved, Some(&ct)),
        Err(Error::Decryption)
    );
}

#[test]
fn what_counts_as_a_ciphertext_is_the_version_byte_and_a_known_key_id() {
    let mut keyset = Keyset::generate();
    let old = keyset.primary();
    keyset.rotate();
    keyset.disable(old).unwrap();
    let de = DecryptingDeserializer::new(Bytes, keyset.clone())
        .with_unencrypted(Unencrypted::PassThrough);
    // Plaintext that starts like a ciphertext of another keyset, or with
    // 0x01 and an unknown id, or is empty or short: plaintext.
    let other = Keyset::generate();
    let foreign = EncryptingSerializer::new(Bytes, other)
        .serialize(&ctx(), Some(&b"x"[..]))
        .unwrap()
        .unwrap();
    for plain in [&b""[..], b"\x01", b"\x01abc", b"hello", &foreign] {
        assert_eq!(
            de.deserialize(&ctx(), Some(plain)).unwrap().as_deref(),
            Some(plain),
            "{plain:?}"
        );
    }
    // 0x01 and the id of a key of the keyset: a ciphertext, even under a
    // disabled key (an error, not plaintext).
    let mut under_old = vec![1u8];
    under_old.extend_from_slice(&old.0.to_be_bytes());
    under_old.extend_from_slice(&[0; 40]);
    assert_eq!(
        de.deserialize(&ctx(), Some(&under_old)),
        Err(Error::KeyDisabled(old))
    );
    let mut under_primary = vec![1u8];
    under_primary.extend_from_slice(&keyset.primary().0.to_be_bytes());
    assert!(matches!(
        de.deserialize(&ctx(), Some(&under_primary)),
        Err(Error::Truncated { .. })
    ));
}
