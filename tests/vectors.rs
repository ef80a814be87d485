//! Known-answer vectors computed outside this crate (Python `cryptography`
//! AESGCM with fixed test keys and nonces, see `tests/vectors/generate.py`),
//! run through the public API.
//!
//! - `tests/vectors/aes_gcm.json`: every vector decrypts to its plaintext from
//!   its Tink JSON keyset; the crate's associated data and its AES-GCM core
//!   reproduce the recorded bytes exactly.
//! - `tests/vectors/fail_aes_gcm.json`: every vector is rejected with exactly
//!   the error variant it names.

use std::collections::BTreeSet;

use serde::Deserialize;
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer, Error, KeyId, Keyset,
};

const VALID: &str = include_str!("vectors/aes_gcm.json");
const FAIL: &str = include_str!("vectors/fail_aes_gcm.json");

/// Version byte, key id and nonce.
const HEADER_LEN: usize = 17;
/// Header and tag: the shortest ciphertext.
const MIN_LEN: usize = 33;

#[derive(Deserialize)]
struct File<V> {
    vectors: Vec<V>,
}

#[derive(Deserialize)]
struct Valid {
    name: String,
    key_hex: String,
    key_id: u32,
    nonce_hex: String,
    policy: String,
    topic: String,
    record_key_hex: Option<String>,
    aad_hex: String,
    plaintext_hex: String,
    ciphertext_hex: String,
    keyset_json: String,
}

#[derive(Deserialize)]
struct Fail {
    name: String,
    expect_error: String,
    policy: String,
    topic: String,
    record_key_hex: Option<String>,
    ciphertext_hex: String,
    keyset_json: String,
}

fn unhex(name: &str, field: &str, s: &str) -> Vec<u8> {
    hex::decode(s).unwrap_or_else(|e| panic!("{name}: {field} is not hex: {e}"))
}

fn policy(name: &str, s: &str) -> AadPolicy {
    match s {
        "TopicAndKey" => AadPolicy::TopicAndKey,
        "Topic" => AadPolicy::Topic,
        "None" => AadPolicy::None,
        other => panic!("{name}: unknown policy {other:?}"),
    }
}

fn context<'a>(topic: &'a str, record_key: Option<&'a [u8]>) -> Context<'a> {
    match record_key {
        Some(k) => Context::new(topic).with_key(k),
        None => Context::new(topic),
    }
}

fn header_key_id(ct: &[u8]) -> u32 {
    u32::from_be_bytes([ct[1], ct[2], ct[3], ct[4]])
}

#[test]
fn valid_vectors_decrypt_and_reproduce() {
    let file: File<Valid> = serde_json::from_str(VALID).expect("aes_gcm.json parses");
    let mut ran = 0usize;
    let mut key_lens = BTreeSet::new();
    let mut key_ids = BTreeSet::new();
    let mut policies = BTreeSet::new();
    let mut pt_lens = BTreeSet::new();
    let mut without_record_key = 0usize;

    for v in &file.vectors {
        let n = v.name.as_str();
        let key = unhex(n, "key_hex", &v.key_hex);
        let nonce = unhex(n, "nonce_hex", &v.nonce_hex);
        let aad = unhex(n, "aad_hex", &v.aad_hex);
        let pt = unhex(n, "plaintext_hex", &v.plaintext_hex);
        let ct = unhex(n, "ciphertext_hex", &v.ciphertext_hex);
        let record_key = v
            .record_key_hex
            .as_deref()
            .map(|h| unhex(n, "record_key_hex", h));
        let pol = policy(n, &v.policy);
        let ctx = context(&v.topic, record_key.as_deref());

        // Wire format: 0x01 | key_id BE | nonce | ciphertext | tag.
        assert_eq!(ct.len(), pt.len() + MIN_LEN, "{n}: length");
        assert_eq!(ct[0], 0x01, "{n}: version byte");
        assert_eq!(header_key_id(&ct), v.key_id, "{n}: key id in the header");
        assert_eq!(&ct[5..HEADER_LEN], &nonce[..], "{n}: nonce in the header");

        // The keyset from its Tink JSON.
        let keyset = Keyset::from_tink_json(&v.keyset_json)
            .unwrap_or_else(|e| panic!("{n}: keyset does not load: {e}"));
        assert_eq!(keyset.primary(), KeyId(v.key_id), "{n}: primary key id");

        // Decryption through the public API.
        let de = DecryptingDeserializer::new(Bytes, keyset).with_aad(pol);
        let got = de
            .deserialize(&ctx, Some(&ct))
            .unwrap_or_else(|e| panic!("{n}: does not decrypt: {e:?}"));
        assert_eq!(got, Some(pt.clone()), "{n}: plaintext");

        // The crate's associated data and AES-GCM core give the same bytes.
        let our_aad = ctx
            .associated_data(pol)
            .unwrap_or_else(|e| panic!("{n}: aad: {e:?}"));
        assert_eq!(hex::encode(&our_aad), v.aad_hex, "{n}: associated data");
        let sealed = tombstone_crypt::__fuzz::aes_gcm_seal(&key, &nonce, &aad, &pt)
            .unwrap_or_else(|e| panic!("{n}: seal: {e:?}"));
        assert_eq!(
            hex::encode(&sealed),
            hex::encode(&ct[HEADER_LEN..]),
            "{n}: ciphertext and tag"
        );

        ran += 1;
        key_lens.insert(key.len());
        key_ids.insert(v.key_id);
        policies.insert(v.policy.clone());
        pt_lens.insert(pt.len());
        if record_key.is_none() {
            without_record_key += 1;
        }
    }

    // Not vacuous: the file holds what the generator promises.
    assert!(ran >= 46, "only {ran} valid vectors ran");
    assert_eq!(ran, file.vectors.len());
    assert_eq!(key_lens, BTreeSet::from([16, 32]), "AES-128 and AES-256");
    for id in [0, 1, 0x7fff_ffff, 0xffff_ffff] {
        assert!(key_ids.contains(&id), "no vector with key id {id:#x}");
    }
    let all: BTreeSet<String> = ["None", "Topic", "TopicAndKey"].map(String::from).into();
    assert_eq!(policies, all, "every policy");
    for len in [0, 16, 256, 1000] {
        assert!(pt_lens.contains(&len), "no plaintext of {len} bytes");
    }
    assert!(without_record_key > 0, "no vector without a record key");
}

#[test]
fn fail_vectors_are_rejected_with_the_named_error() {
    let file: File<Fail> = serde_json::from_str(FAIL).expect("fail_aes_gcm.json parses");
    let mut ran = 0usize;
    let mut seen = BTreeSet::new();
    let mut truncated_lens = BTreeSet::new();
    let mut bad_versions = BTreeSet::new();

    for v in &file.vectors {
        let n = v.name.as_str();
        let ct = unhex(n, "ciphertext_hex", &v.ciphertext_hex);
        let record_key = v
            .record_key_hex
            .as_deref()
            .map(|h| unhex(n, "record_key_hex", h));
        let ctx = context(&v.topic, record_key.as_deref());
        let keyset = Keyset::from_tink_json(&v.keyset_json)
            .unwrap_or_else(|e| panic!("{n}: keyset does not load: {e}"));
        let de = DecryptingDeserializer::new(Bytes, keyset).with_aad(policy(n, &v.policy));

        let err = match de.deserialize(&ctx, Some(&ct)) {
            Ok(got) => panic!("{n}: accepted, gave {got:?}"),
            Err(e) => e,
        };
        let matched = match (v.expect_error.as_str(), &err) {
            ("Truncated", Error::Truncated { len, min }) => *len == ct.len() && *min == MIN_LEN,
            ("UnsupportedVersion", Error::UnsupportedVersion) => ct[0] != 0x01,
            ("UnknownKeyId", Error::UnknownKeyId(KeyId(id))) => *id == header_key_id(&ct),
            ("KeyDisabled", Error::KeyDisabled(KeyId(id))) => *id == header_key_id(&ct),
            ("Decryption", Error::Decryption) => true,
            (
                "Truncated" | "UnsupportedVersion" | "UnknownKeyId" | "KeyDisabled" | "Decryption",
                _,
            ) => false,
            (other, _) => panic!("{n}: unknown expect_error {other:?}"),
        };
        assert!(matched, "{n}: expected {}, got {err:?}", v.expect_error);
        ran += 1;
        seen.insert(v.expect_error.clone());
        match err {
            Error::Truncated { len, .. } => {
                truncated_lens.insert(len);
            }
            Error::UnsupportedVersion => {
                bad_versions.insert(ct[0]);
            }
            _ => {}
        }
    }

    assert!(ran >= 29, "only {ran} fail vectors ran");
    assert_eq!(ran, file.vectors.len());
    let all: BTreeSet<String> = [
        "Decryption",
        "KeyDisabled",
        "Truncated",
        "UnknownKeyId",
        "UnsupportedVersion",
    ]
    .map(String::from)
    .into();
    assert_eq!(seen, all, "every error variant is exercised");
    for len in [0, 1, 32] {
        assert!(
            truncated_lens.contains(&len),
            "no truncation to {len} bytes"
        );
    }
    for b in [0x00, 0x02] {
        assert!(bad_versions.contains(&b), "no version byte {b:#04x}");
    }
}
