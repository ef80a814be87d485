//! Crypto-shredding on the embedded default: customers' profiles stored
//! under subject keys (a DEK per customer, the record key), in a redb state
//! store with a changelog, subject keys in a redb key store. Copies are
//! made as they would be in production: the changelog as the topic holds
//! it before compaction, a backup of it written to a file, and a store
//! restored from that backup. Then one customer is shredded (one call),
//! and every copy is read again.
//!
//! The last line is `after the shred: customer-2 readable in 0 of 4
//! copies, the others in 8 of 8`.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use tombstone_crypt::shred::{RedbKeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::{
    restore, ChangeLoggingStore, Changelog as _, MemoryChangelog, Record, RedbStore, TypedStore,
};
use tombstone_crypt::{Context, Deserializer as _, Error, Keyset, Utf8};

type Store = TypedStore<String, String, ChangeLoggingStore<RedbStore, MemoryChangelog>>;
type Values = SubjectEncrypting<Utf8, str>;

const NAME: &str = "profiles";
const CUSTOMERS: [&str; 3] = ["customer-1", "customer-2", "customer-3"];
const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

fn store(db: RedbStore, values: &Values) -> Store {
    TypedStore::new(
        ChangeLoggingStore::new(db, MemoryChangelog::new()),
        NAME,
        (Utf8, Utf8),
        values.clone(),
        values.clone(),
    )
}

/// A backup of the changelog: one line per record, `key value` in base64
/// (`-` for a tombstone).
fn write_backup(path: &Path, records: &[Record]) -> Result<(), Error> {
    let text: String = records
        .iter()
        .map(|r| {
            let value = r.value.as_ref().map_or("-".to_owned(), |v| B64.encode(v));
            format!("{} {value}\n", B64.encode(&r.key))
        })
        .collect();
    std::fs::write(path, text).map_err(|e| Error::store("write the backup", e))
}

fn read_backup(path: &Path) -> Result<Vec<Record>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::store("read the backup", e))?;
    let bad = |e| Error::store("a backup line", e);
    text.lines()
        .enumerate()
        .map(|(i, line)| {
            let (key, value) = line.split_once(' ').unwrap_or((line, "-"));
            Ok(Record {
                offset: i as u64,
                key: B64.decode(key).map_err(bad)?,
                value: match value {
                    "-" => None,
                    v => Some(B64.decode(v).map_err(bad)?),
                },
            })
        })
        .collect()
}

/// Each customer's profile as `records` hold it (the latest record of the
/// key), decrypted: `None` when it reads as deleted.
fn from_records(
    values: &Values,
    records: &[Record],
    customer: &str,
) -> Result<Option<String>, Error> {
    let Some(r) = records.iter().rev().find(|r| r.key == customer.as_bytes()) else {
        return Ok(None);
    };
    let ctx = Context::new(NAME).with_key(customer.as_bytes());
    values.deserialize(&ctx, r.value.as_deref())
}

/// Each customer's profile in each of the four copies.
fn read_all(
    values: &Values,
    live: &Store,
    topic: &[Record],
    backup: &Path,
    restored: &Store,
) -> Result<Vec<[Option<String>; 4]>, Error> {
    let backup = read_backup(backup)?;
    CUSTOMERS
        .iter()
        .map(|c| {
            Ok([
                live.get(&(*c).to_owned())?,
                from_records(values, topic, c)?,
                from_records(values, &backup, c)?,
                restored.get(&(*c).to_owned())?,
            ])
        })
        .collect()
}

fn print(label: &str, rows: &[[Option<String>; 4]]) {
    println!("{label}");
    println!(
        "  {:<12} {:<22} {:<22} {:<22} {:<22}",
        "", "live store", "topic (not compacted)", "backup file", "restored store"
    );
    for (c, row) in CUSTOMERS.iter().zip(rows) {
        let cells: Vec<String> = row
            .iter()
            .map(|v| v.clone().unwrap_or_else(|| "(deleted)".to_owned()))
            .collect();
        println!(
            "  {c:<12} {:<22} {:<22} {:<22} {:<22}",
            cells[0], cells[1], cells[2], cells[3]
        );
    }
}

fn main() -> Result<(), Error> {
    let dir = std::env::temp_dir().join(format!("tombstone-crypt-shred-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| Error::store("create the demo directory", e))?;

    // The KEK wraps every subject's DEK (a keyset file, or an envelope key
    // whose KEK is in a KMS); the key store is a redb file, made here
    // (`RedbKeyStore::open` opens one that exists, and never makes one).
    let kek = Keyset::generate();
    let keys = Arc::new(SubjectKeys::create(
        kek,
        Arc::new(RedbKeyStore::create(dir.join("subject-keys.redb"))?),
    )?);
    let values: Values = SubjectEncrypting::new(Arc::clone(&keys), Utf8); // subject = record key

    let mut live = store(RedbStore::open(dir.join("profiles.redb"))?, &values);
    for (i, c) in CUSTOMERS.iter().enumerate() {
        live.put(&(*c).to_owned(), Some(&format!("{} Main St", i + 1)))?;
    }
    live.flush()?;

    // The copies: what the topic holds, a backup of it, a store restored
    // from the backup.
    let topic = live.inner().changelog().records()?;
    let backup = dir.join("changelog-backup.txt");
    write_backup(&backup, &topic)?;
    let mut db = RedbStore::open(dir.join("restored.redb"))?;
    restore(&mut db, &read_backup(&backup)?)?;
    let restored = store(db, &values);
    print(
        "before the shred",
        &read_all(&values, &live, &topic, &backup, &restored)?,
    );

    // Erase customer-2 everywhere: destroy its key. Nothing else is
    // written, no copy is touched.
    keys.shred(b"customer-2")?;

    let after = read_all(&values, &live, &topic, &backup, &restored)?;
    print("after keys.shred(b\"customer-2\")", &after);
    let readable = |shredded: bool| {
        CUSTOMERS
            .iter()
            .zip(&after)
            .filter(|(c, _)| (**c == "customer-2") == shredded)
            .flat_map(|(_, row)| row.iter())
            .filter(|v| v.is_some())
            .count()
    };
    std::fs::remove_dir_all(&dir).ok();
    println!(
        "after the shred: customer-2 readable in {} of 4 copies, the others in {} of 8",
        readable(true),
        readable(false)
    );
    Ok(())
}
