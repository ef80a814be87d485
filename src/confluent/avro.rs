//! Avro records in Confluent's format (feature `confluent-avro`): the
//! schema, its tagged fields, and the record's binary encoding, through the
//! `apache-avro` crate. The DEKs, rules and registries are
//! [`ConfluentJson`](super::ConfluentJson)'s, as for JSON Schema.
//!
//! A field is tagged when its `confluent:tags` (an attribute of the record
//! field, as Confluent's clients read it) holds one of a rule's tags. Such a
//! field must be a `string` or `bytes`, or a union of `null` and one of
//! them: anything else refuses the schema, rather than leave the field in
//! plaintext. A string field holds the base64 of the ciphertext, a bytes
//! field the ciphertext itself; a null stays null.
//!
//! A record's value, both ways, is its JSON form (`serde_json::Value`): a
//! record an object, a union its branch's value, `bytes` and `fixed` an
//! array of numbers, an enum its symbol (the mapping of `apache-avro`).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use apache_avro::schema::{Name, Schema};
use apache_avro::types::Value as Avro;
use serde_json::Value;
use zeroize::Zeroizing;

use base64::Engine as _;

use super::rule::Rule;
use super::{split_version, Dek, MAGIC};
use crate::error::Error;

/// The largest length an Avro record may declare for a string, bytes, an
/// array or a map block: a record is at most 16 MiB
/// (`apache_avro::util::max_allocation_bytes`, set once per process: if the
/// application set it first, its value holds).
const MAX_ALLOCATION: usize = 16 << 20;

/// What is done to a tagged field: its value and its path.
type FieldFn<'a> = dyn FnMut(&mut Avro, &[String]) -> Result<(), Error> + 'a;

/// A parsed Avro schema and its named types.
pub(super) struct AvroSchema {
    schema: Schema,
    names: HashMap<Name, Schema>,
}

impl std::fmt::Debug for AvroSchema {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AvroSchema").finish_non_exhaustive()
    }
}

fn avro_error(what: &str, e: &apache_avro::Error) -> Error {
    // apache-avro's messages can quote the value (a field's plaintext):
    // only its kind is kept.
    let kind = format!("{:?}", e.details());
    let kind = kind.split(['(', ' ', '{']).next().unwrap_or("error");
    Error::confluent(format!("{what} ({kind})"))
}

/// Whether a record field carries one of `tags` (all tags when `None`).
fn field_tagged(
    attributes: &std::collections::BTreeMap<String, Value>,
    tags: Option<&[String]>,
) -> bool {
    attributes
        .get("confluent:tags")
        .and_then(Value::as_array)
        .is_some_and(|found| {
            found.iter().filter_map(Value::as_str).any(|t| match tags {
                Some(tags) => tags.iter().any(|w| w == t),
                None => true,
            })
        })
}

impl AvroSchema {
    /// Parses a schema's text.
    pub(super) fn parse(text: &str) -> Result<Self, Error> {
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION);
        let schema = Schema::parse_str(text)
            .map_err(|e| avro_error("an Avro schema that does not parse", &e))?;
        let names = apache_avro::schema::ResolvedSchema::try_from(&schema)
            .map_err(|e| avro_error("an Avro schema whose names do not resolve", &e))?
            .get_names()
            .iter()
            .map(|(n, s)| (n.clone(), (*s).clone()))
            .collect();
        Ok(AvroSchema { schema, names })
    }

    fn named<'a>(&'a self, schema: &'a Schema) -> &'a Schema {
        match schema {
            Schema::Ref { name } => self.names.get(name).unwrap_or(schema),
            s => s,
        }
    }

    /// The fields that carry one of `tags` (every tag when `None`); an
    /// error for one this reader cannot encrypt (not a string or bytes, or
    /// a union of null and one of them).
    pub(super) fn count_tagged(&self, tags: Option<&[String]>) -> Result<usize, Error> {
        let mut seen = HashSet::new();
        self.count_in(&self.schema, tags, &mut seen)
    }

    fn count_in<'a>(
        &'a self,
        schema: &'a Schema,
        tags: Option<&[String]>,
        seen: &mut HashSet<&'a Name>,
    ) -> Result<usize, Error> {
        Ok(match self.named(schema) {
            Schema::Record(r) => {
                if !seen.insert(&r.name) {
                    return Ok(0);
                }
                let mut n = 0;
                for f in &r.fields {
                    if field_tagged(&f.custom_attributes, tags) {
                        if tags.is_some() && !encryptable(self.named(&f.schema)) {
                            return Err(Error::confluent(format!(
                                "the Avro field {:?} is tagged for encryption but is not a string or bytes \
                                 (or a union of null and one of them): refusing the schema rather than leave it in plaintext",
                                crate::error::printable(&f.name)
                            )));
                        }
                        n += 1;
                    } else {
                        n += self.count_in(&f.schema, tags, seen)?;
                    }
                }
                n
            }
            Schema::Union(u) => {
                let mut n = 0;
                for v in u.variants() {
                    n += self.count_in(v, tags, seen)?;
                }
                n
            }
            Schema::Array(a) => self.count_in(&a.items, tags, seen)?,
            Schema::Map(m) => self.count_in(&m.types, tags, seen)?,
            _ => 0,
        })
    }

    /// Decodes a record's body (all of it: trailing bytes are an error).
    /// The body is checked first, without allocating
    /// ([`check`](AvroSchema::check)): `apache-avro` reserves an array's
    /// declared length and recurses once per nesting level.
    pub(super) fn read(&self, body: &[u8]) -> Result<Avro, Error> {
        let mut input = body;
        self.check(&self.schema, &mut input, 0, &mut 0)?;
        let mut rest = body;
        let value = apache_avro::from_avro_datum(&self.schema, &mut rest, None)
            .map_err(|e| avro_error("a Confluent record's Avro body does not decode", &e))?;
        if !rest.is_empty() {
            return Err(Error::confluent(
                "a Confluent record's Avro body has bytes after the record",
            ));
        }
        Ok(value)
    }

    /// Encodes a record (the bytes are wiped when dropped).
    pub(super) fn write(&self, value: Avro) -> Result<Zeroizing<Vec<u8>>, Error> {
        apache_avro::to_avro_datum(&self.schema, value)
            .map(Zeroizing::new)
            .map_err(|e| avro_error("cannot encode the record in Avro", &e))
    }

    /// A record's Avro value from its JSON form (`base64`: bytes given as
    /// base64 strings).
    pub(super) fn resolve_json(&self, mut value: Value, base64: bool) -> Result<Avro, Error> {
        if base64 {
            self.unbase64(&self.schema, &mut value, 0)?;
        }
        Avro::from(value)
            .resolve(&self.schema)
            .map_err(|e| avro_error("the record does not match its Avro schema", &e))
    }

    /// A record's JSON form (`base64`: bytes as base64 strings).
    pub(super) fn to_json(&self, mut value: Avro, base64: bool) -> Result<Value, Error> {
        if base64 {
            to_base64(&mut value);
        }
        Value::try_from(value).map_err(|e| avro_error("an Avro value with no JSON form", &e))
    }

    /// Where `schema` has bytes or fixed and `value` a string, the string's
    /// base64 decoded (as the array of numbers `apache-avro` resolves).
    fn unbase64(&self, schema: &Schema, value: &mut Value, depth: usize) -> Result<(), Error> {
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

    /// Calls `f` on every field of `value` that carries one of `tags`, with
    /// its path (field names, array indexes, map keys).
    pub(super) fn each_tagged(
        &self,
        value: &mut Avro,
        tags: &[String],
        f: &mut FieldFn<'_>,
    ) -> Result<(), Error> {
        self.walk(&self.schema, value, tags, &mut Vec::new(), f)
    }

    fn walk(
        &self,
        schema: &Schema,
        value: &mut Avro,
        tags: &[String],
        at: &mut Vec<String>,
        f: &mut FieldFn<'_>,
    ) -> Result<(), Error> {
        match (self.named(schema), value) {
            (Schema::Record(r), Avro::Record(fields)) => {
                for (field, (name, v)) in r.fields.iter().zip(fields.iter_mut()) {
                    at.push(name.clone());
                    let done = if field_tagged(&field.custom_attributes, Some(tags)) {
                        f(v, at)
                    } else {
                        self.walk(&field.schema, v, tags, at, f)
                    };
                    at.pop();
                    done?;
                }
                Ok(())
            }
            (Schema::Union(u), Avro::Union(i, v)) => match u.variants().get(*i as usize) {
                Some(s) => self.walk(s, v, tags, at, f),
                None => Err(Error::confluent("an Avro union index out of range")),
            },
            (Schema::Array(a), Avro::Array(items)) => {
                for (i, item) in items.iter_mut().enumerate() {
                    at.push(i.to_string());
                    let done = self.walk(&a.items, item, tags, at, f);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            (Schema::Map(m), Avro::Map(items)) => {
                for (k, item) in items.iter_mut() {
                    at.push(k.replace('~', "~0").replace('/', "~1"));
                    let done = self.walk(&m.types, item, tags, at, f);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }
}

/// How deep records, unions, arrays and maps may nest in a record read
/// (serde_json's limit for JSON, 128).
const MAX_DEPTH: usize = 128;

/// The most items of a size of zero bytes (`null`, an empty record) in one
/// record read: a block can declare millions of them in a few bytes.
const MAX_EMPTY_ITEMS: usize = 1 << 16;

fn short() -> Error {
    Error::confluent("a Confluent record's Avro body is shorter than its schema says")
}

/// Reads a zigzag varint `long`.
fn read_long(input: &mut &[u8]) -> Result<i64, Error> {
    let mut n: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = input.split_first().ok_or_else(short)?;
        *input = rest;
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            #[allow(clippy::cast_possible_wrap)]
            return Ok((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    Err(Error::confluent(
        "a Confluent record's Avro body has a varint longer than 10 bytes",
    ))
}

/// Skips `n` bytes.
fn skip(input: &mut &[u8], n: i64) -> Result<(), Error> {
    let n = usize::try_from(n)
        .map_err(|_| Error::confluent("a Confluent record's Avro body has a negative length"))?;
    if n > input.len() {
        return Err(short());
    }
    *input = &input[n..];
    Ok(())
}

impl AvroSchema {
    /// Walks `input` as `schema` says, allocating nothing: every length
    /// fits in what is left, nesting is at most [`MAX_DEPTH`] deep, and
    /// zero-byte items at most [`MAX_EMPTY_ITEMS`].
    fn check(
        &self,
        schema: &Schema,
        input: &mut &[u8],
        depth: usize,
        empty: &mut usize,
    ) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::confluent(
                "a Confluent record's Avro body nests deeper than 128 levels",
            ));
        }
        match self.named(schema) {
            Schema::Null => Ok(()),
            Schema::Boolean => skip(input, 1),
            Schema::Int
            | Schema::Long
            | Schema::Enum(_)
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => read_long(input).map(|_| ()),
            Schema::Float => skip(input, 4),
            Schema::Double => skip(input, 8),
            Schema::Duration => skip(input, 12),
            Schema::Bytes | Schema::String | Schema::Uuid | Schema::BigDecimal => {
                let n = read_long(input)?;
                skip(input, n)
            }
            Schema::Fixed(f) => skip(input, i64::try_from(f.size).unwrap_or(i64::MAX)),
            Schema::Decimal(d) => self.check(&d.inner, input, depth + 1, empty),
            Schema::Union(u) => {
                let i = read_long(input)?;
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| Error::confluent("an Avro union index out of range"))?;
                self.check(branch, input, depth + 1, empty)
            }
            Schema::Record(r) => {
                for f in &r.fields {
                    self.check(&f.schema, input, depth + 1, empty)?;
                }
                Ok(())
            }
            Schema::Array(a) => self.check_blocks(&a.items, false, input, depth, empty),
            Schema::Map(m) => self.check_blocks(&m.types, true, input, depth, empty),
            Schema::Ref { .. } => Err(Error::confluent(
                "an Avro schema names a type it does not define",
            )),
        }
    }

    /// An array's or a map's blocks (`key`: each item has a string key).
    fn check_blocks(
        &self,
        items: &Schema,
        key: bool,
        input: &mut &[u8],
        depth: usize,
        empty: &mut usize,
    ) -> Result<(), Error> {
        loop {
            let mut count = read_long(input)?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                count = count.checked_neg().ok_or_else(short)?;
                read_long(input)?; // the block's size in bytes
            }
            for _ in 0..count {
                let before = input.len();
                if key {
                    let n = read_long(input)?;
                    skip(input, n)?;
                }
                self.check(items, input, depth + 1, empty)?;
                if input.len() == before {
                    *empty += 1;
                    if *empty > MAX_EMPTY_ITEMS {
                        return Err(Error::confluent(
                            "a Confluent record's Avro body has more than 65536 empty items",
                        ));
                    }
                }
            }
        }
    }
}

/// Every bytes or fixed value in `value` as a base64 string.
fn to_base64(value: &mut Avro) {
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

/// Whether a field of this type can be encrypted: a string or bytes, or a
/// union of null and one of them.
fn encryptable(schema: &Schema) -> bool {
    match schema {
        Schema::String | Schema::Bytes => true,
        Schema::Union(u) => u
            .variants()
            .iter()
            .all(|v| matches!(v, Schema::Null | Schema::String | Schema::Bytes)),
        _ => false,
    }
}

/// Decrypts a tagged field in place (a null stays null): a string holds
/// the base64 of the ciphertext, bytes the ciphertext.
pub(super) fn open_field(
    rule: &Rule,
    dek: &mut dyn FnMut(u32) -> Result<Arc<Dek>, Error>,
    field: &mut Avro,
) -> Result<(), Error> {
    let sealed: Zeroizing<Vec<u8>>;
    let bytes = match field {
        Avro::Null => return Ok(()),
        Avro::Union(_, inner) => return open_field(rule, dek, inner),
        Avro::String(s) => {
            sealed = Zeroizing::new(
                base64::engine::general_purpose::STANDARD
                    .decode(s.as_bytes())
                    .map_err(|_| Error::confluent("an encrypted field is not base64"))?,
            );
            &sealed[..]
        }
        Avro::Bytes(b) => &b[..],
        _ => {
            return Err(Error::confluent(
                "an encrypted field is not a string or bytes",
            ))
        }
    };
    let (version, ct) = if rule.rotates() {
        split_version(bytes)?
    } else {
        (1, bytes)
    };
    let plain = dek(version)?.decrypt(ct)?;
    *field = match field {
        Avro::String(_) => Avro::String(
            String::from_utf8(plain.to_vec())
                .map_err(|_| Error::confluent("a decrypted field is not UTF-8"))?,
        ),
        _ => Avro::Bytes(plain.to_vec()),
    };
    Ok(())
}

/// Encrypts a tagged field in place (a null stays null; the plaintext is
/// wiped).
pub(super) fn seal_field(rule: &Rule, dek: &Dek, field: &mut Avro) -> Result<(), Error> {
    let plain: &mut [u8] = match field {
        Avro::Null => return Ok(()),
        Avro::Union(_, inner) => return seal_field(rule, dek, inner),
        Avro::String(s) => {
            let mut v = std::mem::take(s).into_bytes();
            let sealed = seal(rule, dek, &v);
            zeroize::Zeroize::zeroize(&mut v);
            *field = Avro::String(base64::engine::general_purpose::STANDARD.encode(sealed?));
            return Ok(());
        }
        Avro::Bytes(b) => b,
        _ => {
            return Err(Error::confluent(
                "a field tagged for encryption is not a string or bytes",
            ))
        }
    };
    let sealed = seal(rule, dek, plain);
    zeroize::Zeroize::zeroize(plain);
    *field = Avro::Bytes(sealed?);
    Ok(())
}

fn seal(rule: &Rule, dek: &Dek, plain: &[u8]) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    if rule.rotates() {
        out.push(MAGIC);
        out.extend_from_slice(&dek.version().to_be_bytes());
    }
    out.extend_from_slice(&dek.encrypt(plain)?);
    Ok(out)
}
