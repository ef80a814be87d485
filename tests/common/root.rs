//! The repository's root, where `target/` (the venv, the broker's binary)
//! and `tests/interop/` are: this package's directory, or its parent for
//! the command line's crate (`cli/`), whose tests share these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};

/// The first directory from this package's up that holds
/// `tests/common/root.rs`.
pub fn repo_root() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    manifest
        .ancestors()
        .find(|d| d.join("tests/common/root.rs").is_file())
        .unwrap_or(manifest)
        .to_path_buf()
}
