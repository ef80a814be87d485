//! A scratch directory for one test, removed when dropped: the one `Dir`
//! of the library's, the command line's and the proxy's suites.

#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};

/// A scratch directory (its path, canonical), removed with what it holds
/// when dropped.
pub struct Dir(pub PathBuf);

impl Dir {
    /// A new empty directory under the system's temporary directory, named
    /// by `name`, the process and a counter: two tests of one binary that
    /// pick one name do not share it.
    pub fn new(name: &str) -> Dir {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("tc-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Dir(d.canonicalize().unwrap())
    }

    /// The path of `name` in it, as a string (for a command's arguments).
    pub fn file(&self, name: &str) -> String {
        self.0.join(name).to_str().unwrap().to_owned()
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
