//! Confluent's format through a real broker, both ways, against Confluent's
//! own client (confluent-kafka 2.16.1 for Python: its Producer, Consumer,
//! JSON Schema and (feature `confluent-avro`) Avro serializers and
//! encryption rules, `tests/interop/
//! confluent_peer.py`): our typed producer writes records with encrypted
//! fields, null fields and deletes, its consumer reads every one; its
//! producer writes, our typed consumer reads every one. A delete is a null
//! value both ways: no schema, DEK or cipher touches it.
#![cfg(all(feature = "kafka", feature = "confluent"))]

use crate::common;

use common::confluent::fixture;

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tombstone_crypt::confluent::{ConfluentJson, ConfluentSerde, DekAlgorithm, LocalKms};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::kafka::{TypedConsumer, TypedProducer};
use tombstone_crypt::Utf8;

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct Customer {
    id: u64,
    name: String,
    ssn: String,
    note: Option<String>,
}

/// The fixture's schema for `topic` (its rules and tags as Confluent's
/// client registered them).
fn schema(case: &str) -> Value {
    fixture(case)["schema"].clone()
}

fn peer(arg: &str, input: &Value) -> Option<Value> {
    common::confluent::peer_env(arg, &input.to_string(), &[]).map(|r| {
        let out = r.unwrap_or_else(|e| panic!("confluent_peer.py {arg}: {e}"));
        serde_json::from_str(&out).expect("the peer's JSON")
    })
}

fn customers() -> Vec<(String, Option<Customer>)> {
    (0..12u64)
        .map(|i| {
            let key = format!("c-{}", i % 5);
            let value = match i % 4 {
                3 => None, // a delete
                2 => Some(Customer {
                    id: i,
                    name: format!("n{i}"),
                    ssn: String::new(), // an empty string is encrypted
                    note: None,         // a null field stays null
                }),
                _ => Some(Customer {
                    id: i,
                    name: format!("n{i}"),
                    ssn: format!("078-05-{i:04}"),
                    note: Some(format!("note ✓ {i}")),
                }),
            };
            (key, value)
        })
        .collect()
}

/// The customers of [`customers`] in the Avro cases' schema, with a tagged
/// `bytes` field (JSON: an array of numbers, as serde writes a `Vec<u8>`).
#[cfg(feature = "confluent-avro")]
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
struct AvroCustomer {
    id: u64,
    name: String,
    ssn: String,
    note: Option<String>,
    blob: Vec<u8>,
}

/// Our typed producer writes `records` under `case`'s schema; Confluent's
/// consumer reads each one back (a delete as null).
async fn ours_to_confluent<T>(
    bootstrap: &str,
    case: &str,
    records: &[(String, Option<T>)],
) -> Option<()>
where
    T: Serialize + serde::de::DeserializeOwned + Send + Sync + 'static,
{
    let topic = fresh_topic(&format!("confluent-{case}"));
    create_topic(bootstrap, &topic, 1);
    let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
    codec
        .register(1, &format!("{topic}-value"), &schema(case))
        .unwrap();
    let codec = Arc::new(codec);
    let producer = TypedProducer::<str, T, _, _>::new(
        &client_config(bootstrap),
        Utf8,
        ConfluentSerde::<T>::new(Arc::clone(&codec)),
    )
    .unwrap();
    for (key, value) in records {
        producer.send(&topic, key, value.as_ref()).await.unwrap();
    }
    let b64 = |b: &[u8]| base64::engine::general_purpose::STANDARD.encode(b);
    let job = json!({
        "bootstrap": bootstrap, "topic": topic, "count": records.len(),
        "schema": schema(case), "subject": format!("{topic}-value"), "secret": "mysecret",
        "deks": codec.wrapped_deks().iter().map(|(k, s, a, v, w)| json!({
            "kekName": k, "subject": s, "algorithm": a.name(), "version": v,
            "encryptedKeyMaterial": b64(w),
        })).collect::<Vec<_>>(),
    });
    let read = peer("consume", &job)?;
    let read = read.as_array().unwrap();
    assert_eq!(read.len(), records.len());
    for ((key, value), got) in records.iter().zip(read) {
        assert_eq!(got["key"], json!(key), "{case}");
        let want = value
            .as_ref()
            .map_or(Value::Null, |c| serde_json::to_value(c).unwrap());
        assert_eq!(got.get("ok"), Some(&want), "{case}: {got}");
    }
    Some(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confluents_consumer_reads_what_our_typed_producer_writes() {
    let Some(bootstrap) = bootstrap() else { return };
    for case in ["field-gcm", "payload-gcm"] {
        if ours_to_confluent(&bootstrap, case, &customers())
            .await
            .is_none()
        {
            return;
        }
    }
    #[cfg(feature = "confluent-avro")]
    for case in ["avro-field-gcm", "avro-payload-gcm"] {
        let records: Vec<(String, Option<AvroCustomer>)> = customers()
            .into_iter()
            .map(|(k, v)| {
                let v = v.map(|c| AvroCustomer {
                    blob: c.ssn.as_bytes().to_vec(),
                    id: c.id,
                    name: c.name,
                    ssn: c.ssn,
                    note: c.note,
                });
                (k, v)
            })
            .collect();
        assert!(ours_to_confluent(&bootstrap, case, &records)
            .await
            .is_some());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_typed_consumer_reads_what_confluents_producer_writes() {
    let Some(bootstrap) = bootstrap() else { return };
    let mut cases = vec!["field-gcm", "field-siv", "payload-gcm"];
    if cfg!(feature = "confluent-avro") {
        cases.extend(["avro-field-gcm", "avro-field-siv", "avro-payload-gcm"]);
    }
    for case in cases {
        let topic = fresh_topic(&format!("confluent-in-{case}"));
        create_topic(&bootstrap, &topic, 1);
        let Some(written) = peer(
            "produce",
            &json!({"bootstrap": bootstrap, "topic": topic, "case": case}),
        ) else {
            return;
        };
        let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
        codec
            .register(
                u32::try_from(written["schema_id"].as_u64().unwrap()).unwrap(),
                written["subject"].as_str().unwrap(),
                &written["schema"],
            )
            .unwrap();
        for d in written["deks"].as_array().unwrap() {
            let material = base64::engine::general_purpose::STANDARD
                .decode(d["encryptedKeyMaterial"].as_str().unwrap())
                .unwrap();
            codec
                .add_wrapped_dek(
                    d["kekName"].as_str().unwrap(),
                    d["subject"].as_str().unwrap(),
                    DekAlgorithm::from_name(d["algorithm"].as_str().unwrap()).unwrap(),
                    u32::try_from(d["version"].as_u64().unwrap()).unwrap(),
                    &material,
                )
                .unwrap();
        }
        let serde = ConfluentSerde::<Value>::new(Arc::new(codec));
        let mut config = client_config(&bootstrap);
        config
            .set("group.id", format!("g-{topic}"))
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest");
        let consumer = TypedConsumer::new(&config, Utf8, serde).unwrap();
        let mut tpl = TopicPartitionList::new();
        tpl.add_partition_offset(&topic, 0, Offset::Beginning)
            .unwrap();
        consumer.assign(&tpl).unwrap();
        let want: Vec<Option<Value>> = written["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| (!r["value"].is_null()).then(|| r["value"].clone()))
            .collect();
        for (i, want) in want.iter().enumerate() {
            let r = tokio::time::timeout(Duration::from_secs(30), consumer.recv())
                .await
                .expect("records in time")
                .unwrap_or_else(|e| panic!("{case}: {e}"));
            assert_eq!(r.key, format!("c-{i}"), "{case}");
            assert_eq!(&r.value, want, "{case}: record {i}");
        }
        assert!(want.iter().any(Option::is_none), "a delete was among them");
    }
}
