//! Behaviour of the stores and the serde wrappers around the main paths:
//! the `Box`/`&mut` forwarders, `is_empty` and `accepts_restore` (what
//! `restore` relies on to refuse), the memory changelog's offsets and
//! compaction, an interrupted put under rotated encrypted keys, flushes that
//! must reach the changelog and the disk, and the getters. Found by a
//! mutation run (cargo-mutants) over `src/store/` and `src/serde.rs`: each
//! test fails when its behaviour is broken. Public API only.
#![cfg(feature = "redb")]

use tombstone_crypt::store::{
    restore, ChangeLoggingStore, Changelog, EncryptedStore, Entry, KeyValueStore, MemoryChangelog,
    MemoryStore, Record, RedbStore, TypedStore,
};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer, DeterministicDeserializer,
    DeterministicSerializer, Error, KeyTemplate, Keyset, Serializer, Unencrypted, Utf8,
};

fn siv() -> Keyset {
    Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap()
}

// ---------------------------------------------------------------------------
// Serde wrappers

/// `with_unencrypted` is reported back by the `unencrypted` getter, both ways.
#[test]
fn the_unencrypted_getter_reports_what_with_unencrypted_set() {
    let de = DecryptingDeserializer::new(Bytes, Keyset::generate());
    assert_eq!(de.unencrypted(), Unencrypted::Reject);
    let de = de.with_unencrypted(Unencrypted::PassThrough);
    assert_eq!(de.unencrypted(), Unencrypted::PassThrough);
    let de = de.with_unencrypted(Unencrypted::Reject);
    assert_eq!(de.unencrypted(), Unencrypted::Reject);
}

/// A deterministic serializer reports its associated-data policy: `Topic`
/// by default, and whatever `with_aad` set.
#[test]
fn the_deterministic_serializer_reports_its_aad_policy() {
    let ser = DeterministicSerializer::new(Utf8, siv());
    assert_eq!(ser.aad_policy(), AadPolicy::Topic);
    assert_eq!(ser.with_aad(AadPolicy::None).aad_policy(), AadPolicy::None);
}

/// Keys encrypted with `AadPolicy::None` (for joins) decrypt on every topic
/// with a deserializer set to `AadPolicy::None`, and only with it.
#[test]
fn a_join_key_written_without_associated_data_reads_back_on_another_topic() {
    let keys = siv();
    let ser = DeterministicSerializer::new(Utf8, keys.clone()).with_aad(AadPolicy::None);
    let de = DeterministicDeserializer::new(Utf8, keys.clone()).with_aad(AadPolicy::None);
    let ct = ser
        .serialize(&Context::new("orders"), Some("customer-17"))
        .unwrap()
        .unwrap();
    for topic in ["orders", "payments"] {
        assert_eq!(
            de.deserialize(&Context::new(topic), Some(&ct))
                .unwrap()
                .as_deref(),
            Some("customer-17"),
            "{topic}"
        );
    }
    // The default deserializer binds the topic: the join key is not for it.
    let strict = DeterministicDeserializer::new(Utf8, keys);
    assert!(strict
        .deserialize(&Context::new("orders"), Some(&ct))
        .is_err());
}

// ---------------------------------------------------------------------------
// Stores

fn rec(offset: u64, key: &[u8], value: Option<&[u8]>) -> Record {
    Record {
        offset,
        key: key.to_vec(),
        value: value.map(<[u8]>::to_vec),
    }
}

/// A user's bytes store that implements only the required methods: it gets
/// the trait's provided `is_empty` and `accepts_restore`.
#[derive(Default)]
struct OwnStore(MemoryStore);

impl KeyValueStore for OwnStore {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.0.get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.0.put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        KeyValueStore::delete(&mut self.0, key)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.0.all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.0.range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.0.flush()
    }
}

/// The provided `is_empty` tells an empty store from a non-empty one, so a
/// store that only implements the required methods is restored into when
/// empty and refused when it holds old state (a key the log deleted would
/// come back).
#[test]
fn restore_into_a_store_with_the_provided_is_empty() {
    let log = [
        rec(0, b"a", Some(b"1")),
        rec(1, b"gone", Some(b"2")),
        rec(2, b"gone", None),
    ];
    let mut fresh = OwnStore::default();
    assert!(KeyValueStore::is_empty(&fresh).unwrap());
    assert_eq!(restore(&mut fresh, &log).unwrap(), 3);
    assert!(!KeyValueStore::is_empty(&fresh).unwrap());
    assert_eq!(fresh.all().unwrap(), vec![(b"a".to_vec(), b"1".to_vec())]);

    let mut stale = OwnStore::default();
    stale.put(b"gone", Some(b"old")).unwrap();
    assert!(!KeyValueStore::is_empty(&stale).unwrap());
    assert!(matches!(
        restore(&mut stale, &log),
        Err(Error::Store { .. })
    ));
    assert_eq!(stale.get(b"gone").unwrap(), Some(b"old".to_vec()));
}

/// A bytes store that counts its flushes.
#[derive(Default)]
struct Probe {
    mem: MemoryStore,
    flushes: usize,
}

impl KeyValueStore for Probe {
    fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        self.mem.get(key)
    }
    fn put(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        self.mem.put(key, value)
    }
    fn delete(&mut self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        KeyValueStore::delete(&mut self.mem, key)
    }
    fn all(&self) -> Result<Vec<Entry>, Error> {
        self.mem.all()
    }
    fn range(&self, from: &[u8], to: &[u8]) -> Result<Vec<Entry>, Error> {
        self.mem.range(from, to)
    }
    fn flush(&mut self) -> Result<(), Error> {
        self.flushes += 1;
        Ok(())
    }
    fn is_empty(&self) -> Result<bool, Error> {
        KeyValueStore::is_empty(&self.mem)
    }
}

fn entry(k: &[u8], v: &[u8]) -> Entry {
    (k.to_vec(), v.to_vec())
}

/// Every operation of the `KeyValueStore` contract, through a store taken by
/// value (a `Box` or a `&mut` of a store): values, deletes (a `None` put and
/// `delete`, which returns the old value), iteration, emptiness and flush.
fn exercise<S: KeyValueStore>(mut s: S) -> S {
    assert!(s.is_empty().unwrap());
    s.put(b"a", Some(b"va")).unwrap();
    s.put(b"b", Some(b"vb")).unwrap();
    s.put(b"c", Some(b"vc")).unwrap();
    assert!(!s.is_empty().unwrap());
    assert_eq!(s.get(b"a").unwrap(), Some(b"va".to_vec()));
    assert_eq!(s.get(b"x").unwrap(), None);
    assert_eq!(s.delete(b"b").unwrap(), Some(b"vb".to_vec()));
    assert_eq!(s.delete(b"b").unwrap(), None);
    assert_eq!(s.get(b"b").unwrap(), None);
    s.put(b"c", None).unwrap();
    assert_eq!(s.get(b"c").unwrap(), None);
    s.put(b"d", Some(b"vd")).unwrap();
    assert_eq!(
        s.all().unwrap(),
        vec![entry(b"a", b"va"), entry(b"d", b"vd")]
    );
    assert_eq!(s.range(b"b", b"z").unwrap(), vec![entry(b"d", b"vd")]);
    assert_eq!(s.range(b"a", b"a").unwrap(), vec![entry(b"a", b"va")]);
    assert_eq!(s.range(b"e", b"z").unwrap(), vec![]);
    s.flush().unwrap();
    assert_eq!(s.delete(b"a").unwrap(), Some(b"va".to_vec()));
    assert_eq!(s.delete(b"d").unwrap(), Some(b"vd".to_vec()));
    assert!(s.is_empty().unwrap());
    s
}

/// A boxed store and a borrowed store behave exactly as the store itself:
/// every call reaches it, deletes included, and a flush is a flush.
#[test]
fn boxed_and_borrowed_stores_forward_every_operation() {
    let boxed = exercise(Box::new(Probe::default()));
    assert_eq!(boxed.flushes, 1);
    let boxed_dyn: Box<dyn KeyValueStore> = Box::new(MemoryStore::new());
    exercise(boxed_dyn);

    let mut probe = Probe::default();
    exercise(&mut probe);
    assert_eq!(probe.flushes, 1);
    probe.put(b"left", Some(b"here")).unwrap();
    let borrowed = exercise_reads(&mut probe);
    assert_eq!(borrowed, Some(b"here".to_vec()));
}

fn exercise_reads<S: KeyValueStore>(s: S) -> Option<Vec<u8>> {
    assert!(!s.is_empty().unwrap());
    assert_eq!(s.all().unwrap(), vec![entry(b"left", b"here")]);
    s.get(b"left").unwrap()
}

/// `restore` sees through a `Box` or a `&mut`: it writes into an empty
/// bytes store, refuses a non-empty one (a key the log deleted would stay),
/// and refuses an encrypting layer (it would encrypt the ciphertext again).
#[test]
fn restore_through_a_box_or_a_borrow_keeps_its_refusals() {
    let log = [rec(0, b"k", Some(b"v")), rec(1, b"gone", None)];

    let mut boxed: Box<dyn KeyValueStore> = Box::new(MemoryStore::new());
    assert!(boxed.accepts_restore());
    assert_eq!(restore(&mut boxed, &log).unwrap(), 2);
    assert_eq!(boxed.get(b"k").unwrap(), Some(b"v".to_vec()));
    assert!(matches!(
        restore(&mut boxed, &log),
        Err(Error::Store { .. })
    ));

    let mut mem = MemoryStore::new();
    {
        let mut borrowed = &mut mem;
        assert!(borrowed.accepts_restore());
        assert_eq!(restore(&mut borrowed, &log).unwrap(), 2);
        assert!(matches!(
            restore(&mut borrowed, &log),
            Err(Error::Store { .. })
        ));
    }
    assert_eq!(mem.get(b"k").unwrap(), Some(b"v".to_vec()));

    let keyset = Keyset::generate();
    let mut boxed_enc: Box<dyn KeyValueStore> =
        Box::new(EncryptedStore::new(MemoryStore::new(), "s", keyset.clone()));
    assert!(!boxed_enc.accepts_restore());
    assert!(matches!(
        restore(&mut boxed_enc, &log),
        Err(Error::Store { .. })
    ));
    assert_eq!(boxed_enc.all().unwrap(), vec![]);

    let mut enc = EncryptedStore::new(MemoryStore::new(), "s", keyset);
    {
        let mut borrowed = &mut enc;
        assert!(!borrowed.accepts_restore());
        assert!(matches!(
            restore(&mut borrowed, &log),
            Err(Error::Store { .. })
        ));
    }
    assert!(enc.inner().is_empty());
}

// ---------------------------------------------------------------------------
// Changelog

/// A changelog that queues appends until a flush (as a producer does), and
/// refuses the next append when told to.
#[derive(Debug, Default)]
struct Queued {
    durable: Vec<Record>,
    pending: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    refuse_next_append: bool,
}

impl Changelog for Queued {
    fn append(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), Error> {
        if std::mem::take(&mut self.refuse_next_append) {
            return Err(Error::changelog_msg("refused"));
        }
        self.pending.push((key.to_vec(), value.map(<[u8]>::to_vec)));
        Ok(())
    }
    fn records(&self) -> Result<Vec<Record>, Error> {
        Ok(self.durable.clone())
    }
    fn flush(&mut self) -> Result<(), Error> {
        for (key, value) in self.pending.drain(..) {
            let offset = self.durable.len() as u64;
            self.durable.push(Record { offset, key, value });
        }
        Ok(())
    }
}

/// A memory changelog numbers its records 0, 1, 2, ... in append order
/// (tombstones included), and compaction keeps each survivor at its own
/// offset.
#[test]
fn the_memory_changelog_numbers_records_in_append_order() {
    let mut log = MemoryChangelog::new();
    log.append(b"a", Some(b"1")).unwrap();
    log.append(b"b", Some(b"2")).unwrap();
    log.append(b"a", None).unwrap();
    log.append(b"c", Some(b"3")).unwrap();
    let offsets: Vec<u64> = log.records().unwrap().iter().map(|r| r.offset).collect();
    assert_eq!(offsets, [0, 1, 2, 3]);
    assert_eq!(log.as_slice()[2], rec(2, b"a", None));
    log.compact();
    assert_eq!(
        log.as_slice(),
        [rec(1, b"b", Some(b"2")), rec(3, b"c", Some(b"3"))]
    );
    log.append(b"d", Some(b"4")).unwrap();
    assert_eq!(log.as_slice().last().unwrap().offset, 4);
}

/// A change-logging store answers `is_empty` from the store beneath while
/// it serves, and refuses to answer (`NeedsRestore`) once an append failed,
/// until `recover`.
#[test]
fn is_empty_of_a_change_logging_store_follows_the_store_and_the_refusal() {
    let mut store = ChangeLoggingStore::new(MemoryStore::new(), Queued::default());
    assert_eq!(store.is_empty(), Ok(true));
    store.put(b"k", Some(b"v")).unwrap();
    assert_eq!(store.is_empty(), Ok(false));
    store.delete(b"k").unwrap();
    assert_eq!(store.is_empty(), Ok(true));
    store.put(b"k", Some(b"v")).unwrap();
    store.flush().unwrap();

    store.changelog_mut().refuse_next_append = true;
    assert!(store.delete(b"k").is_err());
    assert!(store.needs_restore());
    assert_eq!(store.is_empty(), Err(Error::NeedsRestore));
    assert_eq!(store.get(b"k"), Err(Error::NeedsRestore));
    // The refused delete never reached the log: the key is back.
    assert_eq!(store.recover().unwrap(), 3);
    assert!(!store.needs_restore());
    assert_eq!(store.is_empty(), Ok(false));
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
}

/// An encrypting store is empty exactly when the store beneath is.
#[test]
fn is_empty_of_an_encrypting_store_follows_the_store_beneath() {
    let mut store = EncryptedStore::new(MemoryStore::new(), "s", Keyset::generate());
    assert_eq!(store.is_empty(), Ok(true));
    store.put(b"k", Some(b"v")).unwrap();
    assert_eq!(store.is_empty(), Ok(false));
    store.put(b"k", None).unwrap();
    assert_eq!(store.is_empty(), Ok(true));
}

/// `key_keyset` is the keyset that encrypts record keys: none for a plain
/// store, the one given (after a rotation, the new one) otherwise.
#[test]
fn the_key_keyset_getter_reports_the_record_key_keyset() {
    let plain = EncryptedStore::new(MemoryStore::new(), "s", Keyset::generate());
    assert!(plain.key_keyset().is_none());
    let mut keys = siv();
    let mut store = plain.with_encrypted_keys(keys.clone()).unwrap();
    assert_eq!(
        store.key_keyset().map(Keyset::primary),
        Some(keys.primary())
    );
    keys.rotate();
    store.set_key_keyset(keys.clone()).unwrap();
    assert_eq!(
        store.key_keyset().map(Keyset::primary),
        Some(keys.primary())
    );
}

/// Writes `k` under `keys_old`, rewrites it under `keys_new` with the
/// tombstone of the old form undone, and checks every read and the delete.
fn interrupted_put(keys_old: Keyset, keys_new: Keyset) {
    let mut store = EncryptedStore::new(MemoryStore::new(), "s", Keyset::generate())
        .with_encrypted_keys(keys_old)
        .unwrap();
    store.put(b"k", Some(b"old")).unwrap();
    let before = store.inner().clone();
    store.set_key_keyset(keys_new).unwrap();
    store.put(b"k", Some(b"new")).unwrap();
    // The put is interrupted between its writes: the primary form holds the
    // new value, the tombstone of the older form never happened.
    for (form, ct) in before.all().unwrap() {
        store.inner_mut().put(&form, Some(&ct)).unwrap();
    }
    assert_eq!(store.inner().len(), 2);
    let want = vec![entry(b"k", b"new")];
    assert_eq!(store.get(b"k").unwrap(), Some(b"new".to_vec()));
    assert_eq!(store.all().unwrap(), want);
    assert_eq!(store.range(b"a", b"z").unwrap(), want);
    // A delete removes every form: nothing comes back.
    assert_eq!(store.delete(b"k").unwrap(), Some(b"new".to_vec()));
    assert!(store.inner().is_empty());
    assert_eq!(store.all().unwrap(), vec![]);
}

/// Where a put under a rotated key-encryption keyset was interrupted, so
/// that a logical key is stored under its new form (new value) and its old
/// form (old value), reads return the value under the newest key's form,
/// whichever form sorts first; a delete then removes both.
#[test]
fn after_an_interrupted_put_the_newest_forms_value_wins() {
    let mut keys = siv();
    let a = keys.primary();
    let b = keys.rotate();
    let mut a_primary = keys.clone();
    a_primary.set_primary(a).unwrap();
    let mut b_primary = keys;
    b_primary.set_primary(b).unwrap();
    // Both orders of the two forms in the store beneath.
    interrupted_put(a_primary.clone(), b_primary.clone());
    interrupted_put(b_primary, a_primary);
}

/// A store set to another associated-data policy reads back what it wrote
/// under it; with `Topic`, a value copied to another key of the store still
/// decrypts, with the default it does not.
#[test]
fn an_encrypting_store_reads_with_the_policy_it_writes_with() {
    let keyset = Keyset::generate();
    let mut store =
        EncryptedStore::new(MemoryStore::new(), "s", keyset.clone()).with_aad(AadPolicy::Topic);
    store.put(b"k", Some(b"v")).unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"v".to_vec()));
    let ct = store.inner().get(b"k").unwrap().unwrap();
    store.inner_mut().put(b"other", Some(&ct)).unwrap();
    assert_eq!(store.get(b"other").unwrap(), Some(b"v".to_vec()));

    let mut strict = EncryptedStore::new(MemoryStore::new(), "s", keyset);
    strict.inner_mut().put(b"other", Some(&ct)).unwrap();
    assert!(strict.get(b"other").is_err());
}

/// After `set_keyset` with a rotated keyset, new values are encrypted under
/// the new primary key, and once the old key is disabled its values no
/// longer decrypt.
#[test]
fn set_keyset_switches_the_key_that_encrypts() {
    let mut keyset = Keyset::generate();
    let old = keyset.primary();
    let mut store = EncryptedStore::new(MemoryStore::new(), "s", keyset.clone());
    store.put(b"before", Some(b"1")).unwrap();
    let new = keyset.rotate();
    store.set_keyset(keyset.clone());
    assert_eq!(store.keyset().primary(), new);
    store.put(b"after", Some(b"2")).unwrap();
    let key_id = |k: &[u8]| {
        let ct = store.inner().get(k).unwrap().unwrap();
        u32::from_be_bytes([ct[1], ct[2], ct[3], ct[4]])
    };
    assert_eq!(key_id(b"before"), old.0);
    assert_eq!(key_id(b"after"), new.0);
    keyset.disable(old).unwrap();
    store.set_keyset(keyset);
    assert!(store.get(b"before").is_err());
    assert_eq!(store.get(b"after").unwrap(), Some(b"2".to_vec()));
}

/// The stores report the name bound into their values' associated data.
#[test]
fn the_stores_report_their_name() {
    let store = EncryptedStore::new(MemoryStore::new(), "orders-store", Keyset::generate());
    assert_eq!(store.name(), "orders-store");
    let typed: TypedStore<String, String, MemoryStore> =
        TypedStore::new(MemoryStore::new(), "typed-store", (Utf8, Utf8), Utf8, Utf8);
    assert_eq!(typed.name(), "typed-store");
}

/// With encrypted record keys, `range(k, k)` is the entry of `k` (both
/// bounds inclusive), and a range with `from > to` is empty.
#[test]
fn a_one_key_range_over_encrypted_keys_holds_that_key() {
    let mut store = EncryptedStore::new(MemoryStore::new(), "s", Keyset::generate())
        .with_encrypted_keys(siv())
        .unwrap();
    for k in [&b"a"[..], b"k", b"z"] {
        store.put(k, Some(b"v")).unwrap();
    }
    assert_eq!(store.range(b"k", b"k").unwrap(), vec![entry(b"k", b"v")]);
    assert_eq!(store.range(b"z", b"a").unwrap(), vec![]);
}

/// A memory store's `len`, `is_empty` and `clear` describe and empty it.
#[test]
fn a_memory_store_counts_and_clears_its_keys() {
    let mut store = MemoryStore::new();
    assert_eq!(store.len(), 0);
    assert!(store.is_empty());
    store.put(b"a", Some(b"1")).unwrap();
    store.put(b"b", Some(b"2")).unwrap();
    assert_eq!(store.len(), 2);
    assert!(!store.is_empty());
    store.clear();
    assert_eq!(store.len(), 0);
    assert!(store.is_empty());
    assert_eq!(store.get(b"a").unwrap(), None);
}

/// A scratch directory for a redb file, removed on drop.
struct TempDir(std::path::PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!(
            "tc-gaps-{tag}-{}-{:?}",
            std::process::id(),
            std::thread::current().id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A redb store's debug form names the type and nothing of its content.
#[test]
fn a_redb_store_debug_form_names_the_type() {
    let dir = TempDir::new("debug");
    let mut store = RedbStore::open(dir.0.join("s.redb")).unwrap();
    store.put(b"secret-key", Some(b"secret-value")).unwrap();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("RedbStore"), "{shown}");
    assert!(!shown.contains("secret"), "{shown}");
}

/// A redb store is empty exactly when it holds no key, so `restore` refuses
/// a redb store that holds old state and writes into an empty one.
#[test]
fn restore_refuses_a_redb_store_that_holds_a_key() {
    let dir = TempDir::new("restore");
    let log = [rec(0, b"k", Some(b"v")), rec(1, b"gone", None)];
    let mut store = RedbStore::open(dir.0.join("s.redb")).unwrap();
    assert!(store.is_empty().unwrap());
    store.put(b"gone", Some(b"old")).unwrap();
    assert!(!store.is_empty().unwrap());
    assert!(matches!(
        restore(&mut store, &log),
        Err(Error::Store { .. })
    ));
    assert_eq!(store.get(b"gone").unwrap(), Some(b"old".to_vec()));
    store.delete(b"gone").unwrap();
    assert!(store.is_empty().unwrap());
    assert_eq!(restore(&mut store, &log).unwrap(), 2);
    assert_eq!(store.all().unwrap(), vec![entry(b"k", b"v")]);
}

/// What a redb store held at its last `flush` is in the file: a copy of the
/// file taken then (what a crash leaves) opens with every flushed write,
/// deletes included.
#[test]
fn a_flushed_redb_store_survives_a_crash() {
    let dir = TempDir::new("crash");
    let path = dir.0.join("s.redb");
    let mut store = RedbStore::open(&path).unwrap();
    store.put(b"a", Some(b"1")).unwrap();
    store.put(b"b", Some(b"2")).unwrap();
    store.flush().unwrap();
    store.put(b"b", None).unwrap();
    store.put(b"c", Some(b"3")).unwrap();
    store.flush().unwrap();
    let crashed = dir.0.join("crashed.redb");
    std::fs::copy(&path, &crashed).unwrap();
    let reopened = RedbStore::open(&crashed).unwrap();
    assert_eq!(
        reopened.all().unwrap(),
        vec![entry(b"a", b"1"), entry(b"c", b"3")]
    );
    drop(store);
}

/// Flushing a typed store flushes the bytes store beneath: the queued
/// changelog records of its writes and deletes become durable.
#[test]
fn a_flush_through_the_typed_store_reaches_the_changelog() {
    let keyset = Keyset::generate();
    let logged = ChangeLoggingStore::new(MemoryStore::new(), Queued::default());
    let mut store: TypedStore<String, String, _> = TypedStore::new(
        logged,
        "typed",
        (Utf8, Utf8),
        tombstone_crypt::EncryptingSerializer::new(Utf8, keyset.clone()),
        DecryptingDeserializer::new(Utf8, keyset),
    );
    let k = "k".to_owned();
    store.put(&k, Some(&"v".to_owned())).unwrap();
    store.delete(&k).unwrap();
    assert!(store.inner().changelog().records().unwrap().is_empty());
    store.flush().unwrap();
    let records = store.inner().changelog().records().unwrap();
    assert_eq!(records.len(), 2);
    assert!(records[0].value.is_some());
    assert_eq!(records[1], rec(1, b"k", None));
}
