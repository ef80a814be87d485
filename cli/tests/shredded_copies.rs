//! `consume`, `audit` and `repair` under subject
//! keys: a shredded subject's value copied under another record key must
//! not read as a delete of that key (a value that does not authenticate
//! there is an error), and `repair` must not write a tombstone for it.

use crate::common;

use std::sync::Arc;

use common::kafka::{bootstrap, create_topic, fresh_topic, produce};
use common::process::{cli, code, json_of, new_keyset, Dir};
use serde_json::Value;
use tombstone_crypt::policy::TopicPolicy;
use tombstone_crypt::shred::{RedbKeyStore, SubjectKeys};

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn a_shredded_value_copied_under_another_key_is_an_error_not_a_delete_in_consume_audit_and_repair()
{
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("attack-copy");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let store = dir.file("keys.redb");
    let out = cli(&[
        "shred",
        "--create-key-store",
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store,
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let topic = fresh_topic("attack-copy");
    create_topic(&bootstrap, &topic, 1);
    // alice and bob, as a writer under the topic's policy writes them;
    // then alice is shredded.
    let (alice, bob) = {
        let keys = Arc::new(
            SubjectKeys::open(kek, Arc::new(RedbKeyStore::open(&store).unwrap())).unwrap(),
        );
        let policy = TopicPolicy::subject_keys(keys.clone());
        let alice = policy
            .write_value(&topic, Some(b"alice"), Some(b"alice: 1 Main St"))
            .unwrap();
        let bob = policy
            .write_value(&topic, Some(b"bob"), Some(b"bob: 2 Elm St"))
            .unwrap();
        keys.shred(b"alice").unwrap();
        (alice, bob)
    };
    // offsets 0, 1; then alice's ciphertext copied under bob's key (2).
    produce(
        &bootstrap,
        &topic,
        &[("alice", alice.clone()), ("bob", bob), ("bob", alice)],
    );
    let keys = ["--subject-keyset", &kek_path, "--subject-key-store", &store];

    let mut consume = vec![
        "consume",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "-q",
    ];
    consume.extend_from_slice(&keys);
    let out = cli(&consume);
    let got = lines(&out);
    eprintln!("consume (exit {}): {got:#?}", code(&out));
    let copy = got.iter().find(|l| l["offset"] == 2).unwrap();

    let mut audit = vec![
        "audit",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--json",
        "-q",
    ];
    audit.extend_from_slice(&keys);
    let out = cli(&audit);
    let report = json_of(&out);
    eprintln!(
        "audit (exit {}): shredded_values {}, unknown_subject_keys {}, undecryptable_values {}",
        code(&out),
        report["shredded_values"],
        report["unknown_subject_keys"],
        report["undecryptable_values"]
    );

    let ck = dir.file("repair.checkpoint");
    let mut repair = vec!["repair", "--bootstrap", &bootstrap, "--topic", &topic];
    repair.extend_from_slice(&keys);
    repair.extend_from_slice(&["--null-marker", "none", "--checkpoint", &ck, "--json", "-q"]);
    let out = cli(&repair);
    let plan = json_of(&out);
    eprintln!(
        "repair plan (exit {}): tombstones_planned {}",
        code(&out),
        plan["tombstones_planned"]
    );

    assert!(
        copy.get("error").is_some() && copy.get("shredded").is_none(),
        "consume prints bob's record at offset 2 (alice's shredded value copied under bob's key, \
         which does not authenticate there) as {copy}: a delete of bob that nobody made"
    );
    assert_eq!(
        report["shredded_values"], 1,
        "audit counts the copy under bob as a shredded value (a broken delete repair would \
         tombstone): {report}"
    );
    assert_eq!(
        plan["tombstones_planned"], 1,
        "repair plans a tombstone for bob because of a copied value: {plan}"
    );
}
