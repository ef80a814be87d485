//! `tombstone-crypt shred --check`, the key store's own audit, run as a
//! process: on a redb key store (every record opens; after a KEK rotation
//! every record is reported not under the primary key until `--rewrap`; a
//! changed record is found and exits 1) and on a key-store topic on the
//! loopback broker (its tombstones and shred markers counted; a second
//! DEK for a subject and a record that is not a key store's are found and
//! exit 1).

use crate::common;

use std::sync::Arc;

use common::kafka::{bootstrap, fresh_topic};
use common::process::{cli, code, json_of, new_keyset, Dir};
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::shred::{KeyStore, RedbKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::Changelog as _;
use tombstone_crypt::{Context, Keyset, Serializer as _, Utf8};

/// Makes a DEK for each of `subjects` in `store`.
fn make(kek: &Keyset, store: Arc<dyn KeyStore>, subjects: &[&str]) {
    let w = SubjectEncrypting::new(
        Arc::new(SubjectKeys::create(kek.clone(), store).unwrap()),
        Utf8,
    );
    for s in subjects {
        w.serialize(&Context::new("t").with_key(s.as_bytes()), Some("x"))
            .unwrap();
    }
}

fn check(store: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec!["shred", "--check", "--json"];
    args.extend_from_slice(store);
    let out = cli(&args);
    assert!(code(&out) < 2, "{}", String::from_utf8_lossy(&out.stderr));
    (code(&out), json_of(&out))
}

#[test]
fn check_a_redb_key_store_through_a_kek_rotation_and_a_changed_record() {
    let dir = Dir::new("shred-check-redb");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let store_path = dir.file("keys.redb");
    make(
        &kek,
        Arc::new(RedbKeyStore::create(&store_path).unwrap()),
        &["a", "b", "c"],
    );
    let store = [
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
    ];
    let (c, r) = check(&store);
    assert_eq!(c, 0, "{r}");
    assert_eq!(
        (
            &r["subjects"],
            &r["deks"],
            &r["naming_key"],
            &r["not_opening"]
        ),
        (&3.into(), &3.into(), &true.into(), &0.into()),
        "{r}"
    );
    assert_eq!(r["not_under_primary"], 0, "{r}");

    // The KEK rotated: every record (the naming key too) is still under
    // the old key until a rewrap.
    let out = cli(&["keyset", "rotate", "--in", &kek_path]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let (c, r) = check(&store);
    assert_eq!((c, &r["not_under_primary"]), (0, &4.into()), "{r}");
    let mut rewrap = vec!["shred", "--rewrap"];
    rewrap.extend_from_slice(&store);
    assert_eq!(code(&cli(&rewrap)), 0);
    let (c, r) = check(&store);
    assert_eq!((c, &r["not_under_primary"]), (0, &0.into()), "{r}");

    // One record changed (same DEK id, one wrapped byte flipped): found,
    // exit 1.
    {
        let db = RedbKeyStore::open(&store_path).unwrap();
        let (tag, mut record) = db
            .records()
            .unwrap()
            .into_iter()
            .find(|(t, _)| *t != [0xff; 16])
            .unwrap();
        let last = record.len() - 1;
        record[last] ^= 1;
        db.replace(&tag, &record).unwrap();
    }
    let (c, r) = check(&store);
    assert_eq!((c, &r["not_opening"]), (1, &1.into()), "{r}");
    assert_eq!(r["not_opening_tags"].as_array().unwrap().len(), 1, "{r}");
}

#[test]
fn check_a_key_store_topic_counts_shreds_and_finds_a_second_dek_and_foreign_records() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-check-topic");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let topic = fresh_topic("shred-check-keys");
    let open = || {
        Arc::new(common::kafka::key_store(
            KafkaChangelog::open(&bootstrap, &topic).unwrap(),
        ))
    };
    make(&kek, open(), &["a", "b", "c"]);
    let keys = SubjectKeys::create(kek.clone(), open()).unwrap();
    keys.shred(b"b").unwrap();
    let store = [
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &topic,
        "--bootstrap",
        &bootstrap,
    ];
    let (c, r) = check(&store);
    assert_eq!(c, 0, "{r}");
    assert_eq!((&r["subjects"], &r["deks"]), (&2.into(), &2.into()), "{r}");
    // naming key + 3 DEKs, then b's tombstone and marker.
    assert_eq!(
        (
            &r["topic"]["records"],
            &r["topic"]["tombstones"],
            &r["topic"]["shred_markers"],
            &r["topic"]["foreign_records"]
        ),
        (&6.into(), &1.into(), &1.into(), &0.into()),
        "{r}"
    );

    // A second DEK for "a", as a maker stopped before it withdrew its own
    // would leave: found, exit 1.
    let tag = keys.tag(b"a").unwrap();
    let (_, a_record) = open()
        .records()
        .unwrap()
        .into_iter()
        .find(|(t, _)| *t == tag)
        .unwrap();
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    let mut key = tag.to_vec();
    key.extend_from_slice(&[7; 8]);
    let mut second = vec![7; 8];
    second.extend_from_slice(&a_record[8..]);
    log.append(&key, Some(&second)).unwrap();
    log.flush().unwrap();
    let (c, r) = check(&store);
    assert_eq!((c, &r["several_deks"]), (1, &1.into()), "{r}");
    // That record's DEK id is not the one it was wrapped with: it does not
    // open either.
    assert_eq!(r["not_opening"], 1, "{r}");

    // A record that is not a key store's: found.
    let topic2 = fresh_topic("shred-check-foreign");
    make(
        &kek,
        Arc::new(common::kafka::key_store(
            KafkaChangelog::open(&bootstrap, &topic2).unwrap(),
        )),
        &["z"],
    );
    let mut log = KafkaChangelog::open(&bootstrap, &topic2).unwrap();
    log.append(b"not a key-store key", Some(b"v")).unwrap();
    log.flush().unwrap();
    let store2 = [
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &topic2,
        "--bootstrap",
        &bootstrap,
    ];
    let (c, r) = check(&store2);
    assert_eq!((c, &r["topic"]["foreign_records"]), (1, &1.into()), "{r}");
    assert_eq!(r["several_deks"], 0, "{r}");
}
