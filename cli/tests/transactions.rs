//! `reencrypt --apply` with `-X transactional.id`, on Apache Kafka: each
//! chunk is a transaction, so when the broker refuses a key's new record
//! (here a value over a `max.message.bytes` lowered after it was written),
//! the write rule's tombstone of its older form is aborted with it and the
//! key keeps its value for a `read_committed` reader. The control: the
//! same run without a transaction, its records sent one per batch, leaves
//! the key deleted.

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::compacting::create_compacted_topic;
use common::kafka::{apache_kafka, client_config, fresh_topic};
use common::process::{cli, code, load, new_keyset, Dir};
use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, AlterConfig, ResourceSpecifier,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::store::Changelog as _;
use tombstone_crypt::{
    Bytes, Context, Deserializer as _, DeterministicDeserializer, DeterministicSerializer,
    EncryptingSerializer, Serializer as _,
};

/// Each plaintext key's last record, read `read_committed`: its value
/// (`None`: deleted).
fn last_by_key(
    bootstrap: &str,
    topic: &str,
    keys: &tombstone_crypt::Keyset,
) -> BTreeMap<Vec<u8>, Option<usize>> {
    let log = KafkaChangelog::existing(client_config(bootstrap), topic).unwrap();
    let de = DeterministicDeserializer::new(Bytes, keys.clone());
    let mut out = BTreeMap::new();
    for r in log.records().unwrap() {
        let plain = de
            .deserialize(&Context::new(topic), Some(&r.key))
            .unwrap()
            .unwrap();
        out.insert(plain, r.value.map(|v| v.len()));
    }
    out
}

/// Writes three keys (values of 3,000 bytes), rotates the key keyset,
/// lowers the topic's `max.message.bytes` below a value, and runs
/// `reencrypt --apply` with `extra` settings. Each key's last record after.
fn refused_reencrypt(name: &str, extra: &[&str]) -> Option<BTreeMap<Vec<u8>, Option<usize>>> {
    let bootstrap = apache_kafka()?;
    let dir = Dir::new(name);
    let topic = fresh_topic("cli-txn");
    create_compacted_topic(&bootstrap, &topic, 1);
    let (values, vks) = new_keyset(&dir, "values.json");
    let keys = dir.file("keys.json");
    let made = cli(&["keyset", "new", "--template", "aes256-siv", "--out", &keys]);
    assert_eq!(code(&made), 0);
    let kks = load(&keys);
    let key_ser = DeterministicSerializer::new(Bytes, kks);
    let ser = EncryptingSerializer::new(Bytes, vks);
    let p: FutureProducer = client_config(&bootstrap).create().unwrap();
    for i in 0..3 {
        let plain = format!("acct-{i}").into_bytes();
        let wire = key_ser
            .serialize(&Context::new(&topic), Some(&plain[..]))
            .unwrap()
            .unwrap();
        let value = vec![b'a' + i as u8; 3000];
        let ct = ser
            .serialize(&Context::new(&topic).with_key(&plain), Some(&value[..]))
            .unwrap()
            .unwrap();
        let r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(&topic)
            .key(&wire[..])
            .payload(&ct[..])
            .partition(0);
        futures_executor::block_on(p.send(r, Duration::from_secs(30))).unwrap();
    }
    assert_eq!(code(&cli(&["keyset", "rotate", "--in", &keys])), 0);
    // AlterConfigs replaces a topic's whole configuration: the policy too.
    let admin: AdminClient<DefaultClientContext> = client_config(&bootstrap).create().unwrap();
    let lower = AlterConfig::new(ResourceSpecifier::Topic(&topic))
        .set("cleanup.policy", "compact")
        .set("max.message.bytes", "2048");
    for r in
        futures_executor::block_on(admin.alter_configs([&lower], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    let checkpoint = dir.file("run.checkpoint");
    let mut args = vec![
        "reencrypt",
        "--bootstrap",
        &bootstrap,
        "--topic",
        &topic,
        "--keyset",
        &values,
        "--key-keyset",
        &keys,
        "--apply",
        "--checkpoint",
        &checkpoint,
        "-X",
        "message.timeout.ms=10000",
    ];
    args.extend_from_slice(extra);
    let out = cli(&args);
    assert_ne!(code(&out), 0, "the refused write was not reported");
    eprintln!("{}", String::from_utf8_lossy(&out.stderr));
    Some(last_by_key(&bootstrap, &topic, &load(&keys)))
}

#[test]
fn a_refused_chunk_in_a_transaction_deletes_nothing() {
    let id = fresh_topic("txn-id");
    let setting = format!("transactional.id={id}");
    let Some(last) = refused_reencrypt("txn-reencrypt", &["-X", &setting]) else {
        return;
    };
    assert_eq!(last.len(), 3);
    for (k, v) in &last {
        assert!(
            matches!(v, Some(n) if *n > 3000),
            "{k:?} lost its value: {v:?}"
        );
    }
}

#[test]
fn negative_control_a_refused_record_without_a_transaction_deletes_its_key() {
    let Some(last) = refused_reencrypt("plain-reencrypt", &["-X", "batch.num.messages=1"]) else {
        return;
    };
    assert!(
        last.values().any(Option::is_none),
        "without a transaction no key was left deleted: {last:?}"
    );
}
