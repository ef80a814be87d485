//! A resumed run's check before it writes ([`since`]): each partition it
//! wrote to read from its first write there, checked to be the partition it
//! wrote, and each key someone else wrote since left to that write. And
//! every run's check after it wrote a partition ([`overwritten`]): no key
//! someone else wrote while it wrote is left under the run's older plan.

use std::collections::{HashMap, HashSet};

use indicatif::ProgressBar;
use tombstone_crypt::kafka::rdkafka::consumer::Consumer as _;

use crate::checkpoint::{Checkpoint, Mark, Progress};
use crate::key_state::KeyHash;
use crate::outcome::{fail, Fail};
use crate::read::{consumer, read_partition, Rec, Setup};
use crate::record::key_of;
use crate::report::{hex, LISTED};

/// What others wrote to the partitions a resumed run wrote to, since its
/// first write to each: their keys keep those writes.
#[derive(Default)]
pub(crate) struct Others {
    /// Records.
    pub(crate) records: u64,
    /// Distinct keys.
    pub(crate) keys: u64,
    /// Keys whose journaled records were not written again.
    pub(crate) journaled_keys: u64,
    /// The first keys found ([`LISTED`] at most): partition and key group
    /// (its plaintext, or its bytes when it is not encrypted).
    pub(crate) listed: Vec<(i32, Vec<u8>)>,
}

impl Others {
    /// Adds what others wrote to a report: text (empty when nothing) and
    /// the JSON fields.
    pub(crate) fn report(&self, json: &mut serde_json::Value) -> String {
        let listed: Vec<serde_json::Value> = self
            .listed
            .iter()
            .map(|(p, k)| serde_json::json!({"partition": p, "key": hex(k)}))
            .collect();
        json["written_by_others"] = serde_json::json!({"records": self.records,
            "keys": self.keys, "journaled_keys_left": self.journaled_keys, "listed": listed});
        if self.keys == 0 {
            return String::new();
        }
        let mut text = format!(
            "since the run stopped, others wrote {} records of {} keys: those writes stand, and the run left those keys alone ({} of them were in its journals)\n",
            self.records, self.keys, self.journaled_keys
        );
        for (p, k) in &self.listed {
            text.push_str(&format!("left {p} {}\n", hex(k)));
        }
        if self.keys > self.listed.len() as u64 {
            text.push_str(&format!(
                "(and {} more)\n",
                self.keys - self.listed.len() as u64
            ));
        }
        text
    }
}

/// The keys others wrote to one partition since the run's first write.
#[derive(Default)]
pub(super) struct Foreign {
    /// Their hashes.
    pub(super) keys: HashSet<(u64, u32)>,
    /// Records.
    pub(super) records: u64,
    /// The first keys' groups.
    pub(super) listed: Vec<Vec<u8>>,
}

/// The high watermark of `partition` now, as the broker reports it: what
/// tells whether anyone wrote to it meanwhile.
pub(super) fn watermark(s: &Setup, partition: i32) -> Result<i64, Fail> {
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

/// The end of partition `p` of the topic of `s` now, read to its end (the
/// broker's offsets may say less: tansu 0.6.0 answers the last batch's
/// base offset + 1), and its last record's mark.
pub(super) fn tail(s: &Setup, p: i32) -> Result<(i64, Option<Mark>), Fail> {
    let high = watermark(s, p)?;
    let mut last = None;
    let bar = ProgressBar::hidden();
    let next = read_partition(s, &s.topic, p, (high - 1).max(0), None, &bar, |r| {
        last = Some(Mark::of(r.offset, r.timestamp, r.key, r.value));
        Ok(())
    })?;
    let end = next.max(high);
    Ok((end, last.filter(|m| m.offset + 1 == end)))
}

/// The id of the cluster of `s`, as its metadata gives it.
pub(super) fn cluster_id(s: &Setup) -> Result<Option<String>, Fail> {
    Ok(consumer(s)?.client().fetch_cluster_id(s.timeout))
}

/// The id of the topic of `s`, as the broker's metadata gives it; `None`
/// (said on stderr) when it cannot be asked with these settings, the
/// broker names none, or the asking failed: the run then knows the topic
/// by its records alone.
pub(super) fn topic_id(s: &Setup) -> Option<String> {
    use tombstone_crypt::kafka::{topic_identity, TopicIdentity};
    match topic_identity(&s.config, &s.topic, s.timeout) {
        Ok(TopicIdentity::Known(id)) => Some(id.to_string()),
        Ok(TopicIdentity::Unknown(why)) => {
            eprintln!(
                "warning: the id of {} is not known ({why}): a topic deleted and created again is told by its records alone",
                s.topic
            );
            None
        }
        Err(e) => {
            eprintln!(
                "warning: asking the id of {} failed ({e}): a topic deleted and created again is told by its records alone",
                s.topic
            );
            None
        }
    }
}

/// Reads what was written to partition `p` of the topic a resumed run
/// writes, from the record before its first write there to the end, before
/// the run writes anything: the partition must be the one it wrote (not a
/// topic deleted and created again: its end is not before the run's first
/// write, and the record before that is the one recorded, or compacted
/// away), and every key someone else wrote since is the run's no longer.
pub(super) fn since(
    to: &Setup,
    ck: &Checkpoint,
    p: i32,
    prog: Progress,
    hash: &KeyHash,
) -> Result<Foreign, Fail> {
    let mut out = Foreign::default();
    let mut found = None;
    let mut own = 0u64;
    let run = ck.run.as_bytes();
    // The run's first and last acknowledged records there.
    let anchors: Vec<Mark> = match prog.anchors {
        None => Vec::new(),
        Some((first, last)) if first == last => vec![first],
        Some((first, last)) => vec![first, last],
    };
    let mut seen = vec![AnchorSeen::default(); anchors.len()];
    // The record just before the run's first write: at its offset as it
    // was, or gone under a later record of its key.
    let mut mark_seen = AnchorSeen::default();
    let bar = ProgressBar::hidden();
    // Never from past the partition's end (a topic created again can be
    // shorter): a read there would wait for records that never come.
    let high = watermark(to, p)?;
    let start = (prog.from - 1).max(0).min(high);
    let next = read_partition(to, &to.topic, p, start, None, &bar, |r| {
        if let Some(m) = &prog.mark {
            mark_seen.see(m, r, |r| {
                Mark::of(r.offset, r.timestamp, r.key, r.value) == *m
            });
        }
        if r.offset < prog.from {
            if prog.mark.is_some_and(|m| m.offset == r.offset) {
                found = Some(Mark::of(r.offset, r.timestamp, r.key, r.value));
            }
            return Ok(());
        }
        for (a, seen) in anchors.iter().zip(&mut seen) {
            seen.see(a, r, |r| {
                r.run == Some(run) && Mark::of(r.offset, None, r.key, r.value) == *a
            });
        }
        if r.run == Some(run) {
            own += 1;
            return Ok(());
        }
        out.records += 1;
        if let Some(wire) = r.key {
            let key = key_of(to, wire);
            if out.keys.insert(hash.of(key.encrypted, &key.group)) && out.listed.len() < LISTED {
                out.listed.push(key.group);
            }
        }
        Ok(())
    })?;
    let end = next.max(high);
    let elsewhere = |why: String| {
        fail(format!(
            "{}/{p} is not the partition the run wrote: {why}. Was the topic deleted and created again, or is this another cluster? The checkpoint {} and its journals are kept: resume against the cluster and topic the run wrote",
            to.topic,
            ck.path().display()
        ))
    };
    if end < prog.from {
        return Err(elsewhere(format!(
            "it ends at offset {end}, before the run's first write there (offset {})",
            prog.from
        )));
    }
    // The run's records can leave only under someone else's newer ones (or
    // as tombstones past delete.retention.ms): with neither there, this is
    // not where they went.
    if prog.written > 0 && own == 0 && out.records == 0 {
        return Err(elsewhere(format!(
            "it holds none of the {} records the run wrote there, and nothing else after offset {}",
            prog.written, prog.from
        )));
    }
    if let (Some(want), Some(got)) = (prog.mark, found) {
        if want != got {
            return Err(elsewhere(format!(
                "its record at offset {} is not the one that was there when the run began",
                want.offset
            )));
        }
    }
    if let Some(m) = &prog.mark {
        if let Some(why) = mark_seen.refusal(m, end, "the record before the run's first write") {
            return Err(elsewhere(why));
        }
    }
    for (a, seen) in anchors.iter().zip(&seen) {
        if let Some(why) = seen.refusal(a, end, "the run's acknowledged record") {
            return Err(elsewhere(why));
        }
    }
    // None of the run's acknowledged records is there (all compacted under
    // later records of their keys, or never written here) and no record
    // from before its first write is there as it was: nothing tells the
    // partition it wrote from one created again whose writer wrote the
    // same keys (topic ids would; librdkafka's Rust binding gives none).
    // Refused rather than risk writing a journal or a plan into another
    // topic.
    let mark_there = prog.mark.is_some() && prog.mark == found;
    if prog.written > 0 && own == 0 && !mark_there {
        return Err(elsewhere(format!(
            "none of the {} records the run wrote there is left (each gone under a later record of its key, or never written here){}, so nothing shows it is the partition the run wrote and not one created again, whose journal written into it could bring back a key deleted there. A resume cannot tell them apart and writes nothing; if you know it is the partition the run wrote, delete the checkpoint and its journals and run again (a key the stopped run left between its records may then be lost)",
            prog.written,
            if prog.mark.is_some() {
                ", and the record before its first write is not there as it was"
            } else {
                ", and the partition was empty before it"
            }
        )));
    }
    Ok(out)
}

/// What a read saw of a record a checkpoint recorded (an anchor): the
/// record at its offset, if any, and whether a later record of its key.
#[derive(Clone, Copy, Default)]
pub(super) struct AnchorSeen {
    /// `Some(true)`: its offset holds the same record; `Some(false)`:
    /// another one.
    pub(super) at: Option<bool>,
    /// A later record has its key.
    pub(super) later_of_its_key: bool,
}

impl AnchorSeen {
    fn see(&mut self, a: &Mark, r: &Rec<'_>, same: impl FnOnce(&Rec<'_>) -> bool) {
        if r.offset == a.offset {
            self.at = Some(same(r));
        } else if r.offset > a.offset && a.same_key(r.key) {
            self.later_of_its_key = true;
        }
    }

    /// Why the partition read to `end` is not the one the anchor `a` was
    /// recorded on, if it is not: an offset keeps its record for ever or,
    /// compacted, loses it under a later record of its key; and the end
    /// of a partition never moves back.
    fn refusal(&self, a: &Mark, end: i64, what: &str) -> Option<String> {
        if end <= a.offset {
            return Some(format!(
                "it ends at offset {end}, before {what} at offset {}",
                a.offset
            ));
        }
        match (self.at, self.later_of_its_key) {
            (Some(true), _) | (None, true) => None,
            (Some(false), _) => Some(format!(
                "its record at offset {} is not {what}",
                a.offset
            )),
            (None, false) => Some(format!(
                "{what} at offset {} is gone, and no later record of its key is there (compaction removes a record only under a newer one of its key; the one other way is a tombstone older than the topic's delete.retention.ms: then delete the checkpoint and its journals and run again)",
                a.offset
            )),
        }
    }
}

/// Checks, before a resumed copy (`--to-topic`) writes, that partition
/// `p` of its source is the one it planned from: the record it recorded
/// just before its planned end is still there, or compacted under a later
/// record of its key (a source deleted and created again is refused).
pub(super) fn same_source(
    from: &Setup,
    ck: &Checkpoint,
    p: i32,
    prog: Progress,
) -> Result<(), Fail> {
    let Some(a) = prog.source else {
        return Ok(());
    };
    let high = watermark(from, p)?;
    let mut seen = AnchorSeen::default();
    let bar = ProgressBar::hidden();
    let next = read_partition(from, &from.topic, p, a.offset.min(high), None, &bar, |r| {
        seen.see(&a, r, |r| {
            Mark::of(r.offset, r.timestamp, r.key, r.value) == a
        });
        Ok(())
    })?;
    match seen.refusal(&a, next.max(high), "the record the run planned up to") {
        None => Ok(()),
        Some(why) => Err(fail(format!(
            "{}/{p} is not the partition the run copied from: {why}. Was the topic deleted and created again? The checkpoint {} and its journals are kept: resume against the topic the run read",
            from.topic,
            ck.path().display()
        ))),
    }
}

/// Reads partition `p` of the topic the run wrote, from its end before the
/// run's first write there (`now.from`) through the run's last
/// acknowledged record there, once the run's writes are acknowledged: a
/// key someone else wrote meanwhile whose record the run's own records of
/// that key then followed has lost that write (the run planned from what
/// the partition held before; a `repair` tombstone after a producer's new
/// value deletes it). Such keys fail the run,
/// named with both offsets, rather than pass as written: the write they
/// lost is still on the topic at its offset (until compaction removes it
/// under the run's newer record), so it can be written again.
pub(super) fn overwritten(
    to: &Setup,
    ck: &Checkpoint,
    p: i32,
    now: &Progress,
    hash: &KeyHash,
) -> Result<(), Fail> {
    let run = ck.run.as_bytes();
    // Each key others wrote since `from`: the offset of their last record
    // not yet followed by one of the run's.
    let mut theirs: HashMap<(u64, u32), i64> = HashMap::new();
    let mut lost = 0u64;
    let mut listed: Vec<(Vec<u8>, i64, i64)> = Vec::new();
    let bar = ProgressBar::hidden();
    // Read (committed records only) through the run's last acknowledged
    // record: a transaction of others still open before it holds the read
    // at its first record until it ends, and a record it commits there
    // may be one the run then wrote over.
    let through = now.anchors.map_or(now.from, |(_, last)| last.offset);
    let deadline = std::time::Instant::now() + to.timeout;
    let mut next = now.from;
    loop {
        next = read_partition(to, &to.topic, p, next, None, &bar, |r| {
            let Some(wire) = r.key else {
                return Ok(());
            };
            let key = key_of(to, wire);
            let h = hash.of(key.encrypted, &key.group);
            if r.run != Some(run) {
                theirs.insert(h, r.offset);
            } else if let Some(at) = theirs.remove(&h) {
                lost += 1;
                if listed.len() < LISTED {
                    listed.push((key.group, at, r.offset));
                }
            }
            Ok(())
        })?;
        if next > through {
            break;
        }
        if std::time::Instant::now() > deadline {
            return Err(fail(format!(
                "{}/{p}: a transaction of others open at offset {next}, before the run's last record there (offset {through}), has not ended after {} s, so the run cannot tell whether it wrote over what that transaction writes. The run's own writes are done and acknowledged: once the transaction ends, `audit` the topic, and compare each key the transaction wrote with the run's records after it",
                to.topic,
                to.timeout.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    if lost == 0 {
        return Ok(());
    }
    let mut keys: Vec<String> = listed
        .iter()
        .map(|(k, at, over)| format!("{} (theirs at offset {at}, the run's at {over})", hex(k)))
        .collect();
    if lost > listed.len() as u64 {
        keys.push(format!("and {} more", lost - listed.len() as u64));
    }
    Err(fail(format!(
        "{}/{p}: the run wrote over {lost} keys that others wrote while it wrote the partition, so their writes are no longer the keys' last: {}. Each lost write is still on the topic at its offset until compaction removes it: write those keys again as their writers meant. Stop the topic's producers during a run",
        to.topic,
        keys.join(", ")
    )))
}
