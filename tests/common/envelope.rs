//! An envelope keyset over the in-process KMS of the `test-hooks` feature.
#![allow(dead_code)]

use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{KeyTemplate, Keyset};

/// A fresh in-process KMS, the client list that holds it, and a keyset with
/// one envelope key whose KEK is `uri` in that KMS, under `policy`.
pub fn envelope_keyset(uri: &str, policy: DekPolicy) -> (FakeKms, KmsClients, Keyset) {
    let kms = FakeKms::new();
    let clients = KmsClients::new().with(kms.clone());
    let keyset = Keyset::generate_with(
        KeyTemplate::kms_envelope(uri)
            .with_kms_clients(clients.clone())
            .with_dek_policy(policy),
    )
    .unwrap();
    (kms, clients, keyset)
}
