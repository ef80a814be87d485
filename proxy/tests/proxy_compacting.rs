//! The report's scenario through the proxy, on the compacting broker: a
//! changelog-like topic (`cleanup.policy=compact`) written through the
//! proxy by confluent-kafka for Python (not the library), with puts and
//! deletes, the key keyset rotated mid-run (a second key primary, the old
//! one still enabled), the broker's compaction, then a restore that reads
//! the topic from the start through the proxy: no deleted key comes back,
//! every live key has its last value.
//!
//! Two restores are checked: replaying every record in order, and what
//! is left once Kafka has also dropped the tombstones
//! (`delete.retention.ms` past; the topic keeps them a day, so the test
//! drops them from the compacted log it read). The negative control,
//! a proxy without the write rule's tombstones of older key forms, keeps a
//! deleted key's old-form value through compaction: the second restore
//! brings the key back.
//!
//! Needs Apache Kafka (`TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`; scripts/test.sh
//! runs the tests named `compacting_broker` last) and
//! `TOMBSTONE_TINK_PYTHON` (the venv with confluent-kafka; skipped with a
//! printed line without it).

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{compacting, fresh_topic, start_proxy};
use compacting::{compacting_bootstrap, create_topic_with, wait_compacted};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

type Ops = Vec<(String, Option<String>)>;

fn python() -> Option<String> {
    match std::env::var("TOMBSTONE_TINK_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            eprintln!("TOMBSTONE_TINK_PYTHON is unset: the changelog restore test skipped");
            None
        }
    }
}

fn script(python: &str, args: &[&str]) -> String {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/python/changelog_restore.py");
    let out = Command::new(python).arg(path).args(args).output().unwrap();
    assert!(
        out.status.success(),
        "changelog_restore.py {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn produce(python: &str, proxy: &str, topic: &str, ops: &Ops) {
    let path = std::env::temp_dir().join(format!("{}.json", fresh_topic("ops")));
    let json: Vec<serde_json::Value> = ops.iter().map(|(k, v)| serde_json::json!([k, v])).collect();
    std::fs::write(&path, serde_json::to_string(&json).unwrap()).unwrap();
    script(python, &[proxy, topic, "produce", path.to_str().unwrap()]);
    let _ = std::fs::remove_file(path);
}

fn put(k: &str, v: &str) -> (String, Option<String>) {
    (k.to_owned(), Some(v.to_owned()))
}

fn del(k: &str) -> (String, Option<String>) {
    (k.to_owned(), None)
}

/// Runs the scenario with `hooks` on the rotated proxy; `Err` names the
/// first key a restore gets wrong.
fn scenario(hooks: Hooks) -> Option<Result<(), String>> {
    let python = python()?;
    let broker = compacting_bootstrap();
    let topic = fresh_topic("changelog");
    create_topic_with(
        &broker,
        &topic,
        2,
        &[
            ("cleanup.policy", "compact"),
            ("min.compaction.lag.ms", "0"),
        ],
    );
    let values = Keyset::generate();
    let old_keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let policy = |keys: &Keyset| {
        Policies::new().with_topic(
            &topic,
            TopicPolicy::keyset(values.clone())
                .with_record_keys(keys.clone())
                .unwrap(),
        )
    };

    // Before the rotation: one key.
    let before: Ops = (0..10)
        .map(|i| put(&format!("k{i}"), &format!("v1-{i}")))
        .chain([del("k1")])
        .collect();
    {
        let proxy = start_proxy(&broker, policy(&old_keys), Hooks::default());
        produce(&python, &proxy.addr, &topic, &before);
    }

    // The rotation: a second key primary, the old one still enabled.
    let mut keys = old_keys.clone();
    keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let after: Ops = vec![
        put("k2", "v2-2"),
        del("k3"),
        put("k4", "v2-4"),
        del("k4"),
        del("k6"),
        put("k1", "back"),
        put("k10", "v2-10"),
        put("k11", "v2-11"),
        del("k11"),
        put("k5", "v2-5"),
    ];
    let proxy = start_proxy(&broker, policy(&keys), hooks);
    produce(&python, &proxy.addr, &topic, &after);

    // The broker compacts everything written so far.
    let compacted = wait_compacted(&broker, &topic, Duration::from_secs(25));
    assert!(
        compacted.after < compacted.offsets as usize,
        "the broker removed records ({compacted:?})"
    );

    // The model: the last write of each key.
    let mut model: BTreeMap<String, Option<String>> = BTreeMap::new();
    for (k, v) in before.iter().chain(&after) {
        model.insert(k.clone(), v.clone());
    }
    let live: BTreeMap<String, String> = model
        .iter()
        .filter_map(|(k, v)| v.clone().map(|v| (k.clone(), v)))
        .collect();
    let deleted: Vec<&String> = model
        .iter()
        .filter(|(_, v)| v.is_none())
        .map(|(k, _)| k)
        .collect();
    assert_eq!(deleted.len(), 4, "{model:?}");

    // The restore, through the proxy.
    let read = script(&python, &[&proxy.addr, &topic, "restore"]);
    let records: Vec<(i32, i64, String, Option<String>)> = serde_json::from_str(&read).unwrap();
    let replay = |with_tombstones: bool| {
        let mut store = BTreeMap::new();
        for (_, _, k, v) in &records {
            match v {
                Some(v) => {
                    store.insert(k.clone(), v.clone());
                }
                None if with_tombstones => {
                    store.remove(k);
                }
                None => {}
            }
        }
        store
    };
    for (what, restored) in [
        ("replayed in order", replay(true)),
        ("once the tombstones are dropped too", replay(false)),
    ] {
        for k in &deleted {
            if let Some(v) = restored.get(*k) {
                return Some(Err(format!(
                    "the deleted key {k} came back ({what}) with {v:?}"
                )));
            }
        }
        if restored != live {
            return Some(Err(format!(
                "restored ({what}) {restored:?}, the live keys are {live:?}"
            )));
        }
    }
    Some(Ok(()))
}

#[test]
fn a_changelog_written_by_a_python_client_through_a_rotation_restores_after_compaction_compacting_broker(
) {
    if let Some(result) = scenario(Hooks::default()) {
        result.unwrap();
    }
}

#[test]
fn negative_control_without_older_forms_tombstones_a_deleted_key_comes_back_compacting_broker() {
    let mut hooks = Hooks::default();
    hooks.skip_fanout = true;
    if let Some(result) = scenario(hooks) {
        let e = result.expect_err("without the older forms' tombstones a deleted key comes back");
        eprintln!("the control: {e}");
        assert!(e.contains("came back"), "{e}");
        assert!(
            e.contains("k3") || e.contains("k6"),
            "a key deleted after the rotation: {e}"
        );
    }
}
