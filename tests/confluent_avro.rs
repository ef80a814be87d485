//! Confluent's format with Avro schemas (feature `confluent-avro`): records
//! Confluent's own client wrote (`tests/fixtures/confluent/avro-*.json`,
//! made by `scripts/confluent-fixtures.py write-avro` with confluent-kafka
//! 2.16.1 for Python, its `AvroSerializer` and encryption rules), and live
//! both ways against the same client (`tests/interop/confluent_peer.py`).
//! The schema has tagged `string`, nullable `string` and `bytes` fields; a
//! record's value is its JSON form (bytes as an array of numbers).
#![cfg(feature = "confluent-avro")]

use crate::common;

use common::confluent::{fixture, reader};

use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::confluent::{parse_frame, ConfluentJson, LocalKms};
use tombstone_crypt::Error;

const CASES: &[&str] = &[
    "avro-field-gcm",
    "avro-field-siv",
    "avro-field-gcm-rotated",
    "avro-payload-gcm",
];

/// The case's records, collected.
fn records(f: &Value) -> Vec<(Option<Vec<u8>>, Option<Value>)> {
    common::confluent::records(f).collect()
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[test]
fn every_avro_record_confluents_client_wrote_reads_back_here() {
    for name in CASES {
        let f = fixture(name);
        assert_eq!(f["schema"]["schemaType"], "AVRO", "{name}");
        let codec = reader(&f, "mysecret").expect(name);
        let mut read = 0;
        for (bytes, value) in records(&f) {
            let got = codec
                .decode(bytes.as_deref())
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(got, value, "{name}");
            read += usize::from(got.is_some());
        }
        assert_eq!(read, 3, "{name}: three present records, one tombstone");
        // What this reader undoes is really there: no tagged plaintext in
        // the bytes (the untagged name is), and another secret opens nothing.
        for (bytes, _) in records(&f) {
            let Some(bytes) = bytes else { continue };
            assert!(!contains(&bytes, b"078-05-1120"), "{name}");
            assert!(!contains(&bytes, b"a note"), "{name}");
            assert!(!contains(&bytes, &[0, 1, 254, 255]), "{name}");
            assert_eq!(
                contains(&bytes, b"Ada") || contains(&bytes, b"Bo") || contains(&bytes, b"Cy"),
                !name.contains("payload"),
                "{name}"
            );
        }
        assert!(reader(&f, "another secret").is_err(), "{name}");
    }
}

#[test]
fn a_deterministic_avro_record_written_here_is_confluents_bytes() {
    // AES-SIV fields under the DEK Confluent's client made: the same
    // record is the same bytes, byte for byte.
    let f = fixture("avro-field-siv");
    let codec = reader(&f, "mysecret").unwrap();
    let subject = f["subject"].as_str().unwrap();
    let mut compared = 0;
    for (bytes, value) in records(&f) {
        let ours = codec.encode(subject, value.as_ref()).unwrap();
        assert_eq!(ours, bytes);
        compared += usize::from(ours.is_some());
    }
    assert_eq!(compared, 3);
}

/// A codec that writes `f`'s subject under its schema (id `id`).
fn writer(f: &Value, id: u32) -> ConfluentJson {
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(id, f["subject"].as_str().unwrap(), &f["schema"])
        .unwrap();
    codec
}

#[test]
fn avro_written_here_reads_back_with_nulls_kept_and_tombstones_untouched() {
    for name in CASES {
        let f = fixture(name);
        let codec = writer(&f, 7);
        let subject = f["subject"].as_str().unwrap();
        for (_, value) in records(&f) {
            let bytes = codec.encode(subject, value.as_ref()).unwrap();
            assert_eq!(
                bytes.is_none(),
                value.is_none(),
                "{name}: a tombstone stays one"
            );
            let Some(bytes) = bytes else { continue };
            assert_eq!(parse_frame(&bytes).unwrap().0, 7);
            assert!(!contains(&bytes, b"078-05-1120"), "{name}");
            assert_eq!(codec.decode(Some(&bytes)).unwrap(), value, "{name}");
        }
        // A tombstone touches nothing: a codec with no schema and no DEK
        // reads and writes it.
        let empty = ConfluentJson::new(LocalKms::new("mysecret"));
        assert_eq!(empty.encode(subject, None).unwrap(), None);
        assert_eq!(empty.decode(None).unwrap(), None);
    }
    // A null field is the Avro null (union branch 0), not a ciphertext: the
    // record with `note: null` is shorter than the one with a note of one
    // byte by more than a ciphertext's overhead.
    let f = fixture("avro-field-gcm");
    let codec = writer(&f, 1);
    let subject = f["subject"].as_str().unwrap();
    let mut r = records(&f)[0].1.clone().unwrap();
    assert!(r["note"].is_null());
    let null = codec.encode(subject, Some(&r)).unwrap().unwrap();
    r["note"] = json!("x");
    let one = codec.encode(subject, Some(&r)).unwrap().unwrap();
    assert!(
        one.len() >= null.len() + 28,
        "{} vs {}",
        one.len(),
        null.len()
    );
}

/// Flips one bit of the encrypted part of a record: a payload's last byte;
/// for fields, the last byte of the record (the bytes field `blob`, last
/// in the schema, holds its ciphertext raw).
fn tamper(record: &mut [u8]) {
    *record.last_mut().unwrap() ^= 1;
}

#[test]
fn a_tampered_avro_record_or_bad_bytes_fail_with_clear_errors() {
    for name in CASES {
        let f = fixture(name);
        let codec = reader(&f, "mysecret").unwrap();
        let (bytes, _) = records(&f).into_iter().next().unwrap();
        let mut bytes = bytes.unwrap();
        tamper(&mut bytes);
        let e = codec.decode(Some(&bytes)).unwrap_err();
        // The fixtures' rules ask for NONE on a failed read: a payload's
        // failure says so (a field's, within its Error::Field).
        assert!(
            matches!(e, Error::Decryption | Error::Field { .. })
                || e.to_string().contains("asks for NONE"),
            "{name}: {e:?}"
        );
        // Truncated bodies and garbage: an error, never a panic or a
        // partial record.
        let (bytes, _) = records(&f).into_iter().next().unwrap();
        let bytes = bytes.unwrap();
        for cut in 5..bytes.len() {
            assert!(
                codec.decode(Some(&bytes[..cut])).is_err(),
                "{name}: cut {cut}"
            );
        }
        let mut long = bytes.clone();
        long.push(0);
        assert!(
            codec.decode(Some(&long)).is_err(),
            "{name}: a byte after the record"
        );
        // A body that declares a huge string: refused without allocating it.
        let mut huge = bytes[..5].to_vec();
        huge.extend_from_slice(&[2, 0xfe, 0xff, 0xff, 0xff, 0x0f]);
        assert!(codec.decode(Some(&huge)).is_err(), "{name}");
    }
}

#[test]
fn hostile_avro_bodies_are_refused_before_anything_is_allocated() {
    // A linked list: each level costs one byte (the union's branch), so
    // 100 000 bytes nest 100 000 deep; apache-avro's decoder recurses once
    // per level and would overflow the stack.
    let list = json!({"type": "record", "name": "Node", "fields": [
        {"name": "v", "type": "string", "confluent:tags": ["PII"]},
        {"name": "next", "type": ["null", "Node"]}]});
    let items = json!({"type": "record", "name": "Bag", "fields": [
        {"name": "nulls", "type": {"type": "array", "items": "null"}},
        {"name": "longs", "type": {"type": "array", "items": "long"}},
        {"name": "names", "type": {"type": "map", "values": "string"}}]});
    let rules = json!({"domainRules": [{"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD",
        "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "k1"}}]});
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(
            1,
            "list-value",
            &json!({"schema": list.to_string(), "ruleSet": rules}),
        )
        .unwrap();
    codec
        .register(2, "bag-value", &json!({"schema": items.to_string()}))
        .unwrap();
    // Written here, a short list reads back.
    let short = json!({"v": "a", "next": {"v": "b", "next": null}});
    let bytes = codec.encode("list-value", Some(&short)).unwrap().unwrap();
    assert_eq!(codec.decode(Some(&bytes)).unwrap(), Some(short));
    let frame = |id: u8, body: &[u8]| [&[0, 0, 0, 0, id][..], body].concat();
    // 100 000 levels: `v` the empty string (0x00), then branch 1 (0x02).
    let deep: Vec<u8> = std::iter::repeat_n([0u8, 2], 100_000).flatten().collect();
    let e = codec.decode(Some(&frame(1, &deep))).unwrap_err();
    assert!(e.to_string().contains("deeper than 128"), "{e}");
    // An array of nulls declaring 2^30 items in five bytes.
    let mut many = vec![0x80, 0x80, 0x80, 0x80, 0x08];
    many.extend_from_slice(&[0, 0, 0]);
    let e = codec.decode(Some(&frame(2, &many))).unwrap_err();
    assert!(e.to_string().contains("65536 empty items"), "{e}");
    // An array of longs declaring 2^30 items, with three bytes left.
    let mut longs = vec![0, 0x80, 0x80, 0x80, 0x80, 0x08, 2, 2, 2];
    longs.push(0);
    let e = codec.decode(Some(&frame(2, &longs))).unwrap_err();
    assert!(e.to_string().contains("shorter than its schema"), "{e}");
    // A map key longer than the body; a negative length.
    for body in [&[0, 0, 2, 0xfe, 0xff, 0x0f, b'k'][..], &[0, 0, 2, 1, b'k']] {
        let e = codec.decode(Some(&frame(2, body))).unwrap_err();
        assert!(e.to_string().contains("Avro body"), "{e}");
    }
    // A well-formed bag reads.
    let bag = json!({"nulls": [null, null], "longs": [1, -2], "names": {"a": "b"}});
    let bytes = codec.encode("bag-value", Some(&bag)).unwrap().unwrap();
    assert_eq!(codec.decode(Some(&bytes)).unwrap(), Some(bag));
}

#[test]
fn an_avro_schema_whose_tagged_field_cannot_be_encrypted_is_refused() {
    let rules = json!({"domainRules": [{"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD",
        "type": "ENCRYPT", "tags": ["PII"], "params": {"encrypt.kek.name": "k1"}}]});
    let schema = |field_type: Value| {
        json!({
            "schema": json!({"type": "record", "name": "R", "fields": [
                {"name": "n", "type": field_type, "confluent:tags": ["PII"]}]}).to_string(),
            "schemaType": "AVRO",
            "ruleSet": rules,
        })
    };
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    for bad in [
        json!("long"),
        json!(["null", "long"]),
        json!({"type": "array", "items": "long"}),
        json!({"type": "map", "values": ["null", "int"]}),
        json!({"type": "enum", "name": "E", "symbols": ["A"]}),
        json!({"type": "fixed", "name": "F", "size": 4}),
    ] {
        let e = codec
            .register(1, "r-value", &schema(bad.clone()))
            .unwrap_err();
        assert!(
            e.to_string()
                .contains("holds something other than strings, bytes or records"),
            "{bad}: {e}"
        );
    }
    // As Confluent's client: within a tagged field, every string and bytes
    // value (a union's branch, each item of an array or a map).
    for good in [
        json!("string"),
        json!("bytes"),
        json!(["null", "bytes"]),
        json!({"type": "array", "items": "string"}),
        json!({"type": "map", "values": ["null", "bytes"]}),
    ] {
        codec.register(1, "r-value", &schema(good)).unwrap();
    }
    // Not Avro at all: a clear error.
    let e = codec
        .register(
            2,
            "s-value",
            &json!({"schema": "{not avro", "schemaType": "AVRO"}),
        )
        .unwrap_err();
    assert!(e.to_string().contains("Avro schema"), "{e}");
    // Tags and no rule (a schema registered again without its rules):
    // nothing is written in plaintext.
    let mut bare = schema(json!("string"));
    bare.as_object_mut().unwrap().remove("ruleSet");
    codec.register(3, "bare-value", &bare).unwrap();
    let e = codec
        .encode("bare-value", Some(&json!({"n": "secret"})))
        .unwrap_err();
    assert!(e.to_string().contains("tagged field"), "{e}");
}

#[test]
fn tagged_fields_in_nested_records_arrays_maps_and_named_types_are_encrypted() {
    // The registry's own form: no schemaType for Avro.
    let text = json!({"type": "record", "name": "Order", "namespace": "shop", "fields": [
        {"name": "id", "type": "long"},
        {"name": "buyer", "type": {"type": "record", "name": "Person", "fields": [
            {"name": "email", "type": "string", "confluent:tags": ["PII"]},
            {"name": "city", "type": "string"}]}},
        {"name": "seller", "type": "Person"},
        {"name": "contacts", "type": {"type": "array", "items": "shop.Person"}},
        {"name": "notes", "type": {"type": "map", "values": {"type": "record", "name": "Note",
            "fields": [{"name": "text", "type": ["null", "string"], "confluent:tags": ["PII"]}]}}},
    ]});
    let schema = json!({"schema": text.to_string(), "ruleSet": {"domainRules": [
        {"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT",
         "tags": ["PII"], "params": {"encrypt.kek.name": "k1", "encrypt.dek.algorithm": "AES256_SIV"}}]}});
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec.register(1, "orders-value", &schema).unwrap();
    let record = json!({
        "id": 9,
        "buyer": {"email": "a@example.org", "city": "Lyon"},
        "seller": {"email": "s@example.org", "city": "Oslo"},
        "contacts": [{"email": "c1@example.org", "city": "Rome"}, {"email": "", "city": "Pisa"}],
        "notes": {"x": {"text": "ring twice"}, "y": {"text": null}},
    });
    let bytes = codec
        .encode("orders-value", Some(&record))
        .unwrap()
        .unwrap();
    for secret in [
        "a@example.org",
        "s@example.org",
        "c1@example.org",
        "ring twice",
    ] {
        assert!(!contains(&bytes, secret.as_bytes()), "{secret}");
    }
    for plain in ["Lyon", "Oslo", "Rome", "Pisa"] {
        assert!(contains(&bytes, plain.as_bytes()), "{plain}");
    }
    assert_eq!(codec.decode(Some(&bytes)).unwrap(), Some(record.clone()));
    // AES-SIV: the same email, the same ciphertext (what deterministic
    // encryption reveals), in another record too (a map's entries are
    // written in no set order: a record without one compares whole).
    let mut no_map = record.clone();
    no_map["notes"] = json!({});
    let once = codec
        .encode("orders-value", Some(&no_map))
        .unwrap()
        .unwrap();
    let again = codec
        .encode("orders-value", Some(&no_map))
        .unwrap()
        .unwrap();
    assert_eq!(again, once);
    // A record that does not match the schema: an error, nothing written.
    let e = codec
        .encode("orders-value", Some(&json!({"id": "nine"})))
        .unwrap_err();
    assert!(e.to_string().contains("Avro schema"), "{e}");
    assert!(!e.to_string().contains("nine"), "{e}");
}

#[test]
fn avro_bytes_as_base64_both_ways() {
    let f = fixture("avro-field-gcm");
    let mut codec = reader(&f, "mysecret").unwrap().avro_bytes_as_base64();
    let subject = f["subject"].as_str().unwrap();
    let (bytes, value) = records(&f).into_iter().next().unwrap();
    let value = value.unwrap();
    assert_eq!(value["blob"], json!([0, 1, 254, 255]));
    let read = codec.decode(bytes.as_deref()).unwrap().unwrap();
    assert_eq!(read["blob"], "AAH+/w==");
    // Written from the base64 form, read by a codec with the default form:
    // the same bytes.
    codec.register(9, subject, &f["schema"]).unwrap();
    let written = codec.encode(subject, Some(&read)).unwrap().unwrap();
    let mut plain = reader(&f, "mysecret").unwrap();
    plain.register(9, subject, &f["schema"]).unwrap();
    for (k, s, a, v, w) in codec.wrapped_deks() {
        plain.add_wrapped_dek(&k, &s, a, v, &w).unwrap();
    }
    assert_eq!(plain.decode(Some(&written)).unwrap(), Some(value));
    // Not base64 where bytes are due: an error.
    let mut bad = read.clone();
    bad["blob"] = json!("not base64!");
    let e = codec.encode(subject, Some(&bad)).unwrap_err();
    assert!(e.to_string().contains("not base64"), "{e}");
}

/// Runs the Confluent peer with `arg`, `input` on its stdin: its stdout.
fn peer(arg: &str, input: &str) -> Option<String> {
    common::confluent::peer_env(arg, input, &[])
        .map(|r| r.unwrap_or_else(|e| panic!("the peer failed: {e}")))
}

#[test]
fn what_confluents_client_writes_in_avro_now_reads_here() {
    let Some(out) = peer("write-avro", "") else {
        return;
    };
    let cases: Vec<Value> = serde_json::from_str(&out).unwrap();
    assert_eq!(cases.len(), CASES.len());
    for f in &cases {
        let name = f["case"].as_str().unwrap();
        let codec = reader(f, "mysecret").unwrap();
        for (bytes, value) in records(f) {
            assert_eq!(codec.decode(bytes.as_deref()).unwrap(), value, "{name}");
        }
    }
}

/// A case's fixture, the wrapped DEKs and the records written here.
type Job = (Value, Vec<Value>, Vec<Option<Vec<u8>>>);

#[test]
fn confluents_client_reads_every_avro_record_written_here() {
    let b64e = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let mut jobs = Vec::new();
    let mut expected = Vec::new();
    for (i, name) in CASES.iter().enumerate() {
        let f = fixture(name);
        let codec = writer(&f, u32::try_from(i + 1).unwrap());
        let subject = f["subject"].as_str().unwrap();
        let (mut written, mut values) = (Vec::new(), Vec::new());
        for (_, value) in records(&f) {
            written.push(codec.encode(subject, value.as_ref()).unwrap());
            values.push(value.unwrap_or(Value::Null));
        }
        let deks: Vec<Value> = codec
            .wrapped_deks()
            .iter()
            .map(|(k, s, a, v, w)| {
                json!({"kekName": k, "subject": s, "algorithm": a.name(), "version": v,
                       "encryptedKeyMaterial": b64e(w)})
            })
            .collect();
        jobs.push((f, deks, written));
        expected.push(values);
    }
    let job_json = |jobs: &[Job]| {
        Value::Array(
            jobs.iter()
                .map(|(f, deks, written)| {
                    json!({"schema": f["schema"], "subject": f["subject"], "secret": "mysecret",
                           "deks": deks,
                           "records": written.iter().map(|r| r.as_deref().map(b64e)).collect::<Vec<_>>()})
                })
                .collect(),
        )
        .to_string()
    };
    let Some(out) = peer("read", &job_json(&jobs)) else {
        return;
    };
    let out: Vec<Vec<Value>> = serde_json::from_str(&out).unwrap();
    for ((name, got), want) in CASES.iter().zip(out).zip(expected.clone()) {
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
    // The control: one bit flipped in each present record; Confluent's
    // client never reads one as what was written (the tombstone still
    // reads as null). Under the fixtures' "ERROR,NONE" it refuses a
    // tampered payload, and hands on a tampered field as it lies, its
    // ciphertext as the value: fail open, where this codec fails closed.
    for (_, _, written) in &mut jobs {
        for r in written.iter_mut().flatten() {
            tamper(r);
        }
    }
    let out: Vec<Vec<Value>> =
        serde_json::from_str(&peer("read", &job_json(&jobs)).unwrap()).unwrap();
    for ((name, got), want) in CASES.iter().zip(out).zip(expected) {
        for (i, r) in got.iter().enumerate() {
            if i == 2 {
                assert_eq!(r["ok"], Value::Null, "{name}");
            } else {
                assert!(
                    r.get("error").is_some() || r["ok"] != want[i],
                    "{name}: read a tampered record as written: {r}"
                );
            }
        }
    }
}
