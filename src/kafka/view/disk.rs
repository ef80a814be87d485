//! The view in a redb file: the same rule as the memory view, its cells
//! in tables, with the offsets it applied.

use std::path::Path;
use std::time::{Duration, Instant};

use super::{apply_record, Cells, Covered, Dek, Identity, Record, Sample, SubjectView, HEAD};
use crate::error::Error;
use crate::shred::{ShredRecord, SubjectTag};

use redb::{ReadableDatabase as _, ReadableTable as _, TableDefinition};

/// Live DEK records: `tag | DEK id` -> `first offset (u64be) | record`.
const DEKS: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("view_deks");
/// What each subject's shreds covered: `tag` -> [`Covered::encode`].
const COVERED: TableDefinition<'_, &[u8], &[u8]> = TableDefinition::new("view_covered");
/// The offset to read on from and the identity of the topic.
const META: TableDefinition<'_, &str, &[u8]> = TableDefinition::new("view_meta");
/// The view's layout; another is rebuilt from the topic.
const LAYOUT: &[u8] = b"tombstone-crypt key-store view 1";

fn view_err<E: Into<redb::Error>>(what: &'static str) -> impl FnOnce(E) -> Error {
    move |e| Error::store(format!("the key-store view on disk: {what}"), e.into())
}

/// The cells of a view on disk inside one write transaction.
struct TxnCells<'t> {
    deks: redb::Table<'t, &'static [u8], &'static [u8]>,
    covered: redb::Table<'t, &'static [u8], &'static [u8]>,
    /// The DEK ids last read, and whose: what `set_deks` removes.
    read: Option<(SubjectTag, Vec<[u8; 8]>)>,
}

fn range_of(tag: &SubjectTag) -> ([u8; 24], [u8; 24]) {
    let mut lo = [0u8; 24];
    lo[..16].copy_from_slice(tag);
    let mut hi = [0xffu8; 24];
    hi[..16].copy_from_slice(tag);
    (lo, hi)
}

fn dek_from(key: &[u8], value: &[u8]) -> Option<Dek> {
    let id = key.get(16..24)?.try_into().ok()?;
    let (first, record) = value.split_first_chunk::<8>()?;
    Some(Dek {
        id,
        first: u64::from_be_bytes(*first),
        record: record.to_vec(),
    })
}

fn read_deks(
    table: &impl redb::ReadableTable<&'static [u8], &'static [u8]>,
    tag: &SubjectTag,
) -> Result<Vec<Dek>, Error> {
    let (lo, hi) = range_of(tag);
    let mut out = Vec::new();
    for entry in table.range(&lo[..]..=&hi[..]).map_err(view_err("read"))? {
        let (k, v) = entry.map_err(view_err("read"))?;
        out.push(dek_from(k.value(), v.value()).ok_or_else(corrupt)?);
    }
    out.sort_by_key(|d| d.first);
    Ok(out)
}

fn corrupt() -> Error {
    Error::store(
        "the key-store view on disk holds a record it cannot read: remove the view's file to rebuild it from the topic",
        "corrupt view",
    )
}

impl Cells for TxnCells<'_> {
    fn deks(&mut self, tag: &SubjectTag) -> Result<Vec<Dek>, Error> {
        let deks = read_deks(&self.deks, tag)?;
        self.read = Some((*tag, deks.iter().map(|d| d.id).collect()));
        Ok(deks)
    }

    fn set_deks(&mut self, tag: &SubjectTag, deks: Vec<Dek>) -> Result<(), Error> {
        let old = match self.read.take() {
            Some((t, ids)) if t == *tag => ids,
            _ => read_deks(&self.deks, tag)?.iter().map(|d| d.id).collect(),
        };
        for id in old.iter().filter(|id| !deks.iter().any(|d| d.id == **id)) {
            let mut key = tag.to_vec();
            key.extend_from_slice(id);
            self.deks.remove(&key[..]).map_err(view_err("write"))?;
        }
        for d in deks {
            let mut key = tag.to_vec();
            key.extend_from_slice(&d.id);
            let mut value = d.first.to_be_bytes().to_vec();
            value.extend_from_slice(&d.record);
            self.deks
                .insert(&key[..], &value[..])
                .map_err(view_err("write"))?;
        }
        Ok(())
    }

    fn covered(&mut self, tag: &SubjectTag) -> Result<Option<Covered>, Error> {
        match self.covered.get(&tag[..]).map_err(view_err("read"))? {
            None => Ok(None),
            Some(v) => Covered::decode(v.value()).map(Some).ok_or_else(corrupt),
        }
    }

    fn set_covered(&mut self, tag: &SubjectTag, covered: Option<Covered>) -> Result<(), Error> {
        match covered {
            Some(c) => {
                self.covered
                    .insert(&tag[..], &c.encode()[..])
                    .map_err(view_err("write"))?;
            }
            None => {
                self.covered.remove(&tag[..]).map_err(view_err("write"))?;
            }
        }
        Ok(())
    }
}

/// How often at most a view on disk syncs its commits to the disk; the
/// commits between are kept by the next (a crash loses them, whole: the
/// view and its offsets together, read again from the topic).
const SYNC_EVERY: Duration = Duration::from_secs(1);

/// A test's control over a view on disk.
#[derive(Clone, Copy, Debug, Default)]
pub(in crate::kafka) struct DiskHooks {
    /// Fail the transaction that applies the record at this offset, after
    /// applying it and before the commit: a crash between the two.
    pub(in crate::kafka) fail_at: Option<u64>,
    /// The broken variant: the offsets committed in a transaction of their
    /// own, before the view's changes.
    pub(in crate::kafka) offsets_apart: bool,
}

/// The view in a redb file: its memory is redb's cache, whatever the
/// number of subjects.
pub(in crate::kafka) struct DiskView {
    db: redb::Database,
    next: u64,
    identity: Identity,
    last_sync: Instant,
    pub(in crate::kafka) hooks: DiskHooks,
}

impl DiskView {
    /// Opens (or makes) the view of `topic`'s `partition` in `dir`, with
    /// `cache` bytes of redb cache. A view of another layout, topic or
    /// partition is cleared (rebuilt from the topic).
    ///
    /// # Errors
    /// [`Error::Store`] when the directory or file cannot be made or
    /// opened, or the file is not a view (a corrupt file: removing it
    /// rebuilds the view).
    pub(in crate::kafka) fn open(
        dir: &Path,
        topic: &str,
        partition: i32,
        cache: usize,
    ) -> Result<Self, Error> {
        let mut builder = std::fs::DirBuilder::new();
        builder.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
        builder.create(dir).map_err(|e| {
            Error::store(
                format!("the key-store view: make the directory {}", dir.display()),
                e,
            )
        })?;
        // Kafka topic names are ASCII letters, digits, `.`, `_` and `-`.
        let name: String = topic
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let path = dir.join(format!("{name}-{partition}.view.redb"));
        let mut options = std::fs::OpenOptions::new();
        options.read(true).write(true).create(true).truncate(false);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        let file = options
            .open(&path)
            .map_err(|e| Error::store(format!("the key-store view: open {}", path.display()), e))?;
        let not_a_view = |e: redb::DatabaseError| {
            if matches!(e, redb::DatabaseError::DatabaseAlreadyOpen) {
                return Error::store(
                    format!(
                        "the key-store view {} is in use by another store or process: give each instance a view dir of its own",
                        path.display()
                    ),
                    redb::Error::from(e),
                );
            }
            Error::store(
                format!(
                    "the key-store view {} cannot be opened (not a view, or corrupt): remove it to rebuild the view from the topic",
                    path.display()
                ),
                redb::Error::from(e),
            )
        };
        let backend = redb::backends::FileBackend::new(file).map_err(not_a_view)?;
        let db = redb::Builder::new()
            .set_cache_size(cache)
            .create_with_backend(backend)
            .map_err(not_a_view)?;
        let mut view = DiskView {
            db,
            next: 0,
            identity: Identity {
                topic: topic.to_owned(),
                partition,
                ..Identity::default()
            },
            last_sync: Instant::now(),
            hooks: DiskHooks::default(),
        };
        match view.read_meta()? {
            // The offset stored is one past the last record applied
            // (none applied: 0, nothing sampled); any other was damaged
            // or edited, and reading on from it would skip records or
            // apply some twice.
            Some((next, identity))
                if identity.topic == topic
                    && identity.partition == partition
                    && match &identity.tail {
                        Some(t) => t.offset.checked_add(1) == Some(next),
                        None => next == 0 && identity.head.is_empty(),
                    } =>
            {
                view.next = next;
                view.identity = identity;
            }
            // A new file, another layout, or another topic's view.
            _ => view.clear()?,
        }
        Ok(view)
    }

    /// The stored offset and identity; `None` if the file holds no view of
    /// this layout.
    fn read_meta(&self) -> Result<Option<(u64, Identity)>, Error> {
        let txn = self.db.begin_read().map_err(view_err("begin a read"))?;
        let meta = match txn.open_table(META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(view_err("open a table")(e)),
        };
        let get = |k: &str| -> Result<Option<Vec<u8>>, Error> {
            Ok(meta
                .get(k)
                .map_err(view_err("read"))?
                .map(|v| v.value().to_vec()))
        };
        if get("layout")?.as_deref() != Some(LAYOUT) {
            return Ok(None);
        }
        let (Some(next), Some(topic), Some(partition), Some(head)) =
            (get("next")?, get("topic")?, get("partition")?, get("head")?)
        else {
            return Ok(None);
        };
        let Ok(next) = <[u8; 8]>::try_from(&next[..]) else {
            return Ok(None);
        };
        let Ok(partition) = <[u8; 4]>::try_from(&partition[..]) else {
            return Ok(None);
        };
        let mut bytes = &head[..];
        let mut samples = Vec::new();
        while !bytes.is_empty() {
            match Sample::decode_from(&mut bytes) {
                Some(s) => samples.push(s),
                None => return Ok(None),
            }
        }
        let tail = match get("tail")? {
            Some(t) => Sample::decode_from(&mut &t[..]),
            None => None,
        };
        let topic_id = match get("topic_id")? {
            None => None,
            Some(id) => match <[u8; 16]>::try_from(&id[..]) {
                Ok(id) => Some(id),
                Err(_) => return Ok(None),
            },
        };
        Ok(Some((
            u64::from_be_bytes(next),
            Identity {
                topic: String::from_utf8_lossy(&topic).into_owned(),
                partition: i32::from_be_bytes(partition),
                topic_id,
                head: samples,
                tail,
            },
        )))
    }

    fn write_meta(
        &self,
        meta: &mut redb::Table<'_, &'static str, &'static [u8]>,
        next: u64,
        identity: &Identity,
    ) -> Result<(), Error> {
        let w = view_err("write");
        meta.insert("layout", LAYOUT).map_err(view_err("write"))?;
        meta.insert("next", &next.to_be_bytes()[..])
            .map_err(view_err("write"))?;
        meta.insert("topic", identity.topic.as_bytes())
            .map_err(view_err("write"))?;
        meta.insert("partition", &identity.partition.to_be_bytes()[..])
            .map_err(view_err("write"))?;
        match &identity.topic_id {
            Some(id) => {
                meta.insert("topic_id", &id[..])
                    .map_err(view_err("write"))?;
            }
            None => {
                meta.remove("topic_id").map_err(view_err("write"))?;
            }
        }
        let mut head = Vec::new();
        for s in &identity.head {
            s.encode_into(&mut head);
        }
        meta.insert("head", &head[..]).map_err(view_err("write"))?;
        match &identity.tail {
            Some(t) => {
                let mut tail = Vec::new();
                t.encode_into(&mut tail);
                meta.insert("tail", &tail[..]).map_err(w)?;
            }
            None => {
                meta.remove("tail").map_err(w)?;
            }
        }
        Ok(())
    }

    fn begin(&mut self) -> Result<redb::WriteTransaction, Error> {
        let mut txn = self.db.begin_write().map_err(view_err("begin a write"))?;
        let durability = if self.last_sync.elapsed() >= SYNC_EVERY {
            self.last_sync = Instant::now();
            redb::Durability::Immediate
        } else {
            redb::Durability::None
        };
        txn.set_durability(durability)
            .map_err(|e| Error::store("the key-store view on disk: durability", e.to_string()))?;
        Ok(txn)
    }

    /// Makes every commit so far durable.
    fn sync(&mut self) -> Result<(), Error> {
        let mut txn = self.db.begin_write().map_err(view_err("begin a write"))?;
        txn.set_durability(redb::Durability::Immediate)
            .map_err(|e| Error::store("the key-store view on disk: durability", e.to_string()))?;
        txn.commit().map_err(view_err("commit"))?;
        self.last_sync = Instant::now();
        Ok(())
    }
}

impl Drop for DiskView {
    fn drop(&mut self) {
        // Best effort: a view not synced is read on from its last synced
        // offsets.
        let _ = self.sync();
    }
}

impl SubjectView for DiskView {
    fn next(&self) -> u64 {
        self.next
    }

    fn apply(&mut self, records: &[Record], next: u64, offsets_only: bool) -> Result<(), Error> {
        let from = self.next;
        let records: Vec<&Record> = records.iter().filter(|r| r.offset >= from).collect();
        let next = next.max(from);
        if records.is_empty() && next == from {
            return Ok(());
        }
        let mut identity = self.identity.clone();
        for r in &records {
            if identity.head.len() < HEAD {
                identity.head.push(Sample::of(r));
            }
        }
        if let Some(last) = records.last() {
            identity.tail = Some(Sample::of(last));
        }
        if self.hooks.offsets_apart {
            // The broken variant: the offsets first, on their own.
            let txn = self.begin()?;
            {
                let mut meta = txn.open_table(META).map_err(view_err("open a table"))?;
                self.write_meta(&mut meta, next, &identity)?;
            }
            txn.commit().map_err(view_err("commit"))?;
        }
        let txn = self.begin()?;
        {
            let mut cells = TxnCells {
                deks: txn.open_table(DEKS).map_err(view_err("open a table"))?,
                covered: txn.open_table(COVERED).map_err(view_err("open a table"))?,
                read: None,
            };
            for r in &records {
                apply_record(
                    &mut cells,
                    offsets_only,
                    r.offset,
                    &r.key,
                    r.value.as_deref(),
                )?;
                if self.hooks.fail_at == Some(r.offset) {
                    // Dropped uncommitted: as a crash here.
                    return Err(Error::store(
                        "the key-store view on disk: a test's crash before the commit",
                        "test hook",
                    ));
                }
            }
            let mut meta = txn.open_table(META).map_err(view_err("open a table"))?;
            self.write_meta(&mut meta, next, &identity)?;
        }
        txn.commit().map_err(view_err("commit"))?;
        self.next = next;
        self.identity = identity;
        Ok(())
    }

    fn clear(&mut self) -> Result<(), Error> {
        let txn = self.db.begin_write().map_err(view_err("begin a write"))?;
        for t in [DEKS, COVERED] {
            match txn.delete_table(t) {
                Ok(_) => {}
                Err(e) => return Err(view_err("clear")(e)),
            }
            txn.open_table(t).map_err(view_err("open a table"))?;
        }
        let identity = Identity {
            topic: self.identity.topic.clone(),
            partition: self.identity.partition,
            topic_id: self.identity.topic_id,
            ..Identity::default()
        };
        {
            let mut meta = txn.open_table(META).map_err(view_err("open a table"))?;
            self.write_meta(&mut meta, 0, &identity)?;
        }
        txn.commit().map_err(view_err("commit"))?;
        self.next = 0;
        self.identity = identity;
        self.last_sync = Instant::now();
        Ok(())
    }

    fn deks(&self, tag: &SubjectTag) -> Result<Vec<Dek>, Error> {
        let txn = self.db.begin_read().map_err(view_err("begin a read"))?;
        let table = txn.open_table(DEKS).map_err(view_err("open a table"))?;
        read_deks(&table, tag)
    }

    fn covered(&self, tag: &SubjectTag) -> Result<Option<Covered>, Error> {
        let txn = self.db.begin_read().map_err(view_err("begin a read"))?;
        let table = txn.open_table(COVERED).map_err(view_err("open a table"))?;
        let got = table.get(&tag[..]).map_err(view_err("read"))?;
        match got {
            None => Ok(None),
            Some(v) => Covered::decode(v.value()).map(Some).ok_or_else(corrupt),
        }
    }

    fn records(&self) -> Result<Vec<(SubjectTag, Vec<u8>)>, Error> {
        let txn = self.db.begin_read().map_err(view_err("begin a read"))?;
        let table = txn.open_table(DEKS).map_err(view_err("open a table"))?;
        let mut out: Vec<(SubjectTag, Dek)> = Vec::new();
        let flush = |out: &mut Vec<(SubjectTag, Dek)>, run: &mut Vec<(SubjectTag, Dek)>| {
            run.sort_by_key(|(_, d)| d.first);
            out.append(run);
        };
        let mut run: Vec<(SubjectTag, Dek)> = Vec::new();
        for entry in table.iter().map_err(view_err("read"))? {
            let (k, v) = entry.map_err(view_err("read"))?;
            let tag: SubjectTag = k
                .value()
                .get(..16)
                .and_then(|t| t.try_into().ok())
                .ok_or_else(corrupt)?;
            let dek = dek_from(k.value(), v.value()).ok_or_else(corrupt)?;
            if run.first().is_some_and(|(t, _)| *t != tag) {
                flush(&mut out, &mut run);
            }
            run.push((tag, dek));
        }
        flush(&mut out, &mut run);
        Ok(out.into_iter().map(|(t, d)| (t, d.record)).collect())
    }

    fn shreds(&self) -> Result<Vec<ShredRecord>, Error> {
        let txn = self.db.begin_read().map_err(view_err("begin a read"))?;
        let table = txn.open_table(COVERED).map_err(view_err("open a table"))?;
        let mut out = Vec::new();
        for entry in table.iter().map_err(view_err("read"))? {
            let (k, v) = entry.map_err(view_err("read"))?;
            let tag: SubjectTag = k.value().try_into().map_err(|_| corrupt())?;
            let c = Covered::decode(v.value()).ok_or_else(corrupt)?;
            out.push((tag, c.pieces.iter().map(|p| p.to_vec()).collect()));
        }
        Ok(out)
    }

    fn identity(&self) -> Option<Identity> {
        (self.next > 0).then(|| self.identity.clone())
    }

    fn keeps_topic_id(&self) -> bool {
        true
    }

    fn set_topic_id(&mut self, id: [u8; 16]) -> Result<(), Error> {
        if self.identity.topic_id == Some(id) {
            return Ok(());
        }
        let mut identity = self.identity.clone();
        identity.topic_id = Some(id);
        let txn = self.db.begin_write().map_err(view_err("begin a write"))?;
        {
            let mut meta = txn.open_table(META).map_err(view_err("open a table"))?;
            self.write_meta(&mut meta, self.next, &identity)?;
        }
        txn.commit().map_err(view_err("commit"))?;
        self.identity = identity;
        Ok(())
    }

    fn as_disk(&mut self) -> Option<&mut DiskView> {
        Some(self)
    }
}
