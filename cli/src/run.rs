//! Partitions in parallel: a bounded number of readers (`--parallel`),
//! each taking the next partition when it is done with one.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use indicatif::ProgressBar;

use crate::outcome::Fail;
use crate::read::Setup;

/// Runs `work` on each of `parts` (partition, first and end offsets) on
/// at most `s.parallel` threads, each with its own `W` kept from one
/// partition to the next (a reader's index); returns the results in the
/// order of `parts`. The first failure stops every reader from taking
/// another partition, and is returned (the lowest partition's, when
/// several fail).
pub(crate) fn for_partitions<T: Send, W: Default>(
    s: &Setup,
    parts: &[(i32, i64, i64)],
    bar: &ProgressBar,
    work: impl Fn(&mut W, i32) -> Result<T, Fail> + Sync,
) -> Result<Vec<T>, Fail> {
    let next = AtomicUsize::new(0);
    let stop = AtomicBool::new(false);
    let results: Mutex<Vec<Option<Result<T, Fail>>>> =
        Mutex::new((0..parts.len()).map(|_| None).collect());
    let readers = s.parallel.clamp(1, parts.len().max(1));
    std::thread::scope(|scope| {
        for _ in 0..readers {
            scope.spawn(|| {
                let mut own = W::default();
                loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(&(p, _, _)) = parts.get(i) else {
                        return;
                    };
                    let r = work(&mut own, p);
                    if r.is_err() {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if let Ok(mut all) = results.lock() {
                        all[i] = Some(r);
                    }
                }
            });
        }
    });
    let all = results
        .into_inner()
        .map_err(|_| crate::outcome::fail("a reader panicked"))?;
    let mut out = Vec::with_capacity(all.len());
    for r in all {
        match r {
            Some(Ok(t)) => out.push(t),
            Some(Err(e)) => {
                bar.abandon();
                return Err(e);
            }
            // Not taken: a reader failed first (its error comes first or
            // later in this loop).
            None => {}
        }
    }
    if out.len() < parts.len() {
        bar.abandon();
        return Err(crate::outcome::fail(
            "a reader stopped before its partition was read",
        ));
    }
    Ok(out)
}
