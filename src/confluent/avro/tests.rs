//! The Avro encoder and checks against `apache-avro`'s.

use apache_avro::types::Value as Avro;
use serde_json::json;

use super::*;

/// The encoder here writes what `apache-avro` writes, for every type.
#[test]
pub(super) fn encodes_as_apache_avro() {
    let schema = json!({"type": "record", "name": "All", "namespace": "t", "fields": [
        {"name": "n", "type": "null"},
        {"name": "b", "type": "boolean"},
        {"name": "i", "type": "int"},
        {"name": "l", "type": "long"},
        {"name": "f", "type": "float"},
        {"name": "d", "type": "double"},
        {"name": "y", "type": "bytes"},
        {"name": "s", "type": "string"},
        {"name": "x", "type": {"type": "fixed", "name": "F", "size": 3}},
        {"name": "e", "type": {"type": "enum", "name": "E", "symbols": ["A", "B", "C"]}},
        {"name": "u", "type": ["null", "string", "long"]},
        {"name": "a", "type": {"type": "array", "items": "long"}},
        {"name": "m", "type": {"type": "map", "values": "string"}},
        {"name": "r", "type": {"type": "record", "name": "In", "fields": [
            {"name": "z", "type": "string"}]}},
        {"name": "again", "type": "In"},
        {"name": "date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "dec", "type": {"type": "bytes", "logicalType": "decimal", "precision": 6, "scale": 2}},
    ]});
    let parsed = AvroSchema::parse(&schema.to_string()).unwrap();
    for (long, s, n) in [
        (0i64, String::new(), 0),
        (-1, "ü✓".to_owned(), 5),
        (i64::MAX, "long ".repeat(100), 300),
    ] {
        let text = || Avro::String(s.clone());
        let value = Avro::Record(vec![
            ("n".into(), Avro::Null),
            ("b".into(), Avro::Boolean(long % 2 == 0)),
            ("i".into(), Avro::Int(-123_456)),
            ("l".into(), Avro::Long(long)),
            ("f".into(), Avro::Float(1.5)),
            ("d".into(), Avro::Double(-2.25)),
            ("y".into(), Avro::Bytes(vec![0, 1, 255])),
            ("s".into(), text()),
            ("x".into(), Avro::Fixed(3, vec![7, 8, 9])),
            ("e".into(), Avro::Enum(2, "C".into())),
            ("u".into(), Avro::Union(1, Box::new(text()))),
            (
                "a".into(),
                Avro::Array((0..n).map(|i| Avro::Long(i64::MIN + i)).collect()),
            ),
            ("m".into(), Avro::Map([("k".to_owned(), text())].into())),
            ("r".into(), Avro::Record(vec![("z".into(), text())])),
            ("again".into(), Avro::Record(vec![("z".into(), text())])),
            ("date".into(), Avro::Date(19_000)),
            ("ts".into(), Avro::TimestampMillis(long)),
            (
                "id".into(),
                Avro::Uuid(apache_avro::Uuid::from_u128(
                    0x550e_8400_e29b_41d4_a716_4466_5544_0000,
                )),
            ),
            (
                "dec".into(),
                Avro::Decimal(apache_avro::Decimal::from(vec![1u8, 2])),
            ),
        ]);
        let theirs = apache_avro::to_avro_datum(&parsed.schema, value.clone()).unwrap();
        let ours = parsed.write(value).unwrap();
        assert_eq!(&ours[..], &theirs[..]);
    }
    // A value that does not fit its schema is an error, not bytes.
    let short = AvroSchema::parse(
        r#"{"type": "record", "name": "R", "fields": [{"name": "a", "type": "long"}]}"#,
    )
    .unwrap();
    let wrong = Avro::Record(vec![("a".into(), Avro::String("x".into()))]);
    assert!(short.write(wrong).is_err());
}
