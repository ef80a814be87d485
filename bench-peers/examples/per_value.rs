//! Per-value costs of the benchmarked paths, outside criterion: allocations
//! counted by a global allocator, and a tight loop to run under `perf`.
//!
//! ```sh
//! cd bench-peers
//! cargo run --release --example per_value -- allocs           # every path, 100 B
//! cargo run --release --example per_value -- allocs 16        # another size
//! cargo build --release --example per_value
//! perf record -g -- $CARGO_TARGET_DIR/release/examples/per_value loop encrypt ours_rustcrypto 100 2000000
//! ```
//!
//! `loop OP PEER SIZE N` runs OP (`encrypt` or `decrypt`) N times on PEER
//! (`ours_rustcrypto`, `ours_aws_lc`, `tink_aead`, `raw_aes_gcm`,
//! `raw_aws_lc`) and prints the mean time per value.

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use aes_gcm::aead::{AeadInOut, KeyInit};
use aes_gcm::{Aes256Gcm, Nonce, Tag};
use aws_lc_rs::aead::{self as awslc, Aad, LessSafeKey, UnboundKey, AES_256_GCM};
use rand::Rng as _;
use tombstone_crypt::{
    AadPolicy, Backend, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    EncryptingSerializer, KeyTemplate, Keyset, Serializer as _,
};

/// The system allocator, counting allocations and bytes asked for.
struct Counting;

static ALLOCS: AtomicUsize = AtomicUsize::new(0);
static BYTES: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call is forwarded unchanged to `System`; the counters are
// plain atomics.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCS.fetch_add(1, Ordering::Relaxed);
        BYTES.fetch_add(new_size, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const NONCE_LEN: usize = 12;
const TAG_LEN: usize = 16;

struct Paths {
    ser_rc: EncryptingSerializer<Bytes>,
    de_rc: DecryptingDeserializer<Bytes>,
    ser_lc: EncryptingSerializer<Bytes>,
    de_lc: DecryptingDeserializer<Bytes>,
    tink: Box<dyn tink_core::Aead>,
    aes_gcm: Aes256Gcm,
    aws_lc: LessSafeKey,
    aad: Vec<u8>,
}

const PEERS: [&str; 5] = [
    "ours_rustcrypto",
    "ours_aws_lc",
    "tink_aead",
    "raw_aes_gcm",
    "raw_aws_lc",
];

fn ctx() -> Context<'static> {
    Context::new("orders").with_key(b"order-000017")
}

impl Paths {
    fn new() -> Self {
        tink_aead::init();
        let keyset = Keyset::generate_with(KeyTemplate::aes256_gcm()).expect("keyset");
        let json = keyset.to_tink_json();
        let handle = tink_core::keyset::insecure::read(&mut tink_core::keyset::JsonReader::new(
            json.as_bytes(),
        ))
        .expect("tink reads the keyset");
        let rc = keyset.clone().with_backend(Backend::RustCrypto);
        let lc = keyset.with_backend(Backend::AwsLc);
        let mut key = [0u8; 32];
        rand::rng().fill_bytes(&mut key);
        Paths {
            ser_rc: EncryptingSerializer::new(Bytes, rc.clone()),
            de_rc: DecryptingDeserializer::new(Bytes, rc),
            ser_lc: EncryptingSerializer::new(Bytes, lc.clone()),
            de_lc: DecryptingDeserializer::new(Bytes, lc),
            tink: tink_aead::new(&handle).expect("tink-aead"),
            aes_gcm: Aes256Gcm::new_from_slice(&key).expect("key"),
            aws_lc: LessSafeKey::new(UnboundKey::new(&AES_256_GCM, &key).expect("key")),
            aad: ctx()
                .associated_data(AadPolicy::TopicAndKey)
                .expect("short context"),
        }
    }

    fn encrypt(&self, peer: &str, pt: &[u8]) -> Vec<u8> {
        let ctx = ctx();
        match peer {
            "ours_rustcrypto" => self.ser_rc.serialize(&ctx, Some(pt)).ok().flatten(),
            "ours_aws_lc" => self.ser_lc.serialize(&ctx, Some(pt)).ok().flatten(),
            "tink_aead" => self.tink.encrypt(pt, &self.aad).ok(),
            "raw_aes_gcm" => {
                let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
                let mut nonce = [0u8; NONCE_LEN];
                rand::rng().fill_bytes(&mut nonce);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(pt);
                let tag = self
                    .aes_gcm
                    .encrypt_inout_detached(
                        &Nonce::from(nonce),
                        &self.aad,
                        (&mut out[NONCE_LEN..]).into(),
                    )
                    .ok();
                tag.map(|tag| {
                    out.extend_from_slice(&tag);
                    out
                })
            }
            "raw_aws_lc" => {
                let mut out = Vec::with_capacity(NONCE_LEN + pt.len() + TAG_LEN);
                let mut nonce = [0u8; NONCE_LEN];
                rand::rng().fill_bytes(&mut nonce);
                out.extend_from_slice(&nonce);
                out.extend_from_slice(pt);
                let tag = self
                    .aws_lc
                    .seal_in_place_separate_tag(
                        awslc::Nonce::assume_unique_for_key(nonce),
                        Aad::from(&self.aad[..]),
                        &mut out[NONCE_LEN..],
                    )
                    .ok();
                tag.map(|tag| {
                    out.extend_from_slice(tag.as_ref());
                    out
                })
            }
            other => panic!("unknown peer {other}"),
        }
        .expect("encrypt")
    }

    fn decrypt(&self, peer: &str, ct: &[u8]) -> Vec<u8> {
        let ctx = ctx();
        let split = |ct: &[u8]| {
            let (nonce, rest) = ct.split_first_chunk::<NONCE_LEN>().expect("nonce");
            let (body, tag) = rest.split_last_chunk::<TAG_LEN>().expect("tag");
            (*nonce, body.to_vec(), *tag)
        };
        match peer {
            "ours_rustcrypto" => self.de_rc.deserialize(&ctx, Some(ct)).ok().flatten(),
            "ours_aws_lc" => self.de_lc.deserialize(&ctx, Some(ct)).ok().flatten(),
            "tink_aead" => self.tink.decrypt(ct, &self.aad).ok(),
            "raw_aes_gcm" => {
                let (nonce, mut buf, tag) = split(ct);
                self.aes_gcm
                    .decrypt_inout_detached(
                        &Nonce::from(nonce),
                        &self.aad,
                        buf.as_mut_slice().into(),
                        &Tag::from(tag),
                    )
                    .ok()
                    .map(|()| buf)
            }
            "raw_aws_lc" => {
                let (nonce, mut buf, tag) = split(ct);
                let opened = self
                    .aws_lc
                    .open_in_place_separate_tag(
                        awslc::Nonce::assume_unique_for_key(nonce),
                        Aad::from(&self.aad[..]),
                        &tag,
                        &mut buf,
                    )
                    .is_ok();
                opened.then_some(buf)
            }
            other => panic!("unknown peer {other}"),
        }
        .expect("decrypt")
    }
}

fn counted<R>(f: impl FnOnce() -> R) -> (R, usize, usize) {
    let (a, b) = (ALLOCS.load(Ordering::SeqCst), BYTES.load(Ordering::SeqCst));
    let r = f();
    let (a2, b2) = (ALLOCS.load(Ordering::SeqCst), BYTES.load(Ordering::SeqCst));
    (r, a2 - a, b2 - b)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let paths = Paths::new();
    match args.first().map(String::as_str) {
        Some("allocs") | None => {
            let n = args.get(1).map_or(100, |s| s.parse().expect("size"));
            let pt = vec![7u8; n];
            println!(
                "{n}-byte value: allocations (bytes asked for) per call, after a warm-up call"
            );
            println!("{:16} {:>16} {:>16}", "path", "encrypt", "decrypt");
            for peer in PEERS {
                // Warm up: thread-local RNGs, lazy statics.
                let ct = paths.encrypt(peer, &pt);
                drop(paths.decrypt(peer, &ct));
                let (ct, ea, eb) = counted(|| paths.encrypt(peer, &pt));
                let (got, da, db) = counted(|| paths.decrypt(peer, &ct));
                assert_eq!(got, pt);
                println!(
                    "{peer:16} {:>16} {:>16}",
                    format!("{ea} ({eb} B)"),
                    format!("{da} ({db} B)")
                );
            }
        }
        Some("loop") => {
            let op = args.get(1).expect("encrypt or decrypt");
            let peer = args.get(2).expect("peer");
            let n: usize = args.get(3).map_or(100, |s| s.parse().expect("size"));
            let iters: usize = args.get(4).map_or(2_000_000, |s| s.parse().expect("N"));
            let pt = vec![7u8; n];
            let ct = paths.encrypt(peer, &pt);
            let start = Instant::now();
            for _ in 0..iters {
                match op.as_str() {
                    "encrypt" => drop(black_box(paths.encrypt(peer, black_box(&pt)))),
                    "decrypt" => drop(black_box(paths.decrypt(peer, black_box(&ct)))),
                    other => panic!("unknown op {other}"),
                }
            }
            let ns = start.elapsed().as_nanos() as f64 / iters as f64;
            println!("{op} {peer} {n} B: {ns:.1} ns per value over {iters}");
        }
        Some(other) => panic!("unknown command {other}: allocs or loop"),
    }
}
