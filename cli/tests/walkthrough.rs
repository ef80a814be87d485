//! The walkthroughs run as pasted and print what the text after them says:
//! docs/CLI.md's shredding walkthrough, and the README's demos (the state
//! store, Kafka, the command line). Each shell block is read from its file
//! and each line run with bash (the broker given to the tests in place of
//! `scripts/broker.sh`, a directory of the test's in place of `/tmp`, a
//! fresh topic in place of the text's, the examples run as built for the
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

/// What one line printed: the line, its exit code, stdout, stderr.
type Ran = (String, Option<i32>, String, String);

/// Runs a walkthrough's lines (see the module docs), `topic` in place of
/// `their_topic`.
fn run_lines(
    script: &str,
    bootstrap: &str,
    dir: &std::path::Path,
    their_topic: &str,
    topic: &str,
) -> Vec<Ran> {
    let root = common::root::repo_root();
    let binary = env!("CARGO_BIN_EXE_tombstone-crypt");
    let mut outputs = Vec::new();
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let line = line.replace("/tmp/", &format!("{}/", dir.display()));
        let line = line.replace(&format!(" {their_topic} "), &format!(" {topic} "));
        let command = if line.starts_with("BOOTSTRAP=$(scripts/broker.sh start")
            || line.starts_with("scripts/broker.sh stop")
            || line.starts_with("cargo install --locked --path cli")
        {
            continue; // the tests' broker, as $BOOTSTRAP; the command line as built here
        } else if let Some(rest) = line.strip_prefix("cargo run ") {
            // As built for the tests (the workspace's features), in debug.
            let rest = rest
                .replace("--release ", "")
                .replace("--features kafka ", "");
            format!(
                "cargo run --quiet --manifest-path {}/Cargo.toml -p tombstone-crypt --all-features {rest}",
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
            .env("BOOTSTRAP", bootstrap)
            .current_dir(&root)
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{line}: {stderr}");
        outputs.push((line, out.status.code(), stdout, stderr));
    }
    outputs
}

/// Asserts that `prose` quotes `snippet` and that `ran` printed it, and
/// exited with `code`.
fn says(prose: &str, snippet: &str, ran: &Ran, code: i32) {
    assert!(
        prose.contains(&squeeze(snippet)),
        "the text no longer says {snippet:?}"
    );
    let printed = squeeze(&format!("{}\n{}", ran.2, ran.3));
    assert!(
        printed.contains(&squeeze(snippet)),
        "{}: no {snippet:?} in {printed}",
        ran.0
    );
    assert_eq!(ran.1, Some(code), "{}: {printed}", ran.0);
}

#[test]
fn the_readmes_demos_run_as_pasted() {
    let Some(bootstrap) = bootstrap() else { return };
    let root = common::root::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let prose = squeeze(&readme);
    let dir = std::env::temp_dir().join(format!("walkthrough-readme-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // The Quick start (the README's block is the example, checked by
    // scripts/doc-links.py), run.
    let quick = run_lines("cargo run --example quickstart", &bootstrap, &dir, "", "");
    assert!(readme.contains("run --example quickstart"));
    says(
        &prose,
        "round trip, tombstone, binding and rotation",
        &quick[0],
        0,
    );

    // The state store: the main demo, the first set-up command.
    let store = run_lines("cargo run --example state_store", &bootstrap, &dir, "", "");
    assert!(readme.contains("cargo run --example state_store"));
    says(
        &prose,
        "resurrected: naive=12 tombstone-crypt=0",
        &store[0],
        0,
    );

    // Kafka.
    let kafka = run_lines(block(&readme, "**Kafka.**", "sh"), &bootstrap, &dir, "", "");
    let [roundtrip] = &kafka[..] else {
        panic!("one command: {kafka:?}")
    };
    assert_eq!(roundtrip.1, Some(0), "{roundtrip:?}");

    // The command line on the naive topic.
    let topic = fresh_topic("naive-demo");
    let cli = run_lines(
        block(&readme, "## The command line", "sh"),
        &bootstrap,
        &dir,
        "naive-demo",
        &topic,
    );
    let [naive, audit, repair] = &cli[..] else {
        panic!("three commands: {cli:?}")
    };
    assert_eq!(naive.1, Some(0), "{naive:?}");
    says(&prose, "broken tombstones  12", audit, 1);
    says(&prose, "broken tombstones  0", repair, 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_cli_docs_audit_walkthrough_prints_what_it_shows() {
    let Some(bootstrap) = bootstrap() else { return };
    let root = common::root::repo_root();
    let doc = std::fs::read_to_string(root.join("docs/CLI.md")).unwrap();
    let heading = "`tombstone-crypt` finds them and writes the missing tombstones.";
    let dir = std::env::temp_dir().join(format!("walkthrough-audit-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let topic = fresh_topic("naive-demo");
    let ran = run_lines(
        block(&doc, heading, "sh"),
        &bootstrap,
        &dir,
        "naive-demo",
        &topic,
    );
    let [naive, audit] = &ran[..] else {
        panic!("two commands: {ran:?}")
    };
    assert_eq!(naive.1, Some(0), "{naive:?}");
    assert_eq!(audit.1, Some(1), "{audit:?}");
    // The report, line for line, but for the topic's name and the key id
    // (each run makes its keyset).
    let shown = block(&doc, heading, "text").replace("naive-demo", &topic);
    let id = |s: &str| {
        s.lines()
            .find_map(|l| l.split_once(" under key ").map(|(_, id)| id.to_owned()))
            .unwrap_or_default()
    };
    let printed = audit.2.replace(&id(&audit.2), &id(&shown));
    assert_eq!(printed.trim_end(), shown.trim_end(), "audit's report");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_kms_walkthrough_runs_as_pasted() {
    // The KMS servers' environment, as the test command exports it
    // (`source "$(scripts/kms.sh start | tail -n 1)"`).
    if std::env::var_os("VAULT_ADDR").is_none() {
        assert!(
            std::env::var_os("CI").is_none(),
            "VAULT_ADDR is not set: the test command starts the KMS servers"
        );
        return;
    }
    let Some(bootstrap) = bootstrap() else { return };
    let root = common::root::repo_root();
    let guide = std::fs::read_to_string(root.join("src/guide/kms.md")).unwrap();
    let script: String = block(&guide, "does the same against a real OpenBao", "sh")
        .lines()
        .filter(|l| !l.starts_with("source ") && !l.starts_with("scripts/kms.sh stop"))
        .map(|l| format!("{l}\n"))
        .collect();
    let dir = std::env::temp_dir().join(format!("walkthrough-kms-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ran = run_lines(&script, &bootstrap, &dir, "", "");
    let [example] = &ran[..] else {
        panic!("one command: {ran:?}")
    };
    assert_eq!(example.1, Some(0), "{example:?}");
    let _ = std::fs::remove_dir_all(&dir);
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
    let outputs = run_lines(script, &bootstrap, &dir, "profiles", &topic);
    let [example, shred, audit, consume, repair, check] = &outputs[..] else {
        panic!("six commands, not {}: {outputs:?}", outputs.len());
    };
    assert_eq!(example.1, Some(0), "{example:?}");

    says(&prose, "shredded          customer-2 (1 key)", shred, 0);
    says(&prose, "broken tombstones  1", audit, 1);
    says(&prose, "shredded values    1", audit, 1);
    says(
        &prose,
        "wrote 1 tombstones and 0 values for 1 broken and 0 split keys",
        repair,
        0,
    );
    says(&prose, "broken tombstones  0", repair, 0);
    says(&prose, "3 subjects, 3 DEKs, 1 naming key, 1 subject shredded (1 DEK); 0 subjects with several DEKs", check, 0);

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
