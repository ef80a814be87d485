//! Load through the whole stack against a broker: `scripts/soak.sh` runs it.
//!
//! ```sh
//! soak write   BOOTSTRAP TOPIC RECORDS KEYS SEED plain|encrypted KEYSET_FILE
//! soak restore BOOTSTRAP TOPIC RECORDS KEYS SEED plain|encrypted KEYSET_FILE
//! ```
//!
//! `write` sends RECORDS operations (puts of 100 B to 1 KiB values and
//! deletes, over KEYS keys, from a seeded PRNG) through
//! `EncryptedStore<ChangeLoggingStore<MemoryStore, KafkaChangelog>>` (or,
//! `plain`, the same stack without the encryption), flushing every 10,000,
//! and prints records/s. `restore` rebuilds a fresh store from the topic with
//! `restore_from` (streamed), checks every key against the state the same
//! PRNG says it must have (kept as one 64-bit hash per key, so the check
//! itself needs little memory), and prints records/s and the peak RSS.
//! Both print one line of `key=value` figures. `clients` (same arguments)
//! produces RECORDS values of 1 KiB through `TypedProducer` and consumes
//! them through `TypedConsumer`, and prints records/s for each.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::time::Instant;

use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::store::{
    restore_from, ChangeLoggingStore, EncryptedStore, KeyValueStore, MemoryStore,
};
use tombstone_crypt::{Error, Keyset};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

/// The operations, in order: `(key index, value)` with `None` a delete.
fn ops(records: u64, keys: u64, seed: u64) -> impl Iterator<Item = (u64, Option<Vec<u8>>)> {
    let mut rng = Rng(seed | 1);
    (0..records).map(move |i| {
        let k = rng.next() % keys;
        if rng.next() % 4 == 0 {
            (k, None)
        } else {
            let len = 100 + (rng.next() % 925) as usize;
            let mut v = vec![0u8; len];
            v[..8].copy_from_slice(&i.to_le_bytes());
            (k, Some(v))
        }
    })
}

fn key(k: u64) -> Vec<u8> {
    format!("key-{k:08}").into_bytes()
}

fn hash(v: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    v.hash(&mut h);
    h.finish()
}

/// Peak resident set size of this process, in MiB (VmHWM).
fn peak_rss_mib() -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// `clients`: RECORDS values of 1 KiB produced through `TypedProducer`
/// (up to 10,000 in flight) and consumed through `TypedConsumer`, on a
/// topic of one partition; prints records/s for each half.
fn clients(
    bootstrap: &str,
    topic: &str,
    records: u64,
    encrypted: bool,
    keyset: Keyset,
) -> Result<(), Error> {
    use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
    use tombstone_crypt::kafka::{TypedConsumer, TypedProducer};
    use tombstone_crypt::{
        Bytes, DecryptingDeserializer, Deserializer, EncryptingSerializer, Serializer,
    };
    async fn run<VS, VD>(
        config: ClientConfig,
        topic: &str,
        records: u64,
        vs: VS,
        vd: VD,
    ) -> Result<(f64, f64), Error>
    where
        VS: Serializer<[u8]>,
        VD: Deserializer<Vec<u8>>,
    {
        use futures_util::stream::{FuturesUnordered, StreamExt as _};
        let value = vec![0x5au8; 1024];
        let producer = TypedProducer::new(&config, Bytes, vs)?;
        let started = Instant::now();
        // A sliding window of sends in flight, as a streaming producer has.
        let mut in_flight = FuturesUnordered::new();
        for j in 0..records {
            if in_flight.len() >= 10_000 {
                if let Some(r) = in_flight.next().await {
                    r?;
                }
            }
            let producer = &producer;
            let value = &value;
            in_flight.push(async move {
                let key = key(j % 100_000);
                producer.send(topic, &key[..], Some(&value[..])).await
            });
        }
        while let Some(r) = in_flight.next().await {
            r?;
        }
        let produced = started.elapsed().as_secs_f64();
        let mut config = config;
        config.set("group.id", format!("soak-{topic}"));
        let consumer = TypedConsumer::new(&config, Bytes, vd)?;
        let mut tpl = tombstone_crypt::kafka::rdkafka::TopicPartitionList::new();
        tpl.add_partition_offset(topic, 0, tombstone_crypt::kafka::rdkafka::Offset::Beginning)
            .map_err(|e| Error::changelog("assign", e))?;
        consumer.assign(&tpl)?;
        let started = Instant::now();
        for _ in 0..records {
            let r = consumer.recv().await?;
            assert_eq!(r.value.map(|v| v.len()), Some(1024));
        }
        let consumed = started.elapsed().as_secs_f64();
        Ok((records as f64 / produced, records as f64 / consumed))
    }
    // The topic, through the changelog type (compacted, one partition).
    drop(KafkaChangelog::open(bootstrap, topic)?);
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| Error::store("tokio runtime", e))?;
    let (produced, consumed) = if encrypted {
        runtime.block_on(run(
            config,
            topic,
            records,
            EncryptingSerializer::new(Bytes, keyset.clone()),
            DecryptingDeserializer::new(Bytes, keyset),
        ))?
    } else {
        runtime.block_on(run(config, topic, records, Bytes, Bytes))?
    };
    println!(
        "mode=clients encrypted={encrypted} records={records} produced_per_s={produced:.0} consumed_per_s={consumed:.0} peak_rss_mib={:.0}",
        peak_rss_mib()
    );
    Ok(())
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 9 {
        eprintln!("usage: soak write|restore BOOTSTRAP TOPIC RECORDS KEYS SEED plain|encrypted KEYSET_FILE");
        std::process::exit(2);
    }
    let (mode, bootstrap, topic) = (&args[1], &args[2], &args[3]);
    let parse = |s: &str| {
        s.parse::<u64>()
            .unwrap_or_else(|_| panic!("not a number: {s}"))
    };
    let (records, keys, seed) = (parse(&args[4]), parse(&args[5]), parse(&args[6]));
    let encrypted = args[7] == "encrypted";
    let keyset_file = &args[8];
    let keyset = match std::fs::read_to_string(keyset_file) {
        Ok(json) => Keyset::from_tink_json(&json)?,
        Err(_) => {
            let k = Keyset::generate();
            std::fs::write(keyset_file, k.to_tink_json())
                .map_err(|e| Error::store("write keyset", e))?;
            k
        }
    };
    if mode == "clients" {
        return clients(bootstrap, topic, records, encrypted, keyset);
    }
    let log = KafkaChangelog::open(bootstrap, topic)?;
    match mode.as_str() {
        "write" => {
            let logged = ChangeLoggingStore::new(MemoryStore::new(), log);
            let mut store: Box<dyn KeyValueStore> = if encrypted {
                Box::new(EncryptedStore::new(logged, topic.as_str(), keyset))
            } else {
                Box::new(logged)
            };
            let started = Instant::now();
            for (i, (k, v)) in ops(records, keys, seed).enumerate() {
                store.put(&key(k), v.as_deref())?;
                if i % 10_000 == 9_999 {
                    store.flush()?;
                }
            }
            store.flush()?;
            let secs = started.elapsed().as_secs_f64();
            println!(
                "mode=write encrypted={encrypted} records={records} seconds={secs:.2} records_per_s={:.0} peak_rss_mib={:.0}",
                records as f64 / secs,
                peak_rss_mib()
            );
        }
        "restore" => {
            let mut want = std::collections::HashMap::with_capacity(keys as usize);
            for (k, v) in ops(records, keys, seed) {
                match v {
                    Some(v) => want.insert(k, hash(&v)),
                    None => want.remove(&k),
                };
            }
            let started = Instant::now();
            let mut fresh = MemoryStore::new();
            let n = restore_from(&mut fresh, &log)?;
            let secs = started.elapsed().as_secs_f64();
            let store: Box<dyn KeyValueStore> = if encrypted {
                Box::new(EncryptedStore::new(fresh, topic.as_str(), keyset))
            } else {
                Box::new(fresh)
            };
            let mut live = 0u64;
            for (k, h) in &want {
                let got = store.get(&key(*k))?;
                assert_eq!(got.as_deref().map(hash), Some(*h), "key {k}");
                live += 1;
            }
            let all = store.all()?;
            assert_eq!(all.len() as u64, live, "keys that were deleted came back");
            println!(
                "mode=restore encrypted={encrypted} records={n} live_keys={live} seconds={secs:.2} records_per_s={:.0} peak_rss_mib={:.0}",
                n as f64 / secs,
                peak_rss_mib()
            );
            assert_eq!(n, records, "the topic does not hold every record");
        }
        other => {
            eprintln!("unknown mode {other}");
            std::process::exit(2);
        }
    }
    Ok(())
}
