//! `repair`: the plan (or, with `--apply`, the writes) that turns every
//! broken tombstone into a real delete and writes every split key's
//! deciding state again, through the write rule, then a second audit.

use serde_json::json;

use crate::audit::scan;
use crate::key_state::Kind;
use crate::plan::{Action, Planned, Planner};
use crate::read::setup;
use crate::write::{check_ordered, check_unchanged, produce};
use crate::{Fail, Outcome, Output, RepairArgs};

/// `tombstone-crypt repair`: exit 1 while findings are left.
pub(crate) fn repair(args: &RepairArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    if args.apply {
        check_ordered(&s.config)?;
    }
    let a = scan(&s, out.quiet)?;
    let planner = Planner::new(&s, &s);
    let mut plan = Vec::new();
    let (mut broken, mut split, mut unrepaired) = (0u64, 0u64, 0u64);
    for ((partition, group), state) in a.sorted() {
        broken += u64::from(state.kind == Kind::Broken);
        split += u64::from(state.split);
        if state.kind != Kind::Broken && !state.split {
            continue;
        }
        // The key's state by the reading rule, written again through the
        // write rule.
        let forms = planner.forms(group, state)?;
        let action = match state.kind {
            Kind::Tombstone | Kind::Broken => Action::Delete,
            Kind::Plaintext => Action::Value { reencrypt: false },
            Kind::Live => Action::Value {
                reencrypt: planner.rebinds(state, &forms),
            },
            Kind::Undecryptable if !planner.rebinds(state, &forms) => {
                Action::Value { reencrypt: false }
            }
            Kind::Undecryptable => {
                unrepaired += 1;
                continue;
            }
        };
        plan.push(planner.plan(*partition, state, forms, action));
    }
    let tombstones: u64 = plan.iter().map(Planned::tombstones).sum();
    let values = plan.iter().filter(|p| p.action != Action::Delete).count() as u64;
    let (before_text, before) = a.report(&s.topic, false);
    let mut json = json!({"audit": before, "broken_keys": broken, "split_keys": split,
        "unrepaired_split_keys": unrepaired, "tombstones_planned": tombstones,
        "values_planned": values, "applied": args.apply});
    let what = format!(
        "{tombstones} tombstones and {values} values for {broken} broken and {split} split keys{}",
        if unrepaired > 0 {
            format!(" ({unrepaired} split keys whose newest value does not decrypt are left)")
        } else {
            String::new()
        }
    );
    if !args.apply {
        let text = format!("{before_text}\nplan: {what} (run with --apply to write them)\n");
        out.print(&text, &json)?;
        return Ok(Outcome::of(a.findings()));
    }
    planner.read_values(&mut plan, out.quiet)?;
    let writes = planner.writes(&plan)?;
    if !writes.is_empty() {
        check_unchanged(&s, &a)?;
    }
    produce(&s, &s.topic, &writes, out.quiet)?;
    let after = scan(&s, out.quiet)?;
    let (after_text, after_json) = after.report(&s.topic, false);
    json["tombstones_written"] = json!(tombstones);
    json["values_written"] = json!(values);
    json["after"] = after_json;
    let text = format!("{before_text}\nwrote {what}; the topic now:\n{after_text}");
    out.print(&text, &json)?;
    Ok(Outcome::of(after.findings()))
}
