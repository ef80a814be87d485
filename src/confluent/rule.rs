//! An encryption rule of a Confluent schema (`ENCRYPT`, `ENCRYPT_PAYLOAD`)
//! and its parameters, for the JSON Schema and Avro codecs.

use serde_json::Value;

use super::DekAlgorithm;
use crate::error::Error;

/// What a rule encrypts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// `ENCRYPT`: the string fields carrying one of these tags (none:
    /// every field, as Confluent's client reads a rule without tags).
    Fields(Vec<String>),
    /// `ENCRYPT_PAYLOAD`: the whole encoded record.
    Payload,
}

/// An encryption rule of a schema's rule set, as Confluent writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Fields or payload.
    pub kind: RuleKind,
    /// `encrypt.kek.name`.
    pub kek_name: String,
    /// `encrypt.dek.algorithm` (default `AES256_GCM`).
    pub algorithm: DekAlgorithm,
    /// `encrypt.dek.expiry.days` (0: DEKs never expire, and values carry no
    /// DEK version).
    pub expiry_days: u32,
    /// `encrypt.kms.type` and `encrypt.kms.key.id`: where a writer creates
    /// the KEK in the DEK registry when it is not there.
    pub kms: Option<(String, String)>,
}

/// The parameters of an encryption rule this codec implements; any other
/// refuses the schema.
const KNOWN_PARAMS: [&str; 5] = [
    "encrypt.kek.name",
    "encrypt.kms.type",
    "encrypt.kms.key.id",
    "encrypt.dek.algorithm",
    "encrypt.dek.expiry.days",
];

/// The KMS types a KEK can be in here.
const KMS_TYPES: [&str; 3] = ["local-kms", "aws-kms", "hcvault"];

impl Rule {
    /// Reads a rule from its JSON (an element of `domainRules` or
    /// `encodingRules`), as [`from_json_with`](Rule::from_json_with) with
    /// no schema metadata.
    ///
    /// # Errors
    /// As [`from_json_with`](Rule::from_json_with).
    pub fn from_json(rule: &Value) -> Result<Option<Rule>, Error> {
        Rule::from_json_with(rule, None)
    }

    /// Reads a rule as Confluent's client matches it: its `type` upper-cased,
    /// its parameters from the rule and then from the schema's
    /// `metadata.properties` (`properties`); `None` for a disabled rule.
    /// Only what this codec implements is read; anything else refuses the
    /// schema, so that nothing Confluent would encrypt goes out in
    /// plaintext: a rule type other than `ENCRYPT` and `ENCRYPT_PAYLOAD`
    /// (a `CEL` transform, say), a `kind` other than `TRANSFORM`, a `mode`
    /// other than `WRITEREAD`, an `onFailure` or `onSuccess` action, a parameter
    /// it does not know, a KMS type it does not know or one without its
    /// key id (or the other way round).
    ///
    /// # Errors
    /// [`Error::Confluent`] naming what is refused; an encryption rule with
    /// no KEK name, an unknown algorithm or a bad expiry.
    pub fn from_json_with(
        rule: &Value,
        properties: Option<&serde_json::Map<String, Value>>,
    ) -> Result<Option<Rule>, Error> {
        let name = rule.get("name").and_then(Value::as_str).unwrap_or("");
        let refuse = |what: String| {
            Err(Error::confluent(format!(
                "rule {name:?}: {what}: not implemented here, so the schema is refused (Confluent's client would apply it)"
            )))
        };
        match rule.get("disabled") {
            None | Some(Value::Null | Value::Bool(false)) => {}
            Some(Value::Bool(true)) => return Ok(None),
            // Python's client takes any truthy value (the string "false"
            // included) as disabled.
            Some(other) => return refuse(format!("disabled {other} (not a boolean)")),
        }
        let ty = rule
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_ascii_uppercase();
        let tags: Vec<String> = match rule.get("tags") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(t)) if t.iter().all(Value::is_string) => t
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect(),
            Some(other) => return refuse(format!("tags {other} (not an array of strings)")),
        };
        let kind = match ty.as_str() {
            "ENCRYPT" => RuleKind::Fields(tags),
            "ENCRYPT_PAYLOAD" => RuleKind::Payload,
            other => return refuse(format!("the rule type {other:?}")),
        };
        match rule.get("kind").and_then(Value::as_str) {
            None | Some("TRANSFORM") => {}
            Some(k) => return refuse(format!("an encryption rule of kind {k:?}")),
        }
        match rule.get("mode").and_then(Value::as_str) {
            Some("WRITEREAD") => {}
            Some(m) => return refuse(format!("an encryption rule of mode {m:?}")),
            None => return refuse("an encryption rule without a mode".into()),
        }
        for action in ["onFailure", "onSuccess"] {
            if let Some(a) = rule.get(action).filter(|a| !a.is_null()) {
                let plain = a.as_str().is_some_and(|a| {
                    a.split(',').all(|part| {
                        let part = part.trim();
                        part == "ERROR" || (action == "onSuccess" && part == "NONE")
                    })
                });
                if !plain {
                    return refuse(format!("{action} {a}"));
                }
            }
        }
        let params = rule.get("params").and_then(Value::as_object);
        if let Some(p) = params {
            if let Some(unknown) = p.keys().find(|k| !KNOWN_PARAMS.contains(&k.as_str())) {
                return refuse(format!("the parameter {unknown:?}"));
            }
        }
        let param = |name: &str| {
            params
                .and_then(|p| p.get(name))
                .and_then(Value::as_str)
                .or_else(|| properties.and_then(|p| p.get(name)).and_then(Value::as_str))
        };
        let kek_name = param("encrypt.kek.name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::confluent("an encryption rule has no encrypt.kek.name"))?
            .to_owned();
        let algorithm = match param("encrypt.dek.algorithm") {
            Some(a) => DekAlgorithm::from_name(a)?,
            None => DekAlgorithm::Aes256Gcm,
        };
        // A whole number of days, written as a string (Confluent's
        // parameters are strings) or as a number.
        let expiry = params
            .and_then(|p| p.get("encrypt.dek.expiry.days"))
            .and_then(Value::as_u64)
            .map(|d| d.to_string());
        let expiry_days = match expiry
            .as_deref()
            .or_else(|| param("encrypt.dek.expiry.days"))
        {
            Some(d) => d.parse().map_err(|_| {
                Error::confluent("encrypt.dek.expiry.days is not a whole number of days")
            })?,
            None => 0,
        };
        let kms = match (param("encrypt.kms.type"), param("encrypt.kms.key.id")) {
            (None, None) => None,
            (Some(t), Some(k)) if KMS_TYPES.contains(&t) && !k.is_empty() => {
                Some((t.to_owned(), k.to_owned()))
            }
            (Some(t), Some(_)) if !KMS_TYPES.contains(&t) => {
                return refuse(format!("the KMS type {t:?}"))
            }
            _ => {
                return refuse(
                    "encrypt.kms.type and encrypt.kms.key.id, one without the other".into(),
                )
            }
        };
        Ok(Some(Rule {
            kind,
            kek_name,
            algorithm,
            expiry_days,
            kms,
        }))
    }

    pub(super) fn rotates(&self) -> bool {
        self.expiry_days > 0
    }
}
