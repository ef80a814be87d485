//! The `tombstone-crypt` command line, run as a process: keysets Google
//! Tink reads and uses, `inspect`, and `audit`/`repair`/`reencrypt` against
//! the loopback broker on a topic a naive layer wrote; bad input is exit 2
//! with a message, never a panic.

use crate::common;

use common::rng::Rng;

use std::collections::BTreeMap;
use std::process::{Command, Output};
use std::time::Duration;

use common::compacting::{compacting_bootstrap, wait_compacted};
use common::kafka::{bootstrap, client_config, fresh_topic, produce};
use common::process::{cli, code, json_of, load, new_keyset, Dir};
use common::tink::{hex, peer, python, unhex};
use serde_json::{json, Value};
use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::{KafkaChangelog, TypedConsumer};
use tombstone_crypt::record_key::WriteRule;
use tombstone_crypt::store::{restore_from, EncryptedStore, KeyValueStore as _, MemoryStore};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, DeterministicDeserializer,
    DeterministicSerializer, EncryptingSerializer, Keyset, Serializer as _, Unencrypted,
};

/// The loopback OpenBao's key (`scripts/kms.sh`, which the test command
/// starts); `None`, and a note, without it.
fn vault_kek() -> Option<String> {
    let kek = std::env::var("TOMBSTONE_VAULT_KEY_URI").ok();
    if kek.is_none() {
        eprintln!("TOMBSTONE_VAULT_KEY_URI unset: skipped (scripts/test.sh sets it)");
    }
    kek
}

fn create_compacted(bootstrap: &str, topic: &str, partitions: i32) {
    common::compacting::create_compacted_topic(bootstrap, topic, partitions);
}

/// What a restore of partition `p` gives, as the bytes on the wire.
fn restore_partition(bootstrap: &str, topic: &str, p: i32) -> Vec<(Vec<u8>, Vec<u8>)> {
    let mut store = MemoryStore::new();
    let log = KafkaChangelog::open(bootstrap, topic)
        .unwrap()
        .on_partition(p);
    restore_from(&mut store, &log).unwrap();
    store.all().unwrap()
}

/// What a restore of every partition gives, decrypted (plaintext values
/// passed through).
fn restore(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    keyset: &Keyset,
) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let de = DecryptingDeserializer::new(Bytes, keyset.clone())
        .with_unencrypted(Unencrypted::PassThrough);
    let mut out = BTreeMap::new();
    for p in 0..partitions {
        for (k, v) in restore_partition(bootstrap, topic, p) {
            let ctx = Context::new(topic).with_key(&k);
            let v = de.deserialize(&ctx, Some(&v)).unwrap().unwrap();
            out.insert(k, v);
        }
    }
    out
}

/// Record `i`'s writes in the naive topic, by kind: a rewrite, a real
/// delete, a delete the naive layer wrote as the ciphertext of an empty
/// value, a plaintext value, a naive delete then a new value.
fn naive_writes(keyset: &Keyset, topic: &str, keys: usize) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let enc = |k: &[u8], v: &[u8]| {
        ser.serialize(&Context::new(topic).with_key(k), Some(v))
            .unwrap()
    };
    let mut w = Vec::new();
    for i in 0..keys {
        let k = format!("key-{i}").into_bytes();
        let v = |n: u32| format!("value {n} of {i}").into_bytes();
        match i % 5 {
            0 => {
                w.push((k.clone(), enc(&k, &v(1))));
                w.push((k.clone(), enc(&k, &v(2))));
            }
            1 => {
                w.push((k.clone(), enc(&k, &v(1))));
                w.push((k.clone(), None));
            }
            2 => {
                w.push((k.clone(), enc(&k, &v(1))));
                w.push((k.clone(), enc(&k, b"")));
            }
            3 => w.push((k.clone(), Some(format!("plain {i}").into_bytes()))),
            _ => {
                w.push((k.clone(), enc(&k, &v(1))));
                w.push((k.clone(), enc(&k, b"")));
                w.push((k.clone(), enc(&k, &v(3))));
            }
        }
    }
    w
}

/// What the audit must count, computed from the writes (`None` a delete,
/// the ciphertext of the empty value a broken one).
fn expected(keyset: &Keyset, topic: &str, writes: &[(Vec<u8>, Option<Vec<u8>>)]) -> Value {
    #[derive(Clone, Copy, PartialEq)]
    enum Kind {
        Tombstone,
        Plaintext,
        Marker,
        Value,
    }
    let de = DecryptingDeserializer::new(Bytes, keyset.clone());
    let kind = |k: &[u8], v: &Option<Vec<u8>>| match v {
        None => Kind::Tombstone,
        Some(v) if !keyset.names_a_key(v) => Kind::Plaintext,
        Some(v) => {
            let plain = de.deserialize(&Context::new(topic).with_key(k), Some(v));
            if plain.unwrap().unwrap().is_empty() {
                Kind::Marker
            } else {
                Kind::Value
            }
        }
    };
    let kinds: Vec<Kind> = writes.iter().map(|(k, v)| kind(k, v)).collect();
    let mut newest: BTreeMap<&[u8], Kind> = BTreeMap::new();
    for ((k, _), kind) in writes.iter().zip(&kinds) {
        newest.insert(k, *kind);
    }
    let all = |want: Kind| kinds.iter().filter(|k| **k == want).count();
    let newest_of = |want: Kind| newest.values().filter(|k| **k == want).count();
    json!({
        "records": writes.len(),
        "unkeyed": 0,
        "keys": newest.len(),
        "tombstones": all(Kind::Tombstone),
        "live_keys": newest_of(Kind::Value) + newest_of(Kind::Plaintext),
        "broken_tombstones": newest_of(Kind::Marker),
        "split_keys": 0,
        "keys_in_several_partitions": 0,
        "undecryptable": {},
        "plaintext": all(Kind::Plaintext),
        "marker_values": all(Kind::Marker),
        "shredded_values": 0,
        "unknown_subject_keys": 0,
        "subject_key_values_unread": 0,
        // Not named on the command line: the default, said in the report.
        "null_marker": "empty",
        "key_ids": { keyset.primary().0.to_string(): newest_of(Kind::Value) + newest_of(Kind::Marker) },
        "all_values_by_key_id": { keyset.primary().0.to_string(): all(Kind::Value) + all(Kind::Marker) },
    })
}

fn counts(report: &Value) -> Value {
    let mut c = report.clone();
    for k in ["topic", "partitions", "undecryptable_record_keys"] {
        c.as_object_mut().unwrap().remove(k);
    }
    c
}

fn end_offsets(bootstrap: &str, topic: &str, partitions: i32) -> Vec<i64> {
    use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
    let c: BaseConsumer = client_config(bootstrap).create().unwrap();
    (0..partitions)
        .map(|p| {
            c.fetch_watermarks(topic, p, Duration::from_secs(10))
                .unwrap()
                .1
        })
        .collect()
}

#[test]
fn audit_counts_a_naive_topic_and_repair_makes_a_restore_equal_the_model() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("audit");
    let topic = fresh_topic("cli-audit");
    create_compacted(&bootstrap, &topic, 3);
    let (ks_file, keyset) = new_keyset(&dir, "values.json");
    let writes = naive_writes(&keyset, &topic, 60);
    produce(&bootstrap, &topic, &writes);
    let args = |cmd: &str| -> Vec<String> {
        [
            cmd,
            "--json",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &ks_file,
        ]
        .map(str::to_owned)
        .to_vec()
    };
    let run = |a: &[String]| cli(&a.iter().map(String::as_str).collect::<Vec<_>>());

    let audit = run(&args("audit"));
    assert_eq!(code(&audit), 1, "broken tombstones are findings");
    assert!(
        audit.stderr.is_empty(),
        "no progress bar when stderr is not a terminal: {}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let report = json_of(&audit);
    let want = expected(&keyset, &topic, &writes);
    assert_eq!(counts(&report), want);
    assert_eq!(report["broken_tombstones"], json!(12));
    assert_eq!(report["partitions"], json!(3));

    // Before the repair a restore resurrects every broken key (as empty).
    let model: BTreeMap<Vec<u8>, Vec<u8>> = {
        let mut m = BTreeMap::new();
        for (i, k) in (0..60).map(|i| (i, format!("key-{i}").into_bytes())) {
            match i % 5 {
                0 => drop(m.insert(k, format!("value 2 of {i}").into_bytes())),
                3 => drop(m.insert(k, format!("plain {i}").into_bytes())),
                4 => drop(m.insert(k, format!("value 3 of {i}").into_bytes())),
                _ => {}
            }
        }
        m
    };
    let before = restore(&bootstrap, &topic, 3, &keyset);
    assert_eq!(before.len(), model.len() + 12);

    // The plan writes nothing.
    let ends = end_offsets(&bootstrap, &topic, 3);
    let plan = run(&args("repair"));
    assert_eq!(code(&plan), 1);
    assert_eq!(json_of(&plan)["tombstones_planned"], json!(12));
    assert_eq!(end_offsets(&bootstrap, &topic, 3), ends);

    let mut apply = args("repair");
    // This topic's broken layer wrote the empty plaintext for a delete.
    apply.extend(["--apply".into(), "--null-marker".into(), "empty".into()]);
    let repaired = run(&apply);
    assert_eq!(
        code(&repaired),
        0,
        "{}{}",
        String::from_utf8_lossy(&repaired.stdout),
        String::from_utf8_lossy(&repaired.stderr)
    );
    let r = json_of(&repaired);
    assert_eq!(r["tombstones_written"], json!(12));
    assert_eq!(r["after"]["broken_tombstones"], json!(0));
    assert_eq!(
        r["after"]["tombstones"],
        json!(want["tombstones"].as_u64().unwrap() + 12)
    );
    assert_eq!(restore(&bootstrap, &topic, 3, &keyset), model);

    // Idempotent: clean, and a second repair writes nothing.
    assert_eq!(code(&run(&args("audit"))), 0);
    let ends = end_offsets(&bootstrap, &topic, 3);
    let again = run(&apply);
    assert_eq!(code(&again), 0);
    assert_eq!(json_of(&again)["tombstones_written"], json!(0));
    assert_eq!(end_offsets(&bootstrap, &topic, 3), ends);

    // A json-null marker finds nothing here.
    let mut other = args("audit");
    other.extend(["--null-marker".into(), "json-null".into()]);
    assert_eq!(json_of(&run(&other))["broken_tombstones"], json!(0));

    // A wrong keyset decrypts nothing: exit 2, naming the key ids on both
    // sides, not a report of findings.
    let (wrong_file, wrong) = new_keyset(&dir, "wrong.json");
    let mut a = args("audit");
    a[7] = wrong_file;
    let w = run(&a);
    let stderr = String::from_utf8_lossy(&w.stderr);
    assert_eq!(code(&w), 2, "{stderr}");
    assert!(w.stdout.is_empty());
    assert!(
        stderr.contains(&format!("[{}]", keyset.primary().0))
            && stderr.contains(&format!("[{}]", wrong.primary().0)),
        "{stderr}"
    );

    // Values under another keyset beside ours are findings: undecryptable,
    // counted by the key id they name.
    let ser = EncryptingSerializer::new(Bytes, wrong.clone());
    let foreign: Vec<_> = (0..3)
        .map(|i| {
            let k = format!("foreign-{i}").into_bytes();
            let v = ser
                .serialize(&Context::new(&topic).with_key(&k), Some(&b"x"[..]))
                .unwrap();
            (k, v)
        })
        .collect();
    produce(&bootstrap, &topic, &foreign);
    let w = run(&args("audit"));
    assert_eq!(code(&w), 1);
    let w = json_of(&w);
    assert_eq!(
        w["undecryptable"],
        json!({ wrong.primary().0.to_string(): 3 })
    );
}

#[test]
fn reencrypt_after_a_rotation_leaves_the_old_key_unused() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("reencrypt");
    let topic = fresh_topic("cli-reencrypt");
    create_compacted(&bootstrap, &topic, 2);
    let (ks_file, old) = new_keyset(&dir, "values.json");
    let ser = EncryptingSerializer::new(Bytes, old.clone());
    let mut writes = Vec::new();
    let mut model = BTreeMap::new();
    for i in 0..40 {
        let k = format!("k{i}").into_bytes();
        let v = format!("v{i}").into_bytes();
        let ct = ser
            .serialize(&Context::new(&topic).with_key(&k), Some(&v[..]))
            .unwrap();
        writes.push((k.clone(), ct));
        if i % 4 == 0 {
            writes.push((k.clone(), None));
        } else if i % 4 == 1 {
            writes.push((k.clone(), Some(format!("legacy {i}").into_bytes())));
            model.insert(k, format!("legacy {i}").into_bytes());
        } else {
            model.insert(k, v);
        }
    }
    produce(&bootstrap, &topic, &writes);

    let rotated = cli(&["keyset", "rotate", "--in", &ks_file, "--json"]);
    assert_eq!(code(&rotated), 0);
    let new_primary = json_of(&rotated)["primary_key_id"].as_u64().unwrap();
    assert_ne!(new_primary, u64::from(old.primary().0));

    let base = [
        "reencrypt",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &ks_file,
        "--unencrypted",
        "pass-through",
    ];
    let plan = cli(&base);
    assert_eq!(code(&plan), 1, "a plan with work to do");
    assert_eq!(json_of(&plan)["values_to_rewrite"], json!(model.len()));
    let mut apply = base.to_vec();
    apply.push("--apply");
    let done = cli(&apply);
    assert_eq!(code(&done), 0, "{}", String::from_utf8_lossy(&done.stderr));
    let after = &json_of(&done)["after"];
    assert_eq!(
        after["key_ids"],
        json!({ new_primary.to_string(): model.len() }),
        "every live value under the new primary"
    );
    assert_eq!(after["live_keys"], json!(model.len()));

    // The old key can go: disabled, everything live still reads, and
    // nothing deleted came back.
    let old_id = old.primary().0.to_string();
    assert_eq!(
        code(&cli(&[
            "keyset", "disable", "--in", &ks_file, "--key-id", &old_id
        ])),
        0
    );
    let current = load(&ks_file);
    assert_eq!(restore(&bootstrap, &topic, 2, &current), model);
    let audit = cli(&[
        "audit",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &ks_file,
    ]);
    assert_eq!(
        code(&audit),
        0,
        "{}",
        String::from_utf8_lossy(&audit.stdout)
    );
    // A second run has nothing to do.
    let again = cli(&apply);
    assert_eq!(code(&again), 0);
    assert_eq!(json_of(&again)["written"], json!(0));
}

#[test]
fn keysets_made_by_the_cli_are_read_and_used_by_tink_and_list_shows_no_key() {
    let dir = Dir::new("keysets");
    let f = dir.file("k.json");
    assert_eq!(
        code(&cli(&[
            "keyset",
            "new",
            "--template",
            "aes128-gcm",
            "--out",
            &f
        ])),
        0
    );
    let old_ct = load(&f).encrypt(b"under the old key", b"ad").unwrap();
    assert_eq!(code(&cli(&["keyset", "rotate", "--in", &f])), 0);
    let first = load(&f);
    let ids: Vec<u32> = first.keys().map(|(id, _)| id.0).collect();
    // Promote the old key back, then the new one, then disable the old.
    let old = ids[0].to_string();
    let new = ids[1].to_string();
    assert_eq!(
        code(&cli(&["keyset", "promote", "--in", &f, "--key-id", &old])),
        0
    );
    assert_eq!(load(&f).primary().0, ids[0]);
    assert_eq!(
        code(&cli(&["keyset", "promote", "--in", &f, "--key-id", &new])),
        0
    );
    assert_eq!(
        code(&cli(&["keyset", "disable", "--in", &f, "--key-id", &old])),
        0
    );
    // Refused: disabling the primary, an unknown id, a new keyset over a file.
    for args in [
        vec!["keyset", "disable", "--in", &f, "--key-id", &new],
        vec!["keyset", "destroy", "--in", &f, "--key-id", "7"],
        vec!["keyset", "new", "--out", &f],
    ] {
        let out = cli(&args);
        assert_eq!(code(&out), 2, "{args:?}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("error"));
    }
    let json = std::fs::read_to_string(&f).unwrap();
    let list = cli(&["keyset", "list", "--in", &f]);
    let list_json = cli(&["keyset", "list", "--in", &f, "--json"]);
    assert_eq!((code(&list), code(&list_json)), (0, 0));
    let parsed: Value = serde_json::from_str(&json).unwrap();
    for key in parsed["key"].as_array().unwrap() {
        let material = key["keyData"]["value"].as_str().unwrap();
        for out in [&list, &list_json] {
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(!text.contains(&material[..16]), "list printed key material");
        }
    }
    let listed = json_of(&list_json);
    assert_eq!(listed["primary_key_id"], json!(ids[1]));
    assert_eq!(listed["keys"][0]["status"], json!("DISABLED"));
    assert_eq!(listed["keys"][1]["status"], json!("ENABLED"));

    let Some(py) = python() else { return };
    let info: Value = serde_json::from_str(&peer(&py, &["info"], &json)).unwrap();
    assert_eq!(info["primary_key_id"], json!(ids[1]));
    assert_eq!(info["keys"][1]["key_len"], json!(16));
    // Tink encrypts with the CLI's keyset; the crate decrypts, and back.
    let keyset = load(&f);
    let input =
        json!({"keyset": json, "items": [{"aad_hex": hex(b"ad"), "pt_hex": hex(b"from tink")}]});
    let out: Value = serde_json::from_str(&peer(&py, &["encrypt"], &input.to_string())).unwrap();
    let ct = unhex(out["items"][0]["ct_hex"].as_str().unwrap());
    assert_eq!(keyset.decrypt(&ct, b"ad").unwrap(), b"from tink");
    let ours = keyset.encrypt(b"from rust", b"ad").unwrap();
    let input = json!({"keyset": json, "items": [
        {"aad_hex": hex(b"ad"), "ct_hex": hex(&ours)},
        {"aad_hex": hex(b"ad"), "ct_hex": hex(&old_ct)},
    ]});
    let out: Value = serde_json::from_str(&peer(&py, &["decrypt"], &input.to_string())).unwrap();
    assert_eq!(out["items"][0]["pt_hex"], json!(hex(b"from rust")));
    assert_eq!(
        out["items"][1]["pt_hex"],
        Value::Null,
        "the disabled key does not decrypt in Tink"
    );
}

#[test]
fn inspect_names_each_key_type_and_never_prints_plaintext() {
    let dir = Dir::new("inspect");
    let secret = b"the plaintext must never be printed";
    let mut templates = vec![("aes256-gcm", None), ("aes256-siv", None)];
    let vault = vault_kek();
    if let Some(uri) = &vault {
        templates.push(("kms-envelope", Some(uri.as_str())));
    }
    for (template, kek) in templates {
        let f = dir.file(&format!("{template}.json"));
        let mut args = vec!["keyset", "new", "--template", template, "--out", &f];
        if let Some(kek) = kek {
            args.extend(["--kek-uri", kek]);
        }
        assert_eq!(code(&cli(&args)), 0, "{template}");
        let keyset = load(&f);
        let ct = if keyset.is_deterministic() {
            keyset.encrypt_deterministically(secret, b"").unwrap()
        } else {
            keyset.encrypt(secret, b"").unwrap()
        };
        let h = hex(&ct);
        let out = cli(&["inspect", "--json", "--keyset", &f, &h]);
        assert_eq!(code(&out), 0);
        let r = json_of(&out);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(!text.contains(&hex(secret)[..16]) && !text.contains("plaintext must"));
        assert_eq!(r["key_id"], json!(keyset.primary().0));
        assert_eq!(r["length"], json!(ct.len()));
        assert_eq!(r["encrypted_value"], json!(secret.len()), "{template}: {r}");
        let kind = match template {
            "aes256-gcm" => "aes-gcm",
            "aes256-siv" => "aes-siv",
            _ => "kms-envelope",
        };
        assert_eq!(r["kind"], json!(kind));
        // From stdin (`-`), the same.
        let mut child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
            .env("TOMBSTONE_CRYPT_LOCK_DIR", common::process::lock_dir())
            .args(["inspect", "--json", "--keyset", &f, "-"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(
            &mut child.stdin.take().unwrap(),
            format!("{h}\n").as_bytes(),
        )
        .unwrap();
        assert_eq!(json_of(&child.wait_with_output().unwrap()), r);
        // Without the keyset: the key id, not the kind.
        let bare = json_of(&cli(&["inspect", "--json", &h]));
        assert_eq!(bare["key_id"], json!(keyset.primary().0));
        assert_eq!(bare["body"], json!(ct.len() - 5));
    }
    // Not a ciphertext: a finding, and its bytes are not echoed.
    let out = cli(&["inspect", "--json", &hex(b"plain text value")]);
    assert_eq!(code(&out), 1);
    assert!(!String::from_utf8_lossy(&out.stdout).contains(&hex(b"plain")));
}

#[test]
fn bad_input_is_exit_2_with_a_message() {
    let dir = Dir::new("bad");
    let (good, _) = new_keyset(&dir, "good.json");
    let siv = dir.file("siv.json");
    assert_eq!(
        code(&cli(&[
            "keyset",
            "new",
            "--template",
            "aes256-siv",
            "--out",
            &siv
        ])),
        0
    );
    let malformed = dir.file("malformed.json");
    std::fs::write(&malformed, b"{\"primaryKeyId\": 1, \"key\": [").unwrap();
    let binary = dir.file("binary.json");
    std::fs::write(&binary, [0xffu8, 0x00, 0x9c, 0x01]).unwrap();
    let missing = dir.file("missing.json");
    let good_before = std::fs::read(&good).unwrap();
    let unreachable = "127.0.0.1:1";
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (vec!["keyset", "list", "--in", &malformed], "malformed.json"),
        (vec!["keyset", "list", "--in", &binary], "binary.json"),
        (vec!["keyset", "list", "--in", &missing], "missing.json"),
        (vec!["inspect", "0g"], "hex"),
        (vec!["keyset", "new", "--template", "nope"], "nope"),
        (vec!["keyset", "new", "--out", &good], "never replaces"),
        (vec!["audit", "--topic", "t"], "--bootstrap"),
        (
            vec![
                "audit",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "--timeout",
                "3",
            ],
            "t",
        ),
        (
            vec![
                "audit",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &siv,
            ],
            "deterministic",
        ),
        (
            vec![
                "audit",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "-X",
                "nonsense",
            ],
            "key=value",
        ),
        (
            vec![
                "audit",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "--null-marker",
                "hex:zz",
            ],
            "hex",
        ),
        // The range is checked before it is expanded: an error at once,
        // not 2^31 partition numbers in memory.
        (
            vec![
                "audit",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "--partitions",
                "0-2147483647",
            ],
            "2^20",
        ),
        // An acknowledgement must mean the record is stored: acks=all,
        // refused before the broker is asked anything.
        (
            vec![
                "repair",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "--apply",
                "--null-marker",
                "empty",
                "-X",
                "acks=1",
            ],
            "acks=all",
        ),
        (
            vec![
                "reencrypt",
                "--bootstrap",
                unreachable,
                "--topic",
                "t",
                "--keyset",
                &good,
                "--apply",
                "-X",
                "request.required.acks=0",
            ],
            "acks=all",
        ),
    ];
    for (args, mention) in cases {
        let out = cli(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "{args:?}: {stderr}");
        assert!(stderr.contains(mention), "{args:?}: {stderr}");
        assert!(!stderr.contains("stack backtrace"), "{stderr}");
    }
    assert_eq!(
        std::fs::read(&good).unwrap(),
        good_before,
        "a keyset replaced"
    );
    if let Some(bootstrap) = bootstrap() {
        let out = cli(&[
            "audit",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &fresh_topic("absent"),
            "--keyset",
            &good,
            "--timeout",
            "5",
        ]);
        assert_eq!(code(&out), 2, "{}", String::from_utf8_lossy(&out.stderr));
    }
}

/// Encrypted record keys (AES-SIV), values bound to the key's bytes on the
/// wire (`--value-key wire`): after the key keyset rotates, `reencrypt
/// --key-keyset` deletes the old forms and writes each live key in its new
/// form (its value bound to it again), so a restore holds every key once,
/// in the new form, and the old key can be disabled.
#[test]
fn reencrypt_rewrites_old_forms_of_encrypted_keys() {
    use tombstone_crypt::record_key::murmur2_partition;
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("keyforms");
    let topic = fresh_topic("cli-keyforms");
    create_compacted(&bootstrap, &topic, 2);
    let (values, keys) = (dir.file("values.json"), dir.file("keys.json"));
    assert_eq!(code(&cli(&["keyset", "new", "--out", &values])), 0);
    assert_eq!(
        code(&cli(&[
            "keyset",
            "new",
            "--template",
            "aes256-siv",
            "--out",
            &keys
        ])),
        0
    );
    let (vks, kks) = (load(&values), load(&keys));
    let key_ser = DeterministicSerializer::new(Bytes, kks.clone());
    let ser = EncryptingSerializer::new(Bytes, vks.clone());
    let mut model = BTreeMap::new();
    let config = client_config(&bootstrap);
    let p: FutureProducer = config.create().unwrap();
    for i in 0..20 {
        let plain_key = format!("user-{i}").into_bytes();
        let wire = key_ser
            .serialize(&Context::new(&topic), Some(&plain_key[..]))
            .unwrap()
            .unwrap();
        let value = format!("profile {i}").into_bytes();
        let ct = ser
            .serialize(&Context::new(&topic).with_key(&wire), Some(&value[..]))
            .unwrap()
            .unwrap();
        let partition = murmur2_partition(&plain_key, 2);
        let mut sends = vec![Some(ct)];
        if i % 3 == 0 {
            sends.push(None);
        } else {
            model.insert(plain_key, value);
        }
        for v in sends {
            let mut r: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(&topic).key(&wire[..]).partition(partition);
            if let Some(v) = &v {
                r = r.payload(&v[..]);
            }
            futures_executor::block_on(p.send(r, Duration::from_secs(30))).unwrap();
        }
    }
    let old_key_id = kks.primary().0.to_string();
    assert_eq!(code(&cli(&["keyset", "rotate", "--in", &keys])), 0);
    let args = [
        "reencrypt",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &values,
        "--key-keyset",
        &keys,
        // Values bound to the key's bytes on the wire, as the typed clients
        // wrote them before values were bound to the plaintext key.
        "--value-key",
        "wire",
        "--apply",
    ];
    let out = cli(&args);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["values_to_rewrite"], json!(model.len()));
    assert_eq!(r["old_key_forms_to_delete"], json!(model.len()));
    assert_eq!(r["after"]["keys"], json!(20), "one key per plaintext key");
    assert_eq!(r["after"]["live_keys"], json!(model.len()));

    // The old deterministic key is no longer needed.
    assert_eq!(
        code(&cli(&[
            "keyset",
            "disable",
            "--in",
            &keys,
            "--key-id",
            &old_key_id
        ])),
        0
    );
    let kks = load(&keys);
    let de = DecryptingDeserializer::new(Bytes, vks);
    let mut restored = BTreeMap::new();
    for partition in 0..2 {
        for (wire, v) in restore_partition(&bootstrap, &topic, partition) {
            let plain_key = DeterministicDeserializer::new(Bytes, kks.clone())
                .deserialize(&Context::new(&topic), Some(&wire))
                .expect("every key restored is in the new form")
                .unwrap();
            let v = de
                .deserialize(&Context::new(&topic).with_key(&wire), Some(&v))
                .unwrap()
                .unwrap();
            assert!(
                restored.insert(plain_key, v).is_none(),
                "a key restored twice"
            );
        }
    }
    assert_eq!(restored, model);
    // Idempotent.
    let again = json_of(&cli(&args));
    assert_eq!(again["written"], json!(0));
}

/// Tink's encrypted keyset: written with `--encrypt-with`, read with
/// `--decrypt-with`, changed and written back encrypted with the same KMS
/// key; the file never holds a key in the clear. (Needs the loopback
/// OpenBao of `scripts/kms.sh`, which the test command starts.)
#[test]
fn encrypted_keyset_files_stay_encrypted() {
    let Some(kek) = vault_kek() else { return };
    let dir = Dir::new("encrypted");
    let f = dir.file("k.json");
    let new = cli(&[
        "keyset",
        "new",
        "--out",
        &f,
        "--encrypt-with",
        &kek,
        "--json",
    ]);
    assert_eq!(code(&new), 0, "{}", String::from_utf8_lossy(&new.stderr));
    let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(on_disk.get("encryptedKeyset").is_some() && on_disk.get("key").is_none());
    // Without the KMS key it is refused, not misread.
    assert_eq!(code(&cli(&["keyset", "list", "--in", &f])), 2);
    let rotated = cli(&[
        "keyset",
        "rotate",
        "--in",
        &f,
        "--decrypt-with",
        &kek,
        "--json",
    ]);
    assert_eq!(
        code(&rotated),
        0,
        "{}",
        String::from_utf8_lossy(&rotated.stderr)
    );
    let on_disk: Value = serde_json::from_str(&std::fs::read_to_string(&f).unwrap()).unwrap();
    assert!(
        on_disk.get("encryptedKeyset").is_some(),
        "written back encrypted"
    );
    let listed = json_of(&cli(&[
        "keyset",
        "list",
        "--in",
        &f,
        "--decrypt-with",
        &kek,
        "--json",
    ]));
    assert_eq!(listed["keys"].as_array().unwrap().len(), 2);
    assert_eq!(listed, json_of(&rotated));
}

/// KMS envelope values: `audit` unwraps their data keys through the KMS
/// named by the environment; with the KMS unreachable it stops with exit
/// 2 naming the record, rather than counting the values as undecryptable.
#[test]
fn audit_reads_envelope_values_and_a_kms_outage_is_exit_2() {
    let Some(bootstrap) = bootstrap() else { return };
    let Some(kek) = vault_kek() else { return };
    let dir = Dir::new("envelope");
    let f = dir.file("envelope.json");
    let out = cli(&[
        "keyset",
        "new",
        "--template",
        "kms-envelope",
        "--kek-uri",
        &kek,
        "--out",
        &f,
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    tombstone_crypt::kms::register_kms_client(tombstone_crypt::kms::VaultClient::from_env());
    let keyset = load(&f);
    let topic = fresh_topic("cli-envelope");
    create_compacted(&bootstrap, &topic, 1);
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let mut writes = Vec::new();
    for i in 0..10 {
        let k = format!("k{i}").into_bytes();
        let v = if i == 3 { &b""[..] } else { &b"value"[..] };
        writes.push((
            k.clone(),
            ser.serialize(&Context::new(&topic).with_key(&k), Some(v))
                .unwrap(),
        ));
    }
    produce(&bootstrap, &topic, &writes);
    let args = [
        "audit",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &f,
    ];
    let ok = cli(&args);
    assert_eq!(code(&ok), 1, "{}", String::from_utf8_lossy(&ok.stderr));
    let r = json_of(&ok);
    assert_eq!(
        (r["live_keys"].clone(), r["broken_tombstones"].clone()),
        (json!(9), json!(1))
    );

    let down = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .env("VAULT_ADDR", "http://127.0.0.1:1")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&down.stderr);
    assert_eq!(code(&down), 2, "{stderr}");
    assert!(
        stderr.contains(&topic) && stderr.contains("offset"),
        "{stderr}"
    );
}

/// `reencrypt --to-topic`: every live value lands in the other topic, in
/// its partition, bound to the new topic; deletes arrive as tombstones.
#[test]
fn reencrypt_to_another_topic_binds_values_to_it() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("totopic");
    let (from, to) = (fresh_topic("cli-from"), fresh_topic("cli-to"));
    create_compacted(&bootstrap, &from, 2);
    create_compacted(&bootstrap, &to, 2);
    let (f, keyset) = new_keyset(&dir, "values.json");
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let mut writes = Vec::new();
    let mut model = BTreeMap::new();
    for i in 0..30 {
        let k = format!("k{i}").into_bytes();
        let v = format!("v{i}").into_bytes();
        writes.push((
            k.clone(),
            ser.serialize(&Context::new(&from).with_key(&k), Some(&v[..]))
                .unwrap(),
        ));
        if i % 3 == 0 {
            writes.push((k.clone(), None));
        } else {
            model.insert(k, v);
        }
    }
    produce(&bootstrap, &from, &writes);
    let out = cli(&[
        "reencrypt",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &from,
        "--keyset",
        &f,
        "--to-topic",
        &to,
        "--apply",
        // A producer queue of 2 records: the writes wait for room (with
        // rdkafka's timer, which needs a tokio runtime) instead of failing.
        "-X",
        "queue.buffering.max.messages=2",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let r = json_of(&out);
    assert_eq!(r["values_to_rewrite"], json!(model.len()));
    assert_eq!(r["tombstones_to_copy"], json!(10));
    assert_eq!(r["after"]["tombstones"], json!(10));
    assert_eq!(restore(&bootstrap, &to, 2, &keyset), model);
    // Each key in the same partition as in the source topic.
    let keys_in = |topic: &str, p: i32| {
        restore_partition(&bootstrap, topic, p)
            .into_iter()
            .map(|(k, _)| k)
            .collect::<Vec<_>>()
    };
    for p in 0..2 {
        assert_eq!(keys_in(&from, p), keys_in(&to, p), "partition {p}");
    }

    // A topic with another partition count is refused before anything is
    // written: a key's partition follows the count, so its later records
    // would land beside the copy, never compacted with it.
    let wider = fresh_topic("cli-wider");
    create_compacted(&bootstrap, &wider, 3);
    let out = cli(&[
        "reencrypt",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &from,
        "--keyset",
        &f,
        "--to-topic",
        &wider,
        "--apply",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 2, "{stderr}");
    assert!(stderr.contains("3 partitions"), "{stderr}");
    assert_eq!(end_offsets(&bootstrap, &wider, 3), [0, 0, 0]);
}

/// The changelog of an `EncryptedStore` with encrypted keys: its values
/// are bound to the store's name and the plaintext key, not to the topic
/// and the key's ciphertext. Read as the typed clients write, nothing
/// decrypts (exit 2); with `--aad-name` and `--value-key plaintext` the
/// audit counts it, and after a rotation of both keysets `reencrypt
/// --apply` leaves a topic that a store restored with the old keys
/// disabled reads whole.
#[test]
fn a_stores_changelog_is_audited_and_reencrypted_under_the_stores_name() {
    use tombstone_crypt::store::ChangeLoggingStore;
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("store");
    let topic = fresh_topic("cli-store-changelog");
    let name = "orders-store";
    let (values_file, values) = new_keyset(&dir, "values.json");
    let keys_file = dir.file("keys.json");
    let made = cli(&[
        "keyset",
        "new",
        "--template",
        "aes256-siv",
        "--out",
        &keys_file,
    ]);
    assert_eq!(code(&made), 0);
    let keys = load(&keys_file);
    let log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    let mut store = EncryptedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        name,
        values.clone(),
    )
    .with_encrypted_keys(keys.clone())
    .unwrap();
    let mut model = BTreeMap::new();
    for i in 0..30u32 {
        let k = format!("order-{}", i % 8).into_bytes();
        if i % 4 == 3 {
            store.delete(&k).unwrap();
            model.remove(&k);
        } else {
            let v = format!("v{i}").into_bytes();
            store.put(&k, Some(&v)).unwrap();
            model.insert(k, v);
        }
    }
    store.flush().unwrap();
    drop(store);

    let with = |cmd: &str, extra: &[&str]| -> Output {
        let mut a = vec![
            cmd,
            "--json",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &values_file,
            "--key-keyset",
            &keys_file,
        ];
        a.extend_from_slice(extra);
        cli(&a)
    };
    let store_form = ["--aad-name", name, "--value-key", "plaintext"];
    assert_eq!(code(&with("audit", &[])), 2, "bound to the topic: nothing");
    assert_eq!(
        code(&with("audit", &["--aad-name", name, "--value-key", "wire"])),
        2,
        "the store's name, but the key's ciphertext: nothing"
    );
    let audit = with("audit", &store_form);
    assert_eq!(
        code(&audit),
        0,
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let report = json_of(&audit);
    assert_eq!(report["keys"], json!(8));
    assert_eq!(report["live_keys"], json!(model.len()));
    assert_eq!(report["undecryptable_record_keys"], json!(0));

    for file in [&values_file, &keys_file] {
        assert_eq!(code(&cli(&["keyset", "rotate", "--in", file])), 0);
    }
    let mut apply = store_form.to_vec();
    apply.push("--apply");
    let done = with("reencrypt", &apply);
    assert_eq!(code(&done), 0, "{}", String::from_utf8_lossy(&done.stderr));
    let new_primary = load(&values_file).primary().0.to_string();
    assert_eq!(
        json_of(&done)["after"]["key_ids"],
        json!({ new_primary: model.len() })
    );

    // The old keys disabled, a store restored from the topic reads every
    // key once, with its newest value, and no deleted key.
    for (file, old) in [
        (&values_file, values.primary()),
        (&keys_file, keys.primary()),
    ] {
        let id = old.0.to_string();
        assert_eq!(
            code(&cli(&["keyset", "disable", "--in", file, "--key-id", &id])),
            0
        );
    }
    let mut restored = MemoryStore::new();
    for (k, v) in restore_partition(&bootstrap, &topic, 0) {
        restored.put(&k, Some(&v)).unwrap();
    }
    let restored = EncryptedStore::new(restored, name, load(&values_file))
        .with_encrypted_keys(load(&keys_file))
        .unwrap();
    let got: BTreeMap<Vec<u8>, Vec<u8>> = restored.all().unwrap().into_iter().collect();
    assert_eq!(got, model);
}

/// Records without a key (possible on a topic that is not compacted) are
/// counted apart and left alone: they are not one key, a broken-looking
/// value among them is not repaired, and nothing is written for them.
#[test]
fn records_without_a_key_are_counted_and_left_alone() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("unkeyed");
    let topic = fresh_topic("cli-unkeyed");
    common::kafka::create_topic(&bootstrap, &topic, 1);
    let (f, keyset) = new_keyset(&dir, "values.json");
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let enc = |k: Option<&[u8]>, v: &[u8]| {
        let ctx = match k {
            Some(k) => Context::new(&topic).with_key(k),
            None => Context::new(&topic),
        };
        ser.serialize(&ctx, Some(v)).unwrap().unwrap()
    };
    let mut config = client_config(&bootstrap);
    config.set("enable.idempotence", "true");
    let p: FutureProducer = config.create().unwrap();
    let unkeyed = [Some(enc(None, b"event")), Some(enc(None, b"")), None];
    for v in &unkeyed {
        let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic);
        if let Some(v) = v {
            r = r.payload(&v[..]);
        }
        futures_executor::block_on(p.send(r, Duration::from_secs(30))).unwrap();
    }
    produce(
        &bootstrap,
        &topic,
        &[(b"k".to_vec(), Some(enc(Some(b"k"), b"value")))],
    );
    let run = |cmd: &str, apply: bool| {
        let mut a = vec![
            cmd,
            "--json",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &f,
        ];
        if apply {
            a.extend(["--apply", "--null-marker", "empty"]);
        }
        cli(&a)
    };
    let audit = run("audit", false);
    assert_eq!(
        code(&audit),
        0,
        "{}",
        String::from_utf8_lossy(&audit.stderr)
    );
    let r = json_of(&audit);
    assert_eq!(
        (
            &r["records"],
            &r["unkeyed"],
            &r["keys"],
            &r["broken_tombstones"]
        ),
        (&json!(4), &json!(3), &json!(1), &json!(0))
    );
    let repaired = run("repair", true);
    assert_eq!(code(&repaired), 0);
    assert_eq!(json_of(&repaired)["tombstones_written"], json!(0));
    assert_eq!(end_offsets(&bootstrap, &topic, 1), [4]);
}

// Encrypted record keys: the write rule and the reading rule (see
// DESIGN.md). A key's state is its record with the highest offset among
// all its forms; every write is the tombstones of the older forms first,
// then the record under the primary form.

type Producer = common::kafka::SivProducer;
/// Each plaintext key's state; `None` deleted.
type State = BTreeMap<Vec<u8>, Option<Vec<u8>>>;
/// Live keys and their values.
type Live = BTreeMap<Vec<u8>, Vec<u8>>;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// `keyset new --template aes256-siv --out DIR/NAME`: its path and keys.
fn new_key_keyset(dir: &Dir, name: &str) -> (String, Keyset) {
    let path = dir.file(name);
    let out = cli(&["keyset", "new", "--template", "aes256-siv", "--out", &path]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let keys = load(&path);
    (path, keys)
}

/// `keyset rotate --in FILE`: the keyset after.
fn rotate(file: &str) -> Keyset {
    let out = cli(&["keyset", "rotate", "--in", file]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    load(file)
}

use common::kafka::siv_producer as typed_producer;

/// One write (`None`: a delete), acknowledged.
fn send(rt: &tokio::runtime::Runtime, p: &Producer, topic: &str, key: &str, value: Option<&str>) {
    rt.block_on(p.send(topic, key.as_bytes(), value.map(str::as_bytes)))
        .unwrap();
}

fn state(entries: &[(&str, Option<&str>)]) -> State {
    entries
        .iter()
        .map(|(k, v)| (k.as_bytes().to_vec(), v.map(|v| v.as_bytes().to_vec())))
        .collect()
}

fn live(model: &State) -> Live {
    model
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), v.clone()?)))
        .collect()
}

/// A `TypedConsumer` replaying every partition in order: the last record
/// of each plaintext key.
fn replay(bootstrap: &str, topic: &str, partitions: i32, values: &Keyset, keys: &Keyset) -> State {
    use tombstone_crypt::kafka::rdkafka::error::KafkaError;
    use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
    // The stream consumer starts its tasks on the runtime it is made in.
    let rt = runtime();
    let _in_runtime = rt.enter();
    let consumer: TypedConsumer<Vec<u8>, Vec<u8>, _, _> = TypedConsumer::new(
        client_config(bootstrap)
            .set("group.id", fresh_topic("replay"))
            .set("enable.partition.eof", "true")
            .set("enable.auto.commit", "false"),
        DeterministicDeserializer::new(Bytes, keys.clone()),
        DecryptingDeserializer::new(Bytes, values.clone()),
    )
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut state = State::new();
    let mut at_end = std::collections::BTreeSet::new();
    rt.block_on(async {
        while at_end.len() < partitions as usize {
            let r = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .expect("the replay timed out");
            match r {
                Ok(r) => {
                    at_end.remove(&r.partition);
                    state.insert(r.key, r.value);
                }
                Err(tombstone_crypt::Error::Kafka {
                    cause: Some(cause), ..
                }) if cause.downcast_ref::<KafkaError>().is_some() => {
                    match cause.downcast_ref::<KafkaError>() {
                        Some(KafkaError::PartitionEOF(p)) => drop(at_end.insert(*p)),
                        other => panic!("replay of {topic}: {other:?}"),
                    }
                }
                Err(e) => panic!("replay of {topic}: {e}"),
            }
        }
    });
    state
}

/// A store restored from every partition (`restore_from` the partition's
/// changelog into a `MemoryStore`, under an `EncryptedStore` named as the
/// topic): what its `all()` gives, and its `get` of each of `names`.
fn restored(
    bootstrap: &str,
    topic: &str,
    partitions: i32,
    values: &Keyset,
    keys: &Keyset,
    names: &[&str],
) -> (Live, Live) {
    let (mut all, mut got) = (BTreeMap::new(), BTreeMap::new());
    for p in 0..partitions {
        let mut inner = MemoryStore::new();
        let log = KafkaChangelog::open(bootstrap, topic)
            .unwrap()
            .on_partition(p);
        restore_from(&mut inner, &log).unwrap();
        let store = EncryptedStore::new(inner, topic, values.clone())
            .with_encrypted_keys(keys.clone())
            .unwrap();
        for (k, v) in store.all().unwrap() {
            assert!(all.insert(k, v).is_none(), "a key in two partitions");
        }
        for n in names {
            if let Some(v) = store.get(n.as_bytes()).unwrap() {
                assert!(got.insert(n.as_bytes().to_vec(), v).is_none());
            }
        }
    }
    (all, got)
}

/// `audit --list-keys`' states, by key (as text).
fn key_states(report: &Value) -> BTreeMap<String, String> {
    report["key_states"]
        .as_array()
        .unwrap_or_else(|| panic!("no key_states: {report}"))
        .iter()
        .map(|s| {
            let key = String::from_utf8(unhex(s["key"].as_str().unwrap())).unwrap();
            (key, s["state"].as_str().unwrap().to_owned())
        })
        .collect()
}

fn states(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
    entries
        .iter()
        .map(|(k, s)| ((*k).to_owned(), (*s).to_owned()))
        .collect()
}

/// A topic with encrypted record keys, and the command line on it.
struct KeyedTopic {
    bootstrap: String,
    topic: String,
    partitions: i32,
    values_file: String,
    keys_file: String,
}

impl KeyedTopic {
    /// `cmd --json` on the topic with both keysets, values bound to the
    /// plaintext key (as every writer binds them), and `extra`.
    fn run(&self, cmd: &str, extra: &[&str]) -> Output {
        cli(&self.args(cmd, extra))
    }

    /// The arguments of [`run`](KeyedTopic::run).
    fn args<'a>(&'a self, cmd: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
        let mut a = vec![
            cmd,
            "--json",
            "--bootstrap",
            &self.bootstrap,
            "--topic",
            &self.topic,
            "--keyset",
            &self.values_file,
            "--key-keyset",
            &self.keys_file,
            "--value-key",
            "plaintext",
        ];
        a.extend_from_slice(extra);
        // These topics' broken layers wrote the empty plaintext for a
        // delete: repair --apply needs it named.
        if cmd == "repair" && extra.contains(&"--apply") && !extra.contains(&"--null-marker") {
            a.extend_from_slice(&["--null-marker", "empty"]);
        }
        a
    }

    fn replay(&self) -> State {
        replay(
            &self.bootstrap,
            &self.topic,
            self.partitions,
            &load(&self.values_file),
            &load(&self.keys_file),
        )
    }

    fn restored(&self, names: &[&str]) -> (Live, Live) {
        restored(
            &self.bootstrap,
            &self.topic,
            self.partitions,
            &load(&self.values_file),
            &load(&self.keys_file),
            names,
        )
    }

    /// A replaying consumer, a restored store and `audit --list-keys` all
    /// equal `model`, and the audit is clean.
    fn agree(&self, model: &State, what: &str) {
        let names: Vec<&str> = model
            .keys()
            .map(|k| std::str::from_utf8(k).unwrap())
            .collect();
        let got = self.replay();
        let differ: Vec<_> = model
            .keys()
            .chain(got.keys())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .filter(|k| got.get(*k) != model.get(*k))
            .map(|k| {
                let text = |v: Option<&Option<Vec<u8>>>| {
                    v.map(|v| v.as_ref().map(|v| String::from_utf8_lossy(v).into_owned()))
                };
                (
                    String::from_utf8_lossy(k),
                    text(got.get(k)),
                    text(model.get(k)),
                )
            })
            .collect();
        assert!(
            differ.is_empty(),
            "{what}: the consumer's replay (key, got, model): {differ:?}"
        );
        let (all, got) = self.restored(&names);
        assert_eq!(all, live(model), "{what}: a restored store's all()");
        assert_eq!(got, live(model), "{what}: a restored store's get()");
        let audit = self.run("audit", &["--list-keys"]);
        let r = json_of(&audit);
        assert_eq!(code(&audit), 0, "{what}: audit: {r}");
        assert_eq!(r["split_keys"], json!(0), "{what}: {r}");
        let want: BTreeMap<String, String> = model
            .iter()
            .map(|(k, v)| {
                let state = if v.is_some() { "live" } else { "deleted" };
                (String::from_utf8(k.clone()).unwrap(), state.to_owned())
            })
            .collect();
        assert_eq!(key_states(&r), want, "{what}: audit --list-keys");
    }
}

fn keyed_topic(dir: &Dir, name: &str, partitions: i32) -> (KeyedTopic, Keyset, Keyset) {
    let bootstrap = bootstrap().expect("checked by the caller");
    let topic = fresh_topic(name);
    create_compacted(&bootstrap, &topic, partitions);
    let (values_file, values) = new_keyset(dir, "values.json");
    let (keys_file, keys) = new_key_keyset(dir, "keys.json");
    (
        KeyedTopic {
            bootstrap,
            topic,
            partitions,
            values_file,
            keys_file,
        },
        values,
        keys,
    )
}

/// (A) A delete written without the fan-out after a key-keyset rotation
/// (the old form keeps the value), and a stale writer (still on the old key
/// keyset) writing under the old form after a newer write under the new
/// one: a replaying consumer and a restored store disagree on both keys.
/// `audit` reports them as split (exit 1); `repair --apply` rewrites each
/// key's newest state through the write rule; then the consumer, a restored
/// store and `audit --list-keys` agree with the model.
#[test]
fn audit_reports_split_keys_and_repair_makes_every_reader_agree() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("split");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-split", 3);
    let rt = runtime();
    let stale = typed_producer(&t.bootstrap, &values, &old_keys, WriteRule::FanOut);
    for k in ["alice", "bob", "carol", "dave"] {
        send(&rt, &stale, &t.topic, k, Some(&format!("{k} 1")));
    }
    let keys = rotate(&t.keys_file);
    let by_rule = typed_producer(&t.bootstrap, &values, &keys, WriteRule::FanOut);
    let primary_only = typed_producer(&t.bootstrap, &values, &keys, WriteRule::PrimaryOnly);
    // alice: deleted under the new form only.
    send(&rt, &primary_only, &t.topic, "alice", None);
    // bob: a write by the rule, then the stale writer's under the old form.
    send(&rt, &by_rule, &t.topic, "bob", Some("bob 2"));
    send(&rt, &stale, &t.topic, "bob", Some("bob 3"));
    // dave: deleted by the rule.
    send(&rt, &by_rule, &t.topic, "dave", None);
    let model = state(&[
        ("alice", None),
        ("bob", Some("bob 3")),
        ("carol", Some("carol 1")),
        ("dave", None),
    ]);
    // The readers disagree: the consumer follows the newest record, a
    // restored store looks under the primary form first.
    assert_eq!(t.replay(), model);
    let (_, got) = t.restored(&["alice", "bob", "carol", "dave"]);
    assert_eq!(got.get(&b"alice"[..]), Some(&b"alice 1".to_vec()));
    assert_eq!(got.get(&b"bob"[..]), Some(&b"bob 2".to_vec()));

    let audit = t.run("audit", &["--list-keys"]);
    let r = json_of(&audit);
    assert_eq!(code(&audit), 1, "split keys are findings: {r}");
    assert_eq!(r["split_keys"], json!(2), "{r}");
    assert_eq!(r["live_keys"], json!(2), "bob and carol: {r}");
    assert_eq!(
        key_states(&r),
        states(&[
            ("alice", "split"),
            ("bob", "split"),
            ("carol", "live"),
            ("dave", "deleted")
        ])
    );

    // The plan writes nothing.
    let ends = end_offsets(&t.bootstrap, &t.topic, 3);
    let plan = t.run("repair", &[]);
    assert_eq!(code(&plan), 1);
    assert_eq!(json_of(&plan)["split_keys"], json!(2));
    assert_eq!(end_offsets(&t.bootstrap, &t.topic, 3), ends);

    let repaired = t.run("repair", &["--apply"]);
    assert_eq!(
        code(&repaired),
        0,
        "{}{}",
        String::from_utf8_lossy(&repaired.stdout),
        String::from_utf8_lossy(&repaired.stderr)
    );
    let r = json_of(&repaired);
    assert_eq!(r["after"]["split_keys"], json!(0), "{r}");
    t.agree(&model, "after repair");

    // Idempotent: a second repair writes nothing.
    let ends = end_offsets(&t.bootstrap, &t.topic, 3);
    let again = t.run("repair", &["--apply"]);
    assert_eq!(code(&again), 0);
    assert_eq!(json_of(&again)["tombstones_written"], json!(0));
    assert_eq!(end_offsets(&t.bootstrap, &t.topic, 3), ends);
}

/// (B) `reencrypt --key-keyset` on the topic itself: each live key's old
/// form gets its tombstone first, then the value goes under the new form,
/// so a consumer replaying the topic ends every live key on its value. A
/// deleted key is never published again; one whose old form still holds a
/// value (a delete without the fan-out) gets the tombstones.
#[test]
fn reencrypt_of_record_keys_writes_the_tombstones_before_the_value() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("rekey");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-rekey", 2);
    let rt = runtime();
    let before = typed_producer(&t.bootstrap, &values, &old_keys, WriteRule::FanOut);
    let names: Vec<String> = (0..8).map(|i| format!("k{i}")).collect();
    for n in &names {
        send(&rt, &before, &t.topic, n, Some(&format!("{n} value")));
    }
    for n in &names[..2] {
        send(&rt, &before, &t.topic, n, None);
    }
    let keys = rotate(&t.keys_file);
    let primary_only = typed_producer(&t.bootstrap, &values, &keys, WriteRule::PrimaryOnly);
    send(&rt, &primary_only, &t.topic, "k2", None);
    let mut model = State::new();
    for (i, n) in names.iter().enumerate() {
        let v = (i >= 3).then(|| format!("{n} value").into_bytes());
        model.insert(n.clone().into_bytes(), v);
    }
    let out = t.run("reencrypt", &["--apply"]);
    assert_eq!(
        code(&out),
        0,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    t.agree(&model, "after reencrypt");
    let r = json_of(&out);
    assert_eq!(r["values_to_rewrite"], json!(5), "{r}");
    // Idempotent.
    let again = json_of(&t.run("reencrypt", &["--apply"]));
    assert_eq!(again["written"], json!(0), "{again}");
}

/// (G) A key whose newest record is already under the primary form while
/// its old form still holds an older value (a write without the fan-out):
/// `reencrypt` tombstones the old form and then writes the value again, so
/// the key does not end on the old form's tombstone for a replaying
/// consumer.
#[test]
fn reencrypt_ends_a_key_on_its_value_when_an_old_form_holds_a_stale_one() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("stale-form");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-stale-form", 1);
    let rt = runtime();
    let before = typed_producer(&t.bootstrap, &values, &old_keys, WriteRule::FanOut);
    send(&rt, &before, &t.topic, "x", Some("x 1"));
    send(&rt, &before, &t.topic, "y", Some("y 1"));
    let keys = rotate(&t.keys_file);
    let primary_only = typed_producer(&t.bootstrap, &values, &keys, WriteRule::PrimaryOnly);
    send(&rt, &primary_only, &t.topic, "x", Some("x 2"));
    let model = state(&[("x", Some("x 2")), ("y", Some("y 1"))]);
    let audit = json_of(&t.run("audit", &["--list-keys"]));
    assert_eq!(
        key_states(&audit),
        states(&[("x", "split"), ("y", "live")]),
        "the old form of x holds a value compaction keeps: {audit}"
    );
    let out = t.run("reencrypt", &["--apply"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    t.agree(&model, "after reencrypt");
}

/// (C) `reencrypt --to-topic` copies each key's state by the reading rule:
/// a key deleted under the new form only (its old form still holds a
/// value) is deleted in the target too (its tombstones are copied, through
/// the write rule, over a value the target held), and a store restored
/// from the target agrees with a replaying consumer.
#[test]
fn reencrypt_to_another_topic_copies_deletes_by_the_reading_rule() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("copy-deletes");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-copy-from", 2);
    let to = fresh_topic("cli-copy-to");
    create_compacted(&bootstrap, &to, 2);
    let rt = runtime();
    let before = typed_producer(&bootstrap, &values, &old_keys, WriteRule::FanOut);
    for k in ["a", "b", "c", "d"] {
        send(&rt, &before, &t.topic, k, Some(&format!("{k} 1")));
    }
    let keys = rotate(&t.keys_file);
    let by_rule = typed_producer(&bootstrap, &values, &keys, WriteRule::FanOut);
    let primary_only = typed_producer(&bootstrap, &values, &keys, WriteRule::PrimaryOnly);
    send(&rt, &primary_only, &t.topic, "a", None);
    send(&rt, &by_rule, &t.topic, "b", None);
    send(&rt, &by_rule, &t.topic, "d", Some("d 2"));
    // The target already holds a value for a: the copy must delete it.
    send(&rt, &by_rule, &to, "a", Some("a 0"));
    let model = state(&[
        ("a", None),
        ("b", None),
        ("c", Some("c 1")),
        ("d", Some("d 2")),
    ]);
    let out = t.run("reencrypt", &["--to-topic", &to, "--apply"]);
    assert_eq!(
        code(&out),
        0,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let target = KeyedTopic {
        topic: to.clone(),
        ..t
    };
    target.agree(&model, "the target");
    let r = json_of(&out);
    assert_eq!(r["tombstones_to_copy"], json!(2), "{r}");
    assert_eq!(r["values_to_rewrite"], json!(2), "{r}");
}

/// (D) Values are bound to the plaintext key by default, as every writer
/// binds them; `--value-key wire` reads a topic written before. Without
/// `--key-keyset` the two are the same bytes, and either is accepted.
#[test]
fn value_key_defaults_to_the_plaintext_key() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("value-key");
    let (t, values, keys) = keyed_topic(&dir, "cli-value-key", 1);
    let rt = runtime();
    let p = typed_producer(&bootstrap, &values, &keys, WriteRule::FanOut);
    for k in ["a", "b", "c"] {
        send(&rt, &p, &t.topic, k, Some("v"));
    }
    let base = [
        "audit",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &t.topic,
        "--keyset",
        &t.values_file,
        "--key-keyset",
        &t.keys_file,
    ];
    let default = cli(&base);
    assert_eq!(
        code(&default),
        0,
        "{}",
        String::from_utf8_lossy(&default.stderr)
    );
    assert_eq!(json_of(&default)["live_keys"], json!(3));
    let mut wire = base.to_vec();
    wire.extend(["--value-key", "wire"]);
    assert_eq!(
        code(&cli(&wire)),
        2,
        "bound to the wire key: nothing decrypts"
    );

    // No key keyset: plaintext and wire are the key's bytes.
    let plain_topic = fresh_topic("cli-value-key-plain");
    create_compacted(&bootstrap, &plain_topic, 1);
    let writes = naive_writes(&values, &plain_topic, 5);
    produce(&bootstrap, &plain_topic, &writes);
    for value_key in ["plaintext", "wire"] {
        let out = cli(&[
            "audit",
            "--json",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &plain_topic,
            "--keyset",
            &t.values_file,
            "--value-key",
            value_key,
        ]);
        assert_eq!(
            code(&out),
            1,
            "{value_key}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(json_of(&out)["broken_tombstones"], json!(1), "{value_key}");
    }
}

/// (E) Writes keep each key's order: with a producer queue of one record,
/// every write waits for room, in order; a configuration under which a
/// retry could reorder a key's records (idempotence off with more than one
/// request in flight) is refused before anything is written.
#[test]
fn writes_keep_their_order_and_an_unordered_producer_is_refused() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("order");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-order", 1);
    let rt = runtime();
    let before = typed_producer(&t.bootstrap, &values, &old_keys, WriteRule::FanOut);
    let mut model = State::new();
    for i in 0..6 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        send(&rt, &before, &t.topic, &k, Some(&v));
        model.insert(k.into_bytes(), Some(v.into_bytes()));
    }
    rotate(&t.keys_file);
    let ends = end_offsets(&t.bootstrap, &t.topic, 1);
    for cmd in ["reencrypt", "repair"] {
        let out = t.run(cmd, &["--apply", "-X", "enable.idempotence=false"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "{cmd}: {stderr}");
        assert!(
            stderr.contains("max.in.flight.requests.per.connection=1"),
            "{cmd}: {stderr}"
        );
        assert_eq!(end_offsets(&t.bootstrap, &t.topic, 1), ends, "{cmd}");
    }
    let out = t.run(
        "reencrypt",
        &[
            "--apply",
            "-X",
            "enable.idempotence=false",
            "-X",
            "max.in.flight.requests.per.connection=1",
            "-X",
            "queue.buffering.max.messages=1",
        ],
    );
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["written"], json!(12));
    t.agree(&model, "after reencrypt");
}

/// (F) `audit --list-keys`: every key with its state by the reading rule,
/// sorted by partition and key, in JSON and one line per key in text;
/// `--help` says that it prints record keys.
#[test]
fn audit_list_keys_names_each_keys_state() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("list-keys");
    let topic = fresh_topic("cli-list-keys");
    create_compacted(&bootstrap, &topic, 2);
    let (f, keyset) = new_keyset(&dir, "values.json");
    let mut writes = naive_writes(&keyset, &topic, 10);
    let foreign = Keyset::generate();
    let k = b"foreign".to_vec();
    let v = EncryptingSerializer::new(Bytes, foreign)
        .serialize(&Context::new(&topic).with_key(&k), Some(&b"x"[..]))
        .unwrap();
    writes.push((k, v));
    produce(&bootstrap, &topic, &writes);
    let args = [
        "audit",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &f,
        "--list-keys",
    ];
    let out = cli(&[&["--json"][..], &args[..]].concat());
    assert_eq!(code(&out), 1, "{}", String::from_utf8_lossy(&out.stderr));
    let r = json_of(&out);
    let list = r["key_states"].as_array().unwrap();
    let order: Vec<(i64, Vec<u8>)> = list
        .iter()
        .map(|s| {
            (
                s["partition"].as_i64().unwrap(),
                unhex(s["key"].as_str().unwrap()),
            )
        })
        .collect();
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "sorted by partition and key");
    let mut want = BTreeMap::new();
    for i in 0..10 {
        let s = ["live", "deleted", "broken", "plaintext", "live"][i % 5];
        want.insert(format!("key-{i}"), s.to_owned());
    }
    want.insert("foreign".into(), "undecryptable".into());
    assert_eq!(key_states(&r), want);

    // Text: one line per key.
    let text = cli(&args);
    assert_eq!(code(&text), 1);
    let text = String::from_utf8(text.stdout).unwrap();
    for s in list {
        let line = format!(
            "key {} {} {}",
            s["partition"],
            s["key"].as_str().unwrap(),
            s["state"].as_str().unwrap()
        );
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
    // `--null-marker none`: an empty value is a value (a topic only this
    // library's writers wrote).
    let none = json_of(&cli(&[
        &["--json"][..],
        &args[..],
        &["--null-marker", "none"][..],
    ]
    .concat()));
    assert_eq!(none["broken_tombstones"], json!(0), "{none}");
    assert_eq!(key_states(&none)["key-2"], "live");
    // Without --list-keys, no keys.
    let plain = json_of(&cli(&[&["--json"][..], &args[..7]].concat()));
    assert!(plain.get("key_states").is_none(), "{plain}");
    let help = String::from_utf8(cli(&["audit", "--help"]).stdout).unwrap();
    assert!(
        help.contains("--list-keys") && help.contains("record keys") && help.contains("stdout"),
        "{help}"
    );
}

/// (G) After a rotation, a re-encryption and the old key disabled, a stale
/// writer (still on the old key keyset) writes a value under the old form:
/// no reader reads it, but compaction would keep it for good (and a reader
/// that enabled the old key again would find it). `audit` recognizes the
/// form under the disabled key and reports the key as split; `repair
/// --apply` tombstones that form too, then writes the key's state again,
/// so nothing is left under the disabled key. A key with records under the
/// disabled key only is undecryptable (no reader reads it): a finding that
/// `repair` leaves alone.
#[test]
fn repair_tombstones_a_form_under_a_disabled_key_that_still_holds_a_value() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("disabled-form");
    let (t, values, old_keys) = keyed_topic(&dir, "cli-disabled-form", 1);
    let rt = runtime();
    let stale = typed_producer(&t.bootstrap, &values, &old_keys, WriteRule::FanOut);
    send(&rt, &stale, &t.topic, "x", Some("x 1"));
    send(&rt, &stale, &t.topic, "y", Some("y 1"));
    let keys = rotate(&t.keys_file);
    let out = t.run("reencrypt", &["--apply"]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let old_id = old_keys.primary().0.to_string();
    let disabled = cli(&[
        "keyset",
        "disable",
        "--in",
        &t.keys_file,
        "--key-id",
        &old_id,
    ]);
    assert_eq!(code(&disabled), 0);
    let model = state(&[("x", Some("x 1")), ("y", Some("y 1"))]);
    let audit = json_of(&t.run("audit", &["--list-keys"]));
    assert_eq!(key_states(&audit), states(&[("x", "live"), ("y", "live")]));

    send(&rt, &stale, &t.topic, "x", Some("x stale"));
    let audit = t.run("audit", &["--list-keys"]);
    let r = json_of(&audit);
    assert_eq!(code(&audit), 1, "{r}");
    assert_eq!(key_states(&r), states(&[("x", "split"), ("y", "live")]));
    let repaired = t.run("repair", &["--apply"]);
    let r = json_of(&repaired);
    assert_eq!(code(&repaired), 0, "{r}");
    assert_eq!(r["values_written"], json!(1), "{r}");
    // One tombstone, the old form's: the keyset no longer enables its key,
    // so the rule alone would not reach it.
    assert_eq!(r["tombstones_written"], json!(1), "{r}");
    // Nothing is left under the disabled key: a restore holds every key
    // once, in the new form; a reader with the old key enabled again reads
    // the model.
    let current = load(&t.keys_file);
    for (wire, _) in restore_partition(&t.bootstrap, &t.topic, 0) {
        DeterministicDeserializer::new(Bytes, current.clone())
            .deserialize(&Context::new(&t.topic), Some(&wire))
            .expect("every key restored is in the new form");
    }
    let mut enabled_again = current.clone();
    enabled_again.enable(old_keys.primary()).unwrap();
    assert_eq!(
        replay(&t.bootstrap, &t.topic, 1, &values, &enabled_again),
        model
    );
    assert_eq!(
        restored(&t.bootstrap, &t.topic, 1, &values, &keys, &["x", "y"]).0,
        live(&model)
    );
    let audit = json_of(&t.run("audit", &["--list-keys"]));
    assert_eq!(audit["split_keys"], json!(0), "{audit}");

    // z: under the disabled key only.
    send(&rt, &stale, &t.topic, "z", Some("z 1"));
    let audit = t.run("audit", &["--list-keys"]);
    let r = json_of(&audit);
    assert_eq!(code(&audit), 1, "{r}");
    assert_eq!(
        key_states(&r),
        states(&[("x", "live"), ("y", "live"), ("z", "undecryptable")])
    );
}

/// Writes `writes` (plaintext key, value or delete) to a keyed topic by
/// the write rule, as the typed producer does (every form's records in
/// the plaintext key's partition), without waiting for each: many keys at
/// once.
fn produce_keyed(
    t: &KeyedTopic,
    values: &Keyset,
    keys: &Keyset,
    writes: &[(String, Option<String>)],
) {
    let key_ser = DeterministicSerializer::new(Bytes, keys.clone());
    let value_ser = EncryptingSerializer::new(Bytes, values.clone());
    let mut config = client_config(&t.bootstrap);
    config.set("enable.idempotence", "true");
    let p: FutureProducer = config.create().unwrap();
    let mut deliveries = Vec::new();
    for (k, v) in writes {
        let forms = key_ser
            .key_forms(&Context::new(&t.topic), k.as_bytes())
            .unwrap();
        let partition = forms.partition(t.partitions as u32).unwrap();
        let value = v.as_ref().map(|v| {
            value_ser
                .serialize(
                    &Context::new(&t.topic).with_key(k.as_bytes()),
                    Some(v.as_bytes()),
                )
                .unwrap()
                .unwrap()
        });
        for (key, value) in forms.writes(value.as_deref()) {
            let mut r: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(&t.topic).partition(partition).key(key);
            if let Some(v) = value {
                r = r.payload(v);
            }
            deliveries.push(p.send_result(r).map_err(|(e, _)| e).unwrap());
        }
    }
    for d in deliveries {
        futures_executor::block_on(d).unwrap().unwrap();
    }
}

/// When [`kill_midway`] kills, once the checkpoint shows a partition done
/// past its first chunk.
#[derive(Clone, Copy)]
enum Kill {
    /// This many milliseconds later, wherever the run is then.
    After(u64),
    /// This many milliseconds later, and then once a chunk is in flight:
    /// a partition's journal written after the checkpoint (the run writes
    /// a chunk's journal, produces it, and only then records it in the
    /// checkpoint).
    InsideChunk(u64),
}

/// Whether some journal of `checkpoint` was written after it: a chunk
/// journaled and not yet recorded done.
fn chunk_in_flight(checkpoint: &str) -> bool {
    let modified = |p: &std::path::Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let path = std::path::Path::new(checkpoint);
    let (Some(ck), Some(dir), Some(name)) = (
        modified(path),
        path.parent(),
        path.file_name().and_then(|n| n.to_str()),
    ) else {
        return false;
    };
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .any(|e| {
            let n = e.file_name();
            let n = n.to_string_lossy();
            n.starts_with(&format!("{name}.p"))
                && n.ends_with(".journal")
                && modified(&e.path()).is_some_and(|j| j > ck)
        })
}

/// A command on `t` with `extra`, spawned; killed (SIGKILL) as soon as its
/// checkpoint shows a partition done past its first chunk, as `kill` says.
/// Returns whether it was killed (not done first).
fn kill_midway(t: &KeyedTopic, cmd: &str, checkpoint: &str, extra: &[&str], kill: Kill) -> bool {
    let mut a = vec![
        cmd,
        "--json",
        "--quiet",
        "--bootstrap",
        &t.bootstrap,
        "--topic",
        &t.topic,
        "--keyset",
        &t.values_file,
        "--key-keyset",
        &t.keys_file,
        "--apply",
        "--checkpoint",
        checkpoint,
    ];
    a.extend_from_slice(extra);
    if cmd == "repair" && !extra.contains(&"--null-marker") {
        a.extend_from_slice(&["--null-marker", "empty"]);
    }
    let mut child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .env("TOMBSTONE_CRYPT_LOCK_DIR", common::process::lock_dir())
        .args(&a)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            assert!(status.success(), "{cmd} failed before the kill: {err}");
            return false;
        }
        let progressed = std::fs::read_to_string(checkpoint)
            .ok()
            .and_then(|text| first_json(&text))
            .is_some_and(|v| {
                v["partitions"]
                    .as_object()
                    .is_some_and(|ps| ps.values().any(|p| p["done"].as_i64() > Some(0)))
            });
        if progressed {
            let (Kill::After(ms) | Kill::InsideChunk(ms)) = kill;
            std::thread::sleep(Duration::from_millis(ms));
            if matches!(kill, Kill::InsideChunk(_)) {
                while !chunk_in_flight(checkpoint) {
                    if child.try_wait().unwrap().is_some() {
                        return false;
                    }
                    assert!(
                        std::time::Instant::now() < deadline,
                        "{cmd}: no chunk in flight seen"
                    );
                    std::thread::yield_now();
                }
            }
            child.kill().unwrap();
            let status = child.wait().unwrap();
            return status.code().is_none();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{cmd} made no progress"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// What a list of writes leaves: each key's last write.
fn model_of(writes: &[(String, Option<String>)]) -> State {
    writes
        .iter()
        .map(|(k, v)| (k.clone().into_bytes(), v.clone().map(String::into_bytes)))
        .collect()
}

/// The keys of a resumable-write test: `key-{i}` for `i` below `n`, every
/// seventh deleted.
fn many_keys(n: usize) -> Vec<(String, Option<String>)> {
    (0..n)
        .map(|i| {
            let v = (i % 7 != 3).then(|| format!("value {i}"));
            (format!("key-{i}"), v)
        })
        .collect()
}

/// `reencrypt --apply` after a rotation of both keysets, killed (SIGKILL)
/// in the middle at a different point each round (three rounds, and a
/// fourth inside a chunk if none landed there) and resumed with
/// `--resume`: the topic ends as one uninterrupted run leaves it (a
/// replaying consumer, a restored store and `audit --list-keys` equal the
/// model, the audit is clean, every value is under the new primary). The
/// resumed run writes the interrupted chunk again whole: records that had
/// landed are written twice, harmlessly.
#[test]
fn reencrypt_killed_and_resumed_ends_as_one_run() {
    if bootstrap().is_none() {
        return;
    }
    let mut again = 0;
    // Where a kill lands is chance: between two chunks, nothing is written
    // again. Three rounds; if none landed inside a chunk, a fourth waits
    // for one in flight.
    for (round, delay) in [0u64, 7, 23, 3].into_iter().enumerate() {
        let kill = match round {
            0..3 => Kill::After(delay),
            _ if again == 0 => Kill::InsideChunk(delay),
            _ => break,
        };
        let dir = Dir::new(&format!("resume-reencrypt-{round}"));
        let (t, values, keys) = keyed_topic(&dir, &format!("cli-resume-{round}"), 3);
        let writes = many_keys(600);
        produce_keyed(&t, &values, &keys, &writes);
        let model: State = model_of(&writes);
        let new_values = rotate(&t.values_file);
        rotate(&t.keys_file);
        let ck = dir.file(&format!("reencrypt-{round}.checkpoint"));
        assert!(
            kill_midway(
                &t,
                "reencrypt",
                &ck,
                &["--parallel", "2", "--chunk-records", "8"],
                kill
            ),
            "round {round}: the run ended before the kill; make its chunks smaller"
        );
        assert!(std::path::Path::new(&ck).exists(), "the checkpoint is left");
        // A new run refuses to overwrite it.
        let fresh = t.run("reencrypt", &["--apply", "--checkpoint", &ck]);
        assert_eq!(code(&fresh), 2);
        assert!(String::from_utf8_lossy(&fresh.stderr).contains("--resume"));
        let resumed = t.run("reencrypt", &["--apply", "--resume", &ck]);
        let r = json_of(&resumed);
        assert_eq!(
            code(&resumed),
            0,
            "round {round}: {r}\n{}",
            String::from_utf8_lossy(&resumed.stderr)
        );
        assert!(!std::path::Path::new(&ck).exists(), "removed when done");
        again += r["written_again"].as_u64().unwrap();
        eprintln!(
            "round {round} (killed {delay} ms after the first chunk): {} written again",
            r["written_again"]
        );
        t.agree(&model, &format!("round {round}, resumed"));
        let audit = json_of(&t.run("audit", &[]));
        let primary = new_values.primary().0.to_string();
        assert_eq!(
            audit["key_ids"]
                .as_object()
                .unwrap()
                .keys()
                .collect::<Vec<_>>(),
            vec![&primary],
            "every value under the new primary: {audit}"
        );
        let plan = json_of(&t.run("reencrypt", &[]));
        assert_eq!(plan["records_to_write"], json!(0), "{plan}");
    }
    assert!(again > 0, "no round wrote an interrupted chunk again");
}

/// A topic where a layer wrote deletes as encrypted empty values: 600
/// keys, every seventh deleted, every third then deleted by the broken
/// layer. Returns the topic and the model.
fn broken_deletes(dir: &Dir, name: &str) -> (KeyedTopic, State) {
    let (t, values, keys) = keyed_topic(dir, name, 2);
    let mut writes = many_keys(600);
    // A broken layer's deletes: the ciphertext of an empty value.
    let broken: Vec<(String, Option<String>)> = (0..600)
        .filter(|i| i % 3 == 0)
        .map(|i| (format!("key-{i}"), Some(String::new())))
        .collect();
    produce_keyed(&t, &values, &keys, &writes);
    produce_keyed(&t, &values, &keys, &broken);
    for (k, _) in &broken {
        let w = writes.iter_mut().find(|(x, _)| x == k).unwrap();
        w.1 = None;
    }
    let model = model_of(&writes);
    (t, model)
}

/// `repair --apply` on a topic where a layer wrote deletes as encrypted
/// empty values, killed in the middle and resumed: the broken keys end
/// deleted, the others as they were, and the audit is clean.
#[test]
fn repair_killed_and_resumed_ends_as_one_run() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("resume-repair");
    let (t, model) = broken_deletes(&dir, "cli-resume-repair");
    let ck = dir.file("repair.checkpoint");
    let small = ["--parallel", "1", "--chunk-records", "2"];
    assert!(
        kill_midway(&t, "repair", &ck, &small, Kill::After(3)),
        "the run ended before the kill; make its chunks smaller"
    );
    // Only the same run goes on from it: not over other partitions, not
    // with options that change the plan.
    for other in [&["--partitions", "0"][..], &["--null-marker", "none"][..]] {
        let refused = t.run(
            "repair",
            &[&["--apply", "--resume", &ck][..], other].concat(),
        );
        assert_eq!(code(&refused), 2, "{other:?}");
        let err = String::from_utf8_lossy(&refused.stderr);
        assert!(err.contains("not of this one"), "{other:?}: {err}");
    }
    let resumed = t.run("repair", &["--apply", "--resume", &ck]);
    let r = json_of(&resumed);
    assert_eq!(code(&resumed), 0, "{r}");
    assert!(!std::path::Path::new(&ck).exists(), "removed when done");
    t.agree(&model, "repair, resumed");
}

/// The keys of a journal (`CHECKPOINT.pN.journal`), decrypted under `keys`
/// (every form of a key gives its plaintext name).
fn journal_keys(path: &str, topic: &str, keys: &Keyset) -> Vec<String> {
    let Ok(b) = std::fs::read(path) else {
        return Vec::new();
    };
    let de = DeterministicDeserializer::new(Bytes, keys.clone());
    let u32_at = |i: usize| u32::from_be_bytes(b[i..i + 4].try_into().unwrap()) as usize;
    assert_eq!(&b[..4], b"TCJ2");
    let n = u32_at(4 + 32 + 4 + 8);
    let mut at = 4 + 32 + 4 + 8 + 4;
    let mut names = Vec::new();
    for _ in 0..n {
        let k = u32_at(at);
        let wire = b[at + 4..at + 4 + k].to_vec();
        at += 4 + k;
        let v = u32_at(at);
        at += 4 + if v == u32::MAX as usize { 0 } else { v };
        let name: Vec<u8> = de
            .deserialize(&Context::new(topic), Some(&wire))
            .unwrap()
            .unwrap();
        let name = String::from_utf8(name).unwrap();
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// A JSON file (a checkpoint's document, before the line of its
/// checksum).
fn json_of_file(path: &str) -> Value {
    first_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}

/// The JSON value `text` begins with.
fn first_json(text: &str) -> Option<Value> {
    serde_json::Deserializer::from_str(text)
        .into_iter::<Value>()
        .next()?
        .ok()
}

/// Writes `doc` as a checkpoint file, sealed with its checksum as the
/// command line seals it (`sha256:HEX` on a last line).
fn write_checkpoint(path: &str, doc: &Value) {
    use sha2::Digest as _;
    let text = doc.to_string();
    let hex: String = sha2::Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    std::fs::write(path, format!("{text}\nsha256:{hex}\n")).unwrap();
}

/// The model test of a resume: `reencrypt --apply`, `repair --apply` and
/// `reencrypt --apply --to-topic`, each stopped at a fixed point inside a
/// chunk (a key cut between its records), then random puts and deletes
/// by someone else (the keys of the unfinished journal among them; for the
/// copy, in its source and in its target), then `--resume`. A record the
/// run did not write decides its key; every other key ends as the run
/// meant: a replaying consumer, a restored store and `audit --list-keys`
/// equal the model, and the report names the keys left to others. The
/// negative control resumes as the command did before it checked first
/// (its journals written before it reads): a delete made meanwhile is
/// undone, and the model is not met; the read back after a run's writes
/// then finds it and fails the run, naming the keys.
#[test]
fn a_resume_lets_what_others_wrote_since_decide_their_keys() {
    use tombstone_crypt::record_key::murmur2_partition;
    if bootstrap().is_none() {
        return;
    }
    for (round, (cmd, copy, control)) in [
        ("reencrypt", false, false),
        ("reencrypt", false, true),
        ("repair", false, false),
        ("repair", false, true),
        ("reencrypt", true, false),
        ("reencrypt", true, true),
    ]
    .into_iter()
    .enumerate()
    {
        let what = format!(
            "{cmd}{} (control: {control})",
            if copy { " --to-topic" } else { "" }
        );
        let dir = Dir::new(&format!("resume-model-{round}"));
        let name = format!("cli-resume-model-{round}");
        let (t, mut model) = if cmd == "repair" {
            broken_deletes(&dir, &name)
        } else {
            let (t, values, keys) = keyed_topic(&dir, &name, 2);
            let writes = many_keys(300);
            produce_keyed(&t, &values, &keys, &writes);
            let model = model_of(&writes);
            rotate(&t.values_file);
            rotate(&t.keys_file);
            (t, model)
        };
        // The copy's target, with as many partitions.
        let target = copy.then(|| {
            let topic = fresh_topic(&format!("{name}-copy"));
            create_compacted(&t.bootstrap, &topic, t.partitions);
            KeyedTopic {
                bootstrap: t.bootstrap.clone(),
                topic,
                partitions: t.partitions,
                values_file: t.values_file.clone(),
                keys_file: t.keys_file.clone(),
            }
        });
        let to_topic: Vec<&str> = match &target {
            Some(target) => vec!["--to-topic", &target.topic],
            None => vec![],
        };
        let ck = dir.file("run.checkpoint");
        // Two chunks of eight records acknowledged, and three of the third:
        // a key's records cut in the middle.
        let mut args = vec![
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "19",
        ];
        args.extend_from_slice(&to_topic);
        let stopped = t.run(cmd, &args);
        assert!(
            stopped.status.code().is_none(),
            "{what}: not stopped: {stopped:?}"
        );
        let (values, keys) = (load(&t.values_file), load(&t.keys_file));
        let written = target.as_ref().unwrap_or(&t);
        let journaled = journal_keys(&format!("{ck}.p0.journal"), &written.topic, &keys);
        assert!(!journaled.is_empty(), "{what}: no unfinished journal");
        // Someone else's writes: each journaled key deleted or given a new
        // value (both kinds at least once), and random keys besides.
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ round as u64);
        let mut others: Vec<(String, Option<String>)> = Vec::new();
        for (i, k) in journaled.iter().enumerate() {
            let delete = i == 0 || (i > 1 && rng.below(2) == 0);
            others.push((k.clone(), (!delete).then(|| format!("{k} by others"))));
        }
        for i in 0..30 {
            let k = format!("key-{}", rng.below(320));
            let v = (rng.below(3) != 0).then(|| format!("{k} by others {i}"));
            others.push((k, v));
        }
        produce_keyed(written, &values, &keys, &others);
        // The copy's source changes too: a delete and a new value it must
        // carry over (unless others wrote the key in the target).
        let mut source_changes: Vec<(String, Option<String>)> = Vec::new();
        if copy {
            for i in 0..10 {
                let k = format!("key-{}", rng.below(300));
                source_changes.push((k, (i % 2 == 0).then(|| format!("source {i}"))));
            }
            produce_keyed(&t, &values, &keys, &source_changes);
        }
        for (k, v) in source_changes.iter() {
            model.insert(k.clone().into_bytes(), v.clone().map(String::into_bytes));
        }
        // Others' writes decide their keys in the partitions the run had
        // begun to write; in the copy's target, the source's keys of a
        // partition it had not begun are copied as a run begun now would
        // (the checkpoint names no end of it to read from).
        let begun: Vec<u32> = json_of_file(&ck)["partitions"]
            .as_object()
            .unwrap()
            .keys()
            .map(|p| p.parse().unwrap())
            .collect();
        let source: Vec<Vec<u8>> = model.keys().cloned().collect();
        for (k, v) in &others {
            let p = murmur2_partition(k.as_bytes(), t.partitions as u32) as u32;
            if !copy || begun.contains(&p) || !source.contains(&k.clone().into_bytes()) {
                model.insert(k.clone().into_bytes(), v.clone().map(String::into_bytes));
            }
        }
        let mut resume = vec!["--apply", "--resume", &ck];
        resume.extend_from_slice(&to_topic);
        if control {
            resume.push("--resume-writes-first");
        }
        let resumed = t.run(cmd, &resume);
        if control {
            // What others wrote meanwhile undone: the model is not met,
            // and the read back after the run's writes finds it (exit 2,
            // the keys named).
            let got = written.replay();
            let undone: Vec<&String> = journaled
                .iter()
                .filter(|k| got.get(k.as_bytes()) != model.get(k.as_bytes()))
                .collect();
            assert!(!undone.is_empty(), "{what}: the control met the model");
            let err = String::from_utf8_lossy(&resumed.stderr);
            assert_eq!(code(&resumed), 2, "{what}: the control passed: {err}");
            assert!(err.contains("the run wrote over"), "{what}: {err}");
            continue;
        }
        let r = json_of(&resumed);
        assert_eq!(
            code(&resumed),
            0,
            "{what}: {r}\n{}",
            String::from_utf8_lossy(&resumed.stderr)
        );
        assert!(
            !std::path::Path::new(&ck).exists(),
            "{what}: removed when done"
        );
        assert!(
            r["written_by_others"]["keys"].as_u64() > Some(0),
            "{what}: {r}"
        );
        assert_eq!(
            r["written_by_others"]["journaled_keys_left"].as_u64(),
            Some(journaled.len() as u64),
            "{what}: {r}"
        );
        let listed: Vec<String> = r["written_by_others"]["listed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| String::from_utf8(unhex(l["key"].as_str().unwrap())).unwrap())
            .collect();
        for k in &journaled {
            assert!(listed.contains(k), "{what}: {k} not named: {r}");
        }
        written.agree(&model, &what);
    }
}

/// A run stopped inside a chunk, then its checkpoint pointed elsewhere:
/// another cluster's id, the topic deleted and created again (with more
/// records than before, and with fewer). Each `--resume` refuses with a
/// clear error before it writes anything, and keeps the checkpoint and the
/// journal.
#[test]
fn a_resume_elsewhere_refuses_and_keeps_its_files() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("resume-elsewhere");
    let (t, values, keys) = keyed_topic(&dir, "cli-resume-elsewhere", 1);
    let writes = many_keys(60);
    produce_keyed(&t, &values, &keys, &writes);
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let ck = dir.file("run.checkpoint");
    let journal = format!("{ck}.p0.journal");
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--fail-after-records",
            "11",
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    let refused_with = |why: &str, extra: &[&str]| {
        let ends = end_offsets(&t.bootstrap, &t.topic, 1);
        let out = t.run(
            "reencrypt",
            &[&["--apply", "--resume", &ck][..], extra].concat(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "{why}: {err}");
        assert!(
            std::path::Path::new(&ck).exists(),
            "{why}: the checkpoint kept"
        );
        assert!(
            std::path::Path::new(&journal).exists(),
            "{why}: the journal kept"
        );
        assert_eq!(
            end_offsets(&t.bootstrap, &t.topic, 1),
            ends,
            "{why}: nothing written"
        );
        err.into_owned()
    };
    let refused = |why: &str| refused_with(why, &[]);
    // Another cluster.
    let original = std::fs::read_to_string(&ck).unwrap();
    let mut other = json_of_file(&ck);
    assert!(
        other["cluster"].is_string(),
        "the broker gives its id: {other}"
    );
    other["cluster"] = json!("another-cluster");
    write_checkpoint(&ck, &other);
    let err = refused("another cluster");
    assert!(err.contains("cluster another-cluster"), "{err}");
    // One byte of the real checkpoint changed (its `done` moved on, as
    // an edit by hand or a disk fault would): refused, nothing written,
    // the file as it was (every single-byte change: checkpoint.rs's unit
    // test).
    let at = original.find("\"done\":").unwrap() + "\"done\":".len();
    let mut changed = original.clone().into_bytes();
    changed[at] = if changed[at] == b'9' { b'1' } else { b'9' };
    std::fs::write(&ck, &changed).unwrap();
    let err = refused("a changed byte");
    assert!(err.contains("its checksum does not verify"), "{err}");
    assert_eq!(std::fs::read(&ck).unwrap(), changed, "the file as it was");
    std::fs::write(&ck, &original).unwrap();
    // The topic deleted and created again: more records than before (the
    // record before the run's first write is another one), then fewer.
    for (round, n) in [(0, 120), (1, 2)] {
        recreate_compacted(&t.bootstrap, &t.topic, 1);
        let (values, keys) = (load(&t.values_file), load(&t.keys_file));
        produce_keyed(&t, &values, &keys, &many_keys(n));
        // Another topic id.
        let err = refused(&format!("created again ({n} keys)"));
        assert!(err.contains("is not the topic the run wrote"), "{err}");
        // By its records alone.
        let err = refused_with(
            &format!("created again ({n} keys), by its records"),
            &["--without-topic-id"],
        );
        assert!(err.contains("not the partition the run wrote"), "{err}");
        let why = if round == 0 {
            "is not the one that was there"
        } else {
            "before the run's first write"
        };
        assert!(err.contains(why), "{err}");
    }
    // A copy into an empty target, stopped after a chunk; the target
    // deleted and created again, empty: it holds none of the run's
    // acknowledged records, and the resume refuses rather than go on from
    // the recorded offset (the copy's first chunk would be lost).
    let (values, keys) = (load(&t.values_file), load(&t.keys_file));
    let source = fresh_topic("cli-resume-elsewhere-source");
    create_compacted(&t.bootstrap, &source, 1);
    let s = KeyedTopic {
        topic: source,
        bootstrap: t.bootstrap.clone(),
        partitions: 1,
        values_file: t.values_file.clone(),
        keys_file: t.keys_file.clone(),
    };
    produce_keyed(&s, &values, &keys, &many_keys(60));
    let target = fresh_topic("cli-resume-elsewhere-target");
    create_compacted(&t.bootstrap, &target, 1);
    let ck = dir.file("copy.checkpoint");
    let copy = ["--to-topic", target.as_str()];
    let mut args = vec!["--apply", "--checkpoint", &ck, "--chunk-records", "8"];
    args.extend_from_slice(&["--fail-after-records", "11"]);
    args.extend_from_slice(&copy);
    let stopped = s.run("reencrypt", &args);
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    recreate_compacted(&t.bootstrap, &target, 1);
    let out = s.run(
        "reencrypt",
        &[&["--apply", "--resume", &ck][..], &copy].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("is not the topic the run wrote"), "{err}");
    let copy = ["--to-topic", target.as_str(), "--without-topic-id"];
    let out = s.run(
        "reencrypt",
        &[&["--apply", "--resume", &ck][..], &copy].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("holds none of the"), "{err}");
    assert!(std::path::Path::new(&ck).exists(), "the checkpoint kept");
    // The same target once someone wrote there: one record, then more
    // records than the run had written. Each resume refuses before it
    // writes (before, both went on from the recorded offset and the
    // copy's first chunk was never copied).
    let t2 = KeyedTopic {
        topic: target.clone(),
        bootstrap: t.bootstrap.clone(),
        partitions: 1,
        values_file: t.values_file.clone(),
        keys_file: t.keys_file.clone(),
    };
    for (n, why) in [
        (1, "is not the run's acknowledged record"),
        (60, "is not the run's acknowledged record"),
    ] {
        produce_keyed(&t2, &values, &keys, &many_keys(n));
        let ends = end_offsets(&t.bootstrap, &target, 1);
        let out = s.run(
            "reencrypt",
            &[&["--apply", "--resume", &ck][..], &copy].concat(),
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(code(&out), 2, "a foreign record ({n}): {err}");
        assert!(err.contains("not the partition the run wrote"), "{err}");
        assert!(err.contains(why), "{err}");
        assert!(std::path::Path::new(&ck).exists(), "the checkpoint kept");
        assert_eq!(
            end_offsets(&t.bootstrap, &target, 1),
            ends,
            "nothing written"
        );
    }
    // A copy whose source is deleted and created again, with as many
    // records: refused too (a resume would go on from the recorded source
    // offset, and the new source's records before it would never be
    // copied).
    let target = fresh_topic("cli-resume-elsewhere-target2");
    create_compacted(&t.bootstrap, &target, 1);
    let ck = dir.file("copy2.checkpoint");
    let copy = ["--to-topic", target.as_str()];
    let mut args = vec!["--apply", "--checkpoint", &ck, "--chunk-records", "8"];
    args.extend_from_slice(&["--fail-after-records", "11"]);
    args.extend_from_slice(&copy);
    let stopped = s.run("reencrypt", &args);
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    recreate_compacted(&t.bootstrap, &s.topic, 1);
    let others: Vec<(String, Option<String>)> = many_keys(60)
        .into_iter()
        .map(|(k, v)| (k, v.map(|v| format!("{v} again"))))
        .collect();
    produce_keyed(&s, &values, &keys, &others);
    let ends = end_offsets(&t.bootstrap, &target, 1);
    let out = s.run(
        "reencrypt",
        &[&["--apply", "--resume", &ck][..], &copy].concat(),
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 2, "a source created again: {err}");
    assert!(
        err.contains("not the partition the run copied from"),
        "{err}"
    );
    assert!(std::path::Path::new(&ck).exists(), "the checkpoint kept");
    assert_eq!(
        end_offsets(&t.bootstrap, &target, 1),
        ends,
        "nothing written"
    );
}

/// Two `reencrypt --apply` runs with different checkpoint files on one
/// topic: one on partitions `0-1` (stopped with SIGSTOP once it holds its
/// partition locks, so it is mid-run), then one on `1-2`: refused (exit 2)
/// with an error naming partition 1, nothing written, no checkpoint left;
/// one on partition `2` alone goes ahead meanwhile. Once the first run
/// finishes, `1-2` runs.
#[test]
fn runs_on_overlapping_partitions_do_not_write_one_partition_at_once() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("partition-locks");
    let (t, values, keys) = keyed_topic(&dir, "cli-partition-locks", 3);
    produce_keyed(&t, &values, &keys, &many_keys(300));
    rotate(&t.values_file);
    let locks = dir.file("locks");
    let (a, b, c) = (
        dir.file("a.checkpoint"),
        dir.file("b.checkpoint"),
        dir.file("c.checkpoint"),
    );
    let run = |ck: &str, parts: &str| {
        t.run(
            "reencrypt",
            &[
                "--apply",
                "--checkpoint",
                ck,
                "--partitions",
                parts,
                "--lock-dir",
                &locks,
            ],
        )
    };
    let signal = |pid: u32, sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success());
    };
    // The first run, stopped once it holds partition 1's lock (its file
    // names the holder once it is locked). A run that finished first
    // (a fast machine) proves nothing: try again on the next partitions'
    // worth of time, a few times.
    let mut stopped = None;
    for _ in 0..5 {
        let args = t.args(
            "reencrypt",
            &[
                "--apply",
                "--checkpoint",
                &a,
                "--partitions",
                "0-1",
                "--lock-dir",
                &locks,
            ],
        );
        let mut child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
            .args(&args)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        let held = loop {
            let locked = std::fs::read_dir(&locks).ok().is_some_and(|entries| {
                entries.filter_map(Result::ok).any(|e| {
                    e.file_name().to_string_lossy().ends_with(".p1.lock")
                        && std::fs::read_to_string(e.path()).is_ok_and(|h| h.contains("pid"))
                })
            });
            if locked {
                signal(child.id(), "-STOP");
                break child.try_wait().unwrap().is_none();
            }
            if child.try_wait().unwrap().is_some() || std::time::Instant::now() > deadline {
                break false;
            }
            std::thread::sleep(Duration::from_millis(2));
        };
        if held {
            stopped = Some(child);
            break;
        }
        signal(child.id(), "-CONT");
        let _ = child.wait();
        let _ = std::fs::remove_file(&a);
        produce_keyed(&t, &values, &keys, &many_keys(300));
        rotate(&t.values_file);
    }
    /// The stopped run, let go and ended whatever the test does.
    struct Stopped(std::process::Child);
    impl Drop for Stopped {
        fn drop(&mut self) {
            let _ = Command::new("kill")
                .args(["-CONT", &self.0.id().to_string()])
                .status();
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut first = Stopped(stopped.expect("the first run was never caught holding its locks"));
    let ends = end_offsets(&t.bootstrap, &t.topic, 3);
    let out = run(&b, "1-2");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(&out), 2, "an overlapping run: {err}");
    assert!(
        err.contains("partition 1 of") && err.contains("being written by another run"),
        "{err}"
    );
    assert!(
        err.contains(&format!("pid {}", first.0.id())),
        "names the holder: {err}"
    );
    assert!(!std::path::Path::new(&b).exists(), "no checkpoint left");
    assert_eq!(
        end_offsets(&t.bootstrap, &t.topic, 3),
        ends,
        "nothing written"
    );
    // A run on partition 2 alone does not overlap.
    let out = run(&c, "2");
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    signal(first.0.id(), "-CONT");
    assert!(first.0.wait().unwrap().success(), "the first run finishes");
    let out = run(&b, "1-2");
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    // Nothing left behind: every lock removed as its run let it go.
    let left: Vec<_> = std::fs::read_dir(&locks).unwrap().collect();
    assert!(left.is_empty(), "{left:?}");
}

/// A key with a value in two partitions (as after partitions were added,
/// or under writers that choose partitions differently) is a finding of
/// `audit` (exit 1), counted once; a key live in one partition and
/// deleted in the other is not.
#[test]
fn audit_reports_a_key_live_in_more_than_one_partition() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("several-partitions");
    let topic = fresh_topic("cli-several-partitions");
    create_compacted(&bootstrap, &topic, 2);
    let (file, keyset) = new_keyset(&dir, "values.json");
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let p: FutureProducer = client_config(&bootstrap).create().unwrap();
    let write = |key: &str, partition: i32, live: bool| {
        let v = ser
            .serialize(
                &Context::new(&topic).with_key(key.as_bytes()),
                Some(b"v".as_slice()),
            )
            .unwrap()
            .unwrap();
        let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic)
            .partition(partition)
            .key(key.as_bytes());
        if live {
            r = r.payload(&v[..]);
        }
        futures_executor::block_on(p.send(r, Duration::from_secs(30))).unwrap();
    };
    let audit = || {
        let out = cli(&[
            "audit",
            "--json",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &file,
        ]);
        (code(&out), json_of(&out))
    };
    write("moved", 0, true);
    write("stays", 0, true);
    write("gone", 0, true);
    write("gone", 1, false);
    let (c, r) = audit();
    assert_eq!((c, &r["keys_in_several_partitions"]), (0, &json!(0)), "{r}");
    write("moved", 1, true);
    let (c, r) = audit();
    assert_eq!((c, &r["keys_in_several_partitions"]), (1, &json!(1)), "{r}");
}

/// Two processes split one topic between them (`--partitions`), each with
/// its own default checkpoint in its directory: together they leave the
/// topic as one run would.
#[test]
fn two_processes_split_a_topic_with_partitions() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("split-partitions");
    let (t, values, keys) = keyed_topic(&dir, "cli-split-partitions", 4);
    let writes = many_keys(400);
    produce_keyed(&t, &values, &keys, &writes);
    let model: State = model_of(&writes);
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let spawn = |parts: &str, cwd: &std::path::Path| {
        std::fs::create_dir_all(cwd).unwrap();
        Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
            .current_dir(cwd)
            .args([
                "reencrypt",
                "--json",
                "--quiet",
                "--bootstrap",
                &t.bootstrap,
                "--topic",
                &t.topic,
                "--keyset",
                &t.values_file,
                "--key-keyset",
                &t.keys_file,
                "--apply",
                "--partitions",
                parts,
            ])
            .output()
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| spawn("0,1", &dir.0.join("a")).unwrap());
        let b = s.spawn(|| spawn("2-3", &dir.0.join("b")).unwrap());
        (a.join().unwrap(), b.join().unwrap())
    });
    for (out, read) in [(&a, [0, 1]), (&b, [2, 3])] {
        let r = json_of(out);
        assert_eq!(
            code(out),
            0,
            "{r}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(r["after"]["partitions_read"], json!(read), "{r}");
        assert!(r["written"].as_u64().unwrap() > 0, "{r}");
    }
    assert_eq!(
        std::fs::read_dir(dir.0.join("a")).unwrap().count()
            + std::fs::read_dir(dir.0.join("b")).unwrap().count(),
        0,
        "each checkpoint removed when its run is done"
    );
    t.agree(&model, "split between two processes");
    let bad = t.run("audit", &["--partitions", "3-9"]);
    assert_eq!(code(&bad), 2);
    assert!(String::from_utf8_lossy(&bad.stderr).contains("does not have"));
}

/// On the compacting broker (Apache Kafka, its segments rolled for the
/// log cleaner by `wait_compacted`), a
/// `reencrypt --apply` stopped at a fixed point, between a key's old-form
/// tombstone and its value (the fifth key's first record acknowledged, its
/// second never sent), then compacted: the old form's value is gone from
/// the topic, and only the journal still holds the key's re-encrypted
/// value. Resumed, the topic equals the model. The negative control
/// deletes the journal before the resume: the resume refuses (exit 2) and
/// writes nothing, rather than leave the key deleted.
#[test]
fn reencrypt_stopped_between_a_keys_records_resumes_on_a_compacting_broker() {
    let bootstrap = compacting_bootstrap();
    for control in [false, true] {
        let dir = Dir::new(&format!("resume-compacting-{control}"));
        let topic = fresh_topic("cli-resume-compacting");
        create_compacted(&bootstrap, &topic, 1);
        let (values_file, values) = new_keyset(&dir, "values.json");
        let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
        let t = KeyedTopic {
            bootstrap: bootstrap.clone(),
            topic: topic.clone(),
            partitions: 1,
            values_file,
            keys_file,
        };
        let writes = many_keys(40);
        produce_keyed(&t, &values, &keys, &writes);
        let model: State = model_of(&writes);
        rotate(&t.values_file);
        rotate(&t.keys_file);
        let ck = dir.file("run.checkpoint");
        // Four keys (eight records) in the first chunk, then the fifth
        // key's old-form tombstone.
        let stopped = t.run(
            "reencrypt",
            &[
                "--apply",
                "--checkpoint",
                &ck,
                "--chunk-records",
                "8",
                "--parallel",
                "1",
                "--fail-after-records",
                "9",
            ],
        );
        assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
        wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
        if control {
            std::fs::remove_file(format!("{ck}.p0.journal")).unwrap();
        }
        let resumed = t.run("reencrypt", &["--apply", "--resume", &ck]);
        if control {
            // Without the journal the cut key would be lost: refused.
            let err = String::from_utf8_lossy(&resumed.stderr);
            assert_eq!(code(&resumed), 2, "{err}");
            assert!(err.contains("is missing"), "{err}");
            let got = t.replay();
            assert!(
                got.get(&b"key-5"[..]).cloned().flatten().is_none(),
                "nothing written: {err}"
            );
        } else {
            let r = json_of(&resumed);
            assert_eq!(code(&resumed), 0, "{r}");
            assert_eq!(r["written_again"], json!(8), "{r}");
            t.agree(
                &model,
                "stopped between a key's records, compacted, resumed",
            );
        }
    }
}

/// On the compacting broker, a `reencrypt --apply` stopped after its first
/// chunk; then someone else writes the first ten keys again, and the
/// broker compacts the run's first and last acknowledged records (the
/// checkpoint's anchors) away under those newer records of their keys.
/// That is the partition the run wrote: the resume goes on (exit 0), the
/// others' writes stand, and the topic equals the model.
#[test]
fn a_resume_accepts_its_records_compacted_under_later_ones_on_a_compacting_broker() {
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new("resume-anchors-compacted");
    let topic = fresh_topic("cli-resume-anchors");
    create_compacted(&bootstrap, &topic, 1);
    let (values_file, values) = new_keyset(&dir, "values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
    let t = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    let writes = many_keys(40);
    produce_keyed(&t, &values, &keys, &writes);
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let ck = dir.file("run.checkpoint");
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "9",
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    let progress = json_of_file(&ck)["partitions"]["0"].clone();
    let anchors: Vec<i64> = ["first", "last"]
        .iter()
        .map(|k| progress[*k]["offset"].as_i64().unwrap())
        .collect();
    let others: Vec<(String, Option<String>)> = (0..10)
        .map(|i| (format!("key-{i}"), Some(format!("theirs {i}"))))
        .collect();
    produce_keyed(&t, &load(&t.values_file), &load(&t.keys_file), &others);
    let compacted = wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    for a in &anchors {
        assert!(
            !compacted.records.iter().any(|r| r.offset == *a),
            "the run's record at offset {a} is still there: the test proves nothing"
        );
    }
    let resumed = t.run("reencrypt", &["--apply", "--resume", &ck]);
    let r = json_of(&resumed);
    assert_eq!(code(&resumed), 0, "{r}");
    let mut model = model_of(&writes);
    model.extend(model_of(&others));
    t.agree(&model, "anchors compacted under others' writes, resumed");
}

/// `inspect --fields`: a JSON record's encrypted fields by path, with key
/// ids and, given the keyset and where the record lives, whether each
/// authenticates at its path (a field moved to another path does not,
/// and the exit code says so); never a field's plaintext.
#[test]
fn inspect_lists_a_json_records_encrypted_fields_and_where_they_authenticate() {
    use serde::{Deserialize, Serialize};
    use tombstone_crypt::field::{Encrypted, FieldEncrypting};
    use tombstone_crypt::{Context, Json, Serializer as _};

    #[derive(Serialize, Deserialize)]
    struct Customer {
        id: u64,
        ssn: Encrypted<String>,
        phone: Option<Encrypted<String>>,
        cards: Vec<Encrypted<String>>,
    }
    let dir = Dir::new("inspect-fields");
    let f = dir.file("keyset.json");
    assert_eq!(code(&cli(&["keyset", "new", "--out", &f])), 0);
    let keyset = load(&f);
    let codec = FieldEncrypting::new(Json::<Customer>::new(), keyset.clone());
    let ctx = Context::new("customers").with_key(b"c-1");
    let record = Customer {
        id: 1,
        ssn: Encrypted::new("secret-ssn-078".into()),
        phone: None,
        cards: vec![
            Encrypted::new("secret-card-1".into()),
            Encrypted::new("secret-card-2".into()),
        ],
    };
    let bytes = codec.serialize(&ctx, Some(&record)).unwrap().unwrap();
    let text = String::from_utf8(bytes).unwrap();
    let args = |t: &str| {
        vec![
            "inspect".to_owned(),
            "--json".to_owned(),
            "--fields".to_owned(),
            "--keyset".to_owned(),
            f.clone(),
            "--topic".to_owned(),
            "customers".to_owned(),
            "--record-key".to_owned(),
            "c-1".to_owned(),
            t.to_owned(),
        ]
    };
    let run = |t: &str| {
        let a = args(t);
        cli(&a.iter().map(String::as_str).collect::<Vec<_>>())
    };
    let out = run(&text);
    assert_eq!(code(&out), 0);
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!printed.contains("secret-"), "{printed}");
    let r = json_of(&out);
    let paths: Vec<&str> = r["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    // In the order of the record's text.
    assert_eq!(paths, ["/ssn", "/cards/0", "/cards/1"]);
    for f in r["fields"].as_array().unwrap() {
        assert_eq!(f["key_id"], json!(keyset.primary().0));
        assert_eq!(f["authenticates"], json!(true), "{f}");
    }
    // Swap the two cards: both are found, neither authenticates, exit 1
    // (the record written again by serde_json, its keys sorted).
    let mut v: Value = serde_json::from_str(&text).unwrap();
    let a = v["cards"][0].clone();
    v["cards"][0] = v["cards"][1].clone();
    v["cards"][1] = a;
    let out = run(&v.to_string());
    assert_eq!(code(&out), 1);
    let r = json_of(&out);
    let auth: Vec<&Value> = r["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| &f["authenticates"])
        .collect();
    assert_eq!(auth, [&json!(false), &json!(false), &json!(true)]);
    // Another record key: nothing authenticates.
    let mut a = args(&text);
    a[8] = "c-2".into();
    let out = cli(&a.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(code(&out), 1);
}

/// `max.in.flight` is librdkafka's alias of
/// `max.in.flight.requests.per.connection`: given both, librdkafka keeps
/// whichever rdkafka's map hands it last (a HashMap's order, random per
/// process), so `=1` and `max.in.flight=5` with idempotence off may run
/// with 5 requests in flight, where a retry can land a value after its
/// key's later tombstone. Every one given must be 1: else the command
/// refuses (exit 2) as it refuses idempotence off with more than one in
/// flight, and writes nothing.
#[test]
fn both_in_flight_aliases_with_different_values_are_refused() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("in-flight-aliases");
    let (t, values, keys) = keyed_topic(&dir, "in-flight-aliases", 1);
    produce_keyed(&t, &values, &keys, &many_keys(6));
    rotate(&t.values_file);
    let ends = end_offsets(&t.bootstrap, &t.topic, 1);
    let out = t.run(
        "reencrypt",
        &[
            "--apply",
            "-X",
            "enable.idempotence=false",
            "-X",
            "max.in.flight.requests.per.connection=1",
            "-X",
            "max.in.flight=5",
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        code(&out),
        2,
        "written under an unordered producer: {stderr}"
    );
    assert_eq!(end_offsets(&t.bootstrap, &t.topic, 1), ends);
}

// ---------------------------------------------------------------------
// A resume into a topic deleted and created again.
//
// Apache Kafka deletes the one topic named (a new one of that name gets
// another topic id).
// ---------------------------------------------------------------------

/// Deletes `topic` and creates it again, compacted, with `partitions`
/// (Apache Kafka deletes a topic in the background: the name is taken
/// until it has, a few hundred milliseconds).
fn recreate_compacted(bootstrap: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = client_config(bootstrap).create().unwrap();
    for r in
        futures_executor::block_on(admin.delete_topics(&[topic], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1))
            .set("cleanup.policy", "compact");
        let created =
            futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap();
        match created.into_iter().next().unwrap() {
            Ok(_) => {
                common::compacting::wait_compact_policy(bootstrap, topic);
                break;
            }
            Err((
                _,
                tombstone_crypt::kafka::rdkafka::types::RDKafkaErrorCode::TopicAlreadyExists,
            )) if std::time::Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(e) => panic!("create {topic} again: {e:?}"),
        }
    }
}

/// On the compacting broker: a copy (`--to-topic`) into an empty target,
/// stopped after its first chunk (key-0..key-7 at target offsets 0..7;
/// anchors: key-0 at 0, key-7 at 7). The target is deleted and created
/// again, and its application writes key-0 nine times, then key-7 once:
/// compaction leaves key-0 at 8 and key-7 at 9, so each anchor is "gone
/// under a later record of its key" and there is no mark (the target was
/// empty). Going on from the recorded offset would never copy key-1,
/// key-2, key-4, key-5, key-6 (live in the source): none of the run's
/// records is left and nothing from before its first write proves the
/// partition, so the resume refuses (exit 2), writing nothing.
#[test]
fn a_resume_into_a_recreated_target_whose_writer_rewrote_the_anchor_keys_is_refused_on_a_compacting_broker(
) {
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new("recreated-recreated-target");
    let (values_file, values) = new_keyset(&dir, "values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
    let source = fresh_topic("recreated-source");
    create_compacted(&bootstrap, &source, 1);
    let s = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: source.clone(),
        partitions: 1,
        values_file: values_file.clone(),
        keys_file: keys_file.clone(),
    };
    let writes = many_keys(60);
    produce_keyed(&s, &values, &keys, &writes);
    let target = fresh_topic("recreated-target");
    create_compacted(&bootstrap, &target, 1);
    let t = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: target.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    let ck = dir.file("copy.checkpoint");
    let stopped = s.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "11",
            "--to-topic",
            &target,
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    let progress = json_of_file(&ck)["partitions"]["0"].clone();
    let anchors: Vec<i64> = ["first", "last"]
        .iter()
        .map(|k| progress[*k]["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(anchors, [0, 7], "{progress}");
    assert!(progress["mark"].is_null(), "{progress}");
    recreate_compacted(&bootstrap, &target, 1);
    let mut theirs: Vec<(String, Option<String>)> = (0..9)
        .map(|i| ("key-0".to_owned(), Some(format!("theirs {i}"))))
        .collect();
    theirs.push(("key-7".to_owned(), Some("theirs".to_owned())));
    produce_keyed(&t, &values, &keys, &theirs);
    let compacted = wait_compacted(&bootstrap, &target, Duration::from_secs(60));
    for a in &anchors {
        assert!(
            !compacted.records.iter().any(|r| r.offset == *a),
            "offset {a} still there: the test proves nothing"
        );
    }
    // The broker's id of the target is another: refused at once.
    let out = s.run(
        "reencrypt",
        &["--apply", "--resume", &ck, "--to-topic", &target],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("is not the topic the run wrote"), "{err}");
    // Told by its records alone (the id not asked), refused too.
    let out = s.run(
        "reencrypt",
        &[
            "--apply",
            "--resume",
            &ck,
            "--to-topic",
            &target,
            "--without-topic-id",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    let got = t.replay();
    let mut model = model_of(&writes);
    model.extend(model_of(&theirs));
    let lost: Vec<String> = model
        .iter()
        .filter(|(k, v)| v.is_some() && got.get(*k) != Some(v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert_eq!(
        code(&out),
        2,
        "the resume into a target created again went on (exit {:?}); live keys never copied: {lost:?}; {err}",
        code(&out)
    );
    assert!(err.contains("not the partition the run wrote"), "{err}");
}

/// The same on the topic itself. On the compacting broker: `reencrypt
/// --apply` of a topic of 40 keys (values keyset rotated), stopped in its
/// second chunk (journal: key-9, key-11..key-16, key-18; anchors key-0 at
/// 40 and key-8 at 47; mark key-39 at 39). The topic is deleted and created
/// again; its application writes key-14 and deletes it, then writes key-0
/// fifty times and key-8 once: compaction leaves nothing at 39, 40 and 47,
/// each anchor's key is written later, and the record at the mark's offset
/// is not there, with no later record of its key. Writing the journal
/// there would make key-14, deleted in this topic, live again with the old
/// topic's value: the resume refuses (exit 2).
#[test]
fn a_resume_into_the_topic_created_again_never_brings_back_a_deleted_key_on_a_compacting_broker() {
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new("recreated-recreated-same");
    let topic = fresh_topic("recreated-recreated-same");
    create_compacted(&bootstrap, &topic, 1);
    let (values_file, values) = new_keyset(&dir, "values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
    let t = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    produce_keyed(&t, &values, &keys, &many_keys(40));
    rotate(&t.values_file);
    let ck = dir.file("run.checkpoint");
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "11",
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    let progress = json_of_file(&ck)["partitions"]["0"].clone();
    let offsets: Vec<i64> = ["first", "last", "mark"]
        .iter()
        .map(|k| progress[*k]["offset"].as_i64().unwrap())
        .collect();
    assert_eq!(offsets, [40, 47, 39], "{progress}");
    assert!(journal_keys(&format!("{ck}.p0.journal"), &topic, &keys).contains(&"key-14".to_owned()));
    recreate_compacted(&bootstrap, &topic, 1);
    let (values, keys) = (load(&t.values_file), load(&t.keys_file));
    let mut theirs: Vec<(String, Option<String>)> = vec![
        ("key-14".to_owned(), Some("theirs 14".to_owned())),
        ("key-14".to_owned(), None),
    ];
    theirs.extend((0..50).map(|i| ("key-0".to_owned(), Some(format!("theirs {i}")))));
    theirs.push(("key-8".to_owned(), Some("theirs 8".to_owned())));
    produce_keyed(&t, &values, &keys, &theirs);
    let compacted = wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    for a in &offsets {
        assert!(
            !compacted.records.iter().any(|r| r.offset == *a),
            "offset {a} still there: the test proves nothing"
        );
    }
    // The broker's id of the topic is another: refused at once.
    let by_id = t.run("reencrypt", &["--apply", "--resume", &ck]);
    let err = String::from_utf8_lossy(&by_id.stderr);
    assert_eq!(code(&by_id), 2, "{err}");
    assert!(err.contains("is not the topic the run wrote"), "{err}");
    // Told by its records alone (the id not asked).
    let out = t.run(
        "reencrypt",
        &["--apply", "--resume", &ck, "--without-topic-id"],
    );
    let got = t.replay();
    let back = got.get(&b"key-14"[..]).cloned().flatten();
    assert!(
        code(&out) == 2 || back.is_none(),
        "the resume into the topic created again went on (exit {:?}) and key-14, deleted there, is live again: {:?}",
        code(&out),
        back.map(|v| String::from_utf8_lossy(&v).into_owned())
    );
}

/// Two partitions, each ending
/// with a tombstone (a deleted key's, which `reencrypt` leaves alone);
/// `reencrypt --apply --chunk-records 1 --parallel 1` stopped two records
/// before its end, so the first partition read is finished: its last chunk
/// was journaled through the offset after its last live key, and the
/// final flush recorded it done through the partition's end (after the
/// trailing tombstone) without a new journal. The resume reads that
/// finished partition's journal, whose chunk ends before what is done:
/// the checkpoint records that chunk as the last one acknowledged, so the
/// journal is done and the resume goes on (it was refused as "not this
/// run's journal as it wrote it").
#[test]
fn a_run_stopped_after_a_partition_ending_in_a_tombstone_resumes() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("finished-partition");
    let (t, values, keys) = keyed_topic(&dir, "finished-partition", 2);
    let writes = many_keys(60);
    produce_keyed(&t, &values, &keys, &writes);
    // Every deleted key deleted again: both partitions end on a tombstone.
    let again: Vec<(String, Option<String>)> = writes
        .iter()
        .filter(|(_, v)| v.is_none())
        .cloned()
        .collect();
    produce_keyed(&t, &values, &keys, &again);
    let model = model_of(&writes);
    rotate(&t.values_file);
    let live = writes.iter().filter(|(_, v)| v.is_some()).count();
    let ck = dir.file("run.checkpoint");
    let stop_at = (live - 2).to_string();
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "1",
            "--parallel",
            "1",
            "--fail-after-records",
            &stop_at,
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    let resumed = t.run("reencrypt", &["--apply", "--resume", &ck]);
    assert_eq!(
        code(&resumed),
        0,
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    t.agree(&model, "stopped after a finished partition, resumed");
}

/// A run's journals are found by name: `PATH.pN.journal` beside its
/// checkpoint `PATH`, never another checkpoint's whose name starts with
/// this one's. Run A (`--checkpoint DIR/ck`, on a
/// topic of the plain broker, stopped with SIGSTOP once it has begun)
/// counts as its own the journal of run B (`--checkpoint DIR/ck.part2`,
/// on the compacting broker: `DIR/ck.part2.p0.journal`), which B left when
/// it stopped between key-5's old-form tombstone and its value (then
/// compacted: the journal alone holds key-5's value). A finishes and
/// removes its journals, never B's: B's resume finishes key-5.
#[test]
fn a_finished_run_never_removes_another_runs_journal_on_a_compacting_broker() {
    let Some(plain) = bootstrap() else {
        return;
    };
    let compacting = compacting_bootstrap();
    let dir = Dir::new("journal-names");
    // Run A: long enough to be stopped once begun.
    let (a, a_values, a_keys) = keyed_topic(&dir, "journal-names-a", 1);
    assert_eq!(a.bootstrap, plain);
    produce_keyed(&a, &a_values, &a_keys, &many_keys(3000));
    rotate(&a.values_file);
    // Run B's topic, on the compacting broker.
    let topic = fresh_topic("journal-names-b");
    create_compacted(&compacting, &topic, 1);
    let (values_file, values) = new_keyset(&dir, "b-values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "b-keys.json");
    let b = KeyedTopic {
        bootstrap: compacting.clone(),
        topic: topic.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    let writes = many_keys(40);
    produce_keyed(&b, &values, &keys, &writes);
    let model: State = model_of(&writes);
    rotate(&b.values_file);
    rotate(&b.keys_file);
    let ck_a = dir.file("ck");
    let ck_b = dir.file("ck.part2");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(a.args("reencrypt", &["--apply", "--checkpoint", &ck_a, "--quiet"]))
        .env("TOMBSTONE_CRYPT_LOCK_DIR", common::process::lock_dir())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !std::path::Path::new(&ck_a).exists() {
        assert!(std::time::Instant::now() < deadline, "run A never began");
        assert!(child.try_wait().unwrap().is_none(), "run A ended first");
        std::thread::sleep(Duration::from_millis(1));
    }
    let signal = |sig: &str| {
        assert!(Command::new("kill")
            .args([sig, &child.id().to_string()])
            .status()
            .unwrap()
            .success());
    };
    signal("-STOP");
    let stopped = b.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck_b,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "9",
        ],
    );
    signal("-CONT");
    assert!(
        stopped.status.code().is_none(),
        "B not stopped: {stopped:?}"
    );
    let journal = format!("{ck_b}.p0.journal");
    assert!(std::path::Path::new(&journal).exists());
    wait_compacted(&compacting, &topic, Duration::from_secs(60));
    assert!(child.wait().unwrap().success(), "run A failed");
    let removed = !std::path::Path::new(&journal).exists();
    let resumed = b.run("reencrypt", &["--apply", "--resume", &ck_b]);
    let got = b.replay();
    let lost: Vec<String> = model
        .iter()
        .filter(|(k, v)| v.is_some() && got.get(*k) != Some(v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        !removed && lost.is_empty(),
        "run A, finished, removed run B's journal {journal}: {removed}; B's resume (exit {:?}) lost {lost:?}",
        code(&resumed)
    );
}

/// A journal changed or cut anywhere is refused, and so is one that is
/// not there at all when the checkpoint records that the run journaled
/// writes of the partition. On the compacting broker, a run stopped between key-5's old-form tombstone and its value,
/// compacted, its journal lost (a cleanup of `*.journal`, a copy of the
/// checkpoint alone to another machine): the resume refuses (exit 2), as
/// it refuses a journal cut to 0 bytes, rather than lose key-5.
#[test]
fn a_resume_whose_unfinished_journal_is_missing_is_refused_on_a_compacting_broker() {
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new("journal-missing");
    let topic = fresh_topic("journal-missing");
    create_compacted(&bootstrap, &topic, 1);
    let (values_file, values) = new_keyset(&dir, "values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
    let t = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    let writes = many_keys(40);
    produce_keyed(&t, &values, &keys, &writes);
    let model: State = model_of(&writes);
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let ck = dir.file("run.checkpoint");
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "9",
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    let journal = format!("{ck}.p0.journal");
    // Cut to nothing: refused.
    let kept = std::fs::read(&journal).unwrap();
    std::fs::write(&journal, b"").unwrap();
    let cut = t.run("reencrypt", &["--apply", "--resume", &ck]);
    assert_eq!(code(&cut), 2, "{}", String::from_utf8_lossy(&cut.stderr));
    // Gone: taken as nothing to finish.
    std::fs::remove_file(&journal).unwrap();
    drop(kept);
    let resumed = t.run("reencrypt", &["--apply", "--resume", &ck]);
    let got = t.replay();
    let lost: Vec<String> = model
        .iter()
        .filter(|(k, v)| v.is_some() && got.get(*k) != Some(v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        code(&resumed) == 2 || lost.is_empty(),
        "the resume without its unfinished journal went on (exit {:?}) and lost {lost:?}",
        code(&resumed)
    );
}

/// On the compacting broker, a
/// `reencrypt --apply` stopped between a key's old-form tombstone and its
/// value (as `reencrypt_stopped_between_a_keys_records_...` stops it), then
/// compacted: only its journal holds key-5's value. A new run with
/// another checkpoint file (`--checkpoint`, or the default name in another
/// directory) on the same partition: the stopped run's partition lock is
/// still in the lock directory, naming its checkpoint. A new run planning
/// from the topic, where key-5 is deleted, would lose key-5, which nobody
/// deleted: it refuses (exit 2) while the checkpoint named there is.
#[test]
fn a_new_run_beside_a_stopped_runs_lock_does_not_lose_its_cut_key_on_a_compacting_broker() {
    let bootstrap = compacting_bootstrap();
    let dir = Dir::new("stale-lock");
    let topic = fresh_topic("stale-lock");
    create_compacted(&bootstrap, &topic, 1);
    let (values_file, values) = new_keyset(&dir, "values.json");
    let (keys_file, keys) = new_key_keyset(&dir, "keys.json");
    let t = KeyedTopic {
        bootstrap: bootstrap.clone(),
        topic: topic.clone(),
        partitions: 1,
        values_file,
        keys_file,
    };
    let writes = many_keys(40);
    produce_keyed(&t, &values, &keys, &writes);
    let model: State = model_of(&writes);
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let locks = dir.file("locks");
    let ck = dir.file("run.checkpoint");
    let stopped = t.run(
        "reencrypt",
        &[
            "--apply",
            "--checkpoint",
            &ck,
            "--chunk-records",
            "8",
            "--parallel",
            "1",
            "--fail-after-records",
            "9",
            "--lock-dir",
            &locks,
        ],
    );
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    wait_compacted(&bootstrap, &topic, Duration::from_secs(60));
    let held: Vec<String> = std::fs::read_dir(&locks)
        .unwrap()
        .filter_map(Result::ok)
        .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
        .collect();
    assert!(
        held.iter().any(|h| h.contains("run.checkpoint")),
        "the stopped run's lock names its checkpoint: {held:?}"
    );
    let other = dir.file("other.checkpoint");
    let out = t.run(
        "reencrypt",
        &["--apply", "--checkpoint", &other, "--lock-dir", &locks],
    );
    let got = t.replay();
    let lost: Vec<String> = model
        .iter()
        .filter(|(k, v)| v.is_some() && got.get(*k) != Some(v))
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    assert!(
        code(&out) == 2 || lost.is_empty(),
        "a new run beside the stopped one went on (exit {:?}) and lost {lost:?}",
        code(&out)
    );
}

/// Two users' runs on one machine, each with their own HOME (the user's
/// default lock directory differs: cron and sudo see other ones too), on
/// overlapping partitions: the second is refused (exit 2) while the first
/// holds partition 1, by the machine's lock directory that runs take
/// beside their own when none is given.
#[test]
fn runs_of_two_users_on_one_machine_do_not_write_one_partition_at_once() {
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("two-homes");
    let (t, values, keys) = keyed_topic(&dir, "two-homes", 3);
    produce_keyed(&t, &values, &keys, &many_keys(3000));
    rotate(&t.values_file);
    let (home_a, home_b) = (dir.file("home-a"), dir.file("home-b"));
    let user = |home: &str, ck: &str, parts: &str| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"));
        c.args(t.args(
            "reencrypt",
            &[
                "--apply",
                "--quiet",
                "--checkpoint",
                ck,
                "--partitions",
                parts,
            ],
        ))
        .env_remove("TOMBSTONE_CRYPT_LOCK_DIR")
        .env_remove("XDG_RUNTIME_DIR")
        .env("HOME", home);
        c
    };
    let (ck_a, ck_b) = (dir.file("a.checkpoint"), dir.file("b.checkpoint"));
    let mut first = user(&home_a, &ck_a, "0-1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let locks = format!("{home_a}/.cache/tombstone-crypt/locks");
    // The run takes its own lock, then the machine's: it holds partition
    // 1 once both name it (stopped between the two, the other user's run
    // would take the machine's lock first).
    let pid = format!("pid {}", first.id());
    let holds = |dir: &str| {
        std::fs::read_dir(dir).ok().is_some_and(|entries| {
            entries.filter_map(Result::ok).any(|e| {
                e.file_name().to_string_lossy().ends_with(".p1.lock")
                    && std::fs::read_to_string(e.path()).is_ok_and(|h| h.contains(&pid))
            })
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        if holds(&locks) && holds("/tmp/tombstone-crypt-locks") {
            break;
        }
        assert!(
            first.try_wait().unwrap().is_none(),
            "the first run ended first"
        );
        assert!(std::time::Instant::now() < deadline, "never held its locks");
        std::thread::sleep(Duration::from_millis(2));
    }
    let signal = |pid: u32, sig: &str| {
        let _ = Command::new("kill").args([sig, &pid.to_string()]).status();
    };
    signal(first.id(), "-STOP");
    let second = user(&home_b, &ck_b, "1-2").output().unwrap();
    signal(first.id(), "-CONT");
    let _ = first.wait();
    assert_eq!(
        code(&second),
        2,
        "the second user's run wrote partition 1 while the first's held it: {}",
        String::from_utf8_lossy(&second.stderr)
    );
}

/// A stopped run whose checkpoint's path is not UTF-8 (`run-\xe9.checkpoint`,
/// a Latin-1 name): its partition lock names the checkpoint through
/// `Path::display`, which replaces the byte, so a new run with another
/// checkpoint on the same partition reads a path that does not exist and
/// goes on, planning from a topic where the stopped run may have cut a key
/// between its records (what the refusal is for). It must be refused
/// (exit 2) while that checkpoint is there, as with a UTF-8 name.
#[test]
fn a_new_run_beside_a_stopped_run_whose_checkpoint_path_is_not_utf8_is_refused() {
    use std::os::unix::ffi::OsStrExt as _;
    if bootstrap().is_none() {
        return;
    }
    let dir = Dir::new("latin1-lock");
    let (t, values, keys) = keyed_topic(&dir, "latin1-lock", 1);
    produce_keyed(&t, &values, &keys, &many_keys(40));
    rotate(&t.values_file);
    rotate(&t.keys_file);
    let locks = dir.file("locks");
    let ck = std::path::Path::new(&dir.file(""))
        .join(std::ffi::OsStr::from_bytes(b"run-\xe9.checkpoint"));
    let stopped = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(t.args(
            "reencrypt",
            &[
                "--apply",
                "--chunk-records",
                "8",
                "--parallel",
                "1",
                "--fail-after-records",
                "9",
                "--lock-dir",
                &locks,
            ],
        ))
        .arg("--checkpoint")
        .arg(&ck)
        .output()
        .unwrap();
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    assert!(ck.exists(), "its checkpoint is there");
    let other = dir.file("other.checkpoint");
    let out = t.run(
        "reencrypt",
        &["--apply", "--checkpoint", &other, "--lock-dir", &locks],
    );
    assert_eq!(
        code(&out),
        2,
        "a new run beside the stopped one (checkpoint {ck:?}) went on: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Found by a hostile review, closed: a producer that writes a key while
/// `repair --apply` writes its partition, before the run reaches that key,
/// had its value deleted by the run's tombstone (planned from what the
/// partition held before), and the run exited 0. The run now reads what it
/// wrote back after its writes (`apply::resume::overwritten`): a key
/// someone else wrote meanwhile that the run's records then followed fails
/// the run (exit 2), named with both offsets. Here 400 broken tombstones,
/// one record a chunk (each acknowledged before the next), and a live value
/// for the last key written as soon as the run's first write lands.
#[test]
fn a_write_by_others_that_repair_then_overwrote_fails_the_run() {
    let Some(bootstrap) = bootstrap() else { return };
    overwritten_during_a_run(&bootstrap, false);
}

/// Found by a second hostile review, closed: the same write in a
/// transaction of others, still open when the run ended its writes, passed
/// (exit 0): the run's read back (`read_committed`) stopped at the
/// transaction's first record and took that for the partition's end. It
/// now reads through its own last record, waiting (up to `--timeout`) for
/// such a transaction to end. On Apache Kafka (transactions).
#[test]
fn a_transaction_of_others_that_repair_then_overwrote_fails_the_run() {
    let Some(bootstrap) = common::kafka::apache_kafka() else {
        return;
    };
    overwritten_during_a_run(&bootstrap, true);
}

/// `repair --apply` of 400 broken tombstones, one record a chunk; as soon
/// as its first write lands, another producer writes the last key's new
/// value (in a transaction committed only once the run's records are all
/// on the partition, with `transactional`). The run must fail, naming the
/// key.
fn overwritten_during_a_run(bootstrap: &str, transactional: bool) {
    use tombstone_crypt::kafka::rdkafka::producer::Producer as _;
    let dir = Dir::new("overwritten");
    let topic = fresh_topic("cli-overwritten");
    create_compacted(bootstrap, &topic, 1);
    let (ks_file, keyset) = new_keyset(&dir, "values.json");
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let seal = |k: &[u8], v: &[u8]| {
        ser.serialize(&Context::new(&topic).with_key(k), Some(v))
            .unwrap()
    };
    // Every key's delete written as the encrypted empty value; the last
    // key's deciding record is the partition's last.
    let keys: Vec<Vec<u8>> = (0..400)
        .map(|i| format!("key-{i:03}").into_bytes())
        .collect();
    let writes: Vec<(Vec<u8>, Option<Vec<u8>>)> =
        keys.iter().map(|k| (k.clone(), seal(k, b""))).collect();
    produce(bootstrap, &topic, &writes);
    let before = end_offsets(bootstrap, &topic, 1)[0];
    let last = keys.last().unwrap().clone();
    let theirs_value = seal(&last, b"written during the run").unwrap();
    let wait = Duration::from_secs(30);
    // The other writer, ready before the run starts.
    let other: FutureProducer = if transactional {
        let p: FutureProducer = client_config(bootstrap)
            .set("transactional.id", fresh_topic("overwriter"))
            .create()
            .unwrap();
        p.init_transactions(wait).unwrap();
        p
    } else {
        client_config(bootstrap)
            .set("enable.idempotence", "true")
            .create()
            .unwrap()
    };

    let checkpoint = dir.file("run.checkpoint");
    let mut child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .env("TOMBSTONE_CRYPT_LOCK_DIR", common::process::lock_dir())
        .args([
            "repair",
            "--json",
            "--quiet",
            "--bootstrap",
            bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &ks_file,
            "--apply",
            "--null-marker",
            "empty",
            "--chunk-records",
            "1",
            "--checkpoint",
            &checkpoint,
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // As soon as the run's first tombstone is on the partition, the other
    // producer writes the last key's new value.
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while end_offsets(bootstrap, &topic, 1)[0] == before {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the run ended before it wrote"
        );
        assert!(
            std::time::Instant::now() < deadline,
            "the run wrote nothing"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    if transactional {
        other.begin_transaction().unwrap();
    }
    let record = FutureRecord::<[u8], [u8]>::to(&topic)
        .key(&last[..])
        .payload(&theirs_value[..]);
    futures_executor::block_on(other.send(record, wait)).unwrap();
    if transactional {
        // Open until all of the run's records are on the partition (its
        // 400 and this one): the run's writes end before the transaction.
        use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
        // The high watermark, not the end of what is committed (which
        // stays at the open transaction's first record).
        let uncommitted: BaseConsumer = client_config(bootstrap)
            .set("isolation.level", "read_uncommitted")
            .create()
            .unwrap();
        let high = || uncommitted.fetch_watermarks(&topic, 0, wait).unwrap().1;
        while high() < before + 401 {
            assert!(
                std::time::Instant::now() < deadline,
                "the run stopped writing"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        std::thread::sleep(Duration::from_secs(1));
        other.commit_transaction(wait).unwrap();
    }
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();

    // The race happened as meant: the new value, then the run's tombstone.
    let log = common::compacting::read_all(bootstrap, &topic);
    let of_last = |r: &common::compacting::RawRecord| r.key.as_ref() == Some(&last);
    let theirs = log
        .iter()
        .position(|r| of_last(r) && r.offset >= before && r.value.is_some())
        .expect("the new value is on the topic");
    let over = log
        .iter()
        .rposition(|r| of_last(r) && r.value.is_none())
        .expect("the run's tombstone of the last key");
    assert!(
        theirs < over,
        "the run wrote the last key before the new value: the race did not happen ({err})"
    );
    assert_eq!(
        status.code(),
        Some(2),
        "a run that deleted a new value passed: {err}"
    );
    assert!(
        err.contains("wrote over 1 keys") && err.contains(&hex(&last)),
        "the failure names the key: {err}"
    );
}
