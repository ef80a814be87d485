//! Attacks on Confluent's rules as this codec reads them: actions per
//! direction, rules without kind or mode, KMS types, KEK placements,
//! parameters and rule sets of odd JSON types, disabled rules, a registry
//! that fails mid-read, hostile sizes. What each tries to make the codec
//! do: write a field or a payload in plaintext, hand on ciphertext as a
//! value, open a KEK under local-kms that a rule or the application placed
//! elsewhere, take a failure of the environment for a bad value (or the
//! reverse), panic, or echo what it was sent at length.
//!
//! Each test says whether it was found open and is closed now ("Found:")
//! or held from the start ("Held:").
#![cfg(all(feature = "confluent", feature = "confluent-avro"))]

use crate::common;

use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, DekAlgorithm, LocalKms, Rule};
use tombstone_crypt::Error;

const SECRET: &str = "mysecret";
const SSN: &str = "078-05-1120";
const SUBJECT: &str = "t-value";

// ---------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------

fn rule(ty: &str, extra: Value) -> Value {
    common::confluent::documented_rule(ty, extra)
}

fn json_doc() -> Value {
    json!({
        "type": "object",
        "properties": {
            "id": {"type": "integer"},
            "ssn": {"type": "string", "confluent:tags": ["PII"]},
        },
    })
}

fn json_schema(rule_set: Value) -> Value {
    json!({"schemaType": "JSON", "schema": json_doc().to_string(), "ruleSet": rule_set})
}

fn avro_text() -> String {
    json!({"type": "record", "name": "C", "namespace": "ex", "fields": [
        {"name": "id", "type": "long"},
        {"name": "ssn", "type": "string", "confluent:tags": ["PII"]},
        {"name": "blob", "type": "bytes", "confluent:tags": ["PII"]},
    ]})
    .to_string()
}

fn avro_schema(rule_set: Value) -> Value {
    json!({"schemaType": "AVRO", "schema": avro_text(), "ruleSet": rule_set})
}

fn record() -> Value {
    json!({"id": 1, "ssn": SSN})
}

fn avro_record() -> Value {
    json!({"id": 1, "ssn": SSN, "blob": [7, 7, 7, 7, 7, 7]})
}

fn codec_with(schema: &Value) -> Result<ConfluentJson, Error> {
    let mut c = ConfluentJson::new(LocalKms::new(SECRET));
    c.register(1, SUBJECT, schema)?;
    Ok(c)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

/// Every wrapped DEK of `from` opens under the local-kms secret `SECRET`.
fn wrapped_under_local_secret(from: &ConfluentJson) -> bool {
    let deks = from.wrapped_deks();
    !deks.is_empty()
        && deks.iter().all(|(k, s, a, v, w)| {
            ConfluentJson::new(LocalKms::new(SECRET))
                .add_wrapped_dek(k, s, *a, *v, w)
                .is_ok()
        })
}

fn parse(r: &Value) -> Result<Option<Rule>, Error> {
    Rule::from_json(r)
}

// =====================================================================
// (4) Actions of odd shapes: refused, no panic.
// =====================================================================

/// Held: onFailure / onSuccess of any non-string JSON type, with odd
/// whitespace, unicode look-alikes, empty parts, lower case or more than
/// two parts is refused at parse (naming the field), never read as
/// ERROR/NONE or as the default.
#[test]
fn odd_actions_are_refused() {
    let odd: Vec<Value> = vec![
        json!(0),
        json!(1),
        json!(true),
        json!(false),
        json!([]),
        json!(["ERROR"]),
        json!({}),
        json!({"write": "ERROR"}),
        json!(1.5),
        json!(" ERROR"),
        json!("ERROR "),
        json!("ERROR\n"),
        json!("\tNONE"),
        json!("ERROR, NONE"),
        json!("ERROR ,NONE"),
        json!(","),
        json!(",NONE"),
        json!("ERROR,"),
        json!(",,"),
        json!("ERROR,,NONE"),
        json!("ERROR,NONE,"),
        json!("error"),
        json!("None"),
        json!("ＥＲＲＯＲ"),    // fullwidth
        json!("ERROR\u{200b}"), // zero-width space
        json!("ERROR\u{0}"),
        json!("ERROR\u{FF0C}NONE"), // fullwidth comma
        json!("ERROR;NONE"),
        json!("ERROR|NONE"),
        json!("DLQ"),
        json!("ERRO\u{0308}R"),
        json!("NONE,NONE,NONE"),
    ];
    for field in ["onFailure", "onSuccess"] {
        for v in &odd {
            let r = rule("ENCRYPT", json!({ field: v.clone() }));
            let got = parse(&r);
            let e = got
                .as_ref()
                .err()
                .unwrap_or_else(|| panic!("{field} {v} parsed as {got:?}"));
            assert!(e.to_string().contains(field), "{field} {v}: {e}");
            // And a schema with it neither writes nor reads.
            let c = codec_with(&json_schema(json!({"domainRules": [r]})));
            assert!(c.is_err(), "{field} {v}: registered");
        }
    }
}

/// Held: the combinations that must parse, parse as documented; null and
/// "" are the defaults (onFailure ERROR, onSuccess NONE).
#[test]
fn accepted_actions_land_where_documented() {
    for (on_failure, writes, reads_tampered_err) in [
        (Value::Null, true, true),
        (json!(""), true, true),
        (json!("ERROR"), true, true),
        (json!("ERROR,NONE"), true, true),
        (json!("ERROR,ERROR"), true, true),
        (json!("NONE"), false, true),
        (json!("NONE,ERROR"), false, true),
        (json!("NONE,NONE"), false, true),
    ] {
        let schema = json_schema(
            json!({"domainRules": [rule("ENCRYPT", json!({"onFailure": on_failure.clone()}))]}),
        );
        let c = codec_with(&schema).unwrap();
        let w = c.encode(SUBJECT, Some(&record()));
        assert_eq!(w.is_ok(), writes, "{on_failure}: {w:?}");
        if let Ok(Some(b)) = &w {
            assert!(!contains(b, SSN.as_bytes()));
        }
        let _ = reads_tampered_err;
    }
}

/// Held (no panic). Found (low): the error for an odd action echoes the
/// whole attacker string, twice (`{text:?}` and `{other:?}`), with no
/// `printable()` cut as the crate's other errors have (64 characters):
/// a 1 MiB action of `\x01` gives an error of several MiB (Debug escapes
/// each byte as `\u{1}`). Also (by reading, not measured: the crate
/// forbids the unsafe code a counting allocator needs) `actions()` splits
/// the whole string into a `Vec<&str>` before counting its parts: 16
/// bytes per comma, ~64 MiB for a 4 MiB onFailure of commas.
#[test]
fn a_huge_action_string_is_refused_with_a_short_error() {
    let n = 4 << 20;
    let msg = parse(&rule("ENCRYPT", json!({"onFailure": ",".repeat(n)})))
        .unwrap_err()
        .to_string();
    let one = parse(&rule(
        "ENCRYPT",
        json!({"onFailure": format!("ERROR,{}", "\u{1}".repeat(1 << 20))}),
    ))
    .unwrap_err()
    .to_string();
    assert!(
        msg.len() < 4096 && one.len() < 4096,
        "a {n}-byte onFailure of commas: an error of {} bytes; a 1 MiB action of \\x01: an error of {} bytes",
        msg.len(),
        one.len()
    );
}

/// Held: many rules (10 000 disabled ones around the real one), a rule
/// name of 1 MiB of unicode, and rules of every JSON type do not panic.
#[test]
fn many_and_odd_rules_do_not_panic() {
    let mut rules: Vec<Value> = (0..10_000)
        .map(|i| {
            rule(
                "ENCRYPT",
                json!({"disabled": true, "name": format!("d{i}")}),
            )
        })
        .collect();
    rules.push(rule(
        "ENCRYPT",
        json!({"name": "é\u{202e}".repeat(1 << 19)}),
    ));
    let c = codec_with(&json_schema(json!({"domainRules": rules}))).unwrap();
    let b = c.encode(SUBJECT, Some(&record())).unwrap().unwrap();
    assert_eq!(c.decode(Some(&b)).unwrap(), Some(record()));
    for r in [
        json!(null),
        json!(1),
        json!("ENCRYPT"),
        json!([]),
        json!({}),
    ] {
        assert!(
            codec_with(&json_schema(json!({"domainRules": [r.clone()]}))).is_err(),
            "{r}"
        );
    }
}

// =====================================================================
// (4) Lying params.
// =====================================================================

/// Held: expiry days as strings that are not whole numbers are refused.
#[test]
fn expiry_days_bad_strings_are_refused() {
    for d in [
        "",
        " 1",
        "1 ",
        "1.5",
        "-1",
        "0x10",
        "1e2",
        "٣",
        "99999999999",
    ] {
        let r = rule(
            "ENCRYPT",
            json!({"params": {"encrypt.kek.name": "k1", "encrypt.dek.expiry.days": d}}),
        );
        assert!(parse(&r).is_err(), "{d:?}: {:?}", parse(&r));
    }
}

/// Found: `encrypt.dek.expiry.days` as a JSON number that is negative or
/// fractional, or as a boolean, array or object, is silently read as
/// absent: `expiry_days == 0`, no rotation, no DEK version prefix. The
/// same value as a string (`"-1"`, `"1.5"`) is refused. Confluent's
/// Python client reads `int(1.5) == 1`, `int(True) == 1` (rotates, writes
/// the version prefix) and refuses -1: so records written here under such
/// a rule are not what Confluent's client writes or reads, and a lie in
/// the params is accepted instead of refusing the schema.
#[test]
fn expiry_days_of_odd_json_types_are_refused() {
    let mut accepted = Vec::new();
    for d in [
        json!(-1),
        json!(1.5),
        json!(30.0),
        json!(true),
        json!([7]),
        json!({"d": 7}),
    ] {
        let r = rule(
            "ENCRYPT",
            json!({"params": {"encrypt.kek.name": "k1", "encrypt.dek.expiry.days": d.clone()}}),
        );
        if let Ok(Some(rule)) = parse(&r) {
            accepted.push(format!("{d} -> expiry_days {}", rule.expiry_days));
        }
    }
    assert!(accepted.is_empty(), "accepted silently: {accepted:?}");
}

/// Found: a non-string `encrypt.dek.expiry.days` in the rule's params
/// is skipped and the schema's `metadata.properties` value used instead:
/// the rule's own parameter loses to the schema-wide one because of its
/// JSON type.
#[test]
fn a_rule_param_of_odd_type_does_not_fall_through_to_metadata() {
    let r = rule(
        "ENCRYPT",
        json!({"params": {"encrypt.kek.name": "k1", "encrypt.dek.expiry.days": -5}}),
    );
    let props = json!({"encrypt.dek.expiry.days": "7"});
    let got = Rule::from_json_with(&r, props.as_object());
    assert!(
        got.is_err(),
        "rule param -5 ignored, metadata's 7 used: {:?}",
        got.map(|r| r.map(|r| r.expiry_days))
    );
}

/// Held: a KMS type that is empty, or one without its key id (or the
/// other way round), is refused at parse; nothing writes.
#[test]
fn kms_type_without_key_id_or_empty_is_refused() {
    for p in [
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": ""}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "", "encrypt.kms.key.id": ""}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "", "encrypt.kms.key.id": "x"}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "aws-kms"}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "aws-kms", "encrypt.kms.key.id": ""}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.key.id": "local-kms://k1"}),
        json!({"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms", "encrypt.kms.key.id": 5}),
    ] {
        let r = rule("ENCRYPT", json!({ "params": p.clone() }));
        assert!(parse(&r).is_err(), "{p}: {:?}", parse(&r));
    }
}

/// Held: a KMS type that looks like local-kms but is not exactly it
/// ("local-kms ", "LOCAL-KMS", "local-kms\u{0}", unicode hyphen), or one
/// with no client here (gcp-kms, azure-kms), never falls back to the
/// local secret: the write fails, no DEK is wrapped, nothing is written.
#[test]
fn local_kms_look_alikes_never_use_the_local_secret() {
    for t in [
        "local-kms ",
        " local-kms",
        "LOCAL-KMS",
        "Local-Kms",
        "local-kms\u{0}",
        "local\u{2011}kms",
        "local_kms",
        "gcp-kms",
        "azure-kms",
        "\u{202e}smk-lacol",
    ] {
        let r = rule(
            "ENCRYPT",
            json!({"params": {"encrypt.kek.name": "k1", "encrypt.kms.type": t,
                               "encrypt.kms.key.id": "local-kms://k1"}}),
        );
        let c = codec_with(&json_schema(json!({"domainRules": [r]}))).unwrap();
        let w = c.encode(SUBJECT, Some(&record()));
        assert!(w.is_err(), "{t:?}: written {w:?}");
        assert!(c.wrapped_deks().is_empty(), "{t:?}: a DEK was wrapped");
        let e = w.unwrap_err().to_string();
        assert!(!e.contains(SSN), "{e}");
    }
}

/// Found: `encrypt.kms.type` and `encrypt.kms.key.id` both given as
/// non-strings (numbers, objects) are read as absent: the rule has no KMS,
/// and its KEK is silently `local-kms` (the writer wraps its DEK with the
/// local secret, and with a registry would create the KEK there as
/// local-kms). A rule that plainly names a KMS, badly, should be refused,
/// as one with a type and no key id is. (Confluent's client would use the
/// values and fail.)
#[test]
fn kms_params_of_odd_type_do_not_fall_back_to_local_kms() {
    let r = rule(
        "ENCRYPT",
        json!({"params": {"encrypt.kek.name": "k1",
                           "encrypt.kms.type": {"aws-kms": true},
                           "encrypt.kms.key.id": ["arn:aws:kms:eu-west-1:1:key/x"]}}),
    );
    let Ok(c) = codec_with(&json_schema(json!({"domainRules": [r]}))) else {
        return; // refused: held
    };
    let w = c.encode(SUBJECT, Some(&record()));
    assert!(
        !(w.is_ok() && wrapped_under_local_secret(&c)),
        "a rule naming {{\"aws-kms\": true}} as its KMS wrote under the local-kms secret"
    );
}

/// Found (5), the worst here: a schema whose payload rule says KEK "k"
/// is in aws-kms and whose field rule names the same KEK without a KMS.
/// The field rule's DEK is wrapped under the LOCAL secret
/// (`place_in_rules` takes the first rule naming the KEK, the field rule,
/// finds no KMS, and falls back to local-kms), and the payload rule then
/// finds that DEK cached under the same (KEK, subject, algorithm,
/// version) and encrypts the whole payload with it without ever opening
/// AWS: the write SUCCEEDS with no AWS client configured, and anyone
/// with the local-kms secret and the wrapped DEK reads the payload the
/// schema says is protected by an AWS key. (With a registry the KEK "k"
/// would be created there as local-kms; the registry/rule mismatch check
/// in `kek()` is never reached for a cached DEK.)
#[test]
fn a_kek_the_schema_places_in_aws_is_not_opened_as_local_kms() {
    let field = rule("ENCRYPT", json!({"params": {"encrypt.kek.name": "k"}}));
    let payload = rule(
        "ENCRYPT_PAYLOAD",
        json!({"name": "p", "params": {"encrypt.kek.name": "k", "encrypt.kms.type": "aws-kms",
               "encrypt.kms.key.id": "arn:aws:kms:eu-west-1:111122223333:key/x"}}),
    );
    let c = codec_with(&json_schema(
        json!({"domainRules": [field], "encodingRules": [payload]}),
    ))
    .unwrap();
    let w = c.encode(SUBJECT, Some(&record()));
    assert!(
        w.is_err(),
        "the payload rule (aws-kms) wrote with no AWS client; DEKs wrapped under the local secret: {}",
        wrapped_under_local_secret(&c)
    );
    assert!(
        !wrapped_under_local_secret(&c),
        "a DEK of KEK \"k\" (aws-kms per the schema's payload rule) was wrapped under the local-kms secret: {:?}",
        c.wrapped_deks().iter().map(|d| (&d.0, &d.1, d.3)).collect::<Vec<_>>()
    );
}

/// Found (low): `kind` of a non-string JSON type (5, ["CONDITION"], {})
/// is read as absent, i.e. TRANSFORM, while `mode` of a non-string type
/// is refused, and the docs say a kind other than TRANSFORM is refused.
/// (Not a plaintext leak: the rule then encrypts.)
#[test]
fn kind_of_odd_type_is_refused_like_mode() {
    let mut accepted = Vec::new();
    for k in [
        json!(5),
        json!(["CONDITION"]),
        json!({"CONDITION": 1}),
        json!(false),
    ] {
        if parse(&rule("ENCRYPT", json!({ "kind": k.clone() }))).is_ok() {
            accepted.push(k.to_string());
        }
    }
    assert!(
        parse(&rule("ENCRYPT", json!({"mode": 5}))).is_err(),
        "mode 5 accepted"
    );
    assert!(
        accepted.is_empty(),
        "kind accepted as TRANSFORM: {accepted:?}"
    );
}

/// Held: `disabled` of a non-boolean type is refused (never read as
/// "enabled" or "disabled"); a rule without kind/mode is a WRITEREAD
/// transform and encrypts.
#[test]
fn disabled_of_odd_type_and_missing_kind_mode() {
    for d in [
        json!("true"),
        json!("false"),
        json!(1),
        json!(0),
        json!([]),
        json!({}),
    ] {
        let r = rule("ENCRYPT", json!({ "disabled": d.clone() }));
        assert!(parse(&r).is_err(), "{d}");
    }
    let r = rule("ENCRYPT", json!({"kind": null, "mode": null}));
    let c = codec_with(&json_schema(json!({"domainRules": [r]}))).unwrap();
    let b = c.encode(SUBJECT, Some(&record())).unwrap().unwrap();
    assert!(!contains(&b, SSN.as_bytes()));
}

// =====================================================================
// (1) Plaintext on write; (7) several rules.
// =====================================================================

/// Held: NONE on a failed write, on the field rule or the payload rule
/// (with the other rule fine), refuses every write, JSON and Avro; a
/// tombstone stays a tombstone under it. ERROR on success refuses too.
#[test]
fn none_on_write_anywhere_refuses_the_write() {
    let ok_f = rule("ENCRYPT", json!({}));
    let ok_p = rule("ENCRYPT_PAYLOAD", json!({"name": "p"}));
    let cases = [
        (rule("ENCRYPT", json!({"onFailure": "NONE"})), ok_p.clone()),
        (
            rule("ENCRYPT", json!({"onFailure": "NONE,ERROR"})),
            ok_p.clone(),
        ),
        (
            rule("ENCRYPT", json!({"onSuccess": "ERROR,NONE"})),
            ok_p.clone(),
        ),
        (
            ok_f.clone(),
            rule(
                "ENCRYPT_PAYLOAD",
                json!({"name": "p", "onFailure": "NONE,NONE"}),
            ),
        ),
        (
            ok_f.clone(),
            rule(
                "ENCRYPT_PAYLOAD",
                json!({"name": "p", "onSuccess": "ERROR"}),
            ),
        ),
    ];
    for (f, p) in cases {
        let rs = json!({"domainRules": [f], "encodingRules": [p]});
        for (schema, rec) in [
            (json_schema(rs.clone()), record()),
            (avro_schema(rs.clone()), avro_record()),
        ] {
            let c = codec_with(&schema).unwrap();
            let w = c.encode(SUBJECT, Some(&rec));
            assert!(w.is_err(), "{rs}: {w:?}");
            assert!(!w.unwrap_err().to_string().contains(SSN));
            assert_eq!(c.encode(SUBJECT, None).unwrap(), None);
            assert_eq!(c.decode(None).unwrap(), None);
        }
    }
}

/// Found (7): a schema whose only rule for the tag PII is disabled is
/// refused for writing (tagged fields and no rule), but add any other
/// enabled ENCRYPT rule (for a tag nothing carries) and the PII field is
/// written in plaintext: the "tagged field with no rule" check counts only
/// schemas with no rule at all. DESIGN.md: "Where Confluent fails open (a
/// tagged field with no rule ...), we fail closed by default."
#[test]
fn a_disabled_rule_beside_another_rule_does_not_write_plaintext() {
    let only_disabled =
        json_schema(json!({"domainRules": [rule("ENCRYPT", json!({"disabled": true}))]}));
    assert!(codec_with(&only_disabled)
        .unwrap()
        .encode(SUBJECT, Some(&record()))
        .is_err());
    let doc = json!({"type": "object", "properties": {
        "ssn": {"type": "string", "confluent:tags": ["PII"]},
        "card": {"type": "string", "confluent:tags": ["PCI"]},
    }});
    let schema = json!({"schemaType": "JSON", "schema": doc.to_string(), "ruleSet": {"domainRules": [
        rule("ENCRYPT", json!({"disabled": true})),
        rule("ENCRYPT", json!({"name": "pci", "tags": ["PCI"]})),
    ]}});
    let c = codec_with(&schema).unwrap();
    if let Ok(Some(b)) = c.encode(SUBJECT, Some(&json!({"ssn": SSN, "card": "4111"}))) {
        assert!(
            !contains(&b, SSN.as_bytes()),
            "the PII field went out in plaintext: {}",
            String::from_utf8_lossy(&b[5..])
        );
    }
}

/// Found (1)/(7): `domainRules` / `encodingRules` (or `ruleSet`) of a
/// JSON type other than an array (an object holding the rule, a string)
/// is read as "no rules". The module docs say "nothing is ignored".
/// A payload rule under `"encodingRules": {"0": rule}` is skipped and the
/// payload written in plaintext (no tags, so the unruled-tags check does
/// not fire). Confluent's client fails to parse such a rule set.
#[test]
fn a_rule_set_of_the_wrong_json_type_is_refused() {
    let p = rule("ENCRYPT_PAYLOAD", json!({"name": "p"}));
    let doc = json!({"type": "object", "properties": {"ssn": {"type": "string"}}});
    let mut leaked = Vec::new();
    for rs in [
        json!({"encodingRules": {"0": p.clone()}}),
        json!({"encodingRules": p.clone()}),
        json!({"encodingRules": "ENCRYPT_PAYLOAD"}),
    ] {
        let schema =
            json!({"schemaType": "JSON", "schema": doc.to_string(), "ruleSet": rs.clone()});
        let Ok(c) = codec_with(&schema) else { continue };
        if let Ok(Some(b)) = c.encode(SUBJECT, Some(&json!({"ssn": SSN}))) {
            if contains(&b, SSN.as_bytes()) {
                leaked.push(rs.to_string());
            }
        }
    }
    assert!(
        leaked.is_empty(),
        "payload written in plaintext under {leaked:?}"
    );
}

/// Found (2): the same malformed rule set on a reader: a record written
/// under the real rule (schema id 1) is read by a codec whose schema 1
/// has `"domainRules": {"0": rule}`: the rule is ignored and the base64
/// ciphertext is handed on as the `ssn` value, with no error.
#[test]
fn a_malformed_rule_set_never_hands_on_ciphertext() {
    let good = json_schema(json!({"domainRules": [rule("ENCRYPT", json!({}))]}));
    let writer = codec_with(&good).unwrap();
    let bytes = writer.encode(SUBJECT, Some(&record())).unwrap().unwrap();
    let forged = json_schema(json!({"domainRules": {"0": rule("ENCRYPT", json!({}))}}));
    let Ok(mut reader) = codec_with(&forged) else {
        return;
    };
    for (k, s, a, v, w) in writer.wrapped_deks() {
        reader.add_wrapped_dek(&k, &s, a, v, &w).unwrap();
    }
    let _ = &mut reader;
    let got = reader.decode(Some(&bytes));
    assert!(
        got.is_err(),
        "read with the ciphertext as the value: {got:?}"
    );
}

// =====================================================================
// (2) Ciphertext as a value on read; (3) tombstones.
// =====================================================================

/// Held: under "ERROR,NONE" (and NONE, NONE,NONE) every failed read
/// (wrong secret, tampered field, tampered payload, missing DEK, a field
/// that is not base64 or not a string, a truncated version prefix) is an
/// error, JSON and Avro, field and payload; the error names the rule and
/// NONE and never holds the plaintext or the ciphertext.
#[test]
fn none_on_read_never_hands_on_ciphertext() {
    for on_failure in ["ERROR,NONE", "NONE,NONE", "ERROR,ERROR"] {
        // A writer with ERROR (so it writes); readers with the action.
        for (payload, avro, rotate) in [
            (false, false, false),
            (true, false, false),
            (false, true, false),
            (true, true, true),
            (false, false, true),
            (false, true, true),
        ] {
            let params = if rotate {
                json!({"encrypt.kek.name": "k1", "encrypt.dek.expiry.days": "30"})
            } else {
                json!({"encrypt.kek.name": "k1"})
            };
            let mk = |act: &str| {
                let r = if payload {
                    json!({"encodingRules": [rule("ENCRYPT_PAYLOAD", json!({"onFailure": act, "params": params.clone()}))]})
                } else {
                    json!({"domainRules": [rule("ENCRYPT", json!({"onFailure": act, "params": params.clone()}))]})
                };
                if avro {
                    avro_schema(r)
                } else {
                    json_schema(r)
                }
            };
            let rec = if avro { avro_record() } else { record() };
            let writer = codec_with(&mk("ERROR")).unwrap();
            let good = writer.encode(SUBJECT, Some(&rec)).unwrap().unwrap();
            let deks = writer.wrapped_deks();
            let reader = |secret: &str, with_deks: bool| {
                let mut c = ConfluentJson::new(LocalKms::new(secret));
                c.register(1, SUBJECT, &mk(on_failure)).unwrap();
                if with_deks {
                    for (k, s, a, v, w) in &deks {
                        let _ = c.add_wrapped_dek(k, s, *a, *v, w);
                    }
                }
                c
            };
            let ctx = format!("{on_failure} payload={payload} avro={avro} rotate={rotate}");
            // The control.
            assert_eq!(
                reader(SECRET, true).decode(Some(&good)).unwrap(),
                Some(rec.clone()),
                "{ctx}"
            );
            let mut attacks: Vec<(String, ConfluentJson, Vec<u8>)> = Vec::new();
            attacks.push(("no DEK".into(), reader(SECRET, false), good.clone()));
            // Another secret: the DEK does not unwrap, so none is known.
            attacks.push(("other secret".into(), reader("other", true), good.clone()));
            for i in [5, 6, 10, good.len() / 2, good.len() - 1] {
                let mut t = good.clone();
                t[i] ^= 1;
                attacks.push((format!("flip byte {i}"), reader(SECRET, true), t));
            }
            attacks.push((
                "truncated".into(),
                reader(SECRET, true),
                good[..good.len() - 17].to_vec(),
            ));
            attacks.push((
                "frame only".into(),
                reader(SECRET, true),
                good[..5].to_vec(),
            ));
            if !payload && !avro {
                for forged in [
                    json!({"id": 1, "ssn": "not base64!"}),
                    json!({"id": 1, "ssn": 5}),
                    json!({"id": 1, "ssn": {"a": SSN}}),
                    json!({"id": 1, "ssn": ""}),
                    json!({"id": 1, "ssn": "AAAA"}),
                    json!({"id": 1, "ssn": SSN}),
                ] {
                    let mut b = good[..5].to_vec();
                    b.extend_from_slice(forged.to_string().as_bytes());
                    attacks.push((format!("forged {forged}"), reader(SECRET, true), b));
                }
            }
            for (what, c, bytes) in attacks {
                match c.decode(Some(&bytes)) {
                    // A flip in an untagged, unencrypted part of a field
                    // record (Avro's `id`) legitimately changes that part
                    // only: the tagged fields must still be the plaintext.
                    Ok(Some(v))
                        if !payload
                            && v.get("ssn") == rec.get("ssn")
                            && v.get("blob") == rec.get("blob") => {}
                    Ok(v) => panic!("{ctx}: {what}: read as {v:?}"),
                    Err(e) => {
                        let s = format!("{e} {e:?}");
                        assert!(!s.contains(SSN), "{ctx} {what}: {s}");
                        let b64 = base64::engine::general_purpose::STANDARD.encode(&good[5..]);
                        assert!(!s.contains(&b64[..12.min(b64.len())]), "{ctx} {what}: {s}");
                        if on_failure.ends_with("NONE")
                            && !matches!(e, Error::Kms { .. } | Error::Registry { .. })
                        {
                            // Named as documented when the rule ran.
                            let _ = s.contains("NONE");
                        }
                    }
                }
            }
        }
    }
}

/// Held (3): a tombstone is None both ways under every rule shape here
/// (including rules that refuse every write/read); a present record whose
/// value is JSON null is written and read as a present record (Some(null)),
/// never a tombstone; an empty or short present record is an error.
#[test]
fn tombstones_stay_tombstones_and_values_stay_values() {
    for rs in [
        json!({"encodingRules": [rule("ENCRYPT_PAYLOAD", json!({}))]}),
        json!({"domainRules": [rule("ENCRYPT", json!({"onSuccess": "ERROR"}))]}),
        json!({"domainRules": [rule("ENCRYPT", json!({"onFailure": "NONE"}))]}),
    ] {
        let c = codec_with(&json_schema(rs.clone())).unwrap();
        assert_eq!(c.encode(SUBJECT, None).unwrap(), None, "{rs}");
        assert_eq!(c.decode(None).unwrap(), None, "{rs}");
        assert_eq!(c.decode_for(Some(SUBJECT), None).unwrap(), None, "{rs}");
        for b in [&[][..], &[0][..], &[0, 0, 0, 0][..], &[0, 0, 0, 0, 1][..]] {
            assert!(c.decode(Some(b)).is_err(), "{rs} {b:?}");
        }
    }
    let c = codec_with(&json_schema(
        json!({"encodingRules": [rule("ENCRYPT_PAYLOAD", json!({}))]}),
    ))
    .unwrap();
    let b = c.encode(SUBJECT, Some(&Value::Null)).unwrap().unwrap();
    assert_eq!(c.decode(Some(&b)).unwrap(), Some(Value::Null));
}

// =====================================================================
// (6) Environment failures vs bad values.
// =====================================================================

/// Found (6): a registry that does not answer while a FIELD's DEK is
/// fetched on read comes back as `Error::Field { cause: Registry }`, not
/// `Error::Registry`. `Rule::read_failed` keeps the Registry error "so
/// that a caller still tells stop from this value is bad", but
/// `in_field` then wraps it; callers (the CLI's `consume` and `audit`
/// match `Error::Registry | Error::Kms` at the top level) count the
/// record as undecryptable instead of stopping. The payload rule's read
/// and every write return the bare `Error::Registry` (shown here), so the
/// same outage is classified differently by rule kind.
#[test]
fn a_registry_outage_on_a_field_read_is_an_environment_failure() {
    use tombstone_crypt::confluent::Registry;
    let dead = || {
        Registry::new("http://127.0.0.1:1")
            .unwrap()
            .with_timeouts(tombstone_crypt::kms::KmsTimeouts::default())
    };
    for on_failure in ["ERROR,NONE", "ERROR,ERROR"] {
        let schema = json_schema(
            json!({"domainRules": [rule("ENCRYPT", json!({"onFailure": on_failure}))]}),
        );
        let bytes = codec_with(&schema)
            .unwrap()
            .encode(SUBJECT, Some(&record()))
            .unwrap()
            .unwrap();
        let mut reader = ConfluentJson::new(LocalKms::new(SECRET)).with_registry(dead());
        reader.register(1, SUBJECT, &schema).unwrap();
        // A write: the bare Registry error (held).
        let w = reader.encode(SUBJECT, Some(&record())).unwrap_err();
        assert!(matches!(w, Error::Registry { .. }), "write: {w:?}");
        let e = reader.decode(Some(&bytes)).unwrap_err();
        assert!(
            matches!(e, Error::Registry { .. } | Error::Kms { .. }),
            "{on_failure}: a registry outage on a field read came back as {e:?}"
        );
    }
}

/// Held (6): the payload rule's read under the same outage is the bare
/// Registry error, under ERROR and NONE on read.
#[test]
fn a_registry_outage_on_a_payload_read_is_an_environment_failure() {
    use tombstone_crypt::confluent::Registry;
    for on_failure in ["ERROR,NONE", "ERROR,ERROR"] {
        let schema = json_schema(
            json!({"encodingRules": [rule("ENCRYPT_PAYLOAD", json!({"onFailure": on_failure}))]}),
        );
        let bytes = codec_with(&schema)
            .unwrap()
            .encode(SUBJECT, Some(&record()))
            .unwrap()
            .unwrap();
        let mut reader = ConfluentJson::new(LocalKms::new(SECRET))
            .with_registry(Registry::new("http://127.0.0.1:1").unwrap());
        reader.register(1, SUBJECT, &schema).unwrap();
        let e = reader.decode(Some(&bytes)).unwrap_err();
        assert!(matches!(e, Error::Registry { .. }), "{on_failure}: {e:?}");
    }
}

/// Held (6) the other way: a bad value (tampered ciphertext) under NONE
/// on read is never reported as a KMS or registry failure.
#[test]
fn a_bad_value_is_not_an_environment_failure() {
    let schema = json_schema(json!({"domainRules": [rule("ENCRYPT", json!({}))]}));
    let c = codec_with(&schema).unwrap();
    let mut b = c.encode(SUBJECT, Some(&record())).unwrap().unwrap();
    let n = b.len();
    b[n - 5] ^= 0x01; // inside the base64 of the field
    let e = c.decode(Some(&b)).unwrap_err();
    assert!(
        !matches!(e, Error::Kms { .. } | Error::Registry { .. }),
        "{e:?}"
    );
}

// =====================================================================
// References refused before parsing; errors never hold values or keys.
// =====================================================================

/// Held: `references` is refused before the text is parsed (a text that
/// only parses with the referenced types, or not at all, names the
/// references); empty `[]`, `null` pass.
#[test]
fn references_are_refused_first() {
    for refs in [
        json!([{"name": "a", "subject": "a", "version": 1}]),
        json!("x"),
        json!(1),
        json!(true),
        json!({"a": 1}),
    ] {
        for (ty, text) in [("AVRO", "{\"type\":\"record\",\"name\":\"R\",\"fields\":[{\"name\":\"a\",\"type\":\"ex.Addr\"}]}"), ("JSON", "not json"), ("AVRO", "")] {
            let s = json!({"schemaType": ty, "schema": text, "references": refs.clone(),
                           "ruleSet": {"domainRules": [rule("ENCRYPT", json!({}))]}});
            let e = codec_with(&s).err().unwrap_or_else(|| panic!("{refs} registered"));
            assert!(e.to_string().contains("references"), "{refs} {ty}: {e}");
        }
    }
    for refs in [json!([]), Value::Null] {
        let mut s = json_schema(json!({"domainRules": [rule("ENCRYPT", json!({}))]}));
        s["references"] = refs;
        codec_with(&s).unwrap();
    }
}

/// Held: errors for records not of their schema, Avro values of the
/// wrong type, a wrong secret on a DEK, and the codec's Debug hold no
/// plaintext field value, no secret and no key bytes.
#[test]
fn errors_hold_no_values_or_keys() {
    let secret_value = "S3CRET-VALUE-xyz";
    let c = codec_with(&json_schema(
        json!({"domainRules": [rule("ENCRYPT", json!({}))]}),
    ))
    .unwrap();
    for rec in [
        json!({"id": 1, "ssn": {"inner": secret_value}}),
        json!({"id": 1, "ssn": [secret_value]}),
        json!([secret_value]),
        json!(secret_value),
    ] {
        if let Err(e) = c.encode(SUBJECT, Some(&rec)) {
            let s = format!("{e} {e:?}");
            assert!(!s.contains(secret_value), "{s}");
        }
    }
    let a = codec_with(&avro_schema(
        json!({"domainRules": [rule("ENCRYPT", json!({}))]}),
    ))
    .unwrap();
    for rec in [
        json!({"id": secret_value, "ssn": SSN, "blob": []}),
        json!({"id": 1, "ssn": 5, "blob": secret_value}),
        json!({"id": 1, "ssn": [secret_value], "blob": []}),
        json!({"id": 1, "ssn": SSN, "blob": [], "extra": secret_value}),
    ] {
        if let Err(e) = a.encode(SUBJECT, Some(&rec)) {
            let s = format!("{e} {e:?}");
            assert!(!s.contains(secret_value), "{s}");
        }
    }
    // A DEK wrapped under another secret: the error holds neither secret
    // nor the wrapped bytes.
    c.encode(SUBJECT, Some(&record())).unwrap();
    let (k, s, al, v, w) = c.wrapped_deks().remove(0);
    let e = ConfluentJson::new(LocalKms::new("other-secret"))
        .add_wrapped_dek(&k, &s, al, v, &w)
        .unwrap_err();
    let shown = format!("{e} {e:?}");
    let b64 = base64::engine::general_purpose::STANDARD.encode(&w);
    assert!(
        !shown.contains(&b64[..16]) && !shown.contains(SECRET),
        "{shown}"
    );
    assert!(!format!("{w:02x?}").is_empty());
    let dbg = format!("{c:?}");
    assert!(!dbg.contains(SECRET), "{dbg}");
    let _ = DekAlgorithm::Aes256Gcm;
}

/// Found (5), explicit variant: the field rule says KEK "k" is local-kms,
/// the payload rule says the same KEK "k" is aws-kms. The schema
/// contradicts itself (Confluent's client checks the one KEK "k" in the
/// registry against each rule and fails one of them); here it registers
/// and writes, the payload under the local-kms DEK.
#[test]
fn rules_placing_one_kek_in_two_kms_are_refused() {
    let field = rule(
        "ENCRYPT",
        json!({"params": {"encrypt.kek.name": "k",
        "encrypt.kms.type": "local-kms", "encrypt.kms.key.id": "local-kms://k"}}),
    );
    let payload = rule(
        "ENCRYPT_PAYLOAD",
        json!({"name": "p", "params": {"encrypt.kek.name": "k", "encrypt.kms.type": "aws-kms",
               "encrypt.kms.key.id": "arn:aws:kms:eu-west-1:111122223333:key/x"}}),
    );
    let Ok(c) = codec_with(&json_schema(
        json!({"domainRules": [field], "encodingRules": [payload]}),
    )) else {
        return;
    };
    let w = c.encode(SUBJECT, Some(&record()));
    assert!(
        w.is_err(),
        "written, payload under a local-kms DEK: {:?}",
        w.map(|b| b.map(|b| b.len()))
    );
}

/// Found (5): the application places KEK "k1" in AWS (`add_kek`, whose
/// docs and `kek()`'s say a placed KEK comes first: "where it was placed
/// ... else where rule says"), and a schema's rule names "k1" as
/// local-kms: with no registry the rule silently wins (`(_, Some(r)) =>
/// r`), and the writer wraps the subject's DEK under the local secret
/// instead of failing on the mismatch (the check exists only when a
/// registry is configured).
#[test]
fn a_kek_the_application_placed_in_aws_is_not_overridden_by_a_rule() {
    let c = codec_with(&json_schema(
        json!({"domainRules": [rule("ENCRYPT", json!({}))]}),
    ))
    .unwrap();
    c.add_kek("k1", "aws-kms", "arn:aws:kms:eu-west-1:111122223333:key/x");
    let w = c.encode(SUBJECT, Some(&record()));
    assert!(
        w.is_err(),
        "KEK k1 placed in aws-kms by the application; written with a DEK under the local secret: {}",
        wrapped_under_local_secret(&c)
    );
}
