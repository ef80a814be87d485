//! One reading order for a logical key stored under several forms (its
//! record key encrypted under more than one enabled key of a rotated key
//! keyset, as a write interrupted between its records leaves it, or a
//! restore from a log that was never compacted): the primary form first,
//! then the older forms from the newest key to the oldest. `get`, `all`,
//! `range` and `delete` all read that way, so they never disagree about a
//! key's value.

use tombstone_crypt::store::{EncryptedStore, KeyValueStore, MemoryStore};
use tombstone_crypt::{KeyTemplate, Keyset};

const KEY: &[u8] = b"customer-17";

/// A store whose key keyset has three enabled keys (oldest, middle,
/// primary), holding `KEY` under the oldest key's form with the value
/// `old` and under the middle key's form with `newer`, and nothing under
/// the primary form.
fn store_with_two_stale_forms() -> EncryptedStore<MemoryStore> {
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let mut store = EncryptedStore::new(MemoryStore::new(), "reading-order", Keyset::generate())
        .with_encrypted_keys(keys.clone())
        .unwrap();

    // The oldest key's form, with its value, kept aside.
    store.put(KEY, Some(b"old")).unwrap();
    let oldest = store.inner().all().unwrap();
    assert_eq!(oldest.len(), 1);

    // After a rotation a put deletes that form and writes the middle one.
    keys.rotate();
    store.set_key_keyset(keys.clone()).unwrap();
    store.put(KEY, Some(b"newer")).unwrap();
    assert_eq!(store.inner().len(), 1);

    // The oldest form comes back (an interrupted fan-out, an uncompacted
    // log restored), and a third key becomes primary.
    for (form, ct) in &oldest {
        store.inner_mut().put(form, Some(ct)).unwrap();
    }
    keys.rotate();
    store.set_key_keyset(keys).unwrap();
    assert_eq!(store.inner().len(), 2, "two stale forms, none primary");
    store
}

#[test]
fn get_and_all_agree_on_the_newest_stale_form() {
    let store = store_with_two_stale_forms();
    let got = store.get(KEY).unwrap();
    let all = store.all().unwrap();
    let range = store.range(KEY, KEY).unwrap();
    assert_eq!(all, vec![(KEY.to_vec(), b"newer".to_vec())], "all()");
    assert_eq!(range, all, "range()");
    assert_eq!(got.as_deref(), Some(&b"newer"[..]), "get()");
}

#[test]
fn delete_returns_what_get_read_and_removes_every_form() {
    let mut store = store_with_two_stale_forms();
    let before = store.get(KEY).unwrap();
    assert_eq!(store.delete(KEY).unwrap(), before);
    assert_eq!(before.as_deref(), Some(&b"newer"[..]));
    assert_eq!(store.get(KEY).unwrap(), None);
    assert!(store.all().unwrap().is_empty());
    assert_eq!(store.inner().len(), 0);
}

#[test]
fn the_primary_form_wins_over_every_stale_one() {
    let mut store = store_with_two_stale_forms();
    // A value under the primary form, written below the fan-out (as a
    // restore of records in that order would leave it).
    let mut primary_only =
        EncryptedStore::new(MemoryStore::new(), "reading-order", store.keyset().clone())
            .with_encrypted_keys(store.key_keyset().unwrap().clone())
            .unwrap();
    primary_only.put(KEY, Some(b"primary")).unwrap();
    for (form, ct) in primary_only.inner().all().unwrap() {
        store.inner_mut().put(&form, Some(&ct)).unwrap();
    }
    assert_eq!(store.inner().len(), 3);
    assert_eq!(store.get(KEY).unwrap().as_deref(), Some(&b"primary"[..]));
    assert_eq!(
        store.all().unwrap(),
        vec![(KEY.to_vec(), b"primary".to_vec())]
    );
}
