//! Test-only: runs a closure in a child made with `fork()` (no `exec`), as
//! a program that forks and goes on working in both processes does, and
//! hands the child's bytes back to the parent. tombstone-crypt forbids
//! unsafe code; `fork` needs it, so it lives here (as the test allocator
//! lives in `crates/freed-scan`).

use std::io::Read as _;
use std::os::fd::FromRawFd as _;

/// Forks; the child runs `child` and sends back what it returns, then ends
/// with `_exit` (no destructors, no test harness); the parent runs
/// `parent` meanwhile and gets both results.
///
/// # Panics
/// If `pipe`, `fork` or `waitpid` fails, or the child does not end with
/// status 0 (it panicked: its message is on stderr).
pub fn fork_both<T>(child: impl FnOnce() -> Vec<u8>, parent: impl FnOnce() -> T) -> (Vec<u8>, T) {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid array of two file descriptors for pipe(2).
    #[allow(unsafe_code)]
    let piped = unsafe { libc::pipe(fds.as_mut_ptr()) };
    assert_eq!(piped, 0, "pipe failed");
    let [read_fd, write_fd] = fds;
    // SAFETY: fork(2) has no preconditions; the child below only runs the
    // closure, writes to its pipe and calls _exit.
    #[allow(unsafe_code)]
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: closing our copy of the read end, a descriptor we own.
        #[allow(unsafe_code)]
        unsafe {
            libc::close(read_fd);
        }
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(child));
        let code = match out {
            Ok(bytes) => {
                // SAFETY: the write end is ours alone in this process.
                #[allow(unsafe_code)]
                let mut pipe = unsafe { std::fs::File::from_raw_fd(write_fd) };
                i32::from(std::io::Write::write_all(&mut pipe, &bytes).is_err())
            }
            Err(_) => 2,
        };
        // SAFETY: _exit(2) ends the child at once, running nothing of the
        // parent's (no atexit handlers, no test harness).
        #[allow(unsafe_code)]
        unsafe {
            libc::_exit(code)
        }
    }
    // SAFETY: closing the parent's copy of the write end, which it owns.
    #[allow(unsafe_code)]
    unsafe {
        libc::close(write_fd);
    }
    let theirs = parent();
    // SAFETY: the read end is the parent's alone.
    #[allow(unsafe_code)]
    let mut pipe = unsafe { std::fs::File::from_raw_fd(read_fd) };
    let mut bytes = Vec::new();
    pipe.read_to_end(&mut bytes)
        .expect("read the child's bytes");
    let mut status = 0;
    // SAFETY: waiting for our own child with a valid status pointer.
    #[allow(unsafe_code)]
    let waited = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(waited, pid, "waitpid failed");
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child failed (status {status})"
    );
    (bytes, theirs)
}
