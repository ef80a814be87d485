//! Who may write: one process at a time holds a run (`PATH.lock`), and
//! one run at a time writes a partition ([`PartitionLocks`]: a file per
//! partition of the topic's cluster in the lock directory, whatever the
//! checkpoint file).

use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};

use crate::outcome::{fail, Fail};

/// The lock file of the checkpoint at `path`.
pub(super) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the run's lock (`PATH.lock`, created 0600 if missing, never
/// through a link): a second process running or resuming the same run is
/// refused while the first holds it; the system releases it when the
/// holder ends, a kill included.
pub(super) fn lock(path: &Path) -> Result<File, Fail> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let at = lock_path(path);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&at)
        .map_err(|e| fail(format!("opening the lock {}: {e}", at.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(fail(format!(
            "another process holds {}: it is running or resuming this run; let it finish (or stop it) first",
            at.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(fail(format!("locking {}: {e}", at.display())))
        }
    }
}

/// The locks of the partitions a run writes, one file per partition of a
/// topic of a cluster in a lock directory (`--lock-dir`): two runs that
/// would write one partition at once, whatever their checkpoint files, do
/// not both start. Each is locked for the run's life (the system releases
/// it when the process ends, a kill included) and removed when the run
/// lets it go.
pub(crate) struct PartitionLocks {
    held: Vec<(PathBuf, File)>,
    /// The run's checkpoint, as the lock files name it (absolute).
    checkpoint: PathBuf,
}

/// What a partition lock file's holder line starts the checkpoint with.
const HOLDER_CHECKPOINT: &[u8] = b", checkpoint ";

/// The most bytes of a partition lock file read: its holder line with a
/// path of up to `PATH_MAX` bytes.
const MAX_HOLDER: u64 = 8192;

/// The checkpoint a partition lock file names (`pid N, checkpoint PATH`
/// and a newline, the path's bytes as they are: a path that is not UTF-8
/// is named exactly).
pub(super) fn checkpoint_named(holder: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let line = holder.strip_suffix(b"\n").unwrap_or(holder);
    let at = line
        .windows(HOLDER_CHECKPOINT.len())
        .position(|w| w == HOLDER_CHECKPOINT)?;
    let path = &line[at + HOLDER_CHECKPOINT.len()..];
    (!path.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(path)))
}

/// `path` made absolute (from the current directory), as a lock file
/// names it.
pub(super) fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

impl PartitionLocks {
    /// Locks each of `partitions` of `topic` on `cluster` (its id, or its
    /// bootstrap servers when the broker gives none) in `dir` (created,
    /// 0700, if missing), naming `checkpoint` in each file for whoever is
    /// refused. Refuses, holding none, when another run holds one.
    pub(crate) fn take(
        dir: &LockDir,
        cluster: &str,
        topic: &str,
        partitions: impl IntoIterator<Item = i32>,
        checkpoint: &Path,
    ) -> Result<PartitionLocks, Fail> {
        use std::os::unix::fs::DirBuilderExt as _;
        let shared = dir.shared;
        let dir = &dir.path;
        if shared {
            machine_dir(dir)?;
        } else {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    fail(format!(
                        "creating the lock directory {}: {e}",
                        dir.display()
                    ))
                })?;
        }
        let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
            sha2::Digest::chain_update(sha2::Sha256::default(), cluster.as_bytes()),
            [&[0u8][..], topic.as_bytes()].concat(),
        ));
        let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let readable: String = topic
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect();
        let checkpoint = absolute(checkpoint);
        let mut locks = PartitionLocks {
            held: Vec::new(),
            checkpoint: checkpoint.clone(),
        };
        for p in partitions {
            let path = dir.join(format!("{readable}-{id}.p{p}.lock"));
            match lock_partition(&path, shared)? {
                Some(mut f) => {
                    // A run that stopped before it finished leaves its lock
                    // file, naming its checkpoint: while that checkpoint is
                    // there, its journal may hold a key cut between its
                    // records, which a new run planning from the topic
                    // would lose.
                    let mut before = Vec::new();
                    let _ = (&f).take(MAX_HOLDER).read_to_end(&mut before);
                    if let Some(theirs) = checkpoint_named(&before) {
                        // Another user's that this one cannot see: taken
                        // as there.
                        let there = theirs.try_exists().unwrap_or(true);
                        let same = theirs == checkpoint
                            || std::fs::canonicalize(&theirs).ok()
                                == std::fs::canonicalize(&checkpoint).ok()
                                && there;
                        if !same && there {
                            return Err(fail(format!(
                                "partition {p} of {topic} was being written by a run that stopped before it finished: its checkpoint {} is still there, and its journal may hold writes only it can finish. Resume that run first (--resume {0}), or leave partition {p} out of --partitions; to drop that run, delete its checkpoint and journals (a key it left between its records may then be lost) (the lock: {})",
                                theirs.display(),
                                path.display()
                            )));
                        }
                    }
                    // Who holds it, for whoever is refused (best effort).
                    let _ = f.set_len(0).and_then(|()| f.rewind()).and_then(|()| {
                        use std::os::unix::ffi::OsStrExt as _;
                        let mut line = format!("pid {}", std::process::id()).into_bytes();
                        line.extend_from_slice(HOLDER_CHECKPOINT);
                        line.extend_from_slice(checkpoint.as_os_str().as_bytes());
                        line.push(b'\n');
                        f.write_all(&line)
                    });
                    locks.held.push((path, f));
                }
                None => {
                    let mut holder = Vec::new();
                    let _ =
                        File::open(&path).and_then(|f| f.take(MAX_HOLDER).read_to_end(&mut holder));
                    let holder = String::from_utf8_lossy(&holder);
                    let holder = holder.trim();
                    let holder = if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" ({holder})")
                    };
                    return Err(fail(format!(
                        "partition {p} of {topic} is being written by another run{holder}: two runs must not write one partition at once. Let it finish (or stop it), or leave partition {p} out of --partitions (its lock: {})",
                        path.display()
                    )));
                }
            }
        }
        Ok(locks)
    }
}

impl Drop for PartitionLocks {
    fn drop(&mut self) {
        // Kept, naming the checkpoint, while the run's checkpoint is there
        // (stopped before it finished): a run of another checkpoint is
        // refused those partitions until this one is resumed and done.
        // Else removed while still locked: a run that opened the file
        // meanwhile finds, once it holds the lock, that the path is no
        // longer its file, and takes the lock again at a new one.
        let unfinished = self.checkpoint.exists();
        for (path, f) in self.held.drain(..) {
            if !unfinished {
                let _ = std::fs::remove_file(&path);
            }
            drop(f);
        }
    }
}

/// Locks the file at `path` (created 0600 if missing, never through a
/// link); `None` when another process holds it.
pub(super) fn lock_partition(path: &Path, shared: bool) -> Result<Option<File>, Fail> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    loop {
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .truncate(false)
                // In the machine's directory, readable by every user (to
                // lock it), written by its owner only.
                .mode(if shared { 0o644 } else { 0o600 })
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        };
        let f = match open(true) {
            // Another user's, in the machine's directory: locked all the
            // same (a lock needs no write access).
            Err(e) if shared && e.kind() == std::io::ErrorKind::PermissionDenied => open(false),
            other => other,
        }
        .map_err(|e| fail(format!("opening the lock {}: {e}", path.display())))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(fail(format!("locking {}: {e}", path.display())))
            }
        }
        // The holder before may have removed the file between the open and
        // the lock: the lock counts only on the file at the path now.
        let ours = f.metadata().ok();
        let there = std::fs::symlink_metadata(path).ok();
        if let (Some(a), Some(b)) = (ours, there) {
            if a.ino() == b.ino() && a.dev() == b.dev() {
                return Ok(Some(f));
            }
        }
    }
}

/// A directory of partition locks.
pub(crate) struct LockDir {
    pub(crate) path: PathBuf,
    /// The machine's, shared by every user ([`MACHINE_LOCK_DIR`]).
    pub(crate) shared: bool,
}

/// The machine's directory of partition locks, which every user's runs
/// take beside their own when no directory is given: two users' runs (each
/// with their own `HOME` and `XDG_RUNTIME_DIR`) on one machine never
/// write one partition at once.
pub(crate) const MACHINE_LOCK_DIR: &str = "/tmp/tombstone-crypt-locks";

/// The directories of the partition locks when `--lock-dir` is not given:
/// `$TOMBSTONE_CRYPT_LOCK_DIR` alone; else the user's,
/// `$XDG_RUNTIME_DIR/tombstone-crypt/locks` or
/// `$HOME/.cache/tombstone-crypt/locks`, and the machine's
/// ([`MACHINE_LOCK_DIR`]).
pub(crate) fn default_lock_dirs() -> Result<Vec<LockDir>, Fail> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let own = |path: PathBuf| LockDir {
        path,
        shared: false,
    };
    if let Some(d) = var("TOMBSTONE_CRYPT_LOCK_DIR") {
        return Ok(vec![own(PathBuf::from(d))]);
    }
    let user = if let Some(d) = var("XDG_RUNTIME_DIR") {
        PathBuf::from(d).join("tombstone-crypt/locks")
    } else if let Some(d) = var("HOME") {
        PathBuf::from(d).join(".cache/tombstone-crypt/locks")
    } else {
        return Err(fail(
            "no directory for the partition locks: set --lock-dir (or TOMBSTONE_CRYPT_LOCK_DIR, XDG_RUNTIME_DIR or HOME); every run that may write the same topic must use the same one",
        ));
    };
    Ok(vec![
        own(user),
        LockDir {
            path: PathBuf::from(MACHINE_LOCK_DIR),
            shared: true,
        },
    ])
}

/// Makes the machine's lock directory (mode 1777: every user creates
/// locks there, and removes only their own), or checks the one there: a
/// directory, not a link, writable by all with the sticky bit.
pub(super) fn machine_dir(dir: &Path) -> Result<(), Fail> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let refused = |why: String| {
        fail(format!(
            "the machine's lock directory {}: {why}. Give every run that may write the topic the same --lock-dir (or TOMBSTONE_CRYPT_LOCK_DIR)",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| refused(e.to_string()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refused(e.to_string())),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| refused(e.to_string()))?;
    if !md.is_dir() {
        return Err(refused("not a directory (a link or a file)".into()));
    }
    if md.permissions().mode() & 0o1777 != 0o1777 {
        return Err(refused(format!(
            "its mode is {:o}, not 1777 (writable by every user, with the sticky bit)",
            md.permissions().mode() & 0o7777
        )));
    }
    Ok(())
}
