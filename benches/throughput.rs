//! Throughput of the encrypting layer against the raw AES-GCM primitive,
//! measured in the same run so that the layer's overhead is a ratio.
//!
//! - `encrypt/layer/N`, `decrypt/layer/N`: `EncryptingSerializer<Bytes>` and
//!   `DecryptingDeserializer<Bytes>`, default AAD policy, a context with a
//!   topic and a record key.
//! - `encrypt/raw_aes_gcm/N`, `decrypt/raw_aes_gcm/N`: `aes-gcm` doing the same
//!   work by hand: a fresh nonce from the thread-local RNG, one output `Vec`
//!   (`nonce | ciphertext | tag`), associated data of the same length.
//! - with the feature `aws-lc`, `encrypt/layer_aws_lc/N`,
//!   `encrypt/raw_aws_lc/N` and `decrypt/...` likewise: the layer on its
//!   aws-lc backend (the default under the feature) against `aws-lc-rs`'s
//!   `LessSafeKey` doing the same work by hand. `layer` is then the same
//!   layer on a keyset expanded for RustCrypto (`Keyset::with_backend`), so one run
//!   measures both.
//! - `tombstone/serialize`, `tombstone/deserialize`: a null passing through.
//! - `decrypt_fail/layer/1024`, `decrypt_fail/raw_aes_gcm/1024`: a tampered
//!   value, rejected.
//! - `typed/bincode/*` and `typed/bincode_plain/*`: a small struct through
//!   `Bincode`, encrypted and not.
//! - `encrypt/siv/64`, `decrypt/siv/64`: a 64-byte record key through
//!   `DeterministicSerializer` (AES-SIV).
//! - `encrypt/envelope/1024`, `decrypt/envelope/1024`: the same layer over a
//!   KMS envelope key (`KeyTemplate::kms_envelope`) with a warm DEK, an
//!   in-process KMS, RustCrypto: compare with `encrypt/layer/1024`. The
//!   reader is a keyset loaded from the writer's JSON (its DEK comes from
//!   the reader cache, as in another process). `decrypt/envelope-values1000/1024`
//!   reads 1000 values of that key in turn, as `decrypt/subject-hot1000/1024`
//!   reads its 1000 subjects' values: the two differ only in their keys.
//! - `encrypt|decrypt/subject/1024`, `.../subject-hot1000/1024`: subject
//!   keys (`tombstone_crypt::shred`), one subject and a hot set of 1000.
//!
//! `tombstone/*` and `typed/*` use the default backend: aws-lc when the
//! feature is on, RustCrypto otherwise.
//!
//! - `fields/*`: a record of 10 fields, 3 of them encrypted (32 B each),
//!   in JSON and bincode, beside the same record encrypted whole, the bare
//!   codec, the raw primitive on 32 bytes, and a prototype of fields whose
//!   paths are known at compile time (`derive_proto`; see [`fields`] and
//!   [`derive_proto`]).
//!
//! `scripts/bench.sh` runs this briefly and prints the ratios;
//! `scripts/bench-fields.sh` runs the `fields` rows.

use std::hint::black_box;

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use rand::Rng as _;
use serde::{Deserialize, Serialize};
use tombstone_crypt::{
    AadPolicy, Backend, Bincode, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    DeterministicDeserializer, DeterministicSerializer, EncryptingSerializer, KeyTemplate, Keyset,
    Serializer as _,
};

const SIZES: [usize; 5] = [0, 64, 1024, 16384, 65536];
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

const TOPIC: &str = "orders";
const RECORD_KEY: &[u8] = b"order-000017";

fn ctx() -> Context<'static> {
    Context::new(TOPIC).with_key(RECORD_KEY)
}

/// The associated data the layer computes for `ctx()`, so that the raw
/// primitive authenticates as many bytes.
fn aad() -> Vec<u8> {
    ctx()
        .associated_data(AadPolicy::TopicAndKey)
        .expect("short context")
}

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// What a caller of `aes-gcm` writes by hand: `nonce | ciphertext | tag` in
/// one exactly-sized `Vec`, with a fresh nonce from the thread-local RNG.
fn raw_seal(cipher: &Aes256Gcm, aad: &[u8], pt: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
    let mut nonce = [0u8; NONCE_LEN];
    rand::rng().fill_bytes(&mut nonce);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(pt);
    let tag = cipher
        .encrypt_inout_detached(&Nonce::from(nonce), aad, (&mut out[NONCE_LEN..]).into())
        .expect("encrypt");
    out.extend_from_slice(&tag);
    out
}

#[cfg(feature = "aws-lc")]
mod aws_lc {
    use aws_lc_rs::aead::{Aad, LessSafeKey, Nonce, UnboundKey, AES_256_GCM};
    use rand::Rng as _;

    use super::{NONCE_LEN, TAG_LEN};

    pub fn key() -> LessSafeKey {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("32-byte key"))
    }

    /// [`super::raw_seal`] on aws-lc.
    pub fn seal(key: &LessSafeKey, aad: &[u8], pt: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        out.extend_from_slice(&nonce);
        out.extend_from_slice(pt);
        let tag = key
            .seal_in_place_separate_tag(
                Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[NONCE_LEN..],
            )
            .expect("encrypt");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// [`super::raw_open`] on aws-lc.
    pub fn open(key: &LessSafeKey, aad: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        let (nonce, rest) = data.split_at_checked(NONCE_LEN)?;
        let (body, tag) = rest.split_at_checked(rest.len().checked_sub(TAG_LEN)?)?;
        let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
        let mut buf = body.to_vec();
        key.open_in_place_separate_tag(
            Nonce::assume_unique_for_key(nonce),
            Aad::from(aad),
            tag,
            &mut buf,
        )
        .ok()?;
        Some(buf)
    }
}

/// The inverse of [`raw_seal`]: the body copied into a new `Vec`, decrypted
/// in place.
fn raw_open(cipher: &Aes256Gcm, aad: &[u8], data: &[u8]) -> Option<Vec<u8>> {
    let (nonce, rest) = data.split_at_checked(NONCE_LEN)?;
    let (body, tag) = rest.split_at_checked(rest.len().checked_sub(TAG_LEN)?)?;
    let nonce: [u8; NONCE_LEN] = nonce.try_into().ok()?;
    let tag: [u8; TAG_LEN] = tag.try_into().ok()?;
    let mut buf = body.to_vec();
    cipher
        .decrypt_inout_detached(
            &Nonce::from(nonce),
            aad,
            buf.as_mut_slice().into(),
            &Tag::from(tag),
        )
        .ok()?;
    Some(buf)
}

fn raw_cipher() -> Aes256Gcm {
    let mut key = [0u8; 32];
    rand::rng().fill_bytes(&mut key);
    Aes256Gcm::new_from_slice(&key).expect("32-byte key")
}

/// A keyset expanded for RustCrypto (the `layer` rows); under the feature
/// the same keys are expanded for aws-lc for the `layer_aws_lc` rows.
fn rust_crypto(keyset: &Keyset) -> Keyset {
    keyset.clone().with_backend(Backend::RustCrypto)
}

fn encrypt(c: &mut Criterion) {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, rust_crypto(&keyset));
    let cipher = raw_cipher();
    #[cfg(feature = "aws-lc")]
    let (ser_aws_lc, aws_lc_key) = (
        EncryptingSerializer::new(Bytes, keyset.with_backend(Backend::AwsLc)),
        aws_lc::key(),
    );
    let ctx = ctx();
    let aad = aad();
    let mut group = c.benchmark_group("encrypt");
    for n in SIZES {
        let pt = plaintext(n);
        group.throughput(Throughput::Bytes(n as u64));
        group.bench_with_input(BenchmarkId::new("layer", n), &pt, |b, pt| {
            b.iter(|| ser.serialize(black_box(&ctx), Some(black_box(&pt[..]))))
        });
        group.bench_with_input(BenchmarkId::new("raw_aes_gcm", n), &pt, |b, pt| {
            b.iter(|| raw_seal(&cipher, black_box(&aad), black_box(pt)))
        });
        #[cfg(feature = "aws-lc")]
        {
            group.bench_with_input(BenchmarkId::new("layer_aws_lc", n), &pt, |b, pt| {
                b.iter(|| ser_aws_lc.serialize(black_box(&ctx), Some(black_box(&pt[..]))))
            });
            group.bench_with_input(BenchmarkId::new("raw_aws_lc", n), &pt, |b, pt| {
                b.iter(|| aws_lc::seal(&aws_lc_key, black_box(&aad), black_box(pt)))
            });
        }
    }
    group.finish();
}

fn decrypt(c: &mut Criterion) {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, rust_crypto(&keyset));
    let de = DecryptingDeserializer::new(Bytes, rust_crypto(&keyset));
    let cipher = raw_cipher();
    #[cfg(feature = "aws-lc")]
    let (de_aws_lc, aws_lc_key) = (
        DecryptingDeserializer::new(Bytes, keyset.with_backend(Backend::AwsLc)),
        aws_lc::key(),
    );
    let ctx = ctx();
    let aad = aad();
    let mut group = c.benchmark_group("decrypt");
    for n in SIZES {
        let pt = plaintext(n);
        let ct = ser
            .serialize(&ctx, Some(&pt[..]))
            .expect("encrypt")
            .expect("present");
        let raw_ct = raw_seal(&cipher, &aad, &pt);
        assert_eq!(
            de.deserialize(&ctx, Some(&ct)).expect("decrypt"),
            Some(pt.clone())
        );
        assert_eq!(raw_open(&cipher, &aad, &raw_ct), Some(pt.clone()));
        group.throughput(Throughput::Bytes(n as u64));
        group.bench_with_input(BenchmarkId::new("layer", n), &ct, |b, ct| {
            b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
        });
        group.bench_with_input(BenchmarkId::new("raw_aes_gcm", n), &raw_ct, |b, ct| {
            b.iter(|| raw_open(&cipher, black_box(&aad), black_box(ct)))
        });
        #[cfg(feature = "aws-lc")]
        {
            // The layer's ciphertext was written by RustCrypto: aws-lc reads it.
            assert_eq!(
                de_aws_lc.deserialize(&ctx, Some(&ct)).expect("decrypt"),
                Some(pt.clone())
            );
            let raw_ct = aws_lc::seal(&aws_lc_key, &aad, &pt);
            assert_eq!(aws_lc::open(&aws_lc_key, &aad, &raw_ct), Some(pt.clone()));
            group.bench_with_input(BenchmarkId::new("layer_aws_lc", n), &ct, |b, ct| {
                b.iter(|| de_aws_lc.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
            });
            group.bench_with_input(BenchmarkId::new("raw_aws_lc", n), &raw_ct, |b, ct| {
                b.iter(|| aws_lc::open(&aws_lc_key, black_box(&aad), black_box(ct)))
            });
        }
    }
    group.finish();
}

fn decrypt_fail(c: &mut Criterion) {
    const N: usize = 1024;
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, rust_crypto(&keyset));
    let de = DecryptingDeserializer::new(Bytes, rust_crypto(&keyset));
    let cipher = raw_cipher();
    let ctx = ctx();
    let aad = aad();
    let pt = plaintext(N);
    let mut ct = ser
        .serialize(&ctx, Some(&pt[..]))
        .expect("encrypt")
        .expect("present");
    let mut raw_ct = raw_seal(&cipher, &aad, &pt);
    // One flipped bit in the middle of the body.
    let mid = ct.len() / 2;
    ct[mid] ^= 0x01;
    let mid = raw_ct.len() / 2;
    raw_ct[mid] ^= 0x01;
    assert!(de.deserialize(&ctx, Some(&ct)).is_err());
    assert!(raw_open(&cipher, &aad, &raw_ct).is_none());
    let mut group = c.benchmark_group("decrypt_fail");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("layer", N), &ct, |b, ct| {
        b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
    });
    group.bench_with_input(BenchmarkId::new("raw_aes_gcm", N), &raw_ct, |b, ct| {
        b.iter(|| raw_open(&cipher, black_box(&aad), black_box(ct)))
    });
    #[cfg(feature = "aws-lc")]
    {
        let de_aws_lc = DecryptingDeserializer::new(Bytes, keyset.with_backend(Backend::AwsLc));
        let key = aws_lc::key();
        let mut raw_ct = aws_lc::seal(&key, &aad, &pt);
        let mid = raw_ct.len() / 2;
        raw_ct[mid] ^= 0x01;
        assert!(de_aws_lc.deserialize(&ctx, Some(&ct)).is_err());
        assert!(aws_lc::open(&key, &aad, &raw_ct).is_none());
        group.bench_with_input(BenchmarkId::new("layer_aws_lc", N), &ct, |b, ct| {
            b.iter(|| de_aws_lc.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
        });
        group.bench_with_input(BenchmarkId::new("raw_aws_lc", N), &raw_ct, |b, ct| {
            b.iter(|| aws_lc::open(&key, black_box(&aad), black_box(ct)))
        });
    }
    group.finish();
}

fn tombstone(c: &mut Criterion) {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let de = DecryptingDeserializer::new(Bytes, keyset);
    let ctx = ctx();
    let mut group = c.benchmark_group("tombstone");
    group.bench_function("serialize", |b| {
        b.iter(|| ser.serialize(black_box(&ctx), black_box(None::<&[u8]>)))
    });
    group.bench_function("deserialize", |b| {
        b.iter(|| de.deserialize(black_box(&ctx), black_box(None)))
    });
    group.finish();
}

/// A small record, as a Kafka Streams application might keep per key.
#[derive(Serialize, Deserialize, Debug, PartialEq, Clone)]
struct Order {
    id: u64,
    customer: u32,
    item: String,
    quantity: u16,
    price_cents: u64,
    express: bool,
}

fn typed(c: &mut Criterion) {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bincode::<Order>::new(), keyset.clone());
    let de = DecryptingDeserializer::new(Bincode::<Order>::new(), keyset);
    let plain = Bincode::<Order>::new();
    let ctx = ctx();
    let order = Order {
        id: 17,
        customer: 4242,
        item: "hardcover book".into(),
        quantity: 2,
        price_cents: 2599,
        express: true,
    };
    let ct = ser
        .serialize(&ctx, Some(&order))
        .expect("encrypt")
        .expect("present");
    let bytes = plain
        .serialize(&ctx, Some(&order))
        .expect("encode")
        .expect("present");
    assert_eq!(
        de.deserialize(&ctx, Some(&ct)).expect("decrypt"),
        Some(order.clone())
    );
    assert_eq!(
        plain.deserialize(&ctx, Some(&bytes)).expect("decode"),
        Some(order.clone())
    );

    let mut group = c.benchmark_group("typed");
    group.bench_function(BenchmarkId::new("bincode", "serialize"), |b| {
        b.iter(|| ser.serialize(black_box(&ctx), Some(black_box(&order))))
    });
    group.bench_function(BenchmarkId::new("bincode", "deserialize"), |b| {
        b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
    });
    group.bench_function(BenchmarkId::new("bincode_plain", "serialize"), |b| {
        b.iter(|| plain.serialize(black_box(&ctx), Some(black_box(&order))))
    });
    group.bench_function(BenchmarkId::new("bincode_plain", "deserialize"), |b| {
        b.iter(|| plain.deserialize(black_box(&ctx), Some(black_box(&bytes[..]))))
    });
    group.finish();
}

/// A typical record key (64 bytes) through `DeterministicSerializer`
/// (AES-SIV), against `encrypt/layer/64` (AES-GCM) of the same run.
fn siv(c: &mut Criterion) {
    const N: usize = 64;
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).expect("AES-SIV keyset");
    let ser = DeterministicSerializer::new(Bytes, keys.clone());
    let de = DeterministicDeserializer::new(Bytes, keys);
    let ctx = Context::new(TOPIC);
    let pt = plaintext(N);
    let ct = ser
        .serialize(&ctx, Some(&pt[..]))
        .expect("encrypt")
        .expect("present");
    assert_eq!(
        de.deserialize(&ctx, Some(&ct)).expect("decrypt"),
        Some(pt.clone())
    );
    let mut group = c.benchmark_group("encrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("siv", N), &pt, |b, pt| {
        b.iter(|| ser.serialize(black_box(&ctx), Some(black_box(&pt[..]))))
    });
    group.finish();
    let mut group = c.benchmark_group("decrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("siv", N), &ct, |b, ct| {
        b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
    });
    group.finish();
}

/// 1 KiB values through an envelope key with a warm DEK, beside
/// `encrypt/layer/1024` and `decrypt/layer/1024`.
fn envelope(c: &mut Criterion) {
    const N: usize = 1024;
    let kms = tombstone_crypt::__fuzz::FakeKms::new();
    let clients = tombstone_crypt::kms::KmsClients::new().with(kms);
    let writer = Keyset::generate_with(
        KeyTemplate::kms_envelope("fake-kms://bench").with_kms_clients(clients.clone()),
    )
    .expect("envelope keyset")
    .with_backend(Backend::RustCrypto);
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
        .expect("reader")
        .with_backend(Backend::RustCrypto);
    let ser = EncryptingSerializer::new(Bytes, writer);
    let de = DecryptingDeserializer::new(Bytes, reader);
    let ctx = ctx();
    let pt = plaintext(N);
    let ct = ser
        .serialize(&ctx, Some(&pt[..]))
        .expect("encrypt")
        .expect("present");
    assert_eq!(
        de.deserialize(&ctx, Some(&ct)).expect("decrypt"),
        Some(pt.clone())
    );
    let mut group = c.benchmark_group("encrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("envelope", N), &pt, |b, pt| {
        b.iter(|| ser.serialize(black_box(&ctx), Some(black_box(&pt[..]))))
    });
    group.finish();
    // 1000 values of the same key, read in turn: what `subject-hot1000`
    // reads (a value is new input, not the same bytes again and again),
    // so that the two differ only in their keys.
    let cts: Vec<Vec<u8>> = (0..1000)
        .map(|_| {
            ser.serialize(&ctx, Some(&pt[..]))
                .expect("encrypt")
                .expect("present")
        })
        .collect();
    let mut group = c.benchmark_group("decrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("envelope", N), &ct, |b, ct| {
        b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(&ct[..]))))
    });
    let mut i = 0;
    group.bench_with_input(
        BenchmarkId::new("envelope-values1000", N),
        &cts,
        |b, cts| {
            b.iter(|| {
                i = (i + 1) % cts.len();
                de.deserialize(black_box(&ctx), Some(black_box(&cts[i][..])))
            })
        },
    );
    group.finish();
}

/// 1 KiB values under subject keys (`tombstone_crypt::shred`) with a warm
/// cache, beside `encrypt/envelope/1024`: one subject, and a hot set of
/// 1000 subjects taken in turn.
fn subject(c: &mut Criterion) {
    use std::sync::Arc;
    use tombstone_crypt::shred::{MemoryKeyStore, SubjectEncrypting, SubjectKeys};
    const N: usize = 1024;
    let keys = Arc::new(
        SubjectKeys::create(
            Keyset::generate().with_backend(Backend::RustCrypto),
            Arc::new(MemoryKeyStore::new()),
        )
        .unwrap()
        .with_fence(std::time::Duration::from_secs(3600)),
    );
    let values: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(keys, Bytes);
    let subjects: Vec<Vec<u8>> = (0..1000)
        .map(|i| format!("subject-{i}").into_bytes())
        .collect();
    let pt = plaintext(N);
    let cts: Vec<Vec<u8>> = subjects
        .iter()
        .map(|s| {
            let ctx = Context::new("bench").with_key(s);
            let ct = values
                .serialize(&ctx, Some(&pt[..]))
                .expect("encrypt")
                .expect("present");
            assert_eq!(
                values.deserialize(&ctx, Some(&ct)).expect("decrypt"),
                Some(pt.clone())
            );
            ct
        })
        .collect();
    let one = Context::new("bench").with_key(&subjects[0]);
    let mut group = c.benchmark_group("encrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("subject", N), &pt, |b, pt| {
        b.iter(|| values.serialize(black_box(&one), Some(black_box(&pt[..]))))
    });
    let mut i = 0;
    group.bench_with_input(BenchmarkId::new("subject-hot1000", N), &pt, |b, pt| {
        b.iter(|| {
            i = (i + 1) % subjects.len();
            let ctx = Context::new("bench").with_key(&subjects[i]);
            values.serialize(black_box(&ctx), Some(black_box(&pt[..])))
        })
    });
    group.finish();
    let mut group = c.benchmark_group("decrypt");
    group.throughput(Throughput::Bytes(N as u64));
    group.bench_with_input(BenchmarkId::new("subject", N), &cts[0], |b, ct| {
        b.iter(|| values.deserialize(black_box(&one), Some(black_box(&ct[..]))))
    });
    let mut i = 0;
    group.bench_with_input(BenchmarkId::new("subject-hot1000", N), &cts, |b, cts| {
        b.iter(|| {
            i = (i + 1) % subjects.len();
            let ctx = Context::new("bench").with_key(&subjects[i]);
            values.deserialize(black_box(&ctx), Some(black_box(&cts[i][..])))
        })
    });
    group.finish();
}

// ---- fields ----

/// A record of 10 fields, 3 of them secrets of 32 bytes: `S` is their type
/// (`Encrypted<String>` through `FieldEncrypting`; `String` for the whole
/// value and the bare codec).
#[derive(Serialize, Deserialize, Clone, PartialEq, Debug)]
struct TenFields<S> {
    id: u64,
    customer: u32,
    items: u32,
    paid: bool,
    at: i64,
    currency: String,
    country: String,
    card: S,
    iban: S,
    email: S,
}

fn order<S>(secret: impl Fn(u8) -> S) -> TenFields<S> {
    TenFields {
        id: 1_234_567,
        customer: 42,
        items: 3,
        paid: true,
        at: 1_733_400_000_000,
        currency: "EUR".into(),
        country: "FR".into(),
        card: secret(b'c'),
        iban: secret(b'i'),
        email: secret(b'e'),
    }
}

fn secret32(c: u8) -> String {
    String::from_utf8(vec![c; 32]).expect("ASCII")
}

/// `fields/{json,bincode}/{encrypt,decrypt}/{fields,derive_proto,whole,codec,codec_wire}`
/// and `fields/raw32/{encrypt,decrypt}`: a record of 10 fields with 3
/// encrypted (32 B each) through `FieldEncrypting`; the same record with
/// plain fields encrypted as one whole value; the plain record through the
/// bare codec; the plain record whose 3 fields hold text as long as the
/// fields' wire form (what the codec costs for the longer fields); the raw
/// AES-GCM primitive on 32 bytes with a field's associated data; and
/// `derive_proto`, the record with encrypted fields through
/// [`derive_proto`] (paths known at compile time, no path tracking), which
/// writes what `FieldEncrypting` writes (checked here both ways).
/// `scripts/bench-fields.sh` runs it and prints the ratios.
fn fields(c: &mut Criterion) {
    use tombstone_crypt::field::{Encrypted, FieldEncrypting};
    use tombstone_crypt::Json;

    let keyset = Keyset::generate();
    let ctx = ctx();
    let encrypted = order(|c| Encrypted::new(secret32(c)));
    let plain = order(secret32);
    let field_aad = tombstone_crypt::field::associated_data(&ctx, AadPolicy::TopicAndKey, "/email")
        .expect("short");
    // The prototype's constant suffixes are the library's binding.
    for (path, suffix) in [
        ("/card", &derive_proto::CARD[..]),
        ("/iban", &derive_proto::IBAN[..]),
        ("/email", &derive_proto::EMAIL[..]),
    ] {
        let mut ad = aad();
        ad.extend_from_slice(suffix);
        let want = tombstone_crypt::field::associated_data(&ctx, AadPolicy::TopicAndKey, path)
            .expect("short");
        assert_eq!(ad, want, "{path}");
    }
    macro_rules! format_group {
        ($name:literal, $codec:ident, $proto:ident) => {{
            let fe = FieldEncrypting::new(
                $codec::<TenFields<Encrypted<String>>>::new(),
                keyset.clone(),
            );
            let proto = derive_proto::Proto::$proto(keyset.clone());
            let whole_ser =
                EncryptingSerializer::new($codec::<TenFields<String>>::new(), keyset.clone());
            let whole_de =
                DecryptingDeserializer::new($codec::<TenFields<String>>::new(), keyset.clone());
            let bare = $codec::<TenFields<String>>::new();
            let fields_ct = fe
                .serialize(&ctx, Some(&encrypted))
                .expect("fields")
                .expect("present");
            let whole_ct = whole_ser
                .serialize(&ctx, Some(&plain))
                .expect("whole")
                .expect("present");
            let bare_bytes = bare
                .serialize(&ctx, Some(&plain))
                .expect("bare")
                .expect("present");
            // The wire form of a field (33 + 32 = 65 bytes): its base64 in
            // JSON (88 characters), the bytes in bincode.
            let wire_len = if $name == "json" {
                65_usize.div_ceil(3) * 4
            } else {
                65
            };
            let wire = order(|c| String::from_utf8(vec![c; wire_len]).expect("ASCII"));
            let wire_bytes = bare
                .serialize(&ctx, Some(&wire))
                .expect("bare")
                .expect("present");
            // The prototype writes what FieldEncrypting writes: each reads
            // the other's record back as the record written.
            let proto_ct = proto.serialize(&ctx, &encrypted).expect("proto");
            assert_eq!(proto_ct.len(), fields_ct.len());
            assert_eq!(
                fe.deserialize(&ctx, Some(&proto_ct[..]))
                    .expect("read proto"),
                Some(encrypted.clone())
            );
            assert_eq!(
                proto.deserialize(&ctx, &fields_ct).expect("proto reads"),
                encrypted
            );
            if $name == "json" {
                // The same text but for the ciphertexts, which are as long.
                let masked = |b: &[u8]| {
                    let mut v: serde_json::Value = serde_json::from_slice(b).expect("JSON");
                    for f in ["card", "iban", "email"] {
                        let len = v[f].as_str().expect("base64").len();
                        v[f] = serde_json::Value::from(len);
                    }
                    v
                };
                assert_eq!(masked(&proto_ct), masked(&fields_ct));
            }
            let mut group = c.benchmark_group(concat!("fields/", $name, "/encrypt"));
            group.bench_function("fields", |b| {
                b.iter(|| fe.serialize(black_box(&ctx), Some(black_box(&encrypted))))
            });
            group.bench_function("derive_proto", |b| {
                b.iter(|| proto.serialize(black_box(&ctx), black_box(&encrypted)))
            });
            group.bench_function("whole", |b| {
                b.iter(|| whole_ser.serialize(black_box(&ctx), Some(black_box(&plain))))
            });
            group.bench_function("codec", |b| {
                b.iter(|| bare.serialize(black_box(&ctx), Some(black_box(&plain))))
            });
            group.bench_function("codec_wire", |b| {
                b.iter(|| bare.serialize(black_box(&ctx), Some(black_box(&wire))))
            });
            group.finish();
            let mut group = c.benchmark_group(concat!("fields/", $name, "/decrypt"));
            group.bench_function("fields", |b| {
                b.iter(|| {
                    fe.deserialize(black_box(&ctx), Some(black_box(&fields_ct[..])))
                        .expect("decrypt")
                })
            });
            group.bench_function("derive_proto", |b| {
                b.iter(|| {
                    proto
                        .deserialize(black_box(&ctx), black_box(&fields_ct[..]))
                        .expect("decrypt")
                })
            });
            group.bench_function("whole", |b| {
                b.iter(|| {
                    whole_de
                        .deserialize(black_box(&ctx), Some(black_box(&whole_ct[..])))
                        .expect("decrypt")
                })
            });
            group.bench_function("codec", |b| {
                b.iter(|| {
                    bare.deserialize(black_box(&ctx), Some(black_box(&bare_bytes[..])))
                        .expect("decode")
                })
            });
            group.bench_function("codec_wire", |b| {
                b.iter(|| {
                    bare.deserialize(black_box(&ctx), Some(black_box(&wire_bytes[..])))
                        .expect("decode")
                })
            });
            group.finish();
        }};
    }
    format_group!("json", Json, json);
    format_group!("bincode", Bincode, bincode);

    let pt = [7u8; 32];
    let mut group = c.benchmark_group("fields/raw32");
    #[cfg(feature = "aws-lc")]
    {
        let key = aws_lc::key();
        let ct = aws_lc::seal(&key, &field_aad, &pt);
        group.bench_function("encrypt", |b| {
            b.iter(|| aws_lc::seal(&key, black_box(&field_aad), black_box(&pt)))
        });
        group.bench_function("decrypt", |b| {
            b.iter(|| aws_lc::open(&key, black_box(&field_aad), black_box(&ct)).expect("open"))
        });
    }
    #[cfg(not(feature = "aws-lc"))]
    {
        let cipher = raw_cipher();
        let ct = raw_seal(&cipher, &field_aad, &pt);
        group.bench_function("encrypt", |b| {
            b.iter(|| raw_seal(&cipher, black_box(&field_aad), black_box(&pt)))
        });
        group.bench_function("decrypt", |b| {
            b.iter(|| raw_open(&cipher, black_box(&field_aad), black_box(&ct)).expect("open"))
        });
    }
    group.finish();
}

/// A prototype of fields whose paths are known at compile time: what a
/// derive (`#[derive(FieldSerialize, FieldDeserialize)]`, say) would
/// generate for `TenFields<Encrypted<String>>`, written by hand, in the
/// bench only. Each encrypted field's associated data after the record's
/// (`F`, the path's length, the path) is a constant; the keys and the
/// record's associated data are passed down explicitly, so there is no
/// thread-local scope and no path tracking. Everything else is what
/// `FieldEncrypting` does for a field: the plaintext (a `String`'s UTF-8)
/// in a buffer reused across the record's fields and zeroized after it,
/// sealed in place, base64 in JSON, bytes in bincode, one counter bump;
/// on reads the decoded ciphertext opened in place in a zeroizing buffer.
/// The wire form is `FieldEncrypting`'s: the bench checks that each reads
/// the other's records.
mod derive_proto {
    use std::cell::{Cell, RefCell};
    use std::fmt;
    use std::sync::atomic::{AtomicU64, Ordering};

    use serde::de::{self, DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};
    use serde::ser::{self, SerializeStruct};
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use tombstone_crypt::field::Encrypted;
    use tombstone_crypt::{AadPolicy, Context, Keyset};
    use zeroize::{Zeroize, Zeroizing};

    use super::TenFields;

    /// `F`, the path's length (u32, big-endian) and the path: a field's
    /// associated data after the record's, as a constant.
    const fn suffix<const N: usize>(path: &str) -> [u8; N] {
        let p = path.as_bytes();
        assert!(N == 5 + p.len());
        let len = (p.len() as u32).to_be_bytes();
        let mut out = [0u8; N];
        out[0] = b'F';
        out[1] = len[0];
        out[2] = len[1];
        out[3] = len[2];
        out[4] = len[3];
        let mut i = 0;
        while i < p.len() {
            out[5 + i] = p[i];
            i += 1;
        }
        out
    }

    pub const CARD: [u8; 10] = suffix("/card");
    pub const IBAN: [u8; 10] = suffix("/iban");
    pub const EMAIL: [u8; 11] = suffix("/email");

    /// Stands for the keyset's `fields_encrypted` / `fields_decrypted`
    /// counters (crate-private): one relaxed add per field, as there.
    static COUNTED: AtomicU64 = AtomicU64::new(0);

    const BINCODE: bincode::config::Configuration<
        bincode::config::LittleEndian,
        bincode::config::Varint,
        bincode::config::Limit<{ tombstone_crypt::codec::BINCODE_DECODE_LIMIT }>,
    > = bincode::config::standard()
        .with_limit::<{ tombstone_crypt::codec::BINCODE_DECODE_LIMIT }>();

    /// What the generated code is handed: the keys, the record's associated
    /// data followed by the current field's suffix, and the field buffer.
    struct Cx<'a> {
        keyset: &'a Keyset,
        head: usize,
        record_len: usize,
        aad: RefCell<Vec<u8>>,
        scratch: RefCell<Vec<u8>>,
    }

    impl Drop for Cx<'_> {
        fn drop(&mut self) {
            self.scratch.get_mut().zeroize();
        }
    }

    impl<'a> Cx<'a> {
        fn new(keyset: &'a Keyset, ctx: &Context<'_>) -> Result<Self, String> {
            let mut aad = ctx
                .associated_data(AadPolicy::TopicAndKey)
                .map_err(|e| e.to_string())?;
            let record_len = aad.len();
            aad.reserve(16);
            Ok(Cx {
                keyset,
                head: keyset.header_len(),
                record_len,
                aad: RefCell::new(aad),
                scratch: RefCell::new(Vec::new()),
            })
        }

        /// The field's associated data, for `suffix`.
        fn field_aad(&self, suffix: &[u8]) -> std::cell::RefMut<'_, Vec<u8>> {
            let mut aad = self.aad.borrow_mut();
            aad.truncate(self.record_len);
            aad.extend_from_slice(suffix);
            aad
        }
    }

    /// Writes a field's ciphertext: base64 in a human-readable format,
    /// bytes in a binary one (as the library does).
    fn write_sealed<S: Serializer>(s: S, bytes: &[u8]) -> Result<S::Ok, S::Error> {
        if s.is_human_readable() {
            use base64::Engine as _;
            let engine = base64::engine::general_purpose::STANDARD;
            let mut stack = [0u8; 512];
            match engine.encode_slice(bytes, &mut stack) {
                Ok(n) => match core::str::from_utf8(&stack[..n]) {
                    Ok(text) => s.serialize_str(text),
                    Err(_) => Err(ser::Error::custom("base64 is ASCII")),
                },
                Err(_) => s.serialize_str(&engine.encode(bytes)),
            }
        } else {
            s.serialize_bytes(bytes)
        }
    }

    /// An encrypted field at the path whose suffix is `suffix`.
    struct SealAt<'a> {
        field: &'a Encrypted<String>,
        suffix: &'static [u8],
        cx: &'a Cx<'a>,
    }

    impl Serialize for SealAt<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let value = match (self.field.get(), self.field.sealed()) {
                (Some(v), _) => v,
                (None, Some(sealed)) => return write_sealed(s, sealed.as_bytes()),
                (None, None) => return Err(ser::Error::custom("neither open nor sealed")),
            };
            let cx = self.cx;
            let aad = cx.field_aad(self.suffix);
            let mut buf = cx.scratch.borrow_mut();
            buf.clear();
            // Room for the whole ciphertext first: the plaintext is never
            // in a block that a reallocation frees.
            buf.reserve(cx.head + value.len() + 16);
            buf.resize(cx.head, 0);
            buf.extend_from_slice(value.as_bytes());
            cx.keyset
                .encrypt_in_place(&mut buf, cx.head, &aad)
                .map_err(ser::Error::custom)?;
            COUNTED.fetch_add(1, Ordering::Relaxed);
            write_sealed(s, &buf)
        }
    }

    /// What `#[derive(FieldSerialize)]` would write: serde's derive, with
    /// each encrypted field handed its path as a constant.
    struct Sealing<'a> {
        rec: &'a TenFields<Encrypted<String>>,
        cx: &'a Cx<'a>,
    }

    impl Serialize for Sealing<'_> {
        fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
            let (r, cx) = (self.rec, self.cx);
            let mut st = s.serialize_struct("TenFields", 10)?;
            st.serialize_field("id", &r.id)?;
            st.serialize_field("customer", &r.customer)?;
            st.serialize_field("items", &r.items)?;
            st.serialize_field("paid", &r.paid)?;
            st.serialize_field("at", &r.at)?;
            st.serialize_field("currency", &r.currency)?;
            st.serialize_field("country", &r.country)?;
            let at = |field, suffix| SealAt { field, suffix, cx };
            st.serialize_field("card", &at(&r.card, &CARD))?;
            st.serialize_field("iban", &at(&r.iban, &IBAN))?;
            st.serialize_field("email", &at(&r.email, &EMAIL))?;
            st.end()
        }
    }

    /// Reads an encrypted field at the path whose suffix is `suffix`.
    struct OpenAt<'a> {
        suffix: &'static [u8],
        cx: &'a Cx<'a>,
    }

    struct SealedVisitor;

    impl<'de> Visitor<'de> for SealedVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("an encrypted field (base64 text or bytes)")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Vec<u8>, E> {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(v)
                .map_err(|_| E::custom("an encrypted field is not canonical base64"))
        }

        fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }

        fn visit_byte_buf<E: de::Error>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
    }

    impl<'de> DeserializeSeed<'de> for OpenAt<'_> {
        type Value = Encrypted<String>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            let bytes = if d.is_human_readable() {
                d.deserialize_str(SealedVisitor)?
            } else {
                d.deserialize_byte_buf(SealedVisitor)?
            };
            if bytes.len() < 5 || bytes[0] != 1 {
                return Err(de::Error::custom("an encrypted field: bad prefix"));
            }
            let mut buf = Zeroizing::new(bytes);
            let aad = self.cx.field_aad(self.suffix);
            self.cx
                .keyset
                .decrypt_in_place(&mut buf, &aad)
                .map_err(de::Error::custom)?;
            COUNTED.fetch_add(1, Ordering::Relaxed);
            let text = std::str::from_utf8(&buf)
                .map_err(|_| de::Error::custom("a field's plaintext is not UTF-8"))?;
            Ok(Encrypted::new(text.to_owned()))
        }
    }

    /// The record's field names, as serde's derive lists them.
    const FIELDS: &[&str] = &[
        "id", "customer", "items", "paid", "at", "currency", "country", "card", "iban", "email",
    ];

    /// serde's derive's field identifier.
    struct Id(Option<usize>);

    impl<'de> Deserialize<'de> for Id {
        fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
            struct V;
            impl<'de> Visitor<'de> for V {
                type Value = Id;
                fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                    f.write_str("a field identifier")
                }
                fn visit_u64<E: de::Error>(self, v: u64) -> Result<Id, E> {
                    Ok(Id(usize::try_from(v).ok().filter(|&i| i < FIELDS.len())))
                }
                fn visit_str<E: de::Error>(self, v: &str) -> Result<Id, E> {
                    Ok(Id(FIELDS.iter().position(|f| *f == v)))
                }
                fn visit_bytes<E: de::Error>(self, v: &[u8]) -> Result<Id, E> {
                    Ok(Id(FIELDS.iter().position(|f| f.as_bytes() == v)))
                }
            }
            d.deserialize_identifier(V)
        }
    }

    /// What `#[derive(FieldDeserialize)]` would write: serde's derive, with
    /// each encrypted field read through a seed that knows its path.
    struct Opening<'a>(&'a Cx<'a>);

    impl<'de> DeserializeSeed<'de> for Opening<'_> {
        type Value = TenFields<Encrypted<String>>;

        fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_struct("TenFields", FIELDS, self)
        }
    }

    fn missing<E: de::Error>(i: usize) -> E {
        E::missing_field(FIELDS[i])
    }

    impl<'de> Visitor<'de> for Opening<'_> {
        type Value = TenFields<Encrypted<String>>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("struct TenFields")
        }

        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let cx = self.0;
            let len = |i| de::Error::invalid_length(i, &"struct TenFields with 10 elements");
            let at = |suffix| OpenAt { suffix, cx };
            Ok(TenFields {
                id: seq.next_element()?.ok_or_else(|| len(0))?,
                customer: seq.next_element()?.ok_or_else(|| len(1))?,
                items: seq.next_element()?.ok_or_else(|| len(2))?,
                paid: seq.next_element()?.ok_or_else(|| len(3))?,
                at: seq.next_element()?.ok_or_else(|| len(4))?,
                currency: seq.next_element()?.ok_or_else(|| len(5))?,
                country: seq.next_element()?.ok_or_else(|| len(6))?,
                card: seq.next_element_seed(at(&CARD))?.ok_or_else(|| len(7))?,
                iban: seq.next_element_seed(at(&IBAN))?.ok_or_else(|| len(8))?,
                email: seq.next_element_seed(at(&EMAIL))?.ok_or_else(|| len(9))?,
            })
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            let cx = self.0;
            let at = |suffix| OpenAt { suffix, cx };
            let (mut id, mut customer, mut items, mut paid, mut at_) =
                (None, None, None, None, None);
            let (mut currency, mut country) = (None, None);
            let (mut card, mut iban, mut email) = (None, None, None);
            macro_rules! once {
                ($slot:ident, $i:expr, $value:expr) => {{
                    if $slot.is_some() {
                        return Err(de::Error::duplicate_field(FIELDS[$i]));
                    }
                    $slot = Some($value);
                }};
            }
            while let Some(Id(key)) = map.next_key()? {
                match key {
                    Some(0) => once!(id, 0, map.next_value()?),
                    Some(1) => once!(customer, 1, map.next_value()?),
                    Some(2) => once!(items, 2, map.next_value()?),
                    Some(3) => once!(paid, 3, map.next_value()?),
                    Some(4) => once!(at_, 4, map.next_value()?),
                    Some(5) => once!(currency, 5, map.next_value()?),
                    Some(6) => once!(country, 6, map.next_value()?),
                    Some(7) => once!(card, 7, map.next_value_seed(at(&CARD))?),
                    Some(8) => once!(iban, 8, map.next_value_seed(at(&IBAN))?),
                    Some(9) => once!(email, 9, map.next_value_seed(at(&EMAIL))?),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(TenFields {
                id: id.ok_or_else(|| missing(0))?,
                customer: customer.ok_or_else(|| missing(1))?,
                items: items.ok_or_else(|| missing(2))?,
                paid: paid.ok_or_else(|| missing(3))?,
                at: at_.ok_or_else(|| missing(4))?,
                currency: currency.ok_or_else(|| missing(5))?,
                country: country.ok_or_else(|| missing(6))?,
                card: card.ok_or_else(|| missing(7))?,
                iban: iban.ok_or_else(|| missing(8))?,
                email: email.ok_or_else(|| missing(9))?,
            })
        }
    }

    /// The prototype's codec: records of `TenFields<Encrypted<String>>` in
    /// JSON or bincode, fields bound to topic, record key and path
    /// (`AadPolicy::TopicAndKey`), as `FieldEncrypting::new` binds them.
    pub struct Proto {
        keyset: Keyset,
        json: bool,
        last_len: Cell<usize>,
    }

    impl Proto {
        pub fn json(keyset: Keyset) -> Self {
            Proto {
                keyset,
                json: true,
                last_len: Cell::new(0),
            }
        }

        pub fn bincode(keyset: Keyset) -> Self {
            Proto {
                keyset,
                json: false,
                last_len: Cell::new(0),
            }
        }

        pub fn serialize(
            &self,
            ctx: &Context<'_>,
            rec: &TenFields<Encrypted<String>>,
        ) -> Result<Vec<u8>, String> {
            let cx = Cx::new(&self.keyset, ctx)?;
            let value = Sealing { rec, cx: &cx };
            let mut out = Vec::with_capacity(self.last_len.get());
            if self.json {
                serde_json::to_writer(&mut out, &value).map_err(|e| e.to_string())?;
            } else {
                bincode::serde::encode_into_std_write(&value, &mut out, BINCODE)
                    .map_err(|e| e.to_string())?;
            }
            self.last_len.set(out.len());
            Ok(out)
        }

        pub fn deserialize(
            &self,
            ctx: &Context<'_>,
            data: &[u8],
        ) -> Result<TenFields<Encrypted<String>>, String> {
            let cx = Cx::new(&self.keyset, ctx)?;
            if self.json {
                let mut de = serde_json::Deserializer::from_slice(data);
                let v = Opening(&cx)
                    .deserialize(&mut de)
                    .map_err(|e| e.to_string())?;
                de.end().map_err(|e| e.to_string())?;
                Ok(v)
            } else {
                let (v, used) = bincode::serde::seed_decode_from_slice(Opening(&cx), data, BINCODE)
                    .map_err(|e| e.to_string())?;
                if used != data.len() {
                    return Err("trailing bytes".into());
                }
                Ok(v)
            }
        }
    }
}

/// `fields/confluent/{encrypt,decrypt}/{fields,payload}`: the record of
/// `fields` in Confluent's format (`ConfluentSerde`, JSON Schema): its 3
/// secrets tagged and encrypted by the field rule (AES256_GCM, a DEK made
/// once), or the whole record by the payload rule; beside `fields/json/*`
/// (this library's field format) in the same run.
#[cfg(feature = "confluent")]
fn confluent(c: &mut Criterion) {
    use std::sync::Arc;
    use tombstone_crypt::confluent::{ConfluentJson, ConfluentSerde, LocalKms};

    let ctx = Context::new("orders");
    let record = order(secret32);
    let schema = |rule: &str| {
        serde_json::json!({
            "schemaType": "JSON",
            "schema": r#"{"type":"object","properties":{
                "card":{"type":"string","confluent:tags":["PII"]},
                "iban":{"type":"string","confluent:tags":["PII"]},
                "email":{"type":"string","confluent:tags":["PII"]}}}"#,
            // Confluent's client runs ENCRYPT as a domain rule and
            // ENCRYPT_PAYLOAD as an encoding rule.
            "ruleSet": {
                (if rule == "ENCRYPT" { "domainRules" } else { "encodingRules" }):
                [{"mode": "WRITEREAD", "type": rule, "tags": ["PII"],
                  "params": {"encrypt.kek.name": "bench"}}]
            }
        })
    };
    let serde_of = |rule: &str| {
        let mut codec = ConfluentJson::new(LocalKms::new("bench"));
        codec
            .register(1, "orders-value", &schema(rule))
            .expect("schema");
        ConfluentSerde::<TenFields<String>>::new(Arc::new(codec))
    };
    let fields = serde_of("ENCRYPT");
    let payload = serde_of("ENCRYPT_PAYLOAD");
    let fields_ct = fields
        .serialize(&ctx, Some(&record))
        .expect("fields")
        .expect("present");
    let payload_ct = payload
        .serialize(&ctx, Some(&record))
        .expect("payload")
        .expect("present");
    let mut group = c.benchmark_group("fields/confluent/encrypt");
    group.bench_function("fields", |b| {
        b.iter(|| fields.serialize(black_box(&ctx), Some(black_box(&record))))
    });
    group.bench_function("payload", |b| {
        b.iter(|| payload.serialize(black_box(&ctx), Some(black_box(&record))))
    });
    group.finish();
    let mut group = c.benchmark_group("fields/confluent/decrypt");
    group.bench_function("fields", |b| {
        b.iter(|| {
            fields
                .deserialize(black_box(&ctx), Some(black_box(&fields_ct[..])))
                .expect("read")
        })
    });
    group.bench_function("payload", |b| {
        b.iter(|| {
            payload
                .deserialize(black_box(&ctx), Some(black_box(&payload_ct[..])))
                .expect("read")
        })
    });
    group.finish();
}

#[cfg(not(feature = "confluent"))]
fn confluent(_: &mut Criterion) {}

criterion_group!(
    benches,
    encrypt,
    decrypt,
    decrypt_fail,
    tombstone,
    typed,
    siv,
    envelope,
    subject,
    fields,
    confluent
);
criterion_main!(benches);
