//! Arbitrary bytes as KMS envelope ciphertexts (`KmsEnvelopeAeadKey`),
//! under a keyset whose envelope key's KMS is the in-process `FakeKms`.
//!
//! Two legs: the input as a whole ciphertext, and the input spliced into a
//! genuine one (the first byte picks which and where, the rest overwrites
//! it from there, the second byte may cut it short), so the parser, the
//! EDEK length checks, the KMS unwrap, the reader cache and AES-GCM all see
//! hostile bytes. Nothing may panic; an input makes at most one KMS call;
//! whatever is accepted is one of the genuine plaintexts; every rejection
//! is one of the errors a ciphertext can call for.
#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{Error, KeyTemplate, Keyset};

const AD: &[u8] = b"orders/o-1";

struct Fixture {
    kms: FakeKms,
    reader: Keyset,
    plaintexts: Vec<Vec<u8>>,
    ciphertexts: Vec<Vec<u8>>,
}

fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(|| {
        let kms = FakeKms::new();
        let clients = KmsClients::new().with(kms.clone());
        let mut writer = Keyset::generate();
        writer
            .rotate_with(
                KeyTemplate::kms_envelope("fake-kms://fuzz")
                    .with_kms_clients(clients.clone())
                    .with_dek_policy(DekPolicy::default().with_max_values(2)),
            )
            .expect("envelope key");
        let plaintexts: Vec<Vec<u8>> = vec![vec![], b"v".to_vec(), vec![7; 100]];
        let ciphertexts = plaintexts
            .iter()
            .map(|p| writer.encrypt(p, AD).expect("encrypt"))
            .collect();
        let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
            .expect("reader")
            .with_dek_policy(DekPolicy::default().with_cache_capacity(2));
        Fixture {
            kms,
            reader,
            plaintexts,
            ciphertexts,
        }
    })
}

fn check(f: &Fixture, ct: &[u8]) {
    let before = f.kms.decrypt_calls();
    let got = f.reader.decrypt(ct, AD);
    assert!(
        f.kms.decrypt_calls() <= before + 1,
        "one value made more than one KMS call"
    );
    match got {
        Ok(pt) => assert!(f.plaintexts.contains(&pt), "a forged value was accepted"),
        Err(
            Error::Truncated { .. }
            | Error::UnsupportedVersion
            | Error::UnknownKeyId(_)
            | Error::KeyDisabled(_)
            | Error::Decryption
            | Error::Kms { .. },
        ) => {}
        Err(other) => panic!("unexpected error for a ciphertext: {other:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let f = fixture();
    check(f, data);
    if let [sel, cut, rest @ ..] = data {
        let mut ct = f.ciphertexts[usize::from(*sel) % f.ciphertexts.len()].clone();
        let at = usize::from(*sel / 3) % ct.len();
        for (d, s) in ct[at..].iter_mut().zip(rest) {
            *d = *s;
        }
        if *cut > 200 {
            ct.truncate(usize::from(*cut - 200));
        }
        check(f, &ct);
    }
});
