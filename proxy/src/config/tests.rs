//! The configuration's checks and the policies it names.

use std::sync::Arc;

use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::Keyset;

use super::file::*;
use super::policies::*;

#[test]
fn first_match_wins_and_unknown_fields_are_refused() {
    let ks = Keyset::generate();
    let p = Policies::new()
        .with_topic("a", TopicPolicy::keyset(ks.clone()))
        .with_prefix("orders.", TopicPolicy::keyset(ks));
    assert!(p.get("a").is_some());
    assert!(p.get("orders.x").is_some());
    assert!(p.get("orders").is_none());
    assert!(p.get("b").is_none());
    let bad = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1","topcs":[]}"#;
    assert!(ProxyConfig::from_json(bad).is_err());
    let good = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1",
        "topics":[{"prefix":"o.","value_keyset":"k.json"}]}"#;
    let c = ProxyConfig::from_json(good).unwrap();
    assert_eq!(c.max_frame_bytes(), DEFAULT_MAX_FRAME_BYTES);
    assert_eq!(c.topics.len(), 1);
}

#[test]
fn tls_kms_and_header_fields_parse_and_paths_follow_the_file() {
    let dir = std::env::temp_dir().join(format!("px-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
    let text = r#"{"listen":"127.0.0.1:1","bootstrap":"x:1",
        "tls":{"cert_file":"c.pem","key_file":"k.pem"},
        "upstream_tls":{"ca_file":"ca.pem","server_name":"kafka"},
        "topics":[{"topic":"t","value_keyset":"v.json","headers":["x-ssn"]}]}"#;
    std::fs::write(dir.join("p.json"), text).unwrap();
    let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
    let tls = c.tls.as_ref().unwrap();
    assert_eq!(
        (&tls.cert_file, &tls.key_file),
        (&dir.join("c.pem"), &dir.join("k.pem"))
    );
    let up = c.upstream_tls.as_ref().unwrap();
    assert_eq!(up.ca_file, dir.join("ca.pem"));
    assert_eq!(up.server_name.as_deref(), Some("kafka"));
    let p = Policies::load(&c).unwrap();
    assert_eq!(p.get("t").unwrap().headers(), ["x-ssn"]);
    assert!(!p.may_block());
    // A KMS key for a key keyset that is not there is refused.
    let mut bad = c.clone();
    bad.topics[0].key_keyset_kms_uri = Some("hcvault://h/transit/keys/k".into());
    assert!(Policies::load(&bad).is_err());
    // An unknown field inside tls is refused.
    let typo = text.replace("\"key_file\"", "\"keyfile\"");
    assert!(ProxyConfig::from_json(&typo).is_err());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_entry_names_one_kind_of_values_and_a_key_store_that_exists() {
    let dir = std::env::temp_dir().join(format!("px-config-subj-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
    std::fs::write(dir.join("kek.json"), Keyset::generate().to_tink_json()).unwrap();
    let load = |entry: &str| load_entry(&dir, entry);
    for (entry, says) in [
        (r#"{"topic":"t"}"#, "exactly one of"),
        (
            r#"{"topic":"t","value_keyset":"v.json","subject_keyset":"kek.json","subject_key_store":"s.redb"}"#,
            "exactly one of",
        ),
        (
            r#"{"topic":"t","subject_keyset":"kek.json"}"#,
            "subject_key_topic",
        ),
        (
            r#"{"topic":"t","value_keyset":"v.json","subject_key_store":"s.redb"}"#,
            "need \"subject_keyset\"",
        ),
        // A mistyped key-store path is an error, never an empty store.
        (
            r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"missing.redb"}"#,
            "missing.redb",
        ),
    ] {
        let e = load(entry).unwrap_err();
        assert!(e.contains(says), "{entry}: {e}");
    }
    assert!(!dir.join("missing.redb").exists(), "a key store was made");
    // The key store's client takes its security settings, and no other
    // (a value is never shown: it may be a secret).
    let text = r#"{"listen":"127.0.0.1:1","bootstrap":"127.0.0.1:1",
        "key_store_client":{"acks":"0","sasl.password":"s3cret"},
        "topics":[{"topic":"t","subject_keyset":"kek.json","subject_key_topic":"ks"}]}"#;
    std::fs::write(dir.join("p.json"), text).unwrap();
    let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
    let e = Policies::load(&c).unwrap_err().to_string();
    assert!(e.contains("\"acks\"") && !e.contains("s3cret"), "{e}");
    // A setting it takes reaches the client: librdkafka refuses this
    // value when the client is made.
    let bogus = text.replace(r#""acks":"0","#, r#""security.protocol":"bogus","#);
    std::fs::write(dir.join("p.json"), bogus).unwrap();
    let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
    let e = Policies::load(&c).unwrap_err().to_string();
    assert!(
        e.contains("security.protocol") && !e.contains("s3cret"),
        "{e}"
    );
    // Headers under subject keys are refused.
    let store = dir.join("s.redb");
    let kek =
        Keyset::from_tink_json(&std::fs::read_to_string(dir.join("kek.json")).unwrap()).unwrap();
    SubjectKeys::create(
        kek,
        Arc::new(tombstone_crypt::shred::RedbKeyStore::create(&store).unwrap()),
    )
    .unwrap();
    load(r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"s.redb"}"#).unwrap();
    let e = load(
        r#"{"topic":"t","subject_keyset":"kek.json","subject_key_store":"s.redb","headers":["x"]}"#,
    )
    .unwrap_err();
    assert!(e.contains("headers"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// The policies of a configuration (written to `dir`) of one topics
/// entry, or why not.
fn load_entry(dir: &std::path::Path, entry: &str) -> Result<(), String> {
    let text =
        format!(r#"{{"listen":"127.0.0.1:1","bootstrap":"127.0.0.1:1","topics":[{entry}]}}"#);
    std::fs::write(dir.join("p.json"), text).unwrap();
    let c = ProxyConfig::from_file(&dir.join("p.json")).unwrap();
    Policies::load(&c).map(|_| ()).map_err(|e| e.to_string())
}

/// A topic Kafka cannot name, and a keyset of the wrong kind for its
/// place, are refused at load, naming the entry.
#[test]
fn illegal_names_and_keysets_of_the_wrong_kind_are_refused_at_load() {
    let dir = std::env::temp_dir().join(format!("px-config-legal-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let siv = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv()).unwrap();
    std::fs::write(dir.join("v.json"), Keyset::generate().to_tink_json()).unwrap();
    std::fs::write(dir.join("siv.json"), siv.to_tink_json()).unwrap();
    let load = |entry: &str| load_entry(&dir, entry);
    load(r#"{"topic":"pay","value_keyset":"v.json","key_keyset":"siv.json"}"#).unwrap();
    load(r#"{"prefix":"pay.","value_keyset":"v.json"}"#).unwrap();
    for (entry, named) in [
        (r#"{"topic":"pay ","value_keyset":"v.json"}"#, "' '"),
        (r#"{"topic":"","value_keyset":"v.json"}"#, "empty"),
        (r#"{"topic":"..","value_keyset":"v.json"}"#, "\"..\""),
        (r#"{"prefix":"pay/","value_keyset":"v.json"}"#, "'/'"),
        (
            r#"{"topic":"pay","value_keyset":"siv.json"}"#,
            "value_keyset",
        ),
        (
            r#"{"topic":"pay","value_keyset":"v.json","key_keyset":"v.json"}"#,
            "key_keyset",
        ),
    ] {
        let e = load(entry).unwrap_err();
        assert!(
            e.contains(named) && e.contains("topics entry"),
            "{entry}: {e}"
        );
    }
    let long = format!(
        r#"{{"topic":"{}","value_keyset":"v.json"}}"#,
        "a".repeat(250)
    );
    assert!(load(&long).unwrap_err().contains("249"));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn no_debug_prints_key_material() {
    let values = Keyset::generate();
    let keys = Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv()).unwrap();
    let p = Policies::new().with_topic(
        "t",
        TopicPolicy::keyset(values.clone())
            .with_record_keys(keys.clone())
            .unwrap(),
    );
    let shown = format!("{p:?}");
    for ks in [values, keys] {
        let json: serde_json::Value = serde_json::from_str(&ks.to_tink_json()).unwrap();
        let value = json["key"][0]["keyData"]["value"].as_str().unwrap();
        let proto =
            base64::Engine::decode(&base64::engine::general_purpose::STANDARD, value).unwrap();
        // The key bytes: after the proto's tag and length (1a 20 or 12 40).
        let key = &proto[2..10];
        let decimal = format!("{key:?}");
        let decimal = decimal.trim_matches(|c| c == '[' || c == ']');
        let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
        assert!(!shown.contains(decimal) && !shown.contains(&hex), "{shown}");
        assert!(!shown.contains(&value[..24]), "{shown}");
    }
}
