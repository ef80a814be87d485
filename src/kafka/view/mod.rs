//! The view a [`KafkaKeyStore`](super::KafkaKeyStore) keeps of its topic:
//! each subject's live DEK records and what its shreds covered, and the
//! offset to read on from. One rule ([`apply_record`]) decides what a
//! record does to a view, over either of two places to keep it:
//! [`MemoryView`] (the process's memory, read from the topic's start at
//! every start) and [`DiskView`] (a redb file, fed from the topic, its
//! offsets committed in the same transaction as its changes, read on from
//! them at a restart).
// Without redb there is no view on disk, and nothing samples the topic.
#![cfg_attr(not(feature = "redb"), allow(dead_code))]

use std::collections::HashMap;

use crate::error::Error;
use crate::shred::{DekLookup, ShredRecord, SubjectTag};
use crate::store::Record;

/// A shred marker's key suffix (no DEK id is this, but with probability
/// 2^-64 per DEK).
pub(super) const MARKER: [u8; 8] = [0xff; 8];
/// A shred marker's value starts so; the shred's evidence follows (the
/// DEK ids it covers, sealed under the KEK: `shred::covered_ids`).
pub(super) const SHREDDED: &[u8] = b"shredded";
/// A record of a shred sealed again (a KEK rotation's rewrap) is keyed
/// `subject tag | 0xff x 8 | the sealing KEK key's id (4)` (28 bytes: one
/// record per KEK key, so compaction never lets a piece sealed under an
/// older key replace one under a newer), with the evidence as its value;
/// unlike a marker it kills nothing.
const RESEAL_KEY_LEN: usize = 28;

/// Pieces of evidence kept per subject (a subject shredded, written again
/// and shredded again keeps its markers' newest, each naming all).
const PIECES: usize = 8;

/// A live DEK record: its id, the offset it was first written at (a
/// record wrapped again keeps it), and its bytes.
#[derive(Clone)]
pub(super) struct Dek {
    pub(super) id: [u8; 8],
    pub(super) first: u64,
    pub(super) record: Vec<u8>,
}

/// What a subject's shreds covered: the DEK ids its markers named or
/// covered by offset (dead wherever written again), and each piece of
/// evidence the topic holds for it (markers' and reseals', distinct, the
/// newest [`PIECES`]): a reader checks them under the KEK, so an old or
/// replayed piece never hides a newer one.
#[derive(Default, Clone, PartialEq, Eq)]
pub(super) struct Covered {
    pub(super) ids: Vec<[u8; 8]>,
    pub(super) pieces: Vec<Box<[u8]>>,
}

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

    /// `n ids (u32be) | ids | per piece: len (u32be) | bytes`.
    fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&(self.ids.len() as u32).to_be_bytes());
        for id in &self.ids {
            out.extend_from_slice(id);
        }
        for p in &self.pieces {
            out.extend_from_slice(&(p.len() as u32).to_be_bytes());
            out.extend_from_slice(p);
        }
        out
    }

    fn decode(mut bytes: &[u8]) -> Option<Covered> {
        let (n, rest) = bytes.split_first_chunk::<4>()?;
        let n = usize::try_from(u32::from_be_bytes(*n)).ok()?;
        let ids = rest.get(..n.checked_mul(8)?)?;
        let mut covered = Covered {
            ids: ids
                .chunks_exact(8)
                .filter_map(|c| c.try_into().ok())
                .collect(),
            pieces: Vec::new(),
        };
        bytes = &rest[ids.len()..];
        while !bytes.is_empty() {
            let (len, rest) = bytes.split_first_chunk::<4>()?;
            let len = usize::try_from(u32::from_be_bytes(*len)).ok()?;
            covered.pieces.push(rest.get(..len)?.into());
            bytes = &rest[len..];
        }
        Some(covered)
    }
}

/// Where the rule of [`apply_record`] reads and writes a subject's state.
trait Cells {
    /// The subject's live DEK records, in the order first written.
    fn deks(&mut self, tag: &SubjectTag) -> Result<Vec<Dek>, Error>;
    /// Sets them (none: the subject has no DEK).
    fn set_deks(&mut self, tag: &SubjectTag, deks: Vec<Dek>) -> Result<(), Error>;
    /// What the subject's shreds covered, if anything.
    fn covered(&mut self, tag: &SubjectTag) -> Result<Option<Covered>, Error>;
    /// Sets it (`None`: no record of a shred).
    fn set_covered(&mut self, tag: &SubjectTag, covered: Option<Covered>) -> Result<(), Error>;
}

/// Records a shred's marker: the ids its `evidence` names and every DEK
/// record of `tag` the view holds (written before it) are covered, and
/// those records are dead.
fn mark(c: &mut dyn Cells, tag: &SubjectTag, evidence: &[u8]) -> Result<(), Error> {
    let Some(named) = crate::shred::covered_ids(evidence) else {
        return Ok(()); // not evidence: no marker
    };
    let mut covered = c.covered(tag)?.unwrap_or_default();
    let live: Vec<[u8; 8]> = c.deks(tag)?.iter().map(|d| d.id).collect();
    c.set_deks(tag, Vec::new())?;
    for id in named.into_iter().chain(live) {
        if !covered.ids.contains(&id) {
            covered.ids.push(id);
        }
    }
    covered.add_piece(evidence);
    // A marker that covers nothing (a subject that had no key) is no
    // record of a shred.
    c.set_covered(tag, (!covered.ids.is_empty()).then_some(covered))
}

/// A shred's evidence sealed again: one more piece, kept whether or not a
/// marker came before it (compaction may have put the marker after it); it
/// kills nothing.
fn resealed(c: &mut dyn Cells, tag: &SubjectTag, evidence: &[u8]) -> Result<(), Error> {
    if crate::shred::covered_ids(evidence).is_none() {
        return Ok(());
    }
    let mut covered = c.covered(tag)?.unwrap_or_default();
    covered.add_piece(evidence);
    c.set_covered(tag, (!covered.is_empty()).then_some(covered))
}

/// What the record at `offset` does to a view: the one rule both views
/// follow. `offsets_only`: a test's control, the rule before, where a
/// marker covers only the records below it (a DEK written again after it
/// is live).
fn apply_record(
    c: &mut dyn Cells,
    offsets_only: bool,
    offset: u64,
    key: &[u8],
    value: Option<&[u8]>,
) -> Result<(), Error> {
    if key.len() == RESEAL_KEY_LEN && key.get(16..24) == Some(&MARKER[..]) {
        if let (Ok(tag), Some(evidence)) = (<SubjectTag>::try_from(&key[..16]), value) {
            // No subject has the naming key's tag.
            if tag != [0xff; 16] {
                resealed(c, &tag, evidence)?;
            }
        }
        return Ok(());
    }
    let (Some(tag), Some(id), 24) = (
        key.get(..16).and_then(|t| <SubjectTag>::try_from(t).ok()),
        key.get(16..24).and_then(|t| <[u8; 8]>::try_from(t).ok()),
        key.len(),
    ) else {
        return Ok(()); // not a record of this store's
    };
    match (id, value) {
        // No subject has the naming key's tag: no marker there is a
        // shred's.
        (MARKER, _) if tag == [0xff; 16] => Ok(()),
        // A shred: every DEK written before it is dead, and every DEK it
        // names. A value that is not a marker's is no shred.
        (MARKER, Some(marker)) => match marker.strip_prefix(SHREDDED) {
            Some(evidence) => mark(c, &tag, evidence),
            None => Ok(()),
        },
        (MARKER, None) => Ok(()),
        (_, Some(record)) => {
            // A DEK a shred covered, written again (a rewrap that raced
            // the shred): dead.
            if !offsets_only && c.covered(&tag)?.is_some_and(|cv| cv.ids.contains(&id)) {
                return Ok(());
            }
            let mut deks = c.deks(&tag)?;
            match deks.iter_mut().find(|d| d.id == id) {
                // Wrapped again: the DEK keeps its first offset.
                Some(d) => d.record = record.to_vec(),
                None => deks.push(Dek {
                    id,
                    first: offset,
                    record: record.to_vec(),
                }),
            }
            c.set_deks(&tag, deks)
        }
        (_, None) => {
            let mut deks = c.deks(&tag)?;
            let before = deks.len();
            deks.retain(|d| d.id != id);
            if deks.len() == before {
                return Ok(());
            }
            c.set_deks(&tag, deks)
        }
    }
}

/// A view of the key-store topic: what [`apply_record`] made of the
/// records read so far, and where to read on.
pub(super) trait SubjectView: Send {
    /// The offset to read from next (0: nothing read).
    fn next(&self) -> u64;

    /// Applies `records` (those at or above [`next`](Self::next), in
    /// offset order) and sets the offset to read from next to `next`, in
    /// one step: a view never holds a record's change without its offset,
    /// or the offset without the change.
    fn apply(&mut self, records: &[Record], next: u64, offsets_only: bool) -> Result<(), Error>;

    /// Forgets everything: the view of an empty topic.
    fn clear(&mut self) -> Result<(), Error>;

    /// `tag`'s live DEK records, in the order first written.
    fn deks(&self, tag: &SubjectTag) -> Result<Vec<Dek>, Error>;

    /// What `tag`'s shreds covered.
    fn covered(&self, tag: &SubjectTag) -> Result<Option<Covered>, Error>;

    /// Every live DEK record, each subject's in the order first written.
    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error>;

    /// Every subject with a record of a shred, and its pieces of evidence.
    fn shreds(&self) -> Result<Vec<ShredRecord>, Error>;

    /// What identifies the topic this view was read from (a view on disk
    /// that holds records); checked before the view is read on.
    fn identity(&self) -> Option<Identity> {
        None
    }

    /// Records the id the broker gives the topic (a view on disk keeps
    /// it, and is rebuilt when the topic answers another).
    fn set_topic_id(&mut self, _id: [u8; 16]) -> Result<(), Error> {
        Ok(())
    }

    /// Whether the view outlives the process (on disk), and so keeps its
    /// topic's id.
    fn keeps_topic_id(&self) -> bool {
        false
    }

    /// The view on disk, for a test's hooks.
    #[cfg(feature = "redb")]
    fn as_disk(&mut self) -> Option<&mut DiskView> {
        None
    }

    /// The live record written first.
    fn current(&self, tag: &SubjectTag) -> Result<Option<Dek>, Error> {
        Ok(self.deks(tag)?.into_iter().min_by_key(|d| d.first))
    }

    /// `tag`'s live DEK ids.
    fn ids(&self, tag: &SubjectTag) -> Result<Vec<[u8; 8]>, Error> {
        Ok(self.deks(tag)?.iter().map(|d| d.id).collect())
    }

    /// The DEK ids `tag`'s shreds covered.
    fn shredded(&self, tag: &SubjectTag) -> Result<Vec<[u8; 8]>, Error> {
        Ok(self.covered(tag)?.map(|c| c.ids).unwrap_or_default())
    }

    /// What the view knows of `tag`'s DEK `id`.
    fn lookup(&self, tag: &SubjectTag, id: &[u8; 8]) -> Result<DekLookup, Error> {
        if let Some(d) = self.deks(tag)?.into_iter().find(|d| d.id == *id) {
            return Ok(DekLookup::Found(d.record));
        }
        Ok(match self.covered(tag)?.filter(|c| c.names(id)) {
            Some(c) => DekLookup::Shredded(c.pieces.iter().map(|p| p.to_vec()).collect()),
            None => DekLookup::Unknown,
        })
    }
}

/// A live DEK record as the memory view keeps it.
struct Held {
    id: [u8; 8],
    first: u64,
    record: Box<[u8]>,
}

/// A subject's live DEK records: nearly always one, kept inline (a view of
/// 10^6 subjects holds one allocation per subject, its record, not two).
enum Deks {
    One(Held),
    Many(Vec<Held>),
}

impl Deks {
    fn as_slice(&self) -> &[Held] {
        match self {
            Deks::One(d) => std::slice::from_ref(d),
            Deks::Many(v) => v,
        }
    }
}

fn owned(d: &Held) -> Dek {
    Dek {
        id: d.id,
        first: d.first,
        record: d.record.to_vec(),
    }
}

fn held(d: Dek) -> Held {
    Held {
        id: d.id,
        first: d.first,
        record: d.record.into_boxed_slice(),
    }
}

/// The view in this process's memory (about 300 bytes a subject), read
/// from the topic's start by each process.
#[derive(Default)]
pub(super) struct MemoryView {
    next: u64,
    deks: HashMap<SubjectTag, Deks>,
    /// The DEK ids each subject's shreds covered (named by a marker, or
    /// below one), and the latest evidence of them (what lets a value read
    /// as a delete, once the KEK opens it).
    shredded: HashMap<SubjectTag, Covered>,
}

impl Cells for MemoryView {
    fn deks(&mut self, tag: &SubjectTag) -> Result<Vec<Dek>, Error> {
        SubjectView::deks(self, tag)
    }

    fn set_deks(&mut self, tag: &SubjectTag, deks: Vec<Dek>) -> Result<(), Error> {
        let mut deks: Vec<Held> = deks.into_iter().map(held).collect();
        match deks.len() {
            0 => {
                self.deks.remove(tag);
            }
            1 => {
                if let Some(d) = deks.pop() {
                    self.deks.insert(*tag, Deks::One(d));
                }
            }
            _ => {
                self.deks.insert(*tag, Deks::Many(deks));
            }
        }
        Ok(())
    }

    fn covered(&mut self, tag: &SubjectTag) -> Result<Option<Covered>, Error> {
        Ok(self.shredded.get(tag).cloned())
    }

    fn set_covered(&mut self, tag: &SubjectTag, covered: Option<Covered>) -> Result<(), Error> {
        match covered {
            Some(c) => self.shredded.insert(*tag, c),
            None => self.shredded.remove(tag),
        };
        Ok(())
    }
}

impl SubjectView for MemoryView {
    fn next(&self) -> u64 {
        self.next
    }

    fn apply(&mut self, records: &[Record], next: u64, offsets_only: bool) -> Result<(), Error> {
        let from = self.next;
        for r in records.iter().filter(|r| r.offset >= from) {
            apply_record(self, offsets_only, r.offset, &r.key, r.value.as_deref())?;
        }
        self.next = self.next.max(next);
        Ok(())
    }

    fn clear(&mut self) -> Result<(), Error> {
        *self = MemoryView::default();
        Ok(())
    }

    fn deks(&self, tag: &SubjectTag) -> Result<Vec<Dek>, Error> {
        Ok(self
            .deks
            .get(tag)
            .map_or(&[][..], Deks::as_slice)
            .iter()
            .map(owned)
            .collect())
    }

    fn covered(&self, tag: &SubjectTag) -> Result<Option<Covered>, Error> {
        Ok(self.shredded.get(tag).cloned())
    }

    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        let mut out = Vec::with_capacity(self.deks.len());
        for (tag, deks) in &self.deks {
            let mut deks: Vec<&Held> = deks.as_slice().iter().collect();
            deks.sort_by_key(|d| d.first);
            out.extend(deks.into_iter().map(|d| (*tag, d.record.to_vec())));
        }
        Ok(out)
    }

    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        Ok(self
            .shredded
            .iter()
            .map(|(t, c)| (*t, c.pieces.iter().map(|p| p.to_vec()).collect()))
            .collect())
    }

    /// Cheaper than the default: no copy of a record.
    fn ids(&self, tag: &SubjectTag) -> Result<Vec<[u8; 8]>, Error> {
        Ok(self
            .deks
            .get(tag)
            .map_or(&[][..], Deks::as_slice)
            .iter()
            .map(|d| d.id)
            .collect())
    }
}

/// A record as a view's identity keeps it.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Sample {
    pub(super) offset: u64,
    pub(super) key: Vec<u8>,
    pub(super) value: Option<Vec<u8>>,
}

impl Sample {
    fn of(r: &Record) -> Sample {
        Sample {
            offset: r.offset,
            key: r.key.clone(),
            value: r.value.clone(),
        }
    }

    pub(super) fn is(&self, r: &Record) -> bool {
        self.offset == r.offset && self.key == r.key && self.value == r.value
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.offset.to_be_bytes());
        out.extend_from_slice(&(self.key.len() as u32).to_be_bytes());
        out.extend_from_slice(&self.key);
        match &self.value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                out.extend_from_slice(&(v.len() as u32).to_be_bytes());
                out.extend_from_slice(v);
            }
        }
    }

    fn decode_from(bytes: &mut &[u8]) -> Option<Sample> {
        fn take<'a>(b: &mut &'a [u8], n: usize) -> Option<&'a [u8]> {
            let (head, rest) = (b.get(..n)?, b.get(n..)?);
            *b = rest;
            Some(head)
        }
        fn len(b: &mut &[u8]) -> Option<usize> {
            usize::try_from(u32::from_be_bytes(take(b, 4)?.try_into().ok()?)).ok()
        }
        let offset = u64::from_be_bytes(take(bytes, 8)?.try_into().ok()?);
        let n = len(bytes)?;
        let key = take(bytes, n)?.to_vec();
        let value = match take(bytes, 1)?[0] {
            0 => None,
            _ => {
                let n = len(bytes)?;
                Some(take(bytes, n)?.to_vec())
            }
        };
        Some(Sample { offset, key, value })
    }
}

/// Records sampled from the head of the topic, to tell it from another
/// topic of the same name later.
const HEAD: usize = 16;

/// What identifies the topic a view on disk was read from: its name and
/// partition, its id when the broker gave one (another each time a topic
/// of that name is made), its first records (offsets and bytes: a
/// key-store topic's records hold random DEK ids and wrapped keys, so
/// another topic, or the same name made again, has others), and the last
/// record applied.
#[derive(Clone, Default)]
pub(super) struct Identity {
    pub(super) topic: String,
    pub(super) partition: i32,
    /// The broker's id of the topic, when known.
    pub(super) topic_id: Option<[u8; 16]>,
    /// The first records applied (at most [`HEAD`]).
    pub(super) head: Vec<Sample>,
    /// The last record applied.
    pub(super) tail: Option<Sample>,
}

impl Identity {
    /// The highest offset of the head.
    pub(super) fn head_end(&self) -> Option<u64> {
        self.head.iter().map(|s| s.offset).max()
    }
}

#[cfg(feature = "redb")]
pub(super) use disk::DiskView;

/// The view in a redb file.
#[cfg(feature = "redb")]
mod disk;

#[cfg(all(test, feature = "redb"))]
mod tests {
    use super::*;

    /// A shred's evidence naming `ids` (any non-empty seal: the views do
    /// not open it).
    fn evidence(ids: &[[u8; 8]], seal: u8) -> Vec<u8> {
        let mut e = (ids.len() as u32).to_be_bytes().to_vec();
        for id in ids {
            e.extend_from_slice(id);
        }
        e.extend_from_slice(&[seal; 5]);
        e
    }

    fn key(tag: u8, id: [u8; 8]) -> Vec<u8> {
        let mut k = vec![tag; 16];
        k.extend_from_slice(&id);
        k
    }

    /// A random log over 3 subjects and 4 DEK ids: DEK records, their
    /// tombstones, markers, reseals, records of no store's.
    fn log(seed: u64, n: usize) -> Vec<Record> {
        let mut s = seed | 1;
        let mut rnd = |m: u64| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s % m
        };
        let mut out = Vec::new();
        for offset in 0..n as u64 {
            let tag = rnd(3) as u8;
            let id = [rnd(4) as u8; 8];
            let (key, value) = match rnd(10) {
                0..=3 => (key(tag, id), Some(vec![id[0], rnd(256) as u8])),
                4 | 5 => (key(tag, id), None),
                6 => {
                    let named: Vec<[u8; 8]> = (0..rnd(3)).map(|_| [rnd(4) as u8; 8]).collect();
                    let mut v = SHREDDED.to_vec();
                    v.extend_from_slice(&evidence(&named, rnd(3) as u8));
                    (key(tag, MARKER), Some(v))
                }
                7 => {
                    let mut k = key(tag, MARKER);
                    k.extend_from_slice(&[rnd(2) as u8; 4]);
                    let named: Vec<[u8; 8]> = (0..rnd(3)).map(|_| [rnd(4) as u8; 8]).collect();
                    (k, Some(evidence(&named, rnd(3) as u8)))
                }
                8 => (key(0xff, id), Some(vec![1, 2, 3])),
                _ => (b"not a store's".to_vec(), Some(vec![9])),
            };
            out.push(Record { offset, key, value });
        }
        out
    }

    fn state(v: &dyn SubjectView) -> Vec<String> {
        let mut out = Vec::new();
        for tag in [0u8, 1, 2, 0xff] {
            let t = [tag; 16];
            for d in v.deks(&t).unwrap() {
                out.push(format!("{tag} dek {:?} {} {:?}", d.id, d.first, d.record));
            }
            if let Some(c) = v.covered(&t).unwrap() {
                out.push(format!("{tag} covered {:?} {:?}", c.ids, c.pieces));
            }
            for id in 0..5u8 {
                out.push(format!("{tag} {id} {:?}", v.lookup(&t, &[id; 8]).unwrap()));
            }
        }
        let mut records = v.records().unwrap();
        records.sort();
        out.push(format!("{records:?}"));
        let mut shreds = v.shreds().unwrap();
        shreds.sort();
        out.push(format!("{shreds:?} next {}", v.next()));
        out
    }

    /// Both views decide every record alike, whatever the batches.
    #[test]
    fn the_view_on_disk_decides_as_the_view_in_memory() {
        let dir = std::env::temp_dir().join(format!(
            "tc-view-unit-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos())
        ));
        for seed in 1..40u64 {
            for offsets_only in [false, true] {
                let records = log(seed, 60);
                let mut memory = MemoryView::default();
                let topic = format!("t{seed}{offsets_only}");
                let mut disk = DiskView::open(&dir, &topic, 0, 1 << 20).unwrap();
                let mut at = 0;
                for (i, chunk) in records.chunks(1 + seed as usize % 7).enumerate() {
                    let next = chunk.last().map_or(0, |r| r.offset + 1);
                    memory.apply(chunk, next, offsets_only).unwrap();
                    disk.apply(chunk, next, offsets_only).unwrap();
                    at += chunk.len();
                    if i % 3 == 0 {
                        assert!(state(&memory) == state(&disk), "seed {seed} at {at}");
                    }
                }
                assert!(state(&memory) == state(&disk), "seed {seed}");
                // Opened again: the same view, the same offset.
                drop(disk);
                let disk = DiskView::open(&dir, &topic, 0, 1 << 20).unwrap();
                assert!(state(&memory) == state(&disk), "seed {seed} reopened");
                assert_eq!(disk.identity().map(|i| i.head.len()), Some(HEAD));
            }
        }
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn covered_and_samples_read_back_and_cut_bytes_are_none() {
        let c = Covered {
            ids: vec![[1; 8], [2; 8]],
            pieces: vec![vec![3; 20].into(), vec![].into()],
        };
        let bytes = c.encode();
        assert!(Covered::decode(&bytes) == Some(c));
        for cut in 0..bytes.len() {
            let _ = Covered::decode(&bytes[..cut]);
        }
        let s = Sample {
            offset: 7,
            key: vec![1, 2],
            value: None,
        };
        let mut out = Vec::new();
        s.encode_into(&mut out);
        assert!(Sample::decode_from(&mut &out[..]) == Some(s));
        for cut in 0..out.len() {
            assert!(Sample::decode_from(&mut &out[..cut]).is_none());
        }
    }
}
