//! A broker of a test's own: Apache Kafka (`scripts/kafka.sh`, which keeps
//! its records across a `restart`) on its own ports and directory.

use std::path::PathBuf;
use std::process::Command;

use super::fresh_topic;

pub use super::kafka::free_port;

/// A broker of the test's own, on its own ports and directory; stopped
/// when dropped.
pub struct OwnBroker {
    dir: PathBuf,
    port: u16,
    controller: u16,
    advertised: Option<String>,
    started: bool,
}

impl OwnBroker {
    /// A broker on a free port, advertising that port.
    pub fn start() -> Self {
        Self::start_on(free_port(), None)
    }

    /// A broker on `port`, advertising `advertised` (`host:port`; its own
    /// address when `None`).
    pub fn start_on(port: u16, advertised: Option<String>) -> Self {
        let dir = std::env::temp_dir().join(fresh_topic("own-broker"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = OwnBroker {
            dir,
            port,
            controller: free_port(),
            advertised,
            started: false,
        };
        b.script("start");
        b.started = true;
        b
    }

    /// Where it listens.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn script(&self, command: &str) {
        let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../scripts/kafka.sh");
        let mut c = Command::new("bash");
        c.arg(script)
            .arg(command)
            .env("TOMBSTONE_APACHE_KAFKA_DIR", &self.dir)
            .env("TOMBSTONE_APACHE_KAFKA_PORT", self.port.to_string())
            .env(
                "TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT",
                self.controller.to_string(),
            );
        match &self.advertised {
            Some(a) => c.env("TOMBSTONE_APACHE_KAFKA_ADVERTISED", a),
            None => c.env_remove("TOMBSTONE_APACHE_KAFKA_ADVERTISED"),
        };
        let out = c.output().expect("run scripts/kafka.sh");
        assert!(
            out.status.success(),
            "scripts/kafka.sh {command} for a broker of the test's own: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts it again on the same ports and data.
    pub fn up(&mut self) {
        self.script("restart");
        self.started = true;
    }

    /// Stops the broker (TERM, then KILL after 30 s).
    pub fn down(&mut self) {
        if self.started {
            self.script("stop");
            self.started = false;
        }
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
