//! `tombstone-crypt proxy` with a topic under subject keys
//! (crypto-shredding), every part a real process against the loopback
//! broker: the proxy, the command line's `shred create-key-store`, `shred`
//! and `consume`, and a client that is not Rust (confluent-kafka for
//! Python, `proxy/tests/python/subject_keys_client.py`, with the
//! interpreter at `TOMBSTONE_TINK_PYTHON`; rdkafka in this process when it
//! is unset).

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use common::kafka::{bootstrap, client_config, create_topic, free_base_port, fresh_topic};
use common::process::{cli, code, json_of, new_keyset, Dir};
use serde_json::{json, Value};
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::kafka::rdkafka::{Message as _, Offset, TopicPartitionList};

/// What the client produces through the proxy, in order (offsets 0..=6):
/// each subject a value and an empty value, then carol's tombstone.
const RECORDS: [(&str, Option<&[u8]>); 7] = [
    ("alice", Some(b"alice: 1 Main St, card 4111-1111-1111-1111")),
    ("bob", Some(b"bob: 2 Elm St, card 5500-0000-0000-0004")),
    ("carol", Some(b"carol: 3 Oak St, card 3400-0000-0000-009")),
    ("alice", Some(b"")),
    ("bob", Some(b"")),
    ("carol", Some(b"")),
    ("carol", None),
];

/// One thing a reader got, in the order it got them.
#[derive(Clone, Debug, PartialEq)]
enum Event {
    /// A record of partition 0 (`value`: `None` for a null value).
    Record {
        offset: i64,
        key: Option<Vec<u8>>,
        value: Option<Vec<u8>>,
    },
    /// An error event (a fetch that failed).
    Error(String),
    /// Why the read stopped: `eof`, `time` or `errors`.
    End(String),
}

/// The client through the proxy: the Python script, or rdkafka here.
struct Client {
    python: Option<String>,
}

impl Client {
    fn new() -> Client {
        let python = match std::env::var("TOMBSTONE_TINK_PYTHON") {
            Ok(p) if !p.is_empty() => Some(p),
            _ => {
                eprintln!(
                    "TOMBSTONE_TINK_PYTHON is unset: the Python client is skipped, rdkafka reads and writes through the proxy instead"
                );
                None
            }
        };
        Client { python }
    }

    fn script() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../proxy/tests/python/subject_keys_client.py")
    }

    /// Produces `records` to partition 0 of `topic` at `bootstrap`: their
    /// offsets.
    fn produce(&self, bootstrap: &str, topic: &str, records: &[(&str, Option<&[u8]>)]) -> Vec<i64> {
        let Some(python) = &self.python else {
            return rdkafka_produce(bootstrap, topic, records);
        };
        let list: Vec<Value> = records
            .iter()
            .map(|(k, v)| json!([hex::encode(k), v.map(hex::encode)]))
            .collect();
        let out = Command::new(python)
            .arg(Self::script())
            .args(["produce", bootstrap, topic, &Value::from(list).to_string()])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "python produce: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let r = json_of(&out);
        serde_json::from_value(r["delivered"].clone()).unwrap()
    }

    /// Reads partition 0 of `topic` at `bootstrap` from its start, as a
    /// fresh consumer, until its end, `seconds` or `max_errors` errors.
    fn read(&self, bootstrap: &str, topic: &str, seconds: f64, max_errors: usize) -> Vec<Event> {
        let Some(python) = &self.python else {
            return rdkafka_read(bootstrap, topic, seconds, max_errors);
        };
        let out = Command::new(python)
            .arg(Self::script())
            .args([
                "read",
                bootstrap,
                topic,
                &seconds.to_string(),
                &max_errors.to_string(),
            ])
            .output()
            .unwrap();
        assert_eq!(
            out.status.code(),
            Some(0),
            "python read: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let unhex = |v: &Value| v.as_str().map(|s| hex::decode(s).unwrap());
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| {
                let v: Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
                if let Some(end) = v.get("end") {
                    Event::End(end.as_str().unwrap().to_owned())
                } else if let Some(e) = v.get("error") {
                    Event::Error(format!("{} (code {})", e.as_str().unwrap(), v["code"]))
                } else {
                    Event::Record {
                        offset: v["offset"].as_i64().unwrap(),
                        key: unhex(&v["key"]),
                        value: unhex(&v["value"]),
                    }
                }
            })
            .collect()
    }
}

/// Produces `records` to partition 0 with rdkafka: their offsets.
fn rdkafka_produce(bootstrap: &str, topic: &str, records: &[(&str, Option<&[u8]>)]) -> Vec<i64> {
    let mut config = client_config(bootstrap);
    config.set("enable.idempotence", "true");
    let p: FutureProducer = config.create().unwrap();
    records
        .iter()
        .map(|(k, v)| {
            let mut r: FutureRecord<'_, [u8], [u8]> =
                FutureRecord::to(topic).key(k.as_bytes()).partition(0);
            if let Some(v) = v {
                r = r.payload(v);
            }
            futures_executor::block_on(p.send(r, Duration::from_secs(20)))
                .unwrap()
                .offset
        })
        .collect()
}

/// [`Client::read`] with rdkafka.
fn rdkafka_read(bootstrap: &str, topic: &str, seconds: f64, max_errors: usize) -> Vec<Event> {
    let consumer: BaseConsumer = client_config(bootstrap)
        .set("group.id", fresh_topic("subject-keys-reader"))
        .set("enable.partition.eof", "true")
        .set("enable.auto.commit", "false")
        .set("fetch.error.backoff.ms", "100")
        .create()
        .unwrap();
    let mut tpl = TopicPartitionList::new();
    tpl.add_partition_offset(topic, 0, Offset::Beginning)
        .unwrap();
    consumer.assign(&tpl).unwrap();
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let mut events = Vec::new();
    let mut errors = 0;
    let mut end = "time";
    while Instant::now() < deadline {
        match consumer.poll(Duration::from_millis(100)) {
            None => {}
            Some(Err(KafkaError::PartitionEOF(_))) => {
                end = "eof";
                break;
            }
            Some(Err(e)) => {
                events.push(Event::Error(e.to_string()));
                errors += 1;
                if errors >= max_errors {
                    end = "errors";
                    break;
                }
            }
            Some(Ok(m)) => events.push(Event::Record {
                offset: m.offset(),
                key: m.key().map(<[u8]>::to_vec),
                value: m.payload().map(<[u8]>::to_vec),
            }),
        }
    }
    events.push(Event::End(end.to_owned()));
    events
}

/// Whether `events` (a whole read of the topic) are [`RECORDS`] with every
/// value of the subjects in `shredded` read as null (a tombstone), every
/// other record as written: `Err` names the first difference.
fn reads_as(events: &[Event], shredded: &[&str]) -> Result<(), String> {
    let records: Vec<_> = events
        .iter()
        .filter(|e| matches!(e, Event::Record { .. }))
        .collect();
    if events.last() != Some(&Event::End("eof".into())) || records.len() + 1 != events.len() {
        return Err(format!("not a clean read to the end: {events:?}"));
    }
    if records.len() != RECORDS.len() {
        return Err(format!("{} records: {events:?}", records.len()));
    }
    for (offset, (record, (subject, value))) in records.iter().zip(RECORDS).enumerate() {
        let want_value = if shredded.contains(&subject) {
            None
        } else {
            value.map(<[u8]>::to_vec)
        };
        let want = Event::Record {
            offset: i64::try_from(offset).unwrap(),
            key: Some(subject.as_bytes().to_vec()),
            value: want_value,
        };
        if **record != want {
            return Err(format!("offset {offset}: got {record:?}, want {want:?}"));
        }
    }
    Ok(())
}

/// `consume --subject-keyset KEK --subject-key-topic KS` of `topic`,
/// beside the proxy: its lines (exit 0 asserted).
fn consume(broker: &str, topic: &str, kek: &str, key_topic: &str) -> Vec<Value> {
    let out = cli(&[
        "consume",
        "--bootstrap",
        broker,
        "--topic",
        topic,
        "--subject-keyset",
        kek,
        "--subject-key-topic",
        key_topic,
        "--timeout",
        "10",
        "-q",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect()
}

/// The lines `consume` must print for [`RECORDS`], the values of
/// `shredded` subjects as `null` with `"shredded": true`, an empty value
/// with `"broken_delete": true` (consume's default `--null-marker empty`
/// flags it; it is still a value).
fn consume_expected(shredded: &[&str]) -> Vec<Value> {
    RECORDS
        .iter()
        .enumerate()
        .map(|(offset, (k, v))| match v {
            Some(_) if shredded.contains(k) => {
                json!({"partition": 0, "offset": offset, "key": k, "value": null, "shredded": true})
            }
            Some(b"") => json!({"partition": 0, "offset": offset, "key": k, "value": "",
                "broken_delete": true}),
            Some(v) => json!({"partition": 0, "offset": offset, "key": k,
                "value": std::str::from_utf8(v).unwrap()}),
            None => json!({"partition": 0, "offset": offset, "key": k, "value": null}),
        })
        .collect()
}

/// `tombstone-crypt proxy --config` as a child process, its stderr in a
/// file; stopped with SIGTERM (also when a test panics).
struct Proxy {
    child: Option<Child>,
    addr: String,
    log: String,
}

impl Proxy {
    fn start(config: &str, log: &str, addr: &str) -> Proxy {
        let child = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
            .args(["proxy", "--config", config, "--drain-seconds", "2", "-v"])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap())
            .spawn()
            .unwrap();
        let mut proxy = Proxy {
            child: Some(child),
            addr: addr.to_owned(),
            log: log.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            if let Some(s) = proxy.child.as_mut().unwrap().try_wait().unwrap() {
                panic!("the proxy exited ({s}): {}", proxy.log());
            }
            assert!(Instant::now() < deadline, "the proxy did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        proxy
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then its exit (killed after 15 s).
    fn stop(&mut self) -> Option<ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            if let Some(s) = child.try_wait().unwrap() {
                return Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

/// A client that is not Rust (confluent-kafka for Python) produces keyed
/// records for alice, bob and carol through the proxy to a topic under
/// subject keys (its key store a compacted topic made by `shred
/// create-key-store`): the broker holds only subject-key values
/// (`0x53...`, no plaintext) and carol's tombstone null; `consume
/// --subject-keyset` beside the proxy reads them as written. After
/// `tombstone-crypt shred --subject alice` (a second process, while the
/// proxy runs), within the proxy's fences the client reads alice's values
/// through the proxy as tombstones, bob's and carol's as written, carol's
/// tombstone still null, and `consume` prints alice's as shredded. A copy
/// of bob's value with one DEK-id bit flipped, put on the broker directly,
/// is never handed on as a tombstone: the client's fetch of the partition
/// fails (`CORRUPT_MESSAGE`) and it gets no record at or past it.
/// Controls, showing the check can fail: before the shred the topic does
/// not read as shredded, and a second topic under a plain keyset
/// (`value_keyset`) behind the same proxy still reads alice's values after
/// the shred.
#[test]
fn a_shred_reaches_a_python_client_through_the_proxy_as_tombstones_and_a_forged_value_never_does() {
    let Some(broker) = bootstrap() else { return };
    let started = Instant::now();
    let client = Client::new();
    let dir = Dir::new("proxy-subject-keys");
    let (kek, _) = new_keyset(&dir, "kek.json");
    new_keyset(&dir, "values.json");
    let key_topic = fresh_topic("pxs-keys");
    let topic = fresh_topic("pxs-data");
    let plain_topic = fresh_topic("pxs-plain");
    create_topic(&broker, &topic, 1);
    create_topic(&broker, &plain_topic, 1);
    let out = cli(&[
        "shred",
        "create-key-store",
        "--subject-keyset",
        &kek,
        "--subject-key-topic",
        &key_topic,
        "--bootstrap",
        &broker,
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));

    let port = free_base_port();
    let addr = format!("127.0.0.1:{port}");
    let config = dir.file("proxy.json");
    std::fs::write(
        &config,
        json!({
            "listen": addr,
            "bootstrap": broker,
            "topics": [
                {"topic": topic, "subject_keyset": "kek.json", "subject_key_topic": key_topic},
                {"topic": plain_topic, "value_keyset": "values.json"},
            ],
        })
        .to_string(),
    )
    .unwrap();
    let mut proxy = Proxy::start(&config, &dir.file("proxy.log"), &addr);

    // Produced through the proxy, both topics.
    let offsets = client.produce(&proxy.addr, &topic, &RECORDS);
    assert_eq!(offsets, (0..7).collect::<Vec<i64>>());
    let offsets = client.produce(&proxy.addr, &plain_topic, &RECORDS);
    assert_eq!(offsets, (0..7).collect::<Vec<i64>>());

    // On the broker (read beside the proxy): subject-key values, no
    // plaintext; the tombstone null.
    let direct = rdkafka_read(&broker, &topic, 20.0, 1);
    assert_eq!(direct.last(), Some(&Event::End("eof".into())), "{direct:?}");
    let mut wire = Vec::new();
    for (event, (subject, value)) in direct.iter().zip(RECORDS) {
        let Event::Record {
            key,
            value: got,
            offset,
        } = event
        else {
            panic!("{direct:?}")
        };
        assert_eq!(key.as_deref(), Some(subject.as_bytes()), "{offset}");
        match (value, got) {
            (None, None) => {}
            (Some(v), Some(g)) => {
                assert_eq!(g[0], 0x53, "offset {offset}: not a subject-key value");
                assert_eq!(g.len(), v.len() + tombstone_crypt::shred::OVERHEAD);
                for (_, plain) in RECORDS {
                    let plain = plain.unwrap_or_default();
                    assert!(
                        plain.is_empty() || !g.windows(plain.len()).any(|w| w == plain),
                        "offset {offset}: plaintext on the broker"
                    );
                }
            }
            _ => panic!("offset {offset}: {value:?} became {got:?}"),
        }
        wire.push(got.clone());
    }
    assert_eq!(wire.len(), RECORDS.len(), "{direct:?}");

    // The command line beside the proxy reads what the client wrote.
    let lines = consume(&broker, &topic, &kek, &key_topic);
    assert_eq!(lines, consume_expected(&[]), "{lines:?}");

    // Through the proxy, before the shred: as written (and the check of a
    // shred fails: the first control).
    let before = client.read(&proxy.addr, &topic, 20.0, 1);
    reads_as(&before, &[]).unwrap();
    assert!(reads_as(&before, &["alice"]).is_err());
    let plain_before = client.read(&proxy.addr, &plain_topic, 20.0, 1);
    reads_as(&plain_before, &[]).unwrap();

    let out = cli(&[
        "shred",
        "--subject-keyset",
        &kek,
        "--subject-key-topic",
        &key_topic,
        "--bootstrap",
        &broker,
        "--subject",
        "alice",
        "--json",
    ]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(json_of(&out)["shredded"], 1);
    let shred_at = Instant::now();

    // Through the proxy, within its fences: alice's values as tombstones.
    let deadline = shred_at + Duration::from_secs(20);
    let after = loop {
        let events = client.read(&proxy.addr, &topic, 10.0, 1);
        match reads_as(&events, &["alice"]) {
            Ok(()) => break events,
            Err(e) => assert!(
                Instant::now() < deadline,
                "20 s after the shred, through the proxy: {e}"
            ),
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    eprintln!(
        "the shred reached the client through the proxy after {:?}",
        shred_at.elapsed()
    );
    assert!(reads_as(&after, &[]).is_err());
    let lines = consume(&broker, &topic, &kek, &key_topic);
    assert_eq!(lines, consume_expected(&["alice"]), "{lines:?}");

    // The second control: the topic under a plain keyset, after the shred
    // and the fences, still reads alice's values (the shred check fails
    // there).
    let plain_after = client.read(&proxy.addr, &plain_topic, 20.0, 1);
    reads_as(&plain_after, &[]).unwrap();
    let control = reads_as(&plain_after, &["alice"]);
    assert!(control.is_err(), "the control met the shred check");

    // A forged value: bob's ciphertext with one bit of its DEK id flipped
    // (bytes 17..25), put on the broker directly under bob's key.
    let mut forged = wire[1].clone().unwrap();
    assert_eq!(forged[0], 0x53);
    forged[17] ^= 0x01;
    let forged_offset = rdkafka_produce(&broker, &topic, &[("bob", Some(&forged))]);
    assert_eq!(forged_offset, [7]);
    let events = client.read(&proxy.addr, &topic, 6.0, 3);
    assert!(
        !events.iter().any(|e| matches!(
            e,
            Event::Record {
                offset: 7,
                value: None,
                ..
            }
        )),
        "the forged value reached the client as a tombstone: {events:?}"
    );
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Record { offset, .. } if *offset >= 7)),
        "the client got past the forged value: {events:?}"
    );
    assert!(
        events.iter().any(|e| matches!(e, Event::Error(_))),
        "no fetch error: {events:?}"
    );
    assert_ne!(events.last(), Some(&Event::End("eof".into())), "{events:?}");
    eprintln!("through the proxy, with the forged value: {events:?}");

    let status = proxy.stop().expect("the proxy did not stop on SIGTERM");
    let log = proxy.log();
    assert_eq!(status.code(), Some(0), "{log}");
    assert!(
        log.contains("CORRUPT_MESSAGE") && log.contains(&format!("{topic}-0")),
        "{log}"
    );
    for (_, value) in RECORDS {
        let plain = std::str::from_utf8(value.unwrap_or_default()).unwrap();
        assert!(
            plain.is_empty() || !log.contains(plain),
            "a value in the log"
        );
    }
    eprintln!("done in {:?}", started.elapsed());
}
