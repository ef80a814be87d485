//! `consume`: a topic's records as JSON lines, decrypted, tombstones as
//! `null`: from this library's format with `--keyset`, values under subject
//! keys (`tombstone_crypt::shred`) with `--subject-keyset` (a shredded
//! subject's value as `null` with `"shredded": true`), from Confluent's
//! (CSFLE fields, CSPE payloads, JSON Schema) with `--schema-registry`.
//!
//! Every topic is read through the setup every topic command reads with
//! (`read::Setup`, its policy built in one place, `read::policy`), as the
//! proxy reads: values under a keyset or under subject keys, one or the
//! other, or in Confluent's format (its codec reads them); record keys
//! under `--key-keyset`. A value's format comes from the options, never
//! from its first byte.

use std::io::Write as _;
use std::sync::Arc;

use base64::Engine as _;
use serde_json::{json, Value};
use tombstone_crypt::error::ErrorKind;
use tombstone_crypt::policy::{Read, TopicPolicy};
use tombstone_crypt::Error;

use crate::args::{ConsumeArgs, NullMarker};
use crate::outcome::{fail, Fail, Outcome, Output};
use crate::read::{self, Rec, Setup};

/// Why a value did not print: it does not decrypt (an `"error"` line, exit
/// 1), or the command cannot go on (a key store, its topic or a KMS
/// failed: exit 2, as `audit`).
enum Unread {
    Value(String),
    Command(Fail),
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

/// The setup `a` asks for, read through the one policy every topic
/// command reads with ([`read::policy`]): values under a keyset
/// (`--keyset`), under subject keys (`--subject-keyset`) or in Confluent's
/// format (`--schema-registry`, its codec reading them), record keys under
/// `--key-keyset`. The flags are checked before a keyset or key store is
/// opened.
fn setup(a: &ConsumeArgs) -> Result<Setup, Fail> {
    let subject_kek = a.subject.subject_kek.is_some();
    let confluent =
        match (&a.keyset, &a.schema_registry) {
            (Some(_), Some(_)) => return Err(fail("give one of --keyset and --schema-registry")),
            (None, Some(_)) if subject_kek => {
                return Err(fail(
                    "--subject-keyset reads this library's format: not with --schema-registry",
                ))
            }
            (None, Some(url)) => Some(read::confluent_codec(url)?),
            (None, None) if !subject_kek => return Err(fail(
                "give --keyset, --subject-keyset (values under subject keys) or --schema-registry",
            )),
            (_, None) => None,
        };
    let mut s = Setup::for_reading(
        &a.topic,
        &a.bootstrap,
        &a.client,
        a.timeout,
        a.partitions.clone(),
    )?;
    let policy = read::policy(
        &read::Sources {
            keyset: a.keyset.as_deref(),
            key_keyset: a.key_keyset.as_deref(),
            decrypt_with: a.decrypt_with.as_deref(),
            aad: a.aad.into(),
            subject: &a.subject,
            strict: a.strict,
        },
        confluent.is_some(),
        &s.config,
        s.connect_timeout,
    )?;
    s.values = policy.values;
    s.kek = policy.kek;
    s.confluent = confluent.map(Arc::new);
    s.name = a.aad_name.clone().unwrap_or_else(|| a.topic.clone());
    Ok(s)
}

/// The record's key as the policy reads it: its plaintext under
/// `--key-keyset`, else as written.
fn key_of(s: &Setup, r: &Rec<'_>) -> Result<Option<Vec<u8>>, String> {
    match r.key {
        Some(wire) if s.key_keyset().is_some() => s
            .values
            .read_key(&s.name, wire)
            .map(|k| Some(k.to_vec()))
            .map_err(|e| crate::outcome::chain(&e)),
        key => Ok(key.map(<[u8]>::to_vec)),
    }
}

/// The record's value, decrypted, into `line`; `Err` with why not.
fn value_of(
    s: &Setup,
    r: &Rec<'_>,
    key: Option<&[u8]>,
    marker: &NullMarker,
    line: &mut serde_json::Map<String, Value>,
) -> Result<(), Unread> {
    let topic = &s.topic;
    let environment = |e: &Error| {
        Unread::Command(fail(format!(
            "the value at {topic}/{} offset {}: {}",
            r.partition,
            r.offset,
            crate::outcome::chain(e)
        )))
    };
    if let Some(codec) = &s.confluent {
        let subject = format!("{topic}-value");
        let v = codec
            .decode_for(Some(&subject), r.value)
            .map_err(|e| match e {
                // The registry or a KMS failed: nothing is known of the
                // record (exit 2, as audit).
                e if e.kind() == ErrorKind::Environment => environment(&e),
                e => Unread::Value(crate::outcome::chain(&e)),
            })?;
        line.insert("value".into(), v.unwrap_or(Value::Null));
        return Ok(());
    }
    let plain = match s.values.read_value(&s.name, key, r.value) {
        Ok(Read::Value(bytes)) => Some(bytes),
        Ok(Read::Tombstone) => None,
        // Its subject was shredded: a delete, told apart from a tombstone.
        Ok(Read::Shredded) => {
            line.insert("value".into(), Value::Null);
            line.insert("shredded".into(), Value::Bool(true));
            return Ok(());
        }
        Ok(_) => return Err(Unread::Value("a value read as nothing known".into())),
        Err(e) if e.kind() == ErrorKind::Environment => return Err(environment(&e)),
        Err(e) => return Err(Unread::Value(hinted(&s.values, r.value, &e))),
    };
    match plain {
        None => {
            line.insert("value".into(), Value::Null);
        }
        Some(bytes) => {
            // A present value whose plaintext is the null marker: a
            // delete a broken layer wrote as a value (audit counts it).
            if marker.matches(&bytes) {
                line.insert("broken_delete".into(), Value::Bool(true));
            }
            plain_value(&bytes, line);
        }
    }
    Ok(())
}

/// Why a present value did not read under `policy`, with a hint when the
/// value looks like the other kind of values (a hint only: it is read as
/// the policy says).
fn hinted(policy: &TopicPolicy, value: Option<&[u8]>, e: &Error) -> String {
    let why = crate::outcome::chain(e);
    let looks_subject = value.is_some_and(tombstone_crypt::shred::has_subject_shape);
    match (policy.subject_key_set().is_some(), looks_subject) {
        (false, true) => format!(
            "{why} (the value may be under subject keys: give --subject-keyset and its key store, --subject-key-store or --subject-key-topic, in place of --keyset)"
        ),
        (true, false) => format!(
            "{why} (read as a value under subject keys, as --subject-keyset says; a value under a keyset is read with --keyset)"
        ),
        _ => why,
    }
}

/// Prints every record of the topic's partitions, in partition and offset
/// order, to each partition's end: `{"partition", "offset", "key",
/// "value"}`, or `"error"` in place of `"value"` for a value that does not
/// decrypt (then exit 1); a value whose subject was shredded has
/// `"shredded": true` beside its `null` (a delete: exit 0); a present
/// value that reads as JSON null, or whose plaintext is the null marker
/// (`--null-marker`, `empty` by default), has `"broken_delete": true`.
pub(crate) fn consume(a: &ConsumeArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(a)?;
    let marker = a.null_marker.clone().unwrap_or(NullMarker::Empty);
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
            // The key as written, decrypted under --key-keyset.
            let key = key_of(&s, r);
            key_fields(key.as_ref().map_or(r.key, Option::as_deref), &mut line);
            let value = match &key {
                Ok(key) => value_of(&s, r, key.as_deref(), &marker, &mut line),
                Err(why) => Err(Unread::Value(format!(
                    "the record key does not decrypt under --key-keyset: {why}"
                ))),
            };
            match value {
                Err(Unread::Command(f)) => return Err(f),
                Err(Unread::Value(why)) => {
                    failed += 1;
                    line.insert("error".into(), Value::String(why));
                }
                Ok(()) => {}
            }
            if r.value.is_some()
                && line.get("value") == Some(&Value::Null)
                && !line.contains_key("shredded")
            {
                // A present value that reads as JSON null: not a delete
                // (compaction keeps it), though it prints as one. (A
                // shredded subject's value is a delete.)
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
