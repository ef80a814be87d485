//! `shred`: data subjects' keys removed from their key store, so that
//! every copy of their values reads as a delete.

use std::io::BufRead as _;

use serde_json::json;

use crate::read::subject_keys;
use crate::{fail, Fail, Outcome, Output, ShredArgs};

/// The subjects `args` names: `--subject`s, then each line of
/// `--subjects` (empty lines skipped).
fn subjects(args: &ShredArgs) -> Result<Vec<String>, Fail> {
    let mut all = args.subject.clone();
    if let Some(path) = &args.subjects {
        let reader: Box<dyn std::io::BufRead> = if path.as_os_str() == "-" {
            Box::new(std::io::stdin().lock())
        } else {
            let file = std::fs::File::open(path)
                .map_err(|e| fail(format!("--subjects {}: {e}", path.display())))?;
            Box::new(std::io::BufReader::new(file))
        };
        for line in reader.lines() {
            let line = line.map_err(|e| fail(format!("--subjects: {e}")))?;
            let line = line.trim_end_matches('\r');
            if !line.is_empty() {
                all.push(line.to_owned());
            }
        }
    }
    if all.is_empty() {
        return Err(fail("no subject: --subject S or --subjects FILE"));
    }
    Ok(all)
}

/// Runs `shred`. Each subject is shredded once the key store has
/// acknowledged it; a failure stops the run and says how many were
/// shredded before it (run it again: a shred is idempotent).
pub(crate) fn shred(args: &ShredArgs, out: &Output) -> Result<Outcome, Fail> {
    let list = if args.rewrap || args.check {
        Vec::new()
    } else {
        subjects(args)?
    };
    let config = match &args.bootstrap {
        Some(b) => {
            let mut c = tombstone_crypt::kafka::rdkafka::ClientConfig::new();
            c.set("bootstrap.servers", b);
            for kv in &args.config {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| fail(format!("-X {kv}: expected key=value")))?;
                c.set(k.trim(), v.trim());
            }
            Some(c)
        }
        None => None,
    };
    let keys = subject_keys(&args.keys, args.decrypt_with.as_deref(), config.as_ref())?
        .ok_or_else(|| fail("--subject-kek FILE is required (the subject keys' KEK)"))?;
    if args.check {
        return check(args, &keys, config.as_ref(), out);
    }
    if args.rewrap {
        let n = keys
            .rewrap()
            .map_err(|e| fail(format!("rewrap: {}", crate::chain(&e))))?;
        out.print(
            &format!("{n} key-store records wrapped under the KEK's primary key\n"),
            &json!({"rewrapped": n}),
        )?;
        return Ok(Outcome::Clean);
    }
    for (done, subject) in list.iter().enumerate() {
        keys.shred(subject.as_bytes()).map_err(|e| {
            fail(format!(
                "{done} of {} subjects shredded, then: {}",
                list.len(),
                crate::chain(&e)
            ))
        })?;
    }
    out.print(
        &format!("{} subjects shredded\n", list.len()),
        &json!({"shredded": list.len()}),
    )?;
    Ok(Outcome::Clean)
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
        .map_err(|e| fail(format!("read {topic}: {}", crate::chain(&e))))?;
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

/// `shred --check`: the key store read whole, every record opened.
fn check(
    args: &ShredArgs,
    keys: &tombstone_crypt::shred::SubjectKeys,
    config: Option<&tombstone_crypt::kafka::rdkafka::ClientConfig>,
    out: &Output,
) -> Result<Outcome, Fail> {
    let c = keys
        .check()
        .map_err(|e| fail(format!("check: {}", crate::chain(&e))))?;
    let listed = |tags: &[[u8; 16]]| tags.iter().take(100).map(|t| hex(t)).collect::<Vec<_>>();
    let mut report = json!({
        "subjects": c.subjects,
        "deks": c.deks,
        "naming_key": c.naming_key,
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
        "{} subjects, {} DEKs; {} subjects with several DEKs, {} records that do not open, {} not under the KEK's primary key\n",
        c.subjects,
        c.deks,
        c.several_deks.len(),
        c.not_opening.len(),
        c.not_under_primary
    );
    out.print(&text, &report)?;
    Ok(if clean {
        Outcome::Clean
    } else {
        Outcome::Findings
    })
}
