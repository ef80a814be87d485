//! A Produce partition's records encrypted, with the write rule's
//! tombstones of older key forms at the front of the client's batch.

use std::cell::RefCell;

use bytes::Bytes;
use kafka_protocol::records::Record;
use tombstone_crypt::policy::TopicPolicy;

use super::transform::*;
use crate::budget::Budget;
use crate::hooks::Hooks;
use crate::sequences::Batch;
use crate::stats::{self, Event, Tally};

/// A Produce partition's records, encrypted.
#[derive(Debug)]
pub(crate) struct Encrypted {
    /// The record batch under its original header, but for the write
    /// rule's tombstones at its front (record count and last offset delta
    /// grown by as many, the base sequence where the broker expects it).
    pub(crate) records: Bytes,
    /// How many tombstones of older key forms the write rule put at the
    /// front of the batch (a key keyset with more than one enabled key):
    /// the client's records are that many offsets further on.
    pub(crate) added: i32,
}

/// Why a Produce partition is refused, and the error code its client gets.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub(crate) reason: String,
    pub(crate) code: i16,
}

/// Encrypts the records of a Produce partition's record batches. The
/// write rule's tombstones of the keys' older forms go at the front of
/// the client's batch, so that the broker takes or refuses them with its
/// records (an abort, a fenced producer, a refused batch: nothing is
/// deleted that the client did not delete). `sequence` gives the base
/// sequence to forward an idempotent batch at ([`crate::sequences`]).
///
/// # Errors
/// A reason (no key material, no record contents) when a batch cannot be
/// decoded, is not magic v2, decompresses to more than the budget's
/// limit, would take more memory to decode than the budget holds
/// ([`crate::budget`]: its counts are walked first, [`crate::records`]), does
/// not re-encode as it came, a record cannot be encrypted, or the
/// partition holds more than one batch and one of them needs tombstones
/// (Produce v3 and later carry one batch per partition): `CORRUPT_MESSAGE`;
/// an idempotent batch that `sequence` cannot place
/// ([`crate::sequences`]): `UNKNOWN_PRODUCER_ID`. The partition is
/// then refused whole.
pub(crate) fn encrypt(
    topic: &str,
    policy: &TopicPolicy,
    hooks: &Hooks,
    raw: &Bytes,
    budget: &Budget,
    sequence: &mut dyn FnMut(Batch, i32, bool) -> Result<i32, String>,
) -> Result<Encrypted, Refusal> {
    // Batches grow (and idempotent producers are followed) where the key
    // keyset is in rotation: more than one enabled key.
    let grows = policy.record_keys().is_some_and(|k| {
        k.keys()
            .filter(|(_, status)| *status == tombstone_crypt::KeyStatus::Enabled)
            .count()
            > 1
    });
    let mut out_of_order = false;
    // The current batch's tombstones, in the order the rule gave them.
    let tombstones: RefCell<Vec<Bytes>> = RefCell::new(Vec::new());
    let mut tally = Tally::default();
    let wipe = Wipe {
        input: hooks.wipes(),
        output: false,
    };
    let batches = std::cell::Cell::new(0u32);
    // The fast path: only where no batch grows and no hook is set.
    let direct = !grows
        && !hooks.general_path
        && !hooks.skip_encryption
        && !hooks.tombstone_as_empty
        && !hooks.skip_fanout
        && !hooks.skip_header_encryption;
    let mut fast = Tally::default();
    let mut added = 0i32;
    budget.clear_written();
    let records = transform(
        raw,
        false,
        budget,
        wipe,
        Steps {
            record: |record: &mut Record| {
                encrypt_record(topic, policy, hooks, record, &tombstones, &mut tally)
            },
            batch: |header: &[u8], list: &mut Vec<Record>| {
                batches.set(batches.get() + 1);
                let mut forms = std::mem::take(&mut *tombstones.borrow_mut());
                if hooks.skip_fanout {
                    forms.clear();
                }
                let mut seen = std::collections::HashSet::new();
                forms.retain(|f| seen.insert(f.clone()));
                let more = i32::try_from(forms.len())
                    .map_err(|_| "more tombstones of older key forms than a batch holds")?;
                if batches.get() > 1 && (more > 0 || added > 0) {
                    return Err(
                        "a partition's records in more than one batch, with tombstones of \
                            older key forms to write: Produce v3 and later carry one batch per \
                            partition"
                            .into(),
                    );
                }
                added = more;
                let client = Batch {
                    producer_id: be64(header, PRODUCER_ID),
                    producer_epoch: i16::from_be_bytes([
                        header[PRODUCER_EPOCH],
                        header[PRODUCER_EPOCH + 1],
                    ]),
                    base_sequence: be32(header, BASE_SEQUENCE.start),
                    records: be32(header, RECORD_COUNT.start),
                };
                let base_sequence = sequence(client, more, grows).inspect_err(|_| {
                    out_of_order = true;
                })?;
                if more == 0 && base_sequence == client.base_sequence {
                    return Ok(None);
                }
                prepend(list, &forms, base_sequence, client.idempotent())?;
                Ok(Some(Grown {
                    added: more,
                    base_sequence,
                }))
            },
            direct: |records: &[u8], walked, _, out: &mut crate::wipe::Buf| {
                if !direct {
                    return Ok(None);
                }
                let kept = encrypt_raw(topic, policy, (records, walked), out, &mut fast);
                if kept.is_some() {
                    batches.set(batches.get() + 1);
                }
                Ok(kept)
            },
        },
    )
    .map_err(|reason| Refusal {
        reason,
        code: if out_of_order {
            crate::codes::UNKNOWN_PRODUCER_ID
        } else {
            crate::codes::CORRUPT_MESSAGE
        },
    })?;
    // What the broker would take, a Fetch must be able to hand back.
    budget.written_fits().map_err(|reason| Refusal {
        reason,
        code: crate::codes::MESSAGE_TOO_LARGE,
    })?;
    tally.merge(&fast);
    tally.commit(true);
    stats::add(
        Event::OlderFormTombstones,
        u64::try_from(added).unwrap_or(0),
    );
    Ok(Encrypted { records, added })
}

/// The fast path of a Produce batch's records (`records`, walked as
/// `walked`) where no batch grows (the key keyset is not in rotation):
/// each encrypted straight from its bytes and written to `out` with its
/// attributes, deltas and headers copied as they came, nothing decoded
/// into kafka-protocol's `Record`; what the general path writes but for
/// the values' fresh nonces. It takes no record whose bytes the general
/// path would not encode back as they came (it refuses them:
/// [`Parts::canonical`](crate::records::Parts)), none with a header the
/// policy encrypts, and none whose write rule gives a tombstone of an
/// older key form, and none that does not encrypt (the general path says
/// why, or refuses the batch for another record first): then `None`, its
/// tally dropped, and the general path takes the batch. Else the records
/// kept (all of them).
fn encrypt_raw(
    topic: &str,
    policy: &TopicPolicy,
    (records, walked): (&[u8], crate::records::Walked),
    out: &mut crate::wipe::Buf,
    tally: &mut Tally,
) -> Option<usize> {
    let mut batch = Tally::default();
    let take = |parts: crate::records::Parts<'_>| -> Result<bool, String> {
        let forms = match parts.key {
            Some(key) => policy
                .write_key(topic, key)
                .map_err(|e| format!("encrypting a record key: {e}"))?,
            None => None,
        };
        let wire = match &forms {
            // The write rule gives one record: the primary form's (the
            // same as `KeyForms::writes`, which also counts its
            // tombstones, so it is left to the general path).
            Some(forms) if forms.write_count() == 1 => Some(forms.primary()),
            // A tombstone of an older form too: the general path writes
            // the rule.
            Some(_) => return Ok(false),
            None => parts.key,
        };
        let sealed = policy
            .write_value(topic, parts.key, parts.value)
            .map_err(|e| format!("encrypting a value: {e}"))?;
        if forms.is_some() {
            batch.keys += 1;
        }
        if sealed.is_some() {
            batch.values += 1;
        } else {
            batch.tombstones += 1;
        }
        crate::records::put_record(out, &parts, wire, sealed.as_deref())?;
        Ok(true)
    };
    let may = |parts: &crate::records::Parts<'_>| may_take(policy, parts);
    let kept = take_all(records, walked, may, take)?;
    tally.merge(&batch);
    Some(kept)
}

/// Puts a tombstone for each of `forms` at the front of `list` (the
/// batch's producer fields, its first timestamp, offsets from the batch's
/// first), the client's records `forms.len()` offsets further on, and the
/// sequences from `base_sequence` (none when the batch is not idempotent).
pub(super) fn prepend(
    list: &mut Vec<Record>,
    forms: &[Bytes],
    base_sequence: i32,
    idempotent: bool,
) -> Result<(), String> {
    let Some(first) = list.first() else {
        return Err("a record batch of no records".into());
    };
    let added = forms.len() as i64;
    let min_offset = list.iter().map(|r| r.offset).min().unwrap_or(first.offset);
    let min_timestamp = list
        .iter()
        .map(|r| r.timestamp)
        .min()
        .unwrap_or(first.timestamp);
    let template = Record {
        transactional: first.transactional,
        control: false,
        delete_horizon: first.delete_horizon,
        partition_leader_epoch: first.partition_leader_epoch,
        producer_id: first.producer_id,
        producer_epoch: first.producer_epoch,
        timestamp_type: first.timestamp_type,
        offset: min_offset,
        sequence: -1,
        timestamp: min_timestamp,
        key: None,
        value: None,
        headers: Default::default(),
    };
    for record in list.iter_mut() {
        record.offset = record
            .offset
            .checked_add(added)
            .ok_or("a record offset overflows")?;
    }
    list.splice(
        0..0,
        forms.iter().enumerate().map(|(i, form)| Record {
            offset: min_offset + i as i64,
            key: Some(form.clone()),
            ..template.clone()
        }),
    );
    // The encoder keeps records in one batch while offset minus sequence
    // is constant; the header's base sequence is written after it.
    let base = if idempotent { base_sequence } else { -1 };
    for record in list.iter_mut() {
        record.sequence = base.wrapping_add((record.offset - min_offset) as i32);
    }
    Ok(())
}

pub(super) fn encrypt_record(
    topic: &str,
    policy: &TopicPolicy,
    hooks: &Hooks,
    record: &mut Record,
    tombstones: &RefCell<Vec<Bytes>>,
    tally: &mut Tally,
) -> Result<(), String> {
    if hooks.skip_encryption {
        return Ok(());
    }
    // The record's key under the policy's key keyset, set once its value
    // and headers are sealed against the plaintext key.
    let mut sealed_key = None;
    if let Some(key) = &record.key {
        let forms = policy
            .write_key(topic, &key[..])
            .map_err(|e| format!("encrypting a record key: {e}"))?;
        if let Some(forms) = forms {
            // The write rule (the library's `KeyForms::writes`): a
            // tombstone for each older form, then the record under the
            // primary form.
            let mut primary = None;
            for (form, value) in forms.writes(Some(&[])) {
                match value {
                    None => tombstones.borrow_mut().push(Bytes::copy_from_slice(form)),
                    Some(_) => primary = Some(Bytes::copy_from_slice(form)),
                }
            }
            sealed_key =
                Some(primary.ok_or("the write rule gave no record under the primary key")?);
            tally.keys += 1;
        }
    }
    let key = record.key.as_deref();
    if !hooks.skip_header_encryption {
        for (name, value) in record.headers.iter_mut() {
            let Some(v) = value else { continue };
            let sealed = policy
                .write_header(topic, key, name.as_str(), v)
                .map_err(|e| format!("encrypting the header {:?}: {e}", name.as_str()))?;
            if let Some(ct) = sealed {
                *v = Bytes::from(ct);
            }
        }
    }
    let value = match (&record.value, hooks.tombstone_as_empty) {
        (Some(v), _) => Some(&v[..]),
        (None, true) => Some(&[][..]),
        (None, false) => None,
    };
    let sealed = policy.write_value(topic, key, value);
    if let Some(k) = sealed_key {
        record.key = Some(k);
    }
    record.value = match sealed {
        Ok(None) => {
            tally.tombstones += 1;
            None
        }
        Ok(Some(ct)) => {
            tally.values += 1;
            Some(Bytes::from(ct))
        }
        Err(e) => return Err(format!("encrypting a value: {e}")),
    };
    Ok(())
}
