//! Limits that keep what is written readable: a value the codec could never
//! decode is refused when written, not discovered at every later read; a
//! keyset never grows past what its JSON can be imported with.

use tombstone_crypt::{
    Bincode, Bytes, Context, DecryptingDeserializer, EncryptingSerializer, Error, KeyTemplate,
    Keyset, KeysetErrorKind, MemoryStore, Serializer, TypedStore, BINCODE_DECODE_LIMIT, MAX_KEYS,
};

#[test]
fn a_bincode_value_over_the_decode_limit_is_refused_when_written() {
    let keyset = Keyset::generate();
    let mut store = TypedStore::new(
        MemoryStore::new(),
        "big",
        (Bytes, Bytes),
        EncryptingSerializer::new(Bincode::<Vec<u8>>::new(), keyset.clone()),
        DecryptingDeserializer::new(Bincode::<Vec<u8>>::new(), keyset.clone()),
    );
    let k = b"k".to_vec();
    // Just under the limit (bincode adds a length prefix): stored and read.
    let fits = vec![1u8; BINCODE_DECODE_LIMIT - 16];
    store.put(&k, Some(&fits)).unwrap();
    assert_eq!(store.get(&k).unwrap().map(|v| v.len()), Some(fits.len()));
    // Over it: refused, and the old value is still there and readable, and
    // the whole store still iterates.
    let too_big = vec![2u8; BINCODE_DECODE_LIMIT + 1];
    let err = store.put(&k, Some(&too_big)).unwrap_err();
    assert!(
        matches!(
            err,
            Error::Codec {
                codec: "bincode",
                ..
            }
        ) && err.to_string().contains("decode limit"),
        "{err}"
    );
    assert_eq!(store.get(&k).unwrap().map(|v| v.len()), Some(fits.len()));
    assert_eq!(store.all().unwrap().len(), 1);
    // Through the serializer alone: nothing half-written is left behind.
    let ser = EncryptingSerializer::new(Bincode::<Vec<u8>>::new(), keyset);
    let mut out = b"prefix".to_vec();
    assert!(ser
        .serialize_into(&Context::new("t"), &too_big, &mut out)
        .is_err());
    assert_eq!(out, b"prefix");
}

#[test]
fn a_keyset_stops_at_the_size_its_json_can_be_read_back_with() {
    let mut keyset = Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap();
    for _ in 1..MAX_KEYS {
        keyset.rotate_with(KeyTemplate::aes128_gcm()).unwrap();
    }
    assert_eq!(keyset.len(), MAX_KEYS);
    let err = keyset.rotate_with(KeyTemplate::aes128_gcm()).unwrap_err();
    assert_eq!(err.keyset_kind(), Some(KeysetErrorKind::TooManyKeys));
    assert!(keyset.add_key_with(KeyTemplate::aes128_gcm()).is_err());
    assert_eq!(keyset.len(), MAX_KEYS);
    // The largest keyset still exports JSON that imports.
    let back = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    assert_eq!(back.len(), MAX_KEYS);
    assert_eq!(back.primary(), keyset.primary());
    // Removing an old key makes room again.
    let oldest = keyset.keys().next().unwrap().0;
    keyset.remove(oldest).unwrap();
    keyset.rotate();
    assert_eq!(keyset.len(), MAX_KEYS);
}
