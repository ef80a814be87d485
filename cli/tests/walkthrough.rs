//! The walkthroughs run as pasted and print what the text after them says:
//! docs/CLI.md's shredding walkthrough, and the README's demos (the state
//! store, Kafka, the command line). Each shell block is read from its file
//! and each line run with bash (the broker given to the tests in place of
//! `scripts/broker.sh`, a directory of the test's in place of `/tmp`, a
//! fresh topic in place of the text's, the examples run as built for the
//! tests, the command line the one built here); the outputs are checked
//! against the snippets the text quotes, each of which must still be in the
//! text.

use crate::common;

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

/// What a walkthrough's lines run with beyond the broker: text replaced
/// in each line, in order (the proxy's address, the topic), the Python and
/// the Node modules the tests installed, and the address a background
/// process listens on.
#[derive(Default)]
struct Extra {
    replace: Vec<(String, String)>,
    python: Option<String>,
    node_modules: Option<String>,
    listens: Option<String>,
}

/// The processes a walkthrough started in the background (`... &`),
/// stopped when this is dropped (as `kill %1` would).
struct Background(Vec<std::process::Child>);

impl Drop for Background {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// Runs a walkthrough's lines (see the module docs), `topic` in place of
/// `their_topic`.
fn run_lines(
    script: &str,
    bootstrap: &str,
    dir: &std::path::Path,
    their_topic: &str,
    topic: &str,
) -> Vec<Ran> {
    let (ran, background) = run_lines_with(
        script,
        bootstrap,
        dir,
        their_topic,
        topic,
        &Extra::default(),
    );
    assert!(background.0.is_empty(), "nothing runs in the background");
    ran
}

/// [`run_lines`], with `extra`: a line ending in `&` is started in the
/// background (returned; `kill %1` is left to its drop), `python3` is
/// `extra.python`, `node` finds its modules in `extra.node_modules`.
fn run_lines_with(
    script: &str,
    bootstrap: &str,
    dir: &std::path::Path,
    their_topic: &str,
    topic: &str,
    extra: &Extra,
) -> (Vec<Ran>, Background) {
    let root = common::root::repo_root();
    let binary = env!("CARGO_BIN_EXE_tombstone-crypt");
    let mut outputs = Vec::new();
    let mut background = Background(Vec::new());
    for line in script.lines().filter(|l| !l.trim().is_empty()) {
        let mut line = line.replace("/tmp/", &format!("{}/", dir.display()));
        for (from, to) in &extra.replace {
            line = line.replace(from, to);
        }
        let line = line.replace(&format!(" {their_topic} "), &format!(" {topic} "));
        let (line_cmd, in_background) = match line.strip_suffix(" &") {
            Some(cmd) => (cmd, true),
            None => (line.as_str(), false),
        };
        let command = if line.starts_with("BOOTSTRAP=$(scripts/broker.sh start")
            || line.starts_with("scripts/broker.sh stop")
            || line.starts_with("cargo install --locked --path cli")
            || line.starts_with("kill %1")
        {
            continue; // the tests' broker, as $BOOTSTRAP; the command line as built here
        } else if line.starts_with("printf ") {
            line.clone()
        } else if let Some(rest) = line.strip_prefix("python3 ") {
            format!("{} {rest}", extra.python.as_deref().expect("a Python"))
        } else if line.starts_with("node ") {
            line.clone()
        } else if let Some(rest) = line_cmd
            .strip_prefix("tombstone-crypt ")
            .filter(|_| in_background)
        {
            let log =
                std::fs::File::create(dir.join(format!("background-{}.log", background.0.len())))
                    .unwrap();
            let child = Command::new(binary)
                .args(rest.split_whitespace())
                .stdout(log.try_clone().unwrap())
                .stderr(log)
                .current_dir(&root)
                .spawn()
                .unwrap();
            background.0.push(child);
            if let Some(addr) = &extra.listens {
                let up = (0..100).any(|_| {
                    std::thread::sleep(std::time::Duration::from_millis(100));
                    std::net::TcpStream::connect(addr).is_ok()
                });
                assert!(up, "{line}: nothing listens on {addr}");
            }
            continue;
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
        let mut bash = Command::new("bash");
        bash.arg("-c")
            .arg(&command)
            .env("BOOTSTRAP", bootstrap)
            .current_dir(&root);
        if let Some(modules) = &extra.node_modules {
            bash.env("NODE_PATH", modules);
        }
        let out = bash.output().unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!stderr.contains("panicked"), "{line}: {stderr}");
        outputs.push((line, out.status.code(), stdout, stderr));
    }
    (outputs, background)
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

/// A port for the proxy's listener whose broker listener (node 111 of the
/// tests' broker: port + 112) is free too.
fn free_proxy_port() -> u16 {
    loop {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        if port < 65000 && std::net::TcpListener::bind(("127.0.0.1", port + 112)).is_ok() {
            return port;
        }
    }
}

#[test]
fn the_readmes_proxy_demo_runs_as_pasted() {
    let Some(bootstrap) = bootstrap() else { return };
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let (Some(python), Some(node_modules)) = (
        var("TOMBSTONE_TINK_PYTHON"),
        var("TOMBSTONE_PROXY_NODE_MODULES"),
    ) else {
        eprintln!("TOMBSTONE_TINK_PYTHON or TOMBSTONE_PROXY_NODE_MODULES is unset: the README's proxy demo skipped (scripts/test.sh installs them)");
        return;
    };
    let root = common::root::repo_root();
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let heading = "**Any client, through the proxy.**";
    let prose = squeeze(&readme[readme.find(heading).expect("the proxy demo")..]);
    let dir = std::env::temp_dir().join(format!("walkthrough-proxy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // A fresh topic (the applications take it after the address) and a
    // free port in place of the text's.
    let topic = fresh_topic("orders");
    let listen = format!("127.0.0.1:{}", free_proxy_port());
    let apps = |app: &str| {
        (
            format!("{app} 127.0.0.1:29192"),
            format!("{app} {listen} {topic}"),
        )
    };
    let extra = Extra {
        replace: vec![
            apps("orders.py"),
            apps("orders.js"),
            ("127.0.0.1:29192".into(), listen.clone()),
            (
                "\"topic\":\"orders\"".into(),
                format!("\"topic\":\"{topic}\""),
            ),
        ],
        python: Some(python),
        node_modules: Some(node_modules),
        listens: Some(listen.clone()),
    };
    let (ran, proxy) = run_lines_with(
        block(&readme, heading, "sh"),
        &bootstrap,
        &dir,
        "orders",
        &topic,
        &extra,
    );
    let [values, keys, config, py, js, consume, audit] = &ran[..] else {
        panic!("seven commands and the proxy: {ran:?}")
    };
    for r in [values, keys, config] {
        assert_eq!(r.1, Some(0), "{r:?}");
    }
    assert_eq!(proxy.0.len(), 1, "the proxy, in the background");

    // The applications, through the proxy.
    says(
        &prose,
        r#"python: order-1 = {"item": "book", "qty": 1}"#,
        py,
        0,
    );
    says(&prose, "python: order-2 deleted", py, 0);
    says(&prose, "node: order-3 deleted", js, 0);
    says(&prose, "node: wrote order-5", js, 0);

    // The broker itself, read by the command line: each key decrypts, the
    // last record of each deleted order is a tombstone.
    assert_eq!(consume.1, Some(0), "{consume:?}");
    assert!(prose.contains(r#""value":null"#));
    let mut last = std::collections::BTreeMap::new();
    for line in consume.2.lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        assert!(v.get("error").is_none(), "{line}");
        last.insert(
            v["key"].as_str().expect(line).to_owned(),
            v["value"].clone(),
        );
    }
    let order = |item: &str, qty: u32| serde_json::json!({ "item": item, "qty": qty });
    let expected = std::collections::BTreeMap::from([
        ("order-1".to_owned(), order("book", 1)),
        ("order-2".to_owned(), Value::Null),
        ("order-3".to_owned(), Value::Null),
        ("order-4".to_owned(), order("pen", 10)),
        ("order-5".to_owned(), order("chair", 4)),
    ]);
    assert_eq!(last, expected, "consume's last record of each order");
    assert_eq!(consume.2.lines().count(), 7, "{}", consume.2);

    // Every value a ciphertext, one wire form per order id.
    says(&prose, "plaintext values 0", audit, 0);
    says(&prose, "keys 5", audit, 0);
    says(&prose, "split keys 0", audit, 0);
    let report = squeeze(&audit.2);
    for line in [
        "records 7",
        "tombstones 2",
        "broken tombstones 0",
        "undecryptable none",
    ] {
        assert!(report.contains(line), "no {line:?} in {report}");
    }
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
}
