//! A topic written under subject keys, with its KEK file and key store, for
//! the command line's shredding walkthrough (`docs/CLI.md`, "Shredding from
//! the command line"):
//!
//! ```sh
//! cargo run --release --example subject_topic --features kafka -- BOOTSTRAP TOPIC KEK_FILE KEY_STORE
//! ```
//!
//! Makes a KEK (a keyset, written to KEK_FILE as Tink's cleartext JSON: a
//! demo) and a new redb key store at KEY_STORE (neither may exist yet),
//! then writes three customers' profiles to TOPIC through a store whose
//! changelog is the topic, each under its customer's own key (the subject
//! is the record key), and deletes one of them (a tombstone). The topic is
//! the store's name, so the values are bound to it.

use std::sync::Arc;

use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::shred::{RedbKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::{ChangeLoggingStore, MemoryStore, TypedStore};
use tombstone_crypt::{Error, Keyset, Utf8};

fn main() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().collect();
    let [_, bootstrap, topic, kek_file, key_store] = &args[..] else {
        eprintln!("usage: subject_topic BOOTSTRAP TOPIC KEK_FILE KEY_STORE");
        std::process::exit(2);
    };
    let kek = Keyset::generate();
    // A cleartext keyset: readable by its owner only, never over another file.
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    std::io::Write::write_all(
        &mut options
            .open(kek_file)
            .map_err(|e| Error::store("create the KEK file", e))?,
        kek.to_tink_json().as_bytes(),
    )
    .map_err(|e| Error::store("write the KEK file", e))?;

    let keys = SubjectKeys::create(kek, Arc::new(RedbKeyStore::create(key_store)?))?;
    let values = SubjectEncrypting::new(Arc::new(keys), Utf8);
    let log = KafkaChangelog::open(bootstrap, topic)?;
    let mut store: TypedStore<String, String, _> = TypedStore::new(
        ChangeLoggingStore::new(MemoryStore::new(), log),
        topic.as_str(),
        (Utf8, Utf8),
        values.clone(),
        values,
    );
    for (customer, profile) in [
        ("customer-1", "Ada, 1 Main St"),
        ("customer-2", "Grace, 2 Main St"),
        ("customer-3", "Alan, 3 Main St"),
        ("customer-4", "Edsger, 4 Main St"),
    ] {
        store.put(&customer.to_owned(), Some(&profile.to_owned()))?;
    }
    store.delete(&"customer-4".to_owned())?;
    store.flush()?;
    println!(
        "wrote {topic}: 4 customers under subject keys, customer-4 deleted; KEK in {kek_file}, key store {key_store}"
    );
    Ok(())
}
