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

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::{
    apache_kafka, bootstrap, compacting, consume_all, create_topic, create_topic_with, fresh_topic,
    start_proxy, Keys, RunningProxy,
};
use tombstone_crypt::kafka::decode_message;
use tombstone_crypt::kafka::rdkafka::message::OwnedMessage;
use tombstone_crypt::kafka::rdkafka::Timestamp;
use tombstone_crypt::record_key::KeyBinding;
use tombstone_crypt::{Bytes, DecryptingDeserializer, DeterministicDeserializer};
use tombstone_crypt_proxy::{Hooks, Policies};

fn node_modules() -> Option<String> {
    match std::env::var("TOMBSTONE_PROXY_NODE_MODULES") {
        Ok(p) if !p.is_empty() => Some(p),
        _ => {
            eprintln!("TOMBSTONE_PROXY_NODE_MODULES is unset: kafkajs test skipped (scripts/test.sh installs kafkajs)");
            None
        }
    }
}

/// How a run of the script ended: its exit code, stdout and stderr.
type Exit = (i32, String, String);

/// A proxy with `hooks` to `broker` on a fresh prefix, under fresh
/// keysets whose files are removed on drop.
struct Setup {
    broker: String,
    prefix: String,
    keys: Keys,
    dir: PathBuf,
    proxy: RunningProxy,
}

impl Setup {
    fn new(broker: String, hooks: Hooks) -> Self {
        let prefix = format!("{}-", fresh_topic("js"));
        let keys = Keys::new(true);
        let dir = std::env::temp_dir().join(format!("px-js-{}", fresh_topic("k")));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("values.json"), keys.values.to_tink_json()).unwrap();
        std::fs::write(
            dir.join("keys.json"),
            keys.keys.as_ref().unwrap().to_tink_json(),
        )
        .unwrap();
        let policies = Policies::new().with_prefix(&prefix, keys.policy());
        let proxy = start_proxy(&broker, policies, hooks);
        Setup {
            broker,
            prefix,
            keys,
            dir,
            proxy,
        }
    }

    /// Runs the script with `last` (codecs, or a phase): its exit code,
    /// stdout and stderr.
    fn node(&self, modules: &str, last: &str) -> Exit {
        let script =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node/kafkajs_clients.js");
        let out = Command::new("node")
            .arg(script)
            .args([&self.proxy.addr, &self.broker, &self.prefix])
            .arg(self.dir.join("values.json"))
            .arg(self.dir.join("keys.json"))
            .arg(last)
            .env("NODE_PATH", modules)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs the script through a proxy with `hooks` over `codecs`: its exit
/// code, stdout and stderr; `None` when skipped.
fn run(hooks: Hooks, codecs: &[&str]) -> Option<Exit> {
    let broker = bootstrap()?;
    let modules = node_modules()?;
    let setup = Setup::new(broker, hooks);
    for codec in codecs {
        create_topic(&setup.proxy.addr, &format!("{}{codec}", setup.prefix), 2);
    }
    Some(setup.node(&modules, &codecs.join(",")))
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
    let setup = Setup::new(broker, hooks);
    let topic = format!("{}compaction", setup.prefix);
    create_topic_with(
        &setup.proxy.addr,
        &topic,
        1,
        &[("cleanup.policy", "compact")],
    );
    let (code, stdout, stderr) = setup.node(&modules, "compaction-write");
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
    let c = compacting::wait_compacted(&setup.broker, &topic, Duration::from_secs(60));
    assert!((c.after as i64) < c.offsets, "nothing compacted: {c:?}");
    let read = setup.node(&modules, "compaction-read");
    let last = [
        (b"k2".to_vec(), Some(b"".to_vec())),
        (b"k3".to_vec(), Some(b"v3-b".to_vec())),
        (b"k0".to_vec(), Some(b"v0-c".to_vec())),
        (b"k1".to_vec(), None),
    ];
    Some((read, sealed_per_key(&setup, &topic, &last)))
}

/// The broker holds one record per key of `last`, in its order: the key a
/// ciphertext, the value a ciphertext the library reads back to the
/// key's last value, the tombstone null.
fn sealed_per_key(
    setup: &Setup,
    topic: &str,
    last: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Result<(), String> {
    let direct = consume_all(&setup.broker, topic, 1)?;
    if direct.len() != last.len() {
        return Err(format!(
            "{} records on the broker after compaction, {} keys",
            direct.len(),
            last.len()
        ));
    }
    let key_de = DeterministicDeserializer::new(Bytes, setup.keys.keys.clone().unwrap());
    let value_de = DecryptingDeserializer::new(Bytes, setup.keys.values.clone());
    for (want, d) in last.iter().zip(&direct) {
        let (key, value) = want;
        let wire_key = d.key.clone().unwrap_or_default();
        if wire_key.len() != key.len() + 21 || wire_key[0] != 1 {
            return Err(format!(
                "offset {}: the key on the broker is not a ciphertext",
                d.offset
            ));
        }
        match (value, &d.value) {
            (None, Some(_)) => {
                return Err(format!(
                    "offset {}: the tombstone on the broker is a value",
                    d.offset
                ))
            }
            (Some(v), Some(c)) if c.len() != v.len() + 33 || c[0] != 1 => {
                return Err(format!(
                    "offset {}: the value on the broker is not a ciphertext",
                    d.offset
                ))
            }
            _ => {}
        }
        let m = OwnedMessage::new(
            d.value.clone(),
            Some(wire_key),
            topic.to_owned(),
            Timestamp::NotAvailable,
            d.partition,
            d.offset,
            None,
        );
        let got: (Vec<u8>, Option<Vec<u8>>) =
            decode_message(&m, KeyBinding::Plaintext, &key_de, &value_de)
                .map_err(|e| format!("offset {}: {e}", d.offset))?;
        if &got != want {
            return Err(format!(
                "offset {}: the library reads {got:?}, not {:?}",
                d.offset,
                (key, value)
            ));
        }
    }
    Ok(())
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
