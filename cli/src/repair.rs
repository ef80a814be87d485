//! `repair`: the plan (or, with `--apply`, the writes) that turns every
//! broken tombstone into a real delete and writes every split key's
//! deciding state again, through the write rule, then an audit of each
//! partition written.

use serde_json::json;

use crate::apply::{checkpoint_path, run, Writing};
use crate::args::RepairArgs;
use crate::outcome::{fail, Fail, Outcome, Output};
use crate::plan::Command;
use crate::read::setup;

/// `tombstone-crypt repair`: exit 1 while findings are left.
pub(crate) fn repair(args: &RepairArgs, out: &Output) -> Result<Outcome, Fail> {
    if args.apply && args.topic.null_marker.is_none() {
        return Err(fail(
            "repair --apply writes a tombstone for each value that decrypts to the null marker: name it (--null-marker empty, json-null, hex:HEX, or none on a topic that only this library's writers wrote, where an empty value is a value)",
        ));
    }
    let s = setup(&args.topic)?;
    let writing = args.apply.then(|| Writing {
        checkpoint: checkpoint_path(&args.progress, "repair", &s),
        resume: args.progress.resume.clone(),
        chunk_records: args.progress.chunk_records.max(1),
        fail_after: args.progress.fail_after_records,
        unchecked_resume: args.progress.resume_writes_first,
        without_topic_id: args.progress.without_topic_id,
        lock_dir: args.progress.lock_dir.clone(),
    });
    let done = run(
        &s,
        &s,
        Command::Repair,
        "repair",
        writing.as_ref(),
        out.quiet,
    )?;
    let plan = &done.plan;
    let (tombstones, values) = (plan.tombstones(), plan.values);
    let (before_text, before) = done.before.report(&s.topic, false);
    let mut json = json!({"audit": before, "broken_keys": plan.broken, "split_keys": plan.split,
        "unrepaired_split_keys": plan.unrepaired, "tombstones_planned": tombstones,
        "values_planned": values, "applied": args.apply});
    let what = format!(
        "{tombstones} tombstones and {values} values for {} broken and {} split keys{}",
        plan.broken,
        plan.split,
        if plan.unrepaired > 0 {
            format!(
                " ({} split keys whose newest value does not decrypt are left)",
                plan.unrepaired
            )
        } else {
            String::new()
        }
    );
    let Some(after) = &done.after else {
        let text = format!("{before_text}\nplan: {what} (run with --apply to write them)\n");
        out.print(&text, &json)?;
        return Ok(Outcome::of(done.before.findings()));
    };
    let (after_text, after_json) = after.report(&s.topic, false);
    json["tombstones_written"] = json!(tombstones);
    json["values_written"] = json!(values);
    json["records_written"] = json!(done.written);
    json["records_written_again"] = json!(done.replayed);
    json["after"] = after_json;
    let others = done.others.report(&mut json);
    let text = format!("{before_text}\nwrote {what}; the topic now:\n{after_text}{others}");
    out.print(&text, &json)?;
    Ok(Outcome::of(after.findings()))
}
