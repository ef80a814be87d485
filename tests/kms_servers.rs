//! Envelope encryption against real KMS servers on loopback, with Google
//! Tink (Python) as the peer: OpenBao's transit engine (the Vault API) and
//! moto's AWS KMS. `scripts/test.sh` starts them (`scripts/kms.sh start`)
//! and exports their env file; without it these tests fail, unless
//! `TOMBSTONE_SKIP_KMS=1` says to skip them knowingly.
#![cfg(all(feature = "aws-kms", feature = "vault"))]

use crate::common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use tombstone_crypt::kms::{DekPolicy, KmsClients, KmsTimeouts, VaultClient};
use tombstone_crypt::{Error, KeyTemplate, Keyset};

/// The servers are shared: a test that pauses one holds this.
static SERVERS: Mutex<()> = Mutex::new(());

fn lock() -> std::sync::MutexGuard<'static, ()> {
    SERVERS.lock().unwrap_or_else(|e| e.into_inner())
}

fn env(name: &str) -> Option<String> {
    if std::env::var_os("TOMBSTONE_SKIP_KMS").is_some() {
        eprintln!("TOMBSTONE_SKIP_KMS is set: KMS server tests skipped");
        return None;
    }
    Some(std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run ./scripts/test.sh, or source the file `scripts/kms.sh start` prints (or set TOMBSTONE_SKIP_KMS=1)")
    }))
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs the Tink KMS peer; its stdout.
fn peer(args: &[&str], input: &str) -> String {
    let py = std::env::var("TOMBSTONE_KMS_VENV_PYTHON").expect("TOMBSTONE_KMS_VENV_PYTHON");
    common::tink::run_script(&py.into(), "tests/interop/tink_kms_peer.py", args, input)
}

fn kms_sh(cmd: &str) {
    let ok = Command::new("bash")
        .arg(root().join("scripts/kms.sh"))
        .arg(cmd)
        .status()
        .unwrap()
        .success();
    assert!(ok, "scripts/kms.sh {cmd} failed");
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn items() -> Vec<(Vec<u8>, Vec<u8>)> {
    vec![
        (b"".to_vec(), b"".to_vec()),
        (b"ad".to_vec(), b"hello".to_vec()),
        (vec![0, 1, 2], (0..=255u8).collect()),
        (b"orders".to_vec(), vec![7; 5000]),
    ]
}

/// The EDEK of an envelope ciphertext.
fn edek(ct: &[u8]) -> &[u8] {
    let n = u32::from_be_bytes(ct[5..9].try_into().unwrap()) as usize;
    &ct[9..9 + n]
}

/// Tink encrypts with a keyset of its own for `uri`; the crate reads the
/// keyset and decrypts. Then the crate encrypts with a keyset of its own,
/// and Tink decrypts.
fn both_ways(uri: &str, scheme: &str) {
    let items = items();
    let req = json!({
        "kek_uri": uri,
        "items": items.iter().map(|(a, p)| json!({"aad_hex": hex(a), "pt_hex": hex(p)})).collect::<Vec<_>>(),
    });
    let resp: Value =
        serde_json::from_str(&peer(&[&format!("{scheme}-encrypt")], &req.to_string())).unwrap();
    let tink_keyset = resp["keyset"].as_str().unwrap();
    let keyset = Keyset::from_tink_json(tink_keyset).unwrap();
    for (ct, (ad, pt)) in resp["items"].as_array().unwrap().iter().zip(&items) {
        let ct = unhex(ct["ct_hex"].as_str().unwrap());
        assert_eq!(&keyset.decrypt(&ct, ad).unwrap(), pt, "{uri}");
        assert_eq!(keyset.decrypt(&ct, b"wrong"), Err(Error::Decryption));
        if scheme == "vault" {
            assert!(edek(&ct).starts_with(b"vault:v1:"));
        }
    }

    // The reverse: a keyset made here, read by Tink.
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope(uri)).unwrap();
    let cts: Vec<Vec<u8>> = items
        .iter()
        .map(|(ad, pt)| keyset.encrypt(pt, ad).unwrap())
        .collect();
    // One DEK for all four values.
    assert!(cts.iter().all(|c| edek(c) == edek(&cts[0])));
    let info: Value = serde_json::from_str(&peer(&["info"], &keyset.to_tink_json())).unwrap();
    assert_eq!(info["keys"][0]["kek_uri"], uri);
    assert_eq!(info["keys"][0]["key_material_type"], "REMOTE");
    assert_eq!(info["keys"][0]["output_prefix_type"], "TINK");
    assert_eq!(info["keys"][0]["dek_key_size"], 32);
    let req = json!({
        "keyset": keyset.to_tink_json(),
        "items": items.iter().zip(&cts).map(|((a, _), c)| json!({"aad_hex": hex(a), "ct_hex": hex(c)})).collect::<Vec<_>>(),
    });
    let resp: Value =
        serde_json::from_str(&peer(&[&format!("{scheme}-decrypt")], &req.to_string())).unwrap();
    for (got, (_, pt)) in resp["items"].as_array().unwrap().iter().zip(&items) {
        assert_eq!(got["error"], Value::Null, "{uri}");
        assert_eq!(unhex(got["pt_hex"].as_str().unwrap()), *pt);
    }
}

#[test]
fn tink_and_the_crate_read_each_other_over_openbao() {
    let Some(uri) = env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    let _g = lock();
    both_ways(&uri, "vault");
}

#[test]
fn tink_and_the_crate_read_each_other_over_aws_kms() {
    let Some(uri) = env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    let _g = lock();
    both_ways(&uri, "aws");
    // A key alias works as a key URI too.
    let alias = env("TOMBSTONE_AWS_ALIAS_URI").unwrap();
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope(&alias)).unwrap();
    let ct = keyset.encrypt(b"via alias", b"").unwrap();
    let reader = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"via alias");
}

/// Short timeouts, so a paused server fails fast.
fn fast() -> KmsTimeouts {
    KmsTimeouts {
        request: Duration::from_millis(700),
        attempts: 2,
        backoff: Duration::from_millis(50),
    }
}

#[test]
fn openbao_paused_or_stopped_mid_stream() {
    let Some(uri) = env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    let _g = lock();
    let token = env("VAULT_TOKEN").unwrap();
    let addr = env("VAULT_ADDR").unwrap();
    let clients = KmsClients::new().with(
        VaultClient::new(token)
            .with_address(addr)
            .with_timeouts(fast()),
    );
    for (down, up) in [("pause-bao", "resume-bao"), ("stop-bao", "start-bao")] {
        let policy = DekPolicy::default().with_max_values(5);
        let writer = Keyset::generate_with(
            KeyTemplate::kms_envelope(&uri)
                .with_kms_clients(clients.clone())
                .with_dek_policy(policy),
        )
        .unwrap();
        let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
        let early: Vec<Vec<u8>> = (0..5).map(|i| writer.encrypt(&[i], b"").unwrap()).collect();
        reader.decrypt(&early[0], b"").unwrap();
        let other_writer = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
        let uncached = other_writer.encrypt(b"uncached", b"").unwrap();
        kms_sh(down);
        let result = std::panic::catch_unwind(|| {
            for (i, ct) in early.iter().enumerate() {
                assert_eq!(reader.decrypt(ct, b"").unwrap(), [i as u8], "{down}");
            }
            let t = Instant::now();
            let err = writer.encrypt(b"new dek", b"").unwrap_err();
            eprintln!("{down}: new DEK failed after {:?}: {err}", t.elapsed());
            assert!(matches!(err, Error::Kms { .. }), "{err:?}");
            assert!(std::error::Error::source(&err).is_some());
            assert!(t.elapsed() < Duration::from_secs(10));
            let err = reader.decrypt(&uncached, b"").unwrap_err();
            assert!(matches!(err, Error::Kms { .. }), "{err:?}");
        });
        kms_sh(up);
        result.unwrap();
        // Back: both directions recover.
        let ct = writer.encrypt(b"after", b"").unwrap();
        assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"after");
        assert_eq!(reader.decrypt(&uncached, b"").unwrap(), b"uncached");
    }
}

#[test]
fn moto_paused_mid_stream() {
    let Some(uri) = env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    let _g = lock();
    let clients = KmsClients::new()
        .with(tombstone_crypt::kms::AwsKmsClient::from_env().with_timeouts(fast()));
    let writer = Keyset::generate_with(
        KeyTemplate::kms_envelope(&uri)
            .with_kms_clients(clients.clone())
            .with_dek_policy(DekPolicy::default().with_max_values(3)),
    )
    .unwrap();
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
    let early: Vec<Vec<u8>> = (0..3).map(|i| writer.encrypt(&[i], b"").unwrap()).collect();
    reader.decrypt(&early[0], b"").unwrap();
    kms_sh("pause-moto");
    let result = std::panic::catch_unwind(|| {
        for ct in &early {
            reader.decrypt(ct, b"").unwrap();
        }
        let err = writer.encrypt(b"x", b"").unwrap_err();
        eprintln!("pause-moto: {err}");
        assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    });
    kms_sh("resume-moto");
    result.unwrap();
    let ct = writer.encrypt(b"after", b"").unwrap();
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"after");

    // The counters, exact: the writer made two DEKs (one KMS call each)
    // and failed one call while moto was paused (its retries inside the
    // client count as one call); the reader unwrapped two DEKs and found
    // the other three values' DEK cached.
    let w = writer.stats();
    assert_eq!((w.values_encrypted, w.encrypt_failures), (4, 1), "{w:?}");
    assert_eq!(w.deks_created, 2, "{w:?}");
    assert_eq!((w.kms.encrypt.ok, w.kms.encrypt.error), (2, 1), "{w:?}");
    assert!(w.kms.encrypt.duration > Duration::ZERO, "{w:?}");
    let r = reader.stats();
    assert_eq!(r.values_decrypted, 5, "{r:?}");
    assert_eq!(
        (r.deks_unwrapped, r.kms.decrypt.ok, r.kms.decrypt.error),
        (2, 2, 0),
        "{r:?}"
    );
    assert_eq!((r.edek_cache_hits, r.edek_cache_misses), (3, 2), "{r:?}");
    assert_eq!(r.decrypt_failures.total(), 0, "{r:?}");
}

/// Tink's encrypted keyset loads here, and one written here loads in Tink,
/// for `uri` with associated data `ad`.
fn encrypted_keysets(uri: &str, ad: &[u8]) {
    let req = json!({"kek_uri": uri, "associated_data_hex": hex(ad)});
    let resp: Value = serde_json::from_str(&peer(&["keyset-encrypt"], &req.to_string())).unwrap();
    let enc = resp["encrypted_keyset"].as_str().unwrap();
    assert!(!enc.contains("AesGcmKey\",\"value"), "no key in the clear");
    let clear = Keyset::from_tink_json(resp["keyset"].as_str().unwrap()).unwrap();
    let loaded = Keyset::from_encrypted_tink_json(enc, uri, ad).unwrap();
    assert_eq!(loaded.to_tink_json(), clear.to_tink_json());
    if !ad.is_empty() {
        let err = Keyset::from_encrypted_tink_json(enc, uri, b"other").unwrap_err();
        assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    }

    // Written here (a mixed keyset: AES-GCM and an envelope key), read by Tink.
    let mut mine = Keyset::generate();
    mine.rotate_with(KeyTemplate::kms_envelope(uri)).unwrap();
    let enc = mine.to_encrypted_tink_json(uri, ad).unwrap();
    let req = json!({"kek_uri": uri, "associated_data_hex": hex(ad), "encrypted_keyset": enc});
    let resp: Value = serde_json::from_str(&peer(&["keyset-decrypt"], &req.to_string())).unwrap();
    let back = Keyset::from_tink_json(resp["keyset"].as_str().unwrap()).unwrap();
    assert_eq!(back.to_tink_json(), mine.to_tink_json());
    assert_eq!(
        Keyset::from_encrypted_tink_json(&enc, uri, ad)
            .unwrap()
            .to_tink_json(),
        mine.to_tink_json()
    );
}

#[test]
fn encrypted_keysets_with_tink_over_aws_kms() {
    let Some(uri) = env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    let _g = lock();
    encrypted_keysets(&uri, b"");
    encrypted_keysets(&uri, b"keyset for orders");
}

#[test]
fn encrypted_keysets_with_tink_over_openbao() {
    let Some(uri) = env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    let _g = lock();
    encrypted_keysets(&uri, b"");
}

/// The serde layer is synchronous: from inside a tokio runtime (a worker
/// thread of a multi-threaded one, and a current-thread one) a new DEK and
/// an unwrap still work, with no nested-runtime panic.
#[test]
fn kms_calls_work_inside_a_tokio_runtime() {
    let (Some(vault), Some(aws)) = (env("TOMBSTONE_VAULT_KEY_URI"), env("TOMBSTONE_AWS_KEY_URI"))
    else {
        return;
    };
    let _g = lock();
    for uri in [vault, aws] {
        let json = Keyset::generate_with(KeyTemplate::kms_envelope(&uri))
            .unwrap()
            .to_tink_json();
        let multi = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        let j = json.clone();
        let ct = multi
            .block_on(async move {
                tokio::spawn(async move {
                    let ks = Keyset::from_tink_json(&j).unwrap();
                    ks.encrypt(b"in a runtime", b"").unwrap()
                })
                .await
            })
            .unwrap();
        let current = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let pt = current.block_on(async {
            let ks = Keyset::from_tink_json(&json).unwrap();
            ks.decrypt(&ct, b"").unwrap()
        });
        assert_eq!(pt, b"in a runtime");
    }
}

/// One keyset, two KMSs: a key under OpenBao, then a primary under AWS KMS.
/// Tink reads values under both.
#[test]
fn mixed_kek_keysets_are_read_by_tink() {
    let (Some(vault), Some(aws)) = (
        env("TOMBSTONE_VAULT_KEY_URI_2"),
        env("TOMBSTONE_AWS_KEY_URI_2"),
    ) else {
        return;
    };
    let _g = lock();
    let mut keyset = Keyset::generate_with(KeyTemplate::kms_envelope(&vault)).unwrap();
    let old = keyset.encrypt(b"under vault", b"a").unwrap();
    keyset.rotate_with(KeyTemplate::kms_envelope(&aws)).unwrap();
    let new = keyset.encrypt(b"under aws", b"b").unwrap();
    let req = json!({
        "keyset": keyset.to_tink_json(),
        "items": [{"aad_hex": hex(b"a"), "ct_hex": hex(&old)}, {"aad_hex": hex(b"b"), "ct_hex": hex(&new)}],
    });
    let resp: Value = serde_json::from_str(&peer(&["decrypt"], &req.to_string())).unwrap();
    let items = resp["items"].as_array().unwrap();
    assert_eq!(unhex(items[0]["pt_hex"].as_str().unwrap()), b"under vault");
    assert_eq!(unhex(items[1]["pt_hex"].as_str().unwrap()), b"under aws");
}
