//! The owned-buffer path: `Keyset::encrypt_in_place` / `decrypt_in_place`
//! and the serde wrappers' `encrypt_owned` / `decrypt_owned`. What they
//! write is what `encrypt` writes (the other side opens it), the plaintext
//! is encrypted where it lies (same allocation, no regrowth), a tombstone
//! passes through untouched, and every truncated or tampered buffer is
//! rejected and left empty. That no plaintext stays behind in freed memory,
//! on an error or on success, is checked in `tests/freed_memory.rs`.

use crate::common;

use common::envelope::envelope_keyset;
use tombstone_crypt::kms::DekPolicy;
use tombstone_crypt::{
    AadPolicy, Backend, Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Error,
    KeyTemplate, Keyset, Unencrypted,
};

const SIZES: [usize; 5] = [0, 1, 100, 1024, 65536];

fn plaintext(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 251) as u8).collect()
}

/// Every value key type on every backend: AES-128-GCM, AES-256-GCM and an
/// envelope key over the in-process KMS.
fn keysets() -> Vec<(String, Keyset)> {
    let mut backends = vec![Backend::RustCrypto];
    if Backend::DEFAULT != Backend::RustCrypto {
        backends.push(Backend::DEFAULT);
    }
    let mut out = Vec::new();
    for backend in backends {
        for (name, keyset) in [
            (
                "AES-128-GCM",
                Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap(),
            ),
            ("AES-256-GCM", Keyset::generate()),
            (
                "envelope",
                envelope_keyset("fake-kms://in-place", DekPolicy::default()).2,
            ),
        ] {
            let keyset = keyset.with_backend(backend);
            // A warm DEK: the header's length depends on its wrapped form,
            // which is known once the KMS has wrapped it.
            keyset.encrypt(b"warm", b"").unwrap();
            out.push((format!("{name} on {}", backend.name()), keyset));
        }
    }
    out
}

/// A buffer with exactly the room in front and the capacity the in-place
/// path needs, holding `pt` after the room.
fn buffer(keyset: &Keyset, pt: &[u8]) -> (Vec<u8>, usize) {
    let head = keyset.header_len();
    let mut buf = Vec::with_capacity(head + pt.len() + 16);
    buf.resize(head, 0xAA);
    buf.extend_from_slice(pt);
    (buf, head)
}

#[test]
fn in_place_writes_what_encrypt_writes_in_the_same_allocation() {
    for (name, keyset) in keysets() {
        for n in SIZES {
            let pt = plaintext(n);
            let (mut buf, head) = buffer(&keyset, &pt);
            let (ptr, cap) = (buf.as_ptr(), buf.capacity());
            keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
            assert_eq!(buf.as_ptr(), ptr, "{name}, {n} B: encrypted where it lay");
            assert_eq!(buf.capacity(), cap, "{name}, {n} B: no regrowth");
            assert_eq!(buf.len(), keyset.encrypt(&pt, b"ad").unwrap().len());
            // From 8 bytes on, a ciphertext equal to its plaintext is a
            // chance of 2^-64 (at 1 byte it was 1 in 256: a flaky check).
            if n >= 8 {
                assert_ne!(&buf[head..head + n], &pt[..], "{name}, {n} B: encrypted");
            }
            // The other path opens it, and the in-place path opens the other's.
            assert_eq!(keyset.decrypt(&buf, b"ad").unwrap(), pt, "{name}, {n} B");
            let mut other = keyset.encrypt(&pt, b"ad").unwrap();
            keyset.decrypt_in_place(&mut other, b"ad").unwrap();
            assert_eq!(other, pt, "{name}, {n} B");
            let ptr = buf.as_ptr();
            keyset.decrypt_in_place(&mut buf, b"ad").unwrap();
            assert_eq!((buf.as_ptr(), &buf[..]), (ptr, &pt[..]), "{name}, {n} B");
        }
    }
}

#[test]
fn any_room_in_front_works_and_too_much_is_an_error() {
    let keyset = Keyset::generate();
    let pt = plaintext(100);
    let need = keyset.header_len();
    assert_eq!(need, 17);
    for head in [0, 1, need - 1, need, need + 1, 64] {
        let mut buf = vec![0x55; head];
        buf.extend_from_slice(&pt);
        keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
        assert_eq!(buf.len(), 33 + pt.len(), "room {head}");
        assert_eq!(keyset.decrypt(&buf, b"ad").unwrap(), pt, "room {head}");
    }
    let mut buf = pt.clone();
    assert_eq!(
        keyset.encrypt_in_place(&mut buf, 101, b"ad"),
        Err(Error::Headroom {
            head: 101,
            len: 100
        })
    );
    assert!(buf.is_empty(), "emptied on error");
}

#[test]
fn a_deterministic_keyset_refuses_and_empties_the_buffer() {
    let keyset = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let (mut buf, head) = buffer(&keyset, b"a secret value");
    let err = keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap_err();
    assert!(matches!(err, Error::WrongKeyType { .. }), "{err:?}");
    assert!(buf.is_empty());
}

#[test]
fn every_truncation_and_every_flipped_bit_is_rejected_and_empties_the_buffer() {
    for (name, keyset) in keysets() {
        let pt = plaintext(24);
        let ct = keyset.encrypt(&pt, b"ad").unwrap();
        for len in 0..ct.len() {
            let mut buf = ct[..len].to_vec();
            let err = keyset.decrypt_in_place(&mut buf, b"ad").unwrap_err();
            assert!(
                matches!(
                    err,
                    Error::Truncated { .. } | Error::Decryption | Error::Kms { .. }
                ),
                "{name}, cut to {len}: {err:?}"
            );
            assert!(buf.is_empty(), "{name}, cut to {len}");
        }
        for bit in 0..ct.len() * 8 {
            let mut buf = ct.clone();
            buf[bit / 8] ^= 1 << (bit % 8);
            assert!(
                keyset.decrypt_in_place(&mut buf, b"ad").is_err(),
                "{name}, bit {bit} flipped"
            );
            assert!(buf.is_empty(), "{name}, bit {bit} flipped");
        }
        let mut buf = ct.clone();
        assert_eq!(
            keyset.decrypt_in_place(&mut buf, b"other ad"),
            Err(Error::Decryption),
            "{name}"
        );
        assert!(buf.is_empty(), "{name}");
    }
}

#[test]
fn the_serde_wrappers_keep_tombstones_and_bind_the_context() {
    for (name, keyset) in keysets() {
        let ser = EncryptingSerializer::new(Bytes, keyset.clone());
        let de = DecryptingDeserializer::new(Bytes, keyset.clone());
        let ctx = Context::new("orders").with_key(b"order-17");

        // A tombstone passes through untouched, both ways.
        assert_eq!(ser.encrypt_owned(&ctx, None, 0).unwrap(), None, "{name}");
        assert_eq!(de.decrypt_owned(&ctx, None).unwrap(), None, "{name}");

        // An empty value is present, and stays present.
        let buf = ser.plaintext_buffer(0);
        let head = buf.len();
        let ct = ser.encrypt_owned(&ctx, Some(buf), head).unwrap();
        assert_eq!(
            de.decrypt_owned(&ctx, ct).unwrap(),
            Some(Vec::new()),
            "{name}"
        );

        // Same bytes as the codec path reads, bound to the same context.
        let mut buf = ser.plaintext_buffer(5);
        let head = buf.len();
        buf.extend_from_slice(b"hello");
        let ct = ser.encrypt_owned(&ctx, Some(buf), head).unwrap().unwrap();
        assert_eq!(
            tombstone_crypt::Deserializer::deserialize(&de, &ctx, Some(&ct)).unwrap(),
            Some(b"hello".to_vec()),
            "{name}"
        );
        let elsewhere = Context::new("orders").with_key(b"order-18");
        assert_eq!(
            de.decrypt_owned(&elsewhere, Some(ct.clone())),
            Err(Error::Decryption),
            "{name}: moved to another key"
        );
        let loose = DecryptingDeserializer::new(Bytes, keyset).with_aad(AadPolicy::None);
        assert!(loose.decrypt_owned(&ctx, Some(ct)).is_err(), "{name}");
    }
}

#[test]
fn plaintext_passes_through_only_when_asked() {
    let keyset = Keyset::generate();
    let ctx = Context::new("orders");
    let strict = DecryptingDeserializer::new(Bytes, keyset.clone());
    assert!(strict
        .decrypt_owned(&ctx, Some(b"legacy".to_vec()))
        .is_err());
    let lenient =
        DecryptingDeserializer::new(Bytes, keyset).with_unencrypted(Unencrypted::PassThrough);
    assert_eq!(
        lenient
            .decrypt_owned(&ctx, Some(b"legacy".to_vec()))
            .unwrap(),
        Some(b"legacy".to_vec())
    );
}

#[test]
fn a_kms_that_is_down_empties_the_buffer() {
    let (kms, _clients, keyset) = envelope_keyset("fake-kms://down", DekPolicy::default());
    kms.set_down(true);
    let (mut buf, head) = buffer(&keyset, b"a secret value");
    let err = keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    assert!(buf.is_empty());
    kms.set_down(false);
    let (mut buf, head) = buffer(&keyset, b"a secret value");
    keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
    assert_eq!(keyset.decrypt(&buf, b"ad").unwrap(), b"a secret value");
}

/// Before its first data key an envelope key does not know its wrapped
/// key's length: its `header_len` is then room enough for any the crate
/// accepts, so a buffer sized from it never grows (the plaintext is moved
/// to the front once instead); from the first data key on it is exact.
#[test]
fn a_cold_envelope_keys_header_len_is_room_enough() {
    let (_kms, _clients, keyset) = envelope_keyset("fake-kms://cold", DekPolicy::default());
    let pt = plaintext(100);
    let cold = keyset.header_len();
    let (mut buf, head) = buffer(&keyset, &pt);
    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
    keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
    assert_eq!(buf.as_ptr(), ptr, "encrypted where it lay");
    assert_eq!(buf.capacity(), cap, "no regrowth");
    assert_eq!(keyset.decrypt(&buf, b"ad").unwrap(), pt);
    let warm = keyset.header_len();
    assert_eq!(warm, buf.len() - pt.len() - 16, "exact once warm");
    assert!(cold >= warm, "cold {cold}, warm {warm}");
    let (mut buf, head) = buffer(&keyset, &pt);
    let (ptr, cap) = (buf.as_ptr(), buf.capacity());
    keyset.encrypt_in_place(&mut buf, head, b"ad").unwrap();
    assert_eq!((buf.as_ptr(), buf.capacity()), (ptr, cap));
}
