//! The fixtures of Confluent's format (`tests/fixtures/confluent`, made by
//! `scripts/confluent-fixtures.py` with confluent-kafka 2.16.1 for Python)
//! and a reader of them, for tests/confluent.rs, tests/confluent_avro.rs
//! and tests/kafka_confluent.rs.
#![allow(dead_code)]

use std::io::Write as _;
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_json::Value;
use tombstone_crypt::confluent::{ConfluentJson, DekAlgorithm, LocalKms};
use tombstone_crypt::Error;

/// Base64 (standard) decoded.
pub fn b64(s: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}

/// The fixture `name` (`tests/fixtures/confluent/{name}.json`).
pub fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/confluent/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// A codec that knows the case's schema and its wrapped DEKs, as a reader
/// gets them from the registries; `secret` opens them.
pub fn reader(f: &Value, secret: &str) -> Result<ConfluentJson, Error> {
    let mut codec = ConfluentJson::new(LocalKms::new(secret));
    codec.register(
        u32::try_from(f["schema_id"].as_u64().expect("id")).expect("u32"),
        f["subject"].as_str().expect("subject"),
        &f["schema"],
    )?;
    add_deks(&codec, f["deks"].as_array().expect("deks"))?;
    Ok(codec)
}

/// Gives `codec` the wrapped DEKs `deks` (as the DEK registry holds them:
/// `kekName`, `subject`, `algorithm`, `version`, `encryptedKeyMaterial`).
pub fn add_deks(codec: &ConfluentJson, deks: &[Value]) -> Result<(), Error> {
    for d in deks {
        codec.add_wrapped_dek(
            d["kekName"].as_str().expect("kek"),
            d["subject"].as_str().expect("subject"),
            DekAlgorithm::from_name(d["algorithm"].as_str().expect("algorithm"))?,
            u32::try_from(d["version"].as_u64().expect("version")).expect("u32"),
            &b64(d["encryptedKeyMaterial"].as_str().expect("material")),
        )?;
    }
    Ok(())
}

/// A rule as Confluent's documentation writes one (no `kind` or `mode`,
/// `onFailure` `"ERROR,NONE"`, the KEK `k1` in `local-kms`, the tag
/// `PII`), of type `ty`, with `extra` merged in (a null removes a field).
pub fn documented_rule(ty: &str, extra: Value) -> Value {
    let mut r = serde_json::json!({
        "name": "r", "type": ty, "tags": ["PII"],
        "params": {"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms",
                   "encrypt.kms.key.id": "local-kms://k1"},
        "onFailure": "ERROR,NONE",
    });
    if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            if v.is_null() {
                r.remove(k);
            } else {
                r.insert(k.clone(), v.clone());
            }
        }
    }
    r
}

/// The case's records: bytes (`None`: a tombstone) and the value written.
pub fn records(f: &Value) -> impl Iterator<Item = (Option<Vec<u8>>, Option<Value>)> + '_ {
    f["records"].as_array().expect("records").iter().map(|r| {
        let bytes = r["bytes"].as_str().map(b64);
        let value = (!r["value"].is_null()).then(|| r["value"].clone());
        (bytes, value)
    })
}

/// Runs Confluent's client as a peer (`tests/interop/confluent_peer.py
/// ARG`, in the test venv) with `input` on its stdin and these variables in
/// its environment: its stdout, or its stderr when it fails; `None` when
/// interop is skipped.
pub fn peer_env(arg: &str, input: &str, env: &[(&str, &str)]) -> Option<Result<String, String>> {
    let py = super::tink::python()?;
    let script = super::root::repo_root().join("tests/interop/confluent_peer.py");
    let mut child = Command::new(py)
        .envs(env.iter().copied())
        .arg(script)
        .arg(arg)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Confluent peer");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = |b: Vec<u8>| String::from_utf8_lossy(&b).into_owned();
    Some(if out.status.success() {
        Ok(text(out.stdout))
    } else {
        Err(text(out.stderr))
    })
}
