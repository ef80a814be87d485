//! Our KMS envelope key with a warm DEK beside `tink-aead`'s KMS envelope
//! AEAD and beside our plain AES-GCM layer, over one in-process KMS.
//!
//! The KMS is the library's `FakeKms` (feature `test-hooks`): one
//! `fake-kms://` key, AES-GCM in this process, calls counted, and a
//! simulated round trip (`set_delay`: every call sleeps first). Our side
//! reaches it through `KmsClients`; Tink's through a `tink_core` KMS client
//! registered for `fake-kms://` whose AEAD forwards to the same key (so it
//! sleeps the same round trip) and counts its own calls. Both keysets are
//! the same `KmsEnvelopeAeadKey` (Tink reads our keyset's Tink JSON): same
//! key id, same KEK, AES-256-GCM DEKs, the same 27 bytes of associated
//! data (`Context::new("orders").with_key(b"order-000017")`). Before
//! measuring, each side decrypts its own output and the other side's.
//!
//! KMS delay 0, criterion, groups `envelope` (encrypt) and
//! `envelope_decrypt`, at 100 B and 1 KiB:
//!
//! - `ours_envelope/N`: `EncryptingSerializer<Bytes>` /
//!   `DecryptingDeserializer<Bytes>` on the envelope keyset, default
//!   `DekPolicy` (a DEK encrypts up to 2^20 values, so the DEK is warm: a
//!   KMS call every 2^20 values; the decrypting side is a second keyset
//!   from the same JSON, its cache warmed once), default backend (aws-lc).
//! - `ours_layer/N`: the same serializers on a plain AES-256-GCM keyset,
//!   same backend: the envelope's own cost is `ours_envelope / ours_layer`.
//! - `tink_envelope/N`: `tink_aead::new` on the same key: a new DEK and a
//!   KMS call for every value encrypted, a KMS call for every value
//!   decrypted (Tink 0.3.0's `KmsEnvelopeAead` keeps nothing).
//! - `ours_subject/N`: subject keys (`tombstone_crypt::shred`, a DEK per
//!   data subject, here the record key) whose KEK is the same envelope
//!   keyset, in a `MemoryKeyStore`, the subject's DEK cached (a warm
//!   cache); the decrypting side a second `SubjectKeys` on the same store
//!   with a reader keyset.
//!
//! KMS delay 1 ms (a simulated round trip), timed with `Instant` after the
//! criterion groups, 1 KiB values: 10^4 values through our side (with the
//! default DEK policy, and with a DEK reuse limit of 1000 values), encrypt
//! then decrypt on a fresh reader keyset (cold cache), and through subject
//! keys under that KEK over 100 subjects (fresh keys each way, a fresh
//! key store: each subject's DEK made, then opened, once); Tink's side on 500
//! values, scaled to 10^4 (each of its values is one KMS call, so the time
//! is linear in the count). KMS calls are counted per 10^4 values (ours
//! should be `ceil(10^4 / limit)` each way, Tink's 10^4). The figures are
//! printed and, with `ENVELOPE_KMS_OUT=path`, written there as JSON for
//! `scripts/bench-peers.sh`. `ENVELOPE_KMS=0` skips this part.

use std::hint::black_box;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsAead, KmsClient as _, KmsClients};
use tombstone_crypt::shred::{MemoryKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer as _, EncryptingSerializer,
    KeyTemplate, Keyset, Serializer as _,
};

const SIZES: [usize; 2] = [100, 1024];
const KEK_URI: &str = "fake-kms://bench/kek-1";
const TOPIC: &str = "orders";
const RECORD_KEY: &[u8] = b"order-000017";
/// Values per side in the 1 ms case (Tink's are fewer and scaled).
const SLOW_VALUES: usize = 10_000;
const SLOW_TINK_VALUES: usize = 500;
const SLOW_SIZE: usize = 1024;
const SLOW_LIMIT: u64 = 1000;
/// Subjects the subject-key side spreads its values over in the 1 ms case.
const SLOW_SUBJECTS: usize = 100;

fn ctx() -> Context<'static> {
    Context::new(TOPIC).with_key(RECORD_KEY)
}

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

fn reversed() -> bool {
    std::env::var("PEERS_ORDER").is_ok_and(|v| v == "reverse")
}

/// Tink's remote AEAD: our `FakeKms` key (its delay, its counters) behind
/// `tink_core::Aead`, counting the calls Tink makes.
#[derive(Clone)]
struct TinkRemote {
    key: Arc<dyn KmsAead>,
    calls: Arc<AtomicUsize>,
}

impl tink_core::Aead for TinkRemote {
    fn encrypt(&self, pt: &[u8], ad: &[u8]) -> Result<Vec<u8>, tink_core::TinkError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.key.encrypt(pt, ad).map_err(|e| format!("{e}").into())
    }

    fn decrypt(&self, ct: &[u8], ad: &[u8]) -> Result<Vec<u8>, tink_core::TinkError> {
        self.calls.fetch_add(1, Ordering::Relaxed);
        self.key
            .decrypt(ct, ad)
            .map(|pt| pt.to_vec())
            .map_err(|e| format!("{e}").into())
    }
}

/// The `tink_core` KMS client of `fake-kms://` URIs.
struct TinkClient {
    kms: FakeKms,
    calls: Arc<AtomicUsize>,
}

impl tink_core::registry::KmsClient for TinkClient {
    fn supported(&self, key_uri: &str) -> bool {
        key_uri.starts_with("fake-kms://")
    }

    fn get_aead(&self, key_uri: &str) -> Result<Box<dyn tink_core::Aead>, tink_core::TinkError> {
        let key = self.kms.get_aead(key_uri).map_err(|e| format!("{e}"))?;
        Ok(Box::new(TinkRemote {
            key,
            calls: Arc::clone(&self.calls),
        }))
    }
}

/// Subject keys under `writer` and `reader` (the KEK: the envelope
/// keyset), on one fresh key store.
fn subject_pair(
    writer: &Keyset,
    reader: &Keyset,
) -> (
    SubjectEncrypting<Bytes, [u8]>,
    SubjectEncrypting<Bytes, [u8]>,
) {
    let store = Arc::new(MemoryKeyStore::new());
    let keys = |kek: &Keyset| Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store) as _).unwrap());
    (
        SubjectEncrypting::new(keys(writer), Bytes),
        SubjectEncrypting::new(keys(reader), Bytes),
    )
}

/// Both sides on one envelope key, and the plain AES-GCM layer.
struct Sides {
    kms: FakeKms,
    clients: KmsClients,
    /// The envelope keyset, to make fresh readers from.
    json: String,
    ser: EncryptingSerializer<Bytes>,
    de: DecryptingDeserializer<Bytes>,
    layer_ser: EncryptingSerializer<Bytes>,
    layer_de: DecryptingDeserializer<Bytes>,
    tink: Box<dyn tink_core::Aead>,
    tink_calls: Arc<AtomicUsize>,
    aad: Vec<u8>,
    subject_ser: SubjectEncrypting<Bytes, [u8]>,
    subject_de: SubjectEncrypting<Bytes, [u8]>,
}

impl Sides {
    fn new() -> Self {
        tink_aead::init();
        let kms = FakeKms::new();
        let clients = KmsClients::new().with(kms.clone());
        let keyset = Keyset::generate_with(
            KeyTemplate::kms_envelope(KEK_URI)
                .with_kms_clients(clients.clone())
                .with_dek_policy(DekPolicy::default()),
        )
        .expect("envelope keyset");
        let json = keyset.to_tink_json();
        let reader = Keyset::from_tink_json_with(&json, &clients).expect("reader keyset");
        let tink_calls = Arc::new(AtomicUsize::new(0));
        tink_core::registry::register_kms_client(TinkClient {
            kms: kms.clone(),
            calls: Arc::clone(&tink_calls),
        });
        let handle = tink_core::keyset::insecure::read(&mut tink_core::keyset::JsonReader::new(
            json.as_bytes(),
        ))
        .expect("tink-core reads our envelope keyset");
        let tink = tink_aead::new(&handle).expect("tink-aead envelope primitive");
        let layer = Keyset::generate_with(KeyTemplate::aes256_gcm()).expect("AES-256-GCM keyset");
        let aad = ctx()
            .associated_data(AadPolicy::TopicAndKey)
            .expect("short context");
        assert_eq!(aad.len(), 27);
        let (subject_ser, subject_de) = subject_pair(&keyset, &reader);
        Sides {
            kms,
            clients,
            json,
            ser: EncryptingSerializer::new(Bytes, keyset),
            de: DecryptingDeserializer::new(Bytes, reader),
            layer_ser: EncryptingSerializer::new(Bytes, layer.clone()),
            layer_de: DecryptingDeserializer::new(Bytes, layer),
            tink,
            tink_calls,
            aad,
            subject_ser,
            subject_de,
        }
    }

    fn reader(&self) -> DecryptingDeserializer<Bytes> {
        let keyset = Keyset::from_tink_json_with(&self.json, &self.clients).expect("reader keyset");
        DecryptingDeserializer::new(Bytes, keyset)
    }

    fn ours_seal(&self, ser: &EncryptingSerializer<Bytes>, pt: &[u8]) -> Vec<u8> {
        ser.serialize(&ctx(), Some(pt))
            .expect("encrypt")
            .expect("present")
    }

    /// Each side's ciphertext of `pt`, each checked to decrypt on its own
    /// side; whether the other side opens it is returned, not asserted.
    fn ciphertexts(&self, pt: &[u8]) -> (Vec<u8>, Vec<u8>, Vec<u8>, Vec<u8>, Interop) {
        let ctx = ctx();
        let subject = self
            .subject_ser
            .serialize(&ctx, Some(pt))
            .expect("encrypt")
            .expect("present");
        let opened: Option<Vec<u8>> = self
            .subject_de
            .deserialize(&ctx, Some(&subject))
            .expect("decrypt");
        assert_eq!(opened.as_deref(), Some(pt));
        let ours = self.ours_seal(&self.ser, pt);
        let layer = self.ours_seal(&self.layer_ser, pt);
        let tink = self.tink.encrypt(pt, &self.aad).expect("tink encrypt");
        assert_eq!(
            self.de.deserialize(&ctx, Some(&ours)).expect("decrypt"),
            Some(pt.to_vec())
        );
        assert_eq!(
            self.layer_de
                .deserialize(&ctx, Some(&layer))
                .expect("decrypt"),
            Some(pt.to_vec())
        );
        assert_eq!(self.tink.decrypt(&tink, &self.aad).expect("tink"), pt);
        let interop = Interop {
            same_layout: ours.len() == tink.len() && ours[..9] == tink[..9],
            tink_opens_ours: self.tink.decrypt(&ours, &self.aad).ok().as_deref() == Some(pt),
            ours_opens_tink: self
                .de
                .deserialize(&ctx, Some(&tink))
                .ok()
                .flatten()
                .as_deref()
                == Some(pt),
        };
        (ours, layer, tink, subject, interop)
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Interop {
    /// Same length, same version byte, key id and EDEK length.
    same_layout: bool,
    tink_opens_ours: bool,
    ours_opens_tink: bool,
}

#[derive(Clone, Copy)]
enum Side {
    OursEnvelope,
    OursLayer,
    TinkEnvelope,
    OursSubject,
}

impl Side {
    fn id(self) -> &'static str {
        match self {
            Side::OursEnvelope => "ours_envelope",
            Side::OursLayer => "ours_layer",
            Side::TinkEnvelope => "tink_envelope",
            Side::OursSubject => "ours_subject",
        }
    }
}

fn sides_in_order() -> [Side; 4] {
    let mut sides = [
        Side::OursEnvelope,
        Side::OursLayer,
        Side::TinkEnvelope,
        Side::OursSubject,
    ];
    if reversed() {
        sides.reverse();
    }
    sides
}

/// KMS delay 0: criterion timing of encrypt and decrypt.
fn zero_delay(c: &mut Criterion, s: &Sides) {
    let ctx = ctx();
    let mut cases = Vec::new();
    for n in SIZES {
        let pt = plaintext(n);
        let (ours, layer, tink, subject, interop) = s.ciphertexts(&pt);
        eprintln!("envelope interop at {n} B: {interop:?}");
        cases.push((n, pt, ours, layer, tink, subject));
    }

    let mut group = c.benchmark_group("envelope");
    for (n, pt, ..) in &cases {
        group.throughput(Throughput::Bytes(*n as u64));
        let pt = &pt[..];
        for side in sides_in_order() {
            let id = BenchmarkId::new(side.id(), n);
            match side {
                Side::OursEnvelope => group.bench_function(id, |b| {
                    b.iter(|| s.ser.serialize(black_box(&ctx), Some(black_box(pt))))
                }),
                Side::OursLayer => group.bench_function(id, |b| {
                    b.iter(|| s.layer_ser.serialize(black_box(&ctx), Some(black_box(pt))))
                }),
                Side::TinkEnvelope => group.bench_function(id, |b| {
                    b.iter(|| s.tink.encrypt(black_box(pt), black_box(&s.aad)))
                }),
                Side::OursSubject => group.bench_function(id, |b| {
                    b.iter(|| {
                        s.subject_ser
                            .serialize(black_box(&ctx), Some(black_box(pt)))
                    })
                }),
            };
        }
    }
    group.finish();

    let mut group = c.benchmark_group("envelope_decrypt");
    for (n, _, ours, layer, tink, subject) in &cases {
        group.throughput(Throughput::Bytes(*n as u64));
        for side in sides_in_order() {
            let id = BenchmarkId::new(side.id(), n);
            match side {
                Side::OursEnvelope => group.bench_function(id, |b| {
                    b.iter(|| {
                        s.de.deserialize(black_box(&ctx), Some(black_box(&ours[..])))
                    })
                }),
                Side::OursLayer => group.bench_function(id, |b| {
                    b.iter(|| {
                        s.layer_de
                            .deserialize(black_box(&ctx), Some(black_box(&layer[..])))
                    })
                }),
                Side::TinkEnvelope => group.bench_function(id, |b| {
                    b.iter(|| s.tink.decrypt(black_box(&tink[..]), black_box(&s.aad)))
                }),
                Side::OursSubject => group.bench_function(id, |b| {
                    b.iter(|| -> Option<Vec<u8>> {
                        s.subject_de
                            .deserialize(black_box(&ctx), Some(black_box(&subject[..])))
                            .expect("decrypt")
                    })
                }),
            };
        }
    }
    group.finish();
}

/// One side's figures in the 1 ms case.
struct Slow {
    side: &'static str,
    /// DEK reuse limit (values per DEK); 1 for Tink.
    limit: u64,
    op: &'static str,
    /// Values actually run (Tink: fewer, scaled to `SLOW_VALUES`).
    measured: usize,
    secs: f64,
    kms_calls: usize,
}

impl Slow {
    fn scale(&self) -> f64 {
        SLOW_VALUES as f64 / self.measured as f64
    }

    fn json(&self) -> String {
        format!(
            "{{\"side\":\"{}\",\"dek_limit\":{},\"op\":\"{}\",\"measured_values\":{},\
             \"measured_secs\":{:.6},\"measured_kms_calls\":{},\"secs_per_1e4\":{:.6},\
             \"kms_calls_per_1e4\":{:.1}}}",
            self.side,
            self.limit,
            self.op,
            self.measured,
            self.secs,
            self.kms_calls,
            self.secs * self.scale(),
            self.kms_calls as f64 * self.scale()
        )
    }
}

/// Our side at 1 ms: `SLOW_VALUES` values encrypted on a fresh writer
/// under `policy`, then decrypted on a fresh reader.
fn slow_ours(s: &Sides, side: &'static str, policy: DekPolicy, pt: &[u8]) -> [Slow; 2] {
    let writer = Keyset::from_tink_json_with(&s.json, &s.clients)
        .expect("writer keyset")
        .with_dek_policy(policy);
    let ser = EncryptingSerializer::new(Bytes, writer);
    let ctx = ctx();
    let calls = s.kms.encrypt_calls();
    let t = Instant::now();
    let cts: Vec<Vec<u8>> = (0..SLOW_VALUES).map(|_| s.ours_seal(&ser, pt)).collect();
    let enc = Slow {
        side,
        limit: policy.max_values(),
        op: "encrypt",
        measured: SLOW_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.kms.encrypt_calls() - calls,
    };
    assert_eq!(
        enc.kms_calls,
        SLOW_VALUES.div_ceil(policy.max_values() as usize),
        "one KMS call per DEK"
    );
    let de = s.reader();
    let calls = s.kms.decrypt_calls();
    let t = Instant::now();
    for ct in &cts {
        let got = de.deserialize(&ctx, Some(&ct[..])).expect("decrypt");
        assert_eq!(got.as_deref(), Some(pt));
    }
    let dec = Slow {
        side,
        limit: policy.max_values(),
        op: "decrypt",
        measured: SLOW_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.kms.decrypt_calls() - calls,
    };
    [enc, dec]
}

/// Subject keys at 1 ms: `SLOW_VALUES` values over `SLOW_SUBJECTS`
/// subjects, on fresh keys and a fresh key store (each subject's DEK made
/// by the writer and opened by the reader once), the KEK the envelope key
/// with the default DEK policy.
fn slow_subject(s: &Sides, pt: &[u8]) -> [Slow; 2] {
    let writer = Keyset::from_tink_json_with(&s.json, &s.clients).expect("writer keyset");
    let reader = Keyset::from_tink_json_with(&s.json, &s.clients).expect("reader keyset");
    let (ser, de) = subject_pair(&writer, &reader);
    let keys: Vec<Vec<u8>> = (0..SLOW_SUBJECTS)
        .map(|i| format!("subject-{i}").into_bytes())
        .collect();
    let ctx = |i: usize| Context::new(TOPIC).with_key(&keys[i % SLOW_SUBJECTS]);
    let calls = s.kms.encrypt_calls() + s.kms.decrypt_calls();
    let t = Instant::now();
    let cts: Vec<Vec<u8>> = (0..SLOW_VALUES)
        .map(|i| {
            ser.serialize(&ctx(i), Some(pt))
                .expect("encrypt")
                .expect("present")
        })
        .collect();
    let enc = Slow {
        side: "ours_subject",
        limit: DekPolicy::default().max_values(),
        op: "encrypt",
        measured: SLOW_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.kms.encrypt_calls() + s.kms.decrypt_calls() - calls,
    };
    let calls = s.kms.encrypt_calls() + s.kms.decrypt_calls();
    let t = Instant::now();
    for (i, ct) in cts.iter().enumerate() {
        let got: Option<Vec<u8>> = de.deserialize(&ctx(i), Some(&ct[..])).expect("decrypt");
        assert_eq!(got.as_deref(), Some(pt));
    }
    let dec = Slow {
        side: "ours_subject",
        limit: DekPolicy::default().max_values(),
        op: "decrypt",
        measured: SLOW_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.kms.encrypt_calls() + s.kms.decrypt_calls() - calls,
    };
    [enc, dec]
}

/// Tink's side at 1 ms: `SLOW_TINK_VALUES` values, each one KMS call.
fn slow_tink(s: &Sides, pt: &[u8]) -> [Slow; 2] {
    let calls = s.tink_calls.load(Ordering::Relaxed);
    let t = Instant::now();
    let cts: Vec<Vec<u8>> = (0..SLOW_TINK_VALUES)
        .map(|_| s.tink.encrypt(pt, &s.aad).expect("tink encrypt"))
        .collect();
    let enc = Slow {
        side: "tink_envelope",
        limit: 1,
        op: "encrypt",
        measured: SLOW_TINK_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.tink_calls.load(Ordering::Relaxed) - calls,
    };
    let calls = s.tink_calls.load(Ordering::Relaxed);
    let t = Instant::now();
    for ct in &cts {
        assert_eq!(s.tink.decrypt(ct, &s.aad).expect("tink decrypt"), pt);
    }
    let dec = Slow {
        side: "tink_envelope",
        limit: 1,
        op: "decrypt",
        measured: SLOW_TINK_VALUES,
        secs: t.elapsed().as_secs_f64(),
        kms_calls: s.tink_calls.load(Ordering::Relaxed) - calls,
    };
    [enc, dec]
}

/// KMS delay 1 ms: wall-clock time and KMS calls per 10^4 values.
fn one_ms(s: &Sides) {
    let delay = Duration::from_millis(1);
    s.kms.set_delay(delay);
    let pt = plaintext(SLOW_SIZE);
    let mut rows = Vec::new();
    let mut ours = vec![
        ("ours_envelope", DekPolicy::default()),
        (
            "ours_envelope_limit",
            DekPolicy::default().with_max_values(SLOW_LIMIT),
        ),
    ];
    let tink_first = reversed();
    if tink_first {
        rows.extend(slow_tink(s, &pt));
        ours.reverse();
    }
    for (side, policy) in ours {
        rows.extend(slow_ours(s, side, policy, &pt));
    }
    rows.extend(slow_subject(s, &pt));
    if !tink_first {
        rows.extend(slow_tink(s, &pt));
    }
    s.kms.set_delay(Duration::ZERO);

    eprintln!(
        "\nKMS round trip {} ms, {SLOW_SIZE} B values, per {SLOW_VALUES} values \
         (Tink: {SLOW_TINK_VALUES} run, scaled):",
        delay.as_millis()
    );
    eprintln!(
        "{:<22} {:>10} {:<8} {:>12} {:>10}",
        "side", "DEK limit", "op", "s / 1e4", "KMS calls"
    );
    for r in &rows {
        eprintln!(
            "{:<22} {:>10} {:<8} {:>12.4} {:>10.0}",
            r.side,
            r.limit,
            r.op,
            r.secs * r.scale(),
            r.kms_calls as f64 * r.scale()
        );
    }
    if let Ok(path) = std::env::var("ENVELOPE_KMS_OUT") {
        let json = format!(
            "{{\"delay_ms\":{},\"size_bytes\":{SLOW_SIZE},\"values\":{SLOW_VALUES},\"rows\":[{}]}}\n",
            delay.as_millis(),
            rows.iter().map(Slow::json).collect::<Vec<_>>().join(",")
        );
        std::fs::write(&path, json).expect("write ENVELOPE_KMS_OUT");
    }
}

fn main() {
    let sides = Sides::new();
    let mut c = Criterion::default().configure_from_args();
    zero_delay(&mut c, &sides);
    c.final_summary();
    if std::env::var("ENVELOPE_KMS").is_ok_and(|v| v == "0") {
        return;
    }
    one_ms(&sides);
}
