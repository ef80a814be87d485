//! A Fetch partition's records decrypted, with the write rule's
//! tombstones of older key forms left out.

use std::cell::RefCell;

use bytes::Bytes;
use kafka_protocol::records::Record;
use tombstone_crypt::policy::{Read, TopicPolicy};
use zeroize::Zeroizing;

use super::transform::*;
use crate::budget::Budget;
use crate::hooks::Hooks;
use crate::stats::Tally;
use crate::wipe::Buf;

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
    // What the fast path counted, of the batches it wrote.
    let mut fast = Tally::default();
    // The batch's record keys as they came (their wire forms), in order.
    let forms: RefCell<Vec<Option<Bytes>>> = RefCell::new(Vec::new());
    let out = transform(
        raw,
        true,
        budget,
        wipe,
        Steps {
            record: |record: &mut Record| {
                let wire = decrypt_record(topic, policy, record, &mut tally)?;
                if keyed {
                    forms.borrow_mut().push(wire);
                }
                Ok(())
            },
            batch: |_: &[u8], list: &mut Vec<Record>| {
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
            direct: |records: &[u8], walked, base, out: &mut Buf| {
                if hooks.general_path {
                    return Ok(None);
                }
                Ok(decrypt_raw(
                    topic,
                    policy,
                    (records, walked, base),
                    out,
                    wipe.output,
                    &mut fast,
                ))
            },
        },
    )?;
    tally.merge(&fast);
    tally.commit(false);
    Ok(out)
}

/// The fast path of a Fetch batch's records (`records`, walked as
/// `walked`, against `base`): each decrypted straight from its bytes (its
/// plaintext key and value wiped once copied, when `wipe`) and
/// written to `out` with its attributes, deltas and headers copied as they
/// came, nothing decoded into kafka-protocol's `Record`. The same bytes the
/// general path writes, for every record it takes. It takes none whose
/// bytes the general path would not encode back as they came (it refuses
/// them: [`Parts::canonical`](crate::records::Parts)), none with a header
/// the policy encrypts, and, under record keys, none that reads as null
/// (the write rule's tombstones are taken out of a batch by
/// [`replaced_forms`], which needs it decoded), and none that does not
/// decrypt (the general path says why, or refuses the batch for another
/// record first): then `None`, its tally dropped, and the general path
/// takes the batch. Else the records kept (all of them).
fn decrypt_raw(
    topic: &str,
    policy: &TopicPolicy,
    (records, walked, base): (&[u8], crate::records::Walked, crate::records::Base),
    out: &mut Buf,
    wipe: bool,
    tally: &mut Tally,
) -> Option<usize> {
    let keyed = policy.record_keys().is_some();
    let mut batch = Tally::default();
    let take = |parts: crate::records::Parts<'_>| -> Result<bool, String> {
        let offset = base.offset.saturating_add(i64::from(parts.offset_delta));
        let opened = match (keyed, parts.key) {
            (true, Some(wire)) => Some(open_key(topic, policy, wire, offset, &mut batch)?),
            _ => None,
        };
        let key = if keyed {
            opened.as_deref().map(|k| &k[..])
        } else {
            parts.key
        };
        let value = open_value(topic, policy, key, parts.value, offset, &mut batch)?;
        if keyed && value.is_none() {
            return Ok(false);
        }
        crate::records::put_record(out, &parts, key, value.as_deref().map(|v| &v[..]))?;
        // Wiped at memset's speed (`Zeroizing` writes a byte at a time:
        // a tenth of the path's time).
        for mut plaintext in opened.into_iter().chain(value) {
            let v = std::mem::take(&mut *plaintext);
            if wipe {
                crate::wipe::vec(v);
            }
        }
        Ok(true)
    };
    // Under record keys, a null value may be a write rule's tombstone:
    // the general path's (known before anything is decrypted).
    let may = |parts: &crate::records::Parts<'_>| {
        may_take(policy, parts) && !(keyed && parts.value.is_none())
    };
    let kept = take_all(records, walked, may, take)?;
    tally.merge(&batch);
    Some(kept)
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
            let mut plaintext = open_key(topic, policy, &key, record.offset, tally)?;
            // The plaintext's own buffer, moved (not copied): the records
            // are wiped when dropped (`Records`).
            record.key = Some(Bytes::from(std::mem::take(&mut *plaintext)));
            wire = Some(key);
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
    record.value = open_value(
        topic,
        policy,
        key,
        record.value.as_deref(),
        record.offset,
        tally,
    )?
    .map(|mut pt| Bytes::from(std::mem::take(&mut *pt)));
    Ok(wire)
}

/// The record key `wire` (of the record at `offset`) decrypted, counted.
fn open_key(
    topic: &str,
    policy: &TopicPolicy,
    wire: &[u8],
    offset: i64,
    tally: &mut Tally,
) -> Result<Zeroizing<Vec<u8>>, String> {
    let plaintext = policy
        .read_key(topic, wire)
        .map_err(|e| format!("decrypting a record key at offset {offset}: {e}"))?;
    tally.keys += 1;
    Ok(plaintext)
}

/// The value `value` of the record at `offset` (with plaintext key `key`)
/// as the client reads it, counted: `None` for a tombstone, and for a
/// value whose subject was shredded (a delete, as the library's readers
/// take it: the client gets a tombstone).
fn open_value(
    topic: &str,
    policy: &TopicPolicy,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    offset: i64,
    tally: &mut Tally,
) -> Result<Option<Zeroizing<Vec<u8>>>, String> {
    match policy.read_value(topic, key, value) {
        Ok(Read::Tombstone) => {
            tally.tombstones += 1;
            Ok(None)
        }
        Ok(Read::Value(pt)) => {
            tally.values += 1;
            Ok(Some(pt))
        }
        Ok(Read::Shredded) => {
            tally.shredded += 1;
            Ok(None)
        }
        Ok(_) => Err("a value read as nothing this proxy knows".into()),
        Err(e) => Err(format!("decrypting the value at offset {offset}: {e}")),
    }
}
