//! Contract point 6: encrypt under the primary key, decrypt under any enabled
//! key named by the ciphertext's key id.

use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, KeyId,
    KeyStatus, Keyset, Serializer,
};

fn enc(keyset: &Keyset, v: &[u8]) -> Vec<u8> {
    EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&Context::new("t"), Some(v))
        .unwrap()
        .unwrap()
}

fn dec(keyset: &Keyset, ct: &[u8]) -> Result<Option<Vec<u8>>, Error> {
    DecryptingDeserializer::new(Bytes, keyset.clone()).deserialize(&Context::new("t"), Some(ct))
}

fn key_id_of(ct: &[u8]) -> KeyId {
    KeyId(u32::from_be_bytes([ct[1], ct[2], ct[3], ct[4]]))
}

#[test]
fn rotation_keeps_old_values_readable_and_uses_the_new_key() {
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let old = enc(&keyset, b"old");
    assert_eq!(key_id_of(&old), first);

    let second = keyset.rotate();
    assert_ne!(first, second);
    assert_eq!(keyset.primary(), second);
    let new = enc(&keyset, b"new");
    assert_eq!(key_id_of(&new), second);

    assert_eq!(dec(&keyset, &old).unwrap().as_deref(), Some(&b"old"[..]));
    assert_eq!(dec(&keyset, &new).unwrap().as_deref(), Some(&b"new"[..]));

    // A keyset from before the rotation does not know the new key.
    let before = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    let mut before = before;
    before.set_primary(first).unwrap();
    before.remove(second).unwrap();
    assert_eq!(dec(&before, &new), Err(Error::UnknownKeyId(second)));
}

#[test]
fn rotate_changes_only_its_own_handle() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let mut rotated = keyset.clone();
    let new = rotated.rotate();
    assert_eq!(keyset.len(), 1);
    assert_ne!(keyset.primary(), new);
    let ct = ser
        .serialize(&Context::new("t"), Some(&b"v"[..]))
        .unwrap()
        .unwrap();
    assert_eq!(key_id_of(&ct), keyset.primary());
}

#[test]
fn disabled_and_removed_keys_do_not_decrypt() {
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let ct = enc(&keyset, b"v");
    let second = keyset.rotate();

    assert_eq!(keyset.disable(second), Err(Error::PrimaryKey(second)));
    keyset.disable(first).unwrap();
    assert_eq!(
        keyset.keys().collect::<Vec<_>>(),
        [(first, KeyStatus::Disabled), (second, KeyStatus::Enabled)]
    );
    assert_eq!(dec(&keyset, &ct), Err(Error::KeyDisabled(first)));
    assert_eq!(keyset.set_primary(first), Err(Error::KeyNotEnabled(first)));

    keyset.enable(first).unwrap();
    assert_eq!(dec(&keyset, &ct).unwrap().as_deref(), Some(&b"v"[..]));

    keyset.remove(first).unwrap();
    assert_eq!(dec(&keyset, &ct), Err(Error::UnknownKeyId(first)));
    assert_eq!(keyset.remove(second), Err(Error::PrimaryKey(second)));
    assert_eq!(keyset.remove(first), Err(Error::KeyNotFound(first)));
    assert_eq!(keyset.len(), 1);
    assert_eq!(keyset.primary(), second);
}

#[test]
fn staged_key_then_promote() {
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let staged = keyset.add_key();
    assert_eq!(keyset.primary(), first);
    assert_eq!(key_id_of(&enc(&keyset, b"v")), first);
    keyset.set_primary(staged).unwrap();
    assert_eq!(key_id_of(&enc(&keyset, b"v")), staged);
}

#[test]
fn many_rotations_give_unique_ids_and_all_values_stay_readable() {
    let mut keyset = Keyset::generate();
    let mut cts = vec![enc(&keyset, b"0")];
    for i in 1..50u32 {
        keyset.rotate();
        cts.push(enc(&keyset, i.to_string().as_bytes()));
    }
    let mut ids: Vec<_> = keyset.keys().map(|(id, _)| id).collect();
    ids.sort();
    ids.dedup();
    assert_eq!(ids.len(), 50);
    for (i, ct) in cts.iter().enumerate() {
        assert_eq!(dec(&keyset, ct).unwrap(), Some(i.to_string().into_bytes()));
    }
}

/// A store's associated-data policy survives a keyset change: a store built
/// with `AadPolicy::Topic` keeps it after `set_keyset`, so old values still
/// decrypt and new ones are still bound to the topic only.
#[test]
fn set_keyset_keeps_the_stores_aad_policy() {
    use tombstone_crypt::store::{EncryptedStore, KeyValueStore, MemoryStore};
    use tombstone_crypt::AadPolicy;
    let mut keyset = Keyset::generate();
    let mut store =
        EncryptedStore::new(MemoryStore::new(), "s", keyset.clone()).with_aad(AadPolicy::Topic);
    store.put(b"a", Some(b"old")).unwrap();
    keyset.rotate();
    store.set_keyset(keyset.clone());
    store.put(b"b", Some(b"new")).unwrap();
    assert_eq!(store.get(b"a").unwrap(), Some(b"old".to_vec()));
    assert_eq!(store.delete(b"a").unwrap(), Some(b"old".to_vec()));
    // Under Topic, a value moved to another key of the store still decrypts.
    let moved = store.inner().get(b"b").unwrap();
    store.inner_mut().put(b"c", moved.as_deref()).unwrap();
    assert_eq!(store.get(b"c").unwrap(), Some(b"new".to_vec()));
}
