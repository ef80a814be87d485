//! A subject-key store ([`KeyStore`]) on a compacted Kafka topic, shared
//! by every instance of a service: [`KafkaKeyStore`], whose docs say how.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use super::changelog::{KafkaChangelog, Replayed};
use crate::error::Error;
use crate::shred::{DekLookup, KeyStore, Seal, Shred, ShredRecord, SubjectTag};
use crate::store::Changelog as _;

/// A shred marker's key suffix (no DEK id is this, but with probability
/// 2^-64 per DEK).
const MARKER: [u8; 8] = [0xff; 8];
/// A shred marker's value starts so; the shred's evidence follows (the
/// DEK ids it covers, sealed under the KEK: `shred::covered_ids`).
const SHREDDED: &[u8] = b"shredded";
/// A record of a shred sealed again (a KEK rotation's rewrap) is keyed
/// `subject tag | 0xff x 8 | the sealing KEK key's id (4)` (28 bytes: one
/// record per KEK key, so compaction never lets a piece sealed under an
/// older key replace one under a newer), with the evidence as its value;
/// unlike a marker it kills nothing.
const RESEAL_KEY_LEN: usize = 28;

/// A live DEK record: its id, the offset it was first written at (a
/// record wrapped again keeps it), and its bytes.
struct DekRecord {
    id: [u8; 8],
    first: u64,
    record: Box<[u8]>,
}

/// A subject's live DEK records: nearly always one, kept inline (a view of
/// 10^6 subjects holds one allocation per subject, its record, not two).
enum Deks {
    One(DekRecord),
    Many(Vec<DekRecord>),
}

impl Deks {
    fn as_slice(&self) -> &[DekRecord] {
        match self {
            Deks::One(d) => std::slice::from_ref(d),
            Deks::Many(v) => v,
        }
    }

    fn find_mut(&mut self, id: &[u8; 8]) -> Option<&mut DekRecord> {
        match self {
            Deks::One(d) => Some(d).filter(|d| d.id == *id),
            Deks::Many(v) => v.iter_mut().find(|d| d.id == *id),
        }
    }

    fn push(&mut self, d: DekRecord) {
        match self {
            Deks::Many(v) => v.push(d),
            Deks::One(_) => {
                let old = std::mem::replace(self, Deks::Many(Vec::with_capacity(2)));
                if let (Deks::One(first), Deks::Many(v)) = (old, self) {
                    v.extend([first, d]);
                }
            }
        }
    }

    /// Removes DEK `id`; whether none is left.
    fn remove(&mut self, id: &[u8; 8]) -> bool {
        match self {
            Deks::One(d) => d.id == *id,
            Deks::Many(v) => {
                v.retain(|d| d.id != *id);
                v.is_empty()
            }
        }
    }
}

/// What a subject's shreds covered: the DEK ids its markers named or
/// covered by offset (dead wherever written again), and each piece of
/// evidence the topic holds for it (markers' and reseals', distinct, the
/// newest [`PIECES`]): a reader checks them under the KEK, so an old or
/// replayed piece never hides a newer one.
#[derive(Default)]
struct Covered {
    ids: Vec<[u8; 8]>,
    pieces: Vec<Box<[u8]>>,
}

/// Pieces of evidence kept per subject (a subject shredded, written again
/// and shredded again keeps its markers' newest, each naming all).
const PIECES: usize = 8;

impl Covered {
    fn add_piece(&mut self, evidence: &[u8]) {
        if self.pieces.iter().any(|p| **p == *evidence) {
            return;
        }
        if self.pieces.len() >= PIECES {
            self.pieces.remove(0);
        }
        self.pieces.push(evidence.into());
    }

    fn is_empty(&self) -> bool {
        self.ids.is_empty() && self.pieces.is_empty()
    }

    fn names(&self, id: &[u8; 8]) -> bool {
        self.ids.contains(id)
            || self
                .pieces
                .iter()
                .any(|p| crate::shred::covered_ids(p).is_some_and(|ids| ids.contains(id)))
    }
}

/// The live DEK records of each subject, the offset to read from next, and
/// when the view was last read to the end.
#[derive(Default)]
struct View {
    read_at: Option<Instant>,
    next: u64,
    deks: HashMap<SubjectTag, Deks>,
    /// The DEK ids each subject's shreds covered (named by a marker, or
    /// below one), and the latest evidence of them (what lets a value
    /// read as a delete, once the KEK opens it).
    shredded: HashMap<SubjectTag, Covered>,
    /// A test's control: the rule before, where a marker covers only the
    /// records below it (a DEK written again after it is live).
    offsets_only: bool,
}

impl View {
    fn of(&self, tag: &SubjectTag) -> &[DekRecord] {
        self.deks.get(tag).map_or(&[], Deks::as_slice)
    }

    /// The live record written first.
    fn current(&self, tag: &SubjectTag) -> Option<&DekRecord> {
        self.of(tag).iter().min_by_key(|d| d.first)
    }

    fn ids(&self, tag: &SubjectTag) -> Vec<[u8; 8]> {
        self.of(tag).iter().map(|d| d.id).collect()
    }

    fn shredded(&self, tag: &SubjectTag) -> &[[u8; 8]] {
        self.shredded.get(tag).map_or(&[], |c| c.ids.as_slice())
    }

    /// What the view knows of `tag`'s DEK `id`.
    fn lookup(&self, tag: &SubjectTag, id: &[u8; 8]) -> DekLookup {
        if let Some(d) = self.of(tag).iter().find(|d| d.id == *id) {
            DekLookup::Found(d.record.to_vec())
        } else if let Some(c) = self.shredded.get(tag).filter(|c| c.names(id)) {
            DekLookup::Shredded(c.pieces.iter().map(|p| p.to_vec()).collect())
        } else {
            DekLookup::Unknown
        }
    }

    /// Records a shred's marker: the ids its `evidence` names and every
    /// DEK record of `tag` the view holds (written before it) are covered,
    /// and those records are dead.
    fn mark(&mut self, tag: SubjectTag, evidence: &[u8]) {
        let Some(named) = crate::shred::covered_ids(evidence) else {
            return; // not evidence: no marker
        };
        let mut covered = self.shredded.remove(&tag).unwrap_or_default();
        let live: Vec<[u8; 8]> = self
            .deks
            .remove(&tag)
            .map(|d| d.as_slice().iter().map(|d| d.id).collect())
            .unwrap_or_default();
        for id in named.into_iter().chain(live) {
            if !covered.ids.contains(&id) {
                covered.ids.push(id);
            }
        }
        covered.add_piece(evidence);
        // A marker that covers nothing (a subject that had no key) is no
        // record of a shred.
        if !covered.ids.is_empty() {
            self.shredded.insert(tag, covered);
        }
    }

    /// A shred's evidence sealed again: one more piece, kept whether or
    /// not a marker came before it (compaction may have put the marker
    /// after it); it kills nothing.
    fn resealed(&mut self, tag: SubjectTag, evidence: &[u8]) {
        if crate::shred::covered_ids(evidence).is_none() {
            return;
        }
        let covered = self.shredded.entry(tag).or_default();
        covered.add_piece(evidence);
        if covered.is_empty() {
            self.shredded.remove(&tag);
        }
    }

    fn apply(&mut self, offset: u64, key: &[u8], value: Option<&[u8]>) {
        if key.len() == RESEAL_KEY_LEN && key.get(16..24) == Some(&MARKER[..]) {
            if let (Ok(tag), Some(evidence)) = (<SubjectTag>::try_from(&key[..16]), value) {
                // No subject has the naming key's tag.
                if tag != [0xff; 16] {
                    self.resealed(tag, evidence);
                }
            }
            return;
        }
        let (Some(tag), Some(id), 24) = (
            key.get(..16).and_then(|t| <SubjectTag>::try_from(t).ok()),
            key.get(16..24).and_then(|t| <[u8; 8]>::try_from(t).ok()),
            key.len(),
        ) else {
            return; // not a record of this store's
        };
        match (id, value) {
            // No subject has the naming key's tag: no marker there is a
            // shred's.
            (MARKER, _) if tag == [0xff; 16] => {}
            // A shred: every DEK written before it is dead, and every DEK
            // it names. A value that is not a marker's is no shred.
            (MARKER, Some(marker)) => {
                if let Some(evidence) = marker.strip_prefix(SHREDDED) {
                    self.mark(tag, evidence);
                }
            }
            (MARKER, None) => {}
            // A DEK a shred covered, written again (a rewrap that raced
            // the shred): dead.
            (_, Some(_)) if !self.offsets_only && self.shredded(&tag).contains(&id) => {}
            (_, Some(record)) => {
                let new = DekRecord {
                    id,
                    first: offset,
                    record: record.into(),
                };
                match self.deks.get_mut(&tag) {
                    None => {
                        self.deks.insert(tag, Deks::One(new));
                    }
                    Some(deks) => match deks.find_mut(&id) {
                        // Wrapped again: the DEK keeps its first offset.
                        Some(d) => d.record = new.record,
                        None => deks.push(new),
                    },
                }
            }
            (_, None) => {
                if self.deks.get_mut(&tag).is_some_and(|d| d.remove(&id)) {
                    self.deks.remove(&tag);
                }
            }
        }
    }
}

/// A [`KeyStore`] on a compacted Kafka topic (one partition), shared by
/// several instances.
///
/// Each DEK is a record of its own, keyed `subject tag (16) | DEK id (8)`,
/// so that compaction keeps every DEK a subject has. Two instances may make
/// a subject's first DEK at once: each reads the topic past its own record
/// before it uses a DEK and takes the earliest, by offset, so no value is
/// ever written under a later one, which its maker then withdraws (a
/// tombstone). A maker killed between its record and that tombstone
/// leaves a DEK no value uses; a shred of the subject removes it with the
/// rest. A shred writes a tombstone for each DEK
/// it knows, then a **shred marker** (key `subject tag | 0xff x 8`, value
/// `shredded` and the DEK ids it covers, 8 bytes each): a DEK record below
/// the marker's offset is dead, even one a racing instance wrote that the
/// shred did not see, and so is a record of a DEK id a marker names,
/// wherever it is (a rewrap that wrote it again after the shred). The
/// marker is the record of the shred, the evidence that lets a value read
/// as a delete: it names every DEK id the subject's shreds covered, so it
/// is evidence still after compaction dropped the DEK records and their
/// tombstones, and after a later shred's marker replaced it. Every write
/// follows the crate's own rule: a delete is a tombstone (a null value),
/// never a value.
///
/// Each instance keeps a view of the topic, read once from its beginning,
/// then from where it last ended to the end whenever the view is older than
/// its fence ([`KafkaKeyStore::with_fence`], default 5 s) and around each
/// write; a read that cannot refresh a stale view fails, so a subject-key
/// value is refused rather than served under a DEK that may have been
/// shredded. Reading on from where it ended holds as long as the view is
/// not behind by more than the topic's `delete.retention.ms` (a day by
/// default; the cleaner may drop a tombstone after it): a shred is never
/// missed even then, as its marker is a value that compaction keeps.
pub struct KafkaKeyStore {
    log: Mutex<KafkaChangelog>,
    view: Mutex<View>,
    /// The topic's reader, kept between reads.
    reader: Mutex<Option<BaseConsumer>>,
    fence: Duration,
    /// A test's control: a maker that lost a race keeps its DEK record.
    no_withdraw: bool,
    /// A test's control: a marker covers only the records below it, and a
    /// rewrap does not check for a shred after its write.
    offsets_only: bool,
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
            reader: Mutex::new(None),
            fence: Duration::from_secs(5),
            no_withdraw: false,
            offsets_only: false,
        }
    }

    /// A negative control for tests: the rule before, where a shred marker
    /// covers only the DEK records below its offset (a rewrap's record
    /// written after the marker is live again), and a rewrap does not
    /// check for a shred after its write.
    #[doc(hidden)]
    #[must_use]
    pub fn with_markers_covering_offsets_only(self) -> Self {
        KafkaKeyStore {
            offsets_only: true,
            view: Mutex::new(View {
                offsets_only: true,
                ..View::default()
            }),
            ..self
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

    /// A negative control for tests: a maker that lost the race for a
    /// subject's first DEK leaves its record on the topic (the subject
    /// then has two DEKs).
    #[doc(hidden)]
    #[must_use]
    pub fn without_withdrawing_lost_deks(self) -> Self {
        KafkaKeyStore {
            no_withdraw: true,
            ..self
        }
    }

    /// Reads the topic from where the view last ended to its end, and
    /// applies what it read (the whole topic again only if its partition
    /// restarted: a topic created again).
    fn refresh(&self) -> Result<MutexGuard<'_, View>, Error> {
        let started = Instant::now();
        let from = lock(&self.view).next;
        if from == 0 {
            return self.read_whole(started, false);
        }
        let mut read = Vec::new();
        let ended = self.read(from, &mut |r| {
            read.push(r);
            Ok(())
        })?;
        if ended.restarted {
            return self.read_whole(started, true);
        }
        let mut view = lock(&self.view);
        // Another refresh may have applied some of these already.
        let applied = view.next;
        for r in read.iter().filter(|r| r.offset >= applied) {
            view.apply(r.offset, &r.key, r.value.as_deref());
        }
        view.next = view.next.max(ended.next);
        if view.read_at.is_none_or(|at| at < started) {
            view.read_at = Some(started);
        }
        Ok(view)
    }

    /// Reads the whole topic into a new view, applying each record as it
    /// arrives (a first read of a large topic is not held twice in memory),
    /// and keeps it: always after a `restart`, else unless another read
    /// went further meanwhile.
    fn read_whole(&self, started: Instant, restart: bool) -> Result<MutexGuard<'_, View>, Error> {
        let mut whole = View {
            offsets_only: self.offsets_only,
            ..View::default()
        };
        let ended = self.read(0, &mut |r| {
            whole.apply(r.offset, &r.key, r.value.as_deref());
            Ok(())
        })?;
        whole.next = ended.next;
        whole.read_at = Some(started);
        let mut view = lock(&self.view);
        if restart || view.next <= whole.next {
            *view = whole;
        }
        Ok(view)
    }

    /// Reads the topic from `from` to its end with the kept reader (made
    /// on first use; made again after a failed read).
    fn read(
        &self,
        from: u64,
        apply: &mut dyn FnMut(crate::store::Record) -> Result<(), Error>,
    ) -> Result<Replayed, Error> {
        let log = lock(&self.log);
        let mut reader = lock(&self.reader);
        if reader.is_none() {
            *reader = Some(log.reader()?);
        }
        let Some(consumer) = reader.as_ref() else {
            return Err(Error::store("the key-store topic's reader", "not made"));
        };
        let ended = log.replay_with(consumer, from, apply);
        if ended.is_err() {
            *reader = None;
        }
        ended
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
        Ok(self.fresh()?.current(tag).map(|d| d.record.to_vec()))
    }

    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        if let Some(d) = self.refresh()?.current(tag) {
            return Ok(d.record.to_vec());
        }
        let id = record
            .get(..8)
            .ok_or_else(|| Error::store("a key record shorter than its id", "too short"))?;
        self.write(&[(key(tag, id), Some(record))])?;
        // Another instance may have made one first: the earliest is the
        // subject's, for everyone, and no value was written under a later
        // one (each maker reads the topic past its own record before it
        // uses a DEK): a later one of ours is withdrawn.
        let (current, ours_lost) = {
            let view = self.refresh()?;
            let current = view
                .current(tag)
                .ok_or_else(|| {
                    Error::store(
                        "the record just written is not live on the key-store topic: a shred of the same subject (or a withdrawal) landed at once; write again",
                        "shredded while made",
                    )
                })?;
            let lost = current.id[..] != *id && view.ids(tag).iter().any(|i| i[..] == *id);
            (current.record.to_vec(), lost)
        };
        if ours_lost && !self.no_withdraw {
            self.write(&[(key(tag, id), None)])?;
            drop(self.refresh()?);
        }
        Ok(current)
    }

    fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error> {
        let (live, shredded) = {
            let view = self.refresh()?;
            (view.ids(tag), view.shredded(tag).to_vec())
        };
        // Nothing to remove: no marker (one sealed by an instance on an
        // older KEK key would, after compaction, replace a marker whose
        // evidence a rewrap has sealed again).
        if live.is_empty() {
            return Ok(if shredded.is_empty() {
                Shred::NoKey
            } else {
                Shred::AlreadyShredded
            });
        }
        // The marker first, naming every DEK the subject's shreds covered
        // (so a shred cut short after it is whole: the records below it are
        // dead and named), then a tombstone for each (those shredded
        // before too: a rewrap may have written one again).
        let ids: Vec<[u8; 8]> = shredded
            .iter()
            .chain(live.iter().filter(|id| !shredded.contains(id)))
            .copied()
            .collect();
        let mut marker = SHREDDED.to_vec();
        marker.extend_from_slice(&seal(&ids)?);
        let mut records: Vec<(Vec<u8>, Option<&[u8]>)> = vec![(key(tag, &MARKER), Some(&marker))];
        records.extend(ids.iter().map(|id| (key(tag, id), None)));
        self.write(&records)?;
        drop(self.refresh()?);
        Ok(match (live.len(), shredded.is_empty()) {
            (0, true) => Shred::NoKey,
            (0, false) => Shred::AlreadyShredded,
            (n, _) => Shred::Removed(n),
        })
    }

    /// Each subject's records in the order they were first written, so
    /// that a rewrap, which writes them again in this order, keeps which
    /// one is current after compaction.
    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        let view = self.refresh()?;
        let mut out = Vec::with_capacity(view.deks.len());
        for (tag, deks) in &view.deks {
            let mut deks: Vec<&DekRecord> = deks.as_slice().iter().collect();
            deks.sort_by_key(|d| d.first);
            out.extend(deks.into_iter().map(|d| (*tag, d.record.to_vec())));
        }
        Ok(out)
    }

    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        let id = record
            .get(..8)
            .ok_or_else(|| Error::store("a key record shorter than its id", "too short"))?;
        let known = self.refresh()?.ids(tag).iter().any(|k| k[..] == *id);
        if !known {
            return Ok(());
        }
        self.write(&[(key(tag, id), Some(record))])?;
        // A shred whose marker landed between the read and the write
        // covers this DEK: the record written again is dead for every
        // reader (its id is named by the marker), and its bytes go too.
        let covered = self.refresh()?.shredded(tag).iter().any(|k| k[..] == *id);
        if covered && !self.offsets_only {
            self.write(&[(key(tag, id), None)])?;
        }
        Ok(())
    }

    fn all_records(&self, tag: &SubjectTag) -> Result<Vec<Vec<u8>>, Error> {
        let view = self.fresh()?;
        let mut deks: Vec<&DekRecord> = view.of(tag).iter().collect();
        deks.sort_by_key(|d| d.first);
        Ok(deks.into_iter().map(|d| d.record.to_vec()).collect())
    }

    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        let view = self.refresh()?;
        Ok(view
            .shredded
            .iter()
            .map(|(t, c)| (*t, c.pieces.iter().map(|p| p.to_vec()).collect()))
            .collect())
    }

    /// Writes `evidence` as a record of its own (`tag | 0xff x 8 | KEK key
    /// id`),
    /// not as a marker: a marker written again would cover the subject's
    /// DEKs made since its shred. It adds a piece of evidence, and hides
    /// none (a shred since the rewrap read the store keeps its own).
    fn reseal(&self, tag: &SubjectTag, _was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error> {
        if self.refresh()?.shredded.contains_key(tag) {
            let kid = crate::shred::sealing_key(evidence).unwrap_or([0; 4]);
            let mut k = key(tag, &MARKER);
            k.extend_from_slice(&kid);
            self.write(&[(k, Some(evidence))])?;
        }
        Ok(())
    }

    /// Unknown in a fresh view: read again once (another instance may
    /// have made the DEK since), then it is unknown.
    fn find(&self, tag: &SubjectTag, dek_id: &[u8; 8]) -> Result<DekLookup, Error> {
        let found = self.fresh()?.lookup(tag, dek_id);
        if found != DekLookup::Unknown {
            return Ok(found);
        }
        Ok(self.refresh()?.lookup(tag, dek_id))
    }
}
