//! Arbitrary operation sequences on a `TypedStore` (keys through `Utf8`,
//! values through the encrypting `Bytes` serdes) over a
//! `ChangeLoggingStore<MemoryStore, MemoryChangelog>`, against a `BTreeMap`
//! model. After every step: `all()` yields exactly the model, every value
//! `Some`; the bytes store holds exactly the live keys; every changelog
//! value is a ciphertext and the newest record of a deleted key is a
//! tombstone; restores from the raw and the compacted changelog into a
//! fresh `MemoryStore` give exactly the model. A deleted key never comes
//! back.
#![no_main]

use std::collections::BTreeMap;

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::store::{
    compact, restore, ChangeLoggingStore, Changelog as _, KeyValueStore as _, MemoryChangelog,
    MemoryStore, Record, TypedStore,
};
use tombstone_crypt::{
    AadPolicy, Bytes, DecryptingDeserializer, EncryptingSerializer, Keyset, Utf8,
};
use tombstone_crypt_fuzz::{keyset, store_key, Op, StoreInput, MAX_OPS};

const NAME: &str = "fuzz-store";

type Logged = ChangeLoggingStore<MemoryStore, MemoryChangelog>;
type Model = BTreeMap<String, Vec<u8>>;
type View = Vec<(String, Option<Vec<u8>>)>;

fn typed<S: tombstone_crypt::store::KeyValueStore>(
    store: S,
    keyset: &Keyset,
    policy: AadPolicy,
) -> TypedStore<String, Vec<u8>, S> {
    TypedStore::new(
        store,
        NAME,
        (Utf8, Utf8),
        EncryptingSerializer::new(Bytes, keyset.clone()).with_aad(policy),
        DecryptingDeserializer::new(Bytes, keyset.clone()).with_aad(policy),
    )
}

fn expected(model: &Model) -> View {
    model
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect()
}

/// A fresh `MemoryStore` restored from `records`, read through the serdes.
fn restored(records: &[Record], keyset: &Keyset, policy: AadPolicy) -> View {
    let mut fresh = MemoryStore::new();
    restore(&mut fresh, records).expect("restore into memory");
    typed(fresh, keyset, policy).all().expect("restored all()")
}

fn check_state(
    sut: &TypedStore<String, Vec<u8>, Logged>,
    model: &Model,
    keyset: &Keyset,
    policy: AadPolicy,
) {
    let want = expected(model);
    assert_eq!(sut.all().expect("all()"), want, "all() against the model");

    let raw: Vec<Vec<u8>> = sut
        .inner()
        .inner()
        .all()
        .expect("bytes all()")
        .into_iter()
        .map(|(k, _)| k)
        .collect();
    let live: Vec<Vec<u8>> = model.keys().map(|k| k.as_bytes().to_vec()).collect();
    assert_eq!(raw, live, "the bytes store holds exactly the live keys");

    let records = sut.inner().changelog().records().expect("records");
    let mut newest: BTreeMap<&[u8], &Option<Vec<u8>>> = BTreeMap::new();
    for r in &records {
        if let Some(v) = &r.value {
            assert!(
                v.len() >= OVERHEAD && v[0] == 0x01,
                "changelog value is not a ciphertext"
            );
        }
        newest.insert(&r.key, &r.value);
    }
    for (k, v) in &newest {
        let live = std::str::from_utf8(k).is_ok_and(|k| model.contains_key(k));
        assert_eq!(
            live,
            v.is_some(),
            "newest changelog record of {k:?}: a live key has a value, a deleted key a tombstone"
        );
    }
    let compacted = compact(&records);
    assert!(compacted.iter().all(|r| r.value.is_some()));
    for (what, recs) in [("raw", &records), ("compacted", &compacted)] {
        assert_eq!(
            restored(recs, keyset, policy),
            want,
            "restore from the {what} changelog"
        );
    }
}

fuzz_target!(|input: StoreInput| {
    let policy = AadPolicy::from(input.policy);
    let mut ks = keyset().clone();
    let logged = ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new());
    let mut sut = typed(logged, &ks, policy);
    let mut model = Model::new();
    for op in input.ops.iter().take(MAX_OPS) {
        match op {
            Op::Put(k, v) => {
                let k = store_key(*k);
                sut.put(&k, v.as_ref()).expect("put");
                match v {
                    Some(v) => model.insert(k, v.clone()),
                    None => model.remove(&k),
                };
            }
            Op::Delete(k) => {
                let k = store_key(*k);
                sut.delete(&k).expect("delete");
                model.remove(&k);
            }
            Op::Get(k) => {
                let k = store_key(*k);
                assert_eq!(sut.get(&k).expect("get").as_ref(), model.get(&k), "get");
            }
            Op::All => {}
            Op::Range(a, b) => {
                let (a, b) = (store_key(*a), store_key(*b));
                let want: View = model
                    .range(a.clone()..)
                    .take_while(|(k, _)| **k <= b)
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                assert_eq!(sut.range(&a, &b).expect("range"), want, "range");
            }
            Op::Flush => sut.flush().expect("flush"),
            Op::Rotate => {
                ks.rotate();
                sut = typed(sut.into_inner(), &ks, policy);
            }
            Op::Compact => {
                let mut logged = sut.into_inner();
                logged.changelog_mut().compact();
                sut = typed(logged, &ks, policy);
            }
            Op::Restore => {
                let (_, log) = sut.into_inner().into_parts();
                let mut fresh = MemoryStore::new();
                restore(&mut fresh, &log.records().expect("records")).expect("restore");
                sut = typed(ChangeLoggingStore::new(fresh, log), &ks, policy);
            }
        }
        check_state(&sut, &model, &ks, policy);
    }
});
