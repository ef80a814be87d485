//! The reported scenario, run twice: a periodic job sends each stored event,
//! then deletes it. Once through a naive encryption layer (it encrypts the
//! null of a delete), once through tombstone-crypt, both on the embedded
//! default store (redb) with a changelog. Then the local state is lost and
//! rebuilt from the compacted changelog, as a Kafka Streams restore does.
//!
//! The last line is `resurrected: naive=N tombstone-crypt=M`.

#[path = "../tests/common/naive.rs"]
mod naive;

use std::path::Path;

use naive::NaiveSerde;
use tombstone_crypt::store::{
    compact, restore, ChangeLoggingStore, Changelog, MemoryChangelog, RedbStore, TypedStore,
};
use tombstone_crypt::{Bincode, DecryptingDeserializer, EncryptingSerializer, Error, Keyset, Utf8};

#[derive(serde::Serialize, serde::Deserialize, Debug, Clone)]
struct Event {
    id: u32,
    body: String,
}

type Store = TypedStore<String, Event, ChangeLoggingStore<RedbStore, MemoryChangelog>>;

#[derive(Debug, Default)]
struct Report {
    sent: usize,
    still_in_all: usize,
    nulls_resent: usize,
    records: usize,
    tombstones: usize,
    after_compaction: usize,
    resurrected: usize,
}

/// The punctuator: send every stored event, then delete it; flush.
fn punctuate(store: &mut Store, report: &mut Report) -> Result<(), Error> {
    for (key, event) in store.all()? {
        match event {
            Some(_) => report.sent += 1,
            // A deleted key the iterator still yields, with a null value.
            None => report.nulls_resent += 1,
        }
        store.delete(&key)?;
    }
    store.flush()
}

fn run(dir: &Path, label: &str, build: &dyn Fn(RedbStore) -> Store) -> Result<Report, Error> {
    let mut report = Report::default();
    let path = dir.join(format!("{label}.redb"));
    let mut store = build(RedbStore::open(&path)?);
    for round in 0..3u32 {
        for i in 0..4 {
            let id = round * 4 + i;
            let event = Event {
                id,
                body: format!("event {id}"),
            };
            store.put(&format!("event-{id:02}"), Some(&event))?;
        }
        punctuate(&mut store, &mut report)?;
    }
    report.still_in_all = store.all()?.len();
    let (_, log) = store.into_inner().into_parts();
    let records = log.records()?;
    report.records = records.len();
    report.tombstones = records.iter().filter(|r| r.value.is_none()).count();
    let compacted = compact(&records);
    report.after_compaction = compacted.len();

    // The local state is lost: rebuild it from the compacted changelog.
    drop(std::fs::remove_file(&path));
    let restored_path = dir.join(format!("{label}-restored.redb"));
    let mut fresh = RedbStore::open(&restored_path)?;
    restore(&mut fresh, &compacted)?;
    let store = build(fresh);
    report.resurrected = store.all()?.len();
    Ok(report)
}

fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!("tombstone-crypt-demo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::store("create the demo directory", e))?;
    let keyset = Keyset::generate();

    let ks = keyset.clone();
    let naive = run(&dir, "naive", &move |db| {
        let serde = NaiveSerde::new(Bincode::<Event>::new(), ks.clone());
        TypedStore::new(
            ChangeLoggingStore::new(db, MemoryChangelog::new()),
            "events",
            (Utf8, Utf8),
            serde.clone(),
            serde,
        )
    })?;
    let ks = keyset.clone();
    let ours = run(&dir, "tombstone-crypt", &move |db| {
        TypedStore::new(
            ChangeLoggingStore::new(db, MemoryChangelog::new()),
            "events",
            (Utf8, Utf8),
            EncryptingSerializer::new(Bincode::<Event>::new(), ks.clone()),
            DecryptingDeserializer::new(Bincode::<Event>::new(), ks.clone()),
        )
    })?;
    std::fs::remove_dir_all(&dir).ok();

    println!("3 rounds: 4 events stored, then each sent and deleted (redb store, changelog)");
    println!();
    println!("{:<44} {:>8} {:>16}", "", "naive", "tombstone-crypt");
    type Row = (&'static str, fn(&Report) -> usize);
    let rows: [Row; 7] = [
        ("events sent", |r| r.sent),
        ("deleted keys yielded again by all()", |r| r.nulls_resent),
        ("keys still in all() after the last delete", |r| {
            r.still_in_all
        }),
        ("changelog records", |r| r.records),
        ("tombstones in the changelog", |r| r.tombstones),
        ("records left after compaction", |r| r.after_compaction),
        ("keys back after a restore", |r| r.resurrected),
    ];
    for (label, f) in rows {
        println!("{label:<44} {:>8} {:>16}", f(&naive), f(&ours));
    }
    println!();
    println!(
        "resurrected: naive={} tombstone-crypt={}",
        naive.resurrected, ours.resurrected
    );
    Ok(())
}
