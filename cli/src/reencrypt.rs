//! `reencrypt`: the plan (or, with `--apply`, the writes) that rewrites
//! every live key under an old key of either keyset, or split, through the
//! write rule, on the topic itself or to `--to-topic` (deletes copied), then
//! an audit of each partition written. With `--fields json`, what is under
//! an old key is a record's encrypted fields (`crate::fields`), rewritten
//! in the record's text.

use serde_json::json;

use crate::apply::{checkpoint_path, run, Writing};
use crate::args::{FieldsFormat, ReencryptArgs, UnencryptedArg};
use crate::fields::FieldKeys;
use crate::keysets;
use crate::outcome::{fail, Fail, Outcome, Output};
use crate::plan::Command;
use crate::read::{setup, Setup};

/// The keys of `--fields`: `--field-keyset` (else `--keyset`) and
/// `--deterministic-field-keyset`, with what each binds.
fn field_keys(args: &ReencryptArgs, s: &Setup) -> Result<Option<FieldKeys>, Fail> {
    let Some(FieldsFormat::Json) = args.fields else {
        return Ok(None);
    };
    if args.unencrypted == UnencryptedArg::PassThrough {
        return Err(fail(
            "--fields rewrites fields and leaves values that are not encrypted as they are: encrypt those with --unencrypted pass-through in a run of its own",
        ));
    }
    let decrypt_with = args.topic.decrypt_with.as_deref();
    let randomized = match &args.field_keyset {
        Some(path) => keysets::load(path, decrypt_with)?,
        None => s
            .keyset()
            .cloned()
            .ok_or_else(|| fail("--fields needs --keyset or --field-keyset"))?,
    };
    if randomized.is_deterministic() {
        return Err(fail(
            "--field-keyset holds a deterministic (AES-SIV) keyset: that is --deterministic-field-keyset",
        ));
    }
    let deterministic = match &args.deterministic_field_keyset {
        Some(path) => {
            let k = keysets::load(path, decrypt_with)?;
            if !k.is_deterministic() {
                return Err(fail(
                    "--deterministic-field-keyset must be a deterministic (AES-SIV) keyset",
                ));
            }
            Some(k)
        }
        None => None,
    };
    Ok(Some(FieldKeys {
        randomized,
        deterministic,
        aad: args.field_aad.into(),
        deterministic_aad: args.deterministic_field_aad.into(),
    }))
}

/// `tombstone-crypt reencrypt`: exit 1 while anything is left to write or
/// was skipped.
pub(crate) fn reencrypt(args: &ReencryptArgs, out: &Output) -> Result<Outcome, Fail> {
    let mut s = setup(&args.topic)?;
    if s.values.subject_key_set().is_some() {
        return Err(fail(
            "reencrypt does not rewrite values under subject keys (--subject-keyset): they stay under their subjects' keys",
        ));
    }
    s.fields = field_keys(args, &s)?;
    let to = args.to_topic.clone().unwrap_or_else(|| s.topic.clone());
    let same = to == s.topic;
    // The target's associated-data name: the one given, else the topic
    // written to.
    let target = Setup {
        topic: to.clone(),
        name: match &args.topic.aad_name {
            Some(name) => name.clone(),
            None => to.clone(),
        },
        ..s.clone()
    };
    let primary = s.keyset().map_or(0, |k| k.primary().0);
    let pass_through = args.unencrypted == UnencryptedArg::PassThrough;
    let writing = args.apply.then(|| Writing {
        checkpoint: checkpoint_path(&args.progress, "reencrypt", &s),
        resume: args.progress.resume.clone(),
        chunk_records: args.progress.chunk_records.max(1),
        fail_after: args.progress.fail_after_records,
        unchecked_resume: args.progress.resume_writes_first,
        without_topic_id: args.progress.without_topic_id,
        lock_dir: args.progress.lock_dir.clone(),
    });
    let command = Command::Reencrypt { pass_through };
    let done = run(
        &s,
        &target,
        command,
        "reencrypt",
        writing.as_ref(),
        out.quiet,
    )?;
    let plan = &done.plan;
    let values = plan.values;
    let old_forms = plan.old_forms;
    let (copied, rewritten_deletes) = if same {
        (0, plan.deletes)
    } else {
        (plan.deletes, 0)
    };
    let split = plan.planned_split;
    let records = values + plan.tombstones();
    let (skipped_broken, skipped_undecryptable, skipped_plaintext) = (
        plan.skipped_broken,
        plan.skipped_undecryptable,
        plan.skipped_plaintext,
    );
    let (skipped_fields, skipped_not_json) = (plan.skipped_fields, plan.skipped_not_json);
    let mut skipped = json!({"broken_tombstones": skipped_broken,
        "undecryptable": skipped_undecryptable, "plaintext": skipped_plaintext});
    let mut plan_text = match &s.fields {
        None => format!(
            "plan for {to}: {values} values to write under key {primary}, {old_forms} old key forms to delete, {copied} tombstones to copy, {rewritten_deletes} deletes to write again ({split} split keys), {records} records\n\
             skipped: {skipped_broken} broken tombstones (run repair first), {skipped_undecryptable} undecryptable, {skipped_plaintext} plaintext values{}\n",
            if pass_through { "" } else { " (--unencrypted pass-through encrypts them)" }
        ),
        Some(f) => format!(
            "plan for {to}: {values} values to write with their encrypted fields under key {}{} (encrypted values under key {primary}), {old_forms} old key forms to delete, {copied} tombstones to copy, {rewritten_deletes} deletes to write again ({split} split keys), {records} records\n\
             skipped: {skipped_broken} broken tombstones (run repair first), {skipped_undecryptable} undecryptable, {skipped_not_json} not JSON; {skipped_fields} with a string that reads as a field and does not authenticate at its path (that string left as it is, the other fields written)\n",
            f.randomized.primary().0,
            f.deterministic
                .as_ref()
                .map_or(String::new(), |d| format!(" (deterministic ones under key {})", d.primary().0)),
        ),
    };
    let mut json = json!({"to_topic": to, "primary_key_id": primary, "values_to_rewrite": values,
        "old_key_forms_to_delete": old_forms, "tombstones_to_copy": copied,
        "deletes_to_rewrite": rewritten_deletes, "split_keys": split,
        "records_to_write": records, "skipped": skipped, "applied": args.apply});
    if let Some(f) = &s.fields {
        skipped["fields_not_authenticating"] = json!(skipped_fields);
        skipped["not_json"] = json!(skipped_not_json);
        json["skipped"] = skipped;
        json["fields"] = json!({
            "format": "json",
            "primary_key_id": f.randomized.primary().0,
            "deterministic_primary_key_id": f.deterministic.as_ref().map(|d| d.primary().0),
        });
        // Which records, and where in them: never a field's plaintext.
        let listed = &done.before.counts.fields.listed;
        let mut records = Vec::with_capacity(listed.len());
        for (p, o, paths) in listed {
            plan_text.push_str(&format!(
                "record {}/{p} offset {o}: {} not authenticate at {}\n",
                s.topic,
                if paths.len() == 1 {
                    "a field does"
                } else {
                    "fields do"
                },
                paths.join(", ")
            ));
            records.push(json!({"partition": p, "offset": o, "paths": paths}));
        }
        json["fields"]["not_authenticating_records"] = json!(records);
    }
    let skipped_any = skipped_broken
        + skipped_undecryptable
        + skipped_plaintext
        + skipped_fields
        + skipped_not_json
        > 0;
    let Some(after) = &done.after else {
        plan_text.push_str("(run with --apply to write)\n");
        out.print(&plan_text, &json)?;
        return Ok(Outcome::of(skipped_any || plan.keys() > 0));
    };
    let (after_text, after_json) = after.report(&to, false);
    json["written"] = json!(done.written);
    json["written_again"] = json!(done.replayed);
    json["after"] = after_json;
    plan_text.push_str(&done.others.report(&mut json));
    plan_text.push_str(&format!(
        "wrote {} records{}; {to} now:\n{after_text}",
        done.written,
        if done.replayed > 0 {
            format!(
                " (and {} again, from the interrupted run's journals)",
                done.replayed
            )
        } else {
            String::new()
        }
    ));
    out.print(&plan_text, &json)?;
    Ok(Outcome::of(skipped_any || after.findings()))
}
