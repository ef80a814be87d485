//! A record read and written: its frame, its payload rule, and each field
//! rule's fields opened or sealed.

use std::sync::Arc;

use base64::Engine as _;
use serde_json::Value;
use zeroize::Zeroizing;

use super::*;
use crate::confluent::rule::Rule;
use crate::confluent::{parse_frame, split_version, write_frame, Dek, MAGIC};
use crate::error::Error;

impl ConfluentJson {
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

    pub(super) fn encode_value(
        &self,
        subject: &str,
        id: u32,
        mut value: Value,
    ) -> Result<Vec<u8>, Error> {
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
    pub(super) fn decode_avro(
        &self,
        avro: &crate::confluent::avro::AvroSchema,
        schema: &Registered,
        subject: &str,
        body: &[u8],
    ) -> Result<Value, Error> {
        let mut record = avro.read(body)?;
        for (rule, reached) in schema.fields.iter().rev() {
            let mut dek = self.dek_reader(rule, subject);
            avro.each_tagged(&mut record, &reached.avro, &mut |field, at| {
                crate::confluent::avro::open_field(rule, &mut dek, field)
                    .map_err(|e| in_field(at, rule.read_failed(e)))
            })?;
        }
        avro.to_json(record, self.avro_base64)
    }

    /// An Avro record's encoding, its tagged fields encrypted.
    #[cfg(feature = "confluent-avro")]
    pub(super) fn encode_avro(
        &self,
        avro: &crate::confluent::avro::AvroSchema,
        schema: &Registered,
        subject: &str,
        value: Value,
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        let mut record = avro.resolve_json(value, self.avro_base64)?;
        for (rule, reached) in &schema.fields {
            let dek = self.dek_to_write(rule, subject)?;
            avro.each_tagged(&mut record, &reached.avro, &mut |field, at| {
                crate::confluent::avro::seal_field(rule, &dek, field).map_err(|e| in_field(at, e))
            })?;
        }
        avro.write(record)
    }
}

/// `e` at the field `at`; a failure of the environment (a KMS, a
/// registry) stays itself, so that a caller stops on it as on the same
/// failure outside a field.
pub(super) fn in_field(at: &[String], e: Error) -> Error {
    if matches!(e, Error::Kms { .. } | Error::Registry { .. }) {
        return e;
    }
    Error::Field {
        path: format!("/{}", at.join("/")),
        cause: Box::new(e),
    }
}

pub(super) fn json_kind(e: &serde_json::Error) -> &'static str {
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
pub(super) fn wipe_json(value: Value) {
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

/// Decrypts a field in place (a null stays null).
pub(super) fn open_field(
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
pub(super) fn seal_field(rule: &Rule, dek: &Dek, field: &mut Value) -> Result<(), Error> {
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
pub(super) type FieldFn<'a> = dyn FnMut(&mut Value, &[String]) -> Result<(), Error> + 'a;

/// Calls `f` on every value at `path` in `value` (`*`: each element of an
/// array); a missing property or a null on the way is skipped, and a value
/// of another shape than the schema's (not an object where the path names
/// a property, not an array where it takes each item) is an error: such a
/// record is not of its schema, and Confluent's client refuses to write it.
pub(super) fn each_at(
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
