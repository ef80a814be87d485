//! librdkafka (rdkafka) through the proxy: records come back as they were
//! sent; a consumer beside the proxy sees ciphertext for values and keys
//! and null for tombstones, and the library reads those records back; the
//! library's records read through the proxy; what cannot be decrypted is
//! refused; under a key keyset in rotation the write rule's tombstones of
//! older key forms come first on the broker and are left out of what a
//! client reads; a compacted topic on Apache Kafka keeps one
//! record per key, its last. With negative controls: a proxy that
//! forwards plaintext, turns a tombstone into a value, or leaves out the
//! older forms' tombstones fails the checks.

use crate::common;

use std::time::Duration;

use common::{
    bootstrap, consume_all, create_topic, fresh_topic, produce_ok, start_proxy, Consumed, Keys, Rec,
};
use tombstone_crypt::kafka::rdkafka::message::OwnedMessage;
use tombstone_crypt::kafka::rdkafka::Timestamp;
use tombstone_crypt::kafka::{decode_message, encode_write};
use tombstone_crypt::record_key::KeyBinding;
use tombstone_crypt::{
    Bytes, Context, DecryptingDeserializer, Deserializer, DeterministicDeserializer,
    DeterministicSerializer, EncryptingSerializer,
};
use tombstone_crypt_proxy::Hooks;

fn rec(k: Option<&[u8]>, v: Option<&[u8]>) -> Rec {
    (k.map(<[u8]>::to_vec), v.map(<[u8]>::to_vec))
}

/// Keyed values, an empty value, tombstones, an unkeyed value, an empty
/// key, an unkeyed tombstone, a large value.
fn sample() -> Vec<Rec> {
    vec![
        rec(Some(b"order-1"), Some(b"first value")),
        rec(Some(b"order-2"), Some(b"")),
        rec(Some(b"order-1"), None),
        rec(None, Some(b"unkeyed value")),
        rec(Some(b""), Some(b"value of the empty key")),
        rec(None, None),
        rec(Some(b"order-3"), Some(&[0xab; 5000])),
        rec(Some(b"order-2"), None),
    ]
}

fn plain(c: &[Consumed]) -> Vec<Rec> {
    c.iter().map(|c| (c.key.clone(), c.value.clone())).collect()
}

/// What a consumer beside the proxy must see for `sent`: every value a
/// ciphertext of the value keyset (33 bytes more, version byte 1, no
/// plaintext in it), every key a ciphertext of the key keyset (21 bytes
/// more) when there is one and the key itself otherwise, every tombstone
/// null; and the library, with the same keysets, reads each record back
/// to what was sent (`decode_message`, as its `TypedConsumer` does).
fn check_sealed(topic: &str, keys: &Keys, sent: &[Rec], direct: &[Consumed]) -> Result<(), String> {
    if direct.len() != sent.len() {
        return Err(format!(
            "{} records on the broker, {} sent",
            direct.len(),
            sent.len()
        ));
    }
    let values = DecryptingDeserializer::new(Bytes, keys.values.clone());
    for (i, ((k, v), d)) in sent.iter().zip(direct).enumerate() {
        match (v, &d.value) {
            (None, None) => {}
            (None, Some(_)) => {
                return Err(format!(
                    "record {i}: a tombstone reached the broker as a value"
                ))
            }
            (Some(_), None) => {
                return Err(format!(
                    "record {i}: a value reached the broker as a tombstone"
                ))
            }
            (Some(v), Some(c)) => {
                if c.len() != v.len() + 33 || c[0] != 1 {
                    return Err(format!(
                        "record {i}: the value on the broker is not a ciphertext ({} bytes for {})",
                        c.len(),
                        v.len()
                    ));
                }
                if v.len() >= 4 && c.windows(v.len()).any(|w| w == &v[..]) {
                    return Err(format!("record {i}: the plaintext value is on the broker"));
                }
            }
        }
        match (k, &d.key, &keys.keys) {
            (None, None, _) => {}
            (Some(k), Some(c), Some(_)) => {
                if c.len() != k.len() + 21 || c[0] != 1 {
                    return Err(format!(
                        "record {i}: the key on the broker is not a ciphertext"
                    ));
                }
            }
            (Some(k), Some(c), None) if k == c => {}
            _ => {
                return Err(format!(
                    "record {i}: the key on the broker is not what was sent"
                ))
            }
        }
        // The library reads it back.
        let got = match &d.key {
            Some(wire) => {
                let m = OwnedMessage::new(
                    d.value.clone(),
                    Some(wire.clone()),
                    topic.to_owned(),
                    Timestamp::NotAvailable,
                    d.partition,
                    d.offset,
                    None,
                );
                let r = match &keys.keys {
                    Some(kk) => decode_message(
                        &m,
                        KeyBinding::Plaintext,
                        &DeterministicDeserializer::new(Bytes, kk.clone()),
                        &values,
                    ),
                    None => decode_message(&m, KeyBinding::Plaintext, &Bytes, &values),
                };
                let (key, value): (Vec<u8>, Option<Vec<u8>>) =
                    r.map_err(|e| format!("record {i}: the library cannot read it: {e}"))?;
                (Some(key), value)
            }
            None => (
                None,
                values
                    .deserialize(&Context::new(topic), d.value.as_deref())
                    .map_err(|e| format!("record {i}: the library cannot read it: {e}"))?,
            ),
        };
        if got != (k.clone(), v.clone()) {
            return Err(format!("record {i}: the library reads another record"));
        }
    }
    Ok(())
}

/// What one run wrote and read: through the proxy and beside it.
struct Run {
    topic: String,
    keys: Keys,
    sent: Vec<Rec>,
    through: Result<Vec<Consumed>, String>,
    direct: Vec<Consumed>,
}

/// Writes [`sample`] through a proxy (with `hooks`) to both partitions of
/// a new topic (gzip and lz4), and reads it back through the proxy and
/// beside it; `None` when there is no broker.
fn run(with_keys: bool, hooks: Hooks) -> Option<Run> {
    let broker = bootstrap()?;
    let topic = fresh_topic(if with_keys { "sealed-keys" } else { "sealed" });
    let keys = Keys::new(with_keys);
    let proxy = start_proxy(&broker, keys.policies(&topic), hooks);
    // Created through the proxy: CreateTopics passes through.
    create_topic(&proxy.addr, &topic, 2);
    let sent = sample();
    produce_ok(&proxy.addr, &topic, 0, &sent, "gzip");
    produce_ok(&proxy.addr, &topic, 1, &sent, "lz4");
    let through = consume_all(&proxy.addr, &topic, 2);
    let direct = consume_all(&broker, &topic, 2).unwrap();
    Some(Run {
        topic,
        keys,
        sent,
        through,
        direct,
    })
}

/// The records beside the proxy are sealed (both partitions).
fn sealed(r: &Run) -> Result<(), String> {
    let (p0, p1): (Vec<_>, Vec<_>) = r.direct.iter().cloned().partition(|c| c.partition == 0);
    check_sealed(&r.topic, &r.keys, &r.sent, &p0)?;
    check_sealed(&r.topic, &r.keys, &r.sent, &p1)
}

fn round_trip(with_keys: bool) {
    let Some(r) = run(with_keys, Hooks::default()) else {
        return;
    };
    let mut both = r.sent.clone();
    both.extend(r.sent.iter().cloned());
    assert_eq!(
        plain(&r.through.clone().unwrap()),
        both,
        "read through the proxy"
    );
    sealed(&r).unwrap();
}

#[test]
fn records_round_trip_through_the_proxy_and_are_sealed_beside_it() {
    round_trip(true);
}

#[test]
fn values_only_keys_stay_plaintext_and_values_are_sealed() {
    round_trip(false);
}

#[test]
fn negative_control_a_proxy_that_forwards_plaintext_fails_the_check() {
    let mut hooks = Hooks::default();
    hooks.skip_encryption = true;
    let Some(r) = run(true, hooks) else {
        return;
    };
    let err = sealed(&r).unwrap_err();
    assert!(err.contains("not a ciphertext"), "{err}");
    // And reading plaintext through the proxy is an error, not a record.
    assert!(r.through.is_err(), "{:?}", r.through);
}

#[test]
fn negative_control_a_proxy_that_encrypts_tombstones_fails_the_check() {
    let mut hooks = Hooks::default();
    hooks.tombstone_as_empty = true;
    let Some(r) = run(true, hooks) else {
        return;
    };
    let err = sealed(&r).unwrap_err();
    assert!(
        err.contains("a tombstone reached the broker as a value"),
        "{err}"
    );
    // Read through the proxy, the delete has become an empty value.
    let mut both = r.sent.clone();
    both.extend(r.sent.iter().cloned());
    assert_ne!(plain(&r.through.unwrap()), both);
}

#[test]
fn records_the_library_wrote_read_through_the_proxy() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("library-wrote");
    let keys = Keys::new(true);
    create_topic(&broker, &topic, 1);
    let ks = DeterministicSerializer::new(Bytes, keys.keys.clone().unwrap());
    let vs = EncryptingSerializer::new(Bytes, keys.values.clone());
    let writes: Vec<(&[u8], Option<&[u8]>)> = vec![
        (b"a", Some(b"alpha")),
        (b"b", Some(b"")),
        (b"a", None),
        (b"c", Some(b"gamma")),
    ];
    let mut wire = Vec::new();
    for (k, v) in &writes {
        for r in encode_write(&topic, 1, KeyBinding::Plaintext, &ks, &vs, *k, *v).unwrap() {
            assert_eq!(r.partition, Some(0));
            wire.push((Some(r.key), r.payload));
        }
    }
    produce_ok(&broker, &topic, 0, &wire, "none");
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let through = consume_all(&proxy.addr, &topic, 1).unwrap();
    let want: Vec<Rec> = writes
        .iter()
        .map(|(k, v)| (Some(k.to_vec()), v.map(<[u8]>::to_vec)))
        .collect();
    assert_eq!(plain(&through), want);
}

#[test]
fn a_value_that_does_not_authenticate_is_an_error_never_a_record() {
    let Some(broker) = bootstrap() else {
        return;
    };
    let topic = fresh_topic("undecryptable");
    let keys = Keys::new(false);
    create_topic(&broker, &topic, 1);
    // Plaintext written beside the proxy, and a ciphertext under another
    // keyset.
    let other = EncryptingSerializer::new(Bytes, tombstone_crypt::Keyset::generate());
    let foreign = tombstone_crypt::Serializer::serialize(
        &other,
        &Context::new(&topic).with_key(b"k"),
        Some(&b"secret"[..]),
    )
    .unwrap();
    produce_ok(
        &broker,
        &topic,
        0,
        &[rec(Some(b"k"), Some(b"plain secret"))],
        "none",
    );
    let proxy = start_proxy(&broker, keys.policies(&topic), Hooks::default());
    let got = consume_all(&proxy.addr, &topic, 1);
    assert!(
        got.is_err(),
        "plaintext on a policy topic was handed on: {got:?}"
    );
    let topic2 = fresh_topic("undecryptable-foreign");
    create_topic(&broker, &topic2, 1);
    produce_ok(
        &broker,
        &topic2,
        0,
        &[(Some(b"k".to_vec()), foreign)],
        "none",
    );
    let proxy2 = start_proxy(&broker, keys.policies(&topic2), Hooks::default());
    let got = consume_all(&proxy2.addr, &topic2, 1);
    assert!(got.is_err(), "a foreign ciphertext was handed on: {got:?}");
    // The proxy keeps serving: a topic without a policy reads as it is.
    let free = fresh_topic("no-policy");
    create_topic(&proxy.addr, &free, 1);
    produce_ok(
        &proxy.addr,
        &free,
        0,
        &[rec(Some(b"x"), Some(b"y"))],
        "none",
    );
    assert_eq!(
        plain(&consume_all(&proxy.addr, &free, 1).unwrap()),
        vec![rec(Some(b"x"), Some(b"y"))]
    );
    assert_eq!(
        plain(&consume_all(&broker, &free, 1).unwrap()),
        vec![rec(Some(b"x"), Some(b"y"))]
    );
}

/// Writes two keys through a proxy, rotates the key keyset (both keys
/// enabled, the new one primary), writes a new value of one and deletes
/// the other through a second proxy (with `hooks`), and checks the write
/// rule on what the broker holds: compacted (the newest record per key on
/// the wire), each logical key has at most one present value, the newest,
/// and a deleted key none.
fn rotation(hooks: Hooks) -> Result<(), String> {
    let Some(broker) = bootstrap() else {
        return Ok(());
    };
    let topic = fresh_topic("rotation");
    let keys = Keys::new(true);
    create_topic(&broker, &topic, 1);
    {
        let before = start_proxy(&broker, keys.policies(&topic), Hooks::default());
        let first = [rec(Some(b"k1"), Some(b"v1")), rec(Some(b"k2"), Some(b"v2"))];
        produce_ok(&before.addr, &topic, 0, &first, "none");
    }
    let mut rotated = Keys {
        values: keys.values.clone(),
        keys: keys.keys.clone(),
    };
    rotated.keys.as_mut().unwrap().rotate();
    let after = start_proxy(&broker, rotated.policies(&topic), hooks);
    let second = [rec(Some(b"k1"), Some(b"v1-new")), rec(Some(b"k2"), None)];
    produce_ok(&after.addr, &topic, 0, &second, "gzip");
    // Through the proxy: what the clients wrote (the write rule's
    // tombstones of the older forms are left out on Fetch).
    let through = plain(&consume_all(&after.addr, &topic, 1)?);
    let direct = consume_all(&broker, &topic, 1)?;
    // On the broker: the two batches, the second with a tombstone of each
    // key's older form in front.
    if direct.len() != 6 {
        return Err(format!(
            "the broker holds {} records, not 2 + 2 tombstones of older forms + 2",
            direct.len()
        ));
    }
    // Compaction keeps the newest record of each key on the wire.
    let mut newest: Vec<(Vec<u8>, Option<Vec<u8>>)> = Vec::new();
    for d in &direct {
        let wire = d.key.clone().ok_or("a record without a key")?;
        newest.retain(|(k, _)| *k != wire);
        newest.push((wire, d.value.clone()));
    }
    let de = DeterministicDeserializer::new(Bytes, rotated.keys.clone().unwrap());
    let mut live = std::collections::BTreeMap::<Vec<u8>, usize>::new();
    for (wire, value) in &newest {
        let (_, plaintext): (Vec<u8>, Vec<u8>) = de
            .deserialize_key(&Context::new(&topic), wire)
            .map_err(|e| format!("a key does not decrypt: {e}"))?;
        if value.is_some() {
            *live.entry(plaintext).or_default() += 1;
        }
    }
    if live.contains_key(&b"k2"[..]) {
        return Err("after compaction a deleted key still has a value under an older form".into());
    }
    if live.get(&b"k1"[..]) != Some(&1) {
        return Err(format!(
            "after compaction k1 has {:?} present values: a split key",
            live.get(&b"k1"[..])
        ));
    }
    let want = vec![
        rec(Some(b"k1"), Some(b"v1")),
        rec(Some(b"k2"), Some(b"v2")),
        rec(Some(b"k1"), Some(b"v1-new")),
        rec(Some(b"k2"), None),
    ];
    if through != want {
        return Err(format!(
            "read through the proxy: {} records, not the {} written",
            through.len(),
            want.len()
        ));
    }
    Ok(())
}

#[test]
fn a_key_keyset_in_rotation_writes_the_older_forms_tombstones_first() {
    rotation(Hooks::default()).unwrap();
}

#[test]
fn negative_control_without_the_older_forms_tombstones_a_key_is_split() {
    let mut hooks = Hooks::default();
    hooks.skip_fanout = true;
    if bootstrap().is_none() {
        return;
    }
    let err = rotation(hooks).unwrap_err();
    assert!(
        err.contains("older form") || err.contains("split key"),
        "{err}"
    );
}

/// Several versions of three keys, a tombstone and an empty value the last
/// of two of them, written through a proxy with `hooks` to a compacted
/// topic on Apache Kafka: once its log cleaner has compacted the topic, one
/// record per key must be left, the key's last, read through the proxy as
/// written and sealed beside it.
fn compacted(hooks: Hooks) -> Result<(), String> {
    let Some(broker) = common::apache_kafka() else {
        return Ok(());
    };
    let topic = fresh_topic("compacted");
    let keys = Keys::new(true);
    common::compacting::create_compacted_topic(&broker, &topic, 1);
    let proxy = start_proxy(&broker, keys.policies(&topic), hooks);
    let writes = [
        rec(Some(b"k0"), Some(b"v0-a")),
        rec(Some(b"k1"), Some(b"v1-a")),
        rec(Some(b"k2"), Some(b"v2-a")),
        rec(Some(b"k0"), Some(b"v0-b")),
        rec(Some(b"k1"), None),
        rec(Some(b"k2"), Some(b"")),
        rec(Some(b"k0"), Some(b"v0-c")),
    ];
    produce_ok(&proxy.addr, &topic, 0, &writes, "lz4");
    let c = common::compacting::wait_compacted(&broker, &topic, Duration::from_secs(60));
    assert!((c.after as i64) < c.offsets, "nothing compacted: {c:?}");
    let last = writes[4..].to_vec();
    let through = plain(&consume_all(&proxy.addr, &topic, 1)?);
    if through != last {
        return Err(format!(
            "after compaction, read through the proxy: {through:?}"
        ));
    }
    check_sealed(&topic, &keys, &last, &consume_all(&broker, &topic, 1)?)
}

#[test]
fn a_compacted_topic_keeps_one_record_per_key_compacting_broker() {
    compacted(Hooks::default()).unwrap();
}

#[test]
fn negative_control_an_encrypted_tombstone_fails_the_compaction_check_compacting_broker() {
    let mut hooks = Hooks::default();
    hooks.tombstone_as_empty = true;
    if common::apache_kafka().is_none() {
        return;
    }
    let err = compacted(hooks).unwrap_err();
    assert!(err.contains("read through the proxy"), "{err}");
}
