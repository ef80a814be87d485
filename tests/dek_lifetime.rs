//! How long a data key (DEK) of a KMS envelope key lives: a writer never
//! encrypts under a DEK older than `max_age`, and an expired DEK is dropped
//! at the latest on the next use of its key, idle or not; a reader's
//! EDEK -> DEK cache entry lives for the cache TTL from its unwrap, then
//! is dropped and unwrapped again through the KMS.
//!
//! Time is moved with the test clock (`FakeKms::advance_clock`), never
//! slept; the KMS calls and the DEKs held are counted. The clock and the
//! count are process-wide, so every test here holds one lock.

use crate::common;

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use common::envelope::envelope_keyset;
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, EncryptingSerializer, Keyset,
    Serializer as _,
};

const URI: &str = "fake-kms://tests/dek-lifetime";
const HOUR: Duration = Duration::from_secs(3600);
const MINUTE: Duration = Duration::from_secs(60);

/// One test at a time: they move the process's clock and count its DEKs.
fn serial() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(PoisonError::into_inner)
}

fn setup(policy: DekPolicy) -> (FakeKms, KmsClients, Keyset) {
    envelope_keyset(URI, policy)
}

/// The EDEK of an envelope ciphertext.
fn edek(ct: &[u8]) -> &[u8] {
    let n = u32::from_be_bytes(ct[5..9].try_into().unwrap()) as usize;
    &ct[9..9 + n]
}

/// A writer idle past `max_age`: its next value is under a new DEK, and
/// the old DEK is gone from memory (the writer's copy and the copy in its
/// own reader cache); reading an old value unwraps its DEK again.
#[test]
fn an_idle_writers_expired_dek_is_replaced_and_dropped() {
    let _serial = serial();
    let held = FakeKms::deks_in_memory();
    let (kms, _, keyset) = setup(DekPolicy::default());
    let old = keyset.encrypt(b"before", b"").unwrap();
    assert_eq!(kms.encrypt_calls(), 1);
    assert_eq!(FakeKms::deks_in_memory(), held + 1);

    FakeKms::advance_clock(HOUR + Duration::from_secs(1));
    let new = keyset.encrypt(b"after", b"").unwrap();
    assert_eq!(
        kms.encrypt_calls(),
        2,
        "a DEK past max_age encrypts no more"
    );
    assert_ne!(edek(&old), edek(&new));
    assert_eq!(
        FakeKms::deks_in_memory(),
        held + 1,
        "the expired DEK is still held beside the new one"
    );

    assert_eq!(kms.decrypt_calls(), 0);
    assert_eq!(keyset.decrypt(&old, b"").unwrap(), b"before");
    assert_eq!(
        kms.decrypt_calls(),
        1,
        "the expired DEK was served from the cache, not unwrapped again"
    );
    assert_eq!(keyset.decrypt(&new, b"").unwrap(), b"after");
    assert_eq!(kms.decrypt_calls(), 1, "the current DEK is still cached");
}

/// Within `max_age` an idle writer keeps its DEK (no KMS call); one
/// second past it, the next value gets a new one, through the serde
/// wrapper and through its blocking work alike, and no value is ever
/// encrypted under the old DEK.
#[test]
fn a_writer_never_encrypts_under_an_expired_dek() {
    let _serial = serial();
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_age(10 * MINUTE));
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let ctx = Context::new("t").with_key(b"k");
    let first = ser.serialize(&ctx, Some(&b"1"[..])).unwrap().unwrap();
    FakeKms::advance_clock(10 * MINUTE - Duration::from_secs(1));
    assert!(ser.blocking_work().is_none(), "the DEK is still young");
    let second = ser.serialize(&ctx, Some(&b"2"[..])).unwrap().unwrap();
    assert_eq!(edek(&first), edek(&second));
    assert_eq!(kms.encrypt_calls(), 1);

    FakeKms::advance_clock(Duration::from_secs(1));
    let work = ser
        .blocking_work()
        .expect("an expired DEK makes a new one due");
    work.run().unwrap();
    assert_eq!(kms.encrypt_calls(), 2);
    let third = ser.serialize(&ctx, Some(&b"3"[..])).unwrap().unwrap();
    assert_ne!(edek(&first), edek(&third));
    assert_eq!(kms.encrypt_calls(), 2, "the DEK made ahead is used");
}

/// A reader's cache entry lives for the cache TTL (by default the
/// policy's `max_age`) from its unwrap, however often it is used: one
/// second before, a hit; at the TTL, the DEK is unwrapped again.
#[test]
fn a_readers_cached_dek_expires_and_is_unwrapped_again() {
    let _serial = serial();
    let (kms, clients, writer) = setup(DekPolicy::default());
    let ct = writer.encrypt(b"v", b"").unwrap();
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
    drop(writer);
    let held = FakeKms::deks_in_memory();

    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
    assert_eq!(kms.decrypt_calls(), 1);
    assert_eq!(FakeKms::deks_in_memory(), held + 1);
    for _ in 0..59 {
        FakeKms::advance_clock(MINUTE);
        assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
    }
    FakeKms::advance_clock(MINUTE - Duration::from_secs(1));
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
    assert_eq!(kms.decrypt_calls(), 1, "a hit within the TTL");

    FakeKms::advance_clock(Duration::from_secs(1));
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
    assert_eq!(
        kms.decrypt_calls(),
        2,
        "a DEK cached for max_age is unwrapped again"
    );
    assert_eq!(FakeKms::deks_in_memory(), held + 1, "one copy, the new one");
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
    assert_eq!(kms.decrypt_calls(), 2);
}

/// An expired cache entry is dropped on the next use of its envelope key
/// even when that use is for another DEK; and a deserializer offers the
/// unwrap of an expired DEK as blocking work (it is a KMS call).
#[test]
fn expired_cache_entries_are_dropped_on_the_next_use() {
    let _serial = serial();
    let (kms, clients, writer) = setup(DekPolicy::default().with_max_values(1));
    let a = writer.encrypt(b"a", b"").unwrap();
    let b = writer.encrypt(b"b", b"").unwrap();
    assert_ne!(edek(&a), edek(&b));
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
    drop(writer);
    let held = FakeKms::deks_in_memory();
    let de = DecryptingDeserializer::new(Bytes, reader);
    let ctx = Context::new("t");

    // The associated data differs (a decryption error), but the DEK is
    // unwrapped first.
    de.deserialize_slice(&ctx, &a).unwrap_err();
    assert_eq!(kms.decrypt_calls(), 1);
    FakeKms::advance_clock(40 * MINUTE);
    assert!(de.blocking_work(&b).is_some(), "b's DEK is not cached yet");
    let _ = de.deserialize_slice(&ctx, &b);
    assert_eq!(kms.decrypt_calls(), 2);
    assert_eq!(FakeKms::deks_in_memory(), held + 2);
    assert!(de.blocking_work(&a).is_none(), "a's DEK is cached");

    // a's DEK is now 70 minutes old, b's 30.
    FakeKms::advance_clock(30 * MINUTE);
    assert!(
        de.blocking_work(&a).is_some(),
        "unwrapping an expired DEK again is blocking work"
    );
    assert!(de.blocking_work(&b).is_none());
    let _ = de.deserialize_slice(&ctx, &b);
    assert_eq!(kms.decrypt_calls(), 2, "b's DEK is still cached");
    assert_eq!(
        FakeKms::deks_in_memory(),
        held + 1,
        "a's expired DEK is still held after a use of the key"
    );
    let _ = de.deserialize_slice(&ctx, &a);
    assert_eq!(kms.decrypt_calls(), 3, "a's DEK is unwrapped again");
}

/// Many threads reading under one expired DEK at once: exactly one KMS
/// call unwraps it again, and every value decrypts.
#[test]
fn one_unwrap_per_expired_dek_under_contention() {
    let _serial = serial();
    let (kms, clients, writer) = setup(DekPolicy::default());
    let ct = writer.encrypt(b"shared", b"").unwrap();
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"shared");
    assert_eq!(kms.decrypt_calls(), 1);
    FakeKms::advance_clock(2 * HOUR);
    kms.set_delay(Duration::from_millis(50));
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"shared");
                }
            });
        }
    });
    assert_eq!(kms.decrypt_calls(), 2);
}

/// The shred the TTL promises: once a cached DEK is past the TTL, a reader
/// whose KMS now refuses (the KEK disabled, the KMS down) decrypts nothing
/// under it, and holds no DEK any more: neither the expired cache entry
/// nor the idle writer's expired DEK.
#[test]
fn past_the_ttl_nothing_decrypts_without_the_kms() {
    let _serial = serial();
    let held = FakeKms::deks_in_memory();
    let (kms, _, keyset) = setup(DekPolicy::default());
    let ct = keyset.encrypt(b"secret", b"").unwrap();
    assert_eq!(FakeKms::deks_in_memory(), held + 1);
    kms.set_down(true);
    FakeKms::advance_clock(HOUR - Duration::from_secs(1));
    assert_eq!(
        keyset.decrypt(&ct, b"").unwrap(),
        b"secret",
        "within the TTL"
    );

    FakeKms::advance_clock(Duration::from_secs(1));
    let err = keyset.decrypt(&ct, b"").unwrap_err();
    assert!(matches!(err, tombstone_crypt::Error::Kms { .. }), "{err:?}");
    assert_eq!(
        FakeKms::deks_in_memory(),
        held,
        "the expired DEK is dropped"
    );
    assert!(keyset.encrypt(b"more", b"").is_err(), "no new DEK either");
}

/// `with_cache_ttl` sets the readers' TTL apart from `max_age`: shorter,
/// a cached DEK (the writer's own copy too) is unwrapped again while the
/// writer still encrypts under it; longer, a reader keeps a DEK the writer
/// has replaced; zero, every value read is an unwrap.
#[test]
fn the_cache_ttl_is_its_own_setting() {
    let _serial = serial();
    let short = DekPolicy::default().with_cache_ttl(10 * MINUTE);
    assert_eq!((short.max_age(), short.cache_ttl()), (HOUR, 10 * MINUTE));
    let (kms, _, keyset) = setup(short);
    let first = keyset.encrypt(b"1", b"").unwrap();
    FakeKms::advance_clock(10 * MINUTE);
    let second = keyset.encrypt(b"2", b"").unwrap();
    assert_eq!(edek(&first), edek(&second), "the writer keeps its DEK");
    assert_eq!(kms.encrypt_calls(), 1);
    assert_eq!(keyset.decrypt(&first, b"").unwrap(), b"1");
    assert_eq!(keyset.decrypt(&second, b"").unwrap(), b"2");
    assert_eq!(
        kms.decrypt_calls(),
        1,
        "the cached copy expired: one unwrap"
    );

    let (kms, clients, writer) = setup(DekPolicy::default().with_max_age(10 * MINUTE));
    let old = writer.encrypt(b"old", b"").unwrap();
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
        .unwrap()
        .with_dek_policy(DekPolicy::default().with_cache_ttl(2 * HOUR));
    assert_eq!(reader.decrypt(&old, b"").unwrap(), b"old");
    FakeKms::advance_clock(HOUR);
    writer.encrypt(b"new", b"").unwrap();
    assert_eq!(kms.encrypt_calls(), 2);
    assert_eq!(reader.decrypt(&old, b"").unwrap(), b"old");
    assert_eq!(kms.decrypt_calls(), 1, "kept for the reader's own TTL");

    let (kms, _, keyset) = setup(DekPolicy::default().with_cache_ttl(Duration::ZERO));
    let ct = keyset.encrypt(b"v", b"").unwrap();
    for i in 1..=3 {
        assert_eq!(keyset.decrypt(&ct, b"").unwrap(), b"v");
        assert_eq!(kms.decrypt_calls(), i);
    }
}

/// An entry evicted from a reader's cache (capacity one) leaves memory at
/// once, even the one read last (the cache's lock-free most recent entry
/// lets go of it too): here the entry that evicts it fails to unwrap, so
/// nothing replaces it as the most recent. Reading under it again unwraps
/// it again.
#[test]
fn an_evicted_dek_leaves_memory_even_when_read_last() {
    let _serial = serial();
    let held = FakeKms::deks_in_memory();
    let (kms, clients, writer) = setup(DekPolicy::default().with_max_values(1));
    let a = writer.encrypt(b"a", b"").unwrap();
    let b = writer.encrypt(b"b", b"").unwrap();
    assert_ne!(edek(&a), edek(&b), "two DEKs");
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
        .unwrap()
        .with_dek_policy(DekPolicy::default().with_cache_capacity(1));
    drop(writer);
    assert_eq!(FakeKms::deks_in_memory(), held);

    assert_eq!(reader.decrypt(&a, b"").unwrap(), b"a");
    assert_eq!(reader.decrypt(&a, b"").unwrap(), b"a", "a cache hit");
    assert_eq!(kms.decrypt_calls(), 1);
    assert_eq!(FakeKms::deks_in_memory(), held + 1);
    kms.set_down(true);
    assert!(reader.decrypt(&b, b"").is_err(), "the KMS is down");
    assert_eq!(
        FakeKms::deks_in_memory(),
        held,
        "the DEK of a was evicted and dropped"
    );
    kms.set_down(false);
    assert_eq!(reader.decrypt(&b, b"").unwrap(), b"b");
    assert_eq!(reader.decrypt(&a, b"").unwrap(), b"a");
    // a, b refused, b, a again.
    assert_eq!(kms.decrypt_calls(), 4, "a's DEK unwrapped again");
}
