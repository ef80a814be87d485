//! Record batches decompressed within a bound: a small batch that claims
//! or inflates to more than the limit is refused before the memory is
//! taken (kafka-protocol's own decompressors take what a snappy header
//! claims, and inflate gzip, lz4 and zstd to their end).
//!
//! The decompressed records are plaintext on Produce: the buffer they go
//! into grows by moving to a larger block and wiping the one it leaves, and
//! is wiped if decompression fails (the proxy wipes it after use otherwise,
//! `crate::batch`). The codecs' own buffers (a window, a block, a frame)
//! are theirs, freed unwiped.

use std::io::Read;

use bytes::Bytes;
use kafka_protocol::records::Compression;

use crate::budget::Budget;
use crate::wipe::Buf;

/// Xerial's snappy framing (the Java client's): magic, then version and
/// compatible version (4 bytes each), then blocks of `u32be length | raw
/// snappy`.
const SNAPPY_MAGIC: &[u8; 8] = b"\x82SNAPPY\x00";
const SNAPPY_HEADER: usize = 16;

/// The records of a batch compressed with `codec`, decompressed, at most
/// the budget's `decompress_limit` bytes; the buffer's room is taken from
/// `budget` before it grows.
///
/// # Errors
/// A reason when the data does not decompress, would be longer than the
/// limit, or its room does not fit in the budget.
pub(crate) fn decompress(
    data: &Bytes,
    codec: Compression,
    budget: &Budget,
) -> Result<Bytes, String> {
    let limit = budget.decompress_limit;
    match codec {
        Compression::None => Ok(data.clone()),
        Compression::Gzip => bounded(flate2::read::MultiGzDecoder::new(&data[..]), budget, "gzip"),
        Compression::Lz4 => {
            let decoder =
                lz4::Decoder::new(&data[..]).map_err(|e| format!("decompressing lz4: {e}"))?;
            bounded(decoder, budget, "lz4")
        }
        Compression::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(&data[..])
                .map_err(|e| format!("decompressing zstd: {e}"))?;
            bounded(decoder, budget, "zstd")
        }
        Compression::Snappy => snappy(data, limit, budget),
    }
}

fn too_long(what: &str, limit: usize) -> String {
    format!("a {what} batch decompresses to more than {limit} bytes (max_frame_bytes)")
}

/// The first read's room; then the buffer doubles.
const FIRST_READ: usize = 8 << 10;

fn bounded(reader: impl Read, budget: &Budget, what: &str) -> Result<Bytes, String> {
    let limit = budget.decompress_limit;
    let mut reader = reader.take((limit as u64).saturating_add(1));
    // Grows by moving and wiping the block it leaves; wiped if dropped.
    let mut out = Buf::with_capacity(0, true);
    let mut filled = 0;
    loop {
        if filled == out.len() {
            if filled > limit {
                return Err(too_long(what, limit));
            }
            let room = out
                .len()
                .max(FIRST_READ)
                .min(limit.saturating_add(1) - filled);
            // The block it moves to holds the old room and the new.
            budget.take(room, "a compressed batch")?;
            out.reserve(room);
            out.inner().resize(filled + room, 0);
        }
        match reader.read(&mut out[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("decompressing {what}: {e}")),
        }
    }
    if filled > limit {
        return Err(too_long(what, limit));
    }
    out.inner().truncate(filled);
    Ok(out.freeze())
}

fn snappy(data: &[u8], limit: usize, budget: &Budget) -> Result<Bytes, String> {
    let raw = |block: &[u8], out: &mut Buf| -> Result<(), String> {
        let len =
            snap::raw::decompress_len(block).map_err(|e| format!("decompressing snappy: {e}"))?;
        if len > limit - out.len() {
            return Err(too_long("snappy", limit));
        }
        let start = out.len();
        budget.take(len, "a snappy batch")?;
        out.reserve(len);
        out.inner().resize(start + len, 0);
        snap::raw::Decoder::new()
            .decompress(block, &mut out[start..])
            .map_err(|e| format!("decompressing snappy: {e}"))?;
        Ok(())
    };
    let mut out = Buf::with_capacity(0, true);
    if !data.starts_with(SNAPPY_MAGIC) {
        raw(data, &mut out)?;
        return Ok(out.freeze());
    }
    let mut rest = data
        .get(SNAPPY_HEADER..)
        .ok_or("a snappy header cut short")?;
    while !rest.is_empty() {
        let (len, tail) = rest
            .split_at_checked(4)
            .ok_or("a snappy block length cut short")?;
        let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
        let (block, tail) = tail
            .split_at_checked(len)
            .ok_or("a snappy block cut short")?;
        raw(block, &mut out)?;
        rest = tail;
    }
    Ok(out.freeze())
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::BytesMut;
    use kafka_protocol::compression::{self as cmpr, Compressor};

    fn compress(codec: Compression, plain: &[u8]) -> Bytes {
        let mut out = BytesMut::new();
        let put = |b: &mut BytesMut| {
            b.extend_from_slice(plain);
            Ok(())
        };
        match codec {
            Compression::None => cmpr::None::compress(&mut out, put),
            Compression::Gzip => cmpr::Gzip::compress(&mut out, put),
            Compression::Snappy => cmpr::Snappy::compress(&mut out, put),
            Compression::Lz4 => cmpr::Lz4::compress(&mut out, put),
            Compression::Zstd => cmpr::Zstd::compress(&mut out, put),
        }
        .unwrap();
        out.freeze()
    }

    #[test]
    fn every_codec_round_trips_within_the_limit_and_is_refused_past_it() {
        let plain = vec![7u8; 4 << 20];
        for codec in [
            Compression::Gzip,
            Compression::Snappy,
            Compression::Lz4,
            Compression::Zstd,
        ] {
            let packed = compress(codec, &plain);
            assert!(packed.len() < plain.len() / 10, "{codec:?}");
            let budget = Budget::alone(64 << 20, 4 << 20);
            assert_eq!(
                &decompress(&packed, codec, &budget).unwrap()[..],
                &plain[..]
            );
            let budget = Budget::alone(64 << 20, 1 << 20);
            let err = decompress(&packed, codec, &budget).unwrap_err();
            assert!(err.contains("more than 1048576 bytes"), "{codec:?}: {err}");
            // Within the limit, past the budget: refused as it grows.
            let budget = Budget::alone(2 << 20, 4 << 20);
            let err = decompress(&packed, codec, &budget).unwrap_err();
            assert!(err.contains("budget"), "{codec:?}: {err}");
        }
    }

    #[test]
    fn a_raw_snappy_header_that_claims_gigabytes_is_refused_before_allocation() {
        // A varint length of 2^32 - 1, then nothing.
        let claim = Bytes::from_static(&[0xff, 0xff, 0xff, 0xff, 0x0f, 0x00]);
        let budget = Budget::alone(usize::MAX, 100 << 20);
        let err = decompress(&claim, Compression::Snappy, &budget).unwrap_err();
        assert!(err.contains("more than 104857600 bytes"), "{err}");
        let mut framed = BytesMut::from(&b"\x82SNAPPY\x00\x00\x00\x00\x01\x00\x00\x00\x01"[..]);
        framed.extend_from_slice(&6u32.to_be_bytes());
        framed.extend_from_slice(&claim);
        let err = decompress(&framed.freeze(), Compression::Snappy, &budget).unwrap_err();
        assert!(err.contains("more than 104857600 bytes"), "{err}");
    }
}
