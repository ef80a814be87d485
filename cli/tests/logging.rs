//! The command line's logging: `-v` and `RUST_LOG` go to stderr, `--json`
//! keeps stdout for its document, a KMS retry is a warning even without
//! `-v`, and no secret (the KMS token) is logged.

use std::process::{Command, Output};

fn cli(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"));
    c.args(args).env_remove("RUST_LOG");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("run tombstone-crypt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{args:?} panicked: {stderr}");
    out
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn verbose_logs_the_command_to_stderr_and_json_stays_on_stdout() {
    let quiet = cli(&["keyset", "new", "--json"], &[]);
    assert_eq!(quiet.status.code(), Some(0));
    assert!(quiet.stderr.is_empty(), "{}", stderr(&quiet));

    let loud = cli(&["keyset", "new", "--json", "-v"], &[]);
    assert_eq!(loud.status.code(), Some(0));
    let doc: serde_json::Value = serde_json::from_slice(&loud.stdout).expect("stdout is JSON");
    assert!(doc["key"].is_array(), "{doc}");
    let log = stderr(&loud);
    assert!(
        log.contains("command{name=\"keyset\"}") && log.contains("close"),
        "{log}"
    );

    // RUST_LOG overrides -v; a malformed one is a clear error.
    let off = cli(&["keyset", "new", "--json", "-vvv"], &[("RUST_LOG", "off")]);
    assert!(off.stderr.is_empty(), "{}", stderr(&off));
    let bad = cli(&["keyset", "new"], &[("RUST_LOG", "a=b=c")]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(stderr(&bad).contains("RUST_LOG"), "{}", stderr(&bad));
}

#[test]
fn a_kms_retry_is_a_warning_without_the_token() {
    let token = "s.ThisTokenMustNeverBeLogged42";
    let env = [("VAULT_TOKEN", token), ("VAULT_ADDR", "http://127.0.0.1:9")];
    let args = [
        "keyset",
        "new",
        "--json",
        "--encrypt-with",
        "hcvault://127.0.0.1:9/transit/keys/logging",
    ];
    let out = cli(&args, &env);
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let log = stderr(&out);
    assert!(log.contains("WARN") && log.contains("retrying"), "{log}");
    assert!(log.contains("tombstone-crypt: error:"), "{log}");
    assert!(
        !log.contains(token) && !log.contains("ThisTokenMustNever"),
        "{log}"
    );

    // With -v the KMS call's span closes with its outcome.
    let mut verbose = args.to_vec();
    verbose.push("-v");
    let log = stderr(&cli(&verbose, &env));
    assert!(log.contains("kms_call{operation=\"encrypt\""), "{log}");
    assert!(log.contains("outcome=\"error\""), "{log}");
    assert!(!log.contains("ThisTokenMustNever"), "{log}");
}
