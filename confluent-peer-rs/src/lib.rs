//! Confluent's Rust client, `schema-registry-client` 0.4.2 (its JSON Schema
//! serializer and deserializer, its mock Schema Registry, its `ENCRYPT` and
//! `ENCRYPT_PAYLOAD` rule executors and its `local-kms` KEK driver), as a
//! peer of `tombstone_crypt::confluent`, offline.
//!
//! The DEK registry is the crate's own mock (`MockDekRegistryClient`),
//! shared by base URL ([`SharedDeks`]): each rule executor makes its own
//! DEK registry client from the schema registry's configuration, and the
//! field executor's is private, so without sharing nobody could read the
//! wrapped DEKs a writer made or give a reader the ones another wrote.
//!
//! What the crate's API allows and what it does not, found here:
//! - `JsonSerializer::serialize` takes a `serde_json::Value` and
//!   `JsonDeserializer::deserialize` a `&[u8]`: neither has a tombstone
//!   (`None`). A reader handed an absent value as the empty slice panics
//!   (`SchemaId::read_from_bytes` indexes `bytes[0]`); [`deserialize`]
//!   catches that and says `panicked`.
//! - Its mock Schema Registry gives every schema id 1, so each job of
//!   [`read_jobs`] has a registry of its own and its records must carry
//!   schema id 1.
//! - The `local-kms` KMS client is registered for the process the first
//!   time a KEK is used and serves every `local-kms://` key after that:
//!   one secret per process.

use std::collections::{BTreeMap, HashMap};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, OnceLock, PoisonError};

use base64::Engine as _;
use futures::executor::block_on;
use schema_registry_client::rest::apis::Error as RestError;
use schema_registry_client::rest::client_config::ClientConfig;
use schema_registry_client::rest::dek_registry_client::Client as DekClient;
use schema_registry_client::rest::mock_dek_registry_client::MockDekRegistryClient;
use schema_registry_client::rest::mock_schema_registry_client::MockSchemaRegistryClient;
use schema_registry_client::rest::models::dek::Algorithm;
use schema_registry_client::rest::models::{
    CreateDekRequest, CreateKekRequest, Dek, Kek, Kind, Mode, Rule, RuleSet, Schema,
};
use schema_registry_client::rest::schema_registry_client::Client as SchemaClient;
use schema_registry_client::rules::encryption::encrypt_executor::{
    EncryptionExecutor, FieldEncryptionExecutor, SystemClock,
};
use schema_registry_client::rules::encryption::localkms::local_driver::LocalKmsDriver;
use schema_registry_client::serdes::config::{
    DeserializerConfig, SchemaSelector, SerializerConfig,
};
use schema_registry_client::serdes::json::{JsonDeserializer, JsonSerializer};
use schema_registry_client::serdes::rule_registry::RuleRegistry;
use schema_registry_client::serdes::serde::{
    SerdeFormat, SerdeType, SerializationContext, SubjectNameStrategyType,
};
use serde_json::{json, Value};

pub use schema_registry_client::rest::mock_schema_registry_client::MockSchemaRegistryClient as MockRegistry;

/// The secret of the `local-kms` KEKs, as in tests/interop/confluent_peer.py.
pub const SECRET: &str = "mysecret";

/// The JSON Schema of tests/interop/confluent_peer.py: `ssn` and `note`
/// tagged `PII`, `note` nullable.
pub const SCHEMA: &str = r#"{"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "ssn": {"type": "string", "confluent:tags": ["PII"]}, "note": {"type": ["null", "string"], "confluent:tags": ["PII"]}}}"#;

/// The records of tests/interop/confluent_peer.py: a null field, an empty
/// string, a tombstone, non-ASCII text.
pub fn records() -> Vec<Option<Value>> {
    vec![
        Some(json!({"id": 1, "name": "Ada", "ssn": "078-05-1120", "note": null})),
        Some(json!({"id": 2, "name": "Bo", "ssn": "", "note": "a note"})),
        None,
        Some(json!({"id": 3, "name": "Cy", "ssn": "078-05-1120", "note": "ünïcode ✓"})),
    ]
}

/// [`SCHEMA`] with `note` a string, not nullable: the crate's field rule
/// refuses a tagged field whose `type` is a list (`["null", "string"]`:
/// "unsupported field type NULL"), whatever the record holds, so its field
/// cases are written under this schema too.
pub const SCHEMA_NOTE_STRING: &str = r#"{"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string"}, "ssn": {"type": "string", "confluent:tags": ["PII"]}, "note": {"type": "string", "confluent:tags": ["PII"]}}}"#;

/// The cases `write` writes: name, rule type, DEK algorithm, schema.
pub const CASES: [(&str, &str, &str, &str); 5] = [
    ("field-gcm", "ENCRYPT", "AES256_GCM", SCHEMA),
    ("field-siv", "ENCRYPT", "AES256_SIV", SCHEMA),
    ("payload-gcm", "ENCRYPT_PAYLOAD", "AES256_GCM", SCHEMA),
    (
        "field-gcm-note-string",
        "ENCRYPT",
        "AES256_GCM",
        SCHEMA_NOTE_STRING,
    ),
    (
        "field-siv-note-string",
        "ENCRYPT",
        "AES256_SIV",
        SCHEMA_NOTE_STRING,
    ),
];

/// The crate's mock DEK registry, one store per registry base URL: every
/// client made for the same URL (by a rule executor or here) sees the same
/// KEKs and DEKs.
#[derive(Clone)]
pub struct SharedDeks {
    inner: MockDekRegistryClient,
}

fn dek_stores() -> &'static Mutex<HashMap<Vec<String>, MockDekRegistryClient>> {
    static STORES: OnceLock<Mutex<HashMap<Vec<String>, MockDekRegistryClient>>> = OnceLock::new();
    STORES.get_or_init(Default::default)
}

impl DekClient for SharedDeks {
    fn new(config: ClientConfig) -> Self {
        let mut stores = dek_stores().lock().unwrap_or_else(PoisonError::into_inner);
        let inner = stores
            .entry(config.base_urls.clone())
            .or_insert_with(|| MockDekRegistryClient::new(config))
            .clone();
        SharedDeks { inner }
    }

    fn config(&self) -> &ClientConfig {
        self.inner.config()
    }

    async fn register_kek(&self, request: CreateKekRequest) -> Result<Kek, RestError> {
        self.inner.register_kek(request).await
    }

    async fn register_dek(
        &self,
        kek_name: &str,
        request: CreateDekRequest,
    ) -> Result<Dek, RestError> {
        self.inner.register_dek(kek_name, request).await
    }

    async fn get_kek(&self, name: &str, deleted: bool) -> Result<Kek, RestError> {
        self.inner.get_kek(name, deleted).await
    }

    async fn get_dek(
        &self,
        kek_name: &str,
        subject: &str,
        algorithm: Option<Algorithm>,
        version: Option<i32>,
        deleted: bool,
    ) -> Result<Dek, RestError> {
        self.inner
            .get_dek(kek_name, subject, algorithm, version, deleted)
            .await
    }

    async fn set_dek_key_material(
        &self,
        kek_name: &str,
        subject: &str,
        algorithm: Option<Algorithm>,
        version: Option<i32>,
        deleted: bool,
        key_material_bytes: &[u8],
    ) -> Result<Dek, RestError> {
        self.inner
            .set_dek_key_material(
                kek_name,
                subject,
                algorithm,
                version,
                deleted,
                key_material_bytes,
            )
            .await
    }

    fn clear_caches(&self) {
        self.inner.clear_caches();
    }

    fn close(&mut self) {
        self.inner.close();
    }
}

/// A registry URL no other registry of this process has.
pub fn unique_url(what: &str) -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "mock://{what}-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// A mock Schema Registry of its own (and with it a DEK registry of its
/// own).
pub fn registry(what: &str) -> MockSchemaRegistryClient {
    MockSchemaRegistryClient::new(ClientConfig::new(vec![unique_url(what)]))
}

/// The DEK registry of `registry`'s rule executors.
pub fn deks_of(registry: &MockSchemaRegistryClient) -> SharedDeks {
    SharedDeks::new(registry.config().clone())
}

/// The rule executors: field and payload encryption over [`SharedDeks`],
/// the system clock; the `local-kms` driver registered.
pub fn rules() -> RuleRegistry {
    static DRIVER: Once = Once::new();
    DRIVER.call_once(LocalKmsDriver::register);
    let rules = RuleRegistry::new();
    rules.register_executor(FieldEncryptionExecutor::<SharedDeks>::new(
        SystemClock::new(),
    ));
    rules.register_executor(EncryptionExecutor::<SharedDeks>::new(SystemClock::new()));
    rules
}

fn rule_conf(secret: &str) -> HashMap<String, String> {
    HashMap::from([("secret".to_owned(), secret.to_owned())])
}

/// A serializer of the subject's latest schema (no auto-registration, as
/// tests/interop/confluent_peer.py), topic name strategy.
///
/// # Errors
/// What the crate reports configuring its rule executors.
pub fn serializer<'a>(
    registry: &'a MockSchemaRegistryClient,
    rules: &RuleRegistry,
    secret: &str,
) -> Result<JsonSerializer<'a, MockSchemaRegistryClient>, String> {
    let config = SerializerConfig {
        subject_name_strategy_type: SubjectNameStrategyType::Topic,
        ..SerializerConfig::new(
            false,
            Some(SchemaSelector::LatestVersion),
            false,
            false,
            rule_conf(secret),
        )
    };
    JsonSerializer::new(registry, None, Some(rules.clone()), config).map_err(|e| format!("{e:?}"))
}

/// A deserializer (the writer's schema, by the id its records carry),
/// topic name strategy.
///
/// # Errors
/// What the crate reports configuring its rule executors.
pub fn deserializer<'a>(
    registry: &'a MockSchemaRegistryClient,
    rules: &RuleRegistry,
    secret: &str,
) -> Result<JsonDeserializer<'a, MockSchemaRegistryClient>, String> {
    let config = DeserializerConfig {
        subject_name_strategy_type: SubjectNameStrategyType::Topic,
        ..DeserializerConfig::new(None, false, rule_conf(secret))
    };
    JsonDeserializer::new(registry, Some(rules.clone()), config).map_err(|e| format!("{e:?}"))
}

/// The context of a record value of `topic`.
pub fn value_context(topic: &str) -> SerializationContext {
    SerializationContext {
        topic: topic.to_owned(),
        serde_type: SerdeType::Value,
        serde_format: SerdeFormat::Json,
        headers: None,
    }
}

/// The topic of a `TOPIC-value` subject.
pub fn topic_of(subject: &str) -> &str {
    subject.strip_suffix("-value").unwrap_or(subject)
}

/// Writes `value` with the crate's serializer.
///
/// # Errors
/// What the serializer reports; `panicked` if it panics.
pub fn serialize(
    ser: &JsonSerializer<'_, MockSchemaRegistryClient>,
    ctx: &SerializationContext,
    value: Value,
) -> Result<Vec<u8>, String> {
    caught(|| block_on(ser.serialize(ctx, value)).map_err(|e| format!("{e:?}")))
}

/// Reads `bytes` with the crate's deserializer.
///
/// # Errors
/// What the deserializer reports; `panicked` if it panics (as it does on
/// the empty slice).
pub fn deserialize(
    de: &JsonDeserializer<'_, MockSchemaRegistryClient>,
    ctx: &SerializationContext,
    bytes: &[u8],
) -> Result<Value, String> {
    caught(|| block_on(de.deserialize(ctx, bytes)).map_err(|e| format!("{e:?}")))
}

/// The panic message of the last panic caught by [`caught`] on this thread.
pub fn last_panic() -> Option<String> {
    LAST_PANIC.with(|p| p.borrow().clone())
}

thread_local! {
    static LAST_PANIC: std::cell::RefCell<Option<String>> = const { std::cell::RefCell::new(None) };
}

fn caught<T>(f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            LAST_PANIC.with(|p| *p.borrow_mut() = Some(message));
            Err("panicked".to_owned())
        }
    }
}

/// An encryption rule as tests/interop/confluent_peer.py writes it: `ENCRYPT`
/// on the tag `PII` or `ENCRYPT_PAYLOAD`, a `local-kms` KEK.
pub fn rule_set(rule_type: &str, kek_name: &str, kms_key_id: &str, algorithm: &str) -> RuleSet {
    let fields = rule_type == "ENCRYPT";
    let rule = Rule {
        name: if fields {
            "encrypt-pii"
        } else {
            "encrypt-payload"
        }
        .to_owned(),
        doc: None,
        kind: Some(Kind::Transform),
        mode: Some(Mode::WriteRead),
        r#type: rule_type.to_owned(),
        tags: fields.then(|| vec!["PII".to_owned()]),
        params: Some(BTreeMap::from([
            ("encrypt.kek.name".to_owned(), kek_name.to_owned()),
            ("encrypt.kms.type".to_owned(), "local-kms".to_owned()),
            ("encrypt.kms.key.id".to_owned(), kms_key_id.to_owned()),
            ("encrypt.dek.algorithm".to_owned(), algorithm.to_owned()),
        ])),
        expr: None,
        on_success: None,
        on_failure: Some("ERROR,NONE".to_owned()),
        disabled: Some(false),
    };
    RuleSet {
        migration_rules: None,
        domain_rules: fields.then(|| vec![rule.clone()]),
        encoding_rules: (!fields).then(|| vec![rule]),
        enable_at: None,
    }
}

/// The wrapped DEKs of `kek_name` and `subject` in `deks`, versions 1, 2,
/// ... up to the first missing, as the fixtures list them.
pub fn wrapped_deks(
    deks: &SharedDeks,
    kek_name: &str,
    subject: &str,
    algorithm: &str,
) -> Vec<Value> {
    let Ok(alg) = algorithm_named(algorithm) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for version in 1..=20 {
        let Ok(dek) = block_on(deks.get_dek(kek_name, subject, Some(alg), Some(version), false))
        else {
            break;
        };
        let Some(material) = dek.encrypted_key_material else {
            break;
        };
        out.push(json!({
            "kekName": kek_name,
            "subject": subject,
            "version": dek.version,
            "algorithm": algorithm,
            "encryptedKeyMaterial": material,
        }));
    }
    out
}

fn algorithm_named(name: &str) -> Result<Algorithm, String> {
    serde_json::from_value(Value::String(name.to_owned()))
        .map_err(|_| format!("unknown DEK algorithm {name}"))
}

/// Writes one case of [`CASES`] (`records`, e.g. [`records`], under the
/// case's schema) with the crate, in a registry of its own: the case in
/// the shape of tests/fixtures/confluent/*.json. A tombstone is not given
/// to the serializer (it takes no `Option`): its `bytes` is null. A record
/// the serializer refuses has `bytes` null and `error`; one the crate's own
/// deserializer does not read back as written has `read_back`. `tombstone`
/// says what the crate does with JSON null written and the empty slice
/// read.
///
/// # Errors
/// An unknown case; what the mock registry reports registering the schema.
pub fn write_case(name: &str, records: &[Option<Value>]) -> Result<Value, String> {
    let &(_, rule_type, algorithm, schema_text) = CASES
        .iter()
        .find(|c| c.0 == name)
        .ok_or_else(|| format!("no case {name}"))?;
    let topic = format!("customers-{name}");
    let subject = format!("{topic}-value");
    let kek_name = format!("kek-{name}");
    let registry = registry("write");
    let rules = rule_set(
        rule_type,
        &kek_name,
        &format!("local-kms://{name}"),
        algorithm,
    );
    let schema = Schema {
        schema_type: Some("JSON".to_owned()),
        references: None,
        metadata: None,
        rule_set: Some(Box::new(rules.clone())),
        schema: schema_text.to_owned(),
    };
    let registered = block_on(registry.register_schema(&subject, &schema, false))
        .map_err(|e| format!("register_schema: {e:?}"))?;
    let latest = block_on(registry.get_latest_version(&subject, None))
        .map_err(|e| format!("get_latest_version: {e:?}"))?;
    let executors = self::rules();
    let ser = serializer(&registry, &executors, SECRET)?;
    let de = deserializer(&registry, &executors, SECRET)?;
    let ctx = value_context(&topic);
    let mut out = Vec::new();
    for value in records {
        let mut record = json!({"value": value, "bytes": null});
        if let Some(v) = value {
            match serialize(&ser, &ctx, v.clone()) {
                Ok(bytes) => {
                    record["bytes"] = base64::engine::general_purpose::STANDARD
                        .encode(&bytes)
                        .into();
                    let back = deserialize(&de, &ctx, &bytes);
                    if back.as_ref() != Ok(v) {
                        record["read_back"] = outcome(back);
                    }
                }
                Err(e) => record["error"] = e.into(),
            }
        }
        out.push(record);
    }
    // A tombstone has no form in the crate's API: what it does with the
    // nearest a caller has, JSON null written and the empty slice read.
    let tombstone = json!({
        "serialize_json_null": outcome(
            serialize(&ser, &ctx, Value::Null)
                .map(|b| base64::engine::general_purpose::STANDARD.encode(b).into()),
        ),
        "deserialize_empty": outcome(deserialize(&de, &ctx, &[])),
    });
    Ok(json!({
        "made_by": "confluent-peer-rs, schema-registry-client 0.4.2 (Rust)",
        "case": name,
        "topic": topic,
        "subject": subject,
        "schema_id": registered.id,
        "schema": latest.to_schema(),
        "rule": rules.domain_rules.or(rules.encoding_rules).and_then(|r| r.into_iter().next()),
        "secret": SECRET,
        "deks": wrapped_deks(&deks_of(&registry), &kek_name, &subject, algorithm),
        "records": out,
        "tombstone": tombstone,
    }))
}

/// `{"ok": value}` or `{"error": why}` (with `panic`, the panic's message).
pub fn outcome(r: Result<Value, String>) -> Value {
    match r {
        Ok(v) => json!({"ok": v}),
        Err(e) if e == "panicked" => json!({"error": e, "panic": last_panic()}),
        Err(e) => json!({"error": e}),
    }
}

/// Reads jobs `[{schema, subject, secret, deks, records: [base64 | null]}]`
/// as tests/interop/confluent_peer.py's `read` does, each in a registry of
/// its own (the crate's mock gives every schema id 1: a job's records must
/// carry schema id 1): its schema registered, its KEKs (where the schema's
/// rules say they live) and wrapped DEKs registered in the DEK registry,
/// each record read with the crate's deserializer. A null record (a
/// tombstone) is given as the empty slice, the only absent value its
/// `&[u8]` takes. `[[{"ok": value} | {"error": why}]]`.
///
/// # Errors
/// A job that is not in that shape; what the mock registries report
/// registering its schema, KEKs and DEKs.
pub fn read_jobs(jobs: &Value) -> Result<Value, String> {
    let jobs = jobs.as_array().ok_or("the jobs are not a JSON array")?;
    let mut results = Vec::new();
    for (i, job) in jobs.iter().enumerate() {
        let field = |name: &str| {
            job.get(name)
                .and_then(Value::as_str)
                .ok_or_else(|| format!("job {i}: no {name}"))
        };
        let subject = field("subject")?;
        let secret = field("secret")?;
        let schema: Schema = serde_json::from_value(job.get("schema").cloned().unwrap_or_default())
            .map_err(|e| format!("job {i}: the schema: {e}"))?;
        let registry = registry("read");
        let registered = block_on(registry.register_schema(subject, &schema, false))
            .map_err(|e| format!("job {i}: register_schema: {e:?}"))?;
        if registered.id != Some(1) {
            return Err(format!(
                "job {i}: the schema got id {:?}, not 1",
                registered.id
            ));
        }
        // Each KEK where the schema's rules say it lives.
        let mut keks = HashMap::new();
        if let Some(set) = &schema.rule_set {
            for rule in set.domain_rules.iter().chain(&set.encoding_rules).flatten() {
                let p = rule.params.clone().unwrap_or_default();
                if let Some(name) = p.get("encrypt.kek.name") {
                    let get = |k: &str| p.get(k).cloned().unwrap_or_default();
                    keks.insert(
                        name.clone(),
                        (get("encrypt.kms.type"), get("encrypt.kms.key.id")),
                    );
                }
            }
        }
        let deks = deks_of(&registry);
        for d in job
            .get("deks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let s = |k: &str| {
                d.get(k)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned()
            };
            let kek_name = s("kekName");
            let (kms_type, kms_key_id) = keks
                .get(&kek_name)
                .cloned()
                .ok_or_else(|| format!("job {i}: no rule names the KEK {kek_name}"))?;
            block_on(deks.register_kek(CreateKekRequest {
                name: kek_name.clone(),
                kms_type,
                kms_key_id,
                kms_props: None,
                doc: None,
                shared: false,
            }))
            .map_err(|e| format!("job {i}: register_kek: {e:?}"))?;
            let version = d.get("version").and_then(Value::as_i64).unwrap_or(1);
            block_on(deks.register_dek(
                &kek_name,
                CreateDekRequest {
                    subject: s("subject"),
                    version: Some(
                        i32::try_from(version).map_err(|_| "a DEK version out of range")?,
                    ),
                    algorithm: Some(algorithm_named(&s("algorithm"))?),
                    encrypted_key_material: Some(s("encryptedKeyMaterial")),
                },
            ))
            .map_err(|e| format!("job {i}: register_dek: {e:?}"))?;
        }
        let executors = rules();
        let de = deserializer(&registry, &executors, secret)?;
        let ctx = value_context(topic_of(subject));
        let mut out = Vec::new();
        for r in job
            .get("records")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let bytes = match r.as_str() {
                Some(b) => base64::engine::general_purpose::STANDARD
                    .decode(b)
                    .map_err(|e| format!("job {i}: a record's base64: {e}"))?,
                None => Vec::new(),
            };
            out.push(outcome(deserialize(&de, &ctx, &bytes)));
        }
        results.push(Value::Array(out));
    }
    Ok(Value::Array(results))
}
