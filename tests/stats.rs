//! The counters (`Keyset::stats`, `stats::process`) are exact: N values,
//! M tombstones, K failures by kind, L KMS calls appear as N, M, K, L, from
//! every path that encrypts or decrypts, with threads, and across the drop
//! of a keyset.

use crate::common;

use common::envelope::envelope_keyset;
use tombstone_crypt::kms::DekPolicy;
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, DeterministicDeserializer,
    DeterministicSerializer, EncryptingSerializer, KeyTemplate, Keyset, Serializer as _,
    Unencrypted, Utf8,
};

const URI: &str = "fake-kms://stats";

#[test]
fn every_path_counts_each_value_once() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let de = DecryptingDeserializer::new(Bytes, keyset.clone());
    let ctx = Context::new("t").with_key(b"k");
    let (n, m) = (37u64, 11u64);
    let mut cts = Vec::new();
    for i in 0..n {
        cts.push(
            ser.serialize(&ctx, Some(&[i as u8; 40][..]))
                .unwrap()
                .unwrap(),
        );
    }
    for _ in 0..m {
        assert_eq!(ser.serialize(&ctx, None).unwrap(), None);
        assert_eq!(de.deserialize(&ctx, None).unwrap(), None);
    }
    for ct in &cts {
        de.deserialize(&ctx, Some(ct)).unwrap();
    }
    // The in-place pair and the keyset's own methods count too.
    let mut buf = ser.plaintext_buffer(8);
    let head = buf.len();
    buf.extend_from_slice(b"in place");
    let ct = ser.encrypt_owned(&ctx, Some(buf), head).unwrap();
    de.decrypt_owned(&ctx, ct).unwrap().unwrap();
    assert_eq!(ser.encrypt_owned(&ctx, None, 0).unwrap(), None);
    assert_eq!(de.decrypt_owned(&ctx, None).unwrap(), None);
    let plain = keyset.encrypt(b"direct", b"ad").unwrap();
    keyset.decrypt(&plain, b"ad").unwrap();

    let s = keyset.stats();
    assert_eq!(s.values_encrypted, n + 2, "{s:?}");
    assert_eq!(s.values_decrypted, n + 2, "{s:?}");
    assert_eq!(
        (s.tombstones_serialized, s.tombstones_deserialized),
        (m + 1, m + 1)
    );
    assert_eq!(s.decrypt_failures.total(), 0);
    assert_eq!((s.encrypt_failures, s.plaintext_passed), (0, 0));
    // No envelope key: nothing of the KMS.
    assert_eq!(s.kms, Default::default());
    assert_eq!(
        (s.deks_created, s.edek_cache_hits, s.edek_cache_entries),
        (0, 0, 0)
    );
}

#[test]
fn failures_are_counted_by_kind_and_plaintext_passed_apart() {
    let keyset = Keyset::generate();
    let other = Keyset::generate();
    let ctx = Context::new("t");
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let de = DecryptingDeserializer::new(Bytes, keyset.clone());
    let ct = ser.serialize(&ctx, Some(&b"v"[..])).unwrap().unwrap();
    let fail = |bytes: &[u8]| assert!(de.deserialize(&ctx, Some(bytes)).is_err());
    fail(&ct[..10]); // truncated
    fail(&ct[..ct.len() - 1]); // authentication (a shorter tag)
    let mut flipped = ct.clone();
    *flipped.last_mut().unwrap() ^= 1;
    fail(&flipped); // authentication
    let mut version = ct.clone();
    version[0] = 9;
    fail(&version); // unsupported version
    let foreign = other.encrypt(b"v", &[]).unwrap();
    fail(&foreign); // unknown key id
    assert!(de
        .deserialize(&Context::new("elsewhere"), Some(&ct))
        .is_err()); // authentication: the wrong context

    // The migration reader passes what is not a ciphertext and counts it.
    let migrating = de.clone().with_unencrypted(Unencrypted::PassThrough);
    for _ in 0..3 {
        migrating
            .deserialize(&ctx, Some(b"legacy".as_slice()))
            .unwrap();
    }
    migrating
        .decrypt_owned(&ctx, Some(b"legacy".to_vec()))
        .unwrap();

    let f = keyset.stats().decrypt_failures;
    assert_eq!(f.truncated, 1, "{f:?}");
    assert_eq!(f.authentication, 3, "{f:?}");
    assert_eq!(f.unsupported_version, 1, "{f:?}");
    assert_eq!(f.unknown_key_id, 1, "{f:?}");
    assert_eq!(f.total(), 6, "{f:?}");
    let s = keyset.stats();
    assert_eq!(s.plaintext_passed, 4, "{s:?}");
    assert_eq!(s.values_decrypted, 0, "{s:?}");
    // The other keyset counted its own value only.
    assert_eq!(other.stats().values_encrypted, 1);
    assert_eq!(other.stats().decrypt_failures.total(), 0);
}

/// Eight threads on one keyset: every value counted once.
#[test]
fn threads_lose_no_count() {
    let keyset = Keyset::generate();
    let per_thread = 5_000u64;
    std::thread::scope(|s| {
        for _ in 0..8 {
            let k = keyset.clone();
            s.spawn(move || {
                for _ in 0..per_thread {
                    let ct = k.encrypt(b"v", b"").unwrap();
                    k.decrypt(&ct, b"").unwrap();
                }
            });
        }
    });
    let s = keyset.stats();
    assert_eq!(
        (s.values_encrypted, s.values_decrypted),
        (8 * per_thread, 8 * per_thread)
    );
}

#[test]
fn envelope_deks_cache_and_kms_calls_are_exact() {
    let limit = 10u64;
    let (kms, clients, writer) = envelope_keyset(URI, DekPolicy::default().with_max_values(limit));
    let n = 95u64;
    let cts: Vec<_> = (0..n)
        .map(|i| writer.encrypt(&[i as u8], b"").unwrap())
        .collect();
    let w = writer.stats();
    let deks = n.div_ceil(limit);
    assert_eq!((w.values_encrypted, w.deks_created), (n, deks), "{w:?}");
    assert_eq!((w.kms.encrypt.ok, w.kms.encrypt.error), (deks, 0), "{w:?}");
    assert_eq!(kms.encrypt_calls() as u64, deks);
    // The writer caches its own DEKs (up to the default capacity).
    assert_eq!(w.edek_cache_entries, deks, "{w:?}");

    // A reader with room for 3 DEKs, reading each DEK's values in turn,
    // then the first DEK's again: 10 unwraps, 7 evictions, then one more
    // unwrap (and eviction) for the first DEK.
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients)
        .unwrap()
        .with_dek_policy(DekPolicy::default().with_cache_capacity(3));
    for ct in &cts {
        reader.decrypt(ct, b"").unwrap();
    }
    reader.decrypt(&cts[0], b"").unwrap();
    let r = reader.stats();
    assert_eq!(r.values_decrypted, n + 1, "{r:?}");
    assert_eq!(
        (r.deks_unwrapped, r.edek_cache_misses),
        (deks + 1, deks + 1),
        "{r:?}"
    );
    assert_eq!(r.edek_cache_hits, n + 1 - (deks + 1), "{r:?}");
    assert_eq!(
        (r.edek_cache_evictions, r.edek_cache_entries),
        (deks + 1 - 3, 3),
        "{r:?}"
    );
    assert_eq!(
        (r.kms.decrypt.ok, r.kms.decrypt.error),
        (deks + 1, 0),
        "{r:?}"
    );
    assert_eq!(kms.decrypt_calls() as u64, deks + 1);

    // The KMS down: a value whose DEK is not cached fails (one KMS call,
    // counted as an error and a failure of kind kms); a new DEK fails to
    // be made (an encrypt failure).
    kms.set_down(true);
    assert!(reader.decrypt(&cts[50], b"").is_err());
    let made = writer.stats().deks_created;
    for _ in 0..(limit * deks - n) {
        writer.encrypt(b"still under the DEK", b"").unwrap();
    }
    assert!(writer.encrypt(b"needs a new DEK", b"").is_err());
    kms.set_down(false);
    let r = reader.stats();
    assert_eq!(
        (r.kms.decrypt.error, r.decrypt_failures.kms),
        (1, 1),
        "{r:?}"
    );
    let w = writer.stats();
    assert_eq!((w.encrypt_failures, w.kms.encrypt.error), (1, 1), "{w:?}");
    assert_eq!(w.deks_created, made, "{w:?}");
}

#[test]
fn record_keys_and_their_fanout_tombstones_are_counted() {
    let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let ctx = Context::new("orders");
    let ser = DeterministicSerializer::new(Utf8, keys.clone());
    let de = DeterministicDeserializer::new(Utf8, keys.clone());
    let ct = ser.serialize(&ctx, Some("alice")).unwrap().unwrap();
    de.deserialize(&ctx, Some(&ct)).unwrap();
    // Two rotations: three enabled keys, so each write of a key puts two
    // tombstones for its older forms first.
    let mut keys = keys;
    keys.rotate();
    keys.rotate();
    let ser = DeterministicSerializer::new(Utf8, keys.clone());
    for name in ["alice", "bob", "carol"] {
        let forms = ser.key_forms(&ctx, name).unwrap();
        assert_eq!(forms.writes(None).count(), 3);
    }
    let s = keys.stats();
    // One form, then three forms for each of three keys.
    assert_eq!(s.record_keys_encrypted, 1 + 3 * 3, "{s:?}");
    assert_eq!(s.record_keys_decrypted, 1, "{s:?}");
    assert_eq!(s.fanout_tombstones, 3 * 2, "{s:?}");
    assert_eq!(s.values_encrypted, 0, "{s:?}");
}

/// A keyset's DEK and KMS counts carry over to the keysets made from it
/// with another DEK policy, and a removed key keeps what it counted: no
/// field of a snapshot goes down.
#[test]
fn envelope_counts_survive_reconfiguration_and_removal() {
    let (_kms, _clients, writer) = envelope_keyset(URI, DekPolicy::default().with_max_values(10));
    for _ in 0..25 {
        writer.encrypt(b"v", b"").unwrap();
    }
    assert_eq!(writer.stats().deks_created, 3);
    let mut tighter = writer
        .clone()
        .with_dek_policy(DekPolicy::default().with_max_values(5));
    assert_eq!(tighter.stats().deks_created, 3, "carried over");
    for _ in 0..6 {
        tighter.encrypt(b"v", b"").unwrap();
    }
    let s = tighter.stats();
    assert_eq!(
        (s.deks_created, s.kms.encrypt.ok, s.values_encrypted),
        (5, 5, 31),
        "{s:?}"
    );
    assert_eq!(writer.stats().deks_created, 5, "one set of counts");
    let old = tighter.primary();
    tighter.rotate();
    tighter.encrypt(b"v", b"").unwrap();
    tighter.remove(old).unwrap();
    let s = tighter.stats();
    assert_eq!(
        (s.deks_created, s.kms.encrypt.ok, s.values_encrypted),
        (6, 6, 32),
        "{s:?}"
    );
}

/// An async consumer runs a value's blocking work (the KMS call) first:
/// that lookup is the miss, the value's own lookup a hit.
#[test]
fn a_lookup_ahead_of_the_value_is_the_miss_and_the_value_a_hit() {
    let (_kms, clients, writer) = envelope_keyset(URI, DekPolicy::default());
    let ct = writer.encrypt(b"v", b"").unwrap();
    let reader = Keyset::from_tink_json_with(&writer.to_tink_json(), &clients).unwrap();
    let de = DecryptingDeserializer::new(Bytes, reader.clone());
    let work = de.blocking_work(&ct).expect("the DEK is not cached yet");
    work.run().unwrap();
    assert!(de.blocking_work(&ct).is_none(), "cached now");
    de.deserialize(&Context::new("t"), Some(&ct[..]))
        .unwrap_err(); // other associated data
    reader.decrypt(&ct, b"").unwrap();
    let s = reader.stats();
    assert_eq!((s.edek_cache_misses, s.deks_unwrapped), (1, 1), "{s:?}");
    assert_eq!((s.edek_cache_hits, s.values_decrypted), (2, 1), "{s:?}");
    assert_eq!(s.decrypt_failures.authentication, 1, "{s:?}");
}
