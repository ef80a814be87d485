//! An encryption rule of a Confluent schema (`ENCRYPT`, `ENCRYPT_PAYLOAD`)
//! and its parameters, for the JSON Schema and Avro codecs.

use serde_json::Value;

use super::DekAlgorithm;
use crate::error::Error;

/// What a rule encrypts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RuleKind {
    /// `ENCRYPT`: the string fields carrying one of these tags.
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

impl Rule {
    /// Reads a rule from its JSON (an element of `domainRules` or
    /// `encodingRules`); `None` for a rule that is not an encryption rule
    /// or is disabled.
    ///
    /// # Errors
    /// [`Error::Confluent`] for an encryption rule with no KEK name, an
    /// unknown algorithm or a bad expiry.
    pub fn from_json(rule: &Value) -> Result<Option<Rule>, Error> {
        if rule.get("disabled").and_then(Value::as_bool) == Some(true) {
            return Ok(None);
        }
        let kind = match rule.get("type").and_then(Value::as_str) {
            Some("ENCRYPT") => RuleKind::Fields(
                rule.get("tags")
                    .and_then(Value::as_array)
                    .map(|t| {
                        t.iter()
                            .filter_map(Value::as_str)
                            .map(str::to_owned)
                            .collect()
                    })
                    .unwrap_or_default(),
            ),
            Some("ENCRYPT_PAYLOAD") => RuleKind::Payload,
            _ => return Ok(None),
        };
        let param = |name: &str| {
            rule.get("params")
                .and_then(|p| p.get(name))
                .and_then(Value::as_str)
        };
        let kek_name = param("encrypt.kek.name")
            .filter(|n| !n.is_empty())
            .ok_or_else(|| Error::confluent("an encryption rule has no encrypt.kek.name"))?
            .to_owned();
        let algorithm = match param("encrypt.dek.algorithm") {
            Some(a) => DekAlgorithm::from_name(a)?,
            None => DekAlgorithm::Aes256Gcm,
        };
        let expiry_days = match param("encrypt.dek.expiry.days") {
            Some(d) => d.parse().map_err(|_| {
                Error::confluent("encrypt.dek.expiry.days is not a whole number of days")
            })?,
            None => 0,
        };
        let kms = param("encrypt.kms.type")
            .zip(param("encrypt.kms.key.id"))
            .map(|(t, k)| (t.to_owned(), k.to_owned()));
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
