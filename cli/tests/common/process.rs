//! Running the command line as a process in tests, and the scratch
//! directories and keyset files its tests use (shared by `cli.rs` and
//! `fields.rs`).
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Command, Output};

use serde_json::Value;
use tombstone_crypt::Keyset;

/// The partition locks of the command lines the tests run (not the
/// user's own directory), unless the environment names one.
pub fn lock_dir() -> PathBuf {
    std::env::var_os("TOMBSTONE_CRYPT_LOCK_DIR")
        .map_or_else(|| std::env::temp_dir().join("tc-cli-locks"), PathBuf::from)
}

pub fn cli(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .env("TOMBSTONE_CRYPT_LOCK_DIR", lock_dir())
        .output()
        .expect("run tombstone-crypt");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("panicked") && !stderr.contains("RUST_BACKTRACE"),
        "{args:?} panicked: {stderr}"
    );
    out
}

pub fn code(out: &Output) -> i32 {
    out.status.code().expect("exited, not killed")
}

pub fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "not JSON ({e}): {}\nstderr: {}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        )
    })
}

pub use super::dir::Dir;

/// `keyset new --out DIR/NAME` (an AES-256-GCM keyset): its path and keys.
pub fn new_keyset(dir: &Dir, name: &str) -> (String, Keyset) {
    let path = dir.file(name);
    let out = cli(&["keyset", "new", "--out", &path]);
    assert_eq!(code(&out), 0, "{}", String::from_utf8_lossy(&out.stderr));
    let keyset = load(&path);
    (path, keyset)
}

pub fn load(path: &str) -> Keyset {
    Keyset::from_tink_json(&std::fs::read_to_string(path).unwrap()).unwrap()
}
