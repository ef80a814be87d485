//! No tagged string is ever written in clear, and no untagged one is
//! encrypted: random JSON Schemas with tags in every place Confluent's
//! client reads them (inline on properties; the schema's `metadata.tags`
//! by exact path, by `**`, by `*` for each level, by `?`) and in places it
//! does not (on array items, on objects), and records of them.
//!
//! The oracle here is Confluent's rule, written again from its client's
//! walk (`json_schema.py` in confluent-kafka 2.16.1) and independent of the
//! codec's: a string is encrypted exactly when the nearest property it is
//! reached through (array items add no property) carries the rule's tag,
//! inline or by a metadata pattern matching its full name `$.a.b`. The
//! codec must either write each record so (every tagged string absent from
//! the bytes, every other string present, the record read back whole), or
//! refuse the schema, and refuse it only where Confluent's client would
//! fail to write (a tagged integer) or where a tag sits where it reads none
//! (array items, an object).
//!
//! Run on the codec before it read `metadata.tags` and tags on arrays, the
//! property fails (metadata tags were refused outright; a tag on an array
//! failed as the record was written).
#![cfg(feature = "confluent")]

use proptest::prelude::*;
use serde_json::{json, Map, Value};
use tombstone_crypt::confluent::{ConfluentJson, LocalKms};

#[derive(Clone, Debug)]
enum Node {
    Str {
        nullable: bool,
    },
    Int,
    Obj(Vec<Prop>),
    /// Items, and whether the items schema carries the tag inline.
    Arr(Box<Node>, bool),
}

#[derive(Clone, Debug)]
struct Prop {
    name: String,
    node: Node,
    inline: bool,
    /// 0: no metadata pattern; 1: the exact path; 2: `**.name`; 3: each
    /// level above it `*`; 4: `**.` and the name with its last character
    /// `?`.
    meta: u8,
}

fn node() -> impl Strategy<Value = Node> {
    let leaf = prop_oneof![
        3 => any::<bool>().prop_map(|nullable| Node::Str { nullable }),
        1 => Just(Node::Int),
    ];
    leaf.prop_recursive(4, 32, 4, |inner| {
        let prop = (
            inner.clone(),
            prop::bool::weighted(0.25),
            prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
        )
            .prop_map(|(node, inline, meta)| Prop {
                name: String::new(),
                node,
                inline,
                meta,
            });
        prop_oneof![
            2 => prop::collection::vec(prop, 1..4).prop_map(Node::Obj),
            1 => (inner, prop::bool::weighted(0.1)).prop_map(|(n, t)| Node::Arr(Box::new(n), t)),
        ]
    })
}

fn root() -> impl Strategy<Value = Node> {
    node().prop_map(|n| match n {
        Node::Obj(_) => n,
        other => Node::Obj(vec![Prop {
            name: String::new(),
            node: other,
            inline: false,
            meta: 0,
        }]),
    })
}

/// Names every property uniquely (`p0z`, `p1z`, ...).
fn name(node: &mut Node, next: &mut usize) {
    match node {
        Node::Obj(props) => {
            for p in props {
                p.name = format!("p{next}z");
                *next += 1;
                name(&mut p.node, next);
            }
        }
        Node::Arr(items, _) => name(items, next),
        _ => {}
    }
}

const PII: &str = "PII";

/// The JSON Schema of `node`, and the metadata patterns of its properties
/// (`path`: the property names above it).
fn schema(node: &Node, path: &mut Vec<String>, meta: &mut Map<String, Value>) -> Value {
    match node {
        Node::Str { nullable: false } => json!({"type": "string"}),
        Node::Str { nullable: true } => json!({"type": ["null", "string"]}),
        Node::Int => json!({"type": "integer"}),
        Node::Arr(items, tagged) => {
            let mut items = schema(items, path, meta);
            if *tagged {
                items["confluent:tags"] = json!([PII]);
            }
            json!({"type": "array", "items": items})
        }
        Node::Obj(props) => {
            let mut out = Map::new();
            for p in props {
                path.push(p.name.clone());
                let mut s = schema(&p.node, path, meta);
                if p.inline {
                    s["confluent:tags"] = json!([PII]);
                }
                let pattern = match p.meta {
                    1 => Some(format!("$.{}", path.join("."))),
                    2 => Some(format!("**.{}", p.name)),
                    3 => Some(format!("$.{}{}", "*.".repeat(path.len() - 1), p.name)),
                    4 => Some(format!("**.{}?", &p.name[..p.name.len() - 1])),
                    _ => None,
                };
                if let Some(pattern) = pattern {
                    meta.insert(pattern, json!([PII, "OTHER"]));
                }
                path.pop();
                out.insert(p.name.clone(), s);
            }
            json!({"type": "object", "properties": out})
        }
    }
}

/// A record of `node` with unique strings (`mk<n>q`); `full`: arrays of two
/// items and nullable strings present, else empty arrays and nulls.
/// `tagged`: whether the nearest property carries the tag. Each string is
/// pushed to `strings` with whether Confluent's client encrypts it.
fn record(
    node: &Node,
    tagged: bool,
    full: bool,
    next: &mut usize,
    strings: &mut Vec<(String, bool)>,
) -> Value {
    match node {
        Node::Str { nullable } if *nullable && !full => Value::Null,
        Node::Str { .. } => {
            let s = format!("mk{next}q");
            *next += 1;
            strings.push((s.clone(), tagged));
            Value::String(s)
        }
        Node::Int => {
            *next += 1;
            json!(*next)
        }
        Node::Arr(items, _) => {
            let n = if full { 2 } else { 0 };
            Value::Array(
                (0..n)
                    .map(|_| record(items, tagged, full, next, strings))
                    .collect(),
            )
        }
        Node::Obj(props) => Value::Object(
            props
                .iter()
                .map(|p| {
                    let tagged = p.inline || p.meta != 0;
                    (p.name.clone(), record(&p.node, tagged, full, next, strings))
                })
                .collect(),
        ),
    }
}

/// Whether Confluent's client cannot write such records, or reads a tag
/// here that it does not apply: a tagged property reaching an integer
/// (through arrays), an inline tag on an object (or an array of them), a
/// tag on array items.
fn refusal_justified(node: &Node, tagged: bool, inline: bool) -> bool {
    match node {
        Node::Str { .. } => false,
        Node::Int => tagged,
        Node::Arr(items, on_items) => *on_items || refusal_justified(items, tagged, inline),
        Node::Obj(props) => {
            inline
                || props
                    .iter()
                    .any(|p| refusal_justified(&p.node, p.inline || p.meta != 0, p.inline))
        }
    }
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn tagged_strings_never_in_clear_untagged_never_encrypted(mut tree in root()) {
        name(&mut tree, &mut 0);
        let mut meta = Map::new();
        let doc = schema(&tree, &mut Vec::new(), &mut meta);
        let mut registered = json!({
            "schemaType": "JSON",
            "schema": doc.to_string(),
            "ruleSet": {"domainRules": [{"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD",
                "type": "ENCRYPT", "tags": [PII], "params": {"encrypt.kek.name": "k"}}]},
        });
        if !meta.is_empty() {
            registered["metadata"] = json!({"tags": meta});
        }
        let mut codec = ConfluentJson::new(LocalKms::new("secret"));
        let justified = refusal_justified(&tree, false, false);
        if let Err(e) = codec.register(1, "t-value", &registered) {
            prop_assert!(justified, "refused a schema Confluent's client writes: {e}\n{registered}");
            return Ok(());
        }
        prop_assert!(!justified, "accepted a schema Confluent's client cannot write or reads a tag of: {registered}");
        for full in [true, false] {
            let mut strings = Vec::new();
            let value = record(&tree, false, full, &mut 0, &mut strings);
            let bytes = codec
                .encode("t-value", Some(&value))
                .map_err(|e| TestCaseError::fail(format!("{e}: {value}")))?
                .expect("a record");
            for (s, tagged) in &strings {
                prop_assert_eq!(
                    contains(&bytes, s),
                    !tagged,
                    "{} (tagged: {}) in {} under {}",
                    s,
                    tagged,
                    String::from_utf8_lossy(&bytes),
                    registered
                );
            }
            prop_assert_eq!(codec.decode(Some(&bytes)).unwrap(), Some(value));
        }
    }
}

// ---- Avro (feature confluent-avro) ----
//
// The same property for Avro: a string or bytes value is encrypted exactly
// when the nearest record field it is reached through (unions, arrays and
// maps add none) carries the tag, inline or by a metadata pattern matching
// the field's full name `ns.Record.field`.

#[cfg(feature = "confluent-avro")]
mod avro {
    use super::*;

    #[derive(Clone, Debug)]
    pub enum Avro {
        Str {
            nullable: bool,
        },
        Bytes,
        Long,
        /// A record: its name (given later) and fields.
        Rec(String, Vec<Field>),
        Arr(Box<Avro>),
        Map(Box<Avro>),
    }

    #[derive(Clone, Debug)]
    pub struct Field {
        name: String,
        node: Avro,
        inline: bool,
        /// 0: none; 1: the full name; 2: `**.field`; 3: `ns.*.field`;
        /// 4: `**.` and the name with its last character `?`.
        meta: u8,
    }

    fn node() -> impl Strategy<Value = Avro> {
        let leaf = prop_oneof![
            3 => any::<bool>().prop_map(|nullable| Avro::Str { nullable }),
            1 => Just(Avro::Bytes),
            1 => Just(Avro::Long),
        ];
        leaf.prop_recursive(4, 32, 4, |inner| {
            let field = (
                inner.clone(),
                prop::bool::weighted(0.25),
                prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8), 1 => Just(3u8), 1 => Just(4u8)],
            )
                .prop_map(|(node, inline, meta)| Field {
                    name: String::new(),
                    node,
                    inline,
                    meta,
                });
            prop_oneof![
                2 => prop::collection::vec(field, 1..4).prop_map(|f| Avro::Rec(String::new(), f)),
                1 => inner.clone().prop_map(|n| Avro::Arr(Box::new(n))),
                1 => inner.prop_map(|n| Avro::Map(Box::new(n))),
            ]
        })
    }

    pub fn root() -> impl Strategy<Value = Avro> {
        node().prop_map(|n| match n {
            Avro::Rec(..) => n,
            other => Avro::Rec(
                String::new(),
                vec![Field {
                    name: String::new(),
                    node: other,
                    inline: false,
                    meta: 0,
                }],
            ),
        })
    }

    /// Names records (`R0`, ...) and fields (`f0z`, ...) uniquely.
    pub fn name(node: &mut Avro, next: &mut usize) {
        match node {
            Avro::Rec(name_, fields) => {
                *name_ = format!("R{next}");
                *next += 1;
                for f in fields {
                    f.name = format!("f{next}z");
                    *next += 1;
                    name(&mut f.node, next);
                }
            }
            Avro::Arr(n) | Avro::Map(n) => name(n, next),
            _ => {}
        }
    }

    pub fn schema(node: &Avro, meta: &mut Map<String, Value>) -> Value {
        match node {
            Avro::Str { nullable: false } => json!("string"),
            Avro::Str { nullable: true } => json!(["null", "string"]),
            Avro::Bytes => json!("bytes"),
            Avro::Long => json!("long"),
            Avro::Arr(n) => json!({"type": "array", "items": schema(n, meta)}),
            Avro::Map(n) => json!({"type": "map", "values": schema(n, meta)}),
            Avro::Rec(name, fields) => {
                let fields: Vec<Value> = fields
                    .iter()
                    .map(|f| {
                        let mut out = json!({"name": f.name, "type": schema(&f.node, meta)});
                        if f.inline {
                            out["confluent:tags"] = json!([PII]);
                        }
                        let pattern = match f.meta {
                            1 => Some(format!("ns.{name}.{}", f.name)),
                            2 => Some(format!("**.{}", f.name)),
                            3 => Some(format!("ns.*.{}", f.name)),
                            4 => Some(format!("**.{}?", &f.name[..f.name.len() - 1])),
                            _ => None,
                        };
                        if let Some(p) = pattern {
                            meta.insert(p, json!([PII]));
                        }
                        out
                    })
                    .collect();
                json!({"type": "record", "name": name, "namespace": "ns", "fields": fields})
            }
        }
    }

    pub fn record(
        node: &Avro,
        tagged: bool,
        full: bool,
        next: &mut usize,
        strings: &mut Vec<(String, bool)>,
    ) -> Value {
        let mut marker = |strings: &mut Vec<(String, bool)>| {
            let s = format!("mk{next}q");
            *next += 1;
            strings.push((s.clone(), tagged));
            s
        };
        match node {
            Avro::Str { nullable } if *nullable && !full => Value::Null,
            Avro::Str { .. } => Value::String(marker(strings)),
            Avro::Bytes => json!(marker(strings).into_bytes()),
            Avro::Long => {
                *next += 1;
                json!(*next)
            }
            Avro::Arr(n) => Value::Array(
                (0..if full { 2 } else { 0 })
                    .map(|_| record(n, tagged, full, next, strings))
                    .collect(),
            ),
            Avro::Map(n) => Value::Object(
                (0..if full { 2 } else { 0 })
                    .map(|i| (format!("key{i}"), record(n, tagged, full, next, strings)))
                    .collect(),
            ),
            Avro::Rec(_, fields) => Value::Object(
                fields
                    .iter()
                    .map(|f| {
                        let tagged = f.inline || f.meta != 0;
                        (f.name.clone(), record(&f.node, tagged, full, next, strings))
                    })
                    .collect(),
            ),
        }
    }

    /// A tagged field reaching a `long` (Confluent's client fails to write
    /// it), or an inline tag on a field reaching a record (it encrypts
    /// nothing for it).
    pub fn refusal_justified(node: &Avro, tagged: bool, inline: bool) -> bool {
        match node {
            Avro::Str { .. } | Avro::Bytes => false,
            Avro::Long => tagged,
            Avro::Arr(n) | Avro::Map(n) => refusal_justified(n, tagged, inline),
            Avro::Rec(_, fields) => {
                inline
                    || fields
                        .iter()
                        .any(|f| refusal_justified(&f.node, f.inline || f.meta != 0, f.inline))
            }
        }
    }
}

#[cfg(feature = "confluent-avro")]
proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn avro_tagged_values_never_in_clear_untagged_never_encrypted(mut tree in avro::root()) {
        avro::name(&mut tree, &mut 0);
        let mut meta = Map::new();
        let doc = avro::schema(&tree, &mut meta);
        let mut registered = json!({
            "schemaType": "AVRO",
            "schema": doc.to_string(),
            "ruleSet": {"domainRules": [{"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD",
                "type": "ENCRYPT", "tags": [PII], "params": {"encrypt.kek.name": "k"}}]},
        });
        if !meta.is_empty() {
            registered["metadata"] = json!({"tags": meta});
        }
        let mut codec = ConfluentJson::new(LocalKms::new("secret"));
        let justified = avro::refusal_justified(&tree, false, false);
        if let Err(e) = codec.register(1, "t-value", &registered) {
            prop_assert!(justified, "refused a schema Confluent's client writes: {e}\n{registered}");
            return Ok(());
        }
        prop_assert!(!justified, "accepted a schema Confluent's client cannot write or reads a tag of: {registered}");
        for full in [true, false] {
            let mut strings = Vec::new();
            let value = avro::record(&tree, false, full, &mut 0, &mut strings);
            let bytes = codec
                .encode("t-value", Some(&value))
                .map_err(|e| TestCaseError::fail(format!("{e}: {value}")))?
                .expect("a record");
            for (s, tagged) in &strings {
                prop_assert_eq!(contains(&bytes, s), !tagged, "{} (tagged: {}) under {}", s, tagged, registered);
            }
            prop_assert_eq!(codec.decode(Some(&bytes)).unwrap(), Some(value));
        }
    }
}
