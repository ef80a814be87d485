//! Contract point 8: no `Debug` (or error) prints key bytes.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use tombstone_crypt::{
    Bincode, Bytes, DecryptingDeserializer, EncryptingSerializer, Json, Keyset, Utf8,
};

/// The raw key bytes of every key, read from the cleartext export.
fn key_bytes(keyset: &Keyset) -> Vec<Vec<u8>> {
    let v: serde_json::Value = serde_json::from_str(&keyset.to_tink_json()).unwrap();
    v["key"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| B64.decode(k["keyData"]["value"].as_str().unwrap()).unwrap()[2..].to_vec())
        .collect()
}

/// Every way key bytes could show up in text.
fn renderings(key: &[u8]) -> Vec<String> {
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    vec![
        hex.clone(),
        hex.to_uppercase(),
        format!("{key:?}")[1..40].to_owned(),
        B64.encode(key)[..24].to_owned(),
        B64.encode([&[0x1a, 0x20][..], key].concat())[..24].to_owned(),
    ]
}

#[test]
fn debug_shows_ids_and_statuses_but_no_key_bytes() {
    let mut keyset = Keyset::generate();
    keyset.rotate();
    let staged = keyset.add_key();
    keyset.disable(staged).unwrap();
    let printed = [
        format!("{keyset:?}"),
        format!("{keyset:#?}"),
        format!("{:?}", EncryptingSerializer::new(Bytes, keyset.clone())),
        format!("{:?}", DecryptingDeserializer::new(Utf8, keyset.clone())),
        format!(
            "{:?}",
            EncryptingSerializer::new(Bincode::<u8>::new(), keyset.clone())
        ),
        format!(
            "{:?}",
            DecryptingDeserializer::new(Json::<u8>::new(), keyset.clone())
        ),
    ];
    let keys = key_bytes(&keyset);
    assert_eq!(keys.len(), 3);
    for text in &printed {
        for (id, _) in keyset.keys() {
            assert!(text.contains(&id.0.to_string()), "{text} lacks key id {id}");
        }
        for key in &keys {
            for r in renderings(key) {
                assert!(!text.contains(&r), "Debug output leaks key bytes: {text}");
            }
        }
    }
    assert!(printed[0].contains("Disabled"));
}

#[test]
fn the_leak_check_can_fail() {
    // Negative control for the check above: a rendering that does print key
    // bytes is caught.
    let keyset = Keyset::generate();
    let key = &key_bytes(&keyset)[0];
    let leaky = format!("Keyset {{ key: {key:?} }}");
    assert!(renderings(key).iter().any(|r| leaky.contains(r)));
}
