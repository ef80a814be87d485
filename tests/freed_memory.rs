//! Key bytes never stay behind in freed memory: this binary's global
//! allocator (`freed-scan`) looks into every block freed, and into the old
//! block of every `realloc` (which always moves while it scans), for pieces
//! of a key: its raw bytes and its base64 at each of the three alignments.
//! Each test registers the keys it controls (a keyset's own AES keys, or
//! the data key an envelope key hands its KMS to wrap, seen by a client
//! wrapped around the real one), runs one path of the crate that handles
//! them, drops everything, and asserts that no freed block held a piece.
//!
//! Paths: Tink's cleartext JSON keyset (read and written), Tink's encrypted
//! keyset (the binary keyset proto, wrapped by a KMS), and an envelope key's
//! data key wrapped and unwrapped by a KMS: the in-process `FakeKms`, and
//! the loopback servers of `scripts/kms.sh` (OpenBao transit, moto's AWS
//! KMS). Without their environment (`scripts/test.sh` sets it) the server
//! tests fail, unless `TOMBSTONE_SKIP_KMS=1` says to skip them knowingly.
//!
//! `TOMBSTONE_FREED_SCAN_TRACE=1` (with `--nocapture`) prints a backtrace
//! for every block found holding a key.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use freed_scan::{FreedScan, Report, Session};
use rand::Rng as _;
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{KmsAead, KmsClient, KmsClients};
use tombstone_crypt::{
    Backend, Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Error, KeyTemplate,
    Keyset,
};
use zeroize::Zeroizing;

#[global_allocator]
static ALLOC: FreedScan = FreedScan;

/// Pieces of a 32-byte key: its 4 raw quarters (any 15 or more
/// consecutive bytes of the key hold one), and for each alignment a in 0..3
/// the base64 of `key[a + 6j..a + 6j + 6]` (8 characters) for j in 0..5 (a
/// base64 text of 11 or more consecutive bytes of the key, at whatever
/// offset, holds one).
const PIECES: usize = 4 + 3 * 5;

fn pieces(key: &[u8; 32], out: &mut [[u8; 8]; PIECES]) {
    for (o, q) in out.iter_mut().zip(key.chunks_exact(8)) {
        o.copy_from_slice(q);
    }
    let mut n = 4;
    for a in 0..3 {
        for j in 0..5 {
            let from = a + 6 * j;
            let len = BASE64
                .encode_slice(&key[from..from + 6], &mut out[n])
                .unwrap();
            assert_eq!(len, 8);
            n += 1;
        }
    }
}

/// Scans every freed block for the pieces of `key` from now on. The
/// pieces are zeroized on this stack too: a later thread on the same stack
/// could carry them into the heap (in a moved value's padding) and be
/// found with a block that never held the key.
fn watch(key: &[u8; 32]) {
    let mut p = Zeroizing::new([[0u8; 8]; PIECES]);
    pieces(key, &mut p);
    let refs: [&[u8]; PIECES] = std::array::from_fn(|i| &p[i][..]);
    freed_scan::add_needles(&refs);
}

fn session() -> Session {
    let s = Session::start();
    freed_scan::trace_hits(std::env::var_os("TOMBSTONE_FREED_SCAN_TRACE").is_some());
    s
}

#[track_caller]
fn assert_clean(report: &Report, what: &str) {
    assert!(report.blocks_scanned > 0, "{what}: nothing was scanned");
    assert_eq!(
        report.blocks_with_needle, 0,
        "{what}: freed blocks held key bytes (block sizes and needles: {:?}; \
         TOMBSTONE_FREED_SCAN_TRACE=1 with --nocapture prints where they were freed)",
        report.hits
    );
}

fn random_key() -> Zeroizing<[u8; 32]> {
    let mut k = Zeroizing::new([0u8; 32]);
    rand::rng().fill_bytes(&mut k[..]);
    k
}

const AES_GCM: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";

/// Tink's cleartext JSON of AES-256-GCM keys with ids 1, 2, ... (the last
/// one primary), written into one zeroized buffer sized up front.
fn keyset_json(keys: &[&[u8; 32]]) -> Zeroizing<String> {
    let mut json = Zeroizing::new(String::with_capacity(64 + 256 * keys.len()));
    json.push_str(&format!("{{\"primaryKeyId\":{},\"key\":[", keys.len()));
    for (i, key) in keys.iter().enumerate() {
        let mut proto = Zeroizing::new([0u8; 34]);
        proto[..2].copy_from_slice(&[0x1a, 0x20]);
        proto[2..].copy_from_slice(&key[..]);
        let mut b64 = Zeroizing::new([0u8; 48]);
        BASE64.encode_slice(&proto[..], &mut b64[..]).unwrap();
        if i > 0 {
            json.push(',');
        }
        json.push_str("{\"keyData\":{\"typeUrl\":\"");
        json.push_str(AES_GCM);
        json.push_str("\",\"value\":\"");
        json.push_str(std::str::from_utf8(&b64[..]).unwrap());
        json.push_str("\",\"keyMaterialType\":\"SYMMETRIC\"},\"status\":\"ENABLED\",");
        json.push_str(&format!(
            "\"keyId\":{},\"outputPrefixType\":\"TINK\"}}",
            i + 1
        ));
    }
    json.push_str("]}");
    assert!(json.len() <= json.capacity() && json.capacity() == 64 + 256 * keys.len());
    json
}

/// Values encrypted under `keyset` decrypt under `back`, with the keys
/// expanded for each backend (RustCrypto's round keys live in this
/// process's heap).
fn both_backends(keyset: &Keyset, back: &Keyset) {
    for backend in [Backend::RustCrypto, Backend::DEFAULT] {
        let (a, b) = (
            keyset.clone().with_backend(backend),
            back.clone().with_backend(backend),
        );
        let ct = a.encrypt(b"value", b"ad").unwrap();
        assert_eq!(b.decrypt(&ct, b"ad").unwrap(), b"value");
    }
}

/// Two AES-256-GCM keys the test knows, watched.
fn watched_keyset() -> (Keyset, Zeroizing<String>) {
    let (a, b) = (random_key(), random_key());
    watch(&a);
    watch(&b);
    let json = keyset_json(&[&a, &b]);
    (Keyset::from_tink_json(&json).unwrap(), json)
}

// ---------------------------------------------------------------------------
// The scanner finds what it should (negative controls).

#[test]
fn a_copy_of_a_key_freed_without_zeroizing_is_found() {
    let key = random_key();
    let s = session();
    watch(&key);

    let copy = key.to_vec();
    drop(copy);
    assert_eq!(s.report().blocks_with_needle, 1, "the raw key");

    // Its base64 inside Tink's key proto (the key at offset 2).
    let mut proto = vec![0x1a, 0x20];
    proto.reserve_exact(32);
    proto.extend_from_slice(&key[..]);
    let text = BASE64.encode(&proto);
    drop(proto);
    assert_eq!(s.report().blocks_with_needle, 2, "the proto");
    drop(text);
    assert_eq!(s.report().blocks_with_needle, 3, "its base64");

    // A buffer that grows while holding the key leaves the old block.
    let mut grown = Zeroizing::new(Vec::with_capacity(32));
    grown.extend_from_slice(&key[..]);
    grown.push(0);
    assert_eq!(s.report().blocks_with_needle, 4, "a reallocation");
    drop(grown);

    // Zeroized copies are not found.
    drop(Zeroizing::new(key.to_vec()));
    drop(Zeroizing::new(BASE64.encode(&key[..])));
    let r = s.finish();
    assert_eq!(r.blocks_with_needle, 4, "{r:?}");
}

// ---------------------------------------------------------------------------
// Keysets in the clear and encrypted.

#[test]
fn cleartext_keyset_json_leaves_no_key_in_freed_memory() {
    let s = session();
    let (keyset, json) = watched_keyset();
    let out = Zeroizing::new(keyset.to_tink_json());
    let back = Keyset::from_tink_json(&out).unwrap();
    both_backends(&keyset, &back);
    assert_eq!(*out, *json);
    drop((keyset, back, out, json));
    assert_clean(&s.finish(), "to_tink_json / from_tink_json");
}

/// Tink's JSON as some writers escape it: `\/` for `/`, `\u003d` for `=`,
/// the first character of each key value as `\u0047`, and a field this
/// crate ignores with escapes that stay (`\"`, `\\`, `\n`). serde_json
/// would unescape a key value into its own scratch buffer, freed as it is.
#[test]
fn escaped_keyset_json_leaves_no_key_in_freed_memory() {
    let s = session();
    let (keyset, json) = watched_keyset();
    let mut escaped = Zeroizing::new(String::with_capacity(6 * json.len() + 64));
    escaped.push_str(r#"{"note":"a \"quoted\" \\ \n \u00e9 \u0022 text","#);
    let mut rest = &json[1..];
    while let Some(at) = rest.find("\"value\":\"G") {
        escaped.push_str(&rest[..at]);
        escaped.push_str("\"value\":\"\\u0047");
        rest = &rest[at + 10..];
    }
    escaped.push_str(rest);
    let mut out = Zeroizing::new(String::with_capacity(escaped.capacity()));
    for c in escaped.chars() {
        match c {
            '/' => out.push_str("\\/"),
            '=' => out.push_str("\\u003d"),
            c => out.push(c),
        }
    }
    assert!(out.len() <= out.capacity() && out.capacity() == escaped.capacity());
    assert!(out.contains("\\u0047") && out.contains("\\/") && out.contains("\\u003d"));
    let back = Keyset::from_tink_json(&out).unwrap();
    assert_eq!(*Zeroizing::new(back.to_tink_json()), *json);
    both_backends(&keyset, &back);
    drop((keyset, back, out, escaped, json));
    assert_clean(&s.finish(), "from_tink_json of escaped JSON");
}

/// A keyset the test knows, written encrypted by `kek_uri` and read back.
fn encrypted_keyset_round_trip(kms: &KmsClients, kek_uri: &str, ad: &[u8], what: &str) {
    let s = session();
    let (keyset, json) = watched_keyset();
    let sealed = keyset
        .to_encrypted_tink_json_with(kek_uri, ad, kms)
        .unwrap();
    let back = Keyset::from_encrypted_tink_json_with(&sealed, kek_uri, ad, kms).unwrap();
    both_backends(&keyset, &back);
    drop((keyset, back, json));
    assert_clean(&s.finish(), what);
}

#[test]
fn encrypted_keyset_fake_kms_leaves_no_key_in_freed_memory() {
    let kms = KmsClients::new().with(FakeKms::new());
    encrypted_keyset_round_trip(&kms, "fake-kms://kek", b"ad", "encrypted keyset, FakeKms");
}

// ---------------------------------------------------------------------------
// An envelope key's data key, wrapped and unwrapped by a KMS.

/// A KMS client around another: what the envelope key asks it to wrap is
/// Tink's `AesGcmKey` proto of a fresh data key (`1a 20` and 32 bytes),
/// whose pieces it registers before passing the call on.
#[derive(Debug)]
struct Watching<C>(C);

/// Data keys seen by [`Watching`] clients, and their unwrap calls.
static DEKS_SEEN: AtomicUsize = AtomicUsize::new(0);
static UNWRAPS: AtomicUsize = AtomicUsize::new(0);

impl<C: KmsClient> KmsClient for Watching<C> {
    fn supports(&self, key_uri: &str) -> bool {
        self.0.supports(key_uri)
    }

    fn get_aead(&self, key_uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        Ok(Arc::new(WatchingAead(self.0.get_aead(key_uri)?)))
    }
}

#[derive(Debug)]
struct WatchingAead(Arc<dyn KmsAead>);

impl KmsAead for WatchingAead {
    fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        if let [0x1a, 0x20, dek @ ..] = plaintext {
            if let Ok(dek) = <&[u8; 32]>::try_from(dek) {
                watch(dek);
                DEKS_SEEN.fetch_add(1, Ordering::SeqCst);
            }
        }
        self.0.encrypt(plaintext, associated_data)
    }

    fn decrypt(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Zeroizing<Vec<u8>>, Error> {
        UNWRAPS.fetch_add(1, Ordering::SeqCst);
        self.0.decrypt(ciphertext, associated_data)
    }
}

/// A value encrypted under a fresh envelope key (one data key, wrapped by
/// the KMS), then decrypted by another keyset read from the first's JSON
/// (an empty cache: the data key is unwrapped by the KMS).
fn envelope_round_trip(kms: impl KmsClient + 'static, kek_uri: &str, what: &str) {
    let kms = KmsClients::new().with(Watching(kms));
    let s = session();
    let (seen, unwraps) = (
        DEKS_SEEN.load(Ordering::SeqCst),
        UNWRAPS.load(Ordering::SeqCst),
    );
    let writer =
        Keyset::generate_with(KeyTemplate::kms_envelope(kek_uri).with_kms_clients(kms.clone()))
            .unwrap();
    let ct = writer.encrypt(b"value", b"ad").unwrap();
    assert_eq!(DEKS_SEEN.load(Ordering::SeqCst), seen + 1, "one data key");
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &kms).unwrap();
    assert_eq!(reader.decrypt(&ct, b"ad").unwrap(), b"value");
    assert_eq!(UNWRAPS.load(Ordering::SeqCst), unwraps + 1, "one unwrap");
    drop((writer, reader, kms));
    assert_clean(&s.finish(), what);
}

#[test]
fn envelope_data_key_fake_kms_leaves_no_key_in_freed_memory() {
    envelope_round_trip(FakeKms::new(), "fake-kms://kek", "envelope DEK, FakeKms");
}

// ---------------------------------------------------------------------------
// AES-SIV: the ciphers each key keeps built, one per thread slot.

/// Tink's cleartext JSON of one AES-SIV key (id 1), the 64 bytes `cmac`
/// then `ctr`, in one zeroized buffer sized up front.
fn siv_keyset_json(cmac: &[u8; 32], ctr: &[u8; 32]) -> Zeroizing<String> {
    let mut proto = Zeroizing::new([0u8; 66]);
    proto[..2].copy_from_slice(&[0x12, 0x40]);
    proto[2..34].copy_from_slice(&cmac[..]);
    proto[34..].copy_from_slice(&ctr[..]);
    let mut b64 = Zeroizing::new([0u8; 88]);
    BASE64.encode_slice(&proto[..], &mut b64[..]).unwrap();
    let mut json = Zeroizing::new(String::with_capacity(512));
    json.push_str("{\"primaryKeyId\":1,\"key\":[{\"keyData\":{\"typeUrl\":\"");
    json.push_str("type.googleapis.com/google.crypto.tink.AesSivKey");
    json.push_str("\",\"value\":\"");
    json.push_str(std::str::from_utf8(&b64[..]).unwrap());
    json.push_str("\",\"keyMaterialType\":\"SYMMETRIC\"},\"status\":\"ENABLED\",");
    json.push_str("\"keyId\":1,\"outputPrefixType\":\"TINK\"}]}");
    assert!(json.capacity() == 512);
    json
}

#[test]
fn aes_siv_ciphers_kept_per_thread_leave_no_key_in_freed_memory() {
    let s = session();
    let (cmac, ctr) = (random_key(), random_key());
    watch(&cmac);
    watch(&ctr);
    let json = siv_keyset_json(&cmac, &ctr);
    let keyset = Keyset::from_tink_json(&json).unwrap();
    let copy = keyset.clone();
    // Four threads at once on two clones: each fills its slot, and threads
    // that find their slot busy build a cipher for one call.
    std::thread::scope(|scope| {
        for t in 0..4u8 {
            let keys = if t % 2 == 0 { &keyset } else { &copy };
            scope.spawn(move || {
                for i in 0..200u8 {
                    let ct = keys.encrypt_deterministically(&[t, i], b"ad").unwrap();
                    assert_eq!(keys.decrypt_deterministically(&ct, b"ad").unwrap(), [t, i]);
                }
            });
        }
    });
    drop((keyset, copy, json));
    assert_clean(&s.finish(), "AES-SIV ciphers");
}

// ---------------------------------------------------------------------------
// The owned-buffer path: a failed in-place encryption or decryption leaves
// no plaintext behind.

#[test]
fn in_place_errors_leave_no_plaintext_in_freed_memory() {
    let s = session();
    let secret = random_key();
    watch(&secret);
    let with_secret = |head: usize| {
        let mut buf = Vec::with_capacity(head + 32 + 16);
        buf.resize(head, 0);
        buf.extend_from_slice(&secret[..]);
        buf
    };

    // Refused: a deterministic keyset, too much room asked for, a KMS
    // that is down.
    let siv = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let mut buf = with_secret(17);
    assert!(siv.encrypt_in_place(&mut buf, 17, b"ad").is_err());
    drop(buf);
    let keyset = Keyset::generate();
    let mut buf = with_secret(0);
    assert!(keyset.encrypt_in_place(&mut buf, 33, b"ad").is_err());
    drop(buf);
    let kms = FakeKms::new();
    let clients = KmsClients::new().with(kms.clone());
    let envelope = Keyset::generate_with(
        KeyTemplate::kms_envelope("fake-kms://in-place").with_kms_clients(clients),
    )
    .unwrap();
    kms.set_down(true);
    let mut buf = with_secret(40);
    assert!(envelope.encrypt_in_place(&mut buf, 40, b"ad").is_err());
    drop(buf);

    // A ciphertext with a flipped tag bit, on each backend (aws-lc
    // decrypts while it authenticates).
    for backend in [Backend::RustCrypto, Backend::DEFAULT] {
        let keyset = Keyset::generate().with_backend(backend);
        let mut buf = with_secret(17);
        keyset.encrypt_in_place(&mut buf, 17, b"ad").unwrap();
        let last = buf.len() - 1;
        buf[last] ^= 1;
        assert_eq!(
            keyset.decrypt_in_place(&mut buf, b"ad"),
            Err(Error::Decryption)
        );
        drop(buf);
    }
    drop((siv, keyset, envelope, kms));
    assert_eq!(s.report().blocks_with_needle, 0, "{:?}", s.report().hits);

    // The control, last (nothing after it can carry its freed bytes into
    // another block): a buffer emptied without zeroizing is found.
    let mut control = with_secret(17);
    control.clear();
    drop(control);
    let r = s.finish();
    assert!(r.blocks_scanned > 0);
    assert_eq!(r.blocks_with_needle, 1, "only the control: {:?}", r.hits);
}

// ---------------------------------------------------------------------------
// The owned-buffer path on success: the ciphertext handed back holds no
// plaintext in its spare capacity, a buffer that had to grow left none in
// the block it grew from, and a decrypted buffer holds the plaintext in
// its length only (the caller wipes what it was given; the rest of the
// block is clean).

/// `room` bytes of room in front of the secret, and `extra` bytes of
/// capacity beyond it.
fn secret_buffer(secret: &[u8; 32], room: usize, extra: usize) -> Vec<u8> {
    let mut buf = Vec::with_capacity(room + 32 + extra);
    buf.resize(room, 0);
    buf.extend_from_slice(&secret[..]);
    assert_eq!(buf.capacity(), room + 32 + extra);
    buf
}

/// Decrypts `ct` with `open` where it lies, checks it is the secret,
/// wipes the plaintext's length (what its caller was handed) and frees the
/// buffer: the rest of the block is scanned.
fn open_and_free(
    secret: &[u8; 32],
    mut ct: Vec<u8>,
    open: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
    what: &str,
) {
    open(&mut ct).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(ct[..] == secret[..], "{what}: round trip");
    zeroize::Zeroize::zeroize(ct.as_mut_slice());
    drop(ct);
}

/// The room in front and the spare capacity of every case: what the key
/// asks for; too little capacity for the tag (a regrowth); no room and no
/// capacity; no room but capacity enough (moved in place); more room than
/// the header takes (moved to the front); room taken from the key's own
/// `header_len`.
fn in_place_cases(head: usize) -> [(usize, usize); 6] {
    [
        (head, 16),
        (head, 0),
        (0, 0),
        (0, head + 16),
        (head + 64, 0),
        (head + 64, 16),
    ]
}

/// Every value key type (AES-128-GCM, AES-256-GCM, a warm envelope key) on
/// each backend.
fn value_keysets() -> Vec<(String, Keyset)> {
    let mut out = Vec::new();
    for backend in [Backend::RustCrypto, Backend::DEFAULT] {
        let kms = KmsClients::new().with(FakeKms::new());
        for (name, keyset) in [
            (
                "AES-128-GCM",
                Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap(),
            ),
            ("AES-256-GCM", Keyset::generate()),
            (
                "envelope",
                Keyset::generate_with(
                    KeyTemplate::kms_envelope("fake-kms://in-place").with_kms_clients(kms),
                )
                .unwrap(),
            ),
        ] {
            let keyset = keyset.with_backend(backend);
            keyset.encrypt(b"warm", b"").unwrap();
            out.push((format!("{name} on {}", backend.name()), keyset));
        }
    }
    out
}

#[test]
fn in_place_successes_leave_no_plaintext_in_freed_memory() {
    let keysets = value_keysets();
    let s = session();
    let secret = random_key();
    watch(&secret);
    for (name, keyset) in &keysets {
        for (room, extra) in in_place_cases(keyset.header_len()) {
            let what = format!("{name}, room {room}, spare {extra}");
            let mut buf = secret_buffer(&secret, room, extra);
            keyset.encrypt_in_place(&mut buf, room, b"ad").unwrap();
            let ct = buf.clone();
            drop(buf);
            open_and_free(&secret, ct, |b| keyset.decrypt_in_place(b, b"ad"), &what);
            let r = s.report();
            assert_eq!(r.blocks_with_needle, 0, "{what}: {:?}", r.hits);
        }
    }
    drop(keysets);
    assert_clean(&s.finish(), "encrypt_in_place / decrypt_in_place");
}

/// An envelope key before its first data key: a buffer sized from its
/// `header_len` then, as the serde wrapper's `plaintext_buffer` sizes it.
#[test]
fn in_place_on_a_cold_envelope_key_leaves_no_plaintext_in_freed_memory() {
    let s = session();
    let secret = random_key();
    watch(&secret);
    for backend in [Backend::RustCrypto, Backend::DEFAULT] {
        let kms = KmsClients::new().with(FakeKms::new());
        let template = KeyTemplate::kms_envelope("fake-kms://cold").with_kms_clients(kms);
        let keyset = Keyset::generate_with(template.clone())
            .unwrap()
            .with_backend(backend);
        let head = keyset.header_len();
        let mut buf = secret_buffer(&secret, head, 16);
        keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
        let ct = buf.clone();
        drop(buf);
        open_and_free(
            &secret,
            ct,
            |b| keyset.decrypt_in_place(b, b"ad"),
            "cold envelope key",
        );

        let ser = EncryptingSerializer::new(Bytes, Keyset::generate_with(template).unwrap());
        let mut buf = ser.plaintext_buffer(32);
        let head = buf.len();
        buf.extend_from_slice(&secret[..]);
        let ctx = Context::new("orders").with_key(b"k");
        let ct = ser.encrypt_owned(&ctx, Some(buf), head).unwrap().unwrap();
        let de = DecryptingDeserializer::new(Bytes, ser.keyset().clone());
        open_and_free(
            &secret,
            ct,
            |b| {
                let out = de.decrypt_owned(&ctx, Some(std::mem::take(b)))?;
                *b = out.unwrap_or_default();
                Ok(())
            },
            "cold envelope key, serde wrappers",
        );
    }
    assert_clean(&s.finish(), "a cold envelope key's header_len");
}

#[test]
fn serde_owned_successes_leave_no_plaintext_in_freed_memory() {
    let keysets = value_keysets();
    let s = session();
    let secret = random_key();
    watch(&secret);
    let ctx = Context::new("orders").with_key(b"order-17");
    for (name, keyset) in &keysets {
        let ser = EncryptingSerializer::new(Bytes, keyset.clone());
        let de = DecryptingDeserializer::new(Bytes, keyset.clone());
        for (room, extra) in in_place_cases(ser.header_len()) {
            let what = format!("{name}, room {room}, spare {extra}");
            let buf = secret_buffer(&secret, room, extra);
            let ct = ser.encrypt_owned(&ctx, Some(buf), room).unwrap().unwrap();
            let copy = ct.clone();
            drop(ct);
            open_and_free(
                &secret,
                copy,
                |b| {
                    let out = de.decrypt_owned(&ctx, Some(std::mem::take(b)))?;
                    *b = out.unwrap_or_default();
                    Ok(())
                },
                &what,
            );
            let r = s.report();
            assert_eq!(r.blocks_with_needle, 0, "{what}: {:?}", r.hits);
        }
    }
    drop(keysets);
    assert_clean(&s.finish(), "encrypt_owned / decrypt_owned");
}

/// Subject keys (crypto-shredding): a value written, read, its subject
/// shredded and read again (a delete) leaves no plaintext in freed memory.
#[test]
fn subject_keys_leave_no_plaintext_in_freed_memory() {
    use tombstone_crypt::shred::{MemoryKeyStore, SubjectEncrypting, SubjectKeys};
    use tombstone_crypt::Deserializer as _;
    let secret = random_key();
    let keys =
        Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap());
    let values: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(Arc::clone(&keys), Bytes);
    let ctx = Context::new("t").with_key(b"subject-1");
    let s = session();
    watch(&secret);
    for round in 0..3 {
        let ct = tombstone_crypt::Serializer::serialize(&values, &ctx, Some(&secret[..]))
            .unwrap()
            .unwrap();
        let read: Option<Vec<u8>> = values.deserialize(&ctx, Some(&ct)).unwrap();
        let mut read = Zeroizing::new(read.expect("present"));
        assert_eq!(&read[..], &secret[..], "round {round}");
        zeroize::Zeroize::zeroize(&mut *read);
    }
    let ct = tombstone_crypt::Serializer::serialize(&values, &ctx, Some(&secret[..]))
        .unwrap()
        .unwrap();
    keys.shred(b"subject-1").unwrap();
    let read: Option<Vec<u8>> = values.deserialize(&ctx, Some(&ct)).unwrap();
    assert_eq!(read, None);
    assert_clean(&s.finish(), "subject keys");
}

/// A shredded subject's name (here the record key) leaves the tag cache
/// zeroized: no copy of it is in freed memory once the shred returned and
/// the subject keys are dropped. (Kept as a plain `Vec` and freed with the
/// cache, as before, it was found.)
#[test]
fn a_shredded_subjects_name_leaves_no_copy_in_freed_memory() {
    use tombstone_crypt::shred::{MemoryKeyStore, Shred, SubjectEncrypting, SubjectKeys};
    let subject = random_key();
    let keys =
        Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap());
    let values: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(Arc::clone(&keys), Bytes);
    let s = session();
    watch(&subject);
    let ctx = Context::new("t").with_key(&subject[..]);
    let ct = tombstone_crypt::Serializer::serialize(&values, &ctx, Some(&b"a value"[..]))
        .unwrap()
        .unwrap();
    assert_eq!(keys.shred(&subject[..]).unwrap(), Shred::Removed(1));
    drop((ct, values, keys));
    assert_clean(&s.finish(), "a shredded subject's name");
}

// ---------------------------------------------------------------------------
// The loopback KMS servers.

/// A variable of `scripts/kms.sh`'s env file; `None` when
/// `TOMBSTONE_SKIP_KMS` is set.
#[cfg(any(feature = "vault", feature = "aws-kms"))]
fn kms_env(name: &str) -> Option<String> {
    if std::env::var_os("TOMBSTONE_SKIP_KMS").is_some() {
        eprintln!("TOMBSTONE_SKIP_KMS is set: KMS server tests skipped");
        return None;
    }
    Some(std::env::var(name).unwrap_or_else(|_| {
        panic!(
            "{name} is not set: run ./scripts/test.sh, or source the file \
             `scripts/kms.sh start` prints (or set TOMBSTONE_SKIP_KMS=1)"
        )
    }))
}

#[cfg(feature = "vault")]
#[test]
fn encrypted_keyset_openbao_leaves_no_key_in_freed_memory() {
    let Some(uri) = kms_env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    kms_env("VAULT_ADDR");
    let kms = KmsClients::new().with(tombstone_crypt::kms::VaultClient::from_env());
    // Vault transit takes no associated data.
    encrypted_keyset_round_trip(&kms, &uri, b"", "encrypted keyset, OpenBao");
}

#[cfg(feature = "vault")]
#[test]
fn envelope_data_key_openbao_leaves_no_key_in_freed_memory() {
    let Some(uri) = kms_env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    kms_env("VAULT_ADDR");
    envelope_round_trip(
        tombstone_crypt::kms::VaultClient::from_env(),
        &uri,
        "envelope DEK, OpenBao",
    );
}

#[cfg(feature = "aws-kms")]
#[test]
fn encrypted_keyset_aws_kms_leaves_no_key_in_freed_memory() {
    let Some(uri) = kms_env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    kms_env("AWS_ENDPOINT_URL_KMS");
    let kms = KmsClients::new().with(tombstone_crypt::kms::AwsKmsClient::from_env());
    encrypted_keyset_round_trip(&kms, &uri, b"keyset ad", "encrypted keyset, AWS KMS");
}

#[cfg(feature = "aws-kms")]
#[test]
fn envelope_data_key_aws_kms_leaves_no_key_in_freed_memory() {
    let Some(uri) = kms_env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    kms_env("AWS_ENDPOINT_URL_KMS");
    envelope_round_trip(
        tombstone_crypt::kms::AwsKmsClient::from_env(),
        &uri,
        "envelope DEK, AWS KMS",
    );
}

/// Encrypted fields: a record whose fields hold the secret (as a string,
/// inside a structure that is written as JSON text, and deterministically)
/// written and read in JSON and bincode, under each value key type. The
/// test zeroizes the values it holds itself; nothing the layer freed may
/// hold a piece of the secret.
#[test]
fn encrypted_fields_leave_no_plaintext_in_freed_memory() {
    use serde::{Deserialize, Serialize};
    use tombstone_crypt::field::{Deterministic, Encrypted, FieldEncrypting};
    use tombstone_crypt::{Bincode, Deserializer as _, Json, Serializer as _};
    use zeroize::Zeroize as _;

    #[derive(Serialize, Deserialize)]
    struct Record {
        id: u64,
        text: Encrypted<String>,
        nested: Encrypted<Vec<String>>,
        lookup: Deterministic<String>,
        none: Option<Encrypted<String>>,
    }

    impl Record {
        fn wipe(mut self) {
            for s in [self.text.get_mut(), self.lookup.get_mut()]
                .into_iter()
                .flatten()
            {
                s.zeroize();
            }
            if let Some(v) = self.nested.get_mut() {
                for s in v.iter_mut() {
                    s.zeroize();
                }
            }
        }
    }

    let keysets = value_keysets();
    let det = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let s = session();
    let secret = random_key();
    watch(&secret);
    let ctx = Context::new("people").with_key(b"p-1");
    for (name, keyset) in &keysets {
        let make = || {
            // The base64 of the secret: its pieces are needles.
            let text = Zeroizing::new(BASE64.encode(&secret[..]));
            Record {
                id: 1,
                text: Encrypted::new(String::from(text.as_str())),
                nested: Encrypted::new(vec![String::from(text.as_str()); 3]),
                lookup: Deterministic::new(String::from(text.as_str())),
                none: None,
            }
        };
        let json = FieldEncrypting::new(Json::<Record>::new(), keyset.clone())
            .with_deterministic(det.clone());
        let bin = FieldEncrypting::new(Bincode::<Record>::new(), keyset.clone())
            .with_deterministic(det.clone());
        for (format, bytes) in [
            ("json", {
                let r = make();
                let b = json.serialize(&ctx, Some(&r)).unwrap().unwrap();
                r.wipe();
                b
            }),
            ("bincode", {
                let r = make();
                let b = bin.serialize(&ctx, Some(&r)).unwrap().unwrap();
                r.wipe();
                b
            }),
        ] {
            let back = if format == "json" {
                json.deserialize(&ctx, Some(&bytes)).unwrap().unwrap()
            } else {
                bin.deserialize(&ctx, Some(&bytes)).unwrap().unwrap()
            };
            assert_eq!(back.id, 1);
            back.wipe();
            drop(bytes);
            let r = s.report();
            assert_eq!(r.blocks_with_needle, 0, "{name}, {format}: {:?}", r.hits);
        }
    }
    drop(keysets);
    assert_clean(&s.finish(), "encrypted fields");
}

/// Confluent's format (payload and field rules, JSON Schema and Avro): a record
/// written and read leaves no plaintext in freed memory, the codec's own
/// copies of the record included.
#[cfg(feature = "confluent")]
#[test]
fn confluent_records_leave_no_plaintext_in_freed_memory() {
    use serde_json::{json, Value};
    use tombstone_crypt::confluent::{ConfluentJson, LocalKms};
    use zeroize::Zeroize as _;

    /// Zeroizes a JSON value's strings, keys included.
    fn wipe(v: Value) {
        match v {
            Value::String(mut s) => s.zeroize(),
            Value::Array(a) => a.into_iter().for_each(wipe),
            Value::Object(m) => {
                for (mut k, v) in m {
                    k.zeroize();
                    wipe(v);
                }
            }
            _ => {}
        }
    }
    let secret = random_key();
    let text = Zeroizing::new(BASE64.encode(&secret[..]));
    let formats: &[&str] = if cfg!(feature = "confluent-avro") {
        &["JSON", "AVRO"]
    } else {
        &["JSON"]
    };
    for (format, rule) in formats
        .iter()
        .flat_map(|f| ["ENCRYPT_PAYLOAD", "ENCRYPT"].map(|r| (*f, r)))
    {
        let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
        let doc = match format {
            "JSON" => json!({"type": "object", "properties": {
                "id": {"type": "integer"},
                "ssn": {"type": "string", "confluent:tags": ["PII"]}}}),
            _ => json!({"type": "record", "name": "R", "fields": [
                {"name": "id", "type": "long"},
                {"name": "ssn", "type": "string", "confluent:tags": ["PII"]}]}),
        };
        let phase = if rule == "ENCRYPT" {
            "domainRules"
        } else {
            "encodingRules"
        };
        let rule_set = json!({phase: [{"name": "r", "kind": "TRANSFORM", "mode": "WRITEREAD",
                "type": rule, "tags": ["PII"], "params": {"encrypt.kek.name": "k1"}}]});
        let schema = json!({"schemaType": format, "schema": doc.to_string(), "ruleSet": rule_set});
        codec.register(1, "t-value", &schema).unwrap();
        // A first record makes the DEK (outside the session).
        codec
            .encode("t-value", Some(&json!({"id": 0, "ssn": "x"})))
            .unwrap();
        let s = session();
        watch(&secret);
        let record = json!({"id": 1, "ssn": text.as_str()});
        let bytes = codec.encode("t-value", Some(&record)).unwrap().unwrap();
        wipe(record);
        let read = codec.decode(Some(&bytes)).unwrap().unwrap();
        assert_eq!(read["ssn"].as_str(), Some(text.as_str()));
        wipe(read);
        assert_clean(&s.finish(), &format!("{format} {rule}"));
    }
}

/// A Schema Registry's credentials (in its URL, as basic authentication)
/// leave no copy of this crate's in freed memory: the URL split, the
/// `user:password` pair, its base64 and the header, as the client is made
/// and dropped.
#[cfg(feature = "confluent")]
#[test]
fn registry_credentials_leave_nothing_in_freed_memory() {
    use tombstone_crypt::confluent::Registry;

    // A password of 32 letters and digits: its bytes are the needles, and
    // so is the base64 of `u:PASSWORD` (the pair's base64 holds the base64
    // of the password's bytes at the offsets watched).
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    let mut secret = random_key();
    for b in secret.iter_mut() {
        *b = ALPHABET[usize::from(*b) % ALPHABET.len()];
    }
    let password = std::str::from_utf8(&secret[..]).unwrap();
    // The caller's own copy of the URL, wiped by the caller.
    let mut url = Zeroizing::new(String::with_capacity(64));
    url.push_str("http://u:");
    url.push_str(password);
    url.push_str("@127.0.0.1:1/");
    let s = session();
    watch(&secret);
    let registry = Registry::new(&url).unwrap();
    assert!(!format!("{registry:?}").contains(password));
    // Not a request: the HTTP client (ureq) copies the header into its own
    // request, which it frees unwiped (found here through
    // `ureq_proto::client::amended::AmendedRequest`; SECURITY.md says so).
    drop(registry);
    assert_clean(&s.finish(), "registry credentials");
}

/// A shredded subject's name leaves no copy in freed memory at any length
/// (8 to 31 bytes), also when the tag cache grew after it was written (the
/// cache's table moves its entries into a new table and frees the old one
/// as it is): the cache keeps each subject in a heap block of its own,
/// zeroized where it is. Subjects kept in the table's entries (up to 30
/// bytes, tried for speed) left 1 to 3 blocks each here.
#[test]
fn a_shredded_subject_of_any_length_leaves_no_copy_when_the_tag_cache_grew() {
    use tombstone_crypt::shred::{MemoryKeyStore, Shred, SubjectEncrypting, SubjectKeys};
    use tombstone_crypt::Serializer as _;
    for len in [8, 29, 30, 31] {
        for others in [0, 100] {
            let mut subject = Zeroizing::new(vec![0u8; len]);
            rand::rng().fill_bytes(&mut subject[..]);
            let keys = Arc::new(
                SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap(),
            );
            let values: SubjectEncrypting<Bytes, [u8]> =
                SubjectEncrypting::new(Arc::clone(&keys), Bytes);
            let s = session();
            s.add(&[&subject[..]]);
            let ctx = Context::new("t").with_key(&subject[..]);
            let ct = values
                .serialize(&ctx, Some(&b"a value"[..]))
                .unwrap()
                .unwrap();
            for i in 0..others {
                let k = format!("other-subject-{i}");
                let c = Context::new("t").with_key(k.as_bytes());
                values.serialize(&c, Some(&b"v"[..])).unwrap();
            }
            assert_eq!(keys.shred(&subject[..]).unwrap(), Shred::Removed(1));
            drop((ct, values, keys));
            assert_clean(
                &s.finish(),
                &format!("a shredded subject of {len} bytes, {others} others"),
            );
        }
    }
}
