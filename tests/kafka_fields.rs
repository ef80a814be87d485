//! Field records through the typed Kafka clients against the loopback
//! broker: a producer with keys writes records with encrypted fields, null
//! fields and deletes; a router with no keys reads them, changes a plain
//! field and writes them to another topic, every encrypted field byte for
//! byte unchanged and every delete still a delete; a consumer with keys
//! reads the routed topic.
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use serde::{Deserialize, Serialize};
use tombstone_crypt::field::{Encrypted, FieldEncrypting};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::kafka::{TypedConsumer, TypedProducer};
use tombstone_crypt::{Json, Keyset, Utf8};

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Payment {
    order: u64,
    route: String,
    card: Encrypted<String>,
    note: Option<Encrypted<String>>,
}

type Codec = FieldEncrypting<Json<Payment>>;

fn consumer(
    bootstrap: &str,
    topic: &str,
    codec: Codec,
) -> TypedConsumer<String, Payment, Utf8, Codec> {
    let mut config = client_config(bootstrap);
    config
        .set("group.id", format!("g-{topic}"))
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    let c = TypedConsumer::new(&config, Utf8, codec).unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..2 {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
    c
}

/// Reads `n` records: (key, value) in order per partition.
async fn read_n(
    c: &TypedConsumer<String, Payment, Utf8, Codec>,
    n: usize,
) -> Vec<(String, Option<Payment>)> {
    let mut out = Vec::new();
    while out.len() < n {
        let r = tokio::time::timeout(Duration::from_secs(30), c.recv())
            .await
            .expect("records in time")
            .unwrap();
        out.push((r.key, r.value));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_with_no_keys_passes_field_records_through_sealed() {
    let Some(bootstrap) = bootstrap() else { return };
    let orders = fresh_topic("fields-orders");
    let routed = fresh_topic("fields-routed");
    create_topic(&bootstrap, &orders, 2);
    create_topic(&bootstrap, &routed, 2);
    let keyset = Keyset::generate();
    // Every stage binds fields to the pipeline's name, so they may move
    // from topic to topic.
    let keyed = || {
        FieldEncrypting::new(Json::<Payment>::new(), keyset.clone()).with_binding_name("payments")
    };
    let sealed = || FieldEncrypting::sealed(Json::<Payment>::new()).with_binding_name("payments");

    let producer =
        TypedProducer::<str, Payment, _, _>::new(&client_config(&bootstrap), Utf8, keyed())
            .unwrap();
    let mut model: BTreeMap<String, Option<Payment>> = BTreeMap::new();
    let mut sent = 0;
    for i in 0..40u64 {
        let key = format!("order-{}", i % 13);
        let value = match i % 5 {
            // A delete.
            3 => None,
            // Null fields: a present record.
            4 => Some(Payment {
                order: i,
                route: "eu".into(),
                card: Encrypted::new(String::new()),
                note: None,
            }),
            _ => Some(Payment {
                order: i,
                route: "eu".into(),
                card: Encrypted::new(format!("4111-{i}")),
                note: Some(Encrypted::new(format!("note {i}"))),
            }),
        };
        producer.send(&orders, &key, value.as_ref()).await.unwrap();
        model.insert(key, value);
        sent += 1;
    }

    // The router: no keys. Every field reads sealed; it reroutes.
    let router_in = consumer(&bootstrap, &orders, sealed());
    let router_out =
        TypedProducer::<str, Payment, _, _>::new(&client_config(&bootstrap), Utf8, sealed())
            .unwrap();
    let raw_in = read_n(&router_in, sent).await;
    for (key, value) in &raw_in {
        let value = value.clone().map(|mut p| {
            assert!(p.card.is_sealed(), "the router holds no key");
            assert!(p.card.get().is_none());
            p.route = "us".into();
            p
        });
        router_out.send(&routed, key, value.as_ref()).await.unwrap();
    }

    // A consumer with keys reads what the router wrote: per key, the last
    // record is the model's, with the route changed; deletes are deletes.
    let reader = consumer(&bootstrap, &routed, keyed());
    let mut got: BTreeMap<String, Option<Payment>> = BTreeMap::new();
    for (key, value) in read_n(&reader, sent).await {
        got.insert(key, value);
    }
    let want: BTreeMap<String, Option<Payment>> = model
        .into_iter()
        .map(|(k, v)| {
            (
                k,
                v.map(|mut p| {
                    p.route = "us".into();
                    p
                }),
            )
        })
        .collect();
    assert_eq!(got, want);

    // The fields' bytes are the same on both topics: a sealed reader of
    // each sees the same sealed fields, record by record.
    let again_in = consumer(&bootstrap, &orders, sealed());
    let again_out = consumer(&bootstrap, &routed, sealed());
    let mut a: Vec<_> = read_n(&again_in, sent).await;
    let mut b: Vec<_> = read_n(&again_out, sent).await;
    let fields = |v: &mut Vec<(String, Option<Payment>)>| {
        v.sort_by(|x, y| x.0.cmp(&y.0));
        v.iter()
            .map(|(k, p)| {
                (
                    k.clone(),
                    p.as_ref().map(|p| (p.card.clone(), p.note.clone())),
                )
            })
            .collect::<Vec<_>>()
    };
    // Per key the order is the partition's: stable sort keeps it.
    assert_eq!(fields(&mut a), fields(&mut b));
    assert!(
        a.iter().any(|(_, v)| v.is_none()),
        "deletes are in the test"
    );
}
