//! Subject keys on a key-store topic (`KafkaKeyStore`) against real
//! brokers: instances racing to make a subject's first DEK leave one DEK,
//! and a broker paused past the fence makes an instance refuse subject-key
//! values (fail closed) until it can read the topic again.
//!
//! The race uses the shared broker (`TOMBSTONE_KAFKA_BOOTSTRAP`, or skip
//! with `TOMBSTONE_SKIP_KAFKA=1`); the pause a private one
//! (`tests/common/broker.rs`).
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use common::broker::PrivateBroker;
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::shred::{SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::{compact, Changelog as _};
use tombstone_crypt::{Context, Deserializer as _, Error, Keyset, Serializer as _, Utf8};

/// Each subject tag's DEK ids on the key-store topic: every one ever
/// written (`all`), or those live as compaction will leave it; shred
/// markers and the naming key aside.
fn deks(bootstrap: &str, topic: &str, all: bool) -> BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> {
    let log = KafkaChangelog::open(bootstrap, topic).unwrap();
    let records = log.records().unwrap();
    let records = if all { records } else { compact(&records) };
    let mut live: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> = BTreeMap::new();
    for r in records {
        let (tag, id) = r.key.split_at(16);
        if r.value.is_none() || id == [0xff; 8] || tag == [0xff; 16] {
            continue;
        }
        live.entry(tag.to_vec()).or_default().insert(id.to_vec());
    }
    live
}

/// Two instances (each its own view of one key-store topic) write the
/// first value of the same `subjects` at once, round after round. Returns
/// (races: subjects for which both made a DEK, subjects left with more than
/// one live DEK). Checks on the way that each instance reads every value
/// both wrote, and that every value names the subject's one live DEK
/// (or one of its DEKs, when the store keeps the losers).
fn race(bootstrap: &str, withdraw: bool, subjects: usize) -> (usize, usize) {
    let topic = common::kafka::fresh_topic("subject-keys-races");
    let kek = Keyset::generate();
    let instance = || {
        let store = common::kafka::key_store(KafkaChangelog::open(bootstrap, &topic).unwrap());
        let store = if withdraw {
            store
        } else {
            store.without_withdrawing_lost_deks()
        };
        Arc::new(SubjectKeys::create(kek.clone(), Arc::new(store)).unwrap())
    };
    let (a, b) = (instance(), instance());
    // The naming key first, so that the instances race on DEKs alone.
    a.tag(b"warm-up").unwrap();
    let barrier = Barrier::new(2);
    let names: Vec<String> = (0..subjects).map(|i| format!("subject-{i}")).collect();
    let written: Vec<(String, Vec<u8>)> = std::thread::scope(|s| {
        let hs: Vec<_> = [&a, &b]
            .into_iter()
            .map(|k| {
                let (barrier, names) = (&barrier, &names);
                s.spawn(move || {
                    let w = SubjectEncrypting::new(Arc::clone(k), Utf8);
                    let mut out = Vec::new();
                    for name in names {
                        barrier.wait();
                        let ctx = Context::new("t").with_key(name.as_bytes());
                        let v = w.serialize(&ctx, Some(name.as_str())).unwrap().unwrap();
                        out.push((name.clone(), v));
                    }
                    out
                })
            })
            .collect();
        hs.into_iter().flat_map(|h| h.join().unwrap()).collect()
    });
    // No subject is named in cleartext on the key-store topic.
    let raw = KafkaChangelog::open(bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap();
    for r in &raw {
        for bytes in [&r.key[..], r.value.as_deref().unwrap_or_default()] {
            assert!(
                !bytes.windows(8).any(|w| w == b"subject-"),
                "a subject in cleartext on the key-store topic"
            );
        }
    }
    // A race: both instances wrote a DEK record for the subject.
    let races = deks(bootstrap, &topic, true)
        .values()
        .filter(|ids| ids.len() > 1)
        .count();
    let live = deks(bootstrap, &topic, false);
    assert_eq!(live.len(), subjects, "a subject without a DEK");
    for (name, v) in &written {
        let ctx = Context::new("t").with_key(name.as_bytes());
        for k in [&a, &b] {
            let r: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(k), Utf8);
            assert_eq!(
                r.deserialize(&ctx, Some(v)).unwrap().as_deref(),
                Some(name.as_str())
            );
        }
        // `0x53 | tag (16) | DEK id (8) | ...`
        let ids = &live[&v[1..17]];
        assert!(ids.contains(&v[17..25]), "a value under a DEK not live");
    }
    let doubled = live.values().filter(|ids| ids.len() > 1).count();
    // One shred reaches every DEK of a subject.
    a.shred(names[0].as_bytes()).unwrap();
    assert!(!deks(bootstrap, &topic, false).contains_key(&written[0].1[1..17]));
    (races, doubled)
}

#[test]
fn instances_racing_for_a_subjects_first_dek_leave_it_one_dek() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let (mut races, mut doubled) = (0, 0);
    // Rounds until some races happened (each instance makes a DEK for the
    // same subject); nearly always in the first.
    for _ in 0..5 {
        let (r, d) = race(&bootstrap, true, 12);
        races += r;
        doubled += d;
        if races >= 2 {
            break;
        }
    }
    eprintln!("{races} races, {doubled} subjects left with two DEKs");
    assert!(races >= 2, "no race happened: the test shows nothing");
    assert_eq!(doubled, 0, "a subject kept two DEKs");
}

#[test]
fn control_a_maker_that_keeps_its_lost_dek_leaves_two() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let mut doubled = 0;
    for _ in 0..5 {
        let (races, d) = race(&bootstrap, false, 12);
        doubled += d;
        assert_eq!(d, races, "every race leaves two DEKs here");
        if doubled >= 2 {
            break;
        }
    }
    assert!(doubled >= 2, "the control met the rule");
}

/// A broker paused past the fence: an instance whose view of the key-store
/// topic is stale refuses subject-key values (an error, never the value,
/// never a delete) and a shred through it fails (the caller knows); once
/// the broker is back, both work again. The control, an instance whose
/// view and cache are never stale (fences of an hour), goes on serving
/// through the pause: what the fence stops.
#[test]
fn a_paused_broker_makes_a_stale_view_refuse_subject_key_values() {
    if std::env::var_os("TOMBSTONE_SKIP_KAFKA").is_some() {
        return;
    }
    let broker = PrivateBroker::start();
    let topic = common::kafka::fresh_topic("subject-keys-paused");
    broker.warm_up(&[&topic]);
    let kek = Keyset::generate();
    let instance = |view: Duration, cache: Duration| {
        let log = KafkaChangelog::open(&broker.bootstrap, &topic)
            .unwrap()
            .with_timeout(Duration::from_secs(3));
        let keys = SubjectKeys::create(
            kek.clone(),
            Arc::new(common::kafka::key_store(log).with_fence(view)),
        )
        .unwrap()
        .with_fence(cache);
        SubjectEncrypting::new(Arc::new(keys), Utf8)
    };
    let fenced = instance(Duration::from_millis(300), Duration::from_millis(200));
    let control = instance(Duration::from_secs(3600), Duration::from_secs(3600));
    let ctx = Context::new("t").with_key(b"subject-1");
    let v = fenced.serialize(&ctx, Some("one")).unwrap().unwrap();
    let read = |w: &SubjectEncrypting<Utf8, str>| w.deserialize(&ctx, Some(&v));
    assert_eq!(read(&fenced).unwrap().as_deref(), Some("one"));
    assert_eq!(read(&control).unwrap().as_deref(), Some("one"));

    broker.pause();
    let paused = Instant::now();
    std::thread::sleep(Duration::from_millis(600));
    // Past both fences: the fenced instance must ask the topic, which does
    // not answer.
    let refused = read(&fenced);
    let waited = paused.elapsed();
    let shred = fenced.keys().shred(b"subject-2");
    let served = read(&control);
    broker.resume();
    eprintln!("refused after {waited:?}: {refused:?}");
    assert!(
        matches!(refused, Err(Error::Changelog { .. })),
        "a stale view served: {refused:?}"
    );
    assert!(
        shred.is_err(),
        "a shred reported done with the broker paused"
    );
    assert_eq!(
        served.unwrap().as_deref(),
        Some("one"),
        "the control did not serve"
    );
    // Back: the fenced instance reads again, and shreds.
    assert_eq!(read(&fenced).unwrap().as_deref(), Some("one"));
    fenced.keys().shred(b"subject-1").unwrap();
    assert_eq!(read(&fenced).unwrap(), None);
}
