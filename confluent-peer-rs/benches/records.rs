//! The record of benches/throughput.rs's `fields/confluent/*` rows (10
//! fields, 3 of them secrets of 32 bytes tagged `PII`) written and read one
//! at a time by schema-registry-client 0.4.2 (`theirs`: its JSON Schema
//! serializer and deserializer, mock registries, local-kms) and by
//! `tombstone_crypt::confluent::ConfluentJson` (`ours`), under the same rule
//! (`ENCRYPT` on the tag, AES256_GCM; or `ENCRYPT_PAYLOAD`, AES256_GCM), the
//! same local-kms KEK and secret, the DEK made before the measurement
//! (warm). Each side reads what it wrote. `scripts/bench-confluent-peer.sh`
//! runs it and prints the table.
//!
//! The schema lists all 10 properties: the crate's field rule writes only
//! the properties its schema lists (benches/throughput.rs lists the 3
//! tagged ones, which would have the crate drop the other 7).

use criterion::{criterion_group, criterion_main, Criterion};
use futures::executor::block_on;
use schema_registry_client::rest::models::Schema;
use schema_registry_client::rest::schema_registry_client::Client as _;
use serde_json::{json, Value};
use std::hint::black_box;
use tombstone_crypt::confluent::{ConfluentJson, LocalKms};
use tombstone_crypt_confluent_peer as peer;

const SCHEMA: &str = r#"{"type":"object","properties":{
    "id":{"type":"integer"},"customer":{"type":"integer"},"items":{"type":"integer"},
    "paid":{"type":"boolean"},"at":{"type":"integer"},
    "currency":{"type":"string"},"country":{"type":"string"},
    "card":{"type":"string","confluent:tags":["PII"]},
    "iban":{"type":"string","confluent:tags":["PII"]},
    "email":{"type":"string","confluent:tags":["PII"]}}}"#;

const SUBJECT: &str = "orders-value";

fn record() -> Value {
    let secret = |c: char| c.to_string().repeat(32);
    json!({
        "id": 1_234_567, "customer": 42, "items": 3, "paid": true, "at": 1_733_400_000_000_i64,
        "currency": "EUR", "country": "FR",
        "card": secret('c'), "iban": secret('i'), "email": secret('e'),
    })
}

fn records(c: &mut Criterion) {
    let record = record();
    let ctx = peer::value_context(peer::topic_of(SUBJECT));
    for (rule, rule_type) in [("fields", "ENCRYPT"), ("payload", "ENCRYPT_PAYLOAD")] {
        let rules = peer::rule_set(rule_type, "bench", "local-kms://bench", "AES256_GCM");
        let schema = Schema {
            schema_type: Some("JSON".to_owned()),
            references: None,
            metadata: None,
            rule_set: Some(Box::new(rules)),
            schema: SCHEMA.to_owned(),
        };

        // Theirs: the serializer and deserializer of one mock registry.
        let registry = peer::registry("bench");
        let id = block_on(registry.register_schema(SUBJECT, &schema, false))
            .expect("register")
            .id
            .expect("an id");
        let executors = peer::rules();
        let ser = peer::serializer(&registry, &executors, peer::SECRET).expect("serializer");
        let de = peer::deserializer(&registry, &executors, peer::SECRET).expect("deserializer");
        let theirs_ct = block_on(ser.serialize(&ctx, record.clone())).expect("theirs write");
        assert_eq!(
            block_on(de.deserialize(&ctx, &theirs_ct)).expect("theirs read"),
            record
        );

        // Ours: the same schema and rule, as the registry returns them.
        let mut codec = ConfluentJson::new(LocalKms::new(peer::SECRET));
        codec
            .register(
                u32::try_from(id).expect("id"),
                SUBJECT,
                &serde_json::to_value(&schema).expect("schema JSON"),
            )
            .expect("ours register");
        let ours_ct = codec
            .encode(SUBJECT, Some(&record))
            .expect("ours write")
            .expect("present");
        assert_eq!(
            codec.decode(Some(&ours_ct)).expect("ours read"),
            Some(record.clone())
        );
        // The same format: each reads the other's frame and body shape.
        assert_eq!(ours_ct[..5], theirs_ct[..5]);

        let mut group = c.benchmark_group(format!("confluent_peer/encrypt/{rule}"));
        group.bench_function("ours", |b| {
            b.iter(|| {
                codec
                    .encode(SUBJECT, Some(black_box(&record)))
                    .expect("ours write")
            })
        });
        group.bench_function("theirs", |b| {
            b.iter(|| {
                block_on(ser.serialize(black_box(&ctx), black_box(&record).clone()))
                    .expect("theirs write")
            })
        });
        group.finish();
        let mut group = c.benchmark_group(format!("confluent_peer/decrypt/{rule}"));
        group.bench_function("ours", |b| {
            b.iter(|| {
                codec
                    .decode(Some(black_box(&ours_ct[..])))
                    .expect("ours read")
            })
        });
        group.bench_function("theirs", |b| {
            b.iter(|| {
                block_on(de.deserialize(black_box(&ctx), black_box(&theirs_ct[..])))
                    .expect("theirs read")
            })
        });
        group.finish();
    }
}

criterion_group!(benches, records);
criterion_main!(benches);
