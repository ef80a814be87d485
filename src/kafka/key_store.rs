//! A subject-key store ([`KeyStore`]) on a compacted Kafka topic, shared
//! by every instance of a service: [`KafkaKeyStore`].
//!
//! Each DEK is a record of its own, keyed `subject tag (16) | DEK id (8)`,
//! so that compaction keeps every DEK a subject has (two instances may make
//! a subject's first DEK at once: each keeps the earliest, by offset, for
//! writing, and reads with any). A shred writes a tombstone for each DEK
//! it knows, then a **shred marker** (key `subject tag | 0xff x 8`): a DEK
//! record below the marker's offset is dead, even one a racing instance
//! wrote that the shred did not see. Every write follows the crate's own
//! rule: a delete is a tombstone (a null value), never a value.
//!
//! Each instance keeps a view of the topic, read from its beginning to its
//! end, and reads it again when the view is older than its fence
//! ([`KafkaKeyStore::with_fence`], default 5 s); a read that cannot refresh
//! a stale view fails, so a subject-key value is refused rather than served
//! under a DEK that may have been shredded.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::changelog::KafkaChangelog;
use crate::error::Error;
use crate::shred::{KeyStore, SubjectTag};
use crate::store::Changelog as _;

/// A shred marker's key suffix (no DEK id is this, but with probability
/// 2^-64 per DEK).
const MARKER: [u8; 8] = [0xff; 8];
/// A shred marker's value.
const SHREDDED: &[u8] = b"shredded";

/// A subject's live DEK records: by DEK id, with their offset.
type Deks = BTreeMap<[u8; 8], (u64, Vec<u8>)>;

/// The live DEK records of each subject, as read when.
#[derive(Default)]
struct View {
    read_at: Option<Instant>,
    deks: HashMap<SubjectTag, Deks>,
}

impl View {
    /// The live record written first.
    fn current(&self, tag: &SubjectTag) -> Option<Vec<u8>> {
        self.deks
            .get(tag)?
            .values()
            .min_by_key(|(offset, _)| *offset)
            .map(|(_, r)| r.clone())
    }

    fn apply(&mut self, offset: u64, key: &[u8], value: Option<&[u8]>) {
        let (Some(tag), Some(id)) = (
            key.get(..16).and_then(|t| <SubjectTag>::try_from(t).ok()),
            key.get(16..24).and_then(|t| <[u8; 8]>::try_from(t).ok()),
        ) else {
            return; // not a record of this store's
        };
        match (id == MARKER, value) {
            // A shred: every DEK written before it is dead.
            (true, Some(_)) => {
                self.deks.remove(&tag);
            }
            (true, None) => {}
            (false, Some(record)) => {
                // A record wrapped again keeps its DEK's first offset.
                let deks = self.deks.entry(tag).or_default();
                let first = deks.get(&id).map_or(offset, |(o, _)| *o);
                deks.insert(id, (first, record.to_vec()));
            }
            (false, None) => {
                if let Some(d) = self.deks.get_mut(&tag) {
                    d.remove(&id);
                    if d.is_empty() {
                        self.deks.remove(&tag);
                    }
                }
            }
        }
    }
}

/// A [`KeyStore`] on a compacted Kafka topic (one partition), shared by
/// several instances: see the [module](self).
pub struct KafkaKeyStore {
    log: Mutex<KafkaChangelog>,
    view: Mutex<View>,
    fence: Duration,
}

impl std::fmt::Debug for KafkaKeyStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaKeyStore")
            .field("fence", &self.fence)
            .finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl KafkaKeyStore {
    /// The key store on `log`'s topic (a compacted topic of its own: see
    /// [`KafkaChangelog::open`], which creates it).
    pub fn new(log: KafkaChangelog) -> Self {
        KafkaKeyStore {
            log: Mutex::new(log),
            view: Mutex::new(View::default()),
            fence: Duration::from_secs(5),
        }
    }

    /// Reads the topic again when the view is older than `bound` (default
    /// 5 s): a shred through another instance is seen here within it (plus
    /// the fence of the [`SubjectKeys`](crate::shred::SubjectKeys) on top).
    #[must_use]
    pub fn with_fence(self, bound: Duration) -> Self {
        KafkaKeyStore {
            fence: bound,
            ..self
        }
    }

    /// Reads the whole topic into a new view.
    fn refresh(&self) -> Result<MutexGuard<'_, View>, Error> {
        let mut fresh = View::default();
        let started = Instant::now();
        lock(&self.log).replay(&mut |r| {
            fresh.apply(r.offset, &r.key, r.value.as_deref());
            Ok(())
        })?;
        fresh.read_at = Some(started);
        let mut view = lock(&self.view);
        *view = fresh;
        Ok(view)
    }

    /// The view, read again if it is older than the fence.
    fn fresh(&self) -> Result<MutexGuard<'_, View>, Error> {
        {
            let view = lock(&self.view);
            if view.read_at.is_some_and(|at| at.elapsed() <= self.fence) {
                return Ok(view);
            }
        }
        self.refresh()
    }

    /// Appends records and flushes them: durable when it returns.
    fn write(&self, records: &[(Vec<u8>, Option<&[u8]>)]) -> Result<(), Error> {
        let mut log = lock(&self.log);
        for (key, value) in records {
            log.append(key, *value)?;
        }
        log.flush()
    }
}

fn key(tag: &SubjectTag, id: &[u8]) -> Vec<u8> {
    let mut k = tag.to_vec();
    k.extend_from_slice(id);
    k
}

impl KeyStore for KafkaKeyStore {
    fn get(&self, tag: &SubjectTag) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.fresh()?.current(tag))
    }

    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        if let Some(r) = self.refresh()?.current(tag) {
            return Ok(r);
        }
        let id = record
            .get(..8)
            .ok_or_else(|| Error::store("a key record shorter than its id", "too short"))?;
        self.write(&[(key(tag, id), Some(record))])?;
        // Another instance may have made one first: the earliest is the
        // subject's, for everyone.
        self.refresh()?
            .current(tag)
            .ok_or_else(|| Error::store("a key record written is not on the topic", "lost"))
    }

    fn remove(&self, tag: &SubjectTag) -> Result<(), Error> {
        let ids: Vec<[u8; 8]> = self
            .refresh()?
            .deks
            .get(tag)
            .map(|d| d.keys().copied().collect())
            .unwrap_or_default();
        let mut records: Vec<(Vec<u8>, Option<&[u8]>)> =
            ids.iter().map(|id| (key(tag, id), None)).collect();
        records.push((key(tag, &MARKER), Some(SHREDDED)));
        self.write(&records)?;
        self.refresh().map(|_| ())
    }

    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        Ok(self
            .refresh()?
            .deks
            .iter()
            .flat_map(|(tag, deks)| deks.values().map(|(_, r)| (*tag, r.clone())))
            .collect())
    }

    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        let id = record
            .get(..8)
            .ok_or_else(|| Error::store("a key record shorter than its id", "too short"))?;
        let known = self
            .refresh()?
            .deks
            .get(tag)
            .is_some_and(|d| d.keys().any(|k| &k[..] == id));
        if known {
            self.write(&[(key(tag, id), Some(record))])?;
        }
        Ok(())
    }

    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<Option<Vec<u8>>, Error> {
        Ok(self
            .fresh()?
            .deks
            .get(tag)
            .and_then(|d| d.get(dek_id))
            .map(|(_, r)| r.clone()))
    }
}
