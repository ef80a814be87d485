//! KMS envelope keys (`KmsEnvelopeAeadKey`) against an in-process KMS that
//! counts its calls: the wire format, DEK reuse up to the policy's limits,
//! one unwrap per DEK per reader, no KMS call for a tombstone, a KMS that
//! is down, hostile envelopes.

use crate::common;

use std::error::Error as _;
use std::time::Duration;

use common::envelope::envelope_keyset;
use tombstone_crypt::__fuzz::FakeKms;
use tombstone_crypt::error::KeysetErrorKind;
use tombstone_crypt::kms::{DekPolicy, KmsClients};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, KeyTemplate,
    Keyset, Serializer,
};

const URI: &str = "fake-kms://tests/kek-1";

fn setup(policy: DekPolicy) -> (FakeKms, KmsClients, Keyset) {
    envelope_keyset(URI, policy)
}

/// `(key id, EDEK, nonce|ct|tag)` of an envelope ciphertext.
fn split(ct: &[u8]) -> (u32, &[u8], &[u8]) {
    assert_eq!(ct[0], 1);
    let id = u32::from_be_bytes(ct[1..5].try_into().unwrap());
    let n = u32::from_be_bytes(ct[5..9].try_into().unwrap()) as usize;
    (id, &ct[9..9 + n], &ct[9 + n..])
}

#[test]
fn round_trip_and_wire_layout() {
    let (kms, clients, keyset) = setup(DekPolicy::default());
    assert_eq!(kms.encrypt_calls(), 0, "making a key calls no KMS");
    let ct = keyset.encrypt(b"hello", b"ad").unwrap();
    let (id, edek, rest) = split(&ct);
    assert_eq!(id, keyset.primary().0);
    assert!(!edek.is_empty());
    assert_eq!(rest.len(), 12 + 5 + 16);
    assert_eq!(keyset.decrypt(&ct, b"ad").unwrap(), b"hello");
    assert_eq!(keyset.decrypt(&ct, b"other"), Err(Error::Decryption));
    // Empty is not null.
    let empty = keyset.encrypt(b"", b"").unwrap();
    assert_eq!(keyset.decrypt(&empty, b"").unwrap(), b"");
    assert_eq!(kms.encrypt_calls(), 1);
    assert_eq!(
        kms.decrypt_calls(),
        0,
        "the writer reads its own DEK from its cache"
    );

    // The keyset holds no secret and loads without calling the KMS.
    let json = keyset.to_tink_json();
    assert!(json.contains("KmsEnvelopeAeadKey") && json.contains("REMOTE"));
    let reader = Keyset::from_tink_json_with(&json, &clients).unwrap();
    assert_eq!(kms.decrypt_calls(), 0);
    assert_eq!(reader.decrypt(&ct, b"ad").unwrap(), b"hello");
    assert_eq!(reader.decrypt(&empty, b"").unwrap(), b"");
    assert_eq!(kms.decrypt_calls(), 1, "one unwrap for the one DEK");
    assert_eq!(reader.to_tink_json(), json);
}

#[test]
fn serde_wrappers_and_tombstones() {
    let (kms, clients, keyset) = setup(DekPolicy::default());
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let ctx = Context::new("orders").with_key(b"o-1");
    // A tombstone never calls the KMS, not even for the first DEK.
    for _ in 0..100 {
        assert_eq!(ser.serialize(&ctx, None).unwrap(), None);
    }
    assert_eq!(kms.encrypt_calls() + kms.decrypt_calls(), 0);
    let ct = ser.serialize(&ctx, Some(&b"v"[..])).unwrap().unwrap();
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let de = DecryptingDeserializer::new(Bytes, reader);
    for _ in 0..100 {
        assert_eq!(de.deserialize(&ctx, None).unwrap(), None);
    }
    assert_eq!(kms.decrypt_calls(), 0);
    assert_eq!(
        de.deserialize(&ctx, Some(&ct)).unwrap(),
        Some(b"v".to_vec())
    );
    let moved = Context::new("orders").with_key(b"o-2");
    assert_eq!(de.deserialize(&moved, Some(&ct)), Err(Error::Decryption));
    assert_eq!(kms.encrypt_calls(), 1);
    assert_eq!(kms.decrypt_calls(), 1);
}

#[test]
fn wrap_calls_are_ceil_of_values_over_the_limit() {
    const N: usize = 100_000;
    for limit in [1_000u64, 4_096, 30_000, 1 << 20] {
        let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(limit));
        let cts: Vec<Vec<u8>> = (0..N)
            .map(|i| keyset.encrypt(&(i as u64).to_be_bytes(), b"").unwrap())
            .collect();
        let want = N.div_ceil(limit as usize);
        assert_eq!(kms.encrypt_calls(), want, "limit {limit}");
        let mut edeks: Vec<&[u8]> = cts.iter().map(|c| split(c).1).collect();
        edeks.dedup();
        assert_eq!(edeks.len(), want);
        // A reader elsewhere: one unwrap per distinct DEK.
        let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
        for (i, ct) in cts.iter().enumerate() {
            assert_eq!(reader.decrypt(ct, b"").unwrap(), (i as u64).to_be_bytes());
        }
        assert_eq!(kms.decrypt_calls(), want, "limit {limit}");
    }
}

#[test]
fn threads_share_a_dek_and_wrap_exactly_as_often() {
    const THREADS: usize = 8;
    const EACH: usize = 5_000;
    const LIMIT: u64 = 777;
    let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(LIMIT));
    let cts: Vec<Vec<u8>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..THREADS)
            .map(|t| {
                let keyset = keyset.clone();
                s.spawn(move || {
                    (0..EACH)
                        .map(|i| keyset.encrypt(format!("{t}/{i}").as_bytes(), b"").unwrap())
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap())
            .collect()
    });
    let total = THREADS * EACH;
    assert_eq!(kms.encrypt_calls(), total.div_ceil(LIMIT as usize));
    let mut per_dek = std::collections::HashMap::<Vec<u8>, u64>::new();
    for ct in &cts {
        *per_dek.entry(split(ct).1.to_vec()).or_default() += 1;
    }
    assert!(per_dek.values().all(|&n| n <= LIMIT));
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    std::thread::scope(|s| {
        for chunk in cts.chunks(cts.len() / THREADS) {
            let reader = reader.clone();
            s.spawn(move || {
                for ct in chunk {
                    reader.decrypt(ct, b"").unwrap();
                }
            });
        }
    });
    assert_eq!(kms.decrypt_calls(), per_dek.len());
}

#[test]
fn byte_and_age_limits() {
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_bytes(1000));
    for _ in 0..10 {
        keyset.encrypt(&[0; 400], b"").unwrap();
    }
    // 400 + 400 + 400 crosses 1000 with the third value: 3 per DEK.
    assert_eq!(kms.encrypt_calls(), 4);
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_age(Duration::ZERO));
    for _ in 0..5 {
        keyset.encrypt(b"x", b"").unwrap();
    }
    assert_eq!(kms.encrypt_calls(), 5);
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_age(Duration::from_millis(50)));
    keyset.encrypt(b"x", b"").unwrap();
    keyset.encrypt(b"x", b"").unwrap();
    std::thread::sleep(Duration::from_millis(80));
    keyset.encrypt(b"x", b"").unwrap();
    assert_eq!(kms.encrypt_calls(), 2);
}

/// Far from an expiry a use reads the coarse clock, but ages stay exact:
/// once `max_age` (writer) or `cache_ttl` (reader) has passed on the
/// precise clock since the DEK was made or unwrapped, the next value
/// takes a KMS call, every time. Reading the coarse clock near an expiry
/// too (it lags by about a tick, 4 ms at 250 Hz) fails this at once.
#[test]
fn a_dek_never_outlives_its_age_on_the_precise_clock() {
    use std::time::Instant;
    let age = Duration::from_millis(2);
    let spin_past = |from: Instant| {
        while from.elapsed() < age {
            std::hint::spin_loop();
        }
    };
    let policy = DekPolicy::default().with_max_age(age);
    let (kms, clients, keyset) = setup(policy);
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients)
        .unwrap()
        .with_dek_policy(policy);
    for round in 0..40 {
        keyset.encrypt(b"x", b"").unwrap();
        let made_by = Instant::now();
        let calls = kms.encrypt_calls();
        spin_past(made_by);
        let ct = keyset.encrypt(b"x", b"").unwrap();
        assert_eq!(
            kms.encrypt_calls(),
            calls + 1,
            "round {round}: a DEK past its age encrypted"
        );

        reader.decrypt(&ct, b"").unwrap();
        let unwrapped_by = Instant::now();
        let calls = kms.decrypt_calls();
        spin_past(unwrapped_by);
        reader.decrypt(&ct, b"").unwrap();
        assert_eq!(
            kms.decrypt_calls(),
            calls + 1,
            "round {round}: a DEK past its TTL decrypted"
        );
    }
}

#[test]
fn the_value_limit_is_capped_at_2_pow_32() {
    assert_eq!(
        DekPolicy::default().with_max_values(u64::MAX).max_values(),
        1 << 32
    );
    assert_eq!(DekPolicy::default().with_max_values(0).max_values(), 1);
    assert_eq!(DekPolicy::default().max_values(), 1 << 20);
}

#[test]
fn kms_down_cached_values_decrypt_new_deks_fail_then_recover() {
    let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(10));
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let early: Vec<Vec<u8>> = (0..10)
        .map(|_| keyset.encrypt(b"early", b"").unwrap())
        .collect();
    reader.decrypt(&early[0], b"").unwrap(); // cached now
    let uncached = {
        let other = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
        other.encrypt(b"other dek", b"").unwrap()
    };
    kms.set_down(true);
    // Cached DEKs still decrypt, on both sides.
    for ct in &early {
        assert_eq!(reader.decrypt(ct, b"").unwrap(), b"early");
        assert_eq!(keyset.decrypt(ct, b"").unwrap(), b"early");
    }
    // The DEK is used up: a new one needs the KMS.
    let err = keyset.encrypt(b"late", b"").unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    assert!(err.to_string().contains(URI), "{err}");
    assert!(err.source().is_some());
    let err = reader.decrypt(&uncached, b"").unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    // Tombstones still pass.
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    assert_eq!(ser.serialize(&Context::new("t"), None).unwrap(), None);
    // Back up: both recover.
    kms.set_down(false);
    let late = keyset.encrypt(b"late", b"").unwrap();
    assert_eq!(reader.decrypt(&late, b"").unwrap(), b"late");
    assert_eq!(reader.decrypt(&uncached, b"").unwrap(), b"other dek");
}

#[test]
fn hostile_envelopes_are_clear_errors_and_never_reach_the_kms() {
    let (kms, clients, keyset) = setup(DekPolicy::default());
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let ct = keyset.encrypt(b"value", b"").unwrap();
    let id = &ct[..5];
    let calls = || kms.decrypt_calls();
    let before = calls();
    // An EDEK length above 4096.
    let mut big = id.to_vec();
    big.extend_from_slice(&5000u32.to_be_bytes());
    big.extend_from_slice(&[0; 100]);
    assert!(matches!(reader.decrypt(&big, b""), Err(Error::Kms { .. })));
    let mut huge = id.to_vec();
    huge.extend_from_slice(&u32::MAX.to_be_bytes());
    huge.extend_from_slice(&[0; 100]);
    assert!(matches!(reader.decrypt(&huge, b""), Err(Error::Kms { .. })));
    let mut zero = id.to_vec();
    zero.extend_from_slice(&0u32.to_be_bytes());
    zero.extend_from_slice(&[0; 100]);
    assert!(matches!(reader.decrypt(&zero, b""), Err(Error::Kms { .. })));
    // An EDEK length beyond the record.
    let mut beyond = id.to_vec();
    beyond.extend_from_slice(&4000u32.to_be_bytes());
    beyond.extend_from_slice(&[0; 100]);
    assert!(matches!(
        reader.decrypt(&beyond, b""),
        Err(Error::Truncated { .. })
    ));
    // Every truncation of a real ciphertext.
    for n in 0..ct.len() {
        let e = reader.decrypt(&ct[..n], b"").unwrap_err();
        assert!(
            matches!(e, Error::Truncated { .. } | Error::Decryption),
            "{n}: {e:?}"
        );
    }
    assert_eq!(calls(), before + 1, "only the one whole EDEK was unwrapped");
    // A damaged EDEK reaches the KMS, which refuses: a KMS error.
    let mut bad = ct.clone();
    bad[12] ^= 1;
    let e = reader.decrypt(&bad, b"").unwrap_err();
    assert!(matches!(e, Error::Kms { .. }), "{e:?}");
    // A damaged tag is the one decryption error.
    let mut bad = ct.clone();
    *bad.last_mut().unwrap() ^= 1;
    assert_eq!(reader.decrypt(&bad, b""), Err(Error::Decryption));
}

#[test]
fn mixed_keysets_rotate_between_aes_gcm_and_envelope_keys() {
    let kms = FakeKms::new();
    let clients = KmsClients::new().with(kms.clone());
    let mut keyset = Keyset::generate();
    let old = keyset.encrypt(b"old", b"").unwrap();
    keyset
        .rotate_with(KeyTemplate::kms_envelope(URI).with_kms_clients(clients.clone()))
        .unwrap();
    let new = keyset.encrypt(b"new", b"").unwrap();
    let back = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    assert_eq!(back.decrypt(&old, b"").unwrap(), b"old");
    assert_eq!(back.decrypt(&new, b"").unwrap(), b"new");
    // rotate() makes another envelope key with its own DEKs.
    keyset.rotate();
    let newer = keyset.encrypt(b"newer", b"").unwrap();
    assert_ne!(split(&new).1, split(&newer).1);
    assert_eq!(kms.encrypt_calls(), 2);
    // A deterministic key cannot join.
    let mut det = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    assert!(det.rotate_with(KeyTemplate::kms_envelope(URI)).is_err());
}

#[test]
fn unknown_kms_uris_are_clear_errors_at_load() {
    let (_, _, keyset) = setup(DekPolicy::default());
    let json = keyset.to_tink_json();
    let err = Keyset::from_tink_json_with(&json, &KmsClients::new()).unwrap_err();
    assert_eq!(err.keyset_kind(), Some(KeysetErrorKind::KmsClient));
    assert!(err.to_string().contains("fake-kms://tests/kek-1"), "{err}");
    let err = Keyset::generate_with(KeyTemplate::kms_envelope("nope://x")).unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
}

#[test]
fn the_reader_cache_is_bounded() {
    let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(1));
    let cts: Vec<Vec<u8>> = (0..5).map(|_| keyset.encrypt(b"v", b"").unwrap()).collect();
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients)
        .unwrap()
        .with_dek_policy(DekPolicy::default().with_cache_capacity(2));
    for ct in &cts {
        reader.decrypt(ct, b"").unwrap();
    }
    assert_eq!(kms.decrypt_calls(), 5);
    // The last two are cached, the first was evicted.
    reader.decrypt(&cts[4], b"").unwrap();
    reader.decrypt(&cts[3], b"").unwrap();
    assert_eq!(kms.decrypt_calls(), 5);
    reader.decrypt(&cts[0], b"").unwrap();
    assert_eq!(kms.decrypt_calls(), 6);
}

#[test]
fn registered_clients_serve_from_tink_json() {
    let kms = FakeKms::new();
    tombstone_crypt::kms::register_kms_client(kms.clone());
    let keyset = Keyset::generate_with(KeyTemplate::kms_envelope("fake-kms://registered")).unwrap();
    let ct = keyset.encrypt(b"x", b"").unwrap();
    let back = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    assert_eq!(back.decrypt(&ct, b"").unwrap(), b"x");
    assert!(kms.encrypt_calls() >= 1);
}

#[test]
fn debug_shows_no_dek() {
    let (_, _, keyset) = setup(DekPolicy::default());
    keyset.encrypt(b"x", b"").unwrap();
    let dbg = format!("{keyset:?}");
    assert!(dbg.contains("KMS envelope"), "{dbg}");
}

#[test]
fn encrypted_keysets_round_trip_through_the_kms() {
    let (kms, clients, mut keyset) = setup(DekPolicy::default());
    keyset.rotate_with(KeyTemplate::aes256_gcm()).unwrap();
    let ct = keyset.encrypt(b"v", b"").unwrap();
    let before = kms.encrypt_calls();
    let enc = keyset
        .to_encrypted_tink_json_with(URI, b"ad", &clients)
        .unwrap();
    assert_eq!(kms.encrypt_calls(), before + 1);
    assert!(enc.contains("encryptedKeyset") && enc.contains("keysetInfo"));
    let back = Keyset::from_encrypted_tink_json_with(&enc, URI, b"ad", &clients).unwrap();
    assert_eq!(back.to_tink_json(), keyset.to_tink_json());
    assert_eq!(back.decrypt(&ct, b"").unwrap(), b"v");
    let err = Keyset::from_encrypted_tink_json_with(&enc, URI, b"other", &clients).unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    let err = Keyset::from_encrypted_tink_json_with("{}", URI, b"ad", &clients).unwrap_err();
    assert_eq!(err.keyset_kind(), Some(KeysetErrorKind::Json));
    kms.set_down(true);
    let err = Keyset::from_encrypted_tink_json_with(&enc, URI, b"ad", &clients).unwrap_err();
    assert!(err.source().is_some(), "{err:?}");
}

#[test]
fn keysets_with_envelope_keys_stay_send_sync_and_unwind_safe() {
    fn check<T: Send + Sync + std::panic::UnwindSafe + std::panic::RefUnwindSafe>(_: &T) {}
    let (_, clients, keyset) = setup(DekPolicy::default());
    check(&keyset);
    check(&clients);
}

#[test]
fn threads_waiting_on_a_failing_kms_share_its_answer() {
    const THREADS: usize = 8;
    let (kms, clients, keyset) = setup(DekPolicy::default());
    let ct = keyset.encrypt(b"v", b"").unwrap();
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let writer = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    kms.set_down(true);
    kms.set_delay(Duration::from_millis(300));
    let (enc0, dec0) = (kms.encrypt_calls(), kms.decrypt_calls());
    let t = std::time::Instant::now();
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| assert!(matches!(writer.encrypt(b"x", b""), Err(Error::Kms { .. }))));
            s.spawn(|| assert!(matches!(reader.decrypt(&ct, b""), Err(Error::Kms { .. }))));
        }
    });
    // Not 8 calls of 300 ms in a row each way: the waiting threads took the
    // failure of the call they waited on.
    assert!(
        kms.encrypt_calls() - enc0 < THREADS / 2,
        "{}",
        kms.encrypt_calls() - enc0
    );
    assert!(
        kms.decrypt_calls() - dec0 < THREADS / 2,
        "{}",
        kms.decrypt_calls() - dec0
    );
    assert!(
        t.elapsed() < Duration::from_millis(300 * THREADS as u64 / 2),
        "{:?}",
        t.elapsed()
    );
    kms.set_down(false);
    kms.set_delay(Duration::ZERO);
    writer.encrypt(b"x", b"").unwrap();
    assert_eq!(reader.decrypt(&ct, b"").unwrap(), b"v");
}

#[test]
fn stores_use_envelope_keysets_unchanged_and_deletes_never_call_the_kms() {
    use tombstone_crypt::store::{
        compact, restore, ChangeLoggingStore, Changelog as _, EncryptedStore, KeyValueStore as _,
        MemoryChangelog, MemoryStore,
    };
    let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(2));
    let logged = ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new());
    let mut store = EncryptedStore::new(logged, "events", keyset.clone());
    store.put(b"e1", Some(b"sent")).unwrap();
    store.put(b"e2", Some(b"")).unwrap();
    let calls = kms.encrypt_calls() + kms.decrypt_calls();
    for _ in 0..10 {
        store.delete(b"e1").unwrap();
    }
    store.flush().unwrap();
    assert_eq!(
        kms.encrypt_calls() + kms.decrypt_calls(),
        calls,
        "deletes call no KMS"
    );
    let records = store.inner().changelog().records().unwrap();
    assert_eq!(records.last().map(|r| r.value.is_none()), Some(true));
    // A restore elsewhere, with the keyset loaded from JSON.
    let mut fresh = MemoryStore::new();
    restore(&mut fresh, &compact(&records)).unwrap();
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let restored = EncryptedStore::new(fresh, "events", reader);
    assert_eq!(restored.all().unwrap(), [(b"e2".to_vec(), vec![])]);
}

/// `blocking_work` names exactly the KMS calls a (de)serialization would
/// make inline: the writer's when a new DEK is due, the reader's when the
/// EDEK is not cached; once it has run, the (de)serialization calls no KMS.
/// A KMS that is down fails the work with the same error the inline call
/// would give; plain keysets and malformed bytes have no work.
#[test]
fn blocking_work_is_the_kms_call_that_would_block_and_only_that() {
    let (kms, clients, keyset) = setup(DekPolicy::default().with_max_values(2));
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let ctx = Context::new("t").with_key(b"k");
    let work = ser.blocking_work().expect("the first value needs a DEK");
    assert_eq!(kms.encrypt_calls(), 0, "asking makes no call");
    work.run().unwrap();
    assert_eq!(kms.encrypt_calls(), 1);
    assert!(ser.blocking_work().is_none(), "the DEK is fresh");
    let a = ser.serialize(&ctx, Some(&b"a"[..])).unwrap().unwrap();
    let b = ser.serialize(&ctx, Some(&b"b"[..])).unwrap().unwrap();
    assert_eq!(kms.encrypt_calls(), 1, "prepared, then used for 2 values");
    assert!(
        ser.blocking_work().is_some(),
        "2 values: the next needs a DEK"
    );

    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let de = DecryptingDeserializer::new(Bytes, reader);
    let work = de.blocking_work(&a).expect("an EDEK not cached");
    work.run().unwrap();
    assert_eq!(kms.decrypt_calls(), 1);
    assert!(de.blocking_work(&b).is_none(), "same EDEK, now cached");
    assert_eq!(de.deserialize(&ctx, Some(&a)).unwrap(), Some(b"a".to_vec()));
    assert_eq!(de.deserialize(&ctx, Some(&b)).unwrap(), Some(b"b".to_vec()));
    assert_eq!(kms.decrypt_calls(), 1);
    // Malformed or foreign bytes: no work (opening them reports why).
    assert!(de.blocking_work(b"").is_none());
    assert!(de.blocking_work(&a[..7]).is_none());
    let plain = EncryptingSerializer::new(Bytes, Keyset::generate());
    assert!(plain.blocking_work().is_none());

    // A record whose EDEK length is 0, or runs past its end, has no work:
    // it never reaches the KMS (opening it says why), and never panics.
    let mut forged = a.clone();
    for claimed in [0u32, 1000, u32::MAX] {
        forged[5..9].copy_from_slice(&claimed.to_be_bytes());
        assert!(de.blocking_work(&forged).is_none(), "EDEK length {claimed}");
        assert!(de.deserialize(&ctx, Some(&forged)).is_err());
    }
    assert_eq!(kms.decrypt_calls(), 1);
    // An EDEK not cached, in a value cut short after it (no room for a
    // nonce and a tag): no work either, and opening says `Truncated`, with
    // no KMS call.
    let fresh = DecryptingDeserializer::new(
        Bytes,
        Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap(),
    );
    let edek_len = u32::from_be_bytes(a[5..9].try_into().unwrap()) as usize;
    for cut in [9 + edek_len, 9 + edek_len + 12 + 15] {
        assert!(fresh.blocking_work(&a[..cut]).is_none(), "cut at {cut}");
        let err = fresh.deserialize(&ctx, Some(&a[..cut])).unwrap_err();
        assert!(matches!(err, Error::Truncated { .. }), "{err:?}");
    }
    assert!(fresh.blocking_work(&a).is_some(), "whole, it needs the KMS");
    assert_eq!(kms.decrypt_calls(), 1);

    kms.set_down(true);
    let err = ser.blocking_work().unwrap().run().unwrap_err();
    assert!(matches!(err, Error::Kms { .. }), "{err:?}");
    assert_eq!(ser.serialize(&ctx, Some(&b"c"[..])).unwrap_err(), err);
    // Back up: the next work retries (an old failure is not replayed).
    kms.set_down(false);
    ser.blocking_work().unwrap().run().unwrap();
    assert!(ser.blocking_work().is_none());
    ser.serialize(&ctx, Some(&b"c"[..])).unwrap();
}

/// The byte limit is exact: a DEK that has encrypted exactly `max_bytes`
/// is due for replacement, and `blocking_work` says so (else the
/// replacement would happen inline, on an async worker).
#[test]
fn blocking_work_sees_the_byte_limit_reached_exactly() {
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_bytes(8));
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let ctx = Context::new("t").with_key(b"k");
    ser.serialize(&ctx, Some(&b"1234"[..])).unwrap();
    assert!(ser.blocking_work().is_none(), "4 of 8 bytes used");
    ser.serialize(&ctx, Some(&b"5678"[..])).unwrap();
    assert!(ser.blocking_work().is_some(), "8 of 8 bytes used");
    assert_eq!(kms.encrypt_calls(), 1);
}

/// A KMS that returns an empty or oversized wrapped key is an error when
/// the DEK is made, not a value that is stored and never readable.
#[test]
fn wrapped_keys_outside_1_to_max_edek_len_are_refused() {
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_values(1));
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let ctx = Context::new("t").with_key(b"k");
    for (len, ok) in [
        (0, false),
        (tombstone_crypt::kms::MAX_EDEK_LEN + 1, false),
        (tombstone_crypt::kms::MAX_EDEK_LEN, true),
        (1, true),
    ] {
        kms.set_wrapped_len(Some(len));
        let got = ser.serialize(&ctx, Some(&b"v"[..]));
        assert_eq!(got.is_ok(), ok, "wrapped key of {len} bytes: {got:?}");
        if let Err(e) = got {
            assert!(e.to_string().contains("encrypted data key of"), "{e}");
        }
    }
}

/// The policy's getters give the documented defaults and what each
/// `with_` set, clamped as documented; `BlockingWork` prints its name and
/// nothing of what it holds.
#[test]
fn dek_policy_getters_and_blocking_work_debug() {
    let d = DekPolicy::default();
    assert_eq!(
        (
            d.max_values(),
            d.max_bytes(),
            d.max_age(),
            d.cache_capacity()
        ),
        (1 << 20, 1 << 32, Duration::from_secs(3600), 1024)
    );
    let p = DekPolicy::default()
        .with_max_values(7)
        .with_max_bytes(9)
        .with_max_age(Duration::from_millis(5))
        .with_cache_capacity(3);
    assert_eq!(
        (
            p.max_values(),
            p.max_bytes(),
            p.max_age(),
            p.cache_capacity()
        ),
        (7, 9, Duration::from_millis(5), 3)
    );
    let z = DekPolicy::default()
        .with_max_values(0)
        .with_max_bytes(0)
        .with_cache_capacity(0);
    assert_eq!(
        (z.max_values(), z.max_bytes(), z.cache_capacity()),
        (1, 1, 1)
    );
    let (_, _, keyset) = setup(DekPolicy::default());
    let work = EncryptingSerializer::new(Bytes, keyset)
        .blocking_work()
        .expect("a first DEK is due");
    assert_eq!(format!("{work:?}"), "BlockingWork");
}

/// A keyset moved to another backend keeps its envelope keys' DEK policy:
/// with one value per DEK, every value still makes its own KMS call, and
/// the values read back.
#[cfg(feature = "aws-lc")]
#[test]
fn another_backend_keeps_the_dek_policy() {
    let (kms, _, keyset) = setup(DekPolicy::default().with_max_values(1));
    let keyset = keyset.with_backend(tombstone_crypt::Backend::AwsLc);
    let cts: Vec<Vec<u8>> = (0..3u8)
        .map(|i| keyset.encrypt(&[i], b"ad").unwrap())
        .collect();
    assert_eq!(kms.encrypt_calls(), 3);
    for (i, ct) in cts.iter().enumerate() {
        assert_eq!(keyset.decrypt(ct, b"ad").unwrap(), [i as u8]);
    }
}

/// Every envelope ciphertext shorter than the shortest possible one
/// (prefix, EDEK length, a 1-byte EDEK, nonce, tag: 38 bytes) is
/// `Truncated` with that exact minimum, and reaches no KMS.
#[test]
fn short_envelope_ciphertexts_name_the_exact_minimum() {
    let (kms, _, keyset) = setup(DekPolicy::default());
    let ct = keyset.encrypt(b"value", b"").unwrap();
    for n in 0..38 {
        assert_eq!(
            keyset.decrypt(&ct[..n], b""),
            Err(Error::Truncated { len: n, min: 38 }),
            "{n} bytes"
        );
    }
    assert_eq!(kms.decrypt_calls(), 0);
}

/// A deterministic serializer hands on the blocking work of the codec it
/// wraps (a codec of the caller's that needs, say, a lookup).
#[test]
fn a_deterministic_serializer_hands_on_its_codecs_blocking_work() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tombstone_crypt::{BlockingWork, DeterministicSerializer};

    struct Looks(Arc<AtomicBool>);
    impl Serializer<[u8]> for Looks {
        fn serialize_into(
            &self,
            _: &Context<'_>,
            v: &[u8],
            out: &mut Vec<u8>,
        ) -> Result<(), Error> {
            out.extend_from_slice(v);
            Ok(())
        }
        fn blocking_work(&self) -> Option<BlockingWork> {
            let ran = Arc::clone(&self.0);
            Some(BlockingWork::new(move || {
                ran.store(true, Ordering::SeqCst);
                Ok(())
            }))
        }
    }
    let ran = Arc::new(AtomicBool::new(false));
    let siv = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let ser = DeterministicSerializer::new(Looks(Arc::clone(&ran)), siv);
    ser.blocking_work()
        .expect("the codec's work")
        .run()
        .unwrap();
    assert!(ran.load(Ordering::SeqCst));
}
