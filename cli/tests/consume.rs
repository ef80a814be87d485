//! `tombstone-crypt consume`, run as a process against the loopback
//! broker: records of this library's format (JSON, text, bytes, a delete,
//! a value under another keyset) and records that Confluent's own client
//! (confluent-kafka 2.16.1 for Python) produced with field and payload
//! encryption, its schemas and DEKs in a Schema Registry over HTTP (the
//! test registry of `tests/interop/schema_registry_server.py`): one JSON
//! line per record, decrypted, a delete as `null`, a value that does not
//! decrypt as an error (exit 1), never as `null`.

use crate::common;

use std::io::{BufRead as _, Write as _};
use std::process::{Command, Stdio};

use base64::Engine as _;
use common::kafka::{bootstrap, create_topic, fresh_topic, produce};
use common::process::{code, new_keyset, Dir};
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, LocalKms, Registry};
use tombstone_crypt::{Bytes, Context, EncryptingSerializer, Keyset, Serializer as _};

/// Runs the command line with `env`; exit code and stdout's JSON lines.
fn consume(args: &[&str], env: &[(&str, &str)]) -> (i32, Vec<Value>, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .expect("run tombstone-crypt");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("panicked"), "{stderr}");
    let status = code(&out);
    let lines = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    (status, lines, stderr)
}

#[test]
fn consume_prints_our_records_decrypted_and_a_delete_as_null() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("consume-ours");
    let (path, keyset) = new_keyset(&dir, "values.json");
    let topic = fresh_topic("consume-ours");
    create_topic(&bootstrap, &topic, 1);
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let enc = |k: &[u8], v: &[u8]| {
        ser.serialize(&Context::new(&topic).with_key(k), Some(v))
            .unwrap()
    };
    let other = EncryptingSerializer::new(Bytes, Keyset::generate());
    let binary_key: &[u8] = &[0xff, 0x00, 0x01];
    produce(
        &bootstrap,
        &topic,
        &[
            (&b"k1"[..], enc(b"k1", br#"{"id":1,"ssn":"078-05-1120"}"#)),
            (b"k2", enc(b"k2", b"plain text")),
            (binary_key, enc(binary_key, &[0, 159, 146, 150])),
            (b"k1", None),
            (
                b"k3",
                other
                    .serialize(&Context::new(&topic).with_key(b"k3"), Some(b"x".as_ref()))
                    .unwrap(),
            ),
        ],
    );
    let (code, lines, stderr) = consume(
        &[
            "consume",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--keyset",
            &path,
            "--quiet",
        ],
        &[],
    );
    assert_eq!(code, 1, "a value did not decrypt: exit 1; {stderr}");
    assert_eq!(lines.len(), 5, "{lines:?}");
    assert_eq!(
        lines[0],
        json!({"partition": 0, "offset": 0, "key": "k1", "value": {"id": 1, "ssn": "078-05-1120"}})
    );
    assert_eq!(lines[1]["value"], json!("plain text"));
    assert_eq!(lines[2]["key_base64"], json!("/wAB"));
    assert_eq!(lines[2]["value"], json!("AJ+Slg=="));
    assert_eq!(lines[2]["value_encoding"], json!("base64"));
    assert_eq!(
        lines[3],
        json!({"partition": 0, "offset": 3, "key": "k1", "value": null}),
        "a delete is null"
    );
    assert!(
        lines[4].get("value").is_none(),
        "an undecryptable value is never null: {}",
        lines[4]
    );
    assert!(
        lines[4]["error"]
            .as_str()
            .unwrap()
            .contains("unknown key id"),
        "{}",
        lines[4]
    );
}

/// `--key-keyset`: record keys encrypted deterministically (as the proxy's
/// `key_keyset` and the library's writers write them) print decrypted, and
/// values are read bound to the decrypted key; a key that does not decrypt
/// under it (another keyset's) is an error line, exit 1, never a record.
/// Without `--key-keyset` the same topic's values do not decrypt (they are
/// bound to the plaintext key): the option is what reads them.
#[test]
fn consume_with_a_key_keyset_prints_keys_decrypted_and_refuses_a_foreign_key() {
    use tombstone_crypt::{DeterministicSerializer, KeyTemplate};
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("consume-key-keyset");
    let (path, keyset) = new_keyset(&dir, "values.json");
    let keys_path = dir.file("keys.json");
    let out = common::process::cli(&[
        "keyset",
        "new",
        "--template",
        "aes-siv",
        "--out-keyset",
        &keys_path,
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let keys = common::process::load(&keys_path);
    let topic = fresh_topic("consume-key-keyset");
    create_topic(&bootstrap, &topic, 1);
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let key_ser = DeterministicSerializer::new(Bytes, keys);
    let other_keys = DeterministicSerializer::new(
        Bytes,
        Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap(),
    );
    let ctx = Context::new(&topic);
    let wire =
        |s: &DeterministicSerializer<Bytes>, k: &[u8]| s.serialize(&ctx, Some(k)).unwrap().unwrap();
    let value = |k: &[u8], v: &[u8]| {
        ser.serialize(&Context::new(&topic).with_key(k), Some(v))
            .unwrap()
    };
    let (o1, o2, foreign) = (
        wire(&key_ser, b"order-1"),
        wire(&key_ser, b"order-2"),
        wire(&other_keys, b"order-3"),
    );
    produce(
        &bootstrap,
        &topic,
        &[
            (&o1[..], value(b"order-1", b"book")),
            (&o2[..], value(b"order-2", b"pen")),
            (&o2[..], None),
            (&foreign[..], value(b"order-3", b"lamp")),
        ],
    );
    let args = |with_keys: bool| {
        let mut a = vec![
            "consume".to_owned(),
            "--bootstrap".to_owned(),
            bootstrap.clone(),
            "--topic".to_owned(),
            topic.clone(),
            "--keyset".to_owned(),
            path.clone(),
            "--quiet".to_owned(),
        ];
        if with_keys {
            a.extend(["--key-keyset".to_owned(), keys_path.clone()]);
        }
        a
    };
    let with: Vec<String> = args(true);
    let (code_with, lines, stderr) =
        consume(&with.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_eq!(code_with, 1, "a key did not decrypt: exit 1; {stderr}");
    assert_eq!(lines.len(), 4, "{lines:?}");
    assert_eq!(
        lines[0],
        json!({"partition": 0, "offset": 0, "key": "order-1", "value": "book"})
    );
    assert_eq!(lines[1]["key"], json!("order-2"));
    assert_eq!(lines[1]["value"], json!("pen"));
    assert_eq!(
        lines[2],
        json!({"partition": 0, "offset": 2, "key": "order-2", "value": null}),
        "a delete is null"
    );
    assert!(
        lines[3].get("value").is_none(),
        "a record whose key does not decrypt is never a value: {}",
        lines[3]
    );
    assert!(
        lines[3]["error"]
            .as_str()
            .unwrap()
            .contains("the record key does not decrypt under --key-keyset"),
        "{}",
        lines[3]
    );
    // The control: without --key-keyset, the values bound to the plaintext
    // keys do not decrypt.
    let without: Vec<String> = args(false);
    let (code_without, lines, _) =
        consume(&without.iter().map(String::as_str).collect::<Vec<_>>(), &[]);
    assert_eq!(code_without, 1);
    let errors = lines.iter().filter(|l| l.get("error").is_some()).count();
    assert_eq!(
        errors, 3,
        "every value errs without the key keyset: {lines:?}"
    );
}

/// The test Schema Registry on a free loopback port, stopped when dropped.
struct TestRegistry {
    child: std::process::Child,
    url: String,
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry(py: &std::path::Path) -> TestRegistry {
    let script = common::root::repo_root().join("tests/interop/schema_registry_server.py");
    let mut child = Command::new(py)
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("start the test registry");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port: u16 = line.trim().parse().expect("the registry's port");
    TestRegistry {
        child,
        url: format!("http://127.0.0.1:{port}"),
    }
}

#[test]
fn consume_reads_what_confluents_producer_wrote_with_its_registry() {
    let Some(bootstrap) = bootstrap() else { return };
    let Some(py) = common::tink::python() else {
        return;
    };
    let server = registry(&py);
    // Confluent's rules as its documentation writes them (`onFailure`
    // "ERROR,NONE", the KEK's name, KMS type and key id): JSON, Avro, SIV,
    // DEKs rotated, payloads; every record reads.
    for case in [
        "field-gcm",
        "field-siv",
        "field-gcm-rotated",
        "payload-gcm",
        "payload-gcm-rotated",
        "avro-field-gcm",
        "avro-field-siv",
        "avro-field-gcm-rotated",
        "avro-payload-gcm",
    ] {
        let topic = fresh_topic(&format!("consume-confluent-{case}"));
        create_topic(&bootstrap, &topic, 1);
        let script = common::root::repo_root().join("tests/interop/confluent_peer.py");
        let mut child = Command::new(&py)
            .arg(script)
            .arg("produce")
            .env("CONFLUENT_PEER_REGISTRY", &server.url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(
                json!({"bootstrap": bootstrap, "topic": topic, "case": case})
                    .to_string()
                    .as_bytes(),
            )
            .unwrap();
        let out = child.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let written: Value = serde_json::from_slice(&out.stdout).unwrap();

        let args = [
            "consume",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--schema-registry",
            &server.url,
        ];
        // Without the secret: every present value is an error line that
        // says so, a delete still null.
        let (code, lines, stderr) = consume(&args, &[]);
        assert_eq!(code, 1, "{stderr}");
        let records = written["records"].as_array().unwrap();
        assert_eq!(lines.len(), records.len(), "{case}: {lines:?} {stderr}");
        for (l, w) in lines.iter().zip(records) {
            if w["value"].is_null() {
                assert_eq!(l["value"], Value::Null, "{case}: {l}");
            } else {
                assert!(
                    l.get("value").is_none()
                        && l["error"].as_str().unwrap().contains("no local-kms secret"),
                    "{case}: {l}"
                );
            }
        }

        let (code, lines, stderr) = consume(&args, &[("LOCAL_SECRET", "mysecret")]);
        assert_eq!(code, 0, "{case}: {stderr}");
        // Avro bytes print as base64 (the peer gives arrays of numbers).
        let want: Vec<Value> = written["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let mut v = r["value"].clone();
                if let Some(blob) = v.get_mut("blob") {
                    let bytes: Vec<u8> = serde_json::from_value(blob.clone()).unwrap();
                    *blob = json!(base64::engine::general_purpose::STANDARD.encode(bytes));
                }
                v
            })
            .collect();
        assert_eq!(lines.len(), want.len(), "{case}: {lines:?} {stderr}");
        for (i, (line, want)) in lines.iter().zip(want).enumerate() {
            assert_eq!(line["key"], json!(format!("c-{i}")), "{case}");
            assert_eq!(line["value"], want, "{case}: record {i}");
            if case == "avro-field-gcm" && i == 0 {
                assert_eq!(line["value"]["blob"], "AAH+/w==", "{case}");
            }
        }
        assert!(
            lines.iter().any(|l| l["value"].is_null()),
            "{case}: a delete among them"
        );

        // Another secret: every present value is an error line, never null.
        let (code, lines, stderr) = consume(&args, &[("LOCAL_SECRET", "another")]);
        assert_eq!(code, 1, "{case}: {stderr}");
        let want = written["records"].as_array().unwrap();
        assert_eq!(lines.len(), want.len(), "{case}: {lines:?} {stderr}");
        for (l, w) in lines.iter().zip(want) {
            if w["value"].is_null() {
                assert_eq!(
                    l["value"],
                    Value::Null,
                    "{case}: a delete needs no key: {l}"
                );
            } else {
                assert!(
                    l.get("value").is_none() && l.get("error").is_some(),
                    "{case}: {l}"
                );
            }
        }

        // audit reads the topic in Confluent's format: 3 keys live, 1
        // deleted, nothing broken.
        let audit_args = [
            "audit",
            "--bootstrap",
            &bootstrap,
            "--topic",
            &topic,
            "--schema-registry",
            &server.url,
            "--json",
            "-q",
        ];
        let secret = [("LOCAL_SECRET", "mysecret")];
        let (code, report, stderr) = consume(&audit_args, &secret);
        assert_eq!(code, 0, "{case}: {report:?} {stderr}");
        let r = &report[0];
        assert_eq!(
            (&r["live_keys"], &r["tombstones"], &r["broken_tombstones"]),
            (&json!(3), &json!(1), &json!(0)),
            "{case}: {r}"
        );
        if case.starts_with("avro") {
            // An Avro record schema has no null to write in a delete's
            // place (a writer would need a union with null).
            continue;
        }
        // A writer that turns a delete of c-1 into a value (the record
        // JSON `null`, encrypted where the rules say): audit finds it, and
        // the key counts as not live.
        let codec = ConfluentJson::new(LocalKms::new("mysecret"))
            .with_registry(Registry::new(&server.url).unwrap());
        let subject = format!("{topic}-value");
        let broken = codec.encode(&subject, Some(&Value::Null)).unwrap();
        produce(&bootstrap, &topic, &[(b"c-1", broken)]);
        let (code, report, stderr) = consume(&audit_args, &secret);
        assert_eq!(code, 1, "{case}: {report:?} {stderr}");
        let r = &report[0];
        assert_eq!(
            (&r["live_keys"], &r["broken_tombstones"]),
            (&json!(2), &json!(1)),
            "{case}: {r}"
        );
        // consume tells it from a delete.
        let (_, lines, _) = consume(&args, &secret);
        let last = lines.last().unwrap();
        assert_eq!(
            (&last["key"], &last["value"], &last["broken_delete"]),
            (&json!("c-1"), &Value::Null, &json!(true)),
            "{case}: {last}"
        );
        assert!(
            lines
                .iter()
                .filter(|l| l.get("broken_delete").is_some())
                .count()
                == 1
        );
        if case == "field-gcm" {
            // A registry that does not answer: nothing is known of the
            // records, so both commands stop with exit 2 (an I/O error),
            // never a value or a count of unreadable records.
            let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            let down = format!("http://{}", closed.local_addr().unwrap());
            drop(closed);
            for command in ["consume", "audit"] {
                let args = [
                    command,
                    "--bootstrap",
                    &bootstrap,
                    "--topic",
                    &topic,
                    "--schema-registry",
                    &down,
                    "-q",
                ];
                let (code, lines, stderr) = consume(&args, &secret);
                assert_eq!(code, 2, "{command}: {lines:?} {stderr}");
                assert!(stderr.contains("no answer"), "{command}: {stderr}");
                assert!(
                    lines
                        .iter()
                        .all(|l| l.get("value").is_none_or(Value::is_null)),
                    "{command}: {lines:?}"
                );
            }
        }
    }
}
