//! Limits that keep what is written readable: a value the codec could never
//! decode is refused when written, not discovered at every later read; a
//! keyset never grows past what its JSON can be imported with.

use tombstone_crypt::codec::BINCODE_DECODE_LIMIT;
use tombstone_crypt::error::KeysetErrorKind;
use tombstone_crypt::store::{MemoryStore, TypedStore};
use tombstone_crypt::{
    Bincode, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error,
    KeyTemplate, Keyset, Serializer, MAX_KEYS,
};

fn ctx() -> Context<'static> {
    Context::new("limits").with_key(b"k")
}

/// The write check and the read agree exactly: bincode's limit counts the
/// memory a decode claims (8 bytes per length prefix or `u64`, 16 per
/// `u128`, whatever the varint's width), so a check on the encoded length
/// alone accepted values that could never be read back.
#[test]
fn whatever_bincode_accepts_on_write_reads_back_and_the_rest_is_refused() {
    let c = ctx();
    let codec = Bincode::<String>::new();
    let mut accepted = 0;
    // A string of n bytes claims 8 (its length) + n.
    for len in (BINCODE_DECODE_LIMIT - 12)..=(BINCODE_DECODE_LIMIT - 4) {
        let v = "a".repeat(len);
        match codec.serialize(&c, Some(&v)) {
            Ok(Some(bytes)) => {
                accepted += 1;
                let back = codec.deserialize(&c, Some(&bytes)).unwrap();
                assert_eq!(back.map(|b| b.len()), Some(len));
                assert!(len + 8 <= BINCODE_DECODE_LIMIT, "{len} accepted");
            }
            Ok(None) => panic!("a present value became a tombstone"),
            Err(e) => {
                assert!(len + 8 > BINCODE_DECODE_LIMIT, "{len} refused: {e}");
                assert!(e.to_string().contains("decode limit"), "{e}");
            }
        }
    }
    assert_eq!(
        accepted, 5,
        "LIMIT-12 ..= LIMIT-8 fit, LIMIT-7 ..= LIMIT-4 do not"
    );

    // A zero u128 is one byte on the wire and claims 16: 1 MiB - 1 of them
    // fit (16 MiB - 8 claimed), 1 MiB do not, though its encoding is only
    // 1 MiB + 5 bytes.
    let u128s = Bincode::<Vec<u128>>::new();
    let fits = vec![0u128; (BINCODE_DECODE_LIMIT - 8) / 16];
    let bytes = u128s.serialize(&c, Some(&fits)).unwrap().unwrap();
    assert_eq!(u128s.deserialize(&c, Some(&bytes)).unwrap(), Some(fits));
    let err = u128s
        .serialize(&c, Some(&vec![0u128; BINCODE_DECODE_LIMIT / 16]))
        .unwrap_err();
    assert!(err.to_string().contains("decode limit"), "{err}");

    // 3,000,000 zero u64s: 3 MB on the wire, 24 MB claimed by a decode.
    let zeros = vec![0u64; 3_000_000];
    let err = Bincode::<Vec<u64>>::new()
        .serialize(&c, Some(&zeros))
        .unwrap_err();
    assert!(err.to_string().contains("decode limit"), "{err}");
    // 2,000,000 of them claim 16,000,008 bytes: under the limit, accepted
    // and read back.
    let fits = vec![u64::MAX; 2_000_000];
    let bytes = Bincode::<Vec<u64>>::new()
        .serialize(&c, Some(&fits))
        .unwrap()
        .unwrap();
    assert_eq!(
        Bincode::<Vec<u64>>::new()
            .deserialize(&c, Some(&bytes))
            .unwrap(),
        Some(fits)
    );
}

/// Through a store: the unreadable value is refused at `put`, the old value
/// stays, and `all()` still reads the whole store.
#[test]
fn a_value_that_would_claim_too_much_never_reaches_the_store() {
    let keyset = Keyset::generate();
    let mut store = TypedStore::new(
        MemoryStore::new(),
        "claims",
        (Bytes, Bytes),
        EncryptingSerializer::new(Bincode::<Vec<u64>>::new(), keyset.clone()),
        DecryptingDeserializer::new(Bincode::<Vec<u64>>::new(), keyset),
    );
    let k = b"k".to_vec();
    store.put(&k, Some(&vec![7u64; 3])).unwrap();
    store.put(&b"other".to_vec(), Some(&vec![1u64])).unwrap();
    assert!(store.put(&k, Some(&vec![0u64; 3_000_000])).is_err());
    assert_eq!(store.get(&k).unwrap(), Some(vec![7u64; 3]));
    assert_eq!(store.all().unwrap().len(), 2);
}

/// The limit is the documented 16 MiB, and a 2 MiB value (encrypted)
/// round-trips: the other tests are written relative to the constant.
#[test]
fn the_bincode_decode_limit_is_16_mib_and_a_2_mib_value_round_trips() {
    assert_eq!(
        BINCODE_DECODE_LIMIT,
        16 * 1024 * 1024,
        "documented as 16 MiB"
    );
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bincode::<Vec<u8>>::new(), keyset.clone());
    let de = DecryptingDeserializer::new(Bincode::<Vec<u8>>::new(), keyset);
    let v = vec![7u8; 2 * 1024 * 1024];
    let ct = ser.serialize(&ctx(), Some(&v)).unwrap().unwrap();
    assert_eq!(de.deserialize(&ctx(), Some(&ct)).unwrap(), Some(v));
}

#[test]
fn a_bincode_value_over_the_decode_limit_is_refused_when_written() {
    let keyset = Keyset::generate();
    let mut store = TypedStore::new(
        MemoryStore::new(),
        "big",
        (Bytes, Bytes),
        EncryptingSerializer::new(Bincode::<String>::new(), keyset.clone()),
        DecryptingDeserializer::new(Bincode::<String>::new(), keyset.clone()),
    );
    let k = b"k".to_vec();
    // Just under the limit (bincode adds a length prefix): stored and read.
    let fits = "a".repeat(BINCODE_DECODE_LIMIT - 16);
    store.put(&k, Some(&fits)).unwrap();
    assert_eq!(store.get(&k).unwrap().map(|v| v.len()), Some(fits.len()));
    // Over it: refused, and the old value is still there and readable, and
    // the whole store still iterates.
    let too_big = "b".repeat(BINCODE_DECODE_LIMIT + 1);
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
    let ser = EncryptingSerializer::new(Bincode::<String>::new(), keyset);
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

/// A type that encodes but never decodes, to see exactly which encodings
/// the bincode codec reads back before accepting them.
#[derive(Debug)]
struct NeverReads(Vec<u8>);

impl serde::Serialize for NeverReads {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(s)
    }
}

impl<'de> serde::Deserialize<'de> for NeverReads {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Err(serde::de::Error::custom("this type never decodes"))
    }
}

/// Encodings of at most `BINCODE_DECODE_LIMIT / 16` bytes (1 MiB) cannot
/// claim more than the limit, so they are written without a trial decode;
/// one byte more is decoded first. A type that never decodes shows the
/// threshold exactly: accepted at 1 MiB, refused one byte above, and small
/// values are never decoded at all.
#[test]
fn the_trial_decode_starts_one_byte_above_a_sixteenth_of_the_limit() {
    let c = ctx();
    let codec = Bincode::<NeverReads>::new();
    let threshold = BINCODE_DECODE_LIMIT / 16;
    // A Vec<u8> of n >= 2^16 bytes: a 5-byte length prefix, then n bytes.
    let at = NeverReads(vec![7; threshold - 5]);
    let above = NeverReads(vec![7; threshold - 4]);
    let encoded = codec.serialize(&c, Some(&at)).unwrap().unwrap();
    assert_eq!(encoded.len(), threshold);
    let err = codec.serialize(&c, Some(&above)).unwrap_err();
    assert!(matches!(err, Error::Codec { .. }), "{err:?}");
    assert!(err.to_string().contains("would not read back"), "{err}");
    for n in [0, 1, 100, 70_000] {
        assert!(codec.serialize(&c, Some(&NeverReads(vec![1; n]))).is_ok());
    }
}
