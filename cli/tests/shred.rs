//! `tombstone-crypt shred`, and `audit` and `repair` of a topic written
//! under subject keys, run as processes against the loopback broker: a
//! shredded subject's values count as broken deletes (`shredded_values`),
//! `repair --apply` writes their keys' tombstones, and every copy of the
//! values (bytes kept from before the shred) reads as a delete; the other
//! subjects are untouched. With the key store in a redb file and on a
//! compacted topic. `consume` prints a shredded subject's values as `null`
//! with `"shredded": true` (not as a tombstone, an error or plaintext).

use crate::common;

use common::rng::Rng;

use std::sync::Arc;
use std::time::Duration;

use common::kafka::{bootstrap, create_topic, fresh_topic, produce};
use common::process::{cli, code, json_of, new_keyset, Dir};
use serde_json::{json, Value};
use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::{KeyStore, RedbKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::{
    Bytes, Context, Deserializer as _, EncryptingSerializer, Keyset, Serializer as _, Utf8,
};

/// What [`write`] writes, in order: c-0 .. c-3, c-1 twice, c-3 then
/// deleted.
const RECORDS: [(&str, Option<&str>); 6] = [
    ("c-0", Some("zero")),
    ("c-1", Some("one")),
    ("c-1", Some("one again")),
    ("c-2", Some("two")),
    ("c-3", Some("three")),
    ("c-3", None),
];

/// Writes [`RECORDS`] under subject keys in `store`; the bytes of every
/// value written.
fn write(
    bootstrap: &str,
    topic: &str,
    kek: &Keyset,
    store: Arc<dyn KeyStore>,
) -> Vec<(String, Vec<u8>)> {
    let values = SubjectEncrypting::new(
        Arc::new(SubjectKeys::create(kek.clone(), store).unwrap()),
        Utf8,
    );
    let mut written = Vec::new();
    let mut records = Vec::new();
    for (k, v) in RECORDS {
        let ctx = Context::new(topic).with_key(k.as_bytes());
        let bytes = values.serialize(&ctx, v).unwrap();
        if let Some(b) = &bytes {
            written.push((k.to_owned(), b.clone()));
        }
        records.push((k, bytes));
    }
    produce(bootstrap, topic, &records);
    written
}

/// `shred --create-key-store`: a new redb key store at `path`, with its
/// naming key under the KEK at `kek_path`.
fn make_store(kek_path: &str, path: &str) {
    let out = cli(&[
        "shred",
        "--create-key-store",
        "--subject-kek",
        kek_path,
        "--subject-key-store",
        path,
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["created"], true);
    // Made once: a second make refuses the existing file.
    let again = cli(&[
        "shred",
        "--create-key-store",
        "--subject-kek",
        kek_path,
        "--subject-key-store",
        path,
    ]);
    assert_eq!(code(&again), 2);
}

fn audit(bootstrap: &str, topic: &str, keys: &[&str]) -> (i32, serde_json::Value) {
    let mut args = vec![
        "audit",
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--json",
        "-q",
    ];
    args.extend_from_slice(keys);
    let out = cli(&args);
    (code(&out), json_of(&out))
}

#[test]
fn shred_then_audit_and_repair_a_topic_under_subject_keys_in_a_redb_file() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-redb");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let store_path = dir.file("subject-keys.redb");
    let topic = fresh_topic("shred-redb");
    create_topic(&bootstrap, &topic, 1);
    let written = {
        make_store(&kek_path, &store_path);
        let store = Arc::new(RedbKeyStore::open(&store_path).unwrap());
        write(&bootstrap, &topic, &kek, store)
    };
    let keys = [
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
    ];
    let (c, r) = audit(&bootstrap, &topic, &keys);
    assert_eq!(c, 0, "{r}");
    assert_eq!(
        (&r["live_keys"], &r["tombstones"], &r["shredded_values"]),
        (&3.into(), &1.into(), &0.into()),
        "{r}"
    );

    // Without the subject keys the values are not this keyset's: they are
    // not called live (nor deleted).
    let (_, plain) = audit(&bootstrap, &topic, &["--keyset", &kek_path]);
    assert_eq!(plain["shredded_values"], 0, "{plain}");
    // Nor plaintext (`reencrypt --unencrypted pass-through` would wrap
    // them, and a shred would no longer reach the copy): values this run
    // cannot read.
    assert_eq!(
        (&plain["plaintext"], &plain["subject_key_values_unread"]),
        (&0.into(), &5.into()),
        "{plain}"
    );

    let out = cli(&[
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
        "--subject",
        "c-1",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["shredded"], 1);

    // Both of c-1's values are shredded: one broken key, two values.
    let (c, r) = audit(&bootstrap, &topic, &keys);
    assert_eq!(c, 1, "{r}");
    assert_eq!(
        (
            &r["live_keys"],
            &r["broken_tombstones"],
            &r["shredded_values"]
        ),
        (&2.into(), &1.into(), &2.into()),
        "{r}"
    );

    // repair writes c-1's tombstone; the audit after it is clean. A run
    // killed before its first write resumes: the run is named by the
    // KEK's keys (never by a stand-in keyset made anew by each process).
    let mut repair = vec!["repair", "--bootstrap", &bootstrap, "--topic", &topic];
    repair.extend_from_slice(&keys);
    let ck = dir.file("repair.checkpoint");
    repair.extend_from_slice(&["--apply", "--null-marker", "none", "--json", "-q"]);
    let mut killed = repair.clone();
    killed.extend_from_slice(&["--checkpoint", &ck, "--fail-after-records", "0"]);
    let out = cli(&killed);
    assert!(
        !out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(std::path::Path::new(&ck).exists());
    repair.extend_from_slice(&["--resume", &ck]);
    let out = cli(&repair);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["tombstones_planned"], 1);
    let (c, r) = audit(&bootstrap, &topic, &keys);
    assert_eq!(c, 0, "{r}");
    // c-1's tombstone twice: the killed run's, and its journal's chunk
    // written again by the resume (harmless by the reading rule).
    assert_eq!(
        (&r["live_keys"], &r["broken_tombstones"], &r["tombstones"]),
        (&2.into(), &0.into(), &3.into()),
        "{r}"
    );

    // Every copy of c-1's values (kept from before the shred) reads as a
    // delete; the others as written.
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(
        Arc::new(
            SubjectKeys::create(kek, Arc::new(RedbKeyStore::open(&store_path).unwrap())).unwrap(),
        ),
        Utf8,
    );
    for (k, bytes) in &written {
        let ctx = Context::new(&topic).with_key(k.as_bytes());
        let got = values.deserialize(&ctx, Some(bytes)).unwrap();
        assert_eq!(got.is_none(), k == "c-1", "{k}");
    }
    drop(values); // redb: one process at a time

    // The KEK rotated, the store wrapped again, the old key destroyed:
    // every live value still reads.
    let before = common::process::load(&kek_path);
    let out = cli(&["keyset", "rotate", "--in", &kek_path]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let out = cli(&[
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
        "--rewrap",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        json_of(&out)["rewrapped"],
        5,
        "the naming key, the DEKs of c-0, c-2 and c-3 (deleted, not shredded), and c-1's record of its shred"
    );
    let old = before.primary().0.to_string();
    let out = cli(&["keyset", "destroy", "--in", &kek_path, "--key-id", &old]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let (c, r) = audit(&bootstrap, &topic, &keys);
    assert_eq!((c, &r["live_keys"]), (0, &2.into()), "{r}");

    // Bad input: no subject, a KEK without a store.
    let out = cli(&[
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
    ]);
    assert_eq!(code(&out), 2);
    let out = cli(&["shred", "--subject-kek", &kek_path, "--subject", "x"]);
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--subject-key-store"));
}

#[test]
fn shred_a_list_of_subjects_on_a_key_store_topic() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-topic");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let topic = fresh_topic("shred-values");
    let key_topic = fresh_topic("shred-keys");
    create_topic(&bootstrap, &topic, 1);
    let store = || {
        Arc::new(
            common::kafka::key_store(KafkaChangelog::open(&bootstrap, &key_topic).unwrap())
                .with_fence(Duration::ZERO),
        )
    };
    let written = write(&bootstrap, &topic, &kek, store());
    let list = dir.file("subjects.txt");
    std::fs::write(&list, "c-0\n\nc-2\n").unwrap();
    let out = cli(&[
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &key_topic,
        "--bootstrap",
        &bootstrap,
        "--subjects",
        &list,
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["shredded"], 2);
    let values: SubjectEncrypting<Utf8, str> =
        SubjectEncrypting::new(Arc::new(SubjectKeys::create(kek, store()).unwrap()), Utf8);
    for (k, bytes) in &written {
        let ctx = Context::new(&topic).with_key(k.as_bytes());
        let got = values.deserialize(&ctx, Some(bytes)).unwrap();
        assert_eq!(got.is_none(), k == "c-0" || k == "c-2", "{k}");
    }
    let (c, r) = audit(
        &bootstrap,
        &topic,
        &[
            "--subject-kek",
            &kek_path,
            "--subject-key-topic",
            &key_topic,
        ],
    );
    assert_eq!(c, 1, "{r}");
    assert_eq!(
        (
            &r["live_keys"],
            &r["broken_tombstones"],
            &r["shredded_values"]
        ),
        (&1.into(), &2.into(), &2.into()),
        "{r}"
    );
}

/// `--subject-key-view DIR`: `shred` and `audit` keep the key-store
/// topic's view in a redb file there, a second run reads on from it and
/// finds the same; a file there that is not a view is an error (exit 2)
/// that names it, never a panic.
#[test]
fn shred_and_audit_with_the_key_store_view_on_disk() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-view");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let topic = fresh_topic("shred-view-values");
    let key_topic = fresh_topic("shred-view-keys");
    create_topic(&bootstrap, &topic, 1);
    let store = Arc::new(KafkaKeyStore::new(
        KafkaChangelog::open(&bootstrap, &key_topic).unwrap(),
    ));
    write(&bootstrap, &topic, &kek, store);
    let view = dir.file("view");
    let keys = [
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &key_topic,
        "--subject-key-view",
        &view,
    ];
    let mut args = vec![
        "shred",
        "--bootstrap",
        &bootstrap,
        "--subject",
        "c-1",
        "--json",
    ];
    args.extend_from_slice(&keys);
    let out = cli(&args);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let file = std::path::Path::new(&view).join(format!("{key_topic}-0.view.redb"));
    assert!(file.exists(), "no view file in {view}");
    for _ in 0..2 {
        let (c, r) = audit(&bootstrap, &topic, &keys);
        assert_eq!(c, 1, "{r}");
        // c-1's two values.
        assert_eq!(r["shredded_values"], 2, "{r}");
    }
    std::fs::write(&file, b"not a view").unwrap();
    let mut args = vec![
        "audit",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--json",
        "-q",
    ];
    args.extend_from_slice(&keys);
    let out = cli(&args);
    assert_eq!(code(&out), 2);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--subject-key-view") && err.contains("remove it"),
        "{err}"
    );
}

/// `consume` of `topic` with `args` added: its exit code, stdout's JSON
/// lines and stderr.
fn consume(bootstrap: &str, topic: &str, args: &[&str]) -> (i32, Vec<Value>, String) {
    let mut all = vec!["consume", "--bootstrap", bootstrap, "--topic", topic, "-q"];
    all.extend_from_slice(args);
    let out = cli(&all);
    let lines = String::from_utf8(out.stdout.clone())
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (
        code(&out),
        lines,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `consume --subject-kek`: every subject's values as written; after
/// `shred` of c-1, c-1's values as `null` with `"shredded": true` (they
/// are deletes), the tombstone still without `shredded`, every other
/// value as written; a value with one ciphertext bit flipped an error line
/// (exit 1), never `null`. A value's format comes from the options, never
/// from its first byte: a value under a keyset on the same topic is an
/// error line under `--subject-keyset`, and the subject-key values are
/// error lines (that name `--subject-keyset`) under `--keyset`; both
/// options at once are refused (exit 2).
#[test]
fn consume_prints_a_shredded_subjects_values_as_null_and_shredded() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-consume");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let (keyset_path, keyset) = new_keyset(&dir, "values.json");
    let store_path = dir.file("subject-keys.redb");
    let topic = fresh_topic("shred-consume");
    create_topic(&bootstrap, &topic, 1);
    let written = {
        make_store(&kek_path, &store_path);
        let store = Arc::new(RedbKeyStore::open(&store_path).unwrap());
        write(&bootstrap, &topic, &kek, store)
    };
    // One value under the keyset beside them (offset 6).
    let ours = EncryptingSerializer::new(Bytes, keyset)
        .serialize(
            &Context::new(&topic).with_key(b"p-0"),
            Some(b"under the keyset".as_ref()),
        )
        .unwrap();
    produce(&bootstrap, &topic, &[("p-0", ours)]);

    // Each line as it must read, c-1's values shredded or not; no field
    // but these (a tombstone has no `shredded`).
    let expected = |shredded: bool| -> Vec<Value> {
        let mut lines: Vec<Value> = RECORDS
            .iter()
            .enumerate()
            .map(|(offset, (k, v))| match v {
                Some(_) if shredded && *k == "c-1" => json!({
                    "partition": 0, "offset": offset, "key": k,
                    "value": null, "shredded": true,
                }),
                v => json!({"partition": 0, "offset": offset, "key": k, "value": v}),
            })
            .collect();
        lines.push(json!({"partition": 0, "offset": 6, "key": "p-0", "value": "under the keyset"}));
        lines
    };
    let keys = [
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
    ];
    // The keyset's value is the one error line: its format is not the
    // policy's.
    let under_subjects = |shredded: bool| {
        let (c, lines, err) = consume(&bootstrap, &topic, &keys);
        assert_eq!((c, lines.len()), (1, 7), "{err}");
        assert_eq!(lines[..6], expected(shredded)[..6], "{err}");
        assert!(
            lines[6].get("value").is_none() && lines[6]["error"].is_string(),
            "{}",
            lines[6]
        );
        lines
    };
    under_subjects(false);
    // Both policies at once: refused, nothing read.
    let (c, lines, err) = consume(
        &bootstrap,
        &topic,
        &[&["--keyset", &keyset_path][..], &keys[..]].concat(),
    );
    assert_eq!((c, lines.len()), (2, 0), "{err}");
    assert!(err.contains("one policy"), "{err}");

    // Without --subject-kek: each value under subject keys is an error
    // that says what to give; the tombstone and the keyset's value read.
    let (c, lines, err) = consume(&bootstrap, &topic, &["--keyset", &keyset_path]);
    assert_eq!((c, lines.len()), (1, 7), "{err}");
    for (line, (_, v)) in lines.iter().zip(RECORDS) {
        if v.is_some() {
            assert!(line.get("value").is_none(), "{line}");
            assert!(
                line["error"].as_str().unwrap().contains("--subject-keyset"),
                "{line}"
            );
        } else {
            assert_eq!(line.get("value"), Some(&Value::Null), "{line}");
        }
    }
    assert_eq!(lines[6], expected(false)[6]);
    assert!(
        under_subjects(false)[6]["error"]
            .as_str()
            .unwrap()
            .contains("--keyset"),
        "the error line says how to read it"
    );

    let out = cli(&[
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
        "--subject",
        "c-1",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    under_subjects(true);

    // A copy of c-2's value with the last bit of its ciphertext flipped
    // (offset 7): an error line and exit 1, not a delete.
    let (_, two) = written.iter().find(|(k, _)| k == "c-2").unwrap();
    assert_eq!(two.len(), tombstone_crypt::shred::OVERHEAD + "two".len());
    let mut tampered = two.clone();
    tampered[two.len() - 16 - 1] ^= 1;
    produce(&bootstrap, &topic, &[("c-2", Some(tampered))]);
    let (c, lines, err) = consume(&bootstrap, &topic, &keys);
    assert_eq!((c, lines.len()), (1, 8), "{err}");
    assert_eq!(lines[..6], expected(true)[..6], "{err}");
    let bad = lines[7].as_object().unwrap();
    assert_eq!((&bad["offset"], &bad["key"]), (&json!(7), &json!("c-2")));
    assert!(bad["error"].is_string(), "{}", lines[7]);
    assert!(
        !bad.contains_key("value") && !bad.contains_key("shredded"),
        "{}",
        lines[7]
    );
}

/// The model on the compacting broker, with the command line as a second
/// process: random puts and deletes over 5 subjects through this process's
/// instance (its own view of the key-store topic), shreds through
/// `tombstone-crypt shred`. After each shred and the fences: every copy of
/// a value (bytes kept since it was written) reads as deleted where its
/// subject was shredded since, as written elsewhere; the live topic, read
/// whole and taken key by key as compaction leaves it, reads as the model;
/// `audit` through the command line counts the model's live keys. Then the
/// same once both topics are compacted. Returns how many reads differed
/// from the model (`fence`: this instance's cache fence).
fn compacting_model(seed: u64, fence: Duration) -> usize {
    use common::compacting::{
        compacting_bootstrap, create_compacted_topic, read_all, wait_compacted,
    };
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new(&format!("shred-model-{seed}-{}", fence.as_millis()));
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let topic = fresh_topic("shred-model");
    let key_topic = fresh_topic("shred-model-keys");
    create_compacted_topic(&bootstrap, &topic, 1);
    let view = Duration::from_millis(300);
    let keys = Arc::new(
        SubjectKeys::create(
            kek,
            Arc::new(
                common::kafka::key_store(KafkaChangelog::open(&bootstrap, &key_topic).unwrap())
                    .with_fence(view),
            ),
        )
        .unwrap()
        .with_fence(fence),
    );
    let values = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let settle = view + Duration::from_millis(100) + Duration::from_millis(40);
    let mut rng = Rng(seed);
    // subject -> its last record's value, and whether shredded since.
    let mut model: std::collections::BTreeMap<String, (Option<String>, bool)> = Default::default();
    let mut copies: Vec<(String, Vec<u8>, String, bool)> = Vec::new();
    let mut wrong = 0;
    let check = |model: &std::collections::BTreeMap<String, (Option<String>, bool)>,
                 copies: &[(String, Vec<u8>, String, bool)]|
     -> usize {
        let mut wrong = 0;
        for (s, bytes, v, shredded) in copies {
            let ctx = Context::new(&topic).with_key(s.as_bytes());
            let got: Option<String> = values.deserialize(&ctx, Some(bytes)).unwrap();
            wrong += usize::from(got != (!shredded).then(|| v.clone()));
        }
        let mut last: std::collections::BTreeMap<Vec<u8>, Option<Vec<u8>>> = Default::default();
        for r in read_all(&bootstrap, &topic) {
            last.insert(r.key.unwrap(), r.value);
        }
        for (s, (v, shredded)) in model {
            let ctx = Context::new(&topic).with_key(s.as_bytes());
            let bytes = last.get(s.as_bytes()).cloned().flatten();
            let got: Option<String> = values.deserialize(&ctx, bytes.as_deref()).unwrap();
            let want = if *shredded { None } else { v.clone() };
            wrong += usize::from(got != want);
        }
        let live = model.values().filter(|(v, s)| v.is_some() && !s).count();
        let (_, r) = audit(
            &bootstrap,
            &topic,
            &[
                "--subject-kek",
                &kek_path,
                "--subject-key-topic",
                &key_topic,
            ],
        );
        wrong += usize::from(r["live_keys"] != live);
        wrong
    };
    for step in 0..24 {
        let subject = format!("s-{}", rng.below(5));
        match rng.below(8) {
            0..=4 => {
                let v = format!("v{step}");
                let ctx = Context::new(&topic).with_key(subject.as_bytes());
                let bytes = values.serialize(&ctx, Some(v.as_str())).unwrap().unwrap();
                produce(&bootstrap, &topic, &[(&subject, Some(bytes.clone()))]);
                copies.push((subject.clone(), bytes, v.clone(), false));
                model.insert(subject, (Some(v), false));
            }
            5 => {
                produce(&bootstrap, &topic, &[(&subject, None::<&[u8]>)]);
                model.insert(subject, (None, false));
            }
            _ => {
                let out = cli(&[
                    "shred",
                    "--subject-kek",
                    &kek_path,
                    "--subject-key-topic",
                    &key_topic,
                    "--bootstrap",
                    &bootstrap,
                    "--subject",
                    &subject,
                ]);
                // Exit 1: the subject had no key (never written, or
                // shredded already and not written since).
                let had_key = model.get(&subject).is_some_and(|m| m.0.is_some() && !m.1)
                    || copies.iter().any(|c| c.0 == subject && !c.3);
                assert!(code(&out) < 2, "{}", String::from_utf8_lossy(&out.stderr));
                assert!(
                    code(&out) == 0 || !had_key,
                    "a subject with a key said no key: {}",
                    String::from_utf8_lossy(&out.stdout)
                );
                for c in copies.iter_mut().filter(|c| c.0 == subject) {
                    c.3 = true;
                }
                if let Some(m) = model.get_mut(&subject) {
                    m.1 = true;
                }
                std::thread::sleep(settle);
                wrong += check(&model, &copies);
            }
        }
    }
    // Both topics compacted: the same answers.
    wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    wait_compacted(&bootstrap, &key_topic, Duration::from_secs(60));
    std::thread::sleep(settle);
    wrong + check(&model, &copies)
}

#[test]
fn shred_model_on_the_compacting_broker_with_the_command_line_as_a_second_process() {
    if bootstrap().is_none() {
        return;
    }
    assert_eq!(compacting_model(3, Duration::from_millis(40)), 0);
    // The control: this instance's cache is not fenced, so a shred made by
    // the other process leaves it reading the subject.
    assert!(
        compacting_model(3, Duration::from_secs(3600)) > 0,
        "the control met the model"
    );
}

/// A shred killed in the middle (SIGKILL while it works through a list):
/// the caller knows (no exit 0), and running it again finishes the list.
#[test]
fn a_killed_shred_says_so_and_running_it_again_finishes_the_list() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-kill");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let key_topic = fresh_topic("shred-kill-keys");
    let view = Duration::from_secs(1);
    let store = || {
        Arc::new(
            common::kafka::key_store(KafkaChangelog::open(&bootstrap, &key_topic).unwrap())
                .with_fence(view),
        )
    };
    let values = SubjectEncrypting::new(
        Arc::new(
            SubjectKeys::create(kek.clone(), store())
                .unwrap()
                .with_fence(Duration::ZERO),
        ),
        Utf8,
    );
    let subjects: Vec<String> = (0..24).map(|i| format!("k-{i}")).collect();
    let written: Vec<Vec<u8>> = subjects
        .iter()
        .map(|s| {
            let ctx = Context::new("t").with_key(s.as_bytes());
            values.serialize(&ctx, Some("x")).unwrap().unwrap()
        })
        .collect();
    let list = dir.file("subjects.txt");
    std::fs::write(&list, subjects.join("\n")).unwrap();
    let args = [
        "shred",
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &key_topic,
        "--bootstrap",
        &bootstrap,
        "--subjects",
        &list,
    ];
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let _ = child.kill();
    let status = child.wait().unwrap();
    std::thread::sleep(view + Duration::from_millis(100));
    let read = |i: usize| -> Option<String> {
        let ctx = Context::new("t").with_key(subjects[i].as_bytes());
        values.deserialize(&ctx, Some(&written[i])).unwrap()
    };
    let done = (0..subjects.len()).filter(|&i| read(i).is_none()).count();
    // Killed before the end: not a success; done in list order.
    if done < subjects.len() {
        assert!(!status.success(), "{done} of {} shredded", subjects.len());
        assert!((0..done).all(|i| read(i).is_none()));
    }
    let out = cli(&args);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    std::thread::sleep(view + Duration::from_millis(100));
    assert!((0..subjects.len()).all(|i| read(i).is_none()));
}

/// Only a shred deletes, through the command line: a mistyped key-store
/// path or topic is an error in every command and makes nothing; forged
/// values (a plain value that starts with `S`, a real one with a flipped
/// DEK-id bit) are `unknown_subject_keys` to `audit`, error lines to
/// `consume`, and `repair --apply` writes nothing for them; `repair
/// --apply` needs its null marker named; `shred` says per subject what it
/// found and refuses a subjects file it would misread.
#[test]
fn a_mistyped_key_store_and_forged_values_are_errors_never_deletes() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("shred-evidence-cli");
    let (kek_path, kek) = new_keyset(&dir, "kek.json");
    let store_path = dir.file("keys.redb");
    let typo = dir.file("keys-typo.redb");
    let topic = fresh_topic("shred-evidence-cli");
    create_topic(&bootstrap, &topic, 1);
    make_store(&kek_path, &store_path);
    let written = write(
        &bootstrap,
        &topic,
        &kek,
        Arc::new(RedbKeyStore::open(&store_path).unwrap()),
    );
    let keys = [
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &store_path,
    ];
    let typo_keys = ["--subject-kek", &kek_path, "--subject-key-store", &typo];
    let missing_topic = fresh_topic("no-such-key-store");
    let topic_keys = [
        "--subject-kek",
        &kek_path,
        "--subject-key-topic",
        &missing_topic,
    ];

    // A mistyped store: every command fails (exit 2), names it, makes
    // nothing.
    for store in [&typo_keys, &topic_keys] {
        let mut audit = vec!["audit", "--bootstrap", &bootstrap, "--topic", &topic];
        audit.extend_from_slice(store);
        assert_eq!(code(&cli(&audit)), 2);
        let mut consume = vec!["consume", "--bootstrap", &bootstrap, "--topic", &topic];
        consume.extend_from_slice(store);
        assert_eq!(code(&cli(&consume)), 2);
        let mut repair = vec!["repair", "--bootstrap", &bootstrap, "--topic", &topic];
        repair.extend_from_slice(store);
        repair.extend_from_slice(&["--apply", "--null-marker", "none"]);
        let out = cli(&repair);
        assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
        let mut shred = vec!["shred", "--bootstrap", &bootstrap, "--subject", "c-0"];
        shred.extend_from_slice(store);
        let out = cli(&shred);
        assert_eq!(code(&out), 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("no key store at") || err.contains("does not exist"),
            "{err}"
        );
        for extra in ["--rewrap", "--check"] {
            let mut other = vec!["shred", "--bootstrap", &bootstrap, extra];
            other.extend_from_slice(store);
            assert_eq!(code(&cli(&other)), 2, "shred {extra}");
        }
    }
    assert!(
        !std::path::Path::new(&typo).exists(),
        "a command made the mistyped store"
    );
    // Making a key store on a topic that holds records (a compacted one,
    // or the data topic, named by mistake) is refused, and writes nothing
    // there.
    let compacted = fresh_topic("shred-not-a-key-store");
    {
        use tombstone_crypt::store::Changelog as _;
        let mut log = KafkaChangelog::open(&bootstrap, &compacted).unwrap();
        log.append(b"customer-1", Some(b"hello")).unwrap();
        log.flush().unwrap();
    }
    for (t, why) in [(&compacted, "not a new key store"), (&topic, "not compact")] {
        let out = cli(&[
            "shred",
            "--create-key-store",
            "--bootstrap",
            &bootstrap,
            "--subject-kek",
            &kek_path,
            "--subject-key-topic",
            t,
        ]);
        assert_eq!(code(&out), 2);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(why), "{err}");
    }
    {
        use tombstone_crypt::store::Changelog as _;
        let log = KafkaChangelog::open(&bootstrap, &compacted).unwrap();
        assert_eq!(log.records().unwrap().len(), 1, "a record was written");
    }
    let out = cli(&[
        "audit",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &missing_topic,
        "--keyset",
        &kek_path,
        "--json",
        "-q",
    ]);
    assert_ne!(code(&out), 0, "the mistyped key-store topic was made");
    // Another store under the same KEK (made on purpose): the values are
    // unknown to it, not shredded.
    let other = dir.file("other.redb");
    make_store(&kek_path, &other);
    let (c, r) = audit(
        &bootstrap,
        &topic,
        &["--subject-kek", &kek_path, "--subject-key-store", &other],
    );
    assert_eq!(c, 1, "{r}");
    assert_eq!(
        (&r["shredded_values"], &r["unknown_subject_keys"]),
        (&0.into(), &5.into()),
        "{r}"
    );
    // ... and repair through it writes nothing.
    let other_ck = dir.file("other.checkpoint");
    let out = cli(&[
        "repair",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--subject-kek",
        &kek_path,
        "--subject-key-store",
        &other,
        "--apply",
        "--null-marker",
        "none",
        "--checkpoint",
        &other_ck,
        "--json",
        "-q",
    ]);
    assert!(code(&out) < 2, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["tombstones_planned"], 0);

    // Forged values: a plain value that starts with `S`, and c-2's value
    // with one DEK-id bit flipped, under keys of their own.
    let mut flipped = written.iter().find(|(k, _)| k == "c-2").unwrap().1.clone();
    flipped[20] ^= 0x01;
    let plain_s = format!("S{}", "plain text, not under any key; ".repeat(3)).into_bytes();
    produce(
        &bootstrap,
        &topic,
        &[("c-2", Some(flipped)), ("f-0", Some(plain_s))],
    );
    let (c, r) = audit(&bootstrap, &topic, &keys);
    assert_eq!(c, 1, "{r}");
    assert_eq!(
        (
            &r["shredded_values"],
            &r["unknown_subject_keys"],
            &r["broken_tombstones"]
        ),
        (&0.into(), &2.into(), &0.into()),
        "{r}"
    );
    assert_eq!(r["null_marker"], "empty");
    let mut consume = vec!["consume", "--bootstrap", &bootstrap, "--topic", &topic];
    consume.extend_from_slice(&keys);
    let out = cli(&consume);
    assert_eq!(code(&out), 1);
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let errors = lines.iter().filter(|l| l.get("error").is_some()).count();
    assert_eq!(errors, 2, "{lines:?}");
    assert!(
        lines.iter().all(|l| l.get("shredded").is_none()),
        "{lines:?}"
    );
    // repair: the marker must be named to apply; then nothing to write.
    let mut repair = vec!["repair", "--bootstrap", &bootstrap, "--topic", &topic];
    repair.extend_from_slice(&keys);
    repair.extend_from_slice(&["--apply", "--json", "-q"]);
    let out = cli(&repair);
    assert_eq!(code(&out), 2);
    assert!(String::from_utf8_lossy(&out.stderr).contains("--null-marker"));
    let ck = dir.file("repair.checkpoint");
    repair.extend_from_slice(&["--null-marker", "none", "--checkpoint", &ck]);
    let out = cli(&repair);
    assert!(code(&out) < 2, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["tombstones_planned"], 0);

    // shred: per subject, what it found.
    let mut shred = vec!["shred", "--subject", "c-0", "--subject", "nobody", "--json"];
    shred.extend_from_slice(&keys);
    let out = cli(&shred);
    assert_eq!(code(&out), 1, "a subject without a key is a finding");
    let r = json_of(&out);
    assert_eq!(
        (&r["shredded"], &r["no_key"]),
        (&1.into(), &1.into()),
        "{r}"
    );
    assert_eq!(r["subjects"][1]["state"], "no_key");
    let out = cli(&shred);
    let r = json_of(&out);
    assert_eq!(r["subjects"][0]["state"], "shredded_before", "{r}");
    // A subjects file it would misread is refused whole.
    for (name, text) in [
        ("bom.txt", "\u{feff}c-1\nc-2\n"),
        ("spaces.txt", "c-1 \nc-2\n"),
    ] {
        let file = dir.file(name);
        std::fs::write(&file, text).unwrap();
        let mut shred = vec!["shred", "--subjects", &file];
        shred.extend_from_slice(&keys);
        let out = cli(&shred);
        assert_eq!(code(&out), 2, "{name}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was shredded"));
    }
    // c-1 and c-2 untouched by the refused files; c-1 shredded in hex.
    let mut shred = vec!["shred", "--hex", "--subject", "632d31", "--json"];
    shred.extend_from_slice(&keys);
    let out = cli(&shred);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["subjects"][0]["state"], "shredded");
}
