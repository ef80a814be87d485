//! Subject keys whose KEK is in a KMS (an envelope key's keyset: AWS KMS in
//! moto, Vault transit in OpenBao, the loopback servers of
//! `scripts/kms.sh`): the KMS calls a writer and a reader make, counted at
//! the client, for many subjects and many values. The KEK's own DEK is
//! reused (`DekPolicy`), so a subject's DEK costs a local AES-GCM wrap, not
//! a KMS call: a handful of calls per process, where Tink's KMS envelope
//! AEAD makes one per value. Skipped where the servers' environment
//! (`target/kms.env`) is not set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tombstone_crypt::kms::{DekPolicy, KmsAead, KmsClient, KmsClients};
use tombstone_crypt::shred::{MemoryKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::{
    Context, Deserializer as _, Error, KeyTemplate, Keyset, Serializer as _, Utf8,
};
use zeroize::Zeroizing;

/// A KMS client that counts the calls its keys serve.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn KmsClient>,
    calls: Arc<AtomicUsize>,
}

#[derive(Debug)]
struct CountingAead {
    inner: Arc<dyn KmsAead>,
    calls: Arc<AtomicUsize>,
}

impl KmsAead for CountingAead {
    fn encrypt(&self, pt: &[u8], ad: &[u8]) -> Result<Vec<u8>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.encrypt(pt, ad)
    }
    fn decrypt(&self, ct: &[u8], ad: &[u8]) -> Result<Zeroizing<Vec<u8>>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.inner.decrypt(ct, ad)
    }
}

impl KmsClient for Counting {
    fn supports(&self, uri: &str) -> bool {
        self.inner.supports(uri)
    }
    fn get_aead(&self, uri: &str) -> Result<Arc<dyn KmsAead>, Error> {
        Ok(Arc::new(CountingAead {
            inner: self.inner.get_aead(uri)?,
            calls: Arc::clone(&self.calls),
        }))
    }
}

fn env(name: &str) -> Option<String> {
    let v = std::env::var(name).ok().filter(|v| !v.is_empty());
    if v.is_none() {
        eprintln!("{name} is not set (scripts/kms.sh start; . target/kms.env): skipped");
    }
    v
}

/// A writer makes `subjects` DEKs and writes `values` values over them; a
/// new process's reader reads them all back. Returns the KMS calls of the
/// writer and of the reader.
/// `tink_like`: the KEK takes a new DEK of its own for each wrap and
/// caches none (Tink's envelope AEAD): the negative control.
fn calls(
    uri: &str,
    inner: Arc<dyn KmsClient>,
    subjects: usize,
    values: usize,
    tink_like: bool,
) -> (usize, usize) {
    let counted = |calls: &Arc<AtomicUsize>| {
        KmsClients::new().with(Counting {
            inner: Arc::clone(&inner),
            calls: Arc::clone(calls),
        })
    };
    let (w_calls, r_calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let policy = || {
        if tink_like {
            DekPolicy::default()
                .with_max_values(1)
                .with_cache_capacity(0)
        } else {
            DekPolicy::default()
        }
    };
    let kek =
        Keyset::generate_with(KeyTemplate::kms_envelope(uri).with_kms_clients(counted(&w_calls)))
            .unwrap()
            .with_dek_policy(policy());
    let store = Arc::new(MemoryKeyStore::new());
    let writer = SubjectEncrypting::new(
        Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store) as _).unwrap()),
        Utf8,
    );
    let name = |i: usize| format!("subject-{}", i % subjects);
    let written: Vec<Vec<u8>> = (0..values)
        .map(|i| {
            let s = name(i);
            let ctx = Context::new("t").with_key(s.as_bytes());
            writer.serialize(&ctx, Some(&s)).unwrap().unwrap()
        })
        .collect();
    // The reader: the same KEK (its keyset holds only the KMS key's URI),
    // loaded afresh, with clients of its own.
    let reader_kek = Keyset::from_tink_json_with(&kek.to_tink_json(), &counted(&r_calls))
        .unwrap()
        .with_dek_policy(policy());
    let reader: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(
        Arc::new(SubjectKeys::create(reader_kek, store).unwrap()),
        Utf8,
    );
    for (i, v) in written.iter().enumerate() {
        let s = name(i);
        let ctx = Context::new("t").with_key(s.as_bytes());
        assert_eq!(
            reader.deserialize(&ctx, Some(v)).unwrap().as_deref(),
            Some(s.as_str())
        );
    }
    (
        w_calls.load(Ordering::SeqCst),
        r_calls.load(Ordering::SeqCst),
    )
}

fn check(uri: &str, inner: Arc<dyn KmsClient>) {
    let (subjects, values) = (500, 5000);
    let (w, r) = calls(uri, Arc::clone(&inner), subjects, values, false);
    eprintln!("{uri}: {subjects} subjects, {values} values: {w} KMS calls writing, {r} reading");
    // One wrap of the KEK's DEK for the writer, one unwrap for the reader
    // (its EDEK cache): a per-subject or per-value call would be hundreds.
    assert!(w <= 2, "the writer called the KMS {w} times");
    assert!(r <= 2, "the reader called the KMS {r} times");
    assert!(w >= 1 && r >= 1, "the KEK never reached the KMS");
    // The control: a KEK that calls the KMS for each wrap and unwrap (the
    // naming key and each subject's DEK) fails the bound. A tenth of the
    // subjects and values: a call to moto took about 0.1 s in the test
    // command (1,000 of them, 149 s), and the bound (2) is still far below
    // the 51 it makes.
    let (subjects, values) = (subjects / 10, values / 10);
    let (w, r) = calls(uri, inner, subjects, values, true);
    eprintln!("control, {subjects} subjects, {values} values: {w} KMS calls writing, {r} reading");
    assert!(w > subjects && r >= subjects, "the control met the bound");
}

#[cfg(feature = "aws-kms")]
#[test]
fn a_kek_in_aws_kms_costs_a_few_kms_calls_for_many_subjects_and_values() {
    let Some(uri) = env("TOMBSTONE_AWS_KEY_URI") else {
        return;
    };
    check(
        &uri,
        Arc::new(tombstone_crypt::kms::AwsKmsClient::from_env()),
    );
}

#[cfg(feature = "vault")]
#[test]
fn a_kek_in_openbao_costs_a_few_kms_calls_for_many_subjects_and_values() {
    let Some(uri) = env("TOMBSTONE_VAULT_KEY_URI") else {
        return;
    };
    let token = std::env::var("VAULT_TOKEN").unwrap();
    let addr = std::env::var("VAULT_ADDR").unwrap();
    check(
        &uri,
        Arc::new(tombstone_crypt::kms::VaultClient::new(token).with_address(addr)),
    );
}
