//! The report's scenario through Apache Kafka's own log cleaner: a store
//! whose changelog is compacted for real, its tombstones removed after
//! `delete.retention.ms`, then restored into an empty store (a new
//! instance). A Punctuator-like loop sends each stored event on and deletes
//! it; keys rotate their deterministic key in the middle. Restored, this
//! library's store holds exactly the keys that were never deleted.
//!
//! The controls, through the same cleaner: the naive layer (a delete
//! written as the ciphertext of nothing, as the reported library did)
//! brings every deleted key back; a store that writes only a key's primary
//! form after the rotation brings back the keys whose older form had a
//! value.
#![cfg(all(feature = "kafka", feature = "test-hooks"))]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use common::compacting::create_topic_with;
use common::kafka::{apache_kafka, client_config, fresh_topic};
use common::naive::NaiveBytesStore;
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::record_key::WriteRule;
use tombstone_crypt::store::{
    restore_from, ChangeLoggingStore, Changelog as _, EncryptedStore, KeyValueStore, MemoryStore,
};
use tombstone_crypt::{KeyTemplate, Keyset};

/// A key no store writes: the filler whose tombstones roll the segments
/// (the cleaner cleans only closed segments, and a segment closes when a
/// record comes after `segment.ms`). A restore applies them as deletes of
/// a key nobody has.
const FILLER: &[u8] = b"\x00filler";

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layer {
    /// This library: encrypted values and keys, the write rule.
    Library,
    /// The reported bug: a delete is the ciphertext of nothing.
    Naive,
    /// Broken: after the rotation, only the primary form is written.
    PrimaryOnly,
}

/// `topic`, one partition, compacted by the cleaner within seconds and
/// its tombstones kept one second.
fn create(bootstrap: &str, topic: &str) {
    create_topic_with(
        bootstrap,
        topic,
        1,
        &[
            ("cleanup.policy", "compact"),
            ("segment.ms", "100"),
            ("min.cleanable.dirty.ratio", "0.01"),
            ("delete.retention.ms", "1000"),
            ("min.compaction.lag.ms", "0"),
        ],
    );
}

/// Rolls segments with filler tombstones until the cleaner has left one
/// record per key and no tombstone but the filler's (the naive layer's
/// deletes are values, and stay).
fn wait_cleaned(bootstrap: &str, topic: &str) -> usize {
    let filler: FutureProducer = client_config(bootstrap).create().unwrap();
    let reader = KafkaChangelog::existing(client_config(bootstrap), topic).unwrap();
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).key(FILLER).partition(0);
        futures_executor::block_on(filler.send(r, Duration::from_secs(10))).unwrap();
        let records = reader.records().unwrap();
        let mut per_key: BTreeMap<&[u8], usize> = BTreeMap::new();
        let mut tombstones = 0;
        for r in records.iter().filter(|r| r.key != FILLER) {
            *per_key.entry(&r.key).or_default() += 1;
            tombstones += usize::from(r.value.is_none());
        }
        if tombstones == 0 && per_key.values().all(|&n| n == 1) {
            return records.len();
        }
        assert!(
            Instant::now() < deadline,
            "the log cleaner did not finish within 90 s ({tombstones} tombstones, {} records)",
            records.len()
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs the scenario with `layer`; the keys that came back after the
/// restore, of those deleted.
fn resurrected(layer: Layer) -> Option<BTreeSet<Vec<u8>>> {
    let bootstrap = apache_kafka()?;
    let topic = fresh_topic(&format!("report-{layer:?}").to_lowercase());
    create(&bootstrap, &topic);
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let log = KafkaChangelog::existing(client_config(&bootstrap), &topic).unwrap();
    let logged = ChangeLoggingStore::new(MemoryStore::new(), log);
    let mut naive = None;
    let mut ours = None;
    match layer {
        Layer::Naive => naive = Some(NaiveBytesStore::new(logged, &topic, values.clone())),
        Layer::Library | Layer::PrimaryOnly => {
            let s = EncryptedStore::new(logged, &topic, values.clone())
                .with_encrypted_keys(keys.clone())
                .unwrap();
            ours = Some(if layer == Layer::PrimaryOnly {
                s.with_write_rule(WriteRule::PrimaryOnly)
            } else {
                s
            });
        }
    }
    let mut deleted = BTreeSet::new();
    let mut kept = BTreeSet::new();
    // Events arrive; every third one is kept (never punctuated). The key
    // keyset rotates between the two arrivals.
    for round in 0..2 {
        let store: &mut dyn KeyValueStore = match (&mut naive, &mut ours) {
            (Some(n), _) => n,
            (_, Some(o)) => o,
            _ => unreachable!(),
        };
        for i in 0..30 {
            let k = format!("event-{i}").into_bytes();
            store
                .put(&k, Some(format!("payload {round}-{i}").as_bytes()))
                .unwrap();
        }
        store.flush().unwrap();
        if round == 0 {
            keys.rotate_with(KeyTemplate::aes256_siv()).unwrap();
            if let Some(o) = &mut ours {
                o.set_key_keyset(keys.clone()).unwrap();
            }
        }
    }
    let store: &mut dyn KeyValueStore = match (&mut naive, &mut ours) {
        (Some(n), _) => n,
        (_, Some(o)) => o,
        _ => unreachable!(),
    };
    // The Punctuator: each stored event sent on (here: read), then deleted.
    for (k, _) in store.all().unwrap() {
        let n: usize = String::from_utf8_lossy(&k[6..]).parse().unwrap();
        if n % 3 == 0 {
            kept.insert(k);
            continue;
        }
        store.delete(&k).unwrap();
        store.flush().unwrap();
        if layer != Layer::PrimaryOnly {
            // The report's symptom: the live store says deleted (the
            // broken rule's store serves the older form's value already).
            assert_eq!(store.get(&k).unwrap(), None, "get after delete");
        }
        deleted.insert(k);
    }
    drop((naive, ours));
    let left = wait_cleaned(&bootstrap, &topic);
    eprintln!("{layer:?}: {left} records after the cleaner");
    // A new instance, no local state: restored from the compacted log.
    let log = KafkaChangelog::existing(client_config(&bootstrap), &topic).unwrap();
    let mut fresh = MemoryStore::new();
    restore_from(&mut fresh, &log).unwrap();
    let back: BTreeSet<Vec<u8>> = match layer {
        Layer::Naive => NaiveBytesStore::new(fresh, &topic, values)
            .all()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
        _ => EncryptedStore::new(fresh, &topic, values)
            .with_encrypted_keys(keys)
            .unwrap()
            .all()
            .unwrap()
            .into_iter()
            .map(|(k, _)| k)
            .collect(),
    };
    assert!(
        kept.is_subset(&back),
        "{layer:?}: a kept key is missing after the restore"
    );
    Some(back.intersection(&deleted).cloned().collect())
}

#[test]
fn the_report_through_the_log_cleaner_resurrects_nothing() {
    let Some(back) = resurrected(Layer::Library) else {
        return;
    };
    assert!(back.is_empty(), "deleted keys came back: {back:?}");
}

#[test]
fn negative_control_the_naive_layer_resurrects_every_deleted_key() {
    let Some(back) = resurrected(Layer::Naive) else {
        return;
    };
    assert_eq!(back.len(), 20, "resurrected: naive={}", back.len());
}

#[test]
fn negative_control_without_older_forms_tombstones_deleted_keys_come_back() {
    let Some(back) = resurrected(Layer::PrimaryOnly) else {
        return;
    };
    assert_eq!(
        back.len(),
        20,
        "resurrected through their older form: {}",
        back.len()
    );
}
