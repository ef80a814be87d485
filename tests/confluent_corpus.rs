//! Confluent's own schemas as the corpus: the schemas and rule sets of
//! confluent-kafka-python's encryption tests and of the examples in
//! Confluent's documentation (`tests/fixtures/confluent-corpus/*.json`,
//! each with where it came from), run both ways against Confluent's client
//! (confluent-kafka 2.16.1 for Python, `tests/interop/confluent_peer.py
//! corpus` and `read`).
//!
//! Each case round-trips (what Confluent's client writes reads here as it
//! was written, what is written here Confluent's client reads, a wrong
//! secret is an error and never a value), or is refused for a construct on
//! the documented list (the `Refused` list of `tombstone_crypt::confluent`,
//! whose text this test reads). No case from Confluent's documentation may
//! be refused. The records Confluent's tests hold as bytes (written by
//! another of Confluent's clients, with their wrapped DEKs) read here and
//! in Confluent's client alike.
//!
//! Every rule of the corpus carries what Confluent's examples carry:
//! `onFailure` (`"ERROR,NONE"` in most), `params` with the KEK's name, KMS
//! type and key id, tags on fields. A parser that refuses `"ERROR,NONE"`
//! (the regression this corpus was made for) fails this test on every
//! case.
#![cfg(all(feature = "confluent", feature = "confluent-avro"))]

use crate::common;

use base64::Engine as _;
use common::confluent::{add_deks, b64, peer_env};
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, LocalKms};
use tombstone_crypt::Error;

const SECRET: &str = "mysecret";

/// The corpus, sorted by case name.
fn corpus() -> Vec<Value> {
    let dir = common::root::repo_root().join("tests/fixtures/confluent-corpus");
    let mut files: Vec<_> = std::fs::read_dir(&dir)
        .expect("the corpus")
        .map(|e| e.expect("an entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    files.sort();
    files
        .iter()
        .map(|p| {
            serde_json::from_str(&std::fs::read_to_string(p).expect("a fixture")).expect("JSON")
        })
        .collect()
}

/// A corpus value in this codec's JSON form with Avro bytes as base64
/// (`{"$bytes": b64}` as the string `b64`).
fn as_base64(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("$bytes") => o["$bytes"].clone(),
        Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), as_base64(v))).collect(),
        Value::Array(a) => a.iter().map(as_base64).collect(),
        other => other.clone(),
    }
}

/// A corpus value as the peer's `read` prints it (Avro bytes as a list of
/// numbers).
fn as_numbers(v: &Value) -> Value {
    match v {
        Value::Object(o) if o.len() == 1 && o.contains_key("$bytes") => {
            json!(b64(o["$bytes"].as_str().expect("base64")))
        }
        Value::Object(o) => o.iter().map(|(k, v)| (k.clone(), as_numbers(v))).collect(),
        Value::Array(a) => a.iter().map(as_numbers).collect(),
        other => other.clone(),
    }
}

/// The case's rule set with each KEK in `local-kms` (offline, as the peer
/// runs it), everything else as written: a rule without `kind` or `mode`
/// stays without.
fn rule_set(c: &Value) -> Value {
    let mut rules = c["ruleSet"].clone();
    for kind in ["domainRules", "encodingRules", "migrationRules"] {
        for rule in rules[kind].as_array_mut().into_iter().flatten() {
            let Some(params) = rule.get_mut("params").and_then(Value::as_object_mut) else {
                continue;
            };
            if params
                .get("encrypt.kms.type")
                .is_some_and(|t| t != "local-kms")
            {
                params.insert("encrypt.kms.type".into(), json!("local-kms"));
                params.insert("encrypt.kms.key.id".into(), json!("mykey"));
            }
        }
    }
    rules
}

/// The case's schema as this codec registers it: the fixture's own rule
/// set (not the one the peer's registry stored), its metadata and
/// references.
fn our_schema(c: &Value) -> Value {
    let mut s = json!({
        "schemaType": c["format"],
        "schema": c["schema"].to_string(),
        "ruleSet": rule_set(c),
    });
    if !c["metadata"].is_null() {
        s["metadata"] = c["metadata"].clone();
    }
    if let Some(refs) = c.get("references") {
        s["references"] = json!(refs
            .as_array()
            .expect("references")
            .iter()
            .map(|r| json!({"name": r["name"], "subject": r["subject"], "version": r["version"]}))
            .collect::<Vec<_>>());
    }
    s
}

/// A codec that knows `schema` as `id` of `subject` and these wrapped DEKs.
fn codec(
    schema: &Value,
    id: u64,
    subject: &str,
    deks: &[Value],
    secret: &str,
) -> Result<ConfluentJson, Error> {
    let mut codec = ConfluentJson::new(LocalKms::new(secret)).avro_bytes_as_base64();
    codec.register(u32::try_from(id).expect("an id"), subject, schema)?;
    add_deks(&codec, deks)?;
    Ok(codec)
}

/// Confluent's client reads `records` under `schema` (as its registry
/// stores it) of `subject` with these wrapped DEKs: each value (bytes as
/// lists of numbers), or why not.
fn confluent_reads(
    schema: &Value,
    subject: &str,
    deks: &[Value],
    records: &[Vec<u8>],
) -> Vec<Result<Value, String>> {
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let job = json!([{
        "schema": schema,
        "subject": subject,
        "secret": SECRET,
        "deks": deks,
        "records": records.iter().map(|r| b64(r)).collect::<Vec<_>>(),
    }]);
    let out = peer_env("read", &job.to_string(), &[])
        .expect("the peer ran before")
        .unwrap_or_else(|e| panic!("the peer reads: {e}"));
    let out: Vec<Vec<Value>> = serde_json::from_str(&out).expect("the peer's JSON");
    out[0]
        .iter()
        .map(|r| r.get("ok").cloned().ok_or_else(|| r["error"].to_string()))
        .collect()
}

/// The wrapped DEKs a codec holds, as the peer takes them.
fn deks_of(codec: &ConfluentJson) -> Vec<Value> {
    codec
        .wrapped_deks()
        .into_iter()
        .map(|(kek, subject, algorithm, version, wrapped)| {
            json!({
                "kekName": kek, "subject": subject, "algorithm": algorithm.name(),
                "version": version,
                "encryptedKeyMaterial": base64::engine::general_purpose::STANDARD.encode(wrapped),
            })
        })
        .collect()
}

/// The constructs `tombstone_crypt::confluent` documents as refused: the
/// text of its `Refused` list.
fn documented_refusals() -> String {
    let docs = std::fs::read_to_string(common::root::repo_root().join("src/confluent/mod.rs"))
        .expect("the module's docs");
    let start = docs
        .find("//! Refused (the schema, for reading and writing):")
        .expect("the Refused list");
    let rest = &docs[start..];
    let end = rest.find("\n//!\n").expect("the list's end");
    rest[..end].to_owned()
}

#[test]
fn confluents_own_schemas_round_trip_or_are_refused_as_documented() {
    let cases = corpus();
    assert!(cases.len() >= 18, "the corpus: {} cases", cases.len());
    let Some(out) = peer_env("corpus", &Value::from(cases.clone()).to_string(), &[]) else {
        return;
    };
    let written: Vec<Value> =
        serde_json::from_str(&out.unwrap_or_else(|e| panic!("the peer writes: {e}"))).unwrap();
    assert_eq!(written.len(), cases.len());
    let refusals = documented_refusals();
    let (mut round_trips, mut refused, mut records) = (0, 0, 0);
    for (c, w) in cases.iter().zip(&written) {
        let name = c["case"].as_str().expect("a name");
        assert_eq!(w["case"], c["case"]);
        let source = c["source"].as_str().expect("a source");
        let from_docs = c["documented"] == true;
        let subject = w["subject"].as_str().expect("a subject");
        let ours = our_schema(c);
        let deks = w["deks"].as_array().cloned().unwrap_or_default();
        match &c["expect"] {
            Value::String(s) if s == "round-trip" => {
                if let Some(e) = w.get("write_error") {
                    panic!("{name}: Confluent's client could not write it: {e}");
                }
                let reader = codec(
                    &ours,
                    w["schema_id"].as_u64().unwrap(),
                    subject,
                    &deks,
                    SECRET,
                )
                .unwrap_or_else(|e| panic!("{name}: refused here: {e}"));
                let mut mine = Vec::new();
                for r in w["records"].as_array().expect("records") {
                    let bytes = b64(r["bytes"].as_str().expect("bytes"));
                    let want = as_base64(&r["value"]);
                    assert_eq!(
                        r["read_back"], r["value"],
                        "{name}: Confluent reads its own"
                    );
                    let got = reader
                        .decode(Some(&bytes))
                        .unwrap_or_else(|e| panic!("{name}: reading Confluent's record: {e}"));
                    assert_eq!(got, Some(want.clone()), "{name}");
                    mine.push(
                        reader
                            .encode(subject, Some(&want))
                            .unwrap_or_else(|e| panic!("{name}: writing: {e}"))
                            .expect("a record"),
                    );
                    records += 1;
                }
                // Ours, read by Confluent's client.
                let want: Vec<Value> = w["records"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| as_numbers(&r["value"]))
                    .collect();
                let read = confluent_reads(&w["schema"], subject, &deks_of(&reader), &mine);
                let got: Vec<Value> = read
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|e| panic!("{name}: Confluent reads ours: {e}")))
                    .collect();
                assert_eq!(got, want, "{name}: Confluent reads ours");
                // A wrong secret: an error for every record, never a value
                // (the DEKs are given up front: it fails as they are
                // unwrapped; a codec given none fails on every record).
                assert!(
                    codec(
                        &ours,
                        w["schema_id"].as_u64().unwrap(),
                        subject,
                        &deks,
                        "not it"
                    )
                    .is_err(),
                    "{name}: a wrong secret"
                );
                let lacking = codec(
                    &ours,
                    w["schema_id"].as_u64().unwrap(),
                    subject,
                    &[],
                    "not it",
                )
                .expect("registered");
                for r in w["records"].as_array().unwrap() {
                    let bytes = b64(r["bytes"].as_str().unwrap());
                    assert!(lacking.decode(Some(&bytes)).is_err(), "{name}: no DEK");
                }
                // Records another of Confluent's clients wrote, kept in
                // Confluent's tests as bytes: read here, and by Confluent.
                if let Some(pre) = c.get("preserialized") {
                    let pre_subject = pre["subject"].as_str().unwrap();
                    let pre_deks = pre["deks"].as_array().unwrap();
                    let reader = codec(&ours, 1, pre_subject, pre_deks, SECRET).unwrap();
                    let mut bytes = Vec::new();
                    for r in pre["records"].as_array().unwrap() {
                        let b = b64(r["bytes"].as_str().unwrap());
                        let got = reader
                            .decode(Some(&b))
                            .unwrap_or_else(|e| panic!("{name}: preserialized: {e}"));
                        assert_eq!(got, Some(as_base64(&r["value"])), "{name}: preserialized");
                        bytes.push(b);
                        records += 1;
                    }
                    let want: Vec<Value> = pre["records"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|r| as_numbers(&r["value"]))
                        .collect();
                    let read = confluent_reads(&w["schema"], pre_subject, pre_deks, &bytes);
                    let got: Vec<Value> = read
                        .into_iter()
                        .map(|r| r.unwrap_or_else(|e| panic!("{name}: Confluent: {e}")))
                        .collect();
                    assert_eq!(
                        got, want,
                        "{name}: Confluent reads its preserialized records"
                    );
                }
                round_trips += 1;
            }
            Value::Object(o) if o.contains_key("refused") => {
                assert!(
                    !from_docs,
                    "{name}: from Confluent's documentation ({source}), so it may not be refused"
                );
                // What the error names, and the documented list's words
                // for it.
                let construct = o["refused"].as_str().expect("a construct");
                let listed = o["listed"].as_str().expect("the list's words");
                assert!(
                    refusals.contains(listed),
                    "{name}: {listed:?} is not on the documented list"
                );
                let e = codec(
                    &ours,
                    w["schema_id"].as_u64().unwrap_or(1),
                    subject,
                    &deks,
                    SECRET,
                )
                .err()
                .unwrap_or_else(|| panic!("{name}: registered here"))
                .to_string();
                assert!(e.contains(construct), "{name}: {e}");
                refused += 1;
            }
            other => panic!("{name}: an expectation this test does not know: {other}"),
        }
    }
    eprintln!(
        "corpus: {} cases, {round_trips} round-trip ({records} records), {refused} refused",
        cases.len()
    );
}

/// Every rule's `onFailure` as Confluent's documentation writes it reads
/// and writes here: the corpus holds at least one case with it, and the
/// cases from the documentation each carry it. A control for the test
/// above: without it, a corpus of `"ERROR,ERROR"` rules alone would not
/// have caught the regression.
#[test]
fn the_corpus_carries_the_rules_as_confluent_writes_them() {
    let cases = corpus();
    let rules = |c: &Value| -> Vec<Value> {
        ["domainRules", "encodingRules"]
            .iter()
            .flat_map(|k| c["ruleSet"][k].as_array().cloned().unwrap_or_default())
            .collect()
    };
    let encrypt = |r: &Value| {
        matches!(
            r["type"].as_str().map(str::to_ascii_uppercase).as_deref(),
            Some("ENCRYPT" | "ENCRYPT_PAYLOAD")
        )
    };
    let mut error_none = 0;
    for c in &cases {
        for r in rules(c).iter().filter(|r| encrypt(r)) {
            let p = &r["params"];
            for param in ["encrypt.kek.name", "encrypt.kms.type", "encrypt.kms.key.id"] {
                assert!(p[param].is_string(), "{}: {param}", c["case"]);
            }
            if r["onFailure"] == "ERROR,NONE" {
                error_none += 1;
            }
        }
    }
    assert!(error_none >= 10, "{error_none} rules with ERROR,NONE");
    let docs: Vec<&Value> = cases.iter().filter(|c| c["documented"] == true).collect();
    assert!(
        docs.len() >= 5,
        "{} cases from Confluent's documentation",
        docs.len()
    );
    // One of them as the quick start writes its rule: no kind, no mode.
    assert!(docs.iter().any(|c| rules(c)
        .iter()
        .any(|r| r.get("mode").is_none() && r.get("kind").is_none())));
}
