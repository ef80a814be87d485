//! What an audit found ([`Audit`]): the counts of a topic, one small state
//! per key (never the values), the findings (broken tombstones, split
//! keys, undecryptable deciding values), and their report in text and
//! JSON.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use serde_json::json;

use crate::key_state::{GroupKey, KeyState, Kind};

/// The audit of a topic.
#[derive(Default)]
pub(crate) struct Audit {
    /// The topic's partition count.
    pub(crate) partitions: usize,
    /// Each partition's end offset before the read.
    pub(crate) highs: Vec<(i32, i64)>,
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
    /// Each key's state.
    pub(crate) keys: HashMap<GroupKey, KeyState>,
}

impl Audit {
    /// Newest values per key id, of all keys (`key_ids`) or of the keys
    /// whose newest value does not decrypt (`undecryptable`).
    fn by_key_id(&self, only: Option<Kind>) -> BTreeMap<u32, u64> {
        let mut m = BTreeMap::new();
        for s in self.keys.values() {
            if let Some(id) = s.key_id {
                if only.is_none_or(|k| k == s.kind) {
                    *m.entry(id).or_default() += 1;
                }
            }
        }
        m
    }

    /// Keys whose deciding record is of `kind`.
    fn count(&self, kind: Kind) -> u64 {
        self.keys.values().filter(|s| s.kind == kind).count() as u64
    }

    /// Split keys.
    fn split(&self) -> u64 {
        self.keys.values().filter(|s| s.split).count() as u64
    }

    /// Keys whose deciding record is a present value that is not a broken
    /// delete.
    fn live_keys(&self) -> u64 {
        self.keys
            .values()
            .filter(|s| matches!(s.kind, Kind::Live | Kind::Undecryptable | Kind::Plaintext))
            .count() as u64
    }

    /// Broken tombstones, undecryptable deciding values or split keys.
    pub(crate) fn findings(&self) -> bool {
        self.count(Kind::Broken) > 0 || self.count(Kind::Undecryptable) > 0 || self.split() > 0
    }

    /// The keys in (partition, key) order.
    pub(crate) fn sorted(&self) -> Vec<(&GroupKey, &KeyState)> {
        let mut keys: Vec<_> = self.keys.iter().collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        keys
    }

    /// The report, as text and as JSON; with `list_keys`, each key's state
    /// (its plaintext in hex).
    pub(crate) fn report(&self, topic: &str, list_keys: bool) -> (String, serde_json::Value) {
        let undecryptable = self.by_key_id(Some(Kind::Undecryptable));
        let key_ids = self.by_key_id(None);
        let ids = |m: &BTreeMap<u32, u64>| {
            m.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        let mut json = json!({
            "topic": topic,
            "partitions": self.partitions,
            "records": self.records,
            "unkeyed": self.unkeyed,
            "keys": self.keys.len(),
            "tombstones": self.tombstones,
            "live_keys": self.live_keys(),
            "broken_tombstones": self.count(Kind::Broken),
            "split_keys": self.split(),
            "undecryptable": ids(&undecryptable),
            "undecryptable_record_keys": self.undecryptable_record_keys,
            "plaintext": self.plaintext,
            "marker_values": self.marker_values,
            "key_ids": ids(&key_ids),
            "all_values_by_key_id": ids(&self.all_by_key_id),
        });
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
             undecryptable      {}\n\
             plaintext values   {}\n\
             newest by key id   {}\n\
             all by key id      {}\n",
            self.partitions,
            if self.partitions == 1 { "" } else { "s" },
            self.records,
            self.unkeyed,
            self.keys.len(),
            self.tombstones,
            self.live_keys(),
            self.count(Kind::Broken),
            self.split(),
            per_id(&undecryptable),
            self.plaintext,
            per_id(&key_ids),
            per_id(&self.all_by_key_id),
        );
        if list_keys {
            let mut states = Vec::with_capacity(self.keys.len());
            for ((partition, key), state) in self.sorted() {
                let key = hex(key);
                let name = state.state_name();
                text.push_str(&format!("key {partition} {key} {name}\n"));
                states.push(json!({"partition": partition, "key": key, "state": name}));
            }
            json["key_states"] = json!(states);
        }
        (text, json)
    }
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
