//! `reencrypt --fields json` and `inspect --fields`, run as a process
//! against the loopback broker: records with encrypted fields written by
//! the library (`FieldEncrypting`) and by hand (odd whitespace), the keyset
//! rotated, every field rewritten under the new primary in place, each
//! record otherwise byte for byte as it was; a field moved to another path,
//! or a plain string that happens to read as a field, is reported and left
//! as it is while its record's other fields are rewritten; a run stopped
//! midway resumes.

use crate::common;

use std::collections::BTreeMap;

use base64::Engine as _;
use common::compacting::{read_all, RawRecord};
use common::kafka::{bootstrap, create_topic, fresh_topic, produce};
use common::process::{cli, code, json_of, load, new_keyset, Dir};
use serde::{Deserialize, Serialize};
use serde_json::json;
use tombstone_crypt::field::{self, Encrypted, FieldEncrypting};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer as _, EncryptingSerializer,
    Json, Keyset, Serializer as _,
};

/// `keyset rotate --in FILE`: the keyset with its new primary.
fn rotate(path: &str) -> Keyset {
    let out = cli(&["keyset", "rotate", "--in", path]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    load(path)
}

/// Where a record with the key `k` lives in `topic`.
fn record_ctx<'a>(topic: &'a str, k: &'a str) -> Context<'a> {
    Context::new(topic).with_key(k.as_bytes())
}

/// Each key's newest record, as a consumer replaying the topic sees it.
fn newest(records: &[RawRecord]) -> BTreeMap<String, RawRecord> {
    let mut out = BTreeMap::new();
    for r in records {
        let k = String::from_utf8(r.key.clone().unwrap()).unwrap();
        out.insert(k, r.clone());
    }
    out
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Address {
    city: String,
    street: Encrypted<String>,
}

#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Customer {
    id: u64,
    name: String,
    ssn: Encrypted<String>,
    phone: Option<Encrypted<String>>,
    scores: Vec<Encrypted<u64>>,
    address: Address,
}

fn customer(i: u64) -> Customer {
    Customer {
        id: i,
        name: format!("name {i}"),
        ssn: Encrypted::new(format!("secret-ssn-{i}")),
        phone: (i % 2 == 1).then(|| Encrypted::new(format!("secret-phone-{i}"))),
        scores: (0..i % 4).map(|s| Encrypted::new(1000 * i + s)).collect(),
        address: Address {
            city: "Lyon".into(),
            street: Encrypted::new(format!("secret-street-{i}")),
        },
    }
}

/// The fields of a JSON text, found independently of the command line:
/// each string whose text is canonical base64 of `0x01 | key id | ...`
/// (none of the strings here have escapes), with its key id.
fn field_strings(text: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(open) = rest.find('"') {
        let after = &rest[open + 1..];
        let close = after.find('"').expect("a closing quote");
        let s = &after[..close];
        if let Ok(b) = base64::engine::general_purpose::STANDARD.decode(s) {
            if b.len() > 5 && b[0] == 1 {
                out.push((s.to_owned(), u32::from_be_bytes([b[1], b[2], b[3], b[4]])));
            }
        }
        rest = &after[close + 1..];
    }
    out
}

/// `text` with each field's string emptied: what must not change.
fn blank(text: &str) -> String {
    let mut out = text.to_owned();
    for (s, _) in field_strings(text) {
        out = out.replace(&format!("\"{s}\""), "\"\"");
    }
    out
}

/// The hand-written record: spaces, tabs and newlines serde never writes,
/// a plain string, and two fields encrypted with `field::associated_data`.
fn raw_record(keyset: &Keyset, ctx: &Context<'_>) -> String {
    let enc = |pt: &[u8], path: &str| {
        let ad = field::associated_data(ctx, AadPolicy::TopicAndKey, path).unwrap();
        base64::engine::general_purpose::STANDARD.encode(keyset.encrypt(pt, &ad).unwrap())
    };
    format!(
        "{{\n  \"id\" : 7 ,\n\t\"note\":   \"plain text\",\n  \"secret\" :\t\"{}\"  ,\n  \"list\": [ 1 ,\n      \"{}\" ] ,\"empty\":{{ }}\n}}\n",
        enc(b"secret-raw-1", "/secret"),
        enc(b"secret-raw-2", "/list/1")
    )
}

/// `reencrypt --fields json` after a rotation: every field of every live
/// record under the new primary key, each record decoding to the same
/// value and byte for byte the same outside its fields' strings (null
/// fields null, odd whitespace kept), a record encrypted as a whole too
/// decrypted and encrypted again, a tombstone left a tombstone; in a
/// record whose fields were moved to other paths, those are reported and
/// left as they are, and its other fields rewritten; a second run has
/// nothing to write. `inspect --fields` lists the
/// hand-written record's fields by path and key id, never a plaintext.
#[test]
fn reencrypt_fields_json_rewrites_each_field_in_place() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("fields");
    let topic = fresh_topic("cli-fields");
    create_topic(&bootstrap, &topic, 2);
    let (ks_file, old) = new_keyset(&dir, "fields.json");
    let codec = FieldEncrypting::new(Json::<Customer>::new(), old.clone());
    let whole = EncryptingSerializer::new(Bytes, old.clone());

    let mut writes: Vec<(String, Option<Vec<u8>>)> = Vec::new();
    let mut originals: BTreeMap<String, (u64, String)> = BTreeMap::new();
    for i in 0..12u64 {
        let k = format!("c-{i}");
        if i % 5 == 0 {
            // An older record of the key first.
            let older = codec
                .serialize(&record_ctx(&topic, &k), Some(&customer(i + 100)))
                .unwrap();
            writes.push((k.clone(), older));
        }
        let v = codec
            .serialize(&record_ctx(&topic, &k), Some(&customer(i)))
            .unwrap()
            .unwrap();
        originals.insert(k.clone(), (i, String::from_utf8(v.clone()).unwrap()));
        writes.push((k, Some(v)));
    }
    // Deleted: a record, then its tombstone.
    let gone = codec
        .serialize(&record_ctx(&topic, "gone"), Some(&customer(50)))
        .unwrap();
    writes.push(("gone".into(), gone));
    writes.push(("gone".into(), None));
    // By hand.
    let raw = raw_record(&old, &record_ctx(&topic, "raw"));
    writes.push(("raw".into(), Some(raw.clone().into_bytes())));
    // Encrypted as a whole too (the same keyset).
    let inner = codec
        .serialize(&record_ctx(&topic, "wrapped"), Some(&customer(60)))
        .unwrap()
        .unwrap();
    let wrapped = whole
        .serialize(&record_ctx(&topic, "wrapped"), Some(&inner[..]))
        .unwrap();
    writes.push(("wrapped".into(), wrapped));
    // The negative control: two list elements swapped, each now at the
    // other's path.
    let (moved, moved_scores) = {
        let text = String::from_utf8(
            codec
                .serialize(&record_ctx(&topic, "moved"), Some(&customer(71)))
                .unwrap()
                .unwrap(),
        )
        .unwrap();
        let list = &text[text.find("\"scores\":[").unwrap()..];
        let list = &list[..list.find(']').unwrap()];
        let scores: Vec<String> = field_strings(list).into_iter().map(|(s, _)| s).collect();
        assert_eq!(scores.len(), 3, "{text}");
        let swapped = text
            .replacen(&scores[0], "@0", 1)
            .replacen(&scores[1], &scores[0], 1)
            .replacen("@0", &scores[1], 1);
        assert_ne!(swapped, text);
        (swapped, [scores[0].clone(), scores[1].clone()])
    };
    writes.push(("moved".into(), Some(moved.clone().into_bytes())));
    produce(&bootstrap, &topic, &writes);

    let new = rotate(&ks_file);
    let new_primary = new.primary().0;
    assert_ne!(new_primary, old.primary().0);
    let base = [
        "reencrypt",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &ks_file,
        "--fields",
        "json",
    ];
    let before = read_all(&bootstrap, &topic);
    let live = originals.len() + 2; // the customers, raw and wrapped

    // The plan: the live records, the moved one too (its other fields),
    // its moved fields named.
    let plan = cli(&base);
    assert_eq!(code(&plan), 1, "{}", String::from_utf8_lossy(&plan.stderr));
    let p = json_of(&plan);
    assert_eq!(p["values_to_rewrite"], json!(live + 1), "{p}");
    assert_eq!(p["skipped"]["fields_not_authenticating"], json!(1), "{p}");
    assert_eq!(p["fields"]["primary_key_id"], json!(new_primary));
    let listed = &p["fields"]["not_authenticating_records"];
    assert_eq!(listed.as_array().unwrap().len(), 1, "{p}");
    assert_eq!(listed[0]["paths"], json!(["/scores/0", "/scores/1"]));
    let printed = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(!printed.contains("secret-"), "{printed}");
    assert_eq!(
        read_all(&bootstrap, &topic),
        before,
        "a plan writes nothing"
    );
    // The text report names the record too.
    let text_args: Vec<&str> = base.iter().copied().filter(|a| *a != "--json").collect();
    let text = cli(&text_args);
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(
        text.contains("do not authenticate at /scores/0, /scores/1"),
        "{text}"
    );

    let mut apply = base.to_vec();
    apply.push("--apply");
    let done = cli(&apply);
    let d = json_of(&done);
    assert_eq!(code(&done), 1, "the moved fields are a finding: {d}");
    assert_eq!(d["written"], json!(live + 1), "{d}");
    let after = &d["after"]["fields"]["keys"];
    assert_eq!(after["current"], json!(live), "{d}");
    assert_eq!(after["under_older_keys"], json!(0), "{d}");
    assert_eq!(after["not_authenticating"], json!(1), "{d}");

    let all = read_all(&bootstrap, &topic);
    let (was, now) = (newest(&before), newest(&all));
    let fresh = FieldEncrypting::new(Json::<Customer>::new(), new.clone());
    for (k, (i, text)) in &originals {
        let v = now[k].value.clone().expect("live");
        let got = String::from_utf8(v.clone()).unwrap();
        assert_ne!(&got, text, "{k} rewritten");
        let fields = field_strings(&got);
        assert_eq!(fields.len(), field_strings(text).len(), "{k}");
        assert!(
            fields.iter().all(|(_, id)| *id == new_primary),
            "{k}: {got}"
        );
        assert_eq!(
            blank(&got),
            blank(text),
            "{k}: only the fields' strings change"
        );
        assert_eq!(
            fresh.deserialize(&record_ctx(&topic, k), Some(&v)).unwrap(),
            Some(customer(*i)),
            "{k}"
        );
        // A null field stays null.
        assert_eq!(got.contains("\"phone\":null"), i % 2 == 0, "{got}");
    }
    // The hand-written record: its whitespace kept, its fields open at
    // their paths under the new key.
    let got = String::from_utf8(now["raw"].value.clone().unwrap()).unwrap();
    assert_eq!(blank(&got), blank(&raw), "{got}");
    let fields = field_strings(&got);
    assert_eq!(fields.len(), 2);
    for ((s, id), (path, pt)) in fields
        .iter()
        .zip([("/secret", "secret-raw-1"), ("/list/1", "secret-raw-2")])
    {
        assert_eq!(*id, new_primary);
        let ad = field::associated_data(&record_ctx(&topic, "raw"), AadPolicy::TopicAndKey, path)
            .unwrap();
        let ct = base64::engine::general_purpose::STANDARD.decode(s).unwrap();
        assert_eq!(new.decrypt(&ct, &ad).unwrap(), pt.as_bytes());
    }
    // Encrypted as a whole: the value under the new key, its fields too,
    // its text otherwise the same.
    let v = now["wrapped"].value.clone().unwrap();
    assert_eq!(u32::from_be_bytes(v[1..5].try_into().unwrap()), new_primary);
    let plain = DecryptingDeserializer::new(Bytes, new.clone())
        .deserialize(&record_ctx(&topic, "wrapped"), Some(&v))
        .unwrap()
        .unwrap();
    let plain_text = String::from_utf8(plain.clone()).unwrap();
    assert!(field_strings(&plain_text)
        .iter()
        .all(|(_, id)| *id == new_primary));
    assert_eq!(
        blank(&plain_text),
        blank(std::str::from_utf8(&inner).unwrap())
    );
    assert_eq!(
        fresh
            .deserialize(&record_ctx(&topic, "wrapped"), Some(&plain))
            .unwrap(),
        Some(customer(60))
    );
    // The tombstone stays one: no record more.
    assert_eq!(now["gone"], was["gone"]);
    assert_eq!(now["gone"].value, None);
    // The moved record: its swapped scores as they were (under the old
    // key, still failing at their paths), every other field under the new
    // key, every other byte the same.
    let moved_now = String::from_utf8(now["moved"].value.clone().unwrap()).unwrap();
    assert_eq!(blank(&moved_now), blank(&moved), "{moved_now}");
    let (was_fields, now_fields) = (field_strings(&moved), field_strings(&moved_now));
    assert_eq!(was_fields.len(), now_fields.len());
    for (w, n) in was_fields.iter().zip(&now_fields) {
        if moved_scores.contains(&w.0) {
            assert_eq!(w, n, "a moved field is left as it is");
        } else {
            assert_eq!(n.1, new_primary, "{moved_now}");
        }
    }
    assert_eq!(all.len(), before.len() + live + 1);

    // Nothing more to write.
    let again = cli(&apply);
    assert_eq!(code(&again), 1);
    assert_eq!(json_of(&again)["written"], json!(0));

    // Copied to another topic: every field encrypted again bound to it
    // (current ones too), the tombstone copied, the moved record copied
    // with its moved fields as they are.
    let copy = fresh_topic("cli-fields-copy");
    create_topic(&bootstrap, &copy, 2);
    let mut to = apply.clone();
    to.extend(["--to-topic", copy.as_str()]);
    let out = cli(&to);
    let c = json_of(&out);
    assert_eq!(code(&out), 1, "{c}");
    assert_eq!(c["written"], json!(live + 2), "{c}");
    let copied = newest(&read_all(&bootstrap, &copy));
    assert_eq!(copied["gone"].value, None);
    let moved_copy = String::from_utf8(copied["moved"].value.clone().unwrap()).unwrap();
    assert_eq!(blank(&moved_copy), blank(&moved), "{moved_copy}");
    assert_eq!(
        c["after"]["fields"]["keys"]["not_authenticating"],
        json!(1),
        "{c}"
    );
    for (k, (i, text)) in &originals {
        let v = copied[k].value.clone().unwrap();
        let got = String::from_utf8(v.clone()).unwrap();
        assert_eq!(blank(&got), blank(text), "{k}");
        assert_eq!(
            fresh.deserialize(&record_ctx(&copy, k), Some(&v)).unwrap(),
            Some(customer(*i))
        );
        assert!(
            fresh.deserialize(&record_ctx(&topic, k), Some(&v)).is_err(),
            "{k}: bound to the copy"
        );
    }

    // inspect: the hand-written record's fields by path and key id, in the
    // order of its text, and whether each authenticates; no plaintext.
    let out = cli(&[
        "inspect",
        "--json",
        "--fields",
        "--keyset",
        &ks_file,
        "--topic",
        &topic,
        "--record-key",
        "raw",
        &got,
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let printed = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!printed.contains("secret-"), "{printed}");
    let r = json_of(&out);
    let listed: Vec<(String, u64, bool)> = r["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["key_id"].as_u64().unwrap(),
                f["authenticates"].as_bool().unwrap(),
            )
        })
        .collect();
    let np = u64::from(new_primary);
    assert_eq!(
        listed,
        [
            ("/secret".to_owned(), np, true),
            ("/list/1".to_owned(), np, true)
        ]
    );
    let text = cli(&["inspect", "--fields", &moved]);
    assert_eq!(code(&text), 0, "without the keyset: listed, not checked");
    let text = String::from_utf8_lossy(&text.stdout).to_string();
    assert!(text.contains("/scores/2\tkey id"), "{text}");
    assert!(!text.contains("secret-"), "{text}");
}

/// `reencrypt --fields json --apply` stopped after a few records (the
/// process aborts, as a kill would) and resumed with `--resume`: every
/// record ends rewritten once, as one run leaves it.
#[test]
fn reencrypt_fields_json_stopped_and_resumed_ends_as_one_run() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("fields-resume");
    let topic = fresh_topic("cli-fields-resume");
    create_topic(&bootstrap, &topic, 2);
    let (ks_file, old) = new_keyset(&dir, "fields.json");
    let codec = FieldEncrypting::new(Json::<Customer>::new(), old);
    let mut writes = Vec::new();
    let mut originals = BTreeMap::new();
    for i in 0..40u64 {
        let k = format!("c-{i}");
        let v = codec
            .serialize(&record_ctx(&topic, &k), Some(&customer(i)))
            .unwrap()
            .unwrap();
        originals.insert(k.clone(), (i, String::from_utf8(v.clone()).unwrap()));
        writes.push((k, Some(v)));
    }
    produce(&bootstrap, &topic, &writes);
    let new = rotate(&ks_file);
    let ck = dir.file("fields.checkpoint");
    let args = |extra: &[&str]| {
        let mut a = vec![
            "reencrypt",
            "--json",
            "--bootstrap",
            bootstrap.as_str(),
            "--topic",
            topic.as_str(),
            "--keyset",
            ks_file.as_str(),
            "--fields",
            "json",
            "--apply",
        ];
        a.extend_from_slice(extra);
        a.iter().map(|s| (*s).to_owned()).collect::<Vec<String>>()
    };
    let run = |a: Vec<String>| cli(&a.iter().map(String::as_str).collect::<Vec<_>>());
    let stopped = run(args(&[
        "--checkpoint",
        &ck,
        "--chunk-records",
        "4",
        "--fail-after-records",
        "10",
    ]));
    assert!(stopped.status.code().is_none(), "not stopped: {stopped:?}");
    assert!(std::path::Path::new(&ck).exists(), "the checkpoint is left");
    // Resumed without --fields, it is another plan: refused.
    let mut other = args(&["--resume", &ck]);
    other.retain(|a| a != "--fields" && a != "json");
    let refused = run(other);
    assert_eq!(
        code(&refused),
        2,
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
    let resumed = run(args(&["--resume", &ck]));
    let r = json_of(&resumed);
    assert_eq!(
        code(&resumed),
        0,
        "{r}\n{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    assert!(!std::path::Path::new(&ck).exists(), "removed when done");
    let now = newest(&read_all(&bootstrap, &topic));
    let fresh = FieldEncrypting::new(Json::<Customer>::new(), new.clone());
    for (k, (i, text)) in &originals {
        let v = now[k].value.clone().unwrap();
        let got = String::from_utf8(v.clone()).unwrap();
        assert!(field_strings(&got)
            .iter()
            .all(|(_, id)| *id == new.primary().0));
        assert_eq!(blank(&got), blank(text));
        assert_eq!(
            fresh.deserialize(&record_ctx(&topic, k), Some(&v)).unwrap(),
            Some(customer(*i))
        );
    }
    let plan = cli(&args(&[])
        .iter()
        .map(String::as_str)
        .filter(|a| *a != "--apply")
        .collect::<Vec<_>>());
    assert_eq!(code(&plan), 0);
    assert_eq!(json_of(&plan)["records_to_write"], json!(0));
}

/// A record with a plain string that holds a token, not a field.
#[derive(Serialize, Deserialize, Debug, PartialEq)]
struct Session {
    user: String,
    token: String,
    card: Encrypted<String>,
    notes: Vec<Encrypted<String>>,
}

/// `reencrypt --fields json` on records whose plain string happens to be
/// canonical base64 of `0x01 | key id | ...`, long enough for a field,
/// under a key id no keyset holds: that string is a finding (named by its
/// path, exit 1) and left as it is; the records' real fields are rewritten
/// under the new primary all the same, and the records read back whole
/// with the new keyset. A second run has nothing to write.
#[test]
fn reencrypt_fields_json_leaves_a_plain_string_that_reads_as_a_field_alone() {
    let Some(bootstrap) = bootstrap() else { return };
    let dir = Dir::new("fields-token");
    let topic = fresh_topic("cli-fields-token");
    create_topic(&bootstrap, &topic, 1);
    let (ks_file, old) = new_keyset(&dir, "fields.json");
    let codec = FieldEncrypting::new(Json::<Session>::new(), old.clone());
    // 0x01, the key id 0x0badf00d, then 43 bytes: 64 base64 characters.
    let mut raw = vec![1u8, 0x0b, 0xad, 0xf0, 0x0d];
    raw.extend((0..43u8).map(|i| i.wrapping_mul(37)));
    let token = base64::engine::general_purpose::STANDARD.encode(&raw);
    assert_eq!(
        field_strings(&format!("\"{token}\"")).len(),
        1,
        "reads as a field"
    );
    let session = |i: u64| Session {
        user: format!("u{i}"),
        token: token.clone(),
        card: Encrypted::new(format!("secret-card-{i}")),
        notes: vec![Encrypted::new(format!("secret-note-{i}"))],
    };
    let mut writes = Vec::new();
    let mut originals = BTreeMap::new();
    for i in 0..2u64 {
        let k = format!("s-{i}");
        let v = codec
            .serialize(&record_ctx(&topic, &k), Some(&session(i)))
            .unwrap()
            .unwrap();
        originals.insert(k.clone(), (i, String::from_utf8(v.clone()).unwrap()));
        writes.push((k, Some(v)));
    }
    produce(&bootstrap, &topic, &writes);
    let new = rotate(&ks_file);
    let new_primary = new.primary().0;
    let base = [
        "reencrypt",
        "--json",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &ks_file,
        "--fields",
        "json",
    ];

    let plan = cli(&base);
    let p = json_of(&plan);
    assert_eq!(code(&plan), 1, "{p}");
    assert_eq!(p["values_to_rewrite"], json!(2), "{p}");
    assert_eq!(p["skipped"]["fields_not_authenticating"], json!(2), "{p}");
    let listed = p["fields"]["not_authenticating_records"]
        .as_array()
        .unwrap();
    assert_eq!(listed.len(), 2, "{p}");
    assert!(
        listed.iter().all(|r| r["paths"] == json!(["/token"])),
        "{p}"
    );
    let printed = String::from_utf8_lossy(&plan.stdout).to_string();
    assert!(!printed.contains("secret-"), "{printed}");

    let mut apply = base.to_vec();
    apply.push("--apply");
    let done = cli(&apply);
    let d = json_of(&done);
    assert_eq!(code(&done), 1, "the token is a finding: {d}");
    assert_eq!(d["written"], json!(2), "{d}");
    let after = &d["after"]["fields"];
    assert_eq!(after["keys"]["under_older_keys"], json!(0), "{d}");
    assert_eq!(after["keys"]["not_authenticating"], json!(2), "{d}");
    // Fields counted in every value read: the records before the run too.
    assert_eq!(after["not_authenticating"], json!(4), "{d}");

    let now = newest(&read_all(&bootstrap, &topic));
    let fresh = FieldEncrypting::new(Json::<Session>::new(), new.clone());
    for (k, (i, text)) in &originals {
        let v = now[k].value.clone().unwrap();
        let got = String::from_utf8(v.clone()).unwrap();
        assert_eq!(
            blank(&got),
            blank(text),
            "{k}: only the fields' strings change"
        );
        let ids: Vec<u32> = field_strings(&got).into_iter().map(|(_, id)| id).collect();
        assert_eq!(ids, [0x0bad_f00d, new_primary, new_primary], "{k}: {got}");
        assert!(got.contains(&format!("\"token\":\"{token}\"")), "{got}");
        assert_eq!(
            fresh.deserialize(&record_ctx(&topic, k), Some(&v)).unwrap(),
            Some(session(*i)),
            "{k}"
        );
    }

    let again = cli(&apply);
    assert_eq!(code(&again), 1, "still a finding");
    assert_eq!(json_of(&again)["written"], json!(0));
}
