//! A broker of a test's own: the compacting broker's binary (tansu with
//! SQLite, which keeps its records across a restart) on its own port and
//! database.

use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::fresh_topic;

/// The binary: `TOMBSTONE_TANSU_SQLITE`, else the cached build under
/// target/tansu-sqlite; `None` (with a line saying so) when it is missing.
pub fn tansu_sqlite() -> Option<PathBuf> {
    let bin = std::env::var_os("TOMBSTONE_TANSU_SQLITE")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/tansu-sqlite/bin/tansu")
        });
    if bin.is_file() {
        Some(bin)
    } else {
        eprintln!(
            "{} is missing: test skipped (scripts/broker.sh build-compacting)",
            bin.display()
        );
        None
    }
}

/// A free port on the loopback address.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A broker of the test's own, on its own port and database; stopped
/// when dropped.
pub struct OwnBroker {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    advertised: Option<String>,
    child: Option<Child>,
}

impl OwnBroker {
    /// A broker on a free port, advertising that port.
    pub fn start(bin: PathBuf) -> Self {
        Self::start_on(bin, free_port(), None)
    }

    /// A broker on `port`, advertising `advertised` (`host:port`; its own
    /// address when `None`).
    pub fn start_on(bin: PathBuf, port: u16, advertised: Option<String>) -> Self {
        let dir = std::env::temp_dir().join(fresh_topic("own-broker"));
        std::fs::create_dir_all(&dir).unwrap();
        let mut b = OwnBroker {
            bin,
            dir,
            port,
            advertised,
            child: None,
        };
        b.up();
        b
    }

    /// Where it listens.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Starts it (again: the same port and database).
    pub fn up(&mut self) {
        let url = format!("tcp://{}", self.addr());
        let advertised = match &self.advertised {
            Some(a) => format!("tcp://{a}"),
            None => url.clone(),
        };
        let child = Command::new(&self.bin)
            .current_dir(&self.dir)
            .env_clear()
            .env("NO_COLOR", "1")
            .args(["broker", "--cluster-id", "proxy-own"])
            .args([
                "--listener-url",
                &url,
                "--advertised-listener-url",
                &advertised,
            ])
            .args(["--storage-engine", "sqlite://own.db"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(self.addr()).is_err() {
            assert!(Instant::now() < deadline, "the broker did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Stops the broker (SIGTERM, then SIGKILL after 5 s).
    pub fn down(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let deadline = Instant::now() + Duration::from_secs(5);
            while c.try_wait().ok().flatten().is_none() {
                if Instant::now() > deadline {
                    let _ = c.kill();
                    let _ = c.wait();
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

impl Drop for OwnBroker {
    fn drop(&mut self) {
        self.down();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
