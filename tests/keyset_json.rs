//! Tink's cleartext JSON keyset format: round trips, statuses, and clear
//! errors (never quoting key bytes) for bad input.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use tombstone_crypt::error::KeysetErrorKind;
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, EncryptingSerializer, Error, KeyId,
    KeyStatus, Keyset, Serializer,
};

const TYPE_URL: &str = "type.googleapis.com/google.crypto.tink.AesGcmKey";

fn key_json(id: u32, status: &str, prefix: &str, proto: &[u8]) -> String {
    format!(
        r#"{{"keyData":{{"typeUrl":"{TYPE_URL}","value":"{}","keyMaterialType":"SYMMETRIC"}},"status":"{status}","keyId":{id},"outputPrefixType":"{prefix}"}}"#,
        B64.encode(proto)
    )
}

fn proto(key: &[u8]) -> Vec<u8> {
    let mut p = vec![0x1a, key.len() as u8];
    p.extend_from_slice(key);
    p
}

fn keyset_json(primary: u32, keys: &[String]) -> String {
    format!(r#"{{"primaryKeyId":{primary},"key":[{}]}}"#, keys.join(","))
}

fn roundtrip(keyset: &Keyset) -> Vec<u8> {
    let ctx = Context::new("t");
    let ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&ctx, Some(&b"v"[..]))
        .unwrap()
        .unwrap();
    DecryptingDeserializer::new(Bytes, keyset.clone())
        .deserialize(&ctx, Some(&ct))
        .unwrap()
        .unwrap()
}

#[test]
fn json_round_trip_keeps_ids_statuses_and_keys() {
    let mut keyset = Keyset::generate();
    let first = keyset.primary();
    let ct = EncryptingSerializer::new(Bytes, keyset.clone())
        .serialize(&Context::new("t"), Some(&b"old"[..]))
        .unwrap()
        .unwrap();
    keyset.rotate();
    let third = keyset.add_key();
    keyset.disable(third).unwrap();
    let back = Keyset::from_tink_json(&keyset.to_tink_json()).unwrap();
    assert_eq!(back.primary(), keyset.primary());
    assert_eq!(
        back.keys().collect::<Vec<_>>(),
        keyset.keys().collect::<Vec<_>>()
    );
    assert_eq!(back.keys().nth(2), Some((third, KeyStatus::Disabled)));
    let de = DecryptingDeserializer::new(Bytes, back);
    assert_eq!(
        de.deserialize(&Context::new("t"), Some(&ct)).unwrap(),
        Some(b"old".to_vec())
    );
    let _ = first;
}

#[test]
fn the_json_has_tinks_shape() {
    let keyset = Keyset::generate();
    let v: serde_json::Value = serde_json::from_str(&keyset.to_tink_json()).unwrap();
    assert_eq!(v["primaryKeyId"], keyset.primary().0);
    let k = &v["key"][0];
    assert_eq!(k["keyData"]["typeUrl"], TYPE_URL);
    assert_eq!(k["keyData"]["keyMaterialType"], "SYMMETRIC");
    assert_eq!(k["status"], "ENABLED");
    assert_eq!(k["outputPrefixType"], "TINK");
    assert_eq!(k["keyId"], keyset.primary().0);
    let proto = B64.decode(k["keyData"]["value"].as_str().unwrap()).unwrap();
    assert_eq!(proto.len(), 34);
    assert_eq!(&proto[..2], &[0x1a, 0x20]);
}

#[test]
fn aes128_and_explicit_version_are_accepted() {
    let mut p = vec![0x08, 0x00];
    p.extend(proto(&[9u8; 16]));
    let json = keyset_json(5, &[key_json(5, "ENABLED", "TINK", &p)]);
    let keyset = Keyset::from_tink_json(&json).unwrap();
    assert_eq!(keyset.primary(), KeyId(5));
    assert_eq!(roundtrip(&keyset), b"v");
}

#[test]
fn large_key_ids_are_accepted() {
    let json = keyset_json(
        u32::MAX,
        &[key_json(u32::MAX, "ENABLED", "TINK", &proto(&[1; 32]))],
    );
    assert_eq!(
        Keyset::from_tink_json(&json).unwrap().primary(),
        KeyId(u32::MAX)
    );
}

#[test]
fn destroyed_keys_are_dropped_and_disabled_kept() {
    let json = keyset_json(
        1,
        &[
            key_json(1, "ENABLED", "TINK", &proto(&[1; 32])),
            key_json(2, "DISABLED", "TINK", &proto(&[2; 32])),
            r#"{"status":"DESTROYED","keyId":3,"outputPrefixType":"TINK","keyData":{"typeUrl":"type.googleapis.com/google.crypto.tink.AesGcmKey","value":""}}"#.to_owned(),
        ],
    );
    let keyset = Keyset::from_tink_json(&json).unwrap();
    assert_eq!(
        keyset.keys().collect::<Vec<_>>(),
        [
            (KeyId(1), KeyStatus::Enabled),
            (KeyId(2), KeyStatus::Disabled)
        ]
    );
}

fn rejects(json: &str, want: KeysetErrorKind, needle: &str) {
    match Keyset::from_tink_json(json) {
        Ok(_) => panic!("accepted: {json}"),
        Err(Error::Keyset { kind, detail }) => {
            assert_eq!(kind, want, "{detail}");
            assert!(detail.contains(needle), "{detail:?} lacks {needle:?}");
        }
        Err(e) => panic!("wrong error {e:?}"),
    }
}

#[test]
fn bad_keysets_are_clear_errors() {
    use KeysetErrorKind as K;
    let good = key_json(1, "ENABLED", "TINK", &proto(&[1; 32]));
    let one = |status, prefix, proto: &[u8]| keyset_json(1, &[key_json(1, status, prefix, proto)]);
    rejects("", K::Json, "unexpected end");
    rejects("not json", K::Json, "syntax");
    rejects("{}", K::Json, "wrong shape");
    rejects(r#"{"key":[]}"#, K::NoPrimary, "no primaryKeyId");
    rejects(
        &keyset_json(2, std::slice::from_ref(&good)),
        K::BadPrimary,
        "primary key 2",
    );
    rejects(
        &one("DISABLED", "TINK", &proto(&[1; 32])),
        K::BadPrimary,
        "not enabled",
    );
    rejects(
        &one("ENABLED", "RAW", &proto(&[1; 32])),
        K::UnsupportedOutputPrefix,
        "RAW",
    );
    rejects(
        &one("ENABLED", "LEGACY", &proto(&[1; 32])),
        K::UnsupportedOutputPrefix,
        "LEGACY",
    );
    rejects(
        &one("WEIRD", "TINK", &proto(&[1; 32])),
        K::UnknownStatus,
        "unknown status",
    );
    rejects(
        &one("ENABLED", "TINK", &proto(&[1; 24])),
        K::KeyFormat,
        "16 or 32",
    );
    rejects(
        &one("ENABLED", "TINK", &[0x08, 0x01, 0x1a, 0x00]),
        K::KeyFormat,
        "version",
    );
    rejects(&one("ENABLED", "TINK", &[]), K::KeyFormat, "no key_value");
    rejects(
        &keyset_json(1, &[good.clone(), good.clone()]),
        K::DuplicateKeyId,
        "twice",
    );
    let unknown = "type.googleapis.com/google.crypto.tink.ChaCha20Poly1305Key";
    rejects(
        &keyset_json(1, &[good.replace(TYPE_URL, unknown)]),
        K::UnsupportedKeyType,
        unknown,
    );
    rejects(
        &keyset_json(1, &[good.replace("SYMMETRIC", "ASYMMETRIC_PRIVATE")]),
        K::KeyMaterialType,
        "SYMMETRIC",
    );
    rejects(&good.replace(r#""value":""#, r#""value":"!!"#), K::Json, "");
    rejects(
        &keyset_json(1, &[good.replace(r#""value":""#, r#""value":"!!"#)]),
        K::Base64,
        "base64",
    );
    // Key ids are 32-bit, signed or unsigned; anything else is refused.
    rejects(
        r#"{"primaryKeyId":-1,"key":[]}"#,
        K::BadPrimary,
        "primary key 4294967295",
    );
    rejects(
        r#"{"primaryKeyId":4294967296,"key":[]}"#,
        K::Json,
        "not a 32-bit",
    );
    rejects(
        r#"{"primaryKeyId":-2147483649,"key":[]}"#,
        K::Json,
        "not a 32-bit",
    );
    // A key that is not destroyed needs its key data.
    rejects(
        r#"{"primaryKeyId":1,"key":[{"status":"ENABLED","keyId":1,"outputPrefixType":"TINK"}]}"#,
        K::Json,
        "no keyData",
    );
}

/// What Tink's own writers and protobuf's JSON readers accept, read here too.
#[test]
fn tink_json_as_tink_writes_it() {
    let key = proto(&[5; 32]);
    // Older Tink Java writers print ids of 2^31 and above as negative
    // signed 32-bit integers: -1 is 0xffffffff.
    let signed = keyset_json(1, &[key_json(1, "ENABLED", "TINK", &key)])
        .replace(r#""primaryKeyId":1"#, r#""primaryKeyId":-1"#)
        .replace(r#""keyId":1"#, r#""keyId":-1"#);
    let keyset = Keyset::from_tink_json(&signed).unwrap();
    assert_eq!(keyset.primary(), KeyId(u32::MAX));
    assert_eq!(
        keyset.to_tink_json(),
        keyset_json(u32::MAX, &[key_json(u32::MAX, "ENABLED", "TINK", &key)])
    );
    // URL-safe and unpadded base64 (protobuf's JSON readers take both).
    let odd = proto(&[0xfb; 32]); // base64 of it holds '+' / '/' and padding
    let std_b64 = B64.encode(&odd);
    assert!(std_b64.contains('/') || std_b64.contains('+'));
    assert!(std_b64.ends_with('='));
    let url = std_b64.replace('+', "-").replace('/', "_");
    for text in [
        url.clone(),
        url.trim_end_matches('=').to_owned(),
        std_b64.trim_end_matches('=').to_owned(),
    ] {
        let json = keyset_json(1, &[key_json(1, "ENABLED", "TINK", &odd)]).replace(&std_b64, &text);
        assert!(json.contains(&text));
        let read = Keyset::from_tink_json(&json).unwrap();
        // The same key: it decrypts what the standard form encrypts.
        let std_keyset =
            Keyset::from_tink_json(&keyset_json(1, &[key_json(1, "ENABLED", "TINK", &odd)]))
                .unwrap();
        let ct = std_keyset.encrypt(b"pt", b"").unwrap();
        assert_eq!(read.decrypt(&ct, b"").unwrap(), b"pt");
    }
    // A DESTROYED key as Tink writes it, without its key data, is dropped.
    let json = keyset_json(
        1,
        &[
            key_json(1, "ENABLED", "TINK", &key),
            r#"{"status":"DESTROYED","keyId":3,"outputPrefixType":"TINK"}"#.to_owned(),
        ],
    );
    assert_eq!(Keyset::from_tink_json(&json).unwrap().len(), 1);
}

#[test]
fn errors_never_quote_key_material() {
    // A key value of the wrong size, and a wrongly typed value field: neither
    // message may contain the base64 text.
    let secret = B64.encode(proto(&[0xab; 24]));
    let json = keyset_json(1, &[key_json(1, "ENABLED", "TINK", &proto(&[0xab; 24]))]);
    let err = Keyset::from_tink_json(&json).unwrap_err();
    assert!(!format!("{err} {err:?}").contains(&secret[4..20]));
    let json = format!(
        r#"{{"primaryKeyId":1,"key":[{{"keyData":{{"typeUrl":"x","value":["{secret}"]}},"status":"ENABLED","keyId":1,"outputPrefixType":"TINK"}}]}}"#
    );
    let err = Keyset::from_tink_json(&json).unwrap_err();
    assert!(!format!("{err} {err:?}").contains(&secret[4..20]), "{err}");
}

/// A keyset of one kind of key: a deterministic (AES-SIV) key beside an
/// AES-GCM primary, or the other way round, is refused at import, as
/// `add_key_with` refuses to add one (it would pass a check of the
/// primary, and fail at its first use).
#[test]
fn a_keyset_mixing_deterministic_and_randomized_keys_is_refused() {
    use tombstone_crypt::{KeyTemplate, Keyset};
    let gcm = Keyset::generate();
    let siv = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let merge = |primary: &Keyset, other: &Keyset| {
        let mut a: serde_json::Value = serde_json::from_str(&primary.to_tink_json()).unwrap();
        let b: serde_json::Value = serde_json::from_str(&other.to_tink_json()).unwrap();
        let extra = b["key"][0].clone();
        a["key"].as_array_mut().unwrap().push(extra);
        a.to_string()
    };
    for (primary, other) in [(&gcm, &siv), (&siv, &gcm)] {
        let e = Keyset::from_tink_json(&merge(primary, other)).unwrap_err();
        assert!(e.to_string().contains("one kind"), "{e}");
    }
    // One kind: loads.
    let mut two = gcm.clone();
    two.rotate();
    Keyset::from_tink_json(&two.to_tink_json()).unwrap();
}
