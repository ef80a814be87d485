//! The record batches' transforms, Produce and Fetch, against kafka-protocol's
//! own encoder and decoder.

use bytes::{Bytes, BytesMut};
use indexmap::IndexMap;
use kafka_protocol::compression::{Compressor as _, Gzip, Zstd};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::policy::TopicPolicy;
use tombstone_crypt::{KeyTemplate, Keyset};

use super::fetch::*;
use super::produce::*;
use super::transform::*;
use crate::budget::Budget;
use crate::hooks::Hooks;

const LIMIT: usize = 1 << 20;

pub(super) fn budget() -> Budget {
    Budget::alone(64 << 20, LIMIT)
}

/// [`super::encrypt`] for a producer's first batch.
pub(super) fn encrypt(
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

pub(super) fn record(
    offset: i64,
    key: Option<&'static [u8]>,
    value: Option<&'static [u8]>,
) -> Record {
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

pub(super) fn batch(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).unwrap();
    buf.freeze()
}

pub(super) fn decode(raw: &Bytes) -> Vec<Record> {
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
fn unsequenced(offset: i64, key: Option<&'static [u8]>, value: Option<&'static [u8]>) -> Record {
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
        let opened = decrypt("t", &rotated, &Hooks::default(), &enc.records, &budget()).unwrap();
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
    let refused =
        super::encrypt("t", &rotated, &skip, &unfollowed, &budget(), &mut sequence).unwrap_err();
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
    let back = decode(&decrypt("t", &policy, &Hooks::default(), &enc.records, &budget()).unwrap());
    for (a, b) in back.iter().zip(&records) {
        assert_eq!((&a.key, &a.value), (&b.key, &b.value));
    }
    keys.shred(b"alice").unwrap();
    let back = decode(&decrypt("t", &policy, &Hooks::default(), &enc.records, &budget()).unwrap());
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
pub(super) fn compacted(sealed: &Bytes, keep_from: usize, codec: Compression) -> Bytes {
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
