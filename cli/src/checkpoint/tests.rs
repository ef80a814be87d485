//! A checkpoint and its journals, their seals and locks.

use super::journal::{is_journal_name, JOURNAL_MAGIC};
use super::*;

fn of() -> RunOf {
    RunOf {
        command: "reencrypt".into(),
        topic: "t".into(),
        to_topic: "t".into(),
        primary: 7,
        key_primary: Some(9),
        partitions: "all".into(),
        plan: "null-marker=Empty".into(),
    }
}

fn progress(end: i64, done: i64) -> Progress {
    Progress {
        end,
        done,
        from: end,
        mark: Some(Mark::of(end - 1, Some(5), Some(b"k"), None)),
        written: 7,
        anchors: Some((
            Mark::of(end, None, Some(b"a"), Some(b"v")),
            Mark::of(end + 6, None, Some(b"b"), None),
        )),
        source: Some(Mark::of(end - 1, Some(9), Some(b"s"), Some(b""))),
        journal: Some(-1),
    }
}

#[test]
fn a_checkpoint_and_its_journal_come_back_as_written() {
    let dir = std::env::temp_dir().join(format!("tc-ckpt-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.checkpoint");
    let c = Checkpoint::create(
        &path,
        of(),
        Some("cluster-1".into()),
        Some("topic-1".into()),
    )
    .unwrap();
    assert!(
        Checkpoint::create(&path, of(), None, None).is_err(),
        "never overwritten"
    );
    // One process at a time: the run holds its lock.
    let e = Checkpoint::load(&path, &of()).err().unwrap();
    assert!(e.0.contains("another process holds"), "{}", e.0);
    c.set(3, progress(100, 40)).unwrap();
    let writes = vec![
        Write {
            partition: 3,
            key: b"k1".to_vec(),
            value: None,
        },
        Write {
            partition: 3,
            key: b"k2".to_vec(),
            value: Some(b"v".to_vec()),
        },
        Write {
            partition: 3,
            key: Vec::new(),
            value: Some(Vec::new()),
        },
    ];
    c.journal(3, 60, &writes).unwrap();
    // Owner-only files, and no temporary file left.
    use std::os::unix::fs::PermissionsExt as _;
    for f in [path.clone(), c.journal_path(3), lock_path(&path)] {
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "{}", f.display());
    }
    let names: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    let run = c.run.clone();
    drop(c);
    let back = Checkpoint::load(&path, &of()).unwrap();
    assert_eq!(back.run, run);
    assert_eq!(back.cluster.as_deref(), Some("cluster-1"));
    assert_eq!(back.topic_id.as_deref(), Some("topic-1"));
    assert_eq!(back.progress(3), Some(progress(100, 40)));
    let (through, got) = back.unfinished_journal(3).unwrap().unwrap();
    assert_eq!(through, 60);
    assert_eq!(got, writes);
    // A new run beside it is refused, by the checkpoint and by the
    // journal.
    assert!(Checkpoint::create(&path, of(), None, None).is_err());
    let elsewhere = dir.join("other.checkpoint");
    std::fs::copy(
        back.journal_path(3),
        dir.join("other.checkpoint.p3.journal"),
    )
    .unwrap();
    let e = Checkpoint::create(&elsewhere, of(), None, None)
        .err()
        .unwrap();
    assert!(e.0.contains("journal of an earlier run"), "{}", e.0);
    // Another run's journal is never written as this one's.
    let other = Checkpoint {
        path: elsewhere.clone(),
        run: "0".repeat(32),
        of: of(),
        cluster: None,
        topic_id: None,
        parts: Mutex::new(BTreeMap::from([(3, progress(100, 0))])),
        _lock: lock(&elsewhere).unwrap(),
    };
    let e = other.unfinished_journal(3).err().unwrap();
    assert!(e.0.contains("another run"), "{}", e.0);
    // Done through the journal's end: nothing to write again.
    back.set(3, progress(100, 60)).unwrap();
    assert!(back.unfinished_journal(3).unwrap().is_none());
    drop(back);
    // Another run's checkpoint is refused.
    let other = RunOf { primary: 8, ..of() };
    let e = Checkpoint::load(&path, &other).err().unwrap();
    assert!(e.0.contains("not of this one"), "{}", e.0);
    let back = Checkpoint::load(&path, &of()).unwrap();
    back.remove().unwrap();
    assert!(!path.exists());
    assert!(!lock_path(&path).exists());
    let _ = std::fs::remove_dir_all(&dir);
}

/// A checkpoint as a run leaves it (every field set, two partitions),
/// each of its bytes changed in turn (three ways): every change is
/// refused with the checksum's error, and the file is left as it was.
#[test]
fn a_checkpoint_with_any_byte_changed_is_refused() {
    let dir = std::env::temp_dir().join(format!("tc-ckpt-bytes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("run.checkpoint");
    let c = Checkpoint::create(
        &path,
        of(),
        Some("cluster-1".into()),
        Some("topic-1".into()),
    )
    .unwrap();
    c.set(0, progress(100, 40)).unwrap();
    c.set(3, progress(2000, 1999)).unwrap();
    drop(c);
    let good = std::fs::read(&path).unwrap();
    assert!(Checkpoint::load(&path, &of()).is_ok());
    for at in 0..good.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut changed = good.clone();
            changed[at] ^= flip;
            std::fs::write(&path, &changed).unwrap();
            let e = Checkpoint::load(&path, &of()).err();
            let e = e.unwrap_or_else(|| panic!("byte {at} ^ {flip:#x} was accepted"));
            assert!(
                e.0.contains("its checksum does not verify"),
                "byte {at} ^ {flip:#x}: {}",
                e.0
            );
            assert_eq!(std::fs::read(&path).unwrap(), changed, "nothing written");
        }
    }
    for cut in 0..good.len() {
        std::fs::write(&path, &good[..cut]).unwrap();
        assert!(Checkpoint::load(&path, &of()).is_err(), "cut at {cut}");
    }
    // The checkpoint as it was still loads: the test changed the file,
    // not the reader.
    std::fs::write(&path, &good).unwrap();
    assert_eq!(
        Checkpoint::load(&path, &of()).unwrap().progress(3),
        Some(progress(2000, 1999))
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn anchors_are_the_runs_first_and_last_values_where_it_wrote_any() {
    let w = |k: &[u8], v: Option<&[u8]>| Write {
        partition: 0,
        key: k.to_vec(),
        value: v.map(<[u8]>::to_vec),
    };
    let offsets = |p: Progress| p.anchors.map(|(f, l)| (f.offset, l.offset));
    let start = Progress {
        end: 10,
        done: 0,
        from: 0,
        mark: None,
        written: 0,
        anchors: None,
        source: None,
        journal: None,
    };
    let tombstones = start.after_writes(&[w(b"t", None), w(b"u", None)], &[1, 2]);
    assert_eq!(offsets(tombstones), Some((1, 2)), "only tombstones");
    let p = tombstones.after_writes(&[w(b"old", None), w(b"new", Some(b"v"))], &[3, 4]);
    assert_eq!(p.written, 4);
    assert_eq!(offsets(p), Some((4, 4)), "a value replaces both");
    let p = p.after_writes(&[w(b"a", Some(b"x")), w(b"b", None)], &[7, 8]);
    assert_eq!(
        offsets(p),
        Some((4, 7)),
        "the last value, not the tombstone"
    );
    let (first, _) = p.anchors.unwrap();
    assert!(first.same_key(Some(b"new")) && !first.same_key(Some(b"old")));
    assert_eq!(first, Mark::of(4, None, Some(b"new"), Some(b"v")));
}

#[test]
fn a_link_where_a_checkpoint_or_its_lock_goes_is_never_followed() {
    let dir = std::env::temp_dir().join(format!("tc-ckpt-link-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let target = dir.join("target");
    std::fs::write(&target, b"untouched").unwrap();
    let path = dir.join("run.checkpoint");
    std::os::unix::fs::symlink(&target, &path).unwrap();
    assert!(Checkpoint::create(&path, of(), None, None).is_err());
    std::fs::remove_file(&path).unwrap();
    std::fs::remove_file(lock_path(&path)).unwrap();
    std::os::unix::fs::symlink(&target, lock_path(&path)).unwrap();
    assert!(Checkpoint::create(&path, of(), None, None).is_err());
    assert_eq!(std::fs::read(&target).unwrap(), b"untouched");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_checkpoints_journals_are_its_own_never_those_of_a_longer_name() {
    assert!(is_journal_name("ck.p0.journal", "ck.p"));
    assert!(is_journal_name("ck.p17.journal", "ck.p"));
    assert!(!is_journal_name("ck.part2.p0.journal", "ck.p"));
    assert!(!is_journal_name("ck.p.journal", "ck.p"));
    assert!(!is_journal_name("ck.p0.journal.tmp", "ck.p"));
    assert!(!is_journal_name("ck.p-1.journal", "ck.p"));
}

#[test]
fn a_journal_of_bad_bytes_is_refused_never_read_past_its_end() {
    // `body` with its checksum, as `journal` writes it.
    let sealed = |body: &[u8]| {
        let mut b = body.to_vec();
        b.extend_from_slice(&sha2::Digest::finalize(sha2::Digest::chain_update(
            sha2::Sha256::default(),
            body,
        )));
        b
    };
    let mut body = JOURNAL_MAGIC.to_vec();
    body.extend_from_slice(&[b'a'; 32]);
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&5i64.to_be_bytes());
    body.extend_from_slice(&1u32.to_be_bytes());
    body.extend_from_slice(&2u32.to_be_bytes());
    body.extend_from_slice(b"ab");
    body.extend_from_slice(&u32::MAX.to_be_bytes());
    let b = sealed(&body);
    assert!(parse_journal(&b).is_some());
    for cut in 0..b.len() {
        assert!(parse_journal(&b[..cut]).is_none(), "cut at {cut}");
    }
    // Every single-byte change is refused (a key `ab` changed to
    // another key, a `through` moved, the checksum itself).
    for at in 0..b.len() {
        for flip in [0x01, 0x80, 0xff] {
            let mut changed = b.clone();
            changed[at] ^= flip;
            assert!(parse_journal(&changed).is_none(), "byte {at} ^ {flip:#x}");
        }
    }
    // Well formed bodies under a good checksum are still checked.
    let mut huge = body.clone();
    huge[48..52].copy_from_slice(&u32::MAX.to_be_bytes());
    assert!(parse_journal(&sealed(&huge)).is_none());
    let mut trailing = body;
    trailing.push(0);
    assert!(parse_journal(&sealed(&trailing)).is_none());
}
