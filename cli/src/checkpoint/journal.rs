//! A partition's journal: the records of the chunk in flight, exactly as
//! written (wire keys and ciphertexts), with the run id, the partition and
//! the offset the chunk ends below, sealed by their SHA-256.

use std::path::{Path, PathBuf};

use crate::record::Write;

/// The first bytes of a journal.
pub(super) const JOURNAL_MAGIC: &[u8; 4] = b"TCJ2";

/// A journal read: its run id, partition, the offset its chunk ends
/// below, and its records.
pub(super) type Journal = (Vec<u8>, i32, i64, Vec<Write>);

/// Reads a journal; `None` for bytes that are not one (every length is
/// checked against what is left).
pub(super) fn parse_journal(b: &[u8]) -> Option<Journal> {
    fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
        if b.len() < n {
            return None;
        }
        let (head, rest) = b.split_at(n);
        *b = rest;
        Some(head)
    }
    fn u32_of(b: &mut &[u8]) -> Option<u32> {
        take(b, 4).map(|x| u32::from_be_bytes([x[0], x[1], x[2], x[3]]))
    }
    // The last 32 bytes: the SHA-256 of all before them.
    let (body, digest) = b.split_at_checked(b.len().checked_sub(32)?)?;
    let want = sha2::Digest::finalize(sha2::Digest::chain_update(sha2::Sha256::default(), body));
    if want[..] != *digest {
        return None;
    }
    let mut b = body;
    if take(&mut b, 4)? != JOURNAL_MAGIC {
        return None;
    }
    let run = take(&mut b, 32)?.to_vec();
    let partition = i32::try_from(u32_of(&mut b)?).ok()?;
    let through = i64::from_be_bytes(take(&mut b, 8)?.try_into().ok()?);
    let n = u32_of(&mut b)? as usize;
    // Each record takes 8 bytes at least: no count beyond what is there.
    if n > b.len() / 8 {
        return None;
    }
    let mut writes = Vec::with_capacity(n);
    for _ in 0..n {
        let k = u32_of(&mut b)? as usize;
        let key = take(&mut b, k)?.to_vec();
        let value = match u32_of(&mut b)? {
            u32::MAX => None,
            v => Some(take(&mut b, v as usize)?.to_vec()),
        };
        writes.push(Write {
            partition,
            key,
            value,
        });
    }
    b.is_empty().then_some((run, partition, through, writes))
}

/// The journals beside the checkpoint `path` (`PATH.pN.journal`).
pub(super) fn journals_of(path: &Path) -> Vec<PathBuf> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Vec::new();
    };
    let prefix = format!("{name}.p");
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| is_journal_name(n, &prefix))
        })
        .collect()
}

/// Whether `name` is `PREFIX` then a partition number then `.journal`
/// (`PATH.p` then `N.journal`): never the journal of another checkpoint
/// whose name starts with this one's (`ck` and `ck.part2`).
pub(super) fn is_journal_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(".journal"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// A journal's bytes: the run id, the partition, the offset its chunk ends
/// below and its records, then the SHA-256 of all of it.
pub(super) fn encode(run: &str, partition: i32, through: i64, writes: &[Write]) -> Vec<u8> {
    let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX - 1).to_be_bytes();
    let mut f = Vec::new();
    f.extend_from_slice(JOURNAL_MAGIC);
    f.extend_from_slice(run.as_bytes());
    f.extend_from_slice(&partition.to_be_bytes());
    f.extend_from_slice(&through.to_be_bytes());
    f.extend_from_slice(&len32(writes.len()));
    for w in writes {
        f.extend_from_slice(&len32(w.key.len()));
        f.extend_from_slice(&w.key);
        match &w.value {
            None => f.extend_from_slice(&u32::MAX.to_be_bytes()),
            Some(v) => {
                f.extend_from_slice(&len32(v.len()));
                f.extend_from_slice(v);
            }
        }
    }
    // The whole journal's SHA-256 last: a journal changed or cut
    // anywhere does not verify, and nothing of it is written.
    let digest = sha2::Digest::finalize(sha2::Digest::chain_update(sha2::Sha256::default(), &f));
    f.extend_from_slice(&digest);
    f
}
