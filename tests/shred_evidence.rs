//! Only a shred deletes: a value under subject keys reads as a delete only
//! when a record of a shred in its key store covers its DEK. A model over
//! random puts and shreds, read through (a) the right key store (and the
//! same store opened again, as a restarted process opens it), (b) an empty
//! store, (c) another store under the same KEK, and (d) forged values and
//! values with a flipped bit: (a) equals the model; (b) does not open,
//! (c)'s reads are errors, never `None`; in (d) a forged value is an
//! error, and a flipped bit reads as a delete only when the value still
//! names a shredded DEK (a copy of a shredded value, changed) and is
//! otherwise an error. The control, subject keys that read a DEK the store
//! does not know as shredded (the rule before: "any DEK the store does not
//! hold is gone"), must fail the model.
//!
//! Over the memory store, a redb file, and a key-store topic on the
//! loopback broker (skipped with `TOMBSTONE_SKIP_KAFKA`).

use crate::common;

use std::sync::Arc;

use common::rng::Rng;
use tombstone_crypt::shred::{KeyStore, MemoryKeyStore, Shred, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::{Context, Deserializer as _, Error, Keyset, Serializer as _, Utf8};

/// Makes a new, empty store of one kind (the second call makes another).
type Make<'a> = &'a dyn Fn() -> Arc<dyn KeyStore>;
/// Opens a store again, as a restarted process does.
type Reopen<'a> = &'a dyn Fn(&Arc<dyn KeyStore>) -> Arc<dyn KeyStore>;

/// A written value, and what the model says it reads as.
struct Written {
    key: Vec<u8>,
    bytes: Vec<u8>,
    plain: String,
    shredded: bool,
}

/// One round: random puts and shreds through one store, then every read.
/// `Err` names the first read that differs from the rule.
fn round(seed: u64, make: Make<'_>, reopen: Reopen<'_>, control: bool) -> Result<(), String> {
    let mut rng = Rng(seed);
    let kek = Keyset::generate();
    let store = make();
    let keys = Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store)).unwrap());
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let subjects = ["ada", "bo", "cy", "di", "ed"];
    let mut written: Vec<Written> = Vec::new();
    for op in 0..40 {
        let s = subjects[rng.below(subjects.len() as u64) as usize];
        if rng.below(5) == 0 {
            let found = keys.shred(s.as_bytes()).unwrap();
            let had = written.iter().any(|w| w.key == s.as_bytes() && !w.shredded);
            let ever = written.iter().any(|w| w.key == s.as_bytes());
            let expected = match (had, ever) {
                (true, _) => Shred::Removed(1),
                (false, true) => Shred::AlreadyShredded,
                (false, false) => Shred::NoKey,
            };
            if found != expected {
                return Err(format!("shred {s}: {found:?}, the model says {expected:?}"));
            }
            for w in written.iter_mut().filter(|w| w.key == s.as_bytes()) {
                w.shredded = true;
            }
        } else {
            let plain = format!("{s} value {op}");
            let ctx = Context::new("t").with_key(s.as_bytes());
            let bytes = values.serialize(&ctx, Some(&plain)).unwrap().unwrap();
            written.push(Written {
                key: s.as_bytes().to_vec(),
                bytes,
                plain,
                shredded: false,
            });
        }
    }
    let reader = |keys: SubjectKeys| {
        let keys = if control {
            keys.reading_unknown_keys_as_shredded()
        } else {
            keys
        };
        SubjectEncrypting::<Utf8, str>::new(Arc::new(keys), Utf8)
    };
    // (a) the right store, as this process has it and opened again.
    let right = [
        values,
        reader(SubjectKeys::open(kek.clone(), reopen(&store)).unwrap()),
    ];
    // (b) an empty store does not open: no naming key.
    if SubjectKeys::open(kek.clone(), make()).is_ok() {
        return Err("an empty key store opened".into());
    }
    // (c) another store under the same KEK, with a naming key of its own.
    let other = reader(SubjectKeys::create(kek.clone(), make()).unwrap());
    for w in &written {
        let ctx = Context::new("t").with_key(&w.key);
        for r in &right {
            let got = r.deserialize(&ctx, Some(&w.bytes));
            let want = if w.shredded {
                None
            } else {
                Some(w.plain.clone())
            };
            if got.as_ref().ok() != Some(&want) {
                return Err(format!("(a) {}: {got:?}, the model says {want:?}", w.plain));
            }
        }
        match other.deserialize(&ctx, Some(&w.bytes)) {
            Err(Error::UnknownSubjectKey { .. }) => {}
            got => return Err(format!("(c) {}: {got:?}, not an unknown key", w.plain)),
        }
        // (d) one bit flipped anywhere: an error, or a delete only where
        // the value still names a DEK a shred covers (its tag and DEK id
        // unchanged: bytes 1..25).
        let mut flipped = w.bytes.clone();
        let bit = rng.below(flipped.len() as u64 * 8) as usize;
        flipped[bit / 8] ^= 1 << (bit % 8);
        let names_shredded = w.shredded && !(1..25).contains(&(bit / 8)) && bit / 8 != 0;
        match right[1].deserialize(&ctx, Some(&flipped)) {
            Err(_) => {}
            Ok(None) if names_shredded => {}
            got => return Err(format!("(d) {} bit {bit}: {got:?}", w.plain)),
        }
    }
    // (d) forged: the format's first byte, random bytes after it.
    for n in 0..20 {
        let len = 53 + rng.below(40) as usize;
        let forged: Vec<u8> = std::iter::once(0x53)
            .chain((1..len).map(|_| rng.below(256) as u8))
            .collect();
        let ctx = Context::new("t").with_key(b"ada");
        match right[1].deserialize(&ctx, Some(&forged)) {
            Err(Error::UnknownSubjectKey { .. }) => {}
            got => return Err(format!("(d) forged value {n}: {got:?}, not an unknown key")),
        }
    }
    Ok(())
}

fn model(make: Make<'_>, reopen: Reopen<'_>, rounds: u64) {
    for seed in 1..=rounds {
        if let Err(e) = round(seed, make, reopen, false) {
            panic!("round {seed}: {e}");
        }
    }
    // The control fails it (in its first round: the other store's reads
    // come back as deletes).
    let control = round(1, make, reopen, true);
    assert!(control.is_err(), "the control passed the model");
    eprintln!(
        "control failed the model, as it must: {}",
        control.unwrap_err()
    );
}

#[test]
fn model_memory_only_a_shred_makes_a_value_read_as_a_delete() {
    model(&|| Arc::new(MemoryKeyStore::new()), &Arc::clone, 64);
}

#[cfg(feature = "redb")]
#[test]
fn model_redb_only_a_shred_makes_a_value_read_as_a_delete() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tombstone_crypt::shred::RedbKeyStore;
    let dir = std::env::temp_dir().join(format!("tc-shred-evidence-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = AtomicU32::new(0);
    let make = || -> Arc<dyn KeyStore> {
        let path = dir.join(format!("{}.redb", n.fetch_add(1, Ordering::Relaxed)));
        Arc::new(RedbKeyStore::create(path).unwrap())
    };
    // A redb file is opened by one process at a time: the store reopened is
    // the same handle (its records and shreds are what is on disk).
    model(&make, &Arc::clone, 16);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "redb")]
#[test]
fn a_redb_key_store_is_made_once_0600_and_never_by_opening() {
    use tombstone_crypt::shred::RedbKeyStore;
    let dir = std::env::temp_dir().join(format!("tc-shred-redb-make-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("keys.redb");
    let missing = RedbKeyStore::open(&path).unwrap_err();
    assert!(missing.to_string().contains("no key store at"), "{missing}");
    assert!(!path.exists(), "opening made the file");
    let store = Arc::new(RedbKeyStore::create(&path).unwrap());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }
    drop(store);
    assert!(RedbKeyStore::create(&path).is_err(), "made twice");
    // A file that is not a key store (a keyset, say) does not open as one.
    let other = dir.join("not-a-store.redb");
    std::fs::write(&other, b"{}").unwrap();
    assert!(RedbKeyStore::open(&other).is_err());
    // A store made but never given a naming key opens as a file, and not
    // as subject keys.
    let store = Arc::new(RedbKeyStore::open(&path).unwrap());
    let refused = SubjectKeys::open(Keyset::generate(), store.clone()).unwrap_err();
    assert!(refused.to_string().contains("no naming key"), "{refused}");
    // Another KEK's store: refused at open, not read as all shredded.
    drop(SubjectKeys::create(Keyset::generate(), store.clone()).unwrap());
    let refused = SubjectKeys::open(Keyset::generate(), store).unwrap_err();
    assert!(refused.to_string().contains("does not open"), "{refused}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[cfg(feature = "kafka")]
#[test]
fn model_key_store_topic_only_a_shred_makes_a_value_read_as_a_delete() {
    use std::sync::atomic::{AtomicU32, Ordering};
    use tombstone_crypt::kafka::KafkaChangelog;
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let base = common::kafka::fresh_topic("shred-evidence");
    let n = AtomicU32::new(0);
    let topic_of = |i: u32| format!("{base}-{i}");
    let make = || -> Arc<dyn KeyStore> {
        let topic = topic_of(n.fetch_add(1, Ordering::Relaxed));
        Arc::new(common::kafka::key_store(
            KafkaChangelog::open(&bootstrap, &topic).unwrap(),
        ))
    };
    // Opened again: a new instance on the topic of the last store made by
    // the round (its first), whose view is read from the topic.
    let reopen = |_: &Arc<dyn KeyStore>| -> Arc<dyn KeyStore> {
        let last = n.load(Ordering::Relaxed);
        // The round's own store is the first of its three.
        let topic = topic_of(last - 1);
        let config = common::kafka::client_config(&bootstrap);
        Arc::new(common::kafka::key_store(
            KafkaChangelog::existing(config, &topic).unwrap(),
        ))
    };
    model(&make, &reopen, 2);
}

#[cfg(feature = "kafka")]
#[test]
fn a_key_store_topic_that_does_not_exist_is_not_made_by_opening() {
    use tombstone_crypt::kafka::KafkaChangelog;
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let topic = common::kafka::fresh_topic("no-such-key-store");
    let config = common::kafka::client_config(&bootstrap);
    let missing = KafkaChangelog::existing(config.clone(), &topic).unwrap_err();
    assert!(missing.to_string().contains("does not exist"), "{missing}");
    // Still not there.
    assert!(KafkaChangelog::existing(config, &topic).is_err());
}

/// A store that holds subjects' keys but lost its naming key (a record
/// withdrawn, a store made again over an old one) is not given a new one
/// by `create`: a new naming key would name its subjects by other tags,
/// and a shred would miss their values.
#[test]
fn create_refuses_a_store_that_lost_its_naming_key() {
    let store = Arc::new(MemoryKeyStore::new());
    store.insert_if_absent(&[7; 16], &[1; 40]).unwrap();
    let refused = SubjectKeys::create(Keyset::generate(), store).unwrap_err();
    assert!(refused.to_string().contains("no naming key"), "{refused}");
}

/// A rewrap that read a subject's record of its shreds before a second
/// shred must not write the older evidence over the newer one: the store
/// replaces it only if it is still what the rewrap read.
#[test]
fn a_reseal_never_writes_older_evidence_over_a_newer_shred() {
    let kek = Keyset::generate();
    let store = Arc::new(MemoryKeyStore::new());
    let keys = SubjectKeys::create(kek.clone(), store.clone()).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    let first = values.serialize(&ctx, Some("one")).unwrap().unwrap();
    values.keys().shred(b"alice").unwrap();
    // The rewrap reads the record of the first shred ...
    let (tag, read) = store.shreds().unwrap().remove(0);
    // ... alice is written again and shredded again ...
    let second = values.serialize(&ctx, Some("two")).unwrap().unwrap();
    values.keys().shred(b"alice").unwrap();
    // ... and the rewrap writes what it read, sealed again (here: as read).
    store.reseal(&tag, &read, &read[0]).unwrap();
    let reader =
        SubjectEncrypting::<Utf8, str>::new(Arc::new(SubjectKeys::open(kek, store).unwrap()), Utf8);
    assert_eq!(reader.deserialize(&ctx, Some(&first)).unwrap(), None);
    assert_eq!(reader.deserialize(&ctx, Some(&second)).unwrap(), None);
}

/// After a KEK rotation, a record of a shred still sealed under the old
/// key (a shred by an instance that kept the old keyset) is counted by the
/// check: the old key must not be destroyed yet.
#[test]
fn the_check_counts_records_of_shreds_under_an_older_kek_key() {
    let old = Keyset::generate();
    let mut kek = old.clone();
    let store = Arc::new(MemoryKeyStore::new());
    let keys = SubjectKeys::create(old.clone(), store.clone()).unwrap();
    let values: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let ctx = Context::new("t").with_key(b"alice");
    values.serialize(&ctx, Some("one")).unwrap();
    kek.rotate();
    let rotated = SubjectKeys::open(kek.clone(), store.clone()).unwrap();
    rotated.rewrap().unwrap();
    assert_eq!(rotated.check().unwrap().not_under_primary, 0);
    // The instance with the old keyset shreds after the rewrap.
    values.keys().shred(b"alice").unwrap();
    assert_eq!(rotated.check().unwrap().not_under_primary, 1);
    rotated.rewrap().unwrap();
    assert_eq!(rotated.check().unwrap().not_under_primary, 0);
}
