//! Shared plumbing of the proxy's tests: the broker, a proxy in process,
//! rdkafka clients through it and beside it.
#![allow(dead_code)]

pub mod peers;
pub mod subjects;
pub mod wire;

// The test kit's broker helpers (the library's `tests/common/`), shared
// with the library's and the command line's suites, not copied.
#[path = "../../../tests/common/compacting.rs"]
pub mod compacting;
#[path = "../../../tests/common/kafka.rs"]
pub mod kafka;
#[path = "../../../tests/common/own_broker.rs"]
pub mod own_broker;
#[path = "../../../tests/common/root.rs"]
pub mod root;

// Each suite uses some of them.
#[allow(unused_imports)]
pub use compacting::create_topic_with;
#[allow(unused_imports)]
pub use kafka::{apache_kafka, bootstrap, client_config as config, create_topic, fresh_topic};

use std::time::{Duration, Instant};

use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::message::Message;
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt_proxy::{Hooks, Policies, Proxy, ProxyConfig};

/// A broker that takes what Apache Kafka refuses (tansu 0.6.0,
/// `TOMBSTONE_TANSU_BOOTSTRAP`, started by `scripts/broker.sh`), for the
/// suites that plant on the broker a batch that lies about its counts, as
/// a Kafka-compatible broker may hold one, and that read a topic whole in
/// one Fetch; `None` with a printed line when it is unset: the test is
/// skipped.
pub fn lenient_broker() -> Option<String> {
    match std::env::var("TOMBSTONE_TANSU_BOOTSTRAP") {
        Ok(b) if !b.is_empty() => Some(b),
        _ => {
            eprintln!(
                "TOMBSTONE_TANSU_BOOTSTRAP is unset: test skipped (scripts/test.sh starts tansu \
                 with scripts/broker.sh)"
            );
            None
        }
    }
}

/// A proxy running in its own thread and runtime; stopped on drop.
pub struct RunningProxy {
    /// Its bootstrap address.
    pub addr: String,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl RunningProxy {
    /// Signals the proxy to shut down (it finishes in-flight requests);
    /// returns at once.
    pub fn signal_stop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }

    /// Waits until the proxy has shut down.
    pub fn join(&mut self) {
        self.signal_stop();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for RunningProxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Starts a proxy to `bootstrap` with `policies` and `hooks`.
pub fn start_proxy(bootstrap: &str, policies: Policies, hooks: Hooks) -> RunningProxy {
    start_proxy_with(bootstrap, policies, hooks, None)
}

/// [`start_proxy`] with a frame limit.
pub fn start_proxy_with(
    bootstrap: &str,
    policies: Policies,
    hooks: Hooks,
    max_frame_bytes: Option<usize>,
) -> RunningProxy {
    start_proxy_json(bootstrap, policies, hooks, max_frame_bytes, "")
}

/// [`start_proxy_with`] with more configuration fields (`extra`: JSON
/// members, each followed by a comma, such as `"tls": {...},`).
pub fn start_proxy_json(
    bootstrap: &str,
    policies: Policies,
    hooks: Hooks,
    max_frame_bytes: Option<usize>,
    extra: &str,
) -> RunningProxy {
    start_proxy_at(bootstrap, policies, hooks, max_frame_bytes, extra, None)
}

/// [`start_proxy_json`] listening at `port` (`None`: a free one).
pub fn start_proxy_at(
    bootstrap: &str,
    policies: Policies,
    hooks: Hooks,
    max_frame_bytes: Option<usize>,
    extra: &str,
    port: Option<u16>,
) -> RunningProxy {
    let extra = extra.to_owned();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let bootstrap = bootstrap.to_owned();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let mut last = None;
            for _ in 0..20 {
                let port = port.unwrap_or_else(kafka::free_base_port);
                let config = ProxyConfig::from_json(&format!(
                    r#"{{{extra}"listen":"127.0.0.1:{port}","bootstrap":"{bootstrap}"}}"#
                ))
                .unwrap();
                let config = ProxyConfig {
                    max_frame_bytes,
                    ..config
                };
                match Proxy::bind(&config, policies.clone()).await {
                    Ok(p) => {
                        let p = p.with_hooks(hooks);
                        ready_tx.send(p.local_addr().unwrap().to_string()).unwrap();
                        p.run(
                            async {
                                let _ = stop_rx.await;
                            },
                            Duration::from_secs(5),
                        )
                        .await
                        .unwrap();
                        return;
                    }
                    Err(e) => last = Some(e),
                }
            }
            panic!("binding a proxy: {last:?}");
        });
    });
    let addr = ready_rx.recv_timeout(Duration::from_secs(30)).unwrap();
    RunningProxy {
        addr,
        stop: Some(stop_tx),
        thread: Some(thread),
    }
}

/// A record as produced or consumed: key, value (`None`: a tombstone).
pub type Rec = (Option<Vec<u8>>, Option<Vec<u8>>);

/// A consumed record with its place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Consumed {
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The key.
    pub key: Option<Vec<u8>>,
    /// The value.
    pub value: Option<Vec<u8>>,
}

/// Produces `records` to partition `partition` of `topic` through
/// `bootstrap` (idempotent, acks=all, `compression`, batched), in order,
/// and returns each record's delivery: its offset, or the error.
pub fn produce(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    records: &[Rec],
    compression: &str,
) -> Vec<Result<i64, String>> {
    use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
    let producer: FutureProducer = config(bootstrap)
        .set("enable.idempotence", "true")
        .set("compression.type", compression)
        .set("linger.ms", "20")
        .set("message.timeout.ms", "6000")
        .create()
        .unwrap();
    let futures: Vec<_> = records
        .iter()
        .map(|(k, v)| {
            let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic).partition(partition);
            if let Some(k) = k {
                r = r.key(&k[..]);
            }
            if let Some(v) = v {
                r = r.payload(&v[..]);
            }
            producer.send_result(r).map_err(|(e, _)| e.to_string())
        })
        .collect();
    futures
        .into_iter()
        .map(|f| match futures_executor::block_on(f?) {
            Ok(Ok(d)) => Ok(d.offset),
            Ok(Err((e, _))) => Err(e.to_string()),
            Err(_) => Err("canceled".into()),
        })
        .collect()
}

/// [`produce`], every delivery asserted.
pub fn produce_ok(
    bootstrap: &str,
    topic: &str,
    partition: i32,
    records: &[Rec],
    compression: &str,
) {
    for (i, r) in produce(bootstrap, topic, partition, records, compression)
        .into_iter()
        .enumerate()
    {
        if let Err(e) = r {
            panic!("record {i} to {topic}: {e}");
        }
    }
}

/// Reads every partition of `topic` (`partitions` of them) from the
/// beginning to its end through `bootstrap`.
///
/// # Errors
/// A partition error (the proxy's `CORRUPT_MESSAGE`, for one), or no end
/// within 30 s.
pub fn consume_all(bootstrap: &str, topic: &str, partitions: i32) -> Result<Vec<Consumed>, String> {
    let consumer: BaseConsumer = config(bootstrap)
        .set("group.id", format!("g-{}", fresh_topic("c")))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&tpl).unwrap();
    let mut out = Vec::new();
    let mut eof = std::collections::HashSet::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    while eof.len() < partitions as usize {
        if Instant::now() > deadline {
            return Err(format!(
                "no end of {topic} within 30 s ({} records)",
                out.len()
            ));
        }
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Ok(m)) => out.push(Consumed {
                partition: m.partition(),
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
            }),
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            // A connection between the bootstrap's and the leader's: waited out.
            Some(Err(e)) if tombstone_crypt::kafka::is_transient_kafka_error(&e) => {}
            Some(Err(e)) => return Err(e.to_string()),
        }
    }
    out.sort_by_key(|c| (c.partition, c.offset));
    Ok(out)
}

/// The keysets of a policy topic, and its policy.
pub struct Keys {
    /// The value keyset.
    pub values: tombstone_crypt::Keyset,
    /// The key keyset (AES-SIV).
    pub keys: Option<tombstone_crypt::Keyset>,
}

impl Keys {
    /// Fresh keysets: values, and keys when `with_keys`.
    pub fn new(with_keys: bool) -> Self {
        Keys {
            values: tombstone_crypt::Keyset::generate(),
            keys: with_keys.then(|| {
                tombstone_crypt::Keyset::generate_with(tombstone_crypt::KeyTemplate::aes256_siv())
                    .unwrap()
            }),
        }
    }

    /// The policy of these keysets.
    pub fn policy(&self) -> tombstone_crypt_proxy::TopicPolicy {
        let policy = tombstone_crypt_proxy::TopicPolicy::keyset(self.values.clone());
        match &self.keys {
            Some(k) => policy.with_record_keys(k.clone()).unwrap(),
            None => policy,
        }
    }

    /// The policy of these keysets for `topic`.
    pub fn policies(&self, topic: &str) -> Policies {
        Policies::new().with_topic(topic, self.policy())
    }
}

/// The broker at `broker` holds one record per key of `last` in `topic`
/// (one partition), in its order: the key a
/// ciphertext, the value a ciphertext the library reads back to the
/// key's last value, the tombstone null.
pub fn sealed_per_key(
    broker: &str,
    keys: &Keys,
    topic: &str,
    last: &[(Vec<u8>, Option<Vec<u8>>)],
) -> Result<(), String> {
    use tombstone_crypt::kafka::decode_message;
    use tombstone_crypt::kafka::rdkafka::message::OwnedMessage;
    use tombstone_crypt::kafka::rdkafka::Timestamp;
    use tombstone_crypt::record_key::KeyBinding;
    use tombstone_crypt::{Bytes, DecryptingDeserializer, DeterministicDeserializer};
    let direct = consume_all(broker, topic, 1)?;
    if direct.len() != last.len() {
        return Err(format!(
            "{} records on the broker after compaction, {} keys",
            direct.len(),
            last.len()
        ));
    }
    let key_de = DeterministicDeserializer::new(Bytes, keys.keys.clone().unwrap());
    let value_de = DecryptingDeserializer::new(Bytes, keys.values.clone());
    for (want, d) in last.iter().zip(&direct) {
        let (key, value) = want;
        let wire_key = d.key.clone().unwrap_or_default();
        if wire_key.len() != key.len() + 21 || wire_key[0] != 1 {
            return Err(format!(
                "offset {}: the key on the broker is not a ciphertext",
                d.offset
            ));
        }
        match (value, &d.value) {
            (None, Some(_)) => {
                return Err(format!(
                    "offset {}: the tombstone on the broker is a value",
                    d.offset
                ))
            }
            (Some(v), Some(c)) if c.len() != v.len() + 33 || c[0] != 1 => {
                return Err(format!(
                    "offset {}: the value on the broker is not a ciphertext",
                    d.offset
                ))
            }
            _ => {}
        }
        let m = OwnedMessage::new(
            d.value.clone(),
            Some(wire_key),
            topic.to_owned(),
            Timestamp::NotAvailable,
            d.partition,
            d.offset,
            None,
        );
        let got: (Vec<u8>, Option<Vec<u8>>) =
            decode_message(&m, KeyBinding::Plaintext, &key_de, &value_de)
                .map_err(|e| format!("offset {}: {e}", d.offset))?;
        if &got != want {
            return Err(format!(
                "offset {}: the library reads {got:?}, not {:?}",
                d.offset,
                (key, value)
            ));
        }
    }
    Ok(())
}

/// A field of this process's `/proc/self/status` in KiB (`"VmRSS:"`: the
/// resident memory, the proxies the tests start in-process included).
pub fn status_kib(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in /proc/self/status"))
}
