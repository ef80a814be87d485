//! Headers by name: a client through the proxy gets its headers back; a
//! consumer beside the proxy sees ciphertext for the policy's named headers
//! and plaintext for the others; a tombstone keeps a null value and an
//! encrypted header; a null header value stays null. With a negative
//! control: a proxy that skips header encryption fails the check.

use crate::common;

use std::time::{Duration, Instant};

use common::{bootstrap, config, create_topic, fresh_topic, start_proxy};
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::message::{Header, Headers, Message, OwnedHeaders};
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::{AadPolicy, Context, Keyset};
use tombstone_crypt_proxy::{Hooks, Policies, TopicPolicy};

type Hdrs = Vec<(String, Option<Vec<u8>>)>;

/// A record: key, value, headers.
type HRec = (Option<Vec<u8>>, Option<Vec<u8>>, Hdrs);

const SECRET: &[u8] = b"123-45-6789";

fn sample() -> Vec<HRec> {
    let h = |ssn: Option<&[u8]>| -> Hdrs {
        vec![
            ("x-ssn".into(), ssn.map(<[u8]>::to_vec)),
            ("trace-id".into(), Some(b"trace-0001".to_vec())),
            ("x-empty".into(), Some(Vec::new())),
        ]
    };
    vec![
        (
            Some(b"k1".to_vec()),
            Some(b"value one".to_vec()),
            h(Some(SECRET)),
        ),
        // A tombstone with a named header.
        (Some(b"k1".to_vec()), None, h(Some(SECRET))),
        // A null header value stays null.
        (Some(b"k2".to_vec()), Some(b"v".to_vec()), h(None)),
        (None, Some(b"unkeyed".to_vec()), h(Some(SECRET))),
    ]
}

fn produce(bootstrap: &str, topic: &str, records: &[HRec]) {
    let producer: FutureProducer = config(bootstrap)
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("message.timeout.ms", "6000")
        .create()
        .unwrap();
    let futures: Vec<_> = records
        .iter()
        .map(|(k, v, hs)| {
            let mut headers = OwnedHeaders::new();
            for (name, value) in hs {
                headers = headers.insert(Header {
                    key: name,
                    value: value.as_deref(),
                });
            }
            let mut r: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(topic).partition(0).headers(headers);
            if let Some(k) = k {
                r = r.key(&k[..]);
            }
            if let Some(v) = v {
                r = r.payload(&v[..]);
            }
            producer.send_result(r).map_err(|(e, _)| e.to_string())
        })
        .collect();
    for (i, f) in futures.into_iter().enumerate() {
        match futures_executor::block_on(f.unwrap()) {
            Ok(Ok(_)) => {}
            other => panic!("record {i}: {other:?}"),
        }
    }
}

fn consume(bootstrap: &str, topic: &str) -> Result<Vec<HRec>, String> {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", format!("g-{}", fresh_topic("h")))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if Instant::now() > deadline {
            return Err("no end within 30 s".into());
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => {
                let headers = m
                    .headers()
                    .map(|h| {
                        h.iter()
                            .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.push((
                    m.key().map(<[u8]>::to_vec),
                    m.payload().map(<[u8]>::to_vec),
                    headers,
                ));
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(out),
            Some(Err(e)) => return Err(e.to_string()),
        }
    }
}

/// What a consumer beside the proxy must see: `x-ssn` a ciphertext of the
/// value keyset that the library's `Keyset::decrypt` opens with the
/// header's associated data (TopicAndKey of topic and plaintext key, then
/// the name), the other headers as sent, a null header null, a tombstone
/// null.
fn check_sealed(
    topic: &str,
    values: &Keyset,
    sent: &[HRec],
    direct: &[HRec],
) -> Result<(), String> {
    if sent.len() != direct.len() {
        return Err(format!(
            "{} records beside, {} sent",
            direct.len(),
            sent.len()
        ));
    }
    for (i, ((k, v, hs), (dk, dv, dhs))) in sent.iter().zip(direct).enumerate() {
        if dk != k || v.is_none() != dv.is_none() {
            return Err(format!("record {i}: key or nullness changed"));
        }
        if hs.len() != dhs.len() {
            return Err(format!("record {i}: headers lost or added"));
        }
        for ((name, value), (dname, dvalue)) in hs.iter().zip(dhs) {
            if name != dname {
                return Err(format!("record {i}: header order changed"));
            }
            match (name.as_str(), value, dvalue) {
                (_, None, None) => {}
                ("x-ssn", Some(pt), Some(ct)) => {
                    if ct.len() != pt.len() + 33
                        || ct[0] != 1
                        || ct.windows(4).any(|w| w == &pt[..4])
                    {
                        return Err(format!("record {i}: the header x-ssn is not a ciphertext"));
                    }
                    let ctx = match k {
                        Some(k) => Context::new(topic).with_key(k),
                        None => Context::new(topic),
                    };
                    let mut ad = ctx.associated_data(AadPolicy::TopicAndKey).unwrap();
                    ad.extend_from_slice(&(name.len() as u32).to_be_bytes());
                    ad.extend_from_slice(name.as_bytes());
                    let back = values
                        .decrypt(ct, &ad)
                        .map_err(|e| format!("record {i}: x-ssn does not open: {e}"))?;
                    if &back != pt {
                        return Err(format!("record {i}: x-ssn opens to another value"));
                    }
                }
                (_, Some(pt), Some(d)) if pt == d => {}
                _ => return Err(format!("record {i}: the header {name} changed")),
            }
        }
    }
    Ok(())
}

struct Run {
    topic: String,
    values: Keyset,
    sent: Vec<HRec>,
    through: Result<Vec<HRec>, String>,
    direct: Vec<HRec>,
}

fn run(hooks: Hooks) -> Option<Run> {
    let broker = bootstrap()?;
    let topic = fresh_topic("headers");
    let values = Keyset::generate();
    let policies = Policies::new().with_topic(
        &topic,
        TopicPolicy::keyset(values.clone())
            .with_headers(["x-ssn"])
            .unwrap(),
    );
    let proxy = start_proxy(&broker, policies, hooks);
    create_topic(&broker, &topic, 1);
    let sent = sample();
    produce(&proxy.addr, &topic, &sent);
    let through = consume(&proxy.addr, &topic);
    let direct = consume(&broker, &topic).unwrap();
    Some(Run {
        topic,
        values,
        sent,
        through,
        direct,
    })
}

#[test]
fn named_headers_round_trip_and_are_sealed_beside_the_proxy() {
    let Some(r) = run(Hooks::default()) else {
        return;
    };
    assert_eq!(r.through.unwrap(), r.sent, "read through the proxy");
    check_sealed(&r.topic, &r.values, &r.sent, &r.direct).unwrap();
    // The tombstone: a null value beside the proxy, its header sealed.
    assert_eq!(r.direct[1].1, None);
    assert_ne!(r.direct[1].2[0].1.as_deref(), Some(SECRET));
    // The null header value: null beside the proxy.
    assert_eq!(r.direct[2].2[0].1, None);
}

#[test]
fn negative_control_a_proxy_that_skips_header_encryption_fails_the_check() {
    let mut hooks = Hooks::default();
    hooks.skip_header_encryption = true;
    let Some(r) = run(hooks) else {
        return;
    };
    let err = check_sealed(&r.topic, &r.values, &r.sent, &r.direct).unwrap_err();
    assert!(err.contains("x-ssn is not a ciphertext"), "{err}");
    // Reading the plaintext header through the proxy fails the partition.
    assert!(r.through.is_err(), "{:?}", r.through);
}
