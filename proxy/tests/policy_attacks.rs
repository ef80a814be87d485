//! Attacks on the proxy's subject-key (crypto-shredding) topics and on its
//! policy topics' Produce path: attempts to delete what nobody deleted, to
//! bring back what was deleted, and to leak plaintext to the broker, with
//! forged bytes, wrong key stores and racing instances. Each test shows
//! the property holding.

use crate::common;

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use common::subjects::SubjectSetup;
use common::wire::*;
use common::{bootstrap, config, consume_all, create_topic, fresh_topic, start_proxy, Keys};
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::policy::{Read, TopicPolicy};
use tombstone_crypt::shred::{KeyStore, MemoryKeyStore, SubjectKeys};
use tombstone_crypt::Keyset;
use tombstone_crypt_proxy::Hooks;

// ---------------------------------------------------------------------
// Raw protocol helpers
// ---------------------------------------------------------------------

/// Produces one record straight to the broker (no proxy).
fn produce_direct(broker: &str, topic: &str, key: &[u8], value: Option<&[u8]>) {
    let p: FutureProducer = config(broker)
        .set("message.timeout.ms", "10000")
        .create()
        .unwrap();
    let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).partition(0).key(key);
    if let Some(v) = value {
        r = r.payload(v);
    }
    futures_executor::block_on(p.send(r, Duration::from_secs(10))).unwrap();
}

// ---------------------------------------------------------------------
// Leaks: batches the proxy passes without encrypting
// ---------------------------------------------------------------------

/// A data batch whose attributes claim it is a control batch: the proxy
/// forwards control batches byte for byte, so a client's plaintext records
/// in one would reach the broker unencrypted on a policy topic.
#[test]
fn a_batch_flagged_control_does_not_carry_plaintext_to_the_broker() {
    let Some(broker) = bootstrap() else { return };
    let topic = fresh_topic("attack-control");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let secret = b"CONTROL-SMUGGLED-PLAINTEXT-4111111111111111";
    let mut b = batch_of(&[record(Some(b"k"), Some(secret), 0)]);
    let attrs = i16::from_be_bytes([b[21], b[22]]) | (1 << 5);
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    fix_crc(&mut b);
    let (code, msg) = raw_produce(&proxy.addr, &topic, b.freeze(), 9);
    eprintln!("produce of a control-flagged batch through the proxy: code {code}, {msg:?}");
    let (fcode, raw) = raw_fetch(&broker, &topic);
    eprintln!(
        "broker fetch: code {fcode}, {} bytes on the topic",
        raw.len()
    );
    assert!(
        !contains(&raw, secret),
        "the plaintext of a control-flagged batch reached the broker through the proxy \
         (produce answered code {code}): the proxy forwards control batches of a policy \
         topic's Produce unencrypted"
    );
    assert_ne!(
        code, 0,
        "the broker accepted a control-flagged batch the proxy forwarded unencrypted"
    );
}

/// A data batch whose header says it holds 0 records but whose body holds
/// one: the proxy forwards "empty" batches byte for byte.
#[test]
fn a_batch_claiming_zero_records_does_not_carry_plaintext_to_the_broker() {
    let Some(broker) = bootstrap() else { return };
    let topic = fresh_topic("attack-count0");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(false);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let secret = b"ZERO-COUNT-SMUGGLED-PLAINTEXT-5500000000000004";
    let mut b = batch_of(&[record(Some(b"k"), Some(secret), 0)]);
    b[57..61].copy_from_slice(&0i32.to_be_bytes());
    fix_crc(&mut b);
    let (code, msg) = raw_produce(&proxy.addr, &topic, b.freeze(), 9);
    eprintln!("produce of a count-0 batch through the proxy: code {code}, {msg:?}");
    let (fcode, raw) = raw_fetch(&broker, &topic);
    eprintln!("broker fetch: code {fcode}, {} bytes", raw.len());
    assert!(
        !contains(&raw, secret),
        "the plaintext of a batch whose header claims 0 records reached the broker through \
         the proxy (produce answered code {code})"
    );
}

/// Every Produce version the proxy offers, with an ordinary batch:
/// encrypted (the plaintext never reaches the broker), and a subject-key
/// topic's unkeyed record refused.
#[test]
fn every_produce_version_encrypts_and_unkeyed_subject_records_are_refused() {
    let Some(broker) = bootstrap() else { return };
    let topic = fresh_topic("attack-versions");
    create_topic(&broker, &topic, 1);
    let keys = Keys::new(true);
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    for version in 3..=12i16 {
        let secret = format!("VERSIONED-PLAINTEXT-v{version}-XYZ");
        let b = batch_of(&[record(Some(b"key-plain"), Some(secret.as_bytes()), 0)]);
        let (code, msg) = raw_produce(&proxy.addr, &topic, b.freeze(), version);
        assert_eq!(code, 0, "v{version}: {msg:?}");
    }
    let (_, raw) = raw_fetch(&broker, &topic);
    assert!(!contains(&raw, b"VERSIONED-PLAINTEXT"));
    assert!(!contains(&raw, b"key-plain"));

    let s = SubjectSetup::new(&broker, "unkeyed");
    let stopic = fresh_topic("attack-unkeyed");
    create_topic(&broker, &stopic, 1);
    let policies = s.policies(&s.entry(&stopic)).unwrap();
    let sproxy = start_proxy(&broker, policies, Hooks::default());
    let b = batch_of(&[record(None, Some(b"UNKEYED-SUBJECT-PLAINTEXT"), 0)]);
    let (code, msg) = raw_produce(&sproxy.addr, &stopic, b.freeze(), 9);
    assert_eq!(code, 2, "{msg:?}");
    let msg = msg.unwrap_or_default();
    assert!(!msg.contains("UNKEYED-SUBJECT"), "{msg}");
    let (_, raw) = raw_fetch(&broker, &stopic);
    assert!(!contains(&raw, b"UNKEYED-SUBJECT-PLAINTEXT"));
}

// ---------------------------------------------------------------------
// Delete what nobody deleted
// ---------------------------------------------------------------------

/// The library's policy, no broker: a shredded subject's value moved to
/// another record key (or another topic) does not authenticate there, and
/// must be an error, not a delete of the other key's record.
#[test]
fn policy_a_shredded_value_moved_to_another_key_is_an_error_not_a_delete() {
    let keys =
        Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap());
    let policy = TopicPolicy::subject_keys(keys.clone());
    let alice = policy
        .write_value("t", Some(b"alice"), Some(b"alice's address"))
        .unwrap()
        .unwrap();
    let bob = policy
        .write_value("t", Some(b"bob"), Some(b"bob's address"))
        .unwrap()
        .unwrap();
    // Before the shred: alice's value under bob's key is an error.
    assert!(policy.read_value("t", Some(b"bob"), Some(&alice)).is_err());
    keys.shred(b"alice").unwrap();
    assert_eq!(
        policy
            .read_value("t", Some(b"alice"), Some(&alice))
            .unwrap(),
        Read::Shredded
    );
    assert!(matches!(
        policy.read_value("t", Some(b"bob"), Some(&bob)).unwrap(),
        Read::Value(_)
    ));
    // A forged value: alice's header, any body.
    let mut forged = alice[..37].to_vec();
    forged.extend_from_slice(&[0u8; 40]);
    let moved = policy.read_value("t", Some(b"bob"), Some(&alice));
    let forged_read = policy.read_value("t", Some(b"bob"), Some(&forged));
    let other_topic = policy.read_value("u", Some(b"bob"), Some(&alice));
    eprintln!("moved: {moved:?}; forged: {forged_read:?}; other topic: {other_topic:?}");
    assert!(
        moved.is_err(),
        "alice's shredded value copied under bob's key reads as {moved:?}: a delete of bob's \
         record that nobody made (the value's subject tag is not bob's)"
    );
    assert!(
        forged_read.is_err(),
        "a forged value (a shredded DEK's header, any body) under bob's key reads as {forged_read:?}"
    );
}

/// Through the proxy: alice is shredded (by another instance, as the
/// command line's `shred`), and her old ciphertext is written straight to
/// the broker under bob's key. A consumer through the proxy must get
/// CORRUPT_MESSAGE for that value (it does not authenticate under bob's
/// key), never a tombstone for bob.
#[test]
fn proxy_a_shredded_value_copied_under_another_key_is_not_fetched_as_a_tombstone() {
    let Some(broker) = bootstrap() else { return };
    let s = SubjectSetup::new(&broker, "copy");
    let topic = fresh_topic("attack-copy");
    create_topic(&broker, &topic, 1);
    let policies = s.policies(&s.entry(&topic)).unwrap();
    let proxy = start_proxy(&broker, policies, Hooks::default());
    let b = batch_of(&[
        record(Some(b"alice"), Some(b"alice: 1 Main St"), 0),
        record(Some(b"bob"), Some(b"bob: 2 Elm St"), 1),
    ]);
    let (code, message) = raw_produce(&proxy.addr, &topic, b.freeze(), 9);
    assert_eq!(code, 0, "{message:?}");
    // alice's ciphertext, as the broker holds it.
    let direct = consume_all(&broker, &topic, 1).unwrap();
    let alice_ct = direct[0].value.clone().unwrap();
    assert_eq!(alice_ct[0], 0x53);
    // The shred, by another instance on the key store.
    let other = s.instance();
    other.shred(b"alice").unwrap();
    // Until alice reads as a tombstone through the proxy (the fences).
    let (code, recs) = fetch_until(&proxy.addr, &topic, 25, |code, recs| {
        code == 0 && recs.first().is_some_and(|r| r.value.is_none())
    });
    eprintln!(
        "after the shred, through the proxy: code {code}, {:?}",
        show(&recs)
    );
    assert_eq!(code, 0);
    assert_eq!(recs[0].value, None, "alice is shredded");
    assert_eq!(recs[1].value.as_deref(), Some(&b"bob: 2 Elm St"[..]));
    // Copied under bob's key, straight to the broker (offset 2).
    produce_direct(&broker, &topic, b"bob", Some(&alice_ct));
    let (code, raw) = raw_fetch(&proxy.addr, &topic);
    let recs = if code == 0 {
        decode_records(&raw)
    } else {
        Vec::new()
    };
    eprintln!(
        "with the copy, through the proxy: code {code}, {:?}",
        show(&recs)
    );
    assert!(
        code == 2,
        "bob's record at offset 2 holds alice's shredded value (it does not authenticate under \
         bob's key): the partition should be CORRUPT_MESSAGE; the proxy answered code {code} \
         with records {:?} (bob's last value fetched as a null: deleted for the client)",
        show(&recs)
    );
}

/// A key store made under the same KEK but another one (a mistyped
/// `subject_key_topic` that names another store): values are
/// CORRUPT_MESSAGE through the proxy, never tombstones.
#[test]
fn proxy_another_key_store_under_the_same_kek_makes_values_corrupt_not_tombstones() {
    let Some(broker) = bootstrap() else { return };
    let s = SubjectSetup::new(&broker, "wrongstore");
    let topic = fresh_topic("attack-wrongstore");
    create_topic(&broker, &topic, 1);
    let proxy = start_proxy(
        &broker,
        s.policies(&s.entry(&topic)).unwrap(),
        Hooks::default(),
    );
    let b = batch_of(&[record(Some(b"alice"), Some(b"alice: 1 Main St"), 0)]);
    assert_eq!(raw_produce(&proxy.addr, &topic, b.freeze(), 9).0, 0);
    // A second store, same KEK.
    let other_topic = fresh_topic("wrongstore-keys2");
    let log = KafkaChangelog::with_config(config(&broker), &other_topic).unwrap();
    SubjectKeys::create(s.kek.clone(), Arc::new(KafkaKeyStore::new(log))).unwrap();
    let entry = format!(
        r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{other_topic}"}}"#
    );
    let wrong = start_proxy(&broker, s.policies(&entry).unwrap(), Hooks::default());
    let (code, recs) = raw_fetch(&wrong.addr, &topic);
    let recs = if code == 0 {
        decode_records(&recs)
    } else {
        Vec::new()
    };
    assert_eq!(code, 2, "{:?}", show(&recs));
    // A key-store topic that does not exist, or is empty, or another KEK's:
    // refused at load.
    let missing = fresh_topic("attack-missing-keys");
    let e = s
        .policies(&format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{missing}"}}"#
        ))
        .unwrap_err();
    eprintln!("missing: {e}");
    let empty = fresh_topic("attack-empty-keys");
    create_topic(&broker, &empty, 1);
    let e = s
        .policies(&format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{empty}"}}"#
        ))
        .unwrap_err();
    eprintln!("empty: {e}");
    let foreign = SubjectSetup::new(&broker, "foreign");
    let e = s
        .policies(&format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{}"}}"#,
            foreign.key_topic
        ))
        .unwrap_err();
    eprintln!("another KEK's: {e}");
    // The data topic itself named as the key store.
    let e = s
        .policies(&format!(
            r#"{{"topic":"{topic}","subject_keyset":"kek.json","subject_key_topic":"{topic}"}}"#
        ))
        .unwrap_err();
    eprintln!("the data topic as key store: {e}");
}

// ---------------------------------------------------------------------
// Races around a shred
// ---------------------------------------------------------------------

/// A value the proxy writes for a subject after a shred made through
/// another instance: once the proxy's fences have passed
/// (`subject_key_fence_ms`, here 300 ms each) it goes under a new DEK and
/// reads as written. The control, the default fences (5 s each), shows
/// the window the docs state: written right after the shred, the value
/// goes out under the shredded DEK and reads as deleted.
#[test]
fn a_value_written_after_a_shred_and_the_fences_gets_a_new_key() {
    let Some(broker) = bootstrap() else { return };
    for (fence_ms, wait, survives) in [
        (Some(300), Duration::from_millis(1500), true),
        (None, Duration::ZERO, false),
    ] {
        let s = SubjectSetup::new(&broker, "after");
        let topic = fresh_topic("attack-after");
        create_topic(&broker, &topic, 1);
        let entry = match fence_ms {
            Some(ms) => s
                .entry(&topic)
                .replace('}', &format!(r#","subject_key_fence_ms":{ms}}}"#)),
            None => s.entry(&topic),
        };
        let proxy = start_proxy(&broker, s.policies(&entry).unwrap(), Hooks::default());
        let b = batch_of(&[record(Some(b"alice"), Some(b"before the shred"), 0)]);
        assert_eq!(raw_produce(&proxy.addr, &topic, b.freeze(), 9).0, 0);
        // The shred, by another instance; it returns once the store has it.
        s.instance().shred(b"alice").unwrap();
        std::thread::sleep(wait);
        let b = batch_of(&[record(Some(b"alice"), Some(b"written after the shred"), 0)]);
        let (code, msg) = raw_produce(&proxy.addr, &topic, b.freeze(), 9);
        assert_eq!(code, 0, "{msg:?}");
        let direct = consume_all(&broker, &topic, 1).unwrap();
        let dek = |v: &[u8]| v[17..25].to_vec();
        let old = dek(direct[0].value.as_deref().unwrap());
        let new = dek(direct[1].value.as_deref().unwrap());
        assert_eq!(
            old != new,
            survives,
            "fence {fence_ms:?}: DEKs {} and {}",
            hex(&old),
            hex(&new)
        );
        // Past both fences: the first value a tombstone.
        let (code, recs) = fetch_until(&proxy.addr, &topic, 25, |code, recs| {
            code != 0 || recs.first().is_some_and(|r| r.value.is_none())
        });
        assert_eq!(code, 0);
        assert_eq!(recs[0].value, None, "the shredded value");
        let after = recs[1].value.as_deref();
        if survives {
            assert_eq!(after, Some(&b"written after the shred"[..]));
        } else {
            assert_eq!(after, None, "within the fences: under the shredded DEK");
        }
    }
}

/// Two instances make one key store at once (two `create-key-store`
/// racing, or a service's instances each creating): one naming key wins
/// for both, and a shred through one reaches the other's values; then a
/// fresh proxy, and a rewrap, do not bring them back.
#[test]
fn racing_creators_share_one_naming_key_and_a_rewrap_brings_nothing_back() {
    let Some(broker) = bootstrap() else { return };
    let key_topic = fresh_topic("attack-race-keys");
    let kek = Keyset::generate();
    // The topic, made first (both creators then race on the naming key).
    drop(KafkaChangelog::with_config(config(&broker), &key_topic).unwrap());
    let makers: Vec<_> = (0..2)
        .map(|_| {
            let (kek, broker, key_topic) = (kek.clone(), broker.clone(), key_topic.clone());
            std::thread::spawn(move || {
                let log = KafkaChangelog::existing(config(&broker), &key_topic).unwrap();
                let store: Arc<dyn KeyStore> = Arc::new(KafkaKeyStore::new(log));
                SubjectKeys::create(kek, store)
            })
        })
        .collect();
    let made: Vec<SubjectKeys> = makers
        .into_iter()
        .map(|t| t.join().unwrap().unwrap())
        .collect();
    assert_eq!(
        made[0].tag(b"alice").unwrap(),
        made[1].tag(b"alice").unwrap(),
        "two creators name one subject by two tags"
    );
    // Writer A (as a proxy), shred through B.
    let a = Arc::new(made.into_iter().next().unwrap());
    let policy_a = TopicPolicy::subject_keys(a.clone());
    let v = policy_a
        .write_value("t", Some(b"alice"), Some(b"alice's data"))
        .unwrap()
        .unwrap();
    let dir = std::env::temp_dir().join(fresh_topic("attack-race"));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("kek.json"), kek.to_tink_json()).unwrap();
    let b = SubjectSetup {
        dir,
        kek: kek.clone(),
        key_topic: key_topic.clone(),
        broker: broker.clone(),
    };
    b.instance().shred(b"alice").unwrap();
    // A rewrap by a third instance, then a fresh reader.
    let rewrapped = b.instance().rewrap().unwrap();
    eprintln!("rewrap: {rewrapped} records");
    let fresh = TopicPolicy::subject_keys(Arc::new(b.instance()));
    assert_eq!(
        fresh.read_value("t", Some(b"alice"), Some(&v)).unwrap(),
        Read::Shredded
    );
    // A (the writer) within ~20 s.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = policy_a.read_value("t", Some(b"alice"), Some(&v)).unwrap();
        if r == Read::Shredded {
            break;
        }
        assert!(Instant::now() < deadline, "the writer still reads {r:?}");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Starts a fake broker on loopback that records every frame it is sent
/// (and answers none): what the proxy forwards, on the wire.
fn capturing_broker() -> (String, Arc<std::sync::Mutex<Vec<u8>>>) {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let keep = seen.clone();
    std::thread::spawn(move || {
        for s in l.incoming() {
            let Ok(mut s) = s else { return };
            let keep = keep.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    keep.lock().unwrap().extend_from_slice(&buf[..n]);
                }
            });
        }
    });
    (addr, seen)
}

/// Sends a Produce to the proxy without waiting for an answer.
fn produce_no_wait(addr: &str, topic: &str, records: Bytes) -> TcpStream {
    let body = produce_body(topic, records, 9);
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(&(body.len() as i32).to_be_bytes()).unwrap();
    s.write_all(&body).unwrap();
    s
}

/// On the wire to the broker (a fake one that keeps what it gets): an
/// ordinary batch is encrypted (the control); a batch flagged control and
/// a batch whose header claims 0 records, each holding plaintext, are
/// refused, never forwarded.
#[test]
fn on_the_wire_control_flagged_and_zero_count_batches_never_reach_the_broker() {
    let (fake, seen) = capturing_broker();
    let topic = "attack-wire";
    let keys = Keys::new(false);
    let proxy = start_proxy(&fake, keys.policies(topic), Hooks::default());
    let forwarded = |records: BytesMut, secret: &[u8]| {
        seen.lock().unwrap().clear();
        let _s = produce_no_wait(&proxy.addr, topic, records.freeze());
        std::thread::sleep(Duration::from_millis(700));
        let got = seen.lock().unwrap().clone();
        (got.len(), contains(&got, secret))
    };
    let ordinary = batch_of(&[record(Some(b"k"), Some(b"WIRE-ORDINARY-SECRET"), 0)]);
    let (n, leaked) = forwarded(ordinary, b"WIRE-ORDINARY-SECRET");
    assert!(n > 0 && !leaked, "the control: {n} bytes, leaked {leaked}");

    let mut control = batch_of(&[record(Some(b"k"), Some(b"WIRE-CONTROL-SECRET"), 0)]);
    let attrs = i16::from_be_bytes([control[21], control[22]]) | (1 << 5);
    control[21..23].copy_from_slice(&attrs.to_be_bytes());
    fix_crc(&mut control);
    let (_, control_leaked) = forwarded(control, b"WIRE-CONTROL-SECRET");

    let mut zero = batch_of(&[record(Some(b"k"), Some(b"WIRE-ZERO-SECRET"), 0)]);
    zero[57..61].copy_from_slice(&0i32.to_be_bytes());
    fix_crc(&mut zero);
    let (_, zero_leaked) = forwarded(zero, b"WIRE-ZERO-SECRET");
    assert!(
        !control_leaked && !zero_leaked,
        "plaintext forwarded to the broker on a policy topic: control-flagged batch {control_leaked}, \
         batch claiming 0 records {zero_leaked}"
    );
}
