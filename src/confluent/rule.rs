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

/// What Confluent's client does once a rule has run in one direction
/// (`onSuccess`, `onFailure`): one of the two actions it builds in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// `ERROR`: the record fails.
    Error,
    /// `NONE`: the record goes on as the rule left it (on a failure: with
    /// the field or payload as it lay, unencrypted on a write, still
    /// encrypted on a read).
    None,
}

/// A rule's actions in one direction, write or read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Actions {
    /// After the rule ran (Confluent's default: `NONE`).
    pub on_success: Action,
    /// After the rule failed (Confluent's default: `ERROR`).
    pub on_failure: Action,
}

/// An encryption rule of a schema's rule set, as Confluent writes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Its `name` (empty when it has none), for errors.
    pub name: String,
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
    /// `onSuccess` and `onFailure` on a write: the first of two
    /// comma-separated actions, or the one action.
    pub write: Actions,
    /// `onSuccess` and `onFailure` on a read: the second of two
    /// comma-separated actions, or the one action.
    pub read: Actions,
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
    /// other than `WRITEREAD`, an `onFailure` or `onSuccess` action other
    /// than `ERROR` and `NONE` (a dead-letter queue, an application's own;
    /// named as written, spaces included, since Confluent's client does not
    /// trim them) or with more than two parts, a parameter it does not
    /// know, a KMS type without its key id (or the other way round). A KMS
    /// type with no client here (`azure-kms`, `gcp-kms`) is read, and its
    /// KEK is an error where it is opened.
    ///
    /// A rule without a `kind` or a `mode` is a `TRANSFORM` in `WRITEREAD`
    /// mode, as Confluent's Schema Registry stores it (and its Java client
    /// reads it): Confluent's documented examples leave both out. The
    /// actions are read per direction; what they ask for is enforced where
    /// the rule runs ([`check_write`](Rule::check_write),
    /// [`check_read`](Rule::check_read), [`read_failed`](Rule::read_failed)).
    ///
    /// # Errors
    /// [`Error::Confluent`] naming what is refused; an encryption rule with
    /// no KEK name, an unknown algorithm or a bad expiry.
    pub fn from_json_with(
        rule: &Value,
        properties: Option<&serde_json::Map<String, Value>>,
    ) -> Result<Option<Rule>, Error> {
        let name = crate::error::printable(rule.get("name").and_then(Value::as_str).unwrap_or(""));
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
            Some(other) => return refuse(format!("disabled {} (not a boolean)", short(other))),
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
            Some(other) => {
                return refuse(format!("tags {} (not an array of strings)", short(other)))
            }
        };
        let kind = match ty.as_str() {
            "ENCRYPT" => RuleKind::Fields(tags),
            "ENCRYPT_PAYLOAD" => RuleKind::Payload,
            other => return refuse(format!("the rule type {other:?}")),
        };
        match rule.get("kind") {
            // Stored as TRANSFORM when registered without one.
            None | Some(Value::Null) => {}
            Some(Value::String(k)) if k == "TRANSFORM" => {}
            Some(k) => return refuse(format!("an encryption rule of kind {}", short(k))),
        }
        match rule.get("mode") {
            // Confluent's Schema Registry stores a rule registered without
            // a mode as WRITEREAD.
            None | Some(Value::Null) => {}
            Some(Value::String(m)) if m == "WRITEREAD" => {}
            Some(m) => return refuse(format!("an encryption rule of mode {}", short(m))),
        }
        let (write_success, read_success) = match actions(rule.get("onSuccess"), Action::None) {
            Ok(a) => a,
            Err(what) => return refuse(format!("onSuccess {what}")),
        };
        let (write_failure, read_failure) = match actions(rule.get("onFailure"), Action::Error) {
            Ok(a) => a,
            Err(what) => return refuse(format!("onFailure {what}")),
        };
        let params = match rule.get("params") {
            None | Some(Value::Null) => None,
            Some(Value::Object(p)) => Some(p),
            Some(other) => return refuse(format!("params {} (not an object)", short(other))),
        };
        if let Some(p) = params {
            if let Some(unknown) = p.keys().find(|k| !KNOWN_PARAMS.contains(&k.as_str())) {
                return refuse(format!(
                    "the parameter {:?}",
                    crate::error::printable(unknown)
                ));
            }
        }
        // Each parameter this codec reads is a string (Confluent's model)
        // or, for the expiry, a whole number of days as a JSON number (as
        // one of Confluent's examples writes it): any other JSON type is
        // refused, in the rule and in the metadata alike, never read as
        // absent (a KMS type read as absent would be local-kms).
        for (place, map) in [("the rule's", params), ("the metadata's", properties)] {
            for known in KNOWN_PARAMS {
                match map.and_then(|m| m.get(known)) {
                    None | Some(Value::String(_)) => {}
                    Some(Value::Number(n))
                        if known == "encrypt.dek.expiry.days" && n.as_u64().is_some() => {}
                    Some(other) => {
                        return refuse(format!(
                            "{place} parameter {known:?} is {} (not a string)",
                            short(other)
                        ))
                    }
                }
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
        // parameters are strings) or as a number, from the rule first, then
        // the metadata (other JSON types were refused above).
        let days = |m: Option<&serde_json::Map<String, Value>>| {
            m.and_then(|m| m.get("encrypt.dek.expiry.days"))
                .map(|v| match v {
                    Value::Number(n) => n.to_string(),
                    other => other.as_str().unwrap_or_default().to_owned(),
                })
        };
        let expiry_days = match days(params).or_else(|| days(properties)) {
            Some(d) => d.parse().map_err(|_| {
                Error::confluent("encrypt.dek.expiry.days is not a whole number of days")
            })?,
            None => 0,
        };
        // Any KMS type is read (Confluent's documented examples name
        // azure-kms and gcp-kms too); a KEK in one without a client here is
        // an error where it is opened, never a fall back to local-kms.
        let kms = match (param("encrypt.kms.type"), param("encrypt.kms.key.id")) {
            (None, None) => None,
            (Some(t), Some(k)) if !t.is_empty() && !k.is_empty() => {
                Some((t.to_owned(), k.to_owned()))
            }
            _ => {
                return refuse(
                    "encrypt.kms.type and encrypt.kms.key.id, one without the other".into(),
                )
            }
        };
        Ok(Some(Rule {
            name: name.to_owned(),
            kind,
            kek_name,
            algorithm,
            expiry_days,
            kms,
            write: Actions {
                on_success: write_success,
                on_failure: write_failure,
            },
            read: Actions {
                on_success: read_success,
                on_failure: read_failure,
            },
        }))
    }

    /// Whether a record may be written under this rule: not when its
    /// write action on failure is `NONE` (Confluent's client then writes
    /// what it could not encrypt in plaintext; this codec never writes
    /// plaintext, and does not write under a rule that says it may), nor
    /// when its write action on success is `ERROR` (Confluent's client
    /// fails every write under it).
    ///
    /// # Errors
    /// [`Error::Confluent`] naming the rule and the action.
    pub fn check_write(&self) -> Result<(), Error> {
        if self.write.on_failure == Action::None {
            return Err(Error::confluent(format!(
                "rule {:?}: onFailure NONE on write lets a field that fails to encrypt go out in plaintext \
                 (as Confluent's client would write it): refusing to write under this rule",
                self.name
            )));
        }
        if self.write.on_success == Action::Error {
            return Err(Error::confluent(format!(
                "rule {:?}: onSuccess ERROR on write fails every write (as in Confluent's client)",
                self.name
            )));
        }
        Ok(())
    }

    /// Whether a record may be read under this rule: not when its read
    /// action on success is `ERROR` (Confluent's client fails every read
    /// under it).
    ///
    /// # Errors
    /// [`Error::Confluent`] naming the rule and the action.
    pub fn check_read(&self) -> Result<(), Error> {
        if self.read.on_success == Action::Error {
            return Err(Error::confluent(format!(
                "rule {:?}: onSuccess ERROR on read fails every read (as in Confluent's client)",
                self.name
            )));
        }
        Ok(())
    }

    /// The error for a read under this rule that failed with `e`. Where
    /// the rule's read action on failure is `NONE`, Confluent's client
    /// hands the field (or payload) on as it lies, ciphertext as the
    /// value; this codec never does, and says so: the read fails closed
    /// with an error that names the rule and the action, `e` within it.
    /// A failure of the environment (a KMS, a registry) is `e` as it is,
    /// so that a caller still tells "stop" from "this value is bad".
    pub fn read_failed(&self, e: Error) -> Error {
        if self.read.on_failure == Action::Error
            || matches!(e, Error::Kms { .. } | Error::Registry { .. })
        {
            return e;
        }
        Error::confluent(format!(
            "rule {:?} asks for NONE on a failed read (Confluent's client would hand on the ciphertext as \
             the value); never done here, so the read fails: {e}",
            self.name
        ))
    }

    pub(super) fn rotates(&self) -> bool {
        self.expiry_days > 0
    }
}

/// An `onSuccess` or `onFailure` as Confluent's client reads it for a
/// `WRITEREAD` rule: absent, null or empty, `default` both ways; one
/// action, both ways; two comma-separated, the first on write and the
/// second on read. What it cannot take: why, to name.
fn actions(value: Option<&Value>, default: Action) -> Result<(Action, Action), String> {
    let text = match value {
        None | Some(Value::Null) => return Ok((default, default)),
        Some(Value::String(s)) if s.is_empty() => return Ok((default, default)),
        Some(Value::String(s)) => s,
        Some(other) => return Err(format!("{} (not a string)", short(other))),
    };
    let shown = crate::error::printable(text);
    let one = |part: &str| match part {
        "ERROR" => Ok(Action::Error),
        "NONE" => Ok(Action::None),
        other => Err(format!(
            "{shown:?}: the action {:?} (only ERROR and NONE are implemented here)",
            crate::error::printable(other)
        )),
    };
    let mut parts = text.splitn(3, ',');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(both), None, _) => one(both).map(|a| (a, a)),
        (Some(write), Some(read), None) => Ok((one(write)?, one(read)?)),
        _ => Err(format!("{shown:?}: more than two actions")),
    }
}

/// A JSON value as an error shows it: at most 64 characters.
fn short(v: &Value) -> String {
    crate::error::printable(&v.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parsed(extra: Value) -> Result<Rule, Error> {
        let mut r = json!({
            "name": "r", "type": "ENCRYPT", "tags": ["PII"],
            "params": {"encrypt.kek.name": "k"},
        });
        for (k, v) in extra.as_object().into_iter().flatten() {
            r[k] = v.clone();
        }
        Rule::from_json(&r).map(|r| r.expect("enabled"))
    }

    #[test]
    fn actions_split_by_direction_as_confluents_client_reads_them() {
        let (e, n) = (Action::Error, Action::None);
        for (on_failure, write, read) in [
            (Value::Null, e, e),
            (json!(""), e, e),
            (json!("ERROR"), e, e),
            (json!("NONE"), n, n),
            (json!("ERROR,NONE"), e, n),
            (json!("NONE,ERROR"), n, e),
        ] {
            let r = parsed(json!({ "onFailure": on_failure })).unwrap();
            assert_eq!(
                (r.write.on_failure, r.read.on_failure),
                (write, read),
                "{on_failure}"
            );
            assert_eq!((r.write.on_success, r.read.on_success), (n, n));
        }
        let r = parsed(json!({"onSuccess": "NONE,ERROR"})).unwrap();
        assert_eq!((r.write.on_success, r.read.on_success), (n, e));
    }

    #[test]
    fn other_actions_are_refused_by_name() {
        for (field, action, named) in [
            ("onFailure", json!("DLQ"), "\"DLQ\""),
            ("onFailure", json!("ERROR,DLQ"), "\"DLQ\""),
            ("onFailure", json!("ERROR, NONE"), "\" NONE\""),
            ("onSuccess", json!("NONE,MyAction"), "\"MyAction\""),
            ("onFailure", json!("ERROR,"), "\"\""),
            ("onFailure", json!("error"), "\"error\""),
            ("onFailure", json!("ERROR,NONE,ERROR"), "more than two"),
            ("onSuccess", json!(["NONE"]), "not a string"),
        ] {
            let e = parsed(json!({ field: action })).unwrap_err().to_string();
            assert!(e.contains(field) && e.contains(named), "{action}: {e}");
        }
    }

    #[test]
    fn each_direction_enforces_its_own_part() {
        // Confluent's documented rule: writes fail on error, reads would
        // hand on the field as it lies.
        let r = parsed(json!({"onFailure": "ERROR,NONE"})).unwrap();
        r.check_write().unwrap();
        r.check_read().unwrap();
        let failed = r.read_failed(Error::Decryption).to_string();
        assert!(
            failed.contains("NONE") && failed.contains("\"r\""),
            "{failed}"
        );
        // An environment's failure stays what it is.
        let kms = Error::Kms {
            detail: "down".into(),
            cause: None,
        };
        assert!(matches!(r.read_failed(kms), Error::Kms { .. }));
        // ERROR on read: the failure as it is.
        let strict = parsed(json!({"onFailure": "ERROR,ERROR"})).unwrap();
        assert_eq!(strict.read_failed(Error::Decryption), Error::Decryption);
        // NONE on write: no write under it; a read still reads.
        let open = parsed(json!({"onFailure": "NONE,ERROR"})).unwrap();
        assert!(open
            .check_write()
            .unwrap_err()
            .to_string()
            .contains("plaintext"));
        open.check_read().unwrap();
        // ERROR on success fails its direction.
        let w = parsed(json!({"onSuccess": "ERROR,NONE"})).unwrap();
        assert!(w.check_write().is_err());
        w.check_read().unwrap();
        let rd = parsed(json!({"onSuccess": "NONE,ERROR"})).unwrap();
        rd.check_write().unwrap();
        assert!(rd.check_read().is_err());
    }

    #[test]
    fn a_rule_without_kind_or_mode_is_a_writeread_transform() {
        parsed(json!({})).unwrap();
        parsed(json!({"mode": "WRITEREAD", "kind": "TRANSFORM"})).unwrap();
        for (field, v) in [
            ("mode", json!("WRITE")),
            ("mode", json!("READ")),
            ("mode", json!(1)),
            ("kind", json!("CONDITION")),
        ] {
            let e = parsed(json!({ field: v })).unwrap_err().to_string();
            assert!(e.contains(field), "{e}");
        }
    }
}
