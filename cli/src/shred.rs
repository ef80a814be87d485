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
    let list = if args.rewrap {
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
