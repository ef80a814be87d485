//! The end-to-end model suite of the write and reading rules, through
//! Apache Kafka's log cleaner (`scripts/kafka.sh`; the topics compacted
//! as `common::compacting::wait_compacted` waits for it).
//!
//! Random sequences of puts and deletes of a few logical keys go through a
//! random mix of writers, with rotations of the value keyset and of the
//! record-key keyset, on a topic of 3 partitions: the typed producer, an
//! `EncryptedStore` over a `KafkaChangelog` (one per partition, as Kafka
//! Streams tasks), and the command line's `reencrypt --apply` (after which
//! the topic is compacted and the old keys disabled) and `repair --apply`.
//! After every step three readers must each equal the model:
//!
//! - a `TypedConsumer` replaying the topic in order (the state of a key is
//!   its last record);
//! - a store restored from each partition (`restore_from` the changelog,
//!   under an `EncryptedStore`);
//! - `tombstone-crypt audit --json --list-keys`;
//!
//! on the topic as written, and on it compacted by Kafka's rule (the
//! consumer's fold and a restore of the compacted records). At the end of
//! each case the suite waits until the broker itself has compacted the
//! topic and checks all three readers again.
//!
//! The negative controls run the same suite with a producer that writes
//! only the primary form (no fan-out) and with one that writes the value
//! before the old forms' tombstones: each must fail, and proptest shrinks
//! it to a minimal counterexample, printed.
//!
//! `TOMBSTONE_E2E_CASES` sets the number of cases (64 by default;
//! `scripts/soak.sh` runs more).

use crate::common;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::compacting::{
    compacting_bootstrap, compaction_runs, create_compacted_topic, kafka_compact, read_all,
    wait_compacted, RawRecord,
};
use common::kafka::{client_config, fresh_topic, siv_producer, SivProducer};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};
use tombstone_crypt::kafka::{KafkaChangelog, TypedConsumer};
use tombstone_crypt::record_key::WriteRule;
use tombstone_crypt::store::{
    restore, restore_from, ChangeLoggingStore, EncryptedStore, KeyValueStore, MemoryStore, Record,
};
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer as _, DeterministicDeserializer, Error,
    KeyStatus, KeyTemplate, Keyset,
};

const PARTITIONS: i32 = 3;
const KEYS: [&str; 4] = ["alice", "bob", "carol", "dave"];

/// Who writes a put or a delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Writer {
    Producer,
    Store,
}

/// One step.
#[derive(Clone, Debug)]
enum Op {
    Put(Writer, usize, u8),
    Delete(Writer, usize),
    RotateValues,
    RotateKeys,
    /// `reencrypt --apply`, then (once the broker compacted the topic) the
    /// old keys of both keysets disabled.
    Reencrypt,
    /// `repair --apply` (nothing to repair on a topic written by the rule).
    Repair,
    /// A stale writer: a producer still on the key keyset from before the
    /// last rotation of record keys writes (a value, or a delete), then
    /// `repair --apply`. Where the readers disagree after the stale write,
    /// `audit` must report a finding; after the repair they all equal the
    /// model, whose state for the key is the stale write (the reading
    /// rule: the newest record decides).
    StaleWrite(usize, Option<u8>),
}

fn op() -> impl Strategy<Value = Op> {
    let writer = prop_oneof![Just(Writer::Producer), Just(Writer::Store)];
    prop_oneof![
        6 => (writer.clone(), 0..KEYS.len(), any::<u8>()).prop_map(|(w, k, v)| Op::Put(w, k, v)),
        3 => (writer, 0..KEYS.len()).prop_map(|(w, k)| Op::Delete(w, k)),
        1 => Just(Op::RotateValues),
        3 => Just(Op::RotateKeys),
        1 => Just(Op::Reencrypt),
        1 => Just(Op::Repair),
        1 => (0..KEYS.len(), proptest::option::of(any::<u8>()))
            .prop_map(|(k, v)| Op::StaleWrite(k, v)),
    ]
}

/// The value a put writes: `v` as text, or empty for `v % 16 == 0` (an
/// empty value is a value, never a delete).
fn value_of(v: u8) -> Vec<u8> {
    if v.is_multiple_of(16) {
        Vec::new()
    } else {
        format!("value-{v}").into_bytes()
    }
}

type Model = BTreeMap<Vec<u8>, Option<Vec<u8>>>;
type Store = EncryptedStore<ChangeLoggingStore<MemoryStore, KafkaChangelog>>;

/// One case's topic, keysets and writers.
struct World {
    bootstrap: String,
    topic: String,
    dir: PathBuf,
    values: Keyset,
    keys: Keyset,
    /// The key keyset before its last rotation, while its primary is still
    /// enabled: what a stale writer holds.
    stale_keys: Option<Keyset>,
    rule: WriteRule,
    producer: SivProducer,
    /// One store per partition, each with its changelog on that partition.
    stores: Vec<Store>,
    runtime: tokio::runtime::Runtime,
    model: Model,
}

/// Cases whose topic the broker compacted (it removed records), and the
/// records it removed, over the run.
static COMPACTED_CASES: AtomicU64 = AtomicU64::new(0);
static REMOVED_RECORDS: AtomicU64 = AtomicU64::new(0);

fn config(bootstrap: &str) -> tombstone_crypt::kafka::rdkafka::ClientConfig {
    let mut c = client_config(bootstrap);
    c.set("fetch.wait.max.ms", "20");
    c
}

impl World {
    fn new(rule: WriteRule) -> World {
        let bootstrap = compacting_bootstrap();
        let topic = fresh_topic("writers");
        create_compacted_topic(&bootstrap, &topic, PARTITIONS);
        let dir = std::env::temp_dir().join(format!("{topic}-keysets"));
        std::fs::create_dir_all(&dir).unwrap();
        let values = Keyset::generate();
        let keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let producer = siv_producer(&bootstrap, &values, &keys, rule);
        let stores = (0..PARTITIONS)
            .map(|p| {
                let changelog = KafkaChangelog::with_config(config(&bootstrap), &topic)
                    .unwrap()
                    .on_partition(p)
                    .with_timeout(Duration::from_secs(20));
                // The store is named as its topic: one binding for every
                // writer (the topic and the plaintext key).
                EncryptedStore::new(
                    ChangeLoggingStore::new(MemoryStore::new(), changelog),
                    topic.clone(),
                    values.clone(),
                )
                .with_encrypted_keys(keys.clone())
                .unwrap()
            })
            .collect();
        let world = World {
            bootstrap,
            topic,
            dir,
            values,
            keys,
            stale_keys: None,
            rule,
            producer,
            stores,
            runtime,
            model: Model::new(),
        };
        world.save_keysets();
        world
    }

    fn save_keysets(&self) {
        std::fs::write(self.dir.join("values.json"), self.values.to_tink_json()).unwrap();
        std::fs::write(self.dir.join("keys.json"), self.keys.to_tink_json()).unwrap();
    }

    /// Every writer takes the keysets as they are now.
    fn keysets_changed(&mut self) {
        self.save_keysets();
        self.producer = siv_producer(&self.bootstrap, &self.values, &self.keys, self.rule);
        for s in &mut self.stores {
            s.set_keyset(self.values.clone());
            s.set_key_keyset(self.keys.clone()).unwrap();
        }
    }

    fn store_for(&mut self, key: &[u8]) -> &mut Store {
        let p = tombstone_crypt::record_key::murmur2_partition(key, PARTITIONS as u32);
        &mut self.stores[p as usize]
    }

    fn cli(&self, args: &[&str]) -> (i32, serde_json::Value) {
        let values = self.dir.join("values.json");
        let keys = self.dir.join("keys.json");
        let out = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
            .arg("--json")
            .args(args)
            .args(["--bootstrap", &self.bootstrap, "--topic", &self.topic])
            .arg("--keyset")
            .arg(&values)
            .arg("--key-keyset")
            .arg(&keys)
            .args(["--timeout", "20"])
            // Only this library's writers wrote the topic: an empty value is
            // a value, never a broken layer's encrypted null.
            .args(["--null-marker", "none"])
            .output()
            .unwrap();
        let code = out.status.code().unwrap_or(-1);
        let json = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
            panic!(
                "tombstone-crypt {args:?} exit {code}: {e}; stderr: {}",
                String::from_utf8_lossy(&out.stderr)
            )
        });
        (code, json)
    }

    fn apply(&mut self, op: &Op) -> Result<(), TestCaseError> {
        match *op {
            Op::Put(writer, k, v) => {
                let key = KEYS[k].as_bytes();
                let value = value_of(v);
                self.write(writer, key, Some(&value));
                self.model.insert(key.to_vec(), Some(value));
            }
            Op::Delete(writer, k) => {
                let key = KEYS[k].as_bytes();
                self.write(writer, key, None);
                self.model.insert(key.to_vec(), None);
            }
            Op::RotateValues => {
                self.values.rotate();
                self.keysets_changed();
            }
            Op::RotateKeys => {
                self.stale_keys = Some(self.keys.clone());
                self.keys.rotate();
                self.keysets_changed();
            }
            Op::StaleWrite(k, v) => {
                let Some(stale) = self.stale_keys.clone() else {
                    return Ok(()); // no rotation yet: nobody is stale
                };
                let key = KEYS[k].as_bytes();
                let value = v.map(value_of);
                let producer = siv_producer(&self.bootstrap, &self.values, &stale, self.rule);
                self.runtime
                    .block_on(producer.send(&self.topic, key, value.as_deref()))
                    .unwrap();
                self.model.insert(key.to_vec(), value);
                // Readers that disagree now: audit must say so.
                let replay = self.consumer_replay();
                let (all, got) = self.restored();
                let replayed_live: Model =
                    replay.into_iter().filter(|(_, v)| v.is_some()).collect();
                let disagree = replayed_live != all || replayed_live != got;
                let (code, json) = self.cli(&["audit"]);
                if disagree {
                    prop_assert_eq!(code, 1, "stale write: readers disagree, audit: {}", json);
                    prop_assert!(json["split_keys"].as_u64() > Some(0), "{}", json);
                }
                let (code, json) = self.cli(&["repair", "--apply"]);
                prop_assert_eq!(code, 0, "repair after a stale write: {}", json);
            }
            Op::Reencrypt => {
                let (code, json) = self.cli(&["reencrypt", "--apply"]);
                prop_assert_eq!(code, 0, "reencrypt: {}", json);
                // The rotation procedure: once compaction has left no value
                // under the old keys, disable them.
                wait_compacted(&self.bootstrap, &self.topic, Duration::from_secs(60));
                for ks in [&mut self.values, &mut self.keys] {
                    let primary = ks.primary();
                    let old: Vec<_> = ks
                        .keys()
                        .filter(|&(id, st)| id != primary && st == KeyStatus::Enabled)
                        .map(|(id, _)| id)
                        .collect();
                    for id in old {
                        ks.disable(id).unwrap();
                    }
                }
                // A writer on the keyset before the rotation would now
                // write under a disabled key: not a stale writer, a broken
                // one (its keys do not decrypt).
                self.stale_keys = None;
                self.keysets_changed();
            }
            Op::Repair => {
                let (code, json) = self.cli(&["repair", "--apply"]);
                prop_assert_eq!(code, 0, "repair: {}", json);
            }
        }
        Ok(())
    }

    fn write(&mut self, writer: Writer, key: &[u8], value: Option<&[u8]>) {
        match writer {
            Writer::Producer => {
                let (producer, runtime, topic) = (&self.producer, &self.runtime, &self.topic);
                runtime.block_on(producer.send(topic, key, value)).unwrap();
            }
            Writer::Store => {
                // A delete is `put(key, None)`, as Kafka Streams' bytes
                // layer has it.
                let store = self.store_for(key);
                store.put(key, value).unwrap();
                store.flush().unwrap();
            }
        }
    }

    fn key_de(&self) -> DeterministicDeserializer<Bytes> {
        DeterministicDeserializer::new(Bytes, self.keys.clone())
    }

    fn value_de(&self) -> DecryptingDeserializer<Bytes> {
        DecryptingDeserializer::new(Bytes, self.values.clone())
    }

    /// Whether a record can be passed over by a reader: a tombstone of a
    /// key form under a disabled key (what a re-encryption left behind).
    fn old_form_tombstone(&self, key: Option<&[u8]>, value: Option<&[u8]>) -> bool {
        value.is_none()
            && key.is_some_and(|k| {
                self.key_de()
                    .deserialize_slice(&Context::new(&self.topic), k)
                    .is_err()
            })
    }

    /// The typed consumer replaying every partition in order: the last
    /// record of each plaintext key.
    fn consumer_replay(&self) -> Model {
        let keys = self.keys.clone();
        let topic = self.topic.clone();
        // rdkafka's StreamConsumer is made in a tokio context.
        let _runtime = self.runtime.enter();
        let consumer: TypedConsumer<Vec<u8>, Vec<u8>, _, _> = TypedConsumer::new(
            config(&self.bootstrap)
                .set("group.id", fresh_topic("replay"))
                .set("enable.partition.eof", "true")
                .set("enable.auto.commit", "false")
                .set("auto.offset.reset", "earliest"),
            self.key_de(),
            self.value_de(),
        )
        .unwrap()
        .on_undecodable(move |raw, e| {
            let de = DeterministicDeserializer::new(Bytes, keys.clone());
            let key_fails = raw
                .key()
                .is_some_and(|k| de.deserialize_slice(&Context::new(&topic), k).is_err());
            if raw.payload().is_none() && key_fails {
                Ok(())
            } else {
                Err(e.clone())
            }
        });
        let mut tpl = TopicPartitionList::new();
        for p in 0..PARTITIONS {
            // Offset 0 rather than `Beginning` (see KafkaChangelog).
            tpl.add_partition_offset(&self.topic, p, Offset::Offset(0))
                .unwrap();
        }
        consumer.assign(&tpl).unwrap();
        let mut state = Model::new();
        let mut last: BTreeMap<i32, i64> = BTreeMap::new();
        let mut at_end = std::collections::BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(30);
        self.runtime.block_on(async {
            while at_end.len() < PARTITIONS as usize {
                assert!(
                    Instant::now() < deadline,
                    "replay of {} timed out",
                    self.topic
                );
                match tokio::time::timeout(Duration::from_secs(5), consumer.recv()).await {
                    Err(_) => {}
                    Ok(Ok(r)) => {
                        at_end.remove(&r.partition);
                        // The broker's repeated records after a compaction.
                        if last.get(&r.partition).is_some_and(|&l| r.offset <= l) {
                            continue;
                        }
                        last.insert(r.partition, r.offset);
                        state.insert(r.key, r.value);
                    }
                    Ok(Err(Error::Kafka {
                        cause: Some(cause), ..
                    })) if matches!(
                        cause.downcast_ref::<KafkaError>(),
                        Some(KafkaError::PartitionEOF(_))
                    ) =>
                    {
                        if let Some(KafkaError::PartitionEOF(p)) = cause.downcast_ref() {
                            at_end.insert(*p);
                        }
                    }
                    // A broker connection down for a moment: librdkafka
                    // reconnects (the deadline above bounds it).
                    Ok(Err(Error::Kafka {
                        cause: Some(cause), ..
                    })) if cause
                        .downcast_ref::<KafkaError>()
                        .is_some_and(tombstone_crypt::kafka::is_transient_kafka_error) => {}
                    Ok(Err(e)) => panic!("replay of {}: {e}", self.topic),
                }
            }
        });
        state
    }

    /// A store restored from each partition's changelog: every live entry,
    /// and `get` of every key of the model.
    fn restored(&self) -> (Model, Model) {
        let mut all = Model::new();
        let mut got = Model::new();
        let restored: Vec<MemoryStore> = std::thread::scope(|scope| {
            let threads: Vec<_> = self
                .stores
                .iter()
                .map(|s| {
                    scope.spawn(move || {
                        let mut inner = MemoryStore::new();
                        restore_from(&mut inner, s.inner().changelog()).unwrap();
                        inner
                    })
                })
                .collect();
            threads.into_iter().map(|t| t.join().unwrap()).collect()
        });
        for inner in restored {
            self.read_store(inner, &mut all, &mut got);
        }
        (all, got)
    }

    /// The same from `records` (a compacted topic), by partition.
    fn restored_from(&self, records: &[RawRecord]) -> (Model, Model) {
        let mut all = Model::new();
        let mut got = Model::new();
        for p in 0..PARTITIONS {
            let part: Vec<Record> = records
                .iter()
                .filter(|r| r.partition == p && r.key.is_some())
                .map(|r| Record {
                    offset: r.offset as u64,
                    key: r.key.clone().unwrap_or_default(),
                    value: r.value.clone(),
                })
                .collect();
            let mut inner = MemoryStore::new();
            restore(&mut inner, &part).unwrap();
            self.read_store(inner, &mut all, &mut got);
        }
        (all, got)
    }

    fn read_store(&self, inner: MemoryStore, all: &mut Model, got: &mut Model) {
        let store = EncryptedStore::new(inner, self.topic.clone(), self.values.clone())
            .with_encrypted_keys(self.keys.clone())
            .unwrap();
        for (k, v) in store.all().unwrap() {
            assert!(all.insert(k, Some(v)).is_none(), "a key in two partitions");
        }
        for k in self.model.keys() {
            if let Some(v) = store.get(k).unwrap() {
                got.insert(k.clone(), Some(v));
            }
        }
    }

    /// The consumer's fold over `records` (a compacted topic), decoded as
    /// the typed consumer decodes.
    fn fold(&self, records: &[RawRecord]) -> Model {
        let (key_de, value_de) = (self.key_de(), self.value_de());
        let mut state = Model::new();
        for r in records {
            if self.old_form_tombstone(r.key.as_deref(), r.value.as_deref()) {
                continue;
            }
            let wire = r.key.as_deref().unwrap();
            let ctx = Context::new(&self.topic);
            let (key, plain) = key_de.deserialize_key(&ctx, wire).unwrap();
            let value = value_de
                .deserialize(&ctx.with_key(&plain), r.value.as_deref())
                .unwrap();
            state.insert(key, value);
        }
        state
    }

    /// The model's live entries.
    fn live(&self) -> Model {
        self.model
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// A replayed state equals the model: the same live keys and values;
    /// a deleted key is a tombstone or absent.
    fn check_state(&self, what: &str, state: &Model) -> Result<(), TestCaseError> {
        let live: Model = state
            .iter()
            .filter(|(_, v)| v.is_some())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        prop_assert_eq!(&live, &self.live(), "{}: live keys and values", what);
        for (k, v) in state {
            prop_assert!(
                self.model.contains_key(k),
                "{}: a key the model never wrote: {:?}",
                what,
                k
            );
            prop_assert!(v.is_some() || self.model[k].is_none());
        }
        Ok(())
    }

    fn check_restore(&self, what: &str, (all, got): (Model, Model)) -> Result<(), TestCaseError> {
        prop_assert_eq!(&all, &self.live(), "{}: restored store, all()", what);
        prop_assert_eq!(&got, &self.live(), "{}: restored store, get()", what);
        Ok(())
    }

    fn check_audit(&self, what: &str) -> Result<(), TestCaseError> {
        let (code, json) = self.cli(&["audit", "--list-keys"]);
        prop_assert_eq!(code, 0, "{}: audit exit {}: {}", what, code, json);
        prop_assert_eq!(
            &json["broken_tombstones"],
            &serde_json::json!(0),
            "{}",
            what
        );
        prop_assert_eq!(&json["split_keys"], &serde_json::json!(0), "{}", what);
        let live = self.live().len() as u64;
        prop_assert_eq!(
            &json["live_keys"],
            &serde_json::json!(live),
            "{}: {}",
            what,
            json
        );
        let mut audited = BTreeMap::new();
        for s in json["key_states"].as_array().unwrap() {
            let key = hex::decode(s["key"].as_str().unwrap()).unwrap();
            audited.insert(key, s["state"].as_str().unwrap().to_owned());
        }
        for (k, v) in &self.model {
            let state = audited.get(k).map(String::as_str);
            match v {
                Some(_) => prop_assert_eq!(state, Some("live"), "{}: audit of {:?}", what, k),
                None => prop_assert!(
                    matches!(state, None | Some("deleted")),
                    "{}: audit of {:?}: {:?}",
                    what,
                    k,
                    state
                ),
            }
        }
        Ok(())
    }

    /// Every reader on the topic as the broker has it now, and on it
    /// compacted by Kafka's rule.
    ///
    /// The readers run at once, each in its own thread (they wait on the
    /// broker, not on the CPU); each is checked on its own.
    fn check(&self, step: &str) -> Result<(), TestCaseError> {
        std::thread::scope(|scope| {
            let replay = scope.spawn(|| self.consumer_replay());
            let restored = scope.spawn(|| self.restored());
            let audit = scope.spawn(|| self.check_audit(&format!("{step}: audit")));
            let compacted = kafka_compact(&read_all(&self.bootstrap, &self.topic));
            // A reader that panicked: its panic, as if it ran here.
            fn join<T>(r: std::thread::Result<T>) -> T {
                r.unwrap_or_else(|e| std::panic::resume_unwind(e))
            }
            self.check_state(&format!("{step}: consumer"), &join(replay.join()))?;
            self.check_restore(&format!("{step}: restore"), join(restored.join()))?;
            join(audit.join())?;
            self.check_state(
                &format!("{step}: consumer, compacted"),
                &self.fold(&compacted),
            )?;
            self.check_restore(
                &format!("{step}: restore, compacted"),
                self.restored_from(&compacted),
            )
        })
    }

    /// The broker compacts the topic; every reader again.
    fn check_after_broker_compaction(&self) -> Result<(), TestCaseError> {
        let c = wait_compacted(&self.bootstrap, &self.topic, Duration::from_secs(60));
        let removed = u64::try_from(c.offsets).unwrap_or(0) - c.after as u64;
        if removed > 0 {
            COMPACTED_CASES.fetch_add(1, Ordering::SeqCst);
            REMOVED_RECORDS.fetch_add(removed, Ordering::SeqCst);
        }
        self.check("compacted by the broker")
    }
}

fn run_case(rule: WriteRule, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut world = World::new(rule);
    for (i, op) in ops.iter().enumerate() {
        world.apply(op)?;
        world.check(&format!("step {i} ({op:?})"))?;
    }
    world.check_after_broker_compaction()?;
    let _ = std::fs::remove_dir_all(&world.dir);
    Ok(())
}

fn cases() -> u32 {
    std::env::var("TOMBSTONE_E2E_CASES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(64)
}

/// Runs `cases` cases of the suite.
fn suite(cases: u32) {
    let start = Instant::now();
    let mut runner = TestRunner::new(Config {
        cases,
        max_shrink_iters: 256,
        source_file: Some(file!()),
        ..Config::default()
    });
    let result = runner.run(&proptest::collection::vec(op(), 1..=6), |ops| {
        run_case(WriteRule::FanOut, &ops)
    });
    eprintln!(
        "{cases} cases in {:.0?}; over the binary so far: the broker compacted the topic of {} \
         cases at their end ({} records removed), {} compactions seen in all (after a reencrypt \
         too)",
        start.elapsed(),
        COMPACTED_CASES.load(Ordering::SeqCst),
        REMOVED_RECORDS.load(Ordering::SeqCst),
        compaction_runs()
    );
    if let Err(e) = result {
        panic!("{e}");
    }
}

// The cases are split between two tests, which the test command runs at
// once: each case waits on the broker far more than on the CPU.

#[test]
fn every_writer_keeps_deletes_across_rotations_on_a_compacting_broker_1() {
    suite(cases() / 2);
}

#[test]
fn every_writer_keeps_deletes_across_rotations_on_a_compacting_broker_2() {
    suite(cases() - cases() / 2);
}

/// A broken producer must make the suite fail; returns the minimal
/// counterexample proptest shrank it to.
fn control(rule: WriteRule) -> Vec<Op> {
    let mut runner = TestRunner::new(Config {
        cases: 64,
        max_shrink_iters: 32,
        failure_persistence: None,
        ..Config::default()
    });
    // Producer writes only, with key rotations: where the rule matters.
    let write = || {
        prop_oneof![
            2 => (0..2usize, any::<u8>()).prop_map(|(k, v)| Op::Put(Writer::Producer, k, v)),
            1 => (0..2usize).prop_map(|k| Op::Delete(Writer::Producer, k)),
        ]
    };
    let op = prop_oneof![3 => write(), 1 => Just(Op::RotateKeys)];
    // Every case has a rotation with writes on both sides: with rotations
    // only drawn at random, about one case in eighteen could show a broken
    // rule, and 32 cases missed it about one run in six. With this shape
    // about one case in five does, and 64 cases miss it about once in
    // 400,000 runs; the runner stops at the first failure.
    let cases = (
        proptest::collection::vec(write(), 1..=3),
        proptest::collection::vec(op, 1..=3),
    )
        .prop_map(|(mut before, after)| {
            before.push(Op::RotateKeys);
            before.extend(after);
            before
        });
    match runner.run(&cases, |ops| run_case(rule, &ops)) {
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!("{rule:?}: minimal counterexample {minimal:?}: {reason}");
            minimal
        }
        other => panic!("the broken rule {rule:?} passed the suite: {other:?}"),
    }
}

#[test]
fn control_a_producer_without_the_fan_out_fails_on_a_compacting_broker() {
    let minimal = control(WriteRule::PrimaryOnly);
    // It needs a key rotation between two writes of one key.
    let rotation = minimal.iter().position(|o| matches!(o, Op::RotateKeys));
    assert!(
        rotation.is_some_and(|r| r > 0 && r + 1 < minimal.len()),
        "{minimal:?}"
    );
}

#[test]
fn control_the_fan_out_in_the_wrong_order_fails_on_a_compacting_broker() {
    let minimal = control(WriteRule::ValueFirst);
    // A rotation, then any put: the old form's tombstone lands after the
    // value, and a replaying consumer ends the key on a delete.
    assert!(minimal.iter().any(|o| matches!(o, Op::RotateKeys)));
    assert!(minimal.iter().any(|o| matches!(o, Op::Put(..))));
}
