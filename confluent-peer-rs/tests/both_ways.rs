//! Confluent's Rust client (schema-registry-client 0.4.2) and
//! `tombstone_crypt::confluent::ConfluentJson`, both ways: what the crate
//! writes, ConfluentJson reads (given the schema with `register` and the
//! wrapped DEKs with `add_wrapped_dek`); what ConfluentJson writes (field
//! and payload rules, AES256_GCM and AES256_SIV), the crate reads; one
//! flipped ciphertext bit is refused by the other side. Where the crate
//! does not do what Confluent's format asks (a nullable tagged field, a
//! tombstone), the test pins what it does.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, DekAlgorithm, LocalKms};
use tombstone_crypt_confluent_peer::{
    read_jobs, records, rule_set, write_case, SCHEMA, SCHEMA_NOTE_STRING, SECRET,
};

/// ConfluentJson reading a case the crate wrote: its schema under its id,
/// its wrapped DEKs.
fn ours_for(case: &Value) -> ConfluentJson {
    let mut ours = ConfluentJson::new(LocalKms::new(case["secret"].as_str().expect("secret")));
    let id = u32::try_from(case["schema_id"].as_u64().expect("schema id")).expect("id");
    ours.register(
        id,
        case["subject"].as_str().expect("subject"),
        &case["schema"],
    )
    .expect("register");
    for d in case["deks"].as_array().expect("deks") {
        ours.add_wrapped_dek(
            d["kekName"].as_str().expect("kek"),
            d["subject"].as_str().expect("subject"),
            DekAlgorithm::from_name(d["algorithm"].as_str().expect("algorithm"))
                .expect("algorithm"),
            u32::try_from(d["version"].as_u64().expect("version")).expect("version"),
            &B64.decode(d["encryptedKeyMaterial"].as_str().expect("material"))
                .expect("base64"),
        )
        .expect("the crate's DEK unwraps under the same local-kms secret");
    }
    ours
}

fn bytes_of(record: &Value) -> Option<Vec<u8>> {
    record["bytes"]
        .as_str()
        .map(|b| B64.decode(b).expect("base64"))
}

/// What ConfluentJson writes for `records` under a schema of the Python
/// peer's shape: the job the crate's reader takes (schema id 1).
fn ours_write(
    schema_text: &str,
    rule_type: &str,
    algorithm: &str,
    records: &[Option<Value>],
) -> (Value, Vec<Option<Vec<u8>>>) {
    let subject = format!(
        "ours-{}-{}-value",
        rule_type.to_lowercase(),
        algorithm.to_lowercase()
    );
    let rules = rule_set(rule_type, "kek-ours", "local-kms://ours", algorithm);
    let schema = json!({"schema": schema_text, "schemaType": "JSON", "ruleSet": rules});
    let mut ours = ConfluentJson::new(LocalKms::new(SECRET));
    ours.register(1, &subject, &schema).expect("register");
    let written: Vec<Option<Vec<u8>>> = records
        .iter()
        .map(|r| ours.encode(&subject, r.as_ref()).expect("ours write"))
        .collect();
    let deks: Vec<Value> = ours
        .wrapped_deks()
        .into_iter()
        .map(|(kek, subject, algorithm, version, wrapped)| {
            json!({"kekName": kek, "subject": subject, "version": version,
                   "algorithm": algorithm.name(), "encryptedKeyMaterial": B64.encode(wrapped)})
        })
        .collect();
    assert_eq!(deks.len(), 1, "one DEK made");
    let job = json!({
        "schema": schema, "subject": subject, "secret": SECRET, "deks": deks,
        "records": written.iter().map(|b| b.as_ref().map(|b| B64.encode(b))).collect::<Vec<_>>(),
    });
    (job, written)
}

/// The crate reading one job: an outcome per record.
fn theirs_read(job: &Value) -> Vec<Value> {
    let out = read_jobs(&json!([job])).expect("read");
    out[0].as_array().expect("outcomes").clone()
}

/// One bit of the ciphertext flipped: the payload's last byte (its tag),
/// or the last byte of the field `ssn`'s ciphertext.
fn flip(record: &[u8], payload: bool) -> Vec<u8> {
    let mut out = record.to_vec();
    if payload {
        *out.last_mut().expect("a byte") ^= 1;
        return out;
    }
    let mut body: Value = serde_json::from_slice(&record[5..]).expect("JSON body");
    let mut ct = B64
        .decode(body["ssn"].as_str().expect("ssn"))
        .expect("base64");
    *ct.last_mut().expect("a byte") ^= 1;
    body["ssn"] = B64.encode(ct).into();
    out.truncate(5);
    out.extend(serde_json::to_vec(&body).expect("JSON"));
    out
}

#[test]
fn theirs_written_ours_read() {
    let records = records();
    for name in [
        "payload-gcm",
        "field-gcm-note-string",
        "field-siv-note-string",
    ] {
        let case = write_case(name, &records).expect("write");
        let ours = ours_for(&case);
        let mut read = 0;
        for r in case["records"].as_array().expect("records") {
            assert!(r.get("error").is_none(), "{name}: the crate refused {r}");
            let Some(bytes) = bytes_of(r) else {
                assert!(
                    r["value"].is_null(),
                    "{name}: only the tombstone has no bytes"
                );
                continue;
            };
            let got = ours.decode(Some(&bytes)).expect("ours read theirs");
            // What the crate itself reads back (where it differs from what
            // it was given, `read_back`): ours reads the same.
            let theirs = r.get("read_back").map_or(&r["value"], |b| &b["ok"]);
            assert_eq!(got.as_ref(), Some(theirs), "{name}: {r}");
            read += 1;
        }
        assert_eq!(read, 3, "{name}");
        // The record with `note: null`: the crate's field rule encrypts a
        // null string field as the empty string, so it comes back "".
        let first = &case["records"][0];
        assert!(first["value"]["note"].is_null());
        if name.starts_with("field") {
            let got = ours
                .decode(Some(&bytes_of(first).expect("bytes")))
                .expect("read");
            assert_eq!(got.expect("present")["note"], "", "{name}");
        } else {
            assert!(
                first.get("read_back").is_none(),
                "{name}: the payload rule keeps null"
            );
        }
    }
}

#[test]
fn theirs_refuses_a_nullable_tagged_field() {
    // The Python peer's schema: `note` is `["null", "string"]` and tagged.
    // The crate's field rule refuses every record, whatever `note` holds.
    let records = records();
    for name in ["field-gcm", "field-siv"] {
        let case = write_case(name, &records).expect("write");
        for r in case["records"].as_array().expect("records") {
            if r["value"].is_null() {
                continue;
            }
            assert!(r["bytes"].is_null(), "{name}: {r}");
            let e = r["error"].as_str().expect("an error");
            assert!(e.contains("unsupported field type NULL"), "{name}: {e}");
        }
        assert_eq!(case["deks"], json!([]), "{name}: no DEK made");
    }
}

#[test]
fn ours_written_theirs_read() {
    let records = records();
    for (rule_type, algorithm) in [
        ("ENCRYPT", "AES256_GCM"),
        ("ENCRYPT", "AES256_SIV"),
        ("ENCRYPT_PAYLOAD", "AES256_GCM"),
    ] {
        // A schema the crate's field rule follows: `note` not nullable.
        let (job, written) = ours_write(SCHEMA_NOTE_STRING, rule_type, algorithm, &records);
        let out = theirs_read(&job);
        assert_eq!(out.len(), records.len());
        for (i, (value, outcome)) in records.iter().zip(&out).enumerate() {
            let what = format!("{rule_type} {algorithm} record {i}: {outcome}");
            match value {
                None => {
                    // The tombstone: ours writes none, and the crate's
                    // reader, given the empty slice, panics.
                    assert!(written[i].is_none());
                    assert_eq!(outcome["error"], "panicked", "{what}");
                    let panic = outcome["panic"].as_str().expect("message");
                    assert!(panic.contains("index out of bounds"), "{what}");
                }
                Some(v) if rule_type == "ENCRYPT" && v["note"].is_null() => {
                    // Ours keeps a null field null; the crate's reader
                    // takes it for an empty ciphertext and fails.
                    let e = outcome["error"].as_str().expect("refused");
                    assert!(!e.is_empty(), "{what}");
                }
                Some(v) => assert_eq!(outcome["ok"], *v, "{what}"),
            }
        }
    }
}

#[test]
fn ours_written_theirs_read_nullable_field_left_encrypted() {
    // The Python peer's schema (`note` nullable and tagged): the crate's
    // reader does not decrypt `note`, and says nothing: the field comes back
    // as ours wrote it, ciphertext in base64.
    let records = records();
    let (job, written) = ours_write(SCHEMA, "ENCRYPT", "AES256_GCM", &records);
    let out = theirs_read(&job);
    let second = &out[1]["ok"];
    assert_eq!(second["ssn"], "", "ssn decrypted");
    let body: Value =
        serde_json::from_slice(&written[1].as_ref().expect("present")[5..]).expect("body");
    assert_ne!(body["note"], "a note");
    assert_eq!(second["note"], body["note"], "note left encrypted");
}

#[test]
fn one_flipped_bit_refused_both_ways() {
    let records = records();
    let present = records[1].clone();
    // Ours written, one bit flipped, the crate reads: refused; unflipped: read.
    for (rule_type, algorithm) in [
        ("ENCRYPT", "AES256_GCM"),
        ("ENCRYPT", "AES256_SIV"),
        ("ENCRYPT_PAYLOAD", "AES256_GCM"),
    ] {
        let (mut job, written) =
            ours_write(SCHEMA_NOTE_STRING, rule_type, algorithm, &[present.clone()]);
        let bytes = written[0].clone().expect("present");
        let flipped = flip(&bytes, rule_type == "ENCRYPT_PAYLOAD");
        assert_ne!(flipped, bytes);
        job["records"] = json!([B64.encode(&bytes), B64.encode(&flipped)]);
        let out = theirs_read(&job);
        assert_eq!(
            out[0]["ok"],
            present.clone().expect("present"),
            "{rule_type} {algorithm}"
        );
        assert!(
            out[1].get("ok").is_none(),
            "{rule_type} {algorithm}: {}",
            out[1]
        );
        assert_ne!(
            out[1]["error"], "panicked",
            "{rule_type} {algorithm}: an error, no panic"
        );
    }
    // The crate written, one bit flipped, ours reads: refused.
    for name in [
        "payload-gcm",
        "field-gcm-note-string",
        "field-siv-note-string",
    ] {
        let case = write_case(name, std::slice::from_ref(&records[1])).expect("write");
        let ours = ours_for(&case);
        let bytes = bytes_of(&case["records"][0]).expect("written");
        assert_eq!(
            ours.decode(Some(&bytes)).expect("read"),
            records[1].clone(),
            "{name}"
        );
        let flipped = flip(&bytes, name.starts_with("payload"));
        assert!(ours.decode(Some(&flipped)).is_err(), "{name}");
    }
}

#[test]
fn a_tombstone_has_no_form_in_the_crate() {
    // Its serializer takes a serde_json::Value: the nearest to a tombstone
    // a caller has, JSON null, is written as a present value (the frame and
    // `null`), which ours reads as a present JSON null, not a tombstone.
    let case = write_case("field-gcm-note-string", &[]).expect("write");
    let written = case["tombstone"]["serialize_json_null"]["ok"]
        .as_str()
        .expect("written");
    let bytes = B64.decode(written).expect("base64");
    assert_eq!(bytes, b"\x00\x00\x00\x00\x01null");
    let ours = ours_for(&case);
    assert_eq!(ours.decode(Some(&bytes)).expect("read"), Some(Value::Null));
    assert_eq!(ours.decode(None).expect("read"), None);
    // Its deserializer takes a &[u8]: the empty slice panics.
    assert_eq!(case["tombstone"]["deserialize_empty"]["error"], "panicked");
}
