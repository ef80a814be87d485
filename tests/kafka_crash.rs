//! A writer killed with SIGKILL at random points, 20 times over, on a real
//! broker: a child process writes puts and deletes through
//! `EncryptedStore<ChangeLoggingStore<RedbStore, KafkaChangelog>>`,
//! flushing every few operations and saying so on stdout; the parent kills
//! it, and the next child starts as a restarted application would (open
//! the local store, `recover` from the changelog). Each recovered state must
//! contain every operation whose flush returned `Ok`, never a key whose
//! delete was acknowledged, never a value older than an acknowledged newer
//! one: per key, the acknowledged state or one written after it.
#![cfg(all(feature = "kafka", feature = "redb"))]

use crate::common;

use std::collections::BTreeMap;
use std::io::{BufRead as _, BufReader, Write as _};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tombstone_crypt::kafka::KafkaChangelog;
use tombstone_crypt::store::{ChangeLoggingStore, EncryptedStore, KeyValueStore, RedbStore};
use tombstone_crypt::Keyset;

use common::kafka::bootstrap;

const KILLS: usize = 20;
const KEYS: u32 = 8;
const FLUSH_EVERY: u32 = 4;

/// A small reproducible PRNG (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

type State = BTreeMap<String, String>;

/// What the parent knows: per key the acknowledged state, and the states
/// written after it (in order) that may or may not have reached the log.
#[derive(Default)]
struct Model {
    acked: BTreeMap<String, Option<String>>,
    since: Vec<(String, Option<String>)>,
}

impl Model {
    fn check(&self, got: &State, when: &str) {
        for k in 0..KEYS {
            let k = format!("key-{k}");
            let mut allowed = vec![self.acked.get(&k).cloned().flatten()];
            allowed.extend(
                self.since
                    .iter()
                    .filter(|(sk, _)| *sk == k)
                    .map(|(_, v)| v.clone()),
            );
            let g = got.get(&k).cloned();
            assert!(
                allowed.contains(&g),
                "{when}: {k} recovered as {g:?}; acknowledged {:?}, written since {:?}",
                self.acked.get(&k),
                &allowed[1..]
            );
        }
    }

    fn reset(&mut self, got: &State) {
        self.acked = (0..KEYS)
            .map(|k| format!("key-{k}"))
            .map(|k| {
                let v = got.get(&k).cloned();
                (k, v)
            })
            .collect();
        self.since.clear();
    }
}

fn open(
    bootstrap: &str,
    topic: &str,
    db: &std::path::Path,
    keyset: &Keyset,
) -> EncryptedStore<ChangeLoggingStore<RedbStore, KafkaChangelog>> {
    let local = RedbStore::open(db).unwrap();
    let log = KafkaChangelog::open(bootstrap, topic).unwrap();
    let mut logged = ChangeLoggingStore::new(local, log);
    logged.recover().unwrap();
    EncryptedStore::new(logged, "crash", keyset.clone())
}

fn state(store: &impl KeyValueStore) -> State {
    store
        .all()
        .unwrap()
        .into_iter()
        .map(|(k, v)| (String::from_utf8(k).unwrap(), String::from_utf8(v).unwrap()))
        .collect()
}

#[test]
fn a_killed_writer_loses_nothing_it_flushed() {
    let Some(bootstrap) = bootstrap() else { return };
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64;
    let seed = std::env::var("TC_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(nanos | 1);
    eprintln!("seed {seed} (TC_CRASH_SEED to replay)");
    let mut rng = Rng(seed);
    let topic = format!("tc-crash-{}-{nanos}", std::process::id());
    let dir = std::env::temp_dir().join(format!("tc-crash-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let db = dir.join("store.redb");
    let keyset = Keyset::generate();
    let exe = std::env::current_exe().unwrap();
    let mut model = Model::default();
    model.reset(&State::new());
    let (mut ops_total, mut acked_total, mut in_doubt_total) = (0usize, 0usize, 0usize);
    for run in 0..KILLS {
        let mut child = Command::new(&exe)
            .args([
                "--exact",
                &common::test_name(module_path!(), "crash_writer_child"),
                "--ignored",
                "--nocapture",
                "--test-threads",
                "1",
            ])
            .env("TC_CRASH_TOPIC", &topic)
            .env("TC_CRASH_DB", &db)
            .env("TC_CRASH_KEYSET", keyset.to_tink_json())
            .env("TC_CRASH_RUN", run.to_string())
            .env("TC_CRASH_CHILD_SEED", rng.next().to_string())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(dir.join(format!("child-{run}.log"))).unwrap())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        // The child first reports what it recovered.
        let mut recovered = State::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
            else {
                let _ = child.kill();
                let log = std::fs::read_to_string(dir.join(format!("child-{run}.log")))
                    .unwrap_or_default();
                panic!("run {run}: the child did not report its recovered state:\n{log}");
            };
            // libtest's "test crash_writer_child ... " may start the first
            // line the child prints.
            if line.ends_with("READY") {
                break;
            }
            if let Some(rest) = line.find("STATE ").map(|i| &line[i + 6..]) {
                let (k, v) = rest.split_once(' ').unwrap();
                recovered.insert(k.to_owned(), v.to_owned());
            }
        }
        model.check(&recovered, &format!("run {run}, after restart"));
        model.reset(&recovered);
        // Let it write for a random while, then SIGKILL it.
        let wait = Duration::from_millis(30 + rng.next() % 300);
        let mut until = Instant::now() + wait;
        let mut pending: Vec<(String, Option<String>)> = Vec::new();
        let mut handle =
            |line: String, model: &mut Model, pending: &mut Vec<(String, Option<String>)>| {
                if let Some(rest) = line.strip_prefix("OP ") {
                    let mut parts = rest.split(' ');
                    let k = parts.next().unwrap().to_owned();
                    let v = parts.next().map(str::to_owned);
                    pending.push((k, v));
                    ops_total += 1;
                } else if line == "ACK" {
                    // Everything written so far is acknowledged.
                    for (k, v) in pending.drain(..) {
                        model.acked.insert(k, v);
                        acked_total += 1;
                    }
                }
            };
        // Every fourth run, the random while starts at the child's first
        // acknowledged flush: the first flush of a new producer (its
        // idempotence handshake) can take longer than the whole window on a
        // busy machine, and a run of kills that all came before any flush
        // would check nothing. A first flush that never comes fails here.
        if run % 4 == 0 {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                else {
                    panic!("run {run}: no flush was acknowledged within 60 s");
                };
                let ack = line == "ACK";
                handle(line, &mut model, &mut pending);
                if ack {
                    break;
                }
            }
            until = Instant::now() + wait;
        }
        while let Ok(line) = rx.recv_timeout(until.saturating_duration_since(Instant::now())) {
            handle(line, &mut model, &mut pending);
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Lines the child wrote before it died.
        reader.join().unwrap();
        while let Ok(line) = rx.try_recv() {
            handle(line, &mut model, &mut pending);
        }
        in_doubt_total += pending.len();
        model.since = pending;
    }
    // The parent restarts last, as the application would.
    let store = open(&bootstrap, &topic, &db, &keyset);
    let last = state(&store);
    model.check(&last, "after the last kill");
    eprintln!(
        "{KILLS} kills: {ops_total} operations written, {acked_total} acknowledged by a flush, {in_doubt_total} in doubt at the kills; every recovery held"
    );
    assert!(acked_total > 0 && ops_total > acked_total / 2);
    // The check is not vacuous: a recovered state that lost an acknowledged
    // write, or brought back an acknowledged delete, is refused.
    model.reset(&last);
    for k in 0..KEYS {
        let k = format!("key-{k}");
        let mut wrong = last.clone();
        match last.get(&k) {
            Some(_) => wrong.remove(&k),
            None => wrong.insert(k.clone(), "resurrected".into()),
        };
        let refused = std::panic::catch_unwind(|| model.check(&wrong, "control")).is_err();
        assert!(refused, "the check accepted a wrong state for {k}");
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// Runs only as the child of the test above: recovers, reports, then writes
/// until it is killed.
#[test]
#[ignore = "run by a_killed_writer_loses_nothing_it_flushed"]
fn crash_writer_child() {
    let Some(bootstrap) = bootstrap() else { return };
    let topic = std::env::var("TC_CRASH_TOPIC").expect("only run as a child");
    let db = std::path::PathBuf::from(std::env::var("TC_CRASH_DB").unwrap());
    let keyset = Keyset::from_tink_json(&std::env::var("TC_CRASH_KEYSET").unwrap()).unwrap();
    let run: u32 = std::env::var("TC_CRASH_RUN").unwrap().parse().unwrap();
    let mut rng = Rng(std::env::var("TC_CRASH_CHILD_SEED")
        .unwrap()
        .parse::<u64>()
        .unwrap()
        | 1);
    let mut store = open(&bootstrap, &topic, &db, &keyset);
    let out = std::io::stdout();
    let mut out = out.lock();
    for (k, v) in state(&store) {
        writeln!(out, "STATE {k} {v}").unwrap();
    }
    writeln!(out, "READY").unwrap();
    out.flush().unwrap();
    for j in 0u32.. {
        let k = format!("key-{}", rng.next() % u64::from(KEYS));
        if rng.next() % 3 == 0 {
            writeln!(out, "OP {k}").unwrap();
            out.flush().unwrap();
            store.delete(k.as_bytes()).unwrap();
        } else {
            let v = format!("r{run}-{j}");
            writeln!(out, "OP {k} {v}").unwrap();
            out.flush().unwrap();
            store.put(k.as_bytes(), Some(v.as_bytes())).unwrap();
        }
        if j % FLUSH_EVERY == FLUSH_EVERY - 1 {
            store.flush().unwrap();
            writeln!(out, "ACK").unwrap();
            out.flush().unwrap();
        }
    }
}
