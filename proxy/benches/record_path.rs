//! The proxy's record path against the raw primitives, in one run, so that
//! its overhead is a ratio: a batch of 1,000 keyed records of 1 KiB
//! (`key-00000017`, a pseudo-random value as `examples/proxy_bench.rs`
//! writes), under the bench's policy (values under an AES-GCM keyset, keys
//! under an AES-SIV keyset).
//!
//! - `encrypt/batch/none`, `decrypt/batch/none`: the batch uncompressed,
//!   through the proxy's Produce path and its Fetch path (their fast
//!   paths: CRC, walk, encrypt or decrypt, copy, CRC; on Fetch, wipe).
//! - `encrypt/batch/lz4`, `decrypt/batch/lz4`: the same batch under lz4
//!   (the values do not compress: the codec's own cost).
//! - `encrypt/general/*`, `decrypt/general/*`: the general paths (decode,
//!   the encode-back check, encrypt or decrypt, encode), which the fast
//!   paths (straight from the records' bytes) replaced for such batches.
//! - `encrypt/primitive`, `decrypt/primitive`: the library's keysets doing
//!   the records' cryptography alone: each value sealed (opened) with
//!   `Keyset::encrypt` (`decrypt`) under associated data as long as the
//!   layer's, each key with `encrypt_deterministically`
//!   (`decrypt_deterministically`).
//!
//! Throughput is in bytes of record values (1,024,000 a batch), as the
//! proxy bench counts MB.
//!
//! ```sh
//! cargo bench -p tombstone-crypt-proxy --bench record_path
//! ```

use std::hint::black_box;

use bytes::{Bytes, BytesMut};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use kafka_protocol::records::{
    Compression, Record, RecordBatchDecoder, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::TopicPolicy;

const RECORDS: usize = 1000;
const VALUE: usize = 1024;
const TOPIC: &str = "bench-orders";
/// A request's frame limit (the proxy's default is larger; the budget is
/// four times it).
const LIMIT: usize = 8 << 20;

fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..VALUE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn records() -> Vec<Record> {
    let pattern = pattern();
    (0..RECORDS)
        .map(|i| {
            let mut v = pattern.clone();
            v[..8].copy_from_slice(&(i as u64).to_le_bytes());
            Record {
                transactional: false,
                control: false,
                delete_horizon: false,
                partition_leader_epoch: 0,
                producer_id: -1,
                producer_epoch: -1,
                timestamp_type: TimestampType::Creation,
                offset: i as i64,
                // kafka-protocol's encoder keeps records in one batch
                // while offset minus sequence stays (a producer that is
                // not idempotent: its batch's base sequence is -1).
                sequence: i as i32 - 1,
                timestamp: 1_700_000_000_000 + i as i64,
                key: Some(Bytes::from(format!("key-{i:08}"))),
                value: Some(Bytes::from(v)),
                headers: Default::default(),
            }
        })
        .collect()
}

fn batch(records: &[Record], compression: Compression) -> Bytes {
    let mut buf = BytesMut::new();
    let options = RecordEncodeOptions {
        version: 2,
        compression,
    };
    RecordBatchEncoder::encode(&mut buf, records.iter(), &options).expect("a batch");
    let buf = buf.freeze();
    // One batch of all the records, as a producer's full batch is (not a
    // batch a record).
    let batches = RecordBatchDecoder::decode_all(&mut buf.clone()).expect("decoded");
    assert_eq!((batches.len(), batches[0].records.len()), (1, RECORDS));
    buf
}

fn bench(c: &mut Criterion) {
    let values = Keyset::generate();
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).expect("an AES-SIV keyset");
    let policy = TopicPolicy::keyset(values.clone())
        .with_record_keys(keys.clone())
        .expect("a policy");
    let records = records();
    let bytes = (RECORDS * VALUE) as u64;
    use tombstone_crypt_proxy::__fuzz;

    let mut group = c.benchmark_group("encrypt");
    group.throughput(Throughput::Bytes(bytes));
    for (name, codec) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let raw = batch(&records, codec);
        group.bench_function(format!("batch/{name}"), |b| {
            b.iter(|| __fuzz::encrypt(TOPIC, &policy, black_box(&raw), LIMIT).expect("encrypted"))
        });
        let mut general = tombstone_crypt_proxy::Hooks::default();
        general.general_path = true;
        group.bench_function(format!("general/{name}"), |b| {
            b.iter(|| {
                __fuzz::encrypt_with(TOPIC, &policy, black_box(&raw), LIMIT, &general)
                    .expect("encrypted")
            })
        });
    }
    // The associated data of a value: the topic and the plaintext key, as
    // long as the layer's (`TopicAndKey`: lengths and the two).
    let aad = vec![7u8; 4 + TOPIC.len() + 4 + 12];
    group.bench_function("primitive", |b| {
        b.iter(|| {
            for r in &records {
                let k = keys
                    .encrypt_deterministically(
                        r.key.as_deref().unwrap_or_default(),
                        TOPIC.as_bytes(),
                    )
                    .expect("sealed");
                let v = values
                    .encrypt(r.value.as_deref().unwrap_or_default(), &aad)
                    .expect("sealed");
                black_box((k, v));
            }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("decrypt");
    group.throughput(Throughput::Bytes(bytes));
    for (name, codec) in [("none", Compression::None), ("lz4", Compression::Lz4)] {
        let raw = batch(&records, codec);
        let (sealed, _) = __fuzz::encrypt(TOPIC, &policy, &raw, LIMIT).expect("encrypted");
        group.bench_function(format!("batch/{name}"), |b| {
            b.iter(|| {
                let plain =
                    __fuzz::decrypt(TOPIC, &policy, black_box(&sealed), LIMIT).expect("decrypted");
                // As the proxy does once it wrote the response.
                __fuzz::wipe(plain, &Default::default())
            })
        });
        // The same batch through the general path (decoded into
        // kafka-protocol's records and encoded again), which the fast path
        // replaced on Fetch.
        let mut general = tombstone_crypt_proxy::Hooks::default();
        general.general_path = true;
        group.bench_function(format!("general/{name}"), |b| {
            b.iter(|| {
                let plain =
                    __fuzz::decrypt_with(TOPIC, &policy, black_box(&sealed), LIMIT, &general)
                        .expect("decrypted");
                __fuzz::wipe(plain, &Default::default())
            })
        });
    }
    let sealed: Vec<(Vec<u8>, Vec<u8>)> = records
        .iter()
        .map(|r| {
            let k = keys
                .encrypt_deterministically(r.key.as_deref().unwrap_or_default(), TOPIC.as_bytes())
                .expect("sealed");
            let v = values
                .encrypt(r.value.as_deref().unwrap_or_default(), &aad)
                .expect("sealed");
            (k, v)
        })
        .collect();
    group.bench_function("primitive", |b| {
        b.iter(|| {
            for (k, v) in &sealed {
                let k = keys
                    .decrypt_deterministically(k, TOPIC.as_bytes())
                    .expect("opened");
                let v = values.decrypt(v, &aad).expect("opened");
                black_box((k, v));
            }
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
