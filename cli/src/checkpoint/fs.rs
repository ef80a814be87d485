//! Files of a run: created new and private (never through a link), and
//! written atomically (a crash leaves the old file or the new one).

use std::fs::File;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use crate::outcome::{fail, Fail};

/// Creates `path`, which must not exist (`O_EXCL`: a link there is not
/// followed), readable and writable by its owner only: checkpoints and
/// journals hold record keys and values.
pub(super) fn private_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// A run id: 16 random bytes in hex.
pub(super) fn run_id() -> Result<String, Fail> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| fail(format!("the system's random source: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the
/// new one: a temporary file beside it, synced, renamed over it, the
/// directory synced.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Fail> {
    write_atomically_with(path, |f| f.write_all(bytes))
}

/// [`write_atomically`] what `write` writes (through a buffer).
pub(super) fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Fail> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    // A name no one can guess, created here and now (never a file or a
    // link someone left there), readable by its owner only.
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", run_id()?));
    let tmp = PathBuf::from(tmp_name);
    let err = |what: &str, e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!("{what} {}: {e}", tmp.display()))
    };
    let f = private_new(&tmp).map_err(|e| fail(format!("creating {}: {e}", tmp.display())))?;
    let mut f = std::io::BufWriter::new(f);
    write(&mut f).map_err(|e| err("writing", e))?;
    let f = f.into_inner().map_err(|e| err("writing", e.into_error()))?;
    f.sync_all().map_err(|e| err("syncing", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!(
            "renaming {} to {}: {e}",
            tmp.display(),
            path.display()
        ))
    })?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail(format!("syncing the directory {}: {e}", dir.display())))
}
