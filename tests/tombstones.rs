//! Contract points 1 and 2: tombstone in, tombstone out, for every codec;
//! empty is not null; a present value never silently becomes a tombstone.

use std::cell::Cell;
use std::rc::Rc;

use serde::{Deserialize, Serialize};
use tombstone_crypt::format::OVERHEAD;
use tombstone_crypt::store::{MemoryStore, TypedStore};
use tombstone_crypt::{
    Bincode, Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error,
    Json, Keyset, Serializer, Utf8,
};

#[derive(Serialize, Deserialize, Debug, PartialEq, Clone, Default)]
struct Event {
    id: u64,
    name: String,
    tags: Vec<String>,
}

fn ctx() -> Context<'static> {
    Context::new("events").with_key(b"key-1")
}

/// Checks the tombstone rule and a round trip for one codec.
fn check_codec<T, C>(codec: C, value: &T, empty: &T)
where
    T: PartialEq + std::fmt::Debug + ?Sized + ToOwned,
    T::Owned: PartialEq<T> + std::fmt::Debug,
    C: Serializer<T> + Deserializer<T::Owned> + Clone,
{
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(codec.clone(), keyset.clone());
    let de = DecryptingDeserializer::new(codec, keyset);

    assert_eq!(ser.serialize(&ctx(), None).unwrap(), None);
    assert!(de.deserialize(&ctx(), None).unwrap().is_none());

    for v in [value, empty] {
        let ct = ser.serialize(&ctx(), Some(v)).unwrap();
        let ct = ct.expect("a present value must become a present ciphertext");
        assert!(ct.len() >= OVERHEAD);
        let back = de.deserialize(&ctx(), Some(&ct)).unwrap();
        let back = back.expect("a present ciphertext must decrypt to a present value");
        assert_eq!(back, *v);
    }
}

#[test]
fn bytes_tombstones_and_empty() {
    check_codec(Bytes, &b"payload"[..], &b""[..]);
}

#[test]
fn utf8_tombstones_and_empty() {
    check_codec(Utf8, "payload", "");
}

#[test]
fn bincode_tombstones_and_empty() {
    let v = Event {
        id: 7,
        name: "n".into(),
        tags: vec!["a".into()],
    };
    check_codec(Bincode::<Event>::new(), &v, &Event::default());
}

#[test]
fn json_tombstones_and_empty() {
    let v = Event {
        id: 7,
        name: "n".into(),
        tags: vec![],
    };
    check_codec(Json::<Event>::new(), &v, &Event::default());
}

#[test]
fn empty_bytes_are_a_33_byte_ciphertext_not_a_tombstone() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let ct = ser.serialize(&ctx(), Some(&[][..])).unwrap().unwrap();
    assert_eq!(ct.len(), OVERHEAD);
    assert_eq!(ct[0], 0x01);
    assert_eq!(&ct[1..5], &keyset.primary().0.to_be_bytes());
    let de = DecryptingDeserializer::new(Bytes, keyset);
    assert_eq!(de.deserialize(&ctx(), Some(&ct)).unwrap(), Some(vec![]));
}

#[test]
fn plain_codecs_keep_tombstones() {
    let c = ctx();
    assert_eq!(Bytes.serialize(&c, None).unwrap(), None);
    assert_eq!(Bytes.deserialize(&c, None).unwrap(), None);
    assert_eq!(Utf8.serialize(&c, None).unwrap(), None);
    assert_eq!(Utf8.deserialize(&c, None).unwrap(), None);
    assert_eq!(Bincode::<u32>::new().serialize(&c, None).unwrap(), None);
    assert_eq!(Bincode::<u32>::new().deserialize(&c, None).unwrap(), None);
    assert_eq!(Json::<u32>::new().serialize(&c, None).unwrap(), None);
    assert_eq!(Json::<u32>::new().deserialize(&c, None).unwrap(), None);
}

/// An inner serde that panics if it is ever called: the wrappers must not
/// touch it for a tombstone.
struct Untouchable;

impl Serializer<[u8]> for Untouchable {
    fn serialize_into(&self, _: &Context<'_>, _: &[u8], _: &mut Vec<u8>) -> Result<(), Error> {
        panic!("the inner serializer was called for a tombstone")
    }
}

impl Deserializer<Vec<u8>> for Untouchable {
    fn deserialize_owned(&self, _: &Context<'_>, _: Vec<u8>) -> Result<Vec<u8>, Error> {
        panic!("the inner deserializer was called for a tombstone")
    }
}

#[test]
fn tombstones_never_reach_the_inner_serde() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Untouchable, keyset.clone());
    let de = DecryptingDeserializer::new(Untouchable, keyset);
    assert_eq!(ser.serialize(&ctx(), None).unwrap(), None);
    assert_eq!(de.deserialize(&ctx(), None).unwrap(), None);
}

/// A codec written outside the crate, the way the traits ask: only the two
/// present-value methods, counting its calls. It has no `None` branch, and
/// needs none.
#[derive(Clone, Default)]
struct Counting {
    ser_calls: Rc<Cell<usize>>,
    de_calls: Rc<Cell<usize>>,
}

impl Counting {
    fn calls(&self) -> (usize, usize) {
        (self.ser_calls.get(), self.de_calls.get())
    }
}

impl Serializer<[u8]> for Counting {
    fn serialize_into(&self, _: &Context<'_>, v: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        self.ser_calls.set(self.ser_calls.get() + 1);
        out.extend_from_slice(v);
        Ok(())
    }
}

impl Deserializer<Vec<u8>> for Counting {
    fn deserialize_owned(&self, _: &Context<'_>, data: Vec<u8>) -> Result<Vec<u8>, Error> {
        self.de_calls.set(self.de_calls.get() + 1);
        Ok(data)
    }
}

#[test]
fn an_outside_codec_with_only_present_value_methods_keeps_the_rule() {
    let keyset = Keyset::generate();
    // Alone: the provided methods keep tombstones away from it.
    let plain = Counting::default();
    assert_eq!(plain.serialize(&ctx(), None).unwrap(), None);
    assert_eq!(plain.deserialize(&ctx(), None).unwrap(), None);
    assert_eq!(plain.calls(), (0, 0));
    assert_eq!(
        plain.serialize(&ctx(), Some(&b""[..])).unwrap(),
        Some(vec![])
    );
    assert_eq!(plain.deserialize(&ctx(), Some(b"")).unwrap(), Some(vec![]));
    assert_eq!(plain.calls(), (1, 1));

    // Wrapped: tombstones never reach it; present values, empty included,
    // reach it once each and round-trip.
    let codec = Counting::default();
    let ser = EncryptingSerializer::new(codec.clone(), keyset.clone());
    let de = DecryptingDeserializer::new(codec.clone(), keyset);
    for _ in 0..3 {
        assert_eq!(ser.serialize(&ctx(), None).unwrap(), None);
        assert_eq!(de.deserialize(&ctx(), None).unwrap(), None);
    }
    assert_eq!(codec.calls(), (0, 0));
    for (i, v) in [&b""[..], b"x", &[7u8; 300]].into_iter().enumerate() {
        let ct = ser.serialize(&ctx(), Some(v)).unwrap().expect("present");
        assert_eq!(ct.len(), v.len() + OVERHEAD);
        assert_eq!(
            de.deserialize(&ctx(), Some(&ct)).unwrap().as_deref(),
            Some(v)
        );
        assert_eq!(codec.calls(), (i + 1, i + 1));
    }
}

/// An inner serde that overrides the provided `serialize` and
/// `deserialize` to turn every present value into `None`. Overriding the
/// provided methods is the only way to break the tombstone rule; the
/// wrappers never call them (they call the present-value methods), and
/// the stores and Kafka helpers that do call `serialize` refuse a `None`
/// for a present value.
struct Vanishing;

impl Serializer<[u8]> for Vanishing {
    fn serialize_into(&self, _: &Context<'_>, v: &[u8], out: &mut Vec<u8>) -> Result<(), Error> {
        out.extend_from_slice(v);
        Ok(())
    }
    fn serialize(&self, _: &Context<'_>, _: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }
}

impl Deserializer<Vec<u8>> for Vanishing {
    fn deserialize_owned(&self, _: &Context<'_>, data: Vec<u8>) -> Result<Vec<u8>, Error> {
        Ok(data)
    }
    fn deserialize(&self, _: &Context<'_>, _: Option<&[u8]>) -> Result<Option<Vec<u8>>, Error> {
        Ok(None)
    }
}

#[test]
fn a_present_value_never_becomes_a_tombstone() {
    let keyset = Keyset::generate();
    // The wrappers build on the present-value methods: the override is
    // never reached, and a present value stays present.
    let ser = EncryptingSerializer::new(Vanishing, keyset.clone());
    let ct = ser.serialize(&ctx(), Some(&b"x"[..])).unwrap();
    assert!(ct.is_some());
    let de = DecryptingDeserializer::new(Vanishing, keyset.clone());
    assert_eq!(
        de.deserialize(&ctx(), ct.as_deref()).unwrap(),
        Some(b"x".to_vec())
    );

    // A typed store given the broken serde directly refuses the write
    // instead of turning it into a delete.
    let mut store = TypedStore::new(
        MemoryStore::new(),
        "events",
        (Bytes, Bytes),
        Vanishing,
        Bytes,
    );
    assert_eq!(
        store.put(&b"k".to_vec(), Some(&b"v".to_vec())),
        Err(Error::InnerReturnedNone)
    );
    // A delete through it is still a delete.
    store.put(&b"k".to_vec(), None).unwrap();
}

#[test]
fn codec_errors_never_quote_the_plaintext() {
    let keyset = Keyset::generate();
    let ser = EncryptingSerializer::new(Utf8, keyset.clone());
    let c = ctx();
    let secret = "\"top-secret-value\"";
    let ct = ser.serialize(&c, Some(secret)).unwrap();
    // The JSON text is a string where a number is expected.
    let err = DecryptingDeserializer::new(Json::<u64>::new(), keyset.clone())
        .deserialize(&c, ct.as_deref())
        .unwrap_err();
    assert!(matches!(err, Error::Codec { codec: "json", .. }));
    assert!(!err.to_string().contains("top-secret"), "{err}");
    assert!(!format!("{err:?}").contains("top-secret"), "{err:?}");

    let ser = EncryptingSerializer::new(Bytes, keyset.clone());
    let ct = ser.serialize(&c, Some(&b"\xfftop-secret"[..])).unwrap();
    let err = DecryptingDeserializer::new(Utf8, keyset.clone())
        .deserialize(&c, ct.as_deref())
        .unwrap_err();
    assert!(!format!("{err} {err:?}").contains("top-secret"));
    let err = DecryptingDeserializer::new(Bincode::<Event>::new(), keyset)
        .deserialize(&c, ct.as_deref())
        .unwrap_err();
    assert!(matches!(
        err,
        Error::Codec {
            codec: "bincode",
            ..
        }
    ));
    assert!(!format!("{err} {err:?}").contains("top-secret"));
}

#[test]
fn bincode_rejects_a_hostile_length_prefix_without_allocating() {
    // A Vec<u8> claiming u64::MAX elements in a few bytes.
    let hostile = [0xfd, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    let err = Bincode::<Vec<u8>>::new()
        .deserialize(&ctx(), Some(&hostile))
        .unwrap_err();
    assert!(matches!(err, Error::Codec { .. }), "{err}");
    // And trailing bytes after a valid value are an error too.
    let err = Bincode::<u8>::new()
        .deserialize(&ctx(), Some(&[1, 2]))
        .unwrap_err();
    assert!(err.to_string().contains("trailing"), "{err}");
}
