//! A record's JSON form, both ways: `bytes` and `fixed` as arrays of
//! numbers, or as base64 strings when asked.

use apache_avro::schema::Schema;
use apache_avro::types::Value as Avro;
use base64::Engine as _;
use serde_json::Value;

use super::*;
use crate::error::Error;

impl AvroSchema {
    /// A record's Avro value from its JSON form (`base64`: bytes given as
    /// base64 strings).
    pub(in crate::confluent) fn resolve_json(
        &self,
        mut value: Value,
        base64: bool,
    ) -> Result<Avro, Error> {
        if base64 {
            self.unbase64(&self.schema, &mut value, 0)?;
        }
        Avro::from(value)
            .resolve(&self.schema)
            .map_err(|e| avro_error("the record does not match its Avro schema", &e))
    }

    /// A record's JSON form (`base64`: bytes as base64 strings).
    pub(in crate::confluent) fn to_json(
        &self,
        mut value: Avro,
        base64: bool,
    ) -> Result<Value, Error> {
        if base64 {
            to_base64(&mut value);
        }
        Value::try_from(value).map_err(|e| avro_error("an Avro value with no JSON form", &e))
    }

    /// Where `schema` has bytes or fixed and `value` a string, the string's
    /// base64 decoded (as the array of numbers `apache-avro` resolves).
    pub(super) fn unbase64(
        &self,
        schema: &Schema,
        value: &mut Value,
        depth: usize,
    ) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Ok(()); // serde_json nests no deeper; resolve reports it
        }
        match (self.named(schema), value) {
            (Schema::Bytes | Schema::Fixed(_), v @ Value::String(_)) => {
                let Value::String(text) = &*v else {
                    return Ok(());
                };
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(text.as_bytes())
                    .map_err(|_| Error::confluent("an Avro bytes value is not base64"))?;
                *v = Value::Array(bytes.into_iter().map(Value::from).collect());
                Ok(())
            }
            (Schema::Union(u), v @ Value::String(_)) => {
                let has = |k: fn(&Schema) -> bool| u.variants().iter().any(|s| k(self.named(s)));
                if !has(|s| matches!(s, Schema::String | Schema::Uuid | Schema::Enum(_)))
                    && has(|s| matches!(s, Schema::Bytes | Schema::Fixed(_)))
                {
                    self.unbase64(&Schema::Bytes, v, depth + 1)?;
                }
                Ok(())
            }
            (Schema::Union(u), v) => {
                // The branch a JSON object or array can only be.
                for s in u.variants() {
                    if matches!(
                        (self.named(s), &*v),
                        (Schema::Record(_) | Schema::Map(_), Value::Object(_))
                            | (Schema::Array(_), Value::Array(_))
                    ) {
                        return self.unbase64(s, v, depth + 1);
                    }
                }
                Ok(())
            }
            (Schema::Record(r), Value::Object(fields)) => {
                for f in &r.fields {
                    if let Some(v) = fields.get_mut(&f.name) {
                        self.unbase64(&f.schema, v, depth + 1)?;
                    }
                }
                Ok(())
            }
            (Schema::Array(a), Value::Array(items)) => {
                for v in items {
                    self.unbase64(&a.items, v, depth + 1)?;
                }
                Ok(())
            }
            (Schema::Map(m), Value::Object(items)) => {
                for v in items.values_mut() {
                    self.unbase64(&m.types, v, depth + 1)?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// Every bytes or fixed value in `value` as a base64 string.
pub(super) fn to_base64(value: &mut Avro) {
    match value {
        Avro::Bytes(b) | Avro::Fixed(_, b) => {
            *value = Avro::String(base64::engine::general_purpose::STANDARD.encode(b));
        }
        Avro::Union(_, v) => to_base64(v),
        Avro::Array(items) => items.iter_mut().for_each(to_base64),
        Avro::Map(items) => items.values_mut().for_each(to_base64),
        Avro::Record(fields) => fields.iter_mut().for_each(|(_, v)| to_base64(v)),
        _ => {}
    }
}
