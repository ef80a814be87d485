//! The Prometheus example, run as its own process and scraped over
//! loopback HTTP: every counter equals the work it did.
#![cfg(all(feature = "metrics", feature = "test-hooks"))]

use std::collections::HashMap;
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// `target/<profile>/examples/metrics`, which `cargo test` builds.
fn example() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let dir = exe.parent().unwrap().parent().unwrap();
    dir.join("examples")
        .join(format!("metrics{}", std::env::consts::EXE_SUFFIX))
}

/// One GET over loopback: the body.
fn get(addr: &str, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    s.write_all(request.as_bytes()).unwrap();
    let mut response = String::new();
    s.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    assert!(head.starts_with("HTTP/1.1 200"), "{head}");
    body.to_string()
}

/// `name{labels} value` lines, by `name{labels}`.
fn parse(text: &str) -> HashMap<String, f64> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| {
            let (name, value) = l.rsplit_once(' ')?;
            Some((name.to_string(), value.parse().ok()?))
        })
        .collect()
}

#[test]
fn scraped_counters_equal_the_work_done() {
    let (values, tombstones, tampered) = (1234u64, 77u64, 9u64);
    let mut child = Command::new(example())
        .args(["--port", "0", "--values", &values.to_string()])
        .args([
            "--tombstones",
            &tombstones.to_string(),
            "--tampered",
            &tampered.to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{}: {e} (built by cargo test)", example().display()));
    let mut out = BufReader::new(child.stdout.take().unwrap()).lines();
    let first = out.next().unwrap().unwrap();
    let url = first.strip_prefix("listening on http://").unwrap();
    let addr = url.strip_suffix("/metrics").unwrap().to_string();
    assert_eq!(out.next().unwrap().unwrap(), "done");

    let m = parse(&get(&addr, "/metrics"));
    let at = |k: &str| *m.get(k).unwrap_or_else(|| panic!("no {k} in {m:?}")) as u64;
    let deks = values.div_ceil(100);
    // Values: the plain keyset's and the envelope key's, and the in-process
    // KMS's own (it wraps each DEK with a keyset of this crate).
    assert_eq!(
        at("tombstone_crypt_values_encrypted_total"),
        2 * values + deks
    );
    assert_eq!(
        at("tombstone_crypt_values_decrypted_total"),
        2 * values + deks
    );
    assert_eq!(
        at(r#"tombstone_crypt_tombstones_passed_total{direction="serialize"}"#),
        tombstones
    );
    assert_eq!(
        at(r#"tombstone_crypt_tombstones_passed_total{direction="deserialize"}"#),
        tombstones
    );
    assert_eq!(
        at(r#"tombstone_crypt_decrypt_failures_total{kind="authentication"}"#),
        tampered
    );
    assert_eq!(
        at(r#"tombstone_crypt_decrypt_failures_total{kind="truncated"}"#),
        0
    );
    assert_eq!(at("tombstone_crypt_plaintext_passed_total"), 0);
    assert_eq!(at("tombstone_crypt_deks_created_total"), deks);
    assert_eq!(at("tombstone_crypt_deks_unwrapped_total"), deks);
    assert_eq!(at("tombstone_crypt_edek_cache_misses_total"), deks);
    assert_eq!(at("tombstone_crypt_edek_cache_hits_total"), values - deks);
    assert_eq!(
        at(r#"tombstone_crypt_kms_requests_total{operation="encrypt",outcome="ok"}"#),
        deks
    );
    assert_eq!(
        at(r#"tombstone_crypt_kms_requests_total{operation="decrypt",outcome="ok"}"#),
        deks
    );
    assert_eq!(
        at(r#"tombstone_crypt_kms_requests_total{operation="encrypt",outcome="error"}"#),
        0
    );
    assert_eq!(
        at(r#"tombstone_crypt_kms_request_duration_seconds_count{operation="encrypt"}"#),
        deks
    );
    assert_eq!(at("tombstone_crypt_fanout_tombstones_total"), 10);
    assert_eq!(at("tombstone_crypt_record_keys_encrypted_total"), 20);
    // Writer and reader each hold their DEKs (the default cache: 1024).
    assert_eq!(at("tombstone_crypt_edek_cache_entries"), 2 * deks);

    // A second scrape gives the same numbers: nothing counted twice.
    assert_eq!(parse(&get(&addr, "/metrics")), m);
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());
}
