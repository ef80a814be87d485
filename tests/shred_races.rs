//! One truth in a shared key store, with several processes on one
//! key-store topic (`kafka::KafkaKeyStore`) on the loopback broker.
//!
//! The model: instances (processes) start together on an empty key-store
//! topic, each making the store's naming key if it finds none, and each
//! writes a first value for the same subjects (racing for their first
//! DEKs); then one process shreds two subjects while another rewraps the
//! store again and again. Afterwards a fresh instance reads every value:
//! each value of a shredded subject reads as deleted, every other value as
//! written; the store's own check is clean (one naming key) or names the
//! fault. Its control, instances that keep the naming key they made
//! without reading the store's back, fails it: a subject then has a tag
//! per instance and the shred misses some of its values.
//!
//! A rewrap racing a shred: its record written again after the shred's
//! marker is dead for every reader (the marker names the DEK ids it
//! covers), made deterministic here by writing that record after the
//! marker by hand; the control, the rule before (a marker covers the
//! records below it only), reads the shredded value again. And a store
//! whose naming key changed under a running instance (the store made
//! again) makes that instance refuse subject-key values.
//!
//! The processes are this test binary run again on one `#[ignore]`d test
//! (`child`), told what to do by environment variables.

#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::rng::Rng;
use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::{KeyStore, Shred, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::Changelog as _;
use tombstone_crypt::{Context, Deserializer as _, Error, Keyset, Serializer as _, Utf8};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

const SUBJECTS: [&str; 4] = ["alice", "bob", "carol", "dan"];
const SHREDDED: [&str; 2] = ["alice", "bob"];

fn store(bootstrap: &str, topic: &str) -> KafkaKeyStore {
    common::kafka::key_store(KafkaChangelog::open(bootstrap, topic).unwrap())
        .with_fence(Duration::from_millis(200))
}

/// A process of the model: `TC_RACE=write|shred|rewrap`, the KEK in
/// `TC_RACE_KEK`, the topic in `TC_RACE_TOPIC` on `TC_RACE_BOOTSTRAP`,
/// after `TC_RACE_DELAY_MS`. `write` makes the store (or opens it) and
/// prints `V subject base64(value)` per subject; `shred` shreds
/// [`SHREDDED`]; `rewrap` rewraps the store `TC_RACE_REWRAPS` times.
/// `TC_RACE_CONTROL=1`: the controls (a naming key kept without reading
/// back; markers covering offsets only).
#[test]
#[ignore = "run by the race tests as one of their processes"]
fn child() {
    let Ok(what) = std::env::var("TC_RACE") else {
        return;
    };
    let env = |k: &str| std::env::var(k).unwrap();
    let kek = Keyset::from_tink_json(&env("TC_RACE_KEK")).unwrap();
    let control = std::env::var_os("TC_RACE_CONTROL").is_some();
    let mut s = store(&env("TC_RACE_BOOTSTRAP"), &env("TC_RACE_TOPIC"));
    if control {
        s = s.with_markers_covering_offsets_only();
    }
    let s: Arc<dyn KeyStore> = Arc::new(s);
    std::thread::sleep(Duration::from_millis(
        env("TC_RACE_DELAY_MS").parse().unwrap(),
    ));
    match what.as_str() {
        "write" => {
            let keys = if control {
                SubjectKeys::create_without_reading_back(kek, s)
            } else {
                SubjectKeys::create(kek, s)
            };
            let values: SubjectEncrypting<Utf8, str> =
                SubjectEncrypting::new(Arc::new(keys.unwrap()), Utf8);
            for subject in SUBJECTS {
                let ctx = Context::new("t").with_key(subject.as_bytes());
                let plain = format!("{subject} from {}", std::process::id());
                let v = values.serialize(&ctx, Some(&plain)).unwrap().unwrap();
                println!("V {subject} {}", B64.encode(v));
            }
        }
        "shred" => {
            let keys = SubjectKeys::open(kek, s).unwrap();
            for subject in SHREDDED {
                keys.shred(subject.as_bytes()).unwrap();
                println!("S {subject}");
            }
        }
        "rewrap" => {
            let keys = SubjectKeys::open(kek, s).unwrap();
            for _ in 0..env("TC_RACE_REWRAPS").parse().unwrap() {
                keys.rewrap().unwrap();
            }
            println!("R done");
        }
        other => panic!("unknown role {other}"),
    }
}

fn spawn(
    what: &str,
    kek: &Keyset,
    bootstrap: &str,
    topic: &str,
    delay: u64,
    control: bool,
) -> Child {
    let mut c = Command::new(std::env::current_exe().unwrap());
    c.args([
        "--exact",
        &common::test_name(module_path!(), "child"),
        "--ignored",
        "--nocapture",
        "--quiet",
    ])
    .env("TC_RACE", what)
    .env("TC_RACE_KEK", kek.to_tink_json())
    .env("TC_RACE_BOOTSTRAP", bootstrap)
    .env("TC_RACE_TOPIC", topic)
    .env("TC_RACE_DELAY_MS", delay.to_string())
    .env("TC_RACE_REWRAPS", "6")
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit());
    if control {
        c.env("TC_RACE_CONTROL", "1");
    }
    c.spawn().unwrap()
}

/// The lines a child printed (its own: `V`, `S`, `R`), once it ended well.
fn lines(mut child: Child) -> Vec<String> {
    let out = BufReader::new(child.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.starts_with("V ") || l.starts_with("S ") || l.starts_with("R "))
        .collect();
    assert!(
        child.wait().unwrap().success(),
        "a process of the model failed"
    );
    out
}

/// One round of the model; `Err` says how a read broke it.
fn round(bootstrap: &str, seed: u64, control: bool) -> Result<(), String> {
    let mut rng = Rng(seed);
    let kek = Keyset::generate();
    let topic = common::kafka::fresh_topic(&format!("shred-races-{seed}"));
    drop(KafkaChangelog::open(bootstrap, &topic).unwrap());
    // Three instances start together (within 20 ms) on the empty store.
    let writers: Vec<Child> = (0..3)
        .map(|_| spawn("write", &kek, bootstrap, &topic, rng.below(20), control))
        .collect();
    let mut written: Vec<(String, Vec<u8>)> = Vec::new();
    for w in writers {
        for l in lines(w) {
            let mut parts = l.splitn(3, ' ').skip(1);
            let (subject, v) = (parts.next().unwrap(), parts.next().unwrap());
            let v = B64.decode(v).unwrap();
            written.push((subject.to_owned(), v));
        }
    }
    assert_eq!(written.len(), 3 * SUBJECTS.len());
    // One process shreds while another rewraps, with random delays.
    let shredder = spawn("shred", &kek, bootstrap, &topic, rng.below(60), control);
    let rewrapper = spawn("rewrap", &kek, bootstrap, &topic, rng.below(60), control);
    assert_eq!(lines(shredder).len(), SHREDDED.len());
    assert_eq!(lines(rewrapper).len(), 1);
    // A fresh instance reads every value (past every fence).
    let mut reader_store = store(bootstrap, &topic);
    if control {
        reader_store = reader_store.with_markers_covering_offsets_only();
    }
    let keys = SubjectKeys::open(kek, Arc::new(reader_store)).unwrap();
    let check = keys.check().unwrap();
    let reader: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let mut wrong = BTreeMap::new();
    for (subject, v) in &written {
        let ctx = Context::new("t").with_key(subject.as_bytes());
        let got = reader.deserialize(&ctx, Some(v));
        let shredded = SHREDDED.contains(&subject.as_str());
        let ok = match &got {
            Ok(None) => shredded,
            Ok(Some(text)) => !shredded && text.starts_with(subject.as_str()),
            Err(_) => false,
        };
        if !ok {
            wrong.insert(subject.clone(), format!("{got:?}"));
        }
    }
    if !wrong.is_empty() {
        return Err(format!(
            "values read against the model: {wrong:?}; check {check:?}"
        ));
    }
    if !check.is_clean() {
        // A maker stopped before it withdrew its record would leave one:
        // none is stopped here, so the check must be clean.
        return Err(format!("the store's check is not clean: {check:?}"));
    }
    Ok(())
}

#[test]
fn model_processes_starting_together_shredding_and_rewrapping_agree_on_every_value() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    for seed in 1..=6 {
        if let Err(e) = round(&bootstrap, seed, false) {
            panic!("round {seed}: {e}");
        }
    }
    // The control (a naming key kept without reading back) fails it: in
    // the trials here, in every round where two instances made a naming
    // key; three rounds give it room.
    let failed: Vec<String> = (101..=103)
        .filter_map(|seed| round(&bootstrap, seed, true).err())
        .collect();
    eprintln!(
        "the control failed {} of 3 rounds: {failed:?}",
        failed.len()
    );
    assert!(!failed.is_empty(), "the control passed every round");
}

/// A rewrap's record for a DEK, written after the shred's marker (the
/// race: the rewrap read the view before the marker and wrote after it),
/// made deterministic: a fresh reader still reads the value as a delete,
/// and `shred check` sees one subject shredded; under the control (the
/// rule before: a marker covers the records below it only) the value reads
/// again.
#[test]
fn a_record_rewrapped_after_a_shred_marker_stays_shredded() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let topic = common::kafka::fresh_topic("shred-rewrap-race");
    let writer = SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(writer), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    let v = values.serialize(&ctx, Some("alice's")).unwrap().unwrap();
    // The rewrap reads alice's DEK record (what it will write again) ...
    let rewrap_store = store(&bootstrap, &topic);
    let (tag, record) = rewrap_store
        .records()
        .unwrap()
        .into_iter()
        .find(|(t, _)| *t != [0xff; 16])
        .unwrap();
    // ... the shred lands ...
    values.keys().shred(b"alice").unwrap();
    // ... and the rewrap's write lands after the marker.
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    let mut key = tag.to_vec();
    key.extend_from_slice(&record[..8]);
    log.append(&key, Some(&record)).unwrap();
    log.flush().unwrap();

    let read = |control: bool| {
        let mut s = store(&bootstrap, &topic);
        if control {
            s = s.with_markers_covering_offsets_only();
        }
        let keys = SubjectKeys::open(kek.clone(), Arc::new(s)).unwrap();
        SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8).deserialize(&ctx, Some(&v))
    };
    assert_eq!(read(false).unwrap(), None, "the shredded value came back");
    assert_eq!(
        read(true).unwrap().as_deref(),
        Some("alice's"),
        "the control (markers covering offsets only) must read it again"
    );
    // The store's check: no live DEK for alice.
    let check = SubjectKeys::open(kek, Arc::new(store(&bootstrap, &topic)))
        .unwrap()
        .check()
        .unwrap();
    assert_eq!((check.deks, check.shredded_subjects), (0, 1), "{check:?}");
}

/// The store's naming key changed under a running instance (the store
/// made again: the naming record withdrawn and another made): the
/// instance refuses subject-key values (it would name subjects by tags
/// that are not the store's) rather than serve or write them.
#[test]
fn an_instance_whose_store_was_made_again_refuses_values() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let topic = common::kafka::fresh_topic("shred-store-made-again");
    let keys = Arc::new(
        SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &topic)))
            .unwrap()
            .with_fence(Duration::from_millis(50)),
    );
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    let v = values.serialize(&ctx, Some("alice's")).unwrap().unwrap();
    // Withdraw every record (the naming key's included) and make the store
    // again.
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    for r in tombstone_crypt::store::compact(&log.records().unwrap()) {
        log.append(&r.key, None).unwrap();
    }
    log.flush().unwrap();
    drop(SubjectKeys::create(kek, Arc::new(store(&bootstrap, &topic))).unwrap());
    std::thread::sleep(Duration::from_millis(400)); // past both fences
    let read = values.deserialize(&ctx, Some(&v));
    match read {
        Err(Error::Store { ref detail, .. }) if detail.contains("naming key") => {}
        other => panic!("read through a store made again: {other:?}"),
    }
    let bob = Context::new("t").with_key(b"bob");
    assert!(values.serialize(&bob, Some("bob's")).is_err());
    assert!(keys.shred(b"alice").is_err());
}

/// Records produced to the key-store topic by hand, by someone who can
/// produce but holds no KEK: a marker without evidence, a marker whose
/// seal is not the KEK's, a key longer than a store's, and a real marker
/// of another subject replayed under this one. None makes a value read as
/// a delete: each value reads as written or is an error, and the store's
/// check names the records of shreds that do not open. The control (the
/// rule before: a DEK the store no longer holds reads as shredded) reads
/// the same values as deletes.
#[test]
fn records_of_shreds_made_by_hand_delete_nothing() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let topic = common::kafka::fresh_topic("shred-forged-markers");
    let keys = SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let names = ["alice", "bob", "carol", "dan", "erin"];
    let written: Vec<Vec<u8>> = names
        .iter()
        .map(|n| {
            let ctx = Context::new("t").with_key(n.as_bytes());
            values.serialize(&ctx, Some(n)).unwrap().unwrap()
        })
        .collect();
    // Tags and DEK ids are in every value (bytes 1..17 and 17..25).
    let tag = |i: usize| written[i][1..17].to_vec();
    let id = |i: usize| written[i][17..25].to_vec();
    // A real marker: erin's shred.
    values.keys().shred(b"erin").unwrap();
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    let marker_key = |t: Vec<u8>| [t, vec![0xff; 8]].concat();
    let erins_marker = tombstone_crypt::store::compact(&log.records().unwrap())
        .into_iter()
        .find(|r| r.key == marker_key(tag(4)))
        .and_then(|r| r.value)
        .unwrap();
    // alice: the marker's text and nothing else.
    log.append(&marker_key(tag(0)), Some(b"shredded")).unwrap();
    // bob: well formed, naming bob's DEK, sealed with bytes of no key.
    let mut forged = b"shredded".to_vec();
    forged.extend_from_slice(&1u32.to_be_bytes());
    forged.extend_from_slice(&id(1));
    forged.extend_from_slice(&[0x01; 45]);
    log.append(&marker_key(tag(1)), Some(&forged)).unwrap();
    // carol: a marker's key with a byte more.
    let mut long = marker_key(tag(2));
    long.push(0);
    log.append(&long, Some(&forged)).unwrap();
    // dan: erin's real marker, replayed under dan's tag.
    log.append(&marker_key(tag(3)), Some(&erins_marker))
        .unwrap();
    log.flush().unwrap();

    let reader = |control: bool| {
        let keys = SubjectKeys::open(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
        let keys = if control {
            keys.reading_unknown_keys_as_shredded()
        } else {
            keys
        };
        SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8)
    };
    let r = reader(false);
    let read = |i: usize| {
        let ctx = Context::new("t").with_key(names[i].as_bytes());
        r.deserialize(&ctx, Some(&written[i]))
    };
    assert_eq!(read(0).unwrap().as_deref(), Some("alice"));
    assert!(
        matches!(read(1), Err(Error::UnknownSubjectKey { .. })),
        "{:?}",
        read(1)
    );
    assert_eq!(read(2).unwrap().as_deref(), Some("carol"));
    assert!(
        matches!(read(3), Err(Error::UnknownSubjectKey { .. })),
        "{:?}",
        read(3)
    );
    assert_eq!(read(4).unwrap(), None, "erin's real shred");
    let check = r.keys().check().unwrap();
    assert_eq!(check.shreds_not_opening.len(), 2, "{check:?}");
    assert!(!check.is_clean());
    // The control reads bob's and dan's values as deletes.
    let c = reader(true);
    for i in [1, 3] {
        let ctx = Context::new("t").with_key(names[i].as_bytes());
        assert_eq!(c.deserialize(&ctx, Some(&written[i])).unwrap(), None);
    }
}

/// A shred writes its marker before its tombstones, so a shred cut short
/// between them is whole (the marker names the DEK and covers the records
/// below it); and after a KEK rotation (rewrap, the old key destroyed) a
/// shredded value still reads as a delete and the check is clean.
#[test]
fn a_shred_marks_before_it_tombstones_and_survives_a_kek_rotation() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let mut kek = Keyset::generate();
    let topic = common::kafka::fresh_topic("shred-marker-first");
    let keys = SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    let v = values.serialize(&ctx, Some("alice's")).unwrap().unwrap();
    values.keys().shred(b"alice").unwrap();
    let log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    let records = log.records().unwrap();
    let at = |suffix: &[u8], tombstone: bool| {
        records
            .iter()
            .position(|r| {
                r.key.len() == 24
                    && r.key[..16] == v[1..17]
                    && r.key[16..] == *suffix
                    && r.value.is_none() == tombstone
            })
            .unwrap()
    };
    assert!(
        at(&[0xff; 8], false) < at(&v[17..25], true),
        "marker, then tombstone"
    );

    let old = kek.primary();
    kek.rotate();
    let rewrapped = SubjectKeys::open(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    assert!(
        rewrapped.rewrap().unwrap() >= 2,
        "the naming key and alice's shred"
    );
    kek.remove(old).unwrap();
    let keys = SubjectKeys::open(kek, Arc::new(store(&bootstrap, &topic))).unwrap();
    let check = keys.check().unwrap();
    assert!(check.is_clean(), "{check:?}");
    assert_eq!(check.not_under_primary, 0, "{check:?}");
    let r = SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8);
    assert_eq!(r.deserialize(&ctx, Some(&v)).unwrap(), None);
}

/// Naming-key, marker and reseal records produced by hand on a key-store
/// topic, by someone with no KEK: none splits the instances' tags, none
/// makes a value read as a delete or a shredded one read again, and none
/// stops shreds or a rewrap.
#[test]
fn hand_made_naming_marker_and_reseal_records_split_nothing_and_kill_nothing() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let produce = |topic: &str, key: &[u8], value: &[u8]| {
        let mut log = KafkaChangelog::open(&bootstrap, topic).unwrap();
        log.append(key, Some(value)).unwrap();
        log.flush().unwrap();
    };
    let naming_record = |topic: &str| -> Vec<u8> {
        let log = KafkaChangelog::open(&bootstrap, topic).unwrap();
        tombstone_crypt::store::compact(&log.records().unwrap())
            .into_iter()
            .find(|r| r.key.starts_with(&[0xff; 16]) && r.value.is_some())
            .and_then(|r| r.value)
            .unwrap()
    };
    let open = |topic: &str| SubjectKeys::open(kek.clone(), Arc::new(store(&bootstrap, topic)));
    let values = |keys: SubjectKeys| SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");

    // Another store's naming key (same KEK) put under this store's naming
    // record id: it does not open there (a naming key is bound to its
    // record id), so no instance names subjects by it.
    let (t1, t2) = (
        common::kafka::fresh_topic("naming-swap"),
        common::kafka::fresh_topic("naming-other"),
    );
    drop(SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &t1))).unwrap());
    drop(SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &t2))).unwrap());
    let (ours, theirs) = (naming_record(&t1), naming_record(&t2));
    let swapped = [&ours[..8], &theirs[8..]].concat();
    produce(&t1, &[&[0xff; 16][..], &ours[..8]].concat(), &swapped);
    assert!(open(&t1).is_err(), "a swapped naming key opened");

    // A marker and a reseal record on the naming key's tag, and a naming
    // record of garbage: the store still opens, writes, reads and shreds.
    let t = common::kafka::fresh_topic("naming-tag-records");
    let w = values(SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &t))).unwrap());
    let v = w.serialize(&ctx, Some("alice's")).unwrap().unwrap();
    let id = &naming_record(&t)[..8];
    let mut forged = b"shredded".to_vec();
    forged.extend_from_slice(&1u32.to_be_bytes());
    forged.extend_from_slice(id);
    forged.extend_from_slice(&[1; 45]);
    produce(&t, &[&[0xff; 16][..], &[0xff; 8]].concat(), &forged);
    produce(
        &t,
        &[&[0xff; 16][..], &[0xff; 8], &[0, 0, 0, 1]].concat(),
        &forged[8..],
    );
    produce(&t, &[&[0xff; 16][..], &[9; 8]].concat(), &[9; 60]);
    let r = values(open(&t).unwrap());
    assert_eq!(
        r.deserialize(&ctx, Some(&v)).unwrap().as_deref(),
        Some("alice's")
    );
    assert_eq!(r.keys().shred(b"alice").unwrap(), Shred::Removed(1));
    assert_eq!(r.deserialize(&ctx, Some(&v)).unwrap(), None);

    // A reseal record of garbage for the shredded subject, and the first
    // marker's evidence replayed as a reseal after a second shred: the
    // values of both shreds still read as deletes, and a rewrap goes on.
    let tag = v[1..17].to_vec();
    let reseal_key = [&tag[..], &[0xff; 8], &[0, 0, 0, 1]].concat();
    let first_marker = {
        let log = KafkaChangelog::open(&bootstrap, &t).unwrap();
        tombstone_crypt::store::compact(&log.records().unwrap())
            .into_iter()
            .find(|r| r.key == [&tag[..], &[0xff; 8]].concat())
            .and_then(|r| r.value)
            .unwrap()
    };
    let v2 = w.serialize(&ctx, Some("alice again")).unwrap().unwrap();
    std::thread::sleep(Duration::from_millis(400)); // past the writer's fences
    let r = values(open(&t).unwrap());
    r.keys().shred(b"alice").unwrap();
    produce(&t, &reseal_key, &first_marker[b"shredded".len()..]);
    produce(&t, &reseal_key, &forged[8..]);
    let keys = open(&t).unwrap();
    assert!(keys.rewrap().unwrap() >= 2);
    let r = values(open(&t).unwrap());
    assert_eq!(r.deserialize(&ctx, Some(&v)).unwrap(), None);
    assert_eq!(r.deserialize(&ctx, Some(&v2)).unwrap(), None);
}

/// A KEK rotation with an instance still on the old keyset, through
/// compaction: the old instance's rewrap and its shred of a subject with no
/// key left write nothing that replaces the evidence under the new key,
/// so once the old key is destroyed, the shredded value still reads as a
/// delete on the compacted topic. A naming record copied whole from
/// another store under the same KEK makes the store's DEKs errors (they
/// are bound to their naming key), never keys a shred cannot reach.
#[test]
fn a_rotation_with_an_old_instance_survives_compaction_and_a_copied_naming_key_reads_nothing() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let old = Keyset::generate();
    let mut kek = old.clone();
    let topic = common::kafka::fresh_topic("shred-rotation-compacted");
    let old_keys = SubjectKeys::create(old.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(old_keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    let v = values.serialize(&ctx, Some("alice's")).unwrap().unwrap();
    values.keys().shred(b"alice").unwrap();
    let first = kek.primary();
    kek.rotate();
    let admin = SubjectKeys::open(kek.clone(), Arc::new(store(&bootstrap, &topic))).unwrap();
    admin.rewrap().unwrap();
    // The instance on the old keyset rewraps and shreds again.
    std::thread::sleep(Duration::from_millis(300));
    values.keys().rewrap().unwrap();
    assert_eq!(
        values.keys().shred(b"alice").unwrap(),
        Shred::AlreadyShredded
    );
    // Compaction, as the cleaner leaves the topic: the newest record of
    // each key, in order, no tombstones.
    let compacted = common::kafka::fresh_topic("shred-rotation-compacted-copy");
    {
        let log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
        let mut copy = KafkaChangelog::open(&bootstrap, &compacted).unwrap();
        for r in tombstone_crypt::store::compact(&log.records().unwrap()) {
            if let Some(value) = &r.value {
                copy.append(&r.key, Some(value)).unwrap();
            }
        }
        copy.flush().unwrap();
    }
    kek.remove(first).unwrap();
    let keys = SubjectKeys::open(kek.clone(), Arc::new(store(&bootstrap, &compacted))).unwrap();
    let check = keys.check().unwrap();
    assert!(check.is_clean(), "{check:?}");
    let r = SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8);
    assert_eq!(
        r.deserialize(&ctx, Some(&v)).unwrap(),
        None,
        "after compaction"
    );

    // A naming record copied whole from another store under the same KEK,
    // the store's own withdrawn.
    let (a, b) = (
        common::kafka::fresh_topic("naming-copied-a"),
        common::kafka::fresh_topic("naming-copied-b"),
    );
    let w = SubjectEncrypting::<Utf8, str>::new(
        Arc::new(SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &a))).unwrap()),
        Utf8,
    );
    let bob = Context::new("t").with_key(b"bob");
    let vb = w.serialize(&bob, Some("bob's")).unwrap().unwrap();
    drop(SubjectKeys::create(kek.clone(), Arc::new(store(&bootstrap, &b))).unwrap());
    let naming = |t: &str| {
        let log = KafkaChangelog::open(&bootstrap, t).unwrap();
        tombstone_crypt::store::compact(&log.records().unwrap())
            .into_iter()
            .find(|r| r.key.starts_with(&[0xff; 16]) && r.value.is_some())
            .unwrap()
    };
    let (ours, theirs) = (naming(&a), naming(&b));
    let mut log = KafkaChangelog::open(&bootstrap, &a).unwrap();
    log.append(&ours.key, None).unwrap();
    log.append(&theirs.key, theirs.value.as_deref()).unwrap();
    log.flush().unwrap();
    let keys = SubjectKeys::open(kek, Arc::new(store(&bootstrap, &a))).unwrap();
    assert!(!keys.check().unwrap().is_clean());
    let r = SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8);
    assert!(
        r.deserialize(&bob, Some(&vb)).is_err(),
        "bob's value read under a copied naming key"
    );
}
