//! The proxy's speed against the broker direct, and beside other proxies,
//! in one run (`scripts/bench-proxy.sh`).
//!
//! ```sh
//! proxy_bench BOOTSTRAP [--records N] [--rounds R] [--latency N] [--connections N]
//!             [--partitions N] [--warm-up N] [--proxy-bin PATH] [--proxy-port P]
//!             [--values-only] [--other-proxy NAME=ADDR[,PID]]...
//! ```
//!
//! Starts a proxy to BOOTSTRAP whose policy encrypts the values (AES-GCM
//! keyset) and the keys (AES-SIV keyset) of the bench's topics (prefix
//! `bench-`; with `--values-only`, the values alone, keys as they are, as
//! a proxy that does not encrypt keys): as a separate process, `PATH proxy --config FILE`, with
//! `--proxy-bin` (its CPU time and resident memory are then its own), or
//! else in this process on a runtime of its own (its CPU time is that of
//! the runtime's threads; its memory is this process's). It listens on
//! `--proxy-port` (and the ports after it, one per broker node), else on
//! a free port. Each `--other-proxy` is another proxy in front of the same
//! broker, already running, that clients bootstrap at ADDR; with PID, its
//! process's CPU time and resident memory are read from `/proc/PID`.
//!
//! With `--warm-up N`, each side first produces and fetches N records,
//! untimed: a proxy on a JIT-compiled runtime beside the bench is measured
//! warm.
//!
//! Then, in rounds that rotate which side goes first, direct, through the
//! proxy and through each other proxy:
//! - produces N records of 1 KiB (default 100,000; keyed, idempotent
//!   producer, acks=all, linger.ms=5) to a fresh topic (`max.message.bytes`
//!   2 MiB: a full batch of rdkafka's grows past the default 1 MiB when
//!   encrypted) and times them to the last delivery;
//! - fetches them all back (assigned partitions, from the beginning, to
//!   the end of each) and checks every value came back whole;
//! - reads each throughput two ways: *steady*, from the records between
//!   the 10th and the 90th percentile of the N (delivered, or fetched),
//!   which the goals are read from; and *whole*, to the last delivery or
//!   every partition's end, which adds what a client waits once: at the
//!   start (metadata, the first batch or fetch) and at the end (rdkafka
//!   holds a partition's last fetch up to `fetch.wait.max.ms`, 500 ms),
//!   about a second in all, five times a fetch of 100 MB direct;
//! - times single produce requests (one record of 1 KiB sent, its delivery
//!   awaited; 100 untimed, then `--latency` timed, default 2,000);
//! - through a proxy it can read: its CPU time during the produce and the
//!   fetch; after each round, and once on the fresh proxy before the
//!   first, its resident memory before and with `--connections` (default
//!   200) idle client connections that completed an ApiVersions and a
//!   Metadata request;
//! - during the produce and the fetch, the whole machine's busy CPU
//!   (`/proc/stat`: every process, the broker's among them) and this
//!   process's (the clients'): how many cores were busy, and the CPU per
//!   MB of the clients, the side's proxy and the rest (the broker, and
//!   whatever else runs). Where the cores are all busy, a proxy's CPU is
//!   taken from the broker and the clients.
//!
//! MB are 10^6 bytes of record values (keys not counted). Prints a table
//! per round, then, per side, its fastest sample and the spread over the
//! rounds, the ratios to direct and the goals (throughput through the
//! proxy at least 0.85 of direct; its CPU per MB at most a fifth of each
//! other proxy's).

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
/// The side names of the table.
const DIRECT: &str = "direct";
const OURS: &str = "tombstone-crypt";
/// The goals: throughput through the proxy at least this share of direct,
const THROUGHPUT_GOAL: f64 = 0.85;
/// and its CPU per MB at most this share of another proxy's.
const CPU_GOAL: f64 = 0.2;

const USAGE: &str = "usage: proxy_bench BOOTSTRAP [--records N] [--rounds R] [--latency N] [--connections N] [--partitions N] [--warm-up N] [--proxy-bin PATH] [--proxy-port P] [--values-only] [--other-proxy NAME=ADDR[,PID]]...";

/// Another proxy in front of the same broker, started by the caller.
struct OtherProxy {
    name: String,
    addr: String,
    pid: Option<u32>,
}

struct Args {
    bootstrap: String,
    records: u64,
    rounds: usize,
    latency: usize,
    connections: usize,
    partitions: i32,
    /// Records each side produces and fetches once before the rounds,
    /// untimed (a JIT-compiled proxy beside the bench warms up).
    warm_up: u64,
    proxy_bin: Option<PathBuf>,
    proxy_port: Option<u16>,
    /// The bench's proxy encrypts the values alone (keys as they are), as
    /// a proxy that does not encrypt keys does.
    values_only: bool,
    others: Vec<OtherProxy>,
}

fn other_proxy(s: &str) -> Result<OtherProxy, Error> {
    let (name, rest) = s
        .split_once('=')
        .ok_or_else(|| format!("--other-proxy {s}: want NAME=ADDR[,PID]"))?;
    let (addr, pid) = match rest.split_once(',') {
        Some((addr, pid)) => (addr, Some(pid.parse()?)),
        None => (rest, None),
    };
    if name.is_empty() || name == DIRECT || name == OURS || addr.is_empty() {
        return Err(format!(
            "--other-proxy {s}: want NAME=ADDR[,PID], NAME not {DIRECT} or {OURS}"
        )
        .into());
    }
    Ok(OtherProxy {
        name: name.to_owned(),
        addr: addr.to_owned(),
        pid,
    })
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
        warm_up: 0,
        proxy_bin: None,
        proxy_port: None,
        values_only: false,
        others: Vec::new(),
    };
    while let Some(arg) = it.next() {
        let mut val = || it.next().ok_or_else(|| format!("{arg} takes a value"));
        match arg.as_str() {
            "--records" => a.records = val()?.parse()?,
            "--rounds" => a.rounds = val()?.parse()?,
            "--latency" => a.latency = val()?.parse()?,
            "--connections" => a.connections = val()?.parse()?,
            "--partitions" => a.partitions = val()?.parse()?,
            "--warm-up" => a.warm_up = val()?.parse()?,
            "--proxy-bin" => a.proxy_bin = Some(val()?.into()),
            "--proxy-port" => a.proxy_port = Some(val()?.parse()?),
            "--other-proxy" => a.others.push(other_proxy(&val()?)?),
            "--values-only" => a.values_only = true,
            s if !s.starts_with("--") && a.bootstrap.is_empty() => a.bootstrap = s.to_owned(),
            _ => return Err(format!("{USAGE} (at {arg})").into()),
        }
    }
    if a.bootstrap.is_empty() {
        return Err(USAGE.into());
    }
    if a.rounds == 0 || a.records == 0 || a.latency == 0 || a.connections == 0 {
        return Err("--rounds, --records, --latency and --connections must be at least 1".into());
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

/// Where a side's CPU time and resident memory are read.
#[derive(Clone, Copy)]
enum Meter {
    /// Not read (the broker direct, or another proxy without a pid).
    None,
    /// A process of its own: `/proc/PID`.
    Process(u32),
    /// This process's threads named [`THREAD`] (CPU) and this process
    /// (memory).
    OwnThreads,
}

impl Meter {
    /// CPU seconds (user + system) used so far.
    fn cpu_seconds(self, ticks_per_second: f64) -> Option<f64> {
        let ticks = |stat: &str| -> u64 {
            // Fields after the command's closing parenthesis: state is the
            // 3rd field of the line, utime the 14th, stime the 15th.
            let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
            let f: Vec<&str> = rest.split_whitespace().collect();
            let get = |i: usize| f.get(i).and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
            get(11) + get(12)
        };
        let total = match self {
            Meter::None => return None,
            Meter::Process(pid) => {
                ticks(&std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?)
            }
            Meter::OwnThreads => std::fs::read_dir("/proc/self/task")
                .ok()?
                .flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
                .filter(|s| s.contains(&format!("({THREAD}")))
                .map(|s| ticks(&s))
                .sum(),
        };
        Some(total as f64 / ticks_per_second)
    }

    /// Resident memory, in KiB.
    fn rss_kib(self) -> Option<u64> {
        let path = match self {
            Meter::None => return None,
            Meter::Process(pid) => format!("/proc/{pid}/status"),
            Meter::OwnThreads => "/proc/self/status".to_owned(),
        };
        std::fs::read_to_string(path).ok().and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
    }
}

/// CPU seconds of the whole machine so far, from the first line of
/// `/proc/stat`: busy (user, nice, system, irq, softirq) and stolen by
/// the hypervisor (`steal`), all cores together.
#[derive(Clone, Copy, Default)]
struct MachineCpu {
    busy_s: f64,
    steal_s: f64,
}

impl MachineCpu {
    fn read(ticks_per_second: f64) -> Option<Self> {
        let stat = std::fs::read_to_string("/proc/stat").ok()?;
        let line = stat.lines().next()?.strip_prefix("cpu ")?;
        let f: Vec<u64> = line
            .split_whitespace()
            .map(|v| v.parse().unwrap_or(0))
            .collect();
        let get = |i: usize| f.get(i).copied().unwrap_or(0);
        // user nice system idle iowait irq softirq steal ...
        let busy = get(0) + get(1) + get(2) + get(5) + get(6);
        Some(MachineCpu {
            busy_s: busy as f64 / ticks_per_second,
            steal_s: get(7) as f64 / ticks_per_second,
        })
    }

    fn since(self, before: Self) -> Self {
        MachineCpu {
            busy_s: self.busy_s - before.busy_s,
            steal_s: self.steal_s - before.steal_s,
        }
    }
}

/// CPU seconds of this process (the bench's clients), without the threads
/// of a proxy it runs in itself.
fn client_cpu_seconds(own_proxy: Meter, ticks_per_second: f64) -> Option<f64> {
    let all = Meter::Process(std::process::id()).cpu_seconds(ticks_per_second)?;
    match own_proxy {
        Meter::OwnThreads => Some(all - own_proxy.cpu_seconds(ticks_per_second)?),
        _ => Some(all),
    }
}

/// What the whole machine did during one phase of one side: its busy CPU
/// (all processes: the broker, the clients, the proxies, anything else)
/// and the bench's clients' own share.
#[derive(Clone, Copy, Default)]
struct Phase {
    machine: Option<MachineCpu>,
    client_s: Option<f64>,
}

/// Reads the machine's and the clients' CPU before a phase, and gives
/// what the phase used after it.
struct PhaseMeter {
    ticks_per_second: f64,
    own_proxy: Meter,
    machine: Option<MachineCpu>,
    client: Option<f64>,
}

impl PhaseMeter {
    fn start(ticks_per_second: f64, own_proxy: Meter) -> Self {
        PhaseMeter {
            ticks_per_second,
            own_proxy,
            machine: MachineCpu::read(ticks_per_second),
            client: client_cpu_seconds(own_proxy, ticks_per_second),
        }
    }

    /// What the phase used since the last call (or the start); starts the
    /// next phase.
    fn lap(&mut self) -> Phase {
        let machine = MachineCpu::read(self.ticks_per_second);
        let client = client_cpu_seconds(self.own_proxy, self.ticks_per_second);
        let phase = Phase {
            machine: match (machine, self.machine) {
                (Some(a), Some(b)) => Some(a.since(b)),
                _ => None,
            },
            client_s: delta(self.client, client),
        };
        self.machine = machine;
        self.client = client;
        phase
    }
}

/// The proxy under test: a child process or a runtime in this one.
enum Running {
    Process(Child, PathBuf),
    InProcess(Option<tokio::sync::oneshot::Sender<()>>),
}

struct BenchProxy {
    addr: String,
    running: Running,
}

impl BenchProxy {
    fn start(a: &Args) -> Result<Self, Error> {
        let values = Keyset::generate();
        let keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
        let port = match a.proxy_port {
            Some(p) => p,
            None => free_base_port()?,
        };
        let addr = format!("127.0.0.1:{port}");
        let running = match &a.proxy_bin {
            Some(bin) => {
                let dir = std::env::temp_dir().join(format!("proxy-bench-{}", std::process::id()));
                std::fs::create_dir_all(&dir)?;
                std::fs::write(dir.join("values.json"), values.to_tink_json())?;
                std::fs::write(dir.join("keys.json"), keys.to_tink_json())?;
                let config = dir.join("proxy.json");
                let key_keyset = if a.values_only {
                    ""
                } else {
                    r#","key_keyset":"keys.json""#
                };
                std::fs::write(
                    &config,
                    format!(
                        r#"{{"listen":"{addr}","bootstrap":"{}","topics":[{{"prefix":"bench-","value_keyset":"values.json"{key_keyset}}}]}}"#,
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
                let policy = tombstone_crypt_proxy::TopicPolicy::keyset(values);
                let policy = if a.values_only {
                    policy
                } else {
                    policy.with_record_keys(keys).map_err(|e| e.to_string())?
                };
                let policies = Policies::new().with_prefix("bench-", policy);
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
        let p = BenchProxy { addr, running };
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

    fn meter(&self) -> Meter {
        match &self.running {
            Running::Process(child, _) => Meter::Process(child.id()),
            Running::InProcess(_) => Meter::OwnThreads,
        }
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
/// When the records between the 10th and the 90th percentile of a
/// phase's `n` came (were delivered, or fetched): the phase's steady rate,
/// without what a client waits once at its start (metadata, the first
/// batch or fetch) and at its end (rdkafka holds a partition's last fetch
/// up to `fetch.wait.max.ms`, 500 ms, and a flush its last linger).
struct Steady {
    lo: u64,
    hi: u64,
    at: Mutex<(Option<Instant>, Option<Instant>)>,
}

impl Steady {
    fn new(n: u64) -> Self {
        Steady {
            lo: n / 10,
            hi: n - n / 10,
            at: Mutex::new((None, None)),
        }
    }

    /// `count` records have now come.
    fn seen(&self, count: u64) {
        if count != self.lo && count != self.hi {
            return;
        }
        if let Ok(mut at) = self.at.lock() {
            let now = Some(Instant::now());
            if count == self.lo {
                at.0 = now;
            }
            if count == self.hi {
                at.1 = now;
            }
        }
    }

    /// The seconds all `n` records would take at the steady rate, or
    /// `whole` when the marks were not both seen (fewer than 10 records).
    fn seconds(&self, n: u64, whole: f64) -> f64 {
        match self.at.lock().map(|at| *at) {
            Ok((Some(lo), Some(hi))) if self.hi > self.lo && hi > lo => {
                hi.duration_since(lo).as_secs_f64() * n as f64 / (self.hi - self.lo) as f64
            }
            _ => whole,
        }
    }
}

/// Deliveries counted.
struct Count {
    ok: AtomicU64,
    failed: AtomicU64,
    first_error: Mutex<Option<String>>,
    steady: Steady,
}

impl Count {
    fn new(n: u64) -> Self {
        Count {
            ok: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            first_error: Mutex::new(None),
            steady: Steady::new(n),
        }
    }
}

impl ClientContext for Count {}

impl ProducerContext for Count {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                let ok = self.ok.fetch_add(1, Ordering::Relaxed) + 1;
                self.steady.seen(ok);
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

/// A topic of `partitions` that takes batches of up to 2 MiB: rdkafka's
/// producer fills batches to 1,000,000 bytes (`batch.size`), which
/// encryption grows by about 5% at 1 KiB values (33 bytes a value, 21 a
/// key), past Apache Kafka's default `max.message.bytes` (1,048,588): the
/// broker would answer MESSAGE_TOO_LARGE to every full batch through a
/// proxy.
fn create_topic(bootstrap: &str, topic: &str, partitions: i32) -> Result<(), Error> {
    let admin: AdminClient<DefaultClientContext> = client(bootstrap).create()?;
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1))
        .set("max.message.bytes", "2097152");
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

/// Produces `n` records to `topic` through `bootstrap`: seconds to the
/// last delivery, and at the steady rate ([`Steady`]).
fn produce(bootstrap: &str, topic: &str, n: u64, pattern: &[u8]) -> Result<(f64, f64), Error> {
    let producer: ThreadedProducer<Count> =
        producer_config(bootstrap, "5").create_with_context(Count::new(n))?;
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
    Ok((seconds, ctx.steady.seconds(n, seconds)))
}

/// Fetches `topic` from the beginning to its end through `bootstrap`,
/// checking that `n` records of 1 KiB came back, each index once: seconds
/// to the end of every partition, and at the steady rate ([`Steady`]).
fn fetch(bootstrap: &str, topic: &str, partitions: i32, n: u64) -> Result<(f64, f64), Error> {
    let steady = Steady::new(n);
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
                steady.seen(count);
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
    Ok((seconds, steady.seconds(n, seconds)))
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

/// One side (direct, or through one proxy) in one round.
#[derive(Clone, Copy, Default)]
struct Sample {
    /// Seconds of the whole produce (to its last delivery) and the whole
    /// fetch (to every partition's end),
    produce_s: f64,
    fetch_s: f64,
    /// and at their steady rates ([`Steady`]): what the throughputs and
    /// the goals are read from.
    produce_steady_s: f64,
    fetch_steady_s: f64,
    p50_us: f64,
    p99_us: f64,
    cpu_produce_s: Option<f64>,
    cpu_fetch_s: Option<f64>,
    cpu_latency_s: Option<f64>,
    /// The machine and the clients during the produce and the fetch.
    produce_phase: Phase,
    fetch_phase: Phase,
    /// Resident memory (KiB) before and with the idle connections, after
    /// the round.
    memory: Option<(u64, u64)>,
}

impl Sample {
    /// CPU per MB of the produce and the fetch together (each MB passes
    /// the proxy once each way), in ms.
    fn cpu_ms_per_mb(&self, mb: f64) -> Option<f64> {
        Some((self.cpu_produce_s? + self.cpu_fetch_s?) / (2.0 * mb) * 1e3)
    }
}

/// A side of the table: the broker direct, or a proxy in front of it.
struct Target {
    name: String,
    addr: String,
    meter: Meter,
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn delta(before: Option<f64>, after: Option<f64>) -> Option<f64> {
    Some(after? - before?)
}

fn main() -> Result<(), Error> {
    let a = args()?;
    let proxy = BenchProxy::start(&a)?;
    let ticks_per_second = Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
        .unwrap_or(100.0);
    let mut targets = vec![
        Target {
            name: DIRECT.to_owned(),
            addr: a.bootstrap.clone(),
            meter: Meter::None,
        },
        Target {
            name: OURS.to_owned(),
            addr: proxy.addr.clone(),
            meter: proxy.meter(),
        },
    ];
    for o in &a.others {
        TcpStream::connect(&o.addr)
            .map_err(|e| format!("{} is not listening on {}: {e}", o.name, o.addr))?;
        if let Some(pid) = o.pid {
            if Meter::Process(pid).rss_kib().is_none() {
                return Err(format!("{}: no process {pid} to read", o.name).into());
            }
        }
        targets.push(Target {
            name: o.name.clone(),
            addr: o.addr.clone(),
            meter: o.pid.map_or(Meter::None, Meter::Process),
        });
    }
    let mb = (a.records * VALUE as u64) as f64 / 1e6;
    println!(
        "proxy_bench: {} records of {VALUE} B ({mb:.1} MB of values) per produce, {} partitions, {} rounds, {} latency samples, {} idle connections",
        a.records, a.partitions, a.rounds, a.latency, a.connections
    );
    println!(
        "broker {}, {OURS} at {} in {}, encrypting {}",
        a.bootstrap,
        proxy.addr,
        proxy.mode(),
        if a.values_only {
            "the values (AES-GCM) alone"
        } else {
            "the values (AES-GCM) and the keys (AES-SIV)"
        }
    );
    for o in &a.others {
        match o.pid {
            Some(pid) => println!("{} at {} (pid {pid})", o.name, o.addr),
            None => println!(
                "{} at {} (no pid: its CPU and memory are not read)",
                o.name, o.addr
            ),
        }
    }
    println!("load average at start: {}", load());
    let mut fresh = vec![None; targets.len()];
    for (i, t) in targets.iter().enumerate().skip(1) {
        fresh[i] = memory(&t.addr, t.meter, a.connections)?;
        if let Some((before, after)) = fresh[i] {
            println!(
                "{} memory, fresh: {before} KiB resident before {} idle connections, {after} KiB with them: {:.1} KiB per connection",
                t.name,
                a.connections,
                per_connection(before, after, a.connections)
            );
        }
    }
    let pattern = pattern();
    if a.warm_up > 0 {
        for t in &targets {
            let topic = format!("bench-warm-{}", nanos());
            create_topic(&a.bootstrap, &topic, a.partitions)?;
            produce(&t.addr, &topic, a.warm_up, &pattern)
                .map_err(|e| format!("{}: warm-up produce: {e}", t.name))?;
            fetch(&t.addr, &topic, a.partitions, a.warm_up)
                .map_err(|e| format!("{}: warm-up fetch: {e}", t.name))?;
        }
        println!(
            "warm-up: {} records produced and fetched through each side, untimed; load average {}",
            a.warm_up,
            load()
        );
    }
    let mut rounds: Vec<Vec<Sample>> = Vec::new();
    for round in 1..=a.rounds {
        let n = targets.len();
        let order: Vec<usize> = (0..n).map(|i| (i + round - 1) % n).collect();
        let mut samples = vec![Sample::default(); n];
        for &i in &order {
            let t = &targets[i];
            let tag = if i == 0 {
                "direct".to_owned()
            } else {
                format!("p{i}")
            };
            let topic = format!("bench-{tag}-{round}-{}", nanos());
            create_topic(&a.bootstrap, &topic, a.partitions)?;
            let cpu0 = t.meter.cpu_seconds(ticks_per_second);
            let mut phases = PhaseMeter::start(ticks_per_second, proxy.meter());
            let (produce_s, produce_steady_s) = produce(&t.addr, &topic, a.records, &pattern)
                .map_err(|e| format!("{}: produce: {e}", t.name))?;
            let cpu1 = t.meter.cpu_seconds(ticks_per_second);
            let produce_phase = phases.lap();
            let (fetch_s, fetch_steady_s) = fetch(&t.addr, &topic, a.partitions, a.records)
                .map_err(|e| format!("{}: fetch: {e}", t.name))?;
            let cpu2 = t.meter.cpu_seconds(ticks_per_second);
            let fetch_phase = phases.lap();
            let lat_topic = format!("bench-lat-{tag}-{round}-{}", nanos());
            create_topic(&a.bootstrap, &lat_topic, 1)?;
            let (p50_us, p99_us) = latency(&t.addr, &lat_topic, a.latency, &pattern)
                .map_err(|e| format!("{}: single produces: {e}", t.name))?;
            let cpu3 = t.meter.cpu_seconds(ticks_per_second);
            samples[i] = Sample {
                produce_s,
                fetch_s,
                produce_steady_s,
                fetch_steady_s,
                p50_us,
                p99_us,
                cpu_produce_s: delta(cpu0, cpu1),
                cpu_fetch_s: delta(cpu1, cpu2),
                cpu_latency_s: delta(cpu2, cpu3),
                produce_phase,
                fetch_phase,
                memory: None,
            };
        }
        for (i, t) in targets.iter().enumerate().skip(1) {
            samples[i].memory = memory(&t.addr, t.meter, a.connections)?;
        }
        print_round(round, &order, &targets, &samples, &a, mb);
        rounds.push(samples);
    }
    print_summary(&targets, &rounds, &fresh, &a, mb);
    println!("load average at end: {}", load());
    Ok(())
}

/// A proxy's resident memory (KiB) before and with `n` idle connections;
/// `None` when its memory cannot be read.
fn memory(addr: &str, meter: Meter, n: usize) -> Result<Option<(u64, u64)>, Error> {
    let Some(before) = meter.rss_kib() else {
        return Ok(None);
    };
    let conns = idle_connections(addr, n)?;
    std::thread::sleep(Duration::from_secs(1));
    let after = meter.rss_kib().unwrap_or(before);
    drop(conns);
    std::thread::sleep(Duration::from_millis(500));
    Ok(Some((before, after)))
}

fn per_connection(before: u64, after: u64, n: usize) -> f64 {
    (after as f64 - before as f64) / n as f64
}

fn print_round(round: usize, order: &[usize], targets: &[Target], s: &[Sample], a: &Args, mb: f64) {
    let names: Vec<&str> = order.iter().map(|&i| targets[i].name.as_str()).collect();
    println!(
        "\nround {round} (in this order: {}), load average {}",
        names.join(", "),
        load()
    );
    let header: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(targets.len()));
    let d = s[0];
    let row = |name: &str, cell: &dyn Fn(usize, &Sample) -> String| {
        let cells: Vec<String> = s.iter().enumerate().map(|(i, x)| cell(i, x)).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    row("produce, records/s (steady)", &|_, x| {
        format!("{:.0}", a.records as f64 / x.produce_steady_s)
    });
    let rate = |i: usize, secs: f64, direct: f64| {
        if i == 0 {
            format!("{:.1}", mb / secs)
        } else {
            format!("{:.1} ({:.2})", mb / secs, direct / secs)
        }
    };
    row("produce, MB/s (/ direct), steady", &|i, x| {
        rate(i, x.produce_steady_s, d.produce_steady_s)
    });
    row("produce, MB/s (/ direct), whole", &|i, x| {
        rate(i, x.produce_s, d.produce_s)
    });
    row("fetch, MB/s (/ direct), steady", &|i, x| {
        rate(i, x.fetch_steady_s, d.fetch_steady_s)
    });
    row("fetch, MB/s (/ direct), whole", &|i, x| {
        rate(i, x.fetch_s, d.fetch_s)
    });
    row("single produce p50, ms (added)", &|i, x| {
        if i == 0 {
            format!("{:.3}", x.p50_us / 1e3)
        } else {
            format!(
                "{:.3} ({:+.3})",
                x.p50_us / 1e3,
                (x.p50_us - d.p50_us) / 1e3
            )
        }
    });
    row("single produce p99, ms (added)", &|i, x| {
        if i == 0 {
            format!("{:.3}", x.p99_us / 1e3)
        } else {
            format!(
                "{:.3} ({:+.3})",
                x.p99_us / 1e3,
                (x.p99_us - d.p99_us) / 1e3
            )
        }
    });
    let cpu = |c: Option<f64>, seconds: f64| match c {
        Some(c) => format!("{:.2} ({:.0}%)", c / mb * 1e3, c / seconds * 100.0),
        None => String::new(),
    };
    row("CPU, produce: ms per MB (% of a core)", &|_, x| {
        cpu(x.cpu_produce_s, x.produce_s)
    });
    row("CPU, fetch: ms per MB (% of a core)", &|_, x| {
        cpu(x.cpu_fetch_s, x.fetch_s)
    });
    row("CPU, produce and fetch: ms per MB", &|_, x| {
        x.cpu_ms_per_mb(mb)
            .map_or(String::new(), |v| format!("{v:.2}"))
    });
    // The whole machine during each phase: how many cores were busy, and
    // its CPU per MB split into the clients (this process), the side's
    // proxy (when read), and the rest (the broker; other proxies idle).
    let machine = |p: Phase, proxy: Option<f64>, seconds: f64| match (p.machine, p.client_s) {
        (Some(m), Some(c)) => {
            let ms = |v: f64| v / mb * 1e3;
            let rest = m.busy_s - c - proxy.unwrap_or(0.0);
            format!(
                "{:.2} cores{} ({:.1}: clients {:.1}, broker and the rest {:.1})",
                m.busy_s / seconds,
                if m.steal_s > 0.01 * seconds {
                    format!(", {:.2} stolen", m.steal_s / seconds)
                } else {
                    String::new()
                },
                ms(m.busy_s),
                ms(c),
                ms(rest)
            )
        }
        _ => String::new(),
    };
    row(
        "machine, produce: cores busy (ms per MB: all; split)",
        &|_, x| machine(x.produce_phase, x.cpu_produce_s, x.produce_s),
    );
    row(
        "machine, fetch: cores busy (ms per MB: all; split)",
        &|_, x| machine(x.fetch_phase, x.cpu_fetch_s, x.fetch_s),
    );
    row(
        &format!("CPU, {} single produces: s", a.latency + 100),
        &|_, x| x.cpu_latency_s.map_or(String::new(), |v| format!("{v:.2}")),
    );
    row(
        &format!(
            "memory: KiB resident before / with {} idle connections (KiB per connection)",
            a.connections
        ),
        &|_, x| match x.memory {
            Some((b, w)) => format!("{b} / {w} ({:.1})", per_connection(b, w, a.connections)),
            None => String::new(),
        },
    );
}

/// The lowest and highest of `v`, if any.
fn range(v: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    v.into_iter().fold(None, |acc, x| match acc {
        None => Some((x, x)),
        Some((lo, hi)) => Some((lo.min(x), hi.max(x))),
    })
}

fn print_summary(
    targets: &[Target],
    rounds: &[Vec<Sample>],
    fresh: &[Option<(u64, u64)>],
    a: &Args,
    mb: f64,
) {
    let n = targets.len();
    let r = rounds.len();
    let side = |i: usize| rounds.iter().map(move |s| s[i]);
    println!(
        "\nover the {r} rounds: each side's fastest sample (lowest for latency, CPU and memory), and in brackets its spread, lowest..highest; ratios to direct from the fastest samples, in brackets those of the rounds"
    );
    let header: Vec<&str> = targets.iter().map(|t| t.name.as_str()).collect();
    println!("| | {} |", header.join(" | "));
    println!("|---|{}", "---:|".repeat(n));
    let row = |name: &str, cell: &dyn Fn(usize) -> String| {
        let cells: Vec<String> = (0..n).map(cell).collect();
        println!("| {name} | {} |", cells.join(" | "));
    };
    // Throughput: best = highest MB/s.
    let throughput = |name: &str, secs: fn(&Sample) -> f64| {
        row(&format!("{name}, MB/s"), &|i| {
            let (lo, hi) = range(side(i).map(|x| mb / secs(&x))).unwrap_or_default();
            format!("{hi:.1} ({lo:.1}..{hi:.1})")
        });
        row(&format!("{name} / direct"), &|i| {
            if i == 0 {
                return String::new();
            }
            let best = |j: usize| range(side(j).map(|x| mb / secs(&x))).map_or(0.0, |v| v.1);
            let (lo, hi) =
                range(rounds.iter().map(|s| secs(&s[0]) / secs(&s[i]))).unwrap_or_default();
            format!("{:.2} ({lo:.2}..{hi:.2})", best(i) / best(0))
        });
    };
    throughput("produce (steady)", |x| x.produce_steady_s);
    throughput("produce (whole)", |x| x.produce_s);
    throughput("fetch (steady)", |x| x.fetch_steady_s);
    throughput("fetch (whole)", |x| x.fetch_s);
    let latency = |name: &str, us: fn(&Sample) -> f64| {
        row(&format!("single produce {name}, ms"), &|i| {
            let (lo, hi) = range(side(i).map(|x| us(&x) / 1e3)).unwrap_or_default();
            format!("{lo:.3} ({lo:.3}..{hi:.3})")
        });
        row(&format!("{name} added, ms"), &|i| {
            if i == 0 {
                return String::new();
            }
            let best = |j: usize| range(side(j).map(|x| us(&x) / 1e3)).map_or(0.0, |v| v.0);
            let (lo, hi) =
                range(rounds.iter().map(|s| (us(&s[i]) - us(&s[0])) / 1e3)).unwrap_or_default();
            format!("{:+.3} ({lo:+.3}..{hi:+.3})", best(i) - best(0))
        });
    };
    latency("p50", |x| x.p50_us);
    latency("p99", |x| x.p99_us);
    let cpu = |name: &str, f: &dyn Fn(&Sample) -> Option<f64>| {
        row(
            &format!("CPU, {name}: ms per MB"),
            &|i| match range(side(i).filter_map(|x| f(&x))) {
                Some((lo, hi)) => format!("{lo:.2} ({lo:.2}..{hi:.2})"),
                None => String::new(),
            },
        );
    };
    cpu("produce", &|x| x.cpu_produce_s.map(|c| c / mb * 1e3));
    cpu("fetch", &|x| x.cpu_fetch_s.map(|c| c / mb * 1e3));
    cpu("produce and fetch", &|x| x.cpu_ms_per_mb(mb));
    let busy = |name: &str, f: fn(&Sample) -> (Phase, f64)| {
        row(&format!("machine, {name}: cores busy"), &|i| {
            let cores = side(i).filter_map(|x| {
                let (p, seconds) = f(&x);
                Some(p.machine?.busy_s / seconds)
            });
            match range(cores) {
                Some((lo, hi)) => format!("{hi:.2} ({lo:.2}..{hi:.2})"),
                None => String::new(),
            }
        });
        row(&format!("machine, {name}: ms per MB"), &|i| {
            let all = side(i).filter_map(|x| Some(f(&x).0.machine?.busy_s / mb * 1e3));
            match range(all) {
                Some((lo, hi)) => format!("{lo:.1} ({lo:.1}..{hi:.1})"),
                None => String::new(),
            }
        });
    };
    busy("produce", |x| (x.produce_phase, x.produce_s));
    busy("fetch", |x| (x.fetch_phase, x.fetch_s));
    // Fresh, the growth is the connections' own; after traffic, freed
    // buffers are reused for them and the growth is mostly none.
    row(
        &format!(
            "memory per connection, KiB ({} idle): fresh (after the rounds)",
            a.connections
        ),
        &|i| {
            let Some((b, w)) = fresh[i] else {
                return String::new();
            };
            let after = range(
                side(i)
                    .filter_map(|x| x.memory)
                    .map(|(b, w)| per_connection(b, w, a.connections)),
            );
            match after {
                Some((lo, hi)) => format!(
                    "{:.1} ({lo:.1}..{hi:.1})",
                    per_connection(b, w, a.connections)
                ),
                None => format!("{:.1}", per_connection(b, w, a.connections)),
            }
        },
    );
    row("resident when fresh, MiB", &|i| {
        fresh[i].map_or(String::new(), |(b, _)| format!("{:.1}", b as f64 / 1024.0))
    });

    // The goals, for this project's proxy (side 1).
    for (name, secs) in [
        (
            "produce (steady)",
            (|x: &Sample| x.produce_steady_s) as fn(&Sample) -> f64,
        ),
        ("fetch (steady)", |x: &Sample| x.fetch_steady_s),
    ] {
        let best = |j: usize| range(side(j).map(|x| mb / secs(&x))).map_or(0.0, |v| v.1);
        let ratio = best(1) / best(0);
        let met = rounds
            .iter()
            .filter(|s| secs(&s[0]) / secs(&s[1]) >= THROUGHPUT_GOAL)
            .count();
        println!(
            "goal: {name} through {OURS} at least {THROUGHPUT_GOAL} of direct: {ratio:.2} (fastest samples): {}; {met} of {r} rounds at or above it",
            if ratio >= THROUGHPUT_GOAL { "met" } else { "not met" }
        );
    }
    for (i, t) in targets.iter().enumerate().skip(2) {
        let pairs: Vec<(f64, f64)> = rounds
            .iter()
            .filter_map(|s| Some((s[1].cpu_ms_per_mb(mb)?, s[i].cpu_ms_per_mb(mb)?)))
            .collect();
        let (Some((ours, _)), Some((theirs, _))) = (
            range(pairs.iter().map(|p| p.0)),
            range(pairs.iter().map(|p| p.1)),
        ) else {
            println!("goal: CPU per MB against {}: not read (no pid)", t.name);
            continue;
        };
        let ratio = ours / theirs;
        let (lo, hi) = range(pairs.iter().map(|p| p.0 / p.1)).unwrap_or_default();
        println!(
            "goal: CPU per MB of {OURS} at most {CPU_GOAL} of {}'s: {ours:.2} / {theirs:.2} ms per MB = {ratio:.2} (lowest samples; rounds {lo:.2}..{hi:.2}): {}",
            t.name,
            if ratio <= CPU_GOAL { "met" } else { "not met" }
        );
    }
}
