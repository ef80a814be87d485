//! Contract point 5: the associated data binds a ciphertext to its topic and
//! record key, by policy.

use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error,
    Keyset, Serializer,
};

fn pair(policy: AadPolicy) -> (EncryptingSerializer<Bytes>, DecryptingDeserializer<Bytes>) {
    let keyset = Keyset::generate();
    (
        EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy),
        DecryptingDeserializer::new(Bytes, keyset).with_aad(policy),
    )
}

fn decrypts(de: &DecryptingDeserializer<Bytes>, ctx: &Context<'_>, ct: &[u8]) -> bool {
    match de.deserialize(ctx, Some(ct)) {
        Ok(v) => {
            assert_eq!(v.as_deref(), Some(&b"value"[..]));
            true
        }
        Err(e) => {
            assert_eq!(e, Error::Decryption);
            false
        }
    }
}

#[test]
fn topic_and_key_binds_both() {
    let (ser, de) = pair(AadPolicy::TopicAndKey);
    assert_eq!(ser.aad_policy(), AadPolicy::default());
    let here = Context::new("orders").with_key(b"k1");
    let ct = ser.serialize(&here, Some(&b"value"[..])).unwrap().unwrap();
    assert!(decrypts(&de, &here, &ct));
    assert!(!decrypts(&de, &Context::new("orders").with_key(b"k2"), &ct));
    assert!(!decrypts(
        &de,
        &Context::new("payments").with_key(b"k1"),
        &ct
    ));
    assert!(!decrypts(&de, &Context::new("orders"), &ct));
    assert!(!decrypts(&de, &Context::new("orders").with_key(b""), &ct));
}

#[test]
fn topic_and_key_without_a_key_is_topic() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let de = DecryptingDeserializer::new(Bytes, keyset).with_aad(AadPolicy::Topic);
    let ct = ser
        .serialize(&Context::new("orders"), Some(&b"value"[..]))
        .unwrap()
        .unwrap();
    assert!(decrypts(&de, &Context::new("orders").with_key(b"any"), &ct));
}

#[test]
fn topic_binds_the_topic_only() {
    let (ser, de) = pair(AadPolicy::Topic);
    let ct = ser
        .serialize(&Context::new("orders").with_key(b"k1"), Some(&b"value"[..]))
        .unwrap()
        .unwrap();
    assert!(decrypts(&de, &Context::new("orders").with_key(b"k2"), &ct));
    assert!(!decrypts(
        &de,
        &Context::new("payments").with_key(b"k1"),
        &ct
    ));
}

#[test]
fn none_binds_nothing() {
    let (ser, de) = pair(AadPolicy::None);
    let ct = ser
        .serialize(&Context::new("orders").with_key(b"k1"), Some(&b"value"[..]))
        .unwrap()
        .unwrap();
    assert!(decrypts(
        &de,
        &Context::new("payments").with_key(b"k2"),
        &ct
    ));
}

#[test]
fn policies_must_match() {
    let keyset = Keyset::generate();
    let ctx = Context::new("orders").with_key(b"k1");
    let ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(&b"value"[..]))
        .unwrap()
        .unwrap();
    for other in [AadPolicy::Topic, AadPolicy::None] {
        let de = DecryptingDeserializer::new(Bytes, keyset.clone()).with_aad(other);
        assert!(!decrypts(&de, &ctx, &ct));
    }
}

#[test]
fn the_aad_encoding_is_unambiguous() {
    // Topic "ab" + key "c" must differ from topic "a" + key "bc" and so on.
    let a = (Context::new("ab").with_key(b"c"))
        .associated_data(AadPolicy::TopicAndKey)
        .unwrap();
    let b = (Context::new("a").with_key(b"bc"))
        .associated_data(AadPolicy::TopicAndKey)
        .unwrap();
    assert_ne!(a, b);
    assert_eq!(a, [0, 0, 0, 2, b'a', b'b', 1, 0, 0, 0, 1, b'c']);
    assert_eq!(
        (Context::new("ab").with_key(b"c"))
            .associated_data(AadPolicy::Topic)
            .unwrap(),
        [0, 0, 0, 2, b'a', b'b', 0]
    );
    assert!(Context::new("ab")
        .associated_data(AadPolicy::None)
        .unwrap()
        .is_empty());
}

/// Both getters report the policy `with_aad` set (public API that nothing
/// inside the crate reads, so only a direct assertion sees it).
#[test]
fn the_aad_policy_getters_report_what_with_aad_set() {
    let ks = Keyset::generate();
    for policy in [AadPolicy::None, AadPolicy::Topic, AadPolicy::TopicAndKey] {
        assert_eq!(
            EncryptingSerializer::new(Bytes, ks.clone())
                .with_aad(policy)
                .aad_policy(),
            policy
        );
        assert_eq!(
            DecryptingDeserializer::new(Bytes, ks.clone())
                .with_aad(policy)
                .aad_policy(),
            policy
        );
    }
}
