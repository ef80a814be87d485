//! Values stay values: a field of a self-describing type (`serde_json::Value`,
//! an untagged enum, `f64`, nested `Option`s) reads back as the value that
//! was written, in JSON and in bincode records, randomized and
//! deterministic; or it is refused when it is written, with an error that
//! names the field's path. Never written to read back as another value,
//! or not at all.
//!
//! A control field that guesses, as a reader does that is not told what a
//! plaintext holds (a string's UTF-8, else JSON text), must fail the same
//! property.

use proptest::prelude::*;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tombstone_crypt::field::{self, Deterministic, Encrypted, FieldEncrypting};
use tombstone_crypt::{
    AadPolicy, Bincode, Context, Deserializer as _, Error, Json, KeyTemplate, Keyset,
    Serializer as _,
};

// ---- the types ----

/// An untagged enum whose variants a guessing reader confuses: `Text("42")`
/// is also the JSON of `Num(42)`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
enum Loose {
    Num(i64),
    Flag(bool),
    Text(String),
    Many(Vec<Loose>),
}

/// Bytes that serde writes as bytes (what `serde_bytes` does).
#[derive(Clone, Debug, PartialEq)]
struct Bytes(Vec<u8>);

impl Serialize for Bytes {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(&self.0)
    }
}

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut a: A) -> Result<Bytes, A::Error> {
                let mut out = Vec::new();
                while let Some(b) = a.next_element()? {
                    out.push(b);
                }
                Ok(Bytes(out))
            }
        }
        d.deserialize_byte_buf(V)
    }
}

/// Bytes or text, untagged: bytes that are UTF-8 must not read back as text.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(untagged)]
enum Blob {
    Raw(Bytes),
    Text(String),
}

/// A struct whose JSON can lose a value: `Some(None)` is `null`, as `None`
/// is; a NaN is `null` too.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Reading {
    level: Option<Option<u8>>,
    value: f64,
    note: Option<String>,
}

// ---- the field types under test, and the control ----

/// A field type: built from a value, read back to one.
trait Field<T>: Serialize + DeserializeOwned {
    const NAME: &'static str;
    fn new(v: T) -> Self;
    fn into_value(self) -> Option<T>;
}

impl<T: Serialize + DeserializeOwned> Field<T> for Encrypted<T> {
    const NAME: &'static str = "Encrypted";
    fn new(v: T) -> Self {
        Encrypted::new(v)
    }
    fn into_value(self) -> Option<T> {
        self.into_inner().ok()
    }
}

impl<T: Serialize + DeserializeOwned> Field<T> for Deterministic<T> {
    const NAME: &'static str = "Deterministic";
    fn new(v: T) -> Self {
        Deterministic::new(v)
    }
    fn into_value(self) -> Option<T> {
        self.into_inner().ok()
    }
}

/// The control: a field whose plaintext is a string's UTF-8 or else the
/// value's JSON text, and whose reader guesses which (JSON first, then the
/// text as a string). It is not encrypted: only the encoding is on trial.
struct Guessing<T>(T);

impl<T: Serialize> Serialize for Guessing<T> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let plain = match serde_json::to_value(&self.0).map_err(serde::ser::Error::custom)? {
            Value::String(text) => text.into_bytes(),
            _ => serde_json::to_vec(&self.0).map_err(serde::ser::Error::custom)?,
        };
        s.serialize_bytes(&plain)
    }
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Guessing<T> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let plain = Bytes::deserialize(d)?.0;
        if let Ok(v) = serde_json::from_slice(&plain) {
            return Ok(Guessing(v));
        }
        let text = String::from_utf8(plain).map_err(serde::de::Error::custom)?;
        T::deserialize(serde::de::value::StringDeserializer::<
            serde::de::value::Error,
        >::new(text))
        .map(Guessing)
        .map_err(serde::de::Error::custom)
    }
}

impl<T: Serialize + DeserializeOwned> Field<T> for Guessing<T> {
    const NAME: &'static str = "Guessing";
    fn new(v: T) -> Self {
        Guessing(v)
    }
    fn into_value(self) -> Option<T> {
        Some(self.0)
    }
}

// ---- the property ----

#[derive(Serialize, Deserialize)]
struct Record<F> {
    id: u32,
    v: F,
}

#[derive(Clone, Copy, Debug)]
enum Format {
    Json,
    Bincode,
}

/// What became of a value written in a field.
#[derive(Debug)]
enum Outcome<T> {
    /// Refused when written.
    Refused(Error),
    /// Written, and read back as this.
    Read(T),
    /// Written, and not read back.
    Unreadable(Error),
}

/// Writes `value` in a field of type `F` at `/v` of a record in `format`,
/// and reads it back.
fn write_and_read<T, F: Field<T>>(value: T, format: Format) -> Outcome<T> {
    let keyset = Keyset::generate();
    let siv = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let ctx = Context::new("readings").with_key(b"r-1");
    let record = Record {
        id: 7,
        v: F::new(value),
    };
    let written = match format {
        Format::Json => FieldEncrypting::new(Json::<Record<F>>::new(), keyset.clone())
            .with_deterministic(siv.clone())
            .serialize(&ctx, Some(&record)),
        Format::Bincode => FieldEncrypting::new(Bincode::<Record<F>>::new(), keyset.clone())
            .with_deterministic(siv.clone())
            .serialize(&ctx, Some(&record)),
    };
    let bytes = match written {
        Ok(b) => b.expect("a present record is present bytes"),
        Err(e) => return Outcome::Refused(e),
    };
    let read = match format {
        Format::Json => FieldEncrypting::new(Json::<Record<F>>::new(), keyset)
            .with_deterministic(siv)
            .deserialize(&ctx, Some(&bytes)),
        Format::Bincode => FieldEncrypting::new(Bincode::<Record<F>>::new(), keyset)
            .with_deterministic(siv)
            .deserialize(&ctx, Some(&bytes)),
    };
    match read {
        Ok(r) => {
            let r = r.expect("present bytes are a present record");
            assert_eq!(r.id, 7);
            Outcome::Read(r.v.into_value().expect("read with keys: open"))
        }
        Err(e) => Outcome::Unreadable(e),
    }
}

/// The property for one value: refused when written exactly when
/// `refused`, with an error at `/v` that says why (`why`, in its message);
/// otherwise read back `same` as written.
fn check<T: Clone + std::fmt::Debug, F: Field<T>>(
    value: &T,
    format: Format,
    refused: Option<&str>,
    same: impl Fn(&T, &T) -> bool,
) -> Result<(), String> {
    let name = F::NAME;
    match (write_and_read::<T, F>(value.clone(), format), refused) {
        (Outcome::Read(back), None) if same(&back, value) => Ok(()),
        (Outcome::Read(back), None) => Err(format!(
            "{name} {format:?}: {value:?} read back as {back:?}"
        )),
        (Outcome::Read(back), Some(why)) => Err(format!(
            "{name} {format:?}: {value:?} should be refused ({why}), read back as {back:?}"
        )),
        (Outcome::Unreadable(e), _) => Err(format!(
            "{name} {format:?}: {value:?} was written and does not read back: {e}"
        )),
        (Outcome::Refused(e), None) => Err(format!("{name} {format:?}: {value:?} refused: {e}")),
        (Outcome::Refused(e), Some(why)) => match &e {
            Error::Field { path, cause } if path == "/v" && cause.to_string().contains(why) => {
                Ok(())
            }
            _ => Err(format!(
                "{name} {format:?}: {value:?} refused, but not at /v for {why:?}: {e}"
            )),
        },
    }
}

/// [`check`] for both field types, in both formats.
fn check_all<T: Serialize + DeserializeOwned + Clone + std::fmt::Debug>(
    value: &T,
    refused: Option<&str>,
    same: impl Fn(&T, &T) -> bool + Copy,
) -> Result<(), String> {
    for format in [Format::Json, Format::Bincode] {
        check::<T, Encrypted<T>>(value, format, refused, same)?;
        check::<T, Deterministic<T>>(value, format, refused, same)?;
    }
    Ok(())
}

// What a refusal says (a part of each message).
const NULL: &str = "null";
const NOT_FINITE: &str = "NaN or infinite";
const COLLAPSES: &str = "Some(None)";

/// Why a value of `Option<Option<T>>` is refused: `None` is a null field
/// (write `Option<Encrypted<T>>`); `Some(None)` would be a null too.
fn nested_refusal<T>(v: &Option<Option<T>>) -> Option<&'static str> {
    match v {
        None => Some(NULL),
        Some(None) => Some(COLLAPSES),
        Some(Some(_)) => None,
    }
}

// ---- the strategies ----

/// Strings that are also JSON texts, strings that are not, and any text.
fn text() -> impl Strategy<Value = String> {
    prop_oneof![
        prop::sample::select(vec![
            "", "null", "12", "-0", "1e3", "true", "false", "hello", "C-42", "\"x\"", "[1]", "{}",
            " 7 ", "NaN",
        ])
        .prop_map(str::to_owned),
        "[a-z0-9 \"\\[\\]{},:.-]{0,8}",
        any::<String>(),
    ]
}

fn number() -> impl Strategy<Value = serde_json::Number> {
    prop_oneof![
        any::<i64>().prop_map(serde_json::Number::from),
        any::<u64>().prop_map(serde_json::Number::from),
        any::<f64>().prop_filter_map("finite", serde_json::Number::from_f64),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number().prop_map(Value::Number),
        text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 24, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map(text(), inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

fn loose() -> impl Strategy<Value = Loose> {
    let leaf = prop_oneof![
        any::<i64>().prop_map(Loose::Num),
        any::<bool>().prop_map(Loose::Flag),
        text().prop_map(Loose::Text),
    ];
    leaf.prop_recursive(2, 8, 3, |inner| {
        prop::collection::vec(inner, 0..3).prop_map(Loose::Many)
    })
}

/// Floats, with the ones JSON cannot hold often.
fn float() -> impl Strategy<Value = f64> {
    prop_oneof![
        Just(f64::NAN),
        Just(f64::INFINITY),
        Just(f64::NEG_INFINITY),
        Just(-0.0),
        any::<f64>(),
    ]
}

fn nested<T: Strategy>(t: T) -> impl Strategy<Value = Option<Option<T::Value>>>
where
    T::Value: Clone + std::fmt::Debug,
{
    prop_oneof![Just(None), Just(Some(None)), t.prop_map(|v| Some(Some(v))),]
}

fn bytes() -> impl Strategy<Value = Bytes> {
    prop_oneof![
        text().prop_map(|t| Bytes(t.into_bytes())),
        prop::collection::vec(any::<u8>(), 0..12).prop_map(Bytes),
    ]
}

/// Floats compared by their bits (`-0.0` is not `0.0`), NaN never equal.
fn same_float(a: &f64, b: &f64) -> bool {
    a.to_bits() == b.to_bits()
}

fn same_reading(a: &Reading, b: &Reading) -> bool {
    a.level == b.level && a.note == b.note && same_float(&a.value, &b.value)
}

/// The first reason in the order the struct is written: `level`, then
/// `value`.
fn reading_refusal(r: &Reading) -> Option<&'static str> {
    if r.level == Some(None) {
        Some(COLLAPSES)
    } else if !r.value.is_finite() {
        Some(NOT_FINITE)
    } else {
        None
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `serde_json::Value`: a string stays a string ("null", "12" and
    /// "hello" included), a number a number; a null is refused (a null
    /// field is `Option<Encrypted<T>>`'s `None`).
    #[test]
    fn json_values_stay_values(v in json_value()) {
        let refused = v.is_null().then_some(NULL);
        prop_assert_eq!(check_all(&v, refused, PartialEq::eq), Ok(()));
    }

    /// An untagged enum: `Text("42")` is not `Num(42)`.
    #[test]
    fn untagged_variants_stay_variants(v in loose()) {
        prop_assert_eq!(check_all(&v, None, PartialEq::eq), Ok(()));
    }

    /// Bytes stay bytes, as a field and in an untagged enum (bytes that are
    /// UTF-8 included).
    #[test]
    fn bytes_stay_bytes(b in bytes(), t in text()) {
        prop_assert_eq!(check_all(&b, None, PartialEq::eq), Ok(()));
        prop_assert_eq!(check_all(&Blob::Raw(b), None, PartialEq::eq), Ok(()));
        prop_assert_eq!(check_all(&Blob::Text(t), None, PartialEq::eq), Ok(()));
    }

    /// A float reads back with the same bits; NaN and the infinities, which
    /// JSON cannot hold, are refused, alone and in a list.
    #[test]
    fn floats_stay_floats_or_are_refused(f in float(), g in float(), h in any::<f32>()) {
        let refused = (!f.is_finite()).then_some(NOT_FINITE);
        prop_assert_eq!(check_all(&f, refused, same_float), Ok(()));
        let refused = (!h.is_finite()).then_some(NOT_FINITE);
        prop_assert_eq!(
            check_all(&h, refused, |a: &f32, b| a.to_bits() == b.to_bits()),
            Ok(())
        );
        let list = vec![f, g];
        let refused = (!f.is_finite() || !g.is_finite()).then_some(NOT_FINITE);
        prop_assert_eq!(
            check_all(&list, refused, |a: &Vec<f64>, b| a.len() == b.len()
                && a.iter().zip(b).all(|(x, y)| same_float(x, y))),
            Ok(())
        );
    }

    /// `Option<Option<T>>`: `Some(Some(v))` reads back; `Some(None)`, which
    /// would read back as `None` or not at all, is refused, and `None` is a
    /// null. Inside a struct, `Some(None)` is refused too.
    #[test]
    fn nested_options_stay_nested_or_are_refused(
        n in nested(any::<u32>()),
        s in nested(text()),
        r in (nested(any::<u8>()), float(), proptest::option::of(text())),
    ) {
        prop_assert_eq!(check_all(&n, nested_refusal(&n), PartialEq::eq), Ok(()));
        prop_assert_eq!(check_all(&s, nested_refusal(&s), PartialEq::eq), Ok(()));
        let r = Reading { level: r.0, value: r.1, note: r.2 };
        prop_assert_eq!(check_all(&r, reading_refusal(&r), same_reading), Ok(()));
    }
}

/// The values of the issue, one by one.
#[test]
fn the_values_that_read_back_as_others() {
    for v in [
        json!("null"),
        json!("12"),
        json!("hello"),
        json!("true"),
        json!(""),
        json!(12),
        json!([1, "2", null]),
        json!({"a": "null"}),
    ] {
        assert_eq!(check_all(&v, None, PartialEq::eq), Ok(()));
    }
    for v in [
        Loose::Text("42".into()),
        Loose::Text("C-42".into()),
        Loose::Num(42),
    ] {
        assert_eq!(check_all(&v, None, PartialEq::eq), Ok(()));
    }
    // Floats serde_json's default parse reads back one unit in the last
    // place off.
    for f in [
        -1.1454201529009263e-288,
        -7.861662627429501e173,
        -2.5403756319681578e51,
    ] {
        assert_eq!(check_all(&f, None, same_float), Ok(()));
        assert_eq!(check_all(&json!([f]), None, PartialEq::eq), Ok(()));
    }
    assert_eq!(check_all(&f64::NAN, Some(NOT_FINITE), same_float), Ok(()));
    let collapsing: Option<Option<u32>> = Some(None);
    assert_eq!(
        check_all(&collapsing, Some(COLLAPSES), PartialEq::eq),
        Ok(())
    );
}

/// The control that guesses what its plaintext holds fails the property,
/// in both formats: the string "12" reads back as the number 12, and the
/// string "null" does not read back as a string.
#[test]
fn the_guessing_control_fails_the_property() {
    for format in [Format::Json, Format::Bincode] {
        for v in [json!("12"), json!("null"), json!("[1]")] {
            let err = check::<Value, Guessing<Value>>(&v, format, None, PartialEq::eq)
                .expect_err("the guessing control passed");
            assert!(err.contains("read back as"), "{err}");
        }
        let err =
            check::<Loose, Guessing<Loose>>(&Loose::Text("42".into()), format, None, PartialEq::eq)
                .expect_err("the guessing control passed");
        assert!(err.contains("Num(42)"), "{err}");
        // It is wrong only there: a number round-trips.
        assert_eq!(
            check::<Value, Guessing<Value>>(&json!(12), format, None, PartialEq::eq),
            Ok(())
        );
    }
}

/// A field's plaintext says what it holds, and a string's is its UTF-8
/// alone: what Tink and Confluent's field encryption encrypt for a string
/// (docs/FORMAT.md, "Encrypted fields").
#[test]
fn a_fields_plaintext_says_what_it_holds() {
    fn plaintext<T: Serialize + DeserializeOwned>(v: T) -> Vec<u8> {
        let keyset = Keyset::generate();
        let ctx = Context::new("t").with_key(b"k");
        let record = Record {
            id: 1,
            v: Encrypted::new(v),
        };
        let bytes = FieldEncrypting::new(Json::<Record<Encrypted<T>>>::new(), keyset.clone())
            .serialize(&ctx, Some(&record))
            .unwrap()
            .unwrap();
        let text: Value = serde_json::from_slice(&bytes).unwrap();
        let ct = {
            use base64::Engine as _;
            base64::engine::general_purpose::STANDARD
                .decode(text["v"].as_str().unwrap())
                .unwrap()
        };
        let ad = field::associated_data(&ctx, AadPolicy::TopicAndKey, "/v").unwrap();
        keyset.decrypt(&ct, &ad).unwrap()
    }
    assert_eq!(plaintext("hello".to_owned()), b"hello");
    assert_eq!(plaintext(String::new()), b"");
    assert_eq!(plaintext(json!("12")), b"12");
    assert_eq!(plaintext(Some("x".to_owned())), b"x");
    assert_eq!(plaintext(Bytes(b"ab".to_vec())), b"\xfeab");
    assert_eq!(plaintext(12u32), b"\xff12");
    assert_eq!(plaintext(json!(12)), b"\xff12");
    assert_eq!(plaintext(json!({"a": "b"})), b"\xff{\"a\":\"b\"}");
    assert_eq!(plaintext(vec![1u8, 2]), b"\xff[1,2]");
}
