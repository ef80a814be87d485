//! A small, bounded protobuf codec for the few Tink messages this crate
//! reads and writes in binary form: `Keyset` (inside an encrypted keyset),
//! `KmsEnvelopeAeadKey` and its `KeyTemplate`, the `AesGcmKey` and
//! `AesSivKey` key protos (a DEK is one). Hand-written: no code
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

/// Encodes Tink's `AesGcmKey` or `AesSivKey` proto `{ version = 0,
/// key_value }`, the key value under `tag` (`0x1a`: field 3 of `AesGcmKey`;
/// `0x12`: field 2 of `AesSivKey`). Version 0 is the proto3 default and is
/// omitted, as Tink itself writes it.
pub(crate) fn key_proto(tag: u8, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + key.len());
    out.push(tag);
    // AES keys are 16, 32 or 64 bytes: one varint byte.
    out.push(key.len() as u8);
    out.extend_from_slice(key);
    out
}

/// Decodes such a proto: `version` (field 1, varint, must be 0) and the key
/// value (length-delimited, under `key_tag`). Any other field is rejected.
pub(crate) fn parse_key_proto<'a>(
    proto: &'a [u8],
    name: &str,
    key_tag: u8,
) -> Result<&'a [u8], String> {
    let mut rest = proto;
    let mut key = None;
    while let Some((&tag, tail)) = rest.split_first() {
        rest = tail;
        match tag {
            0x08 => {
                let (version, tail) = read_varint(rest)?;
                rest = tail;
                if version != 0 {
                    return Err(format!(
                        "{name} version {version} is not supported (only 0)"
                    ));
                }
            }
            t if t == key_tag => {
                let (len, tail) = read_varint(rest)?;
                let len = usize::try_from(len)
                    .ok()
                    .filter(|&l| l <= tail.len())
                    .ok_or_else(|| format!("{name} key_value runs past the end"))?;
                if key.is_some() {
                    return Err(format!("{name} key_value appears twice"));
                }
                key = Some(&tail[..len]);
                rest = &tail[len..];
            }
            other => {
                return Err(format!("{name} has an unexpected field tag 0x{other:02x}"));
            }
        }
    }
    key.ok_or_else(|| format!("{name} has no key_value"))
}

/// The `AesGcmKey` proto of a DEK, `1a len key` (what a KMS wraps).
pub(crate) fn aes_gcm_key_proto(key: &[u8]) -> Zeroizing<Vec<u8>> {
    Zeroizing::new(key_proto(0x1a, key))
}

/// The key of an `AesGcmKey` proto (version 0, explicit or not).
pub(crate) fn parse_aes_gcm_key_proto(proto: &[u8]) -> Result<&[u8], String> {
    parse_key_proto(proto, "AesGcmKey", 0x1a)
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

    #[test]
    fn proto_accepts_explicit_version_zero() {
        let mut p = vec![0x08, 0x00];
        p.extend(key_proto(0x1a, &[7u8; 32]));
        assert_eq!(
            parse_key_proto(&p, "AesGcmKey", 0x1a).unwrap(),
            &[7u8; 32][..]
        );
        let mut p = vec![0x08, 0x00];
        p.extend(key_proto(0x12, &[7u8; 64]));
        assert_eq!(
            parse_key_proto(&p, "AesSivKey", 0x12).unwrap(),
            &[7u8; 64][..]
        );
        // The other type's field number is refused.
        assert!(parse_key_proto(&p, "AesGcmKey", 0x1a).is_err());
    }

    fn parse_key_gcm(p: &[u8]) -> Result<&[u8], String> {
        parse_key_proto(p, "AesGcmKey", 0x1a)
    }

    #[test]
    fn proto_rejects_bad_shapes() {
        assert!(parse_key_gcm(&[]).is_err());
        assert!(parse_key_gcm(&[0x08, 0x01, 0x1a, 0x00]).is_err());
        assert!(parse_key_gcm(&[0x1a, 0x21, 0x00]).is_err());
        assert!(parse_key_gcm(&[
            0x1a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01
        ])
        .is_err());
        assert!(parse_key_gcm(&[0x12, 0x00]).is_err());
    }

    #[test]
    fn varints_that_overflow_64_bits_are_rejected() {
        // 2^64 would wrap to 0 if the tenth byte's high bits were dropped.
        let overflow = [0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x02];
        assert!(read_varint(&overflow).is_err());
        let mut version = vec![0x08];
        version.extend_from_slice(&overflow);
        version.extend(key_proto(0x1a, &[7u8; 32]));
        assert!(parse_key_gcm(&version).is_err());
        // u64::MAX is the largest varint and still reads.
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read_varint(&max).unwrap().0, u64::MAX);
    }
}
