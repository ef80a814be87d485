//! Driving the Google Tink (Python) peer, `tests/interop/tink_peer.py`, in
//! the venv that `scripts/tink-venv.sh` builds.
#![allow(dead_code)]

use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// The venv's python: `TOMBSTONE_TINK_PYTHON`, else `target/venv/bin/python`
/// (a relative path from the repository's root, whichever package's tests
/// run); `None` (the test returns early) only when `TOMBSTONE_SKIP_INTEROP`
/// is set.
pub fn python() -> Option<PathBuf> {
    if std::env::var_os("TOMBSTONE_SKIP_INTEROP").is_some() {
        eprintln!("TOMBSTONE_SKIP_INTEROP is set: Tink interop skipped");
        return None;
    }
    Some(venv_python(
        "run ./scripts/test.sh (or scripts/tink-venv.sh), or set TOMBSTONE_SKIP_INTEROP=1",
    ))
}

/// The test venv's python (`TOMBSTONE_TINK_PYTHON`, read from the
/// repository's root when relative, else `target/venv/bin/python`); panics,
/// saying `hint`, when there is none.
pub fn venv_python(hint: &str) -> PathBuf {
    let path = super::root::repo_root().join(
        std::env::var_os("TOMBSTONE_TINK_PYTHON")
            .map_or_else(|| PathBuf::from("target/venv/bin/python"), PathBuf::from),
    );
    assert!(path.exists(), "no test venv at {}: {hint}", path.display());
    path
}

/// Runs the peer with `args`, `input` on its stdin; its stdout.
pub fn peer(py: &PathBuf, args: &[&str], input: &str) -> String {
    run_script(py, "tests/interop/tink_peer.py", args, input)
}

/// Runs the python script `script` (a path from the crate root) with
/// `args`, `input` on its stdin; its stdout. Panics (the test fails) when
/// it exits with an error, showing its stderr.
pub fn run_script(py: &PathBuf, script: &str, args: &[&str], input: &str) -> String {
    let path = super::root::repo_root().join(script);
    let mut child = Command::new(py)
        .arg(path)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start {script}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{script} {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Lower-case hex.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Bytes from hex.
pub fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}
