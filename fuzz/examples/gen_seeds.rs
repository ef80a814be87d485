//! Writes the committed seed corpus, `corpus/<target>/seed-*`, the same
//! bytes on every run (fixed keys, fixed nonces, a fixed PRNG seed):
//!
//! ```sh
//! cargo run --manifest-path fuzz/Cargo.toml --example gen_seeds
//! ```
//!
//! Old `seed-*` files are removed first; other corpus files are left alone.

use std::fs;
use std::path::{Path, PathBuf};

use arbitrary::{Arbitrary, Unstructured};
use tombstone_crypt::__fuzz::aes_gcm_seal;
use tombstone_crypt::{
    Bincode, Bytes, DecryptingDeserializer, Deserializer as _, DeterministicDeserializer,
    DeterministicSerializer, KeyId, Serializer as _,
};
use tombstone_crypt_fuzz::{
    context, key_bytes, keyset, policy, selector, siv_keyset, Kind, Op, RoundtripInput, Small,
    StoreInput, DISABLED, KEYSET_JSON, PRIMARY, SECONDARY,
};

fn main() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut total = 0;
    for (target, seeds) in [
        ("deserialize", deserialize_seeds()),
        ("keyset_json", keyset_seeds()),
        ("roundtrip", roundtrip_seeds()),
        ("store_ops", store_seeds()),
    ] {
        total += write(&root.join(target), &seeds);
    }
    println!("{total} seeds under {}", root.display());
}

fn write(dir: &Path, seeds: &[(String, Vec<u8>)]) -> usize {
    fs::create_dir_all(dir).expect("corpus dir");
    for entry in fs::read_dir(dir).expect("read corpus dir") {
        let path = entry.expect("entry").path();
        if path
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("seed-"))
        {
            fs::remove_file(&path).expect("remove old seed");
        }
    }
    for (name, bytes) in seeds {
        fs::write(dir.join(format!("seed-{name}")), bytes).expect("write seed");
    }
    seeds.len()
}

/// A Tink ciphertext built by hand: prefix, key id, nonce, sealed body.
fn tink_ciphertext(sel: u8, id: KeyId, key: KeyId, nonce: [u8; 12], pt: &[u8]) -> Vec<u8> {
    let ad = context(sel)
        .associated_data(policy(sel))
        .expect("fixed contexts encode");
    let key = key_bytes(key).expect("a fixed key");
    let mut out = vec![sel, 0x01];
    out.extend_from_slice(&id.0.to_be_bytes());
    out.extend_from_slice(&nonce);
    out.extend(aes_gcm_seal(key, &nonce, &ad, pt).expect("seal"));
    out
}

fn small() -> Small {
    Small {
        id: 300,
        name: "order-1".into(),
        tags: vec![1, 2, 65535],
        flag: Some(true),
        kind: Kind::Named {
            data: b"\x00\x01".to_vec(),
        },
    }
}

fn deserialize_seeds() -> Vec<(String, Vec<u8>)> {
    let sel0 = selector(0, 0);
    let small = Bincode::<Small>::new()
        .serialize(&context(sel0), Some(&small()))
        .expect("encode")
        .expect("present");
    let mut seeds = Vec::new();
    let mut n = 0u8;
    for ctx in 0..4 {
        for pol in 0..3 {
            let sel = selector(ctx, pol);
            for (what, pt) in [("empty", &b""[..]), ("text", b"hello"), ("small", &small)] {
                n += 1;
                seeds.push((
                    format!("ok-ctx{ctx}-policy{pol}-{what}"),
                    tink_ciphertext(sel, PRIMARY, PRIMARY, [n; 12], pt),
                ));
            }
        }
    }
    // Deterministic (AES-SIV) record keys under the fixed SIV keyset.
    for ctx in 0..4 {
        for pol in 0..3 {
            let sel = selector(ctx, pol);
            let ser =
                DeterministicSerializer::new(Bytes, siv_keyset().clone()).with_aad(policy(sel));
            let key = ser
                .serialize(&context(sel), Some(&b"customer-17"[..]))
                .expect("encrypt a key")
                .expect("present");
            seeds.push((
                format!("siv-ctx{ctx}-policy{pol}"),
                [&[sel][..], &key].concat(),
            ));
        }
    }
    seeds.push((
        "ok-aes128-secondary".into(),
        tink_ciphertext(
            sel0,
            SECONDARY,
            SECONDARY,
            [0xa1; 12],
            b"under the secondary",
        ),
    ));
    seeds.push((
        "fail-disabled-key".into(),
        tink_ciphertext(
            sel0,
            DISABLED,
            DISABLED,
            [0xa2; 12],
            b"under a disabled key",
        ),
    ));
    seeds.push((
        "fail-unknown-key-id".into(),
        tink_ciphertext(sel0, KeyId(42), PRIMARY, [0xa3; 12], b"unknown id"),
    ));
    seeds.push((
        "fail-wrong-key-for-id".into(),
        tink_ciphertext(sel0, PRIMARY, DISABLED, [0xa4; 12], b"wrong key"),
    ));
    let mut bad_version = tink_ciphertext(sel0, PRIMARY, PRIMARY, [0xa5; 12], b"v");
    bad_version[1] = 0x00;
    seeds.push(("fail-version".into(), bad_version));
    let mut truncated = tink_ciphertext(sel0, PRIMARY, PRIMARY, [0xa6; 12], b"");
    truncated.pop();
    seeds.push(("fail-truncated".into(), truncated));
    for (name, bytes) in &seeds {
        let (sel, ct) = (bytes[0], &bytes[1..]);
        let accepted = if name.starts_with("siv-") {
            DeterministicDeserializer::new(Bytes, siv_keyset().clone())
                .with_aad(policy(sel))
                .deserialize(&context(sel), Some(ct))
                .is_ok()
        } else {
            let de = DecryptingDeserializer::new(Bytes, keyset().clone()).with_aad(policy(sel));
            de.deserialize(&context(sel), Some(ct)).is_ok()
        };
        assert_eq!(
            accepted,
            name.starts_with("ok-") || name.starts_with("siv-"),
            "ciphertext seed {name}"
        );
    }
    seeds.push(("bincode-plaintext".into(), [&[sel0][..], &small].concat()));
    seeds
}

const AES_GCM: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";

/// One Tink JSON key entry.
fn key_json(id: u32, status: &str, prefix: &str, type_url: &str, value: &str) -> String {
    format!(
        r#"{{"keyData":{{"typeUrl":"{type_url}","value":"{value}","keyMaterialType":"SYMMETRIC"}},"status":"{status}","keyId":{id},"outputPrefixType":"{prefix}"}}"#
    )
}

fn keyset_json(primary: Option<u32>, keys: &[String]) -> String {
    let primary = primary.map_or(String::new(), |p| format!(r#""primaryKeyId":{p},"#));
    format!(r#"{{{primary}"key":[{}]}}"#, keys.join(","))
}

fn keyset_seeds() -> Vec<(String, Vec<u8>)> {
    // Protos: 0x1a len key, or with an explicit version 0 (0x08 0x00).
    let k256 = "GiAREREREREREREREREREREREREREREREREREREREREREQ==";
    let k128 = "GhAiIiIiIiIiIiIiIiIiIiIi";
    let k256_v0 = "CAAaIERERERERERERERERERERERERERERERERERERERERERE";
    let k192 = "GhgzMzMzMzMzMzMzMzMzMzMzMzMzMzMz"; // 24 bytes: rejected
    let k256_v1 = "CAEaIERERERERERERERERERERERERERERERERERERERERERE"; // version 1
    let ok = |id| key_json(id, "ENABLED", "TINK", AES_GCM, k256);
    let mut seeds: Vec<(String, String)> = vec![
        ("ok-fixed".into(), KEYSET_JSON.into()),
        (
            "ok-aes128".into(),
            keyset_json(Some(7), &[key_json(7, "ENABLED", "TINK", AES_GCM, k128)]),
        ),
        (
            "ok-destroyed-dropped".into(),
            keyset_json(
                Some(1),
                &[ok(1), key_json(2, "DESTROYED", "TINK", AES_GCM, k128)],
            ),
        ),
        (
            "ok-explicit-version".into(),
            keyset_json(
                Some(9),
                &[
                    key_json(9, "ENABLED", "TINK", AES_GCM, k256_v0),
                    key_json(10, "DISABLED", "TINK", AES_GCM, k128),
                ],
            ),
        ),
        (
            "ok-max-id".into(),
            keyset_json(Some(4294967295), &[ok(4294967295), ok(0)]),
        ),
        (
            // The longest Debug of a one-key keyset (a fuzz run found the
            // target's length bound too tight for it).
            "ok-max-id-alone".into(),
            keyset_json(Some(4294967295), &[ok(4294967295)]),
        ),
        ("fail-empty-object".into(), "{}".into()),
        ("fail-no-keys".into(), keyset_json(Some(1), &[])),
        ("fail-no-primary".into(), keyset_json(None, &[ok(1)])),
        (
            "fail-primary-missing".into(),
            keyset_json(Some(2), &[ok(1)]),
        ),
        (
            "fail-primary-disabled".into(),
            keyset_json(Some(1), &[key_json(1, "DISABLED", "TINK", AES_GCM, k256)]),
        ),
        (
            "fail-duplicate-id".into(),
            keyset_json(Some(1), &[ok(1), ok(1)]),
        ),
        (
            "fail-raw-prefix".into(),
            keyset_json(Some(1), &[key_json(1, "ENABLED", "RAW", AES_GCM, k256)]),
        ),
        (
            "fail-legacy-prefix".into(),
            keyset_json(Some(1), &[key_json(1, "ENABLED", "LEGACY", AES_GCM, k256)]),
        ),
        (
            "fail-type-url".into(),
            keyset_json(
                Some(1),
                &[key_json(
                    1,
                    "ENABLED",
                    "TINK",
                    "type.googleapis.com/google.crypto.tink.AesGcmSivKey",
                    k256,
                )],
            ),
        ),
        (
            "fail-key-size".into(),
            keyset_json(Some(1), &[key_json(1, "ENABLED", "TINK", AES_GCM, k192)]),
        ),
        (
            "fail-version-1".into(),
            keyset_json(Some(1), &[key_json(1, "ENABLED", "TINK", AES_GCM, k256_v1)]),
        ),
        (
            "fail-base64".into(),
            keyset_json(Some(1), &[key_json(1, "ENABLED", "TINK", AES_GCM, "!!")]),
        ),
        (
            "fail-status".into(),
            keyset_json(
                Some(1),
                &[key_json(1, "UNKNOWN_STATUS", "TINK", AES_GCM, k256)],
            ),
        ),
        (
            "fail-material-type".into(),
            KEYSET_JSON.replacen("SYMMETRIC", "ASYMMETRIC_PRIVATE", 1),
        ),
        (
            "fail-truncated".into(),
            KEYSET_JSON[..KEYSET_JSON.len() / 2].into(),
        ),
    ];
    seeds.sort();
    for (name, json) in &seeds {
        let accepted = tombstone_crypt::Keyset::from_tink_json(json).is_ok();
        assert_eq!(accepted, name.starts_with("ok-"), "keyset seed {name}");
    }
    seeds
        .into_iter()
        .map(|(n, s)| (n, s.into_bytes()))
        .collect()
}

/// xorshift64*: a fixed, dependency-free byte stream.
struct Prng(u64);

impl Prng {
    fn bytes(&mut self, len: usize) -> Vec<u8> {
        (0..len)
            .map(|_| {
                self.0 ^= self.0 >> 12;
                self.0 ^= self.0 << 25;
                self.0 ^= self.0 >> 27;
                (self.0.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 56) as u8
            })
            .collect()
    }
}

/// Decodes `bytes` as libfuzzer-sys does for a typed target.
fn decode<T: for<'a> Arbitrary<'a>>(bytes: &[u8]) -> Option<T> {
    T::arbitrary_take_rest(Unstructured::new(bytes)).ok()
}

/// A predicate on a decoded input.
type Want<'a, T> = &'a dyn Fn(&T) -> bool;

/// The first pseudo-random inputs that decode to each wanted shape.
fn search<T: for<'a> Arbitrary<'a>>(
    seed: u64,
    wants: &[(&str, Want<'_, T>)],
    lens: &[usize],
) -> Vec<(String, Vec<u8>)> {
    let mut rng = Prng(seed);
    let mut out = Vec::new();
    for (name, want) in wants {
        let found = (0..200_000)
            .map(|i| rng.bytes(lens[i % lens.len()]))
            .find(|b| decode::<T>(b).is_some_and(|t| want(&t)))
            .unwrap_or_else(|| panic!("no input found for {name}"));
        out.push(((*name).to_owned(), found));
    }
    out
}

fn roundtrip_seeds() -> Vec<(String, Vec<u8>)> {
    type W<'a> = Want<'a, RoundtripInput>;
    let tombstone: W = &|i| i.value.is_none() && i.key.is_some();
    let empty: W = &|i| i.value.as_ref().is_some_and(Vec::is_empty) && i.key.is_some();
    let keyless: W = &|i| i.value.as_ref().is_some_and(|v| v.len() > 4) && i.key.is_none();
    let full: W = &|i| {
        i.value.as_ref().is_some_and(|v| v.len() > 8)
            && i.key.as_ref().is_some_and(|k| !k.is_empty())
            && !i.topic.is_empty()
    };
    let policies: W = &|i| i.value.is_some() && i.policy != i.other_policy;
    search(
        0x5eed_0001,
        &[
            ("tombstone", tombstone),
            ("empty-value", empty),
            ("no-record-key", keyless),
            ("all-fields", full),
            ("two-policies", policies),
        ],
        &[16, 32, 64],
    )
}

fn store_seeds() -> Vec<(String, Vec<u8>)> {
    type W<'a> = Want<'a, StoreInput>;
    fn has(i: &StoreInput, f: impl Fn(&Op) -> bool) -> bool {
        i.ops.iter().any(f)
    }
    let put_delete: W = &|i| {
        i.ops.windows(2).any(|w| match w {
            [Op::Put(a, Some(_)), Op::Delete(b)] => a % 6 == b % 6,
            _ => false,
        })
    };
    let put_none: W = &|i| {
        has(i, |o| matches!(o, Op::Put(_, None)))
            && has(i, |o| matches!(o, Op::Put(_, Some(v)) if v.is_empty()))
    };
    let restore: W = &|i| {
        has(i, |o| matches!(o, Op::Delete(_)))
            && has(i, |o| matches!(o, Op::Restore))
            && i.ops.len() >= 4
    };
    let rotate_compact: W = &|i| {
        has(i, |o| matches!(o, Op::Rotate))
            && has(i, |o| matches!(o, Op::Compact))
            && has(i, |o| matches!(o, Op::Put(..)))
    };
    let ranges: W = &|i| {
        has(i, |o| matches!(o, Op::Range(..)))
            && has(i, |o| matches!(o, Op::Get(_)))
            && has(i, |o| matches!(o, Op::Put(..)))
    };
    search(
        0x5eed_0002,
        &[
            ("put-then-delete", put_delete),
            ("tombstone-and-empty", put_none),
            ("delete-then-restore", restore),
            ("rotate-and-compact", rotate_compact),
            ("range-and-get", ranges),
        ],
        &[48, 96, 160],
    )
}
