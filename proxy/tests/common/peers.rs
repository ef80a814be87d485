//! Client programs in other languages through a proxy in process, on
//! Apache Kafka: the Java client (`tests/java`, run by `java_clients.rs`)
//! and the Go one (`tests/go`, run by `go_clients.rs`) take the same
//! arguments, `PHASE PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET [CASES]`,
//! print one line per case and `{"ok": true, ...}`, and exit 1 with
//! `FAILED: ` and the first difference on stderr. This module runs their
//! phases: the clients' cases, a compaction (the kit's `wait_compacted`
//! between writing and reading), a key keyset's rotation with transactions.

use std::io::Read;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tombstone_crypt::kafka::encode_write;
use tombstone_crypt::record_key::KeyBinding;
use tombstone_crypt::{Bytes, DeterministicSerializer, EncryptingSerializer, KeyTemplate};
use tombstone_crypt_proxy::{Hooks, Policies};

use super::{apache_kafka, compacting, fresh_topic, produce_ok, start_proxy, Keys, RunningProxy};

/// The longest a program's phase may take before it is killed.
const PHASE_TIMEOUT: Duration = Duration::from_secs(300);

/// A client program: the command that runs it (its arguments follow).
pub struct Peer {
    /// What it is, for messages.
    pub name: &'static str,
    /// The program and its own leading arguments.
    pub command: Vec<String>,
}

/// How a phase ended.
#[derive(Debug)]
pub struct Outcome {
    /// The exit code (-1: killed or by a signal).
    pub code: i32,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Outcome {
    /// Panics unless the phase passed.
    pub fn assert_ok(&self) {
        assert!(
            self.code == 0 && self.stdout.contains("\"ok\": true"),
            "exit {}\nstdout: {}\nstderr: {}",
            self.code,
            self.stdout,
            self.stderr
        );
    }

    /// Panics unless the phase failed its check with a message holding
    /// one of `needles`.
    pub fn assert_failed_with(&self, needles: &[&str]) {
        assert_eq!(
            self.code, 1,
            "the check passed or crashed\nstdout: {}\nstderr: {}",
            self.stdout, self.stderr
        );
        let failed = self
            .stderr
            .lines()
            .find(|l| l.starts_with("FAILED: "))
            .unwrap_or_else(|| panic!("no FAILED line\nstderr: {}", self.stderr));
        assert!(
            needles.iter().any(|n| failed.contains(n)),
            "failed for another reason than {needles:?}: {failed}"
        );
    }
}

/// The keyset files of a run, removed on drop.
struct Files {
    dir: PathBuf,
}

impl Files {
    fn new(tag: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("px-{tag}-{}", fresh_topic("k")));
        std::fs::create_dir_all(&dir).unwrap();
        Files { dir }
    }

    fn write(&self, name: &str, keyset: &tombstone_crypt::Keyset) -> String {
        let path = self.dir.join(name);
        std::fs::write(&path, keyset.to_tink_json()).unwrap();
        path.to_str().unwrap().to_owned()
    }
}

impl Drop for Files {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl Peer {
    /// The program named by the environment variable `var` (a path, or a
    /// classpath), made into a command by `command`; `None` with a printed
    /// line when it is unset, or when there is no broker: the test is
    /// skipped.
    pub fn from_env(
        name: &'static str,
        var: &str,
        command: impl FnOnce(String) -> Vec<String>,
    ) -> Option<Peer> {
        match std::env::var(var) {
            Ok(v) if !v.is_empty() => {
                apache_kafka()?;
                Some(Peer {
                    name,
                    command: command(v),
                })
            }
            _ => {
                eprintln!(
                    "{var} is unset: the {name} client test skipped (scripts/test.sh builds it and \
                     exports {var})"
                );
                None
            }
        }
    }

    /// Runs one phase; kills it after [`PHASE_TIMEOUT`].
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        phase: &str,
        proxy: &str,
        broker: &str,
        prefix: &str,
        values: &str,
        keys: &str,
        cases: Option<&str>,
    ) -> Outcome {
        let mut cmd = Command::new(&self.command[0]);
        cmd.args(&self.command[1..])
            .args([phase, proxy, broker, prefix, values, keys])
            .args(cases)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("{}: {:?}: {e}", self.name, self.command));
        let drain = |mut r: Box<dyn Read + Send>| {
            std::thread::spawn(move || {
                let mut s = Vec::new();
                let _ = r.read_to_end(&mut s);
                String::from_utf8_lossy(&s).into_owned()
            })
        };
        let out = drain(Box::new(child.stdout.take().unwrap()));
        let err = drain(Box::new(child.stderr.take().unwrap()));
        let deadline = Instant::now() + PHASE_TIMEOUT;
        let status = loop {
            if let Some(s) = child.try_wait().unwrap() {
                break Some(s);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                break None;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let mut stderr = err.join().unwrap();
        if status.is_none() {
            stderr.push_str(&format!("\n(killed after {PHASE_TIMEOUT:?})"));
        }
        let o = Outcome {
            code: status.and_then(|s| s.code()).unwrap_or(-1),
            stdout: out.join().unwrap(),
            stderr,
        };
        eprintln!(
            "{} {phase}: exit {}\n{}{}",
            self.name, o.code, o.stdout, o.stderr
        );
        o
    }

    /// The `clients` phase (`cases`: all when `None`) through a proxy with
    /// `hooks`, on topics of a fresh prefix under values and record keys.
    pub fn clients(&self, hooks: Hooks, cases: Option<&str>) -> Outcome {
        let broker = apache_kafka().unwrap();
        let prefix = format!("{}-", fresh_topic(&format!("{}-clients", self.name)));
        let keys = Keys::new(true);
        let files = Files::new(self.name);
        let values = files.write("values.json", &keys.values);
        let key_file = files.write("keys.json", keys.keys.as_ref().unwrap());
        let proxy = start_proxy(
            &broker,
            Policies::new().with_prefix(&prefix, keys.policy()),
            hooks,
        );
        self.run(
            "clients",
            &proxy.addr,
            &broker,
            &prefix,
            &values,
            &key_file,
            cases,
        )
    }

    /// Several versions of five keys written to a compacted topic through
    /// the proxy, the topic compacted by Apache Kafka's log cleaner, then
    /// read: one record per key. Panics on a failed phase.
    pub fn compaction(&self) {
        let broker = apache_kafka().unwrap();
        let prefix = format!("{}-", fresh_topic(&format!("{}-compaction", self.name)));
        let keys = Keys::new(true);
        let files = Files::new(self.name);
        let values = files.write("values.json", &keys.values);
        let key_file = files.write("keys.json", keys.keys.as_ref().unwrap());
        let proxy = start_proxy(
            &broker,
            Policies::new().with_prefix(&prefix, keys.policy()),
            Hooks::default(),
        );
        let run = |phase| {
            self.run(
                phase,
                &proxy.addr,
                &broker,
                &prefix,
                &values,
                &key_file,
                None,
            )
        };
        run("compaction-write").assert_ok();
        let c = compacting::wait_compacted(
            &broker,
            &format!("{prefix}compaction"),
            Duration::from_secs(60),
        );
        assert!(
            (c.after as i64) < c.offsets,
            "nothing was compacted away: {} records of {} left",
            c.after,
            c.offsets
        );
        run("compaction-read").assert_ok();
    }

    /// A key keyset's rotation: k1 and k2 written under one key; the key
    /// keyset rotated (two enabled keys) and a second proxy, with `hooks`,
    /// started on it; a transaction that aborts and one that commits; with
    /// `compact`, the topic compacted and read again. With
    /// `plant_outside`, the older forms' tombstones are written to the
    /// broker beside the proxy before the transactions, outside them (what
    /// a proxy that wrote them with a Produce of its own would leave). The
    /// first phase that fails, or the last.
    pub fn rotation(&self, hooks: Hooks, plant_outside: bool, compact: bool) -> Outcome {
        let broker = apache_kafka().unwrap();
        let prefix = format!("{}-", fresh_topic(&format!("{}-rotation", self.name)));
        let topic = format!("{prefix}rotation");
        let keys = Keys::new(true);
        let files = Files::new(self.name);
        let values = files.write("values.json", &keys.values);
        let before_keys = files.write("keys.json", keys.keys.as_ref().unwrap());
        {
            let proxy = start_proxy(
                &broker,
                Policies::new().with_prefix(&prefix, keys.policy()),
                Hooks::default(),
            );
            let o = self.run(
                "rotation-before",
                &proxy.addr,
                &broker,
                &prefix,
                &values,
                &before_keys,
                None,
            );
            if o.code != 0 {
                return o;
            }
        }
        let old = keys.keys.clone().unwrap();
        let mut rotated = Keys {
            values: keys.values.clone(),
            keys: keys.keys.clone(),
        };
        rotated
            .keys
            .as_mut()
            .unwrap()
            .rotate_with(KeyTemplate::aes256_siv())
            .unwrap();
        let after_keys = files.write("keys-rotated.json", rotated.keys.as_ref().unwrap());
        if plant_outside {
            let ks = DeterministicSerializer::new(Bytes, old);
            let vs = EncryptingSerializer::new(Bytes, keys.values.clone());
            let mut tombstones = Vec::new();
            for k in [&b"k1"[..], &b"k2"[..]] {
                for r in encode_write(&topic, 1, KeyBinding::Plaintext, &ks, &vs, k, None).unwrap()
                {
                    tombstones.push((Some(r.key), r.payload));
                }
            }
            produce_ok(&broker, &topic, 0, &tombstones, "none");
        }
        let proxy = start_proxy(
            &broker,
            Policies::new().with_prefix(&prefix, rotated.policy()),
            hooks,
        );
        let run = |phase| {
            self.run(
                phase,
                &proxy.addr,
                &broker,
                &prefix,
                &values,
                &after_keys,
                None,
            )
        };
        let o = run("rotation-after");
        if o.code != 0 || !compact {
            return o;
        }
        compacting::wait_compacted(&broker, &topic, Duration::from_secs(60));
        run("rotation-compacted")
    }
}

/// How a run of a script ended: its exit code, stdout and stderr.
pub type Exit = (i32, String, String);

/// A proxy with `hooks` to `broker` on a fresh prefix, under fresh
/// keysets written to files (removed on drop): what the Python and Node
/// scripts run against (`SCRIPT PROXY BROKER PREFIX VALUE_KEYSET
/// KEY_KEYSET LAST`).
pub struct ScriptProxy {
    /// The broker.
    pub broker: String,
    /// The prefix of the topics the policy covers.
    pub prefix: String,
    /// The keysets.
    pub keys: Keys,
    dir: PathBuf,
    /// The proxy.
    pub proxy: RunningProxy,
}

impl ScriptProxy {
    /// A proxy whose prefix and keyset directory are named after `tag`.
    pub fn new(broker: String, hooks: Hooks, tag: &str) -> Self {
        let prefix = format!("{}-", fresh_topic(tag));
        let keys = Keys::new(true);
        let dir = std::env::temp_dir().join(format!("px-{tag}-{}", fresh_topic("k")));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("values.json"), keys.values.to_tink_json()).unwrap();
        std::fs::write(
            dir.join("keys.json"),
            keys.keys.as_ref().unwrap().to_tink_json(),
        )
        .unwrap();
        let policies = Policies::new().with_prefix(&prefix, keys.policy());
        let proxy = start_proxy(&broker, policies, hooks);
        ScriptProxy {
            broker,
            prefix,
            keys,
            dir,
            proxy,
        }
    }

    /// Runs `program` (the interpreter and its script) with the proxy's
    /// arguments and `last` (codecs, or a phase).
    pub fn run(&self, mut program: Command, last: &str) -> Exit {
        let out = program
            .args([&self.proxy.addr, &self.broker, &self.prefix])
            .arg(self.dir.join("values.json"))
            .arg(self.dir.join("keys.json"))
            .arg(last)
            .output()
            .unwrap();
        (
            out.status.code().unwrap_or(-1),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

impl Drop for ScriptProxy {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
