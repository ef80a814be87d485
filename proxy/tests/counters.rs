//! The proxy's counters (`tombstone_crypt_proxy::stats`) on a produce and
//! fetch round trip through librdkafka: values and keys encrypted and
//! decrypted, tombstones passed both ways, a refused frame. The negative
//! control, a proxy that forwards plaintext, encrypts nothing and the
//! count says so. One test in this binary: the counters are the process's.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{bootstrap, consume_all, create_topic, fresh_topic, produce_ok, start_proxy, Keys};
use tombstone_crypt_proxy::{stats, Hooks};

fn records() -> Vec<common::Rec> {
    vec![
        (Some(b"a".to_vec()), Some(b"1".to_vec())),
        (Some(b"b".to_vec()), Some(Vec::new())),
        (Some(b"a".to_vec()), None),
        (None, Some(b"unkeyed".to_vec())),
        (None, None),
        (Some(b"c".to_vec()), Some(b"3".to_vec())),
    ]
}

/// Produces and fetches `records` through a proxy with `hooks`; the
/// counters' moves.
fn round_trip(broker: &str, hooks: Hooks) -> stats::Snapshot {
    let topic = fresh_topic("counters");
    let keys = Keys::new(true);
    let proxy = start_proxy(broker, keys.policies(&topic), hooks);
    create_topic(broker, &topic, 1);
    let before = stats::process();
    produce_ok(&proxy.addr, &topic, 0, &records(), "none");
    let read = consume_all(&proxy.addr, &topic, 1).unwrap();
    assert_eq!(read.len(), records().len());
    // A frame that claims 2 GiB: refused, its connection closed.
    let mut s = TcpStream::connect(&proxy.addr).unwrap();
    s.write_all(&[0x7f, 0xff, 0xff, 0xff, 0, 0, 0, 0]).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let _ = s.read(&mut [0u8; 8]);
    let after = stats::process();
    let d = |f: fn(&stats::Snapshot) -> u64| f(&after) - f(&before);
    let mut delta = stats::Snapshot::default();
    delta.values_encrypted = d(|s| s.values_encrypted);
    delta.values_decrypted = d(|s| s.values_decrypted);
    delta.record_keys_encrypted = d(|s| s.record_keys_encrypted);
    delta.record_keys_decrypted = d(|s| s.record_keys_decrypted);
    delta.tombstones_produced = d(|s| s.tombstones_produced);
    delta.tombstones_fetched = d(|s| s.tombstones_fetched);
    delta.older_form_tombstones = d(|s| s.older_form_tombstones);
    delta.partitions_refused = d(|s| s.partitions_refused);
    delta.partitions_undecryptable = d(|s| s.partitions_undecryptable);
    delta.frames_refused = d(|s| s.frames_refused);
    delta
}

#[test]
fn the_counters_move_with_a_produce_and_fetch_round_trip() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let d = round_trip(&broker, Hooks::default());
    // 4 values, 4 keys, 2 tombstones each way; no older forms (one key).
    assert_eq!(
        (
            d.values_encrypted,
            d.record_keys_encrypted,
            d.tombstones_produced
        ),
        (4, 4, 2),
        "{d:?}"
    );
    assert_eq!(
        (
            d.values_decrypted,
            d.record_keys_decrypted,
            d.tombstones_fetched
        ),
        (4, 4, 2),
        "{d:?}"
    );
    assert_eq!(d.frames_refused, 1, "{d:?}");
    assert_eq!(
        (
            d.older_form_tombstones,
            d.partitions_refused,
            d.partitions_undecryptable
        ),
        (0, 0, 0),
        "{d:?}"
    );

    // The negative control: a proxy that forwards plaintext encrypts
    // nothing, and its Fetch then fails to decrypt the partition.
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let topic = fresh_topic("counters-plain");
    let keys = Keys::new(true);
    let proxy = common::start_proxy(&broker, keys.policies(&topic), hooks);
    create_topic(&broker, &topic, 1);
    let before = stats::process();
    produce_ok(&proxy.addr, &topic, 0, &records(), "none");
    assert!(consume_all(&proxy.addr, &topic, 1).is_err());
    let after = stats::process();
    assert_eq!(after.values_encrypted, before.values_encrypted);
    assert!(after.partitions_undecryptable > before.partitions_undecryptable);
}
