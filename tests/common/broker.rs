//! A private broker (Apache Kafka, a broker of the test's own:
//! [`super::own_broker`]) for tests that pause or kill it without
//! disturbing the shared one.
#![allow(dead_code)]

use std::process::Command;

use super::own_broker::OwnBroker;

/// A broker process of the test's own.
pub struct PrivateBroker {
    own: OwnBroker,
    /// `127.0.0.1:PORT`.
    pub bootstrap: String,
}

impl PrivateBroker {
    /// Starts one and waits until it answers Metadata.
    pub fn start() -> PrivateBroker {
        let own = OwnBroker::start();
        let bootstrap = own.addr();
        PrivateBroker { own, bootstrap }
    }

    /// Makes each of `compacted` (`cleanup.policy=compact`, one partition)
    /// and writes one record to a topic of its own with an idempotent
    /// producer and a long timeout: a broker that has just started can take
    /// seconds over its first topics and producer ids on a loaded machine,
    /// longer than the short timeouts of a test that pauses or kills it.
    pub fn warm_up(&self, compacted: &[&str]) {
        for topic in compacted {
            super::compacting::create_compacted_topic(&self.bootstrap, topic, 1);
        }
        let topic = super::kafka::fresh_topic("warm-up");
        super::kafka::produce(&self.bootstrap, &topic, &[(b"k", Some(b"v"))]);
    }

    fn signal(&self, sig: &str) {
        let Some(pid) = self.own.pid() else {
            return;
        };
        let ok = Command::new("kill")
            .args([sig, &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig} {pid} failed");
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
        if let Some(pid) = self.own.pid() {
            self.signal("-KILL");
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while std::path::Path::new(&format!("/proc/{pid}")).exists()
                && std::time::Instant::now() < deadline
            {
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
    }
}

impl Drop for PrivateBroker {
    fn drop(&mut self) {
        // A paused broker ignores TERM until it goes on.
        self.resume();
    }
}
