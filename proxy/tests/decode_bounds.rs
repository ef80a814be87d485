//! Record batches whose counts lie, and batches that inflate to millions of
//! records: the proxy walks every count against the bytes before anything
//! is sized from it, and bounds what decoding may take per request and for
//! the whole process. A lying batch is refused (`CORRUPT_MESSAGE`) on
//! Produce and on Fetch (planted on the broker), never an abort, and the
//! proxy keeps serving; three 140 KiB gzip batches of 14 million records at
//! once stay within the stated memory.
//!
//! Before the walk, each of the first three tests aborted the whole
//! process (`memory allocation of 377957121872 bytes failed`: kafka-protocol
//! reserving 2^31-1 records, or 2^31-1 headers), and the last grew the
//! process by about 7 GiB.
//!
//! On tansu (`common::lenient_broker`): Apache Kafka refuses the planted
//! batch whose counts lie (INVALID_RECORD), which a Kafka-compatible broker
//! may hold.

use crate::common;
use common::status_kib;

use std::io::Write as _;

use bytes::{Bytes, BytesMut};
use common::wire::{batch_of, fix_crc, raw_fetch, raw_produce, record};
use common::{
    consume_all, create_topic, fresh_topic, lenient_broker, produce_ok, start_proxy_with, Keys,
};
use tombstone_crypt_proxy::Hooks;

/// Where a v2 batch's record count lies, and where its records start.
const RECORD_COUNT: std::ops::Range<usize> = 57..61;
const RECORDS: usize = 61;

/// One real record, in a batch whose header claims 2^31-1 records (70
/// bytes, as the attack that found it).
fn lying_count() -> Bytes {
    let mut b = batch_of(&[record(Some(b"k"), Some(b"v"), 0)]);
    b[RECORD_COUNT].copy_from_slice(&i32::MAX.to_be_bytes());
    fix_crc(&mut b);
    b.freeze()
}

/// One record that claims 2^31-1 headers.
fn lying_headers() -> Bytes {
    let b = batch_of(&[record(Some(b"k"), Some(b"v"), 0)]);
    let mut out = BytesMut::from(&b[..b.len() - 1]);
    assert_eq!(b[b.len() - 1], 0, "the record's header count, last");
    // 2^31-1 as a zigzag varint.
    out.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]);
    // The record's length (a one-byte zigzag varint) and the batch's grow
    // by 4.
    assert!(out[RECORDS] < 0x80 - 8);
    out[RECORDS] += 8;
    let length = i32::from_be_bytes([out[8], out[9], out[10], out[11]]) + 4;
    out[8..12].copy_from_slice(&length.to_be_bytes());
    fix_crc(&mut out);
    out.freeze()
}

/// The proxy still serves: a policy topic round trips through it.
fn still_serves(proxy: &str, topic: &str) {
    produce_ok(
        proxy,
        topic,
        0,
        &[(Some(b"after".to_vec()), Some(b"still here".to_vec()))],
        "none",
    );
    let got = consume_all(proxy, topic, 1).unwrap();
    assert!(
        got.iter()
            .any(|r| r.value.as_deref() == Some(&b"still here"[..])),
        "{got:?}"
    );
}

#[test]
fn a_produce_whose_counts_lie_is_refused_and_the_proxy_keeps_serving() {
    let Some(broker) = lenient_broker() else {
        return;
    };
    let topic = fresh_topic("lying-counts");
    let keys = Keys::new(false);
    create_topic(&broker, &topic, 1);
    let proxy = start_proxy_with(&broker, keys.policies(&topic), Hooks::default(), None);
    for (what, bad) in [("records", lying_count()), ("headers", lying_headers())] {
        assert!(bad.len() <= 80, "{what}: {} bytes", bad.len());
        let (code, message) = raw_produce(&proxy.addr, &topic, bad, 9);
        assert_eq!(code, 2, "{what}: CORRUPT_MESSAGE");
        let message = message.unwrap_or_default();
        assert!(message.contains("claims"), "{what}: {message}");
    }
    // Nothing reached the broker.
    assert_eq!(consume_all(&broker, &topic, 1).unwrap(), vec![]);
    still_serves(&proxy.addr, &topic);
}

#[test]
fn a_record_planted_on_the_broker_is_refused_on_fetch_and_the_proxy_keeps_serving() {
    let Some(broker) = lenient_broker() else {
        return;
    };
    let topic = fresh_topic("planted");
    let keys = Keys::new(false);
    create_topic(&broker, &topic, 1);
    // Written straight to the broker, past the proxy.
    let (code, message) = raw_produce(&broker, &topic, lying_count(), 9);
    assert_eq!(code, 0, "the broker takes it: {message:?}");
    // A second policy topic, to show the proxy serves: the planted
    // partition stays refused for as long as the record is there.
    let other = fresh_topic("planted-other");
    create_topic(&broker, &other, 1);
    let policies = keys.policies(&topic).with_topic(&other, keys.policy());
    let proxy = start_proxy_with(&broker, policies, Hooks::default(), None);
    for _ in 0..3 {
        let (code, records) = raw_fetch(&proxy.addr, &topic);
        assert_eq!(code, 2, "CORRUPT_MESSAGE");
        assert!(records.is_empty());
    }
    still_serves(&proxy.addr, &other);
}

/// A gzip batch of 14,080,824 records of 7 bytes (93.5 MiB inflated,
/// under the default `max_frame_bytes`), about 140 KiB on the wire: one
/// gzip member of 149,796 records, 94 times (a gzip stream may hold
/// several members).
fn gzip_bomb() -> (Bytes, usize) {
    // A record with no key, no value, no header: length 6, attributes,
    // timestamp delta, offset delta, key -1, value -1, no headers.
    let one = [0x0c, 0, 0, 0, 0x01, 0x01, 0];
    let per_member = 149_796;
    let members = 94;
    let plain: Vec<u8> = one
        .iter()
        .copied()
        .cycle()
        .take(one.len() * per_member)
        .collect();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(&plain).unwrap();
    let member = gz.finish().unwrap();
    let count = per_member * members;
    // The header of a real gzip batch of one record, with the count,
    // length and CRC made to fit.
    let template = batch_of(&[record(None, None, 0)]);
    let mut b = BytesMut::from(&template[..RECORDS]);
    b[21..23].copy_from_slice(&1i16.to_be_bytes()); // attributes: gzip
    b[RECORD_COUNT].copy_from_slice(&(count as i32).to_be_bytes());
    for _ in 0..members {
        b.extend_from_slice(&member);
    }
    let length = (b.len() - 12) as i32;
    b[8..12].copy_from_slice(&length.to_be_bytes());
    fix_crc(&mut b);
    (b.freeze(), count)
}

#[test]
fn fourteen_million_records_three_at_once_stay_within_the_budget() {
    let Some(broker) = lenient_broker() else {
        return;
    };
    let topic = fresh_topic("inflated");
    let keys = Keys::new(false);
    create_topic(&broker, &topic, 1);
    // The default limits: frames of 100 MiB, 400 MiB of decoding per
    // request, 800 MiB for the process.
    let proxy = start_proxy_with(&broker, keys.policies(&topic), Hooks::default(), None);
    let (bomb, count) = gzip_bomb();
    assert!(
        count > 14_000_000 && bomb.len() < 200 << 10,
        "{}",
        bomb.len()
    );
    let refused_before = tombstone_crypt_proxy::stats::process().decode_budget_refused;
    // The peak from here on: what the three requests made the process take.
    std::fs::write("/proc/self/clear_refs", "5").expect("reset the peak RSS");
    let baseline = status_kib("VmRSS:");
    let answers: Vec<(i16, Option<String>)> = std::thread::scope(|s| {
        let sends: Vec<_> = (0..3)
            .map(|_| s.spawn(|| raw_produce(&proxy.addr, &topic, bomb.clone(), 9)))
            .collect();
        sends.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let grew_mib = status_kib("VmHWM:").saturating_sub(baseline) / 1024;
    for (code, message) in &answers {
        assert_eq!(*code, 2, "CORRUPT_MESSAGE: {message:?}");
        let message = message.as_deref().unwrap_or_default();
        assert!(message.contains("budget"), "{message}");
    }
    assert!(
        tombstone_crypt_proxy::stats::process().decode_budget_refused >= refused_before + 3,
        "counted"
    );
    // The stated bound: the process's decoding budget (800 MiB) beside the
    // three frames; the decompressed records (93.5 MiB each) are within it.
    eprintln!(
        "three 14-million-record batches at once: the process grew {grew_mib} MiB at its peak"
    );
    assert!(grew_mib < 800, "the process grew {grew_mib} MiB");
    // Nothing reached the broker, and the proxy serves.
    assert_eq!(consume_all(&broker, &topic, 1).unwrap(), vec![]);
    still_serves(&proxy.addr, &topic);
}
