//! Records of a JSON Schema in Confluent's format, with its encryption
//! rules: [`ConfluentJson`].

use std::collections::HashMap;
use std::marker::PhantomData;
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant, SystemTime};

use base64::Engine as _;
use serde_json::Value;
use zeroize::Zeroizing;

use super::kek::{self, Kek, KekPlace};
use super::rule::{Rule, RuleKind};
use super::{
    parse_frame, split_version, write_frame, Dek, DekAlgorithm, LocalKms, Registry, MAGIC,
};
use crate::context::Context;
use crate::error::Error;
use crate::kms::KmsClients;
use crate::serde::{Deserializer, Serializer};

/// A registered schema: its subject, rules and the paths of its tagged
/// fields for each field rule.
#[derive(Debug)]
struct Registered {
    subject: String,
    /// Each field rule with what it reaches.
    fields: Vec<(Rule, Reached)>,
    payload: Option<Rule>,
    /// Fetched from the registry (may be evicted), not given here.
    fetched: bool,
    /// How many subschemas carry `confluent:tags` when no rule of the
    /// schema encrypts anything (a schema registered without its rules).
    unruled_tags: usize,
    /// An Avro schema's parsed form.
    #[cfg(feature = "confluent-avro")]
    avro: Option<Arc<super::avro::AvroSchema>>,
}

impl Registered {
    /// Every encryption rule of the schema: its field rules, then its
    /// payload rule.
    fn rules(&self) -> impl Iterator<Item = &Rule> {
        self.fields.iter().map(|(r, _)| r).chain(&self.payload)
    }
}

/// What a field rule reaches ([`tags`](super::tags)).
#[derive(Debug, Default)]
struct Reached {
    /// JSON Schema: the paths of the strings it encrypts (`*`: every item
    /// of an array).
    paths: Vec<Vec<String>>,
    /// Avro: the full names of the fields it reaches.
    #[cfg(feature = "confluent-avro")]
    avro: std::collections::HashSet<String>,
}

/// An Avro schema's parsed form, where Avro is read.
#[cfg(feature = "confluent-avro")]
type AvroParsed = super::avro::AvroSchema;
#[cfg(not(feature = "confluent-avro"))]
type AvroParsed = std::convert::Infallible;

/// Whether a schema inserted is its subject's latest.
enum Latest {
    /// Given here ([`ConfluentJson::register`]): the latest, for good.
    Given,
    /// Fetched as the subject's latest: until the cache TTL passes.
    Fetched,
    /// Fetched by id: not the latest.
    No,
}

/// The most schemas, subjects and DEKs fetched from a registry that are
/// kept.
const MAX_CACHED: usize = 4096;

/// A DEK's registry key: KEK name, subject, algorithm, version.
type DekId = (String, String, DekAlgorithm, u32);

/// The DEKs known here: opened ones, their wrapped form, and when each
/// was made (for rotation by expiry).
#[derive(Default)]
struct Deks {
    open: HashMap<DekId, (Arc<Dek>, SystemTime)>,
    wrapped: HashMap<DekId, Vec<u8>>,
    /// Where each KEK lives, as given or fetched from the registry.
    keks: HashMap<String, KekPlace>,
}

/// Reads and writes the records of JSON Schemas (and, with the feature
/// `confluent-avro`, Avro schemas) in Confluent's format, with their field
/// and payload encryption rules; a record's value is its JSON form either
/// way: the schemas, rules and DEKs are
/// given to it ([`register`](ConfluentJson::register),
/// [`add_wrapped_dek`](ConfluentJson::add_wrapped_dek)) or made by it (a
/// writer makes a subject's DEK on first use and wraps it under the KEK, as
/// Confluent's clients do, and a new version when the rule's expiry has
/// passed).
///
/// ```
/// use serde_json::json;
/// use tombstone_crypt::confluent::{ConfluentJson, LocalKms};
///
/// let schema = json!({
///     "schema": r#"{"type":"object","properties":{"id":{"type":"integer"},
///                  "ssn":{"type":"string","confluent:tags":["PII"]}}}"#,
///     "schemaType": "JSON",
///     // As Confluent's documentation writes a rule: no kind or mode (a
///     // WRITEREAD transform), and a failed read would hand on the field as
///     // it lies (NONE), which this codec refuses: it fails the read instead.
///     "ruleSet": {"domainRules": [{"name": "encryptPII", "type": "ENCRYPT", "tags": ["PII"],
///         "params": {"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms",
///                    "encrypt.kms.key.id": "local-kms://k1"},
///         "onFailure": "ERROR,NONE"}]}
/// });
/// let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
/// codec.register(1, "customers-value", &schema)?;
/// let record = json!({"id": 7, "ssn": "078-05-1120"});
/// let bytes = codec.encode("customers-value", Some(&record))?.unwrap();
/// assert_eq!(&bytes[..5], &[0, 0, 0, 0, 1]); // 0x00 | schema id
/// assert!(!String::from_utf8_lossy(&bytes).contains("078-05-1120"));
/// assert_eq!(codec.decode(Some(&bytes))?, Some(record));
/// assert_eq!(codec.encode("customers-value", None)?, None); // a tombstone stays one
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct ConfluentJson {
    local: Option<LocalKms>,
    kms_clients: Option<KmsClients>,
    /// Vault addresses a KEK may be at, beside `VAULT_ADDR`.
    vault_addresses: Vec<String>,
    schemas: RwLock<HashMap<u32, Arc<Registered>>>,
    /// Each subject's latest schema id; with when it was fetched from the
    /// registry (`None`: given here, never stale).
    latest: RwLock<HashMap<String, (u32, Option<Instant>)>>,
    cache_ttl: Duration,
    plaintext_tags: bool,
    /// Avro `bytes` and `fixed` in the JSON form as base64 strings.
    #[cfg(feature = "confluent-avro")]
    avro_base64: bool,
    deks: Mutex<Deks>,
    registry: Option<Registry>,
}

impl std::fmt::Debug for ConfluentJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentJson")
            .field("schemas", &read(&self.schemas).len())
            .field("registry", &self.registry)
            .finish_non_exhaustive()
    }
}

/// The longest record read or written (a bound on what one record may
/// allocate).
const MAX_RECORD: usize = 16 << 20;

impl ConfluentJson {
    /// Records whose DEKs are wrapped by `kms` (Confluent's `local-kms`
    /// KEKs), or by a KMS key: `aws-kms` and `hcvault` KEKs are opened with
    /// this crate's KMS clients (see
    /// [`with_kms_clients`](ConfluentJson::with_kms_clients)).
    pub fn new(kms: LocalKms) -> Self {
        ConfluentJson {
            local: Some(kms),
            ..Self::without_local_kms()
        }
    }

    /// Records whose DEKs are wrapped by KMS keys only (`aws-kms`,
    /// `hcvault`): a `local-kms` KEK is an error.
    pub fn without_local_kms() -> Self {
        ConfluentJson {
            local: None,
            kms_clients: None,
            vault_addresses: Vec::new(),
            schemas: RwLock::new(HashMap::new()),
            latest: RwLock::new(HashMap::new()),
            cache_ttl: Duration::from_secs(300),
            plaintext_tags: false,
            #[cfg(feature = "confluent-avro")]
            avro_base64: false,
            deks: Mutex::new(Deks::default()),
            registry: None,
        }
    }

    /// KEKs in a KMS (Confluent's KMS types `aws-kms`, whose key id is the
    /// key's ARN, and `hcvault`, whose key id is the key's URL
    /// `http(s)://HOST[:PORT]/MOUNT/keys/NAME`) are opened with `clients`
    /// (this crate's [`AwsKmsClient`](crate::kms::AwsKmsClient) and
    /// [`VaultClient`](crate::kms::VaultClient), with features `aws-kms`
    /// and `vault`, or a [`KmsClient`](crate::kms::KmsClient) of your own
    /// for the URIs `aws-kms://ARN` and `hcvault://HOST[:PORT]/MOUNT/keys/NAME`).
    /// Without this, they are opened with the clients registered for the
    /// process and the built-in ones configured from the environment (a
    /// Vault key then at the server its URL names unless `VAULT_ADDR` is
    /// set). With clients given, a KEK in Vault is opened only at
    /// `VAULT_ADDR` or an address given to
    /// [`allowing_vault_address`](ConfluentJson::allowing_vault_address):
    /// a Vault client may take its address from the key id, which whoever
    /// registers a schema or a KEK chooses.
    #[must_use]
    pub fn with_kms_clients(self, clients: KmsClients) -> Self {
        ConfluentJson {
            kms_clients: Some(clients),
            ..self
        }
    }

    /// Allows KEKs in Vault at `address` (`https://vault.example:8200`),
    /// beside `VAULT_ADDR`, for the clients of
    /// [`with_kms_clients`](ConfluentJson::with_kms_clients): a KEK whose
    /// key id names another address refuses the schema.
    #[must_use]
    pub fn allowing_vault_address(mut self, address: &str) -> Self {
        self.vault_addresses.push(address.to_owned());
        self
    }

    /// Says where the KEK `name` lives (Confluent's `kmsType`, e.g.
    /// `aws-kms`, and `kmsKeyId`), for DEKs added with
    /// [`add_wrapped_dek`](ConfluentJson::add_wrapped_dek) or read under
    /// rules that do not say it (a rule that does, `encrypt.kms.type` and
    /// `encrypt.kms.key.id`, of a schema registered here, places its KEK
    /// too), when no registry does. A KEK nobody places is `local-kms`.
    pub fn add_kek(&self, name: &str, kms_type: &str, kms_key_id: &str) {
        let mut deks = self.lock();
        if deks.keks.len() >= MAX_CACHED {
            deks.keks.clear();
        }
        deks.keks.insert(
            name.to_owned(),
            (kms_type.to_owned(), kms_key_id.to_owned()),
        );
    }

    /// The KEK `name`: where it was placed ([`add_kek`](Self::add_kek)) or
    /// the registry holds it, else where `rule` (or a rule of a schema
    /// known here) says it lives, else `local-kms`. As Confluent's client,
    /// a KEK in the registry is checked against the rule: another KMS type
    /// or key id than the rule names is an error, and so is a shared KEK.
    fn kek(&self, name: &str, rule: Option<&Rule>) -> Result<Kek<'_>, Error> {
        let ruled = rule.and_then(|r| r.kms.clone());
        let known = self.lock().keks.get(name).cloned();
        let known = match (known, &self.registry) {
            (Some(p), _) => Some(p),
            (None, Some(registry)) => {
                let found = registry.kek(name)?;
                if let Some(p) = &found {
                    self.add_kek(name, &p.0, &p.1);
                }
                found
            }
            (None, None) => None,
        };
        let place = match (known, ruled) {
            (Some(k), Some(r)) if !same_place(&k, &r) => {
                return Err(Error::confluent(format!(
                    "the KEK {:?} is in {} {:?}, and the rule names {} {:?} (Confluent's client refuses such a rule too)",
                    crate::error::printable(name),
                    k.0,
                    crate::error::printable(&k.1),
                    r.0,
                    crate::error::printable(&r.1),
                )))
            }
            (_, Some(r)) => r,
            (Some(k), None) => k,
            (None, None) => self
                .place_in_rules(name)
                .unwrap_or_else(|| ("local-kms".to_owned(), String::new())),
        };
        kek::resolve(
            name,
            &place,
            self.local.as_ref(),
            self.kms_clients.as_ref(),
            &self.vault_addresses,
        )
    }

    /// One KEK, one place: the rules of a schema (and of the schemas known
    /// here) that name a KEK's KMS name the same one; a rule that names
    /// none takes the place another rule names. Otherwise a DEK opened for
    /// one rule under one KMS would serve another rule that names another.
    ///
    /// # Errors
    /// [`Error::Confluent`] naming the KEK and the two places.
    fn check_kek_places(
        &self,
        fields: &mut [(Rule, Reached)],
        payload: &mut Option<Rule>,
    ) -> Result<(), Error> {
        let mut rules: Vec<&mut Rule> = fields.iter_mut().map(|(r, _)| r).collect();
        rules.extend(payload.as_mut());
        let mut places: HashMap<String, KekPlace> = HashMap::new();
        for rule in &rules {
            let Some(place) = rule
                .kms
                .clone()
                .or_else(|| self.place_in_rules(&rule.kek_name))
            else {
                continue;
            };
            if let Some(other) = places.get(&rule.kek_name) {
                if !same_place(other, &place) {
                    return Err(Error::confluent(format!(
                        "the KEK {:?} is placed in {} {:?} and in {} {:?} by the rules: refusing the schema",
                        crate::error::printable(&rule.kek_name),
                        crate::error::printable(&other.0),
                        crate::error::printable(&other.1),
                        crate::error::printable(&place.0),
                        crate::error::printable(&place.1),
                    )));
                }
            }
            places.insert(rule.kek_name.clone(), place);
        }
        for rule in rules {
            if rule.kms.is_none() {
                rule.kms = places.get(&rule.kek_name).cloned();
            }
        }
        Ok(())
    }

    /// Where a rule of a schema known here says the KEK `name` lives.
    fn place_in_rules(&self, name: &str) -> Option<KekPlace> {
        read(&self.schemas).values().find_map(|r| {
            r.fields
                .iter()
                .map(|(rule, _)| rule)
                .chain(r.payload.as_ref())
                .find(|rule| rule.kek_name == name)
                .and_then(|rule| rule.kms.clone())
        })
    }

    /// Schemas and DEKs not given here are fetched from `registry` (and
    /// kept: at most 4096 of each, a subject's latest schema for
    /// [`with_cache_ttl`](ConfluentJson::with_cache_ttl)), and the DEKs a
    /// writer makes are created there, as Confluent's clients do.
    #[must_use]
    pub fn with_registry(self, registry: Registry) -> Self {
        ConfluentJson {
            registry: Some(registry),
            ..self
        }
    }

    /// Avro `bytes` and `fixed` values as base64 strings in a record's JSON
    /// form, both ways, rather than arrays of numbers (the form serde gives
    /// a `Vec<u8>`, the default): a record read shows its bytes in base64,
    /// and a record written takes base64 where its schema has bytes (in a
    /// union that has a `string` branch too, a string stays a string). The
    /// command line reads with it.
    #[cfg(feature = "confluent-avro")]
    #[must_use]
    pub fn avro_bytes_as_base64(self) -> Self {
        ConfluentJson {
            avro_base64: true,
            ..self
        }
    }

    /// Writes records of a schema that has tagged fields and no encryption
    /// rule (or tags that only a disabled rule names), tagged fields in
    /// plaintext. By default such a write is refused: a schema registered
    /// again without its rules (Confluent's `auto.register.schemas` does
    /// that), or a rule turned off beside another, would otherwise send
    /// fields meant to be encrypted in the clear.
    #[must_use]
    pub fn writing_tagged_fields_in_plaintext(self) -> Self {
        ConfluentJson {
            plaintext_tags: true,
            ..self
        }
    }

    /// How long a subject's latest schema fetched from the registry is used
    /// before it is asked again (default 5 minutes): a schema registered
    /// later reaches a writer within this time. Schemas by id and DEK
    /// versions never change, and are kept.
    #[must_use]
    pub fn with_cache_ttl(self, ttl: Duration) -> Self {
        ConfluentJson {
            cache_ttl: ttl,
            ..self
        }
    }

    /// Registers a schema as the Schema Registry returns it
    /// (`{"schema": "...", "schemaType": "JSON", "ruleSet": {...}}`) under
    /// its id, as the latest of `subject`.
    ///
    /// # Errors
    /// [`Error::Confluent`] for a schema that is not JSON Schema (or Avro,
    /// with `confluent-avro`), a rule that cannot be read, or tags this
    /// reader cannot follow (inside `oneOf`, `anyOf`, `allOf` or `$ref`; an
    /// Avro field tagged that is not a string or bytes, or a union of null
    /// and one of them): it refuses such a schema rather than leave a
    /// tagged field in plaintext.
    pub fn register(&mut self, schema_id: u32, subject: &str, schema: &Value) -> Result<(), Error> {
        self.insert(schema_id, subject, schema, Latest::Given)
            .map(|_| ())
    }

    fn insert(
        &self,
        schema_id: u32,
        subject: &str,
        schema: &Value,
        latest: Latest,
    ) -> Result<Arc<Registered>, Error> {
        let text = schema
            .get("schema")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::confluent("a schema without its text"))?;
        // Before the text is parsed: a schema with references names types
        // the text alone does not define.
        refuse_unimplemented(schema)?;
        // The registry leaves `schemaType` out for Avro, its default.
        let (doc, avro): (Value, Option<AvroParsed>) = match schema
            .get("schemaType")
            .and_then(Value::as_str)
        {
            Some("JSON") => {
                let doc: Value = serde_json::from_str(text)
                    .map_err(|_| Error::confluent("a schema's text is not JSON"))?;
                (doc, None)
            }
            #[cfg(feature = "confluent-avro")]
            None | Some("AVRO") => (Value::Null, Some(super::avro::AvroSchema::parse(text)?)),
            _ => {
                return Err(Error::confluent(if cfg!(feature = "confluent-avro") {
                    "only JSON Schema and Avro (schemaType JSON or AVRO) are read here"
                } else {
                    "only JSON Schema (schemaType JSON) is read here (Avro: the feature confluent-avro)"
                }))
            }
        };
        let meta = super::tags::MetadataTags::from_schema(schema)?;
        match &avro {
            None => super::tags::check_inline_tags(&doc)?,
            Some(_) => {
                super::tags::check_inline_tags(&serde_json::from_str(text).unwrap_or(Value::Null))?
            }
        }
        let properties = schema
            .get("metadata")
            .and_then(|m| m.get("properties"))
            .and_then(Value::as_object);
        let mut fields = Vec::new();
        let mut payload = None;
        // A rule set, and each of its lists, of Confluent's JSON types:
        // any other is refused, never read as "no rules" (a payload or a
        // field would then go out in plaintext, or ciphertext be read as a
        // value).
        match schema.get("ruleSet") {
            None | Some(Value::Null | Value::Object(_)) => {}
            Some(_) => return Err(Error::confluent("the schema's ruleSet is not an object")),
        }
        let rules = |kind: &str| -> Result<Vec<Value>, Error> {
            match schema.get("ruleSet").and_then(|r| r.get(kind)) {
                None | Some(Value::Null) => Ok(Vec::new()),
                Some(Value::Array(list)) => Ok(list.clone()),
                Some(_) => Err(Error::confluent(format!(
                    "the schema's ruleSet.{kind} is not an array"
                ))),
            }
        };
        match schema.get("ruleSet").and_then(|r| r.get("enableAt")) {
            None | Some(Value::Null) => {}
            Some(Value::String(at)) if at == "ALL" || at == "CLIENT" => {}
            Some(other) => {
                return Err(Error::confluent(format!(
                "the rule set's enableAt {other}: not implemented here, so the schema is refused"
            )))
            }
        }
        let domain = rules("domainRules")?;
        let encoding = rules("encodingRules")?;
        // The tags of disabled ENCRYPT rules: a field tagged for a rule the
        // user turned off is not written in plaintext unless an enabled
        // rule encrypts it (checked below).
        let mut disabled_tags: Vec<String> = Vec::new();
        for (rule, phase) in domain
            .iter()
            .map(|r| (r, "domainRules"))
            .chain(encoding.iter().map(|r| (r, "encodingRules")))
        {
            let Some(rule) = Rule::from_json_with(rule, properties)? else {
                let encrypt = rule
                    .get("type")
                    .and_then(Value::as_str)
                    .is_some_and(|t| t.eq_ignore_ascii_case("ENCRYPT"));
                if encrypt {
                    let tags = rule.get("tags").and_then(Value::as_array);
                    match tags.filter(|t| !t.is_empty()) {
                        // A disabled rule with no tags covered every field.
                        None => disabled_tags.push(String::new()),
                        Some(t) => disabled_tags
                            .extend(t.iter().filter_map(Value::as_str).map(str::to_owned)),
                    }
                }
                continue;
            };
            let right = match rule.kind {
                RuleKind::Fields(_) => "domainRules",
                RuleKind::Payload => "encodingRules",
            };
            if phase != right {
                return Err(Error::confluent(format!(
                    "an encryption rule under {phase} (Confluent's client runs ENCRYPT as a domain rule and \
                     ENCRYPT_PAYLOAD as an encoding rule, and fails on the other): refusing the schema"
                )));
            }
            let again = match &rule.kind {
                RuleKind::Fields(_) => !fields.is_empty(),
                RuleKind::Payload => payload.is_some(),
            };
            if again {
                return Err(Error::confluent(
                    "two encryption rules of one kind (ENCRYPT, or ENCRYPT_PAYLOAD) in one schema: not implemented here (Confluent's client applies both, in an order of its own), so the schema is refused",
                ));
            }
            match &rule.kind {
                #[cfg(feature = "confluent-avro")]
                RuleKind::Fields(tags) if avro.is_some() => {
                    let mut reached = Reached::default();
                    if let Some(a) = &avro {
                        reached.avro = a.reached(tags, &meta)?;
                    }
                    fields.push((rule, reached));
                }
                RuleKind::Fields(tags) => {
                    let paths = super::tags::json_fields(&doc, tags, &meta)?;
                    fields.push((
                        rule,
                        Reached {
                            paths,
                            ..Reached::default()
                        },
                    ));
                }
                RuleKind::Payload => payload = Some(rule),
            }
        }
        self.check_kek_places(&mut fields, &mut payload)?;
        let fetched = !matches!(latest, Latest::Given);
        let mut unruled_tags = match (&avro, fields.is_empty() && payload.is_none()) {
            (_, false) => 0,
            #[cfg(feature = "confluent-avro")]
            (Some(a), true) => a.count_any_tag() + usize::from(!meta.is_empty()),
            _ => count_any_tag(&doc) + usize::from(!meta.is_empty()),
        };
        if unruled_tags == 0 && payload.is_none() {
            // Tags of disabled rules that no enabled field rule covers.
            let covered = |tag: &str| {
                fields.iter().any(|(r, _)| match &r.kind {
                    RuleKind::Fields(tags) => tags.is_empty() || tags.iter().any(|t| t == tag),
                    RuleKind::Payload => true,
                })
            };
            unruled_tags = disabled_tags.iter().filter(|t| !covered(t)).count();
        }
        let registered = Arc::new(Registered {
            subject: subject.to_owned(),
            fields,
            payload,
            fetched,
            unruled_tags,
            #[cfg(feature = "confluent-avro")]
            avro: avro.map(Arc::new),
        });
        {
            let mut schemas = write(&self.schemas);
            if fetched && schemas.len() >= MAX_CACHED {
                // Bounded: one fetched schema goes (it is fetched again if
                // needed); those given here stay.
                if let Some(old) = schemas.iter().find(|(_, r)| r.fetched).map(|(id, _)| *id) {
                    schemas.remove(&old);
                }
            }
            schemas.insert(schema_id, Arc::clone(&registered));
        }
        match latest {
            Latest::Given => {
                write(&self.latest).insert(subject.to_owned(), (schema_id, None));
            }
            Latest::Fetched => {
                let mut l = write(&self.latest);
                if l.len() >= MAX_CACHED {
                    l.retain(|_, (_, at)| at.is_none());
                }
                l.insert(subject.to_owned(), (schema_id, Some(Instant::now())));
            }
            Latest::No => {}
        }
        Ok(registered)
    }

    /// The schema with `id`: known here, or fetched from the registry.
    fn schema(&self, id: u32, subject: Option<&str>) -> Result<Arc<Registered>, Error> {
        if let Some(s) = read(&self.schemas).get(&id) {
            return Ok(Arc::clone(s));
        }
        let Some(registry) = &self.registry else {
            return Err(Error::confluent(format!(
                "schema id {id} is not registered here"
            )));
        };
        let schema = registry.schema(id)?;
        // A schema read by id is not made its subject's latest.
        self.insert(id, subject.unwrap_or(""), &schema, Latest::No)
    }

    /// Adds a DEK as the DEK registry holds it: wrapped under the KEK
    /// (`encryptedKeyMaterial`, base64-decoded). It is unwrapped here.
    ///
    /// # Errors
    /// [`Error::Confluent`] if it does not unwrap under this KEK,
    /// [`Error::Kms`] if the KEK's KMS refuses or fails.
    pub fn add_wrapped_dek(
        &self,
        kek_name: &str,
        subject: &str,
        algorithm: DekAlgorithm,
        version: u32,
        wrapped: &[u8],
    ) -> Result<(), Error> {
        let dek = self
            .kek(kek_name, None)?
            .unwrap(algorithm, version, wrapped)?;
        let id = (kek_name.to_owned(), subject.to_owned(), algorithm, version);
        let mut deks = self.lock();
        deks.wrapped.insert(id.clone(), wrapped.to_vec());
        deks.open.insert(id, (Arc::new(dek), SystemTime::now()));
        Ok(())
    }

    /// The wrapped DEKs known here (made here or added), as the DEK
    /// registry would hold them: KEK name, subject, algorithm, version and
    /// `encryptedKeyMaterial` (before base64). No key is in the clear.
    pub fn wrapped_deks(&self) -> Vec<(String, String, DekAlgorithm, u32, Vec<u8>)> {
        let deks = self.lock();
        let mut out: Vec<_> = deks
            .wrapped
            .iter()
            .map(|((k, s, a, v), w)| (k.clone(), s.clone(), *a, *v, w.clone()))
            .collect();
        out.sort_by(|a, b| (&a.0, &a.1, a.3).cmp(&(&b.0, &b.1, b.3)));
        out
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Deks> {
        self.deks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The DEK `version` of `rule` for `subject`, to read with.
    fn dek_to_read(&self, rule: &Rule, subject: &str, version: u32) -> Result<Arc<Dek>, Error> {
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        if let Some((d, _)) = self.lock().open.get(&id) {
            return Ok(Arc::clone(d));
        }
        if let Some(registry) = &self.registry {
            if let Some((v, wrapped, ts)) =
                registry.dek_to_read(&rule.kek_name, subject, rule.algorithm, version)?
            {
                return self.keep(rule, subject, v, &wrapped, ts);
            }
        }
        Err(Error::confluent(format!(
            "no DEK version {version} of KEK {:?} for subject {:?} ({})",
            crate::error::printable(&rule.kek_name),
            crate::error::printable(subject),
            rule.algorithm.name()
        )))
    }

    /// The DEKs of `rule` for `subject` by version, for one record's
    /// fields: the last one is kept for the next (a record's fields are
    /// mostly under one version), so a record looks its DEK up once.
    fn dek_reader<'a>(
        &'a self,
        rule: &'a Rule,
        subject: &'a str,
    ) -> impl FnMut(u32) -> Result<Arc<Dek>, Error> + 'a {
        let mut last: Option<(u32, Arc<Dek>)> = None;
        move |version| match &last {
            Some((v, d)) if *v == version => Ok(Arc::clone(d)),
            _ => {
                let d = self.dek_to_read(rule, subject, version)?;
                last = Some((version, Arc::clone(&d)));
                Ok(d)
            }
        }
    }

    /// Unwraps and keeps a DEK fetched from the registry (`ts`: when it was
    /// made, in milliseconds since the epoch).
    fn keep(
        &self,
        rule: &Rule,
        subject: &str,
        version: u32,
        wrapped: &[u8],
        ts: u64,
    ) -> Result<Arc<Dek>, Error> {
        let dek = Arc::new(self.kek(&rule.kek_name, Some(rule))?.unwrap(
            rule.algorithm,
            version,
            wrapped,
        )?);
        let made = SystemTime::UNIX_EPOCH + Duration::from_millis(ts);
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        let mut deks = self.lock();
        if deks.open.len() >= MAX_CACHED {
            // Bounded: one DEK goes (it is fetched again if needed).
            if let Some(old) = deks.open.keys().next().cloned() {
                deks.open.remove(&old);
                deks.wrapped.remove(&old);
            }
        }
        deks.wrapped.insert(id.clone(), wrapped.to_vec());
        deks.open.insert(id, (Arc::clone(&dek), made));
        Ok(dek)
    }

    /// The newest DEK of `rule` for `subject` known here: version, DEK,
    /// when it was made.
    fn newest(&self, rule: &Rule, subject: &str) -> Option<(u32, Arc<Dek>, SystemTime)> {
        self.lock()
            .open
            .iter()
            .filter(|((k, s, a, _), _)| k == &rule.kek_name && s == subject && *a == rule.algorithm)
            .max_by_key(|((_, _, _, v), _)| *v)
            .map(|((_, _, _, v), (d, made))| (*v, Arc::clone(d), *made))
    }

    /// The DEK to write with: the newest version, known here or in the
    /// registry, or a new one (made here, wrapped, and created in the
    /// registry) when there is none or the newest has expired.
    fn dek_to_write(&self, rule: &Rule, subject: &str) -> Result<Arc<Dek>, Error> {
        let expired = |made: SystemTime| {
            rule.rotates()
                && made.elapsed().unwrap_or_default()
                    > Duration::from_secs(u64::from(rule.expiry_days) * 86_400)
        };
        // A rule that does not rotate writes with version 1 (values carry
        // no version, and a reader takes 1), whatever versions an earlier
        // rotating rule of the subject made: as Confluent's client does.
        let mut newest = if rule.rotates() {
            self.newest(rule, subject)
        } else {
            self.lock()
                .open
                .get(&(rule.kek_name.clone(), subject.to_owned(), rule.algorithm, 1))
                .map(|(d, made)| (1, Arc::clone(d), *made))
        };
        if let Some(registry) = &self.registry {
            if newest.as_ref().is_none_or(|(_, _, made)| expired(*made)) {
                let wanted = if rule.rotates() { None } else { Some(1) };
                if let Some((v, wrapped, ts)) =
                    registry.dek(&rule.kek_name, subject, rule.algorithm, wanted)?
                {
                    let dek = self.keep(rule, subject, v, &wrapped, ts)?;
                    newest = Some((v, dek, SystemTime::UNIX_EPOCH + Duration::from_millis(ts)));
                }
            }
        }
        let version = match newest {
            Some((_, dek, made)) if !expired(made) => return Ok(dek),
            Some((v, _, _)) => v + 1,
            None => 1,
        };
        let dek = Arc::new(Dek::generate(rule.algorithm, version));
        let wrapped = self.kek(&rule.kek_name, Some(rule))?.wrap(&dek)?;
        if let Some(registry) = &self.registry {
            let (kms_type, kms_key_id) = rule.kms.clone().unwrap_or_else(|| {
                (
                    "local-kms".to_owned(),
                    format!("local-kms://{}", rule.kek_name),
                )
            });
            registry.create_kek(&rule.kek_name, &kms_type, &kms_key_id)?;
            if !registry.create_dek(&rule.kek_name, subject, rule.algorithm, version, &wrapped)? {
                // Another writer made this version first: use theirs, if
                // it is not deleted (a soft-deleted DEK is read, never
                // written under: as Confluent's client, which then fails).
                return match registry.dek(&rule.kek_name, subject, rule.algorithm, Some(version))? {
                    Some((v, wrapped, ts)) => self.keep(rule, subject, v, &wrapped, ts),
                    None => Err(Error::confluent(format!(
                        "DEK version {version} of subject {:?} is deleted in the registry: no DEK to write under",
                        crate::error::printable(subject)
                    ))),
                };
            }
        }
        let id = (
            rule.kek_name.clone(),
            subject.to_owned(),
            rule.algorithm,
            version,
        );
        let mut deks = self.lock();
        // Another thread of this codec made this version first: use
        // theirs (one DEK per version, or the records under the other
        // could never be read).
        if let Some((theirs, _)) = deks.open.get(&id) {
            return Ok(Arc::clone(theirs));
        }
        deks.wrapped.insert(id.clone(), wrapped);
        deks.open.insert(id, (Arc::clone(&dek), SystemTime::now()));
        Ok(dek)
    }

    /// Reads a record: `None` (a tombstone) is `None`, with nothing
    /// touched; a present record is its JSON with every encrypted field
    /// and payload decrypted.
    ///
    /// # Errors
    /// [`Error::Confluent`] for a frame, schema id or DEK unknown here,
    /// [`Error::Decryption`] (within [`Error::Field`] for a field, with
    /// its path) for what does not authenticate. Never a partial record.
    pub fn decode(&self, bytes: Option<&[u8]>) -> Result<Option<Value>, Error> {
        self.decode_for(None, bytes)
    }

    /// [`decode`](ConfluentJson::decode) for a record of `subject` (its
    /// DEKs are the subject's): a schema or DEK not known here is fetched
    /// from the registry for that subject.
    ///
    /// # Errors
    /// As [`decode`](ConfluentJson::decode); what the registry reports.
    pub fn decode_for(
        &self,
        subject: Option<&str>,
        bytes: Option<&[u8]>,
    ) -> Result<Option<Value>, Error> {
        let Some(bytes) = bytes else { return Ok(None) };
        if bytes.len() > MAX_RECORD {
            return Err(Error::confluent("a record longer than 16 MiB"));
        }
        let (id, body) = parse_frame(bytes)?;
        let schema = self.schema(id, subject)?;
        for rule in schema.rules() {
            rule.check_read()?;
        }
        let subject = subject.unwrap_or(&schema.subject);
        let text: Zeroizing<Vec<u8>>;
        let body = match &schema.payload {
            Some(rule) => {
                let open = || {
                    let (version, ct) = if rule.rotates() {
                        split_version(body)?
                    } else {
                        (1, body)
                    };
                    self.dek_to_read(rule, subject, version)?.decrypt(ct)
                };
                text = open().map_err(|e| rule.read_failed(e))?;
                &text[..]
            }
            None => body,
        };
        #[cfg(feature = "confluent-avro")]
        if let Some(avro) = &schema.avro {
            return self.decode_avro(avro, &schema, subject, body).map(Some);
        }
        let mut value: Value = serde_json::from_slice(body).map_err(|e| {
            Error::codec(
                "json",
                format!("a Confluent record's body: {}", json_kind(&e)),
            )
        })?;
        for (rule, reached) in schema.fields.iter().rev() {
            let mut dek = self.dek_reader(rule, subject);
            for path in &reached.paths {
                let mut at = Vec::new();
                each_at(&mut value, path, &mut at, &mut |field, at| {
                    open_field(rule, &mut dek, field).map_err(|e| in_field(at, rule.read_failed(e)))
                })?;
            }
        }
        Ok(Some(value))
    }

    /// Writes a record under the latest schema of `subject`: `None` (a
    /// tombstone) is `None`, before any rule runs; a present record has
    /// its tagged string fields encrypted (a null one stays null), then its
    /// payload if the schema has a payload rule.
    ///
    /// # Errors
    /// [`Error::Confluent`] for a subject with no schema here or a tagged
    /// field that is neither a string nor null. Nothing is written in
    /// plaintext on any error.
    pub fn encode(&self, subject: &str, value: Option<&Value>) -> Result<Option<Vec<u8>>, Error> {
        let Some(value) = value else { return Ok(None) };
        let id = self.latest_id(subject)?;
        self.encode_value(subject, id, value.clone()).map(Some)
    }

    fn encode_value(&self, subject: &str, id: u32, mut value: Value) -> Result<Vec<u8>, Error> {
        let schema = self.schema(id, Some(subject))?;
        for rule in schema.rules() {
            rule.check_write()?;
        }
        if schema.unruled_tags > 0 && !self.plaintext_tags {
            return Err(Error::confluent(format!(
                "the schema (id {id}) has {} tag(s) or tagged field(s) that no enabled encryption rule covers \
                 (registered without its rules? a rule disabled?): refusing to write them in plaintext \
                 (ConfluentJson::writing_tagged_fields_in_plaintext allows it)",
                schema.unruled_tags
            )));
        }
        #[cfg(feature = "confluent-avro")]
        let avro_text = match &schema.avro {
            Some(avro) => Some(self.encode_avro(avro, &schema, subject, value.take())?),
            None => None,
        };
        #[cfg(not(feature = "confluent-avro"))]
        let avro_text: Option<Zeroizing<Vec<u8>>> = None;
        let text = match avro_text {
            Some(text) => text,
            None => {
                let seal = |value: &mut Value| {
                    for (rule, reached) in &schema.fields {
                        let dek = self.dek_to_write(rule, subject)?;
                        for path in &reached.paths {
                            let mut at = Vec::new();
                            each_at(value, path, &mut at, &mut |field, at| {
                                seal_field(rule, &dek, field).map_err(|e| in_field(at, e))
                            })?;
                        }
                    }
                    serde_json::to_vec(value)
                        .map_err(|_| Error::codec("json", "cannot encode the record"))
                };
                let text = seal(&mut value);
                // The codec's own copy of the record: its strings (a
                // payload rule's plaintext, a field not yet sealed when an
                // error stopped it) zeroized before they are freed.
                wipe_json(std::mem::take(&mut value));
                Zeroizing::new(text?)
            }
        };
        let mut out = Vec::with_capacity(5 + text.len() + 64);
        write_frame(id, &mut out);
        match &schema.payload {
            Some(rule) => {
                let dek = self.dek_to_write(rule, subject)?;
                if rule.rotates() {
                    out.push(MAGIC);
                    out.extend_from_slice(&dek.version().to_be_bytes());
                }
                out.extend_from_slice(&dek.encrypt(&text)?);
            }
            None => out.extend_from_slice(&text),
        }
        Ok(out)
    }

    /// An Avro record's body (after its payload is decrypted) as JSON,
    /// its tagged fields decrypted.
    #[cfg(feature = "confluent-avro")]
    fn decode_avro(
        &self,
        avro: &super::avro::AvroSchema,
        schema: &Registered,
        subject: &str,
        body: &[u8],
    ) -> Result<Value, Error> {
        let mut record = avro.read(body)?;
        for (rule, reached) in schema.fields.iter().rev() {
            let mut dek = self.dek_reader(rule, subject);
            avro.each_tagged(&mut record, &reached.avro, &mut |field, at| {
                super::avro::open_field(rule, &mut dek, field)
                    .map_err(|e| in_field(at, rule.read_failed(e)))
            })?;
        }
        avro.to_json(record, self.avro_base64)
    }

    /// An Avro record's encoding, its tagged fields encrypted.
    #[cfg(feature = "confluent-avro")]
    fn encode_avro(
        &self,
        avro: &super::avro::AvroSchema,
        schema: &Registered,
        subject: &str,
        value: Value,
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        let mut record = avro.resolve_json(value, self.avro_base64)?;
        for (rule, reached) in &schema.fields {
            let dek = self.dek_to_write(rule, subject)?;
            avro.each_tagged(&mut record, &reached.avro, &mut |field, at| {
                super::avro::seal_field(rule, &dek, field).map_err(|e| in_field(at, e))
            })?;
        }
        avro.write(record)
    }

    /// The id of `subject`'s latest schema: given here, or fetched from the
    /// registry (again once the cache TTL has passed).
    fn latest_id(&self, subject: &str) -> Result<u32, Error> {
        if let Some((id, at)) = read(&self.latest).get(subject) {
            if at.is_none_or(|at| at.elapsed() < self.cache_ttl) {
                return Ok(*id);
            }
        }
        let Some(registry) = &self.registry else {
            return Err(Error::confluent(format!(
                "subject {:?} has no schema here",
                crate::error::printable(subject)
            )));
        };
        let (id, schema) = registry.latest(subject)?;
        self.insert(id, subject, &schema, Latest::Fetched)?;
        Ok(id)
    }
}

/// Whether two places are one KEK's: the same KMS type and key id, as
/// Confluent's client compares a rule's with the registry's.
fn same_place(a: &KekPlace, b: &KekPlace) -> bool {
    a == b
}

fn read<T>(lock: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    lock.read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn write<T>(lock: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    lock.write()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Records of type `T` in Confluent's format, through a shared
/// [`ConfluentJson`]: one of this crate's [`Serializer`]s and
/// [`Deserializer`]s, so it goes where a codec goes (the typed Kafka
/// clients, the stores). The subject is Confluent's default
/// (`TopicNameStrategy`): `{topic}-value`, or `{topic}-key` with
/// [`for_keys`](ConfluentSerde::for_keys). A tombstone (`None`) is `None`
/// both ways, before any schema, DEK or cipher.
///
/// ```
/// use std::sync::Arc;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
/// use tombstone_crypt::confluent::{ConfluentJson, ConfluentSerde, LocalKms};
/// use tombstone_crypt::{Context, Deserializer as _, Serializer as _};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Customer { id: u64, ssn: String, note: Option<String> }
///
/// let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
/// codec.register(1, "customers-value", &json!({
///     "schemaType": "JSON",
///     "schema": r#"{"type":"object","properties":{"id":{"type":"integer"},
///         "ssn":{"type":"string","confluent:tags":["PII"]},
///         "note":{"type":["null","string"],"confluent:tags":["PII"]}}}"#,
///     "ruleSet": {"domainRules": [{"mode": "WRITEREAD", "type": "ENCRYPT", "tags": ["PII"],
///         "params": {"encrypt.kek.name": "k1"}}]}
/// }))?;
/// let serde = ConfluentSerde::<Customer>::new(Arc::new(codec));
/// let ctx = Context::new("customers");
/// let c = Customer { id: 1, ssn: "078-05-1120".into(), note: None };
/// let bytes = serde.serialize(&ctx, Some(&c))?.unwrap();
/// assert!(String::from_utf8_lossy(&bytes).contains(r#""note":null"#)); // a null field stays null
/// assert_eq!(serde.deserialize(&ctx, Some(&bytes))?, Some(c));
/// assert_eq!(serde.serialize(&ctx, None)?, None); // a tombstone stays one
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct ConfluentSerde<T> {
    codec: Arc<ConfluentJson>,
    suffix: &'static str,
    marker: PhantomData<fn() -> T>,
}

impl<T> Clone for ConfluentSerde<T> {
    fn clone(&self) -> Self {
        ConfluentSerde {
            codec: Arc::clone(&self.codec),
            suffix: self.suffix,
            marker: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for ConfluentSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentSerde")
            .field("codec", &self.codec)
            .field("subject", &format_args!("{{topic}}{}", self.suffix))
            .finish()
    }
}

impl<T> ConfluentSerde<T> {
    /// Record values of the topics `codec` has schemas for (`{topic}-value`).
    pub fn new(codec: Arc<ConfluentJson>) -> Self {
        ConfluentSerde {
            codec,
            suffix: "-value",
            marker: PhantomData,
        }
    }

    /// For record keys instead (`{topic}-key`). A key schema's encryption
    /// rules must be deterministic (`AES256_SIV`): writing a key under a
    /// randomized rule is refused, as compaction could never match its
    /// writes.
    #[must_use]
    pub fn for_keys(self) -> Self {
        ConfluentSerde {
            suffix: "-key",
            ..self
        }
    }

    fn subject(&self, ctx: &Context<'_>) -> String {
        format!("{}{}", ctx.topic(), self.suffix)
    }
}

impl<T: serde::Serialize> Serializer<T> for ConfluentSerde<T> {
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let subject = self.subject(ctx);
        let id = self.codec.latest_id(&subject)?;
        if self.suffix == "-key" {
            // A record key is what compaction matches: under a randomized
            // rule the same key is written differently each time, and a
            // tombstone never meets the value it deletes.
            let schema = self.codec.schema(id, Some(&subject))?;
            let randomized = schema
                .fields
                .iter()
                .map(|(r, _)| r)
                .chain(schema.payload.as_ref())
                .any(|r| r.algorithm != super::DekAlgorithm::Aes256Siv);
            if randomized {
                return Err(Error::confluent(format!(
                    "record keys of {subject} under a randomized rule (AES-GCM): each write of a key would differ and compaction would never meet its tombstone; the key schema's rules need encrypt.dek.algorithm AES256_SIV"
                )));
            }
        }
        let value = serde_json::to_value(value).map_err(|e| {
            Error::codec(
                "json",
                format!("cannot encode the record: {}", json_kind(&e)),
            )
        })?;
        out.extend_from_slice(&self.codec.encode_value(&subject, id, value)?);
        Ok(())
    }
}

impl<T: serde::de::DeserializeOwned> Deserializer<T> for ConfluentSerde<T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        let value = self
            .codec
            .decode_for(Some(&self.subject(ctx)), Some(data))?
            .ok_or_else(|| Error::confluent("a present record read as none"))?;
        serde_json::from_value(value).map_err(|e| {
            Error::codec(
                "json",
                format!("a Confluent record's value: {}", json_kind(&e)),
            )
        })
    }
}

/// `e` at the field `at`; a failure of the environment (a KMS, a
/// registry) stays itself, so that a caller stops on it as on the same
/// failure outside a field.
fn in_field(at: &[String], e: Error) -> Error {
    if matches!(e, Error::Kms { .. } | Error::Registry { .. }) {
        return e;
    }
    Error::Field {
        path: format!("/{}", at.join("/")),
        cause: Box::new(e),
    }
}

fn json_kind(e: &serde_json::Error) -> &'static str {
    use serde_json::error::Category;
    match e.classify() {
        Category::Io => "I/O error",
        Category::Syntax => "syntax error",
        Category::Data => "wrong type or shape",
        Category::Eof => "unexpected end of input",
    }
}

/// Zeroizes a JSON value's strings, object keys included, as it is freed
/// (numbers are inline; best effort, as all zeroizing).
fn wipe_json(value: Value) {
    match value {
        Value::String(mut s) => zeroize::Zeroize::zeroize(&mut s),
        Value::Array(items) => items.into_iter().for_each(wipe_json),
        Value::Object(map) => {
            for (mut k, v) in map {
                zeroize::Zeroize::zeroize(&mut k);
                wipe_json(v);
            }
        }
        _ => {}
    }
}

/// Refuses what in a schema decides what Confluent's client encrypts and
/// this codec does not implement: references to other schemas (external
/// `$ref`s), and migration rules.
fn refuse_unimplemented(schema: &Value) -> Result<(), Error> {
    let non_empty = |v: Option<&Value>| match v {
        None | Some(Value::Null) => false,
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(_) => true,
    };
    if non_empty(schema.get("references")) {
        return Err(Error::confluent(
            "the schema has references to other schemas (external $ref or named types), which Confluent's client follows for tags: not implemented here, so the schema is refused",
        ));
    }
    if non_empty(schema.get("ruleSet").and_then(|r| r.get("migrationRules"))) {
        return Err(Error::confluent(
            "the schema has migration rules: not implemented here, so the schema is refused",
        ));
    }
    Ok(())
}

/// Decrypts a field in place (a null stays null).
fn open_field(
    rule: &Rule,
    dek: &mut dyn FnMut(u32) -> Result<Arc<Dek>, Error>,
    field: &mut Value,
) -> Result<(), Error> {
    let text = match field {
        Value::Null => return Ok(()),
        Value::String(s) => s,
        _ => return Err(Error::confluent("an encrypted field is not a string")),
    };
    let bytes = Zeroizing::new(
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map_err(|_| Error::confluent("an encrypted field is not base64"))?,
    );
    let (version, ct) = if rule.rotates() {
        split_version(&bytes)?
    } else {
        (1, &bytes[..])
    };
    let plain = dek(version)?.decrypt(ct)?;
    let plain = String::from_utf8(plain.to_vec())
        .map_err(|_| Error::confluent("a decrypted field is not UTF-8"))?;
    *field = Value::String(plain);
    Ok(())
}

/// Encrypts a field in place (a null stays null).
fn seal_field(rule: &Rule, dek: &Dek, field: &mut Value) -> Result<(), Error> {
    let text = match field {
        Value::Null => return Ok(()),
        Value::String(s) => s,
        _ => {
            return Err(Error::confluent(
                "a field tagged for encryption is not a string",
            ))
        }
    };
    let mut bytes = Vec::new();
    if rule.rotates() {
        bytes.push(MAGIC);
        bytes.extend_from_slice(&dek.version().to_be_bytes());
    }
    bytes.extend_from_slice(&dek.encrypt(text.as_bytes())?);
    let sealed = base64::engine::general_purpose::STANDARD.encode(&bytes);
    zeroize::Zeroize::zeroize(text);
    *field = Value::String(sealed);
    Ok(())
}

/// What is done to a field: its value and its path.
type FieldFn<'a> = dyn FnMut(&mut Value, &[String]) -> Result<(), Error> + 'a;

/// Calls `f` on every value at `path` in `value` (`*`: each element of an
/// array); a missing property or a null on the way is skipped, and a value
/// of another shape than the schema's (not an object where the path names
/// a property, not an array where it takes each item) is an error: such a
/// record is not of its schema, and Confluent's client refuses to write it.
fn each_at(
    value: &mut Value,
    path: &[String],
    at: &mut Vec<String>,
    f: &mut FieldFn<'_>,
) -> Result<(), Error> {
    let Some((first, rest)) = path.split_first() else {
        return f(value, at);
    };
    match (first.as_str(), value) {
        ("*", Value::Array(items)) => {
            for (i, item) in items.iter_mut().enumerate() {
                at.push(i.to_string());
                each_at(item, rest, at, f)?;
                at.pop();
            }
            Ok(())
        }
        (name, Value::Object(map)) if name != "*" => match map.get_mut(name) {
            Some(v) => {
                at.push(name.replace('~', "~0").replace('/', "~1"));
                let r = each_at(v, rest, at, f);
                at.pop();
                r
            }
            None => Ok(()),
        },
        (_, Value::Null) => Ok(()),
        _ => Err(in_field(
            at,
            Error::confluent("the record is not of its schema here (an object or array where it says the other, or a scalar)"),
        )),
    }
}

/// How many subschemas anywhere in `schema` carry a tag.
fn count_any_tag(schema: &Value) -> usize {
    match schema {
        Value::Object(map) => {
            usize::from(
                map.get("confluent:tags")
                    .and_then(Value::as_array)
                    .is_some_and(|t| !t.is_empty()),
            ) + map.values().map(count_any_tag).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(count_any_tag).sum(),
        _ => 0,
    }
}
