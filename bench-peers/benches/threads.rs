//! Two threads against one on ONE shared keyset: values per second.
//!
//! Each case is one serializer (or deserializer) on one keyset, borrowed
//! by every thread (`std::thread::scope`): nothing is cloned per thread.
//! Each thread encrypts (or decrypts) its own value in a tight loop until
//! the main thread raises a stop flag after `THREADS_SECS` seconds
//! (default 1); the rate is the sum over threads of values / that thread's
//! time. Each round runs every case with 1 thread and with 2 (the order
//! alternates between rounds); the best round of `THREADS_ROUNDS`
//! (default 3) counts, per case and thread count; `PEERS_ORDER=reverse`
//! starts with 2 threads. On 2 cores the goal of
//! the [speed] issue is 2-thread / 1-thread >= 1.8.
//!
//! Cases (associated data: `Context::new("orders").with_key(..)`, 27
//! bytes, built by the layer for each value; AES-SIV: the topic only):
//!
//! - `aes_gcm/100`, `aes_gcm/1024`: `EncryptingSerializer<Bytes>`,
//!   AES-256-GCM, default backend (aws-lc); `aes_gcm_rustcrypto/1024` the
//!   same on RustCrypto.
//! - `aes_siv/64`: `DeterministicSerializer<Bytes>`.
//! - `envelope/1024`: `EncryptingSerializer<Bytes>` on a KMS envelope key
//!   (the library's in-process `FakeKms`, no delay) with DEK reuse, default
//!   `DekPolicy` (2^20 values per DEK): both threads share the writer's
//!   current DEK and its counters.
//! - `envelope_decrypt/1024`: `DecryptingDeserializer<Bytes>` on a second
//!   keyset from the same JSON, reading values of one DEK (its cache warm).
//!
//! `THREADS_CASES=aes_gcm/100,envelope/1024` runs only those;
//! `THREADS_OUT=path` also writes the figures as JSON (for
//! `scripts/bench-peers.sh`).

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Barrier;
use std::time::{Duration, Instant};

use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{
    Backend, Bytes, Context, DecryptingDeserializer, Deserializer as _, DeterministicSerializer,
    EncryptingSerializer, KeyTemplate, Keyset, Serializer as _,
};

const KEK_URI: &str = "fake-kms://bench/kek-threads";

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// One value's work on a thread; `t` is the thread's index.
type Work<'a> = Box<dyn Fn(usize) + Sync + 'a>;

struct Case<'a> {
    name: &'static str,
    work: Work<'a>,
}

/// Values per second over `secs`, with `threads` threads running `work`.
fn rate(work: &(dyn Fn(usize) + Sync), threads: usize, secs: f64) -> f64 {
    let stop = AtomicBool::new(false);
    let start = Barrier::new(threads + 1);
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let (stop, start) = (&stop, &start);
                s.spawn(move || {
                    start.wait();
                    let t0 = Instant::now();
                    let mut n = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        work(t);
                        n += 1;
                    }
                    n as f64 / t0.elapsed().as_secs_f64()
                })
            })
            .collect();
        start.wait();
        std::thread::sleep(Duration::from_secs_f64(secs));
        stop.store(true, Ordering::Relaxed);
        handles
            .into_iter()
            .map(|h| h.join().expect("bench thread"))
            .sum()
    })
}

/// `ser` encrypting `pt` under `ctx`, on every thread.
fn ser_case<'a>(
    name: &'static str,
    ser: &'a EncryptingSerializer<Bytes>,
    ctx: &'a Context<'a>,
    pt: &'a [u8],
) -> Case<'a> {
    Case {
        name,
        work: Box::new(move |_| {
            black_box(ser.serialize(black_box(ctx), Some(black_box(pt))).ok());
        }),
    }
}

fn main() {
    // `cargo bench` passes `--bench`; criterion-style filters are not used.
    let secs: f64 = env_or("THREADS_SECS", 1.0);
    let rounds: usize = env_or("THREADS_ROUNDS", 3);
    let only: Option<Vec<String>> = std::env::var("THREADS_CASES")
        .ok()
        .map(|v| v.split(',').map(str::to_owned).collect());
    // `cargo test --benches`: one short round, to check it runs.
    let quick = std::env::args().skip(1).all(|a| a != "--bench");
    let (secs, rounds) = if quick { (0.05, 1) } else { (secs, rounds) };
    // `PEERS_ORDER=reverse`: 2 threads before 1 in the first round.
    let reversed = std::env::var("PEERS_ORDER").is_ok_and(|v| v == "reverse");

    let ctx = Context::new("orders").with_key(b"order-000017");
    let det_ctx = Context::new("orders");

    let gcm = Keyset::generate_with(KeyTemplate::aes256_gcm()).expect("AES-256-GCM keyset");
    let gcm_ser = EncryptingSerializer::new(Bytes, gcm.clone());
    let gcm_rc_ser = EncryptingSerializer::new(Bytes, gcm.with_backend(Backend::RustCrypto));
    let siv = Keyset::generate_with(KeyTemplate::aes256_siv()).expect("AES-SIV keyset");
    let siv_ser = DeterministicSerializer::new(Bytes, siv);

    let kms = FakeKms::new();
    let clients = KmsClients::new().with(kms.clone());
    let env = Keyset::generate_with(
        KeyTemplate::kms_envelope(KEK_URI)
            .with_kms_clients(clients.clone())
            .with_dek_policy(DekPolicy::default()),
    )
    .expect("envelope keyset");
    let env_reader =
        Keyset::from_tink_json_with(&env.to_tink_json(), &clients).expect("reader keyset");
    let env_ser = EncryptingSerializer::new(Bytes, env);
    let env_de = DecryptingDeserializer::new(Bytes, env_reader);

    let pts: Vec<Vec<u8>> = [100, 1024, 64].iter().map(|&n| plaintext(n)).collect();
    // One value per thread, each under the one DEK: the reader's cache
    // holds it after the check below.
    let env_cts: Vec<Vec<u8>> = (0..2)
        .map(|t| {
            let mut pt = pts[1].clone();
            pt[0] = t as u8;
            env_ser
                .serialize(&ctx, Some(&pt[..]))
                .expect("encrypt")
                .expect("present")
        })
        .collect();
    for ct in &env_cts {
        assert!(env_de
            .deserialize(&ctx, Some(&ct[..]))
            .expect("decrypt")
            .is_some());
    }

    let mut cases = vec![
        ser_case("aes_gcm/100", &gcm_ser, &ctx, &pts[0]),
        ser_case("aes_gcm/1024", &gcm_ser, &ctx, &pts[1]),
        ser_case("aes_gcm_rustcrypto/1024", &gcm_rc_ser, &ctx, &pts[1]),
        Case {
            name: "aes_siv/64",
            work: Box::new(|_| {
                black_box(
                    siv_ser
                        .serialize(black_box(&det_ctx), Some(black_box(&pts[2][..])))
                        .ok(),
                );
            }),
        },
        ser_case("envelope/1024", &env_ser, &ctx, &pts[1]),
        Case {
            name: "envelope_decrypt/1024",
            work: Box::new(|t| {
                black_box(
                    env_de
                        .deserialize(black_box(&ctx), Some(black_box(&env_cts[t][..])))
                        .ok(),
                );
            }),
        },
    ];
    if let Some(only) = &only {
        cases.retain(|c| only.iter().any(|o| o == c.name));
    }
    let kms_calls = kms.encrypt_calls();

    // best[case][threads - 1]
    let mut best = vec![[0f64; 2]; cases.len()];
    for round in 0..rounds {
        eprintln!("==> threads round {} of {rounds}", round + 1);
        for (i, case) in cases.iter().enumerate() {
            let mut order = [1, 2];
            if (round % 2 == 1) != reversed {
                order.reverse();
            }
            for threads in order {
                let r = rate(&*case.work, threads, secs);
                let b = &mut best[i][threads - 1];
                *b = b.max(r);
            }
        }
    }

    eprintln!(
        "\nvalues per second, best of {rounds} round(s) of {secs} s, one shared keyset \
         ({} KMS calls for new DEKs while measuring):",
        kms.encrypt_calls() - kms_calls
    );
    eprintln!(
        "{:<26} {:>14} {:>14} {:>7}",
        "case", "1 thread", "2 threads", "ratio"
    );
    let mut rows = Vec::new();
    for (case, [one, two]) in cases.iter().zip(&best) {
        eprintln!(
            "{:<26} {:>14.0} {:>14.0} {:>7.2}",
            case.name,
            one,
            two,
            two / one
        );
        rows.push(format!(
            "{{\"case\":\"{}\",\"one_thread\":{one:.1},\"two_threads\":{two:.1}}}",
            case.name
        ));
    }
    if let Ok(path) = std::env::var("THREADS_OUT") {
        let json = format!(
            "{{\"secs\":{secs},\"rounds\":{rounds},\"cores\":{},\"rows\":[{}]}}\n",
            std::thread::available_parallelism().map_or(0, |n| n.get()),
            rows.join(",")
        );
        std::fs::write(&path, json).expect("write THREADS_OUT");
    }
}
