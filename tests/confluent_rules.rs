//! Confluent's rules as Confluent applies them, or refused: no field that
//! Confluent's client encrypts is written here in plaintext, and no
//! ciphertext is read as a value.
//!
//! Against confluent-kafka 2.16.1 for Python (`tests/interop/confluent_peer.py
//! rules`, its own serializers and `local-kms`): for each rule variant
//! Confluent writes records; here each is read as Confluent wrote it (and
//! what is written here, Confluent reads), or the schema is refused for
//! reading and writing. A wrong secret is an error, never a value. Then
//! the variants Confluent's client accepts and this codec refuses, each
//! registered here: refused with a message that names what.
#![cfg(feature = "confluent")]

use crate::common;

use common::confluent::{peer_env, reader, records};
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, DekAlgorithm, LocalKms};

const SECRET: &str = "mysecret";

/// What this codec must do with each variant Confluent's client writes.
enum Expect {
    /// Read each record as Confluent wrote it; Confluent reads ours.
    Read,
    /// Refuse the schema, naming this.
    Refuse(&'static str),
}

fn expect(case: &str) -> Expect {
    match case {
        "type-lowercase"
        | "params-in-metadata"
        | "metadata-tags"
        | "metadata-tags-nested"
        | "metadata-tags-star"
        | "rule-without-tags-strings"
        | "tag-on-array"
        | "nullable-object"
        | "avro-metadata-tags"
        | "avro-array-map-record"
        | "avro-rule-without-tags-strings" => Expect::Read,
        // Confluent's client fails to write these (an integer field): the
        // schema is refused here.
        "rule-without-tags" | "avro-rule-without-tags" => {
            Expect::Refuse("Confluent's client fails to write it")
        }
        // Confluent's client writes these fields in plaintext (it does not
        // read a tag on array items, and a tag on an object encrypts none
        // of its properties): refused here rather than guess.
        "tag-on-items" => Expect::Refuse("where Confluent's client does not read them"),
        "tag-on-object" => Expect::Refuse("a tag on an object"),
        // Confluent's client follows the $ref; this codec does not.
        "metadata-tags-ref" => Expect::Refuse("$ref"),
        other => panic!("a variant this test does not know: {other}"),
    }
}

/// Asks Confluent's client to read `records` (base64, `None` a tombstone)
/// under the case's schema and DEKs: each record's value, or why not.
fn confluent_reads(
    f: &Value,
    deks: Vec<Value>,
    records: &[Option<Vec<u8>>],
) -> Vec<Result<Value, String>> {
    use base64::Engine as _;
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let job = json!([{
        "schema": f["schema"],
        "subject": f["subject"],
        "secret": SECRET,
        "deks": deks,
        "records": records.iter().map(|r| r.as_deref().map(b64)).collect::<Vec<_>>(),
    }]);
    let out = peer_env("read", &job.to_string(), &[])
        .expect("the peer ran before")
        .expect("the peer reads");
    let out: Vec<Vec<Value>> = serde_json::from_str(&out).expect("the peer's JSON");
    out[0]
        .iter()
        .map(|r| match r.get("ok") {
            Some(v) => Ok(v.clone()),
            None => Err(r["error"].to_string()),
        })
        .collect()
}

#[test]
fn each_rule_variant_reads_as_confluent_writes_it_or_is_refused() {
    let Some(out) = peer_env("rules", "", &[]) else {
        return;
    };
    let cases: Vec<Value> = serde_json::from_str(&out.expect("the peer writes")).unwrap();
    assert_eq!(cases.len(), 16);
    for f in &cases {
        let name = f["case"].as_str().unwrap();
        if let Some(why) = f.get("write_error") {
            // Confluent's client refuses to write it (a rule without tags
            // on a schema with an integer field): refused here too.
            let Expect::Refuse(what) = expect(name) else {
                panic!("{name}: Confluent's client could not write it: {why}");
            };
            let refused = reader(f, SECRET)
                .err()
                .unwrap_or_else(|| panic!("{name}: registered"));
            assert!(refused.to_string().contains(what), "{name}: {refused}");
            continue;
        }
        match expect(name) {
            Expect::Read => {
                let codec = reader(f, SECRET).unwrap_or_else(|e| panic!("{name}: {e}"));
                let mut ours = Vec::new();
                for (bytes, value) in records(f) {
                    assert_eq!(codec.decode(bytes.as_deref()).unwrap(), value, "{name}");
                    let subject = f["subject"].as_str().unwrap();
                    ours.push(codec.encode(subject, value.as_ref()).unwrap());
                }
                // Ours, read by Confluent's client.
                let deks: Vec<Value> = f["deks"].as_array().unwrap().clone();
                let read = confluent_reads(f, deks, &ours);
                let want: Vec<Value> = records(f).map(|(_, v)| v.unwrap_or(Value::Null)).collect();
                let got: Vec<Value> = read
                    .into_iter()
                    .map(|r| r.unwrap_or_else(|e| panic!("{name}: Confluent: {e}")))
                    .collect();
                assert_eq!(got, want, "{name}");
                // A wrong secret: an error for every present record, never
                // a value (and so never ciphertext as a value).
                // (Here the DEKs are given up front: the wrong secret
                // fails as they are unwrapped.)
                if let Ok(wrong) = reader(f, "not the secret") {
                    for (bytes, _) in records(f) {
                        if bytes.is_some() {
                            assert!(wrong.decode(bytes.as_deref()).is_err(), "{name}");
                        }
                    }
                }
            }
            Expect::Refuse(what) => {
                let refused = reader(f, SECRET).err().unwrap_or_else(|| {
                    panic!("{name}: registered; a reader would see ciphertext as values")
                });
                assert!(refused.to_string().contains(what), "{name}: {refused}");
            }
        }
    }
}

/// A schema (JSON Schema, `ssn` tagged PII) with `rules` as its domain
/// rules and `extra` merged into it.
fn schema_with(rules: Value, extra: Value) -> Value {
    let doc = json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "ssn": {"type": "string", "confluent:tags": ["PII"]},
        },
    });
    let mut s = json!({
        "schemaType": "JSON",
        "schema": doc.to_string(),
        "ruleSet": {"domainRules": rules},
    });
    if let (Some(s), Some(extra)) = (s.as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            s.insert(k.clone(), v.clone());
        }
    }
    s
}

/// A rule as Confluent's documentation writes one.
fn rule(ty: &str, extra: Value) -> Value {
    common::confluent::documented_rule(ty, extra)
}

/// What Confluent's client accepts and this codec does not implement:
/// each is refused, for reading and for writing, with a message that
/// names it.
#[test]
fn what_this_codec_does_not_implement_is_refused() {
    let params = |p: Value| json!({"params": p});
    let rows: Vec<(&str, Value, &str)> = vec![
        (
            "a CEL field transform",
            schema_with(json!([rule("CEL_FIELD", json!({}))]), json!({})),
            "CEL_FIELD",
        ),
        (
            "mode WRITE",
            schema_with(
                json!([rule("ENCRYPT", json!({"mode": "WRITE"}))]),
                json!({}),
            ),
            "mode",
        ),
        (
            "kind CONDITION",
            schema_with(
                json!([rule("ENCRYPT", json!({"kind": "CONDITION"}))]),
                json!({}),
            ),
            "kind",
        ),
        (
            "onFailure DLQ",
            schema_with(
                json!([rule("ENCRYPT", json!({"onFailure": "DLQ"}))]),
                json!({}),
            ),
            "\"DLQ\"",
        ),
        (
            "onFailure ERROR,DLQ",
            schema_with(
                json!([rule("ENCRYPT", json!({"onFailure": "ERROR,DLQ"}))]),
                json!({}),
            ),
            "\"DLQ\"",
        ),
        (
            "onSuccess an application's own action",
            schema_with(
                json!([rule("ENCRYPT", json!({"onSuccess": "NONE,AuditAction"}))]),
                json!({}),
            ),
            "\"AuditAction\"",
        ),
        (
            "a rule without tags on a schema with an integer",
            schema_with(json!([rule("ENCRYPT", json!({"tags": []}))]), json!({})),
            "Confluent's client fails to write it",
        ),
        (
            "an unknown parameter",
            schema_with(
                json!([rule(
                    "ENCRYPT",
                    params(json!({"encrypt.kek.name": "k1", "encrypt.dek.shared": "true"}))
                )]),
                json!({}),
            ),
            "encrypt.dek.shared",
        ),
        (
            "a KMS type without its key id",
            schema_with(
                json!([rule(
                    "ENCRYPT",
                    params(json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "aws-kms"}))
                )]),
                json!({}),
            ),
            "one without the other",
        ),
        (
            "two ENCRYPT rules",
            schema_with(
                json!([
                    rule("ENCRYPT", json!({})),
                    rule("ENCRYPT", json!({"name": "r2"}))
                ]),
                json!({}),
            ),
            "two encryption rules",
        ),
        (
            "a metadata tag pattern with a character class",
            schema_with(
                json!([rule("ENCRYPT", json!({}))]),
                json!({"metadata": {"tags": {"**.[s]sn": ["PII"]}}}),
            ),
            "regular expression",
        ),
        (
            "an external reference",
            schema_with(
                json!([rule("ENCRYPT", json!({}))]),
                json!({"references": [{"name": "addr.json", "subject": "addr", "version": 1}]}),
            ),
            "references",
        ),
        (
            "migration rules",
            schema_with(
                json!([]),
                json!({"ruleSet": {"domainRules": [rule("ENCRYPT", json!({}))], "migrationRules": [rule("JSONATA", json!({"mode": "UPGRADE"}))]}}),
            ),
            "migration rules",
        ),
    ];
    for (what, schema, named) in rows {
        let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
        let refused = codec
            .register(1, "t-value", &schema)
            .err()
            .unwrap_or_else(|| panic!("{what}: registered"));
        assert!(refused.to_string().contains(named), "{what}: {refused}");
        // Nothing to write with: the record is refused, not written plain.
        assert!(codec
            .encode("t-value", Some(&json!({"id": 1, "ssn": "078-05-1120"})))
            .is_err());
    }
    // The control: the same rule as Confluent's client writes it registers.
    let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
    codec
        .register(
            1,
            "t-value",
            &schema_with(json!([rule("ENCRYPT", json!({}))]), json!({})),
        )
        .unwrap();
}

/// A subject whose earlier schema rotated DEKs (versions 1 and 2) and
/// whose new schema does not: Confluent's client writes and reads with
/// version 1, values with no version prefix; so does this codec.
#[test]
fn a_rule_that_stopped_rotating_writes_with_dek_version_1() {
    let rotating = schema_with(
        json!([rule(
            "ENCRYPT",
            json!({"params": {"encrypt.kek.name": "k1", "encrypt.dek.expiry.days": "1"}})
        )]),
        json!({}),
    );
    let still = schema_with(
        json!([rule(
            "ENCRYPT",
            json!({"params": {"encrypt.kek.name": "k1"}})
        )]),
        json!({}),
    );
    // Versions 1 and 2 of the subject's DEK, wrapped as the registry holds
    // them (made by a codec that rotated).
    let mut maker = ConfluentJson::new(LocalKms::new(SECRET));
    maker.add_kek("k1", "local-kms", "local-kms://k1");
    maker.register(1, "t-value", &rotating).unwrap();
    maker
        .encode("t-value", Some(&json!({"id": 1, "ssn": "one"})))
        .unwrap();
    let mut deks = maker.wrapped_deks();
    assert_eq!(deks.len(), 1);
    let mut two = ConfluentJson::new(LocalKms::new(SECRET));
    two.add_kek("k1", "local-kms", "local-kms://k1");
    two.register(1, "t-value", &rotating).unwrap();
    // A second DEK, made by a codec that knows none: wrapped, then given
    // version 2.
    two.encode("t-value", Some(&json!({"id": 2, "ssn": "two"})))
        .unwrap();
    let (k, s, a, _, w) = two.wrapped_deks().remove(0);
    deks.push((k, s, a, 2, w));

    let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
    for (k, s, a, v, w) in &deks {
        codec.add_wrapped_dek(k, s, *a, *v, w).unwrap();
    }
    codec.register(2, "t-value", &still).unwrap();
    let written = codec
        .encode("t-value", Some(&json!({"id": 3, "ssn": "three"})))
        .unwrap()
        .unwrap();
    // Readable by a reader with version 1 only (and no version prefix).
    let mut reader = ConfluentJson::new(LocalKms::new(SECRET));
    let (k, s, a, v, w) = deks.iter().find(|d| d.3 == 1).unwrap();
    assert_eq!((*a, *v), (DekAlgorithm::Aes256Gcm, 1));
    reader.add_wrapped_dek(k, s, *a, *v, w).unwrap();
    reader.register(2, "t-value", &still).unwrap();
    assert_eq!(
        reader.decode(Some(&written)).unwrap(),
        Some(json!({"id": 3, "ssn": "three"}))
    );
}

/// Credentials in a registry URL are taken out of it: sent as basic
/// authentication, never shown by `Debug` or in an error.
#[test]
fn registry_credentials_never_show() {
    use tombstone_crypt::confluent::Registry;
    let registry = Registry::new("http://alice:PwSecret9@127.0.0.1:1/").unwrap();
    let shown = format!("{registry:?}");
    assert!(
        !shown.contains("PwSecret9") && !shown.contains("alice"),
        "{shown}"
    );
    assert!(registry.sends_credentials_in_clear());
    let err = registry.latest("customers-value").unwrap_err().to_string();
    assert!(
        !err.contains("PwSecret9") && !err.contains("alice"),
        "{err}"
    );
    assert!(err.contains("127.0.0.1:1"), "{err}");
    let plain = Registry::new("https://127.0.0.1:1").unwrap();
    assert!(!plain.sends_credentials_in_clear());
}

/// Record keys through `ConfluentSerde::for_keys`: under a randomized rule
/// (AES-GCM, the default) a key would be written differently every time
/// and compaction would never meet its tombstone, so it is refused; under
/// AES256_SIV the same key is the same bytes every time.
#[test]
fn record_keys_under_a_randomized_rule_are_refused() {
    use std::sync::Arc;
    use tombstone_crypt::confluent::ConfluentSerde;
    use tombstone_crypt::{Context, Serializer as _};
    #[derive(serde::Serialize)]
    struct Key {
        id: i64,
        ssn: String,
    }
    let key = Key {
        id: 1,
        ssn: "078-05-1120".into(),
    };
    let ctx = Context::new("t");
    for (algorithm, deterministic) in [("AES256_GCM", false), ("AES256_SIV", true)] {
        let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
        let schema = schema_with(
            json!([rule(
                "ENCRYPT",
                json!({"params": {"encrypt.kek.name": "k1", "encrypt.dek.algorithm": algorithm}})
            )]),
            json!({}),
        );
        codec.register(1, "t-key", &schema).unwrap();
        let keys = ConfluentSerde::<Key>::new(Arc::new(codec)).for_keys();
        let once = keys.serialize(&ctx, Some(&key));
        if deterministic {
            let again = keys.serialize(&ctx, Some(&key)).unwrap();
            assert_eq!(once.unwrap(), again, "{algorithm}: one key, one form");
        } else {
            let refused = once.unwrap_err();
            assert!(refused.to_string().contains("randomized"), "{refused}");
        }
    }
}

/// `onFailure` and `onSuccess` per direction, as Confluent's client reads
/// them: the write part on write, the read part on read. `NONE` on a failed
/// read would hand on the ciphertext as the value: here the read fails
/// closed, naming the field, the rule and the action. `NONE` on a failed
/// write would write plaintext: no write under such a rule. `ERROR` on
/// success fails its direction.
#[test]
fn actions_apply_per_direction() {
    let record = json!({"id": 1, "ssn": "078-05-1120"});
    let with = |rules: Value| {
        let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
        codec
            .register(1, "t-value", &schema_with(rules, json!({})))
            .unwrap_or_else(|e| panic!("registered: {e}"));
        codec
    };
    // The documented default: reads and writes.
    let documented = with(json!([rule("ENCRYPT", json!({}))]));
    let bytes = documented
        .encode("t-value", Some(&record))
        .unwrap()
        .unwrap();
    assert_eq!(
        documented.decode(Some(&bytes)).unwrap(),
        Some(record.clone())
    );
    let deks = documented.wrapped_deks();

    // A reader without the DEK: under "ERROR,NONE" the read fails, naming
    // the field, the rule and NONE; never the ciphertext as the value.
    let lacking = with(json!([rule("ENCRYPT", json!({}))]));
    let e = lacking.decode(Some(&bytes)).unwrap_err().to_string();
    assert!(
        e.contains("/ssn") && e.contains("NONE") && e.contains("\"r\""),
        "{e}"
    );
    // A tampered field, the same.
    let mut tampered = bytes.clone();
    let at = tampered.len() - 4;
    tampered[at] = if tampered[at] == b'A' { b'B' } else { b'A' };
    let e = documented.decode(Some(&tampered)).unwrap_err().to_string();
    assert!(e.contains("/ssn") && e.contains("NONE"), "{e}");
    // Under "ERROR,ERROR" the same failure is the plain error.
    let strict = with(json!([rule(
        "ENCRYPT",
        json!({"onFailure": "ERROR,ERROR"})
    )]));
    let e = strict.decode(Some(&bytes)).unwrap_err().to_string();
    assert!(e.contains("/ssn") && !e.contains("NONE"), "{e}");

    // NONE on write (alone, or as the write part): registered, read, and
    // never written under.
    for on_failure in ["NONE", "NONE,ERROR", "NONE,NONE"] {
        let open = with(json!([rule("ENCRYPT", json!({"onFailure": on_failure}))]));
        for (k, s, a, v, w) in &deks {
            open.add_wrapped_dek(k, s, *a, *v, w).unwrap();
        }
        assert_eq!(
            open.decode(Some(&bytes)).unwrap(),
            Some(record.clone()),
            "{on_failure}"
        );
        let e = open
            .encode("t-value", Some(&record))
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("plaintext") && e.contains("onFailure"),
            "{on_failure}: {e}"
        );
    }

    // ERROR on success fails its own direction only.
    let write_fails = with(json!([rule("ENCRYPT", json!({"onSuccess": "ERROR,NONE"}))]));
    for (k, s, a, v, w) in &deks {
        write_fails.add_wrapped_dek(k, s, *a, *v, w).unwrap();
    }
    assert!(write_fails.encode("t-value", Some(&record)).is_err());
    assert_eq!(
        write_fails.decode(Some(&bytes)).unwrap(),
        Some(record.clone())
    );
    let read_fails = with(json!([rule("ENCRYPT", json!({"onSuccess": "NONE,ERROR"}))]));
    read_fails.encode("t-value", Some(&record)).unwrap();
    for (k, s, a, v, w) in &deks {
        read_fails.add_wrapped_dek(k, s, *a, *v, w).unwrap();
    }
    let e = read_fails.decode(Some(&bytes)).unwrap_err().to_string();
    assert!(e.contains("onSuccess ERROR on read"), "{e}");
    // A tombstone runs no rule, whatever the actions.
    assert_eq!(read_fails.decode(None).unwrap(), None);
    assert_eq!(write_fails.encode("t-value", None).unwrap(), None);

    // A payload rule under "ERROR,NONE" whose DEK is not to be had.
    let payload = |secret: &str| {
        let mut codec = ConfluentJson::new(LocalKms::new(secret));
        codec
            .register(
                1,
                "t-value",
                &json!({"schemaType": "JSON",
                    "schema": r#"{"type":"object","properties":{"id":{"type":"integer"}}}"#,
                    "ruleSet": {"encodingRules": [rule("ENCRYPT_PAYLOAD", json!({"tags": null}))]}}),
            )
            .unwrap();
        codec
    };
    let writer = payload(SECRET);
    let sealed = writer
        .encode("t-value", Some(&json!({"id": 7})))
        .unwrap()
        .unwrap();
    // A reader without the DEK.
    let reader = payload(SECRET);
    let e = reader.decode(Some(&sealed)).unwrap_err().to_string();
    assert!(e.contains("NONE"), "{e}");
}

/// A KEK in a KMS this crate has no client for (`gcp-kms`, `azure-kms`, as
/// in Confluent's documented examples): the schema is read, and the KEK is
/// an error where it is opened (naming the type), never `local-kms`.
#[test]
fn a_kms_type_without_a_client_here_is_read_and_fails_where_opened() {
    for kms in ["gcp-kms", "azure-kms"] {
        let mut codec = ConfluentJson::new(LocalKms::new(SECRET));
        codec
            .register(
                1,
                "t-value",
                &schema_with(
                    json!([rule(
                        "ENCRYPT",
                        json!({"params": {"encrypt.kek.name": "k1", "encrypt.kms.type": kms,
                                          "encrypt.kms.key.id": "projects/p/keys/k"}})
                    )]),
                    json!({}),
                ),
            )
            .unwrap_or_else(|e| panic!("{kms}: {e}"));
        let e = codec
            .encode("t-value", Some(&json!({"id": 1, "ssn": "078-05-1120"})))
            .unwrap_err()
            .to_string();
        assert!(e.contains(kms), "{kms}: {e}");
    }
}
