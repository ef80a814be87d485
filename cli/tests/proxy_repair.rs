//! `repair --apply --subject-keyset` on a topic written through
//! `tombstone-crypt proxy` with encrypted record keys (`key_keyset`) and a
//! key-keyset rotation (the proxy's older-form fan-out): repair must not
//! write a tombstone for any key nobody deleted or shredded, and each
//! key's last record must read right afterwards.

use crate::common;

use std::collections::BTreeMap;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kafka::{bootstrap, client_config, create_topic, free_base_port, fresh_topic, produce};
use common::process::{cli, code, json_of, Dir};
use serde_json::Value;
use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::{KeyTemplate, Keyset};

struct Proxy(Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start(config: &str, addr: &str) -> Proxy {
    let child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(["proxy", "--config", config, "--drain-seconds", "2"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Proxy(child);
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "the proxy did not listen");
        std::thread::sleep(Duration::from_millis(50));
    }
    p
}

fn lines(out: &std::process::Output) -> Vec<Value> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect()
}

#[test]
fn repair_under_subject_keys_with_rotated_record_keys_tombstones_only_the_shredded_subject() {
    let Some(broker) = bootstrap() else { return };
    let dir = Dir::new("attack2-repair");
    let kek = Keyset::generate();
    std::fs::write(dir.file("kek.json"), kek.to_tink_json()).unwrap();
    let mut kk = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    std::fs::write(dir.file("kk.json"), kk.to_tink_json()).unwrap();
    let key_topic = fresh_topic("attack2-repair-keys");
    let log = KafkaChangelog::with_config(client_config(&broker), &key_topic).unwrap();
    let keys = SubjectKeys::create(kek.clone(), Arc::new(KafkaKeyStore::new(log))).unwrap();
    let topic = fresh_topic("attack2-repair");
    create_topic(&broker, &topic, 1);
    let write_config = |port: u16| {
        let cfg = serde_json::json!({
            "listen": format!("127.0.0.1:{port}"),
            "bootstrap": broker,
            "topics": [{"topic": topic, "subject_keyset": "kek.json",
                "subject_key_topic": key_topic, "key_keyset": "kk.json",
                "subject_key_fence_ms": 300}]
        });
        std::fs::write(dir.file("proxy.json"), cfg.to_string()).unwrap();
        format!("127.0.0.1:{port}")
    };
    {
        let addr = write_config(free_base_port());
        let _p = start(&dir.file("proxy.json"), &addr);
        produce(
            &addr,
            &topic,
            &[
                ("alice", Some("alice v1")),
                ("bob", Some("bob v1")),
                ("carol", Some("carol v1")),
                ("carol", None),
                ("erin", Some("erin v1")),
            ],
        );
    }
    // The key keyset rotated (the old key still enabled), the proxy
    // restarted: its writes fan out a tombstone under each older form.
    kk.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    std::fs::write(dir.file("kk.json"), kk.to_tink_json()).unwrap();
    {
        let addr = write_config(free_base_port());
        let _p = start(&dir.file("proxy.json"), &addr);
        produce(
            &addr,
            &topic,
            &[
                ("alice", Some("alice v2")),
                ("dave", Some("dave v1")),
                ("bob", Some("bob v2")),
            ],
        );
    }
    keys.shred(b"bob").unwrap();
    let base = [
        "--bootstrap",
        &broker,
        "--topic",
        &topic,
        "--subject-keyset",
        &dir.file("kek.json"),
        "--subject-key-topic",
        &key_topic,
        "--key-keyset",
        &dir.file("kk.json"),
    ];
    let mut consume = vec!["consume", "-q"];
    consume.extend_from_slice(&base);
    let before = lines(&cli(&consume));
    let ck = dir.file("repair.ck");
    let mut repair = vec!["repair"];
    repair.extend_from_slice(&base);
    repair.extend_from_slice(&[
        "--null-marker",
        "none",
        "--checkpoint",
        &ck,
        "--json",
        "-q",
        "--apply",
    ]);
    let out = cli(&repair);
    let report = json_of(&out);
    eprintln!(
        "repair (exit {}): {}\n{}",
        code(&out),
        serde_json::to_string_pretty(&report).unwrap(),
        String::from_utf8_lossy(&out.stderr)
    );
    let after = lines(&cli(&consume));
    let last = |ls: &[Value]| -> BTreeMap<String, Value> {
        let mut m = BTreeMap::new();
        for l in ls {
            if let Some(k) = l["key"].as_str() {
                m.insert(k.to_owned(), l["value"].clone());
            }
        }
        m
    };
    eprintln!("before: {before:#?}\nafter: {after:#?}");
    let new_records: Vec<&Value> = after.iter().skip(before.len()).collect();
    eprintln!("written by repair: {new_records:#?}");
    let last_after = last(&after);
    assert_eq!(
        last_after.get("alice"),
        Some(&Value::from("alice v2")),
        "{last_after:?}"
    );
    assert_eq!(
        last_after.get("dave"),
        Some(&Value::from("dave v1")),
        "{last_after:?}"
    );
    assert_eq!(
        last_after.get("erin"),
        Some(&Value::from("erin v1")),
        "{last_after:?}"
    );
    assert_eq!(
        last_after.get("carol"),
        Some(&Value::Null),
        "{last_after:?}"
    );
    assert_eq!(last_after.get("bob"), Some(&Value::Null), "{last_after:?}");
    let wrongly: Vec<_> = new_records
        .iter()
        .filter(|l| l["value"].is_null())
        .filter(|l| !matches!(l["key"].as_str(), Some("bob") | Some("carol")))
        .collect();
    assert!(
        wrongly.is_empty(),
        "repair wrote tombstones for keys nobody deleted or shredded: {wrongly:#?}"
    );
}
