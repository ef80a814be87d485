//! The proxy's speed against the broker direct, in one run
//! (`scripts/bench-proxy.sh`).
//!
//! ```sh
//! proxy_bench BOOTSTRAP [--records N] [--rounds R] [--latency N] [--connections N]
//!             [--partitions N] [--proxy-bin PATH]
//! ```
//!
//! Starts a proxy to BOOTSTRAP whose policy encrypts the values (AES-GCM
//! keyset) and the keys (AES-SIV keyset) of the bench's topics (prefix
//! `bench-`): as a separate process, `PATH proxy --config FILE`, with
//! `--proxy-bin` (its CPU time and resident memory are then its own), or
//! else in this process on a runtime of its own (its CPU time is that of
//! the runtime's threads; its memory is this process's). Then, in rounds
//! that alternate which goes first, direct and through the proxy:
//! - produces N records of 1 KiB (default 100,000; keyed, idempotent
//!   producer, acks=all, linger.ms=5) to a fresh topic and times them to
//!   the last delivery;
//! - fetches them all back (assigned partitions, from the beginning, to
//!   the end of each) and checks every value came back whole;
//! - times single produce requests (one record of 1 KiB sent, its delivery
//!   awaited; 100 untimed, then `--latency` timed, default 2,000);
//! - through the proxy: its CPU time during the produce and the fetch;
//!   after each round, and once on the fresh proxy before the first, its
//!   resident memory before and with `--connections` (default 200) idle
//!   client connections that completed an ApiVersions and a Metadata
//!   request.
//!
//! MB are 10^6 bytes of record values (keys not counted). Prints a table
//! per round, then the ratios (proxy / direct) of every round and those of
//! the fastest round.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::{Buf, BytesMut};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, RequestHeader,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};
use tombstone_crypt::kafka::rdkafka::admin::{
    AdminClient, AdminOptions, NewTopic, TopicReplication,
};
use tombstone_crypt::kafka::rdkafka::client::{ClientContext, DefaultClientContext};
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer};
use tombstone_crypt::kafka::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tombstone_crypt::kafka::rdkafka::message::{DeliveryResult, Message};
use tombstone_crypt::kafka::rdkafka::producer::{
    BaseRecord, FutureProducer, FutureRecord, Producer as _, ProducerContext, ThreadedProducer,
};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::{KeyTemplate, Keyset};
use tombstone_crypt_proxy::{Policies, Proxy, ProxyConfig};

type Error = Box<dyn std::error::Error>;

const VALUE: usize = 1024;
const THREAD: &str = "bench-proxy";

struct Args {
    bootstrap: String,
    records: u64,
    rounds: usize,
    latency: usize,
    connections: usize,
    partitions: i32,
    proxy_bin: Option<PathBuf>,
}

fn args() -> Result<Args, Error> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        bootstrap: String::new(),
        records: 100_000,
        rounds: 3,
        latency: 2_000,
        connections: 200,
        partitions: 4,
        proxy_bin: None,
    };
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{arg} takes a value"));
        match arg.as_str() {
            "--records" => a.records = val()?.parse()?,
            "--rounds" => a.rounds = val()?.parse()?,
            "--latency" => a.latency = val()?.parse()?,
            "--connections" => a.connections = val()?.parse()?,
            "--partitions" => a.partitions = val()?.parse()?,
            "--proxy-bin" => a.proxy_bin = Some(val()?.into()),
            s if !s.starts_with("--") && a.bootstrap.is_empty() => a.bootstrap = s.to_owned(),
            _ => return Err(format!("usage: proxy_bench BOOTSTRAP [--records N] [--rounds R] [--latency N] [--connections N] [--partitions N] [--proxy-bin PATH] (at {arg})").into()),
        }
    }
    if a.bootstrap.is_empty() {
        return Err("usage: proxy_bench BOOTSTRAP [options]".into());
    }
    Ok(a)
}

fn nanos() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0)
}

/// A free port `p` on loopback with `p + 112` free too (a broker node N
/// is served at port + 1 + N; the test broker's node id is 111).
fn free_base_port() -> Result<u16, Error> {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0")?;
        let p = l.local_addr()?.port();
        if p > 65000 {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 112)).is_ok() {
            return Ok(p);
        }
    }
    Err("no free pair of ports".into())
}

/// The proxy under test: a child process or a runtime in this one.
enum Running {
    Process(Child, PathBuf),
    InProcess(Option<tokio::sync::oneshot::Sender<()>>),
}

struct BenchProxy {
    addr: String,
    running: Running,
    ticks_per_second: f64,
}

impl BenchProxy {
    fn start(a: &Args) -> Result<Self, Error> {
        let values = Keyset::generate();
        let keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
        let ticks_per_second = Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0);
        let port = free_base_port()?;
        let addr = format!("127.0.0.1:{port}");
        let running = match &a.proxy_bin {
            Some(bin) => {
                let dir = std::env::temp_dir().join(format!("proxy-bench-{}", std::process::id()));
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("values.json"), values.to_tink_json())?;
                std::fs::write(dir.join("keys.json"), keys.to_tink_json())?;
                let config = dir.join("proxy.json");
                std::fs::write(
                    &config,
                    format!(
                        r#"{{"listen":"{addr}","bootstrap":"{}","topics":[{{"prefix":"bench-","value_keyset":"values.json","key_keyset":"keys.json"}}]}}"#,
                        a.bootstrap
                    ),
                )?;
                let log = std::fs::File::create(dir.join("proxy.log"))?;
                let child = Command::new(bin)
                    .arg("proxy")
                    .arg("--config")
                    .arg(&config)
                    .stdin(Stdio::null())
                    .stdout(log.try_clone()?)
                    .stderr(log)
                    .spawn()?;
                Running::Process(child, dir)
            }
            None => {
                let config = ProxyConfig::from_json(&format!(
                    r#"{{"listen":"{addr}","bootstrap":"{}"}}"#,
                    a.bootstrap
                ))?;
                let policies = Policies::new().with_prefix(
                    "bench-",
                    tombstone_crypt_proxy::TopicPolicy::keyset(values)
                        .with_record_keys(keys)
                        .map_err(|e| e.to_string())?,
                );
                let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
                let rt = tokio::runtime::Builder::new_multi_thread()
                    .thread_name(THREAD)
                    .enable_all()
                    .build()?;
                std::thread::spawn(move || {
                    rt.block_on(async move {
                        let proxy = match Proxy::bind(&config, policies).await {
                            Ok(p) => p,
                            Err(e) => {
                                eprintln!("binding the proxy: {e}");
                                return;
                            }
                        };
                        let stop = async {
                            let _ = stop_rx.await;
                        };
                        if let Err(e) = proxy.run(stop, Duration::from_secs(5)).await {
                            eprintln!("the proxy: {e}");
                        }
                    });
                });
                Running::InProcess(Some(stop_tx))
            }
        };
        let p = BenchProxy {
            addr,
            running,
            ticks_per_second,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        while TcpStream::connect(&p.addr).is_err() {
            if Instant::now() > deadline {
                return Err(format!("the proxy is not listening on {} after 30 s", p.addr).into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(p)
    }

    fn mode(&self) -> &'static str {
        match self.running {
            Running::Process(..) => "a separate process (tombstone-crypt proxy)",
            Running::InProcess(_) => {
                "in this process (CPU: its runtime's threads; memory: the whole process)"
            }
        }
    }

    /// CPU seconds (user + system) the proxy has used.
    fn cpu_seconds(&self) -> f64 {
        let ticks = |stat: &str| -> u64 {
            // Fields after the command's closing parenthesis: state is the
            // 3rd field of the line, utime the 14th, stime the 15th.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let get = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            get(11) + get(12)
        };
        let total = match &self.running {
            Running::Process(child, _) => {
                std::fs::read_to_string(format!("/proc/{}/stat", child.id()))
                    .map(|s| ticks(&s))
                    .unwrap_or(0)
            }
            Running::InProcess(_) => std::fs::read_dir("/proc/self/task")
                .map(|d| {
                    d.flatten()
                        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
                        .filter(|s| s.contains(&format!("({THREAD}")))
                        .map(|s| ticks(&s))
                        .sum()
                })
                .unwrap_or(0),
        };
        total as f64 / self.ticks_per_second
    }

    /// Resident memory of the proxy's process, in KiB.
    fn rss_kib(&self) -> u64 {
        let path = match &self.running {
            Running::Process(child, _) => format!("/proc/{}/status", child.id()),
            Running::InProcess(_) => "/proc/self/status".to_owned(),
        };
        std::fs::read_to_string(path)
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("VmRSS:"))
                    .and_then(|l| l.split_whitespace().nth(1))
                    .and_then(|v| v.parse().ok())
            })
            .unwrap_or(0)
    }
}

impl Drop for BenchProxy {
    fn drop(&mut self) {
        match &mut self.running {
            Running::Process(child, dir) => {
                let _ = child.kill();
                let _ = child.wait();
                let _ = std::fs::remove_dir_all(dir);
            }
            Running::InProcess(stop) => {
                if let Some(s) = stop.take() {
                    let _ = s.send(());
                }
            }
        }
    }
}

/// Deliveries counted.
#[derive(Default)]
struct Count {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Count {}

impl ProducerContext for Count {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.ok.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

fn client(bootstrap: &str) -> ClientConfig {
    let mut c = ClientConfig::new();
    c.set("bootstrap.servers", bootstrap);
    c
}

fn producer_config(bootstrap: &str, linger_ms: &str) -> ClientConfig {
    let mut c = client(bootstrap);
    c.set("enable.idempotence", "true")
        .set("acks", "all")
        .set("linger.ms", linger_ms)
        .set("message.timeout.ms", "120000");
    c
}

fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), Error> {
    let admin: AdminClient<DefaultClientContext> = client(bootstrap).create()?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    for r in futures_executor::block_on(admin.create_topics([&new], &AdminOptions::new()))? {
        r.map_err(|(t, e)| format!("creating {t}: {e}"))?;
    }
    Ok(())
}

/// Record `i`'s value: 1 KiB of a fixed pseudo-random pattern with `i` in
/// its first 8 bytes.
fn value(pattern: &[u8], i: u64) -> Vec<u8> {
    let mut v = pattern.to_vec();
    v[..8].copy_from_slice(&i.to_le_bytes());
    v
}

fn pattern() -> Vec<u8> {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    (0..VALUE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// Produces `n` records to `topic` through `bootstrap`; seconds to the
/// last delivery.
fn produce(bootstrap: &str, topic: &str, n: u64, pattern: &[u8]) -> Result<f64, Error> {
    let producer: ThreadedProducer<Count> =
        producer_config(bootstrap, "5").create_with_context(Count::default())?;
    let started = Instant::now();
    for i in 0..n {
        let key = format!("key-{i:08}");
        let v = value(pattern, i);
        let mut record: BaseRecord<'_, [u8], [u8]> =
            BaseRecord::to(topic).key(key.as_bytes()).payload(&v[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), r)) => {
                    record = r;
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err((e, _)) => return Err(e.into()),
            }
        }
    }
    producer.flush(Duration::from_secs(600))?;
    let seconds = started.elapsed().as_secs_f64();
    let ctx = producer.context();
    let (ok, failed) = (
        ctx.ok.load(Ordering::Relaxed),
        ctx.failed.load(Ordering::Relaxed),
    );
    if ok != n || failed != 0 {
        let first = ctx.first_error.lock().map(|f| f.clone()).unwrap_or(None);
        return Err(format!("{ok} of {n} records delivered, {failed} failed: {first:?}").into());
    }
    Ok(seconds)
}

/// Fetches `topic` from the beginning to its end through `bootstrap`,
/// checking that `n` records of 1 KiB came back, each index once; seconds.
fn fetch(bootstrap: &str, topic: &str, partitions: i32, n: u64) -> Result<f64, Error> {
    let consumer: BaseConsumer = client(bootstrap)
        .set("group.id", format!("bench-g-{}", nanos()))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()?;
    let mut tpl = TopicPartitionList::new();
    for p in 0..partitions {
        tpl.add_partition_offset(topic, p, Offset::Beginning)?;
    }
    let started = Instant::now();
    consumer.assign(&tpl)?;
    let mut seen = vec![false; usize::try_from(n)?];
    let mut count = 0u64;
    let mut eof = std::collections::HashSet::new();
    let deadline = started + Duration::from_secs(600);
    while eof.len() < usize::try_from(partitions)? {
        if Instant::now() > deadline {
            return Err(format!("no end of {topic} within 600 s ({count} records)").into());
        }
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Ok(m)) => {
                let v = m.payload().ok_or("a record without a value")?;
                if v.len() != VALUE {
                    return Err(format!("a value of {} bytes", v.len()).into());
                }
                let i = u64::from_le_bytes(v[..8].try_into()?);
                let slot = seen
                    .get_mut(usize::try_from(i)?)
                    .ok_or("a value with an unknown index")?;
                if std::mem::replace(slot, true) {
                    return Err(format!("record {i} twice").into());
                }
                count += 1;
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                eof.insert(p);
            }
            Some(Err(e)) => return Err(e.into()),
        }
    }
    let seconds = started.elapsed().as_secs_f64();
    if count != n {
        return Err(format!("{count} of {n} records fetched from {topic}").into());
    }
    Ok(seconds)
}

/// Latency of single produce requests, in microseconds: p50 and p99.
fn latency(
    bootstrap: &str,
    topic: &str,
    samples: usize,
    pattern: &[u8],
) -> Result<(f64, f64), Error> {
    let producer: FutureProducer = producer_config(bootstrap, "0").create()?;
    let mut times = Vec::with_capacity(samples);
    for i in 0..(100 + samples) as u64 {
        let key = format!("key-{i:08}");
        let v = value(pattern, i);
        let started = Instant::now();
        let record: FutureRecord<'_, [u8], [u8]> =
            FutureRecord::to(topic).key(key.as_bytes()).payload(&v[..]);
        futures_executor::block_on(producer.send(record, Duration::from_secs(60)))
            .map_err(|(e, _)| e)?;
        if i >= 100 {
            times.push(started.elapsed().as_secs_f64() * 1e6);
        }
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| times[((times.len() as f64 * q) as usize).min(times.len() - 1)];
    Ok((at(0.50), at(0.99)))
}

/// One request frame (size-prefixed) of `api` at `version`.
fn frame<M: Encodable>(
    api: ApiKey,
    version: i16,
    correlation: i32,
    body: &M,
) -> Result<Vec<u8>, Error> {
    let mut header = RequestHeader::default();
    header.request_api_key = api as i16;
    header.request_api_version = version;
    header.correlation_id = correlation;
    header.client_id = Some(StrBytes::from_static_str("proxy-bench"));
    let mut buf = BytesMut::new();
    header.encode(&mut buf, api.request_header_version(version))?;
    body.encode(&mut buf, version)?;
    let mut out = u32::try_from(buf.len())?.to_be_bytes().to_vec();
    out.extend_from_slice(&buf);
    Ok(out)
}

fn read_response(s: &mut TcpStream) -> Result<BytesMut, Error> {
    let mut len = [0u8; 4];
    s.read_exact(&mut len)?;
    let mut body = vec![0u8; usize::try_from(u32::from_be_bytes(len))?];
    s.read_exact(&mut body)?;
    Ok(BytesMut::from(&body[..]))
}

/// Opens `n` client connections to `addr`, each through an ApiVersions
/// and a Metadata request, and keeps them open.
fn idle_connections(addr: &str, n: usize) -> Result<Vec<TcpStream>, Error> {
    let versions = ApiVersionsRequest::default()
        .with_client_software_name(StrBytes::from_static_str("proxy-bench"))
        .with_client_software_version(StrBytes::from_static_str("0"));
    let mut metadata_version = None;
    let mut out = Vec::with_capacity(n);
    for c in 0..n {
        let mut s = TcpStream::connect(addr)?;
        s.set_read_timeout(Some(Duration::from_secs(30)))?;
        s.write_all(&frame(ApiKey::ApiVersions, 3, 1, &versions)?)?;
        let mut r = read_response(&mut s)?;
        if metadata_version.is_none() {
            r.advance(4);
            let v = ApiVersionsResponse::decode(&mut r, 3)?;
            if v.error_code != 0 {
                return Err(format!("ApiVersions error {}", v.error_code).into());
            }
            let m = v
                .api_keys
                .iter()
                .find(|k| k.api_key == ApiKey::Metadata as i16)
                .ok_or("no Metadata in ApiVersions")?;
            metadata_version = Some(m.max_version.min(12));
        }
        let version = metadata_version.unwrap_or(12);
        let request = MetadataRequest::default().with_topics(Some(Vec::new()));
        s.write_all(&frame(ApiKey::Metadata, version, 2, &request)?)?;
        read_response(&mut s).map_err(|e| format!("connection {c}: Metadata: {e}"))?;
        out.push(s);
    }
    Ok(out)
}

#[derive(Clone, Copy, Default)]
struct Side {
    produce_s: f64,
    fetch_s: f64,
    p50_us: f64,
    p99_us: f64,
}

#[derive(Clone, Copy, Default)]
struct Round {
    direct: Side,
    proxy: Side,
    cpu_produce_s: f64,
    cpu_fetch_s: f64,
    cpu_latency_s: f64,
    rss_before_kib: u64,
    rss_after_kib: u64,
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let proxy = BenchProxy::start(&a)?;
    let mb = (a.records * VALUE as u64) as f64 / 1e6;
    println!(
        "proxy_bench: {} records of {VALUE} B ({mb:.1} MB of values) per produce, {} partitions, {} rounds, {} latency samples, {} idle connections",
        a.records, a.partitions, a.rounds, a.latency, a.connections
    );
    println!(
        "broker {}, proxy at {} in {}",
        a.bootstrap,
        proxy.addr,
        proxy.mode()
    );
    println!("load average at start: {}", load());
    let (before, after) = memory(&proxy, a.connections)?;
    println!(
        "proxy memory, fresh: {before} KiB resident before {} idle connections, {after} KiB with them: {:.1} KiB per connection",
        a.connections,
        (after as f64 - before as f64) / a.connections as f64
    );
    let pattern = pattern();
    let mut rounds = Vec::new();
    for round in 1..=a.rounds {
        let mut r = Round::default();
        let order: [bool; 2] = if round % 2 == 1 {
            [false, true]
        } else {
            [true, false]
        };
        for through in order {
            let target = if through {
                proxy.addr.clone()
            } else {
                a.bootstrap.clone()
            };
            let tag = if through { "proxy" } else { "direct" };
            let topic = format!("bench-{tag}-{round}-{}", nanos());
            create_topic(&a.bootstrap, &topic, a.partitions)?;
            let cpu0 = proxy.cpu_seconds();
            let produce_s = produce(&target, &topic, a.records, &pattern)?;
            let cpu1 = proxy.cpu_seconds();
            let fetch_s = fetch(&target, &topic, a.partitions, a.records)?;
            let cpu2 = proxy.cpu_seconds();
            let lat_topic = format!("bench-lat-{tag}-{round}-{}", nanos());
            create_topic(&a.bootstrap, &lat_topic, 1)?;
            let (p50_us, p99_us) = latency(&target, &lat_topic, a.latency, &pattern)?;
            let cpu3 = proxy.cpu_seconds();
            let side = Side {
                produce_s,
                fetch_s,
                p50_us,
                p99_us,
            };
            if through {
                r.proxy = side;
                r.cpu_produce_s = cpu1 - cpu0;
                r.cpu_fetch_s = cpu2 - cpu1;
                r.cpu_latency_s = cpu3 - cpu2;
            } else {
                r.direct = side;
            }
        }
        (r.rss_before_kib, r.rss_after_kib) = memory(&proxy, a.connections)?;
        print_round(round, &r, &a, mb);
        rounds.push(r);
    }
    print_summary(&rounds, &a, mb);
    println!("load average at end: {}", load());
    Ok(())
}

/// The proxy's resident memory (KiB) before and with `n` idle connections.
fn memory(proxy: &BenchProxy, n: usize) -> Result<(u64, u64), Error> {
    let before = proxy.rss_kib();
    let conns = idle_connections(&proxy.addr, n)?;
    std::thread::sleep(Duration::from_secs(1));
    let after = proxy.rss_kib();
    drop(conns);
    std::thread::sleep(Duration::from_millis(500));
    Ok((before, after))
}

fn print_round(round: usize, r: &Round, a: &Args, mb: f64) {
    let n = a.records as f64;
    let first = if round % 2 == 1 { "direct" } else { "proxy" };
    println!("\nround {round} ({first} first), load average {}", load());
    println!("| | direct | proxy | proxy / direct |");
    println!("|---|---:|---:|---:|");
    let row = |name: &str, d: f64, p: f64, digits: usize| {
        println!("| {name} | {d:.digits$} | {p:.digits$} | {:.2} |", p / d);
    };
    row(
        "produce, records/s",
        n / r.direct.produce_s,
        n / r.proxy.produce_s,
        0,
    );
    row(
        "produce, MB/s",
        mb / r.direct.produce_s,
        mb / r.proxy.produce_s,
        1,
    );
    row(
        "fetch, MB/s",
        mb / r.direct.fetch_s,
        mb / r.proxy.fetch_s,
        1,
    );
    row(
        "single produce p50, ms",
        r.direct.p50_us / 1e3,
        r.proxy.p50_us / 1e3,
        3,
    );
    row(
        "single produce p99, ms",
        r.direct.p99_us / 1e3,
        r.proxy.p99_us / 1e3,
        3,
    );
    println!(
        "latency added by the proxy: p50 {:+.3} ms, p99 {:+.3} ms",
        (r.proxy.p50_us - r.direct.p50_us) / 1e3,
        (r.proxy.p99_us - r.direct.p99_us) / 1e3
    );
    println!(
        "proxy CPU: produce {:.2} s ({:.1} ms per MB, {:.0}% of a core), fetch {:.2} s ({:.1} ms per MB, {:.0}% of a core), {} single produces {:.2} s",
        r.cpu_produce_s,
        r.cpu_produce_s / mb * 1e3,
        r.cpu_produce_s / r.proxy.produce_s * 100.0,
        r.cpu_fetch_s,
        r.cpu_fetch_s / mb * 1e3,
        r.cpu_fetch_s / r.proxy.fetch_s * 100.0,
        a.latency + 100,
        r.cpu_latency_s
    );
    println!(
        "proxy memory: {} KiB resident before {} idle connections, {} KiB with them: {:.1} KiB per connection",
        r.rss_before_kib,
        a.connections,
        r.rss_after_kib,
        (r.rss_after_kib as f64 - r.rss_before_kib as f64) / a.connections as f64
    );
}

fn print_summary(rounds: &[Round], a: &Args, mb: f64) {
    let list = |f: &dyn Fn(&Round) -> f64| {
        rounds
            .iter()
            .map(|r| format!("{:.2}", f(r)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    println!("\nratios proxy / direct, rounds 1..{}:", rounds.len());
    println!(
        "  produce throughput: {}",
        list(&|r| r.direct.produce_s / r.proxy.produce_s)
    );
    println!(
        "  fetch throughput:   {}",
        list(&|r| r.direct.fetch_s / r.proxy.fetch_s)
    );
    println!(
        "  single produce p50: {}",
        list(&|r| r.proxy.p50_us / r.direct.p50_us)
    );
    println!(
        "  single produce p99: {}",
        list(&|r| r.proxy.p99_us / r.direct.p99_us)
    );
    // The fastest round: the one whose proxy produce was fastest.
    let Some((i, best)) = rounds
        .iter()
        .enumerate()
        .min_by(|x, y| x.1.proxy.produce_s.total_cmp(&y.1.proxy.produce_s))
    else {
        return;
    };
    let min = |f: &dyn Fn(&Side) -> f64, side: fn(&Round) -> Side| {
        rounds
            .iter()
            .map(|r| f(&side(r)))
            .fold(f64::INFINITY, f64::min)
    };
    let d = |r: &Round| r.direct;
    let p = |r: &Round| r.proxy;
    println!(
        "fastest round (fastest produce through the proxy): round {}: produce {:.0} / {:.0} records/s ({:.2}), fetch {:.1} / {:.1} MB/s ({:.2})",
        i + 1,
        a.records as f64 / best.proxy.produce_s,
        a.records as f64 / best.direct.produce_s,
        best.direct.produce_s / best.proxy.produce_s,
        mb / best.proxy.fetch_s,
        mb / best.direct.fetch_s,
        best.direct.fetch_s / best.proxy.fetch_s,
    );
    let (dp, pp) = (min(&|s| s.produce_s, d), min(&|s| s.produce_s, p));
    let (df, pf) = (min(&|s| s.fetch_s, d), min(&|s| s.fetch_s, p));
    println!(
        "best of each side over the rounds: produce {:.1} / {:.1} MB/s ({:.2}), fetch {:.1} / {:.1} MB/s ({:.2}), p50 {:.3} / {:.3} ms, p99 {:.3} / {:.3} ms",
        mb / pp,
        mb / dp,
        dp / pp,
        mb / pf,
        mb / df,
        df / pf,
        min(&|s| s.p50_us, p) / 1e3,
        min(&|s| s.p50_us, d) / 1e3,
        min(&|s| s.p99_us, p) / 1e3,
        min(&|s| s.p99_us, d) / 1e3,
    );
}
