//! `audit`, `repair` and `reencrypt`: read every partition of a topic to
//! its end (where librdkafka reports it), keep one small state per key
//! (never the values), then write tombstones or rewritten values, but only
//! if no partition grew meanwhile.
//!
//! **The reading rule.** A key's state in its partition is its record with
//! the highest offset among all its forms on the wire (one per enabled key
//! of the key keyset), as a consumer replaying the partition in order sees
//! it. A key is *split* when another of its forms still holds a present
//! value: a store restored from the topic looks under the primary form
//! first and may read that value, and compaction keeps it.
//!
//! **The write rule.** Every write, of a tombstone or a value, goes through
//! [`KeyForms::writes`]: a tombstone for each older enabled form first, then
//! the record under the primary form, in the key's partition, in that
//! order (see [`produce`]).

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tombstone_crypt::rdkafka::config::ClientConfig;
use tombstone_crypt::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::rdkafka::error::{KafkaError, RDKafkaErrorCode};
use tombstone_crypt::rdkafka::message::Message as _;
use tombstone_crypt::rdkafka::producer::{DeliveryFuture, FutureProducer, FutureRecord};
use tombstone_crypt::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    DeterministicDeserializer, DeterministicSerializer, EncryptingSerializer, KeyForms, KeyStatus,
    Keyset, Serializer as _,
};
use zeroize::Zeroizing;

use crate::{
    fail, keysets, AuditArgs, Fail, NullMarker, Outcome, Output, ReencryptArgs, RepairArgs,
    TopicArgs, UnencryptedArg, ValueKey,
};

/// What a command reads a topic with.
#[derive(Clone)]
struct Setup {
    topic: String,
    /// The name the associated data binds to (`--aad-name`, else the topic).
    name: String,
    value_key: ValueKey,
    keyset: Keyset,
    key_keyset: Option<Keyset>,
    /// The key keyset with its disabled keys enabled: to recognize the
    /// forms of a key under keys it no longer reads (`None` when it has no
    /// disabled key).
    widened_keys: Option<Keyset>,
    marker: NullMarker,
    aad: AadPolicy,
    config: ClientConfig,
    timeout: Duration,
}

fn setup(a: &TopicArgs) -> Result<Setup, Fail> {
    let keyset = keysets::load(&a.keyset, a.decrypt_with.as_deref())?;
    if keyset.is_deterministic() {
        return Err(fail(
            "--keyset holds a deterministic (AES-SIV) keyset: that is for record keys (--key-keyset)",
        ));
    }
    let key_keyset = match &a.key_keyset {
        Some(p) => {
            let k = keysets::load(p, a.decrypt_with.as_deref())?;
            if !k.is_deterministic() {
                return Err(fail(
                    "--key-keyset must be a deterministic (AES-SIV) keyset",
                ));
            }
            Some(k)
        }
        None => None,
    };
    let widened_keys = key_keyset.as_ref().and_then(widened);
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &a.bootstrap);
    for kv in &a.config {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| fail(format!("-X {kv}: expected key=value")))?;
        config.set(k.trim(), v.trim());
    }
    Ok(Setup {
        topic: a.topic.clone(),
        name: a.aad_name.clone().unwrap_or_else(|| a.topic.clone()),
        value_key: a.value_key,
        keyset,
        key_keyset,
        widened_keys,
        marker: a.null_marker.clone(),
        aad: a.aad.into(),
        config,
        timeout: Duration::from_secs(a.timeout.max(1)),
    })
}

/// `keys` with every disabled key enabled, if it has one.
fn widened(keys: &Keyset) -> Option<Keyset> {
    let disabled: Vec<_> = keys
        .keys()
        .filter(|&(_, status)| status == KeyStatus::Disabled)
        .map(|(id, _)| id)
        .collect();
    if disabled.is_empty() {
        return None;
    }
    let mut all = keys.clone();
    for id in disabled {
        all.enable(id).ok()?;
    }
    Some(all)
}

/// Whether `value` (a librdkafka boolean) is true.
fn is_true(value: &str) -> bool {
    matches!(
        value.trim().to_ascii_lowercase().as_str(),
        "true" | "t" | "1"
    )
}

/// Refuses a producer configuration under which a retry could reorder a
/// key's records (a value landing after the tombstone written after it):
/// idempotence off with more than one request in flight. Order per key is
/// the write rule.
fn check_ordered(config: &ClientConfig) -> Result<(), Fail> {
    let idempotent = config.get("enable.idempotence").is_none_or(is_true);
    let one_in_flight = ["max.in.flight.requests.per.connection", "max.in.flight"]
        .iter()
        .any(|k| config.get(k).is_some_and(|v| v.trim() == "1"));
    if idempotent || one_in_flight {
        return Ok(());
    }
    Err(fail(
        "-X enable.idempotence=false with more than one request in flight: a retried record could land after the next record of its key (a value after its delete). The commands write each key's records in order; leave idempotence on, or add -X max.in.flight.requests.per.connection=1",
    ))
}

/// What a record (or the newest record of a key) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tombstone,
    Live,
    /// A present value that decrypts to the null marker: a delete that a
    /// broken layer wrote as a value.
    Broken,
    /// A present value that does not decrypt, or whose record key does not
    /// decrypt under the key keyset (a reader cannot read it).
    Undecryptable,
    Plaintext,
}

/// The newest record of one form of a key on the wire.
#[derive(Clone, Copy)]
struct Form {
    offset: i64,
    kind: Kind,
    /// The key id the value names (a ciphertext's).
    key_id: Option<u32>,
    /// Whether the record key decrypts under the key keyset as given (a
    /// reader reads it); always, without a key keyset.
    readable: bool,
}

/// One key: each of its forms on the wire (one, or one per key of a
/// rotated key keyset) with its newest record, and the record that decides
/// the key's state by the reading rule: the newest of all its readable
/// forms (of all its forms when none is readable).
struct KeyState {
    /// Whether the key's group is its plaintext, decrypted with the key
    /// keyset (its forms can be computed).
    encrypted: bool,
    forms: BTreeMap<Vec<u8>, Form>,
    /// The deciding record: its form, offset, kind and value key id.
    wire: Vec<u8>,
    offset: i64,
    kind: Kind,
    key_id: Option<u32>,
    /// Another form than the deciding one still holds a present value.
    split: bool,
}

impl KeyState {
    fn settle(&mut self) {
        let readable = self
            .forms
            .iter()
            .filter(|(_, f)| f.readable)
            .max_by_key(|(_, f)| f.offset);
        let decides = readable.or_else(|| self.forms.iter().max_by_key(|(_, f)| f.offset));
        let Some((wire, f)) = decides else {
            return;
        };
        self.wire.clone_from(wire);
        self.offset = f.offset;
        self.key_id = f.key_id;
        self.kind = match f.kind {
            Kind::Tombstone => Kind::Tombstone,
            _ if !f.readable => Kind::Undecryptable,
            kind => kind,
        };
        // A key no reader reads (no readable form) is undecryptable, not
        // split.
        self.split = f.readable
            && self
                .forms
                .iter()
                .any(|(w, g)| w != wire && g.kind != Kind::Tombstone);
    }

    /// The state `audit --list-keys` prints.
    fn state_name(&self) -> &'static str {
        if self.split {
            return "split";
        }
        match self.kind {
            Kind::Tombstone => "deleted",
            Kind::Live => "live",
            Kind::Broken => "broken",
            Kind::Undecryptable => "undecryptable",
            Kind::Plaintext => "plaintext",
        }
    }

    /// The forms seen on the wire that `forms` (the key's forms under the
    /// enabled keys) does not reach and whose newest record is a present
    /// value: under keys the key keyset no longer enables.
    fn unreached<'a>(&'a self, forms: &'a KeyForms) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.forms
            .iter()
            .filter(|(_, f)| f.kind != Kind::Tombstone)
            .map(|(w, _)| &w[..])
            .filter(move |w| !forms.all().any(|f| f == *w))
    }
}

/// A key: its partition, and its plaintext (or, without a key keyset or
/// when the key does not decrypt, its bytes on the wire).
type GroupKey = (i32, Vec<u8>);

/// The audit of a topic.
#[derive(Default)]
struct Audit {
    partitions: usize,
    highs: Vec<(i32, i64)>,
    records: u64,
    /// Records without a key: compaction never touches them, so the
    /// commands count them and leave them alone.
    unkeyed: u64,
    tombstones: u64,
    plaintext: u64,
    marker_values: u64,
    /// Records whose key does not decrypt under the key keyset.
    undecryptable_record_keys: u64,
    /// Present values that decrypted, and those that did not.
    decrypted: u64,
    undecryptable_values: u64,
    /// The key ids those name.
    undecryptable_ids: BTreeSet<u32>,
    /// Every present value (not only each key's newest) by the key id it
    /// names: what a consumer replaying the whole topic needs.
    all_by_key_id: BTreeMap<u32, u64>,
    keys: HashMap<GroupKey, KeyState>,
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

    fn count(&self, kind: Kind) -> u64 {
        self.keys.values().filter(|s| s.kind == kind).count() as u64
    }

    fn split(&self) -> u64 {
        self.keys.values().filter(|s| s.split).count() as u64
    }

    fn live_keys(&self) -> u64 {
        self.keys
            .values()
            .filter(|s| matches!(s.kind, Kind::Live | Kind::Undecryptable | Kind::Plaintext))
            .count() as u64
    }

    fn findings(&self) -> bool {
        self.count(Kind::Broken) > 0 || self.count(Kind::Undecryptable) > 0 || self.split() > 0
    }

    /// The keys in (partition, key) order.
    fn sorted(&self) -> Vec<(&GroupKey, &KeyState)> {
        let mut keys: Vec<_> = self.keys.iter().collect();
        keys.sort_unstable_by(|a, b| a.0.cmp(b.0));
        keys
    }

    fn report(&self, topic: &str, list_keys: bool) -> (String, serde_json::Value) {
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

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}
/// A record as read.
struct Rec<'a> {
    partition: i32,
    offset: i64,
    key: Option<&'a [u8]>,
    value: Option<&'a [u8]>,
}

/// The partitions of `topic` and their end offsets now.
fn end_offsets(consumer: &BaseConsumer, s: &Setup) -> Result<Vec<(i32, i64, i64)>, Fail> {
    let md = consumer
        .fetch_metadata(Some(&s.topic), s.timeout)
        .map_err(|e| fail(format!("reading the metadata of {}: {e}", s.topic)))?;
    let t = md
        .topics()
        .iter()
        .find(|t| t.name() == s.topic)
        .ok_or_else(|| fail(format!("the broker does not know the topic {}", s.topic)))?;
    if let Some(e) = t.error() {
        return Err(fail(format!(
            "the topic {}: {}",
            s.topic,
            tombstone_crypt::rdkafka::error::RDKafkaErrorCode::from(e)
        )));
    }
    if t.partitions().is_empty() {
        return Err(fail(format!("the topic {} has no partitions", s.topic)));
    }
    let mut out = Vec::new();
    for p in t.partitions() {
        let (low, high) = consumer
            .fetch_watermarks(&s.topic, p.id(), s.timeout)
            .map_err(|e| {
                fail(format!(
                    "reading the offsets of {}/{}: {e}",
                    s.topic,
                    p.id()
                ))
            })?;
        out.push((p.id(), low, high));
    }
    out.sort_unstable();
    Ok(out)
}

fn consumer(s: &Setup) -> Result<BaseConsumer, Fail> {
    let mut config = s.config.clone();
    config
        .set(
            "group.id",
            format!("tombstone-crypt-{}", std::process::id()),
        )
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("auto.offset.reset", "earliest");
    // Each read runs to the end of every partition, where the broker holds
    // the last, empty fetch for fetch.wait.max.ms (500 ms by default): 50
    // ms, unless -X says otherwise.
    if s.config.get("fetch.wait.max.ms").is_none() {
        config.set("fetch.wait.max.ms", "50");
    }
    config
        .create()
        .map_err(|e| fail(format!("creating a consumer: {e}")))
}

fn progress(total: u64, quiet: bool, what: &str) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    if quiet || !std::io::stderr().is_terminal() {
        bar.set_draw_target(ProgressDrawTarget::hidden());
    }
    if let Ok(style) =
        ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} records ({per_sec}, {eta} left)")
    {
        bar.set_style(style);
    }
    bar.set_message(what.to_owned());
    bar
}

/// Reads every partition from its first offset to its end, in offset
/// order per partition; `f` sees each record. Returns the partitions with
/// the end offsets the broker reported before the read.
///
/// The end of a partition is where librdkafka reports it (the high
/// watermark it learned while fetching), not a separately fetched
/// watermark: some Kafka-compatible brokers report that per batch.
fn read_topic(
    s: &Setup,
    quiet: bool,
    what: &str,
    mut f: impl FnMut(&Rec<'_>) -> Result<(), Fail>,
) -> Result<Vec<(i32, i64)>, Fail> {
    let consumer = consumer(s)?;
    let ends = end_offsets(&consumer, s)?;
    let mut tpl = TopicPartitionList::new();
    let mut remaining: HashSet<i32> = HashSet::new();
    let mut total = 0u64;
    for &(p, low, high) in &ends {
        // Offset 0, which resets to the earliest offset when compaction
        // has moved the log start: `Beginning` is looked up with a request
        // that librdkafka schedules about 0.5 s after the assignment.
        tpl.add_partition_offset(&s.topic, p, Offset::Offset(0))
            .map_err(|e| fail(format!("assigning {}/{p}: {e}", s.topic)))?;
        remaining.insert(p);
        total += u64::try_from(high - low).unwrap_or(0);
    }
    let bar = progress(total, quiet, what);
    consumer
        .assign(&tpl)
        .map_err(|e| fail(format!("assigning the partitions of {}: {e}", s.topic)))?;
    let mut last_progress = Instant::now();
    let mut read = 0u64;
    while !remaining.is_empty() {
        match consumer.poll(Duration::from_millis(200)) {
            None => {
                if last_progress.elapsed() > s.timeout {
                    bar.abandon();
                    return Err(fail(format!(
                        "no record from {} for {} s ({read} read, {} partitions not read to the end); is the broker up?",
                        s.topic,
                        s.timeout.as_secs(),
                        remaining.len()
                    )));
                }
            }
            Some(Err(KafkaError::PartitionEOF(p))) => {
                last_progress = Instant::now();
                remaining.remove(&p);
            }
            // librdkafka reconnects by itself (a broker connection down
            // for a moment); give up only when that outlasts the timeout.
            Some(Err(e)) if tombstone_crypt::is_transient_kafka_error(&e) => {
                if last_progress.elapsed() > s.timeout {
                    bar.abandon();
                    return Err(fail(format!(
                        "reading {}: {e}, and no record for {} s",
                        s.topic,
                        s.timeout.as_secs()
                    )));
                }
            }
            Some(Err(e)) => {
                bar.abandon();
                return Err(fail(format!("reading {}: {e}", s.topic)));
            }
            Some(Ok(m)) => {
                last_progress = Instant::now();
                f(&Rec {
                    partition: m.partition(),
                    offset: m.offset(),
                    key: m.key(),
                    value: m.payload(),
                })?;
                read += 1;
                if read > total {
                    bar.set_length(read);
                }
                bar.inc(1);
            }
        }
    }
    bar.finish_and_clear();
    Ok(ends.iter().map(|&(p, _, h)| (p, h)).collect())
}

/// What a present value is, and its plaintext when it decrypts.
enum Value {
    Plain(Zeroizing<Vec<u8>>, u32),
    Undecryptable(u32),
    NotCiphertext,
}

fn key_id(v: &[u8]) -> u32 {
    u32::from_be_bytes([v[1], v[2], v[3], v[4]])
}

/// The shortest ciphertext (AES-GCM: version, key id, nonce, tag).
const MIN_CIPHERTEXT: usize = 5 + 12 + 16;

/// What the value `v` of record `r` is, its associated data bound to
/// `bound` (the bytes of the record key that `--value-key` names; `None`
/// when they are unknown: a record key that does not decrypt). A KMS error
/// (the KMS down, or refusing a data key) fails the command: the value
/// cannot be told apart.
fn open_value(s: &Setup, r: &Rec<'_>, v: &[u8], bound: Option<&[u8]>) -> Result<Value, Fail> {
    if !s.keyset.names_a_key(v) {
        // The version byte and room for a nonce and a tag, under a key
        // this keyset lacks: a ciphertext it cannot read, more likely
        // than a plaintext value that starts so.
        if v.first() == Some(&1) && v.len() >= MIN_CIPHERTEXT {
            return Ok(Value::Undecryptable(key_id(v)));
        }
        return Ok(Value::NotCiphertext);
    }
    let id = key_id(v);
    let de = DecryptingDeserializer::new(Bytes, s.keyset.clone()).with_aad(s.aad);
    let ctx = value_context(&s.name, bound);
    match de.deserialize(&ctx, Some(v)) {
        Ok(Some(p)) => Ok(Value::Plain(Zeroizing::new(p), id)),
        Err(e @ tombstone_crypt::Error::Kms { .. }) => Err(fail(format!(
            "the value at {}/{} offset {}: {}",
            s.topic,
            r.partition,
            r.offset,
            crate::chain(&e)
        ))),
        _ => Ok(Value::Undecryptable(id)),
    }
}

fn value_context<'a>(name: &'a str, key: Option<&'a [u8]>) -> Context<'a> {
    match key {
        Some(k) => Context::new(name).with_key(k),
        None => Context::new(name),
    }
}

/// A record key as the commands see it.
struct RecordKey {
    /// What groups its records: its plaintext when the key keyset (its
    /// disabled keys included) decrypts it, else its bytes on the wire.
    group: Vec<u8>,
    /// Whether `group` is a plaintext decrypted with the key keyset.
    encrypted: bool,
    /// Whether it decrypts under the key keyset as given, as a reader's
    /// does (always, without a key keyset).
    readable: bool,
}

fn open_key(keys: &Keyset, name: &str, wire: &[u8]) -> Option<Vec<u8>> {
    DeterministicDeserializer::new(Bytes, keys.clone())
        .deserialize(&Context::new(name), Some(wire))
        .ok()
        .flatten()
}

fn key_of(s: &Setup, wire: &[u8]) -> RecordKey {
    let Some(keys) = &s.key_keyset else {
        return RecordKey {
            group: wire.to_vec(),
            encrypted: false,
            readable: true,
        };
    };
    if let Some(plain) = open_key(keys, &s.name, wire) {
        return RecordKey {
            group: plain,
            encrypted: true,
            readable: true,
        };
    }
    match s
        .widened_keys
        .as_ref()
        .and_then(|all| open_key(all, &s.name, wire))
    {
        Some(plain) => RecordKey {
            group: plain,
            encrypted: true,
            readable: false,
        },
        None => RecordKey {
            group: wire.to_vec(),
            encrypted: false,
            readable: false,
        },
    }
}

/// The bytes of a record key its value is bound to (`--value-key`): its
/// plaintext (the same bytes as on the wire without a key keyset), or its
/// bytes on the wire; `None` when its plaintext is unknown.
fn bound<'a>(s: &Setup, key: &'a RecordKey, wire: &'a [u8]) -> Option<&'a [u8]> {
    match s.value_key {
        ValueKey::Wire => Some(wire),
        ValueKey::Plaintext if key.encrypted || s.key_keyset.is_none() => Some(&key.group),
        ValueKey::Plaintext => None,
    }
}

fn scan(s: &Setup, quiet: bool) -> Result<Audit, Fail> {
    let mut a = Audit::default();
    let highs = read_topic(s, quiet, "audit", |r| {
        a.records += 1;
        let Some(wire) = r.key else {
            a.unkeyed += 1;
            return Ok(());
        };
        let key = key_of(s, wire);
        if !key.readable {
            a.undecryptable_record_keys += 1;
        }
        let (kind, key_id) = match r.value {
            None => {
                a.tombstones += 1;
                (Kind::Tombstone, None)
            }
            Some(v) => match open_value(s, r, v, bound(s, &key, wire))? {
                Value::Plain(p, id) => {
                    a.decrypted += 1;
                    if s.marker.matches(&p) {
                        a.marker_values += 1;
                        (Kind::Broken, Some(id))
                    } else {
                        (Kind::Live, Some(id))
                    }
                }
                Value::Undecryptable(id) => {
                    a.undecryptable_values += 1;
                    a.undecryptable_ids.insert(id);
                    (Kind::Undecryptable, Some(id))
                }
                Value::NotCiphertext => {
                    a.plaintext += 1;
                    (Kind::Plaintext, None)
                }
            },
        };
        if let Some(id) = key_id {
            *a.all_by_key_id.entry(id).or_default() += 1;
        }
        let state = a
            .keys
            .entry((r.partition, key.group))
            .or_insert_with(|| KeyState {
                encrypted: key.encrypted,
                forms: BTreeMap::new(),
                wire: Vec::new(),
                offset: r.offset,
                kind,
                key_id,
                split: false,
            });
        state.forms.insert(
            wire.to_vec(),
            Form {
                offset: r.offset,
                kind,
                key_id,
                readable: key.readable,
            },
        );
        Ok(())
    })?;
    for state in a.keys.values_mut() {
        state.settle();
    }
    a.partitions = highs.len();
    a.highs = highs;
    if a.decrypted == 0 && a.undecryptable_values > 0 {
        // Not one value decrypts: the wrong keyset (or --aad), not a topic
        // full of findings.
        let named: Vec<u32> = a.undecryptable_ids.iter().copied().collect();
        let have: Vec<u32> = s.keyset.keys().map(|(id, _)| id.0).collect();
        let keys = if a.undecryptable_record_keys > 0 {
            format!(
                " ({} record keys do not decrypt under --key-keyset either)",
                a.undecryptable_record_keys
            )
        } else {
            String::new()
        };
        return Err(fail(format!(
            "no value of {} decrypts under this keyset: {} ciphertexts name key ids {named:?}, the keyset holds {have:?}{keys}; is it the topic's keyset, with the --aad (and --aad-name, --value-key) it was written with?",
            s.topic, a.undecryptable_values
        )));
    }
    Ok(a)
}

pub(crate) fn audit(args: &AuditArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    let a = scan(&s, out.quiet)?;
    let (text, json) = a.report(&s.topic, args.list_keys);
    out.print(&text, &json)?;
    Ok(Outcome::of(a.findings()))
}

/// A record to write.
struct Write {
    partition: i32,
    key: Vec<u8>,
    value: Option<Vec<u8>>,
}

fn producer(s: &Setup) -> Result<FutureProducer, Fail> {
    let mut config = s.config.clone();
    if config.get("enable.idempotence").is_none() {
        config.set("enable.idempotence", "true");
    }
    config
        .create()
        .map_err(|e| fail(format!("creating a producer: {e}")))
}

/// Refuses to write if a partition grew since the scan: a record written
/// meanwhile may be newer than what the scan saw, and a tombstone or an
/// old value written now would undo it.
fn check_unchanged(s: &Setup, a: &Audit) -> Result<(), Fail> {
    let consumer = consumer(s)?;
    let now: Vec<(i32, i64)> = end_offsets(&consumer, s)?
        .into_iter()
        .map(|(p, _, h)| (p, h))
        .collect();
    if now != a.highs {
        return Err(fail(format!(
            "{} changed while it was read (end offsets {:?}, now {now:?}): stop its producers and run again",
            s.topic, a.highs
        )));
    }
    Ok(())
}

/// The most records, and bytes, in flight at once: well under librdkafka's
/// default queue (100,000 messages, 1 GiB).
const CHUNK_RECORDS: usize = 10_000;
const CHUNK_BYTES: usize = 64 << 20;

/// Records enqueued and not yet acknowledged, in the order they were.
#[derive(Default)]
struct InFlight {
    deliveries: VecDeque<(usize, DeliveryFuture)>,
    bytes: usize,
}

impl InFlight {
    /// Waits for every record in flight, in order.
    fn wait(&mut self, topic: &str, writes: &[Write], bar: &ProgressBar) -> Result<(), Fail> {
        while let Some((i, delivery)) = self.deliveries.pop_front() {
            match futures_executor::block_on(delivery) {
                Ok(Ok(_)) => bar.inc(1),
                Ok(Err((e, _))) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: {e} (the records before it were acknowledged; run again to finish)",
                        writes[i].partition
                    )));
                }
                Err(_) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: the producer stopped before the record was acknowledged (run again to finish)",
                        writes[i].partition
                    )));
                }
            }
        }
        self.bytes = 0;
        Ok(())
    }
}

/// Produces `writes` to `topic`, in order, and waits for every
/// acknowledgement.
///
/// The order is explicit: each record is enqueued (`send_result`) only
/// once the one before it is, and librdkafka keeps the enqueue order within
/// a partition on an idempotent producer (or one with a single request in
/// flight: [`check_ordered`]), so a key's records land in the order of
/// the write rule. When the producer's queue is full, every record in
/// flight is acknowledged before the next is enqueued: nothing is retried
/// out of turn. At most [`CHUNK_RECORDS`] records (or about
/// [`CHUNK_BYTES`]) are in flight at once.
fn produce(s: &Setup, topic: &str, writes: &[Write], quiet: bool) -> Result<u64, Fail> {
    if writes.is_empty() {
        return Ok(0);
    }
    check_ordered(&s.config)?;
    let producer = producer(s)?;
    let bar = progress(writes.len() as u64, quiet, "write");
    let mut in_flight = InFlight::default();
    for (i, w) in writes.iter().enumerate() {
        let mut full_since: Option<Instant> = None;
        loop {
            let mut record: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
                .partition(w.partition)
                .key(&w.key[..]);
            if let Some(v) = &w.value {
                record = record.payload(&v[..]);
            }
            match producer.send_result(record) {
                Ok(delivery) => {
                    in_flight.deliveries.push_back((i, delivery));
                    in_flight.bytes += w.key.len() + w.value.as_ref().map_or(0, Vec::len);
                    break;
                }
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    if in_flight.deliveries.is_empty() {
                        // Nothing of ours to wait for: the queue is full of
                        // what librdkafka still holds; wait a little.
                        let since = *full_since.get_or_insert_with(Instant::now);
                        if since.elapsed() > s.timeout {
                            bar.abandon();
                            return Err(fail(format!(
                                "writing to {topic}/{}: the producer's queue stayed full for {} s",
                                w.partition,
                                s.timeout.as_secs()
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    } else {
                        in_flight.wait(topic, writes, &bar)?;
                    }
                }
                Err((e, _)) => {
                    bar.abandon();
                    return Err(fail(format!(
                        "writing to {topic}/{}: {e} (the records before it were acknowledged; run again to finish)",
                        w.partition
                    )));
                }
            }
        }
        if in_flight.deliveries.len() >= CHUNK_RECORDS || in_flight.bytes >= CHUNK_BYTES {
            in_flight.wait(topic, writes, &bar)?;
        }
    }
    in_flight.wait(topic, writes, &bar)?;
    bar.finish_and_clear();
    Ok(writes.len() as u64)
}

/// What a command writes for one key, through the write rule.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Action {
    /// A delete: the rule's tombstones.
    Delete,
    /// The value of the key's deciding record: as it is, or re-encrypted
    /// (under the primary key, bound to the target's name and key).
    Value { reencrypt: bool },
}

/// One key's write.
struct Planned<'a> {
    partition: i32,
    state: &'a KeyState,
    /// The key's forms in the target.
    forms: KeyForms,
    /// Forms of the key on the topic that the rule does not reach (under
    /// keys the key keyset no longer enables) and that hold a present
    /// value: tombstoned first, so that nothing of the key outlives
    /// compaction.
    unreached: Vec<Vec<u8>>,
    action: Action,
    /// The value to write (from the second read).
    value: Option<Vec<u8>>,
}

impl Planned<'_> {
    /// Tombstones for forms other than the primary.
    fn old_forms(&self) -> u64 {
        (self.unreached.len() + self.forms.write_count() - 1) as u64
    }

    fn tombstones(&self) -> u64 {
        self.old_forms() + u64::from(self.action == Action::Delete)
    }

    /// The records of this write, in order.
    fn writes(&self, out: &mut Vec<Write>) -> Result<(), Fail> {
        let value = match self.action {
            Action::Delete => None,
            Action::Value { .. } => Some(self.value.as_deref().ok_or_else(|| {
                fail("a value to write was not found on the second read (the topic changed?): run again")
            })?),
        };
        for form in &self.unreached {
            out.push(Write {
                partition: self.partition,
                key: form.clone(),
                value: None,
            });
        }
        for (key, value) in self.forms.writes(value) {
            out.push(Write {
                partition: self.partition,
                key: key.to_vec(),
                value: value.map(<[u8]>::to_vec),
            });
        }
        Ok(())
    }
}

/// Plans the writes of a command from the topic it read (`from`) to the
/// topic it writes (`to`, maybe the same).
struct Planner<'a> {
    from: &'a Setup,
    to: &'a Setup,
    same: bool,
    key_ser: Option<DeterministicSerializer<Bytes>>,
}

impl<'a> Planner<'a> {
    fn new(from: &'a Setup, to: &'a Setup) -> Self {
        Planner {
            from,
            to,
            same: from.topic == to.topic,
            key_ser: to
                .key_keyset
                .as_ref()
                .map(|k| DeterministicSerializer::new(Bytes, k.clone())),
        }
    }

    /// The forms of a key in the target: under every enabled key of the
    /// key keyset, or (keys that are not encrypted, or do not decrypt) its
    /// one form.
    fn forms(&self, group: &[u8], state: &KeyState) -> Result<KeyForms, Fail> {
        match (&self.key_ser, state.encrypted) {
            (Some(ks), true) => Ok(ks.key_forms(&Context::new(&self.to.name), group)?),
            _ => Ok(KeyForms::plain(group.to_vec())),
        }
    }

    /// Whether the deciding value must be encrypted again to read in the
    /// target: bound to another name, or to the key's bytes on the wire,
    /// which change.
    fn rebinds(&self, state: &KeyState, forms: &KeyForms) -> bool {
        self.to.name != self.from.name
            || (self.from.value_key == ValueKey::Wire && state.wire != forms.primary())
    }

    fn plan(
        &self,
        partition: i32,
        state: &'a KeyState,
        forms: KeyForms,
        action: Action,
    ) -> Planned<'a> {
        let unreached = if self.same {
            state.unreached(&forms).map(<[u8]>::to_vec).collect()
        } else {
            Vec::new()
        };
        Planned {
            partition,
            state,
            forms,
            unreached,
            action,
            value: None,
        }
    }

    /// Reads the topic again for the values of the planned keys' deciding
    /// records: as they are, or encrypted again (under the primary key,
    /// bound to the target's name and to the key's bytes that
    /// `--value-key` names).
    fn read_values(&self, plan: &mut [Planned<'_>], quiet: bool) -> Result<(), Fail> {
        let mut wanted: HashMap<(i32, i64), usize> = plan
            .iter()
            .enumerate()
            .filter(|(_, p)| p.action != Action::Delete)
            .map(|(i, p)| ((p.partition, p.state.offset), i))
            .collect();
        if wanted.is_empty() {
            return Ok(());
        }
        let ser = EncryptingSerializer::new(Bytes, self.to.keyset.clone()).with_aad(self.to.aad);
        let (from, to) = (self.from, self.to);
        read_topic(from, quiet, "read values", |r| {
            let Some(i) = wanted.remove(&(r.partition, r.offset)) else {
                return Ok(());
            };
            let p = &mut plan[i];
            let (Some(v), Some(wire)) = (r.value, r.key) else {
                return Err(fail(format!(
                    "{}/{} offset {} is no longer the value it was: run again",
                    from.topic, r.partition, r.offset
                )));
            };
            if p.action == (Action::Value { reencrypt: false }) {
                p.value = Some(v.to_vec());
                return Ok(());
            }
            let plaintext = match p.state.kind {
                Kind::Plaintext => Zeroizing::new(v.to_vec()),
                _ => {
                    let bound = match from.value_key {
                        ValueKey::Wire => wire,
                        ValueKey::Plaintext => p.forms.plaintext(),
                    };
                    match open_value(from, r, v, Some(bound))? {
                        Value::Plain(plaintext, _) => plaintext,
                        _ => {
                            return Err(fail(format!(
                                "the value at {}/{} offset {} no longer decrypts: run again",
                                from.topic, r.partition, r.offset
                            )))
                        }
                    }
                }
            };
            let bound = match to.value_key {
                ValueKey::Wire => p.forms.primary(),
                ValueKey::Plaintext => p.forms.plaintext(),
            };
            let ct = ser
                .serialize(&value_context(&to.name, Some(bound)), Some(&plaintext[..]))?
                .ok_or_else(|| fail("a present value encrypted to nothing"))?;
            p.value = Some(ct);
            Ok(())
        })?;
        if !wanted.is_empty() {
            return Err(fail(format!(
                "{} values to write were not found on the second read of {} (compacted meanwhile?): run again",
                wanted.len(),
                from.topic
            )));
        }
        Ok(())
    }

    /// The records of `plan`, key by key, each key's in the rule's order.
    fn writes(&self, plan: &[Planned<'_>]) -> Result<Vec<Write>, Fail> {
        let mut writes = Vec::new();
        for p in plan {
            p.writes(&mut writes)?;
        }
        Ok(writes)
    }
}

pub(crate) fn repair(args: &RepairArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    if args.apply {
        check_ordered(&s.config)?;
    }
    let a = scan(&s, out.quiet)?;
    let planner = Planner::new(&s, &s);
    let mut plan = Vec::new();
    let (mut broken, mut split, mut unrepaired) = (0u64, 0u64, 0u64);
    for ((partition, group), state) in a.sorted() {
        broken += u64::from(state.kind == Kind::Broken);
        split += u64::from(state.split);
        if state.kind != Kind::Broken && !state.split {
            continue;
        }
        // The key's state by the reading rule, written again through the
        // write rule.
        let forms = planner.forms(group, state)?;
        let action = match state.kind {
            Kind::Tombstone | Kind::Broken => Action::Delete,
            Kind::Plaintext => Action::Value { reencrypt: false },
            Kind::Live => Action::Value {
                reencrypt: planner.rebinds(state, &forms),
            },
            Kind::Undecryptable if !planner.rebinds(state, &forms) => {
                Action::Value { reencrypt: false }
            }
            Kind::Undecryptable => {
                unrepaired += 1;
                continue;
            }
        };
        plan.push(planner.plan(*partition, state, forms, action));
    }
    let tombstones: u64 = plan.iter().map(Planned::tombstones).sum();
    let values = plan.iter().filter(|p| p.action != Action::Delete).count() as u64;
    let (before_text, before) = a.report(&s.topic, false);
    let mut json = json!({"audit": before, "broken_keys": broken, "split_keys": split,
        "unrepaired_split_keys": unrepaired, "tombstones_planned": tombstones,
        "values_planned": values, "applied": args.apply});
    let what = format!(
        "{tombstones} tombstones and {values} values for {broken} broken and {split} split keys{}",
        if unrepaired > 0 {
            format!(" ({unrepaired} split keys whose newest value does not decrypt are left)")
        } else {
            String::new()
        }
    );
    if !args.apply {
        let text = format!("{before_text}\nplan: {what} (run with --apply to write them)\n");
        out.print(&text, &json)?;
        return Ok(Outcome::of(a.findings()));
    }
    planner.read_values(&mut plan, out.quiet)?;
    let writes = planner.writes(&plan)?;
    if !writes.is_empty() {
        check_unchanged(&s, &a)?;
    }
    produce(&s, &s.topic, &writes, out.quiet)?;
    let after = scan(&s, out.quiet)?;
    let (after_text, after_json) = after.report(&s.topic, false);
    json["tombstones_written"] = json!(tombstones);
    json["values_written"] = json!(values);
    json["after"] = after_json;
    let text = format!("{before_text}\nwrote {what}; the topic now:\n{after_text}");
    out.print(&text, &json)?;
    Ok(Outcome::of(after.findings()))
}

pub(crate) fn reencrypt(args: &ReencryptArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    if args.apply {
        check_ordered(&s.config)?;
    }
    let to = args.to_topic.clone().unwrap_or_else(|| s.topic.clone());
    let same = to == s.topic;
    // The target's associated-data name: the one given, else the topic
    // written to.
    let target = Setup {
        topic: to.clone(),
        name: match &args.topic.aad_name {
            Some(name) => name.clone(),
            None => to.clone(),
        },
        ..s.clone()
    };
    let a = scan(&s, out.quiet)?;
    if !same {
        let parts = end_offsets(&consumer(&s)?, &target)?.len();
        if parts != a.partitions {
            return Err(fail(format!(
                "{to} has {parts} partitions and {} has {}: each record keeps its partition, and a key's partition follows the count",
                s.topic, a.partitions
            )));
        }
    }
    let primary = s.keyset.primary().0;
    let pass_through = args.unencrypted == UnencryptedArg::PassThrough;
    let planner = Planner::new(&s, &target);
    let mut plan = Vec::new();
    let (mut skipped_broken, mut skipped_undecryptable, mut skipped_plaintext) = (0u64, 0u64, 0u64);
    for ((partition, group), state) in a.sorted() {
        let forms = planner.forms(group, state)?;
        let action = match state.kind {
            // A deleted key is never published again: its tombstones are
            // copied to another topic, and written again here only when
            // another form still holds a value.
            Kind::Tombstone if !same || state.split => Action::Delete,
            Kind::Tombstone => continue,
            Kind::Broken => {
                skipped_broken += 1;
                continue;
            }
            Kind::Undecryptable => {
                skipped_undecryptable += 1;
                continue;
            }
            Kind::Plaintext if pass_through => Action::Value { reencrypt: true },
            Kind::Plaintext => {
                skipped_plaintext += 1;
                continue;
            }
            Kind::Live => {
                let rekey = state.key_id != Some(primary);
                let rebind = planner.rebinds(state, &forms);
                let moved = state.wire != forms.primary();
                if same && !(rekey || rebind || moved || state.split) {
                    continue;
                }
                Action::Value {
                    reencrypt: rekey || rebind,
                }
            }
        };
        plan.push(planner.plan(*partition, state, forms, action));
    }
    let values = plan.iter().filter(|p| p.action != Action::Delete).count() as u64;
    let old_forms: u64 = plan.iter().map(Planned::old_forms).sum();
    let deletes = plan.iter().filter(|p| p.action == Action::Delete).count() as u64;
    let (copied, rewritten_deletes) = if same { (0, deletes) } else { (deletes, 0) };
    let split = plan.iter().filter(|p| p.state.split).count() as u64;
    let records: u64 = values + plan.iter().map(Planned::tombstones).sum::<u64>();
    let skipped = json!({"broken_tombstones": skipped_broken,
        "undecryptable": skipped_undecryptable, "plaintext": skipped_plaintext});
    let mut plan_text = format!(
        "plan for {to}: {values} values to write under key {primary}, {old_forms} old key forms to delete, {copied} tombstones to copy, {rewritten_deletes} deletes to write again ({split} split keys), {records} records\n\
         skipped: {skipped_broken} broken tombstones (run repair first), {skipped_undecryptable} undecryptable, {skipped_plaintext} plaintext values{}\n",
        if pass_through { "" } else { " (--unencrypted pass-through encrypts them)" }
    );
    let mut json = json!({"to_topic": to, "primary_key_id": primary, "values_to_rewrite": values,
        "old_key_forms_to_delete": old_forms, "tombstones_to_copy": copied,
        "deletes_to_rewrite": rewritten_deletes, "split_keys": split,
        "records_to_write": records, "skipped": skipped, "applied": args.apply});
    let skipped_any = skipped_broken + skipped_undecryptable + skipped_plaintext > 0;
    if !args.apply {
        plan_text.push_str("(run with --apply to write)\n");
        out.print(&plan_text, &json)?;
        return Ok(Outcome::of(skipped_any || !plan.is_empty()));
    }
    planner.read_values(&mut plan, out.quiet)?;
    let writes = planner.writes(&plan)?;
    if same && !writes.is_empty() {
        check_unchanged(&s, &a)?;
    }
    let written = produce(&s, &to, &writes, out.quiet)?;
    let after = scan(&target, out.quiet)?;
    let (after_text, after_json) = after.report(&to, false);
    json["written"] = json!(written);
    json["after"] = after_json;
    plan_text.push_str(&format!("wrote {written} records; {to} now:\n{after_text}"));
    out.print(&plan_text, &json)?;
    Ok(Outcome::of(skipped_any || after.findings()))
}
