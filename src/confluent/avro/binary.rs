//! A record's binary encoding: a body checked against its schema before
//! anything is decoded (every length within what is left, nesting and
//! empty items bounded), read with `apache-avro`, and written by this
//! encoder into a buffer wiped when freed.

use apache_avro::schema::Schema;
use apache_avro::types::Value as Avro;
use zeroize::Zeroizing;

use super::*;
use crate::error::Error;

impl AvroSchema {
    /// Decodes a record's body (all of it: trailing bytes are an error).
    /// The body is checked first, without allocating
    /// ([`check`](AvroSchema::check)): `apache-avro` reserves an array's
    /// declared length and recurses once per nesting level.
    pub(in crate::confluent) fn read(&self, body: &[u8]) -> Result<Avro, Error> {
        let mut input = body;
        self.check(&self.schema, &mut input, 0, &mut (0, 0))?;
        let mut rest = body;
        let value = apache_avro::from_avro_datum(&self.schema, &mut rest, None)
            .map_err(|e| avro_error("a Confluent record's Avro body does not decode", &e))?;
        if !rest.is_empty() {
            return Err(Error::confluent(
                "a Confluent record's Avro body has bytes after the record",
            ));
        }
        Ok(value)
    }

    /// Encodes a record: its strings and bytes are wiped once written,
    /// and so is every buffer the encoding outgrows (the bytes returned are
    /// wiped when dropped). `apache-avro`'s own writer takes the record by
    /// value and frees it, and its buffer as it grows, without wiping.
    pub(in crate::confluent) fn write(&self, mut value: Avro) -> Result<Zeroizing<Vec<u8>>, Error> {
        let mut out = Buf(Zeroizing::new(Vec::with_capacity(256)));
        let done = self.encode(&self.schema, &value, &mut out, 0);
        wipe_avro(&mut value);
        done.map(|()| out.0)
    }

    /// Appends `value`'s Avro binary encoding under `schema` (as
    /// `apache-avro` writes it; its logical types other than dates and
    /// times, which hold no strings, are encoded by it).
    pub(super) fn encode(
        &self,
        schema: &Schema,
        value: &Avro,
        out: &mut Buf,
        depth: usize,
    ) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::confluent(
                "an Avro record nested more than 128 levels",
            ));
        }
        let mismatch = || Error::confluent("the record does not match its Avro schema");
        match (self.named(schema), value) {
            (Schema::Null, Avro::Null) => {}
            (Schema::Boolean, Avro::Boolean(b)) => out.put(&[u8::from(*b)]),
            (
                Schema::Int | Schema::Date | Schema::TimeMillis,
                Avro::Int(i) | Avro::Date(i) | Avro::TimeMillis(i),
            ) => {
                out.long(i64::from(*i));
            }
            (
                Schema::Long
                | Schema::TimeMicros
                | Schema::TimestampMillis
                | Schema::TimestampMicros
                | Schema::TimestampNanos
                | Schema::LocalTimestampMillis
                | Schema::LocalTimestampMicros
                | Schema::LocalTimestampNanos,
                Avro::Long(l)
                | Avro::TimeMicros(l)
                | Avro::TimestampMillis(l)
                | Avro::TimestampMicros(l)
                | Avro::TimestampNanos(l)
                | Avro::LocalTimestampMillis(l)
                | Avro::LocalTimestampMicros(l)
                | Avro::LocalTimestampNanos(l),
            ) => out.long(*l),
            (Schema::Float, Avro::Float(f)) => out.put(&f.to_le_bytes()),
            (Schema::Double, Avro::Double(d)) => out.put(&d.to_le_bytes()),
            (Schema::Bytes, Avro::Bytes(b)) => {
                out.long(len(b.len())?);
                out.put(b);
            }
            (Schema::String, Avro::String(t)) => {
                out.long(len(t.len())?);
                out.put(t.as_bytes());
            }
            (Schema::Fixed(f), Avro::Fixed(n, b)) if f.size == *n && b.len() == *n => out.put(b),
            (Schema::Enum(e), Avro::Enum(i, _)) if (*i as usize) < e.symbols.len() => {
                out.long(i64::from(*i));
            }
            (Schema::Union(u), Avro::Union(i, v)) => {
                let variant = u.variants().get(*i as usize).ok_or_else(mismatch)?;
                out.long(i64::from(*i));
                self.encode(variant, v, out, depth + 1)?;
            }
            (Schema::Array(a), Avro::Array(items)) => {
                if !items.is_empty() {
                    out.long(len(items.len())?);
                    for item in items {
                        self.encode(&a.items, item, out, depth + 1)?;
                    }
                }
                out.long(0);
            }
            (Schema::Map(m), Avro::Map(items)) => {
                if !items.is_empty() {
                    out.long(len(items.len())?);
                    for (k, v) in items {
                        out.long(len(k.len())?);
                        out.put(k.as_bytes());
                        self.encode(&m.types, v, out, depth + 1)?;
                    }
                }
                out.long(0);
            }
            (Schema::Record(r), Avro::Record(fields)) if r.fields.len() == fields.len() => {
                for (f, (name, v)) in r.fields.iter().zip(fields) {
                    if &f.name != name {
                        return Err(mismatch());
                    }
                    self.encode(&f.schema, v, out, depth + 1)?;
                }
            }
            (
                s @ (Schema::Decimal(_) | Schema::BigDecimal | Schema::Uuid | Schema::Duration),
                v @ (Avro::Decimal(_) | Avro::BigDecimal(_) | Avro::Uuid(_) | Avro::Duration(_)),
            ) => {
                let bytes = apache_avro::to_avro_datum(s, v.clone())
                    .map_err(|e| avro_error("cannot encode the record in Avro", &e))?;
                out.put(&bytes);
            }
            _ => return Err(mismatch()),
        }
        Ok(())
    }
}

/// A buffer whose every outgrown allocation is wiped.
pub(super) struct Buf(Zeroizing<Vec<u8>>);

impl Buf {
    pub(super) fn put(&mut self, bytes: &[u8]) {
        let v = &mut self.0;
        if v.capacity() - v.len() < bytes.len() {
            let mut grown = Zeroizing::new(Vec::with_capacity(
                (v.len() + bytes.len()).max(v.capacity() * 2),
            ));
            grown.extend_from_slice(v);
            // The old allocation is wiped as it drops.
            *v = grown;
        }
        v.extend_from_slice(bytes);
    }

    /// A zigzag varint `long`.
    pub(super) fn long(&mut self, n: i64) {
        let mut z = ((n << 1) ^ (n >> 63)) as u64;
        let mut bytes = [0u8; 10];
        let mut i = 0;
        loop {
            let b = (z & 0x7f) as u8;
            z >>= 7;
            if z == 0 {
                bytes[i] = b;
                i += 1;
                break;
            }
            bytes[i] = b | 0x80;
            i += 1;
        }
        self.put(&bytes[..i]);
    }
}

pub(super) fn len(n: usize) -> Result<i64, Error> {
    i64::try_from(n).map_err(|_| Error::confluent("an Avro value too long to encode"))
}

/// Wipes a record's strings, bytes, enum symbols and map keys.
pub(super) fn wipe_avro(value: &mut Avro) {
    use zeroize::Zeroize as _;
    match value {
        Avro::String(s) | Avro::Enum(_, s) => s.zeroize(),
        Avro::Bytes(b) | Avro::Fixed(_, b) => b.zeroize(),
        Avro::Union(_, v) => wipe_avro(v),
        Avro::Array(items) => items.iter_mut().for_each(wipe_avro),
        Avro::Map(items) => {
            for (mut k, mut v) in items.drain() {
                k.zeroize();
                wipe_avro(&mut v);
            }
        }
        Avro::Record(fields) => {
            for (_, v) in fields {
                wipe_avro(v);
            }
        }
        _ => {}
    }
}

/// How deep records, unions, arrays and maps may nest in a record read
/// (serde_json's limit for JSON, 128).
pub(super) const MAX_DEPTH: usize = 128;

/// The most items of arrays and maps in one record read (each becomes a
/// value of about 50 bytes, and its JSON form another): a 16 MiB record of
/// one-byte items would take about 900 MiB to read.
pub(super) const MAX_ITEMS: usize = 1 << 20;

/// The most items of a size of zero bytes (`null`, an empty record) in one
/// record read: a block can declare millions of them in a few bytes.
pub(super) const MAX_EMPTY_ITEMS: usize = 1 << 16;

pub(super) fn short() -> Error {
    Error::confluent("a Confluent record's Avro body is shorter than its schema says")
}

/// Reads a zigzag varint `long`.
pub(super) fn read_long(input: &mut &[u8]) -> Result<i64, Error> {
    let mut n: u64 = 0;
    for i in 0..10 {
        let (&b, rest) = input.split_first().ok_or_else(short)?;
        *input = rest;
        n |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            #[allow(clippy::cast_possible_wrap)]
            return Ok((n >> 1) as i64 ^ -((n & 1) as i64));
        }
    }
    Err(Error::confluent(
        "a Confluent record's Avro body has a varint longer than 10 bytes",
    ))
}

/// Skips `n` bytes.
pub(super) fn skip(input: &mut &[u8], n: i64) -> Result<(), Error> {
    let n = usize::try_from(n)
        .map_err(|_| Error::confluent("a Confluent record's Avro body has a negative length"))?;
    if n > input.len() {
        return Err(short());
    }
    *input = &input[n..];
    Ok(())
}

impl AvroSchema {
    /// Walks `input` as `schema` says, allocating nothing: every length
    /// fits in what is left, nesting is at most [`MAX_DEPTH`] deep, and
    /// zero-byte items at most [`MAX_EMPTY_ITEMS`].
    pub(super) fn check(
        &self,
        schema: &Schema,
        input: &mut &[u8],
        depth: usize,
        empty: &mut (usize, usize),
    ) -> Result<(), Error> {
        if depth > MAX_DEPTH {
            return Err(Error::confluent(
                "a Confluent record's Avro body nests deeper than 128 levels",
            ));
        }
        match self.named(schema) {
            Schema::Null => Ok(()),
            Schema::Boolean => skip(input, 1),
            Schema::Int
            | Schema::Long
            | Schema::Enum(_)
            | Schema::Date
            | Schema::TimeMillis
            | Schema::TimeMicros
            | Schema::TimestampMillis
            | Schema::TimestampMicros
            | Schema::TimestampNanos
            | Schema::LocalTimestampMillis
            | Schema::LocalTimestampMicros
            | Schema::LocalTimestampNanos => read_long(input).map(|_| ()),
            Schema::Float => skip(input, 4),
            Schema::Double => skip(input, 8),
            Schema::Duration => skip(input, 12),
            Schema::Bytes | Schema::String | Schema::Uuid | Schema::BigDecimal => {
                let n = read_long(input)?;
                skip(input, n)
            }
            Schema::Fixed(f) => skip(input, i64::try_from(f.size).unwrap_or(i64::MAX)),
            Schema::Decimal(d) => self.check(&d.inner, input, depth + 1, empty),
            Schema::Union(u) => {
                let i = read_long(input)?;
                let branch = usize::try_from(i)
                    .ok()
                    .and_then(|i| u.variants().get(i))
                    .ok_or_else(|| Error::confluent("an Avro union index out of range"))?;
                self.check(branch, input, depth + 1, empty)
            }
            Schema::Record(r) => {
                for f in &r.fields {
                    self.check(&f.schema, input, depth + 1, empty)?;
                }
                Ok(())
            }
            Schema::Array(a) => self.check_blocks(&a.items, false, input, depth, empty),
            Schema::Map(m) => self.check_blocks(&m.types, true, input, depth, empty),
            Schema::Ref { .. } => Err(Error::confluent(
                "an Avro schema names a type it does not define",
            )),
        }
    }

    /// An array's or a map's blocks (`key`: each item has a string key).
    pub(super) fn check_blocks(
        &self,
        items: &Schema,
        key: bool,
        input: &mut &[u8],
        depth: usize,
        empty: &mut (usize, usize),
    ) -> Result<(), Error> {
        loop {
            let mut count = read_long(input)?;
            if count == 0 {
                return Ok(());
            }
            if count < 0 {
                count = count.checked_neg().ok_or_else(short)?;
                read_long(input)?; // the block's size in bytes
            }
            for _ in 0..count {
                let before = input.len();
                if key {
                    let n = read_long(input)?;
                    skip(input, n)?;
                }
                self.check(items, input, depth + 1, empty)?;
                empty.1 += 1;
                if empty.1 > MAX_ITEMS {
                    return Err(Error::confluent(
                        "a Confluent record's Avro body has more than 2^20 items in its arrays and maps",
                    ));
                }
                if input.len() == before {
                    empty.0 += 1;
                    if empty.0 > MAX_EMPTY_ITEMS {
                        return Err(Error::confluent(
                            "a Confluent record's Avro body has more than 65536 empty items",
                        ));
                    }
                }
            }
        }
    }
}
