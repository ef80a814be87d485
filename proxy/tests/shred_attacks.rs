//! Attacks on the proxy's subject-key topics, its key-store
//! topic, its configuration and its logs: attempts to delete what nobody
//! deleted, to bring back what was deleted, and to leak, with wrong
//! configuration, forged bytes and racing processes.
//!
//! Tests named `..._compacting_broker` need the compacting broker
//! (Apache Kafka, `TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`).
//! The leak test runs the command line's binary (`tombstone-crypt proxy`),
//! next to this test binary in the target directory
//! (`cargo build -p tombstone-crypt-cli` first).

use crate::common;

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::subjects::SubjectSetup;
use common::wire::*;
use common::{bootstrap, compacting, consume_all, create_topic, fresh_topic};
use kafka_protocol::records::Record;
use tombstone_crypt::policy::{Read, TopicPolicy};
use tombstone_crypt::shred::{MemoryKeyStore, Shred, SubjectKeys};
use tombstone_crypt::{KeyTemplate, Keyset};

// ---------------------------------------------------------------------
// Raw protocol helpers (as proxy/tests/policy_attacks.rs)
// ---------------------------------------------------------------------

fn compacting_broker() -> String {
    compacting::compacting_bootstrap()
}

/// The key-store records a client fetches through `proxy`: (key, value).
/// A record as (key, value).
type KeyValue = (Vec<u8>, Option<Vec<u8>>);

fn key_store_records(proxy: &str, key_topic: &str) -> (i16, Vec<KeyValue>) {
    let (code, recs) = fetch_records(proxy, key_topic);
    (
        code,
        recs.into_iter()
            .map(|r| {
                (
                    r.key.map(|k| k.to_vec()).unwrap_or_default(),
                    r.value.map(|v| v.to_vec()),
                )
            })
            .collect(),
    )
}

/// A DEK record's key: `tag (16) | DEK id (8)`, neither the naming key's
/// nor a marker's.
fn is_dek_key(k: &[u8]) -> bool {
    k.len() == 24 && k[..16] != [0xff; 16] && k[16..] != [0xff; 8]
}

// ---------------------------------------------------------------------
// 5. The key-store topic through the proxy
// ---------------------------------------------------------------------

/// A client of the proxy (no policy names the key-store topic, as in the
/// documented configuration) reads the key-store topic through the proxy
/// (every wrapped DEK, keyed by subject tag) and writes to it: a tombstone
/// for bob's DEK record (bob was never shredded). Bob's value, written
/// through the proxy before, should still read as written through the
/// proxy; it does not: the client destroyed a live subject's data through
/// the proxy (the value is CORRUPT_MESSAGE for every reader from then on,
/// and stays so: the DEK is gone from the store).
#[test]
fn a_client_through_the_proxy_cannot_read_or_write_the_key_store_topic() {
    let Some(broker) = bootstrap() else { return };
    let s = SubjectSetup::new(&broker, "ks-rw");
    let topic = fresh_topic("attack2-ks-rw");
    create_topic(&broker, &topic, 1);
    let proxy = s.proxy(&topic);
    let b = batch_of(&[record(Some(b"bob"), Some(b"bob: 2 Elm St"), 0)]);
    assert_eq!(raw_produce(&proxy.addr, &topic, b.freeze(), 9).0, 0);
    // The attacker reads the key store through the proxy.
    let (code, ks) = key_store_records(&proxy.addr, &s.key_topic);
    let deks: Vec<_> = ks.iter().filter(|(k, _)| is_dek_key(k)).collect();
    eprintln!(
        "key-store topic fetched through the proxy: code {code}, {} records, {} DEK records \
         (wrapped DEKs handed to a client)",
        ks.len(),
        deks.len()
    );
    // ... and writes a tombstone for every DEK record it saw.
    let tombstones: Vec<Record> = deks
        .iter()
        .enumerate()
        .map(|(i, (k, _))| record(Some(k), None, i as i64))
        .collect();
    let (pcode, msg) = raw_produce(&proxy.addr, &s.key_topic, batch_of(&tombstones).freeze(), 9);
    eprintln!("tombstones for DEK records produced through the proxy: code {pcode}, {msg:?}");
    // A fresh proxy (a restart) and the running one, past its fences.
    std::thread::sleep(Duration::from_millis(1500));
    let fresh = s.proxy(&topic);
    let (c1, r1) = fetch_records(&proxy.addr, &topic);
    let (c2, r2) = fetch_records(&fresh.addr, &topic);
    eprintln!(
        "bob through the running proxy: code {c1} {:?}; through a fresh one: code {c2} {:?}",
        show(&r1),
        show(&r2)
    );
    assert!(
        c1 == 0 && c2 == 0 && r2.first().and_then(|r| r.value.as_deref()) == Some(b"bob: 2 Elm St"),
        "bob was never shredded, yet after a client of the proxy fetched the key-store topic \
         ({} DEK records handed out) and produced tombstones for its DEK records through the \
         proxy (produce answered code {pcode}), bob's value reads through the proxy as code \
         {c1}/{c2} {:?}: a live subject's data destroyed through the proxy (the key-store topic \
         is passed through for reads and writes)",
        deks.len(),
        show(&r2)
    );
}

/// The compacting broker: alice is shredded (by another instance, as
/// `tombstone-crypt shred`); a restarted proxy after compaction still
/// reads her value as a tombstone. A client of the proxy gets nothing of
/// the key-store topic (`TOPIC_AUTHORIZATION_FAILED`, no records); with
/// alice's old DEK record from elsewhere (here read from the broker
/// directly), its writes through the proxy to the key-store topic (a
/// tombstone for alice's shred marker, then her old DEK record) are
/// refused, and after the key store's compaction a restarted proxy still
/// reads alice as deleted. (The same writes made to the broker directly,
/// bypassing the proxy, undo the shred once compacted: the key-store
/// topic's write access belongs to its instances alone, by the cluster's
/// ACLs.)
#[test]
fn a_marker_overwritten_and_a_dek_replayed_through_the_proxy_do_not_bring_back_a_shredded_value_compacting_broker(
) {
    let broker = compacting_broker();
    let s = SubjectSetup::new(&broker, "replay");
    let topic = fresh_topic("attack2-replay");
    compacting::create_topic_with(&broker, &topic, 1, &[]);
    let proxy = s.proxy(&topic);
    let b = batch_of(&[
        record(Some(b"alice"), Some(b"alice: 1 Main St"), 0),
        record(Some(b"bob"), Some(b"bob: 2 Elm St"), 1),
    ]);
    assert_eq!(raw_produce(&proxy.addr, &topic, b.freeze(), 9).0, 0);
    let alice_tag = {
        let direct = consume_all(&broker, &topic, 1).unwrap();
        direct[0].value.as_ref().unwrap()[1..17].to_vec()
    };
    // Through the proxy a client gets nothing of the key store.
    let (code, ks) = key_store_records(&proxy.addr, &s.key_topic);
    assert_eq!(
        (code, ks.len()),
        (29, 0),
        "the key-store topic through the proxy"
    );
    // Alice's DEK record, as read before the shred by someone with access
    // to the broker itself.
    let ks: Vec<KeyValue> = consume_all(&broker, &s.key_topic, 1)
        .unwrap()
        .into_iter()
        .map(|c| {
            (
                c.key.map(|k| k.to_vec()).unwrap_or_default(),
                c.value.map(|v| v.to_vec()),
            )
        })
        .collect();
    let saved: Vec<(Vec<u8>, Vec<u8>)> = ks
        .into_iter()
        .filter(|(k, v)| is_dek_key(k) && k[..16] == alice_tag[..] && v.is_some())
        .map(|(k, v)| (k, v.unwrap()))
        .collect();
    assert!(!saved.is_empty(), "alice's DEK record read from the broker");
    // The shred.
    assert!(matches!(
        s.instance().shred(b"alice").unwrap(),
        Shred::Removed(_)
    ));
    let (code, recs) = fetch_until(&proxy.addr, &topic, 20, |c, r| {
        c == 0 && r.first().is_some_and(|r| r.value.is_none())
    });
    assert_eq!(
        (code, recs[0].value.as_deref()),
        (0, None),
        "alice shredded"
    );
    // Control: compaction and a restart alone bring nothing back.
    compacting::wait_compacted(&broker, &s.key_topic, Duration::from_secs(30));
    {
        let restarted = s.proxy(&topic);
        let (c, r) = fetch_records(&restarted.addr, &topic);
        eprintln!(
            "control, restarted after compaction: code {c} {:?}",
            show(&r)
        );
        assert_eq!((c, r[0].value.as_deref()), (0, None));
    }
    // The attack, through the proxy.
    let mut marker = alice_tag.clone();
    marker.extend_from_slice(&[0xff; 8]);
    let mut recs = vec![record(Some(&marker), None, 0)];
    for (i, (k, v)) in saved.iter().enumerate() {
        recs.push(record(Some(k), Some(v), 1 + i as i64));
    }
    let (pcode, msg) = raw_produce(&proxy.addr, &s.key_topic, batch_of(&recs).freeze(), 9);
    assert_eq!(
        pcode, 29,
        "the replay through the proxy is refused: {msg:?}"
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (c, r) = fetch_records(&proxy.addr, &topic);
    eprintln!(
        "the running proxy after the replay: code {c} {:?}",
        show(&r)
    );
    let running_ok = c == 0 && r[0].value.is_none();
    compacting::wait_compacted(&broker, &s.key_topic, Duration::from_secs(30));
    let restarted = s.proxy(&topic);
    let (c2, r2) = fetch_records(&restarted.addr, &topic);
    eprintln!(
        "a proxy restarted after the key store's compaction: code {c2} {:?}",
        show(&r2)
    );
    let fresh_read = TopicPolicy::subject_keys(Arc::new(s.instance()));
    let direct = consume_all(&broker, &topic, 1).unwrap();
    let lib = fresh_read.read_value(&topic, Some(b"alice"), direct[0].value.as_deref());
    eprintln!("a fresh library instance reads alice's value as {lib:?}");
    assert!(
        running_ok,
        "the running proxy read alice again: {:?}",
        show(&r)
    );
    assert!(
        c2 == 0 && r2[0].value.is_none(),
        "alice was shredded; a client of the proxy wrote (through the proxy) a tombstone for \
         her shred marker's key and her old DEK record to the key-store topic; after the broker compacted it, a restarted proxy \
         reads alice's shredded value as code {c2} {:?}: a shred undone",
        show(&r2)
    );
}

/// Configuration mistakes around the key-store topic: a prefix entry that
/// also matches the key-store topic, and an entry that names the
/// key-store topic itself as its data topic, are refused when the
/// configuration loads (through such an entry a client's tombstone, never
/// encrypted, for a subject's DEK record would reach the key store, and
/// the subject's values would be gone).
#[test]
fn an_entry_that_matches_its_own_key_store_topic_is_refused() {
    let Some(broker) = bootstrap() else { return };
    let prefix = fresh_topic("attack2-pfx");
    let key_topic = format!("{prefix}-keys");
    let s = SubjectSetup::on_topic(&broker, "pfx", key_topic.clone());
    let prefix_entry = format!(
        r#"{{"prefix":"{prefix}","subject_keyset":"kek.json","subject_key_topic":"{key_topic}","subject_key_fence_ms":300}}"#
    );
    let itself = format!(
        r#"{{"topic":"{key_topic}","subject_keyset":"kek.json","subject_key_topic":"{key_topic}"}}"#
    );
    // Another entry's key store counts too.
    let other = format!(
        r#"{{"topic":"{prefix}-data","subject_keyset":"kek.json","subject_key_topic":"{key_topic}"}},
           {{"topic":"{key_topic}","value_keyset":"kek.json"}}"#
    );
    for entries in [&prefix_entry, &itself, &other] {
        let e = s.policies(entries).map(|_| ()).unwrap_err();
        assert!(e.contains("key-store topic"), "{entries}: {e}");
    }
    // The control: the same key store under a prefix that misses it loads.
    let fine = format!(
        r#"{{"prefix":"{prefix}-data","subject_keyset":"kek.json","subject_key_topic":"{key_topic}"}}"#
    );
    s.policies(&fine).unwrap();
}

/// Entries that shadow each other: a prefix entry before an exact entry
/// for a topic it matches would make the exact one unreachable (here it
/// asks for subject keys, and the topic would go under the prefix's
/// keyset, out of any shred's reach): refused when the configuration
/// loads; in the other order it loads. Topic names are case-sensitive
/// (`Users` is not `users`), as Kafka's are.
#[test]
fn a_shadowed_entry_is_refused() {
    let Some(broker) = bootstrap() else { return };
    let s = SubjectSetup::new(&broker, "shadow");
    std::fs::write(s.dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
    let prefix = r#"{"prefix":"orders.","value_keyset":"v.json"}"#;
    let exact = format!(
        r#"{{"topic":"orders.pii","subject_keyset":"kek.json","subject_key_topic":"{}"}}"#,
        s.key_topic
    );
    let users = r#"{"topic":"Users","value_keyset":"v.json"}"#;
    let e = s
        .policies(&format!("{prefix},{exact},{users}"))
        .map(|_| ())
        .unwrap_err();
    assert!(e.contains("shadowed"), "{e}");
    for shadowing in [
        format!("{prefix},{prefix}"),
        r#"{"prefix":"orders.","value_keyset":"v.json"},{"prefix":"orders.eu.","value_keyset":"v.json"}"#.to_owned(),
    ] {
        assert!(s.policies(&shadowing).is_err(), "{shadowing}");
    }
    let p = s.policies(&format!("{exact},{prefix},{users}")).unwrap();
    assert!(p.get("orders.pii").unwrap().subject_key_set().is_some());
    assert!(p.get("orders.x").unwrap().value_keyset().is_some());
    assert!(p.get("users").is_none(), "names are case-sensitive");
}

// ---------------------------------------------------------------------
// 2. Races: shred vs the proxy's first write; two proxies on one store
// ---------------------------------------------------------------------

/// For each of several fresh subjects: two proxies on the same key-store
/// topic write the subject's first value at once while `shred` (another
/// instance) shreds it. Afterwards (past the 300 ms fences) a third proxy
/// reads the topic. No value may be an error; when the shred found no key
/// (`NoKey`), the raced values must read as written; and a value written
/// after the shred and the fences must read as written.
#[test]
fn shred_racing_two_proxies_first_writes_deletes_nothing_unshredded_and_errs_nowhere() {
    let Some(broker) = bootstrap() else { return };
    let s = SubjectSetup::new(&broker, "race");
    let topic = fresh_topic("attack2-race");
    create_topic(&broker, &topic, 1);
    let p1 = s.proxy(&topic);
    let p2 = s.proxy(&topic);
    let shredder = Arc::new(s.instance());
    let mut outcomes = Vec::new();
    for i in 0..8 {
        let subject = format!("subj-{i}");
        let barrier = Arc::new(Barrier::new(3));
        let writers: Vec<_> = [&p1.addr, &p2.addr]
            .into_iter()
            .enumerate()
            .map(|(w, addr)| {
                let (addr, topic, subject, barrier) = (
                    addr.clone(),
                    topic.clone(),
                    subject.clone(),
                    barrier.clone(),
                );
                std::thread::spawn(move || {
                    let v = format!("{subject} raced by proxy {w}");
                    let b = batch_of(&[record(Some(subject.as_bytes()), Some(v.as_bytes()), 0)]);
                    barrier.wait();
                    raw_produce(&addr, &topic, b.freeze(), 9)
                })
            })
            .collect();
        let shred = {
            let (k, subject, barrier) = (shredder.clone(), subject.clone(), barrier.clone());
            std::thread::spawn(move || {
                barrier.wait();
                std::thread::sleep(Duration::from_millis(5 * i));
                k.shred(subject.as_bytes())
            })
        };
        let produced: Vec<_> = writers.into_iter().map(|t| t.join().unwrap()).collect();
        let shred = shred.join().unwrap();
        outcomes.push((subject, produced, shred));
    }
    std::thread::sleep(Duration::from_millis(1500));
    // After the shreds and the fences: one more value per subject.
    for (subject, _, _) in &outcomes {
        let v = format!("{subject} after");
        let b = batch_of(&[record(Some(subject.as_bytes()), Some(v.as_bytes()), 0)]);
        let (code, msg) = raw_produce(&p1.addr, &topic, b.freeze(), 9);
        assert_eq!(code, 0, "{msg:?}");
    }
    let p3 = s.proxy(&topic);
    let (code, recs) = fetch_records(&p3.addr, &topic);
    for o in &outcomes {
        eprintln!("{o:?}");
    }
    eprintln!("read: code {code} {:?}", show(&recs));
    assert_eq!(code, 0, "a value of the race reads as an error");
    let mut problems = Vec::new();
    for (subject, produced, shred) in &outcomes {
        let mine: Vec<&Record> = recs
            .iter()
            .filter(|r| r.key.as_deref() == Some(subject.as_bytes()))
            .collect();
        let after = mine
            .iter()
            .find(|r| r.value.as_deref().is_some_and(|v| v.ends_with(b" after")));
        if after.is_none() {
            problems.push(format!(
                "{subject}: the value written after the shred is not live"
            ));
        }
        let raced: Vec<_> = mine
            .iter()
            .filter(|r| !r.value.as_deref().is_some_and(|v| v.ends_with(b" after")))
            .collect();
        let written = produced.iter().filter(|(c, _)| *c == 0).count();
        if matches!(shred, Ok(Shred::NoKey)) && raced.iter().any(|r| r.value.is_none()) {
            problems.push(format!(
                "{subject}: the shred found no key, yet a raced value reads as deleted"
            ));
        }
        if matches!(shred, Ok(Shred::Removed(_))) && raced.iter().any(|r| r.value.is_some()) {
            problems.push(format!(
                "{subject}: the shred removed a key, yet a value written before it returned \
                 reads as written ({} written)",
                written
            ));
        }
    }
    // A value written during the shred may live under a DEK made after the
    // shred's read; only report, do not fail, on the last rule.
    let hard: Vec<_> = problems
        .iter()
        .filter(|p| !p.contains("reads as written ("))
        .collect();
    eprintln!("problems: {problems:#?}");
    assert!(hard.is_empty(), "{hard:#?}");
}

// ---------------------------------------------------------------------
// 4. Bypasses of the shred check (library, no broker)
// ---------------------------------------------------------------------

/// A shredded value of alice read under: alice's other record-key form
/// (a rotated key keyset: still alice, a delete is right); keys that are
/// a prefix or a suffix of hers, an empty key, no key (errors, never a
/// delete); truncated to the header (an error); bob's tag with alice's
/// shredded DEK id, under bob (live, and then shredded himself), as a
/// marker replay (an error while bob is live).
#[test]
fn policy_the_subject_tag_check_has_no_bypass_by_key_form_prefix_empty_truncation_or_dek_swap() {
    let keys =
        Arc::new(SubjectKeys::create(Keyset::generate(), Arc::new(MemoryKeyStore::new())).unwrap());
    let mut kk = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let before = TopicPolicy::subject_keys(keys.clone())
        .with_record_keys(kk.clone())
        .unwrap();
    let t = "t";
    let alice_old_form = before
        .write_key(t, b"alice")
        .unwrap()
        .unwrap()
        .primary()
        .to_vec();
    kk.rotate_with(KeyTemplate::aes256_siv()).unwrap();
    let policy = TopicPolicy::subject_keys(keys.clone())
        .with_record_keys(kk)
        .unwrap();
    let alice_forms = policy.write_key(t, b"alice").unwrap().unwrap();
    assert_eq!(alice_forms.older(), std::slice::from_ref(&alice_old_form));
    let alice = policy
        .write_value(t, Some(b"alice"), Some(b"alice: 1 Main St"))
        .unwrap()
        .unwrap();
    let bob = policy
        .write_value(t, Some(b"bob"), Some(b"bob: 2 Elm St"))
        .unwrap()
        .unwrap();
    let empty = policy
        .write_value(t, Some(b""), Some(b"empty-key subject"))
        .unwrap()
        .unwrap();
    keys.shred(b"alice").unwrap();
    // Alice's other key form: still alice.
    let plain = policy.read_key(t, &alice_old_form).unwrap();
    assert_eq!(
        policy.read_value(t, Some(&plain), Some(&alice)).unwrap(),
        Read::Shredded
    );
    let mut bad = Vec::new();
    for key in [
        &b"alic"[..],
        b"alice\0",
        b"alicex",
        b"xalice",
        b"",
        b"ALICE",
    ] {
        let r = policy.read_value(t, Some(key), Some(&alice));
        if r.is_ok() {
            bad.push(format!(
                "alice's value under {:?}: {r:?}",
                String::from_utf8_lossy(key)
            ));
        }
    }
    let none = policy.read_value(t, None, Some(&alice));
    if none.is_ok() {
        bad.push(format!("alice's value with no key: {none:?}"));
    }
    // The empty key's own value is fine.
    assert!(matches!(
        policy.read_value(t, Some(b""), Some(&empty)).unwrap(),
        Read::Value(_)
    ));
    // Truncations.
    for n in [0, 1, 17, 25, 37, 52] {
        let r = policy.read_value(t, Some(b"bob"), Some(&alice[..n.min(alice.len())]));
        if r.is_ok() {
            bad.push(format!("alice's value cut to {n} bytes under bob: {r:?}"));
        }
    }
    let exact = policy.read_value(t, Some(b"alice"), Some(&alice[..53]));
    eprintln!("alice's header + 16 bytes (an empty ciphertext) under alice: {exact:?}");
    // Bob's tag, alice's shredded DEK id, under bob (live).
    let mut swapped = bob.clone();
    swapped[17..25].copy_from_slice(&alice[17..25]);
    let r = policy.read_value(t, Some(b"bob"), Some(&swapped));
    if r.is_ok() {
        bad.push(format!(
            "bob's tag + alice's shredded DEK id under bob (live): {r:?}"
        ));
    }
    // Alice's tag, bob's live DEK id, under alice and under bob.
    let mut swapped2 = alice.clone();
    swapped2[17..25].copy_from_slice(&bob[17..25]);
    for key in [&b"alice"[..], b"bob"] {
        let r = policy.read_value(t, Some(key), Some(&swapped2));
        if r.is_ok() {
            bad.push(format!(
                "alice's tag + bob's DEK id under {:?}: {r:?}",
                String::from_utf8_lossy(key)
            ));
        }
    }
    // On another topic under alice (same key store): alice is shredded
    // everywhere, a delete there is right.
    eprintln!(
        "alice's value on topic u under alice: {:?}",
        policy.read_value("u", Some(b"alice"), Some(&alice))
    );
    assert!(bad.is_empty(), "{bad:#?}");
}

// ---------------------------------------------------------------------
// 1. Leaks in the proxy's logs and its errors
// ---------------------------------------------------------------------

/// The command line's binary, next to this test's.
fn cli_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("tombstone-crypt")
}

struct ChildProxy {
    child: Child,
    log: PathBuf,
}

impl ChildProxy {
    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for ChildProxy {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn key_bytes_of(ks: &Keyset) -> Vec<String> {
    let json: serde_json::Value = serde_json::from_str(&ks.to_tink_json()).unwrap();
    let mut out = Vec::new();
    for k in json["key"].as_array().unwrap() {
        let value = k["keyData"]["value"].as_str().unwrap();
        out.push(value[..24.min(value.len())].to_owned());
        let proto =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value).unwrap();
        if proto.len() > 10 {
            out.push(hex(&proto[2..10]));
            let d = format!("{:?}", &proto[2..10]);
            out.push(d.trim_matches(|c| c == '[' || c == ']').to_owned());
        }
    }
    out
}

/// `tombstone-crypt proxy --config ... -vvv` with `RUST_LOG=trace` as a
/// child, made to refuse: a control-flagged batch, a batch claiming 0
/// records, an unkeyed record on a subject-key topic, a value and a named
/// header that do not authenticate (plaintext written to the broker
/// directly), a record key that does not decrypt, a value whose KMS is
/// down (a `kms-envelope` keyset whose Vault is a closed port; the child's
/// `VAULT_TOKEN` a marker). No plaintext value, record key, header value,
/// Vault token or key bytes may be in its stderr or in the client's error
/// messages.
#[test]
fn the_proxy_binary_logs_and_answers_no_secret_when_it_refuses() {
    let Some(broker) = bootstrap() else { return };
    let bin = cli_binary();
    assert!(
        bin.exists(),
        "{} missing: build the command line first (cargo build -p tombstone-crypt-cli; the whole test command builds it)",
        bin.display()
    );
    let s = SubjectSetup::new(&broker, "leak");
    let dir = &s.dir;
    let values = Keyset::generate();
    let key_keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let kms_uri = "hcvault://127.0.0.1:1/transit/keys/leak-kek";
    let kms_values = Keyset::generate_with(KeyTemplate::kms_envelope(kms_uri)).unwrap();
    std::fs::write(dir.join("v.json"), values.to_tink_json()).unwrap();
    std::fs::write(dir.join("k.json"), key_keys.to_tink_json()).unwrap();
    std::fs::write(dir.join("kms.json"), kms_values.to_tink_json()).unwrap();
    let kt = fresh_topic("attack2-leak-ks");
    let st = fresh_topic("attack2-leak-subj");
    let mt = fresh_topic("attack2-leak-kms");
    let ht = fresh_topic("attack2-leak-hdr");
    let st2 = fresh_topic("attack2-leak-subj-s");
    for t in [&kt, &st, &mt, &ht, &st2] {
        create_topic(&broker, t, 1);
    }
    let port = common::kafka::free_base_port();
    let cfg = serde_json::json!({
        "listen": format!("127.0.0.1:{port}"),
        "bootstrap": broker,
        "topics": [
            {"topic": kt, "value_keyset": "v.json", "key_keyset": "k.json", "headers": ["x-ssn"]},
            {"topic": st, "subject_keyset": "kek.json", "subject_key_topic": s.key_topic,
             "subject_key_fence_ms": 300},
            {"topic": mt, "value_keyset": "kms.json"},
            {"topic": ht, "value_keyset": "v.json", "headers": ["x-ssn"]},
            {"topic": st2, "subject_keyset": "kek.json", "subject_key_topic": s.key_topic},
        ]
    });
    std::fs::write(dir.join("proxy.json"), cfg.to_string()).unwrap();
    let token = "hvs.LEAKTOKEN0123456789abcdef";
    let log = dir.join("proxy.log");
    let child = Command::new(&bin)
        .args(["proxy", "--config"])
        .arg(dir.join("proxy.json"))
        .args(["--drain-seconds", "2", "-vvv"])
        .env("RUST_LOG", "trace")
        .env("VAULT_ADDR", "http://127.0.0.1:1")
        .env("VAULT_TOKEN", token)
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let proxy = ChildProxy { child, log };
    let addr = format!("127.0.0.1:{port}");
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(&addr).is_err() {
        assert!(
            Instant::now() < deadline,
            "the proxy did not listen: {}",
            proxy.log()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut secrets: Vec<Vec<u8>> = Vec::new();
    let mut answers = Vec::new();
    let mut secret = |s: &str| {
        secrets.push(s.as_bytes().to_vec());
        s.to_owned()
    };
    // Control-flagged and zero-count batches.
    let v1 = secret("LEAK-CONTROL-VALUE-4111111111111111");
    let k1 = secret("LEAK-CONTROL-KEY-alice@example.com");
    let h1 = secret("LEAK-CONTROL-HDR-999-88-7777");
    let mut b = batch_of(&[with_header(
        record(Some(k1.as_bytes()), Some(v1.as_bytes()), 0),
        "x-ssn",
        h1.as_bytes(),
    )]);
    let attrs = i16::from_be_bytes([b[21], b[22]]) | (1 << 5);
    b[21..23].copy_from_slice(&attrs.to_be_bytes());
    fix_crc(&mut b);
    answers.push(("control", raw_produce(&addr, &kt, b.freeze(), 9)));
    let v2 = secret("LEAK-ZERO-VALUE-5500000000000004");
    let mut b = batch_of(&[record(Some(b"k"), Some(v2.as_bytes()), 0)]);
    b[57..61].copy_from_slice(&0i32.to_be_bytes());
    fix_crc(&mut b);
    answers.push(("zero-count", raw_produce(&addr, &kt, b.freeze(), 9)));
    // A batch that does not decode (a bad CRC) holding a secret.
    let v2b = secret("LEAK-BADCRC-VALUE-6011000000000004");
    let mut b = batch_of(&[record(Some(b"k"), Some(v2b.as_bytes()), 0)]);
    b[17] ^= 0xff;
    answers.push(("bad crc", raw_produce(&addr, &kt, b.freeze(), 9)));
    // Unkeyed on the subject-key topic.
    let v3 = secret("LEAK-UNKEYED-SUBJECT-VALUE-378282246310005");
    let b = batch_of(&[record(None, Some(v3.as_bytes()), 0)]);
    answers.push(("unkeyed subject", raw_produce(&addr, &st, b.freeze(), 9)));
    // The KMS down.
    let v4 = secret("LEAK-KMS-DOWN-VALUE-30569309025904");
    let b = batch_of(&[record(Some(b"k"), Some(v4.as_bytes()), 0)]);
    answers.push(("kms down", raw_produce(&addr, &mt, b.freeze(), 9)));
    // Plaintext on the broker directly: a value and a header that do not
    // authenticate, a key that does not decrypt; read through the proxy.
    let v5 = secret("LEAK-DIRECT-VALUE-6221260000000000");
    let h5 = secret("LEAK-DIRECT-HDR-987-65-4321");
    let k5 = secret("LEAK-DIRECT-KEY-bob@example.com");
    let b = batch_of(&[with_header(
        record(Some(k5.as_bytes()), Some(v5.as_bytes()), 0),
        "x-ssn",
        h5.as_bytes(),
    )]);
    assert_eq!(raw_produce(&broker, &kt, b.freeze(), 9).0, 0);
    let (fc1, _) = raw_fetch(&addr, &kt);
    // On the subject topic: a plaintext value and a forged one.
    let v6 = secret("LEAK-DIRECT-SUBJECT-VALUE-3530111333300000");
    let b = batch_of(&[record(Some(b"carol"), Some(v6.as_bytes()), 0)]);
    assert_eq!(raw_produce(&broker, &st, b.freeze(), 9).0, 0);
    let (fc2, _) = raw_fetch(&addr, &st);
    // A plaintext value on the subject topic that starts with `S` (0x53,
    // the format byte) and is longer than a value's overhead: its bytes
    // 1..25 are read as a subject tag and a DEK id.
    let v7 = secret("SSN 123-45-6789, born 1970-01-01, Jane Q. Public, 1 Main St");
    let b = batch_of(&[record(Some(b"jane"), Some(v7.as_bytes()), 0)]);
    assert_eq!(raw_produce(&broker, &st2, b.freeze(), 9).0, 0);
    let (fc4, _) = raw_fetch(&addr, &st2);
    eprintln!("S-plaintext subject topic fetch: code {fc4}");
    // A named header that does not authenticate, on a topic without a
    // key keyset (the header is read before the value).
    let h8 = secret("LEAK-HEADER-ONLY-555-44-3333");
    let b = batch_of(&[with_header(
        record(Some(b"k"), None, 0),
        "x-ssn",
        h8.as_bytes(),
    )]);
    assert_eq!(raw_produce(&broker, &ht, b.freeze(), 9).0, 0);
    let (fc3, _) = raw_fetch(&addr, &ht);
    eprintln!("header topic fetch: code {fc3}");
    std::thread::sleep(Duration::from_millis(500));
    let stderr = proxy.log();
    drop(proxy);
    let stderr = stderr + &std::fs::read_to_string(dir.join("proxy.log")).unwrap_or_default();
    eprintln!("answers: {answers:#?}\nfetch codes: {fc1} {fc2}");
    eprintln!("--- proxy stderr ({} bytes) ---\n{}", stderr.len(), {
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("refused"))
            .collect();
        lines.join("\n")
    });
    let mut leaks = Vec::new();
    let mut needles: Vec<(String, Vec<u8>)> = secrets
        .iter()
        .map(|s| (String::from_utf8_lossy(s).into_owned(), s.clone()))
        .collect();
    needles.push(("vault token".into(), token.as_bytes().to_vec()));
    for ks in [&values, &key_keys, &kms_values, &s.kek] {
        for k in key_bytes_of(ks) {
            needles.push((format!("key bytes {k}"), k.into_bytes()));
        }
    }
    // Hex and Debug forms of the plaintexts too.
    for s in &secrets {
        needles.push((
            format!("hex of {}", String::from_utf8_lossy(s)),
            hex(&s[..12]).into_bytes(),
        ));
        needles.push((
            format!("hex of bytes 1..13 of {}", String::from_utf8_lossy(s)),
            hex(&s[1..13]).into_bytes(),
        ));
        needles.push((
            format!("hex of bytes 17..25 of {}", String::from_utf8_lossy(s)),
            hex(&s[17..25]).into_bytes(),
        ));
        let d = format!("{:?}", &s[..8]);
        needles.push((
            format!("debug of {}", String::from_utf8_lossy(s)),
            d.trim_matches(|c| c == '[' || c == ']').as_bytes().to_vec(),
        ));
    }
    for (what, n) in &needles {
        if contains(stderr.as_bytes(), n) {
            leaks.push(format!("stderr holds {what}"));
        }
        for (case, (_, msg)) in &answers {
            if msg.as_deref().is_some_and(|m| contains(m.as_bytes(), n)) {
                leaks.push(format!("the client's error for {case} holds {what}"));
            }
        }
    }
    // Every refusal was one (never a success that would store plaintext).
    for (case, (code, msg)) in &answers {
        if *code == 0 {
            leaks.push(format!("{case}: accepted ({msg:?})"));
        }
    }
    let (_, raw) = raw_fetch(&broker, &kt);
    for s in [&v1, &v2, &v2b] {
        if contains(&raw, s.as_bytes()) {
            leaks.push(format!("{s} reached the broker"));
        }
    }
    assert!(leaks.is_empty(), "{leaks:#?}");
}
