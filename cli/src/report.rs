//! What an audit found ([`Audit`]): the counts of the partitions read,
//! each key's state counted as its partition is settled (never a value,
//! and a key's bytes only for `--list-keys`), the findings (broken
//! tombstones, split keys, undecryptable deciding values), and their
//! report in text and JSON.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::fields::{Checked, FieldState};
use crate::key_state::{Entry, Index, Kind};

/// The most keys (or records) a report names.
pub(crate) const LISTED: usize = 100;

/// What was counted in one partition or more; partitions add up.
#[derive(Default)]
pub(crate) struct Counts {
    /// Records read.
    pub(crate) records: u64,
    /// Records without a key: compaction never touches them, so the
    /// commands count them and leave them alone.
    pub(crate) unkeyed: u64,
    /// Tombstones read.
    pub(crate) tombstones: u64,
    /// Present values that are not ciphertexts.
    pub(crate) plaintext: u64,
    /// Values that decrypt to the null marker.
    pub(crate) marker_values: u64,
    /// Values under subject keys whose subject was shredded.
    pub(crate) shredded_values: u64,
    /// Values under subject keys whose DEK the key store neither holds nor
    /// records as shredded.
    pub(crate) unknown_subject_keys: u64,
    /// Values of the subject-key format read without `--subject-keyset`.
    pub(crate) subject_values_unread: u64,
    /// Records whose key does not decrypt under the key keyset.
    pub(crate) undecryptable_record_keys: u64,
    /// Present values that decrypted.
    pub(crate) decrypted: u64,
    /// Present values that did not decrypt.
    pub(crate) undecryptable_values: u64,
    /// The key ids those name.
    pub(crate) undecryptable_ids: BTreeSet<u32>,
    /// Every present value (not only each key's newest) by the key id it
    /// names: what a consumer replaying the whole topic needs.
    pub(crate) all_by_key_id: BTreeMap<u32, u64>,
    /// Keys.
    keys: u64,
    /// Keys by the kind of their deciding record.
    kinds: BTreeMap<&'static str, u64>,
    /// Split keys.
    split: u64,
    /// Keys by the key id their deciding value names.
    newest_by_key_id: BTreeMap<u32, u64>,
    /// Keys whose deciding value does not decrypt, by the key id it names.
    undecryptable_by_key_id: BTreeMap<u32, u64>,
    /// With `--list-keys`: each key's partition, group and state.
    pub(crate) listed: Vec<(i32, Vec<u8>, &'static str)>,
    /// The hashes of the keys with a present value, of every partition
    /// added (12 bytes a key), until [`Counts::across_partitions`].
    live: Vec<(u64, u32)>,
    /// Keys with a present value in more than one partition.
    several: u64,
    /// The values' encrypted fields (`reencrypt --fields`).
    pub(crate) fields: FieldCounts,
}

/// What was counted of the values' encrypted fields (`reencrypt
/// --fields`): never a field's plaintext, nor a record key.
#[derive(Default)]
pub(crate) struct FieldCounts {
    /// Whether fields were looked at.
    pub(crate) on: bool,
    /// Fields that authenticate at their path, of every present value
    /// read (not only each key's newest), by key id.
    by_key_id: BTreeMap<u32, u64>,
    /// Fields that do not authenticate at their path, of every present
    /// value read.
    not_authenticating: u64,
    /// The key ids those name.
    pub(crate) not_authenticating_ids: BTreeSet<u32>,
    /// Present values that are not JSON.
    not_json: u64,
    /// The first records ([`LISTED`]) with a field that does not
    /// authenticate: partition, offset, the paths of those fields.
    pub(crate) listed: Vec<(i32, i64, Vec<String>)>,
    /// Keys by what their deciding value's fields are.
    keys: BTreeMap<&'static str, u64>,
}

impl FieldCounts {
    /// Counts the fields of one present value, at `partition`/`offset`.
    pub(crate) fn add(&mut self, c: &Checked, partition: i32, offset: i64) {
        for id in &c.key_ids {
            *self.by_key_id.entry(*id).or_default() += 1;
        }
        self.not_authenticating += c.bad.len() as u64;
        self.not_authenticating_ids
            .extend(c.bad.iter().map(|(_, id)| *id));
        self.not_json += u64::from(c.state == FieldState::NotJson);
        if !c.bad.is_empty() && self.listed.len() < LISTED {
            let paths = c.bad.iter().map(|(p, _)| p.clone()).collect();
            self.listed.push((partition, offset, paths));
        }
    }

    /// Whether no field authenticates and some do not: the wrong keyset
    /// (or `--field-aad`), not a topic full of findings.
    pub(crate) fn none_authenticates(&self) -> bool {
        self.by_key_id.is_empty() && self.not_authenticating > 0
    }

    /// Keys whose deciding value's fields are `state`.
    fn keys_of(&self, state: FieldState) -> u64 {
        self.keys.get(field_state_name(state)).copied().unwrap_or(0)
    }

    fn merge(&mut self, o: FieldCounts) {
        self.on |= o.on;
        for (k, v) in o.by_key_id {
            *self.by_key_id.entry(k).or_default() += v;
        }
        self.not_authenticating += o.not_authenticating;
        self.not_authenticating_ids.extend(o.not_authenticating_ids);
        self.not_json += o.not_json;
        for l in o.listed {
            if self.listed.len() < LISTED {
                self.listed.push(l);
            }
        }
        for (k, v) in o.keys {
            *self.keys.entry(k).or_default() += v;
        }
    }
}

/// A name for each state of a value's fields, to count by.
fn field_state_name(f: FieldState) -> &'static str {
    match f {
        FieldState::Unchecked => "unchecked",
        FieldState::Current => "current",
        FieldState::Old => "under_older_keys",
        // A finding first: the key's other fields are written again.
        FieldState::Bad | FieldState::OldAndBad => "not_authenticating",
        FieldState::NotJson => "not_json",
    }
}

/// A name for each kind, to count by.
fn kind_name(k: Kind) -> &'static str {
    match k {
        Kind::Tombstone => "tombstone",
        Kind::Live => "live",
        Kind::Broken => "broken",
        Kind::Undecryptable => "undecryptable",
        Kind::Plaintext => "plaintext",
    }
}

impl Counts {
    /// Counts every key of a settled partition index.
    pub(crate) fn add_keys(&mut self, index: &Index) {
        for (h, e) in index.hashed() {
            self.add_key(e);
            if matches!(e.kind(), Kind::Live | Kind::Undecryptable | Kind::Plaintext) {
                self.live.push(h);
            }
        }
    }

    /// Once every partition is added: counts the keys with a present value
    /// in more than one partition (a key's partition moved: partitions
    /// were added to the topic, or writers chose partitions differently),
    /// and lets the hashes go.
    pub(crate) fn across_partitions(&mut self) {
        let mut live = std::mem::take(&mut self.live);
        live.sort_unstable();
        let mut i = 0;
        while i < live.len() {
            let mut j = i + 1;
            while j < live.len() && live[j] == live[i] {
                j += 1;
            }
            self.several += u64::from(j - i > 1);
            i = j;
        }
    }

    /// Counts one settled key.
    fn add_key(&mut self, e: &Entry) {
        self.keys += 1;
        *self.kinds.entry(kind_name(e.kind())).or_default() += 1;
        self.split += u64::from(e.split());
        if let Some(id) = e.key_id() {
            *self.newest_by_key_id.entry(id).or_default() += 1;
            if e.kind() == Kind::Undecryptable {
                *self.undecryptable_by_key_id.entry(id).or_default() += 1;
            }
        }
        if self.fields.on && matches!(e.kind(), Kind::Live | Kind::Plaintext) {
            *self
                .fields
                .keys
                .entry(field_state_name(e.fields()))
                .or_default() += 1;
        }
    }

    /// Adds `o`'s counts to these.
    pub(crate) fn merge(&mut self, o: Counts) {
        fn add<K: Ord>(a: &mut BTreeMap<K, u64>, b: BTreeMap<K, u64>) {
            for (k, v) in b {
                *a.entry(k).or_default() += v;
            }
        }
        self.records += o.records;
        self.unkeyed += o.unkeyed;
        self.tombstones += o.tombstones;
        self.plaintext += o.plaintext;
        self.marker_values += o.marker_values;
        self.shredded_values += o.shredded_values;
        self.unknown_subject_keys += o.unknown_subject_keys;
        self.subject_values_unread += o.subject_values_unread;
        self.undecryptable_record_keys += o.undecryptable_record_keys;
        self.decrypted += o.decrypted;
        self.undecryptable_values += o.undecryptable_values;
        self.undecryptable_ids.extend(o.undecryptable_ids);
        add(&mut self.all_by_key_id, o.all_by_key_id);
        self.keys += o.keys;
        add(&mut self.kinds, o.kinds);
        self.split += o.split;
        add(&mut self.newest_by_key_id, o.newest_by_key_id);
        add(&mut self.undecryptable_by_key_id, o.undecryptable_by_key_id);
        self.listed.extend(o.listed);
        self.live.extend(o.live);
        self.several += o.several;
        self.fields.merge(o.fields);
    }
}

/// The audit of a topic (of the partitions read).
#[derive(Default)]
pub(crate) struct Audit {
    /// The topic's partition count.
    pub(crate) partitions: usize,
    /// The partitions read, when not all (`--partitions`).
    pub(crate) read: Option<Vec<i32>>,
    /// What was counted.
    pub(crate) counts: Counts,
}

impl Audit {
    /// Keys whose deciding record is of `kind`.
    fn count(&self, kind: Kind) -> u64 {
        self.counts.kinds.get(kind_name(kind)).copied().unwrap_or(0)
    }

    /// Split keys.
    fn split(&self) -> u64 {
        self.counts.split
    }

    /// Keys whose deciding record is a present value that is not a broken
    /// delete.
    fn live_keys(&self) -> u64 {
        self.count(Kind::Live) + self.count(Kind::Undecryptable) + self.count(Kind::Plaintext)
    }

    /// Broken tombstones, undecryptable deciding values, split keys, or
    /// keys with a value in more than one partition; with `--fields`,
    /// deciding values with a field that does not authenticate, or that
    /// are not JSON.
    pub(crate) fn findings(&self) -> bool {
        let f = &self.counts.fields;
        self.count(Kind::Broken) > 0
            || self.count(Kind::Undecryptable) > 0
            || self.split() > 0
            || self.counts.several > 0
            || f.keys_of(FieldState::Bad) > 0
            || f.keys_of(FieldState::NotJson) > 0
    }

    /// The report, as text and as JSON; with `list_keys`, each key's state
    /// (its plaintext in hex).
    pub(crate) fn report(&self, topic: &str, list_keys: bool) -> (String, serde_json::Value) {
        let c = &self.counts;
        let undecryptable = &c.undecryptable_by_key_id;
        let key_ids = &c.newest_by_key_id;
        let ids = |m: &BTreeMap<u32, u64>| {
            m.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        let mut json = json!({
            "topic": topic,
            "partitions": self.partitions,
            "records": c.records,
            "unkeyed": c.unkeyed,
            "keys": c.keys,
            "tombstones": c.tombstones,
            "live_keys": self.live_keys(),
            "broken_tombstones": self.count(Kind::Broken),
            "split_keys": self.split(),
            "keys_in_several_partitions": c.several,
            "undecryptable": ids(undecryptable),
            "undecryptable_record_keys": c.undecryptable_record_keys,
            "plaintext": c.plaintext,
            "marker_values": c.marker_values,
            "shredded_values": c.shredded_values,
            "unknown_subject_keys": c.unknown_subject_keys,
            "subject_key_values_unread": c.subject_values_unread,
            "key_ids": ids(key_ids),
            "all_values_by_key_id": ids(&c.all_by_key_id),
        });
        if let Some(read) = &self.read {
            json["partitions_read"] = json!(read);
        }
        let per_id = |m: &BTreeMap<u32, u64>| {
            if m.is_empty() {
                "none".to_owned()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{v} under key {k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let mut text = format!(
            "topic              {topic} ({} partition{})\n\
             records            {}\n\
             without a key      {}\n\
             keys               {}\n\
             tombstones         {}\n\
             live keys          {}\n\
             broken tombstones  {}\n\
             split keys         {}\n\
             in >1 partition    {}\n\
             undecryptable      {}\n\
             plaintext values   {}\n\
             newest by key id   {}\n\
             all by key id      {}\n",
            self.partitions,
            match &self.read {
                None if self.partitions == 1 => String::new(),
                None => "s".to_owned(),
                Some(read) => format!("s, {} read: {}", read.len(), ranges(read)),
            },
            c.records,
            c.unkeyed,
            c.keys,
            c.tombstones,
            self.live_keys(),
            self.count(Kind::Broken),
            self.split(),
            c.several,
            per_id(undecryptable),
            c.plaintext,
            per_id(key_ids),
            per_id(&c.all_by_key_id),
        );
        if c.shredded_values > 0 {
            text.push_str(&format!(
                "shredded values    {} (a shred covers their keys: broken tombstones to repair; with --strict, undecryptable)\n",
                c.shredded_values
            ));
        }
        if c.subject_values_unread > 0 {
            text.push_str(&format!(
                "subject-key values {} (of the subject-key format, first byte 0x53: give --subject-keyset and its key store to read them; undecryptable until then)\n",
                c.subject_values_unread
            ));
        }
        if c.unknown_subject_keys > 0 {
            text.push_str(&format!(
                "unknown subject keys {} (their keys are neither in the key store nor shredded: the wrong key store, or changed values; never deletes)\n",
                c.unknown_subject_keys
            ));
        }
        if c.fields.on {
            let f = &c.fields;
            let listed: Vec<serde_json::Value> = f
                .listed
                .iter()
                .map(|(p, o, paths)| json!({"partition": p, "offset": o, "paths": paths}))
                .collect();
            json["fields"] = json!({
                "all_by_key_id": ids(&f.by_key_id),
                "not_authenticating": f.not_authenticating,
                "values_not_json": f.not_json,
                "keys": {
                    "current": f.keys_of(FieldState::Current),
                    "under_older_keys": f.keys_of(FieldState::Old),
                    "not_authenticating": f.keys_of(FieldState::Bad),
                    "not_json": f.keys_of(FieldState::NotJson),
                },
                "not_authenticating_records": listed,
            });
            text.push_str(&format!(
                "all fields by id   {}\n\
                 fields failing     {} (they do not authenticate at their path)\n\
                 values not JSON    {}\n\
                 keys' fields       {} current, {} under older keys, {} not authenticating, {} not JSON\n",
                per_id(&f.by_key_id),
                f.not_authenticating,
                f.not_json,
                f.keys_of(FieldState::Current),
                f.keys_of(FieldState::Old),
                f.keys_of(FieldState::Bad),
                f.keys_of(FieldState::NotJson),
            ));
            for (p, o, paths) in &f.listed {
                text.push_str(&format!(
                    "record {p}/{o}: {} not authenticate at {}\n",
                    if paths.len() == 1 {
                        "a field does"
                    } else {
                        "fields do"
                    },
                    paths.join(", ")
                ));
            }
        }
        if c.several > 0 {
            text.push_str(&format!(
                "finding: {} keys have a value in more than one partition (partitions were added to the topic, or its writers choose partitions differently): a reader of one partition, a store restored from it and compaction each see another value, and a delete reaches one copy only. See docs/CLI.md, \"Adding partitions\".\n",
                c.several
            ));
        }
        if list_keys {
            let mut listed: Vec<_> = c.listed.iter().collect();
            listed.sort_unstable();
            let mut states = Vec::with_capacity(listed.len());
            for (partition, key, name) in listed {
                let key = hex(key);
                text.push_str(&format!("key {partition} {key} {name}\n"));
                states.push(json!({"partition": partition, "key": key, "state": name}));
            }
            json["key_states"] = json!(states);
        }
        (text, json)
    }
}

/// Partition numbers as ranges: `0-3,7`.
pub(crate) fn ranges(ps: &[i32]) -> String {
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < ps.len() {
        let mut j = i;
        while j + 1 < ps.len() && ps[j + 1] == ps[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ps[i].to_string()
        } else {
            format!("{}-{}", ps[i], ps[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// Lowercase hex.
pub(crate) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
