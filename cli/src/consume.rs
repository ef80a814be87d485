//! `consume`: a topic's records as JSON lines, decrypted, tombstones as
//! `null`: from this library's format with `--keyset`, from Confluent's
//! (CSFLE fields, CSPE payloads, JSON Schema) with `--schema-registry`.

use std::io::Write as _;

use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::confluent::ConfluentJson;
use tombstone_crypt::{Bytes, Context, DecryptingDeserializer, Deserializer as _};

use crate::read::{self, Rec, Setup};
use crate::{fail, keysets, ConsumeArgs, Fail, Outcome, Output};

/// What the values are read with.
enum Reader {
    /// This library's format.
    Ours(DecryptingDeserializer<Bytes>, String),
    /// Confluent's, with its registry.
    Confluent(Box<ConfluentJson>),
}

/// A record's key: its text when it is UTF-8, else its base64 under
/// `key_base64`.
fn key_fields(key: Option<&[u8]>, line: &mut serde_json::Map<String, Value>) {
    match key {
        None => {
            line.insert("key".into(), Value::Null);
        }
        Some(k) => match std::str::from_utf8(k) {
            Ok(text) => {
                line.insert("key".into(), Value::String(text.to_owned()));
            }
            Err(_) => {
                line.insert(
                    "key_base64".into(),
                    Value::String(base64::engine::general_purpose::STANDARD.encode(k)),
                );
            }
        },
    }
}

/// A decrypted value of our format as JSON: the JSON it holds, else its
/// text, else its base64 (`value_encoding: base64`).
fn plain_value(bytes: &[u8], line: &mut serde_json::Map<String, Value>) {
    if let Ok(v) = serde_json::from_slice::<Value>(bytes) {
        line.insert("value".into(), v);
    } else if let Ok(text) = std::str::from_utf8(bytes) {
        line.insert("value".into(), Value::String(text.to_owned()));
    } else {
        line.insert(
            "value".into(),
            Value::String(base64::engine::general_purpose::STANDARD.encode(bytes)),
        );
        line.insert("value_encoding".into(), json!("base64"));
    }
}

impl Reader {
    fn new(a: &ConsumeArgs) -> Result<Self, Fail> {
        match (&a.keyset, &a.schema_registry) {
            (Some(path), None) => {
                let keyset = keysets::load(path, a.decrypt_with.as_deref())?;
                let de = DecryptingDeserializer::new(Bytes, keyset).with_aad(a.aad.into());
                Ok(Reader::Ours(
                    de,
                    a.aad_name.clone().unwrap_or_else(|| a.topic.clone()),
                ))
            }
            (None, Some(url)) => Ok(Reader::Confluent(Box::new(read::confluent_codec(url)?))),
            _ => Err(fail("give exactly one of --keyset and --schema-registry")),
        }
    }

    /// The record's value, decrypted, into `line`; `Err` with why not.
    fn value(
        &self,
        topic: &str,
        r: &Rec<'_>,
        line: &mut serde_json::Map<String, Value>,
    ) -> Result<(), String> {
        match self {
            Reader::Ours(de, name) => {
                let ctx = match r.key {
                    Some(k) => Context::new(name).with_key(k),
                    None => Context::new(name),
                };
                match de
                    .deserialize(&ctx, r.value)
                    .map_err(|e| crate::chain(&e))?
                {
                    None => {
                        line.insert("value".into(), Value::Null);
                    }
                    Some(bytes) => plain_value(&bytes, line),
                }
            }
            Reader::Confluent(codec) => {
                let subject = format!("{topic}-value");
                let v = codec
                    .decode_for(Some(&subject), r.value)
                    .map_err(|e| crate::chain(&e))?;
                line.insert("value".into(), v.unwrap_or(Value::Null));
            }
        }
        Ok(())
    }
}

/// Prints every record of the topic's partitions, in partition and offset
/// order, to each partition's end: `{"partition", "offset", "key",
/// "value"}`, or `"error"` in place of `"value"` for a value that does not
/// decrypt (then exit 1); a present value that reads as JSON null has
/// `"broken_delete": true` beside its `null`.
pub(crate) fn consume(a: &ConsumeArgs, out: &Output) -> Result<Outcome, Fail> {
    let reader = Reader::new(a)?;
    let s = Setup::for_reading(
        &a.topic,
        &a.bootstrap,
        &a.config,
        a.timeout,
        a.partitions.clone(),
    )?;
    let (parts, _) = read::partitions(&s)?;
    let total: i64 = parts.iter().map(|(_, low, high)| (high - low).max(0)).sum();
    let bar = read::progress(u64::try_from(total).unwrap_or(0), out.quiet, "consume");
    let mut failed = 0u64;
    let mut stdout = std::io::stdout().lock();
    // To each partition's end as the reader finds it (librdkafka's end of
    // partition): the end offsets the broker reports are only a size for
    // the progress bar.
    for (partition, low, _) in parts {
        read::read_partition(&s, &a.topic, partition, low, None, &bar, |r| {
            let mut line = serde_json::Map::new();
            line.insert("partition".into(), json!(r.partition));
            line.insert("offset".into(), json!(r.offset));
            key_fields(r.key, &mut line);
            if let Err(why) = reader.value(&a.topic, r, &mut line) {
                failed += 1;
                line.insert("error".into(), Value::String(why));
            } else if r.value.is_some() && line.get("value") == Some(&Value::Null) {
                // A present value that reads as JSON null: not a delete
                // (compaction keeps it), though it prints as one.
                line.insert("broken_delete".into(), Value::Bool(true));
            }
            writeln!(stdout, "{}", Value::Object(line)).map_err(|e| fail(format!("stdout: {e}")))
        })?;
    }
    bar.finish_and_clear();
    Ok(if failed > 0 {
        Outcome::Findings
    } else {
        Outcome::Clean
    })
}
