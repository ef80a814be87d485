//! `reencrypt`: the plan (or, with `--apply`, the writes) that rewrites
//! every live key under an old key of either keyset, or split, through the
//! write rule, on the topic itself or to `--to-topic` (deletes copied), then
//! an audit of the topic written.

use serde_json::json;

use crate::audit::scan;
use crate::key_state::Kind;
use crate::plan::{Action, Planned, Planner};
use crate::read::{consumer, end_offsets, setup, Setup};
use crate::write::{check_ordered, check_unchanged, produce};
use crate::{fail, Fail, Outcome, Output, ReencryptArgs, UnencryptedArg};

/// `tombstone-crypt reencrypt`: exit 1 while anything is left to write or
/// was skipped.
pub(crate) fn reencrypt(args: &ReencryptArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    if args.apply {
        check_ordered(&s.config)?;
    }
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
    let a = scan(&s, out.quiet)?;
    if !same {
        let parts = end_offsets(&consumer(&s)?, &target)?.len();
        if parts != a.partitions {
            return Err(fail(format!(
                "{to} has {parts} partitions and {} has {}: each record keeps its partition, and a key's partition follows the count",
                s.topic, a.partitions
            )));
        }
    }
    let primary = s.keyset.primary().0;
    let pass_through = args.unencrypted == UnencryptedArg::PassThrough;
    let planner = Planner::new(&s, &target);
    let mut plan = Vec::new();
    let (mut skipped_broken, mut skipped_undecryptable, mut skipped_plaintext) = (0u64, 0u64, 0u64);
    for ((partition, group), state) in a.sorted() {
        let forms = planner.forms(group, state)?;
        let action = match state.kind {
            // A deleted key is never published again: its tombstones are
            // copied to another topic, and written again here only when
            // another form still holds a value.
            Kind::Tombstone if !same || state.split => Action::Delete,
            Kind::Tombstone => continue,
            Kind::Broken => {
                skipped_broken += 1;
                continue;
            }
            Kind::Undecryptable => {
                skipped_undecryptable += 1;
                continue;
            }
            Kind::Plaintext if pass_through => Action::Value { reencrypt: true },
            Kind::Plaintext => {
                skipped_plaintext += 1;
                continue;
            }
            Kind::Live => {
                let rekey = state.key_id != Some(primary);
                let rebind = planner.rebinds(state, &forms);
                let moved = state.wire != forms.primary();
                if same && !(rekey || rebind || moved || state.split) {
                    continue;
                }
                Action::Value {
                    reencrypt: rekey || rebind,
                }
            }
        };
        plan.push(planner.plan(*partition, state, forms, action));
    }
    let values = plan.iter().filter(|p| p.action != Action::Delete).count() as u64;
    let old_forms: u64 = plan.iter().map(Planned::old_forms).sum();
    let deletes = plan.iter().filter(|p| p.action == Action::Delete).count() as u64;
    let (copied, rewritten_deletes) = if same { (0, deletes) } else { (deletes, 0) };
    let split = plan.iter().filter(|p| p.state.split).count() as u64;
    let records: u64 = values + plan.iter().map(Planned::tombstones).sum::<u64>();
    let skipped = json!({"broken_tombstones": skipped_broken,
        "undecryptable": skipped_undecryptable, "plaintext": skipped_plaintext});
    let mut plan_text = format!(
        "plan for {to}: {values} values to write under key {primary}, {old_forms} old key forms to delete, {copied} tombstones to copy, {rewritten_deletes} deletes to write again ({split} split keys), {records} records\n\
         skipped: {skipped_broken} broken tombstones (run repair first), {skipped_undecryptable} undecryptable, {skipped_plaintext} plaintext values{}\n",
        if pass_through { "" } else { " (--unencrypted pass-through encrypts them)" }
    );
    let mut json = json!({"to_topic": to, "primary_key_id": primary, "values_to_rewrite": values,
        "old_key_forms_to_delete": old_forms, "tombstones_to_copy": copied,
        "deletes_to_rewrite": rewritten_deletes, "split_keys": split,
        "records_to_write": records, "skipped": skipped, "applied": args.apply});
    let skipped_any = skipped_broken + skipped_undecryptable + skipped_plaintext > 0;
    if !args.apply {
        plan_text.push_str("(run with --apply to write)\n");
        out.print(&plan_text, &json)?;
        return Ok(Outcome::of(skipped_any || !plan.is_empty()));
    }
    planner.read_values(&mut plan, out.quiet)?;
    let writes = planner.writes(&plan)?;
    if same && !writes.is_empty() {
        check_unchanged(&s, &a)?;
    }
    let written = produce(&s, &to, &writes, out.quiet)?;
    let after = scan(&target, out.quiet)?;
    let (after_text, after_json) = after.report(&to, false);
    json["written"] = json!(written);
    json["after"] = after_json;
    plan_text.push_str(&format!("wrote {written} records; {to} now:\n{after_text}"));
    out.print(&plan_text, &json)?;
    Ok(Outcome::of(skipped_any || after.findings()))
}
