//! A process killed (SIGKILL) in the middle of making subjects' DEKs, and
//! in the middle of shreds, on a redb key store and on a key-store topic.
//! After each kill, read by a new process's keys:
//!
//! - every value the killed process had written (its write returned)
//!   reads back;
//! - no subject has two live DEKs, and the store holds a DEK only for a
//!   subject whose value was written or for the one in flight (whose next
//!   write then uses it, making no second);
//! - every shred that returned reads as a delete; the one in flight is
//!   either done or not started, never half (its values read back whole, or
//!   as a delete), and running it again finishes it.
//!
//! The killed process is this test binary run again on one `#[ignore]`d
//! test (`child`), told what to do by environment variables; it prints a
//! line per write or shred that returned.

#![cfg(feature = "redb")]

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use tombstone_crypt::shred::{KeyStore, SubjectEncrypting, SubjectKeys};
use tombstone_crypt::{Context, Deserializer as _, Keyset, Serializer as _, Utf8};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// Where the key store is: a redb file, or a topic on the shared broker.
#[derive(Clone, Debug)]
enum Where {
    Redb(PathBuf),
    #[cfg(feature = "kafka")]
    Topic(String, String),
}

impl Where {
    fn env(&self) -> String {
        match self {
            Where::Redb(p) => format!("redb:{}", p.display()),
            #[cfg(feature = "kafka")]
            Where::Topic(b, t) => format!("topic:{b}:{t}"),
        }
    }

    fn parse(s: &str) -> Where {
        if let Some(p) = s.strip_prefix("redb:") {
            return Where::Redb(PathBuf::from(p));
        }
        #[cfg(feature = "kafka")]
        if let Some(rest) = s.strip_prefix("topic:") {
            let (b, t) = rest.rsplit_once(':').unwrap();
            return Where::Topic(b.to_owned(), t.to_owned());
        }
        panic!("unknown store {s}")
    }

    /// The store, made on first use (a redb file made by the first
    /// process, opened by the others).
    fn open(&self) -> Arc<dyn KeyStore> {
        use tombstone_crypt::shred::RedbKeyStore;
        match self {
            Where::Redb(p) if !p.exists() => Arc::new(RedbKeyStore::create(p).unwrap()),
            Where::Redb(p) => Arc::new(RedbKeyStore::open(p).unwrap()),
            #[cfg(feature = "kafka")]
            Where::Topic(b, t) => {
                use tombstone_crypt::kafka::KafkaChangelog;
                Arc::new(common::kafka::key_store(
                    KafkaChangelog::open(b, t).unwrap(),
                ))
            }
        }
    }
}

/// Each subject tag's live DEK ids in `store`.
fn deks(store: &dyn KeyStore) -> BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> {
    {
        let mut out: BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>> = BTreeMap::new();
        for (tag, record) in store.records().unwrap() {
            if tag == [0xff; 16] {
                continue; // the naming key
            }
            out.entry(tag.to_vec())
                .or_default()
                .insert(record[..8].to_vec());
        }
        out
    }
}

fn subject(i: usize) -> String {
    format!("subject-{i:05}")
}

/// The killed process: `TC_SHRED_CRASH=write|shred`, the KEK in
/// `TC_SHRED_KEK` (Tink JSON), the store in `TC_SHRED_STORE`. `write`
/// writes subject 0, 1, 2, ... a first value each and prints
/// `i base64(value)`; `shred` shreds subject 0, 1, ... and prints `i`.
#[test]
#[ignore = "run by the crash tests as the process they kill"]
fn child() {
    let Ok(what) = std::env::var("TC_SHRED_CRASH") else {
        return;
    };
    let kek = Keyset::from_tink_json(&std::env::var("TC_SHRED_KEK").unwrap()).unwrap();
    let store = Where::parse(&std::env::var("TC_SHRED_STORE").unwrap()).open();
    let keys = Arc::new(SubjectKeys::create(kek, store).unwrap());
    let w: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let out = std::io::stdout();
    for i in 0..100_000 {
        let s = subject(i);
        let line = if what == "write" {
            let v = w
                .serialize(&Context::new("t").with_key(s.as_bytes()), Some(&s))
                .unwrap()
                .unwrap();
            format!("{i} {}\n", B64.encode(v))
        } else {
            keys.shred(s.as_bytes()).unwrap();
            format!("{i}\n")
        };
        let mut out = out.lock();
        std::io::Write::write_all(&mut out, line.as_bytes()).unwrap();
        std::io::Write::flush(&mut out).unwrap();
    }
}

/// Runs `child` doing `what`, kills it `after` past its first line, and
/// returns the whole lines it printed.
fn run_and_kill(what: &str, kek: &Keyset, store: &Where, after: Duration) -> Vec<String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &common::test_name(module_path!(), "child"),
            "--ignored",
            "--nocapture",
            "--quiet",
        ])
        .env("TC_SHRED_CRASH", what)
        .env("TC_SHRED_KEK", kek.to_tink_json())
        .env("TC_SHRED_STORE", store.env())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut got = Vec::new();
    // Only lines of the child's own ("i ..."), not the test harness's.
    let ours = |l: &str| {
        l.split(' ')
            .next()
            .is_some_and(|n| n.parse::<usize>().is_ok())
    };
    for l in lines.by_ref() {
        let l = l.unwrap();
        if ours(&l) {
            got.push(l);
            break;
        }
    }
    assert!(!got.is_empty(), "the child printed nothing");
    let killer = std::thread::spawn({
        let pid = child.id();
        move || {
            std::thread::sleep(after);
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
        }
    });
    // A line cut by the kill has no newline: `lines` gives it, so keep
    // only lines that parse whole.
    for l in lines.map_while(Result::ok) {
        if !ours(&l) {
            continue;
        }
        if what == "write" {
            let Some((_, v)) = l.split_once(' ') else {
                continue;
            };
            if B64.decode(v).map_or(true, |v| v.len() < 41) {
                continue;
            }
        }
        got.push(l);
    }
    killer.join().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "the child finished before the kill");
    got
}

/// Kills a writer of first values, then checks the store and the values;
/// returns whether the kill left a DEK for the subject in flight (the kill
/// landed between a DEK stored and its value written).
fn writer_killed(kek: &Keyset, store: &Where, after: Duration) -> (usize, bool) {
    let lines = run_and_kill("write", kek, store, after);
    let store = store.open();
    let keys = Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store)).unwrap());
    let r: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let mut written = BTreeSet::new();
    for l in &lines {
        let (i, v) = l.split_once(' ').unwrap();
        let i: usize = i.parse().unwrap();
        let s = subject(i);
        let v = B64.decode(v).unwrap();
        let got = r.deserialize(&Context::new("t").with_key(s.as_bytes()), Some(&v));
        assert_eq!(
            got.unwrap().as_deref(),
            Some(s.as_str()),
            "a value written before the kill does not read back"
        );
        written.insert(keys.tag(s.as_bytes()).unwrap().to_vec());
    }
    let in_flight = subject(written.len());
    let in_flight_tag = keys.tag(in_flight.as_bytes()).unwrap().to_vec();
    let deks = deks(&*store);
    for (tag, ids) in &deks {
        assert_eq!(ids.len(), 1, "a subject with {} DEKs", ids.len());
        assert!(
            written.contains(tag) || *tag == in_flight_tag,
            "a DEK for a subject never written"
        );
    }
    for tag in &written {
        assert!(deks.contains_key(tag), "a written subject without a DEK");
    }
    let left = deks.contains_key(&in_flight_tag);
    // The subject in flight's next write uses what the store has: still
    // one DEK.
    let ctx = Context::new("t").with_key(in_flight.as_bytes());
    let v = r
        .serialize(&ctx, Some(in_flight.as_str()))
        .unwrap()
        .unwrap();
    assert_eq!(
        r.deserialize(&ctx, Some(&v)).unwrap().as_deref(),
        Some(in_flight.as_str())
    );
    assert_eq!(self::deks(&*store)[&in_flight_tag].len(), 1);
    (written.len(), left)
}

/// Writes values for subjects 0..n, kills a shredder of them, and checks
/// that each shred that returned reads as a delete and the one in flight is
/// whole either way, then finishes it.
fn shredder_killed(kek: &Keyset, store: &Where, n: usize, after: Duration) -> usize {
    let keys = Arc::new(SubjectKeys::create(kek.clone(), store.open()).unwrap());
    let w: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let values: Vec<Vec<u8>> = (0..n)
        .map(|i| {
            let s = subject(i);
            w.serialize(&Context::new("t").with_key(s.as_bytes()), Some(&s))
                .unwrap()
                .unwrap()
        })
        .collect();
    drop((w, keys)); // a redb file is opened by one process at a time
    let lines = run_and_kill("shred", kek, store, after);
    let done = lines.len();
    assert!(done < n, "every shred finished before the kill");
    let store = store.open();
    let keys = Arc::new(SubjectKeys::create(kek.clone(), Arc::clone(&store)).unwrap());
    let r: SubjectEncrypting<Utf8, str> = SubjectEncrypting::new(Arc::clone(&keys), Utf8);
    let read = |i: usize| {
        let s = subject(i);
        r.deserialize(&Context::new("t").with_key(s.as_bytes()), Some(&values[i]))
            .unwrap()
    };
    for i in 0..done {
        assert_eq!(read(i), None, "a shred that returned reads back");
    }
    match read(done) {
        None => {}
        Some(v) => assert_eq!(v, subject(done), "the shred in flight left a broken value"),
    }
    for i in done + 1..n {
        assert_eq!(read(i).as_deref(), Some(subject(i).as_str()));
    }
    keys.shred(subject(done).as_bytes()).unwrap();
    assert_eq!(read(done), None);
    assert!(!deks(&*store).contains_key(&keys.tag(subject(done).as_bytes()).unwrap()[..]));
    done
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("tc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Kill delays, spread so some land inside a DEK's creation.
fn delays(seed: u64, rounds: usize, max_ms: u64) -> Vec<Duration> {
    let mut rng = common::rng::Rng(seed);
    (0..rounds)
        .map(|_| Duration::from_millis(rng.below(max_ms) + 1))
        .collect()
}

fn kill_writers(store: impl Fn(usize) -> Where, rounds: usize, max_ms: u64) {
    let kek = Keyset::generate();
    let mut in_flight_left = 0;
    for (round, after) in delays(7, rounds, max_ms).into_iter().enumerate() {
        let (written, left) = writer_killed(&kek, &store(round), after);
        eprintln!("round {round}: killed after {after:?}, {written} subjects written, a DEK in flight left: {left}");
        in_flight_left += usize::from(left);
    }
    eprintln!("{in_flight_left} of {rounds} kills left the DEK in flight stored");
}

#[test]
fn a_writer_killed_while_making_deks_leaves_one_dek_per_subject_and_every_value_readable() {
    let dir = temp_dir("shred-crash-write");
    kill_writers(
        |round| Where::Redb(dir.join(format!("keys-{round}.redb"))),
        6,
        300,
    );
}

#[test]
fn a_shredder_killed_leaves_no_half_shred() {
    let dir = temp_dir("shred-crash-shred");
    let kek = Keyset::generate();
    for (round, after) in delays(11, 4, 150).into_iter().enumerate() {
        let store = Where::Redb(dir.join(format!("keys-{round}.redb")));
        // Some tens of shreds return before a kill at 150 ms here (each
        // a redb commit): 500 subjects leave the kill room on a machine
        // ten times faster.
        let done = shredder_killed(&kek, &store, 500, after);
        eprintln!("round {round}: killed after {after:?}, {done} shreds returned");
    }
}

#[cfg(feature = "kafka")]
#[test]
fn on_a_key_store_topic_a_killed_writer_or_shredder_leaves_no_second_dek_and_no_half_shred() {
    let Some(bootstrap) = common::kafka::bootstrap() else {
        return;
    };
    let topic = |what: &str| Where::Topic(bootstrap.clone(), common::kafka::fresh_topic(what));
    // Each first write and each shred reads the topic on and waits for the
    // broker: some tens a second.
    kill_writers(|_| topic("subject-keys-crash"), 4, 1500);
    let kek = Keyset::generate();
    for (round, after) in delays(13, 3, 1200).into_iter().enumerate() {
        let done = shredder_killed(&kek, &topic("subject-keys-shred-crash"), 200, after);
        eprintln!("round {round}: killed after {after:?}, {done} shreds returned");
    }
}
