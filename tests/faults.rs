//! The changelog contract under faults: after a failed append or flush, or
//! a crash that loses what was not flushed, what the store serves equals
//! what a restore from the changelog gives, or the store refuses to serve
//! until it is recovered; every operation whose flush returned `Ok`
//! survives; no acknowledged delete is lost; no value older than an
//! acknowledged newer one comes back. A change-logging store that keeps
//! serving after a failed append (the old behaviour) fails the property.

use std::collections::BTreeMap;

use proptest::prelude::*;
use proptest::test_runner::{Config, TestCaseError, TestError, TestRunner};
use tombstone_crypt::store::{
    restore, ChangeLoggingStore, Changelog, EncryptedStore, Entry, KeyValueStore, MemoryStore,
    Record,
};
use tombstone_crypt::{Error, Keyset};

const NAME: &str = "faults";

/// A changelog whose appends and flushes fail when told to, as a producer's
/// would: appended records are pending until a flush; a failed flush
/// delivers a prefix of them (in order, as an idempotent producer does) and
/// loses the rest; a crash loses everything pending.
#[derive(Debug, Default)]
struct Flaky {
    durable: Vec<Record>,
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    fail_append: bool,
    fail_flush: Option<usize>,
}

impl Flaky {
    fn deliver(&mut self, n: usize) {
        let n = n.min(self.pending.len());
        for (key, value) in self.pending.drain(..n) {
            let offset = self.durable.len() as u64;
            self.durable.push(Record { offset, key, value });
        }
        self.pending.clear();
    }
}

impl Changelog for Flaky {
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        if std::mem::take(&mut self.fail_append) {
            return Err(Error::changelog_msg("injected: append refused"));
        }
        self.pending.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        Ok(())
    }

    fn records(&self) -> Result<Vec<Record>, Error> {
        Ok(self.durable.clone())
    }

    fn flush(&mut self) -> Result<(), Error> {
        match self.fail_flush.take() {
            Some(n) => {
                self.deliver(n);
                Err(Error::changelog_msg("injected: flush failed"))
            }
            None => {
                self.deliver(usize::MAX);
                Ok(())
            }
        }
    }
}

/// The old change-logging store, for the negative control: it writes the
/// store, then appends, and keeps serving whatever happened.
struct KeepsServing {
    inner: MemoryStore,
    log: Flaky,
}

impl KeyValueStore for KeepsServing {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.inner.get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.inner.put(key, value)?;
        self.log.append(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let old = self.inner.delete(key)?;
        self.log.append(key, None)?;
        Ok(old)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.inner.all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.inner.range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.log.flush()
    }
}

/// The change-logging layer under test, behind one interface.
trait Logged: KeyValueStore {
    fn log(&self) -> &Flaky;
    fn log_mut(&mut self) -> &mut Flaky;
    fn refuses(&self) -> bool;
    /// Restarts over the given local store (possibly stale) and recovers.
    fn restart(self: Box<Self>, local: MemoryStore) -> Box<dyn Logged>;
    fn recover(&mut self) -> Result<(), Error>;
    fn local(&self) -> MemoryStore;
}

impl Logged for ChangeLoggingStore<MemoryStore, Flaky> {
    fn log(&self) -> &Flaky {
        self.changelog()
    }
    fn log_mut(&mut self) -> &mut Flaky {
        self.changelog_mut()
    }
    fn refuses(&self) -> bool {
        self.needs_restore()
    }
    fn restart(self: Box<Self>, local: MemoryStore) -> Box<dyn Logged> {
        let (_, mut log) = self.into_parts();
        // The process died: its producer's queue (and its faults) are gone.
        log.pending.clear();
        log.fail_append = false;
        log.fail_flush = None;
        let mut s = ChangeLoggingStore::new(local, log);
        s.recover().unwrap();
        Box::new(s)
    }
    fn recover(&mut self) -> Result<(), Error> {
        ChangeLoggingStore::recover(self).map(drop)
    }
    fn local(&self) -> MemoryStore {
        self.inner().clone()
    }
}

impl Logged for KeepsServing {
    fn log(&self) -> &Flaky {
        &self.log
    }
    fn log_mut(&mut self) -> &mut Flaky {
        &mut self.log
    }
    fn refuses(&self) -> bool {
        false
    }
    fn restart(self: Box<Self>, _: MemoryStore) -> Box<dyn Logged> {
        let mut log = self.log;
        log.pending.clear();
        let mut inner = MemoryStore::new();
        restore(&mut inner, &log.durable).unwrap();
        Box::new(KeepsServing { inner, log })
    }
    fn recover(&mut self) -> Result<(), Error> {
        Ok(())
    }
    fn local(&self) -> MemoryStore {
        self.inner.clone()
    }
}

#[derive(Clone, Debug)]
enum Op {
    Put(u8, u8),
    Delete(u8),
    Flush,
    FailNextAppend,
    /// The next flush fails after delivering this many pending records.
    FailNextFlush(u8),
    /// The process is killed: what was not flushed is lost; the local store
    /// is left as it was (ahead of the log).
    Crash,
}

fn ops() -> impl Strategy<Value = Vec<Op>> {
    prop::collection::vec(
        prop_oneof![
            5 => (0u8..4, any::<u8>()).prop_map(|(k, v)| Op::Put(k, v)),
            3 => (0u8..4).prop_map(Op::Delete),
            3 => Just(Op::Flush),
            1 => Just(Op::FailNextAppend),
            1 => (0u8..4).prop_map(Op::FailNextFlush),
            1 => Just(Op::Crash),
        ],
        1..40,
    )
}

fn key(k: u8) -> Vec<u8> {
    format!("k{k}").into_bytes()
}

/// What the application knows: per key, the state as of the last
/// successful flush, and the states written (and returned `Ok`) since.
#[derive(Default)]
struct Model {
    acked: BTreeMap<Vec<u8>, Vec<u8>>,
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
}

impl Model {
    fn current(&self) -> BTreeMap<Vec<u8>, Vec<u8>> {
        let mut m = self.acked.clone();
        for (k, v) in &self.pending {
            match v {
                Some(v) => m.insert(k.clone(), v.clone()),
                None => m.remove(k),
            };
        }
        m
    }

    /// A recovered state is allowed if, for every key, it is the
    /// acknowledged state or one written since (a prefix of the pending
    /// writes reached the log).
    fn allows(&self, got: &BTreeMap<Vec<u8>, Vec<u8>>) -> Result<(), String> {
        for k in 0..4 {
            let k = key(k);
            let mut allowed = vec![self.acked.get(&k).cloned()];
            allowed.extend(
                self.pending
                    .iter()
                    .filter(|(pk, _)| *pk == k)
                    .map(|(_, v)| v.clone()),
            );
            let g = got.get(&k).cloned();
            if !allowed.contains(&g) {
                return Err(format!(
                    "after recovery {:?} is {g:?}; acknowledged {:?}, written since {:?}",
                    String::from_utf8_lossy(&k),
                    self.acked.get(&k),
                    &allowed[1..]
                ));
            }
        }
        Ok(())
    }
}

type Sut = EncryptedStore<Box<dyn Logged>>;

fn view(store: &Sut) -> Result<BTreeMap<Vec<u8>, Vec<u8>>, Error> {
    Ok(store.all()?.into_iter().collect())
}

/// What a restore from the log gives once the pending records are flushed.
fn log_view(log: &Flaky, keyset: &Keyset) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut records = log.durable.clone();
    for (k, v) in &log.pending {
        records.push(Record {
            offset: records.len() as u64,
            key: k.clone(),
            value: v.clone(),
        });
    }
    let mut fresh = MemoryStore::new();
    restore(&mut fresh, &records).unwrap();
    EncryptedStore::new(fresh, NAME, keyset.clone())
        .all()
        .unwrap()
        .into_iter()
        .collect()
}

fn fail(msg: String) -> TestCaseError {
    TestCaseError::fail(msg)
}

fn run(ops: &[Op], fixed: bool) -> Result<(), TestCaseError> {
    let keyset = Keyset::generate();
    let logged: Box<dyn Logged> = if fixed {
        Box::new(ChangeLoggingStore::new(
            MemoryStore::new(),
            Flaky::default(),
        ))
    } else {
        Box::new(KeepsServing {
            inner: MemoryStore::new(),
            log: Flaky::default(),
        })
    };
    let mut store = EncryptedStore::new(logged, NAME, keyset.clone());
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        let at = |e: String| fail(format!("step {step} ({op:?}): {e}"));
        match op {
            Op::Put(k, v) => {
                if store.put(&key(*k), Some(&[*v])).is_ok() {
                    model.pending.push((key(*k), Some(vec![*v])));
                }
            }
            Op::Delete(k) => {
                if store.delete(&key(*k)).is_ok() {
                    model.pending.push((key(*k), None));
                }
            }
            Op::Flush => {
                if store.flush().is_ok() {
                    model.acked = model.current();
                    model.pending.clear();
                }
            }
            Op::FailNextAppend => store.inner_mut().log_mut().fail_append = true,
            Op::FailNextFlush(n) => store.inner_mut().log_mut().fail_flush = Some(usize::from(*n)),
            Op::Crash => {
                let local = store.inner().local();
                let logged = store.into_inner().restart(local);
                store = EncryptedStore::new(logged, NAME, keyset.clone());
                let got = view(&store).map_err(|e| at(format!("after restart: {e}")))?;
                model.allows(&got).map_err(at)?;
                model.acked = got;
                model.pending.clear();
                continue;
            }
        }
        if store.inner().refuses() {
            // Refusing is allowed; serving something else is not.
            if store.get(&key(0)) != Err(Error::NeedsRestore) || store.all().is_ok() {
                return Err(at("a store that needs a restore still serves".into()));
            }
            // A flush failure still armed makes the first try fail; the
            // store keeps refusing, and a second try settles it.
            if store.inner_mut().recover().is_err() {
                if store.get(&key(0)) != Err(Error::NeedsRestore) {
                    return Err(at("a failed recovery serves".into()));
                }
                store
                    .inner_mut()
                    .recover()
                    .map_err(|e| at(format!("recover: {e}")))?;
            }
            let got = view(&store).map_err(|e| at(e.to_string()))?;
            model.allows(&got).map_err(at)?;
            model.acked = got;
            model.pending.clear();
        }
        // Serving: the store equals the model of acknowledged-or-written
        // operations, and a restore from the log (once flushed) agrees.
        let got = view(&store).map_err(|e| at(e.to_string()))?;
        let want = model.current();
        if got != want {
            return Err(at(format!(
                "the store serves {got:?}, the operations that returned Ok say {want:?}"
            )));
        }
        let from_log = log_view(store.inner().log(), &keyset);
        if got != from_log {
            return Err(at(format!(
                "the store serves {got:?}, a restore from its changelog gives {from_log:?}"
            )));
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(Config { cases: 512, failure_persistence: None, ..Config::default() })]

    #[test]
    fn the_store_never_disagrees_with_its_changelog(ops in ops()) {
        run(&ops, true)?;
    }
}

#[test]
fn negative_control_a_store_that_keeps_serving_fails() {
    let mut runner = TestRunner::new(Config {
        cases: 512,
        failure_persistence: None,
        ..Config::default()
    });
    match runner.run(&ops(), |ops| run(&ops, false)) {
        Ok(()) => panic!("the property passed for a store that keeps serving: it proves nothing"),
        Err(TestError::Fail(reason, minimal)) => {
            eprintln!("keeps serving: minimal counterexample {minimal:?}\n  because: {reason}");
            assert!(
                minimal
                    .iter()
                    .any(|op| matches!(op, Op::FailNextAppend | Op::FailNextFlush(_))),
                "{minimal:?}"
            );
        }
        Err(e) => panic!("unexpected runner error: {e}"),
    }
}

/// The reported symptom of a failed append, step by step.
#[test]
fn a_failed_delete_append_makes_the_store_refuse_until_recovered() {
    let keyset = Keyset::generate();
    let logged = ChangeLoggingStore::new(MemoryStore::new(), Flaky::default());
    let mut store = EncryptedStore::new(logged, NAME, keyset);
    store.put(b"e1", Some(b"sent")).unwrap();
    store.flush().unwrap();
    store.inner_mut().changelog_mut().fail_append = true;
    assert!(matches!(store.delete(b"e1"), Err(Error::Changelog { .. })));
    // Before: get(e1) said None while the log still held the value, and a
    // restore brought it back. Now the store refuses...
    assert_eq!(store.get(b"e1"), Err(Error::NeedsRestore));
    assert_eq!(store.put(b"e2", Some(b"x")), Err(Error::NeedsRestore));
    // ...until it is rebuilt from the log, which is the truth.
    assert_eq!(store.inner_mut().recover().unwrap(), 1);
    assert_eq!(store.get(b"e1").unwrap(), Some(b"sent".to_vec()));
    store.delete(b"e1").unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"e1").unwrap(), None);
}

#[test]
fn restore_refuses_the_wrong_layer_and_a_non_empty_store() {
    let keyset = Keyset::generate();
    let mut source = ChangeLoggingStore::new(
        MemoryStore::new(),
        tombstone_crypt::store::MemoryChangelog::new(),
    );
    {
        let mut enc = EncryptedStore::new(&mut source, NAME, keyset.clone());
        enc.put(b"k", Some(b"v")).unwrap();
    }
    let records = source.changelog().records().unwrap();
    // Through the encryption: it would encrypt the ciphertext again.
    let mut wrong = EncryptedStore::new(MemoryStore::new(), NAME, keyset.clone());
    assert!(matches!(
        restore(&mut wrong, &records),
        Err(Error::Store { .. })
    ));
    assert!(wrong.inner().is_empty());
    // Through a change-logging store: every record logged twice.
    let mut logging = ChangeLoggingStore::new(
        MemoryStore::new(),
        tombstone_crypt::store::MemoryChangelog::new(),
    );
    assert!(matches!(
        restore(&mut logging, &records),
        Err(Error::Store { .. })
    ));
    // Over old state: keys the log deleted would stay.
    let mut stale = MemoryStore::new();
    stale.put(b"gone", Some(b"old")).unwrap();
    let err = restore(&mut stale, &records).unwrap_err();
    assert!(err.to_string().contains("empty"), "{err}");
    // The right layer.
    let mut right = MemoryStore::new();
    restore(&mut right, &records).unwrap();
    assert_eq!(
        EncryptedStore::new(right, NAME, keyset).get(b"k").unwrap(),
        Some(b"v".to_vec())
    );
}
