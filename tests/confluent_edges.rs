//! Edges of Confluent's rules: schemas and records on which this codec and Confluent's
//! client (confluent-kafka 2.16.1 for Python) part ways. Each test fails
//! while the codec writes in plaintext a field Confluent's client encrypts
//! (or refuses), or reads Confluent's ciphertext as a value, instead of
//! refusing the schema. What Confluent's client does with each case:
//! `tests/interop/confluent_edges_peer.py` (same case names).
#![cfg(feature = "confluent")]

use crate::common;

use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, LocalKms};

const SSN: &str = "078-05-1120";

fn rule(tags: Value) -> Value {
    json!({"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT", "tags": tags,
           "params": {"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms",
                      "encrypt.kms.key.id": "local-kms://k1"}})
}

fn json_schema(doc: Value, rule_set: Value, metadata: Option<Value>) -> Value {
    let mut s = json!({"schemaType": "JSON", "schema": doc.to_string(), "ruleSet": rule_set});
    if let Some(m) = metadata {
        s["metadata"] = m;
    }
    s
}

/// What this codec writes for `record` under `schema`: `Ok(body)` or the
/// schema's (or record's) refusal.
fn write(schema: &Value, record: &Value) -> Result<Vec<u8>, String> {
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(1, "t-value", schema)
        .map_err(|e| e.to_string())?;
    let bytes = codec
        .encode("t-value", Some(record))
        .map_err(|e| e.to_string())?
        .unwrap();
    Ok(bytes[5..].to_vec())
}

/// Confluent's client encrypts the secret: here it must be encrypted too,
/// or the schema (or record) refused.
fn assert_not_plaintext(case: &str, schema: Value, record: Value) {
    match write(&schema, &record) {
        Err(e) => eprintln!("{case}: refused: {e}"),
        Ok(body) => assert!(
            !String::from_utf8_lossy(&body).contains(SSN),
            "{case}: written in plaintext where Confluent's client encrypts it: {}",
            String::from_utf8_lossy(&body)
        ),
    }
}

/// Reads with the schema `reader_schema` what this codec wrote under
/// `writer_schema` (one subject, one KEK and DEK): both are Confluent's
/// wire format and Confluent's client encrypts the field under each, so
/// the bytes are those Confluent's client writes. `Ok(value)` or the
/// refusal.
fn read_across(
    writer_schema: &Value,
    reader_schema: &Value,
    record: &Value,
) -> Result<Value, String> {
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec.register(1, "t-value", writer_schema).unwrap();
    let mut bytes = codec.encode("t-value", Some(record)).unwrap().unwrap();
    assert!(!String::from_utf8_lossy(&bytes).contains(SSN));
    codec
        .register(2, "t-value", reader_schema)
        .map_err(|e| e.to_string())?;
    bytes[1..5].copy_from_slice(&2u32.to_be_bytes());
    codec
        .decode(Some(&bytes))
        .map(Option::unwrap)
        .map_err(|e| e.to_string())
}

fn assert_no_ciphertext_read(case: &str, writer: Value, reader: Value, record: Value) {
    match read_across(&writer, &reader, &record) {
        Err(e) => eprintln!("{case}: refused: {e}"),
        Ok(v) => assert_eq!(v, record, "{case}: Confluent's ciphertext read as a value"),
    }
}

// ---------------------------------------------------------------------
// (a)/(b) JSON Schema: `items` beside `type: string` or `properties`.
// Confluent's `transform` follows `items` only when the value is a list;
// otherwise it goes on to the type (a string: encrypted; an object: its
// properties walked). This codec takes `items` alone.
// ---------------------------------------------------------------------

fn tagged() -> Value {
    json!({"type": "string", "confluent:tags": ["PII"]})
}

/// confluent_edges_peer.py json-string-with-items: Confluent encrypts `ssn`.
#[test]
fn a_string_with_items_is_encrypted() {
    let mut ssn = tagged();
    ssn["items"] = json!({"type": "string"});
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": ssn}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_not_plaintext("json-string-with-items", schema, json!({"ssn": SSN}));
}

/// confluent_edges_peer.py json-nullable-string-with-items: Confluent encrypts.
#[test]
fn a_nullable_string_with_items_is_encrypted() {
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": ["string", "null"],
               "items": {"type": "string"}, "confluent:tags": ["PII"]}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_not_plaintext(
        "json-nullable-string-with-items",
        schema,
        json!({"ssn": SSN}),
    );
}

/// confluent_edges_peer.py json-object-with-items-metadata: Confluent encrypts.
#[test]
fn an_object_with_items_has_its_properties_encrypted_by_metadata() {
    let schema = json_schema(
        json!({"type": "object", "items": {}, "properties": {"ssn": {"type": "string"}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        Some(json!({"tags": {"$.ssn": ["PII"]}})),
    );
    assert_not_plaintext(
        "json-object-with-items-metadata",
        schema,
        json!({"ssn": SSN}),
    );
}

/// confluent_edges_peer.py json-object-with-items-no-tags: Confluent encrypts.
#[test]
fn an_object_with_items_has_its_properties_encrypted_by_a_rule_without_tags() {
    let schema = json_schema(
        json!({"type": "object", "items": {}, "properties": {"ssn": {"type": "string"}}}),
        json!({"domainRules": [rule(json!([]))]}),
        None,
    );
    assert_not_plaintext(
        "json-object-with-items-no-tags",
        schema,
        json!({"ssn": SSN}),
    );
}

/// (b): a record Confluent's client wrote (ssn encrypted) read under the
/// schema with `items` beside `type: string`: the ciphertext comes back as
/// the value of `ssn`.
#[test]
fn confluents_ciphertext_under_a_string_with_items_is_not_a_value() {
    let writer = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    let mut ssn = tagged();
    ssn["items"] = json!({"type": "string"});
    let reader = json_schema(
        json!({"type": "object", "properties": {"ssn": ssn}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_no_ciphertext_read(
        "json-string-with-items (read)",
        writer,
        reader,
        json!({"ssn": SSN}),
    );
}

// ---------------------------------------------------------------------
// (a) `confluent:tags` that is not an array. Python's client takes
// `set(tags)`: an object's keys are its tags.
// ---------------------------------------------------------------------

/// confluent_edges_peer.py json-tags-object: Confluent encrypts `ssn`.
#[test]
fn tags_given_as_an_object_are_read_or_refused() {
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": {"PII": true}}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_not_plaintext("json-tags-object", schema, json!({"ssn": SSN}));
}

/// confluent_edges_peer.py avro-tags-object: Confluent encrypts `ssn`.
#[cfg(feature = "confluent-avro")]
#[test]
fn avro_tags_given_as_an_object_are_read_or_refused() {
    let doc = json!({"type": "record", "name": "C", "fields": [
        {"name": "ssn", "type": "string", "confluent:tags": {"PII": true}}]});
    let schema =
        json!({"schema": doc.to_string(), "ruleSet": {"domainRules": [rule(json!(["PII"]))]}});
    assert_not_plaintext("avro-tags-object", schema, json!({"ssn": SSN}));
}

// ---------------------------------------------------------------------
// (a) A record whose shape is not its schema's: Confluent's client
// validates it (after its rules) and refuses to write it; this codec does
// not validate, and a tagged field it cannot find by its path stays in
// plaintext.
// ---------------------------------------------------------------------

/// confluent_edges_peer.py json-record-shape-differs: Confluent refuses
/// ("... is not of type 'object'").
#[test]
fn a_record_not_of_its_schema_is_refused_not_written_in_plaintext() {
    let schema = json_schema(
        json!({"type": "object", "properties": {"addr": {"type": "object",
               "properties": {"street": tagged()}}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_not_plaintext(
        "json-record-shape-differs (array for an object)",
        schema.clone(),
        json!({"addr": [{"street": SSN}]}),
    );
    assert_not_plaintext(
        "json-record-shape-differs (string for an object)",
        schema,
        json!({"addr": SSN}),
    );
}

// ---------------------------------------------------------------------
// Rule sets Confluent's client reads otherwise (it writes plaintext where
// this codec encrypts, so Confluent's consumers get ciphertext as values
// and this codec cannot read Confluent's records): read as Confluent does,
// or refused.
// ---------------------------------------------------------------------

/// confluent_edges_peer.py enable-at-server: `ruleSet.enableAt` other than ALL or
/// CLIENT turns every rule off in Confluent's client (plaintext).
#[test]
fn enable_at_is_read_or_refused() {
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [rule(json!(["PII"]))], "enableAt": "SERVER"}),
        None,
    );
    let body = write(&schema, &json!({"ssn": SSN}));
    assert!(
        body.as_ref()
            .map_or(true, |b| String::from_utf8_lossy(b).contains(SSN)),
        "enableAt SERVER: Confluent's client writes ssn in plaintext, this codec encrypts it: {:?}",
        body.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
}

/// confluent_edges_peer.py rule-tags-not-strings: tags `[1]` match no field in
/// Confluent's client (plaintext); here they are dropped, and the rule
/// reaches every field.
#[test]
fn rule_tags_that_are_not_strings_are_refused() {
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": "string"}, "name": {"type": "string"}}}),
        json!({"domainRules": [rule(json!([1]))]}),
        None,
    );
    let body = write(&schema, &json!({"ssn": SSN, "name": "Ada"}));
    assert!(
        body.as_ref()
            .map_or(true, |b| String::from_utf8_lossy(b).contains(SSN)),
        "rule tags [1]: Confluent's client encrypts nothing, this codec every field: {:?}",
        body.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
}

/// confluent_edges_peer.py disabled-string: `"disabled": "false"` is truthy to
/// Confluent's client: the rule is off (plaintext).
#[test]
fn disabled_that_is_not_a_boolean_is_refused() {
    let mut r = rule(json!(["PII"]));
    r["disabled"] = json!("false");
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [r]}),
        None,
    );
    let body = write(&schema, &json!({"ssn": SSN}));
    assert!(
        body.as_ref()
            .map_or(true, |b| String::from_utf8_lossy(b).contains(SSN)),
        "disabled \"false\": Confluent's client skips the rule, this codec applies it: {:?}",
        body.map(|b| String::from_utf8_lossy(&b).into_owned())
    );
}

/// confluent_edges_peer.py expiry-days-number: `encrypt.dek.expiry.days: 1` (a
/// number) rotates in Confluent's client (values carry `0x00 | version`);
/// here it is ignored (no version prefix): each side fails to read the
/// other's records.
#[test]
fn expiry_days_as_a_number_is_read_or_refused() {
    let mut r = rule(json!(["PII"]));
    r["params"]["encrypt.dek.expiry.days"] = json!(1);
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [r]}),
        None,
    );
    if let Ok(body) = write(&schema, &json!({"ssn": SSN})) {
        let v: Value = serde_json::from_slice(&body).unwrap();
        use base64::Engine as _;
        let ct = base64::engine::general_purpose::STANDARD
            .decode(v["ssn"].as_str().unwrap())
            .unwrap();
        assert_eq!(
            &ct[..5],
            &[0, 0, 0, 0, 1],
            "Confluent's client writes the DEK version first under this rule"
        );
    }
}

// ---------------------------------------------------------------------
// (a) Avro full names as Confluent's client computes them (its serializer
// names a record with `"namespace": ""` inside a namespaced record by the
// enclosing namespace: `ns.I`, confluent_edges_peer.py avro-empty-namespace and
// the patterns tried in the report).
// ---------------------------------------------------------------------

#[cfg(feature = "confluent-avro")]
fn avro_nested(inner_namespace: Option<&str>, outer_name: &str, pattern: &str) -> Value {
    let mut inner =
        json!({"type": "record", "name": "I", "fields": [{"name": "ssn", "type": "string"}]});
    if let Some(ns) = inner_namespace {
        inner["namespace"] = json!(ns);
    }
    let doc = json!({"type": "record", "name": outer_name, "namespace": "ns", "fields": [
        {"name": "inner", "type": inner}]});
    json!({"schema": doc.to_string(), "ruleSet": {"domainRules": [rule(json!(["PII"]))]},
           "metadata": {"tags": {pattern: ["PII"]}}})
}

/// Confluent encrypts `inner.ssn` under the pattern `ns.I.ssn` for each
/// of these (confluent_edges_peer.py avro-nested-inherits-namespace,
/// avro-empty-namespace with ns.I.ssn, avro-dotted-name with a.b.I.ssn).
#[cfg(feature = "confluent-avro")]
#[test]
fn avro_nested_names_match_confluents() {
    let record = json!({"inner": {"ssn": SSN}});
    assert_not_plaintext(
        "avro-nested-inherits-namespace",
        avro_nested(None, "R", "ns.I.ssn"),
        record.clone(),
    );
    assert_not_plaintext(
        "avro-empty-namespace",
        avro_nested(Some(""), "R", "ns.I.ssn"),
        record.clone(),
    );
    assert_not_plaintext(
        "avro-dotted-name",
        avro_nested(None, "a.b.R", "a.b.I.ssn"),
        record,
    );
}

/// Confluent writes `inner.ssn` in plaintext under the pattern `I.ssn`
/// (avro-empty-namespace): this codec must not encrypt it (its reader
/// would fail on Confluent's records, Confluent's reader read ciphertext).
#[cfg(feature = "confluent-avro")]
#[test]
fn avro_empty_namespace_pattern_without_namespace_is_plaintext_as_confluents() {
    let body = write(
        &avro_nested(Some(""), "R", "I.ssn"),
        &json!({"inner": {"ssn": SSN}}),
    );
    assert!(
        body.as_ref()
            .map_or(true, |b| String::from_utf8_lossy(b).contains(SSN)),
        "I.ssn: Confluent's client writes plaintext, this codec encrypts"
    );
}

// ---------------------------------------------------------------------
// (e) Time on a forged schema: every property's full name is matched
// against every metadata.tags pattern, in time pattern × name, once per
// schema. A schema of 1 MiB (what a registry answer may hold) with 500
// patterns and 500 properties of 1000 characters is 2.5e11 steps.
// ---------------------------------------------------------------------

fn wide_schema(patterns: usize, props: usize, len: usize) -> Value {
    let mut properties = serde_json::Map::new();
    for i in 0..props {
        properties.insert(
            format!("{i:06}{}", "n".repeat(len - 6)),
            json!({"type": "string"}),
        );
    }
    let mut tags = serde_json::Map::new();
    for i in 0..patterns {
        tags.insert(
            format!("$.{i:06}{}", "*x".repeat((len - 8) / 2)),
            json!(["PII"]),
        );
    }
    json_schema(
        json!({"type": "object", "properties": properties}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        Some(json!({"tags": tags})),
    )
}

#[test]
fn a_schema_with_many_long_patterns_is_read_in_bounded_time() {
    let schema = wide_schema(500, 500, 1000);
    assert!(
        schema.to_string().len() < 1 << 20,
        "{}",
        schema.to_string().len()
    );
    // Read or refused, in bounded time: the matching has a budget (10^8
    // steps), past which the schema is refused.
    let t = std::time::Instant::now();
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    let result = codec.register(1, "t-value", &schema);
    let took = t.elapsed();
    assert!(
        took < std::time::Duration::from_secs(30),
        "a 1 MiB schema took {took:?} to register (once per schema id)"
    );
    let e = result.unwrap_err();
    assert!(e.to_string().contains("too many and too long"), "{e}");
    // A schema of a usual size is read.
    codec
        .register(2, "u-value", &wide_schema(20, 50, 40))
        .unwrap();
}

// ---------------------------------------------------------------------
// (d) A Vault token to an address a schema names. The module docs: "a KEK
// in Vault is used only with VAULT_ADDR set"; kek.rs: "A Vault key goes to
// the server VAULT_ADDR names, never to one a schema or the registry
// names". With KMS clients given (`with_kms_clients`, as the kms module's
// docs show) that check is skipped: a VaultClient without an address
// (`VaultClient::new(token)`, or `from_env()` without VAULT_ADDR) sends
// its token to the host of the key id the schema's rule (or the registry's
// KEK) names.
// ---------------------------------------------------------------------

#[cfg(feature = "vault")]
#[test]
fn a_vault_token_never_goes_to_a_host_the_schema_names() {
    use std::io::Read as _;
    use tombstone_crypt::kms::{KmsClients, VaultClient};

    // "attacker": whoever may register a schema (or answer as the registry).
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        if let Ok((mut s, _)) = listener.accept() {
            let mut buf = [0u8; 512];
            let n = s.read(&mut buf).unwrap_or(0);
            let _ = tx.send(buf[..n].to_vec());
        }
    });
    let mut r = rule(json!(["PII"]));
    r["params"]["encrypt.kms.type"] = json!("hcvault");
    r["params"]["encrypt.kms.key.id"] = json!(format!("http://127.0.0.1:{port}/transit/keys/k1"));
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [r]}),
        None,
    );
    // The user's Vault token, the user's Vault elsewhere (not configured
    // by address: the key ids were to say it).
    let clients = KmsClients::new().with(VaultClient::new("hvs.the-users-vault-token"));
    let mut codec = ConfluentJson::without_local_kms().with_kms_clients(clients);
    codec.register(1, "t-value", &schema).unwrap();
    let result = codec.encode("t-value", Some(&json!({"ssn": SSN})));
    let got = rx.recv_timeout(std::time::Duration::from_secs(2)).ok();
    assert!(
        got.is_none(),
        "a connection carrying the Vault request went to the schema's host 127.0.0.1:{port} \
         (first bytes {:02x?}: a TLS ClientHello; with a certificate for that host the token follows); \
         encode: {:?}",
        got.as_deref().map(|b| &b[..b.len().min(6)]),
        result.map(|_| ()).map_err(|e| e.to_string())
    );
}

// ---------------------------------------------------------------------
// Through the test registry (tests/interop/schema_registry_server.py).
// ---------------------------------------------------------------------

struct TestRegistry {
    child: std::process::Child,
    url: String,
}

impl TestRegistry {
    fn start() -> Option<Self> {
        use std::io::BufRead as _;
        let py = common::tink::python()?;
        let script = common::root::repo_root().join("tests/interop/schema_registry_server.py");
        let mut child = std::process::Command::new(py)
            .arg(script)
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
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

    fn delete(&self, path: &str) {
        use std::io::Write as _;
        let addr = self.url.strip_prefix("http://").unwrap();
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        write!(
            conn,
            "DELETE {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut answer = String::new();
        std::io::Read::read_to_string(&mut conn, &mut answer).unwrap();
        assert!(answer.contains(" 200"), "{answer}");
    }
}

impl Drop for TestRegistry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A DEK version soft-deleted in the registry is not written under by a
/// new writer. Confluent's client asks for the DEK without deleted
/// versions, finds none, fails to create version 1 (409) and, reading it
/// back without deleted versions again, fails: "no dek found for k1 during
/// produce" (encrypt_executor.py, _get_or_create_dek / _create_dek). This
/// codec, on the 409, reads version 1 back with deleted versions and
/// writes new records under the DEK the operator deleted (tests/confluent.rs
/// a_soft_deleted_dek_still_reads_its_records says "a new writer does not
/// take it", but does not check it).
#[test]
fn a_new_writer_does_not_write_under_a_soft_deleted_dek() {
    use tombstone_crypt::confluent::Registry;
    let Some(server) = TestRegistry::start() else {
        return;
    };
    let subject = "soft-value";
    let schema = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    let registry = Registry::new(&server.url).unwrap();
    registry.register(subject, &schema).unwrap();
    let writer = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    let first = writer
        .encode(subject, Some(&json!({"ssn": SSN})))
        .unwrap()
        .unwrap();
    server.delete(&format!(
        "/dek-registry/v1/keks/k1/deks/{subject}/versions/1?algorithm=AES256_GCM"
    ));
    let new_writer = ConfluentJson::new(LocalKms::new("mysecret"))
        .with_registry(Registry::new(&server.url).unwrap());
    let written = new_writer.encode(subject, Some(&json!({"ssn": SSN})));
    if let Ok(Some(bytes)) = &written {
        // Written: under which DEK? The deleted one opens it.
        let deleted_only = ConfluentJson::new(LocalKms::new("mysecret"))
            .with_registry(Registry::new(&server.url).unwrap());
        let opened = deleted_only.decode_for(Some(subject), Some(bytes));
        assert!(
            opened.is_err(),
            "a new writer wrote under the soft-deleted DEK version 1 (as the first record {} bytes); \
             Confluent's client refuses to write",
            first.len()
        );
    }
}

/// Writers in separate processes (here: separate codecs, nothing shared
/// but the registry) making a subject's first DEK at once agree on it:
/// every record reads with a fresh reader.
#[test]
fn writers_racing_for_the_first_dek_agree() {
    use tombstone_crypt::confluent::Registry;
    let Some(server) = TestRegistry::start() else {
        return;
    };
    for round in 0..5 {
        let subject = format!("race{round}-value");
        let schema = json_schema(
            json!({"type": "object", "properties": {"ssn": tagged()}}),
            json!({"domainRules": [rule(json!(["PII"]))]}),
            None,
        );
        Registry::new(&server.url)
            .unwrap()
            .register(&subject, &schema)
            .unwrap();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(6));
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let (url, subject, barrier) =
                    (server.url.clone(), subject.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let w = ConfluentJson::new(LocalKms::new("mysecret"))
                        .with_registry(Registry::new(&url).unwrap());
                    barrier.wait();
                    (0..3)
                        .map(|_| {
                            w.encode(&subject, Some(&json!({"ssn": SSN})))
                                .map(Option::unwrap)
                        })
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        let reader = ConfluentJson::new(LocalKms::new("mysecret"))
            .with_registry(Registry::new(&server.url).unwrap());
        for h in handles {
            for r in h.join().unwrap() {
                let bytes = r.expect("a racing writer fails");
                assert_eq!(
                    reader.decode_for(Some(&subject), Some(&bytes)).unwrap(),
                    Some(json!({"ssn": SSN}))
                );
            }
        }
    }
}

/// confluent_edges_peer.py field-rule-in-encoding-rules and
/// payload-rule-in-domain-rules: Confluent's client fails to write under
/// either (TypeError); this codec writes (records Confluent's client
/// cannot read), where the claim is "or refuses the schema".
#[test]
fn rules_in_the_other_phase_are_refused() {
    let field_in_encoding = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"encodingRules": [rule(json!(["PII"]))]}),
        None,
    );
    let mut payload = rule(json!(["PII"]));
    payload["type"] = json!("ENCRYPT_PAYLOAD");
    let payload_in_domain = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": "string"}}}),
        json!({"domainRules": [payload]}),
        None,
    );
    let a = write(&field_in_encoding, &json!({"ssn": SSN}));
    let b = write(&payload_in_domain, &json!({"ssn": SSN}));
    assert!(
        a.is_err() && b.is_err(),
        "ENCRYPT among encodingRules: {:?}; ENCRYPT_PAYLOAD among domainRules: {:?}",
        a.map(|b| String::from_utf8_lossy(&b).into_owned()),
        b.map(|b| b.len())
    );
}

/// Forged Avro schemas: refused or read, never a panic.
#[cfg(feature = "confluent-avro")]
#[test]
fn forged_avro_schemas_do_not_panic() {
    let docs = [
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":0,"scale":5}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"bytes","logicalType":"decimal","precision":4,"scale":9}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"fixed","name":"F","size":-1}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"fixed","name":"F","size":18446744073709551615}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"d","type":{"type":"fixed","name":"F","size":4,"logicalType":"decimal","precision":99999999999}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"e","type":{"type":"enum","name":"E","symbols":["A","A"]}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"a","type":"string"},{"name":"a","type":"string","confluent:tags":["PII"]}]}"#,
        r#"{"type":"record","name":"","fields":[]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"u","type":["null",["string"]]}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"u","type":["string","string"],"confluent:tags":["PII"]}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"s","type":"string","default":5,"confluent:tags":["PII"]}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"s","type":{"type":"string","logicalType":"uuid"},"confluent:tags":["PII"]}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":{"type":"record","name":"R","fields":[]}}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"R"}]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"n","type":"Missing"}]}"#,
        r#"{"type":"record","name":"R","aliases":["R"],"fields":[{"name":"s","type":"string","aliases":["s","t"],"confluent:tags":["PII"]}]}"#,
        r#"{"type":"record","name":"a..b","fields":[]}"#,
        r#"{"type":"record","name":"R","fields":[{"name":"m","type":{"type":"map","values":{"type":"array","items":["null","string"]}},"confluent:tags":["PII"]}]}"#,
        r#""string""#,
        r#"["null","string"]"#,
        r#"{"type":"array","items":"string"}"#,
    ];
    let mut panicked = Vec::new();
    for doc in docs {
        let schema = json!({"schema": doc, "ruleSet": {"domainRules": [rule(json!(["PII"]))]}});
        let r = std::panic::catch_unwind(|| {
            let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
            match codec.register(1, "t-value", &schema) {
                Err(e) => format!("refused: {e}"),
                Ok(()) => {
                    let w = codec.encode(
                        "t-value",
                        Some(&json!({"s": SSN, "a": SSN, "u": SSN, "n": null, "m": {"k": [SSN]}})),
                    );
                    let garbage = codec.decode(Some(&[
                        0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 0x0f, 2, 4, 6,
                    ]));
                    format!(
                        "registered; write {:?}; read garbage {:?}",
                        w.map(|b| b.map(|b| String::from_utf8_lossy(&b).into_owned()))
                            .map_err(|e| e.to_string()),
                        garbage.map_err(|e| e.to_string())
                    )
                }
            }
        });
        match r {
            Ok(what) => eprintln!("{doc}\n    {what}"),
            Err(_) => panicked.push(doc),
        }
    }
    assert!(panicked.is_empty(), "panicked on {panicked:#?}");
}

/// (f) One codec (the in-memory registry: "the embedded default for tests
/// and single-process use"), threads writing a subject's first records at
/// once: each thread finds no DEK, makes one, and the last one kept
/// replaces the others; the records written under those are unreadable
/// (and `wrapped_deks` never shows their DEKs).
#[test]
fn threads_writing_a_subjects_first_records_agree_on_its_dek() {
    for round in 0..20 {
        let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
        codec
            .register(
                1,
                "t-value",
                &json_schema(
                    json!({"type": "object", "properties": {"ssn": tagged()}}),
                    json!({"domainRules": [rule(json!(["PII"]))]}),
                    None,
                ),
            )
            .unwrap();
        let codec = std::sync::Arc::new(codec);
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(4));
        let handles: Vec<_> = (0..4)
            .map(|_| {
                let (codec, barrier) = (codec.clone(), barrier.clone());
                std::thread::spawn(move || {
                    barrier.wait();
                    codec
                        .encode("t-value", Some(&json!({"ssn": SSN})))
                        .unwrap()
                        .unwrap()
                })
            })
            .collect();
        let written: Vec<Vec<u8>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        for (i, bytes) in written.iter().enumerate() {
            let read = codec.decode(Some(bytes));
            assert!(
                read.is_ok(),
                "round {round}: thread {i}'s record does not read with the codec that wrote it: {}",
                read.unwrap_err()
            );
        }
    }
}

/// (b): a record Confluent's client wrote under `"confluent:tags":
/// {"PII": true}` (ssn encrypted, confluent_edges_peer.py json-tags-object) read
/// here under that schema: the ciphertext is the value of `ssn`.
#[test]
fn confluents_ciphertext_under_tags_given_as_an_object_is_not_a_value() {
    let writer = json_schema(
        json!({"type": "object", "properties": {"ssn": tagged()}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    let reader = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": "string", "confluent:tags": {"PII": true}}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        None,
    );
    assert_no_ciphertext_read(
        "json-tags-object (read)",
        writer,
        reader,
        json!({"ssn": SSN}),
    );
}

/// (b): the same for an object with `items` whose property metadata tags
/// (confluent_edges_peer.py json-object-with-items-metadata).
#[test]
fn confluents_ciphertext_under_an_object_with_items_is_not_a_value() {
    let writer = json_schema(
        json!({"type": "object", "properties": {"ssn": {"type": "string"}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        Some(json!({"tags": {"$.ssn": ["PII"]}})),
    );
    let reader = json_schema(
        json!({"type": "object", "items": {}, "properties": {"ssn": {"type": "string"}}}),
        json!({"domainRules": [rule(json!(["PII"]))]}),
        Some(json!({"tags": {"$.ssn": ["PII"]}})),
    );
    assert_no_ciphertext_read(
        "json-object-with-items-metadata (read)",
        writer,
        reader,
        json!({"ssn": SSN}),
    );
}

/// Peak resident memory of this process (VmHWM, bytes).
fn peak_rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// (e) Memory for one forged Avro record of 16 MiB (the most read): an
/// array of 16 million `int` zeros (one byte each) becomes 16 million
/// apache-avro Values, then JSON. Run alone: `cargo test ... avro_record_memory -- --test-threads=1`.
#[cfg(feature = "confluent-avro")]
#[test]
fn avro_record_memory_is_bounded_by_a_small_multiple_of_its_size() {
    let doc = json!({"type": "record", "name": "R", "fields": [{"name": "a", "type": {"type": "array", "items": "int"}}]});
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(1, "t-value", &json!({"schema": doc.to_string()}))
        .unwrap();
    let n: u32 = (16 << 20) - 64;
    let mut bytes = vec![0, 0, 0, 0, 1];
    // zigzag varint of the block count n
    let mut z = u64::from(n) << 1;
    while z >= 0x80 {
        bytes.push((z as u8) | 0x80);
        z >>= 7;
    }
    bytes.push(z as u8);
    bytes.resize(bytes.len() + n as usize, 0);
    bytes.push(0);
    assert!(bytes.len() <= 16 << 20);
    let before = peak_rss();
    let r = codec.decode(Some(&bytes));
    let peak = peak_rss().saturating_sub(before);
    eprintln!(
        "decode: {:?}; peak memory up by {} MiB for a {} MiB record",
        r.as_ref().map(|_| "a value").map_err(|e| e.to_string()),
        peak >> 20,
        bytes.len() >> 20
    );
    assert!(
        peak < 256 << 20,
        "peak memory up by {} MiB for one 16 MiB record",
        peak >> 20
    );
}

/// The same for a JSON record: `[0,0,0,...]` of 16 MiB: 256 MiB (holds
/// under 384 MiB; ignored: the high-water mark is the process's, run it
/// alone with --ignored).
#[test]
#[ignore]
fn json_record_memory_is_bounded_by_a_small_multiple_of_its_size() {
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(1, "t-value", &json!({"schemaType": "JSON", "schema": r#"{"type":"object","properties":{"a":{"type":"array"}}}"#}))
        .unwrap();
    let mut bytes = vec![0, 0, 0, 0, 1];
    bytes.extend_from_slice(b"{\"a\":[0");
    while bytes.len() < (16 << 20) - 4 {
        bytes.extend_from_slice(b",0");
    }
    bytes.extend_from_slice(b"]}");
    let before = peak_rss();
    let r = codec.decode(Some(&bytes));
    let peak = peak_rss().saturating_sub(before);
    eprintln!(
        "decode: {:?}; peak memory up by {} MiB for a {} MiB record",
        r.as_ref().map(|_| "a value").map_err(|e| e.to_string()),
        peak >> 20,
        bytes.len() >> 20
    );
    assert!(
        peak < 384 << 20,
        "peak memory up by {} MiB for one 16 MiB record",
        peak >> 20
    );
}
