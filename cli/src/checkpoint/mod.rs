//! Resumable writes: what `repair --apply` and `reencrypt --apply` have
//! written, per partition, in a checkpoint file, and the records in flight
//! in a journal beside it.
//!
//! The checkpoint (JSON) names the run (its id, which every record it
//! writes carries in a header), the command, the topics and the keysets'
//! primary keys, and per partition: the end offset before the run's first
//! write (the second pass stops there, and everything after it must be
//! the run's own), and the offset through which every record's writes are
//! acknowledged. Each chunk of writes goes first to the partition's
//! journal (the records exactly as written: wire keys and ciphertexts,
//! never a plaintext the topic does not hold), then to the broker; once
//! acknowledged, the checkpoint moves on. The checkpoint ends with the
//! SHA-256 of the rest of it on a line of its own (`sha256:HEX`), a
//! journal with the SHA-256 of the rest of it: a file changed or cut
//! anywhere is refused, and nothing is written. Both files are written to a
//! temporary file, synced, renamed over the old one, and the directory
//! synced: a crash leaves the old file or the new one, never a torn one.
//!
//! One process at a time holds a run (`PATH.lock`), and one run at a time
//! writes a partition ([`PartitionLocks`]: a file per partition of the
//! topic's cluster in the lock directory, whatever the checkpoint file).
//!
//! A resumed run first writes each journal again whose chunk the
//! checkpoint does not count as done (a key's records, tombstones then
//! value, may have landed in part: written again, the key ends as one
//! uninterrupted run leaves it; records that had landed are written twice,
//! which the reading rule and compaction make harmless), then goes on
//! after the acknowledged offset.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::outcome::{fail, Fail};
use crate::record::Write;

mod fs;
mod journal;
mod lock;
mod seal;

pub(crate) use fs::write_atomically;
use fs::{private_new, run_id};
use journal::{journals_of, parse_journal};
pub(crate) use lock::{default_lock_dirs, LockDir, PartitionLocks};
use lock::{lock, lock_path};
use seal::{seal, unseal};

/// One partition's progress.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Progress {
    /// Where the second pass over the partition read ends: on the topic
    /// it writes, its end offset before the run's first write; read from
    /// another topic (`--to-topic`), the end of the source planned from.
    pub(crate) end: i64,
    /// Every record below this offset has had its writes acknowledged.
    pub(crate) done: i64,
    /// The written partition's end offset before the run's first write to
    /// it: every record from here on is the run's own or someone else's.
    pub(crate) from: i64,
    /// The written partition's last record before `from`, if any: a topic
    /// deleted and created again under the same name has another one.
    pub(crate) mark: Option<Mark>,
    /// Records the run wrote there, acknowledged: a partition that holds
    /// none of them, and nothing of anyone else's after `from`, is not the
    /// one it wrote.
    pub(crate) written: u64,
    /// The run's first and last acknowledged records there, values
    /// rather than tombstones where it wrote any (their marks carry no
    /// timestamp): on the partition it wrote, an offset holds the
    /// same record for ever or, once compaction removed it, none, with a
    /// later record of its key; a topic created again under the same name
    /// has its end before them, or other records (or none without a later
    /// record of the key) at their offsets.
    pub(crate) anchors: Option<(Mark, Mark)>,
    /// Read from another topic (`--to-topic`): the source partition's
    /// record just before `end` when the run planned it, checked the same
    /// way on resume (a source created again is refused).
    pub(crate) source: Option<Mark>,
    /// The partition's journal: `None` before the run journaled a chunk
    /// there (recorded once the first is written, before its chunk is
    /// produced); then the offset the
    /// last acknowledged chunk ends below, -1 before one is. A journal is
    /// never removed before the run completes, so one missing is refused,
    /// and a journal ending there is done even when `done` moved past it
    /// (records after it that the run leaves alone).
    pub(crate) journal: Option<i64>,
}

impl Progress {
    /// The progress after `n` more records acknowledged at `offsets` (in
    /// order), `writes` being those records.
    pub(crate) fn after_writes(self, writes: &[Write], offsets: &[i64]) -> Progress {
        let marks = writes
            .iter()
            .zip(offsets)
            .map(|(w, &o)| Mark::of(o, None, Some(&w.key), w.value.as_deref()));
        // Values rather than tombstones where the run wrote any: a value
        // leaves the log only under a newer record of its key, a tombstone
        // also once it is older than delete.retention.ms.
        let value = |m: &Mark| m.value_len >= 0;
        let mut anchors = self.anchors;
        for m in marks {
            anchors = Some(match anchors {
                None => (m, m),
                Some((first, last)) => {
                    let first = if !value(&first) && value(&m) {
                        m
                    } else {
                        first
                    };
                    let later = m.offset > last.offset && (value(&m) || !value(&last));
                    (first, if later { m } else { last })
                }
            });
        }
        Progress {
            written: self.written + offsets.len() as u64,
            anchors,
            ..self
        }
    }
}

/// What identifies one record of a partition: its offset, timestamp, and
/// the FNV-1a hash and lengths of its key and value (never the bytes).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Mark {
    /// Its offset.
    pub(crate) offset: i64,
    /// Its timestamp (milliseconds), or -1.
    pub(crate) timestamp: i64,
    /// The hash of its key, 0 for none.
    pub(crate) key: u64,
    /// Its key's length, or -1 for none.
    pub(crate) key_len: i64,
    /// Its value's length, or -1 for a tombstone.
    pub(crate) value_len: i64,
}

impl Mark {
    /// The mark of a record.
    pub(crate) fn of(
        offset: i64,
        timestamp: Option<i64>,
        key: Option<&[u8]>,
        value: Option<&[u8]>,
    ) -> Mark {
        let len = |b: Option<&[u8]>| b.map_or(-1, |b| i64::try_from(b.len()).unwrap_or(i64::MAX));
        Mark {
            offset,
            timestamp: timestamp.unwrap_or(-1),
            key: key.map_or(0, fnv1a),
            key_len: len(key),
            value_len: len(value),
        }
    }

    /// Whether `key` is this record's key (by its hash and length).
    pub(crate) fn same_key(&self, key: Option<&[u8]>) -> bool {
        let other = Mark::of(self.offset, None, key, None);
        other.key == self.key && other.key_len == self.key_len
    }

    fn to_json(self) -> Value {
        json!({"offset": self.offset, "timestamp": self.timestamp, "key": format!("{:016x}", self.key),
            "key_len": self.key_len, "value_len": self.value_len})
    }

    fn from_json(v: &Value) -> Option<Mark> {
        Some(Mark {
            offset: v["offset"].as_i64().filter(|o| *o >= 0)?,
            timestamp: v["timestamp"].as_i64()?,
            key: u64::from_str_radix(v["key"].as_str()?, 16).ok()?,
            key_len: v["key_len"].as_i64()?,
            value_len: v["value_len"].as_i64()?,
        })
    }
}

/// FNV-1a, 64 bits: a stable fingerprint, not a secret one.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// What a run is: a resumed run must be the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct RunOf {
    /// `repair` or `reencrypt`.
    pub(crate) command: String,
    /// The topic read.
    pub(crate) topic: String,
    /// The topic written.
    pub(crate) to_topic: String,
    /// The values' keyset's primary key id.
    pub(crate) primary: u32,
    /// The key keyset's primary key id, if any.
    pub(crate) key_primary: Option<u32>,
    /// The partitions the run writes (`--partitions`, or `all`).
    pub(crate) partitions: String,
    /// Everything else its plan depends on: the options that decide what
    /// a key's write is, and each keyset's key ids and statuses.
    pub(crate) plan: String,
}

/// A checkpoint file and its journals.
pub(crate) struct Checkpoint {
    /// The file.
    path: PathBuf,
    /// The run's id (hex).
    pub(crate) run: String,
    /// What the run is.
    of: RunOf,
    /// The id of the cluster written, as its metadata gave it (`None`: the
    /// broker gave none).
    pub(crate) cluster: Option<String>,
    /// The id of the topic written, as the broker's metadata gave it
    /// (Kafka's form; `None`: not known, see
    /// `tombstone_crypt::kafka::topic_identity`). A topic deleted and
    /// created again has another.
    pub(crate) topic_id: Option<String>,
    /// Each partition's progress.
    parts: Mutex<BTreeMap<i32, Progress>>,
    /// The lock that one process at a time holds on the run (released
    /// when the process ends, however it ends).
    _lock: File,
}

/// The most bytes a checkpoint file may hold (it is a few per partition).
const MAX_CHECKPOINT: u64 = 64 << 20;

impl Checkpoint {
    /// A new run's checkpoint at `path`, which must not exist (an earlier
    /// run's progress is never overwritten: resume it or delete it).
    pub(crate) fn create(
        path: &Path,
        of: RunOf,
        cluster: Option<String>,
        topic_id: Option<String>,
    ) -> Result<Checkpoint, Fail> {
        let exists = || {
            fail(format!(
                "{} exists: an earlier run's progress. Go on from it with --resume {0}, or delete it (and its .journal files) to start again",
                path.display()
            ))
        };
        if let Some(j) = journals_of(path).first() {
            return Err(fail(format!(
                "{} exists: the journal of an earlier run, which may hold writes it never finished. Resume that run with --resume {}, or delete it to start again",
                j.display(),
                path.display()
            )));
        }
        let lock = lock(path)?;
        // Claimed before it is written: two runs given the same file do
        // not both start.
        private_new(path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::AlreadyExists {
                exists()
            } else {
                fail(format!("creating {}: {e}", path.display()))
            }
        })?;
        let run = run_id()?;
        let c = Checkpoint {
            path: path.to_owned(),
            run,
            of,
            cluster,
            topic_id,
            parts: Mutex::new(BTreeMap::new()),
            _lock: lock,
        };
        c.save()?;
        Ok(c)
    }

    /// The checkpoint at `path`, of a run that must be `of`.
    pub(crate) fn load(path: &Path, of: &RunOf) -> Result<Checkpoint, Fail> {
        let what = |e: String| fail(format!("the checkpoint {}: {e}", path.display()));
        if !path.exists() {
            return Err(what(
                "no such file (a run that completed removes it)".into(),
            ));
        }
        let lock = lock(path)?;
        let mut bytes = Vec::new();
        File::open(path)
            .and_then(|f| f.take(MAX_CHECKPOINT).read_to_end(&mut bytes))
            .map_err(|e| what(e.to_string()))?;
        let text = unseal(&bytes).ok_or_else(|| {
            what("it was changed or cut (its checksum does not verify), or it is not a checkpoint of this version: nothing is written; resume no further from it until you know why".into())
        })?;
        let v: Value = serde_json::from_str(text).map_err(|e| what(e.to_string()))?;
        let str_of = |k: &str| {
            v[k].as_str()
                .map(str::to_owned)
                .ok_or_else(|| what(format!("no {k:?}")))
        };
        let u32_of = |x: &Value| x.as_u64().and_then(|n| u32::try_from(n).ok());
        if v["format"] == json!(1) {
            return Err(what("written by an earlier version (format 1), which does not check what others wrote before it resumes: finish the run with that version, or delete the checkpoint and its journals and start again".into()));
        }
        if v["format"] == json!(2) {
            return Err(what("written by an earlier version (format 2), which does not record the run's own records to know the topic again: finish the run with that version, or delete the checkpoint and its journals and start again".into()));
        }
        if v["format"] != json!(3) {
            return Err(what("not a checkpoint of this version (format 3)".into()));
        }
        let run = str_of("run")?;
        if run.len() != 32 || !run.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(what("its run id is not 32 hex digits".into()));
        }
        let found = RunOf {
            command: str_of("command")?,
            topic: str_of("topic")?,
            to_topic: str_of("to_topic")?,
            primary: u32_of(&v["primary_key_id"])
                .ok_or_else(|| what("no primary_key_id".into()))?,
            key_primary: match &v["key_keyset_primary_key_id"] {
                Value::Null => None,
                x => Some(u32_of(x).ok_or_else(|| what("a bad key_keyset_primary_key_id".into()))?),
            },
            partitions: str_of("partitions_written")?,
            plan: str_of("plan")?,
        };
        if &found != of {
            return Err(what(format!(
                "it is a run of {} on {} (to {}, partitions {}, primary keys {} and {:?}; {}), not of this one ({} on {}, to {}, partitions {}, primary keys {} and {:?}; {}): resume with the same command, topics, --partitions, options and keysets",
                found.command, found.topic, found.to_topic, found.partitions, found.primary,
                found.key_primary, found.plan, of.command, of.topic, of.to_topic, of.partitions,
                of.primary, of.key_primary, of.plan
            )));
        }
        let mut parts = BTreeMap::new();
        for (k, p) in v["partitions"]
            .as_object()
            .ok_or_else(|| what("no partitions".into()))?
        {
            let partition: i32 = k
                .parse()
                .ok()
                .filter(|p| *p >= 0)
                .ok_or_else(|| what(format!("partition {k:?}")))?;
            let end = p["end"].as_i64().filter(|e| *e >= 0);
            let done = p["done"].as_i64().filter(|d| *d >= 0);
            let from = p["from"].as_i64().filter(|f| *f >= 0);
            let written = p["written"].as_u64();
            let mark = match &p["mark"] {
                Value::Null => None,
                m => Some(
                    Mark::from_json(m)
                        .ok_or_else(|| what(format!("partition {partition}: a bad mark")))?,
                ),
            };
            let mark_of = |k: &str| match &p[k] {
                Value::Null => Ok(None),
                m => Mark::from_json(m)
                    .map(Some)
                    .ok_or_else(|| what(format!("partition {partition}: a bad {k}"))),
            };
            let anchors = match (mark_of("first")?, mark_of("last")?) {
                (None, None) => None,
                (Some(first), Some(last))
                    if from.is_some_and(|f| first.offset >= f) && last.offset >= first.offset =>
                {
                    Some((first, last))
                }
                _ => return Err(what(format!("partition {partition}: bad first and last"))),
            };
            let source = mark_of("source")?;
            let journal = match &p["journal"] {
                Value::Null => None,
                j => Some(
                    j.as_i64()
                        .filter(|j| *j >= -1)
                        .ok_or_else(|| what(format!("partition {partition}: a bad journal")))?,
                ),
            };
            match (end, done, from, written) {
                (Some(end), Some(done), Some(from), Some(written))
                    if done <= end && mark.is_none_or(|m| m.offset + 1 == from) =>
                {
                    parts.insert(
                        partition,
                        Progress {
                            end,
                            done,
                            from,
                            mark,
                            written,
                            anchors,
                            source,
                            journal,
                        },
                    );
                }
                _ => return Err(what(format!("partition {partition}: bad offsets"))),
            }
        }
        let cluster = match &v["cluster"] {
            Value::Null => None,
            c => Some(
                c.as_str()
                    .ok_or_else(|| what("a bad cluster".into()))?
                    .to_owned(),
            ),
        };
        // Absent from a checkpoint of an earlier release: not known.
        let topic_id = match &v["topic_id"] {
            Value::Null => None,
            t => Some(
                t.as_str()
                    .ok_or_else(|| what("a bad topic id".into()))?
                    .to_owned(),
            ),
        };
        Ok(Checkpoint {
            path: path.to_owned(),
            run,
            of: found,
            cluster,
            topic_id,
            parts: Mutex::new(parts),
            _lock: lock,
        })
    }

    /// The partition's progress, if the run wrote to it.
    pub(crate) fn progress(&self, partition: i32) -> Option<Progress> {
        self.parts.lock().ok()?.get(&partition).copied()
    }

    /// Records the partition's progress, durably.
    pub(crate) fn set(&self, partition: i32, p: Progress) -> Result<(), Fail> {
        let mut parts = self
            .parts
            .lock()
            .map_err(|_| fail("the checkpoint's lock is poisoned"))?;
        parts.insert(partition, p);
        let doc = self.document(&parts);
        // Written under the lock: two partitions' updates never cross.
        write_atomically(&self.path, &seal(&doc))
    }

    fn document(&self, parts: &BTreeMap<i32, Progress>) -> Value {
        let ps: serde_json::Map<String, Value> = parts
            .iter()
            .map(|(k, p)| {
                let json_of = |m: Option<Mark>| m.map_or(Value::Null, Mark::to_json);
                let progress = json!({"end": p.end, "done": p.done, "from": p.from,
                    "mark": json_of(p.mark), "written": p.written,
                    "first": json_of(p.anchors.map(|a| a.0)),
                    "last": json_of(p.anchors.map(|a| a.1)),
                    "source": json_of(p.source), "journal": p.journal});
                (k.to_string(), progress)
            })
            .collect();
        json!({
            "format": 3,
            "run": self.run,
            "cluster": self.cluster,
            "topic_id": self.topic_id,
            "command": self.of.command,
            "topic": self.of.topic,
            "to_topic": self.of.to_topic,
            "primary_key_id": self.of.primary,
            "key_keyset_primary_key_id": self.of.key_primary,
            "partitions_written": self.of.partitions,
            "plan": self.of.plan,
            "partitions": ps,
        })
    }

    fn save(&self) -> Result<(), Fail> {
        let parts = self
            .parts
            .lock()
            .map_err(|_| fail("the checkpoint's lock is poisoned"))?;
        write_atomically(&self.path, &seal(&self.document(&parts)))
    }

    /// Whether the run wrote, or was about to write, to any partition.
    pub(crate) fn touched(&self) -> bool {
        self.parts.lock().map_or(true, |p| !p.is_empty())
    }

    /// Where the checkpoint is.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    fn journal_path(&self, partition: i32) -> PathBuf {
        let mut name = self.path.as_os_str().to_owned();
        name.push(format!(".p{partition}.journal"));
        PathBuf::from(name)
    }

    /// Writes the partition's journal: the records of the chunk about to
    /// be produced, which ends the second pass's records below `through`.
    pub(crate) fn journal(
        &self,
        partition: i32,
        through: i64,
        writes: &[Write],
    ) -> Result<(), Fail> {
        let f = journal::encode(&self.run, partition, through, writes);
        write_atomically(&self.journal_path(partition), &f)
    }

    /// The partition's journal, if there is one the checkpoint does not
    /// count as done: the offset its chunk ends below, and its records.
    pub(crate) fn unfinished_journal(
        &self,
        partition: i32,
    ) -> Result<Option<(i64, Vec<Write>)>, Fail> {
        let path = self.journal_path(partition);
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                // The checkpoint records that the run journaled a chunk
                // there: the journal (of a chunk maybe not acknowledged) is
                // gone, and with it what a key cut between its records
                // needs.
                if self
                    .progress(partition)
                    .is_some_and(|p| p.journal.is_some())
                {
                    return Err(fail(format!(
                        "{} is missing, and the checkpoint records that the run journaled writes of partition {partition}: its last chunk may hold a key cut between its records, which only the journal can finish. Nothing is written; put the journal back (or, knowing that such a key may be lost, delete the checkpoint and start again)",
                        path.display()
                    )));
                }
                return Ok(None);
            }
            Err(e) => return Err(fail(format!("reading {}: {e}", path.display()))),
        };
        let (run, p, through, writes) = parse_journal(&bytes).ok_or_else(|| {
            fail(format!(
                "{} is not a journal of this version, or it was changed or cut (its checksum does not verify): nothing of it is written; resume no further from this checkpoint until you know why",
                path.display()
            ))
        })?;
        if run != self.run.as_bytes() || p != partition {
            return Err(fail(format!(
                "{} is another run's journal (or another partition's): the run that wrote it may have writes to finish; resume it, or delete the journal",
                path.display()
            )));
        }
        let Some(progress) = self.progress(partition) else {
            return Err(fail(format!(
                "{} holds writes of partition {partition}, which the checkpoint does not name",
                path.display()
            )));
        };
        // Its chunk done (the journal not yet replaced by the next's), and
        // maybe records after it that the run leaves alone.
        if through == progress.done || progress.journal == Some(through) {
            return Ok(None);
        }
        // A chunk that ends before what is done: no run writes one.
        if through < progress.done {
            return Err(fail(format!(
                "{}: its chunk ends at offset {through}, before what the checkpoint counts as done ({}): not this run's journal as it wrote it",
                path.display(),
                progress.done
            )));
        }
        if through > progress.end {
            return Err(fail(format!(
                "{}: its chunk ends at offset {through}, after the partition's recorded end ({})",
                path.display(),
                progress.end
            )));
        }
        Ok(Some((through, writes)))
    }

    /// Removes the checkpoint and its journals: the run is done.
    pub(crate) fn remove(&self) -> Result<(), Fail> {
        let parts: Vec<i32> = self
            .parts
            .lock()
            .map(|p| p.keys().copied().collect())
            .unwrap_or_default();
        for p in parts {
            let _ = std::fs::remove_file(self.journal_path(p));
        }
        for j in journals_of(&self.path) {
            let _ = std::fs::remove_file(j);
        }
        std::fs::remove_file(&self.path)
            .map_err(|e| fail(format!("removing {}: {e}", self.path.display())))?;
        let _ = std::fs::remove_file(lock_path(&self.path));
        Ok(())
    }
}

#[cfg(test)]
mod tests;
