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
use std::io::{Read as _, Seek as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::record::Write;
use crate::{fail, Fail};

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
        let len32 = |n: usize| u32::try_from(n).unwrap_or(u32::MAX - 1).to_be_bytes();
        let mut f = Vec::new();
        f.extend_from_slice(JOURNAL_MAGIC);
        f.extend_from_slice(self.run.as_bytes());
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
        let digest =
            sha2::Digest::finalize(sha2::Digest::chain_update(sha2::Sha256::default(), &f));
        f.extend_from_slice(&digest);
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

/// The line that ends a checkpoint file, before the hex SHA-256 of all
/// that comes before it.
const CHECKPOINT_SEAL: &str = "\nsha256:";

/// A checkpoint file's bytes: the document, then its SHA-256 on a line of
/// its own.
fn seal(doc: &Value) -> Vec<u8> {
    let text = doc.to_string();
    let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
        sha2::Sha256::default(),
        text.as_bytes(),
    ));
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("{text}{CHECKPOINT_SEAL}{hex}\n").into_bytes()
}

/// The document of a checkpoint file, if its checksum verifies: one
/// changed byte anywhere (the checksum's own included), or a cut, and it
/// does not.
fn unseal(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (doc, line) = text.rsplit_once(CHECKPOINT_SEAL)?;
    let hex = line.strip_suffix('\n')?;
    let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
        sha2::Sha256::default(),
        doc.as_bytes(),
    ));
    let want: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    (hex == want).then_some(doc)
}

/// The first bytes of a journal.
const JOURNAL_MAGIC: &[u8; 4] = b"TCJ2";

/// A journal read: its run id, partition, the offset its chunk ends
/// below, and its records.
type Journal = (Vec<u8>, i32, i64, Vec<Write>);

/// Reads a journal; `None` for bytes that are not one (every length is
/// checked against what is left).
fn parse_journal(b: &[u8]) -> Option<Journal> {
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
fn journals_of(path: &Path) -> Vec<PathBuf> {
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
fn is_journal_name(name: &str, prefix: &str) -> bool {
    name.strip_prefix(prefix)
        .and_then(|rest| rest.strip_suffix(".journal"))
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

/// Creates `path`, which must not exist (`O_EXCL`: a link there is not
/// followed), readable and writable by its owner only: checkpoints and
/// journals hold record keys and values.
fn private_new(path: &Path) -> std::io::Result<File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)
}

/// The lock file of the checkpoint at `path`.
fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the run's lock (`PATH.lock`, created 0600 if missing, never
/// through a link): a second process running or resuming the same run is
/// refused while the first holds it; the system releases it when the
/// holder ends, a kill included.
fn lock(path: &Path) -> Result<File, Fail> {
    use std::os::unix::fs::OpenOptionsExt as _;
    let at = lock_path(path);
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&at)
        .map_err(|e| fail(format!("opening the lock {}: {e}", at.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(f),
        Err(std::fs::TryLockError::WouldBlock) => Err(fail(format!(
            "another process holds {}: it is running or resuming this run; let it finish (or stop it) first",
            at.display()
        ))),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(fail(format!("locking {}: {e}", at.display())))
        }
    }
}

/// The locks of the partitions a run writes, one file per partition of a
/// topic of a cluster in a lock directory (`--lock-dir`): two runs that
/// would write one partition at once, whatever their checkpoint files, do
/// not both start. Each is locked for the run's life (the system releases
/// it when the process ends, a kill included) and removed when the run
/// lets it go.
pub(crate) struct PartitionLocks {
    held: Vec<(PathBuf, File)>,
    /// The run's checkpoint, as the lock files name it (absolute).
    checkpoint: PathBuf,
}

/// What a partition lock file's holder line starts the checkpoint with.
const HOLDER_CHECKPOINT: &[u8] = b", checkpoint ";

/// The most bytes of a partition lock file read: its holder line with a
/// path of up to `PATH_MAX` bytes.
const MAX_HOLDER: u64 = 8192;

/// The checkpoint a partition lock file names (`pid N, checkpoint PATH`
/// and a newline, the path's bytes as they are: a path that is not UTF-8
/// is named exactly).
fn checkpoint_named(holder: &[u8]) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt as _;
    let line = holder.strip_suffix(b"\n").unwrap_or(holder);
    let at = line
        .windows(HOLDER_CHECKPOINT.len())
        .position(|w| w == HOLDER_CHECKPOINT)?;
    let path = &line[at + HOLDER_CHECKPOINT.len()..];
    (!path.is_empty()).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(path)))
}

/// `path` made absolute (from the current directory), as a lock file
/// names it.
fn absolute(path: &Path) -> PathBuf {
    std::path::absolute(path).unwrap_or_else(|_| path.to_owned())
}

impl PartitionLocks {
    /// Locks each of `partitions` of `topic` on `cluster` (its id, or its
    /// bootstrap servers when the broker gives none) in `dir` (created,
    /// 0700, if missing), naming `checkpoint` in each file for whoever is
    /// refused. Refuses, holding none, when another run holds one.
    pub(crate) fn take(
        dir: &LockDir,
        cluster: &str,
        topic: &str,
        partitions: impl IntoIterator<Item = i32>,
        checkpoint: &Path,
    ) -> Result<PartitionLocks, Fail> {
        use std::os::unix::fs::DirBuilderExt as _;
        let shared = dir.shared;
        let dir = &dir.path;
        if shared {
            machine_dir(dir)?;
        } else {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| {
                    fail(format!(
                        "creating the lock directory {}: {e}",
                        dir.display()
                    ))
                })?;
        }
        let digest = sha2::Digest::finalize(sha2::Digest::chain_update(
            sha2::Digest::chain_update(sha2::Sha256::default(), cluster.as_bytes()),
            [&[0u8][..], topic.as_bytes()].concat(),
        ));
        let id: String = digest[..8].iter().map(|b| format!("{b:02x}")).collect();
        let readable: String = topic
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                    c
                } else {
                    '_'
                }
            })
            .take(100)
            .collect();
        let checkpoint = absolute(checkpoint);
        let mut locks = PartitionLocks {
            held: Vec::new(),
            checkpoint: checkpoint.clone(),
        };
        for p in partitions {
            let path = dir.join(format!("{readable}-{id}.p{p}.lock"));
            match lock_partition(&path, shared)? {
                Some(mut f) => {
                    // A run that stopped before it finished leaves its lock
                    // file, naming its checkpoint: while that checkpoint is
                    // there, its journal may hold a key cut between its
                    // records, which a new run planning from the topic
                    // would lose.
                    let mut before = Vec::new();
                    let _ = (&f).take(MAX_HOLDER).read_to_end(&mut before);
                    if let Some(theirs) = checkpoint_named(&before) {
                        // Another user's that this one cannot see: taken
                        // as there.
                        let there = theirs.try_exists().unwrap_or(true);
                        let same = theirs == checkpoint
                            || std::fs::canonicalize(&theirs).ok()
                                == std::fs::canonicalize(&checkpoint).ok()
                                && there;
                        if !same && there {
                            return Err(fail(format!(
                                "partition {p} of {topic} was being written by a run that stopped before it finished: its checkpoint {} is still there, and its journal may hold writes only it can finish. Resume that run first (--resume {0}), or leave partition {p} out of --partitions; to drop that run, delete its checkpoint and journals (a key it left between its records may then be lost) (the lock: {})",
                                theirs.display(),
                                path.display()
                            )));
                        }
                    }
                    // Who holds it, for whoever is refused (best effort).
                    let _ = f.set_len(0).and_then(|()| f.rewind()).and_then(|()| {
                        use std::os::unix::ffi::OsStrExt as _;
                        let mut line = format!("pid {}", std::process::id()).into_bytes();
                        line.extend_from_slice(HOLDER_CHECKPOINT);
                        line.extend_from_slice(checkpoint.as_os_str().as_bytes());
                        line.push(b'\n');
                        f.write_all(&line)
                    });
                    locks.held.push((path, f));
                }
                None => {
                    let mut holder = Vec::new();
                    let _ =
                        File::open(&path).and_then(|f| f.take(MAX_HOLDER).read_to_end(&mut holder));
                    let holder = String::from_utf8_lossy(&holder);
                    let holder = holder.trim();
                    let holder = if holder.is_empty() {
                        String::new()
                    } else {
                        format!(" ({holder})")
                    };
                    return Err(fail(format!(
                        "partition {p} of {topic} is being written by another run{holder}: two runs must not write one partition at once. Let it finish (or stop it), or leave partition {p} out of --partitions (its lock: {})",
                        path.display()
                    )));
                }
            }
        }
        Ok(locks)
    }
}

impl Drop for PartitionLocks {
    fn drop(&mut self) {
        // Kept, naming the checkpoint, while the run's checkpoint is there
        // (stopped before it finished): a run of another checkpoint is
        // refused those partitions until this one is resumed and done.
        // Else removed while still locked: a run that opened the file
        // meanwhile finds, once it holds the lock, that the path is no
        // longer its file, and takes the lock again at a new one.
        let unfinished = self.checkpoint.exists();
        for (path, f) in self.held.drain(..) {
            if !unfinished {
                let _ = std::fs::remove_file(&path);
            }
            drop(f);
        }
    }
}

/// Locks the file at `path` (created 0600 if missing, never through a
/// link); `None` when another process holds it.
fn lock_partition(path: &Path, shared: bool) -> Result<Option<File>, Fail> {
    use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
    loop {
        let open = |write: bool| {
            std::fs::OpenOptions::new()
                .read(true)
                .write(write)
                .create(write)
                .truncate(false)
                // In the machine's directory, readable by every user (to
                // lock it), written by its owner only.
                .mode(if shared { 0o644 } else { 0o600 })
                .custom_flags(libc::O_NOFOLLOW)
                .open(path)
        };
        let f = match open(true) {
            // Another user's, in the machine's directory: locked all the
            // same (a lock needs no write access).
            Err(e) if shared && e.kind() == std::io::ErrorKind::PermissionDenied => open(false),
            other => other,
        }
        .map_err(|e| fail(format!("opening the lock {}: {e}", path.display())))?;
        match f.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => return Ok(None),
            Err(std::fs::TryLockError::Error(e)) => {
                return Err(fail(format!("locking {}: {e}", path.display())))
            }
        }
        // The holder before may have removed the file between the open and
        // the lock: the lock counts only on the file at the path now.
        let ours = f.metadata().ok();
        let there = std::fs::symlink_metadata(path).ok();
        if let (Some(a), Some(b)) = (ours, there) {
            if a.ino() == b.ino() && a.dev() == b.dev() {
                return Ok(Some(f));
            }
        }
    }
}

/// A directory of partition locks.
pub(crate) struct LockDir {
    pub(crate) path: PathBuf,
    /// The machine's, shared by every user ([`MACHINE_LOCK_DIR`]).
    pub(crate) shared: bool,
}

/// The machine's directory of partition locks, which every user's runs
/// take beside their own when no directory is given: two users' runs (each
/// with their own `HOME` and `XDG_RUNTIME_DIR`) on one machine never
/// write one partition at once.
pub(crate) const MACHINE_LOCK_DIR: &str = "/tmp/tombstone-crypt-locks";

/// The directories of the partition locks when `--lock-dir` is not given:
/// `$TOMBSTONE_CRYPT_LOCK_DIR` alone; else the user's,
/// `$XDG_RUNTIME_DIR/tombstone-crypt/locks` or
/// `$HOME/.cache/tombstone-crypt/locks`, and the machine's
/// ([`MACHINE_LOCK_DIR`]).
pub(crate) fn default_lock_dirs() -> Result<Vec<LockDir>, Fail> {
    let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
    let own = |path: PathBuf| LockDir {
        path,
        shared: false,
    };
    if let Some(d) = var("TOMBSTONE_CRYPT_LOCK_DIR") {
        return Ok(vec![own(PathBuf::from(d))]);
    }
    let user = if let Some(d) = var("XDG_RUNTIME_DIR") {
        PathBuf::from(d).join("tombstone-crypt/locks")
    } else if let Some(d) = var("HOME") {
        PathBuf::from(d).join(".cache/tombstone-crypt/locks")
    } else {
        return Err(fail(
            "no directory for the partition locks: set --lock-dir (or TOMBSTONE_CRYPT_LOCK_DIR, XDG_RUNTIME_DIR or HOME); every run that may write the same topic must use the same one",
        ));
    };
    Ok(vec![
        own(user),
        LockDir {
            path: PathBuf::from(MACHINE_LOCK_DIR),
            shared: true,
        },
    ])
}

/// Makes the machine's lock directory (mode 1777: every user creates
/// locks there, and removes only their own), or checks the one there: a
/// directory, not a link, writable by all with the sticky bit.
fn machine_dir(dir: &Path) -> Result<(), Fail> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    let refused = |why: String| {
        fail(format!(
            "the machine's lock directory {}: {why}. Give every run that may write the topic the same --lock-dir (or TOMBSTONE_CRYPT_LOCK_DIR)",
            dir.display()
        ))
    };
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o1777))
                .map_err(|e| refused(e.to_string()))?;
        }
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(refused(e.to_string())),
    }
    let md = std::fs::symlink_metadata(dir).map_err(|e| refused(e.to_string()))?;
    if !md.is_dir() {
        return Err(refused("not a directory (a link or a file)".into()));
    }
    if md.permissions().mode() & 0o1777 != 0o1777 {
        return Err(refused(format!(
            "its mode is {:o}, not 1777 (writable by every user, with the sticky bit)",
            md.permissions().mode() & 0o7777
        )));
    }
    Ok(())
}

/// A run id: 16 random bytes in hex.
fn run_id() -> Result<String, Fail> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| fail(format!("the system's random source: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Writes `bytes` to `path` so that a crash leaves the old file or the
/// new one: a temporary file beside it, synced, renamed over it, the
/// directory synced.
pub(crate) fn write_atomically(path: &Path, bytes: &[u8]) -> Result<(), Fail> {
    write_atomically_with(path, |f| f.write_all(bytes))
}

/// [`write_atomically`] what `write` writes (through a buffer).
fn write_atomically_with(
    path: &Path,
    write: impl FnOnce(&mut std::io::BufWriter<File>) -> std::io::Result<()>,
) -> Result<(), Fail> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    // A name no one can guess, created here and now (never a file or a
    // link someone left there), readable by its owner only.
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".{}.tmp", run_id()?));
    let tmp = PathBuf::from(tmp_name);
    let err = |what: &str, e: std::io::Error| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!("{what} {}: {e}", tmp.display()))
    };
    let f = private_new(&tmp).map_err(|e| fail(format!("creating {}: {e}", tmp.display())))?;
    let mut f = std::io::BufWriter::new(f);
    write(&mut f).map_err(|e| err("writing", e))?;
    let f = f.into_inner().map_err(|e| err("writing", e.into_error()))?;
    f.sync_all().map_err(|e| err("syncing", e))?;
    drop(f);
    std::fs::rename(&tmp, path).map_err(|e| {
        let _ = std::fs::remove_file(&tmp);
        fail(format!(
            "renaming {} to {}: {e}",
            tmp.display(),
            path.display()
        ))
    })?;
    File::open(&dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| fail(format!("syncing the directory {}: {e}", dir.display())))
}

#[cfg(test)]
mod tests {
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
}
