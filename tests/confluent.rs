//! Confluent's format against records Confluent's own client wrote:
//! `tests/fixtures/confluent/*.json`, made by `scripts/confluent-fixtures.py`
//! with confluent-kafka 2.16.1 for Python (its `mock://` registries and the
//! `local-kms` KEK), committed as they were made; and live, both ways,
//! against the same client (`tests/interop/confluent_peer.py`, in the venv
//! of `scripts/tink-venv.sh`).
#![cfg(feature = "confluent")]

use crate::common;

use common::confluent::{b64, fixture, peer_env, reader, records};

use std::io::Write as _;
use std::process::{Command, Stdio};

use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::confluent::{parse_frame, ConfluentJson, DekAlgorithm, LocalKms};
use tombstone_crypt::Error;

const CASES: &[&str] = &[
    "field-gcm",
    "field-gcm128",
    "field-siv",
    "field-gcm-rotated",
    "payload-gcm",
    "payload-gcm-rotated",
];

#[test]
fn every_record_confluents_client_wrote_reads_back_here() {
    for name in CASES {
        let f = fixture(name);
        let codec = reader(&f, f["secret"].as_str().expect("secret")).expect(name);
        let mut read = 0;
        for (bytes, value) in records(&f) {
            let got = codec
                .decode(bytes.as_deref())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, value, "{name}");
            read += usize::from(got.is_some());
        }
        assert_eq!(read, 3, "{name}: three present records, one tombstone");
    }
}

#[test]
fn the_fixtures_are_encrypted_where_the_rules_say_and_nowhere_else() {
    // What this reader undoes is really there: the secret is not in the
    // bytes, the plain fields are, and a rotated rule puts the DEK version
    // before each value.
    for name in CASES {
        let f = fixture(name);
        let payload = name.starts_with("payload");
        let rotated = name.ends_with("rotated");
        let mut versions = Vec::new();
        for (bytes, value) in records(&f) {
            let Some(bytes) = bytes else {
                assert!(value.is_none());
                continue;
            };
            let (id, body) = parse_frame(&bytes).expect("frame");
            assert_eq!(u64::from(id), f["schema_id"].as_u64().unwrap());
            let text = String::from_utf8_lossy(body);
            assert!(!text.contains("078-05-1120"), "{name}: plaintext in {text}");
            if payload {
                assert!(!text.contains("\"name\""), "{name}");
                if rotated {
                    assert_eq!(body[0], 0);
                    versions.push(u32::from_be_bytes(body[1..5].try_into().unwrap()));
                }
            } else {
                let doc: Value = serde_json::from_slice(body).expect("a JSON body");
                let v = value.unwrap();
                assert_eq!(
                    doc["name"], v["name"],
                    "{name}: an untagged field stays plain"
                );
                assert_eq!(doc["id"], v["id"]);
                if v["note"].is_null() {
                    assert!(doc["note"].is_null(), "{name}: a null field stays null");
                }
                let ssn = b64(doc["ssn"].as_str().unwrap());
                if rotated {
                    assert_eq!(ssn[0], 0);
                    versions.push(u32::from_be_bytes(ssn[1..5].try_into().unwrap()));
                }
            }
        }
        if rotated {
            // One version per record as the writer's clock passed the
            // expiry (a field rule's fields each check it: two versions
            // in a record with two fields).
            assert_eq!(versions.first(), Some(&1), "{name}");
            assert!(
                versions.windows(2).all(|w| w[0] < w[1]),
                "{name}: {versions:?}"
            );
        }
    }
}

#[test]
fn a_deterministic_field_written_here_is_confluents_bytes() {
    // AES-SIV: with the same DEK and input, each field we write is the very
    // text Confluent's client wrote, and the record the same JSON (its
    // properties in serde_json's order: sorted, unless the application
    // turns on serde_json's `preserve_order`).
    let f = fixture("field-siv");
    let codec = reader(&f, "mysecret").unwrap();
    let subject = f["subject"].as_str().unwrap();
    let mut fields = 0;
    for (bytes, value) in records(&f) {
        let ours = codec.encode(subject, value.as_ref()).unwrap();
        let (Some(ours), Some(theirs)) = (ours, bytes) else {
            assert!(value.is_none());
            continue;
        };
        assert_eq!(ours[..5], theirs[..5], "the frame");
        let ours: Value = serde_json::from_slice(&ours[5..]).unwrap();
        let theirs: Value = serde_json::from_slice(&theirs[5..]).unwrap();
        assert_eq!(ours, theirs);
        for field in ["ssn", "note"] {
            if theirs[field].is_string() {
                assert_eq!(ours[field].as_str(), theirs[field].as_str(), "{field}");
                fields += 1;
            }
        }
    }
    assert_eq!(fields, 5);
}

#[test]
fn what_is_written_here_reads_with_only_the_registrys_wrapped_deks() {
    // A writer here makes its DEKs and wraps them; a reader that gets only
    // the schema and the wrapped DEKs (what Confluent's clients fetch from
    // the registries) reads every record, for every rule of the fixtures.
    for name in CASES {
        let f = fixture(name);
        let subject = f["subject"].as_str().unwrap();
        let mut writer = ConfluentJson::new(LocalKms::new("mysecret"));
        writer
            .register(7, subject, &f["schema"])
            .expect("the fixture's schema");
        let mut reader = ConfluentJson::new(LocalKms::new("mysecret"));
        reader.register(7, subject, &f["schema"]).unwrap();
        let mut written = Vec::new();
        for (_, value) in records(&f) {
            written.push((writer.encode(subject, value.as_ref()).unwrap(), value));
        }
        for (kek, subj, alg, version, wrapped) in writer.wrapped_deks() {
            reader
                .add_wrapped_dek(&kek, &subj, alg, version, &wrapped)
                .unwrap();
        }
        for (bytes, value) in written {
            assert_eq!(reader.decode(bytes.as_deref()).unwrap(), value, "{name}");
            if let (Some(bytes), Some(v)) = (bytes, value) {
                let (_, body) = parse_frame(&bytes).unwrap();
                if name.starts_with("field") {
                    let doc: Value = serde_json::from_slice(body).unwrap();
                    let ssn = b64(doc["ssn"].as_str().unwrap());
                    let plain = v["ssn"].as_str().unwrap().len();
                    let head = if name.ends_with("rotated") { 5 } else { 0 };
                    let tail = if name.contains("siv") { 16 } else { 28 };
                    assert_eq!(
                        ssn.len(),
                        head + tail + plain,
                        "{name}: Confluent's field layout"
                    );
                }
            }
        }
    }
}

#[test]
fn a_tombstone_touches_no_schema_dek_or_cipher() {
    // An empty codec: no schema, no DEK. A tombstone passes both ways.
    let codec = ConfluentJson::new(LocalKms::new("another secret"));
    assert_eq!(codec.encode("no-such-subject", None).unwrap(), None);
    assert_eq!(codec.decode(None).unwrap(), None);
    assert!(
        codec.wrapped_deks().is_empty(),
        "no DEK made for a tombstone"
    );
    // A present record with no schema is an error, not plaintext.
    assert!(codec
        .encode("no-such-subject", Some(&json!({"a": 1})))
        .is_err());
}

#[test]
fn another_secret_a_tampered_field_or_an_unknown_schema_fail_with_clear_errors() {
    let f = fixture("field-gcm");
    let Err(e) = reader(&f, "not the secret") else {
        panic!("a DEK unwrapped under another secret")
    };
    assert!(e.to_string().contains("does not unwrap"), "{e}");

    let codec = reader(&f, "mysecret").unwrap();
    let (bytes, _) = records(&f).next().unwrap();
    let bytes = bytes.unwrap();
    let (_, body) = parse_frame(&bytes).unwrap();
    let mut doc: Value = serde_json::from_slice(body).unwrap();
    let mut ssn = b64(doc["ssn"].as_str().unwrap());
    ssn[14] ^= 1;
    doc["ssn"] = Value::String(base64::engine::general_purpose::STANDARD.encode(&ssn));
    let mut tampered = bytes[..5].to_vec();
    tampered.extend_from_slice(&serde_json::to_vec(&doc).unwrap());
    match codec.decode(Some(&tampered)) {
        Err(Error::Field { path, cause }) => {
            assert_eq!(path, "/ssn");
            // The fixture's rule asks for NONE on a failed read: the
            // failure says so, and stays a failure.
            let why = cause.to_string();
            assert!(
                why.contains("asks for NONE") && why.contains("decryption failed"),
                "{why}"
            );
        }
        other => panic!("a tampered field read as {other:?}"),
    }

    let mut other_id = bytes.clone();
    other_id[4] ^= 0x40;
    let e = codec.decode(Some(&other_id)).unwrap_err();
    assert!(e.to_string().contains("not registered"), "{e}");
    for short in [&bytes[..0], &bytes[..3], &[1u8, 0, 0, 0, 1][..]] {
        assert!(matches!(
            codec.decode(Some(short)),
            Err(Error::Confluent { .. })
        ));
    }
}

#[test]
fn a_schema_whose_tags_this_reader_cannot_follow_is_refused() {
    // A tag inside oneOf: Confluent's own writer leaves such a field in
    // plaintext (seen with 2.16.1); here the schema is refused.
    let f = fixture("field-gcm");
    let mut schema = f["schema"].clone();
    schema["schema"] = Value::String(
        json!({"type": "object", "properties": {
            "ssn": {"type": "string", "confluent:tags": ["PII"]},
            "note": {"oneOf": [{"type": "null"}, {"type": "string", "confluent:tags": ["PII"]}]}
        }})
        .to_string(),
    );
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    let e = codec.register(1, "s-value", &schema).unwrap_err();
    assert!(e.to_string().contains("refusing the schema"), "{e}");
}

#[test]
fn debug_shows_no_key() {
    let f = fixture("field-gcm");
    let codec = reader(&f, "mysecret").unwrap();
    let text = format!("{codec:?} {:?}", LocalKms::new("mysecret"));
    assert!(!text.contains("mysecret"), "{text}");
    let d = &f["deks"][0];
    let kms = LocalKms::new("mysecret");
    let dek = kms
        .unwrap(
            DekAlgorithm::Aes256Gcm,
            1,
            &b64(d["encryptedKeyMaterial"].as_str().unwrap()),
        )
        .unwrap();
    let shown = format!("{dek:?}");
    assert_eq!(shown, "Dek { AES256_GCM, version 1 }");
}

/// Runs the Confluent peer with `arg`, `input` on its stdin: its stdout, or
/// its stderr when it fails.
fn peer(arg: &str, input: &str) -> Option<Result<String, String>> {
    peer_with(arg, input, None)
}

/// [`peer`], with the registry at `registry` (over HTTP) instead of one in
/// memory.
fn peer_with(arg: &str, input: &str, registry: Option<&str>) -> Option<Result<String, String>> {
    let env: Vec<(&str, &str)> = registry
        .map(|url| ("CONFLUENT_PEER_REGISTRY", url))
        .into_iter()
        .collect();
    peer_env(arg, input, &env)
}

/// What a writer here wrote: the schema's fixture, the wrapped DEKs, the
/// records (base64, null for a tombstone).
type Written = (
    Value,
    Vec<(String, String, DekAlgorithm, u32, Vec<u8>)>,
    Vec<Option<Vec<u8>>>,
);

/// Asks Confluent's client to read each job's records, its schema
/// registered under id `i + 1`: each record's value, or why it failed.
fn confluent_reads(jobs: &[Written]) -> Option<Vec<Vec<Result<Value, String>>>> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let jobs: Vec<Value> = jobs
        .iter()
        .map(|(f, deks, records)| {
            json!({
                "schema": f["schema"],
                "subject": f["subject"],
                "secret": "mysecret",
                "deks": deks.iter().map(|(k, s, a, v, w)| json!({
                    "kekName": k, "subject": s, "algorithm": a.name(), "version": v,
                    "encryptedKeyMaterial": b64(w),
                })).collect::<Vec<_>>(),
                "records": records.iter().map(|r| r.as_deref().map(b64)).collect::<Vec<_>>(),
            })
        })
        .collect();
    let out = peer("read", &Value::Array(jobs).to_string())?.expect("the peer runs");
    let out: Vec<Vec<Value>> = serde_json::from_str(&out).expect("the peer's JSON");
    Some(
        out.into_iter()
            .map(|job| {
                job.into_iter()
                    .map(|r| match r.get("ok") {
                        Some(v) => Ok(v.clone()),
                        None => Err(r["error"].to_string()),
                    })
                    .collect()
            })
            .collect(),
    )
}

/// Flips a bit of the encrypted part of a record written here: the last
/// byte of a payload, the last byte of the `ssn` field's ciphertext.
fn tamper(name: &str, record: &mut Vec<u8>) {
    if name.starts_with("payload") {
        *record.last_mut().unwrap() ^= 1;
        return;
    }
    let mut body: Value = serde_json::from_slice(&record[5..]).unwrap();
    let mut ssn = b64(body["ssn"].as_str().unwrap());
    *ssn.last_mut().unwrap() ^= 1;
    body["ssn"] = Value::String(base64::engine::general_purpose::STANDARD.encode(&ssn));
    record.truncate(5);
    record.extend_from_slice(&serde_json::to_vec(&body).unwrap());
}

#[test]
fn confluents_client_reads_every_record_written_here() {
    let mut jobs = Vec::new();
    let mut expected = Vec::new();
    for (i, name) in CASES.iter().enumerate() {
        let f = fixture(name);
        let subject = f["subject"].as_str().unwrap().to_owned();
        let mut writer = ConfluentJson::new(LocalKms::new("mysecret"));
        writer
            .register(u32::try_from(i + 1).unwrap(), &subject, &f["schema"])
            .unwrap();
        let (mut written, mut values) = (Vec::new(), Vec::new());
        for (_, value) in records(&f) {
            written.push(writer.encode(&subject, value.as_ref()).unwrap());
            values.push(value.unwrap_or(Value::Null));
        }
        jobs.push((f, writer.wrapped_deks(), written));
        expected.push(values);
    }
    let Some(read) = confluent_reads(&jobs) else {
        return;
    };
    for ((name, got), want) in CASES.iter().zip(read).zip(expected.clone()) {
        let got: Vec<Value> = got
            .into_iter()
            .map(|r| r.unwrap_or_else(|e| panic!("{name}: {e}")))
            .collect();
        assert_eq!(got, want, "{name}");
    }

    // The control: every present record with one bit of its encrypted
    // part flipped; Confluent's client never reads one as written (a
    // tombstone still reads as null). Under the fixtures' "ERROR,NONE" it
    // refuses a tampered payload and hands on a tampered field as it lies,
    // its ciphertext as the value: fail open, where this codec fails
    // closed.
    for (name, (_, _, records)) in CASES.iter().zip(jobs.iter_mut()) {
        for r in records.iter_mut().flatten() {
            tamper(name, r);
        }
    }
    let read = confluent_reads(&jobs).unwrap();
    for ((name, got), want) in CASES.iter().zip(read).zip(expected) {
        for (i, r) in got.iter().enumerate() {
            match r {
                Ok(Value::Null) if i == 2 => {}
                Ok(v) if *v == want[i] => {
                    panic!("{name}: Confluent's client read a tampered record as written: {v}")
                }
                Ok(_) | Err(_) => {}
            }
        }
    }
}

#[test]
fn what_confluents_client_writes_now_reads_here() {
    // Live: the peer writes every case afresh (new DEKs, nonces).
    let Some(out) = peer("write", "") else { return };
    let cases: Vec<Value> = serde_json::from_str(&out.expect("the peer writes")).unwrap();
    assert_eq!(cases.len(), CASES.len());
    for f in &cases {
        let name = f["case"].as_str().unwrap();
        let codec = reader(f, "mysecret").unwrap();
        for (bytes, value) in records(f) {
            assert_eq!(codec.decode(bytes.as_deref()).unwrap(), value, "{name}");
        }
    }
}

/// The test Schema Registry (`tests/interop/schema_registry_server.py`) on
/// a free loopback port, stopped when dropped.
struct TestRegistry {
    child: std::process::Child,
    url: String,
}

impl TestRegistry {
    fn start() -> Option<Self> {
        use std::io::BufRead as _;
        let py = common::tink::python()?;
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
        Some(TestRegistry {
            child,
            url: format!("http://127.0.0.1:{port}"),
        })
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn both_ways_through_a_schema_registry_over_http() {
    use tombstone_crypt::confluent::Registry;
    let Some(server) = TestRegistry::start() else {
        return;
    };
    // Confluent's client writes every case, its schemas, KEKs and DEKs
    // going to the registry over its REST client.
    let out = peer_with("write", "", Some(&server.url))
        .unwrap()
        .expect("the peer writes");
    let cases: Vec<Value> = serde_json::from_str(&out).unwrap();
    // A reader here that is given nothing but the secret and the registry.
    let reader = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    for f in &cases {
        let name = f["case"].as_str().unwrap();
        let subject = f["subject"].as_str();
        for (bytes, value) in records(f) {
            let got = reader.decode_for(subject, bytes.as_deref());
            assert_eq!(
                got.unwrap_or_else(|e| panic!("{name}: {e}")),
                value,
                "{name}"
            );
        }
    }

    // A writer here with the registry: the schema registered there, its
    // KEK and DEKs created there; Confluent's client reads every record
    // with what it finds in the registry alone.
    let registry = Registry::new(&server.url).unwrap();
    for f in &cases {
        let name = f["case"].as_str().unwrap();
        let subject = format!("ours-{name}-value");
        registry.register(&subject, &f["schema"]).unwrap();
        let writer = ConfluentJson::new(LocalKms::new("mysecret"))
            .with_registry(Registry::new(&server.url).unwrap());
        let mut written = Vec::new();
        let mut want = Vec::new();
        for (_, value) in records(f) {
            let bytes = writer.encode(&subject, value.as_ref()).unwrap();
            written.push(bytes.map(|b| base64::engine::general_purpose::STANDARD.encode(b)));
            want.push(value.unwrap_or(Value::Null));
        }
        let job = json!({"subject": subject, "secret": "mysecret", "records": written});
        let out = peer_with("read-registry", &job.to_string(), Some(&server.url))
            .unwrap()
            .expect("the peer reads");
        let got: Vec<Value> = serde_json::from_str(&out).unwrap();
        let got: Vec<Value> = got
            .into_iter()
            .map(|r| {
                r.get("ok")
                    .cloned()
                    .unwrap_or_else(|| panic!("{name}: {r}"))
            })
            .collect();
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn a_registry_that_is_down_slow_or_missing_a_dek_is_a_clear_error_and_nothing_is_written() {
    use tombstone_crypt::confluent::Registry;
    use tombstone_crypt::kms::KmsTimeouts;
    // Nothing listens on this port (bound, then closed).
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let quick = KmsTimeouts {
        request: std::time::Duration::from_millis(500),
        attempts: 2,
        backoff: std::time::Duration::from_millis(10),
    };
    let down = ConfluentJson::new(LocalKms::new("mysecret")).with_registry(
        Registry::new(&format!("http://127.0.0.1:{port}"))
            .unwrap()
            .with_timeouts(quick),
    );
    let e = down
        .encode("customers-value", Some(&json!({"ssn": "x"})))
        .unwrap_err();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    assert!(e.to_string().contains("no answer"), "{e}");
    assert_eq!(
        down.encode("customers-value", None).unwrap(),
        None,
        "a tombstone needs no registry"
    );

    // A slow registry: it accepts the connection and never answers. The
    // request timeout bounds the wait; the error says so, nothing is
    // written, and a read fails the same way.
    let slow = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let slow_url = format!("http://{}", slow.local_addr().unwrap());
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let stop = std::sync::Arc::clone(&done);
    let held = std::thread::spawn(move || {
        // Holds every connection open, unanswered, until told to stop.
        let mut open = Vec::new();
        slow.set_nonblocking(true).unwrap();
        while !stop.load(std::sync::atomic::Ordering::Relaxed) {
            if let Ok((c, _)) = slow.accept() {
                open.push(c);
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        open.len()
    });
    let hung = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&slow_url).unwrap().with_timeouts(quick));
    let started = std::time::Instant::now();
    let e = hung
        .encode("customers-value", Some(&json!({"ssn": "x"})))
        .unwrap_err();
    let waited = started.elapsed();
    assert!(matches!(e, Error::Registry { .. }), "{e}");
    assert!(e.to_string().contains("no answer"), "{e}");
    assert!(
        waited < std::time::Duration::from_secs(5),
        "two attempts of 500 ms, not {waited:?}"
    );
    let f = fixture("field-gcm");
    let (bytes, _) = records(&f).next().unwrap();
    assert!(hung
        .decode_for(f["subject"].as_str(), bytes.as_deref())
        .is_err());
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(
        held.join().unwrap() >= 2,
        "the registry was asked, and retried"
    );

    // A registry that has the schema but not the DEK a record names.
    let Some(server) = TestRegistry::start() else {
        return;
    };
    // A shared KEK (the registry would hand out its DEKs unwrapped) is
    // refused, not used.
    let body = r#"{"name":"kek-shared","kmsType":"local-kms","kmsKeyId":"k","shared":true}"#;
    let addr = server.url.strip_prefix("http://").unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "POST /dek-registry/v1/keks HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    assert!(
        answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200"),
        "{answer}"
    );
    let e = Registry::new(&server.url)
        .unwrap()
        .kek("kek-shared")
        .unwrap_err();
    assert!(e.to_string().contains("shared KEK"), "{e}");
    // So is one that a rule names with its KMS type and key id: the
    // registry's KEK is checked whatever the rule says, and a KEK there in
    // another place than the rule names is refused (as Confluent's client
    // does).
    let post_kek = |body: &str| {
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        write!(
            conn,
            "POST /dek-registry/v1/keks HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
        assert!(answer.contains(" 200 "), "{answer}");
    };
    post_kek(r#"{"name":"kek-elsewhere","kmsType":"local-kms","kmsKeyId":"a","shared":false}"#);
    for (kek, key_id, refused) in [
        ("kek-shared", "k", "shared KEK"),
        ("kek-elsewhere", "b", "the rule names local-kms \"b\""),
    ] {
        let doc = json!({"type": "object", "properties": {
            "ssn": {"type": "string", "confluent:tags": ["PII"]}}});
        let schema = json!({"schemaType": "JSON", "schema": doc.to_string(), "ruleSet": {"domainRules": [{
            "name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT", "tags": ["PII"],
            "params": {"encrypt.kek.name": kek, "encrypt.kms.type": "local-kms", "encrypt.kms.key.id": key_id}}]}});
        let subject = format!("{kek}-value");
        Registry::new(&server.url)
            .unwrap()
            .register(&subject, &schema)
            .unwrap();
        let writer = ConfluentJson::new(LocalKms::new("mysecret"))
            .with_registry(Registry::new(&server.url).unwrap());
        let e = writer
            .encode(&subject, Some(&json!({"ssn": "078-05-1120"})))
            .unwrap_err();
        assert!(e.to_string().contains(refused), "{kek}: {e}");
    }
    let f = fixture("field-gcm");
    let registry = Registry::new(&server.url).unwrap();
    let id = registry
        .register(f["subject"].as_str().unwrap(), &f["schema"])
        .unwrap();
    let (bytes, _) = records(&f).next().unwrap();
    let mut bytes = bytes.unwrap();
    bytes[1..5].copy_from_slice(&id.to_be_bytes());
    let reader = ConfluentJson::new(LocalKms::new("mysecret")).with_registry(registry);
    let e = reader
        .decode_for(f["subject"].as_str(), Some(&bytes))
        .unwrap_err();
    assert!(e.to_string().contains("no DEK version 1"), "{e}");
}

#[test]
fn a_schema_with_tags_and_no_encryption_rule_is_not_written_in_plaintext() {
    // What Confluent's auto.register.schemas registers: the schema without
    // its rules. Writing with it is refused unless asked for by name.
    let f = fixture("field-gcm");
    let mut schema = f["schema"].clone();
    schema.as_object_mut().unwrap().remove("ruleSet");
    let record = json!({"id": 1, "ssn": "078-05-1120"});
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec.register(1, "c-value", &schema).unwrap();
    let e = codec.encode("c-value", Some(&record)).unwrap_err();
    assert!(
        e.to_string()
            .contains("refusing to write them in plaintext"),
        "{e}"
    );
    let mut allowed =
        ConfluentJson::new(LocalKms::new("mysecret")).writing_tagged_fields_in_plaintext();
    allowed.register(1, "c-value", &schema).unwrap();
    let bytes = allowed.encode("c-value", Some(&record)).unwrap().unwrap();
    assert!(
        String::from_utf8_lossy(&bytes).contains("078-05-1120"),
        "asked for: plaintext"
    );
}

#[test]
fn a_subjects_latest_schema_is_asked_again_after_the_cache_ttl() {
    use std::time::Duration;
    use tombstone_crypt::confluent::Registry;
    let Some(server) = TestRegistry::start() else {
        return;
    };
    let f = fixture("field-gcm");
    let registry = Registry::new(&server.url).unwrap();
    let first = registry.register("t-value", &f["schema"]).unwrap();
    let cached = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    let fresh = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap())
        .with_cache_ttl(Duration::ZERO);
    let id_of = |b: Option<Vec<u8>>| parse_frame(&b.unwrap()).unwrap().0;
    let record = json!({"id": 1, "ssn": "x"});
    assert_eq!(
        id_of(cached.encode("t-value", Some(&record)).unwrap()),
        first
    );
    assert_eq!(
        id_of(fresh.encode("t-value", Some(&record)).unwrap()),
        first
    );
    // A new version of the subject's schema (the payload rule's).
    let second = registry
        .register("t-value", &fixture("payload-gcm")["schema"])
        .unwrap();
    assert_ne!(first, second);
    assert_eq!(
        id_of(cached.encode("t-value", Some(&record)).unwrap()),
        first,
        "within the TTL"
    );
    assert_eq!(
        id_of(fresh.encode("t-value", Some(&record)).unwrap()),
        second,
        "after the TTL"
    );
    // A record of the first version still reads, its schema fetched by id,
    // and that does not make it the latest.
    let old = cached.encode("t-value", Some(&record)).unwrap();
    let reader = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    assert_eq!(
        reader.decode_for(Some("t-value"), old.as_deref()).unwrap(),
        Some(record.clone())
    );
    assert_eq!(
        id_of(reader.encode("t-value", Some(&record)).unwrap()),
        second
    );
}

/// The KMS servers' settings (`scripts/kms.sh start`, exported by the test
/// command); `None` (the test skipped) only with `TOMBSTONE_SKIP_KMS`.
#[cfg(all(feature = "aws-kms", feature = "vault"))]
fn kms_env(name: &str) -> Option<String> {
    if std::env::var_os("TOMBSTONE_SKIP_KMS").is_some() {
        eprintln!("TOMBSTONE_SKIP_KMS is set: KMS server tests skipped");
        return None;
    }
    Some(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run ./scripts/test.sh, or source the file `scripts/kms.sh start` prints (or set TOMBSTONE_SKIP_KMS=1)")
    }))
}

#[cfg(all(feature = "aws-kms", feature = "vault"))]
#[test]
fn keks_in_aws_kms_and_vault_under_confluents_names_open_both_ways() {
    use tombstone_crypt::confluent::Registry;
    use tombstone_crypt::kms::{KmsClients, VaultClient};
    let (Some(aws), Some(vault), Some(vault_addr)) = (
        kms_env("TOMBSTONE_AWS_KEY_URI"),
        kms_env("TOMBSTONE_VAULT_KEY_URI"),
        kms_env("VAULT_ADDR"),
    ) else {
        return;
    };
    // Confluent's key ids: the key's ARN, the Vault key's URL.
    let arn = aws.strip_prefix("aws-kms://").unwrap().to_owned();
    let scheme = vault_addr.split("://").next().unwrap();
    let vault_url = format!("{scheme}://{}", vault.strip_prefix("hcvault://").unwrap());
    let cases = "field-gcm,payload-gcm-rotated";
    for (kms_type, key_id) in [("aws-kms", arn.as_str()), ("hcvault", vault_url.as_str())] {
        let Some(server) = TestRegistry::start() else {
            return;
        };
        let kms = format!("{kms_type} {key_id}");
        let env = [
            ("CONFLUENT_PEER_REGISTRY", server.url.as_str()),
            ("CONFLUENT_PEER_KMS", kms.as_str()),
            ("CONFLUENT_PEER_CASES", cases),
        ];
        // Confluent's client writes through its aws-kms or hcvault driver;
        // a reader here with no local secret reads every record, its DEKs
        // unwrapped by this crate's KMS client for that KMS.
        let out = peer_env("write", "", &env)
            .unwrap()
            .unwrap_or_else(|e| panic!("{kms_type}: the peer writes: {e}"));
        let written: Vec<Value> = serde_json::from_str(&out).unwrap();
        assert_eq!(written.len(), 2);
        let reader =
            ConfluentJson::without_local_kms().with_registry(Registry::new(&server.url).unwrap());
        for f in &written {
            let name = f["case"].as_str().unwrap();
            assert_eq!(f["rule"]["params"]["encrypt.kms.type"], kms_type, "{name}");
            // The DEK is wrapped by the KMS: the local-kms KEK does not
            // open it.
            let d = &f["deks"][0];
            let algorithm = DekAlgorithm::from_name(d["algorithm"].as_str().unwrap()).unwrap();
            let wrapped = b64(d["encryptedKeyMaterial"].as_str().unwrap());
            assert!(LocalKms::new("mysecret")
                .unwrap(algorithm, 1, &wrapped)
                .is_err());
            for (bytes, value) in records(f) {
                let got = reader.decode_for(f["subject"].as_str(), bytes.as_deref());
                assert_eq!(
                    got.unwrap_or_else(|e| panic!("{kms_type} {name}: {e}")),
                    value,
                    "{kms_type} {name}"
                );
            }
        }

        // Given the schema and the wrapped DEKs, as the fixtures are, with
        // no registry: the rule places the KEK in the KMS.
        for f in &written {
            let mut given = ConfluentJson::without_local_kms();
            given
                .register(
                    u32::try_from(f["schema_id"].as_u64().unwrap()).unwrap(),
                    f["subject"].as_str().unwrap(),
                    &f["schema"],
                )
                .unwrap();
            for d in f["deks"].as_array().unwrap() {
                given
                    .add_wrapped_dek(
                        d["kekName"].as_str().unwrap(),
                        d["subject"].as_str().unwrap(),
                        DekAlgorithm::from_name(d["algorithm"].as_str().unwrap()).unwrap(),
                        u32::try_from(d["version"].as_u64().unwrap()).unwrap(),
                        &b64(d["encryptedKeyMaterial"].as_str().unwrap()),
                    )
                    .unwrap_or_else(|e| panic!("{kms_type}: {e}"));
            }
            for (bytes, value) in records(f) {
                assert_eq!(given.decode(bytes.as_deref()).unwrap(), value);
            }
        }

        // A writer here with no local secret creates the KEK and DEKs in
        // the registry, wrapped by the KMS; Confluent's client reads every
        // record from the registry alone, through its own driver.
        let registry = Registry::new(&server.url).unwrap();
        for f in &written {
            let name = f["case"].as_str().unwrap();
            let subject = format!("ours-{kms_type}-{name}-value");
            registry.register(&subject, &f["schema"]).unwrap();
            let writer = ConfluentJson::without_local_kms()
                .with_registry(Registry::new(&server.url).unwrap());
            let mut bytes = Vec::new();
            let mut want = Vec::new();
            for (_, value) in records(f) {
                let b = writer.encode(&subject, value.as_ref()).unwrap();
                bytes.push(b.map(|b| base64::engine::general_purpose::STANDARD.encode(b)));
                want.push(value.unwrap_or(Value::Null));
            }
            // Its DEK is wrapped by the KMS, not a local secret.
            let (_, _, algorithm, version, wrapped) =
                writer.wrapped_deks().into_iter().next().unwrap();
            assert!(LocalKms::new("mysecret")
                .unwrap(algorithm, version, &wrapped)
                .is_err());
            let job = json!({"subject": subject, "secret": "not-the-kek", "records": bytes});
            let out = peer_env("read-registry", &job.to_string(), &env)
                .unwrap()
                .unwrap_or_else(|e| panic!("{kms_type} {name}: the peer reads: {e}"));
            let got: Vec<Value> = serde_json::from_str(&out).unwrap();
            let got: Vec<Value> = got
                .into_iter()
                .map(|r| {
                    r.get("ok")
                        .cloned()
                        .unwrap_or_else(|| panic!("{kms_type} {name}: {r}"))
                })
                .collect();
            assert_eq!(got, want, "{kms_type} {name}");
        }

        // Clients given explicitly are the only ones asked: with no client
        // for this KMS, a record does not open, and says why.
        let other: KmsClients =
            KmsClients::new().with(VaultClient::new("t").with_address("http://127.0.0.1:9"));
        let reader = ConfluentJson::without_local_kms()
            .with_registry(Registry::new(&server.url).unwrap())
            .with_kms_clients(if kms_type == "aws-kms" {
                other
            } else {
                KmsClients::new()
            });
        let f = &written[0];
        let (bytes, _) = records(f).next().unwrap();
        let e = reader
            .decode_for(f["subject"].as_str(), bytes.as_deref())
            .unwrap_err();
        let shown = format!("{e} {:?}", std::error::Error::source(&e));
        assert!(
            shown.contains("KMS") || shown.contains("kms"),
            "{kms_type}: {shown}"
        );
    }
}

/// A DEK version soft-deleted in the registry: records written under it
/// stay readable (a reader asks for deleted versions too, as Confluent's
/// client does); a new writer does not take it.
#[test]
fn a_soft_deleted_dek_still_reads_its_records() {
    use tombstone_crypt::confluent::Registry;
    let Some(server) = TestRegistry::start() else {
        return;
    };
    let f = fixture("field-gcm");
    let subject = "soft-deleted-value";
    let registry = Registry::new(&server.url).unwrap();
    registry.register(subject, &f["schema"]).unwrap();
    let writer = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    let value = json!({"id": 1, "name": "Ada", "ssn": "078-05-1120", "note": null});
    let bytes = writer.encode(subject, Some(&value)).unwrap();
    // Soft-delete version 1 of the subject's DEK.
    let kek = f["rule"]["params"]["encrypt.kek.name"].as_str().unwrap();
    let addr = server.url.strip_prefix("http://").unwrap();
    let mut conn = std::net::TcpStream::connect(addr).unwrap();
    write!(
        conn,
        "DELETE /dek-registry/v1/keks/{kek}/deks/{subject}/versions/1?algorithm=AES256_GCM HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
    assert!(answer.contains(" 200"), "{answer}");
    assert!(registry
        .dek(kek, subject, DekAlgorithm::Aes256Gcm, Some(1))
        .unwrap()
        .is_none());
    let reader = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    assert_eq!(
        reader.decode_for(Some(subject), bytes.as_deref()).unwrap(),
        Some(value)
    );
}
