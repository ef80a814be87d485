//! How the commands reach the brokers: a broker that does not answer fails
//! every command that talks to one within seconds (`--connect-timeout`),
//! and client settings come from `--client-config`, the environment and
//! `-X`, in that order, without a secret ever in an error. The cases that
//! need a broker run when `TOMBSTONE_KAFKA_BOOTSTRAP` names one.

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// Runs the command line with `args` and the environment `env` added,
/// stdin empty, in `dir`.
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
    let dir = Dir::new(&format!("client-{name}"));
    let keyset = dir.file("values.json");
    let out = run(&dir.0, &["keyset", "new", "--out-keyset", &keyset], &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    dir
}

/// The broker of the Kafka tests, if one is named.
fn bootstrap() -> Option<String> {
    std::env::var("TOMBSTONE_KAFKA_BOOTSTRAP")
        .ok()
        .filter(|b| !b.is_empty())
}

/// Nothing listens on port 1.
const NOBODY: &str = "127.0.0.1:1";

#[test]
fn every_command_that_talks_to_a_broker_gives_up_on_one_that_does_not_answer_within_seconds() {
    let dir = scratch("timeout");
    let keyset = dir.file("values.json");
    let kek = dir.file("values.json");
    let topic_args = ["--bootstrap", NOBODY, "--topic", "t", "--keyset", &keyset];
    let mut commands: Vec<Vec<&str>> = ["audit", "repair", "reencrypt", "consume"]
        .iter()
        .map(|c| [&[*c][..], &topic_args[..]].concat())
        .collect();
    commands.push(vec![
        "repair",
        "--apply",
        "--null-marker",
        "empty",
        "--bootstrap",
        NOBODY,
        "--topic",
        "t",
        "--keyset",
        &keyset,
    ]);
    commands.push(vec![
        "audit",
        "--bootstrap",
        NOBODY,
        "--topic",
        "t",
        "--subject-keyset",
        &kek,
        "--subject-key-topic",
        "keys",
    ]);
    commands.push(vec![
        "shred",
        "--subject-keyset",
        &kek,
        "--subject-key-topic",
        "keys",
        "--bootstrap",
        NOBODY,
        "--subject",
        "x",
    ]);
    commands.push(vec![
        "shred",
        "check",
        "--subject-keyset",
        &kek,
        "--subject-key-topic",
        "keys",
        "--bootstrap",
        NOBODY,
    ]);
    for args in &commands {
        let start = Instant::now();
        let out = run(&dir.0, args, &[]);
        let took = start.elapsed();
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(took < Duration::from_secs(10), "{args:?} took {took:?}");
        let err = stderr(&out);
        assert!(
            err.contains(
                "no answer from the brokers at 127.0.0.1:1 within 5 s (--connect-timeout)"
            ),
            "{args:?}: {err}"
        );
    }
    // A shorter one, asked for.
    let start = Instant::now();
    let out = run(
        &dir.0,
        &[&["audit", "--connect-timeout", "1"][..], &topic_args[..]].concat(),
        &[],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert!(stderr(&out).contains("within 1 s"), "{}", stderr(&out));
}

#[test]
fn a_client_config_file_is_read_and_its_errors_show_no_values() {
    let dir = scratch("file");
    let keyset = dir.file("values.json");
    let config = dir.file("client.properties");
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
        run(&dir.0, &args, env)
    };
    // A line that is not a setting: named by its number, never its text.
    std::fs::write(&config, "# comment\n\nsasl.username=u\nhunter2-secret\n").unwrap();
    let out = audit(&["--client-config", &config], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("line 4: expected key=value"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    // A continued line is refused, not misread.
    std::fs::write(&config, "sasl.password=a\\\n  b\n").unwrap();
    let err = stderr(&audit(&["--client-config", &config], &[]));
    assert!(err.contains("line 1: ends with a backslash"), "{err}");
    // A setting librdkafka refuses: named, its value not shown.
    std::fs::write(
        &config,
        "! comment\n  socket.timeout.ms = hunter2-secret\r\n",
    )
    .unwrap();
    let out = audit(&["--client-config", &config], &[]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.contains("socket.timeout.ms"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    // The same from the environment.
    let out = audit(
        &[],
        &[("TOMBSTONE_CRYPT_KAFKA_SOCKET_TIMEOUT_MS", "hunter2-secret")],
    );
    let err = stderr(&out);
    assert!(err.contains("socket.timeout.ms"), "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    // A missing file.
    let err = stderr(&audit(&["--client-config", &dir.file("missing")], &[]));
    assert!(err.contains("--client-config"), "{err}");
    // -X wins over the environment, which wins over the file: the bad
    // value is overridden each time, and the command goes on to the
    // broker (which does not answer).
    std::fs::write(&config, "socket.timeout.ms=hunter2-secret\n").unwrap();
    let err = stderr(&audit(
        &["--client-config", &config],
        &[("TOMBSTONE_CRYPT_KAFKA_SOCKET_TIMEOUT_MS", "30000")],
    ));
    assert!(err.contains("no answer from the brokers"), "{err}");
    let err = stderr(&audit(
        &["-X", "socket.timeout.ms=30000"],
        &[("TOMBSTONE_CRYPT_KAFKA_SOCKET_TIMEOUT_MS", "hunter2-secret")],
    ));
    assert!(err.contains("no answer from the brokers"), "{err}");
}

#[test]
fn settings_from_the_file_and_the_environment_reach_the_broker() {
    let Some(broker) = bootstrap() else {
        eprintln!("skipped: TOMBSTONE_KAFKA_BOOTSTRAP is not set");
        return;
    };
    let dir = scratch("broker");
    let keyset = dir.file("values.json");
    let config = dir.file("client.properties");
    // A topic that does not exist: a broker that answered says so.
    let topic = format!("tc-client-settings-none-{}", std::process::id());
    let audit = |extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &[
                "audit",
                "--bootstrap",
                NOBODY,
                "--topic",
                &topic,
                "--keyset",
                &keyset,
            ][..],
            extra,
        ]
        .concat();
        stderr(&run(&dir.0, &args, env))
    };
    let reached =
        |err: &str| err.contains("Unknown topic") || err.contains("does not know the topic");
    // The brokers are --bootstrap's alone: a second list in the settings
    // is refused, wherever it comes from.
    std::fs::write(
        &config,
        format!("# the brokers\nbootstrap.servers = {broker}\n"),
    )
    .unwrap();
    let err = audit(&["--client-config", &config], &[]);
    assert!(err.contains("the brokers are --bootstrap's"), "{err}");
    let err = audit(
        &[],
        &[("TOMBSTONE_CRYPT_KAFKA_METADATA_BROKER_LIST", &broker)],
    );
    assert!(err.contains("the brokers are --bootstrap's"), "{err}");
    // A setting that changes how the broker is reached: from the file it
    // applies (this build has no TLS: the setting fails, named); the
    // environment over the file, -X over both.
    let audit = |extra: &[&str], env: &[(&str, &str)]| {
        let args = [
            &[
                "audit",
                "--bootstrap",
                &broker,
                "--topic",
                &topic,
                "--keyset",
                &keyset,
            ][..],
            extra,
        ]
        .concat();
        stderr(&run(&dir.0, &args, env))
    };
    std::fs::write(&config, "security.protocol = ssl\n").unwrap();
    let err = audit(&["--client-config", &config], &[]);
    assert!(!reached(&err) && err.contains("security.protocol"), "{err}");
    let err = audit(
        &["--client-config", &config],
        &[("TOMBSTONE_CRYPT_KAFKA_SECURITY_PROTOCOL", "plaintext")],
    );
    assert!(reached(&err), "{err}");
    let err = audit(
        &["-X", "security.protocol=plaintext"],
        &[("TOMBSTONE_CRYPT_KAFKA_SECURITY_PROTOCOL", "ssl")],
    );
    assert!(reached(&err), "{err}");
    // consume takes them too.
    let args = [
        "consume",
        "--bootstrap",
        &broker,
        "--topic",
        &topic,
        "--keyset",
        &keyset,
        "--client-config",
        &config,
    ];
    let err = stderr(&run(&dir.0, &args, &[]));
    assert!(!reached(&err) && err.contains("security.protocol"), "{err}");
}
