//! The changelog contract against a real broker that fails: paused with
//! SIGSTOP mid-stream (retries must not reorder a key's records), killed
//! with SIGKILL (flush names what was not delivered, the store refuses to
//! serve), a record the client refuses (the store recovers from the log),
//! and an existing topic that is not compacted (refused).
//!
//! Each test that pauses or kills a broker starts a private one
//! (`tests/common/broker.rs`); the others use the shared one
//! (`TOMBSTONE_KAFKA_BOOTSTRAP`, or skip with `TOMBSTONE_SKIP_KAFKA=1`).
#![cfg(feature = "kafka")]

use crate::common;

use std::collections::BTreeMap;
use std::error::Error as _;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::broker::PrivateBroker;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::store::{
    compact, ChangeLoggingStore, Changelog, EncryptedStore, KeyValueStore, MemoryStore,
};
use tombstone_crypt::{Error, Keyset};

fn skip() -> bool {
    std::env::var_os("TOMBSTONE_SKIP_KAFKA").is_some()
}

fn topic(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("tc-{name}-{}-{nanos}", std::process::id())
}

type Store = EncryptedStore<ChangeLoggingStore<MemoryStore, KafkaChangelog>>;

/// The newest record per key in the log, decrypted: what compaction leaves.
fn compacted_view(store: &Store, keyset: &Keyset, name: &str) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let records = compact(&store.inner().changelog().records().unwrap());
    let mut fresh = MemoryStore::new();
    tombstone_crypt::store::restore(&mut fresh, &records).unwrap();
    EncryptedStore::new(fresh, name, keyset.clone())
        .all()
        .unwrap()
        .into_iter()
        .collect()
}

#[test]
fn a_paused_broker_delays_but_never_reorders_a_key() {
    if skip() {
        return;
    }
    let broker = PrivateBroker::start();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &broker.bootstrap)
        // Short request timeouts, so the pause forces retries; a long message
        // timeout, so nothing is given up.
        .set("request.timeout.ms", "1000")
        .set("socket.timeout.ms", "2000")
        .set("retry.backoff.ms", "100")
        .set("message.timeout.ms", "120000");
    let name = topic("paused");
    let log = KafkaChangelog::with_config(config, &name).unwrap();
    let keyset = Keyset::generate();
    let mut store = EncryptedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        &name,
        keyset.clone(),
    );
    let mut model = BTreeMap::new();
    let mut paused_at = None;
    for i in 0..400u32 {
        if i == 100 {
            store.flush().unwrap();
            broker.pause();
            paused_at = Some(Instant::now());
        }
        if i == 300 {
            // Four seconds of SIGSTOP: every request in flight times out and
            // is retried.
            let t = paused_at.unwrap();
            std::thread::sleep(Duration::from_secs(4).saturating_sub(t.elapsed()));
            broker.resume();
        }
        let key = format!("key-{}", i % 7).into_bytes();
        if i % 3 == 0 {
            store.delete(&key).unwrap();
            model.remove(&key);
        } else {
            let v = format!("v{i}").into_bytes();
            store.put(&key, Some(&v)).unwrap();
            model.insert(key, v);
        }
        if (100..300).contains(&i) && i % 20 == 0 {
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let started = Instant::now();
    store.flush().unwrap();
    eprintln!("after the pause, the flush took {:?}", started.elapsed());
    let served: BTreeMap<Vec<u8>, Vec<u8>> = store.all().unwrap().into_iter().collect();
    assert_eq!(served, model);
    assert_eq!(
        compacted_view(&store, &keyset, &name),
        model,
        "the newest record per key is not the model's"
    );
    assert_eq!(
        store.inner().changelog().records().unwrap().len(),
        400,
        "records lost or duplicated"
    );
}

#[test]
fn a_killed_broker_fails_the_flush_by_name_and_the_store_refuses() {
    if skip() {
        return;
    }
    let mut broker = PrivateBroker::start();
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &broker.bootstrap)
        .set("message.timeout.ms", "3000");
    let name = topic("killed");
    broker.warm_up(&[&name]);
    let log = KafkaChangelog::with_config(config, &name)
        .unwrap()
        .with_timeout(Duration::from_secs(8));
    let mut store = EncryptedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        &name,
        Keyset::generate(),
    );
    store.put(b"a", Some(b"1")).unwrap();
    store.flush().unwrap();
    broker.kill();
    store.put(b"b", Some(b"2")).unwrap();
    store.delete(b"a").unwrap();
    let started = Instant::now();
    let err = store.flush().unwrap_err();
    eprintln!(
        "flush with the broker killed, after {:?}: {err}; cause: {:?}",
        started.elapsed(),
        err.source().map(|s| s.to_string())
    );
    assert!(matches!(err, Error::Changelog { .. }), "{err:?}");
    // Either the deliveries failed (named one by one) or they are still
    // unacknowledged when the flush gives up (named as a range): appends 2
    // and 3, never the acknowledged first one.
    let text = err.to_string();
    assert!(
        (text.contains("2 record(s) not delivered") && text.contains("#2, #3"))
            || text.contains("2 record(s) of appends #2..#3 still unacknowledged"),
        "the failed appends are named: {text}"
    );
    assert!(err.source().is_some(), "the broker error is the source");
    // The store neither says `a` is deleted nor that it is not.
    assert_eq!(store.get(b"a"), Err(Error::NeedsRestore));
    assert_eq!(store.put(b"c", Some(b"3")), Err(Error::NeedsRestore));
    // Recovering needs the log: with the broker gone it fails, and the store
    // keeps refusing.
    assert!(store.inner_mut().recover().is_err());
    assert_eq!(store.all(), Err(Error::NeedsRestore));
}

#[test]
fn a_refused_append_is_recovered_from_the_log() {
    if skip() {
        return;
    }
    let bootstrap = std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP").expect("TOMBSTONE_KAFKA_BOOTSTRAP");
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", &bootstrap)
        .set("message.max.bytes", "10000");
    let name = topic("refused");
    let keyset = Keyset::generate();
    let log = KafkaChangelog::with_config(config, &name).unwrap();
    let mut store = EncryptedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        &name,
        keyset.clone(),
    );
    store.put(b"k", Some(b"small")).unwrap();
    store.flush().unwrap();
    // The client refuses a record over message.max.bytes: the local store
    // already holds it, the log does not.
    let err = store.put(b"k", Some(&[7u8; 20_000])).unwrap_err();
    assert!(err.to_string().contains("append #2"), "{err}");
    assert_eq!(store.get(b"k"), Err(Error::NeedsRestore));
    store.inner_mut().recover().unwrap();
    assert_eq!(store.get(b"k").unwrap(), Some(b"small".to_vec()));
    // And it serves, and logs, again; the earlier failure does not stick.
    store.delete(b"k").unwrap();
    store.flush().unwrap();
    assert_eq!(store.get(b"k").unwrap(), None);
    assert!(compacted_view(&store, &keyset, &name).is_empty());
}

#[test]
fn an_existing_topic_that_is_not_compacted_is_refused() {
    use tombstone_crypt::kafka::rdkafka::admin::{
        AdminClient, AdminOptions, NewTopic, TopicReplication,
    };
    use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
    if skip() {
        return;
    }
    let bootstrap = std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP").expect("TOMBSTONE_KAFKA_BOOTSTRAP");
    let name = topic("delete-policy");
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &bootstrap);
    let admin: AdminClient<DefaultClientContext> = config.create().unwrap();
    let new = NewTopic::new(&name, 1, TopicReplication::Fixed(1)).set("cleanup.policy", "delete");
    for r in futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new())).unwrap()
    {
        r.unwrap();
    }
    let err = KafkaChangelog::open(&bootstrap, &name).unwrap_err();
    assert!(err.to_string().contains("cleanup.policy=delete"), "{err}");
    // A compacted one opens (and one the changelog creates is compacted).
    let fresh = topic("compacted");
    drop(KafkaChangelog::open(&bootstrap, &fresh).unwrap());
    drop(KafkaChangelog::open(&bootstrap, &fresh).unwrap());
}

#[test]
fn an_empty_changelog_replays_to_nothing() {
    if skip() {
        return;
    }
    let bootstrap = std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP").expect("TOMBSTONE_KAFKA_BOOTSTRAP");
    let log = KafkaChangelog::open(&bootstrap, &topic("empty"))
        .unwrap()
        .with_timeout(Duration::from_secs(10));
    let started = Instant::now();
    assert_eq!(log.records().unwrap(), []);
    eprintln!("an empty changelog read in {:?}", started.elapsed());
}

/// One changelog partition per store task: three stores on the three
/// partitions of one topic, each restored from its own partition alone.
#[test]
fn a_changelog_per_partition_restores_each_store_alone() {
    use tombstone_crypt::kafka::TopicSettings;
    use tombstone_crypt::store::restore_from;
    if skip() {
        return;
    }
    let bootstrap = std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP").expect("TOMBSTONE_KAFKA_BOOTSTRAP");
    let name = topic("partitions");
    let keyset = Keyset::generate();
    let settings = TopicSettings::default().with_partitions(3);
    let mut stores: Vec<Store> = (0..3)
        .map(|p| {
            let mut config = ClientConfig::new();
            config.set("bootstrap.servers", &bootstrap);
            let log = KafkaChangelog::with_settings(config, &name, settings)
                .unwrap()
                .on_partition(p);
            assert_eq!(log.partition(), p);
            EncryptedStore::new(
                ChangeLoggingStore::new(MemoryStore::new(), log),
                &name,
                keyset.clone(),
            )
        })
        .collect();
    let mut models = vec![BTreeMap::new(); 3];
    for i in 0..90u32 {
        let p = (i % 3) as usize;
        let key = format!("task{p}-key-{}", i % 7).into_bytes();
        if i % 4 == 3 {
            stores[p].delete(&key).unwrap();
            models[p].remove(&key);
        } else {
            let v = format!("v{i}").into_bytes();
            stores[p].put(&key, Some(&v)).unwrap();
            models[p].insert(key, v);
        }
    }
    for (p, store) in stores.iter_mut().enumerate() {
        store.flush().unwrap();
        let mut fresh = MemoryStore::new();
        let n = restore_from(&mut fresh, store.inner().changelog()).unwrap();
        assert_eq!(n, 30, "partition {p} holds its own 30 records");
        let restored: BTreeMap<Vec<u8>, Vec<u8>> =
            EncryptedStore::new(fresh, &name, keyset.clone())
                .all()
                .unwrap()
                .into_iter()
                .collect();
        assert_eq!(restored, models[p], "partition {p}");
    }
}

/// Fire-and-forget writes to a broker that never answers: each write's
/// future polled once and dropped, as `send`'s docs allow (the write goes
/// on). Once librdkafka's queue and the producer's line are full, every
/// further write is refused at once with `QueueFull`, and the process
/// stops growing. Before the line had a bound, 300,000 writes of 1 KiB
/// took the process from 5 to 479 MiB, linearly, and nothing was refused.
#[test]
fn writes_to_a_broker_that_never_answers_are_refused_once_the_line_is_full() {
    use std::future::Future;
    use std::task::{Context, Poll, Waker};
    use tombstone_crypt::kafka::TypedProducer;
    use tombstone_crypt::{Bytes, EncryptingSerializer};

    fn rss_kib() -> usize {
        std::fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }
    let mut config = ClientConfig::new();
    // Nothing listens on port 1.
    config.set("bootstrap.servers", "127.0.0.1:1");
    config.set("queue.buffering.max.messages", "1000");
    config.set("message.timeout.ms", "600000");
    let p: TypedProducer<[u8], [u8], _, _> = TypedProducer::new(
        &config,
        Bytes,
        EncryptingSerializer::new(Bytes, Keyset::generate()),
    )
    .unwrap()
    .with_line_bounds(1000, 64 << 20);
    let value = vec![7u8; 1024];
    let mut cx = Context::from_waker(Waker::noop());
    let (mut taken, mut refused) = (0usize, 0usize);
    let mut write = |i: usize| {
        let key = format!("k-{i}");
        let mut f = Box::pin(p.send("never-answers", key.as_bytes(), Some(&value[..])));
        match f.as_mut().poll(&mut cx) {
            Poll::Pending => taken += 1,
            Poll::Ready(Err(e)) => {
                let queue_full = e
                    .source()
                    .is_some_and(|s| s.to_string().contains("QueueFull"))
                    || e.to_string().contains("line is full");
                assert!(queue_full, "write {i}: {e}");
                refused += 1;
            }
            Poll::Ready(Ok(d)) => panic!("write {i} delivered to nowhere: {d:?}"),
        }
        // Dropped: fire and forget.
    };
    for i in 0..20_000 {
        write(i);
    }
    let settled = rss_kib();
    for i in 20_000..300_000 {
        write(i);
    }
    let grew_kib = rss_kib().saturating_sub(settled);
    eprintln!(
        "300,000 writes of 1 KiB to a broker that never answers: {taken} taken, {refused} \
         refused; the process grew {grew_kib} KiB over the last 280,000"
    );
    // librdkafka's queue (1,000) and the line (1,000 records) hold the
    // rest; every write past them is refused.
    assert!(taken <= 2_100, "{taken} writes taken");
    assert_eq!(taken + refused, 300_000);
    // 280,000 writes of 1 KiB held would be over 400 MiB.
    assert!(grew_kib < 16 * 1024, "the process grew {grew_kib} KiB");
}
