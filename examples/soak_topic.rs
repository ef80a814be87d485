//! A production-like topic for the command line's soak
//! (`PARTS=commands scripts/soak.sh`).
//!
//! ```sh
//! soak_topic BOOTSTRAP TOPIC PARTITIONS RECORDS KEYS SEED MIN_BYTES MAX_BYTES KEYSET_FILE
//! ```
//!
//! Creates TOPIC (compacted, PARTITIONS partitions) and writes RECORDS
//! records over KEYS keys (`key-00000042`), from a seeded PRNG: one in 20 a
//! tombstone, one in 20 a delete a broken layer wrote (the ciphertext of an
//! empty value), the rest values of MIN_BYTES to MAX_BYTES encrypted under
//! KEYSET_FILE's primary key, bound to the topic and the key. The same
//! arguments write the same records. Prints `records=N seconds=S`.

use std::time::{Duration, Instant};

use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tombstone_crypt::kafka::rdkafka::producer::{BaseProducer, BaseRecord, Producer as _};
use tombstone_crypt::{Bytes, Context, EncryptingSerializer, Keyset, Serializer as _};

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 10 {
        eprintln!("usage: soak_topic BOOTSTRAP TOPIC PARTITIONS RECORDS KEYS SEED MIN_BYTES MAX_BYTES KEYSET_FILE");
        std::process::exit(2);
    }
    let (bootstrap, topic) = (&args[1], &args[2]);
    let n = |i: usize| args[i].parse::<u64>();
    let (partitions, records, keys, seed, min, max) = (n(3)?, n(4)?, n(5)?, n(6)?, n(7)?, n(8)?);
    let keyset = Keyset::from_tink_json(&std::fs::read_to_string(&args[9])?)?;
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", bootstrap);
    let admin: AdminClient<DefaultClientContext> = config.create()?;
    let new = NewTopic::new(
        topic,
        i32::try_from(partitions)?,
        TopicReplication::Fixed(1),
    )
    .set("cleanup.policy", "compact");
    for r in futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new()))? {
        r.map_err(|(t, e)| format!("creating {t}: {e}"))?;
    }
    let producer: BaseProducer = config
        .clone()
        .set("enable.idempotence", "true")
        .set("linger.ms", "20")
        .set("batch.num.messages", "10000")
        .create()?;
    let ser = EncryptingSerializer::new(Bytes, keyset);
    let mut rng = Rng(seed | 1);
    let started = Instant::now();
    for _ in 0..records {
        let k = rng.next() % keys;
        let key = format!("key-{k:08}");
        let ctx = Context::new(topic).with_key(key.as_bytes());
        let value = match rng.next() % 20 {
            0 => None,
            1 => ser.serialize(&ctx, Some(&b""[..]))?,
            _ => {
                let len = (min + rng.next() % (max - min + 1)) as usize;
                let mut v = vec![0u8; len];
                v[..8.min(len)].copy_from_slice(&k.to_le_bytes()[..8.min(len)]);
                ser.serialize(&ctx, Some(&v[..]))?
            }
        };
        let partition = i32::try_from(k % partitions)?;
        loop {
            let mut r: BaseRecord<'_, [u8], [u8]> = BaseRecord::to(topic)
                .key(key.as_bytes())
                .partition(partition);
            if let Some(v) = &value {
                r = r.payload(&v[..]);
            }
            match producer.send(r) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    producer.poll(Duration::from_millis(50));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(300))?;
    println!(
        "records={records} seconds={:.1}",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
