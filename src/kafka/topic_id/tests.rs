//! A topic's id asked of a broker: settings, TLS, SASL, answers.
use super::*;

#[test]
fn a_timeout_of_any_length_is_taken() {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", "127.0.0.1:1");
    assert!(topic_identity(&c, "t", Duration::MAX).is_err());
    assert!(topic_identity(&c, "t", Duration::ZERO).is_err());
}

#[test]
fn ids_print_and_parse_as_kafka_does() {
    let id = TopicId::from_bytes([0xfb; 16]);
    let s = id.to_string();
    assert_eq!(s.len(), 22);
    assert_eq!(s.parse::<TopicId>().unwrap(), id);
    assert!("not-an-id".parse::<TopicId>().is_err());
}

#[test]
fn settings_this_lookup_does_not_speak_are_unknown_never_an_error() {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", "127.0.0.1:1");
    for (k, v) in [
        ("security.protocol", "sasl_plaintext"),
        ("sasl.mechanism", "GSSAPI"),
    ] {
        c.set(k, v);
    }
    let e = Settings::of(&c).err().unwrap();
    assert!(e.contains("GSSAPI"), "{e}");
    c.set("sasl.mechanism", "OAUTHBEARER");
    assert!(Settings::of(&c).is_err());
    let mut ssl = ClientConfig::new();
    ssl.set("bootstrap.servers", "127.0.0.1:1")
        .set("security.protocol", "SSL");
    assert!(Settings::of(&ssl)
        .err()
        .unwrap()
        .contains("ssl.ca.location"));
    ssl.set("ssl.ca.location", "/x")
        .set("ssl.endpoint.identification.algorithm", "none");
    assert!(Settings::of(&ssl).err().unwrap().contains("unchecked"));
    // The password is never in the reason.
    let mut p = ClientConfig::new();
    p.set("bootstrap.servers", "h:1")
        .set("security.protocol", "sasl_ssl")
        .set("sasl.mechanism", "PLAIN")
        .set("sasl.username", "u")
        .set("sasl.password", "hunter2-secret");
    let e = Settings::of(&p).err().unwrap();
    assert!(!e.contains("hunter2"), "{e}");
}
