//! docs/CLI.md's shredding walkthrough runs as pasted and prints what the
//! text after it says: its shell block is read from the file and each line
//! run with bash (the broker given to the tests in place of
//! `scripts/broker.sh`, a directory of the test's in place of `/tmp`, a
//! fresh topic in place of `profiles`, the example run as built for the
//! tests, the command line the one built here); the outputs are checked
//! against the snippets the text quotes, each of which must still be in the
//! text.

mod common;

use std::process::Command;

use common::kafka::{bootstrap, fresh_topic};
use serde_json::Value;

/// The first ```` ```LANG ```` block after `heading` in `text`.
fn block<'a>(text: &'a str, heading: &str, lang: &str) -> &'a str {
    let from = text
        .find(heading)
        .unwrap_or_else(|| panic!("docs/CLI.md has no {heading:?}"));
    let open = format!("```{lang}\n");
    let start = text[from..].find(&open).expect("the block") + from + open.len();
    let end = text[start..].find("```").expect("the block's end") + start;
    &text[start..end]
}

/// Runs of spaces made one, to compare aligned output with the text.
fn squeeze(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[test]
fn the_shredding_walkthrough_runs_as_pasted() {
    let Some(bootstrap) = bootstrap() else { return };
    let root = common::root::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/CLI.md")).unwrap();
    let heading = "## Shredding from the command line";
    let script = block(&doc, heading, "sh");
    let prose = squeeze(&doc[doc.find(heading).unwrap()..]);
    let dir = std::env::temp_dir().join(format!("walkthrough-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let topic = fresh_topic("walkthrough");
    let binary = env!("CARGO_BIN_EXE_tombstone-crypt");

    let mut outputs = Vec::new();
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let line = line.replace("/tmp/", &format!("{}/", dir.display()));
        let line = line.replace(" profiles ", &format!(" {topic} "));
        let command = if line.starts_with("BOOTSTRAP=$(scripts/broker.sh start") {
            continue; // the tests' broker, as $BOOTSTRAP
        } else if line.starts_with("scripts/broker.sh stop") {
            continue; // not ours to stop
        } else if let Some(rest) =
            line.strip_prefix("cargo run --release --example subject_topic --features kafka -- ")
        {
            // As built for the tests (the workspace's features), in debug.
            format!(
                "cargo run --quiet --manifest-path {}/Cargo.toml -p tombstone-crypt --all-features --example subject_topic -- {rest}",
                root.display()
            )
        } else if let Some(rest) = line.strip_prefix("tombstone-crypt ") {
            format!("{binary} {rest}")
        } else {
            panic!("a line this test does not know how to run: {line}");
        };
        let out = Command::new("bash")
            .arg("-c")
            .arg(&command)
            .env("BOOTSTRAP", &bootstrap)
            .current_dir(&root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{line}: {stderr}");
        outputs.push((line, out.status.code(), stdout, stderr));
    }
    let [example, shred, audit, consume, repair, check] = &outputs[..] else {
        panic!("six commands, not {}: {outputs:?}", outputs.len());
    };
    assert_eq!(example.1, Some(0), "{example:?}");

    // Each snippet the text quotes is in the text, and in what the command
    // printed.
    let says = |snippet: &str, what: &(String, Option<i32>, String, String), code: i32| {
        assert!(
            prose.contains(&squeeze(snippet)),
            "docs/CLI.md no longer says {snippet:?}"
        );
        let printed = squeeze(&format!("{}\n{}", what.2, what.3));
        assert!(
            printed.contains(&squeeze(snippet)),
            "{}: no {snippet:?} in {printed}",
            what.0
        );
        assert_eq!(what.1, Some(code), "{}: {printed}", what.0);
    };
    says("shredded          customer-2 (1 key)", shred, 0);
    says("broken tombstones  1", audit, 1);
    says("shredded values    1", audit, 1);
    says(
        "wrote 1 tombstones and 0 values for 1 broken and 0 split keys",
        repair,
        0,
    );
    says("broken tombstones  0", repair, 0);
    says("3 subjects, 3 DEKs, 1 naming key, 1 subject shredded (1 DEK); 0 subjects with several DEKs", check, 0);

    // consume prints the lines the text shows.
    let shown: Vec<Value> = block(&doc, heading, "text")
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let printed: Vec<Value> = consume
        .2
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(consume.1, Some(0), "{consume:?}");
    assert_eq!(printed, shown, "consume's lines");
    let _ = std::fs::remove_dir_all(&dir);
}
