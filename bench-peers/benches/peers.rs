//! tombstone-crypt beside its peers, in one process, on the same keys.
//!
//! Groups `encrypt` and `decrypt`, per value size (16 B to 64 KiB):
//!
//! - `ours_rustcrypto/N`, `ours_aws_lc/N`: `EncryptingSerializer<Bytes>` and
//!   `DecryptingDeserializer<Bytes>` on an AES-256-GCM keyset expanded for
//!   each backend (`Keyset::with_backend`), default AAD policy, the context
//!   `Context::new("orders").with_key(b"order-000017")`: 27 bytes of
//!   associated data, built by the layer for each value.
//! - `tink_aead/N`: `tink-aead`'s keyset primitive (`tink_aead::new`) on the
//!   same key (our keyset's Tink JSON, read by `tink-core`), with the same 27
//!   bytes of associated data, built once. Both write
//!   `0x01 | key id | nonce | ciphertext | tag`, and each side decrypts
//!   what the other wrote (checked before measuring).
//! - `raw_aes_gcm/N`, `raw_aws_lc/N`: the primitives by hand, as
//!   `benches/throughput.rs` of the library does them: a fresh nonce from
//!   the thread-local RNG, one exactly-sized output `Vec`
//!   (`nonce | ciphertext | tag`), the same associated data.
//!
//! Groups `det_encrypt` and `det_decrypt`, for record keys of 16, 64 and
//! 256 bytes:
//!
//! - `ours_siv/N`: `DeterministicSerializer<Bytes>` /
//!   `DeterministicDeserializer<Bytes>` (AES-SIV), `Context::new("orders")`:
//!   11 bytes of associated data, built by the layer.
//! - `tink_daead/N`: `tink-daead`'s keyset primitive on the same key, the
//!   same 11 bytes.
//!
//! With `PEERS_ORDER=reverse` in the environment each size runs its
//! peers in the reverse order, so that `scripts/bench-peers.sh` can
//! alternate the order between rounds.
//!
//! Group `in_place`, for 1 KiB, 16 KiB and 64 KiB values a caller owns:
//!
//! - `ours_aws_lc/N`, `ours_rustcrypto/N`:
//!   `EncryptingSerializer::encrypt_owned` on a buffer with the header's
//!   room in front (its `plaintext_buffer`), the associated data built per
//!   value; the same buffer comes back as the ciphertext and goes round
//!   again (cut back to its room and body).
//! - `raw_aws_lc/N`, `raw_aes_gcm/N`: the primitive sealing a buffer of N
//!   bytes in place with a fresh nonce and a separate tag, nothing else.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use tombstone_crypt::{
    AadPolicy, Backend, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    DeterministicDeserializer, DeterministicSerializer, EncryptingSerializer, KeyTemplate, Keyset,
    Serializer as _,
};

const SIZES: [usize; 5] = [16, 100, 1024, 16384, 65536];
const DET_SIZES: [usize; 3] = [16, 64, 256];
const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

const TOPIC: &str = "orders";
const RECORD_KEY: &[u8] = b"order-000017";

fn ctx() -> Context<'static> {
    Context::new(TOPIC).with_key(RECORD_KEY)
}

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn reversed() -> bool {
    std::env::var("PEERS_ORDER").is_ok_and(|v| v == "reverse")
}

/// A Tink keyset handle on the same keys as `keyset`, through its Tink JSON.
fn tink_handle(keyset: &Keyset) -> tink_core::keyset::Handle {
    let json = keyset.to_tink_json();
    tink_core::keyset::insecure::read(&mut tink_core::keyset::JsonReader::new(json.as_bytes()))
        .expect("tink-core reads our keyset")
}

mod raw {
    //! The primitives by hand, as in the library's `benches/throughput.rs`.

    use aes_gcm::aead::{AeadInOut, KeyInit};
    use aes_gcm::{Aes256Gcm, Nonce, Tag};
    use aws_lc_rs::aead::{self as awslc, Aad, LessSafeKey, UnboundKey, AES_256_GCM};
    use rand::Rng as _;

    use super::{NONCE_LEN, TAG_LEN};

    fn key_bytes() -> [u8; 32] {
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        key
    }

    pub fn aes_gcm_key() -> Aes256Gcm {
        Aes256Gcm::new_from_slice(&key_bytes()).expect("32-byte key")
    }

    pub fn aws_lc_key() -> LessSafeKey {
        LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key_bytes()).expect("32-byte key"))
    }

    fn fresh_nonce() -> [u8; NONCE_LEN] {
        let mut nonce = [0u8; NONCE_LEN];
        rand::rng().fill_bytes(&mut nonce);
        nonce
    }

    /// `nonce | ciphertext | tag` in one exactly-sized `Vec`.
    pub fn aes_gcm_seal(cipher: &Aes256Gcm, aad: &[u8], pt: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
        let nonce = fresh_nonce();
        out.extend_from_slice(&nonce);
        out.extend_from_slice(pt);
        let tag = cipher
            .encrypt_inout_detached(&Nonce::from(nonce), aad, (&mut out[NONCE_LEN..]).into())
            .expect("encrypt");
        out.extend_from_slice(&tag);
        out
    }

    /// The body copied into a new `Vec`, decrypted in place.
    pub fn aes_gcm_open(cipher: &Aes256Gcm, aad: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        let (nonce, rest) = data.split_first_chunk::<NONCE_LEN>()?;
        let (body, tag) = rest.split_last_chunk::<TAG_LEN>()?;
        let mut buf = body.to_vec();
        cipher
            .decrypt_inout_detached(
                &Nonce::from(*nonce),
                aad,
                buf.as_mut_slice().into(),
                &Tag::from(*tag),
            )
            .ok()?;
        Some(buf)
    }

    /// [`aes_gcm_seal`] on aws-lc.
    pub fn aws_lc_seal(key: &LessSafeKey, aad: &[u8], pt: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
        let nonce = fresh_nonce();
        out.extend_from_slice(&nonce);
        out.extend_from_slice(pt);
        let tag = key
            .seal_in_place_separate_tag(
                awslc::Nonce::assume_unique_for_key(nonce),
                Aad::from(aad),
                &mut out[NONCE_LEN..],
            )
            .expect("encrypt");
        out.extend_from_slice(tag.as_ref());
        out
    }

    /// [`aes_gcm_open`] on aws-lc.
    pub fn aws_lc_open(key: &LessSafeKey, aad: &[u8], data: &[u8]) -> Option<Vec<u8>> {
        let (nonce, rest) = data.split_first_chunk::<NONCE_LEN>()?;
        let (body, tag) = rest.split_last_chunk::<TAG_LEN>()?;
        let mut buf = body.to_vec();
        key.open_in_place_separate_tag(
            awslc::Nonce::assume_unique_for_key(*nonce),
            Aad::from(aad),
            tag,
            &mut buf,
        )
        .ok()?;
        Some(buf)
    }
}

/// Everything the AES-GCM rows measure, built once and cross-checked.
struct Gcm {
    ser_rc: EncryptingSerializer<Bytes>,
    de_rc: DecryptingDeserializer<Bytes>,
    ser_lc: EncryptingSerializer<Bytes>,
    de_lc: DecryptingDeserializer<Bytes>,
    tink: Box<dyn tink_core::Aead>,
    aes_gcm: aes_gcm::Aes256Gcm,
    aws_lc: aws_lc_rs::aead::LessSafeKey,
    /// The layer's associated data for `ctx()`, for the peers.
    aad: Vec<u8>,
}

impl Gcm {
    fn new() -> Self {
        tink_aead::init();
        let keyset = Keyset::generate_with(KeyTemplate::aes256_gcm()).expect("AES-256-GCM keyset");
        let rc = keyset.clone().with_backend(Backend::RustCrypto);
        let lc = keyset.clone().with_backend(Backend::AwsLc);
        let tink = tink_aead::new(&tink_handle(&keyset)).expect("tink-aead primitive");
        let aad = ctx()
            .associated_data(AadPolicy::TopicAndKey)
            .expect("short context");
        assert_eq!(aad.len(), 27);
        Gcm {
            ser_rc: EncryptingSerializer::new(Bytes, rc.clone()),
            de_rc: DecryptingDeserializer::new(Bytes, rc),
            ser_lc: EncryptingSerializer::new(Bytes, lc.clone()),
            de_lc: DecryptingDeserializer::new(Bytes, lc),
            tink,
            aes_gcm: raw::aes_gcm_key(),
            aws_lc: raw::aws_lc_key(),
            aad,
        }
    }

    /// Every writer's ciphertext of `pt`, each checked against its readers
    /// (ours and Tink's read each other's).
    fn ciphertexts(&self, pt: &[u8]) -> [(Peer, Vec<u8>); 5] {
        let ctx = ctx();
        let enc = |ser: &EncryptingSerializer<Bytes>| {
            ser.serialize(&ctx, Some(pt))
                .expect("encrypt")
                .expect("present")
        };
        let ours_rc = enc(&self.ser_rc);
        let ours_lc = enc(&self.ser_lc);
        let tink = self.tink.encrypt(pt, &self.aad).expect("tink encrypt");
        for ct in [&ours_rc, &ours_lc, &tink] {
            for de in [&self.de_rc, &self.de_lc] {
                let got = de.deserialize(&ctx, Some(ct)).expect("decrypt");
                assert_eq!(got.as_deref(), Some(pt));
            }
            let got = self.tink.decrypt(ct, &self.aad).expect("tink decrypt");
            assert_eq!(got, pt);
        }
        let raw_gcm = raw::aes_gcm_seal(&self.aes_gcm, &self.aad, pt);
        let raw_lc = raw::aws_lc_seal(&self.aws_lc, &self.aad, pt);
        assert_eq!(
            raw::aes_gcm_open(&self.aes_gcm, &self.aad, &raw_gcm).as_deref(),
            Some(pt)
        );
        assert_eq!(
            raw::aws_lc_open(&self.aws_lc, &self.aad, &raw_lc).as_deref(),
            Some(pt)
        );
        [
            (Peer::OursRustCrypto, ours_rc),
            (Peer::OursAwsLc, ours_lc),
            (Peer::TinkAead, tink),
            (Peer::RawAesGcm, raw_gcm),
            (Peer::RawAwsLc, raw_lc),
        ]
    }
}

#[derive(Clone, Copy)]
enum Peer {
    OursRustCrypto,
    OursAwsLc,
    TinkAead,
    RawAesGcm,
    RawAwsLc,
}

impl Peer {
    fn id(self) -> &'static str {
        match self {
            Peer::OursRustCrypto => "ours_rustcrypto",
            Peer::OursAwsLc => "ours_aws_lc",
            Peer::TinkAead => "tink_aead",
            Peer::RawAesGcm => "raw_aes_gcm",
            Peer::RawAwsLc => "raw_aws_lc",
        }
    }
}

fn encrypt(c: &mut Criterion) {
    let g = Gcm::new();
    let ctx = ctx();
    let mut group = c.benchmark_group("encrypt");
    for n in SIZES {
        let pt = plaintext(n);
        let mut peers = g.ciphertexts(&pt).map(|(peer, _)| peer);
        if reversed() {
            peers.reverse();
        }
        group.throughput(Throughput::Bytes(n as u64));
        for peer in peers {
            let id = BenchmarkId::new(peer.id(), n);
            let pt = &pt[..];
            match peer {
                Peer::OursRustCrypto => group.bench_function(id, |b| {
                    b.iter(|| g.ser_rc.serialize(black_box(&ctx), Some(black_box(pt))))
                }),
                Peer::OursAwsLc => group.bench_function(id, |b| {
                    b.iter(|| g.ser_lc.serialize(black_box(&ctx), Some(black_box(pt))))
                }),
                Peer::TinkAead => group.bench_function(id, |b| {
                    b.iter(|| g.tink.encrypt(black_box(pt), black_box(&g.aad)))
                }),
                Peer::RawAesGcm => group.bench_function(id, |b| {
                    b.iter(|| raw::aes_gcm_seal(&g.aes_gcm, black_box(&g.aad), black_box(pt)))
                }),
                Peer::RawAwsLc => group.bench_function(id, |b| {
                    b.iter(|| raw::aws_lc_seal(&g.aws_lc, black_box(&g.aad), black_box(pt)))
                }),
            };
        }
    }
    group.finish();
}

fn decrypt(c: &mut Criterion) {
    let g = Gcm::new();
    let ctx = ctx();
    let mut group = c.benchmark_group("decrypt");
    for n in SIZES {
        let pt = plaintext(n);
        let mut cts = g.ciphertexts(&pt);
        if reversed() {
            cts.reverse();
        }
        group.throughput(Throughput::Bytes(n as u64));
        for (peer, ct) in &cts {
            let id = BenchmarkId::new(peer.id(), n);
            let ct = &ct[..];
            match peer {
                Peer::OursRustCrypto => group.bench_function(id, |b| {
                    b.iter(|| g.de_rc.deserialize(black_box(&ctx), Some(black_box(ct))))
                }),
                Peer::OursAwsLc => group.bench_function(id, |b| {
                    b.iter(|| g.de_lc.deserialize(black_box(&ctx), Some(black_box(ct))))
                }),
                Peer::TinkAead => group.bench_function(id, |b| {
                    b.iter(|| g.tink.decrypt(black_box(ct), black_box(&g.aad)))
                }),
                Peer::RawAesGcm => group.bench_function(id, |b| {
                    b.iter(|| raw::aes_gcm_open(&g.aes_gcm, black_box(&g.aad), black_box(ct)))
                }),
                Peer::RawAwsLc => group.bench_function(id, |b| {
                    b.iter(|| raw::aws_lc_open(&g.aws_lc, black_box(&g.aad), black_box(ct)))
                }),
            };
        }
    }
    group.finish();
}

/// `DeterministicSerializer` (AES-SIV) against `tink-daead` on the same key.
fn deterministic(c: &mut Criterion) {
    tink_daead::init();
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).expect("AES-SIV keyset");
    let tink = tink_daead::new(&tink_handle(&keys)).expect("tink-daead primitive");
    let ser = DeterministicSerializer::new(Bytes, keys.clone());
    let de = DeterministicDeserializer::new(Bytes, keys);
    let ctx = Context::new(TOPIC);
    let ad = ctx
        .associated_data(AadPolicy::Topic)
        .expect("short context");
    assert_eq!(ad.len(), 11);

    let mut cases = Vec::new();
    for n in DET_SIZES {
        let pt = plaintext(n);
        let ours = ser
            .serialize(&ctx, Some(&pt[..]))
            .expect("encrypt")
            .expect("present");
        let theirs = tink.encrypt_deterministically(&pt, &ad).expect("encrypt");
        // Deterministic, same key, same associated data: the same bytes.
        assert_eq!(ours, theirs);
        assert_eq!(
            de.deserialize(&ctx, Some(&theirs)).expect("decrypt"),
            Some(pt.clone())
        );
        assert_eq!(
            tink.decrypt_deterministically(&ours, &ad).expect("decrypt"),
            pt
        );
        cases.push((n, pt, ours));
    }

    let mut group = c.benchmark_group("det_encrypt");
    for (n, pt, _) in &cases {
        group.throughput(Throughput::Bytes(*n as u64));
        let pt = &pt[..];
        let mut both = [true, false];
        if reversed() {
            both.reverse();
        }
        for ours in both {
            if ours {
                group.bench_function(BenchmarkId::new("ours_siv", n), |b| {
                    b.iter(|| ser.serialize(black_box(&ctx), Some(black_box(pt))))
                });
            } else {
                group.bench_function(BenchmarkId::new("tink_daead", n), |b| {
                    b.iter(|| tink.encrypt_deterministically(black_box(pt), black_box(&ad)))
                });
            }
        }
    }
    group.finish();

    let mut group = c.benchmark_group("det_decrypt");
    for (n, _, ct) in &cases {
        group.throughput(Throughput::Bytes(*n as u64));
        let ct = &ct[..];
        let mut both = [true, false];
        if reversed() {
            both.reverse();
        }
        for ours in both {
            if ours {
                group.bench_function(BenchmarkId::new("ours_siv", n), |b| {
                    b.iter(|| de.deserialize(black_box(&ctx), Some(black_box(ct))))
                });
            } else {
                group.bench_function(BenchmarkId::new("tink_daead", n), |b| {
                    b.iter(|| tink.decrypt_deterministically(black_box(ct), black_box(&ad)))
                });
            }
        }
    }
    group.finish();
}

/// The owned-buffer path against each primitive sealing in place.
fn in_place(c: &mut Criterion) {
    use aes_gcm::aead::AeadInOut as _;
    let g = Gcm::new();
    let ctx = ctx();
    let mut group = c.benchmark_group("in_place");
    for n in [1024, 16384, 65536] {
        let pt = plaintext(n);
        group.throughput(Throughput::Bytes(n as u64));
        let mut ids = [
            "ours_aws_lc",
            "raw_aws_lc",
            "ours_rustcrypto",
            "raw_aes_gcm",
        ];
        if reversed() {
            ids.reverse();
        }
        for id in ids {
            let bench = BenchmarkId::new(id, n);
            match id {
                "ours_aws_lc" | "ours_rustcrypto" => {
                    let (ser, de) = if id == "ours_aws_lc" {
                        (&g.ser_lc, &g.de_lc)
                    } else {
                        (&g.ser_rc, &g.de_rc)
                    };
                    let mut buf = ser.plaintext_buffer(n);
                    let head = buf.len();
                    buf.extend_from_slice(&pt);
                    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
                    let ct = ser.encrypt_owned(&ctx, Some(buf), head).expect("encrypt");
                    let ct = ct.expect("present");
                    assert_eq!((ct.as_ptr(), ct.capacity()), (ptr, cap), "in place");
                    assert_eq!(
                        de.deserialize(&ctx, Some(&ct)).expect("decrypt").as_deref(),
                        Some(&pt[..])
                    );
                    let mut slot = Some(ct);
                    group.bench_function(bench, |b| {
                        b.iter(|| {
                            let mut buf = slot.take().expect("the buffer");
                            buf.truncate(head + n);
                            slot = ser
                                .encrypt_owned(black_box(&ctx), Some(buf), head)
                                .expect("encrypt");
                        })
                    });
                }
                "raw_aws_lc" => {
                    let mut buf = pt.clone();
                    group.bench_function(bench, |b| {
                        b.iter(|| {
                            let mut nonce = [0u8; NONCE_LEN];
                            rand::Rng::fill_bytes(&mut rand::rng(), &mut nonce);
                            g.aws_lc
                                .seal_in_place_separate_tag(
                                    aws_lc_rs::aead::Nonce::assume_unique_for_key(nonce),
                                    aws_lc_rs::aead::Aad::from(black_box(&g.aad[..])),
                                    black_box(&mut buf[..]),
                                )
                                .expect("encrypt")
                        })
                    });
                }
                _ => {
                    let mut buf = pt.clone();
                    group.bench_function(bench, |b| {
                        b.iter(|| {
                            let mut nonce = [0u8; NONCE_LEN];
                            rand::Rng::fill_bytes(&mut rand::rng(), &mut nonce);
                            g.aes_gcm
                                .encrypt_inout_detached(
                                    &aes_gcm::Nonce::from(nonce),
                                    black_box(&g.aad[..]),
                                    black_box(&mut buf[..]).into(),
                                )
                                .expect("encrypt")
                        })
                    });
                }
            }
        }
    }
    group.finish();
}

criterion_group!(benches, encrypt, decrypt, deterministic, in_place);
criterion_main!(benches);
