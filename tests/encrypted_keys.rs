//! Record keys encrypted deterministically (AES-SIV): byte-identical to
//! Tink's `DeterministicAead`, and a store whose keys are encrypted still
//! compacts right across key rotation: after compaction at most one record
//! per logical key is left, and no old value survives under an old form.
//! The same store without the fan-out (writes reach the primary form only)
//! fails the property: a rotated-then-deleted key comes back.

use crate::common;

use std::collections::{BTreeMap, HashMap};

use common::tink::{hex, peer, python, unhex};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use serde_json::{json, Value};
use tombstone_crypt::store::{
    compact, restore, ChangeLoggingStore, Changelog, EncryptedStore, KeyValueStore,
    MemoryChangelog, MemoryStore,
};
use tombstone_crypt::{
    AadPolicy, Context, Deserializer, DeterministicDeserializer, DeterministicSerializer, Error,
    KeyId, KeyTemplate, Keyset, Serializer, Utf8,
};

const NAME: &str = "users";

fn siv() -> Keyset {
    Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap()
}

// ---------------------------------------------------------------------------
// Tink

fn daead(
    py: &std::path::PathBuf,
    cmd: &str,
    json: &str,
    items: &[(Vec<u8>, Vec<u8>)],
    field: &str,
) -> Vec<Result<Vec<u8>, String>> {
    let req = json!({
        "keyset": json,
        "items": items.iter().map(|(a, x)| json!({"aad_hex": hex(a), field: hex(x)})).collect::<Vec<_>>(),
    });
    let resp: Value = serde_json::from_str(&peer(py, &[cmd], &req.to_string())).unwrap();
    let out = if cmd == "daead-encrypt" {
        "ct_hex"
    } else {
        "pt_hex"
    };
    resp["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| match i[out].as_str() {
            Some(x) => Ok(unhex(x)),
            None => Err(i["error"].as_str().unwrap_or("?").to_owned()),
        })
        .collect()
}

fn cases() -> Vec<(Vec<u8>, Vec<u8>)> {
    let ads: [&[u8]; 4] = [
        b"",
        b"orders",
        &[0, 0, 0, 6, b'o', b'r', b'd', b'e', b'r', b's', 0],
        &[0xff; 40],
    ];
    let pts: [&[u8]; 5] = [b"", b"k", b"customer-17@example.com", &[0; 16], &[7; 300]];
    ads.iter()
        .flat_map(|a| pts.iter().map(move |p| (a.to_vec(), p.to_vec())))
        .collect()
}

#[test]
fn tink_and_the_crate_write_the_same_bytes_before_and_after_a_rotation() {
    let Some(py) = python() else { return };
    // A keyset made here, and one made by Tink.
    let mine = siv();
    let tinks = Keyset::from_tink_json(&peer(&py, &["gen-keyset", "--template", "AES256_SIV"], ""))
        .unwrap();
    for mut keyset in [mine, tinks] {
        for round in 0..2 {
            let json = keyset.to_tink_json();
            let items = cases();
            let ours: Vec<Vec<u8>> = items
                .iter()
                .map(|(ad, pt)| keyset.encrypt_deterministically(pt, ad).unwrap())
                .collect();
            let theirs = daead(&py, "daead-encrypt", &json, &items, "pt_hex");
            for ((o, t), (ad, pt)) in ours.iter().zip(&theirs).zip(&items) {
                let t = t.as_ref().unwrap();
                assert_eq!(o, t, "round {round}: ad {ad:?} pt len {}", pt.len());
                assert_eq!(&o[1..5], &keyset.primary().0.to_be_bytes());
                assert_eq!(o.len(), pt.len() + 21);
                assert_eq!(&keyset.decrypt_deterministically(t, ad).unwrap(), pt);
            }
            let back: Vec<_> = ours
                .iter()
                .zip(&items)
                .map(|(c, (ad, _))| (ad.clone(), c.clone()))
                .collect();
            for (got, (_, pt)) in daead(&py, "daead-decrypt", &json, &back, "ct_hex")
                .iter()
                .zip(&items)
            {
                assert_eq!(got.as_ref().unwrap(), pt);
            }
            // Zero associated-data components would give other bytes: the
            // one (empty) component is part of the format.
            if round == 0 {
                keyset = Keyset::from_tink_json(&peer(
                    &py,
                    &["rotate-keyset", "--template", "AES256_SIV"],
                    &json,
                ))
                .unwrap();
                // The old key still decrypts what it wrote.
                assert_eq!(
                    keyset
                        .decrypt_deterministically(&ours[1], &items[1].0)
                        .unwrap(),
                    items[1].1
                );
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Serdes and bad input

#[test]
fn the_deterministic_serdes_bind_the_topic_unless_told_not_to() {
    let keys = siv();
    let ser = DeterministicSerializer::new(Utf8, keys.clone());
    let de = DeterministicDeserializer::new(Utf8, keys.clone());
    let orders = Context::new("orders");
    let a = ser.serialize(&orders, Some("k1")).unwrap().unwrap();
    assert_eq!(ser.serialize(&orders, Some("k1")).unwrap().unwrap(), a);
    assert_ne!(ser.serialize(&orders, Some("k2")).unwrap().unwrap(), a);
    // The record key in a context is not part of a key's associated data.
    assert_eq!(
        ser.serialize(&orders.with_key(b"x"), Some("k1"))
            .unwrap()
            .unwrap(),
        a
    );
    // Exactly the keyset's primitive with the Topic encoding.
    let ad = orders.associated_data(AadPolicy::Topic).unwrap();
    assert_eq!(keys.encrypt_deterministically(b"k1", &ad).unwrap(), a);
    assert_eq!(
        de.deserialize(&orders, Some(&a)).unwrap().as_deref(),
        Some("k1")
    );
    // Another topic: other bytes, and it does not decrypt there.
    let payments = Context::new("payments");
    assert_ne!(ser.serialize(&payments, Some("k1")).unwrap().unwrap(), a);
    assert_eq!(de.deserialize(&payments, Some(&a)), Err(Error::Decryption));
    // AadPolicy::None: equal across topics (joins).
    let join = DeterministicSerializer::new(Utf8, keys.clone()).with_aad(AadPolicy::None);
    assert_eq!(
        join.serialize(&orders, Some("k1")).unwrap(),
        join.serialize(&payments, Some("k1")).unwrap()
    );
    assert_eq!(
        join.serialize(&orders, Some("k1")).unwrap().unwrap(),
        keys.encrypt_deterministically(b"k1", b"").unwrap()
    );
}

#[test]
fn bad_deterministic_ciphertexts_are_clear_errors() {
    let keys = siv();
    let ct = keys
        .encrypt_deterministically(b"customer-17", b"ad")
        .unwrap();
    // Every truncation.
    for len in 0..ct.len() {
        let err = keys
            .decrypt_deterministically(&ct[..len], b"ad")
            .unwrap_err();
        if len < 21 {
            assert_eq!(err, Error::Truncated { len, min: 21 });
        } else {
            assert_eq!(err, Error::Decryption, "{len}");
        }
    }
    // Every bit flip: version, key id, SIV, body.
    for bit in 0..ct.len() * 8 {
        let mut bad = ct.clone();
        bad[bit / 8] ^= 1 << (bit % 8);
        let err = keys.decrypt_deterministically(&bad, b"ad").unwrap_err();
        match bit / 8 {
            0 => assert_eq!(err, Error::UnsupportedVersion),
            1..=4 => assert!(matches!(err, Error::UnknownKeyId(_)), "{err:?}"),
            _ => assert_eq!(err, Error::Decryption),
        }
    }
    // A wrong key id (a key of another keyset), a wrong key type.
    let other = siv();
    assert_eq!(
        other.decrypt_deterministically(&ct, b"ad"),
        Err(Error::UnknownKeyId(keys.primary()))
    );
    let values = Keyset::generate();
    assert!(matches!(
        values.encrypt_deterministically(b"k", b""),
        Err(Error::WrongKeyType { .. })
    ));
    assert!(matches!(
        keys.encrypt(b"v", b""),
        Err(Error::WrongKeyType { .. })
    ));
    let gcm = values.encrypt(b"v", b"").unwrap();
    assert!(matches!(
        values.decrypt_deterministically(&gcm, b""),
        Err(Error::WrongKeyType { .. })
    ));
    // A keyset holds keys for one purpose.
    let mut mixed = siv();
    assert!(mixed.rotate_with(KeyTemplate::aes256_gcm()).is_err());
    assert!(
        EncryptedStore::new(MemoryStore::new(), NAME, Keyset::generate())
            .with_encrypted_keys(Keyset::generate())
            .is_err()
    );
}

// ---------------------------------------------------------------------------
// The property over stores, with rotation of the key keyset

#[derive(Clone, Debug)]
enum Op {
    Put(u8, u8),
    Delete(u8),
    Rotate,
    Restore,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0u8..5, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            3 => (0u8..5).prop_map(Op::Delete),
            2 => Just(Op::Rotate),
            1 => Just(Op::Restore),
        ],
        1..30,
    )
}

type Logged = ChangeLoggingStore<MemoryStore, MemoryChangelog>;

fn build(inner: Logged, values: &Keyset, keys: &Keyset, fanout: bool) -> EncryptedStore<Logged> {
    let store = EncryptedStore::new(inner, NAME, values.clone())
        .with_encrypted_keys(keys.clone())
        .unwrap();
    if fanout {
        store
    } else {
        store.without_key_fanout()
    }
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

fn run(ops: &[Op], fanout: bool) -> Result<(), TestCaseError> {
    let values = Keyset::generate();
    let mut keys = siv();
    let mut store = build(
        ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new()),
        &values,
        &keys,
        fanout,
    );
    let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        match op {
            Op::Put(k, v) => {
                let k = format!("user-{k}").into_bytes();
                store.put(&k, Some(&[*v])).unwrap();
                model.insert(k, vec![*v]);
            }
            Op::Delete(k) => {
                let k = format!("user-{k}").into_bytes();
                store.delete(&k).unwrap();
                model.remove(&k);
            }
            Op::Rotate => {
                keys.rotate();
                store.set_key_keyset(keys.clone()).unwrap();
            }
            Op::Restore => {
                // Restart: the compacted changelog is all that is left.
                let records = compact(&store.inner().changelog().records().unwrap());
                let mut fresh = MemoryStore::new();
                restore(&mut fresh, &records).unwrap();
                let mut log = MemoryChangelog::new();
                for r in &records {
                    log.append(&r.key, r.value.as_deref()).unwrap();
                }
                store = build(ChangeLoggingStore::new(fresh, log), &values, &keys, fanout);
            }
        }
        check(&store, &model, &values, &keys)
            .map_err(|e| fail(format!("after step {step} ({op:?}): {e}")))?;
    }
    Ok(())
}

fn check(
    store: &EncryptedStore<Logged>,
    model: &BTreeMap<Vec<u8>, Vec<u8>>,
    values: &Keyset,
    keys: &Keyset,
) -> Result<(), String> {
    // The store serves the model, key by key and in iteration.
    for k in 0..5u8 {
        let k = format!("user-{k}").into_bytes();
        let got = store.get(&k).map_err(|e| e.to_string())?;
        if got.as_ref() != model.get(&k) {
            return Err(format!(
                "get({:?}) = {got:?}, the model holds {:?}",
                String::from_utf8_lossy(&k),
                model.get(&k)
            ));
        }
    }
    let all = store.all().map_err(|e| e.to_string())?;
    let want: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    if all != want {
        return Err(format!("all() = {all:?}, the model holds {want:?}"));
    }
    // No plaintext key reaches the changelog.
    let records = store.inner().changelog().records().unwrap();
    if records.iter().any(|r| r.key.starts_with(b"user-")) {
        return Err("a plaintext key in the changelog".into());
    }
    // After compaction: at most one record per logical key, exactly the live
    // keys, each with the model's value.
    let ad = Context::new(NAME)
        .associated_data(AadPolicy::Topic)
        .unwrap();
    let compacted = compact(&records);
    let mut per_key: HashMap<Vec<u8>, Vec<KeyId>> = HashMap::new();
    for r in &compacted {
        let plain = keys
            .decrypt_deterministically(&r.key, &ad)
            .map_err(|e| e.to_string())?;
        per_key
            .entry(plain)
            .or_default()
            .push(KeyId(u32::from_be_bytes([
                r.key[1], r.key[2], r.key[3], r.key[4],
            ])));
    }
    for (k, forms) in &per_key {
        if forms.len() > 1 {
            return Err(format!(
                "{} records of {:?} survive compaction, under keys {forms:?}",
                forms.len(),
                String::from_utf8_lossy(k)
            ));
        }
        if !model.contains_key(k) {
            return Err(format!(
                "deleted key {:?} survives compaction under key {forms:?}",
                String::from_utf8_lossy(k)
            ));
        }
    }
    if per_key.len() != model.len() {
        return Err(format!(
            "compaction keeps {} keys, the model holds {}",
            per_key.len(),
            model.len()
        ));
    }
    // A restore from the compacted log equals the model.
    let mut fresh = MemoryStore::new();
    restore(&mut fresh, &compacted).unwrap();
    let restored = EncryptedStore::new(fresh, NAME, values.clone())
        .with_encrypted_keys(keys.clone())
        .unwrap();
    let all = restored.all().map_err(|e| e.to_string())?;
    if all != want {
        return Err(format!(
            "the restored store holds {all:?}, the model {want:?}"
        ));
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 256, failure_persistence: None, ..Config::default() })]

    #[test]
    fn rotation_keeps_compaction_correct(ops in ops()) {
        run(&ops, true)?;
    }
}

#[test]
fn negative_control_without_the_fan_out_a_deleted_key_comes_back() {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    match runner.run(&ops(), |ops| run(&ops, false)) {
        Ok(()) => panic!("the property passed without the fan-out: it proves nothing"),
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!(
                "without the fan-out, minimal counterexample: {minimal:?}\n  because: {reason}"
            );
            // A put, a rotation, then a write or a delete of the same key.
            assert!(
                minimal.iter().any(|op| matches!(op, Op::Rotate)),
                "{minimal:?}"
            );
            assert!(minimal.len() <= 4, "{minimal:?}");
        }
        Err(e) => panic!("unexpected runner error: {e}"),
    }
}

#[test]
fn a_rotation_fans_out_tombstones_until_the_old_key_is_disabled() {
    let values = Keyset::generate();
    let mut keys = siv();
    let logged = ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new());
    let mut store = EncryptedStore::new(logged, NAME, values)
        .with_encrypted_keys(keys.clone())
        .unwrap();
    store.put(b"alice", Some(b"1")).unwrap();
    let old = keys.primary();
    keys.rotate();
    store.set_key_keyset(keys.clone()).unwrap();
    store.put(b"alice", Some(b"2")).unwrap(); // new form + tombstone of the old
    let log = store.inner().changelog().records().unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(log.iter().filter(|r| r.value.is_none()).count(), 1);
    assert_eq!(compact(&log).len(), 1);
    // Once the old key is disabled (every key rewritten), writes cost one
    // record again.
    keys.disable(old).unwrap();
    store.set_key_keyset(keys).unwrap();
    store.put(b"alice", Some(b"3")).unwrap();
    assert_eq!(store.inner().changelog().records().unwrap().len(), 4);
    assert_eq!(store.get(b"alice").unwrap(), Some(b"3".to_vec()));
    // range() filters by plaintext key.
    store.put(b"bob", Some(b"4")).unwrap();
    store.put(b"carol", Some(b"5")).unwrap();
    let keys_in = |a: &[u8], b: &[u8]| -> Vec<Vec<u8>> {
        store
            .range(a, b)
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect()
    };
    assert_eq!(keys_in(b"b", b"c"), [b"bob".to_vec()]);
    assert_eq!(keys_in(b"alice", b"carol").len(), 3);
    assert!(keys_in(b"z", b"a").is_empty());
}
