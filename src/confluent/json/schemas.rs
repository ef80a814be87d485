//! The schemas a codec reads and writes by: registered here or fetched
//! from the registry, each with its rules and the fields they reach.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::*;
use crate::confluent::rule::{Rule, RuleKind};
use crate::error::Error;

impl ConfluentJson {
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

    pub(super) fn insert(
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
            None | Some("AVRO") => (
                Value::Null,
                Some(crate::confluent::avro::AvroSchema::parse(text)?),
            ),
            _ => {
                return Err(Error::confluent(if cfg!(feature = "confluent-avro") {
                    "only JSON Schema and Avro (schemaType JSON or AVRO) are read here"
                } else {
                    "only JSON Schema (schemaType JSON) is read here (Avro: the feature confluent-avro)"
                }))
            }
        };
        let meta = crate::confluent::tags::MetadataTags::from_schema(schema)?;
        match &avro {
            None => crate::confluent::tags::check_inline_tags(&doc)?,
            Some(_) => crate::confluent::tags::check_inline_tags(
                &serde_json::from_str(text).unwrap_or(Value::Null),
            )?,
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
                    let paths = crate::confluent::tags::json_fields(&doc, tags, &meta)?;
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
    pub(super) fn schema(&self, id: u32, subject: Option<&str>) -> Result<Arc<Registered>, Error> {
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

    /// The id of `subject`'s latest schema: given here, or fetched from the
    /// registry (again once the cache TTL has passed).
    pub(super) fn latest_id(&self, subject: &str) -> Result<u32, Error> {
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

/// Refuses what in a schema decides what Confluent's client encrypts and
/// this codec does not implement: references to other schemas (external
/// `$ref`s), and migration rules.
pub(super) fn refuse_unimplemented(schema: &Value) -> Result<(), Error> {
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

/// How many subschemas anywhere in `schema` carry a tag.
pub(super) fn count_any_tag(schema: &Value) -> usize {
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
