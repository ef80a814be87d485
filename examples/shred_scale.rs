//! Subject keys at scale (`tombstone_crypt::shred`): makes one DEK for each
//! of N subjects, then encrypts values over a hot set of them, and prints
//! what it cost: the time per first write of a subject (a DEK made,
//! wrapped and stored), the key store's size, the process's peak memory,
//! the time per value over the hot set, the key-store reads and the KMS
//! calls.
//!
//!     cargo run --release --example shred_scale --features redb -- 1000000 memory
//!     cargo run --release --example shred_scale --features redb -- 10000 redb /tmp/keys.redb
//!     cargo run --release --example shred_scale --features redb,kafka -- 1000000 topic 127.0.0.1:19092
//!
//! Arguments: the number of subjects (default 100000); the store:
//! `memory`, `redb PATH` or `topic BOOTSTRAP` (a new key-store topic on
//! that broker); the hot set (default 1000 subjects); the values written
//! over it (default 1000000). With `SHRED_SCALE_KEK=kms` the KEK is an
//! envelope key in an in-process KMS that counts its calls (a real KMS's
//! latency aside, the calls are what it costs).
//!
//! `topic`: the N subjects' DEKs are made in memory and copied to the
//! topic as the key store writes them (the store's own first writes wait
//! for the broker each: `first write` below is measured for 1000 more
//! subjects through the topic); then a new instance reads the topic into
//! its view (the time and memory of that read are printed), and the hot
//! set is written through it. The view at 10^7 subjects, in memory and on
//! disk (`KafkaKeyStore::with_view_dir`), and a restart: `view_scale`.

use std::sync::Arc;
use std::time::Instant;

use tombstone_crypt::shred::{
    KeyStore, MemoryKeyStore, RedbKeyStore, SubjectEncrypting, SubjectKeys,
};
use tombstone_crypt::{Bytes, Context, KeyTemplate, Keyset, Serializer as _};

/// A line of `/proc/self/status` in KiB (`VmHWM`: peak, `VmRSS`: now).
fn status_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn subject(i: usize) -> Vec<u8> {
    format!("subject-{i:08}").into_bytes()
}

/// Writes a first value for each subject in `range`; the time per subject.
fn first_writes(
    writer: &SubjectEncrypting<Bytes, [u8]>,
    range: std::ops::Range<usize>,
) -> Result<u128, tombstone_crypt::Error> {
    let n = range.len().max(1) as u128;
    let start = Instant::now();
    for i in range {
        let s = subject(i);
        writer.serialize(&Context::new("t").with_key(&s), Some(&[7u8; 100][..]))?;
    }
    Ok(start.elapsed().as_nanos() / n)
}

#[cfg(feature = "kafka")]
fn topic_store(
    bootstrap: &str,
    kek: &Keyset,
    n: usize,
) -> Result<(Arc<dyn KeyStore>, u128), Box<dyn std::error::Error>> {
    use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
    use tombstone_crypt::store::Changelog as _;
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let topic = format!("shred-scale-{}", nanos.as_nanos());
    // The DEKs, made in memory, then written as the key store writes them:
    // key `subject tag | DEK id`, value the record.
    let memory = Arc::new(MemoryKeyStore::new());
    let maker = SubjectEncrypting::new(
        Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&memory) as _)?),
        Bytes,
    );
    let per_subject = first_writes(&maker, 0..n)?;
    let mut log = KafkaChangelog::open(bootstrap, &topic)?;
    for (tag, record) in memory.records() {
        let mut key = tag.to_vec();
        key.extend_from_slice(&record[..8]);
        log.append(&key, Some(&record))?;
    }
    log.flush()?;
    drop((maker, memory, log));
    // The view's memory alone: a process that only reads the topic.
    let view = std::process::Command::new(std::env::current_exe()?)
        .args(["0", "view", bootstrap, &topic])
        .output()?;
    print!("{}", String::from_utf8_lossy(&view.stdout));
    let store = KafkaKeyStore::new(KafkaChangelog::open(bootstrap, &topic)?);
    Ok((Arc::new(store), per_subject))
}

/// `view BOOTSTRAP TOPIC`: reads a key-store topic into a view, and
/// prints the time and the process's peak memory.
#[cfg(feature = "kafka")]
fn view_only(bootstrap: &str, topic: &str) -> Result<(), Box<dyn std::error::Error>> {
    use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
    let before = status_kib("VmHWM:");
    let store = KafkaKeyStore::new(KafkaChangelog::open(bootstrap, topic)?);
    let start = Instant::now();
    store.get(&[0; 16])?;
    println!(
        "view alone              read in {} ms, peak {} MiB ({} MiB before reading)",
        start.elapsed().as_millis(),
        status_kib("VmHWM:") / 1024,
        before / 1024
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(100_000), |a| a.parse())?;
    let kind = args.get(1).map_or("memory", String::as_str);
    #[cfg(feature = "kafka")]
    if kind == "view" {
        let (Some(b), Some(t)) = (args.get(2), args.get(3)) else {
            return Err("view needs BOOTSTRAP TOPIC".into());
        };
        return view_only(b, t);
    }
    let rest = if kind == "memory" { 2 } else { 3 };
    let hot: usize = args
        .get(rest)
        .map_or(Ok(1000), |a| a.parse())?
        .min(n)
        .max(1);
    let values: usize = args.get(rest + 1).map_or(Ok(1_000_000), |a| a.parse())?;
    let kms = tombstone_crypt::__fuzz::FakeKms::new();
    let kek = if std::env::var("SHRED_SCALE_KEK").as_deref() == Ok("kms") {
        let clients = tombstone_crypt::kms::KmsClients::new().with(kms.clone());
        Keyset::generate_with(
            KeyTemplate::kms_envelope("fake-kms://kek").with_kms_clients(clients),
        )?
    } else {
        Keyset::generate()
    };
    let before = status_kib("VmHWM:");
    let (store, path, made_elsewhere): (Arc<dyn KeyStore>, Option<String>, Option<u128>) =
        match kind {
            "redb" => {
                let path = args.get(2).ok_or("redb needs a PATH")?.clone();
                let _ = std::fs::remove_file(&path);
                (Arc::new(RedbKeyStore::create(&path)?), Some(path), None)
            }
            #[cfg(feature = "kafka")]
            "topic" => {
                let bootstrap = args.get(2).ok_or("topic needs a BOOTSTRAP")?;
                let (store, per) = topic_store(bootstrap, &kek, n)?;
                (store, None, Some(per))
            }
            "memory" => (Arc::new(MemoryKeyStore::new()), None, None),
            other => return Err(format!("unknown store {other}").into()),
        };
    let keys = Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store))?);
    let writer: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(Arc::clone(&keys), Bytes);

    let (first, made) = match made_elsewhere {
        None => (first_writes(&writer, 0..n)?, n),
        Some(in_memory) => {
            // The view: the whole topic, read once (its memory: the line
            // of the process that only reads it, above).
            let start = Instant::now();
            keys.tag(b"warm-up")?;
            println!(
                "view of the topic       {} ms to read {n} subjects' records",
                start.elapsed().as_millis()
            );
            println!("DEKs made in memory     {in_memory} ns per subject");
            // First writes through the topic: each reads on from where the
            // view ended and waits for the broker.
            (first_writes(&writer, n..n + 1000)?, 1000)
        }
    };
    let records = store.records()?;
    let bytes: usize = records.iter().map(|(t, r)| t.len() + r.len()).sum();
    let file = path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());
    let kms_after_first = kms.encrypt_calls() + kms.decrypt_calls();

    let stats_before = keys.stats();
    let value = [7u8; 100];
    let start = Instant::now();
    for i in 0..values {
        let s = subject(i % hot);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    let per_value = start.elapsed().as_nanos() / values.max(1) as u128;
    let stats = keys.stats();
    println!("subjects                {n} ({kind})");
    println!("first write per subject {first} ns (a DEK made, wrapped, stored; {made} subjects)");
    println!(
        "key store               {} records, {} bytes of keys and records ({} per subject){}",
        records.len(),
        bytes,
        bytes / records.len().max(1),
        file.map_or(String::new(), |f| format!(", file {f} bytes"))
    );
    println!(
        "peak memory             {} MiB (process), {} MiB more than at start",
        status_kib("VmHWM:") / 1024,
        status_kib("VmHWM:").saturating_sub(before) / 1024
    );
    println!(
        "hot set                 {hot} subjects, {values} values of 100 B: {per_value} ns per value, {} key-store reads",
        stats.store_reads - stats_before.store_reads
    );
    if std::env::var("SHRED_SCALE_KEK").as_deref() == Ok("kms") {
        println!(
            "KMS calls               {kms_after_first} for the first writes, {} for the hot set",
            kms.encrypt_calls() + kms.decrypt_calls() - kms_after_first
        );
    }
    Ok(())
}
