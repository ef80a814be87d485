//! What `repair` and `reencrypt` do to each partition, a few partitions at
//! once ([`run`]): a first pass builds the partition's index by the reading
//! rule and plans each key from its entry; with `--apply`, a second pass
//! reads the partition again up to where the first ended (never the run's
//! own writes) and writes each planned key's records, through the write
//! rule, when it reaches the key's deciding record; a third pass audits
//! the partition written. Memory: one index per partition being read, a
//! chunk of writes per partition being written.
//!
//! A resumed run checks before it writes ([`since`]): it first reads every
//! partition it wrote to from its first write there to the partition's
//! end, checks it is the partition it wrote (the cluster's id, the record
//! before its first write, the run's first and last acknowledged records
//! there at their offsets or compacted under a later record of their key;
//! a copy's source by the record it planned up to: a topic deleted and
//! created again is refused, written since or not), and lets each key
//! someone else wrote since
//! keep that write: the run's journal and plan leave such keys alone.
//! Only then does it write the rest of its journals and go on.
//!
//! Read from another topic (`--to-topic`), the source is planned as it is
//! now, on a resume too, and read again after its partition is written:
//! what it gained meanwhile is copied in another round.

use std::collections::{BTreeMap, HashSet};
use std::path::PathBuf;

use indicatif::ProgressBar;
use tombstone_crypt::kafka::rdkafka::producer::FutureProducer;

use crate::args::{ProgressArgs, CHUNK_RECORDS};
use crate::checkpoint::{default_lock_dirs, Checkpoint, LockDir, PartitionLocks, Progress, RunOf};
use crate::key_state::{Index, KeyHash};
use crate::outcome::{fail, Fail};
use crate::plan::{Command, PlanCounts, Planner};
use crate::read::{partitions, progress, read_partition, Setup};
use crate::record::{key_of, Write};
use crate::report::{ranges, Audit, Counts, LISTED};
use crate::run::for_partitions;
use crate::scan::{check_keyset, scan_partition, Pass, Scanned, Upto};
use crate::write::{check_ordered, is_transactional, produce_chunk, producer, Sink};

mod resume;

use resume::*;

/// How a command writes: `--apply` and where its progress goes.
pub(crate) struct Writing {
    /// The checkpoint of a new run (`--checkpoint`, or the default).
    pub(crate) checkpoint: PathBuf,
    /// The checkpoint of a run to go on from (`--resume`).
    pub(crate) resume: Option<PathBuf>,
    /// The most records of a chunk.
    pub(crate) chunk_records: usize,
    /// The tests' fixed kill point: abort after this many records.
    pub(crate) fail_after: Option<u64>,
    /// The tests' negative control: a resume that writes its journals
    /// before it reads what others wrote (never use it).
    pub(crate) unchecked_resume: bool,
    /// The tests' way to the checks after the topic's id: it is not
    /// asked (never use it).
    pub(crate) without_topic_id: bool,
    /// Where the partition locks are (`--lock-dir`; `None`: the default,
    /// [`default_lock_dir`]).
    pub(crate) lock_dir: Option<PathBuf>,
}

/// What a command did to the partitions it read.
pub(crate) struct Done {
    /// The topic read, before.
    pub(crate) before: Audit,
    /// The plan.
    pub(crate) plan: PlanCounts,
    /// The topic written, after (with `--apply`).
    pub(crate) after: Option<Audit>,
    /// Records written.
    pub(crate) written: u64,
    /// Records written again from journals (a resumed run).
    pub(crate) replayed: u64,
    /// What others wrote since the run's first write (a resumed run).
    pub(crate) others: Others,
}

/// How many times a copy (`--to-topic`) reads a source partition that grew
/// while it was written before it gives up.
const ROUNDS: usize = 10;

/// One partition's share of [`Done`].
struct PartDone {
    before: Counts,
    plan: PlanCounts,
    after: Option<Counts>,
    written: u64,
}

/// Everything a partition's work needs.
struct Job<'a> {
    from: &'a Setup,
    to: &'a Setup,
    planner: Planner<'a>,
    writing: Option<(&'a Checkpoint, &'a FutureProducer)>,
    chunk_records: usize,
    fail_after: Option<u64>,
    hash: &'a KeyHash,
    /// What others wrote since a resumed run's first write, by partition.
    foreign: &'a BTreeMap<i32, Foreign>,
    bar: &'a ProgressBar,
}

impl Job<'_> {
    fn pass(&self) -> Pass<'_> {
        Pass {
            hash: self.hash,
            bar: self.bar,
            list: false,
        }
    }

    fn partition(&self, index: &mut Index, p: i32) -> Result<PartDone, Fail> {
        let (from, to) = (self.from, self.to);
        let same = self.planner.same;
        let mut progress = self.writing.and_then(|(ck, _)| ck.progress(p));
        let foreign = self.foreign.get(&p);
        let mut written = 0;
        let mut round = 0;
        loop {
            let before_mark = match (self.writing, same) {
                (Some(_), true) => Some(watermark(from, p)?),
                _ => None,
            };
            // On the topic it writes, a resumed run plans from what was
            // there before its first write; from another topic, from the
            // source as it is now.
            let upto = match progress {
                Some(prog) if same => Upto::Before(prog.end),
                _ => Upto::End,
            };
            let Scanned {
                counts: before,
                end,
                last,
            } = scan_partition(from, &from.topic, p, index, upto, &self.pass())?;
            let mut plan = PlanCounts::default();
            for (h, e) in index.entries_mut() {
                if foreign.is_some_and(|f| f.keys.contains(&h)) {
                    // Someone else wrote the key since: that write stands.
                    e.set_action(None);
                } else {
                    self.planner.decide(e, &mut plan);
                }
            }
            let Some((ck, producer)) = self.writing else {
                return Ok(PartDone {
                    before,
                    plan,
                    after: None,
                    written: 0,
                });
            };
            let start = progress.map_or(0, |prog| prog.done);
            if plan.keys() > 0 && start < end {
                if let Some(mark) = before_mark {
                    let now = watermark(from, p)?;
                    if now != mark {
                        return Err(fail(format!(
                            "{}/{p} changed while it was read (end offset {mark}, now {now}): stop its producers and run again",
                            from.topic
                        )));
                    }
                }
                let (wrote_from, mark) = match progress {
                    Some(prog) => (prog.from, prog.mark),
                    None if same => (end, last),
                    None => tail(to, p)?,
                };
                let prog = Progress {
                    end,
                    done: start,
                    from: wrote_from,
                    mark,
                    written: progress.map_or(0, |prog| prog.written),
                    anchors: progress.and_then(|prog| prog.anchors),
                    journal: progress.and_then(|prog| prog.journal),
                    // A copy's source, as planned: a resume checks it is
                    // the same partition.
                    source: if same { None } else { last },
                };
                ck.set(p, prog)?;
                let (n, now) = self.write(index, p, prog, ck, producer)?;
                written += n;
                progress = Some(now);
            }
            // Nothing others wrote while the run wrote (this process, or
            // the one it resumes, its journals included) is left under the
            // run's older plan.
            if let Some(now) = progress.filter(|now| now.written > 0) {
                overwritten(to, ck, p, &now, self.hash)?;
            }
            // A copy reads its source again: what it gained while it was
            // read and written is copied in another round.
            if !same {
                let (now, _) = tail(from, p)?;
                if now > end {
                    round += 1;
                    if round >= ROUNDS {
                        return Err(fail(format!(
                            "{}/{p} kept growing while it was copied ({ROUNDS} rounds): stop its producers and run again with --resume",
                            from.topic
                        )));
                    }
                    continue;
                }
            }
            let after = scan_partition(to, &to.topic, p, index, Upto::End, &self.pass())?;
            return Ok(PartDone {
                before,
                plan,
                after: Some(after.counts),
                written,
            });
        }
    }

    /// The second pass over partition `p` from `prog.done` to `prog.end`:
    /// each planned key's records written at its deciding record.
    fn write(
        &self,
        index: &Index,
        p: i32,
        prog: Progress,
        ck: &Checkpoint,
        producer: &FutureProducer,
    ) -> Result<(u64, Progress), Fail> {
        let (from, to) = (self.from, self.to);
        let (start, end) = (prog.done, prog.end);
        let mut sink = Sink::new(to, producer, &to.topic, p, ck, ck.run.as_bytes(), prog)
            .with_chunk_records(self.chunk_records)
            .with_fail_after(self.fail_after);
        // The keys this pass must reach: each at its deciding record.
        let planned = index
            .entries()
            .filter(|e| e.action().is_some() && index.offset_of(e) >= start)
            .count();
        let mut reached = 0;
        read_partition(from, &from.topic, p, start, Some(end), self.bar, |r| {
            // Only the key, to find its entry: a value is read again
            // only when it is written.
            let Some(wire) = r.key else {
                return Ok(());
            };
            let key = key_of(from, wire);
            let Some(e) = index.get(self.hash.of(key.encrypted, &key.group))? else {
                return Ok(());
            };
            if e.action().is_some() && index.offset_of(e) == r.offset {
                reached += 1;
                sink.push(r.offset, self.planner.writes(e, r, &key)?)?;
            }
            Ok(())
        })?;
        if reached != planned {
            return Err(fail(format!(
                "{} of the {planned} keys planned in {}/{p} were not found on the second read (compacted meanwhile, or the topic changed): run again",
                planned - reached,
                from.topic
            )));
        }
        sink.flush(end)?;
        Ok((sink.written, sink.progress()))
    }
}

/// Writes partition `p`'s unfinished journal again, if it has one, but
/// the records of keys in `skip` (others wrote them since), and records
/// the chunk done. Returns the records written and the keys left out.
fn replay(
    ck: &Checkpoint,
    producer: &FutureProducer,
    to: &Setup,
    p: i32,
    skip: &HashSet<(u64, u32)>,
    hash: &KeyHash,
) -> Result<(u64, u64), Fail> {
    let Some((through, writes)) = ck.unfinished_journal(p)? else {
        return Ok((0, 0));
    };
    let mut left = HashSet::new();
    let mut keep: Vec<Write> = Vec::with_capacity(writes.len());
    for w in writes {
        let key = key_of(to, &w.key);
        let h = hash.of(key.encrypted, &key.group);
        if skip.contains(&h) {
            left.insert(h);
        } else {
            keep.push(w);
        }
    }
    let offsets = produce_chunk(
        producer,
        is_transactional(to),
        &to.topic,
        ck.run.as_bytes(),
        &keep,
        to.timeout,
        None,
    )?;
    if let Some(prog) = ck.progress(p) {
        ck.set(
            p,
            Progress {
                done: through,
                journal: Some(through),
                ..prog.after_writes(&keep, &offsets)
            },
        )?;
    }
    Ok((offsets.len() as u64, left.len() as u64))
}

/// What the plan of `command` from `from` to `to` depends on besides the
/// topics and the primary keys: a resumed run must plan as the run it
/// goes on from.
fn plan_options(from: &Setup, to: &Setup, command: Command) -> String {
    let keys = |k: &tombstone_crypt::Keyset| {
        k.keys()
            .map(|(id, status)| format!("{}:{status:?}", id.0))
            .collect::<Vec<_>>()
            .join(",")
    };
    let mut plan = format!(
        "{command:?}, null marker {:?}, aad {:?}, names {} and {}, value key {:?}, values keyset [{}], key keyset [{}]",
        from.marker,
        from.aad,
        from.name,
        to.name,
        from.value_key,
        to.run_keys().map(keys).unwrap_or_default(),
        to.key_keyset().map(keys).unwrap_or_default(),
    );
    // Only with --fields: a run without it plans as before.
    if let Some(f) = &to.fields {
        plan.push_str(&format!(
            ", fields json, field aad {:?} and {:?}, field keysets [{}] and [{}]",
            f.aad,
            f.deterministic_aad,
            keys(&f.randomized),
            f.deterministic.as_ref().map(keys).unwrap_or_default(),
        ));
    }
    plan
}

/// Runs `command` from `from` to `to` on every partition read, a few at
/// once; with `writing`, writes (a new run, or one resumed).
pub(crate) fn run(
    from: &Setup,
    to: &Setup,
    command: Command,
    name: &str,
    writing: Option<&Writing>,
    quiet: bool,
) -> Result<Done, Fail> {
    if writing.is_some() {
        // Before the broker is asked anything.
        check_ordered(&from.config)?;
    }
    let (parts, count) = partitions(from)?;
    let same = from.topic == to.topic;
    if !same {
        let target = partitions(&Setup {
            only: None,
            ..to.clone()
        })?
        .1;
        if target != count {
            return Err(fail(format!(
                "{} has {target} partitions and {} has {count}: each record keeps its partition, and a key's partition follows the count",
                to.topic, from.topic
            )));
        }
    }
    // The partition locks live as long as the run.
    let (checkpoint, producer, _locks) = match writing {
        None => (None, None, None),
        Some(w) => {
            check_ordered(&from.config)?;
            let producer = producer(to)?;
            let of = RunOf {
                command: name.to_owned(),
                topic: from.topic.clone(),
                to_topic: to.topic.clone(),
                primary: to.run_keys().map_or(0, |k| k.primary().0),
                key_primary: to.key_keyset().map(|k| k.primary().0),
                partitions: match &from.only {
                    None => "all".to_owned(),
                    Some(o) => ranges(&o.iter().copied().collect::<Vec<_>>()),
                },
                plan: plan_options(from, to, command),
            };
            let cluster = cluster_id(to)?;
            // One run at a time per partition written, before its
            // checkpoint is made or taken.
            let lock_dirs = match &w.lock_dir {
                Some(d) => vec![LockDir {
                    path: d.clone(),
                    shared: false,
                }],
                None => default_lock_dirs()?,
            };
            let bootstrap = to.config.get("bootstrap.servers").unwrap_or_default();
            let locks = lock_dirs
                .iter()
                .map(|dir| {
                    PartitionLocks::take(
                        dir,
                        cluster.as_deref().unwrap_or(bootstrap),
                        &to.topic,
                        parts.iter().map(|&(p, _, _)| p),
                        w.resume.as_deref().unwrap_or(&w.checkpoint),
                    )
                })
                .collect::<Result<Vec<_>, _>>()?;
            let written_id = if w.without_topic_id {
                None
            } else {
                topic_id(to)
            };
            let ck = match &w.resume {
                Some(path) => {
                    let ck = Checkpoint::load(path, &of)?;
                    if ck.cluster != cluster {
                        return Err(fail(format!(
                            "the checkpoint {} is of a run on the cluster {}, and {} is the cluster {}: resume against the cluster the run wrote (the checkpoint and its journals are kept)",
                            path.display(),
                            ck.cluster.as_deref().unwrap_or("(no id)"),
                            to.topic,
                            cluster.as_deref().unwrap_or("(no id)")
                        )));
                    }
                    match (&ck.topic_id, &written_id) {
                        (Some(was), Some(now)) if was != now => {
                            return Err(fail(format!(
                                "{} is not the topic the run wrote: its id is {now}, the run's was {was}. It was deleted and created again: the run's writes there are gone, and a resume would go on from where they ended. The checkpoint {} and its journals are kept",
                                to.topic,
                                path.display()
                            )));
                        }
                        // The run recorded an id and none can be asked now:
                        // the records alone can be made to match.
                        (Some(was), None) if !w.without_topic_id => {
                            return Err(fail(format!(
                                "the run wrote the topic {} of id {was}, and its id cannot be asked now (above): resume when the broker answers it (the checkpoint {} and its journals are kept)",
                                to.topic,
                                path.display()
                            )));
                        }
                        _ => {}
                    }
                    ck
                }
                None => Checkpoint::create(&w.checkpoint, of, cluster, written_id)?,
            };
            (Some(ck), Some(producer), Some(locks))
        }
    };
    let hash = KeyHash::default();
    let mut foreign = BTreeMap::new();
    let mut replayed = 0;
    let mut others = Others::default();
    if let (Some(ck), Some(producer), Some(w)) = (&checkpoint, &producer, writing) {
        if w.resume.is_some() {
            if w.unchecked_resume {
                // The negative control: the journals first, unread.
                for &(p, _, _) in &parts {
                    replayed += replay(ck, producer, to, p, &HashSet::new(), &hash)?.0;
                }
            }
            // Read first: every partition the run wrote to, from its first
            // write there, before anything is written.
            for &(p, _, _) in &parts {
                if let Some(prog) = ck.progress(p) {
                    if !same {
                        same_source(from, ck, p, prog)?;
                    }
                    foreign.insert(p, since(to, ck, p, prog, &hash)?);
                }
            }
            // Then the unfinished journals, less the keys others wrote
            // since: a key cut between its tombstones and its value gets
            // its value even if the run stops again later.
            for &(p, _, _) in &parts {
                let none = HashSet::new();
                let skip = foreign.get(&p).map_or(&none, |f: &Foreign| &f.keys);
                let (n, left) = replay(ck, producer, to, p, skip, &hash)?;
                replayed += n;
                others.journaled_keys += left;
            }
            for (&p, f) in &foreign {
                others.records += f.records;
                others.keys += f.keys.len() as u64;
                for k in &f.listed {
                    if others.listed.len() < LISTED {
                        others.listed.push((p, k.clone()));
                    }
                }
            }
        }
    }
    let passes = if writing.is_some() { 3 } else { 1 };
    let total: u64 = parts
        .iter()
        .map(|&(_, low, high)| u64::try_from(high - low).unwrap_or(0) * passes)
        .sum();
    let bar = progress(total, quiet, name);
    let job = Job {
        from,
        to,
        planner: Planner::new(from, to, command),
        writing: checkpoint.as_ref().zip(producer.as_ref()),
        chunk_records: writing.map_or(CHUNK_RECORDS, |w| w.chunk_records),
        fail_after: writing.and_then(|w| w.fail_after),
        hash: &hash,
        foreign: &foreign,
        bar: &bar,
    };
    // One transactional producer writes one chunk at a time: with
    // `-X transactional.id`, one partition at a time.
    let one_at_a_time;
    let readers = if writing.is_some() && is_transactional(to) {
        one_at_a_time = Setup {
            parallel: 1,
            ..from.clone()
        };
        &one_at_a_time
    } else {
        from
    };
    let done = for_partitions(readers, &parts, &bar, |index: &mut Index, p| {
        job.partition(index, p)
    });
    let done = match done {
        Ok(d) => d,
        Err(Fail(msg)) => {
            drop(job);
            return Err(match &checkpoint {
                Some(ck) if ck.touched() => Fail(format!(
                    "{msg}\nits progress is in {}: run the same command with --resume {0} to go on",
                    ck.path().display()
                )),
                Some(ck) => {
                    // Nothing written: no progress to keep.
                    let _ = ck.remove();
                    Fail(msg)
                }
                None => Fail(msg),
            });
        }
    };
    bar.finish_and_clear();
    let read = from
        .only
        .as_ref()
        .map(|_| parts.iter().map(|p| p.0).collect::<Vec<_>>());
    let mut out = Done {
        before: Audit {
            partitions: count,
            read: read.clone(),
            counts: Counts::default(),
        },
        plan: PlanCounts::default(),
        after: writing.map(|_| Audit {
            partitions: count,
            read,
            counts: Counts::default(),
        }),
        written: 0,
        replayed,
        others,
    };
    for d in done {
        out.before.counts.merge(d.before);
        out.plan.merge(&d.plan);
        if let (Some(a), Some(c)) = (&mut out.after, d.after) {
            a.counts.merge(c);
        }
        out.written += d.written;
    }
    out.before.counts.across_partitions();
    if let Some(a) = &mut out.after {
        a.counts.across_partitions();
    }
    let checked = check_keyset(from, &out.before.counts);
    if let Some(ck) = &checkpoint {
        // Done (or nothing written, the keyset refused).
        if checked.is_ok() || !ck.touched() {
            ck.remove()?;
        }
    }
    checked.map(|()| out)
}

/// The checkpoint of a new run of `command` on the topic of `s`:
/// `--checkpoint`, else a name of the command, the topic and the
/// partitions in the working directory.
pub(crate) fn checkpoint_path(progress: &ProgressArgs, command: &str, s: &Setup) -> PathBuf {
    progress.checkpoint.clone().unwrap_or_else(|| {
        let parts = s.only.as_ref().map_or(String::new(), |o| {
            let list: Vec<i32> = o.iter().copied().collect();
            format!("-p{}", crate::report::ranges(&list))
        });
        PathBuf::from(format!(
            "tombstone-crypt-{command}-{}{parts}.checkpoint",
            s.topic
        ))
    })
}
