//! Attacks on subject keys' write path: the write hint (a subject's DEK
//! found with one lookup, followed only while the DEK cache's generation is
//! unchanged), the DEK cache's inserts racing a shred, and the tag cache's
//! subjects of every length.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use tombstone_crypt::shred::{
    covered_ids, DekLookup, KeyStore, MemoryKeyStore, Seal, Shred, ShredRecord, SubjectEncrypting,
    SubjectKeys, SubjectTag,
};
use tombstone_crypt::{Bytes, Context, Deserializer as _, Error, Keyset, Serializer as _};

type Values = SubjectEncrypting<Bytes, [u8]>;

fn values(keys: &Arc<SubjectKeys>) -> Values {
    SubjectEncrypting::new(Arc::clone(keys), Bytes)
}

fn write(v: &Values, subject: &[u8], body: &[u8]) -> Vec<u8> {
    let ctx = Context::new("t").with_key(subject);
    v.serialize(&ctx, Some(body)).unwrap().unwrap()
}

fn read(v: &Values, subject: &[u8], value: &[u8]) -> Option<Vec<u8>> {
    let ctx = Context::new("t").with_key(subject);
    v.deserialize(&ctx, Some(value)).unwrap()
}

fn dek_id(value: &[u8]) -> [u8; 8] {
    value[17..25].try_into().unwrap()
}

/// Every DEK id the store's records of shreds cover.
fn shredded_ids(store: &dyn KeyStore) -> HashSet<[u8; 8]> {
    let mut all = HashSet::new();
    for (_, pieces) in store.shreds().unwrap() {
        for p in pieces {
            all.extend(covered_ids(&p).unwrap_or_default());
        }
    }
    all
}

/// Several threads write one subject (following hints) while another
/// shreds it, alternately by subject and by tag: a write that starts
/// after a shred returned never uses a DEK any shred so far covers.
/// Before the cache counted its removals this failed in most runs: a write
/// that started before a shred read the DEK from the store and cached it
/// after the shred returned (see the deterministic
/// `a_dek_read_before_a_shred_and_cached_after_it_is_not_written_with_again`).
/// With the generation's bump in `DekCache::remove` taken out, it fails
/// with thousands of such writes (the hint followed after a shred).
fn writers_vs_shredder(capacity: usize, other_subjects: bool) {
    let store = Arc::new(MemoryKeyStore::new());
    let keys = Arc::new(
        SubjectKeys::create(Keyset::generate(), store.clone())
            .unwrap()
            .with_fence(Duration::from_secs(3600))
            .with_cache_capacity(capacity),
    );
    let subject: &'static [u8] = b"exactly-thirty-bytes-subject!!";
    assert_eq!(subject.len(), 30);
    let tag = keys.tag(subject).unwrap();
    // snapshots[k]: the ids covered once shred k returned.
    let snapshots: Arc<Mutex<Vec<HashSet<[u8; 8]>>>> = Arc::new(Mutex::new(vec![HashSet::new()]));
    let epoch = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let mut handles = Vec::new();
    for w in 0..3 {
        let (keys, epoch, stop) = (keys.clone(), epoch.clone(), stop.clone());
        handles.push(std::thread::spawn(move || {
            let v = values(&keys);
            let mut seen = Vec::new();
            let mut i = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let e = epoch.load(Ordering::SeqCst);
                let val = write(&v, subject, b"x");
                seen.push((e, dek_id(&val)));
                if other_subjects && w == 0 {
                    // Pressure on a tiny cache: evictions.
                    write(&v, format!("other-{}", i % 7).as_bytes(), b"y");
                }
                i += 1;
            }
            seen
        }));
    }
    for k in 1..=300 {
        std::thread::sleep(Duration::from_micros(200));
        if k % 2 == 0 {
            keys.shred(subject).unwrap();
        } else {
            keys.shred_tag(&tag).unwrap();
        }
        snapshots.lock().unwrap().push(shredded_ids(&*store));
        epoch.store(k, Ordering::SeqCst);
    }
    stop.store(true, Ordering::SeqCst);
    let snaps = snapshots.lock().unwrap();
    let mut bad = 0;
    let mut total = 0;
    for h in handles {
        for (e, id) in h.join().unwrap() {
            total += 1;
            if snaps[e].contains(&id) {
                bad += 1;
            }
        }
    }
    assert!(total > 300, "too few writes: {total}");
    assert_eq!(
        bad, 0,
        "{bad} of {total} writes started after a shred returned used a DEK it covered"
    );
}

#[test]
fn threads_writing_one_subject_while_it_is_shredded_never_reuse_a_shredded_dek() {
    writers_vs_shredder(65_536, false);
}

#[test]
fn the_same_with_a_tiny_cache_and_evictions() {
    writers_vs_shredder(2, true);
}

/// A key store whose `get` of one tag, once armed, returns the record it
/// read and then waits until released: a writer that read the subject's
/// DEK before a shred, and keeps it in the cache after the shred returned.
struct SlowGet {
    inner: MemoryKeyStore,
    target: Mutex<Option<SubjectTag>>,
    gate: Mutex<(bool, bool)>, // (got, released)
    cv: Condvar,
}

impl KeyStore for SlowGet {
    fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error> {
        let r = self.inner.get(tag)?;
        if self.target.lock().unwrap().as_ref() == Some(tag) {
            *self.target.lock().unwrap() = None;
            let mut g = self.gate.lock().unwrap();
            g.0 = true;
            self.cv.notify_all();
            while !g.1 {
                g = self.cv.wait(g).unwrap();
            }
        }
        Ok(r)
    }
    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        self.inner.insert_if_absent(tag, record)
    }
    fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error> {
        self.inner.remove(tag, seal)
    }
    fn reseal(&self, tag: &SubjectTag, was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error> {
        self.inner.reseal(tag, was, evidence)
    }
    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        KeyStore::records(&self.inner)
    }
    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        self.inner.shreds()
    }
    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        self.inner.replace(tag, record)
    }
    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<DekLookup, Error> {
        self.inner.find(tag, dek_id)
    }
}

/// A write that started before a shred read the subject's DEK from the
/// store before the shred removed it, and puts it in the cache after the
/// shred returned: a write that starts after the shred returned must
/// still not use it. (The DEK cache now keeps a DEK read from the store
/// only if it removed none since before the read.)
#[test]
fn a_dek_read_before_a_shred_and_cached_after_it_is_not_written_with_again() {
    let store = Arc::new(SlowGet {
        inner: MemoryKeyStore::new(),
        target: Mutex::new(None),
        gate: Mutex::new((false, false)),
        cv: Condvar::new(),
    });
    let kek = Keyset::generate();
    let a = Arc::new(SubjectKeys::create(kek.clone(), store.clone()).unwrap());
    // A fence of ten years: no other test's clock move expires it.
    let b = Arc::new(
        SubjectKeys::create(kek, store.clone())
            .unwrap()
            .with_fence(Duration::from_secs(10 * 365 * 86_400)),
    );
    let subject = b"carol";
    let first = write(&values(&a), subject, b"1");
    *store.target.lock().unwrap() = Some(b.tag(subject).unwrap());
    // W1 on b: its cache misses, it reads the record and waits.
    let w1 = {
        let b = b.clone();
        std::thread::spawn(move || write(&values(&b), subject, b"2"))
    };
    {
        let mut g = store.gate.lock().unwrap();
        while !g.0 {
            g = store.cv.wait(g).unwrap();
        }
    }
    assert_eq!(b.shred(subject).unwrap(), Shred::Removed(1));
    // The shred returned. W1 goes on (it started before: it may use it).
    {
        let mut g = store.gate.lock().unwrap();
        g.1 = true;
        store.cv.notify_all();
    }
    let in_flight = w1.join().unwrap();
    assert_eq!(dek_id(&in_flight), dek_id(&first));
    // W2 starts after the shred returned.
    let after = write(&values(&b), subject, b"3");
    let covered = shredded_ids(&*store);
    assert!(covered.contains(&dek_id(&first)));
    assert!(
        !covered.contains(&dek_id(&after)),
        "a write that started after the shred returned used the shredded DEK"
    );
}

/// Two instances of subject keys on one store under one KEK: `a` with the
/// default fence, `b` with `fence`.
fn two_instances(fence: Duration) -> (Arc<SubjectKeys>, Arc<SubjectKeys>) {
    let kek = Keyset::generate();
    let store = Arc::new(MemoryKeyStore::new());
    let a = Arc::new(SubjectKeys::create(kek.clone(), store.clone()).unwrap());
    let b = Arc::new(SubjectKeys::create(kek, store).unwrap().with_fence(fence));
    (a, b)
}

/// Two instances on one store: once another instance shredded the subject
/// and this one's fence passed, this one's next write (which held a hint)
/// makes a new DEK; short fences by sleeping.
#[test]
fn another_instances_shred_is_seen_by_a_hinted_writer_after_its_fence() {
    for fence_ms in [0u64, 1, 15, 60] {
        let (a, b) = two_instances(Duration::from_millis(fence_ms));
        let (va, vb) = (values(&a), values(&b));
        for subject in [
            &b""[..],
            b"s",
            &[b'x'; 29][..],
            &[b'y'; 30][..],
            &[b'z'; 31][..],
        ] {
            let old = write(&vb, subject, b"1");
            write(&vb, subject, b"2");
            write(&vb, subject, b"3"); // follows the hint
            assert_eq!(a.shred(subject).unwrap(), Shred::Removed(1));
            std::thread::sleep(Duration::from_millis(fence_ms + 2));
            let new = write(&vb, subject, b"4");
            assert_ne!(
                dek_id(&new),
                dek_id(&old),
                "fence {fence_ms} ms, {subject:?}"
            );
            assert_eq!(read(&va, subject, &old), None);
            assert_eq!(read(&vb, subject, &old), None);
            assert_eq!(read(&va, subject, &new).as_deref(), Some(&b"4"[..]));
        }
    }
}

/// A long fence (an hour), passed by moving the clock: the hint is not
/// followed past it.
#[test]
fn a_long_fence_passed_stops_the_hint() {
    let (a, b) = two_instances(Duration::from_secs(3600));
    let vb = values(&b);
    let old = write(&vb, b"dave", b"1");
    write(&vb, b"dave", b"2");
    write(&vb, b"dave", b"3");
    a.shred(b"dave").unwrap();
    tombstone_crypt::__fuzz::FakeKms::advance_clock(Duration::from_secs(3601));
    let new = write(&vb, b"dave", b"4");
    assert_ne!(dek_id(&new), dek_id(&old));
}

/// Subjects of many lengths (around 30 bytes, where the tag cache once
/// kept subjects in its entries), all-zero ones, prefixes and a trailing
/// zero: each has its own tag
/// (the same as a fresh instance computes), and shredding one deletes
/// only its values, whatever was cached or hinted.
#[test]
fn subjects_of_many_lengths_stay_distinct_through_shreds() {
    let kek = Keyset::generate();
    let store = Arc::new(MemoryKeyStore::new());
    let keys = Arc::new(
        SubjectKeys::create(kek.clone(), store.clone())
            .unwrap()
            .with_fence(Duration::from_secs(3600)),
    );
    let v = values(&keys);
    let mut subjects: Vec<Vec<u8>> = Vec::new();
    for n in [
        0usize, 1, 2, 6, 28, 29, 30, 31, 32, 254, 255, 256, 257, 1000,
    ] {
        subjects.push(vec![0u8; n]);
        subjects.push((0..n).map(|i| (i * 7 + 1) as u8).collect());
    }
    let base: Vec<u8> = (0..29u8).map(|i| b'a' + i % 26).collect();
    for extra in [&b""[..], b"\0", b"\0\0", b"b"] {
        let mut s = base.clone();
        s.extend_from_slice(extra);
        subjects.push(s);
    }
    subjects.sort();
    subjects.dedup();
    let mut live: Vec<(usize, Vec<u8>, Vec<u8>)> = Vec::new();
    let fresh = SubjectKeys::open(kek.clone(), store.clone()).unwrap();
    let mut tags = HashSet::new();
    for (i, s) in subjects.iter().enumerate() {
        for round in 0..3u8 {
            let body = [i as u8, round];
            live.push((i, write(&v, s, &body), body.to_vec()));
        }
        let t = keys.tag(s).unwrap();
        assert_eq!(t, fresh.tag(s).unwrap(), "len {}", s.len());
        assert!(tags.insert(t), "two subjects, one tag");
    }
    for (k, s) in subjects.iter().enumerate() {
        // Alternate shreds by subject and by tag.
        if k % 2 == 0 {
            assert_eq!(keys.shred(s).unwrap(), Shred::Removed(1), "len {}", s.len());
        } else {
            let t = fresh.tag(s).unwrap();
            assert_eq!(keys.shred_tag(&t).unwrap(), Shred::Removed(1));
        }
        let covered = shredded_ids(&*store);
        for (i, value, body) in &live {
            let got = read(&v, &subjects[*i], value);
            if *i <= k {
                assert_eq!(got, None, "subject {i} after shred {k}");
            } else {
                assert_eq!(got.as_ref(), Some(body), "subject {i} read after shred {k}");
            }
            assert_eq!(covered.contains(&dek_id(value)), *i <= k);
        }
        // Writes of every subject after the shred: never a covered DEK.
        for s2 in &subjects {
            let w = write(&v, s2, b"z");
            assert!(!covered.contains(&dek_id(&w)), "len {}", s2.len());
            assert_eq!(read(&v, s2, &w).as_deref(), Some(&b"z"[..]));
        }
    }
}

/// A small model: random writes, reads and shreds (by subject and by tag)
/// over 40 subjects of lengths 0..40 through an instance whose cache holds
/// 1..=3 DEKs (evicting all the time): no write after a shred uses a
/// covered DEK, every value of a live DEK reads as written, every value of
/// a shredded one as a delete.
#[test]
fn model_tiny_cache_many_subjects() {
    for capacity in 1..=3 {
        let kek = Keyset::generate();
        let store = Arc::new(MemoryKeyStore::new());
        let keys = Arc::new(
            SubjectKeys::create(kek, store.clone())
                .unwrap()
                .with_fence(Duration::from_secs(3600))
                .with_cache_capacity(capacity),
        );
        let v = values(&keys);
        let subjects: Vec<Vec<u8>> = (0..40usize)
            .map(|n| (0..n).map(|i| (i % 3) as u8).collect())
            .collect();
        let mut rng = 0x9e37_79b9_7f4a_7c15u64 ^ capacity as u64;
        let mut next = || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        let mut written: Vec<(usize, Vec<u8>, u64)> = Vec::new();
        let mut covered = HashSet::new();
        for step in 0..3000u64 {
            let i = (next() % 40) as usize;
            let s = &subjects[i];
            match next() % 10 {
                0..=6 => {
                    let w = write(&v, s, &step.to_le_bytes());
                    assert!(!covered.contains(&dek_id(&w)), "step {step} cap {capacity}");
                    written.push((i, w, step));
                }
                7 => {
                    if let Some((j, w, body)) =
                        written.get((next() as usize) % written.len().max(1))
                    {
                        let got = read(&v, &subjects[*j], w);
                        let want =
                            (!covered.contains(&dek_id(w))).then(|| body.to_le_bytes().to_vec());
                        assert_eq!(got, want, "step {step}");
                    }
                }
                8 => {
                    keys.shred(s).unwrap();
                    covered = shredded_ids(&*store);
                }
                _ => {
                    keys.shred_tag(&keys.tag(s).unwrap()).unwrap();
                    covered = shredded_ids(&*store);
                }
            }
        }
        for (j, w, body) in &written {
            let want = (!covered.contains(&dek_id(w))).then(|| body.to_le_bytes().to_vec());
            assert_eq!(read(&v, &subjects[*j], w), want);
        }
    }
}
