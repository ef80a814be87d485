//! confluent-kafka for Python (librdkafka 2.16) through the proxy, every
//! compression codec, an idempotent producer and a consumer group, checked
//! beside the proxy with Google Tink for Python
//! (`tests/python/confluent_clients.py`); the same with kafka-python, the
//! pure-Python client with its own protocol code
//! (`tests/python/kafka_python_clients.py`: none and gzip), and with it a
//! compacted topic after Apache Kafka's log cleaner (one record per key,
//! each key's last, through the proxy and sealed beside it); with negative
//! controls, a proxy that forwards plaintext and one that writes a
//! tombstone as a ciphertext of nothing (the key is never removed).
//!
//! The Python is `TOMBSTONE_TINK_PYTHON` (the venv of `scripts/tink-venv.sh`,
//! as `scripts/test.sh` exports it); the test is skipped with a printed
//! line without it or without a broker.

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::peers::{Exit, ScriptProxy};
use common::{apache_kafka, bootstrap, compacting};
use tombstone_crypt_proxy::Hooks;

fn python() -> Option<String> {
    match std::env::var("TOMBSTONE_TINK_PYTHON") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            eprintln!("TOMBSTONE_TINK_PYTHON is unset: Python client test skipped (scripts/tink-venv.sh makes the venv)");
            None
        }
    }
}

/// Runs `script` under the venv's Python against `setup`.
fn python_script(setup: &ScriptProxy, python: &str, script: &str, last: &str) -> Exit {
    let mut program = Command::new(python);
    program.arg(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/python")
            .join(script),
    );
    setup.run(program, last)
}

/// Runs `script` through a proxy with `hooks` over `codecs`: its exit
/// code, stdout and stderr; `None` when skipped.
fn run(script: &str, hooks: Hooks, codecs: &str) -> Option<Exit> {
    let broker = bootstrap()?;
    let python = python()?;
    Some(python_script(
        &ScriptProxy::new(broker, hooks, "py"),
        &python,
        script,
        codecs,
    ))
}

/// kafka-python writes several versions of four keys to a compacted topic
/// on Apache Kafka through a proxy with `hooks`, its log cleaner compacts
/// the topic, and kafka-python reads it back through the proxy: that read
/// (exit code, stdout, stderr; it must find each key's last record only,
/// a tombstone null, an empty value empty), and the broker's records
/// beside the proxy against the same; `None` when skipped.
fn compaction(hooks: Hooks) -> Option<(Exit, Result<(), String>)> {
    let broker = apache_kafka()?;
    let python = python()?;
    let setup = ScriptProxy::new(broker, hooks, "py");
    let script = "kafka_python_clients.py";
    let (code, stdout, stderr) = python_script(&setup, &python, script, "compaction-write");
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let topic = format!("{}compaction", setup.prefix);
    let c = compacting::wait_compacted(&setup.broker, &topic, Duration::from_secs(60));
    assert!((c.after as i64) < c.offsets, "nothing compacted: {c:?}");
    let read = python_script(&setup, &python, script, "compaction-read");
    let last = [
        (b"k2".to_vec(), Some(b"".to_vec())),
        (b"k3".to_vec(), Some(b"v3-b".to_vec())),
        (b"k0".to_vec(), Some(b"v0-c".to_vec())),
        (b"k1".to_vec(), None),
    ];
    Some((
        read,
        common::sealed_per_key(&setup.broker, &setup.keys, &topic, &last),
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

#[test]
fn kafka_python_compaction_keeps_one_record_per_key_compacting_broker() {
    let Some(((code, stdout, stderr), broker)) = compaction(Hooks::default()) else {
        return;
    };
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("\"ok\": true"), "{stdout}");
    broker.unwrap();
}

#[test]
fn negative_control_an_encrypted_tombstone_fails_the_kafka_python_compaction_check_compacting_broker(
) {
    let mut hooks = Hooks::default();
    hooks.tombstone_as_empty = true;
    let Some(((code, stdout, stderr), broker)) = compaction(hooks) else {
        return;
    };
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stderr.contains("not each key's last record"), "{stderr}");
    let err = broker.unwrap_err();
    assert!(
        err.contains("the tombstone on the broker is a value"),
        "{err}"
    );
}
