//! Fetch's fast path against its general path: the same bytes out, or the
//! same refusal, for batches of every shape; and the fast path taken
//! exactly when it should be.

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::{Compression, Record};
use tombstone_crypt::policy::TopicPolicy;
use tombstone_crypt::{KeyTemplate, Keyset};

use super::fetch::decrypt;
use super::tests::{batch, budget, compacted, decode, encrypt, record};
use super::transform::*;
use crate::hooks::Hooks;

/// The test kit's deterministic generator: the cases are the same on
/// every run.
#[path = "../../../tests/common/rng.rs"]
mod rng;
use rng::Rng;

/// A header name the policies below encrypt.
const NAMED: &str = "trace";

/// Records of every shape: keys null or one of a few (so keys repeat),
/// values null, empty or up to 300 bytes, 0 to 3 headers of distinct
/// names (one of them maybe [`NAMED`]), a header's value maybe null.
fn records(rng: &mut Rng, n: usize, named: bool) -> Vec<Record> {
    const KEYS: [&[u8]; 5] = [b"k0", b"k1", b"k2", b"a longer key", b""];
    (0..n)
        .map(|i| {
            let mut r = record(i as i64, None, None);
            r.key = (rng.below(6) != 0).then(|| Bytes::from_static(KEYS[rng.below(5) as usize]));
            r.value = match rng.below(10) {
                0 | 1 => None,
                2 => Some(Bytes::new()),
                _ => {
                    let len = rng.below(300) as usize;
                    Some((0..len).map(|_| rng.below(256) as u8).collect())
                }
            };
            let names = if named {
                ["a", "b", NAMED]
            } else {
                ["a", "b", "c"]
            };
            for name in names.into_iter().take(rng.below(4) as usize) {
                let v = (rng.below(5) != 0).then(|| Bytes::from(format!("{name}{i}")));
                r.headers.insert(name.into(), v);
            }
            r
        })
        .collect()
}

/// The four policies: values alone, with record keys, with a named
/// header, with both.
fn policies() -> Vec<(&'static str, TopicPolicy)> {
    let values = Keyset::generate();
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let keyed = || {
        TopicPolicy::keyset(values.clone())
            .with_record_keys(keys.clone())
            .unwrap()
    };
    vec![
        ("values", TopicPolicy::keyset(values.clone())),
        ("keys", keyed()),
        (
            "header",
            TopicPolicy::keyset(values.clone())
                .with_headers([NAMED])
                .unwrap(),
        ),
        ("keys and header", keyed().with_headers([NAMED]).unwrap()),
    ]
}

/// Whether the fast path takes a batch of `records` under `policy`.
fn fast(policy: &TopicPolicy, records: &[Record]) -> bool {
    let keyed = policy.record_keys().is_some();
    records.iter().all(|r| {
        let named = r.headers.keys().any(|k| policy.encrypts_header(k.as_str()));
        let null = keyed && r.value.is_none();
        !named && !null
    })
}

/// `raw` decrypted through both paths: the same result, and how many
/// batches the fast path wrote.
fn both(policy: &TopicPolicy, raw: &Bytes, case: &str) -> (Result<Bytes, String>, usize) {
    let general = Hooks {
        general_path: true,
        ..Hooks::default()
    };
    let before = FAST_BATCHES.with(|n| n.get());
    let reference = decrypt("t", policy, &general, raw, &budget());
    assert_eq!(FAST_BATCHES.with(|n| n.get()), before, "{case}: the hook");
    let out = decrypt("t", policy, &Hooks::default(), raw, &budget());
    match (&out, &reference) {
        (Ok(a), Ok(b)) => {
            let at = a.iter().zip(b.iter()).position(|(x, y)| x != y);
            assert!(
                a == b,
                "{case}: {} bytes, the general path's {}; first difference at {at:?}",
                a.len(),
                b.len()
            );
        }
        _ => assert_eq!(out, reference, "{case}"),
    }
    (out, FAST_BATCHES.with(|n| n.get()) - before)
}

const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

#[test]
fn the_fast_path_writes_what_the_general_path_writes_and_only_where_it_may() {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    let mut taken = 0;
    let mut declined = 0;
    for (name, policy) in policies() {
        for codec in CODECS {
            for round in 0..12 {
                let n = 1 + rng.below(30) as usize;
                let named = policy.encrypts_header(NAMED) && rng.below(3) == 0;
                let plain = records(&mut rng, n, named);
                let sealed = encrypt(
                    "t",
                    &policy,
                    &Hooks::default(),
                    &batch(&plain, codec),
                    &budget(),
                )
                .unwrap()
                .records;
                let case = format!("{name}, {codec:?}, round {round}");
                let (out, wrote) = both(&policy, &sealed, &case);
                let out = out.unwrap_or_else(|e| panic!("{case}: {e}"));
                let expect = fast(&policy, &plain);
                assert_eq!(wrote, usize::from(expect), "{case}: the fast path taken");
                if expect {
                    taken += 1;
                } else {
                    declined += 1;
                }
                // What a client reads: every record as written.
                let back: Vec<_> = decode(&out)
                    .into_iter()
                    .map(|r| (r.offset, r.timestamp, r.key, r.value, r.headers))
                    .collect();
                let written: Vec<_> = plain
                    .iter()
                    .map(|r| {
                        let r = r.clone();
                        (r.offset, r.timestamp, r.key, r.value, r.headers)
                    })
                    .collect();
                assert_eq!(back, written, "{case}");
                // Two batches in one partition, the second cut at the end
                // (the broker's size limit), and a compacted one.
                let mut two = BytesMut::from(&sealed[..]);
                two.extend_from_slice(&sealed);
                two.extend_from_slice(&sealed[..sealed.len() / 2]);
                let (out, wrote) = both(&policy, &two.freeze(), &format!("{case}, twice"));
                assert_eq!(
                    out.unwrap().len(),
                    2 * out_len(&policy, &sealed),
                    "{case}, twice: the cut batch dropped"
                );
                assert_eq!(wrote, 2 * usize::from(expect), "{case}, twice");
                if n > 2
                    && matches!(
                        codec,
                        Compression::None | Compression::Gzip | Compression::Zstd
                    )
                {
                    let cut = compacted(&sealed, n / 2, codec);
                    both(&policy, &cut, &format!("{case}, compacted"))
                        .0
                        .unwrap();
                }
            }
        }
    }
    assert!(
        taken > 50 && declined > 20,
        "taken {taken}, declined {declined}"
    );
}

/// The length of `sealed` decrypted.
fn out_len(policy: &TopicPolicy, sealed: &Bytes) -> usize {
    decrypt("t", policy, &Hooks::default(), sealed, &budget())
        .unwrap()
        .len()
}

/// `raw`'s single record changed by `change`, its lengths and CRC set
/// again.
fn altered(raw: &Bytes, change: impl FnOnce(&mut Vec<u8>)) -> Bytes {
    let mut rec = raw[HEADER..].to_vec();
    change(&mut rec);
    let mut b = raw[..HEADER].to_vec();
    b.extend_from_slice(&rec);
    let len = (b.len() - LOG_OVERHEAD) as i32;
    b[8..12].copy_from_slice(&len.to_be_bytes());
    let crc = crc32c::crc32c(&b[ATTRIBUTES.start..]);
    b[CRC].copy_from_slice(&crc.to_be_bytes());
    Bytes::from(b)
}

#[test]
fn a_record_that_would_not_encode_back_is_refused_by_both_paths() {
    let policy = TopicPolicy::keyset(Keyset::generate());
    let mut r = record(0, Some(b"k"), Some(b"v"));
    r.headers.insert("h".into(), Some(Bytes::from_static(b"1")));
    let sealed = encrypt(
        "t",
        &policy,
        &Hooks::default(),
        &batch(&[r], Compression::None),
        &budget(),
    )
    .unwrap()
    .records;
    let (good, wrote) = both(&policy, &sealed, "as written");
    assert!(good.is_ok());
    assert_eq!(wrote, 1, "the fast path takes it");
    type Change = Box<dyn FnOnce(&mut Vec<u8>)>;
    let cases: [(&str, Change); 5] = [
        // Attributes 1 (a record's attributes are unused: 0).
        ("attributes", Box::new(|rec: &mut Vec<u8>| rec[1] = 1)),
        // The header twice (the decoder keeps one).
        (
            "a header twice",
            Box::new(|rec: &mut Vec<u8>| {
                let n = rec.len();
                assert_eq!(rec[n - 5], 2, "one header, zigzag");
                rec[n - 5] = 4;
                rec.extend_from_slice(&[2, b'h', 2, b'1']);
                rec[0] += 8;
            }),
        ),
        // The timestamp delta 0 in two bytes (0x80 0x00), not one.
        (
            "a longer varint",
            Box::new(|rec: &mut Vec<u8>| {
                assert_eq!(rec[2], 0, "timestamp delta 0");
                rec[2] = 0x80;
                rec.insert(3, 0);
                rec[0] += 2;
            }),
        ),
        // The timestamp delta 2^62 (zigzag 2^63) in ten bytes whose last
        // sets a bit past 64 too (lost to the decoder).
        (
            "bits past 64",
            Box::new(|rec: &mut Vec<u8>| {
                assert_eq!(rec[2], 0, "timestamp delta 0");
                let mut long = vec![0x80u8; 9];
                long.push(0x03);
                rec.splice(2..3, long);
                rec[0] += 18;
            }),
        ),
        // A byte after the last header, inside the record's length.
        (
            "bytes after the headers",
            Box::new(|rec: &mut Vec<u8>| {
                rec.push(0);
                rec[0] += 2;
            }),
        ),
    ];
    for (case, change) in cases {
        let bad = altered(&sealed, change);
        let (out, wrote) = both(&policy, &bad, case);
        let err = out.expect_err(case);
        assert!(err.contains("encode back"), "{case}: {err}");
        assert_eq!(wrote, 0, "{case}");
    }
}

/// `raw` encrypted through both paths: each path's batch and how many
/// batches the fast path wrote (of the default hooks' run).
fn both_sealed(policy: &TopicPolicy, raw: &Bytes, case: &str) -> (Bytes, Bytes, usize) {
    let general = Hooks {
        general_path: true,
        ..Hooks::default()
    };
    let reference =
        encrypt("t", policy, &general, raw, &budget()).unwrap_or_else(|e| panic!("{case}: {e}"));
    let before = FAST_BATCHES.with(|n| n.get());
    let sealed = encrypt("t", policy, &Hooks::default(), raw, &budget())
        .unwrap_or_else(|e| panic!("{case}: {e}"));
    assert_eq!((sealed.added, reference.added), (0, 0), "{case}");
    let wrote = FAST_BATCHES.with(|n| n.get()) - before;
    (sealed.records, reference.records, wrote)
}

/// A record's offset, timestamp, key, value's length and headers.
type Shape = (i64, i64, Option<Bytes>, Option<usize>, Vec<String>);

/// A batch's records with each value's bytes (and each [`NAMED`] header's)
/// replaced by its length: what two encryptions of the same records share
/// (their nonces differ).
fn shape(raw: &Bytes) -> Vec<Shape> {
    decode(raw)
        .into_iter()
        .map(|r| {
            let headers = r
                .headers
                .iter()
                .map(|(k, v)| match k.as_str() {
                    // Sealed with a fresh nonce too.
                    NAMED => format!("{NAMED}: {:?} bytes", v.as_ref().map(Bytes::len)),
                    k => format!("{k}={v:?}"),
                })
                .collect();
            (
                r.offset,
                r.timestamp,
                r.key,
                r.value.map(|v| v.len()),
                headers,
            )
        })
        .collect()
}

#[test]
fn on_produce_the_fast_path_writes_what_the_general_path_writes_but_for_nonces() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut taken = 0;
    let mut declined = 0;
    for (name, policy) in policies() {
        for codec in CODECS {
            for round in 0..8 {
                let n = 1 + rng.below(30) as usize;
                let named = policy.encrypts_header(NAMED) && rng.below(3) == 0;
                let plain = records(&mut rng, n, named);
                let raw = batch(&plain, codec);
                let case = format!("{name}, {codec:?}, round {round}");
                let (sealed, reference, wrote) = both_sealed(&policy, &raw, &case);
                let expect = !plain
                    .iter()
                    .any(|r| r.headers.keys().any(|k| policy.encrypts_header(k.as_str())));
                assert_eq!(wrote, usize::from(expect), "{case}: the fast path taken");
                if expect {
                    taken += 1;
                } else {
                    declined += 1;
                }
                // The header but its CRC (and its length, compressed: the
                // ciphertext compresses by chance), the keys, the lengths,
                // the headers: the same.
                assert_eq!(sealed[..8], reference[..8], "{case}");
                assert_eq!(sealed[12..CRC.start], reference[12..CRC.start], "{case}");
                if codec == Compression::None {
                    assert_eq!(sealed.len(), reference.len(), "{case}");
                }
                assert_eq!(
                    sealed[ATTRIBUTES.start..HEADER],
                    reference[ATTRIBUTES.start..HEADER],
                    "{case}"
                );
                assert_eq!(shape(&sealed), shape(&reference), "{case}");
                // Both read back as written (through the general path), and
                // no plaintext value is left in the sealed batch.
                let general = Hooks {
                    general_path: true,
                    ..Hooks::default()
                };
                for out in [&sealed, &reference] {
                    let back = decrypt("t", &policy, &general, out, &budget()).unwrap();
                    let back: Vec<_> = decode(&back)
                        .into_iter()
                        .map(|r| (r.offset, r.key, r.value, r.headers))
                        .collect();
                    let written: Vec<_> = plain
                        .iter()
                        .map(|r| {
                            let r = r.clone();
                            (r.offset, r.key, r.value, r.headers)
                        })
                        .collect();
                    assert_eq!(back, written, "{case}");
                }
                if codec == Compression::None {
                    for r in &plain {
                        if let Some(v) = r.value.as_ref().filter(|v| v.len() >= 16) {
                            assert!(
                                !sealed.windows(v.len()).any(|w| w == &v[..]),
                                "{case}: a value in the clear"
                            );
                        }
                    }
                }
            }
        }
    }
    assert!(
        taken > 30 && declined > 10,
        "taken {taken}, declined {declined}"
    );
}

#[test]
fn on_produce_a_key_keyset_in_rotation_takes_the_general_path_and_its_rule() {
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    keys.rotate();
    let policy = TopicPolicy::keyset(Keyset::generate())
        .with_record_keys(keys)
        .unwrap();
    // A producer that is not idempotent (one that is must be followed
    // from its first batch).
    let mut r = record(0, Some(b"k"), Some(b"v"));
    r.producer_id = -1;
    r.sequence = -1;
    let raw = batch(&[r], Compression::None);
    let before = FAST_BATCHES.with(|n| n.get());
    let sealed = encrypt("t", &policy, &Hooks::default(), &raw, &budget()).unwrap();
    assert_eq!(FAST_BATCHES.with(|n| n.get()), before, "not the fast path");
    assert_eq!(sealed.added, 1, "the older form's tombstone in front");
    assert_eq!(decode(&sealed.records).len(), 2);
}

#[test]
fn a_batch_refused_for_two_reasons_gives_the_general_paths_reason() {
    let policy = TopicPolicy::keyset(Keyset::generate());
    let plain = [
        record(0, Some(b"k0"), Some(b"v0")),
        record(1, Some(b"k1"), Some(b"v1")),
    ];
    let sealed = encrypt(
        "t",
        &policy,
        &Hooks::default(),
        &batch(&plain, Compression::None),
        &budget(),
    )
    .unwrap()
    .records;
    let mut b = sealed.to_vec();
    // Record 0 (its length a one-byte zigzag varint, no headers): the last
    // byte of its value's tag flipped. Record 1: attributes 1.
    let first = (b[HEADER] / 2) as usize + 1;
    b[HEADER + first - 2] ^= 1;
    b[HEADER + first + 1] = 1;
    let crc = crc32c::crc32c(&b[ATTRIBUTES.start..]);
    b[CRC].copy_from_slice(&crc.to_be_bytes());
    let (out, wrote) = both(&policy, &Bytes::from(b), "two reasons");
    let err = out.expect_err("refused");
    // The general path checks every record's encoding first.
    assert!(err.contains("encode back"), "{err}");
    assert_eq!(wrote, 0);
}

/// Found by a hostile review: a Produce batch whose last record the
/// general path refuses (it would not encode back) made subject keys in
/// the key store through the fast path, which encrypted the records
/// before it. Every record is now checked before any is taken.
#[test]
fn a_batch_both_paths_refuse_makes_no_subject_key() {
    use std::sync::Arc;
    use tombstone_crypt::shred::{MemoryKeyStore, SubjectKeys};
    for general_path in [false, true] {
        let keys = Arc::new(
            SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap(),
        );
        let policy = TopicPolicy::subject_keys(keys.clone());
        let plain = [
            record(0, Some(b"s0"), Some(b"v")),
            record(1, Some(b"s1"), Some(b"v")),
            record(2, Some(b"s2"), Some(b"v")),
        ];
        let raw = batch(&plain, Compression::None);
        // The last record's attributes 1 (its length a one-byte varint).
        let mut b = raw.to_vec();
        let mut at = HEADER;
        for _ in 0..2 {
            at += (b[at] / 2) as usize + 1;
        }
        b[at + 1] = 1;
        let crc = crc32c::crc32c(&b[ATTRIBUTES.start..]);
        b[CRC].copy_from_slice(&crc.to_be_bytes());
        let hooks = Hooks {
            general_path,
            ..Hooks::default()
        };
        let before = keys.stats().deks_created;
        let err = encrypt("t", &policy, &hooks, &Bytes::from(b), &budget()).unwrap_err();
        assert!(err.contains("encode back"), "{err}");
        assert_eq!(
            keys.stats().deks_created - before,
            0,
            "general path {general_path}: a refused write made subject keys"
        );
    }
}
