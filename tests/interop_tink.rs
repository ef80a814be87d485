//! Interop with Google Tink, the real library (Python `tink` from PyPI, in
//! the venv that `scripts/tink-venv.sh` builds): ciphertexts and keysets
//! pass both ways, under every AAD policy, including rotated keysets.
//!
//! The peer is `tests/interop/tink_peer.py`. The venv's python is taken from
//! `TOMBSTONE_TINK_PYTHON`, else `target/venv/bin/python`; if neither exists
//! the tests fail (set `TOMBSTONE_SKIP_INTEROP=1` to skip them knowingly).

use crate::common;

use std::path::PathBuf;

use common::tink::{hex, peer, python, unhex};
use serde_json::{json, Value};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error,
    KeyId, Keyset, Serializer,
};

/// Tink encrypts each `(aad, plaintext)`.
fn tink_encrypt(py: &PathBuf, keyset_json: &str, items: &[(Vec<u8>, Vec<u8>)]) -> Vec<Vec<u8>> {
    let req = json!({
        "keyset": keyset_json,
        "items": items.iter().map(|(a, p)| json!({"aad_hex": hex(a), "pt_hex": hex(p)})).collect::<Vec<_>>(),
    });
    let resp: Value = serde_json::from_str(&peer(py, &["encrypt"], &req.to_string())).unwrap();
    resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| unhex(i["ct_hex"].as_str().unwrap()))
        .collect()
}

/// Tink decrypts each `(aad, ciphertext)`: `Ok(plaintext)` or `Err(message)`.
fn tink_decrypt(
    py: &PathBuf,
    keyset_json: &str,
    items: &[(Vec<u8>, Vec<u8>)],
) -> Vec<Result<Vec<u8>, String>> {
    let req = json!({
        "keyset": keyset_json,
        "items": items.iter().map(|(a, c)| json!({"aad_hex": hex(a), "ct_hex": hex(c)})).collect::<Vec<_>>(),
    });
    let resp: Value = serde_json::from_str(&peer(py, &["decrypt"], &req.to_string())).unwrap();
    resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| match i["pt_hex"].as_str() {
            Some(p) => Ok(unhex(p)),
            None => Err(i["error"].as_str().unwrap_or("?").to_owned()),
        })
        .collect()
}

const POLICIES: [AadPolicy; 3] = [AadPolicy::TopicAndKey, AadPolicy::Topic, AadPolicy::None];

fn contexts() -> Vec<Context<'static>> {
    vec![
        Context::new("orders").with_key(b"order-1"),
        Context::new("orders"),
        Context::new("").with_key(b""),
        Context::new("payments-\u{e9}").with_key(&[0, 255, 7]),
    ]
}

fn plaintexts() -> Vec<Vec<u8>> {
    vec![
        vec![],
        b"hello tink".to_vec(),
        (0..=255u8).collect(),
        vec![0xab; 5000],
    ]
}

fn key_id_of(ct: &[u8]) -> KeyId {
    KeyId(u32::from_be_bytes([ct[1], ct[2], ct[3], ct[4]]))
}

#[test]
fn tink_encrypts_and_the_crate_decrypts_under_every_policy() {
    let Some(py) = python() else { return };
    for template in ["AES256_GCM", "AES128_GCM"] {
        let tink_keyset = peer(&py, &["gen-keyset", "--template", template], "");
        let keyset = Keyset::from_tink_json(&tink_keyset).unwrap();
        for policy in POLICIES {
            let de = DecryptingDeserializer::new(Bytes, keyset.clone()).with_aad(policy);
            let mut items = Vec::new();
            let mut expect = Vec::new();
            for ctx in contexts() {
                for pt in plaintexts() {
                    items.push((ctx.associated_data(policy).unwrap(), pt.clone()));
                    expect.push((ctx, pt));
                }
            }
            let cts = tink_encrypt(&py, &tink_keyset, &items);
            for (ct, (ctx, pt)) in cts.iter().zip(&expect) {
                assert_eq!(key_id_of(ct), keyset.primary());
                let got = de.deserialize(ctx, Some(ct)).unwrap();
                assert_eq!(
                    got.as_deref(),
                    Some(&pt[..]),
                    "{template} {policy:?} {ctx:?}"
                );
            }
            // And the binding holds for Tink's ciphertexts too.
            if policy == AadPolicy::TopicAndKey {
                let moved = Context::new("orders").with_key(b"order-2");
                assert_eq!(
                    de.deserialize(&moved, Some(&cts[0])),
                    Err(Error::Decryption)
                );
            }
        }
    }
}

#[test]
fn the_crate_encrypts_and_tink_decrypts_under_every_policy() {
    let Some(py) = python() else { return };
    let keyset = Keyset::generate();
    let json = keyset.to_tink_json();
    for policy in POLICIES {
        let ser = EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy);
        let mut items = Vec::new();
        let mut expect = Vec::new();
        for ctx in contexts() {
            for pt in plaintexts() {
                let ct = ser.serialize(&ctx, Some(&pt[..])).unwrap().unwrap();
                items.push((ctx.associated_data(policy).unwrap(), ct));
                expect.push(pt);
            }
        }
        // A tampered copy of each: Tink must reject those (the check can fail).
        let tampered: Vec<_> = items
            .iter()
            .map(|(a, c)| {
                let mut c = c.clone();
                let last = c.len() - 1;
                c[last] ^= 1;
                (a.clone(), c)
            })
            .collect();
        let got = tink_decrypt(&py, &json, &items);
        for (g, pt) in got.iter().zip(&expect) {
            assert_eq!(g.as_ref().ok(), Some(pt), "{policy:?}: {g:?}");
        }
        for g in tink_decrypt(&py, &json, &tampered) {
            assert!(g.is_err(), "Tink accepted a tampered ciphertext");
        }
    }
}

#[test]
fn rotated_keysets_pass_both_ways() {
    let Some(py) = python() else { return };
    let ctx = Context::new("orders").with_key(b"k");
    let a = ctx.associated_data(AadPolicy::TopicAndKey).unwrap();

    // Ours, rotated: Tink sees two keys, the right primary, and decrypts both.
    let mut keyset = Keyset::generate();
    let old_id = keyset.primary();
    let old_ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(&b"old"[..]))
        .unwrap()
        .unwrap();
    let new_id = keyset.rotate();
    let new_ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(&b"new"[..]))
        .unwrap()
        .unwrap();
    assert_eq!((key_id_of(&old_ct), key_id_of(&new_ct)), (old_id, new_id));
    let json = keyset.to_tink_json();
    let info: Value = serde_json::from_str(&peer(&py, &["info"], &json)).unwrap();
    assert_eq!(info["primary_key_id"], new_id.0);
    let keys = info["keys"].as_array().unwrap();
    assert_eq!(keys.len(), 2);
    for k in keys {
        assert_eq!(k["key_len"], 32);
        assert_eq!(k["status"], "ENABLED");
        assert_eq!(k["output_prefix_type"], "TINK");
    }
    let got = tink_decrypt(&py, &json, &[(a.clone(), old_ct), (a.clone(), new_ct)]);
    assert_eq!(got, [Ok(b"old".to_vec()), Ok(b"new".to_vec())]);

    // Tink's, rotated by Tink: we read both keys, decrypt old and new, and
    // encrypt under Tink's new primary; Tink reads that back.
    let tink1 = peer(&py, &["gen-keyset"], "");
    let tink_old = tink_encrypt(&py, &tink1, &[(a.clone(), b"tink-old".to_vec())]).remove(0);
    let tink2 = peer(&py, &["rotate-keyset"], &tink1);
    let tink_new = tink_encrypt(&py, &tink2, &[(a.clone(), b"tink-new".to_vec())]).remove(0);
    let ours = Keyset::from_tink_json(&tink2).unwrap();
    assert_eq!(ours.len(), 2);
    assert_ne!(key_id_of(&tink_old), key_id_of(&tink_new));
    assert_eq!(ours.primary(), key_id_of(&tink_new));
    let de = DecryptingDeserializer::new(Bytes, ours.clone());
    assert_eq!(
        de.deserialize(&ctx, Some(&tink_old)).unwrap(),
        Some(b"tink-old".to_vec())
    );
    assert_eq!(
        de.deserialize(&ctx, Some(&tink_new)).unwrap(),
        Some(b"tink-new".to_vec())
    );
    let mine = EncryptingSerializer::new(Bytes, ours.clone())
        .serialize(&ctx, Some(&b"mine"[..]))
        .unwrap()
        .unwrap();
    assert_eq!(key_id_of(&mine), ours.primary());
    assert_eq!(
        tink_decrypt(&py, &ours.to_tink_json(), &[(a, mine)]),
        [Ok(b"mine".to_vec())]
    );
}

#[test]
fn disabled_keys_and_raw_keysets() {
    let Some(py) = python() else { return };
    // A disabled key exported by us is disabled for Tink too.
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let ctx = Context::new("t");
    let a = ctx.associated_data(AadPolicy::TopicAndKey).unwrap();
    let ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(&b"v"[..]))
        .unwrap()
        .unwrap();
    keyset.rotate();
    keyset.disable(first).unwrap();
    let json = keyset.to_tink_json();
    let info: Value = serde_json::from_str(&peer(&py, &["info"], &json)).unwrap();
    let statuses: Vec<_> = info["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["status"].clone())
        .collect();
    assert_eq!(statuses, [json!("DISABLED"), json!("ENABLED")]);
    assert!(tink_decrypt(&py, &json, &[(a, ct)])[0].is_err());

    // A RAW keyset from Tink is refused with a clear error.
    let raw = peer(&py, &["gen-keyset", "--template", "AES256_GCM_RAW"], "");
    match Keyset::from_tink_json(&raw) {
        Err(Error::Keyset { detail, .. }) => assert!(detail.contains("RAW"), "{detail}"),
        other => panic!("RAW keyset accepted: {other:?}"),
    }
}

/// The raw primitive (`Keyset::encrypt` / `decrypt`, Tink's `Aead`) with
/// arbitrary associated data, on a keyset generated here as AES-128 and
/// rotated to AES-256: Tink reads the key sizes and the values both ways,
/// old and new.
#[test]
fn the_raw_primitive_and_templates_pass_both_ways() {
    let Some(py) = python() else { return };
    let mut keyset = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes128_gcm()).unwrap();
    let ads: Vec<Vec<u8>> = vec![vec![], b"ad".to_vec(), (0..=255u8).collect()];
    let mut items = Vec::new();
    let mut expect = Vec::new();
    for round in 0..2 {
        for ad in &ads {
            for pt in plaintexts() {
                items.push((ad.clone(), keyset.encrypt(&pt, ad).unwrap()));
                expect.push(pt);
            }
        }
        if round == 0 {
            keyset
                .rotate_with(tombstone_crypt::KeyTemplate::aes256_gcm())
                .unwrap();
        }
    }
    let json = keyset.to_tink_json();
    let info: Value = serde_json::from_str(&peer(&py, &["info"], &json)).unwrap();
    let lens: Vec<u64> = info["keys"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["key_len"].as_u64().unwrap())
        .collect();
    assert_eq!(lens, [16, 32]);
    assert_eq!(
        info["primary_key_id"].as_u64(),
        Some(u64::from(keyset.primary().0))
    );
    let got = tink_decrypt(&py, &json, &items);
    for (g, pt) in got.iter().zip(&expect) {
        assert_eq!(g.as_ref().ok(), Some(pt), "{g:?}");
    }
    // Tink encrypts under the AES-256 primary; the crate's primitive reads it.
    let tink_items: Vec<_> = ads
        .iter()
        .flat_map(|ad| plaintexts().into_iter().map(move |pt| (ad.clone(), pt)))
        .collect();
    let cts = tink_encrypt(&py, &json, &tink_items);
    for (ct, (ad, pt)) in cts.iter().zip(&tink_items) {
        assert_eq!(key_id_of(ct), keyset.primary());
        assert_eq!(&keyset.decrypt(ct, ad).unwrap(), pt);
        let mut wrong = ad.clone();
        wrong.push(1);
        assert_eq!(keyset.decrypt(ct, &wrong), Err(Error::Decryption));
    }
}
