//! The typed async clients against the loopback broker: a 3-partition topic
//! written by `TypedProducer` and read by Python's confluent-kafka with
//! Google Tink and by `TypedConsumer`; headers on tombstones; a wrong
//! keyset is an error naming each record; plaintext migration from a topic a
//! Python producer wrote; a consumer group of two splitting the partitions;
//! KMS calls that leave the runtime to its other tasks; a dropped `send` future still
//! completes its write; `acks` other than `all` is refused.
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::kafka::{bootstrap, client_config, create_topic, fresh_topic};
use serde_json::Value;
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::kafka::{TypedConsumer, TypedProducer};
use tombstone_crypt::{
    Bytes, DecryptingDeserializer, EncryptingSerializer, Error, Keyset, Unencrypted, Utf8,
};

type Producer = TypedProducer<str, [u8], Utf8, EncryptingSerializer<Bytes>>;
type ConsumerOf = TypedConsumer<String, Vec<u8>, Utf8, DecryptingDeserializer<Bytes>>;

fn consumer(bootstrap: &str, group: &str, keyset: &Keyset) -> ConsumerOf {
    let mut config = client_config(bootstrap);
    config
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest");
    TypedConsumer::new(
        &config,
        Utf8,
        DecryptingDeserializer::new(Bytes, keyset.clone()),
    )
    .unwrap()
}

fn assign_all(c: &ConsumerOf, topic: &str, partitions: i32) {
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    c.assign(&tpl).unwrap();
}

/// What record `i` is: a delete, an empty value, or a value.
fn value_of(i: usize) -> Option<Vec<u8>> {
    if i % 7 == 3 {
        None
    } else if i % 11 == 5 {
        Some(Vec::new())
    } else {
        Some(format!("value-{i}").into_bytes())
    }
}

const N: usize = 10_000;

/// A record as sent: its key and value.
type Sent = (String, Option<Vec<u8>>);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_thousand_records_on_three_partitions_read_by_tink_and_by_the_typed_consumer() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("typed");
    create_topic(&bootstrap, &topic, 3);
    let keyset = Keyset::generate();
    let producer: Producer = TypedProducer::new(
        &client_config(&bootstrap),
        Utf8,
        EncryptingSerializer::new(Bytes, keyset.clone()),
    )
    .unwrap();
    assert!(producer.is_idempotent());
    let mut sent: BTreeMap<(i32, i64), Sent> = BTreeMap::new();
    for chunk in (0..N).collect::<Vec<_>>().chunks(500) {
        let sends = chunk.iter().map(|&i| {
            let key = format!("key-{}", i % 997);
            let value = value_of(i);
            let producer = &producer;
            let topic = &topic;
            async move {
                let headers: Vec<(&str, Option<&[u8]>)> = if i % 13 == 0 {
                    vec![("trace", Some(b"t-1")), ("empty", None)]
                } else {
                    vec![]
                };
                let d = producer
                    .send_with(topic, &key[..], value.as_deref(), None, &headers)
                    .await
                    .unwrap();
                (d, key, value)
            }
        });
        for (d, key, value) in futures_util::future::join_all(sends).await {
            assert!((0..3).contains(&d.partition));
            sent.insert((d.partition, d.offset), (key, value));
        }
    }
    assert_eq!(sent.len(), N);
    let used: BTreeSet<i32> = sent.keys().map(|(p, _)| *p).collect();
    assert_eq!(used.len(), 3, "keys spread over every partition");

    // Python confluent-kafka with Google Tink reads every partition.
    let dir = std::env::temp_dir().join(format!("tc-typed-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keyset_file = dir.join("keyset.json");
    std::fs::write(&keyset_file, keyset.to_tink_json()).unwrap();
    let py = common::tink::python().expect("a Tink venv");
    let out = std::process::Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/kafka_tink_peer.py"
        ))
        .args(["consume", &bootstrap, &topic, "3"])
        .arg(&keyset_file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let peer: Value = serde_json::from_slice(&out.stdout).unwrap();
    let records = peer["records"].as_array().unwrap();
    assert_eq!(records.len(), N);
    let (mut deletes, mut empties) = (0, 0);
    for r in records {
        let at = (
            r["partition"].as_i64().unwrap() as i32,
            r["offset"].as_i64().unwrap(),
        );
        let (key, value) = &sent[&at];
        assert_eq!(
            common::tink::unhex(r["key_hex"].as_str().unwrap()),
            key.as_bytes()
        );
        match value {
            None => {
                assert_eq!(r["is_none"], true, "a delete is a null payload at {at:?}");
                deletes += 1;
            }
            Some(v) => {
                assert_eq!(r["is_none"], false);
                let pt = r["pt_hex"]
                    .as_str()
                    .unwrap_or_else(|| panic!("Tink could not decrypt {at:?}: {r}"));
                assert_eq!(&common::tink::unhex(pt), v, "at {at:?}");
                empties += usize::from(v.is_empty());
            }
        }
    }
    assert!(
        deletes > 1000 && empties > 500,
        "{deletes} deletes, {empties} empty values"
    );

    // And the typed consumer, with headers, tombstones as None.
    let c = consumer(&bootstrap, &format!("typed-{topic}"), &keyset);
    assign_all(&c, &topic, 3);
    let (mut seen, mut headed, mut tombstones_with_headers) = (0, 0, 0);
    while seen < N {
        let r = tokio::time::timeout(Duration::from_secs(30), c.recv())
            .await
            .expect("a record within 30 s")
            .unwrap();
        let (key, value) = &sent[&(r.partition, r.offset)];
        assert_eq!(&r.key, key);
        assert_eq!(&r.value, value);
        assert_eq!(r.topic, topic);
        assert!(r.timestamp.is_some());
        if !r.headers.is_empty() {
            assert_eq!(
                r.headers,
                [
                    ("trace".to_owned(), Some(b"t-1".to_vec())),
                    ("empty".to_owned(), None)
                ]
            );
            headed += 1;
            tombstones_with_headers += usize::from(r.value.is_none());
        }
        seen += 1;
    }
    // Every 13th record has headers, tombstones included.
    assert_eq!(headed, N.div_ceil(13));
    assert!(tombstones_with_headers > 0);
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "current_thread")]
async fn a_wrong_keyset_is_an_error_naming_the_record_never_a_skip() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("wrong-keyset");
    create_topic(&bootstrap, &topic, 1);
    let producer: Producer = TypedProducer::new(
        &client_config(&bootstrap),
        Utf8,
        EncryptingSerializer::new(Bytes, Keyset::generate()),
    )
    .unwrap();
    let mut offsets = Vec::new();
    for v in [Some(&b"a"[..]), None, Some(b"c")] {
        offsets.push(producer.send(&topic, "k", v).await.unwrap().offset);
    }
    let c = consumer(&bootstrap, &format!("wrong-{topic}"), &Keyset::generate());
    assign_all(&c, &topic, 1);
    for (i, offset) in offsets.iter().enumerate() {
        let got = tokio::time::timeout(Duration::from_secs(30), c.recv())
            .await
            .unwrap();
        if i == 1 {
            // The tombstone needs no key: it is a tombstone.
            assert_eq!(got.unwrap().value, None);
            continue;
        }
        match got {
            Err(Error::Record {
                topic: t,
                partition: 0,
                offset: o,
                cause,
            }) => {
                assert_eq!((t.as_str(), o), (topic.as_str(), *offset));
                assert!(matches!(*cause, Error::UnknownKeyId(_)), "{cause:?}");
            }
            other => panic!("expected an error naming the record, got {other:?}"),
        }
    }
}

/// With `on_undecodable`, a record that does not decode goes to the hook,
/// raw, and the consumer goes on: `recv` and the stream give every other
/// record in order, the hook gets exactly the others (their payloads are the
/// ciphertexts the other keyset wrote), and a hook that returns an error
/// stops `recv` with it.
#[tokio::test(flavor = "current_thread")]
async fn an_undecodable_hook_gets_the_raw_record_and_the_consumer_goes_on() {
    use futures_util::StreamExt as _;
    use std::sync::{Arc, Mutex};
    use tombstone_crypt::kafka::rdkafka::Message as _;
    use tombstone_crypt::{Context, Deserializer as _};

    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("dead-letter");
    create_topic(&bootstrap, &topic, 1);
    let (ours, other) = (Keyset::generate(), Keyset::generate());
    let producer = |keyset: &Keyset| -> Producer {
        TypedProducer::new(
            &client_config(&bootstrap),
            Utf8,
            EncryptingSerializer::new(Bytes, keyset.clone()),
        )
        .unwrap()
    };
    let (good, bad) = (producer(&ours), producer(&other));
    // Records 0..13: every third is under the other keyset, one a
    // tombstone; the last is ours, so reading it means all were seen.
    let (mut expected, mut foreign) = (Vec::new(), BTreeMap::new());
    for i in 0..13 {
        let key = format!("k{i}");
        let value = (i != 4).then(|| format!("v{i}").into_bytes());
        let by = if i % 3 == 2 { &bad } else { &good };
        let offset = by
            .send(&topic, &key, value.as_deref())
            .await
            .unwrap()
            .offset;
        if i % 3 == 2 {
            foreign.insert(offset, (key, value.unwrap()));
        } else {
            expected.push((offset, key, value));
        }
    }
    type Seen = Arc<Mutex<Vec<(i64, String, Vec<u8>)>>>;
    let with_hook = |group: &str, seen: &Seen| {
        let seen = Arc::clone(seen);
        consumer(&bootstrap, group, &ours).on_undecodable(move |raw, error| {
            assert!(
                matches!(error, Error::Record { offset, .. } if *offset == raw.offset()),
                "{error:?}"
            );
            let key = String::from_utf8(raw.key().unwrap().to_vec()).unwrap();
            seen.lock()
                .unwrap()
                .push((raw.offset(), key, raw.payload().unwrap().to_vec()));
            Ok(())
        })
    };
    let check_hook = |seen: &Seen| {
        let seen = seen.lock().unwrap();
        let offsets: Vec<i64> = seen.iter().map(|(o, ..)| *o).collect();
        assert_eq!(offsets, foreign.keys().copied().collect::<Vec<_>>());
        // The raw payload is the other keyset's ciphertext of the value.
        let de = DecryptingDeserializer::new(Bytes, other.clone());
        for (offset, key, payload) in seen.iter() {
            let plain = de
                .deserialize(
                    &Context::new(&topic).with_key(key.as_bytes()),
                    Some(payload),
                )
                .unwrap();
            assert_eq!(plain.as_ref(), Some(&foreign[offset].1));
        }
    };
    let as_sent =
        |r: tombstone_crypt::kafka::ConsumedRecord<String, Vec<u8>>| (r.offset, r.key, r.value);

    // recv
    let seen: Seen = Arc::default();
    let c = with_hook(&format!("dl-recv-{topic}"), &seen);
    assign_all(&c, &topic, 1);
    let mut got = Vec::new();
    for _ in 0..expected.len() {
        let r = tokio::time::timeout(Duration::from_secs(30), c.recv())
            .await
            .unwrap()
            .unwrap();
        got.push(as_sent(r));
    }
    assert_eq!(got, expected);
    check_hook(&seen);

    // the stream
    let seen: Seen = Arc::default();
    let c = with_hook(&format!("dl-stream-{topic}"), &seen);
    assign_all(&c, &topic, 1);
    let got: Vec<_> = tokio::time::timeout(
        Duration::from_secs(30),
        c.stream().take(expected.len()).collect::<Vec<_>>(),
    )
    .await
    .unwrap()
    .into_iter()
    .map(|r| as_sent(r.unwrap()))
    .collect();
    assert_eq!(got, expected);
    check_hook(&seen);

    // A hook that refuses stops recv with its error, at the first such record.
    let c = consumer(&bootstrap, &format!("dl-stop-{topic}"), &ours)
        .on_undecodable(|_, _| Err(Error::MissingRecordKey));
    assign_all(&c, &topic, 1);
    for _ in 0..2 {
        c.recv().await.unwrap();
    }
    let stopped = tokio::time::timeout(Duration::from_secs(30), c.recv())
        .await
        .unwrap();
    assert!(
        matches!(stopped, Err(Error::MissingRecordKey)),
        "{stopped:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn a_plaintext_topic_migrates_with_pass_through_and_is_refused_by_default() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("migration");
    create_topic(&bootstrap, &topic, 1);
    let keyset = Keyset::generate();
    let dir = std::env::temp_dir().join(format!("tc-migration-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keyset_file = dir.join("keyset.json");
    std::fs::write(&keyset_file, keyset.to_tink_json()).unwrap();
    // A Python producer writes 5 plaintext values, then 5 Tink encrypts.
    let py = common::tink::python().expect("a Tink venv");
    let out = std::process::Command::new(py)
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/interop/kafka_tink_peer.py"
        ))
        .args(["produce-migration", &bootstrap, &topic])
        .arg(&keyset_file)
        .arg("5")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let read = |unencrypted| {
        let mut config = client_config(&bootstrap);
        config.set("group.id", format!("m-{topic}-{unencrypted:?}"));
        let c: ConsumerOf = TypedConsumer::new(
            &config,
            Utf8,
            DecryptingDeserializer::new(Bytes, keyset.clone()).with_unencrypted(unencrypted),
        )
        .unwrap();
        assign_all(&c, &topic, 1);
        c
    };
    let pass = read(Unencrypted::PassThrough);
    for i in 0..10 {
        let r = tokio::time::timeout(Duration::from_secs(30), pass.recv())
            .await
            .unwrap()
            .unwrap();
        let want = if i < 5 {
            format!("legacy-{i}")
        } else {
            format!("new-{}", i - 5)
        };
        assert_eq!(r.value, Some(want.into_bytes()));
    }
    let reject = read(Unencrypted::Reject);
    for i in 0..10i64 {
        let r = tokio::time::timeout(Duration::from_secs(30), reject.recv())
            .await
            .unwrap();
        if i < 5 {
            match r {
                Err(Error::Record { offset, .. }) => {
                    assert_eq!(offset, i, "the error names its offset")
                }
                other => panic!("plaintext accepted under Reject: {other:?}"),
            }
        } else {
            assert_eq!(
                r.unwrap().value,
                Some(format!("new-{}", i - 5).into_bytes())
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_group_of_two_splits_the_partitions_and_sees_each_record_once() {
    use tombstone_crypt::kafka::rdkafka::consumer::Consumer as _;
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("group");
    create_topic(&bootstrap, &topic, 3);
    let keyset = Keyset::generate();
    let group = format!("group-{topic}");
    let member = || {
        let mut config = client_config(&bootstrap);
        config
            .set("group.id", &group)
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("session.timeout.ms", "6000")
            .set("heartbeat.interval.ms", "500");
        let c: ConsumerOf = TypedConsumer::new(
            &config,
            Utf8,
            DecryptingDeserializer::new(Bytes, keyset.clone()),
        )
        .unwrap();
        c
    };
    let members = [member(), member()];
    for m in &members {
        m.subscribe(&[&topic]).unwrap();
    }
    // Let the group settle before anything is produced: each member polls
    // until the two hold all three partitions between them.
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_secs(120);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "the group did not settle"
        );
        for m in &members {
            let _ = tokio::time::timeout(Duration::from_millis(200), m.recv()).await;
        }
        let owned: Vec<usize> = members
            .iter()
            .map(|m| m.consumer().assignment().unwrap().count())
            .collect();
        if owned.iter().all(|&n| n > 0) && owned.iter().sum::<usize>() == 3 {
            break;
        }
    }
    eprintln!("the group settled in {:?}", started.elapsed());
    let producer: Producer = TypedProducer::new(
        &client_config(&bootstrap),
        Utf8,
        EncryptingSerializer::new(Bytes, keyset.clone()),
    )
    .unwrap();
    const M: usize = 600;
    for i in 0..M {
        producer
            .send(&topic, &format!("key-{i}"), value_of(i).as_deref())
            .await
            .unwrap();
    }
    let mut seen: BTreeMap<(i32, i64), usize> = BTreeMap::new();
    let mut by_member = [BTreeSet::new(), BTreeSet::new()];
    while seen.len() < M {
        let (n, r) = tokio::time::timeout(Duration::from_secs(30), async {
            tokio::select! {
                r = members[0].recv() => (0, r),
                r = members[1].recv() => (1, r),
            }
        })
        .await
        .unwrap_or_else(|_| panic!("read {} of {M}", seen.len()));
        let r = r.unwrap();
        *seen.entry((r.partition, r.offset)).or_default() += 1;
        by_member[n].insert(r.partition);
    }
    assert!(
        seen.values().all(|&n| n == 1),
        "a record was delivered twice"
    );
    assert!(
        by_member.iter().all(|p| !p.is_empty()),
        "one member read nothing: {by_member:?}"
    );
    assert!(
        by_member[0].is_disjoint(&by_member[1]),
        "a partition read by both: {by_member:?}"
    );
}

/// The longest pause a ticking task saw while `work` ran, as a task of its
/// own beside the ticker on the current runtime (one worker, or the
/// current thread): how long something held up the worker.
async fn longest_stall<F>(work: F) -> (F::Output, Duration)
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;
    let stop = Arc::new(AtomicBool::new(false));
    let longest = Arc::new(AtomicU64::new(0));
    let ticker = tokio::spawn({
        let (stop, longest) = (Arc::clone(&stop), Arc::clone(&longest));
        async move {
            while !stop.load(Ordering::SeqCst) {
                let t = std::time::Instant::now();
                tokio::time::sleep(Duration::from_millis(5)).await;
                let gap = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
                longest.fetch_max(gap, Ordering::SeqCst);
            }
        }
    });
    // Let the ticker start before the work does.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let out = tokio::spawn(work).await.unwrap();
    stop.store(true, Ordering::SeqCst);
    ticker.await.unwrap();
    (out, Duration::from_millis(longest.load(Ordering::SeqCst)))
}

/// A producer whose values go through an envelope keyset over an
/// in-process counting KMS, with a new data key every `max_values`.
fn envelope_producer(
    bootstrap: &str,
    kek_uri: &str,
    max_values: u64,
) -> (tombstone_crypt::__fuzz::FakeKms, Keyset, Producer) {
    use tombstone_crypt::kms::{DekPolicy, KmsClients};
    use tombstone_crypt::KeyTemplate;
    let kms = tombstone_crypt::__fuzz::FakeKms::new();
    let keyset = Keyset::generate_with(
        KeyTemplate::kms_envelope(kek_uri)
            .with_kms_clients(KmsClients::new().with(kms.clone()))
            .with_dek_policy(DekPolicy::default().with_max_values(max_values)),
    )
    .unwrap();
    let producer = TypedProducer::new(
        &client_config(bootstrap),
        Utf8,
        EncryptingSerializer::new(Bytes, keyset.clone()),
    )
    .unwrap();
    (kms, keyset, producer)
}

/// Outside a tokio runtime (here futures' own executor) there is no
/// blocking pool: the KMS call for a new data key runs inline, as a
/// synchronous call would, and the send goes through (no panic).
#[test]
fn outside_a_tokio_runtime_the_kms_call_runs_inline() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("kms-no-runtime");
    create_topic(&bootstrap, &topic, 1);
    let (kms, _, producer) = envelope_producer(&bootstrap, "fake-kms://no-runtime", 2);
    assert!(tokio::runtime::Handle::try_current().is_err());
    futures_executor::block_on(async {
        for i in 0..3 {
            producer
                .send(&topic, &format!("k{i}"), Some(b"v"))
                .await
                .unwrap();
        }
    });
    assert_eq!(kms.encrypt_calls(), 2, "3 values, 2 per data key");
}

/// A producer's KMS calls leave the runtime to its other tasks: on a
/// multi-thread runtime of **one** worker, with a KMS that takes 400 ms
/// per call and a new data key every 4 values, a ticking task beside the
/// sending one keeps ticking (the call runs in `block_in_place`, in the
/// write's first poll, so the write keeps its place). The control: the
/// same KMS call made inline in a task, as a synchronous serializer does,
/// stalls the one worker for the whole call.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_producers_kms_calls_leave_the_one_worker_to_its_other_tasks() {
    use std::sync::Arc;
    use tombstone_crypt::kms::DekPolicy;
    use tombstone_crypt::{Context, Serializer as _};
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("kms-producer-worker");
    create_topic(&bootstrap, &topic, 1);
    let (kms, keyset, producer) = envelope_producer(&bootstrap, "fake-kms://producer-worker", 4);
    let producer = Arc::new(producer);
    // Warm the producer's connection first: its first send waits for
    // metadata, which is not what is measured.
    producer.send(&topic, "warm", None).await.unwrap();
    kms.set_delay(Duration::from_millis(400));

    // 10 values, 4 per data key: 3 new keys, 3 KMS calls of 400 ms.
    let (sent, stall) = longest_stall({
        let (producer, topic) = (Arc::clone(&producer), topic.clone());
        async move {
            for i in 0..10 {
                producer
                    .send(&topic, &format!("k{i}"), Some(b"v"))
                    .await
                    .unwrap();
            }
        }
    })
    .await;
    let () = sent;
    assert_eq!(kms.encrypt_calls(), 3);
    assert!(
        stall < Duration::from_millis(200),
        "the producer held the one worker for {stall:?}"
    );

    // The control: a new data key made inline, in a task, blocks the one
    // worker.
    let ser = EncryptingSerializer::new(
        Bytes,
        keyset.with_dek_policy(DekPolicy::default().with_max_values(4)),
    );
    let ((), stall) = longest_stall(async move {
        ser.serialize(&Context::new(&topic), Some(&b"v"[..]))
            .unwrap();
    })
    .await;
    assert!(
        stall >= Duration::from_millis(350),
        "an inline KMS call should stall the one worker, saw {stall:?}"
    );
}

/// A consumer's KMS calls run off the runtime's worker: with a KMS that
/// takes 400 ms per call and a reader whose cache lacks the data keys, a
/// current-thread runtime stays free to run other tasks (the calls go to
/// the blocking pool). The control: the same KMS call made inline stalls
/// the runtime for the whole call.
#[tokio::test(flavor = "current_thread")]
async fn a_consumers_kms_calls_run_off_the_runtime_worker() {
    use std::sync::Arc;
    use tombstone_crypt::kms::DekPolicy;
    use tombstone_crypt::{Context, Serializer as _};
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic("kms-async");
    create_topic(&bootstrap, &topic, 1);
    let (kms, keyset, producer) = envelope_producer(&bootstrap, "fake-kms://async", 4);
    // 10 values, 4 per data key: 3 new keys (made inline: this runtime
    // has one thread).
    for i in 0..10 {
        producer
            .send(&topic, &format!("k{i}"), Some(b"v"))
            .await
            .unwrap();
    }
    let sent = producer.send(&topic, "k0", None).await.unwrap();
    assert_eq!(kms.encrypt_calls(), 3);
    kms.set_delay(Duration::from_millis(400));

    // A reader with an empty cache: 3 data keys to unwrap.
    let reader = keyset.clone().with_dek_policy(DekPolicy::default());
    let c: Arc<ConsumerOf> = {
        let mut config = client_config(&bootstrap);
        config.set("group.id", format!("async-{topic}"));
        Arc::new(
            TypedConsumer::new(&config, Utf8, DecryptingDeserializer::new(Bytes, reader)).unwrap(),
        )
    };
    assign_all(&c, &topic, 1);
    let (read, stall) = longest_stall({
        let c = Arc::clone(&c);
        async move {
            let mut values = 0;
            loop {
                let r = tokio::time::timeout(Duration::from_secs(30), c.recv())
                    .await
                    .unwrap()
                    .unwrap();
                values += usize::from(r.value.is_some());
                if r.offset == sent.offset {
                    return values;
                }
            }
        }
    })
    .await;
    assert_eq!((read, kms.decrypt_calls()), (10, 3));
    assert!(
        stall < Duration::from_millis(200),
        "the consumer held the runtime for {stall:?}"
    );

    // The control: a new data key made inline blocks the runtime.
    let ser = EncryptingSerializer::new(
        Bytes,
        keyset.with_dek_policy(DekPolicy::default().with_max_values(4)),
    );
    let ((), stall) = longest_stall(async move {
        ser.serialize(&Context::new(&topic), Some(&b"v"[..]))
            .unwrap();
    })
    .await;
    assert!(
        stall >= Duration::from_millis(350),
        "an inline KMS call should stall the runtime, saw {stall:?}"
    );
}

/// Each record of partition `partition` of `topic`, in order, read to the
/// partition's end: its key and whether it has a payload.
fn read_partition(bootstrap: &str, topic: &str, partition: i32) -> Vec<(Vec<u8>, bool)> {
    use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
    use tombstone_crypt::kafka::rdkafka::error::KafkaError;
    use tombstone_crypt::kafka::rdkafka::Message as _;
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", format!("read-{topic}-{partition}"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, partition, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out reading {topic}"
        );
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => return out,
            Some(Err(e)) => panic!("consume {topic}: {e}"),
            Some(Ok(m)) => out.push((m.key().unwrap().to_vec(), m.payload().is_some())),
        }
    }
}

/// Writes of keys encrypted under a rotated key keyset (a tombstone for the
/// older form, then the record under the primary form), each future polled
/// once (the records handed over, the first delivery not yet reported) and
/// dropped: every write still completes, in order, so each key's partition
/// ends with the older form's tombstone followed by the primary form's
/// value. Before, the future sent one record at a time, and dropping it
/// after the tombstone left the key deleted.
async fn dropped_futures_complete_their_writes(idempotent: bool) {
    use tombstone_crypt::kafka::encode_write;
    use tombstone_crypt::record_key::{murmur2_partition, KeyBinding};
    use tombstone_crypt::{DeterministicSerializer, KeyTemplate};
    let Some(bootstrap) = bootstrap() else { return };
    let topic = fresh_topic(if idempotent {
        "dropped"
    } else {
        "dropped-plain"
    });
    create_topic(&bootstrap, &topic, 3);
    let mut key_keyset = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
    key_keyset.rotate();
    let values = Keyset::generate();
    let mut config = client_config(&bootstrap);
    if !idempotent {
        config.set("enable.idempotence", "false");
    }
    // Records wait in the producer's queue for 100 ms before a batch goes
    // out, so a write's delivery reports cannot be in before its first poll
    // (unless this thread is kept off a core that long: see below).
    config.set("linger.ms", "100");
    let key_ser = DeterministicSerializer::new(Utf8, key_keyset.clone());
    let value_ser = EncryptingSerializer::new(Bytes, values.clone());
    let producer: TypedProducer<str, [u8], _, _> =
        TypedProducer::new(&config, key_ser.clone(), value_ser.clone()).unwrap();
    assert_eq!(producer.is_idempotent(), idempotent);
    // The partition count is read once, so the writes below hand their
    // records over in their first poll.
    producer.send(&topic, "warm-up", Some(b"v")).await.unwrap();
    let keys: Vec<String> = (0..12).map(|i| format!("dropped-{i}")).collect();
    // A write whose first poll already completed it (a loaded machine kept
    // this thread waiting past the linger) proves nothing about drops, and
    // fails nothing: at least one must have been pending when dropped.
    let mut dropped_pending = 0;
    for key in &keys {
        let send = producer.send(&topic, key, Some(b"value"));
        match tokio::time::timeout(Duration::ZERO, send).await {
            Err(_) => dropped_pending += 1,
            Ok(done) => {
                done.unwrap();
            }
        }
    }
    assert!(
        dropped_pending > 0,
        "no write was pending when dropped: the test proves nothing"
    );
    // The writes go on without their futures; wait for them (the
    // producer's flush waits for writes still in its line too).
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut missing: Vec<String>;
    loop {
        tokio::task::block_in_place(|| producer.flush(Duration::from_secs(30))).unwrap();
        missing = Vec::new();
        let partitions: Vec<Vec<(Vec<u8>, bool)>> = (0..3)
            .map(|p| read_partition(&bootstrap, &topic, p))
            .collect();
        for key in &keys {
            let want: Vec<(Vec<u8>, bool)> = encode_write(
                &topic,
                3,
                KeyBinding::Plaintext,
                &key_ser,
                &value_ser,
                &key[..],
                Some(&b"value"[..]),
            )
            .unwrap()
            .into_iter()
            .map(|r| (r.key, r.payload.is_some()))
            .collect();
            assert_eq!(want.len(), 2, "an older form's tombstone, then the value");
            let partition = murmur2_partition(key.as_bytes(), 3);
            let got: Vec<(Vec<u8>, bool)> = partitions[partition as usize]
                .iter()
                .filter(|(k, _)| want.iter().any(|(w, _)| w == k))
                .cloned()
                .collect();
            if got != want {
                missing.push(format!(
                    "{key}: {} of 2 records, in order: {}",
                    got.len(),
                    got.iter()
                        .map(|(_, v)| if *v { "value" } else { "tombstone" })
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
        }
        if missing.is_empty() || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        missing.is_empty(),
        "{} of {} dropped writes are cut: {missing:?}",
        missing.len(),
        keys.len()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_send_future_still_completes_the_write_on_an_idempotent_producer() {
    dropped_futures_complete_their_writes(true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_send_future_still_completes_the_write_on_a_producer_that_is_not_idempotent() {
    dropped_futures_complete_their_writes(false).await;
}

/// `acks` (or `request.required.acks`) other than `all` is refused, with an
/// error that names the setting, idempotent or not: a delivery report would
/// not mean the record is stored. `all` and `-1` are accepted.
#[test]
fn a_producer_without_acks_all_is_refused() {
    let make = |settings: &[(&str, &str)]| {
        let mut config = client_config("127.0.0.1:1");
        for (k, v) in settings {
            config.set(*k, *v);
        }
        TypedProducer::<str, [u8], _, _>::new(
            &config,
            Utf8,
            EncryptingSerializer::new(Bytes, Keyset::generate()),
        )
        .map(|_| ())
    };
    for (name, value) in [
        ("acks", "0"),
        ("acks", "1"),
        ("request.required.acks", "0"),
        ("request.required.acks", "1"),
    ] {
        for idempotence in ["true", "false"] {
            let e = make(&[(name, value), ("enable.idempotence", idempotence)])
                .expect_err("acks other than all accepted");
            let msg = e.to_string();
            assert!(matches!(e, Error::Kafka { .. }), "{msg}");
            assert!(msg.contains(&format!("{name}={value}")), "{msg}");
        }
    }
    for value in ["all", "-1"] {
        make(&[("acks", value)]).unwrap();
    }
    make(&[]).unwrap();
}

/// librdkafka's topic-level names of `acks` (`topic.acks`,
/// `topic.request.required.acks`) set the same property: on a producer
/// that is not idempotent, `topic.acks=1` beside the `acks=all` the
/// producer adds is applied in no set order, and may win (a delivery
/// report that does not mean the record is stored). Refused like `acks=1`.
#[test]
fn a_producer_with_topic_acks_not_all_is_refused() {
    for name in ["topic.acks", "topic.request.required.acks"] {
        for value in ["0", "1"] {
            let mut config = client_config("127.0.0.1:1");
            config.set(name, value).set("enable.idempotence", "false");
            let made = TypedProducer::<str, [u8], _, _>::new(
                &config,
                Utf8,
                EncryptingSerializer::new(Bytes, Keyset::generate()),
            );
            assert!(made.is_err(), "{name}={value} accepted");
        }
    }
}
