//! Every span and event field the crate emits at TRACE, during a run that
//! encrypts, decrypts, makes and unwraps DEKs, fails and retries KMS calls,
//! rotates, passes plaintext through and restores a store, is captured and
//! searched for the run's secrets (key bytes, DEKs, the KMS token,
//! plaintext, ciphertext), as bytes, hex, base64 and `Debug` lists: none
//! may appear.
#![cfg(all(feature = "tracing", feature = "vault"))]

use crate::common;

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use common::envelope::envelope_keyset;
use tombstone_crypt::kms::{DekPolicy, KmsClient as _, KmsClients, KmsTimeouts, VaultClient};
use tombstone_crypt::store::{
    restore_from, ChangeLoggingStore, KeyValueStore as _, MemoryChangelog, MemoryStore,
};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, EncryptingSerializer, KeyTemplate,
    Keyset, Serializer as _, Unencrypted,
};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing::{Event, Metadata, Subscriber};

/// Records every span's and event's name, level, message and fields as
/// text.
#[derive(Clone, Default)]
struct Capture {
    lines: Arc<Mutex<Vec<String>>>,
    next: Arc<AtomicU64>,
}

struct Line<'a>(&'a mut String);

impl Visit for Line<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        let _ = write!(self.0, " {}={:?}", field.name(), value);
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        let _ = write!(self.0, " {}={}", field.name(), value);
    }
}

impl Capture {
    fn push(&self, meta: &Metadata<'_>, kind: &str, fields: impl FnOnce(&mut Line<'_>)) {
        let mut s = format!("{kind} {} {}", meta.level(), meta.name());
        fields(&mut Line(&mut s));
        self.lines.lock().unwrap().push(s);
    }
    fn text(&self) -> String {
        self.lines.lock().unwrap().join("\n")
    }
}

impl Subscriber for Capture {
    fn enabled(&self, _: &Metadata<'_>) -> bool {
        true
    }
    fn new_span(&self, span: &Attributes<'_>) -> Id {
        self.push(span.metadata(), "span", |l| span.record(l));
        Id::from_u64(self.next.fetch_add(1, Ordering::Relaxed) + 1)
    }
    fn record(&self, _: &Id, values: &Record<'_>) {
        let mut s = String::from("record");
        values.record(&mut Line(&mut s));
        self.lines.lock().unwrap().push(s);
    }
    fn record_follows_from(&self, _: &Id, _: &Id) {}
    fn event(&self, event: &Event<'_>) {
        self.push(event.metadata(), "event", |l| event.record(l));
    }
    fn enter(&self, _: &Id) {}
    fn exit(&self, _: &Id) {}
}

/// The forms a secret could take in a log line.
fn forms(secret: &[u8]) -> Vec<String> {
    let hex: String = secret.iter().map(|b| format!("{b:02x}")).collect();
    let b64 = base64::engine::general_purpose::STANDARD.encode(secret);
    let b64url = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(secret);
    let mut out = vec![
        hex.clone(),
        hex.to_uppercase(),
        b64.trim_end_matches('=').to_string(),
        b64url,
        format!("{:?}", &secret[..secret.len().min(8)])
            .trim_end_matches(']')
            .to_string(),
    ];
    if let Ok(s) = std::str::from_utf8(secret) {
        out.push(s.to_string());
    }
    out
}

/// The secrets of `secrets` whose some form is in `text`.
fn leaks<'a>(text: &str, secrets: &'a [(&'a str, Vec<u8>)]) -> Vec<&'a str> {
    secrets
        .iter()
        .filter(|(_, s)| forms(s).iter().any(|f| text.contains(f.as_str())))
        .map(|(name, _)| *name)
        .collect()
}

/// The AES key inside a cleartext Tink keyset's only key (`keyValue`, an
/// `AesGcmKey` proto that ends in the key bytes).
fn key_bytes(keyset: &Keyset) -> Vec<u8> {
    let json: serde_json::Value = serde_json::from_str(&keyset.to_tink_json()).unwrap();
    let value = json["key"][0]["keyData"]["value"].as_str().unwrap();
    let proto = base64::engine::general_purpose::STANDARD
        .decode(value)
        .unwrap();
    proto[proto.len() - 32..].to_vec()
}

#[test]
fn no_secret_in_any_span_or_event() {
    let capture = Capture::default();
    let mut secrets: Vec<(&str, Vec<u8>)> = Vec::new();
    tracing::subscriber::with_default(capture.clone(), || {
        let plaintext = b"the plaintext of a customer record 4242".to_vec();
        let ctx = Context::new("customers").with_key(b"customer-4242");

        // A plain AES-GCM keyset through the serde wrappers, with a
        // rotation, tombstones and a migration reader.
        let mut keyset = Keyset::generate();
        secrets.push(("first AES key", key_bytes(&keyset)));
        keyset.rotate();
        let ser = EncryptingSerializer::new(Bytes, keyset.clone());
        let de = DecryptingDeserializer::new(Bytes, keyset.clone())
            .with_unencrypted(Unencrypted::PassThrough);
        let ct = ser.serialize(&ctx, Some(&plaintext)).unwrap().unwrap();
        assert_eq!(de.deserialize(&ctx, Some(&ct)).unwrap().unwrap(), plaintext);
        let legacy = b"legacy plaintext before the migration 777".to_vec();
        for _ in 0..3 {
            de.deserialize(&ctx, Some(&legacy)).unwrap();
        }
        let mut bad = ct.clone();
        bad[20] ^= 1;
        assert!(de.deserialize(&ctx, Some(&bad)).is_err());
        secrets.push(("plaintext", plaintext.clone()));
        secrets.push(("record key", b"customer-4242".to_vec()));

        // Record keys under a rotated AES-SIV keyset, with their fan-out.
        let mut siv = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        secrets.push(("first AES-SIV key", key_bytes(&siv)));
        siv.rotate();
        let keys = tombstone_crypt::DeterministicSerializer::new(tombstone_crypt::Bytes, siv);
        let forms = keys.key_forms(&ctx, &b"customer-4242"[..]).unwrap();
        assert_eq!(forms.writes(None).count(), 2);
        secrets.push(("an encrypted record key", forms.primary().to_vec()));
        secrets.push(("legacy plaintext", legacy));
        secrets.push(("ciphertext", ct[5..].to_vec()));

        // An envelope keyset on the in-process KMS: DEKs made, unwrapped,
        // evicted; the KMS down for a while.
        let (kms, clients, writer) =
            envelope_keyset("fake-kms://trace", DekPolicy::default().with_max_values(2));
        let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
            .unwrap()
            .with_dek_policy(DekPolicy::default().with_cache_capacity(1));
        let cts: Vec<_> = (0..6)
            .map(|_| writer.encrypt(&plaintext, b"ad").unwrap())
            .collect();
        for c in &cts {
            assert_eq!(reader.decrypt(c, b"ad").unwrap(), plaintext);
        }
        kms.set_down(true);
        assert!(writer.encrypt(&plaintext, b"ad").is_err());
        assert!(reader.decrypt(&cts[0], b"ad").is_err());
        kms.set_down(false);
        let aead = kms.get_aead("fake-kms://trace").unwrap();
        for c in &cts {
            let n = u32::from_be_bytes(c[5..9].try_into().unwrap()) as usize;
            let dek = aead.decrypt(&c[9..9 + n], b"").unwrap();
            secrets.push(("a DEK", dek[dek.len() - 32..].to_vec()));
            secrets.push(("an envelope ciphertext", c[9 + n..].to_vec()));
        }

        // A Vault client with a token, against a port where nothing
        // listens: each call is retried (a WARN per retry) and fails.
        let token = "s.ThisTokenMustNeverBeLogged0123456789";
        secrets.push(("the Vault token", token.as_bytes().to_vec()));
        let vault = VaultClient::new(token)
            .with_address("http://127.0.0.1:9")
            .with_timeouts(KmsTimeouts {
                request: Duration::from_millis(300),
                attempts: 2,
                backoff: Duration::from_millis(10),
            });
        let vault_keys = Keyset::generate_with(
            KeyTemplate::kms_envelope("hcvault://127.0.0.1:9/transit/keys/trace")
                .with_kms_clients(KmsClients::new().with(vault)),
        )
        .unwrap();
        assert!(vault_keys.encrypt(&plaintext, b"").is_err());

        // A store restored from its changelog.
        let mut store = ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new());
        store.put(b"k", Some(&plaintext)).unwrap();
        store.flush().unwrap();
        let mut fresh = MemoryStore::new();
        restore_from(&mut fresh, store.changelog()).unwrap();
    });

    secrets.sort();
    secrets.dedup_by(|a, b| a.1 == b.1);
    let text = capture.text();
    if std::env::var_os("TOMBSTONE_SHOW_TRACE").is_some() {
        eprintln!("{text}");
    }
    // Not vacuous: the run's spans and events were captured.
    for expected in [
        "span INFO kms_call",
        "outcome=ok",
        "outcome=error",
        "span DEBUG kms_attempt",
        "event WARN",
        "retrying",
        "passed through as plaintext",
        "a new data key (DEK) is current",
        "unwrapped into the cache",
        "span INFO changelog_restore",
        "span DEBUG dek_create",
        "span DEBUG dek_unwrap",
        "key_uri=fake-kms://trace",
    ] {
        assert!(text.contains(expected), "no {expected:?} in:\n{text}");
    }
    assert_eq!(
        text.matches("passed through as plaintext").count(),
        1,
        "one WARN per keyset, then TRACE:\n{text}"
    );
    assert!(secrets.len() > 10);
    let leaked = leaks(&text, &secrets);
    assert!(leaked.is_empty(), "leaked {leaked:?} in:\n{text}");

    // The search finds a secret in each of its forms (a control: a line
    // that held one would fail the test above).
    for (name, secret) in &secrets {
        for form in forms(secret) {
            let line = format!("event DEBUG x field={form}");
            assert!(leaks(&line, &secrets).contains(name), "{name}: {form}");
        }
    }
}
