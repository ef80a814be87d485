//! What `repair` and `reencrypt` do to each partition, a few partitions at
//! once ([`run`]): a first pass builds the partition's index by the reading
//! rule and plans each key from its entry; with `--apply`, a second pass
//! reads the partition again up to where the first ended (never the run's
//! own writes) and writes each planned key's records, through the write
//! rule, when it reaches the key's deciding record; a third pass audits
//! the partition written. Memory: one index per partition being read, a
//! chunk of writes per partition being written.

use std::path::PathBuf;

use indicatif::ProgressBar;
use tombstone_crypt::kafka::rdkafka::consumer::Consumer as _;
use tombstone_crypt::kafka::rdkafka::producer::FutureProducer;

use crate::audit::{check_keyset, scan_partition, Pass, Scanned, Upto};
use crate::checkpoint::{Checkpoint, Progress, RunOf};
use crate::key_state::{Index, KeyHash};
use crate::plan::{Command, PlanCounts, Planner};
use crate::read::{consumer, partitions, progress, read_partition, Setup};
use crate::record::key_of;
use crate::report::ranges;
use crate::report::{Audit, Counts};
use crate::run::for_partitions;
use crate::write::{check_ordered, produce, producer, Sink, CHUNK_RECORDS};
use crate::{fail, Fail};

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
}

/// One partition's share of [`Done`].
struct PartDone {
    before: Counts,
    plan: PlanCounts,
    after: Option<Counts>,
    written: u64,
}

/// The high watermark of `partition` now, as the broker reports it: what
/// tells whether anyone wrote to it meanwhile.
fn watermark(s: &Setup, partition: i32) -> Result<i64, Fail> {
    let c = consumer(s)?;
    c.fetch_watermarks(&s.topic, partition, s.timeout)
        .map(|(_, high)| high)
        .map_err(|e| {
            fail(format!(
                "reading the offsets of {}/{partition}: {e}",
                s.topic
            ))
        })
}

/// Everything a partition's work needs.
struct Job<'a> {
    from: &'a Setup,
    to: &'a Setup,
    planner: Planner<'a>,
    writing: Option<(&'a Checkpoint, &'a FutureProducer)>,
    chunk_records: usize,
    fail_after: Option<u64>,
    hash: KeyHash,
    bar: &'a ProgressBar,
}

impl Job<'_> {
    fn pass(&self) -> Pass<'_> {
        Pass {
            hash: &self.hash,
            bar: self.bar,
            list: false,
        }
    }

    fn partition(&self, index: &mut Index, p: i32) -> Result<PartDone, Fail> {
        let (from, to) = (self.from, self.to);
        let progress = self.writing.and_then(|(ck, _)| ck.progress(p));
        let run = self.writing.map(|(ck, _)| ck.run.as_bytes());
        let before_mark = match (self.writing, self.planner.same) {
            (Some(_), true) => Some(watermark(from, p)?),
            _ => None,
        };
        let upto = match progress {
            Some(prog) => Upto::Resumed {
                end: prog.end,
                run: run.filter(|_| self.planner.same),
            },
            None => Upto::End,
        };
        let Scanned {
            counts: before,
            end,
        } = scan_partition(from, &from.topic, p, index, upto, &self.pass())?;
        let mut plan = PlanCounts::default();
        for e in index.entries_mut() {
            self.planner.decide(e, &mut plan);
        }
        let Some((ck, producer)) = self.writing else {
            return Ok(PartDone {
                before,
                plan,
                after: None,
                written: 0,
            });
        };
        let mut written = 0;
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
            ck.set(p, Progress { end, done: start })?;
            let mut sink = Sink::new(to, producer, &to.topic, p, ck, ck.run.as_bytes(), end)
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
            written = sink.written;
        }
        let after = scan_partition(to, &to.topic, p, index, Upto::End, &self.pass())?;
        Ok(PartDone {
            before,
            plan,
            after: Some(after.counts),
            written,
        })
    }
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
    format!(
        "{command:?}, null marker {:?}, aad {:?}, names {} and {}, value key {:?}, values keyset [{}], key keyset [{}]",
        from.marker,
        from.aad,
        from.name,
        to.name,
        from.value_key,
        keys(&to.keyset),
        to.key_keyset.as_ref().map(keys).unwrap_or_default(),
    )
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
    let (checkpoint, producer) = match writing {
        None => (None, None),
        Some(w) => {
            check_ordered(&from.config)?;
            let producer = producer(to)?;
            let of = RunOf {
                command: name.to_owned(),
                topic: from.topic.clone(),
                to_topic: to.topic.clone(),
                primary: to.keyset.primary().0,
                key_primary: to.key_keyset.as_ref().map(|k| k.primary().0),
                partitions: match &from.only {
                    None => "all".to_owned(),
                    Some(o) => ranges(&o.iter().copied().collect::<Vec<_>>()),
                },
                plan: plan_options(from, to, command),
            };
            let ck = match &w.resume {
                Some(path) => Checkpoint::load(path, &of)?,
                None => Checkpoint::create(&w.checkpoint, of)?,
            };
            (Some(ck), Some(producer))
        }
    };
    // A resumed run first writes again every chunk whose acknowledgement
    // it did not record, in every partition, before it reads anything:
    // a key cut between its tombstones and its value gets its value even
    // if the run stops again, or refuses, later.
    let mut replayed = 0;
    if let (Some(ck), Some(producer)) = (&checkpoint, &producer) {
        for &(p, _, _) in &parts {
            if let Some((through, writes)) = ck.unfinished_journal(p)? {
                replayed += produce(
                    producer,
                    &to.topic,
                    ck.run.as_bytes(),
                    &writes,
                    to.timeout,
                    None,
                )?;
                if let Some(prog) = ck.progress(p) {
                    ck.set(
                        p,
                        Progress {
                            done: through,
                            ..prog
                        },
                    )?;
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
        hash: KeyHash::default(),
        bar: &bar,
    };
    let done = for_partitions(from, &parts, &bar, |index: &mut Index, p| {
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
    };
    for d in done {
        out.before.counts.merge(d.before);
        out.plan.merge(&d.plan);
        if let (Some(a), Some(c)) = (&mut out.after, d.after) {
            a.counts.merge(c);
        }
        out.written += d.written;
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
