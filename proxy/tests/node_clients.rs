//! kafkajs (the pure-JavaScript client, `tests/node/kafkajs_clients.js`)
//! through the proxy: records round trip through a consumer group, and
//! beside the proxy every value is a ciphertext Node's AES-GCM decrypts
//! with the TopicAndKey associated data, every tombstone null; a compacted
//! topic after Apache Kafka's log cleaner (one record per key, each key's
//! last, through the proxy and sealed beside it); with negative controls,
//! a proxy that forwards plaintext and one that writes a tombstone as a
//! ciphertext of nothing (the key is never removed).
//!
//! kafkajs 2.2.4 is pinned in `tests/node/package-lock.json` and installed
//! by `scripts/test.sh` (`npm ci`) into `target/proxy-node`, whose
//! `node_modules` it exports as `TOMBSTONE_PROXY_NODE_MODULES`; the test
//! is skipped with a printed line without it or without a broker. Its
//! topics are created first (kafkajs's idempotent producer fails against
//! tansu 0.6.0: InitProducerId v1, unknown server error).

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::peers::{Exit, ScriptProxy};
use common::{apache_kafka, bootstrap, compacting, create_topic, create_topic_with};
use tombstone_crypt_proxy::Hooks;

fn node_modules() -> Option<String> {
    match std::env::var("TOMBSTONE_PROXY_NODE_MODULES") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            eprintln!("TOMBSTONE_PROXY_NODE_MODULES is unset: kafkajs test skipped (scripts/test.sh installs kafkajs)");
            None
        }
    }
}

/// Runs the kafkajs script with node (`modules` its `NODE_PATH`) against
/// `setup`.
fn node_script(setup: &ScriptProxy, modules: &str, last: &str) -> Exit {
    let mut program = Command::new("node");
    program
        .arg(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node/kafkajs_clients.js"))
        .env("NODE_PATH", modules);
    setup.run(program, last)
}

/// Runs the script through a proxy with `hooks` over `codecs`: its exit
/// code, stdout and stderr; `None` when skipped.
fn run(hooks: Hooks, codecs: &[&str]) -> Option<Exit> {
    let broker = bootstrap()?;
    let modules = node_modules()?;
    let setup = ScriptProxy::new(broker, hooks, "js");
    for codec in codecs {
        create_topic(&setup.proxy.addr, &format!("{}{codec}", setup.prefix), 2);
    }
    Some(node_script(&setup, &modules, &codecs.join(",")))
}

/// kafkajs writes several versions of four keys to a compacted topic on
/// Apache Kafka through a proxy with `hooks`, its log cleaner compacts the
/// topic, and kafkajs reads it back through the proxy: that read (exit
/// code, stdout, stderr; it must find each key's last record only, a
/// tombstone null, an empty value empty), and the broker's records beside
/// the proxy against the same; `None` when skipped.
fn compaction(hooks: Hooks) -> Option<(Exit, Result<(), String>)> {
    let broker = apache_kafka()?;
    let modules = node_modules()?;
    let setup = ScriptProxy::new(broker, hooks, "js");
    let topic = format!("{}compaction", setup.prefix);
    create_topic_with(
        &setup.proxy.addr,
        &topic,
        1,
        &[("cleanup.policy", "compact")],
    );
    let (code, stdout, stderr) = node_script(&setup, &modules, "compaction-write");
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let c = compacting::wait_compacted(&setup.broker, &topic, Duration::from_secs(60));
    assert!((c.after as i64) < c.offsets, "nothing compacted: {c:?}");
    let read = node_script(&setup, &modules, "compaction-read");
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
fn kafkajs_round_trips_and_values_are_sealed_beside_the_proxy() {
    let Some((code, stdout, stderr)) = run(Hooks::default(), &["none", "gzip"]) else {
        return;
    };
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("\"ok\":true"), "{stdout}");
}

#[test]
fn negative_control_plaintext_forwarded_fails_the_kafkajs_check() {
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let Some((code, stdout, stderr)) = run(hooks, &["none"]) else {
        return;
    };
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(
        stderr.contains("the value on the broker is not a ciphertext"),
        "{stderr}"
    );
}

#[test]
fn kafkajs_compaction_keeps_one_record_per_key_compacting_broker() {
    let Some(((code, stdout, stderr), broker)) = compaction(Hooks::default()) else {
        return;
    };
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("\"ok\":true"), "{stdout}");
    broker.unwrap();
}

#[test]
fn negative_control_an_encrypted_tombstone_fails_the_kafkajs_compaction_check_compacting_broker() {
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
