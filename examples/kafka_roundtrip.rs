//! Encrypted records with deletes through the typed async clients, on the
//! loopback broker:
//!
//! ```sh
//! BOOTSTRAP=$(scripts/broker.sh start | tail -n 1)
//! cargo run --example kafka_roundtrip --features kafka -- "$BOOTSTRAP"
//! ```
//!
//! Produces five orders and deletes two (tombstones: no payload at all),
//! then consumes the topic back and prints each record, decrypted.

use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::DefaultClientContext;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::kafka::{TypedConsumer, TypedProducer};
use tombstone_crypt::{Bincode, DecryptingDeserializer, EncryptingSerializer, Error, Keyset, Utf8};

#[derive(serde::Serialize, serde::Deserialize, Debug)]
struct Order {
    item: String,
    quantity: u32,
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Error> {
    let bootstrap = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:19092".to_owned());
    let topic = format!("orders-{}", std::process::id());
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &bootstrap);

    // A topic of one partition (a broker may not create topics on demand).
    let admin: AdminClient<DefaultClientContext> = config
        .create()
        .map_err(|e| Error::changelog("admin client", e))?;
    let new = NewTopic::new(&topic, 1, TopicReplication::Fixed(-1));
    for r in admin
        .create_topics([&new], &AdminOptions::new())
        .await
        .map_err(|e| Error::changelog("create topic", e))?
    {
        r.map_err(|(_, code)| Error::changelog("create topic", code))?;
    }

    let keyset = Keyset::generate();
    let producer = TypedProducer::new(
        &config,
        Utf8,
        EncryptingSerializer::new(Bincode::<Order>::new(), keyset.clone()),
    )?;
    for (i, item) in ["book", "pen", "lamp", "mug", "desk"]
        .into_iter()
        .enumerate()
    {
        let order = Order {
            item: item.into(),
            quantity: i as u32 + 1,
        };
        let at = producer
            .send(&topic, &format!("order-{i}")[..], Some(&order))
            .await?;
        println!(
            "sent    order-{i} {order:?} -> partition {} offset {}",
            at.partition, at.offset
        );
    }
    for key in ["order-1", "order-3"] {
        let at = producer.send(&topic, key, None).await?;
        println!("deleted {key} (a tombstone) -> offset {}", at.offset);
    }

    config
        .set("group.id", format!("roundtrip-{topic}"))
        .set("enable.partition.eof", "false");
    let consumer = TypedConsumer::new(
        &config,
        Utf8,
        DecryptingDeserializer::new(Bincode::<Order>::new(), keyset),
    )?;
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(&topic, 0, Offset::Beginning)
        .map_err(|e| Error::changelog("assign", e))?;
    consumer.assign(&tpl)?;
    for _ in 0..7 {
        let r = consumer.recv().await?;
        match r.value {
            Some(order) => println!("read    {} {order:?} (offset {})", r.key, r.offset),
            None => println!("read    {} deleted (offset {})", r.key, r.offset),
        }
    }
    Ok(())
}
