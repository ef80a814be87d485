//! Subject keys at scale (`tombstone_crypt::shred`): makes one DEK for each
//! of N subjects, then encrypts values over a hot set of them, and prints
//! what it cost: the time per first write of a subject (a DEK made,
//! wrapped and stored), the key store's size, the process's peak memory,
//! the time per value over the hot set, and the store reads.
//!
//!     cargo run --release --example shred_scale --features redb -- 1000000 memory
//!     cargo run --release --example shred_scale --features redb -- 10000 redb /tmp/keys.redb
//!
//! Arguments: the number of subjects (default 100000), the store (`memory`
//! or `redb PATH`; default memory), the hot set (default 1000 subjects),
//! the values written over it (default 1000000).

use std::sync::Arc;
use std::time::Instant;

use tombstone_crypt::shred::{
    KeyStore, MemoryKeyStore, RedbKeyStore, SubjectEncrypting, SubjectKeys,
};
use tombstone_crypt::{Bytes, Context, Keyset, Serializer as _};

/// The process's peak resident memory (`VmHWM`), in KiB.
fn peak_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmHWM:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|n| n.parse().ok())
        })
        .unwrap_or(0)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let n: usize = args.first().map_or(Ok(100_000), |a| a.parse())?;
    let (store, path): (Arc<dyn KeyStore>, Option<String>) = match args.get(1).map(String::as_str) {
        Some("redb") => {
            let path = args.get(2).ok_or("redb needs a PATH")?.clone();
            let _ = std::fs::remove_file(&path);
            (Arc::new(RedbKeyStore::open(&path)?), Some(path))
        }
        _ => (Arc::new(MemoryKeyStore::new()), None),
    };
    let hot: usize = args.get(3).map_or(Ok(1000), |a| a.parse())?.min(n).max(1);
    let values: usize = args.get(4).map_or(Ok(1_000_000), |a| a.parse())?;
    let before = peak_kib();
    let keys = Arc::new(SubjectKeys::new(Keyset::generate(), Arc::clone(&store)));
    let writer: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(Arc::clone(&keys), Bytes);
    let value = [7u8; 100];
    let subject = |i: usize| format!("subject-{i:08}").into_bytes();

    let start = Instant::now();
    for i in 0..n {
        let s = subject(i);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    let first = start.elapsed();
    let records = store.records()?;
    let bytes: usize = records.iter().map(|(t, r)| t.len() + r.len()).sum();
    let file = path
        .as_ref()
        .and_then(|p| std::fs::metadata(p).ok())
        .map(|m| m.len());

    let stats_before = keys.stats();
    let start = Instant::now();
    for i in 0..values {
        let s = subject(i % hot);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    let per_value = start.elapsed().as_nanos() / values.max(1) as u128;
    let stats = keys.stats();
    println!("subjects                 {n}");
    println!(
        "first write per subject  {} ns (a DEK made, wrapped, stored)",
        first.as_nanos() / n.max(1) as u128
    );
    println!(
        "key store                {} records, {} bytes of keys and records ({} per subject){}",
        records.len(),
        bytes,
        bytes / n.max(1),
        file.map_or(String::new(), |f| format!(", file {f} bytes"))
    );
    println!(
        "peak memory              {} MiB (process), {} MiB more than at start",
        peak_kib() / 1024,
        peak_kib().saturating_sub(before) / 1024
    );
    println!(
        "hot set                  {hot} subjects, {values} values of 100 B: {per_value} ns per value, {} key-store reads",
        stats.store_reads - stats_before.store_reads
    );
    Ok(())
}
