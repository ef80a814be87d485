//! A subject-key store ([`KeyStore`]) on a compacted Kafka topic, shared
//! by every instance of a service: [`KafkaKeyStore`], whose docs say how.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use rdkafka::consumer::BaseConsumer;

use super::changelog::{KafkaChangelog, Replayed};
#[cfg(feature = "redb")]
use super::view::DiskView;
use super::view::{Identity, MemoryView, SubjectView, MARKER, SHREDDED};
use crate::error::Error;
use crate::shred::{DekLookup, KeyStore, Seal, Shred, ShredRecord, SubjectTag};
use crate::store::Changelog as _;

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
///
/// **Where the view lives.** By default in this process's memory (about
/// 300 bytes a subject: 318 MiB at 10^6 subjects), read from the topic's
/// start at every start: right for small services and tests.
/// [`with_view_dir`](KafkaKeyStore::with_view_dir) keeps it in a redb file
/// on local disk instead: memory is redb's cache (bounded, 32 MiB by
/// default) and the subject-key cache, whatever the number of subjects,
/// and a restart reads the topic on from the offsets the view stored (they
/// are committed in the same transaction as the view's changes, so a crash
/// never leaves one without the other). Choose it from about 10^5 subjects
/// per instance, or where a restart must not read the whole topic. Both
/// views decide everything alike (one rule applies a record to either).
/// A view on disk is read on only from the topic it was read from: its
/// first records and the last one it applied are checked at open (the
/// topic made again, another cluster's topic of the same name, offsets
/// past the end, another key store's records: the view is rebuilt from
/// the topic's start, never trusted).
pub struct KafkaKeyStore {
    log: Mutex<KafkaChangelog>,
    view: Mutex<Viewed>,
    /// The topic's reader, kept between reads.
    reader: Mutex<Option<BaseConsumer>>,
    fence: Duration,
    /// A test's control: a maker that lost a race keeps its DEK record.
    no_withdraw: bool,
    /// A test's control: a marker covers only the records below it, and a
    /// rewrap does not check for a shred after its write.
    offsets_only: bool,
    /// A test's control: a view on disk read on without checking that its
    /// topic is the one it was read from.
    unchecked_view: bool,
    /// A negative control: the topic's id is not asked.
    no_topic_ids: bool,
    /// Records read from the topic since this store was made.
    read: AtomicU64,
}

/// The view, when it was last read to the end, and whether a view on
/// disk was checked against the topic.
struct Viewed {
    read_at: Option<Instant>,
    checked: bool,
    view: Box<dyn SubjectView>,
}

/// Records applied to a view in one step (one transaction on disk).
const BATCH: usize = 8192;

/// The default cache of a view on disk.
#[cfg(feature = "redb")]
const VIEW_CACHE: usize = 32 << 20;

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
    /// [`KafkaChangelog::open`], which creates it), its view in memory.
    pub fn new(log: KafkaChangelog) -> Self {
        KafkaKeyStore {
            log: Mutex::new(log),
            view: Mutex::new(Viewed {
                read_at: None,
                checked: true,
                view: Box::new(MemoryView::default()),
            }),
            reader: Mutex::new(None),
            fence: Duration::from_secs(5),
            no_withdraw: false,
            offsets_only: false,
            unchecked_view: false,
            no_topic_ids: false,
            read: AtomicU64::new(0),
        }
    }

    /// The same store with its view of the topic in a redb file in `dir`
    /// (made if missing, 0700; the file `TOPIC-PARTITION.view.redb`, 0600),
    /// with 32 MiB of redb cache: memory that does not grow with the
    /// number of subjects, and a restart that reads the topic on from
    /// where the view stopped. One process at a time uses a view (redb
    /// locks the file); each instance has its own directory.
    ///
    /// # Errors
    /// [`Error::Store`] when the directory or the file cannot be made or
    /// opened, or the file is not a view (corrupt: remove it, and the view
    /// is rebuilt from the topic).
    #[cfg(feature = "redb")]
    pub fn with_view_dir(self, dir: impl AsRef<std::path::Path>) -> Result<Self, Error> {
        self.with_view_dir_and_cache(dir, VIEW_CACHE)
    }

    /// As [`with_view_dir`](KafkaKeyStore::with_view_dir), with
    /// `cache_bytes` of redb cache (pages of the view kept in memory).
    ///
    /// # Errors
    /// As [`with_view_dir`](KafkaKeyStore::with_view_dir).
    #[cfg(feature = "redb")]
    pub fn with_view_dir_and_cache(
        self,
        dir: impl AsRef<std::path::Path>,
        cache_bytes: usize,
    ) -> Result<Self, Error> {
        let (topic, partition) = {
            let log = lock(&self.log);
            (log.topic().to_owned(), log.partition())
        };
        let view = DiskView::open(dir.as_ref(), &topic, partition, cache_bytes)?;
        *lock(&self.view) = Viewed {
            read_at: None,
            checked: false,
            view: Box::new(view),
        };
        Ok(self)
    }

    /// Records read from the topic since this store was made (a test's
    /// measure: a restart of a view on disk reads only what is new).
    #[doc(hidden)]
    pub fn records_read(&self) -> u64 {
        self.read.load(Ordering::Relaxed)
    }

    /// A negative control for tests: a view on disk is read on from its
    /// offsets without checking that the topic is the one it was read
    /// from (a topic made again is trusted).
    #[doc(hidden)]
    #[must_use]
    pub fn with_view_unchecked(self) -> Self {
        KafkaKeyStore {
            unchecked_view: true,
            ..self
        }
    }

    /// A negative control for tests: a view on disk is checked by its
    /// records alone, the topic's id not asked (a topic made again with
    /// the records the view sampled is trusted).
    #[doc(hidden)]
    #[must_use]
    pub fn without_topic_ids(self) -> Self {
        KafkaKeyStore {
            no_topic_ids: true,
            ..self
        }
    }

    /// A test's crash: the transaction of a view on disk that applies the
    /// record at `offset` fails after applying it, before its commit.
    /// With `offsets_apart` (the broken variant, a negative control) the
    /// offsets are committed in a transaction of their own before the
    /// view's changes.
    #[doc(hidden)]
    #[cfg(feature = "redb")]
    pub fn with_view_crash_at(self, offset: Option<u64>, offsets_apart: bool) -> Self {
        {
            let mut viewed = lock(&self.view);
            if let Some(disk) = viewed.view.as_disk() {
                disk.hooks.fail_at = offset;
                disk.hooks.offsets_apart = offsets_apart;
            }
        }
        self
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
    /// applies what it read, [`BATCH`] records at a time (the whole topic
    /// again if its partition restarted: a topic created again; and a view
    /// on disk, at its first read, only once its topic is shown to be the
    /// one it was read from).
    fn refresh(&self) -> Result<MutexGuard<'_, Viewed>, Error> {
        let started = Instant::now();
        {
            let log = lock(&self.log);
            let mut reader = lock(&self.reader);
            if reader.is_none() {
                *reader = Some(log.reader()?);
            }
            let Some(consumer) = reader.as_ref() else {
                return Err(Error::store("the key-store topic's reader", "not made"));
            };
            let read = self.check_view(&log, consumer).and_then(|()| {
                let from = lock(&self.view).view.next();
                let ended = self.read_into_view(&log, consumer, from)?;
                if ended.restarted {
                    self.clear_view()?;
                    self.read_into_view(&log, consumer, 0)?;
                }
                Ok(())
            });
            if read.is_err() {
                *reader = None;
            }
            read?;
        }
        let mut viewed = lock(&self.view);
        if viewed.read_at.is_none_or(|at| at < started) {
            viewed.read_at = Some(started);
        }
        Ok(viewed)
    }

    /// Forgets the view (it is read again from the topic's start); until
    /// then no reader takes it as fresh.
    fn clear_view(&self) -> Result<(), Error> {
        let mut viewed = lock(&self.view);
        viewed.read_at = None;
        viewed.view.clear()
    }

    /// Reads the topic from `from` to its end into the view.
    fn read_into_view(
        &self,
        log: &KafkaChangelog,
        consumer: &BaseConsumer,
        from: u64,
    ) -> Result<Replayed, Error> {
        let mut batch: Vec<crate::store::Record> = Vec::new();
        let ended = log.replay_with(consumer, from, &mut |r| {
            self.read.fetch_add(1, Ordering::Relaxed);
            batch.push(r);
            if batch.len() >= BATCH {
                let next = batch.last().map_or(0, |r| r.offset + 1);
                lock(&self.view)
                    .view
                    .apply(&batch, next, self.offsets_only)?;
                batch.clear();
            }
            Ok(())
        })?;
        if !ended.restarted {
            lock(&self.view)
                .view
                .apply(&batch, ended.next, self.offsets_only)?;
        }
        Ok(ended)
    }

    /// At the first read of a view on disk that holds records: its topic
    /// must be the one it was read from, else the view is cleared. The
    /// broker's id of the topic, where it can be asked
    /// ([`topic_identity`](crate::kafka::topic_identity)), must be the one
    /// the view recorded (a view without one records it; a view with one
    /// is rebuilt when the id cannot be asked now). Each
    /// of the first records it sampled must be the topic's record at that
    /// offset or gone (compacted), at least one still there; the last
    /// record it applied must be the topic's at that offset, or gone
    /// with a record after it (offsets past the topic's end: rebuilt).
    fn check_view(&self, log: &KafkaChangelog, consumer: &BaseConsumer) -> Result<(), Error> {
        let (identity, kept) = {
            let mut viewed = lock(&self.view);
            if viewed.checked {
                return Ok(());
            }
            if self.unchecked_view {
                viewed.checked = true;
                return Ok(());
            }
            (viewed.view.identity(), viewed.view.keeps_topic_id())
        };
        if !kept {
            // A view in memory is read from the topic's start.
            lock(&self.view).checked = true;
            return Ok(());
        }
        // The broker's id of the topic, when it can be asked: a view of
        // another id was read from another topic of that name (deleted and
        // made again), whatever its records look like.
        let asked = if self.no_topic_ids {
            Ok(crate::kafka::TopicIdentity::Unknown(
                "not asked (a test's control)".into(),
            ))
        } else {
            log.topic_identity()
        };
        let current = match asked {
            Ok(crate::kafka::TopicIdentity::Known(id)) => Some(*id.as_bytes()),
            Ok(crate::kafka::TopicIdentity::Unknown(_why)) => {
                #[cfg(feature = "tracing")]
                tracing::debug!(topic = log.topic(), why = %_why, "the key-store topic's id is not known: a view that recorded one is rebuilt, one that did not is checked by its records");
                None
            }
            Err(_e) => {
                #[cfg(feature = "tracing")]
                tracing::warn!(topic = log.topic(), error = %_e, "asking the key-store topic's id failed: a view that recorded one is rebuilt, one that did not is checked by its records");
                None
            }
        };
        let same = match identity {
            None => true,
            Some(id) => {
                let same_id = match (id.topic_id, current) {
                    // The control: the records alone decide.
                    _ if self.no_topic_ids => true,
                    (Some(viewed), Some(now)) => viewed == now,
                    // An id recorded and none to check it against now (the
                    // lookup failed, timed out, or cannot run with these
                    // settings): not trusted, rebuilt. The records alone
                    // can be made to match.
                    (Some(_), None) => false,
                    (None, _) => true,
                };
                same_id && self.same_topic(log, consumer, &id)?
            }
        };
        if !same {
            self.clear_view()?;
        }
        let mut viewed = lock(&self.view);
        if let Some(id) = current {
            viewed.view.set_topic_id(id)?;
        }
        viewed.checked = true;
        Ok(())
    }

    /// Whether the topic holds the records `id` sampled.
    fn same_topic(
        &self,
        log: &KafkaChangelog,
        consumer: &BaseConsumer,
        id: &Identity,
    ) -> Result<bool, Error> {
        let Some(head_end) = id.head_end() else {
            return Ok(false);
        };
        let mut head_ok = true;
        let mut seen = 0usize;
        log.replay_until(consumer, 0, Some(head_end), &mut |r| {
            self.read.fetch_add(1, Ordering::Relaxed);
            if r.offset > head_end {
                return Ok(());
            }
            // A record the view did not see below its sampled end: another
            // topic (a compacted log only loses records).
            match id.head.iter().find(|s| s.offset == r.offset) {
                Some(s) if s.is(&r) => seen += 1,
                _ => head_ok = false,
            }
            Ok(())
        })?;
        if !head_ok || seen == 0 {
            return Ok(false);
        }
        let Some(tail) = &id.tail else {
            return Ok(true);
        };
        // Compaction removes a record only for a later one of its key: a
        // record at or above the last one applied is there, in this topic.
        let mut tail_ok = false;
        let ended = log.replay_until(consumer, tail.offset, Some(tail.offset), &mut |r| {
            self.read.fetch_add(1, Ordering::Relaxed);
            // At it: the same record; above it: compacted away (below it
            // the partition restarted, and nothing is applied).
            tail_ok = r.offset > tail.offset || tail.is(&r);
            Ok(())
        })?;
        Ok(tail_ok && !ended.restarted)
    }

    /// The view, read again if it is older than the fence.
    fn fresh(&self) -> Result<MutexGuard<'_, Viewed>, Error> {
        {
            let viewed = lock(&self.view);
            if viewed.read_at.is_some_and(|at| at.elapsed() <= self.fence) {
                return Ok(viewed);
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
        Ok(self.fresh()?.view.current(tag)?.map(|d| d.record))
    }

    fn insert_if_absent(&self, tag: &SubjectTag, record: &[u8]) -> Result<Vec<u8>, Error> {
        let existing = self.refresh()?.view.current(tag)?;
        if let Some(d) = existing {
            return Ok(d.record);
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
            let viewed = self.refresh()?;
            let current = viewed.view.current(tag)?.ok_or_else(|| {
                Error::store(
                    "the record just written is not live on the key-store topic: a shred of the same subject (or a withdrawal) landed at once; write again",
                    "shredded while made",
                )
            })?;
            let lost = current.id[..] != *id && viewed.view.ids(tag)?.iter().any(|i| i[..] == *id);
            (current.record, lost)
        };
        if ours_lost && !self.no_withdraw {
            self.write(&[(key(tag, id), None)])?;
            drop(self.refresh()?);
        }
        Ok(current)
    }

    fn remove(&self, tag: &SubjectTag, seal: Seal<'_>) -> Result<Shred, Error> {
        let (live, shredded) = {
            let viewed = self.refresh()?;
            (viewed.view.ids(tag)?, viewed.view.shredded(tag)?)
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
        self.refresh()?.view.records()
    }

    fn replace(&self, tag: &SubjectTag, record: &[u8]) -> Result<(), Error> {
        let id = record
            .get(..8)
            .ok_or_else(|| Error::store("a key record shorter than its id", "too short"))?;
        let known = self.refresh()?.view.ids(tag)?.iter().any(|k| k[..] == *id);
        if !known {
            return Ok(());
        }
        self.write(&[(key(tag, id), Some(record))])?;
        // A shred whose marker landed between the read and the write
        // covers this DEK: the record written again is dead for every
        // reader (its id is named by the marker), and its bytes go too.
        let covered = self
            .refresh()?
            .view
            .shredded(tag)?
            .iter()
            .any(|k| k[..] == *id);
        if covered && !self.offsets_only {
            self.write(&[(key(tag, id), None)])?;
        }
        Ok(())
    }

    fn all_records(&self, tag: &SubjectTag) -> Result<Vec<Vec<u8>>, Error> {
        let mut deks = self.fresh()?.view.deks(tag)?;
        deks.sort_by_key(|d| d.first);
        Ok(deks.into_iter().map(|d| d.record).collect())
    }

    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        self.refresh()?.view.shreds()
    }

    /// Writes `evidence` as a record of its own (`tag | 0xff x 8 | KEK key
    /// id`),
    /// not as a marker: a marker written again would cover the subject's
    /// DEKs made since its shred. It adds a piece of evidence, and hides
    /// none (a shred since the rewrap read the store keeps its own).
    fn reseal(&self, tag: &SubjectTag, _was: &[Vec<u8>], evidence: &[u8]) -> Result<(), Error> {
        let shredded = self.refresh()?.view.covered(tag)?.is_some();
        if shredded {
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
        let found = self.fresh()?.view.lookup(tag, dek_id)?;
        if found != DekLookup::Unknown {
            return Ok(found);
        }
        self.refresh()?.view.lookup(tag, dek_id)
    }
}
