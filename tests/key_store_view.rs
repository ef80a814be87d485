//! The key-store view on disk (`KafkaKeyStore::with_view_dir`): a restart
//! reads the topic on from the offsets the view stored, not from its
//! start; a view whose topic is not the one it was read from (another
//! cluster's topic of the same name) is rebuilt, never trusted, or a
//! shredded subject would come back; the view and its offsets are one
//! transaction, so a crash between applying records and committing cannot
//! skip a shred; a corrupt view file is a clear error, a view file of
//! another topic is rebuilt. Each has its negative control.
//!
//! On the shared broker (`TOMBSTONE_KAFKA_BOOTSTRAP`, or skip with
//! `TOMBSTONE_SKIP_KAFKA=1`); the other cluster is a private broker
//! (`tests/common/broker.rs`).
#![cfg(all(feature = "kafka", feature = "redb"))]

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::{SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::Changelog as _;
use tombstone_crypt::{Context, Deserializer as _, Keyset, Serializer as _, Utf8};

type Values = SubjectEncrypting<Utf8, str>;

/// Subject keys on `topic`, the view on disk in `dir` (or in memory), the
/// store kept to read its count of records read.
fn instance(
    bootstrap: &str,
    topic: &str,
    kek: &Keyset,
    dir: Option<&Path>,
    hook: impl FnOnce(KafkaKeyStore) -> KafkaKeyStore,
) -> (Values, Arc<KafkaKeyStore>) {
    let store = KafkaKeyStore::new(KafkaChangelog::open(bootstrap, topic).unwrap());
    let store = match dir {
        Some(d) => store.with_view_dir(d).unwrap(),
        None => store,
    };
    let store = Arc::new(hook(store));
    let keys = SubjectKeys::create(kek.clone(), Arc::clone(&store) as _).unwrap();
    (SubjectEncrypting::new(Arc::new(keys), Utf8), store)
}

fn write(values: &Values, subject: &str) -> Vec<u8> {
    let ctx = Context::new("t").with_key(subject.as_bytes());
    values.serialize(&ctx, Some(subject)).unwrap().unwrap()
}

fn read(
    values: &Values,
    subject: &str,
    v: &[u8],
) -> Result<Option<String>, tombstone_crypt::Error> {
    values.deserialize(&Context::new("t").with_key(subject.as_bytes()), Some(v))
}

/// `n` records that are no key store's (ignored by every view).
fn pad(bootstrap: &str, topic: &str, n: usize) {
    let mut log = KafkaChangelog::open(bootstrap, topic).unwrap();
    for i in 0..n {
        log.append(format!("pad{i:02}").as_bytes(), Some(b"x"))
            .unwrap();
    }
    log.flush().unwrap();
}

fn copy_dir(from: &Path) -> PathBuf {
    let to = common::kafka::fresh_view_dir();
    std::fs::create_dir_all(&to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), to.join(e.file_name())).unwrap();
    }
    to
}

#[test]
fn a_restarted_view_on_disk_reads_on_from_its_offsets_not_the_whole_topic() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let topic = common::kafka::fresh_topic("view-restart");
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let old: Vec<(String, Vec<u8>)> = (0..200)
        .map(|i| format!("old-{i}"))
        .map(|s| (s.clone(), write(&a, &s)))
        .collect();
    drop((a, store));
    // Meanwhile another instance writes 20 subjects (and the topic grows).
    let (other, _) = instance(&bootstrap, &topic, &kek, None, |s| s);
    let new: Vec<(String, Vec<u8>)> = (0..20)
        .map(|i| format!("new-{i}"))
        .map(|s| (s.clone(), write(&other, &s)))
        .collect();
    let total = KafkaChangelog::open(&bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap()
        .len() as u64;
    assert!(total > 220);

    let (restarted, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    for (s, v) in new.iter().chain(&old) {
        assert_eq!(read(&restarted, s, v).unwrap().as_deref(), Some(s.as_str()));
    }
    let on_disk = store.records_read();
    // The control: a view in memory reads the whole topic.
    let (memory, store) = instance(&bootstrap, &topic, &kek, None, |s| s);
    assert_eq!(
        read(&memory, &new[0].0, &new[0].1).unwrap().as_deref(),
        Some("new-0")
    );
    let in_memory = store.records_read();
    eprintln!("records read at a restart: {on_disk} (view on disk), {in_memory} (in memory); topic {total}");
    assert!(in_memory >= total, "the control read less than the topic");
    // The new records (20 DEKs) and the check of the topic (at most 16
    // head records and the last one), nothing more.
    assert!(
        on_disk <= 20 + 17 + 2,
        "a restart read {on_disk} records of {total}: the whole topic again"
    );
    let _ = std::fs::remove_dir_all(dir);
}

/// Another cluster's topic of the same name: the same first two records
/// (the naming key, the subject's DEK), then the subject shredded, then
/// more records than the view had read. Reading on from the view's
/// offsets would miss the shred: the subject's value would read again.
#[test]
fn a_view_of_another_clusters_topic_is_rebuilt_and_a_shredded_subject_stays_shredded() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let other_cluster = common::broker::PrivateBroker::start();
    let topic = common::kafka::fresh_topic("view-identity");
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let v = write(&a, "ada");
    drop((a, store));
    let first = KafkaChangelog::open(&bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap();
    pad(&bootstrap, &topic, 30);
    // The view reads to the end of the first cluster's topic.
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    assert_eq!(read(&a, "ada", &v).unwrap().as_deref(), Some("ada"));
    drop((a, store));

    // The other cluster: the same records, then the shred, then more.
    let mut log = KafkaChangelog::open(&other_cluster.bootstrap, &topic).unwrap();
    for r in &first {
        log.append(&r.key, r.value.as_deref()).unwrap();
    }
    log.flush().unwrap();
    let (b, _) = instance(&other_cluster.bootstrap, &topic, &kek, None, |s| s);
    b.keys().shred(b"ada").unwrap();
    assert_eq!(read(&b, "ada", &v).unwrap(), None);
    pad(&other_cluster.bootstrap, &topic, 40);

    let trusting = copy_dir(&dir);
    let (checked, store) = instance(&other_cluster.bootstrap, &topic, &kek, Some(&dir), |s| s);
    assert_eq!(
        read(&checked, "ada", &v).unwrap(),
        None,
        "a shredded subject came back through a view of another topic"
    );
    assert!(store.records_read() >= 40, "the view was not rebuilt");
    // The control: a view read on without the check serves the shredded
    // subject's value again.
    let (unchecked, _) = instance(
        &other_cluster.bootstrap,
        &topic,
        &kek,
        Some(&trusting),
        KafkaKeyStore::with_view_unchecked,
    );
    assert_eq!(
        read(&unchecked, "ada", &v).unwrap().as_deref(),
        Some("ada"),
        "the control did not trust the other topic: the test shows nothing"
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(trusting);
}

/// Deletes `topic` and makes it again, compacted (Apache Kafka: the name
/// is free once the deletion is through; the new topic has another id).
fn recreate(bootstrap: &str, topic: &str) {
    use std::time::{Duration, Instant};
    use tombstone_crypt::kafka::rdkafka::admin::{
        AdminClient, AdminOptions, NewTopic, TopicReplication,
    };
    use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
    let admin: AdminClient<DefaultClientContext> =
        common::kafka::client_config(bootstrap).create().unwrap();
    for r in
        futures_executor::block_on(admin.delete_topics(&[topic], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let new =
            NewTopic::new(topic, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "compact");
        let r = futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new()))
            .unwrap()
            .remove(0);
        if r.is_ok() {
            common::compacting::wait_compact_policy(bootstrap, topic);
            return;
        }
        assert!(Instant::now() < deadline, "{topic} not made again: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The key-store topic deleted and made again under its name, holding at
/// the same offsets the records the view sampled (its first 16 and its
/// last), with a shred between them: by its records the view would be
/// trusted and the shred missed. The broker's topic id differs: the view
/// is rebuilt and the subject stays shredded. The control checks by
/// records alone (`without_topic_ids`): the shredded subject reads again.
#[test]
fn a_view_of_its_topic_made_again_to_match_its_samples_is_rebuilt_by_the_topic_id() {
    let Some(bootstrap) = common::kafka::apache_kafka() else {
        return;
    };
    let topic = common::kafka::fresh_topic("view-made-again");
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let v = write(&a, "ada");
    drop((a, store));
    let first = KafkaChangelog::open(&bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap();
    let k = first.len();
    assert!(k < 16, "{k} records for one subject");
    pad(&bootstrap, &topic, 30);
    // The view reads to the end of the topic (its tail: pad29 at k + 29)
    // and records the topic's id.
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    assert_eq!(read(&a, "ada", &v).unwrap().as_deref(), Some("ada"));
    drop((a, store));
    let control = copy_dir(&dir);

    recreate(&bootstrap, &topic);
    let named = |from: usize, to: usize| -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
        (from..to)
            .map(|i| (format!("pad{i:02}").into_bytes(), Some(b"x".to_vec())))
            .collect()
    };
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    for r in &first {
        log.append(&r.key, r.value.as_deref()).unwrap();
    }
    // The head: the same 16 records at offsets 0..16.
    for (key, value) in named(0, 16 - k) {
        log.append(&key, value.as_deref()).unwrap();
    }
    log.flush().unwrap();
    // Between head and tail: ada shredded (its records at 16..16+m).
    let (b, _) = instance(&bootstrap, &topic, &kek, None, |s| s);
    b.keys().shred(b"ada").unwrap();
    assert_eq!(read(&b, "ada", &v).unwrap(), None);
    let end = KafkaChangelog::open(&bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap()
        .last()
        .unwrap()
        .offset as usize
        + 1;
    assert!(end < k + 29, "the shred took {} records", end - 16);
    // The tail: pad29 at offset k + 29 again, then more.
    let mut log = KafkaChangelog::open(&bootstrap, &topic).unwrap();
    for (key, value) in named(end - k, 40) {
        log.append(&key, value.as_deref()).unwrap();
    }
    log.flush().unwrap();
    let remade = KafkaChangelog::open(&bootstrap, &topic)
        .unwrap()
        .records()
        .unwrap();
    assert_eq!(&remade[..k], &first[..], "the head is the same");
    assert_eq!(remade[k + 29].key, b"pad29", "the tail is at its offset");

    let stalled_first = copy_dir(&dir);
    let (checked, _) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    assert_eq!(
        read(&checked, "ada", &v).unwrap(),
        None,
        "a shredded subject came back through a view of the topic made again"
    );
    // The id cannot be asked now (the first bootstrap server accepts and
    // never answers, and takes its share of the lookup's time or all of
    // it; librdkafka reaches the real one): a view that recorded an id is
    // rebuilt, not trusted on its records.
    let stall = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let stall_addr = stall.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in stall.incoming() {
            held.push(s);
        }
    });
    let (unasked, _) = instance(
        &format!("{stall_addr},{bootstrap}"),
        &topic,
        &kek,
        Some(&stalled_first),
        |s| s,
    );
    assert_eq!(
        read(&unasked, "ada", &v).unwrap(),
        None,
        "a view whose id could not be checked was trusted on its records"
    );
    // The control: by its records alone, the view is trusted.
    let (records_only, _) = instance(
        &bootstrap,
        &topic,
        &kek,
        Some(&control),
        KafkaKeyStore::without_topic_ids,
    );
    assert_eq!(
        read(&records_only, "ada", &v).unwrap().as_deref(),
        Some("ada"),
        "the control did not trust the topic made again: the test shows nothing"
    );
    let _ = std::fs::remove_dir_all(dir);
    let _ = std::fs::remove_dir_all(control);
    let _ = std::fs::remove_dir_all(stalled_first);
}

/// A crash after a shred's marker was applied to the view and before the
/// commit: the view and its offsets are one transaction, so the restarted
/// view reads the marker again. The control commits the offsets apart,
/// first: the restarted view skips the marker, and the shredded subject's
/// key is live again.
#[test]
fn a_crash_between_applying_records_and_committing_offsets_skips_no_shred() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    for offsets_apart in [false, true] {
        let topic = common::kafka::fresh_topic("view-crash");
        let kek = Keyset::generate();
        let dir = common::kafka::fresh_view_dir();
        let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
        let v = write(&a, "ada");
        drop((a, store));
        let (m, _) = instance(&bootstrap, &topic, &kek, None, |s| s);
        m.keys().shred(b"ada").unwrap();
        let marker = KafkaChangelog::open(&bootstrap, &topic)
            .unwrap()
            .records()
            .unwrap()
            .iter()
            .find(|r| r.key.len() == 24 && r.key[16..] == [0xff; 8] && r.key[..16] != [0xff; 16])
            .unwrap()
            .offset;
        {
            let store = KafkaKeyStore::new(KafkaChangelog::open(&bootstrap, &topic).unwrap())
                .with_view_dir(&dir)
                .unwrap()
                .with_view_crash_at(Some(marker), offsets_apart);
            let crashed = SubjectKeys::open(kek.clone(), Arc::new(store));
            assert!(crashed.is_err(), "the crash hook did not fire");
        }
        let (restarted, _) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
        let got = read(&restarted, "ada", &v).unwrap();
        if offsets_apart {
            assert_eq!(
                got.as_deref(),
                Some("ada"),
                "the control (offsets committed apart) skipped nothing: the test shows nothing"
            );
        } else {
            assert_eq!(got, None, "a crash before the commit skipped a shred");
        }
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// A view file that is not one is a clear error (never a panic); a view
/// file of another topic put in this topic's place is rebuilt, and reads
/// this topic's values.
#[test]
fn a_corrupt_view_is_an_error_and_a_view_of_another_topic_is_rebuilt() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (t1, t2) = (
        common::kafka::fresh_topic("view-one"),
        common::kafka::fresh_topic("view-two"),
    );
    let (a, store) = instance(&bootstrap, &t1, &kek, Some(&dir), |s| s);
    let v1 = write(&a, "ada");
    drop((a, store));
    let (b, store) = instance(&bootstrap, &t2, &kek, None, |s| s);
    let v2 = write(&b, "ada");
    b.keys().shred(b"ada").unwrap();
    drop((b, store));
    // t1's view in t2's place.
    let file = |t: &str| dir.join(format!("{t}-0.view.redb"));
    std::fs::copy(file(&t1), file(&t2)).unwrap();
    let (b, store) = instance(&bootstrap, &t2, &kek, Some(&dir), |s| s);
    assert_eq!(read(&b, "ada", &v2).unwrap(), None);
    assert!(read(&b, "ada", &v1).is_err(), "t1's key served on t2");
    assert!(store.records_read() >= 3);
    drop((b, store));

    std::fs::write(file(&t1), b"not a view at all, not a redb file").unwrap();
    let opened =
        KafkaKeyStore::new(KafkaChangelog::open(&bootstrap, &t1).unwrap()).with_view_dir(&dir);
    let err = opened.expect_err("a corrupt view opened");
    let text = err.to_string();
    assert!(text.contains("remove it to rebuild"), "{text}");
    let _ = std::fs::remove_dir_all(dir);
}

/// The view file of `topic` (partition 0) in `dir`.
fn view_file(dir: &Path, topic: &str) -> PathBuf {
    dir.join(format!("{topic}-0.view.redb"))
}

const META: redb::TableDefinition<'_, &str, &[u8]> = redb::TableDefinition::new("view_meta");

/// Edits the view file as an operator's tool, a restore or damage would.
fn set_meta(dir: &Path, topic: &str, key: &str, value: &[u8]) {
    let db = redb::Database::create(view_file(dir, topic)).unwrap();
    let txn = db.begin_write().unwrap();
    txn.open_table(META).unwrap().insert(key, value).unwrap();
    txn.commit().unwrap();
}

fn next_offset(bootstrap: &str, topic: &str) -> u64 {
    KafkaChangelog::open(bootstrap, topic)
        .unwrap()
        .records()
        .unwrap()
        .last()
        .map_or(0, |r| r.offset + 1)
}

/// The view's stored offset damaged or edited (moved past records it never
/// applied, or back over records it applied), its sampled records left as
/// they were: read on from it, the view skips a shred (the shredded subject
/// reads again) or applies a shred's marker again over a DEK written after
/// it (a live subject's DEK dropped). The stored offset must be one past the
/// last record applied, else the view is rebuilt.
#[test]
fn a_view_whose_stored_offset_moved_forward_is_rebuilt() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let topic = common::kafka::fresh_topic("view-next-fwd");
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let v = write(&a, "ada");
    drop((a, store));
    let (m, _) = instance(&bootstrap, &topic, &kek, None, |s| s);
    m.keys().shred(b"ada").unwrap();
    pad(&bootstrap, &topic, 3);
    let end = next_offset(&bootstrap, &topic);
    set_meta(&dir, &topic, "next", &end.to_be_bytes());
    let (b, _) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    assert_eq!(
        read(&b, "ada", &v).unwrap(),
        None,
        "a view whose stored offset moved past a shred served the shredded subject"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// As above, the stored offset moved back over a shred's marker, below a
/// DEK written after it.
#[test]
fn a_view_whose_stored_offset_moved_back_is_rebuilt() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let kek = Keyset::generate();
    let topic = common::kafka::fresh_topic("view-next-back");
    let dir = common::kafka::fresh_view_dir();
    let (a, store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    write(&a, "bob");
    let marker_at = next_offset(&bootstrap, &topic);
    a.keys().shred(b"bob").unwrap();
    let v = write(&a, "bob");
    assert_eq!(read(&a, "bob", &v).unwrap().as_deref(), Some("bob"));
    drop((a, store));
    set_meta(&dir, &topic, "next", &marker_at.to_be_bytes());
    let (b, _) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let got = read(&b, "bob", &v);
    assert!(
        matches!(got.as_ref().map(Option::as_deref), Ok(Some("bob"))),
        "a view whose stored offset moved back dropped a live subject's DEK: {got:?}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// Two stores of one topic with one view dir (two instances of a service
/// configured alike): the second is refused, and its error says the view
/// is in use, not that the file is corrupt and should be removed (removing
/// it under a running instance gives two views of one name).
#[test]
fn a_view_dir_in_use_is_refused_with_an_error_that_says_so() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let topic = common::kafka::fresh_topic("view-shared-dir");
    let kek = Keyset::generate();
    let dir = common::kafka::fresh_view_dir();
    let (a, _store) = instance(&bootstrap, &topic, &kek, Some(&dir), |s| s);
    let v = write(&a, "ada");
    let second =
        KafkaKeyStore::new(KafkaChangelog::open(&bootstrap, &topic).unwrap()).with_view_dir(&dir);
    let text = second.expect_err("two stores opened one view").to_string();
    assert!(text.contains("in use"), "{text}");
    assert!(!text.contains("remove it"), "{text}");
    assert_eq!(read(&a, "ada", &v).unwrap().as_deref(), Some("ada"));
    let _ = std::fs::remove_dir_all(dir);
}

/// A cache of 0 bytes, or of `usize::MAX`: the view works (or the store
/// refuses with an error), never a panic or an allocation of the size.
#[test]
fn a_view_cache_of_zero_or_huge_works() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    for cache in [0, usize::MAX] {
        let topic = common::kafka::fresh_topic("view-cache");
        let kek = Keyset::generate();
        let dir = common::kafka::fresh_view_dir();
        let store = KafkaKeyStore::new(KafkaChangelog::open(&bootstrap, &topic).unwrap())
            .with_view_dir_and_cache(&dir, cache);
        let Ok(store) = store else {
            continue;
        };
        let store = Arc::new(store);
        let keys = SubjectKeys::create(kek.clone(), Arc::clone(&store) as _).unwrap();
        let values: Values = SubjectEncrypting::new(Arc::new(keys), Utf8);
        let v = write(&values, "ada");
        assert_eq!(read(&values, "ada", &v).unwrap().as_deref(), Some("ada"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
