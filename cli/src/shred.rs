//! `shred`: data subjects' keys removed from their key store, so that
//! every copy of their values reads as a delete.

use std::io::Read as _;

use serde_json::json;

use tombstone_crypt::shred::Shred;

use crate::args::{KeyStoreArgs, ShredArgs, ShredMode};
use crate::outcome::{fail, Fail, Outcome, Output};
use crate::read::subject_keys;

/// What `shred` does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    /// Shred the subjects given.
    Shred,
    /// `shred check`.
    Check,
    /// `shred rewrap`.
    Rewrap,
    /// `shred create-key-store`.
    Create,
}

/// A subject given in hex.
fn unhex(text: &str, at: &str) -> Result<Vec<u8>, Fail> {
    let bytes = text.as_bytes();
    if !bytes.len().is_multiple_of(2) || !bytes.iter().all(u8::is_ascii_hexdigit) {
        return Err(fail(format!(
            "{at}: not hex (--hex: two hex digits a byte)"
        )));
    }
    Ok(bytes
        .chunks_exact(2)
        .filter_map(|p| std::str::from_utf8(p).ok())
        .filter_map(|p| u8::from_str_radix(p, 16).ok())
        .collect())
}

/// The subjects `args` names, as bytes: `--subject`s, then each line of
/// `--subjects` (empty lines skipped), exactly as written (or in hex with
/// `--hex`). A byte-order mark, a line with a space or tab at an end, or a
/// line that is not UTF-8 is refused: nothing is shredded.
fn subjects(args: &ShredArgs) -> Result<Vec<Vec<u8>>, Fail> {
    let mut all = Vec::new();
    for (i, s) in args.subject.iter().enumerate() {
        let at = format!("--subject #{}", i + 1);
        all.push(if args.hex {
            unhex(s, &at)?
        } else {
            s.as_bytes().to_vec()
        });
    }
    if let Some(path) = &args.subjects {
        let mut text = Vec::new();
        if path.as_os_str() == "-" {
            std::io::stdin()
                .lock()
                .read_to_end(&mut text)
                .map_err(|e| fail(format!("--subjects -: {e}")))?;
        } else {
            text = std::fs::read(path)
                .map_err(|e| fail(format!("--subjects {}: {e}", path.display())))?;
        }
        if text.starts_with(b"\xef\xbb\xbf") {
            return Err(fail(format!(
                "--subjects {}: starts with a byte-order mark, which would be part of the first subject: remove it (nothing was shredded)",
                path.display()
            )));
        }
        for (n, line) in text.split(|b| *b == b'\n').enumerate() {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.is_empty() {
                continue;
            }
            let at = format!("--subjects {} line {}", path.display(), n + 1);
            let Ok(line) = std::str::from_utf8(line) else {
                return Err(fail(format!(
                    "{at}: not UTF-8 (give such subjects in hex with --hex; nothing was shredded)"
                )));
            };
            if line.starts_with([' ', '\t']) || line.ends_with([' ', '\t']) {
                return Err(fail(format!(
                    "{at}: a space or tab at an end, which would be part of the subject (give such subjects in hex with --hex; nothing was shredded)"
                )));
            }
            all.push(if args.hex {
                unhex(line, &at)?
            } else {
                line.as_bytes().to_vec()
            });
        }
    }
    if all.is_empty() {
        return Err(fail("no subject: --subject S or --subjects FILE"));
    }
    Ok(all)
}

/// A subject as the report shows it: its text, or its hex with `--hex`.
fn shown(subject: &[u8], hex_input: bool) -> String {
    match std::str::from_utf8(subject) {
        Ok(s) if !hex_input => s.to_owned(),
        _ => hex(subject),
    }
}

/// Runs `shred`. Each subject is shredded once the key store has
/// acknowledged it, and said: shredded (its DEKs removed) or without a key
/// (exit 1: the store never had one for it). A failure stops the run and
/// says how many were shredded before it (run it again: a shred is
/// idempotent).
pub(crate) fn shred(args: &ShredArgs, out: &Output) -> Result<Outcome, Fail> {
    // The subcommand, or the flags that spelled it before.
    let (store, mode) = match &args.mode {
        Some(ShredMode::Check(s)) => (s, Mode::Check),
        Some(ShredMode::Rewrap(s)) => (s, Mode::Rewrap),
        Some(ShredMode::CreateKeyStore(s)) => (s, Mode::Create),
        None if args.check => (&args.store, Mode::Check),
        None if args.rewrap => (&args.store, Mode::Rewrap),
        None if args.create_key_store => (&args.store, Mode::Create),
        None => (&args.store, Mode::Shred),
    };
    if store.keys.subject_kek.is_none() {
        return Err(fail(
            "--subject-keyset FILE is required (the subject keys' KEK)",
        ));
    }
    let list = if mode == Mode::Shred {
        subjects(args)?
    } else {
        Vec::new()
    };
    let config = match &store.bootstrap {
        Some(b) => Some(crate::client::client_config(b, &store.client)?),
        None => None,
    };
    let keys = subject_keys(
        &store.keys,
        store.decrypt_with.as_deref(),
        config.as_ref(),
        std::time::Duration::from_secs(store.client.connect_timeout.max(1)),
        mode == Mode::Create,
        false,
    )?
    .ok_or_else(|| fail("--subject-keyset FILE is required (the subject keys' KEK)"))?
    .0;
    match mode {
        Mode::Create => {
            out.print(
                "key store made, with its naming key under the KEK\n",
                &json!({"created": true}),
            )?;
            return Ok(Outcome::Clean);
        }
        Mode::Check => return check(store, &keys, config.as_ref(), out),
        Mode::Rewrap => {
            let n = keys
                .rewrap()
                .map_err(|e| fail(format!("rewrap: {}", crate::outcome::chain(&e))))?;
            out.print(
                &format!(
                    "{} wrapped under the KEK's primary key\n",
                    counted(n, "key-store record")
                ),
                &json!({"rewrapped": n}),
            )?;
            return Ok(Outcome::Clean);
        }
        Mode::Shred => {}
    }
    let mut text = String::new();
    let mut report = Vec::with_capacity(list.len());
    let (mut shredded, mut before, mut no_key) = (0usize, 0usize, 0usize);
    for (done, subject) in list.iter().enumerate() {
        let found = keys.shred(subject).map_err(|e| {
            fail(format!(
                "{done} of {} shredded, then: {}",
                subjects_n(list.len()),
                crate::outcome::chain(&e)
            ))
        })?;
        let name = shown(subject, args.hex);
        let state = match found {
            Shred::Removed(n) => {
                shredded += 1;
                let s = if n == 1 { "" } else { "s" };
                text.push_str(&format!("shredded          {name} ({n} key{s})\n"));
                "shredded"
            }
            Shred::AlreadyShredded => {
                before += 1;
                text.push_str(&format!("shredded before   {name}\n"));
                "shredded_before"
            }
            _ => {
                no_key += 1;
                text.push_str(&format!(
                    "no key            {name} (the key store never had one: spelled otherwise than when written, or the wrong key store?)\n"
                ));
                "no_key"
            }
        };
        report.push(json!({"subject": name, "state": state, "deks": found.removed()}));
    }
    text.push_str(&format!(
        "{}: {shredded} shredded, {before} shredded before, {no_key} without a key\n",
        subjects_n(list.len())
    ));
    out.print(
        &text,
        &json!({"shredded": shredded, "shredded_before": before, "no_key": no_key, "subjects": report}),
    )?;
    Ok(if no_key == 0 {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}

/// `n subjects`, or `1 subject`.
fn subjects_n(n: usize) -> String {
    counted(n, "subject")
}

/// `n` and `noun`, in the plural unless `n` is 1.
fn counted(n: usize, noun: &str) -> String {
    format!("{n} {noun}{}", if n == 1 { "" } else { "s" })
}

/// Hex of a subject tag.
fn hex(tag: &[u8]) -> String {
    tag.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a key-store topic holds, record by record: records, tombstones,
/// shred markers, and records whose key is not `subject tag | DEK id`.
fn topic_counts(
    config: &tombstone_crypt::kafka::rdkafka::ClientConfig,
    topic: &str,
) -> Result<serde_json::Value, Fail> {
    use tombstone_crypt::kafka::KafkaChangelog;
    use tombstone_crypt::store::Changelog as _;
    let records = KafkaChangelog::with_config(config.clone(), topic)
        .and_then(|log| log.records())
        .map_err(|e| fail(format!("read {topic}: {}", crate::outcome::chain(&e))))?;
    let tombstones = records.iter().filter(|r| r.value.is_none()).count();
    let markers = records
        .iter()
        .filter(|r| r.key.len() == 24 && r.key[16..] == [0xff; 8] && r.value.is_some())
        .count();
    let foreign = records.iter().filter(|r| r.key.len() != 24).count();
    Ok(json!({
        "records": records.len(),
        "tombstones": tombstones,
        "shred_markers": markers,
        "foreign_records": foreign,
    }))
}

/// `shred check`: the key store read whole, every record opened.
fn check(
    args: &KeyStoreArgs,
    keys: &tombstone_crypt::shred::SubjectKeys,
    config: Option<&tombstone_crypt::kafka::rdkafka::ClientConfig>,
    out: &Output,
) -> Result<Outcome, Fail> {
    let c = keys
        .check()
        .map_err(|e| fail(format!("check: {}", crate::outcome::chain(&e))))?;
    let listed = |tags: &[[u8; 16]]| tags.iter().take(100).map(|t| hex(t)).collect::<Vec<_>>();
    let mut report = json!({
        "subjects": c.subjects,
        "deks": c.deks,
        "naming_key": c.naming_key,
        "naming_keys": c.naming_keys,
        "shredded_subjects": c.shredded_subjects,
        "shredded_deks": c.shredded_deks,
        "shreds_not_opening": c.shreds_not_opening.len(),
        "shreds_not_opening_tags": listed(&c.shreds_not_opening),
        "several_deks": c.several_deks.len(),
        "several_deks_tags": listed(&c.several_deks),
        "not_opening": c.not_opening.len(),
        "not_opening_tags": listed(&c.not_opening),
        "not_under_primary": c.not_under_primary,
    });
    let mut clean = c.is_clean();
    if let (Some(topic), Some(config)) = (&args.keys.subject_key_topic, config) {
        let counts = topic_counts(config, topic)?;
        clean &= counts["foreign_records"] == 0;
        report["topic"] = counts;
    }
    let text = format!(
        "{}, {}, {}, {} shredded ({}); {} with several DEKs, {} that do not open, {} of shreds that do not open, {} not under the KEK's primary key\n",
        counted(c.subjects, "subject"),
        counted(c.deks, "DEK"),
        counted(c.naming_keys, "naming key"),
        counted(c.shredded_subjects, "subject"),
        counted(c.shredded_deks, "DEK"),
        counted(c.several_deks.len(), "subject"),
        counted(c.not_opening.len(), "record"),
        counted(c.shreds_not_opening.len(), "record"),
        c.not_under_primary
    );
    out.print(&text, &report)?;
    Ok(if clean {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
