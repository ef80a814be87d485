//! Arbitrary bytes into `DecryptingDeserializer` (with `Bytes` and with
//! `Bincode` of a small struct) under a fixed keyset.
//!
//! The first byte picks the context and the AAD policy; the rest is the
//! ciphertext. Nothing may panic; whatever is accepted must be genuine: its
//! key id is an enabled key of the keyset, its length is the plaintext's
//! plus the overhead, the crypto core opens it to the same plaintext, it
//! fails under another context, and the plaintext re-encrypted decrypts to
//! the same value. Every rejection must be the error its bytes call for.
//!
//! The same bytes are then taken as a plaintext, encrypted and decrypted
//! through `Bincode` and `Utf8`, so the inner codecs see arbitrary input
//! after authentication as well.
//!
//! And as a deterministic (AES-SIV) record key through
//! `DeterministicDeserializer` under a fixed SIV keyset: nothing panics,
//! a rejection is the error its bytes call for, and whatever is accepted
//! is genuine: encrypting its plaintext again gives the very same bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::__fuzz::aes_gcm_open;
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::{
    AadPolicy, Bincode, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    DeterministicDeserializer, DeterministicSerializer, EncryptingSerializer, Error, KeyId,
    KeyStatus, Keyset, Serializer as _, Utf8,
};
use tombstone_crypt_fuzz::{context, key_bytes, keyset, policy, siv_keyset, Small, SIV_PRIMARY};

fuzz_target!(|data: &[u8]| {
    let Some((&selector, ct)) = data.split_first() else {
        return;
    };
    let ctx = context(selector);
    let policy = policy(selector);
    let plaintext = bytes_leg(&ctx, policy, ct);
    bincode_leg(&ctx, policy, ct, plaintext.as_deref());
    plaintext_leg(&ctx, policy, ct);
    siv_leg(&ctx, policy, ct);
});

/// The bytes as a deterministic ciphertext of a record key.
fn siv_leg(ctx: &Context<'_>, policy: AadPolicy, ct: &[u8]) {
    const MIN: usize = 5 + 16;
    let ks = siv_keyset();
    let de = DeterministicDeserializer::new(Bytes, ks.clone()).with_aad(policy);
    match de.deserialize(ctx, Some(ct)) {
        Ok(None) => panic!("present bytes became a tombstone"),
        Ok(Some(pt)) => {
            assert_eq!(ct.len(), pt.len() + MIN);
            assert_eq!(
                prefix_id(ct),
                SIV_PRIMARY,
                "accepted under a key that is not enabled"
            );
            let ser = DeterministicSerializer::new(Bytes, ks.clone()).with_aad(policy);
            let again = ser.serialize(ctx, Some(&pt[..])).expect("re-encryption");
            assert_eq!(
                again.as_deref(),
                Some(ct),
                "deterministic: the same bytes again"
            );
        }
        Err(e) => {
            let want = expected_rejection(ks, ct, MIN);
            assert_eq!(e, want, "wrong error for {} bytes", ct.len());
        }
    }
    // The same bytes as a plaintext key: encrypted, then decrypted back.
    let ser = DeterministicSerializer::new(Bytes, ks.clone()).with_aad(policy);
    let key = ser
        .serialize(ctx, Some(ct))
        .expect("encryption")
        .expect("a present key stays present");
    assert_eq!(de.deserialize(ctx, Some(&key)), Ok(Some(ct.to_vec())));
}

/// The ciphertext through `DecryptingDeserializer<Bytes>`; the plaintext if
/// it was accepted.
fn bytes_leg(ctx: &Context<'_>, policy: AadPolicy, ct: &[u8]) -> Option<Vec<u8>> {
    let ks = keyset();
    let de = DecryptingDeserializer::new(Bytes, ks.clone()).with_aad(policy);
    assert_eq!(de.deserialize(ctx, None), Ok(None), "a tombstone stays one");
    match de.deserialize(ctx, Some(ct)) {
        Ok(None) => panic!("present bytes became a tombstone"),
        Ok(Some(pt)) => {
            check_genuine(ctx, policy, ct, &pt);
            Some(pt)
        }
        Err(e) => {
            check_rejection(ct, &e);
            None
        }
    }
}

/// The id in a ciphertext's prefix.
fn prefix_id(ct: &[u8]) -> KeyId {
    KeyId(u32::from_be_bytes([ct[1], ct[2], ct[3], ct[4]]))
}

fn check_genuine(ctx: &Context<'_>, policy: AadPolicy, ct: &[u8], pt: &[u8]) {
    let ks = keyset();
    assert_eq!(
        ct.len(),
        pt.len() + OVERHEAD,
        "length is plaintext + overhead"
    );
    assert_eq!(ct[0], 0x01, "accepted a ciphertext without the TINK prefix");
    let id = prefix_id(ct);
    assert!(
        ks.keys().any(|(k, s)| k == id && s == KeyStatus::Enabled),
        "accepted a ciphertext under key id {id}, not an enabled key of the keyset"
    );
    // The crypto core, given the key bytes, the AAD and the parts, agrees.
    let key = key_bytes(id).expect("every key of the fixed keyset is known");
    let aad = ctx.associated_data(policy).expect("fixed contexts encode");
    assert_eq!(
        aes_gcm_open(key, &ct[5..17], &aad, &ct[17..]).as_deref(),
        Ok(pt),
        "the crypto core does not open what the layer accepted"
    );
    // Bound to its context: another topic does not decrypt (unless the
    // policy binds nothing).
    let de = DecryptingDeserializer::new(Bytes, ks.clone()).with_aad(policy);
    let elsewhere = Context::new("elsewhere");
    let moved = de.deserialize(&elsewhere, Some(ct));
    if policy == AadPolicy::None {
        assert_eq!(moved, Ok(Some(pt.to_vec())));
    } else {
        assert_eq!(moved, Err(Error::Decryption), "moved to another topic");
    }
    // The plaintext re-encrypted decrypts to the same value.
    let ser = EncryptingSerializer::new(Bytes, ks.clone()).with_aad(policy);
    let again = ser
        .serialize(ctx, Some(pt))
        .expect("re-encryption")
        .expect("a present value stays present");
    assert_eq!(again.len(), ct.len());
    assert_eq!(prefix_id(&again), ks.primary());
    assert_eq!(de.deserialize(ctx, Some(&again)), Ok(Some(pt.to_vec())));
}

/// A rejection is the error its bytes call for, checked in the order of the
/// format: length, version, key id, status, then authentication.
fn check_rejection(ct: &[u8], e: &Error) {
    let want = expected_rejection(keyset(), ct, OVERHEAD);
    assert_eq!(*e, want, "wrong error for {} bytes", ct.len());
    // An error never carries the bytes it was given.
    let shown = format!("{e} {e:?}");
    assert!(shown.len() < 200, "error message too long: {shown}");
}

/// The error `ct` calls for under `ks`, whose shortest ciphertext is `min`
/// bytes: length, version, key id, status, then authentication.
fn expected_rejection(ks: &Keyset, ct: &[u8], min: usize) -> Error {
    if ct.len() < min {
        Error::Truncated { len: ct.len(), min }
    } else if ct[0] != 0x01 {
        Error::UnsupportedVersion
    } else {
        let id = prefix_id(ct);
        match ks.keys().find(|(k, _)| *k == id) {
            None => Error::UnknownKeyId(id),
            Some((_, KeyStatus::Disabled)) => Error::KeyDisabled(id),
            Some(_) => Error::Decryption,
        }
    }
}

/// The ciphertext through `DecryptingDeserializer<Bincode<Small>>`: the
/// same verdict as the bytes leg, then bincode's.
fn bincode_leg(ctx: &Context<'_>, policy: AadPolicy, ct: &[u8], plaintext: Option<&[u8]>) {
    let ks = keyset();
    let de = DecryptingDeserializer::new(Bincode::<Small>::new(), ks.clone()).with_aad(policy);
    let got = de.deserialize(ctx, Some(ct));
    let Some(pt) = plaintext else {
        assert!(got.is_err(), "bincode accepted what bytes rejected");
        return;
    };
    let direct = Bincode::<Small>::new().deserialize(ctx, Some(pt));
    assert_eq!(
        got, direct,
        "decrypt-then-bincode differs from bincode alone"
    );
    if let Ok(Some(value)) = got {
        roundtrip_small(ctx, policy, &value);
    }
}

/// A decoded value re-encrypted through `Bincode` decrypts to itself.
fn roundtrip_small(ctx: &Context<'_>, policy: AadPolicy, value: &Small) {
    let ks = keyset();
    let ser = EncryptingSerializer::new(Bincode::<Small>::new(), ks.clone()).with_aad(policy);
    let de = DecryptingDeserializer::new(Bincode::<Small>::new(), ks.clone()).with_aad(policy);
    let ct = ser
        .serialize(ctx, Some(value))
        .expect("a decoded value encodes")
        .expect("a present value stays present");
    assert_eq!(de.deserialize(ctx, Some(&ct)), Ok(Some(value.clone())));
}

/// The bytes as a plaintext: encrypted as `Bytes`, decrypted through
/// `Bincode` and `Utf8`, each agreeing with the codec alone.
fn plaintext_leg(ctx: &Context<'_>, policy: AadPolicy, pt: &[u8]) {
    let ks = keyset();
    let ser = EncryptingSerializer::new(Bytes, ks.clone()).with_aad(policy);
    let ct = ser
        .serialize(ctx, Some(pt))
        .expect("encryption")
        .expect("a present value stays present");
    let de = DecryptingDeserializer::new(Bincode::<Small>::new(), ks.clone()).with_aad(policy);
    let got = de.deserialize(ctx, Some(&ct));
    assert_eq!(got, Bincode::<Small>::new().deserialize(ctx, Some(pt)));
    match got {
        Ok(Some(value)) => roundtrip_small(ctx, policy, &value),
        Ok(None) => panic!("present bytes became a tombstone"),
        Err(e) => assert!(
            matches!(
                e,
                Error::Codec {
                    codec: "bincode",
                    ..
                }
            ),
            "unexpected error {e:?}"
        ),
    }
    let de = DecryptingDeserializer::new(Utf8, ks.clone()).with_aad(policy);
    match (de.deserialize(ctx, Some(&ct)), std::str::from_utf8(pt)) {
        (Ok(Some(s)), Ok(want)) => assert_eq!(s, want),
        (Err(Error::Codec { codec: "utf8", .. }), Err(_)) => {}
        (got, want) => panic!("utf8 leg: {got:?} for {want:?}"),
    }
}
