//! A topic as a broken encryption layer leaves it, for `tombstone-crypt
//! audit` and `repair` to find and fix (`docs/CLI.md`, "Find and fix broken
//! tombstones").
//!
//! ```sh
//! cargo run --example naive_topic --features kafka -- BOOTSTRAP TOPIC KEYSET_FILE
//! ```
//!
//! The demo's job runs on a Kafka changelog: 3 rounds of 4 events, each sent
//! then deleted, then 2 events left alive; every value, and every delete,
//! goes through the naive layer (a delete becomes the ciphertext of an empty
//! value). The keyset is written to KEYSET_FILE (Tink JSON, cleartext: a
//! demo). The topic is the store's name, so the values are bound to it.

#[path = "../tests/common/naive.rs"]
mod naive;

use naive::NaiveSerde;
use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::store::{ChangeLoggingStore, MemoryStore, TypedStore};
use tombstone_crypt::{Bincode, Error, Keyset, Utf8};

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
struct Event {
    id: u32,
    body: String,
}

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, bootstrap, topic, keyset_file] = &args[..] else {
        eprintln!("usage: naive_topic BOOTSTRAP TOPIC KEYSET_FILE");
        std::process::exit(2);
    };
    let keyset = Keyset::generate();
    // A cleartext keyset: readable by its owner only.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(
        &mut options
            .open(keyset_file)
            .map_err(|e| Error::store("create the keyset file", e))?,
        keyset.to_tink_json().as_bytes(),
    )
    .map_err(|e| Error::store("write the keyset file", e))?;
    let serde = NaiveSerde::new(Bincode::<Event>::new(), keyset);
    let log = KafkaChangelog::open(bootstrap, topic)?;
    let mut store: TypedStore<String, Event, _> = TypedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        topic.as_str(),
        (Utf8, Utf8),
        serde.clone(),
        serde,
    );
    let event = |id: u32| Event {
        id,
        body: format!("event {id}"),
    };
    for round in 0..3u32 {
        for i in 0..4 {
            let id = round * 4 + i;
            store.put(&format!("event-{id:02}"), Some(&event(id)))?;
        }
        for i in 0..4 {
            store.delete(&format!("event-{:02}", round * 4 + i))?;
        }
        store.flush()?;
    }
    for id in 12..14 {
        store.put(&format!("event-{id:02}"), Some(&event(id)))?;
    }
    store.flush()?;
    println!("wrote {topic}: 14 events, 12 of them deleted through the naive layer");
    Ok(())
}
