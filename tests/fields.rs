//! Field-level encryption (`tombstone_crypt::field`): a property suite over
//! generated records (nested structs, `Option`, `Vec`, maps, enums, empty
//! strings), in JSON and bincode, under every value key type, with a naive
//! control that encrypts a null field and must fail the suite.
//!
//! Properties: round trip; a `None` field is the format's null in the bytes
//! and reads back `None` (with keys, and with none); exactly the present
//! encrypted fields are encrypted (counted); a field moved to another path,
//! record or topic does not decrypt; a reader with no keys passes every
//! encrypted field through byte for byte; deterministic fields are equal
//! exactly where they should be.

use crate::common;

use std::collections::BTreeMap;
use std::error::Error as _;

use proptest::prelude::*;
use proptest::strategy::ValueTree as _;
use serde::{Deserialize, Serialize};
use tombstone_crypt::field::{Deterministic, Encrypted, FieldEncrypting, FieldFormat};
use tombstone_crypt::kms::DekPolicy;
use tombstone_crypt::{
    AadPolicy, Bincode, Context, Deserializer, Error, Json, KeyTemplate, Keyset, Serializer,
};

// ---- the records ----

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Address {
    street: Encrypted<String>,
    city: String,
    zip: Option<Encrypted<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Card {
    number: Encrypted<String>,
    label: Option<String>,
    expiry: Option<Encrypted<String>>,
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
enum Kind {
    Plain,
    Secret { code: Encrypted<String>, level: u8 },
    Counted(Encrypted<u64>),
}

/// A record; `P` is the type of its `phone` field: `Option<Encrypted<String>>`
/// for the contract, [`NaivePhone`] for the control.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Record<P> {
    id: u64,
    name: String,
    ssn: Encrypted<String>,
    phone: P,
    address: Address,
    cards: Vec<Card>,
    tags: BTreeMap<String, Encrypted<String>>,
    scores: Vec<Option<Encrypted<u32>>>,
    email: Deterministic<String>,
    alias: Option<Deterministic<String>>,
    kind: Kind,
}

type Contract = Record<Option<Encrypted<String>>>;
type Control = Record<NaivePhone>;

/// The naive control: an optional field that encrypts the whole `Option`,
/// so a `None` becomes a ciphertext of `null` (what a layer does that
/// encrypts whatever it is given). It uses the keyset directly, bound to
/// nothing, and round-trips perfectly.
#[derive(Clone, Debug, PartialEq)]
struct NaivePhone(Option<String>);

thread_local! {
    static NAIVE_KEYS: std::cell::RefCell<Option<Keyset>> = const { std::cell::RefCell::new(None) };
}

impl Serialize for NaivePhone {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let pt = serde_json::to_vec(&self.0).unwrap();
        let ct = NAIVE_KEYS.with(|k| k.borrow().as_ref().unwrap().encrypt(&pt, b"").unwrap());
        if s.is_human_readable() {
            use base64::Engine as _;
            s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(ct))
        } else {
            s.serialize_bytes(&ct)
        }
    }
}

impl<'de> Deserialize<'de> for NaivePhone {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let ct = if d.is_human_readable() {
            use base64::Engine as _;
            let s = String::deserialize(d)?;
            base64::engine::general_purpose::STANDARD
                .decode(s)
                .map_err(serde::de::Error::custom)?
        } else {
            serde_bytes_vec(d)?
        };
        let pt = NAIVE_KEYS
            .with(|k| k.borrow().as_ref().unwrap().decrypt(&ct, b""))
            .map_err(serde::de::Error::custom)?;
        Ok(NaivePhone(
            serde_json::from_slice(&pt).map_err(serde::de::Error::custom)?,
        ))
    }
}

fn serde_bytes_vec<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
    struct V;
    impl<'de> serde::de::Visitor<'de> for V {
        type Value = Vec<u8>;
        fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("bytes")
        }
        fn visit_bytes<E>(self, v: &[u8]) -> Result<Vec<u8>, E> {
            Ok(v.to_vec())
        }
        fn visit_byte_buf<E>(self, v: Vec<u8>) -> Result<Vec<u8>, E> {
            Ok(v)
        }
    }
    d.deserialize_byte_buf(V)
}

/// What a record's phone field is, for the suite.
trait Phone: Serialize + serde::de::DeserializeOwned + Clone + std::fmt::Debug + PartialEq {
    fn from_model(v: Option<String>) -> Self;
}

impl Phone for Option<Encrypted<String>> {
    fn from_model(v: Option<String>) -> Self {
        v.map(Encrypted::new)
    }
}

impl Phone for NaivePhone {
    fn from_model(v: Option<String>) -> Self {
        NaivePhone(v)
    }
}

// ---- the model: plain values, from which records are built ----

#[derive(Clone, Debug)]
struct Model {
    id: u64,
    name: String,
    ssn: String,
    phone: Option<String>,
    street: String,
    zip: Option<String>,
    cards: Vec<(String, Option<String>, Option<String>)>,
    tags: BTreeMap<String, String>,
    scores: Vec<Option<u32>>,
    email: String,
    alias: Option<String>,
    kind: u8,
    code: String,
    count: u64,
}

fn text() -> impl Strategy<Value = String> {
    // Empty strings, ASCII, and characters JSON escapes.
    prop_oneof![
        Just(String::new()),
        "[a-z0-9 ]{0,12}",
        "[\\PC\"\\\\/~]{0,8}",
    ]
}

fn model() -> impl Strategy<Value = Model> {
    (
        (
            any::<u64>(),
            text(),
            text(),
            proptest::option::of(text()),
            text(),
            proptest::option::of(text()),
        ),
        (
            proptest::collection::vec(
                (
                    text(),
                    proptest::option::of(text()),
                    proptest::option::of(text()),
                ),
                0..4,
            ),
            proptest::collection::btree_map("[a-z/~]{0,6}", text(), 0..4),
            proptest::collection::vec(proptest::option::of(any::<u32>()), 0..5),
        ),
        (
            text(),
            proptest::option::of(text()),
            0u8..3,
            text(),
            any::<u64>(),
        ),
    )
        .prop_map(
            |(
                (id, name, ssn, phone, street, zip),
                (cards, tags, scores),
                (email, alias, kind, code, count),
            )| Model {
                id,
                name,
                ssn,
                phone,
                street,
                zip,
                cards,
                tags,
                scores,
                email,
                alias,
                kind,
                code,
                count,
            },
        )
}

impl Model {
    fn record<P: Phone>(&self) -> Record<P> {
        Record {
            id: self.id,
            name: self.name.clone(),
            ssn: Encrypted::new(self.ssn.clone()),
            phone: P::from_model(self.phone.clone()),
            address: Address {
                street: Encrypted::new(self.street.clone()),
                city: "Lyon".into(),
                zip: self.zip.clone().map(Encrypted::new),
            },
            cards: self
                .cards
                .iter()
                .map(|(n, l, e)| Card {
                    number: Encrypted::new(n.clone()),
                    label: l.clone(),
                    expiry: e.clone().map(Encrypted::new),
                })
                .collect(),
            tags: self
                .tags
                .iter()
                .map(|(k, v)| (k.clone(), Encrypted::new(v.clone())))
                .collect(),
            scores: self.scores.iter().map(|s| s.map(Encrypted::new)).collect(),
            email: Deterministic::new(self.email.clone()),
            alias: self.alias.clone().map(Deterministic::new),
            kind: match self.kind {
                0 => Kind::Plain,
                1 => Kind::Secret {
                    code: Encrypted::new(self.code.clone()),
                    level: 3,
                },
                _ => Kind::Counted(Encrypted::new(self.count)),
            },
        }
    }

    /// The present encrypted fields (randomized, deterministic), counted
    /// from the model: what the layer must encrypt, no more. The phone
    /// field is the contract's.
    fn present_fields(&self) -> (u64, u64) {
        let n = |b: bool| u64::from(b);
        let randomized = 2 // ssn, street
            + n(self.phone.is_some())
            + n(self.zip.is_some())
            + self
                .cards
                .iter()
                .map(|(_, _, e)| 1 + n(e.is_some()))
                .sum::<u64>()
            + self.tags.len() as u64
            + self.scores.iter().filter(|s| s.is_some()).count() as u64
            + n(self.kind != 0);
        (randomized, 1 + n(self.alias.is_some()))
    }

    /// The paths of the fields that are `None`, with keys.
    fn null_paths(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.phone.is_none() {
            out.push("/phone".to_owned());
        }
        if self.zip.is_none() {
            out.push("/address/zip".to_owned());
        }
        for (i, (_, l, e)) in self.cards.iter().enumerate() {
            if l.is_none() {
                out.push(format!("/cards/{i}/label"));
            }
            if e.is_none() {
                out.push(format!("/cards/{i}/expiry"));
            }
        }
        for (i, s) in self.scores.iter().enumerate() {
            if s.is_none() {
                out.push(format!("/scores/{i}"));
            }
        }
        if self.alias.is_none() {
            out.push("/alias".to_owned());
        }
        out
    }
}

// ---- keys ----

/// The value key types: AES-256-GCM, AES-128-GCM, a KMS envelope key, and
/// a rotated keyset whose fields were written under its old primary.
#[derive(Clone, Copy, Debug)]
enum Keys {
    Aes256,
    Aes128,
    Envelope,
    Rotated,
}

fn keys() -> impl Strategy<Value = Keys> {
    prop_oneof![
        Just(Keys::Aes256),
        Just(Keys::Aes128),
        Just(Keys::Envelope),
        Just(Keys::Rotated),
    ]
}

/// (the writer's keyset, the reader's).
fn keysets(k: Keys) -> (Keyset, Keyset) {
    match k {
        Keys::Aes256 => {
            let k = Keyset::generate();
            (k.clone(), k)
        }
        Keys::Aes128 => {
            let k = Keyset::generate_with(KeyTemplate::aes128_gcm()).unwrap();
            (k.clone(), k)
        }
        Keys::Envelope => {
            let (_kms, _clients, k) =
                common::envelope::envelope_keyset("fake-kms://fields/kek", DekPolicy::default());
            (k.clone(), k)
        }
        Keys::Rotated => {
            let old = Keyset::generate();
            let mut new = old.clone();
            new.rotate();
            (old, new)
        }
    }
}

fn siv() -> Keyset {
    Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap()
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Json,
    Bincode,
}

fn formats() -> impl Strategy<Value = Format> {
    prop_oneof![Just(Format::Json), Just(Format::Bincode)]
}

/// Serializes and deserializes `Record<P>` in `format` with `FieldEncrypting`.
struct Codec<P> {
    format: Format,
    json: FieldEncrypting<Json<Record<P>>>,
    bincode: FieldEncrypting<Bincode<Record<P>>>,
}

impl<P: Phone> Codec<P> {
    fn new(format: Format, values: &Keyset, det: &Keyset) -> Self {
        Codec {
            format,
            json: FieldEncrypting::new(Json::new(), values.clone()).with_deterministic(det.clone()),
            bincode: FieldEncrypting::new(Bincode::new(), values.clone())
                .with_deterministic(det.clone()),
        }
    }

    fn sealed(format: Format) -> Self {
        Codec {
            format,
            json: FieldEncrypting::sealed(Json::new()),
            bincode: FieldEncrypting::sealed(Bincode::new()),
        }
    }

    fn write(&self, ctx: &Context<'_>, r: &Record<P>) -> Result<Vec<u8>, Error> {
        let out = match self.format {
            Format::Json => self.json.serialize(ctx, Some(r))?,
            Format::Bincode => self.bincode.serialize(ctx, Some(r))?,
        };
        Ok(out.expect("a present record is present bytes"))
    }

    fn read(&self, ctx: &Context<'_>, b: &[u8]) -> Result<Record<P>, Error> {
        let out = match self.format {
            Format::Json => self.json.deserialize(ctx, Some(b))?,
            Format::Bincode => self.bincode.deserialize(ctx, Some(b))?,
        };
        Ok(out.expect("present bytes are a present record"))
    }
}

// ---- the suite ----

/// Every property the suite checks, for records of type `Record<P>`; an
/// `Err` names the first that failed.
fn check_suite<P: Phone>(m: &Model, k: Keys, format: Format) -> Result<(), String> {
    let (writer_keys, reader_keys) = keysets(k);
    NAIVE_KEYS.with(|n| *n.borrow_mut() = Some(writer_keys.clone()));
    let det = siv();
    let writer = Codec::<P>::new(format, &writer_keys, &det);
    let reader = Codec::<P>::new(format, &reader_keys, &det);
    let ctx = Context::new("people").with_key(b"person-1");
    let record: Record<P> = m.record();

    // Exactly the present fields are encrypted.
    let before = (writer_keys.stats(), det.stats());
    let bytes = writer
        .write(&ctx, &record)
        .map_err(|e| format!("write: {e}"))?;
    let after = (writer_keys.stats(), det.stats());
    let (randomized, deterministic) = m.present_fields();
    let counted = (
        after.0.fields_encrypted - before.0.fields_encrypted,
        after.1.fields_encrypted - before.1.fields_encrypted,
    );
    if counted != (randomized, deterministic) {
        return Err(format!(
            "fields encrypted: {counted:?}, present: {:?}",
            (randomized, deterministic)
        ));
    }

    // Round trip.
    let back = reader
        .read(&ctx, &bytes)
        .map_err(|e| format!("read: {e}"))?;
    if back != record {
        return Err("round trip changed the record".into());
    }

    // A None field is the format's null in the bytes, and reads None with
    // keys (above) and with none (the contract's type, read sealed).
    if let Format::Json = format {
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        for path in m.null_paths() {
            if v.pointer(&path) != Some(&serde_json::Value::Null) {
                return Err(format!("{path} is not null in the JSON"));
            }
        }
    }
    let keyless = Codec::<Option<Encrypted<String>>>::sealed(format);
    let sealed = keyless
        .read(&ctx, &bytes)
        .map_err(|e| format!("a reader with no keys: {e}"))?;
    if sealed.phone.is_some() != m.phone.is_some()
        || sealed.address.zip.is_some() != m.zip.is_some()
        || sealed.alias.is_some() != m.alias.is_some()
    {
        return Err("a null field does not read back null with no keys".into());
    }
    if !sealed.ssn.is_sealed() || sealed.ssn.get().is_some() {
        return Err("a reader with no keys opened a field".into());
    }

    // A field moved to another record or topic does not decrypt.
    for other in [
        Context::new("people").with_key(b"person-2"),
        Context::new("people-copy").with_key(b"person-1"),
    ] {
        match reader.read(&other, &bytes) {
            Err(Error::Field { cause, .. }) if *cause == Error::Decryption => {}
            other => return Err(format!("moved record: {other:?}")),
        }
    }

    // Sealed pass-through: a router with no keys changes a plain field and
    // writes the record on; every encrypted field is the same bytes, and a
    // reader with keys sees the change and every field.
    let mut routed = sealed.clone();
    routed.id = routed.id.wrapping_add(1);
    routed.name.push('!');
    let passed = keyless
        .write(&ctx, &routed)
        .map_err(|e| format!("router write: {e}"))?;
    let resealed = keyless.read(&ctx, &passed).unwrap();
    if resealed != routed {
        return Err("a sealed field changed on its way through".into());
    }
    if let Format::Json = format {
        let a: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        let b: serde_json::Value = serde_json::from_slice(&passed).unwrap();
        let mut strings_a = Vec::new();
        let mut strings_b = Vec::new();
        ciphertext_strings(&a, "", &mut strings_a);
        ciphertext_strings(&b, "", &mut strings_b);
        if strings_a != strings_b {
            return Err("a field's text changed through the router".into());
        }
    }
    if Codec::<Option<Encrypted<String>>>::new(format, &reader_keys, &det)
        .read(&ctx, &passed)
        .map_err(|e| format!("read after the router: {e}"))?
        != {
            let mut m2 = m.clone();
            m2.id = m2.id.wrapping_add(1);
            m2.name.push('!');
            m2.record::<Option<Encrypted<String>>>()
        }
    {
        return Err("the record after the router is not the record with its change".into());
    }
    Ok(())
}

/// The (path, text) of every string in `v` that holds a field (base64 of
/// `0x01 | key id | ...`).
fn ciphertext_strings(v: &serde_json::Value, path: &str, out: &mut Vec<(String, String)>) {
    use base64::Engine as _;
    match v {
        serde_json::Value::String(s) => {
            if let Ok(b) = base64::engine::general_purpose::STANDARD.decode(s) {
                if b.len() > 5 && b[0] == 1 {
                    out.push((path.to_owned(), s.clone()));
                }
            }
        }
        serde_json::Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                ciphertext_strings(x, &format!("{path}/{i}"), out);
            }
        }
        serde_json::Value::Object(o) => {
            for (k, x) in o {
                let k = k.replace('~', "~0").replace('/', "~1");
                ciphertext_strings(x, &format!("{path}/{k}"), out);
            }
        }
        _ => {}
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn the_contract_holds_for_generated_records(m in model(), k in keys(), f in formats()) {
        prop_assert_eq!(check_suite::<Option<Encrypted<String>>>(&m, k, f), Ok(()));
    }
}

/// The control encrypts a `None` phone: the suite must fail it, for both
/// formats, on a record whose phone is `None` (and it round-trips, so only
/// the null rule catches it).
#[test]
fn the_naive_control_that_encrypts_a_null_fails_the_suite() {
    let mut runner = proptest::test_runner::TestRunner::deterministic();
    for format in [Format::Json, Format::Bincode] {
        for _ in 0..16 {
            let mut m = model().new_tree(&mut runner).unwrap().current();
            m.phone = None;
            let err = check_suite::<NaivePhone>(&m, Keys::Aes256, format)
                .expect_err("the control passed the suite");
            assert!(
                err.contains("null") || err.contains("no keys"),
                "{format:?}: failed for another reason: {err}"
            );
            // It fails only there: with a phone, it passes.
            m.phone = Some("555".into());
            assert_eq!(check_suite_except_nulls(&m, format), Ok(()), "{format:?}");
        }
    }
}

/// The control round-trips (it is wrong only about nulls).
fn check_suite_except_nulls(m: &Model, format: Format) -> Result<(), String> {
    let keyset = Keyset::generate();
    NAIVE_KEYS.with(|n| *n.borrow_mut() = Some(keyset.clone()));
    let codec = Codec::<NaivePhone>::new(format, &keyset, &siv());
    let ctx = Context::new("people").with_key(b"person-1");
    let r: Control = m.record();
    let bytes = codec.write(&ctx, &r).map_err(|e| e.to_string())?;
    (codec.read(&ctx, &bytes).map_err(|e| e.to_string())? == r)
        .then_some(())
        .ok_or_else(|| "round trip".to_owned())
}

// ---- moves within a record, and the rules one by one ----

fn json_codec(keyset: &Keyset) -> FieldEncrypting<Json<Contract>> {
    FieldEncrypting::new(Json::new(), keyset.clone()).with_deterministic(siv())
}

fn sample() -> Contract {
    Model {
        id: 7,
        name: "n".into(),
        ssn: "078-05-1120".into(),
        phone: None,
        street: "1 rue de la Paix".into(),
        zip: Some("69001".into()),
        cards: vec![
            ("4111".into(), None, None),
            ("5500".into(), Some("work".into()), Some("12/30".into())),
        ],
        tags: [("vip".to_owned(), "gold".to_owned())].into(),
        scores: vec![Some(1), None],
        email: "a@example.org".into(),
        alias: None,
        kind: 1,
        code: "1234".into(),
        count: 0,
    }
    .record()
}

/// Moves the JSON value at `from` to `to` (both must exist).
fn moved(bytes: &[u8], from: &str, to: &str) -> Vec<u8> {
    let mut v: serde_json::Value = serde_json::from_slice(bytes).unwrap();
    let x = v.pointer(from).unwrap().clone();
    *v.pointer_mut(to).unwrap() = x;
    serde_json::to_vec(&v).unwrap()
}

#[test]
fn a_field_moved_to_another_path_does_not_decrypt_and_the_error_names_the_path() {
    let keyset = Keyset::generate();
    let codec = json_codec(&keyset);
    let ctx = Context::new("people").with_key(b"p");
    let bytes = codec.serialize(&ctx, Some(&sample())).unwrap().unwrap();
    for (from, to) in [
        ("/ssn", "/address/street"),
        ("/cards/0/number", "/cards/1/number"), // swapped list elements
        ("/address/zip", "/cards/1/expiry"),
        ("/tags/vip", "/ssn"),
        ("/kind/Secret/code", "/ssn"),
    ] {
        let err = codec
            .deserialize(&ctx, Some(&moved(&bytes, from, to)))
            .unwrap_err();
        match &err {
            Error::Field { path, cause } => {
                assert_eq!(path, to, "{from} -> {to}");
                assert_eq!(**cause, Error::Decryption, "{from} -> {to}");
                assert!(err.source().is_some());
            }
            other => panic!("{from} -> {to}: {other:?}"),
        }
    }
    // A field does not become a null when it fails: nothing is returned.
    let mut v: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
    let s = v["ssn"].as_str().unwrap().to_owned();
    let mut raw = {
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.decode(s).unwrap()
    };
    *raw.last_mut().unwrap() ^= 1;
    v["ssn"] = serde_json::Value::String({
        use base64::Engine as _;
        base64::engine::general_purpose::STANDARD.encode(raw)
    });
    let err = codec
        .deserialize(&ctx, Some(&serde_json::to_vec(&v).unwrap()))
        .unwrap_err();
    assert_eq!(
        err,
        Error::Field {
            path: "/ssn".into(),
            cause: Box::new(Error::Decryption)
        }
    );
}

#[test]
fn a_field_written_with_no_keys_in_scope_is_an_error_never_plaintext() {
    let r = sample();
    let err = serde_json::to_vec(&r).unwrap_err().to_string();
    assert!(err.contains("no keys in scope"), "{err}");
    assert!(bincode::serde::encode_to_vec(&r, bincode::config::standard()).is_err());
    // A sealed wrapper holds no keys: an open field is refused, by path.
    let sealed = FieldEncrypting::sealed(Json::<Contract>::new());
    match sealed.serialize(&Context::new("t"), Some(&r)) {
        Err(Error::Field { path, .. }) => assert_eq!(path, "/ssn"),
        other => panic!("{other:?}"),
    }
    // A deterministic field with no deterministic keyset.
    let no_det = FieldEncrypting::new(Json::<Contract>::new(), Keyset::generate());
    match no_det.serialize(&Context::new("t"), Some(&r)) {
        Err(Error::Field { path, .. }) => assert_eq!(path, "/email"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_null_inside_an_encrypted_field_is_refused() {
    #[derive(Serialize, Deserialize)]
    struct Naive {
        phone: Encrypted<Option<String>>,
    }
    let codec = FieldEncrypting::new(Json::<Naive>::new(), Keyset::generate());
    let ctx = Context::new("t");
    let err = codec
        .serialize(
            &ctx,
            Some(&Naive {
                phone: Encrypted::new(None),
            }),
        )
        .unwrap_err();
    assert!(err.to_string().contains("Option<Encrypted<T>>"), "{err}");
    // Present, it is a value like any other.
    let ok = Naive {
        phone: Encrypted::new(Some("1".into())),
    };
    let b = codec.serialize(&ctx, Some(&ok)).unwrap();
    let back = codec.deserialize(&ctx, b.as_deref()).unwrap().unwrap();
    assert_eq!(back.phone.get(), Some(&Some("1".to_owned())));
}

#[test]
fn a_tombstone_is_not_a_record_of_null_fields_and_the_reverse() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct AllOptional {
        a: Option<Encrypted<String>>,
        b: Option<Encrypted<u64>>,
    }
    let keyset = Keyset::generate();
    let codec = FieldEncrypting::new(Json::<AllOptional>::new(), keyset.clone());
    let ctx = Context::new("t").with_key(b"k");
    let before = keyset.stats();
    assert_eq!(codec.serialize(&ctx, None).unwrap(), None);
    let nulls = AllOptional { a: None, b: None };
    let b = codec.serialize(&ctx, Some(&nulls)).unwrap();
    assert_eq!(b.as_deref(), Some(&br#"{"a":null,"b":null}"#[..]));
    assert_eq!(codec.deserialize(&ctx, b.as_deref()).unwrap(), Some(nulls));
    assert_eq!(codec.deserialize(&ctx, None).unwrap(), None);
    let s = keyset.stats();
    assert_eq!(s.fields_encrypted - before.fields_encrypted, 0);
    assert_eq!(s.values_encrypted - before.values_encrypted, 0);
    assert_eq!(s.field_nulls_passed - before.field_nulls_passed, 4);
    assert_eq!(s.tombstones_serialized - before.tombstones_serialized, 1);
    assert_eq!(
        s.tombstones_deserialized - before.tombstones_deserialized,
        1
    );
}

#[test]
fn deterministic_fields_are_equal_exactly_within_one_field_of_one_topic() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct User {
        email: Deterministic<String>,
        backup: Deterministic<String>,
    }
    let det = siv();
    let codec = FieldEncrypting::new(Json::<User>::new(), Keyset::generate())
        .with_deterministic(det.clone());
    let field = |topic: &str, key: &[u8], email: &str, backup: &str| {
        let b = codec
            .serialize(
                &Context::new(topic).with_key(key),
                Some(&User {
                    email: Deterministic::new(email.into()),
                    backup: Deterministic::new(backup.into()),
                }),
            )
            .unwrap()
            .unwrap();
        let v: serde_json::Value = serde_json::from_slice(&b).unwrap();
        (v["email"].clone(), v["backup"].clone())
    };
    let (a, a_backup) = field("users", b"u1", "x@example.org", "x@example.org");
    let (b, _) = field("users", b"u2", "x@example.org", "y");
    let (c, _) = field("users", b"u1", "y@example.org", "y");
    let (d, _) = field("other", b"u1", "x@example.org", "y");
    assert_eq!(a, b, "same value, same field, same topic, another record");
    assert_ne!(a, c, "another value");
    assert_ne!(a, a_backup, "same value at another path");
    assert_ne!(a, d, "same value in another topic");
    // Bound to the record key too, when asked.
    let bound = FieldEncrypting::new(Json::<User>::new(), Keyset::generate())
        .with_deterministic(det)
        .with_deterministic_aad(AadPolicy::TopicAndKey);
    let enc = |key: &[u8]| {
        let b = bound
            .serialize(
                &Context::new("users").with_key(key),
                Some(&User {
                    email: Deterministic::new("x".into()),
                    backup: Deterministic::new("x".into()),
                }),
            )
            .unwrap()
            .unwrap();
        serde_json::from_slice::<serde_json::Value>(&b).unwrap()["email"].clone()
    };
    assert_ne!(enc(b"u1"), enc(b"u2"));
}

#[test]
fn a_record_changes_format_and_keeps_its_paths() {
    // The same path names in JSON and bincode: a field read from bincode
    // re-encrypts to JSON and back, and a bincode field's bytes sealed in
    // JSON text are the same ciphertext, readable at the same path.
    let keyset = Keyset::generate();
    let det = siv();
    let ctx = Context::new("people").with_key(b"p");
    let bin = FieldEncrypting::new(Bincode::<Contract>::new(), keyset.clone())
        .with_deterministic(det.clone());
    let bytes = bin.serialize(&ctx, Some(&sample())).unwrap().unwrap();
    let sealed: Contract = bincode::serde::decode_from_slice(&bytes, bincode::config::standard())
        .unwrap()
        .0;
    let as_json = serde_json::to_vec(&sealed).unwrap();
    let json = FieldEncrypting::new(Json::<Contract>::new(), keyset).with_deterministic(det);
    assert_eq!(
        json.deserialize(&ctx, Some(&as_json)).unwrap(),
        Some(sample())
    );
}

#[test]
fn debug_never_shows_a_fields_value() {
    let r = sample();
    let text = format!("{r:?}");
    for secret in ["078-05-1120", "1 rue de la Paix", "4111", "gold", "1234"] {
        assert!(!text.contains(secret), "{secret} in {text}");
    }
    let keyset = Keyset::generate();
    let codec = json_codec(&keyset);
    let ctx = Context::new("people").with_key(b"p");
    let bytes = codec.serialize(&ctx, Some(&r)).unwrap().unwrap();
    let sealed = FieldEncrypting::sealed(Json::<Contract>::new())
        .deserialize(&ctx, Some(&bytes))
        .unwrap()
        .unwrap();
    let text = format!("{:?}", sealed.ssn);
    assert!(
        text.starts_with("Encrypted(SealedField { key_id: "),
        "{text}"
    );
    // An error names the path, never the value.
    let err = codec
        .deserialize(&Context::new("x"), Some(&bytes))
        .unwrap_err();
    let text = format!("{err} {err:?}");
    assert!(!text.contains("078-05"), "{text}");
}

#[test]
fn a_custom_format_gets_paths_too() {
    // FieldFormat for a format of the user's: JSON pretty-printed.
    struct Pretty;
    impl FieldFormat for Pretty {
        type Value = Contract;
        fn encode<T: ?Sized + Serialize>(&self, v: &T, out: &mut Vec<u8>) -> Result<(), Error> {
            serde_json::to_writer_pretty(out, v).map_err(|_| Error::codec("pretty", "encode"))
        }
        fn decode<T: serde::de::DeserializeOwned>(&self, data: &[u8]) -> Result<T, Error> {
            serde_json::from_slice(data).map_err(|_| Error::codec("pretty", "decode"))
        }
    }
    let keyset = Keyset::generate();
    let det = siv();
    let ctx = Context::new("people").with_key(b"p");
    let pretty = FieldEncrypting::new(Pretty, keyset.clone()).with_deterministic(det.clone());
    let bytes = pretty.serialize(&ctx, Some(&sample())).unwrap().unwrap();
    assert!(bytes.contains(&b'\n'));
    let compact = FieldEncrypting::new(Json::<Contract>::new(), keyset).with_deterministic(det);
    assert_eq!(
        compact.deserialize(&ctx, Some(&bytes)).unwrap(),
        Some(sample())
    );
}

/// The `#[serde(with)]` modules: a plain field encrypted as an `Encrypted`
/// one is (the same bytes on the wire for a `String`), `None` the format's
/// null, and, having nowhere to keep sealed bytes, an error for a reader
/// with no keys (never a null, never an empty value).
#[test]
fn plain_fields_with_the_serde_modules() {
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Plain {
        #[serde(with = "tombstone_crypt::field::encrypted")]
        name: String,
        #[serde(with = "tombstone_crypt::field::encrypted")]
        blob: Vec<u8>,
        #[serde(with = "tombstone_crypt::field::encrypted::option")]
        memo: Option<String>,
        #[serde(with = "tombstone_crypt::field::deterministic")]
        email: String,
    }
    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Typed {
        name: Encrypted<String>,
        blob: Encrypted<serde_json::Value>,
        memo: Option<Encrypted<String>>,
        email: Deterministic<String>,
    }
    let keyset = Keyset::generate();
    let det = siv();
    let ctx = Context::new("t").with_key(b"k");
    for memo in [None, Some(String::new()), Some("m".to_owned())] {
        let v = Plain {
            name: String::new(),
            blob: vec![0, 1, 2],
            memo: memo.clone(),
            email: "e".into(),
        };
        let bytes = FieldEncrypting::new(Json::<Plain>::new(), keyset.clone())
            .with_deterministic(det.clone())
            .serialize(&ctx, Some(&v))
            .unwrap()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(json["memo"].is_null(), memo.is_none());
        let codec = FieldEncrypting::new(Json::<Plain>::new(), keyset.clone())
            .with_deterministic(det.clone());
        assert_eq!(
            codec.deserialize(&ctx, Some(&bytes)).unwrap().as_ref(),
            Some(&v)
        );
        // A String field is read by Encrypted<String> as well.
        let typed = FieldEncrypting::new(Json::<Typed>::new(), keyset.clone())
            .with_deterministic(det.clone())
            .deserialize(&ctx, Some(&bytes));
        match typed {
            // The blob's plaintext is bytes (0xFE, then the bytes), not
            // JSON text: Typed's serde_json::Value holds no bytes, and
            // fails, by path.
            Err(Error::Field { path, .. }) => assert_eq!(path, "/blob"),
            other => panic!("{other:?}"),
        }
        let sealed = FieldEncrypting::sealed(Json::<Plain>::new());
        match sealed.deserialize(&ctx, Some(&bytes)) {
            Err(e) => assert!(e.to_string().contains("cannot decode"), "{e}"),
            Ok(v) => panic!("a plain field read with no keys: {v:?}"),
        }
        // bincode
        let codec = FieldEncrypting::new(Bincode::<Plain>::new(), keyset.clone())
            .with_deterministic(det.clone());
        let b = codec.serialize(&ctx, Some(&v)).unwrap();
        assert_eq!(codec.deserialize(&ctx, b.as_deref()).unwrap(), Some(v));
    }
}

/// Field records through a store that logs to a changelog, and a restore:
/// a delete is a tombstone on the log and stays deleted; a record whose
/// optional fields are all `None` is a present record (not a delete) and
/// comes back with its nulls.
#[test]
fn field_records_through_a_change_logging_store_and_a_restore() {
    use tombstone_crypt::store::{
        restore_from, ChangeLoggingStore, KeyValueStore, MemoryChangelog, MemoryStore, TypedStore,
    };
    use tombstone_crypt::Utf8;

    #[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
    struct Account {
        owner: String,
        iban: Encrypted<String>,
        phone: Option<Encrypted<String>>,
        nick: Option<Encrypted<String>>,
    }
    let keyset = Keyset::generate();
    let codec = || FieldEncrypting::new(Json::<Account>::new(), keyset.clone());
    let mut store = TypedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), MemoryChangelog::new()),
        "accounts",
        (Utf8, Utf8),
        codec(),
        codec(),
    );
    let full = Account {
        owner: "a".into(),
        iban: Encrypted::new("FR76 3000".into()),
        phone: Some(Encrypted::new(String::new())),
        nick: Some(Encrypted::new("n".into())),
    };
    let nulls = Account {
        owner: "b".into(),
        iban: Encrypted::new(String::new()),
        phone: None,
        nick: None,
    };
    store.put(&"a".to_owned(), Some(&full)).unwrap();
    store.put(&"b".to_owned(), Some(&nulls)).unwrap();
    store.put(&"c".to_owned(), Some(&full)).unwrap();
    store.delete(&"c".to_owned()).unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(&"c".to_owned()).unwrap(), None);
    assert_eq!(store.get(&"b".to_owned()).unwrap(), Some(nulls.clone()));

    let log = store.inner().changelog().as_slice().to_vec();
    let last = |k: &str| log.iter().rev().find(|r| r.key == k.as_bytes()).unwrap();
    assert_eq!(last("c").value, None, "a delete is a tombstone on the log");
    let b = last("b")
        .value
        .as_deref()
        .expect("null fields are not a delete");
    let v: serde_json::Value = serde_json::from_slice(b).unwrap();
    assert!(v["phone"].is_null() && v["nick"].is_null(), "{v}");
    assert!(v["iban"].is_string(), "an empty field is encrypted: {v}");

    let mut restored = MemoryStore::new();
    restore_from(&mut restored, store.inner().changelog()).unwrap();
    assert_eq!(restored.get(b"c").unwrap(), None);
    let restored = TypedStore::new(restored, "accounts", (Utf8, Utf8), codec(), codec());
    let mut all = restored.all().unwrap();
    all.sort_by(|a, b| a.0.cmp(&b.0));
    assert_eq!(
        all,
        vec![("a".to_owned(), Some(full)), ("b".to_owned(), Some(nulls))]
    );
}

/// An envelope key's DEKs, when a record's fields are read: the KMS calls
/// are handed out as blocking work first (what the typed consumer runs off
/// its worker), so reading the record then calls no KMS; a record whose
/// DEKs are cached, and a keyset with no envelope key, have none.
#[test]
fn envelope_fields_hand_their_kms_calls_out_before_the_read() {
    let (kms, clients, keyset) =
        common::envelope::envelope_keyset("fake-kms://fields/kek-2", DekPolicy::default());
    let det = siv();
    let writer = FieldEncrypting::new(Json::<Contract>::new(), keyset.clone())
        .with_deterministic(det.clone());
    let ctx = Context::new("people").with_key(b"p");
    let bytes = writer.serialize(&ctx, Some(&sample())).unwrap().unwrap();
    // A reader of its own: the writer reads its DEK from its cache.
    let reader = Keyset::from_tink_json_with(&keyset.to_tink_json(), &clients).unwrap();
    let codec = FieldEncrypting::new(Json::<Contract>::new(), reader).with_deterministic(det);
    assert_eq!(kms.decrypt_calls(), 0);
    let work = Deserializer::<Contract>::blocking_work(&codec, &bytes).expect("a DEK to unwrap");
    assert_eq!(kms.decrypt_calls(), 0, "finding the work calls nothing");
    work.run().unwrap();
    assert_eq!(kms.decrypt_calls(), 1, "one DEK for every field");
    assert_eq!(
        codec.deserialize(&ctx, Some(&bytes)).unwrap(),
        Some(sample())
    );
    assert_eq!(kms.decrypt_calls(), 1, "the read calls no KMS");
    assert!(Deserializer::<Contract>::blocking_work(&codec, &bytes).is_none());
    let plain = json_codec(&Keyset::generate());
    let other = plain.serialize(&ctx, Some(&sample())).unwrap().unwrap();
    assert!(Deserializer::<Contract>::blocking_work(&plain, &other).is_none());
}
