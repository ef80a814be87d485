//! A bounded walk over a v2 record batch's records, before kafka-protocol
//! decodes them, on Produce and on Fetch alike.
//!
//! kafka-protocol's decoder reserves a batch's record count of records
//! (176 bytes each) before it reads one, and a record's header count of
//! headers: a 70-byte batch that claims 2^31-1 records, or a record that
//! claims 2^31-1 headers, aborts the process on the failed allocation, and
//! a batch of millions of tiny records inflates to gigabytes. So the
//! records are walked first, every count and length checked against the
//! bytes that remain (the batch holds exactly its record count of
//! records, each within its length; a key, a value and each header within
//! the record; a header count no larger than the record's bytes can
//! hold), and what decoding them will cost is taken from the request's
//! budget (for the claimed count, once the bytes can hold it; for the
//! headers, once found): only then does kafka-protocol decode them. The
//! walk allocates nothing.
//!
//! Once walked, the records are decoded by [`decode`] into kafka-protocol's
//! `Record`, as its own decoder does (every field, one header per key,
//! header keys UTF-8), but each key, value and header a slice of the
//! records' buffer taken once, where kafka-protocol's takes a slice of a
//! slice of a slice (an atomic count each: about a tenth of the record
//! path's time, measured in `benches/record_path.rs`); the batch's CRC is
//! checked by the caller before. kafka-protocol's encoder is not used for
//! records either: it takes every delta from the smallest offset and
//! timestamp among the records it is given, where a batch's own deltas are
//! from its header's base offset and first timestamp. The two differ in
//! every batch the log cleaner compacted (Apache Kafka keeps a batch's
//! base offset and first timestamp when it removes its first records),
//! which the proxy then refused as a batch that does not encode back as it
//! came. [`encode`] writes the records against the header's base, and
//! each batch is checked to encode back, through it, exactly as it came
//! ([`encodes_back`], which compares as it encodes: nothing is written).

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Record, TimestampType};

/// The smallest record: its length, attributes, timestamp delta, offset
/// delta, key length, value length and header count, a byte each.
const MIN_RECORD: usize = 7;
/// The smallest header: its key length and value length, a byte each.
const MIN_HEADER: usize = 2;
/// What a decoded header takes in memory, at most: its entry in the
/// record's map (the key, the value's handle, the hash) and its index.
const HEADER_COST: usize = 96;

/// A batch's base offset and first timestamp, which its records' deltas
/// are added to.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Base {
    /// The base offset.
    pub(crate) offset: i64,
    /// The first timestamp.
    pub(crate) timestamp: i64,
}

/// What a batch's records hold, as walked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Walked {
    /// Records (the batch's record count, checked).
    pub(crate) records: usize,
    /// Headers, all records together.
    pub(crate) headers: usize,
}

/// What decoding a batch of `records` records in `bytes` bytes of records,
/// transforming them and encoding the result takes in memory, at most, but
/// for their headers ([`header_cost`]): the records as decoded, and the
/// bytes three times (the new keys and values, the new batch, and a third
/// that the check's re-encoding took before it compared as it encodes:
/// kept, so that what a Produce may write is what it was).
pub(crate) fn record_cost(records: usize, bytes: usize) -> usize {
    records
        .saturating_mul(std::mem::size_of::<Record>() + 64)
        .saturating_add(bytes.saturating_mul(3))
}

/// What `headers` decoded headers take in memory, at most.
pub(crate) fn header_cost(headers: usize) -> usize {
    headers.saturating_mul(HEADER_COST)
}

/// A batch's claimed record count, if `records` bytes can hold it.
///
/// # Errors
/// A negative count, or more records than the bytes can hold.
pub(crate) fn claimed(records: &[u8], count: i32) -> Result<usize, String> {
    let Ok(count) = usize::try_from(count) else {
        return Err(format!("a batch claims {count} records"));
    };
    if count > records.len() / MIN_RECORD {
        return Err(format!(
            "a batch claims {count} records in {} bytes (a record takes {MIN_RECORD} at least)",
            records.len()
        ));
    }
    Ok(count)
}

struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        let Some((head, tail)) = self.rest.split_at_checked(n) else {
            return Err(format!(
                "{what} claims {n} bytes and {} are left",
                self.rest.len()
            ));
        };
        self.rest = tail;
        Ok(head)
    }

    /// A zigzag varint of at most `max_bytes` bytes.
    fn zigzag(&mut self, max_bytes: usize, what: &str) -> Result<i64, String> {
        let mut v = 0u64;
        for i in 0..max_bytes {
            let Some((&b, tail)) = self.rest.split_first() else {
                return Err(format!("{what} cut short"));
            };
            self.rest = tail;
            v |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                return Ok(((v >> 1) as i64) ^ -((v & 1) as i64));
            }
        }
        Err(format!("{what}: a varint longer than {max_bytes} bytes"))
    }

    fn varint(&mut self, what: &str) -> Result<i64, String> {
        let v = self.zigzag(5, what)?;
        i32::try_from(v)
            .map(i64::from)
            .map_err(|_| format!("{what}: a varint out of range"))
    }

    /// A length or a count, never negative.
    fn size(&mut self, what: &str) -> Result<usize, String> {
        match self.varint(what)? {
            n if n < 0 => Err(format!("{what}: a negative length {n}")),
            n => Ok(n as usize),
        }
    }

    /// A sized field (a key, a value, a header's key or value), skipped;
    /// `nullable`: `-1` (null) is allowed.
    fn skip_sized(&mut self, what: &str, nullable: bool) -> Result<(), String> {
        match self.varint(what)? {
            -1 if nullable => Ok(()),
            n if n < 0 => Err(format!("{what}: a negative length {n}")),
            n => self.take(n as usize, what).map(|_| ()),
        }
    }
}

/// Walks `records`, the (decompressed) records of a batch whose header
/// claims `count`.
///
/// # Errors
/// What is wrong: a count the bytes cannot hold, a record, key, value or
/// header longer than what is left, a negative length, a varint too long,
/// fewer records than claimed or bytes after the last.
pub(crate) fn walk(records: &[u8], count: i32, base: Base) -> Result<Walked, String> {
    let count = claimed(records, count)?;
    let mut input = Reader { rest: records };
    let mut headers = 0usize;
    for i in 0..count {
        let len = input.size("a record's length")?;
        let mut r = Reader {
            rest: input
                .take(len, "a record")
                .map_err(|e| format!("record {i}: {e}"))?,
        };
        r.take(1, "a record's attributes")?;
        // kafka-protocol adds each delta to the batch's base: a sum that
        // overflows is refused here, never an overflow there.
        let timestamp = r.zigzag(10, "a record's timestamp delta")?;
        if base.timestamp.checked_add(timestamp).is_none() {
            return Err(format!("record {i}'s timestamp overflows its batch's"));
        }
        let offset = r.varint("a record's offset delta")?;
        if base.offset.checked_add(offset).is_none() {
            return Err(format!("record {i}'s offset overflows its batch's"));
        }
        r.skip_sized("a record's key", true)?;
        r.skip_sized("a record's value", true)?;
        let n = r.size("a record's header count")?;
        if n > r.rest.len() / MIN_HEADER {
            return Err(format!(
                "record {i} claims {n} headers in {} bytes",
                r.rest.len()
            ));
        }
        for _ in 0..n {
            r.skip_sized("a header's key", false)?;
            r.skip_sized("a header's value", true)?;
        }
        headers += n;
    }
    if !input.rest.is_empty() {
        return Err(format!(
            "{} bytes after the last of {count} records",
            input.rest.len()
        ));
    }
    Ok(Walked {
        records: count,
        headers,
    })
}

/// The fields of a batch's header that each of its decoded records
/// carries, as kafka-protocol's decoder sets them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    /// The base offset and first timestamp.
    pub(crate) base: Base,
    /// The attributes (transactional, control, delete horizon, timestamp
    /// type).
    pub(crate) attributes: i16,
    pub(crate) partition_leader_epoch: i32,
    pub(crate) producer_id: i64,
    pub(crate) producer_epoch: i16,
    pub(crate) base_sequence: i32,
}

/// Decodes the records of a batch that [`walk`] walked (`walked`, from
/// the same `records`) as kafka-protocol's decoder does: each record's
/// offset, timestamp and sequence from the header's base, its key, value
/// and headers (one per key: a later header of a key takes the earlier
/// one's place, as in kafka-protocol's map; the encode-back check then
/// refuses the batch), header keys UTF-8. Keys, values and headers are
/// slices of `records`, nothing copied. Sizes only what the walk counted.
///
/// # Errors
/// A header key that is not UTF-8; what the walk refuses (not reached
/// after it).
pub(crate) fn decode(
    records: &Bytes,
    walked: Walked,
    header: &Header,
) -> Result<Vec<Record>, String> {
    let attributes = header.attributes;
    let timestamp_type = if attributes & (1 << 3) != 0 {
        TimestampType::LogAppend
    } else {
        TimestampType::Creation
    };
    let mut list = Vec::with_capacity(walked.records);
    let mut input = Reader { rest: &records[..] };
    // A sized field as a slice of `records` (one reference count).
    let sized = |r: &mut Reader<'_>, what: &str, nullable: bool| -> Result<_, String> {
        match r.varint(what)? {
            -1 if nullable => Ok(None),
            n if n < 0 => Err(format!("{what}: a negative length {n}")),
            n => Ok(Some(records.slice_ref(r.take(n as usize, what)?))),
        }
    };
    for _ in 0..walked.records {
        let len = input.size("a record's length")?;
        let mut r = Reader {
            rest: input.take(len, "a record")?,
        };
        r.take(1, "a record's attributes")?;
        let timestamp_delta = r.zigzag(10, "a record's timestamp delta")?;
        let offset_delta = r.varint("a record's offset delta")? as i32;
        let key = sized(&mut r, "a record's key", true)?;
        let value = sized(&mut r, "a record's value", true)?;
        let n = r.size("a record's header count")?;
        let mut headers = IndexMap::with_capacity(n);
        for _ in 0..n {
            let name = sized(&mut r, "a header's key", false)?.unwrap_or_default();
            let name = StrBytes::from_utf8(name).map_err(|_| "a header key that is not UTF-8")?;
            let value = sized(&mut r, "a header's value", true)?;
            headers.insert(name, value);
        }
        list.push(Record {
            transactional: attributes & (1 << 4) != 0,
            control: attributes & (1 << 5) != 0,
            delete_horizon: attributes & (1 << 6) != 0,
            timestamp_type,
            partition_leader_epoch: header.partition_leader_epoch,
            producer_id: header.producer_id,
            producer_epoch: header.producer_epoch,
            sequence: header.base_sequence.wrapping_add(offset_delta),
            offset: header
                .base
                .offset
                .checked_add(i64::from(offset_delta))
                .ok_or("a record's offset overflows its batch's")?,
            timestamp: header
                .base
                .timestamp
                .checked_add(timestamp_delta)
                .ok_or("a record's timestamp overflows its batch's")?,
            key,
            value,
            headers,
        });
    }
    Ok(list)
}

/// One record of a walked batch as slices of its bytes, for a transform
/// that changes only its key and value and copies the rest as it came
/// ([`each_record`], [`put_record`]).
pub(crate) struct Parts<'a> {
    /// The attributes byte (0 in every record a v2 writer makes).
    pub(crate) attributes: u8,
    /// The timestamp delta and offset delta, as encoded.
    pub(crate) deltas: &'a [u8],
    /// The offset delta.
    pub(crate) offset_delta: i32,
    /// The key (`None`: null).
    pub(crate) key: Option<&'a [u8]>,
    /// The value (`None`: null).
    pub(crate) value: Option<&'a [u8]>,
    /// The header count and the headers, as encoded.
    pub(crate) headers: &'a [u8],
    /// Each header's key, in order (at most [`KEYS`]; `None` when the
    /// record has more).
    pub(crate) header_keys: Option<([&'a [u8]; KEYS], usize)>,
    /// Whether [`encode`] writes the record's bytes back exactly from its
    /// decoded fields: every varint as short as it can be, attributes 0,
    /// at most [`KEYS`] headers, their keys UTF-8 and no two alike (the
    /// decoder keeps one header per key).
    pub(crate) canonical: bool,
}

/// The most header keys [`Parts`] lists.
pub(crate) const KEYS: usize = 8;

/// Calls `each` with every record of `records`, walked by [`walk`] as
/// `walked`, in order, until it returns `false`.
///
/// # Errors
/// What `each` returns; what the walk refuses (not reached after it).
pub(crate) fn each_record<'a>(
    records: &'a [u8],
    walked: Walked,
    mut each: impl FnMut(Parts<'a>) -> Result<bool, String>,
) -> Result<bool, String> {
    let mut input = Reader { rest: records };
    // A varint read as exactly the bytes [`encode`] writes for its value
    // (the shortest, and no bits past 64 in a tenth byte).
    let shortest = |before: &[u8], after: &[u8], v: i64| {
        let mut again = Encoded::default();
        put_varlong(&mut again, v);
        before[..before.len() - after.len()] == again.bytes[..again.len]
    };
    let sized = |r: &mut Reader<'a>, what: &str, canonical: &mut bool| {
        let before = r.rest;
        let n = r.varint(what)?;
        *canonical &= shortest(before, r.rest, n);
        match n {
            -1 => Ok(None),
            n if n < 0 => Err(format!("{what}: a negative length {n}")),
            n => r.take(n as usize, what).map(Some),
        }
    };
    for _ in 0..walked.records {
        let mut canonical = true;
        let before = input.rest;
        let len = input.size("a record's length")?;
        canonical &= shortest(before, input.rest, len as i64);
        let mut r = Reader {
            rest: input.take(len, "a record")?,
        };
        let attributes = r.take(1, "a record's attributes")?[0];
        canonical &= attributes == 0;
        let deltas_at = r.rest;
        let timestamp = r.zigzag(10, "a record's timestamp delta")?;
        canonical &= shortest(deltas_at, r.rest, timestamp);
        let offset_at = r.rest;
        let offset_delta = r.varint("a record's offset delta")?;
        canonical &= shortest(offset_at, r.rest, offset_delta);
        let deltas = &deltas_at[..deltas_at.len() - r.rest.len()];
        let key = sized(&mut r, "a record's key", &mut canonical)?;
        let value = sized(&mut r, "a record's value", &mut canonical)?;
        let count_at = r.rest;
        let n = r.size("a record's header count")?;
        canonical &= shortest(count_at, r.rest, n as i64);
        let mut keys = [&[][..]; KEYS];
        canonical &= n <= KEYS;
        for i in 0..n {
            let name = sized(&mut r, "a header's key", &mut canonical)?.unwrap_or_default();
            sized(&mut r, "a header's value", &mut canonical)?;
            if i < KEYS {
                canonical &= std::str::from_utf8(name).is_ok() && !keys[..i].contains(&name);
                keys[i] = name;
            }
        }
        // Bytes after the last header, inside the record's length: not
        // written again by [`encode`].
        canonical &= r.rest.is_empty();
        let headers = &count_at[..count_at.len() - r.rest.len()];
        let parts = Parts {
            attributes,
            deltas,
            offset_delta: offset_delta as i32,
            key,
            value,
            headers,
            header_keys: (n <= KEYS).then_some((keys, n)),
            canonical,
        };
        if !each(parts)? {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Writes the record `parts` with `key` and `value` in place of its own:
/// its attributes, deltas and headers as they came.
///
/// # Errors
/// A length outside `i32`.
pub(crate) fn put_record(
    out: &mut impl Put,
    parts: &Parts<'_>,
    key: Option<&[u8]>,
    value: Option<&[u8]>,
) -> Result<(), String> {
    let sized = |b: Option<&[u8]>| -> Result<usize, String> {
        match b {
            None => Ok(varint_len(-1)),
            Some(b) => Ok(varint_len(length(b.len())?) + b.len()),
        }
    };
    let size = 1 + parts.deltas.len() + sized(key)? + sized(value)? + parts.headers.len();
    put_varint(out, length(size)?);
    out.put_u8(parts.attributes);
    out.put_slice(parts.deltas);
    put_sized(out, key)?;
    put_sized(out, value)?;
    out.put_slice(parts.headers);
    Ok(())
}

/// Where [`encode`] writes: a buffer, or a comparison with the bytes a
/// batch came with ([`encodes_back`]).
pub(crate) trait Put {
    fn put_u8(&mut self, b: u8);
    fn put_slice(&mut self, b: &[u8]);
}

impl Put for BytesMut {
    fn put_u8(&mut self, b: u8) {
        BufMut::put_u8(self, b);
    }
    fn put_slice(&mut self, b: &[u8]) {
        BufMut::put_slice(self, b);
    }
}

/// A buffer of plaintext grows through [`crate::wipe::Buf::reserve`],
/// which wipes the block it leaves.
impl Put for crate::wipe::Buf {
    fn put_u8(&mut self, b: u8) {
        self.extend_from_slice(&[b]);
    }
    fn put_slice(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// A varint as [`put_varlong`] writes it (10 bytes at most).
#[derive(Default)]
struct Encoded {
    bytes: [u8; 10],
    len: usize,
}

impl Put for Encoded {
    fn put_u8(&mut self, b: u8) {
        if let Some(slot) = self.bytes.get_mut(self.len) {
            *slot = b;
            self.len += 1;
        }
    }
    fn put_slice(&mut self, b: &[u8]) {
        for &x in b {
            self.put_u8(x);
        }
    }
}

/// Compares what is put with `rest`, in order.
struct Compare<'a> {
    rest: &'a [u8],
    same: bool,
}

impl Put for Compare<'_> {
    fn put_u8(&mut self, b: u8) {
        self.put_slice(&[b]);
    }
    fn put_slice(&mut self, b: &[u8]) {
        match self.rest.split_at_checked(b.len()) {
            Some((head, tail)) if self.same && head == b => self.rest = tail,
            _ => self.same = false,
        }
    }
}

/// Whether `records` encode ([`encode`], against `base`) to exactly
/// `expected`: what a batch's records are checked with before they are
/// transformed. Compared as they are encoded, so nothing is written (no
/// copy of a Produce's plaintext to wipe).
///
/// # Errors
/// As [`encode`].
pub(crate) fn encodes_back(
    records: &[Record],
    base: Base,
    expected: &[u8],
) -> Result<bool, String> {
    let mut compare = Compare {
        rest: expected,
        same: true,
    };
    encode(&mut compare, records, base)?;
    Ok(compare.same && compare.rest.is_empty())
}

/// Writes `records` as a v2 batch's records section into `out`: each
/// record's offset and timestamp as deltas from `base` (the batch header's
/// base offset and first timestamp), attributes 0, key, value and headers
/// in order.
///
/// # Errors
/// A delta that a record cannot hold (an offset delta outside `i32`), a
/// length outside `i32`.
pub(crate) fn encode(out: &mut impl Put, records: &[Record], base: Base) -> Result<(), String> {
    for (i, r) in records.iter().enumerate() {
        let timestamp = r
            .timestamp
            .checked_sub(base.timestamp)
            .ok_or_else(|| format!("record {i}'s timestamp delta overflows"))?;
        let offset = r
            .offset
            .checked_sub(base.offset)
            .and_then(|d| i32::try_from(d).ok())
            .ok_or_else(|| format!("record {i}'s offset delta is outside a record's range"))?;
        let sized = |b: Option<&[u8]>| -> Result<usize, String> {
            match b {
                None => Ok(varint_len(-1)),
                Some(b) => Ok(varint_len(length(b.len())?) + b.len()),
            }
        };
        let mut size = 1 + varlong_len(timestamp) + varint_len(offset);
        size += sized(r.key.as_deref())?;
        size += sized(r.value.as_deref())?;
        size += varint_len(length(r.headers.len())?);
        for (name, value) in &r.headers {
            size += sized(Some(name.as_bytes()))?;
            size += sized(value.as_deref())?;
        }
        put_varint(out, length(size)?);
        out.put_u8(0);
        put_varlong(out, timestamp);
        put_varint(out, offset);
        put_sized(out, r.key.as_deref())?;
        put_sized(out, r.value.as_deref())?;
        put_varint(out, length(r.headers.len())?);
        for (name, value) in &r.headers {
            put_sized(out, Some(name.as_bytes()))?;
            put_sized(out, value.as_deref())?;
        }
    }
    Ok(())
}

fn length(n: usize) -> Result<i32, String> {
    i32::try_from(n).map_err(|_| format!("a length of {n} bytes"))
}

fn put_sized(out: &mut impl Put, b: Option<&[u8]>) -> Result<(), String> {
    match b {
        None => put_varint(out, -1),
        Some(b) => {
            put_varint(out, length(b.len())?);
            out.put_slice(b);
        }
    }
    Ok(())
}

fn zigzag64(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

fn varlong_len(v: i64) -> usize {
    let mut z = zigzag64(v);
    let mut n = 1;
    while z >= 0x80 {
        z >>= 7;
        n += 1;
    }
    n
}

fn varint_len(v: i32) -> usize {
    varlong_len(i64::from(v))
}

fn put_varlong(out: &mut impl Put, v: i64) {
    let mut z = zigzag64(v);
    while z >= 0x80 {
        out.put_u8((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
    out.put_u8(z as u8);
}

/// A varint is a varlong of the same value (zigzag over 32 bits gives the
/// same bits as over 64 for every `i32`).
fn put_varint(out: &mut impl Put, v: i32) {
    put_varlong(out, i64::from(v));
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use indexmap::IndexMap;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::{
        Compression, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
    };

    fn record(i: i64, headers: usize) -> Record {
        let mut h = IndexMap::new();
        for n in 0..headers {
            h.insert(
                StrBytes::from_string(format!("h{n}")),
                Some(bytes::Bytes::from_static(b"v")),
            );
        }
        Record {
            transactional: false,
            control: false,
            delete_horizon: false,
            partition_leader_epoch: 0,
            producer_id: 7,
            producer_epoch: 0,
            timestamp_type: TimestampType::Creation,
            offset: i,
            sequence: i as i32,
            timestamp: 0,
            key: (i % 2 == 0).then(|| bytes::Bytes::from_static(b"k")),
            value: (i % 3 != 0).then(|| bytes::Bytes::from(vec![7u8; i as usize])),
            headers: h,
        }
    }

    /// A batch of `records` records, and where its records start.
    fn batch(records: &[Record]) -> BytesMut {
        let mut out = BytesMut::new();
        RecordBatchEncoder::encode(
            &mut out,
            records.iter(),
            &RecordEncodeOptions {
                version: 2,
                compression: Compression::None,
            },
        )
        .unwrap();
        out
    }

    #[test]
    fn a_batch_walks_as_kafka_protocol_encodes_it() {
        let records: Vec<Record> = (0..5).map(|i| record(i, i as usize % 3)).collect();
        let b = batch(&records);
        assert_eq!(&b[57..61], &5i32.to_be_bytes(), "one batch of the five");
        let w = walk(&b[61..], 5, Base::default()).unwrap();
        // Records 0 to 4 carry 0, 1, 2, 0 and 1 headers.
        assert_eq!(
            w,
            Walked {
                records: 5,
                headers: 4
            }
        );
        assert!(record_cost(w.records, b.len() - 61) > 5 * std::mem::size_of::<Record>());
    }

    #[test]
    fn records_decode_as_kafka_protocol_decodes_them_and_encode_back() {
        use kafka_protocol::records::RecordBatchDecoder;
        let mut records: Vec<Record> = (0..7).map(|i| record(i, i as usize % 3)).collect();
        for r in &mut records {
            r.timestamp = 1_700_000_000_000 - r.offset;
            r.transactional = true;
        }
        let b = batch(&records).freeze();
        let theirs = RecordBatchDecoder::decode(&mut b.clone()).unwrap().records;
        let all = b.slice(61..);
        let be32 = |at: usize| i32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        let be64 = |at: usize| i64::from_be_bytes(b[at..at + 8].try_into().unwrap());
        let header = Header {
            base: Base {
                offset: be64(0),
                timestamp: be64(27),
            },
            attributes: i16::from_be_bytes([b[21], b[22]]),
            partition_leader_epoch: be32(12),
            producer_id: be64(43),
            producer_epoch: i16::from_be_bytes([b[51], b[52]]),
            base_sequence: be32(53),
        };
        let walked = walk(&all, 7, header.base).unwrap();
        let ours = decode(&all, walked, &header).unwrap();
        assert_eq!(ours, theirs);
        assert!(encodes_back(&ours, header.base, &all).unwrap());
        // A byte more, a byte less, a byte changed: not as it came.
        let mut longer = all.to_vec();
        longer.push(0);
        assert!(!encodes_back(&ours, header.base, &longer).unwrap());
        assert!(!encodes_back(&ours, header.base, &all[..all.len() - 1]).unwrap());
        let mut changed = all.to_vec();
        changed[all.len() / 2] ^= 1;
        assert!(!encodes_back(&ours, header.base, &changed).unwrap());
        // A header key that is not UTF-8 is refused, as kafka-protocol
        // refuses it: record 1's one header key, `h0`.
        let mut bad = all.to_vec();
        let at = bad.windows(2).position(|w| w == b"h0").unwrap();
        bad[at] = 0xff;
        let bad = Bytes::from(bad);
        let walked = walk(&bad, 7, header.base).unwrap();
        assert!(decode(&bad, walked, &header).is_err());
    }

    #[test]
    fn counts_the_bytes_cannot_hold_are_refused_before_anything_is_sized() {
        let b = batch(&[record(1, 0)]);
        let records = &b[61..];
        // The 70-byte batch's count: 2^31-1 records.
        assert!(walk(records, i32::MAX, Base::default())
            .unwrap_err()
            .contains("claims"));
        assert!(walk(records, -1, Base::default()).is_err());
        assert!(
            walk(records, 2, Base::default()).is_err(),
            "more records claimed than held"
        );
        assert!(
            walk(records, 0, Base::default()).is_err(),
            "bytes after the last record"
        );
        // A header count of 2^31-1: the record's last byte is its header
        // count (0); a count of 2^31-1 as a zigzag varint, with the
        // record's length grown to hold it.
        let mut forged = records.to_vec();
        forged.pop();
        forged.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
        forged[0] += 8; // the record's length (zigzag: 2 x length), 4 bytes more
        assert!(
            walk(&forged, 1, Base::default())
                .unwrap_err()
                .contains("headers in"),
            "{:?}",
            walk(&forged, 1, Base::default())
        );
        // A key length past the record.
        let mut long_key = records.to_vec();
        long_key[4] = 0x7e; // the key's length: 63
        assert!(walk(&long_key, 1, Base::default()).is_err());
        // A varint that never ends.
        assert!(walk(&[0xff; 64], 1, Base::default())
            .unwrap_err()
            .contains("varint"));
    }
}
