//! The typed producer with encrypted record keys, against the loopback
//! broker: a rotation of the key keyset never moves a key to another
//! partition, and a delete after a rotation stays a delete in a store
//! restored from the topic and for a consumer replaying it.
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic, siv_producer};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::kafka::{KafkaChangelog, TopicSettings, TypedConsumer};
use tombstone_crypt::record_key::{murmur2_partition, WriteRule};
use tombstone_crypt::store::{restore_from, EncryptedStore, KeyValueStore, MemoryStore};
use tombstone_crypt::{
    Bytes, DecryptingDeserializer, DeterministicDeserializer, KeyTemplate, Keyset,
};

const PARTITIONS: i32 = 3;

/// Defect 0 of the review: `send` left partitioning to librdkafka, which
/// hashes the ciphertext, so `bob` moved from partition 0 to 1 at a
/// rotation. Every record of a key now lands where murmur2 of its
/// plaintext says, before and after the rotation.
#[tokio::test(flavor = "current_thread")]
async fn a_rotation_of_the_key_keyset_never_moves_a_key_to_another_partition() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("typed-siv-partition");
    create_topic(&bootstrap, &topic, PARTITIONS);
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    let names: Vec<String> = (0..24).map(|i| format!("customer-{i}")).collect();
    let mut landed: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for _round in 0..2 {
        let p = siv_producer(&bootstrap, &values, &keys, WriteRule::FanOut);
        for name in &names {
            let d = p.send(&topic, name.as_bytes(), Some(b"v")).await.unwrap();
            landed.entry(name).or_default().push(d.partition);
        }
        keys.rotate();
    }
    let mut spread = std::collections::BTreeSet::new();
    for (name, parts) in &landed {
        let want = murmur2_partition(name.as_bytes(), PARTITIONS as u32);
        assert_eq!(parts, &[want, want], "{name}");
        spread.insert(want);
    }
    // The keys do spread over the partitions (the check means something).
    assert_eq!(spread.len(), PARTITIONS as usize);
}

/// Defect 1 of the review: after a rotation of the key keyset a delete
/// wrote one tombstone under the new form; the value under the old form
/// survived compaction and a store restored from the topic found it again.
/// Now the delete tombstones every form, and the restored store, the
/// consumer replaying the topic, and Kafka's compaction of it agree that
/// the key is gone. The control (primary form only) brings it back.
#[tokio::test(flavor = "current_thread")]
async fn a_delete_after_a_key_rotation_stays_deleted_in_a_restored_store() {
    let Some(bootstrap) = bootstrap() else { return };
    let (ok, broken) = (
        resurrected(&bootstrap, WriteRule::FanOut).await,
        resurrected(&bootstrap, WriteRule::PrimaryOnly).await,
    );
    assert_eq!(ok, (None, None));
    // Without the fan-out the restored store serves the deleted key again,
    // while a consumer replaying the topic says it is deleted.
    assert_eq!(broken, (Some(b"before".to_vec()), None));
}

/// Writes `bob`, rotates the key keyset, deletes `bob`; returns what a
/// store restored from bob's partition serves for it, and the last record
/// a consumer replaying the partition sees for it.
async fn resurrected(bootstrap: &str, rule: WriteRule) -> (Option<Vec<u8>>, Option<Vec<u8>>) {
    let topic = fresh_topic("typed-siv-delete");
    // Compacted (a changelog refuses a topic that is not).
    drop(
        KafkaChangelog::with_settings(
            client_config(bootstrap),
            &topic,
            TopicSettings::default().with_partitions(PARTITIONS),
        )
        .unwrap(),
    );
    let values = Keyset::generate();
    let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    siv_producer(bootstrap, &values, &keys, rule)
        .send(&topic, b"bob", Some(b"before"))
        .await
        .unwrap();
    keys.rotate();
    let d = siv_producer(bootstrap, &values, &keys, rule)
        .send(&topic, b"bob", None)
        .await
        .unwrap();
    assert_eq!(d.partition, murmur2_partition(b"bob", PARTITIONS as u32));

    // A store restored from the partition (named as the topic: values are
    // bound to the topic and the plaintext key, as the producer binds them).
    let changelog = KafkaChangelog::open(bootstrap, &topic)
        .unwrap()
        .on_partition(d.partition);
    let mut inner = MemoryStore::new();
    restore_from(&mut inner, &changelog).unwrap();
    let store = EncryptedStore::new(inner, topic.clone(), values.clone())
        .with_encrypted_keys(keys.clone())
        .unwrap();
    let restored = store.get(b"bob").unwrap();

    // A consumer replaying the partition in order.
    let mut config = client_config(bootstrap);
    config
        .set("group.id", fresh_topic("replay"))
        .set("enable.auto.commit", "false");
    let consumer: TypedConsumer<Vec<u8>, Vec<u8>, _, _> = TypedConsumer::new(
        &config,
        DeterministicDeserializer::new(Bytes, keys),
        DecryptingDeserializer::new(Bytes, values),
    )
    .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, d.partition, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let last = loop {
        let r = tokio::time::timeout(Duration::from_secs(20), consumer.recv())
            .await
            .expect("the partition's records")
            .unwrap();
        assert_eq!(r.key, b"bob");
        if r.offset == d.offset {
            break r.value;
        }
    };
    (restored, last)
}
