//! A Fetch partition's records decrypted, with the write rule's
//! tombstones of older key forms left out.

use std::cell::RefCell;

use bytes::Bytes;
use kafka_protocol::records::Record;
use tombstone_crypt::policy::{Read, TopicPolicy};

use super::transform::*;
use crate::budget::Budget;
use crate::hooks::Hooks;
use crate::stats::Tally;

/// Decrypts the records of a Fetch partition's record batches. A partial
/// batch at the end (the broker cut the response at its size limit) is
/// dropped, as a client drops it.
///
/// Under record keys, the write rule's tombstones are left out of a batch
/// ([`replaced_forms`]): the client reads what it wrote, and the batch's
/// record count says how many it holds (its offsets keep their gaps, as
/// after compaction).
///
/// # Errors
/// As [`encrypt`], and when a value or key does not authenticate.
pub(crate) fn decrypt(
    topic: &str,
    policy: &TopicPolicy,
    hooks: &Hooks,
    raw: &Bytes,
    budget: &Budget,
) -> Result<Bytes, String> {
    let mut tally = Tally::default();
    let wipe = Wipe {
        input: false,
        output: hooks.wipes(),
    };
    let keyed = policy.record_keys().is_some();
    // The batch's record keys as they came (their wire forms), in order.
    let forms: RefCell<Vec<Option<Bytes>>> = RefCell::new(Vec::new());
    let out = transform(
        raw,
        true,
        budget,
        wipe,
        |record| {
            let wire = decrypt_record(topic, policy, record, &mut tally)?;
            if keyed {
                forms.borrow_mut().push(wire);
            }
            Ok(())
        },
        |_, list| {
            let forms = std::mem::take(&mut *forms.borrow_mut());
            if keyed {
                // Their decrypted keys are wiped as the batch's are.
                drop(Records {
                    list: replaced_forms(list, &forms),
                    wipe: wipe.output,
                });
            }
            Ok(None)
        },
    )?;
    tally.commit(false);
    Ok(out)
}

/// Takes out of a decrypted Fetch batch (`list`, whose record keys came
/// as `forms`) the write rule's tombstones, and returns them: a record
/// with no value whose wire form is not the form of its key's last record
/// in the batch. Every write through the rule ends on the key's primary
/// form (the proxy's `prepend`, and the library's writers: a delete is
/// its older forms' tombstones then the primary's), so these are the
/// tombstones of older forms, which delete forms no client names; read as
/// `(key, null)` they would hand every reader a delete nobody wrote before
/// each record written after a rotation. A tombstone under the key's
/// primary form is a client's delete and stays, whatever follows it in
/// the batch (a library writer's delete then put of one key in one batch
/// reads as both). A key's last record always stays, so the key ends as
/// it would have. Linear in the batch (one map of its keys).
///
/// One case reads a delete less than was written: a writer whose key
/// keyset rotated between a delete and a later write of the key in the
/// same batch (the delete's primary form is older than the batch's last
/// record's); the key still ends as written.
pub(super) fn replaced_forms(list: &mut Vec<Record>, forms: &[Option<Bytes>]) -> Vec<Record> {
    // Only a record with no value is ever taken out: a batch without one
    // (the common case) needs no map.
    if forms.len() != list.len() || list.iter().all(|r| r.value.is_some()) {
        return Vec::new();
    }
    let mut out = vec![false; list.len()];
    {
        // Per key, from the end: the wire form of its last record.
        let mut last: std::collections::HashMap<&[u8], &[u8]> = std::collections::HashMap::new();
        for i in (0..list.len()).rev() {
            let (Some(key), Some(form)) = (list[i].key.as_deref(), forms[i].as_deref()) else {
                continue;
            };
            match last.get(key) {
                None => {
                    last.insert(key, form);
                }
                Some(&latest) => out[i] = list[i].value.is_none() && latest != form,
            }
        }
    }
    if !out.contains(&true) {
        return Vec::new();
    }
    let mut taken = Vec::new();
    for (record, take) in std::mem::take(list).into_iter().zip(out) {
        if take {
            taken.push(record);
        } else {
            list.push(record);
        }
    }
    taken
}

/// Decrypts `record` in place; its record key as it came (its wire form,
/// moved out of the record) when the policy encrypts record keys.
pub(super) fn decrypt_record(
    topic: &str,
    policy: &TopicPolicy,
    record: &mut Record,
    tally: &mut Tally,
) -> Result<Option<Bytes>, String> {
    let mut wire = None;
    if policy.record_keys().is_some() {
        if let Some(key) = record.key.take() {
            let mut plaintext = policy
                .read_key(topic, &key[..])
                .map_err(|e| format!("decrypting a record key at offset {}: {e}", record.offset))?;
            // The plaintext's own buffer, moved (not copied): the records
            // are wiped when dropped (`Records`).
            record.key = Some(Bytes::from(std::mem::take(&mut *plaintext)));
            wire = Some(key);
            tally.keys += 1;
        }
    }
    let key = record.key.as_deref();
    for (name, value) in record.headers.iter_mut() {
        let Some(v) = value else { continue };
        let opened = policy
            .read_header(topic, key, name.as_str(), v)
            .map_err(|e| {
                format!(
                    "decrypting the header {:?} at offset {}: {e}",
                    name.as_str(),
                    record.offset
                )
            })?;
        if let Some(mut pt) = opened {
            *v = Bytes::from(std::mem::take(&mut *pt));
        }
    }
    match policy.read_value(topic, key, record.value.as_deref()) {
        Ok(Read::Tombstone) => tally.tombstones += 1,
        Ok(Read::Value(mut pt)) => {
            tally.values += 1;
            record.value = Some(Bytes::from(std::mem::take(&mut *pt)));
        }
        // Its subject was shredded: a delete, as the library's readers
        // take it. The client gets a tombstone.
        Ok(Read::Shredded) => {
            tally.shredded += 1;
            record.value = None;
        }
        Ok(_) => return Err("a value read as nothing this proxy knows".into()),
        Err(e) => {
            return Err(format!(
                "decrypting the value at offset {}: {e}",
                record.offset
            ))
        }
    }
    Ok(wire)
}
