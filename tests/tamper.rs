//! Every single-bit flip, every truncation and every extension of a
//! ciphertext is rejected, with a clear error and no plaintext.

use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, KeyId,
    Keyset, Serializer,
};

fn setup(value: &[u8]) -> (Vec<u8>, DecryptingDeserializer<Bytes>, Keyset) {
    let keyset = Keyset::generate();
    let ctx = Context::new("t").with_key(b"k");
    let ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(value))
        .unwrap()
        .unwrap();
    (
        ct,
        DecryptingDeserializer::new(Bytes, keyset.clone()),
        keyset,
    )
}

#[test]
fn every_single_bit_flip_is_rejected() {
    for value in [
        &b""[..],
        &b"a"[..],
        &b"sixteen bytes!!!"[..],
        &[0u8; 100][..],
    ] {
        let (ct, de, keyset) = setup(value);
        let ctx = Context::new("t").with_key(b"k");
        assert_eq!(
            de.deserialize(&ctx, Some(&ct)).unwrap().as_deref(),
            Some(value)
        );
        for bit in 0..ct.len() * 8 {
            let mut bad = ct.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let err = de.deserialize(&ctx, Some(&bad)).unwrap_err();
            match bit / 8 {
                0 => assert_eq!(err, Error::UnsupportedVersion),
                1..=4 => {
                    let id = KeyId(u32::from_be_bytes([bad[1], bad[2], bad[3], bad[4]]));
                    assert_ne!(id, keyset.primary());
                    assert_eq!(err, Error::UnknownKeyId(id));
                }
                _ => assert_eq!(err, Error::Decryption, "bit {bit}"),
            }
        }
    }
}

#[test]
fn every_truncation_is_rejected() {
    let (ct, de, _) = setup(b"a value of some length");
    let ctx = Context::new("t").with_key(b"k");
    for len in 0..ct.len() {
        let err = de.deserialize(&ctx, Some(&ct[..len])).unwrap_err();
        if len < OVERHEAD {
            assert_eq!(err, Error::Truncated { len, min: OVERHEAD });
        } else {
            assert_eq!(err, Error::Decryption, "truncated to {len}");
        }
    }
}

#[test]
fn extensions_are_rejected() {
    let (ct, de, _) = setup(b"v");
    let ctx = Context::new("t").with_key(b"k");
    for extra in [&[0u8][..], &[1, 2, 3], &[0; 16]] {
        let mut bad = ct.clone();
        bad.extend_from_slice(extra);
        assert_eq!(
            de.deserialize(&ctx, Some(&bad)).unwrap_err(),
            Error::Decryption
        );
    }
}

#[test]
fn errors_are_clear_and_lowercase() {
    let (ct, de, _) = setup(b"v");
    let ctx = Context::new("t").with_key(b"k");
    let mut bad = ct.clone();
    bad[0] = 0x00;
    let msgs = [
        de.deserialize(&ctx, Some(&ct[..3]))
            .unwrap_err()
            .to_string(),
        de.deserialize(&ctx, Some(&bad)).unwrap_err().to_string(),
    ];
    assert_eq!(
        msgs[0],
        "ciphertext truncated: 3 bytes, a ciphertext has at least 33"
    );
    assert_eq!(
        msgs[1],
        "not a ciphertext of this format: the first byte is not the version byte 0x01"
    );
    for m in msgs {
        assert!(!m.ends_with('.'));
        assert!(m.chars().next().unwrap().is_lowercase());
    }
}

/// A value that is not a ciphertext (plaintext written before encryption
/// was turned on): the error says so without quoting any of its bytes.
#[test]
fn a_plaintext_value_is_rejected_without_quoting_it() {
    let (_, de, _) = setup(b"v");
    let ctx = Context::new("t").with_key(b"k");
    let legacy = b"{\"card\":\"4111111111111111\",\"name\":\"Ada\"}";
    let err = de.deserialize(&ctx, Some(legacy)).unwrap_err();
    assert_eq!(err, Error::UnsupportedVersion);
    let shown = format!("{err} {err:?}");
    // '{' is 0x7b (123); '"c' as a key id would be 0x2263... : none of it.
    for needle in ["7b", "123", "{", "card", "2263"] {
        assert!(!shown.contains(needle), "{needle:?} in {shown:?}");
    }
}
