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
//!
//! One file per job: this one holds the schema and the fields its tags
//! reach; `binary` (a body checked, read and written), `json_form` (the
//! JSON form both ways) and `fields` (a field opened or sealed).

use std::collections::{HashMap, HashSet};

use apache_avro::schema::{Name, Schema};
use apache_avro::types::Value as Avro;
use serde_json::Value;

use super::tags::{reaches, MetadataTags};
use crate::error::Error;

mod binary;
mod fields;
mod json_form;
#[cfg(test)]
mod tests;

use binary::*;
pub(super) use fields::{open_field, seal_field};

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
