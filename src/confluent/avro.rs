//! Avro records in Confluent's format (feature `confluent-avro`): the
//! schema, its tagged fields, and the record's binary encoding, through the
//! `apache-avro` crate. The DEKs, rules and registries are
//! [`ConfluentJson`](super::ConfluentJson)'s, as for JSON Schema.
//!
//! A rule reaches a field as Confluent's client decides it (see
//! [`tags`](super::tags): the field's `confluent:tags` attribute and the
//! schema's `metadata.tags` for its full name `namespace.Record.field`).
//! Within a reached field, every string and bytes value is encrypted: the
//! field itself, its branch of a union, each item of an array or a map of
//! them. A reached field that holds anything else (an `int`, an `enum`, a
//! `fixed`) refuses the schema, as Confluent's client fails to write it;
//! records inside are reached by their own fields' tags (an inline tag on a
//! field of a record type, which encrypts nothing to Confluent's client,
//! refuses the schema). A string holds the
//! base64 of the ciphertext, bytes the ciphertext itself; a null stays null.
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
use super::tags::{reaches, MetadataTags};
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

/// The full name of a record's field, as Confluent's client names it
/// (`namespace.Record.field`).
fn full_name(record: &Name, field: &str) -> String {
    format!("{}.{field}", record.fullname(None))
}

/// The inline tags of a record field (its `confluent:tags` attribute).
fn inline_tags(
    attributes: &std::collections::BTreeMap<String, Value>,
) -> impl Iterator<Item = &str> {
    attributes
        .get("confluent:tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

impl AvroSchema {
    /// Parses a schema's text.
    pub(super) fn parse(text: &str) -> Result<Self, Error> {
        apache_avro::util::max_allocation_bytes(MAX_ALLOCATION);
        if let Ok(raw) = serde_json::from_str::<Value>(text) {
            check_names(&raw, 0)?;
        }
        // apache-avro's parser panics on some names it does not check (a
        // record named "" or "a..b"): those are refused above; a panic left
        // is an error here, not the caller's.
        let parsed = std::panic::catch_unwind(|| Schema::parse_str(text)).map_err(|_| {
            Error::confluent("an Avro schema that does not parse (its parser failed)")
        })?;
        let schema = parsed.map_err(|e| avro_error("an Avro schema that does not parse", &e))?;
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

    /// How many record fields carry an inline tag (any tag).
    pub(super) fn count_any_tag(&self) -> usize {
        let mut seen = HashSet::new();
        let mut reached = HashSet::new();
        let mut n = 0;
        // Every field with an inline tag, as if a rule named all of them
        // (no field's content is checked: this never fails).
        let _ = self.reach_in(
            &self.schema,
            &Reach::AnyInline,
            &mut seen,
            &mut reached,
            &mut n,
        );
        n
    }

    /// The full names of the fields a rule with `rule_tags` (none: every
    /// field) reaches, by their inline tags and `meta`; an error, refusing
    /// the schema, for a reached field that holds something other than
    /// strings, bytes or records (alone, in a union with null, or in arrays
    /// and maps of them): Confluent's client fails to write it.
    pub(super) fn reached(
        &self,
        rule_tags: &[String],
        meta: &MetadataTags,
    ) -> Result<HashSet<String>, Error> {
        let mut seen = HashSet::new();
        let mut reached = HashSet::new();
        self.reach_in(
            &self.schema,
            &Reach::Rule(rule_tags, meta),
            &mut seen,
            &mut reached,
            &mut 0,
        )?;
        Ok(reached)
    }

    fn reach_in<'a>(
        &'a self,
        schema: &'a Schema,
        reach: &Reach<'_>,
        seen: &mut HashSet<&'a Name>,
        reached: &mut HashSet<String>,
        n: &mut usize,
    ) -> Result<(), Error> {
        match self.named(schema) {
            Schema::Record(r) => {
                if !seen.insert(&r.name) {
                    return Ok(());
                }
                for f in &r.fields {
                    let full = full_name(&r.name, &f.name);
                    let hit = match reach {
                        Reach::AnyInline => inline_tags(&f.custom_attributes).next().is_some(),
                        Reach::Rule(tags, meta) => reaches(
                            tags,
                            inline_tags(&f.custom_attributes)
                                .chain(meta.tags_of(&full)?.iter().copied()),
                        ),
                    };
                    if hit {
                        *n += 1;
                        if let Reach::Rule(tags, _) = reach {
                            let inline = !tags.is_empty()
                                && reaches(tags, inline_tags(&f.custom_attributes));
                            self.leaves(&f.schema, &full, inline, reach, seen, reached, n)?;
                        }
                        reached.insert(full);
                    } else {
                        self.reach_in(&f.schema, reach, seen, reached, n)?;
                    }
                }
                Ok(())
            }
            Schema::Union(u) => {
                for v in u.variants() {
                    self.reach_in(v, reach, seen, reached, n)?;
                }
                Ok(())
            }
            Schema::Array(a) => self.reach_in(&a.items, reach, seen, reached, n),
            Schema::Map(m) => self.reach_in(&m.types, reach, seen, reached, n),
            _ => Ok(()),
        }
    }

    /// Checks what a reached field holds (see [`reached`](Self::reached));
    /// `inline`: reached by its own `confluent:tags`.
    #[allow(clippy::too_many_arguments)]
    fn leaves<'a>(
        &'a self,
        schema: &'a Schema,
        field: &str,
        inline: bool,
        reach: &Reach<'_>,
        seen: &mut HashSet<&'a Name>,
        reached: &mut HashSet<String>,
        n: &mut usize,
    ) -> Result<(), Error> {
        match self.named(schema) {
            Schema::String | Schema::Bytes | Schema::Null => Ok(()),
            // Confluent's client encrypts nothing for a tag on a record:
            // refused rather than leave what the tag names in plaintext.
            Schema::Record(_) if inline => Err(Error::confluent(format!(
                "the Avro field {:?}: a tag on a record (Confluent's client encrypts none of its fields for it): \
                 refusing the schema rather than leave it in plaintext; tag the fields",
                crate::error::printable(field)
            ))),
            // A record's fields are reached by their own tags.
            Schema::Record(_) => self.reach_in(schema, reach, seen, reached, n),
            Schema::Union(u) => {
                for v in u.variants() {
                    self.leaves(v, field, inline, reach, seen, reached, n)?;
                }
                Ok(())
            }
            Schema::Array(a) => self.leaves(&a.items, field, inline, reach, seen, reached, n),
            Schema::Map(m) => self.leaves(&m.types, field, inline, reach, seen, reached, n),
            _ => Err(Error::confluent(format!(
                "the Avro field {:?} is reached by an encryption rule but holds something other than strings, \
                 bytes or records (Confluent's client fails to write it): refusing the schema rather than leave it in plaintext",
                crate::error::printable(field)
            ))),
        }
    }

    /// Decodes a record's body (all of it: trailing bytes are an error).
    /// The body is checked first, without allocating
    /// ([`check`](AvroSchema::check)): `apache-avro` reserves an array's
    /// declared length and recurses once per nesting level.
    pub(super) fn read(&self, body: &[u8]) -> Result<Avro, Error> {
        let mut input = body;
        self.check(&self.schema, &mut input, 0, &mut (0, 0))?;
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

    /// Encodes a record: its strings and bytes are wiped once written,
    /// and so is every buffer the encoding outgrows (the bytes returned are
    /// wiped when dropped). `apache-avro`'s own writer takes the record by
    /// value and frees it, and its buffer as it grows, without wiping.
    pub(super) fn write(&self, mut value: Avro) -> Result<Zeroizing<Vec<u8>>, Error> {
        let mut out = Buf(Zeroizing::new(Vec::with_capacity(256)));
        let done = self.encode(&self.schema, &value, &mut out, 0);
        wipe_avro(&mut value);
        done.map(|()| out.0)
    }

    /// Appends `value`'s Avro binary encoding under `schema` (as
    /// `apache-avro` writes it; its logical types other than dates and
    /// times, which hold no strings, are encoded by it).
    fn encode(
        &self,
        schema: &Schema,
        value: &Avro,
        out: &mut Buf,
        depth: usize,
    ) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::confluent(
                "an Avro record nested more than 128 levels",
            ));
        }
        let mismatch = || Error::confluent("the record does not match its Avro schema");
        match (self.named(schema), value) {
            (Schema::Null, Avro::Null) => {}
            (Schema::Boolean, Avro::Boolean(b)) => out.put(&[u8::from(*b)]),
            (
                Schema::Int | Schema::Date | Schema::TimeMillis,
                Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i),
            ) => {
                out.long(i64::from(*i));
            }
            (
                Schema::Long
                | Schema::TimeMicros
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::TimestampNanos
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
                | Schema::LocalTimestampNanos,
                Avro::Long(l)
                | Avro::TimeMicros(l)
                | Avro::TimestampMillis(l)
                | Avro::TimestampMicros(l)
                | Avro::TimestampNanos(l)
                | Avro::LocalTimestampMillis(l)
                | Avro::LocalTimestampMicros(l)
                | Avro::LocalTimestampNanos(l),
            ) => out.long(*l),
            (Schema::Float, Avro::Float(f)) => out.put(&f.to_le_bytes()),
            (Schema::Double, Avro::Double(d)) => out.put(&d.to_le_bytes()),
            (Schema::Bytes, Avro::Bytes(b)) => {
                out.long(len(b.len())?);
                out.put(b);
            }
            (Schema::String, Avro::String(t)) => {
                out.long(len(t.len())?);
                out.put(t.as_bytes());
            }
            (Schema::Fixed(f), Avro::Fixed(n, b)) if f.size == *n && b.len() == *n => out.put(b),
            (Schema::Enum(e), Avro::Enum(i, _)) if (*i as usize) < e.symbols.len() => {
                out.long(i64::from(*i));
            }
            (Schema::Union(u), Avro::Union(i, v)) => {
                let variant = u.variants().get(*i as usize).ok_or_else(mismatch)?;
                out.long(i64::from(*i));
                self.encode(variant, v, out, depth + 1)?;
            }
            (Schema::Array(a), Avro::Array(items)) => {
                if !items.is_empty() {
                    out.long(len(items.len())?);
                    for item in items {
                        self.encode(&a.items, item, out, depth + 1)?;
                    }
                }
                out.long(0);
            }
            (Schema::Map(m), Avro::Map(items)) => {
                if !items.is_empty() {
                    out.long(len(items.len())?);
                    for (k, v) in items {
                        out.long(len(k.len())?);
                        out.put(k.as_bytes());
                        self.encode(&m.types, v, out, depth + 1)?;
                    }
                }
                out.long(0);
            }
            (Schema::Record(r), Avro::Record(fields)) if r.fields.len() == fields.len() => {
                for (f, (name, v)) in r.fields.iter().zip(fields) {
                    if &f.name != name {
                        return Err(mismatch());
                    }
                    self.encode(&f.schema, v, out, depth + 1)?;
                }
            }
            (
                s @ (Schema::Decimal(_) | Schema::BigDecimal | Schema::Uuid | Schema::Duration),
                v @ (Avro::Decimal(_) | Avro::BigDecimal(_) | Avro::Uuid(_) | Avro::Duration(_)),
            ) => {
                let bytes = apache_avro::to_avro_datum(s, v.clone())
                    .map_err(|e| avro_error("cannot encode the record in Avro", &e))?;
                out.put(&bytes);
            }
            _ => return Err(mismatch()),
        }
        Ok(())
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

    /// Calls `f` on every string and bytes value of the fields named in
    /// `reached` (full names, from [`reached`](Self::reached)), with its
    /// path (field names, array indexes, map keys): in a union its branch,
    /// in an array or a map each item, as Confluent's client does.
    pub(super) fn each_tagged(
        &self,
        value: &mut Avro,
        reached: &HashSet<String>,
        f: &mut FieldFn<'_>,
    ) -> Result<(), Error> {
        self.walk(&self.schema, value, reached, &mut Vec::new(), f, false)
    }

    /// Walks `value`; `inside`: within a reached field, whose strings and
    /// bytes are given to `f`.
    fn walk(
        &self,
        schema: &Schema,
        value: &mut Avro,
        reached: &HashSet<String>,
        at: &mut Vec<String>,
        f: &mut FieldFn<'_>,
        inside: bool,
    ) -> Result<(), Error> {
        if at.len() > MAX_DEPTH {
            return Err(Error::confluent(
                "an Avro record nested more than 128 levels",
            ));
        }
        match (self.named(schema), value) {
            (Schema::Record(r), Avro::Record(fields)) => {
                for (field, (name, v)) in r.fields.iter().zip(fields.iter_mut()) {
                    at.push(name.clone());
                    let inside = reached.contains(&full_name(&r.name, &field.name));
                    let done = self.walk(&field.schema, v, reached, at, f, inside);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            (Schema::Union(u), Avro::Union(i, v)) => match u.variants().get(*i as usize) {
                Some(s) => self.walk(s, v, reached, at, f, inside),
                None => Err(Error::confluent("an Avro union index out of range")),
            },
            (Schema::Array(a), Avro::Array(items)) => {
                for (i, item) in items.iter_mut().enumerate() {
                    at.push(i.to_string());
                    let done = self.walk(&a.items, item, reached, at, f, inside);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            (Schema::Map(m), Avro::Map(items)) => {
                for (k, item) in items.iter_mut() {
                    at.push(k.replace('~', "~0").replace('/', "~1"));
                    let done = self.walk(&m.types, item, reached, at, f, inside);
                    at.pop();
                    done?;
                }
                Ok(())
            }
            (Schema::String | Schema::Bytes, v) if inside => f(v, at),
            _ => Ok(()),
        }
    }
}

/// Which fields count: those a rule reaches, or any with an inline tag.
enum Reach<'a> {
    AnyInline,
    Rule(&'a [String], &'a MetadataTags),
}

/// Checks the names of an Avro schema's named types and fields (as JSON)
/// against Avro's grammar (`[A-Za-z_][A-Za-z0-9_]*`, dotted for a full
/// name or a namespace), and refuses an empty `namespace` on a named type
/// inside another: Confluent's client names such a type in its enclosing
/// namespace, Avro's rules (and this codec) in none, so their full names
/// (and the `metadata.tags` patterns that match them) would differ.
fn check_names(raw: &Value, depth: usize) -> Result<(), Error> {
    if depth > MAX_DEPTH {
        return Err(Error::confluent(
            "an Avro schema nested more than 128 levels",
        ));
    }
    let valid = |name: &str| {
        !name.is_empty()
            && name.split('.').all(|part| {
                let mut chars = part.chars();
                chars
                    .next()
                    .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
                    && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            })
    };
    match raw {
        Value::Object(map) => {
            let named = matches!(
                map.get("type").and_then(Value::as_str),
                Some("record" | "error" | "enum" | "fixed")
            );
            if named {
                let name = map.get("name").and_then(Value::as_str).unwrap_or("");
                if !valid(name) {
                    return Err(Error::confluent(format!(
                        "an Avro type named {:?}: not a name Avro allows",
                        crate::error::printable(name)
                    )));
                }
                match map.get("namespace") {
                    None | Some(Value::Null) => {}
                    Some(Value::String(ns)) if ns.is_empty() && depth > 0 => {
                        return Err(Error::confluent(
                            "an Avro type inside another with an empty namespace (Confluent's client names it in the \
                             enclosing namespace, Avro in none): refusing the schema rather than guess",
                        ))
                    }
                    Some(Value::String(ns)) if ns.is_empty() || valid(ns) => {}
                    Some(_) => {
                        return Err(Error::confluent(
                            "an Avro namespace that is not a dotted name Avro allows",
                        ))
                    }
                }
            }
            if let Some(fields) = map.get("fields").and_then(Value::as_array) {
                for f in fields {
                    let name = f.get("name").and_then(Value::as_str).unwrap_or("");
                    if !valid(name) || name.contains('.') {
                        return Err(Error::confluent(format!(
                            "an Avro field named {:?}: not a name Avro allows",
                            crate::error::printable(name)
                        )));
                    }
                }
            }
            map.values().try_for_each(|v| check_names(v, depth + 1))
        }
        Value::Array(items) => items.iter().try_for_each(|v| check_names(v, depth + 1)),
        _ => Ok(()),
    }
}

/// A buffer whose every outgrown allocation is wiped.
struct Buf(Zeroizing<Vec<u8>>);

impl Buf {
    fn put(&mut self, bytes: &[u8]) {
        let v = &mut self.0;
        if v.capacity() - v.len() < bytes.len() {
            let mut grown = Zeroizing::new(Vec::with_capacity(
                (v.len() + bytes.len()).max(v.capacity() * 2),
            ));
            grown.extend_from_slice(v);
            // The old allocation is wiped as it drops.
            *v = grown;
        }
        v.extend_from_slice(bytes);
    }

    /// A zigzag varint `long`.
    fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        let mut bytes = [0u8; 10];
        let mut i = 0;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                bytes[i] = b;
                i += 1;
                break;
            }
            bytes[i] = b | 0x80;
            i += 1;
        }
        self.put(&bytes[..i]);
    }
}

fn len(n: usize) -> Result<i64, Error> {
    i64::try_from(n).map_err(|_| Error::confluent("an Avro value too long to encode"))
}

/// Wipes a record's strings, bytes, enum symbols and map keys.
fn wipe_avro(value: &mut Avro) {
    use zeroize::Zeroize as _;
    match value {
        Avro::String(s) | Avro::Enum(_, s) => s.zeroize(),
        Avro::Bytes(b) | Avro::Fixed(_, b) => b.zeroize(),
        Avro::Union(_, v) => wipe_avro(v),
        Avro::Array(items) => items.iter_mut().for_each(wipe_avro),
        Avro::Map(items) => {
            for (mut k, mut v) in items.drain() {
                k.zeroize();
                wipe_avro(&mut v);
            }
        }
        Avro::Record(fields) => {
            for (_, v) in fields {
                wipe_avro(v);
            }
        }
        _ => {}
    }
}

/// How deep records, unions, arrays and maps may nest in a record read
/// (serde_json's limit for JSON, 128).
const MAX_DEPTH: usize = 128;

/// The most items of arrays and maps in one record read (each becomes a
/// value of about 50 bytes, and its JSON form another): a 16 MiB record of
/// one-byte items would take about 900 MiB to read.
const MAX_ITEMS: usize = 1 << 20;

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
        empty: &mut (usize, usize),
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
        empty: &mut (usize, usize),
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
                empty.1 += 1;
                if empty.1 > MAX_ITEMS {
                    return Err(Error::confluent(
                        "a Confluent record's Avro body has more than 2^20 items in its arrays and maps",
                    ));
                }
                if input.len() == before {
                    empty.0 += 1;
                    if empty.0 > MAX_EMPTY_ITEMS {
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The encoder here writes what `apache-avro` writes, for every type.
    #[test]
    fn encodes_as_apache_avro() {
        let schema = json!({"type": "record", "name": "All", "namespace": "t", "fields": [
            {"name": "n", "type": "null"},
            {"name": "b", "type": "boolean"},
            {"name": "i", "type": "int"},
            {"name": "l", "type": "long"},
            {"name": "f", "type": "float"},
            {"name": "d", "type": "double"},
            {"name": "y", "type": "bytes"},
            {"name": "s", "type": "string"},
            {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
            {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
            {"name": "u", "type": ["null", "string", "long"]},
            {"name": "a", "type": {"type": "array", "items": "long"}},
            {"name": "m", "type": {"type": "map", "values": "string"}},
            {"name": "r", "type": {"type": "record", "name": "In", "fields": [
                {"name": "z", "type": "string"}]}},
            {"name": "again", "type": "In"},
            {"name": "date", "type": {"type": "int", "logicalType": "date"}},
            {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
            {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
        ]});
        let parsed = AvroSchema::parse(&schema.to_string()).unwrap();
        for (long, s, n) in [
            (0i64, String::new(), 0),
            (-1, "ü✓".to_owned(), 5),
            (i64::MAX, "long ".repeat(100), 300),
        ] {
            let text = || Avro::String(s.clone());
            let value = Avro::Record(vec![
                ("n".into(), Avro::Null),
                ("b".into(), Avro::Boolean(long % 2 == 0)),
                ("i".into(), Avro::Int(-123_456)),
                ("l".into(), Avro::Long(long)),
                ("f".into(), Avro::Float(1.5)),
                ("d".into(), Avro::Double(-2.25)),
                ("y".into(), Avro::Bytes(vec![0, 1, 255])),
                ("s".into(), text()),
                ("x".into(), Avro::Fixed(3, vec![7, 8, 9])),
                ("e".into(), Avro::Enum(2, "C".into())),
                ("u".into(), Avro::Union(1, Box::new(text()))),
                (
                    "a".into(),
                    Avro::Array((0..n).map(|i| Avro::Long(i64::MIN + i)).collect()),
                ),
                ("m".into(), Avro::Map([("k".to_owned(), text())].into())),
                ("r".into(), Avro::Record(vec![("z".into(), text())])),
                ("again".into(), Avro::Record(vec![("z".into(), text())])),
                ("date".into(), Avro::Date(19_000)),
                ("ts".into(), Avro::TimestampMillis(long)),
                (
                    "id".into(),
                    Avro::Uuid(apache_avro::Uuid::from_u128(
                        0x550e_8400_e29b_41d4_a716_4466_5544_0000,
                    )),
                ),
                (
                    "dec".into(),
                    Avro::Decimal(apache_avro::Decimal::from(vec![1u8, 2])),
                ),
            ]);
            let theirs = apache_avro::to_avro_datum(&parsed.schema, value.clone()).unwrap();
            let ours = parsed.write(value).unwrap();
            assert_eq!(&ours[..], &theirs[..]);
        }
        // A value that does not fit its schema is an error, not bytes.
        let short = AvroSchema::parse(
            r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}"#,
        )
        .unwrap();
        let wrong = Avro::Record(vec![("a".into(), Avro::String("x".into()))]);
        assert!(short.write(wrong).is_err());
    }
}
