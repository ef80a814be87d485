//! A broker of a test's own: Apache Kafka (`scripts/kafka.sh`, which keeps
//! its records across a `restart`) on its own ports and directory, with a
//! SASL_SSL listener if asked.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

pub use super::kafka::free_port;
use super::kafka::fresh_topic;
use super::root::repo_root;

/// A broker of the test's own, on its own ports and directory; stopped
/// when dropped.
pub struct OwnBroker {
    dir: PathBuf,
    port: u16,
    controller: u16,
    advertised: Option<String>,
    sasl_ssl: Option<u16>,
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
        Self::start_with(port, advertised, None)
    }

    /// A broker with a SASL_SSL listener too (TLS under a CA of its own,
    /// SASL PLAIN and SCRAM-SHA-256/512 for the user `tombstone`).
    pub fn start_with_sasl_ssl() -> Self {
        Self::start_with(free_port(), None, Some(free_port()))
    }

    fn start_with(port: u16, advertised: Option<String>, sasl_ssl: Option<u16>) -> Self {
        let dir = std::env::temp_dir().join(fresh_topic("own-broker"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = OwnBroker {
            dir,
            port,
            controller: free_port(),
            advertised,
            sasl_ssl,
            started: false,
        };
        b.script("start");
        b.started = true;
        b
    }

    /// The SASL_SSL listener's address, its CA's PEM file, the user and
    /// its password.
    pub fn sasl_ssl(&self) -> Option<(String, PathBuf, &'static str, String)> {
        let port = self.sasl_ssl?;
        let tls = self.dir.join("tls");
        let password = std::fs::read_to_string(tls.join("password")).unwrap();
        Some((
            format!("127.0.0.1:{port}"),
            tls.join("ca.pem"),
            "tombstone",
            password.trim().to_owned(),
        ))
    }

    /// The broker's process (its JVM), while it runs.
    pub fn pid(&self) -> Option<u32> {
        let pid: u32 = std::fs::read_to_string(self.dir.join("kafka.pid"))
            .ok()?
            .trim()
            .parse()
            .ok()?;
        std::path::Path::new(&format!("/proc/{pid}"))
            .exists()
            .then_some(pid)
    }

    /// Where it listens.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn script(&self, command: &str) {
        let script = repo_root().join("scripts/kafka.sh");
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
        match self.sasl_ssl {
            Some(p) => c.env("TOMBSTONE_APACHE_KAFKA_SASL_SSL_PORT", p.to_string()),
            None => c.env_remove("TOMBSTONE_APACHE_KAFKA_SASL_SSL_PORT"),
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
