//! The aws-lc backend (feature `aws-lc`) and the RustCrypto backend write
//! the same wire format: each decrypts what the other encrypts, for AES-128
//! and AES-256 keys, every associated-data policy and sizes 0, 1 and 1000;
//! tampered ciphertexts and a wrong context fail under both; and for a fixed
//! nonce both produce the very same bytes.
#![cfg(feature = "aws-lc")]

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes128Gcm, Aes256Gcm, Nonce};
use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::{
    AadPolicy, Backend, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer,
    Keyset, Serializer,
};

const POLICIES: [AadPolicy; 3] = [AadPolicy::TopicAndKey, AadPolicy::Topic, AadPolicy::None];
const SIZES: [usize; 3] = [0, 1, 1000];

/// A keyset with one AES-GCM key of `key`'s length, through Tink's JSON.
fn keyset_with(id: u32, key: &[u8]) -> Keyset {
    let mut proto = vec![0x1a, u8::try_from(key.len()).unwrap()];
    proto.extend_from_slice(key);
    let json = format!(
        r#"{{"primaryKeyId":{id},"key":[{{"keyData":{{"typeUrl":"type.googleapis.com/google.crypto.tink.AesGcmKey","value":"{}","keyMaterialType":"SYMMETRIC"}},"status":"ENABLED","keyId":{id},"outputPrefixType":"TINK"}}]}}"#,
        B64.encode(&proto)
    );
    Keyset::from_tink_json(&json).unwrap()
}

fn keysets() -> Vec<(&'static str, Keyset)> {
    let k128: Vec<u8> = (0..16u8)
        .map(|i| i.wrapping_mul(37).wrapping_add(1))
        .collect();
    let k256: Vec<u8> = (0..32u8)
        .map(|i| i.wrapping_mul(53).wrapping_add(7))
        .collect();
    vec![
        ("AES-128", keyset_with(0x0102_0304, &k128)),
        ("AES-256", keyset_with(0xfedc_ba98, &k256)),
        ("AES-256 generated", Keyset::generate()),
    ]
}

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + 3) as u8).collect()
}

struct Pair {
    ser: EncryptingSerializer<Bytes>,
    de: DecryptingDeserializer<Bytes>,
}

/// The layer on the same keys expanded for aws-lc and for RustCrypto.
fn backends(keyset: &Keyset, policy: AadPolicy) -> [(&'static str, Pair); 2] {
    let pair = |backend| {
        let keyset = keyset.clone().with_backend(backend);
        assert_eq!(keyset.backend(), backend);
        Pair {
            ser: EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy),
            de: DecryptingDeserializer::new(Bytes, keyset).with_aad(policy),
        }
    };
    [
        ("aws-lc", pair(Backend::AwsLc)),
        ("RustCrypto", pair(Backend::RustCrypto)),
    ]
}

/// Byte positions to tamper with: version, key id, nonce, body, tag.
fn tamper_positions(len: usize) -> Vec<usize> {
    let mut p = vec![0, 1, 4, 5, 16, len / 2, len - 16, len - 1];
    if len > OVERHEAD {
        p.extend([17, len - 17]);
    }
    p.sort_unstable();
    p.dedup();
    p
}

#[test]
fn the_feature_selects_aws_lc_and_rustcrypto_stays_reachable() {
    assert_eq!(Backend::DEFAULT, Backend::AwsLc);
    assert_eq!(Keyset::generate().backend(), Backend::AwsLc);
    let [(_, aws_lc), (_, rust_crypto)] = backends(&Keyset::generate(), AadPolicy::default());
    assert_eq!(aws_lc.ser.keyset().backend().name(), "aws-lc");
    assert_eq!(aws_lc.de.keyset().backend().name(), "aws-lc");
    assert_eq!(rust_crypto.ser.keyset().backend().name(), "rustcrypto");
    assert_eq!(rust_crypto.de.keyset().backend().name(), "rustcrypto");
    // Keys added later use the keyset's backend too.
    let mut keyset = Keyset::generate().with_backend(Backend::RustCrypto);
    keyset.rotate();
    assert_eq!(keyset.backend(), Backend::RustCrypto);
}

#[test]
fn each_backend_decrypts_what_the_other_encrypts() {
    let ctx = Context::new("orders").with_key(b"order-17");
    for (key_name, keyset) in keysets() {
        for policy in POLICIES {
            let pairs = backends(&keyset, policy);
            for n in SIZES {
                let pt = plaintext(n);
                for (from, enc) in &pairs {
                    let ct = enc.ser.serialize(&ctx, Some(&pt[..])).unwrap().unwrap();
                    assert_eq!(ct.len(), n + OVERHEAD, "{key_name} {policy:?} {n} {from}");
                    assert_eq!(ct[0], 0x01);
                    assert_eq!(&ct[1..5], &keyset.primary().0.to_be_bytes());
                    for (to, dec) in &pairs {
                        assert_eq!(
                            dec.de.deserialize(&ctx, Some(&ct)).unwrap(),
                            Some(pt.clone()),
                            "{key_name} {policy:?} size {n}: {from} -> {to}"
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn tampered_ciphertexts_and_wrong_contexts_fail_under_both() {
    let ctx = Context::new("orders").with_key(b"order-17");
    let other_key = Context::new("orders").with_key(b"order-18");
    let other_topic = Context::new("orders2").with_key(b"order-17");
    for (key_name, keyset) in keysets() {
        for policy in POLICIES {
            let pairs = backends(&keyset, policy);
            for n in SIZES {
                let pt = plaintext(n);
                for (from, enc) in &pairs {
                    let ct = enc.ser.serialize(&ctx, Some(&pt[..])).unwrap().unwrap();
                    for (to, dec) in &pairs {
                        let what = format!("{key_name} {policy:?} size {n}: {from} -> {to}");
                        for pos in tamper_positions(ct.len()) {
                            for bit in [0x01u8, 0x80] {
                                let mut bad = ct.clone();
                                bad[pos] ^= bit;
                                assert!(
                                    dec.de.deserialize(&ctx, Some(&bad)).is_err(),
                                    "{what}: byte {pos} ^ {bit:#04x} accepted"
                                );
                            }
                        }
                        assert!(dec.de.deserialize(&ctx, Some(&ct[..ct.len() - 1])).is_err());
                        let mut longer = ct.clone();
                        longer.push(0);
                        assert!(dec.de.deserialize(&ctx, Some(&longer)).is_err());
                        let moved_key = dec.de.deserialize(&other_key, Some(&ct));
                        let moved_topic = dec.de.deserialize(&other_topic, Some(&ct));
                        match policy {
                            AadPolicy::TopicAndKey => {
                                assert!(moved_key.is_err(), "{what}: moved to another key");
                                assert!(moved_topic.is_err(), "{what}: moved to another topic");
                            }
                            AadPolicy::Topic => {
                                assert_eq!(moved_key.unwrap(), Some(pt.clone()), "{what}");
                                assert!(moved_topic.is_err(), "{what}: moved to another topic");
                            }
                            _ => {
                                assert_eq!(moved_key.unwrap(), Some(pt.clone()), "{what}");
                                assert_eq!(moved_topic.unwrap(), Some(pt.clone()), "{what}");
                            }
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn both_backends_pass_tombstones_through() {
    for (_, keyset) in keysets() {
        for (_, pair) in backends(&keyset, AadPolicy::default()) {
            let ctx = Context::new("orders").with_key(b"order-17");
            assert_eq!(pair.ser.serialize(&ctx, None).unwrap(), None);
            assert_eq!(pair.de.deserialize(&ctx, None).unwrap(), None);
        }
    }
}

/// With a fixed nonce, aws-lc (the crate's crypto core under the feature)
/// and RustCrypto's `aes-gcm` produce identical `ciphertext | tag` bytes.
#[test]
fn same_bytes_for_a_fixed_nonce() {
    let nonce = [0x5au8; 12];
    let ctx = Context::new("orders").with_key(b"order-17");
    for key_len in [16usize, 32] {
        let key: Vec<u8> = (0..key_len).map(|i| (i * 11 + 5) as u8).collect();
        for policy in POLICIES {
            let aad = ctx.associated_data(policy).unwrap();
            for n in SIZES {
                let pt = plaintext(n);
                let aws_lc = tombstone_crypt::__fuzz::aes_gcm_seal_with(
                    Backend::AwsLc,
                    &key,
                    &nonce,
                    &aad,
                    &pt,
                )
                .unwrap();
                let mut rust_crypto = pt.clone();
                let gcm_nonce = Nonce::from(nonce);
                let tag = if key_len == 16 {
                    Aes128Gcm::new_from_slice(&key)
                        .unwrap()
                        .encrypt_inout_detached(&gcm_nonce, &aad, rust_crypto.as_mut_slice().into())
                } else {
                    Aes256Gcm::new_from_slice(&key)
                        .unwrap()
                        .encrypt_inout_detached(&gcm_nonce, &aad, rust_crypto.as_mut_slice().into())
                }
                .unwrap();
                rust_crypto.extend_from_slice(&tag);
                assert_eq!(
                    aws_lc,
                    rust_crypto,
                    "AES-{} {policy:?} size {n}",
                    key_len * 8
                );
                let back = tombstone_crypt::__fuzz::aes_gcm_open_with(
                    Backend::AwsLc,
                    &key,
                    &nonce,
                    &aad,
                    &rust_crypto,
                )
                .unwrap();
                assert_eq!(back, pt);
            }
        }
    }
}
