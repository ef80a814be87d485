//! `audit`: reads every partition of a topic to its end and keeps one
//! small state per key (never the values), by the reading rule ([`scan`]);
//! a keyset under which not one value decrypts is an error (exit 2), not a
//! topic full of findings.

use std::collections::BTreeMap;

use crate::key_state::{Form, KeyState, Kind};
use crate::read::{read_topic, setup, Setup};
use crate::record::{bound, key_of, open_value, Value};
use crate::report::Audit;
use crate::{fail, AuditArgs, Fail, Outcome, Output};

/// Reads the topic of `s` to its end and settles each key's state by the
/// reading rule.
///
/// # Errors
/// A read that fails, a KMS error on a value, or a keyset under which not
/// one value decrypts (the wrong keyset, `--aad` or `--value-key`).
pub(crate) fn scan(s: &Setup, quiet: bool) -> Result<Audit, Fail> {
    let mut a = Audit::default();
    let highs = read_topic(s, quiet, "audit", |r| {
        a.records += 1;
        let Some(wire) = r.key else {
            a.unkeyed += 1;
            return Ok(());
        };
        let key = key_of(s, wire);
        if !key.readable {
            a.undecryptable_record_keys += 1;
        }
        let (kind, key_id) = match r.value {
            None => {
                a.tombstones += 1;
                (Kind::Tombstone, None)
            }
            Some(v) => match open_value(s, r, v, bound(s, &key, wire))? {
                Value::Plain(p, id) => {
                    a.decrypted += 1;
                    if s.marker.matches(&p) {
                        a.marker_values += 1;
                        (Kind::Broken, Some(id))
                    } else {
                        (Kind::Live, Some(id))
                    }
                }
                Value::Undecryptable(id) => {
                    a.undecryptable_values += 1;
                    a.undecryptable_ids.insert(id);
                    (Kind::Undecryptable, Some(id))
                }
                Value::NotCiphertext => {
                    a.plaintext += 1;
                    (Kind::Plaintext, None)
                }
            },
        };
        if let Some(id) = key_id {
            *a.all_by_key_id.entry(id).or_default() += 1;
        }
        let state = a
            .keys
            .entry((r.partition, key.group))
            .or_insert_with(|| KeyState {
                encrypted: key.encrypted,
                forms: BTreeMap::new(),
                wire: Vec::new(),
                offset: r.offset,
                kind,
                key_id,
                split: false,
            });
        state.forms.insert(
            wire.to_vec(),
            Form {
                offset: r.offset,
                kind,
                key_id,
                readable: key.readable,
            },
        );
        Ok(())
    })?;
    for state in a.keys.values_mut() {
        state.settle();
    }
    a.partitions = highs.len();
    a.highs = highs;
    if a.decrypted == 0 && a.undecryptable_values > 0 {
        // Not one value decrypts: the wrong keyset (or --aad), not a topic
        // full of findings.
        let named: Vec<u32> = a.undecryptable_ids.iter().copied().collect();
        let have: Vec<u32> = s.keyset.keys().map(|(id, _)| id.0).collect();
        let keys = if a.undecryptable_record_keys > 0 {
            format!(
                " ({} record keys do not decrypt under --key-keyset either)",
                a.undecryptable_record_keys
            )
        } else {
            String::new()
        };
        return Err(fail(format!(
            "no value of {} decrypts under this keyset: {} ciphertexts name key ids {named:?}, the keyset holds {have:?}{keys}; is it the topic's keyset, with the --aad (and --aad-name, --value-key) it was written with?",
            s.topic, a.undecryptable_values
        )));
    }
    Ok(a)
}

/// `tombstone-crypt audit`: the report of [`scan`]; findings are exit 1.
pub(crate) fn audit(args: &AuditArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    let a = scan(&s, out.quiet)?;
    let (text, json) = a.report(&s.topic, args.list_keys);
    out.print(&text, &json)?;
    Ok(Outcome::of(a.findings()))
}
