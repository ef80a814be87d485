//! Client settings that could get past the write-safety checks
//! checks (`check_ordered`) or print part of a value. Each case runs
//! against a broker that is not there (127.0.0.1:1): a configuration the
//! commands refuse is refused before any broker is asked, so reaching
//! the connect probe ("no answer from the brokers") means it was
//! accepted and the producer would be made with it.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn run(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"));
    c.args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .env("TOMBSTONE_CRYPT_LOCK_DIR", dir.join("locks"));
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run tombstone-crypt");
    assert_ne!(out.status.code(), Some(101), "{args:?} panicked");
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

use crate::common::dir;

use dir::Dir;

/// A scratch directory with a values' keyset (`values.json`), removed
/// when dropped.
fn scratch(name: &str) -> Dir {
    let dir = Dir::new(&format!("client-safety-{name}"));
    let keyset = dir.file("values.json");
    let out = run(&dir.0, &["keyset", "new", "--out-keyset", &keyset], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

const NOBODY: &str = "127.0.0.1:1";

/// `repair --apply` (or `reencrypt --apply`) on the broker that is not
/// there, with `extra` arguments and `env`.
fn apply(dir: &Dir, command: &str, extra: &[&str], env: &[(&str, &str)]) -> Output {
    let keyset = dir.file("values.json");
    let mut args = vec![
        command,
        "--apply",
        "--bootstrap",
        NOBODY,
        "--topic",
        "t",
        "--keyset",
        &keyset,
        "--connect-timeout",
        "1",
    ];
    if command == "repair" {
        args.extend(["--null-marker", "empty"]);
    }
    args.extend_from_slice(extra);
    run(&dir.0, &args, env)
}

/// librdkafka strips a `topic.` prefix from a topic property
/// (`rd_kafka_topic_conf_set`): `topic.acks=1` IS `acks=1`, and
/// `topic.request.required.acks=0` is `acks=0`. `check_ordered` looks
/// only at `acks` and `request.required.acks`, so with idempotence off
/// and one request in flight (the combination it allows), repair and
/// reencrypt write with acks=1 or 0: the checkpoint moves on after a
/// chunk the broker never stored.
#[test]
fn a_topic_prefixed_acks_is_refused_like_acks() {
    let dir = scratch("topic-acks");
    let unsafe_x = [
        "-X",
        "enable.idempotence=false",
        "-X",
        "max.in.flight=1",
        "-X",
        "topic.acks=1",
    ];
    for command in ["repair", "reencrypt"] {
        let err = stderr(&apply(&dir, command, &unsafe_x, &[]));
        assert!(
            !err.contains("no answer from the brokers") && err.contains("acks"),
            "{command} --apply -X topic.acks=1 was accepted: {err}"
        );
    }
    // The same from the environment.
    let env = [
        ("TOMBSTONE_CRYPT_KAFKA_ENABLE_IDEMPOTENCE", "false"),
        ("TOMBSTONE_CRYPT_KAFKA_MAX_IN_FLIGHT", "1"),
        ("TOMBSTONE_CRYPT_KAFKA_TOPIC_REQUEST_REQUIRED_ACKS", "0"),
    ];
    let err = stderr(&apply(&dir, "repair", &[], &env));
    assert!(
        !err.contains("no answer from the brokers") && err.contains("acks"),
        "repair --apply with TOMBSTONE_CRYPT_KAFKA_TOPIC_REQUEST_REQUIRED_ACKS=0 was accepted: {err}"
    );
}

/// `max.in.flight` and `max.in.flight.requests.per.connection` are one
/// librdkafka setting under two names. `check_ordered` accepts idempotence
/// off when EITHER name says 1, but rdkafka's ClientConfig is a HashMap:
/// both names reach librdkafka in an order that varies per process, so
/// the producer runs with 5 requests in flight, not idempotent, about half
/// the time. The "later one wins" precedence of --client-config, the
/// environment and -X does not hold across the two names either: a
/// client-config file with `max.in.flight=5`, and the `-X
/// max.in.flight.requests.per.connection=1` the refusal itself advises.
#[test]
fn two_names_of_max_in_flight_that_disagree_are_refused() {
    let dir = scratch("in-flight");
    let config = dir.file("client.properties");
    std::fs::write(&config, "enable.idempotence=false\nmax.in.flight=5\n").unwrap();
    let err = stderr(&apply(
        &dir,
        "repair",
        &[
            "--client-config",
            &config,
            "-X",
            "max.in.flight.requests.per.connection=1",
        ],
        &[],
    ));
    assert!(
        !err.contains("no answer from the brokers"),
        "idempotence off with max.in.flight=5 and max.in.flight.requests.per.connection=1 was accepted: {err}"
    );
}

/// An invalid setting's error should never show its value; for a list
/// setting librdkafka names only the bad item, which `reach`'s
/// replace-the-whole-value does not find, so the item is printed.
#[test]
fn an_invalid_list_setting_shows_no_part_of_its_value() {
    let dir = scratch("list-leak");
    let keyset = dir.file("values.json");
    let out = run(
        &dir.0,
        &[
            "audit",
            "--bootstrap",
            NOBODY,
            "--topic",
            "t",
            "--keyset",
            &keyset,
            "--connect-timeout",
            "1",
        ],
        &[("TOMBSTONE_CRYPT_KAFKA_DEBUG", "broker,hunter2-secret")],
    );
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("debug"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
}

/// `--bootstrap` is required, but a `bootstrap.servers` in the
/// `--client-config` file (where Java client.properties files keep it) or
/// in `TOMBSTONE_CRYPT_KAFKA_BOOTSTRAP_SERVERS` replaces it silently ("a
/// later one wins"): `repair --apply --bootstrap staging:9092
/// --client-config prod.properties` reads and WRITES the cluster of the
/// file. (Run by hand on the local broker: `repair --apply --bootstrap
/// 127.0.0.1:1 --client-config F` with `bootstrap.servers=<broker>` in F
/// wrote 12 tombstones there.)
#[test]
fn a_bootstrap_in_the_client_settings_does_not_replace_the_one_named() {
    let dir = scratch("bootstrap");
    let keyset = dir.file("values.json");
    let config = dir.file("client.properties");
    std::fs::write(
        &config,
        "security.protocol=PLAINTEXT\nbootstrap.servers=127.0.0.2:1\n",
    )
    .unwrap();
    let audit = |extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &[
                "audit",
                "--bootstrap",
                NOBODY,
                "--topic",
                "t",
                "--keyset",
                &keyset,
                "--connect-timeout",
                "1",
            ][..],
            extra,
        ]
        .concat();
        stderr(&run(&dir.0, &args, env))
    };
    let err = audit(&["--client-config", &config], &[]);
    assert!(
        !err.contains("brokers at 127.0.0.2:1"),
        "the file's bootstrap.servers replaced --bootstrap: {err}"
    );
    let err = audit(
        &[],
        &[("TOMBSTONE_CRYPT_KAFKA_BOOTSTRAP_SERVERS", "127.0.0.2:1")],
    );
    assert!(
        !err.contains("brokers at 127.0.0.2:1"),
        "TOMBSTONE_CRYPT_KAFKA_BOOTSTRAP_SERVERS replaced --bootstrap: {err}"
    );
}

/// `metadata.broker.list` is librdkafka's other name of
/// `bootstrap.servers`: both reach librdkafka in HashMap order, so which
/// cluster a command talks to changes from run to run (and may differ
/// between the probe, the consumers and the producer of one run, whose
/// configurations are different maps). With `--bootstrap` naming nobody
/// and the variable naming the test broker, every run should fail (or be
/// refused); some reach the broker. Needs TOMBSTONE_KAFKA_BOOTSTRAP.
#[test]
fn metadata_broker_list_does_not_race_bootstrap() {
    let Some(broker) = std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP")
        .ok()
        .filter(|b| !b.is_empty())
    else {
        eprintln!("skipped: TOMBSTONE_KAFKA_BOOTSTRAP is not set");
        return;
    };
    let dir = scratch("broker-list");
    let keyset = dir.file("values.json");
    let mut outcomes = Vec::new();
    for _ in 0..8 {
        let out = run(
            &dir.0,
            &[
                "audit",
                "--bootstrap",
                NOBODY,
                "--topic",
                "client-safety-nothing",
                "--keyset",
                &keyset,
                "--connect-timeout",
                "1",
                "--timeout",
                "2",
            ],
            &[("TOMBSTONE_CRYPT_KAFKA_METADATA_BROKER_LIST", &broker)],
        );
        outcomes.push(stderr(&out).lines().next().unwrap_or("").to_owned());
    }
    assert!(
        outcomes
            .iter()
            .all(|l| l.contains("no answer from the brokers at 127.0.0.1:1")
                || l.contains("metadata.broker.list")),
        "with --bootstrap {NOBODY}, runs went past the probe to {broker}: {outcomes:#?}"
    );
}

/// Java properties (which `--client-config` says it reads) also separate
/// a key from its value by whitespace: `sasl.password c2VjcmV0Cg==` is
/// `sasl.password`. The file reader splits at the first `=` or `:`
/// instead, so the key becomes `sasl.password c2VjcmV0Cg`, and
/// librdkafka's "No such configuration property" error, printed with the
/// key, shows the password (all of it but the base64 padding).
#[test]
fn a_whitespace_separated_secret_in_the_client_config_is_not_printed() {
    let dir = scratch("ws-separator");
    let keyset = dir.file("values.json");
    let config = dir.file("client.properties");
    for line in [
        "sasl.password hunter2c2VjcmV0Cg==",
        "sasl.password\thunter2:rest",
    ] {
        std::fs::write(
            &config,
            format!("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n{line}\n"),
        )
        .unwrap();
        let out = run(
            &dir.0,
            &[
                "audit",
                "--bootstrap",
                NOBODY,
                "--topic",
                "t",
                "--keyset",
                &keyset,
                "--client-config",
                &config,
                "--connect-timeout",
                "1",
            ],
            &[],
        );
        let err = stderr(&out);
        eprintln!("{line:?}: {err}");
        assert!(!err.contains("hunter2"), "{line:?}: {err}");
    }
}

/// `produce` keeps a key's records in the write rule's order because
/// "librdkafka keeps the enqueue order within a partition on an
/// idempotent producer (or one with a single request in flight)". Not
/// with `queuing.strategy=lifo` (a topic setting librdkafka still takes):
/// with idempotence off and one request in flight, `check_ordered`
/// accepts it and the records queued together land newest first (the
/// value under a key's new form after the tombstones of its old forms
/// becomes the reverse). Run by hand on the local broker: `repair --apply
/// -X enable.idempotence=false -X max.in.flight=1 -X
/// queuing.strategy=lifo` wrote its 12 tombstones.
#[test]
fn a_lifo_queue_is_refused_when_order_rests_on_one_request_in_flight() {
    let dir = scratch("lifo");
    let x = [
        "-X",
        "enable.idempotence=false",
        "-X",
        "max.in.flight=1",
        "-X",
        "queuing.strategy=lifo",
    ];
    for command in ["repair", "reencrypt"] {
        let err = stderr(&apply(&dir, command, &x, &[]));
        assert!(
            !err.contains("no answer from the brokers"),
            "{command} --apply with queuing.strategy=lifo was accepted: {err}"
        );
    }
}
