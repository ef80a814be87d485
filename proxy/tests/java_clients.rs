//! Apache Kafka's Java client (kafka-clients 4.4.0, `tests/java`) through
//! the proxy on Apache Kafka 4.4.0, checked beside the proxy with the JDK's
//! AES-GCM: an idempotent producer; consumer groups of the classic protocol
//! and of the new one (`group.protocol=consumer`, KIP-848); a transactional
//! producer, committed and aborted, read `read_committed` and
//! `read_uncommitted`; a compacted topic after Apache Kafka's log cleaner
//! (one record per key); and, under a key keyset in rotation, a transaction
//! that aborts after writing keys whose older forms exist (they still read
//! as before, nothing deleted on the broker) and one that commits (no older
//! form left live). Each checks that the broker holds only ciphertext, that
//! reads through the proxy come back as written, a null value null (a
//! tombstone on the broker too), an empty value empty (a ciphertext on the
//! broker), record keys under the AES-SIV keyset round trip.
//!
//! Negative controls: a proxy that forwards plaintext, one without the
//! write rule's tombstones of older key forms, and the older forms'
//! tombstones written outside the client's transaction (as a proxy that
//! wrote them with a Produce of its own would) fail the checks.
//!
//! The classpath is `TOMBSTONE_JAVA_CLIENTS_CP` (built by
//! `scripts/java-clients.sh`, as `scripts/test.sh` exports it); the test is
//! skipped with a printed line without it or without a broker. The broker
//! is Apache Kafka's (`TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`).

use crate::common;

use common::peers::Peer;
use tombstone_crypt_proxy::Hooks;

fn java() -> Option<Peer> {
    Peer::from_env("java", "TOMBSTONE_JAVA_CLIENTS_CP", |cp| {
        [
            "java",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Xmx128m",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            &cp,
            "clients.ProxyClients",
        ]
        .map(String::from)
        .to_vec()
    })
}

#[test]
fn java_producers_and_consumer_groups_round_trip_and_the_broker_holds_ciphertext() {
    let Some(java) = java() else {
        return;
    };
    java.clients(Hooks::default(), None).assert_ok();
}

#[test]
fn negative_control_plaintext_forwarded_fails_the_java_check() {
    let Some(java) = java() else {
        return;
    };
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    java.clients(hooks, Some("idempotent"))
        .assert_failed_with(&["the value on the broker is not a ciphertext"]);
}

#[test]
fn java_compaction_keeps_one_record_per_key_compacting_broker() {
    let Some(java) = java() else {
        return;
    };
    java.compaction();
}

#[test]
fn java_transaction_aborted_after_a_rotation_deletes_nothing_compacting_broker() {
    let Some(java) = java() else {
        return;
    };
    java.rotation(Hooks::default(), false, true).assert_ok();
}

#[test]
fn negative_control_without_the_older_forms_tombstones_java_fails() {
    let Some(java) = java() else {
        return;
    };
    let mut hooks = Hooks::default();
    hooks.skip_fanout = true;
    java.rotation(hooks, false, false)
        .assert_failed_with(&["older form"]);
}

#[test]
fn negative_control_tombstones_outside_the_transaction_java_fails() {
    let Some(java) = java() else {
        return;
    };
    java.rotation(Hooks::default(), true, false)
        .assert_failed_with(&["the abort deleted it"]);
}
