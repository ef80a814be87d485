//! A small, bounded protobuf codec for the few Tink messages this crate
//! reads and writes in binary form: `Keyset` (inside an encrypted keyset),
//! `KmsEnvelopeAeadKey` and its `KeyTemplate`. Hand-written: no code
//! generation, no allocation from a length read off the wire (every
//! length-delimited field is a slice of the input), never a panic on
//! hostile bytes.

use zeroize::Zeroizing;

/// One field read from a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Value<'a> {
    /// Wire type 0.
    Varint(u64),
    /// Wire type 2: a slice of the input.
    Bytes(&'a [u8]),
    /// Wire types 1 and 5 (fixed 64 and 32 bits): skipped by every reader
    /// here, kept so unknown fields of those types are tolerated.
    Fixed,
}

/// Iterates over the fields of one message: `(field number, value)`.
pub(crate) struct Fields<'a> {
    rest: &'a [u8],
    failed: bool,
}

/// Reads the fields of `msg`.
pub(crate) fn fields(msg: &[u8]) -> Fields<'_> {
    Fields {
        rest: msg,
        failed: false,
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u64, Value<'a>), String>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.failed || self.rest.is_empty() {
            return None;
        }
        let r = self.read();
        if r.is_err() {
            self.failed = true;
        }
        Some(r)
    }
}

impl<'a> Fields<'a> {
    fn read(&mut self) -> Result<(u64, Value<'a>), String> {
        let (key, rest) = read_varint(self.rest)?;
        let field = key >> 3;
        if field == 0 {
            return Err("protobuf field number 0".into());
        }
        let (value, rest) = match key & 7 {
            0 => {
                let (v, rest) = read_varint(rest)?;
                (Value::Varint(v), rest)
            }
            2 => {
                let (len, rest) = read_varint(rest)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= rest.len())
                    .ok_or_else(|| format!("protobuf field {field} runs past the end"))?;
                let (v, rest) = rest.split_at(len);
                (Value::Bytes(v), rest)
            }
            1 => (
                Value::Fixed,
                rest.get(8..)
                    .ok_or_else(|| format!("protobuf field {field} runs past the end"))?,
            ),
            5 => (
                Value::Fixed,
                rest.get(4..)
                    .ok_or_else(|| format!("protobuf field {field} runs past the end"))?,
            ),
            w => return Err(format!("protobuf wire type {w} is not supported")),
        };
        self.rest = rest;
        Ok((field, value))
    }
}

/// A protobuf varint of at most 64 bits; one that overflows is an error.
pub(crate) fn read_varint(input: &[u8]) -> Result<(u64, &[u8]), String> {
    let mut value = 0u64;
    for (i, &b) in input.iter().enumerate().take(10) {
        // The tenth byte holds bit 63 only.
        if i == 9 && b > 1 {
            break;
        }
        value |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            return Ok((value, &input[i + 1..]));
        }
    }
    Err("malformed varint".into())
}

/// A message being written (into a zeroized buffer: keysets hold keys).
#[derive(Default)]
pub(crate) struct Writer {
    pub(crate) buf: Zeroizing<Vec<u8>>,
}

impl Writer {
    pub(crate) fn new() -> Self {
        Writer::default()
    }

    fn varint(&mut self, mut v: u64) {
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(b);
                return;
            }
            self.buf.push(b | 0x80);
        }
    }

    /// A varint field; proto3 omits the default 0.
    pub(crate) fn uint(&mut self, field: u64, v: u64) -> &mut Self {
        if v != 0 {
            self.varint(field << 3);
            self.varint(v);
        }
        self
    }

    /// A length-delimited field, written even when empty (Tink writes its
    /// sub-messages that way; empty strings it omits, see `string`).
    pub(crate) fn bytes(&mut self, field: u64, v: &[u8]) -> &mut Self {
        self.varint((field << 3) | 2);
        self.varint(v.len() as u64);
        // Grow once, so no reallocation leaves a copy of secrets behind
        // (the buffer was reserved by the caller where that matters).
        self.buf.extend_from_slice(v);
        self
    }

    /// A string field; proto3 omits the empty string.
    pub(crate) fn string(&mut self, field: u64, v: &str) -> &mut Self {
        if !v.is_empty() {
            self.bytes(field, v.as_bytes());
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_and_reads_back() {
        let mut inner = Writer::new();
        inner.string(1, "abc").uint(3, 300);
        let mut w = Writer::new();
        w.uint(1, 7).bytes(2, &inner.buf).uint(5, 0);
        let got: Vec<_> = fields(&w.buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(got[0], (1, Value::Varint(7)));
        assert_eq!(got.len(), 2);
        let Value::Bytes(b) = got[1].1 else { panic!() };
        let inner: Vec<_> = fields(b).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            inner,
            vec![(1, Value::Bytes(b"abc")), (3, Value::Varint(300))]
        );
    }

    #[test]
    fn hostile_bytes_are_errors() {
        for bad in [
            &[0x0a, 0x05, 0x00][..],
            &[0x0a, 0xff, 0xff, 0xff, 0xff, 0x0f],
            &[0x00, 0x01],
            &[0x0b],
            &[0x09, 0, 0],
            &[0x08],
            &[
                0x08, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02,
            ],
        ] {
            assert!(fields(bad).any(|f| f.is_err()), "{bad:?}");
        }
    }
}
