//! `audit`: the topic read by the reading rule ([`crate::scan`]), and its
//! report; findings are exit 1.

use crate::args::AuditArgs;
use crate::outcome::{Fail, Outcome, Output};
use crate::read::{confluent_codec, setup_with};
use crate::scan::scan;

/// `tombstone-crypt audit`: the report of [`scan`]; findings are exit 1.
pub(crate) fn audit(args: &AuditArgs, out: &Output) -> Result<Outcome, Fail> {
    let confluent = args
        .schema_registry
        .as_deref()
        .map(confluent_codec)
        .transpose()?;
    let s = setup_with(&args.topic, confluent)?;
    let a = scan(&s, out.quiet, args.list_keys)?;
    let (mut text, mut json) = a.report(&s.topic, args.list_keys);
    // Which plaintext counted as a broken delete (`empty` unless named).
    let marker = s.marker.name();
    let named = if args.topic.null_marker.is_some() {
        ""
    } else {
        " (the default; --null-marker names another)"
    };
    text.push_str(&format!("null marker        {marker}{named}\n"));
    json["null_marker"] = serde_json::Value::String(marker);
    out.print(&text, &json)?;
    Ok(Outcome::of(a.findings()))
}
