//! The keyset's own primitive (`Keyset::encrypt` / `decrypt`, Tink's `Aead`)
//! against the serde wrappers, with the associated data written out by hand
//! from docs/FORMAT.md; key templates; backends chosen per keyset.

use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::{
    AadPolicy, Backend, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer,
    Error, KeyTemplate, Keyset, Serializer,
};

/// docs/FORMAT.md, "Associated data", written the plain way.
fn aad_by_hand(policy: AadPolicy, topic: &str, key: Option<&[u8]>) -> Vec<u8> {
    let key = match policy {
        AadPolicy::None => return Vec::new(),
        AadPolicy::Topic => None,
        _ => key,
    };
    let mut out = Vec::new();
    out.extend_from_slice(&(topic.len() as u32).to_be_bytes());
    out.extend_from_slice(topic.as_bytes());
    match key {
        None => out.push(0),
        Some(k) => {
            out.push(1);
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(k);
        }
    }
    out
}

const POLICIES: [AadPolicy; 3] = [AadPolicy::TopicAndKey, AadPolicy::Topic, AadPolicy::None];

fn keysets() -> Vec<(&'static str, Keyset)> {
    let mut all = vec![
        ("AES-256", Keyset::generate()),
        (
            "AES-128",
            Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap(),
        ),
    ];
    let mut rotated = Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap();
    rotated.rotate_with(KeyTemplate::aes256_gcm()).unwrap();
    all.push(("AES-128 rotated to AES-256", rotated));
    all.extend(
        all.clone()
            .into_iter()
            .map(|(n, k)| (n, k.with_backend(Backend::RustCrypto))),
    );
    all
}

#[test]
fn the_primitive_and_the_wrappers_write_the_same_format_both_ways() {
    let contexts: [(&str, Option<&[u8]>); 3] = [
        ("orders", Some(b"order-1")),
        ("orders", None),
        ("t\u{e9}", Some(&[0, 1, 255])),
    ];
    for (name, keyset) in keysets() {
        for policy in POLICIES {
            let ser = EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy);
            let de = DecryptingDeserializer::new(Bytes, keyset.clone()).with_aad(policy);
            for (topic, key) in contexts {
                let ctx = match key {
                    Some(k) => Context::new(topic).with_key(k),
                    None => Context::new(topic),
                };
                let ad = aad_by_hand(policy, topic, key);
                assert_eq!(ctx.associated_data(policy).unwrap(), ad);
                for pt in [&b""[..], b"v", &[9u8; 1000]] {
                    let what = format!("{name} {policy:?} {topic:?} {key:?} {}", pt.len());
                    // Wrapper -> primitive.
                    let ct = ser.serialize(&ctx, Some(pt)).unwrap().unwrap();
                    assert_eq!(ct.len(), pt.len() + OVERHEAD, "{what}");
                    assert_eq!(&ct[1..5], &keyset.primary().0.to_be_bytes(), "{what}");
                    assert_eq!(keyset.decrypt(&ct, &ad).unwrap(), pt, "{what}");
                    // Primitive -> wrapper.
                    let ct = keyset.encrypt(pt, &ad).unwrap();
                    assert_eq!(ct.len(), pt.len() + OVERHEAD, "{what}");
                    assert_eq!(
                        de.deserialize(&ctx, Some(&ct)).unwrap().as_deref(),
                        Some(pt),
                        "{what}"
                    );
                    // Another associated data fails, in both.
                    let mut other = ad.clone();
                    other.push(0);
                    assert_eq!(keyset.decrypt(&ct, &other), Err(Error::Decryption));
                }
            }
        }
    }
}

#[test]
fn templates_make_keys_of_their_size_and_rotation_keeps_old_keys() {
    let mut keyset = Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap();
    assert_eq!(key_lens(&keyset), [16]);
    let old = keyset.encrypt(b"old", b"ad").unwrap();
    // rotate() keeps the primary's kind; rotate_with switches it.
    keyset.rotate();
    assert_eq!(key_lens(&keyset), [16, 16]);
    keyset.rotate_with(KeyTemplate::aes256_gcm()).unwrap();
    assert_eq!(key_lens(&keyset), [16, 16, 32]);
    keyset.rotate();
    assert_eq!(key_lens(&keyset), [16, 16, 32, 32]);
    let staged = keyset.add_key_with(KeyTemplate::aes128_gcm()).unwrap();
    assert_eq!(key_lens(&keyset), [16, 16, 32, 32, 16]);
    assert_ne!(keyset.primary(), staged);
    assert_eq!(keyset.decrypt(&old, b"ad").unwrap(), b"old");
    let new = keyset.encrypt(b"new", b"ad").unwrap();
    assert_eq!(&new[1..5], &keyset.primary().0.to_be_bytes());
    // Through the JSON too.
    let back = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    assert_eq!(back.decrypt(&old, b"ad").unwrap(), b"old");
    assert_eq!(back.decrypt(&new, b"ad").unwrap(), b"new");
    assert_eq!(
        KeyTemplate::aes128_gcm().type_url(),
        "type.googleapis.com/google.crypto.tink.AesGcmKey"
    );
    assert_eq!(KeyTemplate::default(), KeyTemplate::aes256_gcm());
    assert_eq!(
        keyset.key_type_url(staged),
        Some(KeyTemplate::aes128_gcm().type_url())
    );
}

/// The key sizes, read from the cleartext export (`1a LEN key`).
fn key_lens(keyset: &Keyset) -> Vec<usize> {
    use base64::Engine as _;
    let v: serde_json::Value = serde_json::from_str(&keyset.to_tink_json()).unwrap();
    v["key"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| {
            let proto = base64::engine::general_purpose::STANDARD
                .decode(k["keyData"]["value"].as_str().unwrap())
                .unwrap();
            assert_eq!(proto[0], 0x1a);
            assert_eq!(usize::from(proto[1]), proto.len() - 2);
            proto.len() - 2
        })
        .collect()
}

#[test]
fn each_backend_reads_what_the_other_writes_through_the_primitive() {
    let keyset = Keyset::generate();
    let rc = keyset.clone().with_backend(Backend::RustCrypto);
    assert_eq!(rc.backend(), Backend::RustCrypto);
    assert_eq!(keyset.backend(), Backend::DEFAULT);
    // Debug names the backend, never the key.
    assert!(format!("{rc:?}").contains("RustCrypto"));
    for (from, to) in [(&keyset, &rc), (&rc, &keyset)] {
        let ct = from.encrypt(b"x", b"").unwrap();
        assert_eq!(to.decrypt(&ct, b"").unwrap(), b"x");
    }
}

#[test]
fn bad_ciphertexts_through_the_primitive_are_clear_errors() {
    let keyset = Keyset::generate();
    let ct = keyset.encrypt(b"value", b"").unwrap();
    for len in 0..OVERHEAD {
        assert_eq!(
            keyset.decrypt(&ct[..len], b""),
            Err(Error::Truncated { len, min: OVERHEAD })
        );
    }
    let mut bad = ct.clone();
    bad[0] = 2;
    assert_eq!(keyset.decrypt(&bad, b""), Err(Error::UnsupportedVersion));
    let mut bad = ct.clone();
    bad[OVERHEAD - 1] ^= 1;
    assert_eq!(keyset.decrypt(&bad, b""), Err(Error::Decryption));
}
