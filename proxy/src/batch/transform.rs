//! What Produce and Fetch share: a partition's record batches walked,
//! each data batch decompressed within the budget, then either taken by a
//! fast path (its records changed straight from their bytes: [`Steps`],
//! [`take_all`], [`may_take`]) or decoded, checked to encode back as it
//! came, its records changed, and encoded again, under its original
//! header; the v2 batch header's layout.

use std::cell::RefCell;

use bytes::{Bytes, BytesMut};
use kafka_protocol::compression::{Compressor as _, Gzip, Snappy, Zstd};
use kafka_protocol::records::{Compression, Record};

use tombstone_crypt::policy::TopicPolicy;

use crate::budget::Budget;
use crate::records::{Base, Walked};
use crate::wipe::{self, Buf};

/// The size of a v2 record batch's header, up to and including its record
/// count.
pub(super) const HEADER: usize = 61;

/// Where the length-covered part starts (after base offset and length).
pub(super) const LOG_OVERHEAD: usize = 12;

pub(super) const MAGIC: usize = 16;

pub(super) const CRC: std::ops::Range<usize> = 17..21;

pub(super) const ATTRIBUTES: std::ops::Range<usize> = 21..23;

pub(super) const LAST_OFFSET_DELTA: std::ops::Range<usize> = 23..27;

pub(super) const PRODUCER_ID: usize = 43;

pub(super) const PRODUCER_EPOCH: usize = 51;

pub(super) const BASE_SEQUENCE: std::ops::Range<usize> = 53..57;

pub(super) const RECORD_COUNT: std::ops::Range<usize> = 57..61;

/// Where the batch's first timestamp starts (8 bytes).
pub(super) const FIRST_TIMESTAMP: usize = 27;

pub(super) const CONTROL_FLAG: i16 = 1 << 5;

/// A batch's header fields that change when the write rule's tombstones
/// go at its front, or when an earlier batch of its producer grew.
#[derive(Clone, Copy, Debug)]
pub(super) struct Grown {
    pub(super) added: i32,
    pub(super) base_sequence: i32,
}

/// Which side of a transform is plaintext, wiped before it is freed: what
/// comes in (Produce: the client's records, decompressed, and the check's
/// re-encoding of them) or what goes out (Fetch: the records' decrypted
/// fields and the batches encoded from them). The other side is
/// ciphertext, and fields the policy does not encrypt.
#[derive(Clone, Copy, Debug)]
pub(super) struct Wipe {
    pub(super) input: bool,
    pub(super) output: bool,
}

/// Decoded records whose fields are wiped when dropped (`wipe::bytes`):
/// what `f` put in them (a decrypted key, value or header on Fetch). A
/// field still a slice of its batch is only let go (the batch is wiped
/// with it once every slice is dropped).
pub(super) struct Records {
    pub(super) list: Vec<Record>,
    pub(super) wipe: bool,
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

/// What a transform does with a data batch's records.
pub(super) struct Steps<F, G, D> {
    /// Each record of the batch decoded, changed in place.
    pub(super) record: F,
    /// The batch's records after `record`, given the batch's header: the
    /// header's counts and base sequence to change, if any (Produce: the
    /// write rule's tombstones put in front).
    pub(super) batch: G,
    /// The fast path, tried first: the records (decompressed, walked,
    /// against the batch's base) written transformed straight from their
    /// bytes, and how many were kept; or `None` (what it wrote is taken
    /// back), and the batch is decoded for `record` and `batch`.
    pub(super) direct: D,
}

/// Applies `steps` to every data batch in `raw`, batch by
/// batch. On Fetch (`partial_ok`: a partial batch at the end is dropped)
/// control batches and empty batches are kept byte for byte; on Produce
/// they are refused. Every buffer of plaintext it made (`wipe` says which
/// side is plaintext) is wiped before it is freed; the result is the
/// caller's to wipe.
pub(super) fn transform(
    raw: &Bytes,
    partial_ok: bool,
    budget: &Budget,
    wipe: Wipe,
    mut steps: Steps<
        impl FnMut(&mut Record) -> Result<(), String>,
        impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
        impl FnMut(&[u8], Walked, Base, &mut Buf) -> Result<Option<usize>, String>,
    >,
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
        transform_batch(&batch, budget, &mut steps, &mut out, wipe)?;
    }
    Ok(out.freeze())
}

/// One data batch: decompressed (within the budget), walked (its counts
/// checked against its bytes, its cost taken from the budget), decoded, checked
/// to encode back as it came, each record through `f`, encoded with the
/// same codec under the original header, appended to `out`.
pub(super) fn transform_batch(
    batch: &Bytes,
    budget: &Budget,
    steps: &mut Steps<
        impl FnMut(&mut Record) -> Result<(), String>,
        impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
        impl FnMut(&[u8], Walked, Base, &mut Buf) -> Result<Option<usize>, String>,
    >,
    out: &mut Buf,
    wipe: Wipe,
) -> Result<(), String> {
    // The records' bytes as they came (decompressed), kept for the check:
    // a slice of `batch` uncompressed, else a buffer of its own.
    let plain: RefCell<Option<Bytes>> = RefCell::new(None);
    let result = transform_records(batch, budget, steps, out, wipe, &plain);
    // Every record, slices of it, is dropped by now: its last handle.
    if let Some(plain) = plain.into_inner() {
        wipe::bytes(plain, wipe.input);
    }
    result
}

pub(super) fn transform_records(
    batch: &Bytes,
    budget: &Budget,
    steps: &mut Steps<
        impl FnMut(&mut Record) -> Result<(), String>,
        impl FnMut(&[u8], &mut Vec<Record>) -> Result<Option<Grown>, String>,
        impl FnMut(&[u8], Walked, Base, &mut Buf) -> Result<Option<usize>, String>,
    >,
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
    // records.
    out.extend_from_slice(&batch[..HEADER]);
    match fast(
        &all,
        walked,
        base,
        &mut steps.direct,
        out,
        wipe.output,
        compression,
    )? {
        Some((kept, uncompressed)) => {
            budget.note_written(
                kept,
                uncompressed,
                walked.headers,
                compression != Compression::None,
            );
            return finish(&mut out[start..], batch, None, kept, count);
        }
        None => out.take_back(start + HEADER),
    }
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
        (steps.record)(record)?;
    }
    let grown = (steps.batch)(&batch[..HEADER], &mut records.list)?;
    // The records against the header's base, compressed with its codec
    // (the codec's buffer of uncompressed records is kafka-protocol's, as
    // when its encoder compressed).
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
    finish(&mut out[start..], batch, grown, kept, count)
}

/// The fast path of a batch's records (Fetch's): `direct` writes them
/// transformed straight from their bytes `all` (`walked`, against `base`)
/// into `out` (after the batch's header, there already), or into a buffer
/// of their own (wiped when `plaintext`) that is then compressed with the
/// batch's codec. The records kept and their length uncompressed; `None`
/// when `direct` declines (a record the general path must decode), what
/// it wrote taken back from `out` (wiped) by the caller.
fn fast(
    all: &[u8],
    walked: Walked,
    base: Base,
    direct: &mut impl FnMut(&[u8], Walked, Base, &mut Buf) -> Result<Option<usize>, String>,
    out: &mut Buf,
    plaintext: bool,
    compression: Compression,
) -> Result<Option<(usize, usize)>, String> {
    let taken = if compression == Compression::None {
        let at = out.len();
        direct(all, walked, base, out)?.map(|kept| (kept, out.len() - at))
    } else {
        let mut records = Buf::with_capacity(all.len(), plaintext);
        let Some(kept) = direct(all, walked, base, &mut records)? else {
            return Ok(None);
        };
        compress(out, compression, &records)?;
        Some((kept, records.len()))
    };
    #[cfg(test)]
    if taken.is_some() {
        FAST_BATCHES.with(|n| n.set(n.get() + 1));
    }
    Ok(taken)
}

#[cfg(test)]
thread_local! {
    /// Batches the fast path wrote, on this thread (the tests' count).
    pub(super) static FAST_BATCHES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Every record of `records` (walked as `walked`) through `take`, a fast
/// path's step for one record: the records kept (all of them), or `None`
/// when `take` declines one or fails. Every record is first checked by
/// `may`, before any is taken: as the general path checks every record's
/// encoding before it transforms any, a batch the fast path declines for
/// one of its records costs no work, and no side effect (a subject's key
/// made in the key store), for the records before it. A record that fails
/// is the general path's to tell, for the same reason: it may refuse the
/// batch for another record first.
pub(super) fn take_all<'a>(
    records: &'a [u8],
    walked: Walked,
    may: impl Fn(&crate::records::Parts<'a>) -> bool,
    mut take: impl FnMut(crate::records::Parts<'a>) -> Result<bool, String>,
) -> Option<usize> {
    let each = |f: &mut dyn FnMut(crate::records::Parts<'a>) -> bool| {
        crate::records::each_record(records, walked, |parts| Ok(f(parts))).unwrap_or(false)
    };
    if !each(&mut |parts| may(&parts)) {
        return None;
    }
    each(&mut |parts| take(parts).unwrap_or(false)).then_some(walked.records)
}

/// Whether a fast path may take the record `parts` under `policy`: its
/// bytes are what [`crate::records::encode`] writes back (else the general
/// path refuses it), and it carries no header the policy encrypts (a
/// header key that is not UTF-8 counts as one: the general path refuses
/// it).
pub(super) fn may_take(policy: &TopicPolicy, parts: &crate::records::Parts<'_>) -> bool {
    if !parts.canonical {
        return false;
    }
    if policy.headers().is_empty() {
        return true;
    }
    let Some((names, n)) = parts.header_keys else {
        return false;
    };
    !names[..n]
        .iter()
        .any(|name| std::str::from_utf8(name).map_or(true, |name| policy.encrypts_header(name)))
}

/// `records` (a batch's records section) appended to `out` under
/// `compression`, as the general path's encoders write it.
fn compress(out: &mut Buf, compression: Compression, records: &[u8]) -> Result<(), String> {
    let write = |tmp: &mut BytesMut| -> anyhow::Result<()> {
        tmp.extend_from_slice(records);
        Ok(())
    };
    match compression {
        Compression::None => {
            out.extend_from_slice(records);
            Ok(())
        }
        Compression::Gzip => Gzip::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
        Compression::Snappy => Snappy::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
        Compression::Lz4 => lz4_bytes(out, records),
        Compression::Zstd => Zstd::compress(out.inner(), write).map_err(|e| format!("{e:#}")),
    }
    .map_err(|e| format!("encoding a record batch: {e}"))
}

/// A batch encoded (`encoded`, from its header on) given its length,
/// counts and CRC: `grown` (Produce: the write rule's tombstones in
/// front), else `kept` of the `count` records `batch` came with (Fetch).
fn finish(
    encoded: &mut [u8],
    batch: &[u8],
    grown: Option<Grown>,
    kept: usize,
    count: i32,
) -> Result<(), String> {
    let new_length = i32::try_from(encoded.len() - LOG_OVERHEAD)
        .map_err(|_| "a record batch encoded to more than 2 GiB")?;
    encoded[8..LOG_OVERHEAD].copy_from_slice(&new_length.to_be_bytes());
    if let Some(grown) = grown {
        // The client's counts, grown by the tombstones in front; the base
        // sequence where the broker expects it.
        let grow_by = |at: std::ops::Range<usize>| -> Result<[u8; 4], String> {
            be32(batch, at.start)
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
pub(super) fn lz4(
    out: &mut Buf,
    list: &[Record],
    base: crate::records::Base,
    plaintext: bool,
) -> Result<usize, String> {
    let mut records = Buf::with_capacity(0, plaintext);
    crate::records::encode(&mut records, list, base)?;
    lz4_bytes(out, &records)?;
    Ok(records.len())
}

/// `records` appended to `out` as an lz4 frame, as [`lz4`] writes one.
fn lz4_bytes(out: &mut Buf, records: &[u8]) -> Result<(), String> {
    use bytes::BufMut as _;
    use std::io::Write as _;
    let mut encoder = lz4::EncoderBuilder::new()
        .block_mode(lz4::BlockMode::Independent)
        .build(out.inner().writer())
        .map_err(|e| format!("compressing lz4: {e}"))?;
    encoder
        .write_all(records)
        .map_err(|e| format!("compressing lz4: {e}"))?;
    encoder
        .finish()
        .1
        .map_err(|e| format!("compressing lz4: {e}"))
}

pub(super) fn be64(at: &[u8], start: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&at[start..start + 8]);
    i64::from_be_bytes(b)
}

pub(super) fn be32(at: &[u8], start: usize) -> i32 {
    i32::from_be_bytes([at[start], at[start + 1], at[start + 2], at[start + 3]])
}
