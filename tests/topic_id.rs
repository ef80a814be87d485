//! A topic's id from the broker (`kafka::topic_identity`), on Apache Kafka:
//! the same topic answers the same id; a topic deleted and made again
//! under its name answers another; a topic that does not exist is an
//! error; settings the lookup does not speak give no id, never an error.
#![cfg(feature = "kafka")]

use crate::common;

use std::time::{Duration, Instant};

use common::kafka::{apache_kafka, client_config, create_topic, fresh_topic};
use tombstone_crypt::kafka::rdkafka::admin::{AdminClient, AdminOptions};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::{topic_identity, TopicIdentity};

const TIMEOUT: Duration = Duration::from_secs(10);

fn known(bootstrap: &str, topic: &str) -> tombstone_crypt::kafka::TopicId {
    match topic_identity(&client_config(bootstrap), topic, TIMEOUT).unwrap() {
        TopicIdentity::Known(id) => id,
        TopicIdentity::Unknown(why) => panic!("no id for {topic}: {why}"),
    }
}

#[test]
fn a_topic_made_again_under_its_name_has_another_id() {
    let Some(bootstrap) = apache_kafka() else {
        return;
    };
    let topic = fresh_topic("topic-id");
    create_topic(&bootstrap, &topic, 1);
    let first = known(&bootstrap, &topic);
    assert_eq!(known(&bootstrap, &topic), first, "asked twice");
    assert_eq!(
        first
            .to_string()
            .parse::<tombstone_crypt::kafka::TopicId>()
            .unwrap(),
        first
    );

    let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap).create().unwrap();
    for r in
        futures_executor::block_on(admin.delete_topics(&[&topic], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    // Deleted: an error (UNKNOWN_TOPIC_OR_PARTITION), once the deletion
    // is through.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match topic_identity(&client_config(&bootstrap), &topic, TIMEOUT) {
            Err(e) => {
                assert!(e.to_string().contains("no such topic"), "{e}");
                break;
            }
            Ok(_) => assert!(Instant::now() < deadline, "{topic} still there"),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    // Made again (the name is free once the deletion is through).
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap).create().unwrap();
        let new = tombstone_crypt::kafka::rdkafka::admin::NewTopic::new(
            &topic,
            1,
            tombstone_crypt::kafka::rdkafka::admin::TopicReplication::Fixed(1),
        );
        let r = futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new()))
            .unwrap()
            .remove(0);
        if r.is_ok() {
            break;
        }
        assert!(Instant::now() < deadline, "{topic} not made again: {r:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let second = known(&bootstrap, &topic);
    assert_ne!(second, first, "a topic made again kept its id");
}

#[test]
fn settings_the_lookup_does_not_speak_give_no_id() {
    let Some(bootstrap) = apache_kafka() else {
        return;
    };
    let mut c = client_config(&bootstrap);
    c.set("security.protocol", "SASL_PLAINTEXT")
        .set("sasl.mechanism", "GSSAPI");
    match topic_identity(&c, "any", TIMEOUT).unwrap() {
        TopicIdentity::Unknown(why) => assert!(why.contains("GSSAPI"), "{why}"),
        known => panic!("{known:?}"),
    }
    // A broker that is not there: an error.
    let e = topic_identity(&client_config("127.0.0.1:1"), "any", TIMEOUT).unwrap_err();
    assert!(e.to_string().contains("connect"), "{e}");
}

/// Over TLS with SASL, as a client configured for it: a broker of the
/// test's own with a SASL_SSL listener (a CA of its own; PLAIN and SCRAM):
/// each mechanism gives the id the plaintext listener gives. A wrong
/// password, and a CA that did not sign the broker's certificate, are
/// errors; the password is in neither.
#[test]
fn over_tls_with_plain_and_scram_the_id_is_the_plaintext_listeners() {
    if apache_kafka().is_none() {
        return;
    }
    let broker = common::own_broker::OwnBroker::start_with_sasl_ssl();
    let (addr, ca, user, password) = broker.sasl_ssl().unwrap();
    let topic = fresh_topic("topic-id-sasl");
    create_topic(&broker.addr(), &topic, 1);
    let plain = known(&broker.addr(), &topic);
    let secure = |mechanism: &str, password: &str, ca: &str| {
        let mut c = client_config(&addr);
        c.set("security.protocol", "SASL_SSL")
            .set("sasl.mechanism", mechanism)
            .set("sasl.username", user)
            .set("sasl.password", password)
            .set("ssl.ca.location", ca);
        topic_identity(&c, &topic, TIMEOUT)
    };
    let ca = ca.to_str().unwrap();
    for mechanism in ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] {
        match secure(mechanism, &password, ca).unwrap() {
            TopicIdentity::Known(id) => assert_eq!(id, plain, "{mechanism}"),
            other => panic!("{mechanism}: {other:?}"),
        }
        let e = secure(mechanism, "not-the-password", ca)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("SASL") || e.contains("SCRAM"),
            "{mechanism}: {e}"
        );
        assert!(
            !e.contains(&password) && !e.contains("not-the-password"),
            "{e}"
        );
    }
    // Another CA: the broker's certificate does not verify.
    let other = std::env::temp_dir().join(format!("{}-other-ca.pem", fresh_topic("ca")));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args([
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=other",
            "-keyout",
            "/dev/null",
        ])
        .arg("-out")
        .arg(&other)
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let e = secure("PLAIN", &password, other.to_str().unwrap())
        .unwrap_err()
        .to_string();
    assert!(!e.contains(&password), "{e}");
    let _ = std::fs::remove_file(other);
}
