//! Every command's `--help` against what the command accepts: each command
//! and subcommand's help is read (clap's own checks of the command tree run
//! on each, in a debug build); every option it lists is accepted by that
//! command's parser; every option any help names in its text is one some
//! command accepts (no stale names); the global options are under their
//! own heading; usage lines name the alternatives; and the names of before
//! (hidden aliases, kept for one release) still parse and still work.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// Runs the command line with `args`, stdin empty, in `dir`.
fn run_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_tombstone-crypt"))
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::null())
        .output()
        .expect("run tombstone-crypt")
}

use crate::common::dir;

use dir::Dir;

/// A command's help: its options by heading, and its subcommands.
#[derive(Debug, Default)]
struct Help {
    /// The full text.
    text: String,
    /// (heading, option names on the line) for each option line.
    options: Vec<(String, Vec<String>)>,
    /// The subcommands listed (without `help`).
    commands: Vec<String>,
    /// The usage line(s).
    usage: String,
}

/// Reads `tombstone-crypt PATH... --help`.
fn help(dir: &Path, path: &[&str]) -> Help {
    let mut args = path.to_vec();
    args.push("--help");
    let out = run_in(dir, &args);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.stderr.is_empty(), "{args:?} wrote to stderr");
    let text = String::from_utf8(out.stdout).unwrap();
    let mut h = Help {
        text: text.clone(),
        ..Help::default()
    };
    let mut heading = String::new();
    let mut in_usage = false;
    for line in text.lines() {
        let indent = line.len() - line.trim_start().len();
        if let Some(rest) = line.strip_prefix("Usage: ") {
            h.usage.push_str(rest);
            in_usage = true;
            continue;
        }
        if in_usage && indent > 0 && !line.trim().is_empty() {
            h.usage.push('\n');
            h.usage.push_str(line.trim());
            continue;
        }
        in_usage = false;
        if indent == 0 && line.ends_with(':') {
            heading = line.trim_end_matches(':').to_owned();
            continue;
        }
        let trimmed = line.trim_start();
        if heading == "Commands" && indent == 2 {
            let name = trimmed.split_whitespace().next().unwrap().to_owned();
            if name != "help" {
                h.commands.push(name);
            }
        } else if indent <= 6 && trimmed.starts_with('-') {
            // `-q, --quiet`, `--keyset <FILE>`, `-X <KEY=VALUE>`,
            // `-v, --verbose...`.
            let names = trimmed
                .split_whitespace()
                .take_while(|w| w.starts_with('-'))
                .map(|w| w.trim_end_matches(',').trim_end_matches("...").to_owned())
                .collect();
            h.options.push((heading.clone(), names));
        }
    }
    h
}

/// Every `--name` a text mentions.
fn mentioned(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let b = text.as_bytes();
    let mut i = 0;
    while i + 2 < b.len() {
        let starts = b[i] == b'-'
            && b[i + 1] == b'-'
            && (i == 0 || !b[i - 1].is_ascii_alphanumeric() && b[i - 1] != b'-');
        if starts && b[i + 2].is_ascii_lowercase() {
            let end = (i + 2..b.len())
                .find(|&j| !(b[j].is_ascii_lowercase() || b[j].is_ascii_digit() || b[j] == b'-'))
                .unwrap_or(b.len());
            out.push(text[i..end].trim_end_matches('-').to_owned());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Every command path, the root's first: `[]`, `["keyset"]`, `["keyset",
/// "new"]`, ...
fn all_helps(dir: &Path) -> Vec<(Vec<String>, Help)> {
    let mut todo = vec![Vec::<String>::new()];
    let mut done = Vec::new();
    while let Some(path) = todo.pop() {
        let args: Vec<&str> = path.iter().map(String::as_str).collect();
        let h = help(dir, &args);
        for c in &h.commands {
            let mut p = path.clone();
            p.push(c.clone());
            todo.push(p);
        }
        done.push((path, h));
    }
    done.sort_by(|a, b| a.0.cmp(&b.0));
    done
}

/// The names the commands had before, kept (hidden) for one release.
const OLD_NAMES: [&str; 9] = [
    "--in",
    "--out",
    "--subject-kek",
    "--decrypt-with",
    "--encrypt-with",
    "--kek-uri",
    "--check",
    "--rewrap",
    "--create-key-store",
];

/// Whether clap refused `args` for an argument it does not know.
fn unknown_argument(out: &Output) -> bool {
    let err = String::from_utf8_lossy(&out.stderr);
    err.contains("unexpected argument") || err.contains("unrecognized subcommand")
}

#[test]
fn every_help_lists_what_its_command_accepts() {
    let dir = Dir::new("accepts");
    let helps = all_helps(&dir.0);
    let names: Vec<String> = helps.iter().map(|(p, _)| p.join(" ")).collect();
    for want in [
        "",
        "keyset",
        "keyset new",
        "keyset rotate",
        "keyset list",
        "keyset enable",
        "keyset disable",
        "keyset destroy",
        "keyset promote",
        "inspect",
        "audit",
        "repair",
        "reencrypt",
        "consume",
        "shred",
        "shred check",
        "shred rewrap",
        "shred create-key-store",
    ] {
        assert!(
            names.contains(&want.to_owned()),
            "no help for {want:?}: {names:?}"
        );
    }
    let mut known: Vec<String> = vec!["--help".into(), "--version".into()];
    for (_, h) in &helps {
        for (_, opts) in &h.options {
            known.extend(opts.iter().cloned());
        }
    }
    for want in [
        "--subject-keyset",
        "--keyset-kms-uri",
        "--client-config",
        "-X",
        "-q",
    ] {
        assert!(
            known.contains(&want.to_owned()),
            "{want} in no help: {known:?}"
        );
    }
    // The reader of mentions finds them (and not `-X` or `--`).
    assert_eq!(
        mentioned("with `--keyset`, --out-keyset and -X; `--aad-name`."),
        ["--keyset", "--out-keyset", "--aad-name"]
    );
    for (path, h) in &helps {
        let path: Vec<&str> = path.iter().map(String::as_str).collect();
        assert!(h.options.len() > 3, "{path:?}: {:?}", h.options);
        // Every option listed parses: clap may want its value or other
        // arguments, but never calls it unknown.
        for (_, opts) in &h.options {
            for opt in opts {
                let mut args = path.clone();
                args.push(opt);
                let out = run_in(&dir.0, &args);
                assert!(
                    !unknown_argument(&out),
                    "{args:?} is listed but refused: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                assert_ne!(out.status.code(), Some(101), "{args:?} panicked");
            }
        }
        // Every option the text names is one some command takes, and no
        // help names an old one.
        for m in mentioned(&h.text) {
            assert!(
                known.contains(&m),
                "`{}` --help names {m}, which no command takes",
                path.join(" ")
            );
            assert!(
                !OLD_NAMES.contains(&m.as_str()),
                "`{}` --help names the old {m}",
                path.join(" ")
            );
        }
        // The global options are under their heading, and only there.
        if !path.is_empty() {
            for g in ["--json", "--quiet", "--verbose"] {
                let at: Vec<&String> = h
                    .options
                    .iter()
                    .filter(|(_, o)| o.iter().any(|n| n == g))
                    .map(|(heading, _)| heading)
                    .collect();
                assert_eq!(at, ["Global options"], "`{}` --help: {g}", path.join(" "));
            }
        }
        assert!(
            !h.text.contains("AES-256-GCM") && !h.text.contains("aes256-gcm"),
            "`{}` --help spells a key type otherwise",
            path.join(" ")
        );
    }
}

#[test]
fn usage_lines_name_what_is_required_and_the_alternatives() {
    let dir = Dir::new("usage");
    let usage = |path: &[&str]| help(&dir.0, path).usage;
    let values3 = "<--keyset <FILE>|--subject-keyset <FILE>|--schema-registry <URL>>";
    let values2 = "<--keyset <FILE>|--subject-keyset <FILE>>";
    let store = "<--subject-key-store <FILE>|--subject-key-topic <TOPIC>>";
    for (path, want) in [
        (&["audit"][..], values3),
        (&["consume"][..], values3),
        (&["repair"][..], values2),
        (&["reencrypt"][..], values2),
        (&["shred"][..], "--subject-keyset <FILE>"),
        (&["shred"][..], store),
        (&["shred"][..], "<--subject <SUBJECT>|--subjects <FILE>>"),
        (&["shred"][..], "tombstone-crypt shred <COMMAND>"),
        (&["shred", "check"][..], store),
        (&["keyset", "list"][..], "--keyset <FILE>"),
        (&["keyset", "destroy"][..], "--key-id <KEY_ID>"),
    ] {
        let u = usage(path);
        assert!(u.contains(want), "{path:?}: {u}");
        assert!(
            u.contains("--bootstrap <SERVERS>")
                || !["audit", "consume", "repair", "reencrypt"].contains(&path[0]),
            "{path:?}: {u}"
        );
    }
    // What the usage line requires, the parser requires.
    let out = run_in(
        &dir.0,
        &["audit", "--bootstrap", "127.0.0.1:1", "--topic", "t"],
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains(values3));
    let out = run_in(&dir.0, &["shred"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--subject-keyset <FILE>"));
}

#[test]
fn the_old_names_still_parse_and_work() {
    let dir = Dir::new("aliases");
    let (old, new) = (dir.file("old.json"), dir.file("new.json"));
    // keyset new --out, --template in its other spellings.
    for (i, t) in ["aes256-gcm", "AES256_GCM", "AES-256-GCM", "aes-gcm"]
        .iter()
        .enumerate()
    {
        let path = dir.file(&format!("t{i}.json"));
        let out = run_in(&dir.0, &["keyset", "new", "--template", t, "--out", &path]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{t}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let out = run_in(&dir.0, &["--json", "keyset", "list", "--in", &path]);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(list["keys"][0]["type"], "aes-gcm", "{t}");
    }
    let out = run_in(
        &dir.0,
        &["keyset", "new", "--template", "aes256-siv", "--out", &old],
    );
    assert_eq!(out.status.code(), Some(0));
    let out = run_in(
        &dir.0,
        &["--json", "keyset", "rotate", "--in", &old, "--out", &new],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let list: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(list["keys"].as_array().unwrap().len(), 2);
    assert_eq!(list["keys"][0]["type"], "aes-siv");
    // The same with the new names.
    let out = run_in(&dir.0, &["--json", "keyset", "list", "--keyset", &new]);
    assert_eq!(out.status.code(), Some(0));
    // --kek-uri, --decrypt-with, --encrypt-with reach the code (a URI no
    // KMS client knows is refused there, not by the parser).
    for args in [
        &[
            "keyset",
            "new",
            "--template",
            "kms-envelope",
            "--kek-uri",
            "nope://k",
        ][..],
        &["keyset", "list", "--in", &new, "--decrypt-with", "nope://k"][..],
        &[
            "keyset",
            "rotate",
            "--in",
            &new,
            "--out",
            &dir.file("x.json"),
            "--encrypt-with",
            "nope://k",
        ][..],
    ] {
        let out = run_in(&dir.0, args);
        assert!(
            !unknown_argument(&out),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // shred: --subject-kek, and the modes as flags or subcommands, on a
    // redb key store.
    let kek = dir.file("kek.json");
    let store = dir.file("keys.redb");
    assert_eq!(
        run_in(&dir.0, &["keyset", "new", "--out-keyset", &kek])
            .status
            .code(),
        Some(0)
    );
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "--create-key-store",
            "--subject-kek",
            &kek,
            "--subject-key-store",
            &store,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "create-key-store",
            "--subject-keyset",
            &kek,
            "--subject-key-store",
            &store,
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(2),
        "a second store over the first is refused"
    );
    let check_exit = |args: &[&str], code: i32| {
        let out = run_in(&dir.0, args);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let check = |args: &[&str]| check_exit(args, 0);
    // Subjects the store never had a key for: exit 1, each said.
    let shred = check_exit(
        &[
            "--json",
            "shred",
            "--subject-kek",
            &kek,
            "--subject-key-store",
            &store,
            "--subject",
            "nobody",
            "--subject",
            "nobody-else",
        ],
        1,
    );
    assert_eq!(shred["no_key"], 2);
    let a = check(&[
        "--json",
        "shred",
        "--check",
        "--subject-kek",
        &kek,
        "--subject-key-store",
        &store,
    ]);
    let b = check(&[
        "--json",
        "shred",
        "check",
        "--subject-keyset",
        &kek,
        "--subject-key-store",
        &store,
    ]);
    assert_eq!(a, b);
    assert_eq!(a["naming_keys"], 1);
    let a = check(&[
        "--json",
        "shred",
        "--rewrap",
        "--subject-kek",
        &kek,
        "--subject-key-store",
        &store,
    ]);
    let b = check(&[
        "--json",
        "shred",
        "rewrap",
        "--subject-keyset",
        &kek,
        "--subject-key-store",
        &store,
    ]);
    assert_eq!((&a["rewrapped"], &b["rewrapped"]), (&1.into(), &1.into()));
    // A mode and subjects together are refused, in either spelling.
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "--check",
            "--subject-kek",
            &kek,
            "--subject-key-store",
            &store,
            "--subject",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "check",
            "--subject-keyset",
            &kek,
            "--subject-key-store",
            &store,
            "--subject",
            "x",
        ],
    );
    assert_eq!(out.status.code(), Some(2));
    // Text: one subject, one naming key.
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "--subject-keyset",
            &kek,
            "--subject-key-store",
            &store,
            "--subject",
            "nobody",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("1 subject: 0 shredded"), "{text}");
    let out = run_in(
        &dir.0,
        &[
            "shred",
            "check",
            "--subject-keyset",
            &kek,
            "--subject-key-store",
            &store,
        ],
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains(", 1 naming key,"));
}
