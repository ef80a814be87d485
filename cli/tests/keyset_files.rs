//! Keyset files written by the command line survive a crash: the new file
//! is synced, moved into place (renamed over the old one, or hard-linked
//! for `keyset new`), and then the **directory** is synced, so the rename
//! or the link itself is on disk before the command reports success.
//! Otherwise a crash could bring the old keyset back after values were
//! written under the new primary.
//!
//! Proven on the system calls: the binary runs under `strace`, and after
//! the rename or link an `fsync` must hit a file descriptor opened on the
//! keyset's directory. Needs `strace` (Linux).
#![cfg(target_os = "linux")]

use std::collections::HashMap;
use std::path::Path;
use std::process::Command;

use crate::common::dir;

use dir::Dir;

/// What the traced command did to files, in order.
#[derive(Debug, PartialEq)]
enum Event {
    /// `fd` now refers to `path` (as the call named it).
    Open {
        fd: i64,
        path: String,
    },
    Close {
        fd: i64,
    },
    /// A rename or link that succeeded, to `to`.
    Move {
        call: String,
        to: String,
    },
    Sync {
        fd: i64,
    },
}

/// The string arguments of a traced call, in order (strace quotes them;
/// the paths here have no quote or backslash).
fn quoted(args: &str) -> Vec<String> {
    args.split('"')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect()
}

/// Parses `strace -f -o` output: `PID name(args) = result`, with calls
/// split across `<unfinished ...>` / `<... name resumed>` joined per PID.
fn events(log: &str) -> Vec<Event> {
    let mut pending: HashMap<String, String> = HashMap::new();
    let mut out = Vec::new();
    for line in log.lines() {
        let Some((pid, rest)) = line.split_once(' ') else {
            continue;
        };
        let rest = rest.trim_start();
        let call = if let Some(head) = rest.strip_suffix(" <unfinished ...>") {
            pending.insert(pid.to_owned(), head.to_owned());
            continue;
        } else if rest.starts_with("<... ") {
            let Some((_, tail)) = rest.split_once(" resumed>") else {
                continue;
            };
            match pending.remove(pid) {
                Some(head) => format!("{head}{tail}"),
                None => continue,
            }
        } else {
            rest.to_owned()
        };
        let Some((name, args_and_result)) = call.split_once('(') else {
            continue;
        };
        // strace pads before " = result".
        let Some((args, result)) = args_and_result.rsplit_once(" = ") else {
            continue;
        };
        let Some(args) = args.trim_end().strip_suffix(')') else {
            continue;
        };
        let Ok(ret) = result
            .split_whitespace()
            .next()
            .unwrap_or("")
            .parse::<i64>()
        else {
            continue;
        };
        if ret < 0 {
            continue;
        }
        let first_int = || args.split(',').next().and_then(|a| a.trim().parse().ok());
        match name {
            "open" | "openat" | "openat2" => {
                if let Some(path) = quoted(args).into_iter().next() {
                    out.push(Event::Open { fd: ret, path });
                }
            }
            "close" => {
                if let Some(fd) = first_int() {
                    out.push(Event::Close { fd });
                }
            }
            "fsync" | "fdatasync" => {
                if let Some(fd) = first_int() {
                    out.push(Event::Sync { fd });
                }
            }
            "rename" | "renameat" | "renameat2" | "link" | "linkat" => {
                if let Some(to) = quoted(args).pop() {
                    out.push(Event::Move {
                        call: name.to_owned(),
                        to,
                    });
                }
            }
            _ => {}
        }
    }
    out
}

/// Runs the command line under strace in `cwd`; its exit code and the
/// traced events.
fn traced(cwd: &Path, args: &[&str]) -> (i32, Vec<Event>, String) {
    let log = cwd.join("strace.log");
    let run = Command::new("strace")
        .args(["-f", "-qq", "-s", "4096", "-o"])
        .arg(&log)
        // The calls that matter only (no read or write: nothing of the
        // keyset's text reaches the log). `?`: not a system call on every
        // architecture.
        .args([
            "-e",
            "trace=?open,openat,?openat2,close,fsync,fdatasync,\
             ?rename,renameat,?renameat2,?link,linkat",
        ])
        .arg(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .current_dir(cwd)
        .output();
    let out = match run {
        Ok(out) => out,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "strace is not installed: these tests check the keyset files' \
             fsync calls with it. Install it (Debian/Ubuntu: apt-get install -y strace)."
        ),
        Err(e) => panic!("running strace: {e}"),
    };
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| {
        panic!("strace wrote no log ({e}); is ptrace allowed here? stderr: {stderr}")
    });
    std::fs::remove_file(&log).unwrap();
    assert!(
        text.contains("openat("),
        "strace traced nothing; is ptrace allowed here? stderr: {stderr}"
    );
    (out.status.code().unwrap_or(-1), events(&text), stderr)
}

/// Checks that the keyset file was synced before it was moved to
/// `target`, and that after the move an fsync hit a descriptor opened on
/// `dir` (named as `dir_names` says: absolute, or "." for a relative path).
fn assert_durable(events: &[Event], target: &str, dir_names: &[&str]) {
    let moved = events
        .iter()
        .position(|e| matches!(e, Event::Move { to, .. } if to == target))
        .unwrap_or_else(|| panic!("no rename or link to {target}: {events:#?}"));
    // Which path each descriptor refers to, call by call.
    let mut fds: HashMap<i64, &str> = HashMap::new();
    let mut file_synced = false;
    let mut dir_synced = false;
    for (i, e) in events.iter().enumerate() {
        match e {
            Event::Open { fd, path } => {
                fds.insert(*fd, path);
            }
            Event::Close { fd } => {
                fds.remove(fd);
            }
            Event::Sync { fd } => {
                let path = fds.get(fd).copied().unwrap_or("");
                if i < moved && path.contains(".tmp-") {
                    file_synced = true;
                }
                if i > moved && dir_names.contains(&path) {
                    dir_synced = true;
                }
            }
            Event::Move { .. } => {}
        }
    }
    assert!(
        file_synced,
        "the new keyset file was not synced before the {}: {events:#?}",
        match &events[moved] {
            Event::Move { call, .. } => call.as_str(),
            _ => "move",
        }
    );
    assert!(
        dir_synced,
        "no fsync of the directory {dir_names:?} after the {} to {target}: a crash \
         could bring the old keyset back. Traced: {events:#?}",
        match &events[moved] {
            Event::Move { call, .. } => call.as_str(),
            _ => "move",
        }
    );
}

/// `keyset rotate --in FILE` (an absolute path): the new file is renamed
/// over the old, then the directory is synced.
#[test]
fn a_rotated_keyset_file_is_renamed_then_its_directory_synced() {
    let dir = Dir::new("rotate");
    let file = dir.0.join("keys.json");
    let file = file.to_str().unwrap();
    let made = Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(["keyset", "new", "--out", file])
        .output()
        .unwrap();
    assert!(made.status.success(), "{made:?}");
    let (code, events, stderr) = traced(&dir.0, &["keyset", "rotate", "--in", file]);
    assert_eq!(code, 0, "{stderr}");
    assert_durable(&events, file, &[dir.0.to_str().unwrap()]);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Move { call, .. } if call.starts_with("rename"))));
}

/// `keyset new --out FILE` (a relative path, so the directory is "."):
/// the new file is hard-linked into place, then the directory is synced.
#[test]
fn a_new_keyset_file_is_linked_then_its_directory_synced() {
    let dir = Dir::new("new");
    let (code, events, stderr) = traced(&dir.0, &["keyset", "new", "--out", "new.json"]);
    assert_eq!(code, 0, "{stderr}");
    let abs = dir.0.to_str().unwrap();
    assert_durable(&events, "new.json", &[".", "./", abs]);
    assert!(events
        .iter()
        .any(|e| matches!(e, Event::Move { call, .. } if call.starts_with("link"))));
    assert!(dir.0.join("new.json").exists());
}

/// A keyset written to stdout touches no file and syncs nothing.
#[test]
fn a_keyset_on_stdout_syncs_nothing() {
    let dir = Dir::new("stdout");
    let (code, events, stderr) = traced(&dir.0, &["keyset", "new"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        !events
            .iter()
            .any(|e| matches!(e, Event::Move { .. } | Event::Sync { .. })),
        "{events:#?}"
    );
}
