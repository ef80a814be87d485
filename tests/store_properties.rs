//! The property suite: for any sequence of operations, a delete made through
//! the encrypted layer stays deleted, in the store, in its iteration, in the
//! changelog, after compaction and after a restore. The naive layer (which
//! encrypts a null) fails the very same property.

use crate::common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::naive::{NaiveBytesStore, NaiveSerde};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::store::{
    compact, restore, ChangeLoggingStore, Changelog, EncryptedStore, KeyValueStore,
    MemoryChangelog, MemoryStore, Record, TypedStore,
};
use tombstone_crypt::{
    Bincode, Bytes, DecryptingDeserializer, EncryptingSerializer, Error, Keyset, Utf8,
};

const NAME: &str = "events-store";

#[derive(Clone, Debug)]
enum Op {
    Put(u8, Vec<u8>),
    Delete(u8),
    Get(u8),
    All,
    Range(u8, u8),
    Flush,
    Rotate,
    Compact,
    Restore,
}

fn op() -> impl Strategy<Value = Op> {
    let key = 0u8..6;
    prop_oneof![
        6 => (key.clone(), prop::collection::vec(any::<u8>(), 0..8)).prop_map(|(k, v)| Op::Put(k, v)),
        2 => key.clone().prop_map(|k| Op::Put(k, Vec::new())),
        5 => key.clone().prop_map(Op::Delete),
        2 => key.clone().prop_map(Op::Get),
        2 => Just(Op::All),
        1 => (key.clone(), key).prop_map(|(a, b)| Op::Range(a, b)),
        1 => Just(Op::Flush),
        1 => Just(Op::Rotate),
        1 => Just(Op::Compact),
        2 => Just(Op::Restore),
    ]
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(op(), 1..40)
}

/// The same operations with no empty value: what is left to fail is deletes.
fn ops_without_empty_values() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        op().prop_filter(
            "no empty values",
            |op| !matches!(op, Op::Put(_, v) if v.is_empty()),
        ),
        1..40,
    )
}

fn key(k: u8) -> String {
    format!("k{k}")
}

/// Where the bytes live.
#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    #[cfg(feature = "redb")]
    Redb,
}

static FILES: AtomicUsize = AtomicUsize::new(0);

fn fresh(backend: Backend) -> Box<dyn KeyValueStore> {
    match backend {
        Backend::Memory => Box::new(MemoryStore::new()),
        #[cfg(feature = "redb")]
        Backend::Redb => {
            let dir =
                std::env::temp_dir().join(format!("tombstone-crypt-props-{}", std::process::id()));
            std::fs::create_dir_all(&dir).unwrap();
            let n = FILES.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{n}.redb"));
            let _ = std::fs::remove_file(&path);
            Box::new(tombstone_crypt::store::RedbStore::open(path).unwrap())
        }
    }
}

/// Which layer encrypts.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Layer {
    /// `TypedStore` with `EncryptingSerializer<Bincode<Vec<u8>>>` values.
    TypedBincode,
    /// `TypedStore` with `EncryptingSerializer<Bytes>` values.
    TypedBytes,
    /// `EncryptedStore` over the bytes store.
    BytesLevel,
    /// `TypedStore` with the naive serde (negative control).
    NaiveTyped,
    /// The naive bytes wrapper (negative control).
    NaiveBytesLevel,
}

type Logged = ChangeLoggingStore<Box<dyn KeyValueStore>, MemoryChangelog>;

/// The store under test, with its changelog, behind one interface.
enum Sut {
    Typed(TypedStore<String, Vec<u8>, Logged>),
    Bytes(Box<dyn BytesSut>),
}

/// A bytes-level layer that can hand back its logged store.
trait BytesSut: KeyValueStore {
    fn logged(&self) -> &Logged;
    fn into_logged(self: Box<Self>) -> Logged;
}

impl BytesSut for EncryptedStore<Logged> {
    fn logged(&self) -> &Logged {
        self.inner()
    }
    fn into_logged(self: Box<Self>) -> Logged {
        self.into_inner()
    }
}

impl BytesSut for NaiveBytesStore<Logged> {
    fn logged(&self) -> &Logged {
        &self.inner
    }
    fn into_logged(self: Box<Self>) -> Logged {
        self.inner
    }
}

fn build(layer: Layer, logged: Logged, keyset: &Keyset) -> Sut {
    let ks = keyset.clone();
    match layer {
        Layer::TypedBincode => Sut::Typed(TypedStore::new(
            logged,
            NAME,
            (Utf8, Utf8),
            EncryptingSerializer::new(Bincode::<Vec<u8>>::new(), ks.clone()),
            DecryptingDeserializer::new(Bincode::<Vec<u8>>::new(), ks),
        )),
        Layer::TypedBytes => Sut::Typed(TypedStore::new(
            logged,
            NAME,
            (Utf8, Utf8),
            EncryptingSerializer::new(Bytes, ks.clone()),
            DecryptingDeserializer::new(Bytes, ks),
        )),
        Layer::NaiveTyped => Sut::Typed(TypedStore::new(
            logged,
            NAME,
            (Utf8, Utf8),
            NaiveSerde::new(Bytes, ks.clone()),
            NaiveSerde::new(Bytes, ks),
        )),
        Layer::BytesLevel => Sut::Bytes(Box::new(EncryptedStore::new(logged, NAME, ks))),
        Layer::NaiveBytesLevel => Sut::Bytes(Box::new(NaiveBytesStore::new(logged, NAME, ks))),
    }
}

impl Sut {
    fn logged(&self) -> &Logged {
        match self {
            Sut::Typed(t) => t.inner(),
            Sut::Bytes(b) => b.logged(),
        }
    }

    fn into_logged(self) -> Logged {
        match self {
            Sut::Typed(t) => t.into_inner(),
            Sut::Bytes(b) => b.into_logged(),
        }
    }

    fn put(&mut self, k: &str, v: Option<&[u8]>) -> Result<(), Error> {
        match self {
            Sut::Typed(t) => t.put(&k.to_owned(), v.map(<[u8]>::to_vec).as_ref()),
            Sut::Bytes(b) => b.put(k.as_bytes(), v),
        }
    }

    fn delete(&mut self, k: &str) -> Result<(), Error> {
        match self {
            Sut::Typed(t) => t.delete(&k.to_owned()),
            Sut::Bytes(b) => b.delete(k.as_bytes()).map(drop),
        }
    }

    fn get(&self, k: &str) -> Result<Option<Vec<u8>>, Error> {
        match self {
            Sut::Typed(t) => t.get(&k.to_owned()),
            Sut::Bytes(b) => b.get(k.as_bytes()),
        }
    }

    /// What iteration yields: a key with a `None` value is a key that
    /// iteration still yields (the symptom).
    #[allow(clippy::type_complexity)]
    fn range(&self, bounds: Option<(&str, &str)>) -> Result<Vec<(String, Option<Vec<u8>>)>, Error> {
        match self {
            Sut::Typed(t) => match bounds {
                None => t.all(),
                Some((a, b)) => t.range(&a.to_owned(), &b.to_owned()),
            },
            Sut::Bytes(s) => {
                let entries = match bounds {
                    None => s.all()?,
                    Some((a, b)) => s.range(a.as_bytes(), b.as_bytes())?,
                };
                Ok(entries
                    .into_iter()
                    .map(|(k, v)| (String::from_utf8(k).unwrap(), Some(v)))
                    .collect())
            }
        }
    }

    fn flush(&mut self) -> Result<(), Error> {
        match self {
            Sut::Typed(t) => t.flush(),
            Sut::Bytes(b) => b.flush(),
        }
    }
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

/// Restores a fresh bytes store from `records`.
fn restored(backend: Backend, records: &[Record]) -> Box<dyn KeyValueStore> {
    let mut store = fresh(backend);
    restore(&mut store, records).unwrap();
    store
}

/// The view of a restored store through the same layer.
fn view(
    layer: Layer,
    store: Box<dyn KeyValueStore>,
    keyset: &Keyset,
) -> Vec<(String, Option<Vec<u8>>)> {
    let sut = build(
        layer,
        ChangeLoggingStore::new(store, MemoryChangelog::new()),
        keyset,
    );
    sut.range(None).unwrap()
}

fn expected(model: &BTreeMap<String, Vec<u8>>) -> Vec<(String, Option<Vec<u8>>)> {
    model
        .iter()
        .map(|(k, v)| (k.clone(), Some(v.clone())))
        .collect()
}

/// Everything the property says about the state after a step.
fn check_state(
    sut: &Sut,
    model: &BTreeMap<String, Vec<u8>>,
    layer: Layer,
    backend: Backend,
    keyset: &Keyset,
) -> Result<(), TestCaseError> {
    let want = expected(model);
    let all = sut
        .range(None)
        .map_err(|e| fail(format!("all() failed: {e}")))?;
    if all != want {
        return Err(fail(format!(
            "all() yields {all:?}, the model holds {want:?}"
        )));
    }
    // The bytes store holds exactly the live keys: a delete removed the key.
    let raw_keys: Vec<String> = sut
        .logged()
        .inner()
        .all()
        .unwrap()
        .into_iter()
        .map(|(k, _)| String::from_utf8(k).unwrap())
        .collect();
    let live: Vec<String> = model.keys().cloned().collect();
    if raw_keys != live {
        return Err(fail(format!(
            "the bytes store holds keys {raw_keys:?}, the live keys are {live:?}"
        )));
    }
    // The changelog: the newest record of every deleted key is a real
    // tombstone; every value is a ciphertext, never plaintext.
    let records = sut.logged().changelog().records().unwrap();
    let mut newest: BTreeMap<&[u8], &Option<Vec<u8>>> = BTreeMap::new();
    for r in &records {
        newest.insert(&r.key, &r.value);
        if let Some(v) = &r.value {
            if v.len() < OVERHEAD || v[0] != 0x01 {
                return Err(fail(format!("changelog value is not a ciphertext: {v:?}")));
            }
        }
    }
    for (k, v) in newest {
        let k = String::from_utf8(k.to_vec()).unwrap();
        if !model.contains_key(&k) && v.is_some() {
            return Err(fail(format!(
                "deleted key {k:?}: newest changelog record is not a tombstone"
            )));
        }
    }
    // Restores from the raw and from the compacted changelog give exactly the model.
    for (what, recs) in [("raw", records.clone()), ("compacted", compact(&records))] {
        let got = view(layer, restored(backend, &recs), keyset);
        if got != want {
            return Err(fail(format!(
                "restore from the {what} changelog gives {got:?}, the model holds {want:?}"
            )));
        }
    }
    Ok(())
}

fn run_ops(layer: Layer, backend: Backend, ops: &[Op]) -> Result<(), TestCaseError> {
    let mut keyset = Keyset::generate();
    let mut sut = build(
        layer,
        ChangeLoggingStore::new(fresh(backend), MemoryChangelog::new()),
        &keyset,
    );
    let mut model: BTreeMap<String, Vec<u8>> = BTreeMap::new();
    for (step, op) in ops.iter().enumerate() {
        let ctx = |what: &str| fail(format!("step {step} {op:?}: {what}"));
        match op {
            Op::Put(k, v) => {
                sut.put(&key(*k), Some(v))
                    .map_err(|e| ctx(&e.to_string()))?;
                model.insert(key(*k), v.clone());
            }
            Op::Delete(k) => {
                sut.delete(&key(*k)).map_err(|e| ctx(&e.to_string()))?;
                model.remove(&key(*k));
            }
            Op::Get(k) => {
                let got = sut.get(&key(*k)).map_err(|e| ctx(&e.to_string()))?;
                if got.as_ref() != model.get(&key(*k)) {
                    return Err(ctx(&format!(
                        "get gave {got:?}, the model {:?}",
                        model.get(&key(*k))
                    )));
                }
            }
            Op::All => {}
            Op::Range(a, b) => {
                let (a, b) = (key(*a), key(*b));
                let got = sut.range(Some((&a, &b))).map_err(|e| ctx(&e.to_string()))?;
                let want: Vec<_> = model
                    .iter()
                    .filter(|(k, _)| a <= **k && **k <= b)
                    .map(|(k, v)| (k.clone(), Some(v.clone())))
                    .collect();
                if got != want {
                    return Err(ctx(&format!("range gave {got:?}, the model {want:?}")));
                }
            }
            Op::Flush => sut.flush().map_err(|e| ctx(&e.to_string()))?,
            Op::Rotate => {
                keyset.rotate();
                sut = build(layer, sut.into_logged(), &keyset);
            }
            Op::Compact => {
                let mut logged = sut.into_logged();
                logged.changelog_mut().compact();
                sut = build(layer, logged, &keyset);
            }
            Op::Restore => {
                // Lose the local state; rebuild it from the changelog.
                let (_, log) = sut.into_logged().into_parts();
                let store = restored(backend, &log.records().unwrap());
                sut = build(layer, ChangeLoggingStore::new(store, log), &keyset);
            }
        }
        check_state(&sut, &model, layer, backend, &keyset).map_err(|e| ctx(&e.to_string()))?;
    }
    Ok(())
}

fn config(cases: u32) -> Config {
    Config {
        cases,
        failure_persistence: Some(Box::new(
            proptest::test_runner::FileFailurePersistence::WithSource("regressions"),
        )),
        ..Config::default()
    }
}

proptest! {
    #![proptest_config(config(256))]

    #[test]
    fn deletes_stay_deleted_typed_bincode_memory(ops in ops()) {
        run_ops(Layer::TypedBincode, Backend::Memory, &ops)?;
    }

    #[test]
    fn deletes_stay_deleted_typed_bytes_memory(ops in ops()) {
        run_ops(Layer::TypedBytes, Backend::Memory, &ops)?;
    }

    #[test]
    fn deletes_stay_deleted_bytes_level_memory(ops in ops()) {
        run_ops(Layer::BytesLevel, Backend::Memory, &ops)?;
    }
}

#[cfg(feature = "redb")]
proptest! {
    #![proptest_config(config(24))]

    #[test]
    fn deletes_stay_deleted_typed_bincode_redb(ops in ops()) {
        run_ops(Layer::TypedBincode, Backend::Redb, &ops)?;
    }

    #[test]
    fn deletes_stay_deleted_bytes_level_redb(ops in ops()) {
        run_ops(Layer::BytesLevel, Backend::Redb, &ops)?;
    }
}

/// The negative control: the same property, run with proptest's own runner,
/// must fail for the naive layers. Prints the minimal counterexample.
fn expect_failure(layer: Layer, strategy: impl Strategy<Value = Vec<Op>>) -> Vec<Op> {
    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    match runner.run(&strategy, |ops| run_ops(layer, Backend::Memory, &ops)) {
        Ok(()) => panic!("the property passed for the naive layer {layer:?}: it proves nothing"),
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!("{layer:?} fails, minimal counterexample: {minimal:?}\n  because: {reason}");
            minimal
        }
        Err(e) => panic!("unexpected runner error: {e}"),
    }
}

#[test]
fn negative_control_the_naive_typed_serde_fails_the_property() {
    // Shrunk, the case is one step: an empty value reads back as a delete...
    let minimal = expect_failure(Layer::NaiveTyped, ops());
    assert!(minimal.len() <= 2, "{minimal:?}");
    // ...and without empty values, one delete is all it takes.
    let minimal = expect_failure(Layer::NaiveTyped, ops_without_empty_values());
    assert!(matches!(minimal[..], [Op::Delete(_)]), "{minimal:?}");
}

#[test]
fn negative_control_the_naive_bytes_store_fails_the_property() {
    let minimal = expect_failure(Layer::NaiveBytesLevel, ops_without_empty_values());
    assert!(matches!(minimal[..], [Op::Delete(_)]), "{minimal:?}");
}

#[test]
fn the_reported_symptom_step_by_step() {
    // A Kafka Streams punctuator sends an event, then deletes it.
    let keyset = Keyset::generate();
    let naive = NaiveSerde::new(Bytes, keyset.clone());
    let mut store = TypedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new()),
        NAME,
        (Utf8, Utf8),
        naive.clone(),
        naive,
    );
    let k = "event-1".to_owned();
    store.put(&k, Some(&b"payload".to_vec())).unwrap();
    store.delete(&k).unwrap();
    store.flush().unwrap();
    // get() says the key is gone...
    assert_eq!(store.get(&k).unwrap(), None);
    // ...but all() still yields it,
    let all = store.all().unwrap();
    assert_eq!(all, [(k.clone(), None)]);
    // the changelog got a value, not a tombstone,
    let records = store.inner().changelog().records().unwrap();
    assert!(records.last().unwrap().value.is_some());
    // compaction keeps the key, and a restore brings it back.
    let compacted = compact(&records);
    assert_eq!(compacted.len(), 1);
    let mut fresh_store = MemoryStore::new();
    restore(&mut fresh_store, &compacted).unwrap();
    assert_eq!(fresh_store.len(), 1);
    assert!(fresh_store.get(k.as_bytes()).unwrap().is_some());

    // The same steps through tombstone-crypt: gone everywhere.
    let mut store = TypedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new()),
        NAME,
        (Utf8, Utf8),
        EncryptingSerializer::new(Bytes, keyset.clone()),
        DecryptingDeserializer::new(Bytes, keyset),
    );
    store.put(&k, Some(&b"payload".to_vec())).unwrap();
    store.delete(&k).unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(&k).unwrap(), None);
    assert!(store.all().unwrap().is_empty());
    let records = store.inner().changelog().records().unwrap();
    assert_eq!(records.last().unwrap().value, None);
    assert!(compact(&records).is_empty());
    let mut fresh_store = MemoryStore::new();
    restore(&mut fresh_store, &records).unwrap();
    assert!(fresh_store.is_empty());
}

/// A store that records every call it gets, to show what a delete sends down.
#[derive(Default)]
struct Recording {
    inner: MemoryStore,
    writes: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl KeyValueStore for Recording {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.writes.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        self.inner.put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.writes.push((key.to_vec(), None));
        self.inner.delete(key)
    }
    fn all(&self) -> Result<Vec<tombstone_crypt::store::Entry>, Error> {
        self.inner.all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<tombstone_crypt::store::Entry>, Error> {
        self.inner.range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        Ok(())
    }
}

#[test]
fn a_delete_never_writes_a_value() {
    let keyset = Keyset::generate();
    let mut store = EncryptedStore::new(Recording::default(), NAME, keyset.clone());
    store.put(b"a", Some(b"")).unwrap();
    store.put(b"a", None).unwrap();
    store.put(b"b", Some(b"x")).unwrap();
    assert_eq!(store.delete(b"b").unwrap(), Some(b"x".to_vec()));
    let writes = &store.inner().writes;
    assert_eq!(writes.len(), 4);
    assert_eq!(writes[1], (b"a".to_vec(), None));
    assert_eq!(writes[3], (b"b".to_vec(), None));
    assert_eq!(writes[0].1.as_ref().map(Vec::len), Some(OVERHEAD)); // empty is a value

    // And the naive wrapper does write one (the control).
    let mut naive = NaiveBytesStore::new(Recording::default(), NAME, keyset);
    naive.put(b"a", None).unwrap();
    assert!(naive.inner.writes[0].1.is_some());
}

#[test]
fn a_delete_through_the_typed_store_reaches_the_bytes_store_as_none() {
    let keyset = Keyset::generate();
    let mut store = TypedStore::new(
        Recording::default(),
        NAME,
        (Utf8, Utf8),
        EncryptingSerializer::new(Bincode::<u32>::new(), keyset.clone()),
        DecryptingDeserializer::new(Bincode::<u32>::new(), keyset),
    );
    store.put(&"x".to_owned(), Some(&1)).unwrap();
    store.delete(&"x".to_owned()).unwrap();
    assert_eq!(store.inner().writes[1], (b"x".to_vec(), None));
}
