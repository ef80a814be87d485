//! The key-store view at scale (`KafkaKeyStore`, in memory or on disk):
//! fills a new key-store topic with N subjects' DEK records, then, each in
//! a process of its own (so that each peak of memory is its own), builds
//! a view from the topic and serves a hot set of 1000 subjects through it,
//! and prints what it cost: the time to build the view, the process's peak
//! resident memory, a first write of a subject (a DEK made, written to the
//! topic, read back), a warm value, and, for the view on disk, the disk
//! used and the time to catch up after a restart with 10^4 new records.
//!
//!     cargo run --release --example view_scale --features kafka,redb -- 127.0.0.1:19092 1000000
//!
//! Arguments: the bootstrap; the number of subjects (default 10^6); which
//! views (`both`, `disk` or `memory`; default `both`). The records are
//! made here, not by `SubjectKeys` (a DEK record's size and shape: `tag |
//! id` -> `id | 65 bytes`), so that filling 10^7 subjects takes minutes;
//! the hot set's subjects are made through the store, as a service makes
//! them. The view on disk is in a new directory under the system's
//! temporary directory, removed at the end.

use std::process::Command;
use std::sync::Arc;
use std::time::Instant;

use tombstone_crypt::kafka::{KafkaChangelog, KafkaKeyStore};
use tombstone_crypt::shred::{SubjectEncrypting, SubjectKeys};
use tombstone_crypt::store::Changelog as _;
use tombstone_crypt::{Bytes, Context, Keyset, Serializer as _};

type Res<T> = Result<T, Box<dyn std::error::Error>>;

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

/// A small, fast generator of record bytes (xorshift64*, seeded).
struct Gen(u64);

impl Gen {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn fill(&mut self, out: &mut [u8]) {
        for chunk in out.chunks_mut(8) {
            let v = self.next().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }
}

/// Appends `n` DEK records of new subjects to `topic`.
fn fill(bootstrap: &str, topic: &str, n: usize, seed: u64) -> Res<f64> {
    let mut log = KafkaChangelog::open(bootstrap, topic)?;
    let mut g = Gen(seed | 1);
    let start = Instant::now();
    let mut key = [0u8; 24];
    let mut value = [0u8; 8 + 65];
    for i in 0..n {
        g.fill(&mut key);
        value[..8].copy_from_slice(&key[16..]);
        g.fill(&mut value[8..]);
        log.append(&key, Some(&value))?;
        if i % 100_000 == 99_999 {
            log.flush()?;
        }
    }
    log.flush()?;
    Ok(start.elapsed().as_secs_f64())
}

fn store(bootstrap: &str, topic: &str, view: &str) -> Res<KafkaKeyStore> {
    let store = KafkaKeyStore::new(KafkaChangelog::open(bootstrap, topic)?);
    Ok(match view {
        "memory" => store,
        dir => store.with_view_dir(dir)?,
    })
}

/// The child: builds (or catches up) the view, then serves the hot set;
/// prints `key value` lines.
fn child(bootstrap: &str, topic: &str, view: &str, kek_json: &str, hot: bool) -> Res<()> {
    let kek = Keyset::from_tink_json(kek_json)?;
    let start = Instant::now();
    let store = Arc::new(store(bootstrap, topic, view)?);
    let keys = Arc::new(SubjectKeys::open(kek, Arc::clone(&store) as _)?);
    println!("build_ms {}", start.elapsed().as_millis());
    println!("records_read {}", store.records_read());
    println!("peak_build_kib {}", status_kib("VmHWM:"));
    if !hot {
        return Ok(());
    }
    let writer: SubjectEncrypting<Bytes, [u8]> = SubjectEncrypting::new(Arc::clone(&keys), Bytes);
    let subject = |i: usize| format!("hot-{}-{i:04}", std::process::id()).into_bytes();
    let value = [7u8; 100];
    let start = Instant::now();
    for i in 0..1000 {
        let s = subject(i);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    println!("first_write_us {}", start.elapsed().as_micros() / 1000);
    // One pass first: a DEK cached at its first write may be past the
    // fence by now (the first writes take seconds), and is read from the
    // view again; the values timed are the cache's.
    for i in 0..1000 {
        let s = subject(i);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    let n = 2_000_000;
    let start = Instant::now();
    for i in 0..n {
        let s = subject(i % 1000);
        writer.serialize(&Context::new("t").with_key(&s), Some(&value[..]))?;
    }
    println!("warm_value_ns {}", start.elapsed().as_nanos() / n as u128);
    println!("peak_kib {}", status_kib("VmHWM:"));
    Ok(())
}

fn run_child(
    bootstrap: &str,
    topic: &str,
    view: &str,
    kek: &str,
    hot: bool,
) -> Res<Vec<(String, u64)>> {
    let out = Command::new(std::env::current_exe()?)
        .args([
            "child",
            bootstrap,
            topic,
            view,
            if hot { "hot" } else { "cold" },
        ])
        .env("VIEW_SCALE_KEK", kek)
        .output()?;
    if !out.status.success() {
        return Err(format!("child: {}", String::from_utf8_lossy(&out.stderr)).into());
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_owned(), v.parse().ok()?))
        })
        .collect())
}

fn get(m: &[(String, u64)], k: &str) -> u64 {
    m.iter().find(|(n, _)| n == k).map_or(0, |(_, v)| *v)
}

fn dir_bytes(dir: &std::path::Path) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| e.ok()?.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn main() -> Res<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some("child") {
        let kek = std::env::var("VIEW_SCALE_KEK")?;
        return child(&args[1], &args[2], &args[3], &kek, args[4] == "hot");
    }
    let bootstrap = args
        .first()
        .ok_or("usage: view_scale BOOTSTRAP [N] [both|disk|memory]")?;
    let n: usize = args.get(1).map_or(Ok(1_000_000), |a| a.parse())?;
    let which = args.get(2).map_or("both", String::as_str);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?;
    let topic = format!("view-scale-{}", nanos.as_nanos());
    let kek = Keyset::generate();
    // The naming key, through the store.
    SubjectKeys::create(
        kek.clone(),
        Arc::new(KafkaKeyStore::new(KafkaChangelog::open(bootstrap, &topic)?)),
    )?;
    let filled = fill(bootstrap, &topic, n, 42)?;
    println!("subjects                {n} on {topic} (written in {filled:.1} s)");
    let kek_json = kek.to_tink_json();
    let mut rows = Vec::new();
    if which != "memory" {
        let dir = std::env::temp_dir().join(format!("view-scale-{}", nanos.as_nanos()));
        let d = dir.to_string_lossy().into_owned();
        let built = run_child(bootstrap, &topic, &d, &kek_json, true)?;
        let disk = dir_bytes(&dir);
        let more = fill(bootstrap, &topic, 10_000, 7)?;
        let caught = run_child(bootstrap, &topic, &d, &kek_json, false)?;
        println!(
            "disk view               built in {:.1} s ({} records read), peak RSS {} MiB while building, {} MiB with the hot set served",
            get(&built, "build_ms") as f64 / 1000.0,
            get(&built, "records_read"),
            get(&built, "peak_build_kib") / 1024,
            get(&built, "peak_kib") / 1024
        );
        println!(
            "                        {disk} bytes on disk ({} per subject)",
            disk / n.max(1) as u64
        );
        println!(
            "                        restart after 10^4 new records ({more:.1} s to write): caught up in {} ms, {} records read, peak RSS {} MiB",
            get(&caught, "build_ms"),
            get(&caught, "records_read"),
            get(&caught, "peak_build_kib") / 1024
        );
        rows.push(("disk", built));
        let _ = std::fs::remove_dir_all(&dir);
    }
    if which != "disk" {
        let built = run_child(bootstrap, &topic, "memory", &kek_json, true)?;
        println!(
            "memory view             built in {:.1} s ({} records read), peak RSS {} MiB while building, {} MiB with the hot set served",
            get(&built, "build_ms") as f64 / 1000.0,
            get(&built, "records_read"),
            get(&built, "peak_build_kib") / 1024,
            get(&built, "peak_kib") / 1024
        );
        rows.push(("memory", built));
    }
    for (name, m) in &rows {
        println!(
            "{name:<6} view             first write of a subject {} us, warm value {} ns (hot set of 1000)",
            get(m, "first_write_us"),
            get(m, "warm_value_ns")
        );
    }
    Ok(())
}
