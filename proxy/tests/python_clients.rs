//! confluent-kafka for Python (librdkafka 2.16) through the proxy, every
//! compression codec, an idempotent producer and a consumer group, checked
//! beside the proxy with Google Tink for Python
//! (`tests/python/confluent_clients.py`); the same with kafka-python, the
//! pure-Python client with its own protocol code
//! (`tests/python/kafka_python_clients.py`: none and gzip); with negative
//! controls, a proxy that forwards plaintext.
//!
//! The Python is `TOMBSTONE_TINK_PYTHON` (the venv of `scripts/tink-venv.sh`,
//! as `scripts/test.sh` exports it); the test is skipped with a printed
//! line without it or without a broker.

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{bootstrap, fresh_topic, start_proxy, Keys};
use tombstone_crypt_proxy::{Hooks, Policies};

fn python() -> Option<String> {
    match std::env::var("TOMBSTONE_TINK_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            eprintln!("TOMBSTONE_TINK_PYTHON is unset: Python client test skipped (scripts/tink-venv.sh makes the venv)");
            None
        }
    }
}

/// Runs `script` through a proxy with `hooks` over `codecs`: its exit
/// code, stdout and stderr; `None` when skipped.
fn run(script: &str, hooks: Hooks, codecs: &str) -> Option<(i32, String, String)> {
    let broker = bootstrap()?;
    let python = python()?;
    let prefix = format!("{}-", fresh_topic("py"));
    let keys = Keys::new(true);
    let dir = std::env::temp_dir().join(format!("px-py-{}", fresh_topic("k")));
    std::fs::create_dir_all(&dir).unwrap();
    let values_path = dir.join("values.json");
    let keys_path = dir.join("keys.json");
    std::fs::write(&values_path, keys.values.to_tink_json()).unwrap();
    std::fs::write(&keys_path, keys.keys.as_ref().unwrap().to_tink_json()).unwrap();
    let policies = Policies::new().with_prefix(&prefix, keys.policy());
    let proxy = start_proxy(&broker, policies, hooks);
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new(python)
        .arg(script)
        .args([&proxy.addr, &broker, &prefix])
        .arg(&values_path)
        .arg(&keys_path)
        .arg(codecs)
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    Some((
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    ))
}

#[test]
fn confluent_kafka_round_trips_every_codec_and_tink_reads_the_records_beside_it() {
    let Some((code, stdout, stderr)) = run(
        "confluent_clients.py",
        Hooks::default(),
        "none,gzip,snappy,lz4,zstd",
    ) else {
        return;
    };
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("\"ok\": true"), "{stdout}");
}

#[test]
fn negative_control_plaintext_forwarded_fails_the_python_check() {
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let Some((code, stdout, stderr)) = run("confluent_clients.py", hooks, "lz4") else {
        return;
    };
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("the value on the broker is not a ciphertext"),
        "{stderr}"
    );
}

#[test]
fn kafka_python_round_trips_and_tink_reads_the_records_beside_it() {
    let Some((code, stdout, stderr)) =
        run("kafka_python_clients.py", Hooks::default(), "none,gzip")
    else {
        return;
    };
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("\"ok\": true"), "{stdout}");
}

#[test]
fn negative_control_plaintext_forwarded_fails_the_kafka_python_check() {
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let Some((code, stdout, stderr)) = run("kafka_python_clients.py", hooks, "gzip") else {
        return;
    };
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("the value on the broker is not a ciphertext"),
        "{stderr}"
    );
}
