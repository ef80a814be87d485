//! Arbitrary text into `Keyset::from_tink_json`.
//!
//! Nothing may panic. An accepted keyset is well formed (a primary that is
//! enabled, distinct ids, at most `MAX_KEYS` keys); it survives
//! `to_tink_json` and back with the same key ids, statuses and primary, and
//! the JSON it writes is a fixed point. A value encrypted under the original
//! decrypts under the re-read keyset, under each of its first enabled keys;
//! one under a disabled key does not.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, EncryptingSerializer, Error, KeyId,
    KeyStatus, Keyset, Serializer as _, MAX_KEYS,
};

/// How many keys per input get the encrypt-and-decrypt check.
const CHECKED_KEYS: usize = 4;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let ks = match Keyset::from_tink_json(text) {
        Ok(ks) => ks,
        Err(e) => {
            assert!(matches!(e, Error::Keyset { .. }), "unexpected error {e:?}");
            return;
        }
    };
    check_well_formed(&ks);

    let json = ks.to_tink_json();
    let back = Keyset::from_tink_json(&json).expect("what to_tink_json writes reads back");
    let ids = |k: &Keyset| k.keys().collect::<Vec<(KeyId, KeyStatus)>>();
    assert_eq!(ids(&back), ids(&ks), "key ids and statuses");
    assert_eq!(back.primary(), ks.primary(), "primary");
    assert_eq!(back.to_tink_json(), json, "to_tink_json is a fixed point");

    let ctx = Context::new("keyset-fuzz").with_key(b"k");
    let de = DecryptingDeserializer::new(Bytes, back.clone());
    let value = b"value under the original keyset";
    let under = |k: &Keyset| {
        EncryptingSerializer::new(Bytes, k.clone())
            .serialize(&ctx, Some(&value[..]))
            .expect("encryption")
            .expect("a present value stays present")
    };
    let ct = under(&ks);
    assert_eq!(&ct[1..5], &ks.primary().0.to_be_bytes());
    assert_eq!(de.deserialize(&ctx, Some(&ct)), Ok(Some(value.to_vec())));

    for (id, status) in ks.keys().take(CHECKED_KEYS) {
        let mut staged = ks.clone();
        match status {
            KeyStatus::Enabled => {
                staged
                    .set_primary(id)
                    .expect("an enabled key can be primary");
                let ct = under(&staged);
                assert_eq!(de.deserialize(&ctx, Some(&ct)), Ok(Some(value.to_vec())));
            }
            _ => {
                assert_eq!(staged.set_primary(id), Err(Error::KeyNotEnabled(id)));
                staged.enable(id).expect("a disabled key can be enabled");
                staged
                    .set_primary(id)
                    .expect("an enabled key can be primary");
                let ct = under(&staged);
                assert_eq!(de.deserialize(&ctx, Some(&ct)), Err(Error::KeyDisabled(id)));
            }
        }
    }
});

fn check_well_formed(ks: &Keyset) {
    assert!(!ks.is_empty());
    assert!(ks.len() <= MAX_KEYS);
    assert_eq!(ks.keys().len(), ks.len());
    let primary = ks.primary();
    assert!(
        ks.keys()
            .any(|(id, s)| id == primary && s == KeyStatus::Enabled),
        "the primary is an enabled key"
    );
    let mut ids: Vec<KeyId> = ks.keys().map(|(id, _)| id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), ks.len(), "key ids are distinct");
    // Debug names ids, statuses and types, never key bytes: it stays
    // short. The fixed part with a 10-digit primary id is about 91
    // characters; each key adds at most 66 (a 10-digit id, `Destroyed`,
    // "KMS envelope, AES-256-GCM DEKs"). A derived Debug of a 32-byte key
    // (a list of numbers, 96 characters or more) would break the bound.
    let shown = format!("{ks:?}");
    assert!(shown.len() < 128 + 72 * ks.len(), "Debug too long: {shown}");
}
