//! kafkajs (the pure-JavaScript client, `tests/node/kafkajs_clients.js`)
//! through the proxy: records round trip through a consumer group, and
//! beside the proxy every value is a ciphertext Node's AES-GCM decrypts
//! with the TopicAndKey associated data, every tombstone null; with its
//! negative control, a proxy that forwards plaintext.
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

use common::{bootstrap, create_topic, fresh_topic, start_proxy, Keys};
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

/// Runs the script through a proxy with `hooks` over `codecs`: its exit
/// code, stdout and stderr; `None` when skipped.
fn run(hooks: Hooks, codecs: &[&str]) -> Option<(i32, String, String)> {
    let broker = bootstrap()?;
    let modules = node_modules()?;
    let prefix = format!("{}-", fresh_topic("js"));
    let keys = Keys::new(true);
    let dir = std::env::temp_dir().join(format!("px-js-{}", fresh_topic("k")));
    std::fs::create_dir_all(&dir).unwrap();
    let values_path = dir.join("values.json");
    let keys_path = dir.join("keys.json");
    std::fs::write(&values_path, keys.values.to_tink_json()).unwrap();
    std::fs::write(&keys_path, keys.keys.as_ref().unwrap().to_tink_json()).unwrap();
    let policies = Policies::new().with_prefix(&prefix, keys.policy());
    let proxy = start_proxy(&broker, policies, hooks);
    for codec in codecs {
        create_topic(&proxy.addr, &format!("{prefix}{codec}"), 2);
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/node/kafkajs_clients.js");
    let out = Command::new("node")
        .arg(script)
        .args([&proxy.addr, &broker, &prefix])
        .arg(&values_path)
        .arg(&keys_path)
        .arg(codecs.join(","))
        .env("NODE_PATH", modules)
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
