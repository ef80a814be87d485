//! Arbitrary bytes as Confluent-format records (`tombstone_crypt::confluent`),
//! under a reader that knows a field-rule schema (id 1, DEK versions), a
//! payload-rule schema (id 2) and a deterministic one (id 3), each in JSON
//! Schema and in Avro (ids 4, 5, 6), with their DEKs.
//!
//! The first byte picks a leg: the input as a whole record; the input
//! spliced into a genuine record (the second byte says where); the input
//! as a schema registered under a new id, as a rule, or as a wrapped DEK.
//! Nothing may panic. A genuine record reads as what was written; a
//! payload record with any byte of its body changed never reads; a field
//! record that reads after a change has its plain fields' text at most
//! changed, never an encrypted field read as anything but its plaintext.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use serde_json::{json, Value};
use tombstone_crypt::confluent::{parse_frame, ConfluentJson, DekAlgorithm, LocalKms, Rule};

struct Fixture {
    reader: ConfluentJson,
    records: Vec<(Vec<u8>, Value)>,
}

/// Where Confluent's client runs a rule: ENCRYPT among the domain rules,
/// ENCRYPT_PAYLOAD among the encoding rules.
fn phase(rule: &str) -> &'static str {
    if rule == "ENCRYPT" {
        "domainRules"
    } else {
        "encodingRules"
    }
}

fn schema(rule: &str, algorithm: &str, expiry: &str) -> Value {
    json!({
        "schemaType": "JSON",
        "schema": r#"{"type":"object","properties":{"id":{"type":"integer"},
            "ssn":{"type":"string","confluent:tags":["PII"]},
            "cards":{"type":"array","items":{"type":"string"},"confluent:tags":["PII"]}}}"#,
        "ruleSet": {phase(rule): [{"mode": "WRITEREAD", "type": rule, "tags": ["PII"],
            "params": {"encrypt.kek.name": "k", "encrypt.dek.algorithm": algorithm,
                       "encrypt.dek.expiry.days": expiry}}]}
    })
}

fn avro_schema(rule: &str, algorithm: &str, expiry: &str) -> Value {
    json!({
        "schemaType": "AVRO",
        "schema": r#"{"type":"record","name":"R","fields":[{"name":"id","type":"long"},
            {"name":"ssn","type":"string","confluent:tags":["PII"]},
            {"name":"cards","type":["null",{"type":"array","items":"string"}],"confluent:tags":["PII"]}]}"#,
        "ruleSet": {phase(rule): [{"mode": "WRITEREAD", "type": rule, "tags": ["PII"],
            "params": {"encrypt.kek.name": "k", "encrypt.dek.algorithm": algorithm,
                       "encrypt.dek.expiry.days": expiry}}]}
    })
}

/// Payload-rule schemas: a changed body never reads.
const PAYLOAD_IDS: [u32; 2] = [2, 5];

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let kms = || LocalKms::new("fuzz");
        let mut writer = ConfluentJson::new(kms());
        let mut reader = ConfluentJson::new(kms());
        let schemas = [
            (1, "f-value", schema("ENCRYPT", "AES256_GCM", "1")),
            (2, "p-value", schema("ENCRYPT_PAYLOAD", "AES128_GCM", "0")),
            (3, "s-value", schema("ENCRYPT", "AES256_SIV", "0")),
            (4, "af-value", avro_schema("ENCRYPT", "AES256_GCM", "1")),
            (
                5,
                "ap-value",
                avro_schema("ENCRYPT_PAYLOAD", "AES128_GCM", "0"),
            ),
            (6, "as-value", avro_schema("ENCRYPT", "AES256_SIV", "0")),
        ];
        for (id, subject, s) in &schemas {
            writer.register(*id, subject, s).expect("schema");
            reader.register(*id, subject, s).expect("schema");
        }
        let values = [
            json!({"id": 1, "ssn": "078-05-1120", "cards": ["4111", ""]}),
            json!({"id": 2, "ssn": "", "cards": null}),
        ];
        let mut records = Vec::new();
        for (_, subject, _) in &schemas {
            for v in &values {
                let bytes = writer
                    .encode(subject, Some(v))
                    .expect("encode")
                    .expect("present");
                records.push((bytes, v.clone()));
            }
        }
        for (k, s, a, v, w) in writer.wrapped_deks() {
            reader.add_wrapped_dek(&k, &s, a, v, &w).expect("unwrap");
        }
        Fixture { reader, records }
    })
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    let Some((&leg, rest)) = data.split_first() else {
        return;
    };
    match leg % 6 {
        0 => {
            let _ = f.reader.decode(Some(rest));
            let _ = parse_frame(rest);
        }
        1 | 2 => {
            let Some((&at, patch)) = rest.split_first() else {
                return;
            };
            let (genuine, value) = &f.records[usize::from(at) % f.records.len()];
            assert_eq!(
                f.reader.decode(Some(genuine)).expect("genuine").as_ref(),
                Some(value)
            );
            let mut record = genuine.clone();
            let start = usize::from(at) * 7 % record.len();
            for (i, b) in patch.iter().enumerate().take(64) {
                if let Some(slot) = record.get_mut(start + i) {
                    *slot = *b;
                }
            }
            if leg % 6 == 2 {
                record.truncate(start + patch.len() % 8);
            }
            let Ok(Some(read)) = f.reader.decode(Some(&record)) else {
                return;
            };
            if record == *genuine {
                assert_eq!(&read, value);
                return;
            }
            // A payload record never reads once its body changed.
            let (id, body) = parse_frame(&record).expect("it read");
            let (_, genuine_body) = parse_frame(genuine).expect("genuine");
            assert!(
                !(PAYLOAD_IDS.contains(&id) && body != genuine_body),
                "a changed payload read"
            );
            // Whatever a field record reads as, an encrypted field's value
            // is a plaintext that was written, or null.
            for field in ["ssn"] {
                let got = &read[field];
                assert!(
                    got.is_null() || values_of(f, field).any(|v| v == *got),
                    "field {field} read as {got}"
                );
            }
        }
        3 => {
            if let Ok(text) = std::str::from_utf8(rest) {
                let mut scratch = ConfluentJson::new(LocalKms::new("fuzz"));
                let kind = if rest.len() % 2 == 0 { "JSON" } else { "AVRO" };
                let s = json!({"schemaType": kind, "schema": text, "ruleSet":
                    {"domainRules": [{"mode": "WRITEREAD", "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "k"}}]}});
                if scratch.register(9, "x-value", &s).is_ok() {
                    let _ = scratch.encode("x-value", Some(&json!({"ssn": "s", "a": [1, "b"]})));
                }
            }
        }
        4 => {
            if let Ok(v) = serde_json::from_slice::<Value>(rest) {
                let _ = Rule::from_json(&v);
            }
        }
        _ => {
            for a in [
                DekAlgorithm::Aes128Gcm,
                DekAlgorithm::Aes256Gcm,
                DekAlgorithm::Aes256Siv,
            ] {
                let _ = LocalKms::new("fuzz").unwrap(a, 1, rest);
            }
        }
    }
});

fn values_of<'a>(f: &'a Fixture, field: &'a str) -> impl Iterator<Item = Value> + 'a {
    f.records.iter().map(move |(_, v)| v[field].clone())
}
