//! Which fields an `ENCRYPT` rule reaches, as Confluent's client decides
//! it: a field's tags are its inline `confluent:tags` and the tags of every
//! entry of the schema's `metadata.tags` whose path pattern matches the
//! field's full name; a rule reaches a field that carries one of its tags,
//! or every field when it names none.
//!
//! Full names are Confluent's: for JSON Schema `$.a.b` (array items add
//! nothing: a tag on an array property reaches each of its items), for Avro
//! the record's full name and the field's (`ns.Record.field`).
//!
//! Path patterns are Confluent's wildcards (its `wildcard_match`): `?` one
//! character other than `.`, `*` any run of characters other than `.`,
//! `**` any run of characters. A pattern with `[`, `]` or `\` (which
//! Confluent's client passes on to a regular expression) refuses the
//! schema.

use serde_json::Value;

use crate::error::Error;

/// The most entries of `metadata.tags` read, and the longest pattern.
const MAX_PATTERNS: usize = 1024;
const MAX_PATTERN_LEN: usize = 1024;

/// One element of a path pattern.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tok {
    /// A character matched as itself.
    Char(char),
    /// `?`: one character other than `.`.
    One,
    /// `*`: any run of characters other than `.`.
    Name,
    /// `**`: any run of characters (a regular expression's `.*`, which
    /// stops at a line feed).
    Any,
}

/// How many steps of pattern matching one schema may take (a pattern's
/// length times a name's, for each pattern with wildcards and each field):
/// beyond it the schema is refused rather than read for minutes.
const MATCH_BUDGET: u64 = 100_000_000;

/// A schema's `metadata.tags`: path patterns and their tags.
#[derive(Debug, Default)]
pub(super) struct MetadataTags {
    patterns: Vec<(Vec<Tok>, Vec<String>)>,
    /// Matching steps left (see [`MATCH_BUDGET`]).
    budget: std::cell::Cell<u64>,
}

impl MetadataTags {
    /// Reads `metadata.tags` of a schema as the registry returns it (an
    /// object of patterns, each with an array of tags).
    ///
    /// # Errors
    /// [`Error::Confluent`] for tags that are not an object of arrays of
    /// strings, more than 1,024 patterns, a pattern longer than 1,024
    /// characters or holding `[`, `]` or `\`.
    pub(super) fn from_schema(schema: &Value) -> Result<Self, Error> {
        let Some(tags) = schema.get("metadata").and_then(|m| m.get("tags")) else {
            return Ok(Self::default());
        };
        let map = match tags {
            Value::Null => return Ok(Self::default()),
            Value::Object(map) => map,
            _ => {
                return Err(Error::confluent(
                    "the schema's metadata.tags is not an object",
                ))
            }
        };
        if map.len() > MAX_PATTERNS {
            return Err(Error::confluent(
                "the schema's metadata.tags has more than 1024 patterns",
            ));
        }
        let mut patterns = Vec::with_capacity(map.len());
        for (pattern, tags) in map {
            let tags = tags
                .as_array()
                .and_then(|t| {
                    t.iter()
                        .map(|t| t.as_str().map(str::to_owned))
                        .collect::<Option<Vec<_>>>()
                })
                .ok_or_else(|| {
                    Error::confluent(
                        "the schema's metadata.tags holds a pattern whose tags are not an array of strings",
                    )
                })?;
            patterns.push((parse(pattern)?, tags));
        }
        Ok(MetadataTags {
            patterns,
            budget: std::cell::Cell::new(MATCH_BUDGET),
        })
    }

    /// Whether there are no patterns.
    pub(super) fn is_empty(&self) -> bool {
        self.patterns.iter().all(|(_, t)| t.is_empty())
    }

    /// The tags that the patterns matching `full_name` give it.
    ///
    /// # Errors
    /// [`Error::Confluent`] once the schema's matching has taken more than
    /// [`MATCH_BUDGET`] steps.
    pub(super) fn tags_of(&self, full_name: &str) -> Result<Vec<&str>, Error> {
        if self.patterns.is_empty() {
            return Ok(Vec::new());
        }
        let text: Vec<char> = full_name.chars().collect();
        let mut out = Vec::new();
        for (pattern, tags) in &self.patterns {
            let literal = pattern.iter().all(|t| matches!(t, Tok::Char(_)));
            let hit = if literal {
                pattern.len() == text.len()
                    && pattern.iter().zip(&text).all(|(t, c)| *t == Tok::Char(*c))
            } else {
                let cost = (pattern.len() as u64 + 1) * (text.len() as u64 + 1);
                let left = self.budget.get().checked_sub(cost).ok_or_else(|| {
                    Error::confluent(
                        "the schema's metadata.tags patterns and field names are too many and too long to match \
                         (over 10^8 steps): refusing the schema",
                    )
                })?;
                self.budget.set(left);
                matches(pattern, &text)
            };
            if hit {
                out.extend(tags.iter().map(String::as_str));
            }
        }
        Ok(out)
    }
}

/// Refuses `confluent:tags` anywhere in `doc` that is not an array of
/// strings (Confluent's client takes `set(tags)`: an object's keys, a
/// string's characters), and a schema nested deeper than 128 levels.
pub(super) fn check_inline_tags(doc: &Value) -> Result<(), Error> {
    fn walk(v: &Value, depth: usize) -> Result<(), Error> {
        if depth > 128 {
            return Err(Error::confluent("a schema nested more than 128 levels"));
        }
        match v {
            Value::Object(map) => {
                if let Some(tags) = map.get("confluent:tags") {
                    let strings = tags
                        .as_array()
                        .is_some_and(|t| t.iter().all(Value::is_string));
                    if !strings && !tags.is_null() {
                        return Err(Error::confluent(
                            "confluent:tags that is not an array of strings (Confluent's client reads an object's keys \
                             or a string's characters as tags): refusing the schema rather than guess",
                        ));
                    }
                }
                map.values().try_for_each(|v| walk(v, depth + 1))
            }
            Value::Array(items) => items.iter().try_for_each(|v| walk(v, depth + 1)),
            _ => Ok(()),
        }
    }
    walk(doc, 0)
}

/// The inline tags of a JSON subschema (`confluent:tags`).
pub(super) fn inline(schema: &Value) -> impl Iterator<Item = &str> {
    schema
        .get("confluent:tags")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
}

/// Whether a rule with `rule_tags` (none: every field) reaches a field
/// carrying `field_tags`.
pub(super) fn reaches<'a>(
    rule_tags: &[String],
    mut field_tags: impl Iterator<Item = &'a str>,
) -> bool {
    rule_tags.is_empty() || field_tags.any(|t| rule_tags.iter().any(|r| r == t))
}

/// The most levels of a JSON Schema walked.
const MAX_DEPTH: usize = 64;

/// The paths (property names, `*` for each item of an array) of the string
/// fields of a JSON Schema that a rule with `rule_tags` (none: every field)
/// reaches, as Confluent's client walks the schema: properties (full name
/// `$.a.b`) and array items (a tag on the array reaches each item).
///
/// # Errors
/// [`Error::Confluent`], refusing the schema, for what would leave a field
/// Confluent's client encrypts in plaintext here, or read its ciphertext as
/// a value: a reached field that is not a string (Confluent's client fails
/// to write it), a construct not walked here (`allOf`, `anyOf`, `oneOf`,
/// `$ref`, tuple items, a list of types other than a string and null)
/// where the rule may reach a field, an inline tag that Confluent's client
/// does not read (on the root, on array items, in definitions) or that
/// reaches nothing (on an object or an untyped property), and a schema
/// nested deeper than 64 levels.
pub(super) fn json_fields(
    doc: &Value,
    rule_tags: &[String],
    meta: &MetadataTags,
) -> Result<Vec<Vec<String>>, Error> {
    let mut walk = JsonWalk {
        rule_tags,
        meta,
        out: Vec::new(),
        inline_read: 0,
    };
    walk.node(doc, None, "$", &mut Vec::new())?;
    if !rule_tags.is_empty() {
        let all = count_inline(doc, rule_tags);
        if all != walk.inline_read {
            return Err(Error::confluent(format!(
                "{} tag(s) of the rule sit where Confluent's client does not read them (on the schema's root, \
                 on array items, in definitions, or inside allOf, anyOf, oneOf, not, if/then/else): \
                 refusing the schema rather than guess; tag the property",
                all.saturating_sub(walk.inline_read)
            )));
        }
    }
    Ok(walk.out)
}

/// The field a subschema belongs to: its full name, whether the rule
/// reaches it, and whether an inline tag does.
struct Field<'a> {
    name: &'a str,
    reached: bool,
    inline: bool,
}

struct JsonWalk<'a> {
    rule_tags: &'a [String],
    meta: &'a MetadataTags,
    out: Vec<Vec<String>>,
    inline_read: usize,
}

impl JsonWalk<'_> {
    fn node(
        &mut self,
        schema: &Value,
        field: Option<&Field<'_>>,
        base: &str,
        path: &mut Vec<String>,
    ) -> Result<(), Error> {
        if path.len() > MAX_DEPTH {
            return Err(Error::confluent("a schema nested more than 64 levels"));
        }
        let Value::Object(map) = schema else {
            return Ok(());
        };
        let reached = field.is_some_and(|f| f.reached);
        let name = field.map_or(base, |f| f.name);
        let refuse = |what: &str| {
            Err(Error::confluent(format!(
                "the field {:?}: {what}: refusing the schema rather than leave it in plaintext",
                crate::error::printable(name)
            )))
        };
        let unwalked = ["allOf", "anyOf", "oneOf", "$ref"]
            .into_iter()
            .find(|k| map.contains_key(*k));
        if let Some(k) = unwalked {
            // Confluent's client follows these; this walk does not.
            let may_reach = reached
                || !self.meta.is_empty()
                || self.rule_tags.is_empty()
                || count_inline(schema, self.rule_tags) > 0;
            if may_reach {
                return refuse(&format!(
                    "{k} where an encryption rule may reach a field: not implemented here"
                ));
            }
            return Ok(());
        }
        if let Some(items) = map.get("items") {
            // Confluent's client follows `items` only when the value is a
            // list, else it goes on to the type: a schema that may be
            // either is not walked here.
            let array_only = match map.get("type") {
                None => !map.contains_key("properties"),
                Some(Value::String(t)) => t == "array",
                Some(Value::Array(types)) => types.iter().all(|t| t == "array" || t == "null"),
                Some(_) => false,
            };
            if !array_only
                && (reached
                    || !self.meta.is_empty()
                    || self.rule_tags.is_empty()
                    || count_inline(schema, self.rule_tags) > 0)
            {
                return refuse(
                    "items beside a type other than array (Confluent's client takes one or the other by the value) \
                     where an encryption rule may reach a field: not implemented here",
                );
            }
            if !items.is_object() {
                if reached || count_inline(items, self.rule_tags) > 0 || !self.meta.is_empty() {
                    return refuse("tuple items where an encryption rule may reach a field: not implemented here");
                }
                return Ok(());
            }
            path.push("*".to_owned());
            let r = self.node(items, field, base, path);
            path.pop();
            return r;
        }
        let ty = map.get("type");
        let string_or_null = |t: &Value| match t {
            Value::String(s) => s == "string",
            Value::Array(types) => {
                types.iter().any(|t| t == "string")
                    && types.iter().all(|t| t == "string" || t == "null")
            }
            _ => false,
        };
        let enumerated = map.get("const").is_some_and(|c| !c.is_null())
            || map.get("enum").is_some_and(|e| !e.is_null());
        let props = map.get("properties").and_then(Value::as_object);
        let only = |types: &[&str]| match ty {
            Some(Value::Array(list)) => list
                .iter()
                .all(|t| t.as_str().is_some_and(|t| types.contains(&t))),
            _ => false,
        };
        let record = match ty {
            Some(Value::String(t)) => t == "object" && props.is_some_and(|p| !p.is_empty()),
            // Confluent's client takes the type the value validates against.
            Some(Value::Array(_)) => only(&["object", "null"]) && props.is_some(),
            Some(_) => false,
            None => props.is_some(),
        };
        if matches!(ty, Some(Value::Array(_)))
            && !record
            && !only(&["string", "null"])
            && (reached
                || !self.meta.is_empty()
                || self.rule_tags.is_empty()
                || count_inline(schema, self.rule_tags) > 0)
        {
            return refuse(
                "a list of types where an encryption rule may reach a field: not implemented here",
            );
        }
        if record && !enumerated {
            if field.is_some_and(|f| f.inline) {
                return refuse("a tag on an object (Confluent's client encrypts none of its properties for it)");
            }
            for (prop, sub) in props.into_iter().flatten() {
                let full = format!("{base}.{prop}");
                let by_inline = !self.rule_tags.is_empty() && reaches(self.rule_tags, inline(sub));
                let by_meta = self.meta.tags_of(&full)?;
                let reached = reaches(self.rule_tags, inline(sub).chain(by_meta.iter().copied()));
                self.inline_read += usize::from(by_inline);
                path.push(prop.clone());
                let r = self.node(
                    sub,
                    Some(&Field {
                        name: &full,
                        reached,
                        inline: by_inline,
                    }),
                    &full,
                    path,
                );
                path.pop();
                r?;
            }
            return Ok(());
        }
        if !reached {
            return Ok(());
        }
        match ty {
            _ if enumerated => refuse("reached by an encryption rule but an enum or const (Confluent's client fails to write it)"),
            Some(t) if string_or_null(t) => {
                self.out.push(path.clone());
                Ok(())
            }
            Some(Value::String(t)) if matches!(t.as_str(), "integer" | "number" | "boolean") => {
                refuse("reached by an encryption rule but not a string (Confluent's client fails to write it)")
            }
            _ if field.is_some_and(|f| f.inline) => refuse("a tag that reaches nothing (Confluent's client encrypts only strings, with their type given)"),
            _ => Ok(()),
        }
    }
}

/// How many subschemas anywhere in `schema` carry one of `tags` inline.
fn count_inline(schema: &Value, tags: &[String]) -> usize {
    match schema {
        Value::Object(map) => {
            usize::from(
                !tags.is_empty()
                    && map.contains_key("confluent:tags")
                    && reaches(tags, inline(schema)),
            ) + map.values().map(|v| count_inline(v, tags)).sum::<usize>()
        }
        Value::Array(items) => items.iter().map(|v| count_inline(v, tags)).sum(),
        _ => 0,
    }
}

fn parse(pattern: &str) -> Result<Vec<Tok>, Error> {
    if pattern.len() > MAX_PATTERN_LEN {
        return Err(Error::confluent(
            "a pattern of the schema's metadata.tags is longer than 1024 characters",
        ));
    }
    if pattern.contains(['[', ']', '\\']) {
        return Err(Error::confluent(format!(
            "the pattern {:?} of the schema's metadata.tags holds [, ] or \\ (a regular expression to Confluent's client): not implemented here, so the schema is refused",
            crate::error::printable(pattern)
        )));
    }
    // As Confluent's client: `**.*` is `**`.
    let pattern = pattern.replace("**.*", "**");
    let mut out = Vec::new();
    let mut chars = pattern.chars().peekable();
    while let Some(c) = chars.next() {
        out.push(match c {
            '*' if chars.peek() == Some(&'*') => {
                chars.next();
                Tok::Any
            }
            '*' => Tok::Name,
            '?' => Tok::One,
            c => Tok::Char(c),
        });
    }
    Ok(out)
}

/// Whether the whole of `text` matches `pattern`, in time
/// `pattern.len() × text.len()`.
fn matches(pattern: &[Tok], text: &[char]) -> bool {
    // can[j]: the first i tokens match text[..j].
    let mut can = vec![false; text.len() + 1];
    can[0] = true;
    for tok in pattern {
        let mut next = vec![false; text.len() + 1];
        for j in 0..=text.len() {
            next[j] = match tok {
                Tok::Char(c) => j > 0 && can[j - 1] && text[j - 1] == *c,
                Tok::One => j > 0 && can[j - 1] && text[j - 1] != '.',
                Tok::Name => can[j] || (j > 0 && next[j - 1] && text[j - 1] != '.'),
                Tok::Any => can[j] || (j > 0 && next[j - 1] && text[j - 1] != '\n'),
            };
        }
        can = next;
    }
    can[text.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str, pattern: &str) -> bool {
        matches(&parse(pattern).unwrap(), &text.chars().collect::<Vec<_>>())
    }

    #[test]
    fn wildcards_match_as_confluents_client() {
        // The examples of Confluent's wildcard_match.
        assert!(m("eve", "eve*"));
        assert!(m("alice.bob.eve", "a*.bob.eve"));
        assert!(m("alice.bob.eve", "a*.bob.e*"));
        assert!(!m("alice.bob.eve", "a*"));
        assert!(m("alice.bob.eve", "a**"));
        assert!(!m("alice.bob.eve", "alice.bob*"));
        assert!(m("alice.bob.eve", "alice.bob**"));
        // And the paths of this crate's tests.
        assert!(m("$.ssn", "**.ssn"));
        assert!(m("$.a.ssn", "**.ssn"));
        assert!(!m("$.ssnx", "**.ssn"));
        assert!(m("ex.C.d", "ex.C.d"));
        assert!(!m("exxC.d", "ex.C.d"));
        assert!(m("$.a.b", "$.*.b"));
        assert!(!m("$.a.c.b", "$.*.b"));
        assert!(m("$.a.c.b", "$.**.*"));
        assert!(m("$.ab", "$.a?"));
        assert!(!m("$.a.", "$.a?"));
        assert!(!m("$.a\nb", "$.**"));
        assert!(m("", ""));
        assert!(!m("a", ""));
    }

    #[test]
    fn patterns_it_cannot_read_refuse_the_schema() {
        for bad in ["$.[ab]", "$.a\\.b", "]"] {
            let schema = serde_json::json!({"metadata": {"tags": {bad: ["PII"]}}});
            assert!(MetadataTags::from_schema(&schema).is_err(), "{bad}");
        }
        let schema = serde_json::json!({"metadata": {"tags": {"$.a": "PII"}}});
        assert!(MetadataTags::from_schema(&schema).is_err());
        let schema = serde_json::json!({"metadata": {"tags": {"**.a": ["PII"], "$.b": []}}});
        let t = MetadataTags::from_schema(&schema).unwrap();
        assert_eq!(t.tags_of("$.x.a").unwrap(), ["PII"]);
        assert!(t.tags_of("$.b").unwrap().is_empty());
    }
}
