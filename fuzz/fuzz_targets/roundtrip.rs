//! Structured input: a value (`None` a tombstone), a topic, a record key and
//! an AAD policy. Encrypt then decrypt gives the input back: `None` stays
//! `None`, a present value (empty included) stays present, and a ciphertext
//! is the plaintext plus `OVERHEAD` bytes, under the primary key.
//!
//! The wire format is checked against docs/FORMAT.md independently: the
//! associated data is re-encoded here from the spec and must equal the
//! layer's, and the crypto core opens the parts with the key bytes. A second
//! policy decrypts exactly when its associated data is the same.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tombstone_crypt::__fuzz::aes_gcm_open;
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::{
    AadPolicy, Bincode, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    EncryptingSerializer, Error, Serializer as _,
};
use tombstone_crypt_fuzz::{key_bytes, keyset, RoundtripInput};

fuzz_target!(|input: RoundtripInput| {
    let ks = keyset();
    let mut ctx = Context::new(&input.topic);
    if let Some(k) = &input.key {
        ctx = ctx.with_key(k);
    }
    let policy = AadPolicy::from(input.policy);
    let ser = EncryptingSerializer::new(Bytes, ks.clone()).with_aad(policy);
    let de = DecryptingDeserializer::new(Bytes, ks.clone()).with_aad(policy);

    let want_aad = spec_aad(policy, &ctx);
    assert_eq!(
        ctx.associated_data(policy).as_ref(),
        Ok(&want_aad),
        "AAD differs from the spec"
    );

    let ct = ser
        .serialize(&ctx, input.value.as_deref())
        .expect("encryption");
    let Some(value) = &input.value else {
        assert_eq!(ct, None, "a tombstone became a value");
        assert_eq!(de.deserialize(&ctx, None), Ok(None));
        return;
    };
    let ct = ct.expect("a present value became a tombstone");
    assert_eq!(ct.len(), value.len() + OVERHEAD, "ciphertext length");
    assert_eq!(ct[0], 0x01, "TINK prefix");
    assert_eq!(&ct[1..5], &ks.primary().0.to_be_bytes(), "key id");
    assert_eq!(de.deserialize(&ctx, Some(&ct)), Ok(Some(value.clone())));

    // The crypto core with the key bytes and the spec's AAD opens it.
    let key = key_bytes(ks.primary()).expect("the primary's bytes are known");
    assert_eq!(
        aes_gcm_open(key, &ct[5..17], &want_aad, &ct[17..]).as_ref(),
        Ok(value)
    );

    // Another policy: decrypts iff it binds the same bytes.
    let other = AadPolicy::from(input.other_policy);
    let de_other = DecryptingDeserializer::new(Bytes, ks.clone()).with_aad(other);
    let got = de_other.deserialize(&ctx, Some(&ct));
    if spec_aad(other, &ctx) == want_aad {
        assert_eq!(got, Ok(Some(value.clone())));
    } else {
        assert_eq!(got, Err(Error::Decryption));
    }

    // Any flipped bit of the body or tag fails (one per input, chosen by it).
    let mut bad = ct.clone();
    let bit = value.len().wrapping_mul(31).wrapping_add(input.topic.len()) % ((ct.len() - 5) * 8);
    bad[5 + bit / 8] ^= 1 << (bit % 8);
    assert_eq!(de.deserialize(&ctx, Some(&bad)), Err(Error::Decryption));

    // The same value through a typed codec.
    let ser = EncryptingSerializer::new(Bincode::<Vec<u8>>::new(), ks.clone()).with_aad(policy);
    let de = DecryptingDeserializer::new(Bincode::<Vec<u8>>::new(), ks.clone()).with_aad(policy);
    let ct = ser
        .serialize(&ctx, Some(value))
        .expect("bincode encoding")
        .expect("a present value became a tombstone");
    assert!(ct.len() > value.len() + OVERHEAD, "bincode adds a length");
    assert_eq!(de.deserialize(&ctx, Some(&ct)), Ok(Some(value.clone())));
});

/// The associated data as docs/FORMAT.md writes it.
fn spec_aad(policy: AadPolicy, ctx: &Context<'_>) -> Vec<u8> {
    let key = match policy {
        AadPolicy::None => return Vec::new(),
        AadPolicy::Topic => None,
        _ => ctx.key(),
    };
    let mut out = Vec::new();
    out.extend_from_slice(&(ctx.topic().len() as u32).to_be_bytes());
    out.extend_from_slice(ctx.topic().as_bytes());
    match key {
        None => out.push(0),
        Some(k) => {
            out.push(1);
            out.extend_from_slice(&(k.len() as u32).to_be_bytes());
            out.extend_from_slice(k);
        }
    }
    out
}
