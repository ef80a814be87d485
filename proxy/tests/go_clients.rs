//! franz-go (kgo 1.22.3 and kadm 1.20.0, `tests/go`) through the proxy on
//! Apache Kafka 4.4.0, checked beside the proxy with Go's AES-GCM: kgo's
//! idempotent producer; consumer groups of the classic protocol and of
//! KIP-848's (`kgo.ServerSideBalancer`); a transactional producer,
//! committed and aborted, read `read_committed` and `read_uncommitted`; a
//! compacted topic after Apache Kafka's log cleaner (one record per key);
//! and, under a key keyset in rotation, a transaction that aborts after
//! writing keys whose older forms exist (they still read as before,
//! nothing deleted on the broker) and one that commits (no older form left
//! live). Each checks that the broker holds only ciphertext, that reads
//! through the proxy come back as written, a null value null (a tombstone
//! on the broker too), an empty value empty (a ciphertext on the broker),
//! record keys under the AES-SIV keyset round trip.
//!
//! Negative controls: a proxy that forwards plaintext, one without the
//! write rule's tombstones of older key forms, and the older forms'
//! tombstones written outside the client's transaction (as a proxy that
//! wrote them with a Produce of its own would) fail the checks.
//!
//! The program is `TOMBSTONE_GO_CLIENT` (built by `scripts/go-clients.sh`,
//! as `scripts/test.sh` exports it); the test is skipped with a printed
//! line without it or without a broker. The broker is Apache Kafka's
//! (`TOMBSTONE_APACHE_KAFKA_BOOTSTRAP`).

use crate::common;

use common::peers::Peer;
use tombstone_crypt_proxy::Hooks;

fn go() -> Option<Peer> {
    Peer::from_env("go", "TOMBSTONE_GO_CLIENT", |path| vec![path])
}

#[test]
fn go_producers_and_consumer_groups_round_trip_and_the_broker_holds_ciphertext() {
    let Some(go) = go() else {
        return;
    };
    go.clients(Hooks::default(), None).assert_ok();
}

#[test]
fn negative_control_plaintext_forwarded_fails_the_go_check() {
    let Some(go) = go() else {
        return;
    };
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    go.clients(hooks, Some("idempotent"))
        .assert_failed_with(&["the value on the broker is not a ciphertext"]);
}

#[test]
fn go_compaction_keeps_one_record_per_key_compacting_broker() {
    let Some(go) = go() else {
        return;
    };
    go.compaction();
}

#[test]
fn go_transaction_aborted_after_a_rotation_deletes_nothing_compacting_broker() {
    let Some(go) = go() else {
        return;
    };
    go.rotation(Hooks::default(), false, true).assert_ok();
}

#[test]
fn negative_control_without_the_older_forms_tombstones_go_fails() {
    let Some(go) = go() else {
        return;
    };
    let mut hooks = Hooks::default();
    hooks.skip_fanout = true;
    go.rotation(hooks, false, false)
        .assert_failed_with(&["older form"]);
}

#[test]
fn negative_control_tombstones_outside_the_transaction_go_fails() {
    let Some(go) = go() else {
        return;
    };
    go.rotation(Hooks::default(), true, false)
        .assert_failed_with(&["the abort deleted it"]);
}
