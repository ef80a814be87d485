//! Record batches of a policy topic: values and keys encrypted on the way
//! to the broker, decrypted on the way back, every other field kept.
//!
//! The records are walked and decoded by `crate::records` (into
//! kafka-protocol's `Record`, after the batch's CRC is checked) and encoded
//! by `crate::records::encode`, against the batch header's own base offset
//! and first timestamp (kafka-protocol's encoder takes them from the
//! records, which differs in a batch the log cleaner compacted), and
//! compressed with kafka-protocol's codecs (lz4 by `lz4`, at lz4's fast
//! level). The original header is kept: base offset, partition leader
//! epoch, attributes (codec, timestamp type, transactional and control
//! flags), last offset delta, first and max timestamps, producer id and
//! epoch, base sequence and record count are copied byte for byte, and
//! only the length and the CRC are new; but for
//! the write rule's tombstones, which grow a Produce batch (its counts and
//! base sequence) and are left out of a Fetch batch (its record count).
//!
//! A batch is transformed only if its records encode back exactly as they
//! came (the decoder keeps one header per key, so a record with two
//! headers of one key would lose one): otherwise it is refused, never
//! altered.
//!
//! Plaintext is wiped before it is freed (`crate::wipe`): on Produce the
//! decompressed records (the check compares as it encodes, and makes no
//! copy of them); on Fetch the records' decrypted keys, values and headers
//! and the batch they are encoded into (under lz4, the records it
//! compresses too). Not the compression codecs' own buffers nor
//! kafka-protocol's buffer of a gzip, snappy or zstd batch's records (see
//! the crate's limits). Ciphertext is not wiped.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor as _, Gzip, Snappy, Zstd};
use kafka_protocol::records::{Compression, Record};
use tombstone_crypt::policy::{Read, TopicPolicy};

use crate::budget::Budget;
use crate::hooks::Hooks;
use crate::sequences::Batch;
use crate::stats::{self, Event, Tally};
use crate::wipe::{self, Buf};

/// The size of a v2 record batch's header, up to and including its record
/// count.
const HEADER: usize = 61;
/// Where the length-covered part starts (after base offset and length).
const LOG_OVERHEAD: usize = 12;
const MAGIC: usize = 16;
const CRC: std::ops::Range<usize> = 17..21;
const ATTRIBUTES: std::ops::Range<usize> = 21..23;
const LAST_OFFSET_DELTA: std::ops::Range<usize> = 23..27;
const PRODUCER_ID: usize = 43;
const PRODUCER_EPOCH: usize = 51;
const BASE_SEQUENCE: std::ops::Range<usize> = 53..57;
const RECORD_COUNT: std::ops::Range<usize> = 57..61;
/// Where the batch's first timestamp starts (8 bytes).
const FIRST_TIMESTAMP: usize = 27;
const CONTROL_FLAG: i16 = 1 << 5;

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

/// A batch's header fields that change when the write rule's tombstones
/// go at its front, or when an earlier batch of its producer grew.
#[derive(Clone, Copy, Debug)]
struct Grown {
    added: i32,
    base_sequence: i32,
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
    let mut batches = 0u32;
    let mut added = 0i32;
    budget.clear_written();
    let records = transform(
        raw,
        false,
        budget,
        wipe,
        |record| encrypt_record(topic, policy, hooks, record, &tombstones, &mut tally),
        |header, list| {
            batches += 1;
            let mut forms = std::mem::take(&mut *tombstones.borrow_mut());
            if hooks.skip_fanout {
                forms.clear();
            }
            let mut seen = std::collections::HashSet::new();
            forms.retain(|f| seen.insert(f.clone()));
            let more = i32::try_from(forms.len())
                .map_err(|_| "more tombstones of older key forms than a batch holds")?;
            if batches > 1 && (more > 0 || added > 0) {
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
    tally.commit(true);
    stats::add(
        Event::OlderFormTombstones,
        u64::try_from(added).unwrap_or(0),
    );
    Ok(Encrypted { records, added })
}

fn be64(at: &[u8], start: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&at[start..start + 8]);
    i64::from_be_bytes(b)
}

fn be32(at: &[u8], start: usize) -> i32 {
    i32::from_be_bytes([at[start], at[start + 1], at[start + 2], at[start + 3]])
}

/// Puts a tombstone for each of `forms` at the front of `list` (the
/// batch's producer fields, its first timestamp, offsets from the batch's
/// first), the client's records `forms.len()` offsets further on, and the
/// sequences from `base_sequence` (none when the batch is not idempotent).
fn prepend(
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
fn replaced_forms(list: &mut Vec<Record>, forms: &[Option<Bytes>]) -> Vec<Record> {
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

fn encrypt_record(
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

/// Decrypts `record` in place; its record key as it came (its wire form,
/// moved out of the record) when the policy encrypts record keys.
fn decrypt_record(
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

/// Which side of a transform is plaintext, wiped before it is freed: what
/// comes in (Produce: the client's records, decompressed, and the check's
/// re-encoding of them) or what goes out (Fetch: the records' decrypted
/// fields and the batches encoded from them). The other side is
/// ciphertext, and fields the policy does not encrypt.
#[derive(Clone, Copy, Debug)]
struct Wipe {
    input: bool,
    output: bool,
}

/// Decoded records whose fields are wiped when dropped (`wipe::bytes`):
/// what `f` put in them (a decrypted key, value or header on Fetch). A
/// field still a slice of its batch is only let go (the batch is wiped
/// with it once every slice is dropped).
struct Records {
    list: Vec<Record>,
    wipe: bool,
}

impl Drop for Records {
    fn drop(&mut self) {
        if !self.wipe {
            return;
        }
        for record in self.list.drain(..) {
            let Record {
                key,
                value,
                headers,
                ..
            } = record;
            for field in key.into_iter().chain(value) {
                wipe::bytes(field, true);
            }
            for field in headers.into_values().flatten() {
                wipe::bytes(field, true);
            }
        }
    }
}

/// Applies `f` to every record of every data batch in `raw`, batch by
/// batch. On Fetch (`partial_ok`: a partial batch at the end is dropped)
/// control batches and empty batches are kept byte for byte; on Produce
/// they are refused. Every buffer of plaintext it made (`wipe` says which
/// side is plaintext) is wiped before it is freed; the result is the
/// caller's to wipe.
fn transform(
    raw: &Bytes,
    partial_ok: bool,
    budget: &Budget,
    wipe: Wipe,
    mut f: impl FnMut(&mut Record) -> Result<(), String>,
    mut grow: impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
) -> Result<Bytes, String> {
    // Decrypted (Fetch) uncompressed batches are no longer than they came:
    // `raw`'s length is room enough, and `Buf` wipes a block it grows out
    // of. (Room it never writes to is wiped all the same, at the cost of
    // its pages.) Encrypted ones are longer.
    let capacity = if wipe.output {
        raw.len()
    } else {
        raw.len() + raw.len() / 4
    };
    let mut out = Buf::with_capacity(capacity, wipe.output);
    let mut rest = raw.clone();
    while !rest.is_empty() {
        if rest.len() < LOG_OVERHEAD {
            if partial_ok {
                break;
            }
            return Err(format!(
                "{} bytes after the last batch: not a batch",
                rest.len()
            ));
        }
        let length = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]);
        let Ok(length) = usize::try_from(length) else {
            return Err(format!("a batch of negative length {length}"));
        };
        let Some(total) = length.checked_add(LOG_OVERHEAD) else {
            return Err("a batch length overflows".into());
        };
        if rest.len() < total {
            if partial_ok {
                break;
            }
            return Err(format!(
                "a batch claims {total} bytes and {} are there",
                rest.len()
            ));
        }
        let batch = rest.split_to(total);
        if batch.len() < HEADER {
            return Err(format!(
                "a batch of {} bytes is shorter than its header",
                batch.len()
            ));
        }
        if batch[MAGIC] != 2 {
            return Err(format!(
                "a batch of message format v{} (only v2 record batches are transformed)",
                batch[MAGIC]
            ));
        }
        let attributes = i16::from_be_bytes([batch[ATTRIBUTES.start], batch[ATTRIBUTES.start + 1]]);
        let count = &batch[RECORD_COUNT];
        if attributes & CONTROL_FLAG != 0 || count == [0, 0, 0, 0] {
            // A client writes neither: control batches are the broker's
            // (transaction markers), and an empty batch is what compaction
            // leaves. Forwarded as they are, their bytes would reach the
            // broker unencrypted, whatever they hold.
            if !partial_ok {
                return Err(if attributes & CONTROL_FLAG != 0 {
                    "a control batch in a Produce request (control records are the broker's)".into()
                } else {
                    "a batch of 0 records in a Produce request".into()
                });
            }
            // What compaction leaves holds no records: one that claims none
            // and carries bytes (planted on the broker) would hand a client
            // records nobody decrypted.
            if count == [0, 0, 0, 0] && attributes & CONTROL_FLAG == 0 && batch.len() != HEADER {
                return Err(format!(
                    "a batch of 0 records that carries {} bytes of records",
                    batch.len() - HEADER
                ));
            }
            out.extend_from_slice(&batch);
            continue;
        }
        transform_batch(&batch, budget, &mut f, &mut grow, &mut out, wipe)?;
    }
    Ok(out.freeze())
}

/// One data batch: decompressed (within the budget), walked (its counts
/// checked against its bytes, its cost taken from the budget), decoded, checked
/// to encode back as it came, each record through `f`, encoded with the
/// same codec under the original header, appended to `out`.
fn transform_batch(
    batch: &Bytes,
    budget: &Budget,
    f: &mut impl FnMut(&mut Record) -> Result<(), String>,
    grow: &mut impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
    out: &mut Buf,
    wipe: Wipe,
) -> Result<(), String> {
    // The records' bytes as they came (decompressed), kept for the check:
    // a slice of `batch` uncompressed, else a buffer of its own.
    let plain: RefCell<Option<Bytes>> = RefCell::new(None);
    let result = transform_records(batch, budget, f, grow, out, wipe, &plain);
    // Every record, slices of it, is dropped by now: its last handle.
    if let Some(plain) = plain.into_inner() {
        wipe::bytes(plain, wipe.input);
    }
    result
}

fn transform_records(
    batch: &Bytes,
    budget: &Budget,
    f: &mut impl FnMut(&mut Record) -> Result<(), String>,
    grow: &mut impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
    out: &mut Buf,
    wipe: Wipe,
    plain: &RefCell<Option<Bytes>>,
) -> Result<(), String> {
    // The records, decompressed within the budget, then walked: every
    // count checked against the bytes, and what decoding them costs taken
    // from the budget, before anything is sized from a count; then decoded
    // (`crate::records::decode`).
    let attributes = i16::from_be_bytes([batch[ATTRIBUTES.start], batch[ATTRIBUTES.start + 1]]);
    let compression = match attributes & 0x07 {
        0 => Compression::None,
        1 => Compression::Gzip,
        2 => Compression::Snappy,
        3 => Compression::Lz4,
        4 => Compression::Zstd,
        other => return Err(format!("a record batch of compression type {other}")),
    };
    // The batch's checksum, over what follows it (attributes to the last
    // record), before anything is decompressed or decoded from it.
    let crc = u32::from_be_bytes([
        batch[CRC.start],
        batch[CRC.start + 1],
        batch[CRC.start + 2],
        batch[CRC.start + 3],
    ]);
    if crc32c::crc32c(&batch[ATTRIBUTES.start..]) != crc {
        return Err("decoding a record batch: its CRC does not match its bytes".into());
    }
    let all = crate::inflate::decompress(&batch.slice(HEADER..), compression, budget)?;
    plain.replace(Some(all.clone()));
    let count = i32::from_be_bytes([
        batch[RECORD_COUNT.start],
        batch[RECORD_COUNT.start + 1],
        batch[RECORD_COUNT.start + 2],
        batch[RECORD_COUNT.start + 3],
    ]);
    // The records' cost first (a count the bytes cannot hold is refused
    // before), so that a batch too large to decode is not walked either;
    // then the walk, and its headers' cost.
    let claimed = crate::records::claimed(&all, count)?;
    budget.take(
        crate::records::record_cost(claimed, all.len()),
        "a record batch",
    )?;
    let base = crate::records::Base {
        offset: be64(batch, 0),
        timestamp: be64(batch, FIRST_TIMESTAMP),
    };
    let walked = crate::records::walk(&all, count, base)?;
    let walked_headers = walked.headers;
    budget.take(
        crate::records::header_cost(walked.headers),
        "a record batch's headers",
    )?;
    let header = crate::records::Header {
        base,
        attributes,
        partition_leader_epoch: be32(batch, 12),
        producer_id: be64(batch, PRODUCER_ID),
        producer_epoch: i16::from_be_bytes([batch[PRODUCER_EPOCH], batch[PRODUCER_EPOCH + 1]]),
        base_sequence: be32(batch, BASE_SEQUENCE.start),
    };
    let mut records = Records {
        list: crate::records::decode(&all, walked, &header)
            .map_err(|e| format!("decoding a record batch: {e}"))?,
        wipe: wipe.output,
    };
    // Compared as encoded: no copy of the records is made for the check.
    if !crate::records::encodes_back(&records.list, base, &all)? {
        return Err(
            "a record batch does not encode back as it came (two headers of one key in a \
             record, a record with attributes): refused rather than altered"
                .into(),
        );
    }
    for record in &mut records.list {
        f(record)?;
    }
    let grown = grow(&batch[..HEADER], &mut records.list)?;
    // Room for the batch as it came: a decrypted uncompressed batch is
    // never longer, so the encoder does not grow `out` (a block it grew
    // out of would be freed unwiped). A compressed one may be: a quarter
    // more. An encrypted one may be longer; what it leaves is ciphertext.
    out.reserve(if compression == Compression::None {
        batch.len()
    } else {
        batch.len() + batch.len() / 4 + 64
    });
    let start = out.len();
    // The original header (its length and CRC set below), then the
    // records against its base, compressed with its codec (the codec's
    // buffer of uncompressed records is kafka-protocol's, as when its
    // encoder compressed).
    out.extend_from_slice(&batch[..HEADER]);
    let list = &records.list;
    // The records' length uncompressed, as a Fetch of the batch will see
    // it.
    let uncompressed = std::cell::Cell::new(0usize);
    let write = |tmp: &mut BytesMut| -> anyhow::Result<()> {
        let before = tmp.len();
        crate::records::encode(tmp, list, base).map_err(anyhow::Error::msg)?;
        uncompressed.set(tmp.len() - before);
        Ok(())
    };
    let records_at = out.len();
    let compressed = match compression {
        Compression::None => crate::records::encode(out.inner(), list, base)
            .inspect(|()| uncompressed.set(out.len() - records_at)),
        Compression::Gzip => Gzip::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
        Compression::Snappy => Snappy::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
        Compression::Lz4 => lz4(out, list, base, wipe.output)
            .inspect(|n| uncompressed.set(*n))
            .map(|_| ()),
        Compression::Zstd => Zstd::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
    };
    compressed.map_err(|e| format!("encoding a record batch: {e}"))?;
    let kept = list.len();
    budget.note_written(
        list.len(),
        uncompressed.get(),
        walked_headers,
        compression != Compression::None,
    );
    drop(records);
    let encoded = &mut out[start..];
    let new_length = i32::try_from(encoded.len() - LOG_OVERHEAD)
        .map_err(|_| "a record batch encoded to more than 2 GiB")?;
    encoded[8..LOG_OVERHEAD].copy_from_slice(&new_length.to_be_bytes());
    if let Some(grown) = grown {
        // The client's counts, grown by the tombstones in front; the base
        // sequence where the broker expects it.
        let grow_by = |at: std::ops::Range<usize>| -> Result<[u8; 4], String> {
            be32(&batch[..], at.start)
                .checked_add(grown.added)
                .map(i32::to_be_bytes)
                .ok_or_else(|| "a batch's count overflows with the tombstones in front".to_owned())
        };
        encoded[LAST_OFFSET_DELTA].copy_from_slice(&grow_by(LAST_OFFSET_DELTA)?);
        encoded[RECORD_COUNT].copy_from_slice(&grow_by(RECORD_COUNT)?);
        encoded[BASE_SEQUENCE].copy_from_slice(&grown.base_sequence.to_be_bytes());
    } else if kept != usize::try_from(count).unwrap_or(0) {
        // Fetch: records left out ([`replaced_forms`]); the offsets keep
        // their gaps and the last offset delta stays.
        let kept = i32::try_from(kept).map_err(|_| "a record count overflows")?;
        encoded[RECORD_COUNT].copy_from_slice(&kept.to_be_bytes());
    }
    let crc = crc32c::crc32c(&encoded[ATTRIBUTES.start..]);
    encoded[CRC].copy_from_slice(&crc.to_be_bytes());
    Ok(())
}

/// Appends `list` (encoded against `base`) to `out` as an lz4 frame as
/// kafka-protocol writes one (independent 64 KiB blocks, block and content
/// checksums), at lz4's fast level (0, librdkafka's default for lz4);
/// the records' length uncompressed. kafka-protocol's compressor takes
/// lz4's high-compression mode (level 4), which clears a 256 KiB state
/// for each 64 KiB block: for a 1 MB batch, ten times the rest of its
/// record path (`benches/record_path.rs`), on records whose values are
/// ciphertext (on Produce) and do not compress. The records go through a
/// buffer of their own, wiped when `plaintext` (Fetch), as it grows too.
fn lz4(
    out: &mut Buf,
    list: &[Record],
    base: crate::records::Base,
    plaintext: bool,
) -> Result<usize, String> {
    use bytes::BufMut as _;
    use std::io::Write as _;
    let mut records = Buf::with_capacity(0, plaintext);
    crate::records::encode(&mut records, list, base)?;
    let mut encoder = lz4::EncoderBuilder::new()
        .block_mode(lz4::BlockMode::Independent)
        .build(out.inner().writer())
        .map_err(|e| format!("compressing lz4: {e}"))?;
    encoder
        .write_all(&records)
        .map_err(|e| format!("compressing lz4: {e}"))?;
    encoder
        .finish()
        .1
        .map_err(|e| format!("compressing lz4: {e}"))?;
    Ok(records.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::records::{
        RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };
    use tombstone_crypt::{KeyTemplate, Keyset};

    const LIMIT: usize = 1 << 20;

    fn budget() -> Budget {
        Budget::alone(64 << 20, LIMIT)
    }

    /// [`super::encrypt`] for a producer's first batch.
    fn encrypt(
        topic: &str,
        policy: &TopicPolicy,
        hooks: &Hooks,
        raw: &Bytes,
        budget: &Budget,
    ) -> Result<Encrypted, String> {
        let sequences = crate::sequences::Sequences::default();
        let mut sequence = |batch, added, grows| sequences.forward(topic, 0, batch, added, grows);
        super::encrypt(topic, policy, hooks, raw, budget, &mut sequence).map_err(|r| r.reason)
    }

    fn record(offset: i64, key: Option<&'static [u8]>, value: Option<&'static [u8]>) -> Record {
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 7,
            producer_id: 4242,
            producer_epoch: 3,
            timestamp_type: TimestampType::Creation,
            offset,
            sequence: 100 + offset as i32,
            timestamp: 1_700_000_000_000 + offset,
            key: key.map(Bytes::from_static),
            value: value.map(Bytes::from_static),
            headers: IndexMap::new(),
        }
    }

    fn batch(records: &[Record], compression: Compression) -> Bytes {
        let mut buf = BytesMut::new();
        let options = RecordEncodeOptions {
            version: 2,
            compression,
        };
        RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
        buf.freeze()
    }

    fn decode(raw: &Bytes) -> Vec<Record> {
        let mut b = raw.clone();
        RecordBatchDecoder::decode_all(&mut b)
            .unwrap()
            .into_iter()
            .flat_map(|s| s.records)
            .collect()
    }

    #[test]
    fn values_and_keys_round_trip_nulls_stay_null_and_the_header_is_kept() {
        let policy = TopicPolicy::keyset(Keyset::generate())
            .with_record_keys(Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap())
            .unwrap();
        let records = [
            record(0, Some(b"k1"), Some(b"v1")),
            record(1, Some(b"k1"), None),
            record(2, Some(b"k2"), Some(b"")),
            record(3, None, Some(b"unkeyed")),
            record(4, None, None),
        ];
        for codec in [
            Compression::None,
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let raw = batch(&records, codec);
            let enc = encrypt("t", &policy, &Hooks::default(), &raw, &budget()).unwrap();
            assert_eq!(enc.added, 0);
            let enc = enc.records;
            // The header but length and CRC: as it came.
            assert_eq!(enc[0..8], raw[0..8]);
            assert_eq!(enc[12..17], raw[12..17]);
            assert_eq!(enc[21..61], raw[21..61]);
            let sealed = decode(&enc);
            assert_eq!(sealed.len(), 5);
            assert_eq!(sealed[1].value, None);
            assert_eq!(sealed[4].value, None);
            assert_eq!(sealed[4].key, None);
            assert_eq!(sealed[2].value.as_ref().unwrap().len(), 33);
            assert_ne!(sealed[0].key, records[0].key);
            assert_eq!(sealed[0].key, sealed[1].key);
            assert!(!sealed[0]
                .value
                .as_ref()
                .unwrap()
                .windows(2)
                .any(|w| w == b"v1"));
            let dec = decrypt("t", &policy, &Hooks::default(), &enc, &budget()).unwrap();
            let back = decode(&dec);
            for (a, b) in back.iter().zip(&records) {
                assert_eq!(
                    (&a.key, &a.value, a.offset, a.timestamp, a.sequence),
                    (&b.key, &b.value, b.offset, b.timestamp, b.sequence)
                );
            }
            // A cut trailing batch is dropped on fetch, refused on produce.
            let mut two = BytesMut::from(&enc[..]);
            two.extend_from_slice(&enc[..enc.len() - 5]);
            let two = two.freeze();
            assert_eq!(
                decode(&decrypt("t", &policy, &Hooks::default(), &two, &budget()).unwrap()).len(),
                5
            );
            assert!(encrypt("t", &policy, &Hooks::default(), &two, &budget()).is_err());
        }
    }

    #[test]
    fn only_the_write_rules_tombstones_are_left_out_on_fetch() {
        let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        let values = Keyset::generate();
        let before = TopicPolicy::keyset(values.clone())
            .with_record_keys(keys.clone())
            .unwrap();
        let sealed_before = |records: &[Record]| {
            let sequences = crate::sequences::Sequences::default();
            let mut sequence = |b, a, g| sequences.forward("t", 0, b, a, g);
            let raw = batch(records, Compression::None);
            super::encrypt(
                "t",
                &before,
                &Hooks::default(),
                &raw,
                &budget(),
                &mut sequence,
            )
            .unwrap()
            .records
        };
        // Written before the rotation: a client's delete, then in one
        // batch a delete and a value of one key (one form).
        let deleted = sealed_before(&[unsequenced(0, Some(b"k"), None)]);
        let again = sealed_before(&[
            unsequenced(0, Some(b"k"), None),
            unsequenced(1, Some(b"k"), Some(b"v")),
        ]);
        keys.rotate();
        let after = TopicPolicy::keyset(values).with_record_keys(keys).unwrap();
        let read = |raw: &Bytes| -> Vec<(Option<Bytes>, Option<Bytes>)> {
            decode(&decrypt("t", &after, &Hooks::default(), raw, &budget()).unwrap())
                .into_iter()
                .map(|r| (r.key, r.value))
                .collect()
        };
        let k = || Some(Bytes::from_static(b"k"));
        assert_eq!(read(&deleted), [(k(), None)]);
        assert_eq!(decode(&again).len(), 2);
        assert_eq!(
            RecordBatchDecoder::decode_all(&mut again.clone())
                .unwrap()
                .len(),
            1
        );
        assert_eq!(
            read(&again),
            [(k(), None), (k(), Some(Bytes::from_static(b"v")))]
        );
        // A tombstone of the older form followed by a record under the
        // primary one, in one batch: the write rule's, left out.
        let mut mixed = decode(&deleted);
        let written = decode(&sealed_after(&after, b"k"));
        let mut next = written[written.len() - 1].clone();
        next.offset = 1;
        // (The encoder keeps one batch while offset minus sequence stays.)
        next.sequence = mixed[0].sequence + 1;
        mixed.push(next);
        assert_eq!(
            read(&batch(&mixed, Compression::None)),
            [(k(), Some(Bytes::from_static(b"v")))]
        );
    }

    /// [`record`] of a producer that is not idempotent (the encoder keeps
    /// records in one batch while offset minus sequence stays: the first
    /// at -1, the batch's base sequence).
    fn unsequenced(
        offset: i64,
        key: Option<&'static [u8]>,
        value: Option<&'static [u8]>,
    ) -> Record {
        Record {
            producer_id: -1,
            sequence: offset as i32 - 1,
            ..record(offset, key, value)
        }
    }

    /// `k` written as `v` under `policy` (its write rule's tombstones first).
    fn sealed_after(policy: &TopicPolicy, k: &'static [u8]) -> Bytes {
        let sequences = crate::sequences::Sequences::default();
        let mut sequence = |b, a, g| sequences.forward("t", 0, b, a, g);
        let raw = batch(&[unsequenced(0, Some(k), Some(b"v"))], Compression::None);
        super::encrypt(
            "t",
            policy,
            &Hooks::default(),
            &raw,
            &budget(),
            &mut sequence,
        )
        .unwrap()
        .records
    }

    #[test]
    fn a_value_that_does_not_authenticate_fails_and_a_rotated_key_keyset_fans_out() {
        let policy = TopicPolicy::keyset(Keyset::generate());
        let other = TopicPolicy::keyset(Keyset::generate());
        let raw = batch(&[record(0, Some(b"k"), Some(b"v"))], Compression::None);
        let enc = encrypt("t", &policy, &Hooks::default(), &raw, &budget())
            .unwrap()
            .records;
        assert!(decrypt("t", &other, &Hooks::default(), &enc, &budget()).is_err());
        assert!(decrypt("u", &policy, &Hooks::default(), &enc, &budget()).is_err());
        let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        keys.rotate();
        let rotated = TopicPolicy::keyset(Keyset::generate())
            .with_record_keys(keys)
            .unwrap();
        // The write rule: a tombstone for each key's older form, at the
        // front of the client's own batch (one per key: `k` twice).
        // The producer's first batch (sequence 0): followed from there.
        let from_0 = |mut r: Record| {
            r.sequence = r.offset as i32;
            r
        };
        let raw = batch(
            &[
                from_0(record(0, Some(b"k"), Some(b"v1"))),
                from_0(record(1, Some(b"j"), Some(b"v2"))),
                from_0(record(2, Some(b"k"), None)),
            ],
            Compression::None,
        );
        let sequences = crate::sequences::Sequences::default();
        let mut sequence = |batch, added, grows| sequences.forward("t", 0, batch, added, grows);
        for codec in [Compression::None, Compression::Zstd] {
            let raw = if codec == Compression::None {
                raw.clone()
            } else {
                batch(&decode(&raw), codec)
            };
            let enc = super::encrypt(
                "t",
                &rotated,
                &Hooks::default(),
                &raw,
                &budget(),
                &mut sequence,
            )
            .unwrap();
            assert_eq!(enc.added, 2);
            let sealed = decode(&enc.records);
            assert_eq!(sealed.len(), 5);
            // The header: the client's, counts grown by 2.
            assert_eq!(enc.records[0..8], raw[0..8], "base offset");
            assert_eq!(
                be32(&enc.records, 23),
                be32(&raw, 23) + 2,
                "last offset delta"
            );
            assert_eq!(be32(&enc.records, 57), 5, "record count");
            assert_eq!(enc.records[43..53], raw[43..53], "producer id and epoch");
            assert_eq!(enc.records[21..23], raw[21..23], "attributes");
            assert_eq!(be64(&enc.records, 27), be64(&raw, 27), "first timestamp");
            for (i, r) in sealed.iter().enumerate() {
                assert_eq!(r.offset, i as i64);
                assert_eq!((r.producer_id, r.producer_epoch), (4242, 3));
            }
            assert_eq!(
                (sealed[0].value.as_ref(), sealed[1].value.as_ref()),
                (None, None)
            );
            assert_ne!(sealed[0].key, sealed[2].key, "an older form");
            assert_ne!(sealed[1].key, sealed[3].key, "an older form");
            assert_eq!(sealed[2].key, sealed[4].key);
            // Read back: the client's records at their offsets, the
            // write rule's tombstones left out (the record count says 3,
            // the last offset delta stays), the client's delete kept.
            let opened =
                decrypt("t", &rotated, &Hooks::default(), &enc.records, &budget()).unwrap();
            let back = decode(&opened);
            let read: Vec<_> = back
                .iter()
                .map(|r| (r.offset, r.key.as_deref(), r.value.as_deref()))
                .collect();
            assert_eq!(
                read,
                [
                    (2, Some(&b"k"[..]), Some(&b"v1"[..])),
                    (3, Some(&b"j"[..]), Some(&b"v2"[..])),
                    (4, Some(&b"k"[..]), None),
                ]
            );
            assert_eq!(be32(&opened, 57), 3, "record count");
            assert_eq!(
                be32(&opened, 23),
                be32(&enc.records, 23),
                "last offset delta"
            );
            // The producer's first grown batch at its own sequence, and
            // (the second codec) its retry where it went.
            assert_eq!(be32(&enc.records, 53), 0);
        }
        // The producer's next batch (sequence 3): 2 further on.
        let next: Vec<Record> = (3..5)
            .map(|i| from_0(record(i, Some(b"x"), Some(b"v"))))
            .collect();
        let next = batch(&next, Compression::None);
        let skip = Hooks {
            skip_fanout: true,
            ..Default::default()
        };
        let enc = super::encrypt("t", &rotated, &skip, &next, &budget(), &mut sequence).unwrap();
        assert_eq!((enc.added, be32(&enc.records, 53)), (0, 5));
        // A producer this process did not follow from sequence 0: refused.
        let unfollowed = batch(&[record(7, Some(b"x"), Some(b"v"))], Compression::None);
        let refused = super::encrypt("t", &rotated, &skip, &unfollowed, &budget(), &mut sequence)
            .unwrap_err();
        assert_eq!(refused.code, crate::codes::UNKNOWN_PRODUCER_ID);
        assert_eq!(decode(&enc.records).len(), 2);
        // Not idempotent: no sequence, none given.
        let mut plain = record(0, Some(b"k"), Some(b"v"));
        plain.producer_id = -1;
        plain.sequence = -1;
        let enc = super::encrypt(
            "t",
            &rotated,
            &Hooks::default(),
            &batch(&[plain], Compression::None),
            &budget(),
            &mut sequence,
        )
        .unwrap();
        assert_eq!((enc.added, be32(&enc.records, 53)), (1, -1));
        assert_eq!(decode(&enc.records).len(), 2);
    }

    #[test]
    fn named_headers_are_sealed_on_tombstones_too_and_bound_to_their_name() {
        let values = Keyset::generate();
        let policy = TopicPolicy::keyset(values.clone())
            .with_headers(["x-ssn", "x-card"])
            .unwrap();
        let with_headers = |mut r: Record| {
            r.headers
                .insert("x-ssn".into(), Some(Bytes::from_static(b"123-45-6789")));
            r.headers.insert("x-card".into(), None);
            r.headers
                .insert("trace".into(), Some(Bytes::from_static(b"abc")));
            r
        };
        let records = [
            with_headers(record(0, Some(b"k"), Some(b"v"))),
            with_headers(record(1, Some(b"k"), None)),
        ];
        let raw = batch(&records, Compression::None);
        let enc = encrypt("t", &policy, &Hooks::default(), &raw, &budget())
            .unwrap()
            .records;
        let sealed = decode(&enc);
        for r in &sealed {
            let ssn = r.headers[0].as_ref().unwrap();
            assert_eq!((ssn.len(), ssn[0]), (11 + 33, 1));
            assert_eq!(r.headers[1], None);
            assert_eq!(r.headers[2].as_deref(), Some(&b"abc"[..]));
        }
        assert_eq!(sealed[1].value, None, "a tombstone stays a tombstone");
        let back = decode(&decrypt("t", &policy, &Hooks::default(), &enc, &budget()).unwrap());
        for (a, b) in back.iter().zip(&records) {
            assert_eq!((&a.value, &a.headers), (&b.value, &b.headers));
        }
        // Under another name, topic or key it does not authenticate.
        let renamed = TopicPolicy::keyset(values.clone())
            .with_headers(["x-card", "x-ssn2"])
            .unwrap();
        let mut moved = sealed.clone();
        for r in &mut moved {
            let ssn = r.headers.shift_remove(&b"x-ssn"[..]).unwrap();
            r.headers.insert("x-ssn2".into(), ssn);
        }
        let moved = batch(&moved, Compression::None);
        assert!(decrypt("t", &renamed, &Hooks::default(), &moved, &budget()).is_err());
        assert!(decrypt("u", &policy, &Hooks::default(), &enc, &budget()).is_err());
        let mut other_key = sealed.clone();
        other_key[0].key = Some(Bytes::from_static(b"j"));
        assert!(decrypt(
            "t",
            &policy,
            &Hooks::default(),
            &batch(&other_key, Compression::None),
            &budget()
        )
        .is_err());
        // A value's ciphertext put in a named header does not authenticate.
        let mut swapped = sealed.clone();
        swapped[0].headers[0] = swapped[0].value.clone();
        assert!(decrypt(
            "t",
            &policy,
            &Hooks::default(),
            &batch(&swapped, Compression::None),
            &budget()
        )
        .is_err());
        // The negative control: the hook forwards the header as it came.
        let hooks = Hooks {
            skip_header_encryption: true,
            ..Hooks::default()
        };
        let open = decode(
            &encrypt("t", &policy, &hooks, &raw, &budget())
                .unwrap()
                .records,
        );
        assert_eq!(open[0].headers[0].as_deref(), Some(&b"123-45-6789"[..]));
    }

    #[test]
    fn under_subject_keys_a_shredded_subjects_values_are_fetched_as_tombstones() {
        use std::sync::Arc;
        use tombstone_crypt::shred::{MemoryKeyStore, SubjectKeys};
        let store = Arc::new(MemoryKeyStore::new());
        let keys = Arc::new(SubjectKeys::create(Keyset::generate(), store.clone()).unwrap());
        let policy = TopicPolicy::subject_keys(keys.clone());
        let records = [
            record(0, Some(b"alice"), Some(b"a1")),
            record(1, Some(b"bob"), Some(b"b1")),
            record(2, Some(b"alice"), None),
            record(3, Some(b"alice"), Some(b"")),
        ];
        let raw = batch(&records, Compression::Lz4);
        let enc = encrypt("t", &policy, &Hooks::default(), &raw, &budget()).unwrap();
        let sealed = decode(&enc.records);
        assert_eq!(
            sealed[0].value.as_ref().unwrap()[0],
            tombstone_crypt::shred::FORMAT
        );
        assert_eq!(sealed[2].value, None);
        let back =
            decode(&decrypt("t", &policy, &Hooks::default(), &enc.records, &budget()).unwrap());
        for (a, b) in back.iter().zip(&records) {
            assert_eq!((&a.key, &a.value), (&b.key, &b.value));
        }
        keys.shred(b"alice").unwrap();
        let back =
            decode(&decrypt("t", &policy, &Hooks::default(), &enc.records, &budget()).unwrap());
        let values: Vec<_> = back.iter().map(|r| r.value.as_deref()).collect();
        assert_eq!(values, [None, Some(&b"b1"[..]), None, None]);
        // An unkeyed record has no subject: refused, never written.
        let unkeyed = batch(&[record(0, None, Some(b"v"))], Compression::None);
        assert!(encrypt("t", &policy, &Hooks::default(), &unkeyed, &budget()).is_err());
        // A forged value (a bit of its DEK id flipped) is an error, never a
        // tombstone; so is a value under a keyset on this topic.
        let mut forged = sealed.clone();
        let v = forged[1].value.as_mut().unwrap();
        let mut bytes = v.to_vec();
        bytes[1 + 16] ^= 1;
        *v = Bytes::from(bytes);
        assert!(decrypt(
            "t",
            &policy,
            &Hooks::default(),
            &batch(&forged, Compression::None),
            &budget()
        )
        .is_err());
        let whole = TopicPolicy::keyset(Keyset::generate());
        let other = encrypt("t", &whole, &Hooks::default(), &raw, &budget()).unwrap();
        assert!(decrypt("t", &policy, &Hooks::default(), &other.records, &budget()).is_err());
        assert!(decrypt("t", &whole, &Hooks::default(), &enc.records, &budget()).is_err());
    }

    #[test]
    fn a_produce_with_a_control_or_empty_batch_is_refused_a_fetch_keeps_them() {
        let policy = TopicPolicy::keyset(Keyset::generate());
        let plain = batch(
            &[record(0, Some(b"k"), Some(b"PLAINTEXT"))],
            Compression::None,
        );
        let set_crc = |b: &mut BytesMut| {
            let crc = crc32c::crc32c(&b[ATTRIBUTES.start..]);
            b[CRC].copy_from_slice(&crc.to_be_bytes());
        };
        let mut control = BytesMut::from(&plain[..]);
        control[ATTRIBUTES.end - 1] |= CONTROL_FLAG as u8;
        set_crc(&mut control);
        // What compaction leaves: a header and no records.
        let mut empty = BytesMut::from(&plain[..HEADER]);
        empty[RECORD_COUNT].copy_from_slice(&[0, 0, 0, 0]);
        let length = (HEADER - LOG_OVERHEAD) as i32;
        empty[8..12].copy_from_slice(&length.to_be_bytes());
        set_crc(&mut empty);
        // A batch that claims no records and carries one (planted on the
        // broker): refused both ways, never handed on unread.
        let mut planted = BytesMut::from(&plain[..]);
        planted[RECORD_COUNT].copy_from_slice(&[0, 0, 0, 0]);
        set_crc(&mut planted);
        let planted = planted.freeze();
        assert!(encrypt("t", &policy, &Hooks::default(), &planted, &budget()).is_err());
        let e = decrypt("t", &policy, &Hooks::default(), &planted, &budget()).unwrap_err();
        assert!(e.contains("0 records"), "{e}");
        for odd in [control.freeze(), empty.freeze()] {
            // Produce: refused, so its bytes never reach the broker.
            let e = encrypt("t", &policy, &Hooks::default(), &odd, &budget()).unwrap_err();
            assert!(e.contains("Produce"), "{e}");
            // Behind an ordinary batch too.
            let mut two = BytesMut::from(&plain[..]);
            two.extend_from_slice(&odd);
            assert!(encrypt("t", &policy, &Hooks::default(), &two.freeze(), &budget()).is_err());
            // Fetch: the broker's, handed on as they are.
            assert_eq!(
                decrypt("t", &policy, &Hooks::default(), &odd, &budget()).unwrap(),
                odd
            );
        }
        // The control: an ordinary batch is encrypted.
        let enc = encrypt("t", &policy, &Hooks::default(), &plain, &budget()).unwrap();
        assert!(!enc.records.windows(9).any(|w| w == b"PLAINTEXT"));
    }

    /// What Apache Kafka's log cleaner leaves of a batch whose first
    /// records it removed: the same base offset, attributes (codec
    /// included) and last offset delta, the kept records' offset deltas
    /// from that base, their count, and (as its record builder writes it)
    /// the first kept record's timestamp.
    fn compacted(sealed: &Bytes, keep_from: usize, codec: Compression) -> Bytes {
        let records = decode(sealed);
        let kept = &records[keep_from..];
        let base = crate::records::Base {
            offset: be64(sealed, 0),
            timestamp: kept[0].timestamp,
        };
        let mut out = BytesMut::from(&sealed[..HEADER]);
        out[RECORD_COUNT].copy_from_slice(&(kept.len() as i32).to_be_bytes());
        out[FIRST_TIMESTAMP..FIRST_TIMESTAMP + 8].copy_from_slice(&base.timestamp.to_be_bytes());
        let write = |tmp: &mut BytesMut| -> anyhow::Result<()> {
            crate::records::encode(tmp, kept, base).map_err(anyhow::Error::msg)
        };
        match codec {
            Compression::None => crate::records::encode(&mut out, kept, base).unwrap(),
            Compression::Gzip => Gzip::compress(&mut out, write).unwrap(),
            Compression::Zstd => Zstd::compress(&mut out, write).unwrap(),
            other => unreachable!("{other:?}"),
        }
        let length = (out.len() - LOG_OVERHEAD) as i32;
        out[8..12].copy_from_slice(&length.to_be_bytes());
        let crc = crc32c::crc32c(&out[ATTRIBUTES.start..]);
        out[CRC].copy_from_slice(&crc.to_be_bytes());
        out.freeze()
    }

    #[test]
    fn a_batch_the_log_cleaner_compacted_decrypts_with_its_offsets_and_header_kept() {
        let policy = TopicPolicy::keyset(Keyset::generate())
            .with_record_keys(Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap())
            .unwrap();
        let records = [
            record(0, Some(b"k1"), Some(b"v1")),
            record(1, Some(b"k2"), Some(b"v2")),
            record(2, Some(b"k3"), Some(b"v3")),
            record(3, Some(b"k1"), None),
            record(4, Some(b"k4"), Some(b"v4")),
        ];
        for codec in [Compression::None, Compression::Gzip, Compression::Zstd] {
            let sealed = encrypt(
                "t",
                &policy,
                &Hooks::default(),
                &batch(&records, codec),
                &budget(),
            )
            .unwrap()
            .records;
            let raw = compacted(&sealed, 2, codec);
            let plain = decrypt("t", &policy, &Hooks::default(), &raw, &budget())
                .unwrap_or_else(|e| panic!("{codec:?}: {e}"));
            // The header but length and CRC: as it came.
            assert_eq!(plain[0..8], raw[0..8]);
            assert_eq!(plain[21..61], raw[21..61]);
            let back = decode(&plain);
            let seen: Vec<_> = back
                .iter()
                .map(|r| (r.offset, r.timestamp, r.key.clone(), r.value.clone()))
                .collect();
            let expected: Vec<_> = records[2..]
                .iter()
                .map(|r| (r.offset, r.timestamp, r.key.clone(), r.value.clone()))
                .collect();
            assert_eq!(seen, expected, "{codec:?}");
        }
    }

    #[test]
    fn a_batch_whose_crc_does_not_match_is_refused_both_ways() {
        let policy = TopicPolicy::keyset(Keyset::generate());
        let raw = batch(&[record(0, Some(b"k"), Some(b"v"))], Compression::None);
        let sealed = encrypt("t", &policy, &Hooks::default(), &raw, &budget())
            .unwrap()
            .records;
        for good in [raw, sealed] {
            let mut bad = BytesMut::from(&good[..]);
            let last = bad.len() - 1;
            bad[last] ^= 1;
            let bad = bad.freeze();
            let e = encrypt("t", &policy, &Hooks::default(), &bad, &budget()).unwrap_err();
            assert!(e.contains("CRC"), "{e}");
            let e = decrypt("t", &policy, &Hooks::default(), &bad, &budget()).unwrap_err();
            assert!(e.contains("CRC"), "{e}");
        }
    }

    #[test]
    fn duplicate_header_keys_are_refused_not_dropped() {
        let policy = TopicPolicy::keyset(Keyset::generate());
        let mut r = record(0, Some(b"k"), Some(b"v"));
        r.headers.insert("h".into(), Some(Bytes::from_static(b"1")));
        let raw = batch(&[r], Compression::None);
        // The same record with the header twice, by hand: count 2, then the
        // header's bytes again (the record's length grows by them).
        let (hdr, body) = raw.split_at(61);
        let mut rec = body.to_vec();
        let header_bytes = [2u8, b'h', 2, b'1'];
        let n = rec.len();
        assert_eq!(rec[n - 5], 2, "one header, zigzag");
        rec[n - 5] = 4;
        rec.extend_from_slice(&header_bytes);
        rec[0] += 2 * header_bytes.len() as u8;
        let mut batch = hdr.to_vec();
        batch.extend_from_slice(&rec);
        let len = (batch.len() - 12) as i32;
        batch[8..12].copy_from_slice(&len.to_be_bytes());
        let crc = crc32c::crc32c(&batch[21..]);
        batch[17..21].copy_from_slice(&crc.to_be_bytes());
        let err = encrypt(
            "t",
            &policy,
            &Hooks::default(),
            &Bytes::from(batch),
            &budget(),
        )
        .unwrap_err();
        assert!(err.contains("encode back"), "{err}");
    }
}
