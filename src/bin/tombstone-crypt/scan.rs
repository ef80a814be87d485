//! `audit`, `repair` and `reencrypt`: read every partition of a topic to
//! its end (where librdkafka reports it), keep one small state per key
//! (never the values), then write tombstones or rewritten values, but only
//! if no partition grew meanwhile.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde_json::json;
use tombstone_crypt::rdkafka::config::ClientConfig;
use tombstone_crypt::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::rdkafka::error::KafkaError;
use tombstone_crypt::rdkafka::message::Message as _;
use tombstone_crypt::rdkafka::producer::{FutureProducer, FutureRecord};
use tombstone_crypt::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::{
    AadPolicy, Bytes, Context, DecryptingDeserializer, Deserializer as _,
    DeterministicDeserializer, DeterministicSerializer, EncryptingSerializer, Keyset,
    Serializer as _,
};
use zeroize::Zeroizing;

use crate::{
    fail, keysets, Fail, NullMarker, Outcome, Output, ReencryptArgs, RepairArgs, TopicArgs,
    UnencryptedArg, ValueKey,
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
    if a.value_key == ValueKey::Plaintext && key_keyset.is_none() {
        return Err(fail(
            "--value-key plaintext needs --key-keyset (to decrypt the keys)",
        ));
    }
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
        marker: a.null_marker.clone(),
        aad: a.aad.into(),
        config,
        timeout: Duration::from_secs(a.timeout.max(1)),
    })
}

/// What the newest record of a key (or of one of its forms) is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Tombstone,
    Live,
    /// A present value that decrypts to the null marker: a delete that a
    /// broken layer wrote as a value.
    Broken,
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
}

/// One key: each form of it on the wire (one, or several for keys
/// encrypted under rotated deterministic keys) with its newest record, and
/// the record that decides what the key is: the newest present value of
/// any form (a restore keeps every form whose newest record is not a
/// tombstone), else the newest tombstone.
struct KeyState {
    offset: i64,
    kind: Kind,
    key_id: Option<u32>,
    forms: BTreeMap<Vec<u8>, Form>,
}

impl KeyState {
    fn settle(&mut self) {
        let present = self
            .forms
            .values()
            .filter(|f| f.kind != Kind::Tombstone)
            .max_by_key(|f| f.offset);
        let decides = present.or_else(|| self.forms.values().max_by_key(|f| f.offset));
        if let Some(f) = decides.copied() {
            self.offset = f.offset;
            self.kind = f.kind;
            self.key_id = f.key_id;
        }
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

    fn live_keys(&self) -> u64 {
        self.keys
            .values()
            .filter(|s| matches!(s.kind, Kind::Live | Kind::Undecryptable | Kind::Plaintext))
            .count() as u64
    }

    fn findings(&self) -> bool {
        self.count(Kind::Broken) > 0 || self.count(Kind::Undecryptable) > 0
    }

    fn report(&self, topic: &str) -> (String, serde_json::Value) {
        let undecryptable = self.by_key_id(Some(Kind::Undecryptable));
        let key_ids = self.by_key_id(None);
        let ids = |m: &BTreeMap<u32, u64>| {
            m.iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect::<serde_json::Map<_, _>>()
        };
        let json = json!({
            "topic": topic,
            "partitions": self.partitions,
            "records": self.records,
            "unkeyed": self.unkeyed,
            "keys": self.keys.len(),
            "tombstones": self.tombstones,
            "live_keys": self.live_keys(),
            "broken_tombstones": self.count(Kind::Broken),
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
        let text = format!(
            "topic              {topic} ({} partition{})\n\
             records            {}\n\
             without a key      {}\n\
             keys               {}\n\
             tombstones         {}\n\
             live keys          {}\n\
             broken tombstones  {}\n\
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
            per_id(&undecryptable),
            self.plaintext,
            per_id(&key_ids),
            per_id(&self.all_by_key_id),
        );
        (text, json)
    }
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
        tpl.add_partition_offset(&s.topic, p, Offset::Beginning)
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

/// What the value of record `r` is. A KMS error (the KMS down, or
/// refusing a data key) fails the command: the value cannot be told apart.
fn open_value(s: &Setup, r: &Rec<'_>, v: &[u8], plain_key: Option<&[u8]>) -> Result<Value, Fail> {
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
    let bound = match s.value_key {
        ValueKey::Wire => r.key,
        ValueKey::Plaintext => plain_key,
    };
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

/// The plaintext of a record key (with a key keyset), else `None`.
fn open_key(s: &Setup, k: &[u8]) -> Option<Vec<u8>> {
    let kk = s.key_keyset.as_ref()?;
    DeterministicDeserializer::new(Bytes, kk.clone())
        .deserialize(&Context::new(&s.name), Some(k))
        .ok()
        .flatten()
}

/// A record key as the commands see it: what groups its records (its
/// plaintext when a key keyset decrypts it, else its bytes on the wire),
/// and its plaintext if it has one.
fn key_of(s: &Setup, wire: &[u8]) -> (Vec<u8>, Option<Vec<u8>>) {
    match open_key(s, wire) {
        Some(plain) => (plain.clone(), Some(plain)),
        None => (wire.to_vec(), None),
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
        let (group_key, plain_key) = key_of(s, wire);
        if s.key_keyset.is_some() && plain_key.is_none() {
            a.undecryptable_record_keys += 1;
        }
        let (kind, key_id) = match r.value {
            None => {
                a.tombstones += 1;
                (Kind::Tombstone, None)
            }
            Some(v) => match open_value(s, r, v, plain_key.as_deref())? {
                Value::Plain(p, id) => {
                    a.decrypted += 1;
                    if p.as_slice() == s.marker.bytes() {
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
            .entry((r.partition, group_key))
            .or_insert_with(|| KeyState {
                offset: r.offset,
                kind,
                key_id,
                forms: BTreeMap::new(),
            });
        state.forms.insert(
            wire.to_vec(),
            Form {
                offset: r.offset,
                kind,
                key_id,
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
        return Err(fail(format!(
            "no value of {} decrypts under this keyset: {} ciphertexts name key ids {named:?}, the keyset holds {have:?}; is it the topic's keyset, with the --aad it was written with?",
            s.topic, a.undecryptable_values
        )));
    }
    Ok(a)
}

pub(crate) fn audit(args: &TopicArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(args)?;
    let a = scan(&s, out.quiet)?;
    let (text, json) = a.report(&s.topic);
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
/// default queue (100,000 messages, 1 GiB), so a send never waits for room.
const CHUNK_RECORDS: usize = 10_000;
const CHUNK_BYTES: usize = 64 << 20;

/// Produces `writes` to `topic` and waits for every acknowledgement, a
/// chunk at a time, on a tokio runtime of its own (rdkafka's producer
/// waits for queue room with tokio's timer).
fn produce(s: &Setup, topic: &str, writes: &[Write], quiet: bool) -> Result<u64, Fail> {
    if writes.is_empty() {
        return Ok(0);
    }
    let producer = producer(s)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .map_err(|e| fail(format!("starting the producer's runtime: {e}")))?;
    let bar = progress(writes.len() as u64, quiet, "write");
    let mut rest = writes;
    while !rest.is_empty() {
        let (mut n, mut bytes) = (0, 0);
        while n < rest.len() && n < CHUNK_RECORDS && (n == 0 || bytes < CHUNK_BYTES) {
            bytes += rest[n].key.len() + rest[n].value.as_ref().map_or(0, Vec::len);
            n += 1;
        }
        let (chunk, tail) = rest.split_at(n);
        rest = tail;
        let sends = chunk.iter().map(|w| {
            let mut r: FutureRecord<'_, [u8], [u8]> = FutureRecord::to(topic)
                .partition(w.partition)
                .key(&w.key[..]);
            if let Some(v) = &w.value {
                r = r.payload(&v[..]);
            }
            producer.send(r, s.timeout)
        });
        for (i, result) in runtime
            .block_on(futures_util::future::join_all(sends))
            .into_iter()
            .enumerate()
        {
            if let Err((e, _)) = result {
                bar.abandon();
                return Err(fail(format!(
                    "writing to {topic}/{}: {e} (the records before it were acknowledged; run again to finish)",
                    chunk[i].partition
                )));
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    Ok(writes.len() as u64)
}

pub(crate) fn repair(args: &RepairArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
    let a = scan(&s, out.quiet)?;
    let mut writes = Vec::new();
    let mut broken = 0u64;
    for ((partition, _), state) in &a.keys {
        if state.kind != Kind::Broken {
            continue;
        }
        broken += 1;
        // Every form of the key whose newest record is not already a
        // tombstone gets one.
        for (form, f) in &state.forms {
            if f.kind != Kind::Tombstone {
                writes.push(Write {
                    partition: *partition,
                    key: form.clone(),
                    value: None,
                });
            }
        }
    }
    writes.sort_by(|x, y| (x.partition, &x.key).cmp(&(y.partition, &y.key)));
    let plan = writes.len() as u64;
    let (before_text, before) = a.report(&s.topic);
    if !args.apply {
        let text = format!(
            "{before_text}\nplan: {plan} tombstones for {broken} broken keys (run with --apply to write them)\n"
        );
        out.print(
            &text,
            &json!({"audit": before, "broken_keys": broken, "tombstones_planned": plan, "applied": false}),
        )?;
        return Ok(Outcome::of(a.findings()));
    }
    if plan > 0 {
        check_unchanged(&s, &a)?;
    }
    let written = produce(&s, &s.topic, &writes, out.quiet)?;
    let after = scan(&s, out.quiet)?;
    let (after_text, after_json) = after.report(&s.topic);
    let text = format!(
        "{before_text}\nwrote {written} tombstones for {broken} broken keys; the topic now:\n{after_text}"
    );
    out.print(
        &text,
        &json!({"audit": before, "broken_keys": broken, "tombstones_planned": plan,
            "applied": true, "tombstones_written": written, "after": after_json}),
    )?;
    Ok(Outcome::of(after.findings()))
}

pub(crate) fn reencrypt(args: &ReencryptArgs, out: &Output) -> Result<Outcome, Fail> {
    let s = setup(&args.topic)?;
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
    let ser = EncryptingSerializer::new(Bytes, s.keyset.clone()).with_aad(s.aad);
    let key_ser = s
        .key_keyset
        .as_ref()
        .map(|k| DeterministicSerializer::new(Bytes, k.clone()));
    let pass_through = args.unencrypted == UnencryptedArg::PassThrough;
    let (mut values, mut old_forms, mut copied) = (0u64, 0u64, 0u64);
    let (mut skipped_broken, mut skipped_undecryptable, mut skipped_plaintext) = (0u64, 0u64, 0u64);
    let mut writes = Vec::new();
    // The second pass reads the values again (the first kept none): only
    // each key's newest record is rewritten.
    read_topic(&s, out.quiet, "reencrypt", |r| {
        let Some(wire) = r.key else {
            return Ok(());
        };
        let (group_key, plain_key) = key_of(&s, wire);
        let Some(state) = a.keys.get(&(r.partition, group_key)) else {
            return Ok(());
        };
        if state.offset != r.offset {
            return Ok(());
        }
        // The key's new form on the wire.
        let new_key = match (&key_ser, &plain_key) {
            (Some(ks), Some(plain)) => ks
                .serialize(&Context::new(&target.name), Some(&plain[..]))?
                .ok_or_else(|| fail("a present key serialized to nothing"))?,
            _ => wire.to_vec(),
        };
        let (plaintext, under_primary) = match (state.kind, r.value) {
            (Kind::Tombstone, _) | (_, None) => {
                if !same {
                    writes.push(Write {
                        partition: r.partition,
                        key: new_key.clone(),
                        value: None,
                    });
                    copied += 1;
                }
                (None, true)
            }
            (Kind::Broken, _) => {
                skipped_broken += 1;
                return Ok(());
            }
            (Kind::Undecryptable, _) => {
                skipped_undecryptable += 1;
                return Ok(());
            }
            (Kind::Plaintext, Some(v)) if pass_through => (Some(Zeroizing::new(v.to_vec())), false),
            (Kind::Plaintext, _) => {
                skipped_plaintext += 1;
                return Ok(());
            }
            (Kind::Live, Some(v)) => match open_value(&s, r, v, plain_key.as_deref())? {
                Value::Plain(p, id) => (Some(p), id == primary),
                _ => {
                    skipped_undecryptable += 1;
                    return Ok(());
                }
            },
        };
        if let Some(plaintext) = plaintext {
            if !same || !under_primary || new_key != wire {
                let bound = match s.value_key {
                    ValueKey::Wire => Some(&new_key[..]),
                    ValueKey::Plaintext => plain_key.as_deref(),
                };
                let ctx = value_context(&target.name, bound);
                let ct = ser.serialize(&ctx, Some(&plaintext[..]))?;
                writes.push(Write {
                    partition: r.partition,
                    key: new_key.clone(),
                    value: ct,
                });
                values += 1;
            }
        }
        if same {
            // Old forms of the key are deleted, so compaction forgets them
            // and a restore sees the key once.
            for (form, f) in &state.forms {
                if f.kind != Kind::Tombstone && *form != new_key {
                    writes.push(Write {
                        partition: r.partition,
                        key: form.clone(),
                        value: None,
                    });
                    old_forms += 1;
                }
            }
        }
        Ok(())
    })?;
    let skipped = json!({"broken_tombstones": skipped_broken,
        "undecryptable": skipped_undecryptable, "plaintext": skipped_plaintext});
    let mut plan_text = format!(
        "plan for {to}: {values} values to rewrite under key {primary}, {old_forms} old key forms to delete, {copied} tombstones to copy\n\
         skipped: {skipped_broken} broken tombstones (run repair first), {skipped_undecryptable} undecryptable, {skipped_plaintext} plaintext values{}\n",
        if pass_through { "" } else { " (--unencrypted pass-through encrypts them)" }
    );
    let mut json = json!({"to_topic": to, "primary_key_id": primary, "values_to_rewrite": values,
        "old_key_forms_to_delete": old_forms, "tombstones_to_copy": copied, "skipped": skipped,
        "applied": args.apply});
    let skipped_any = skipped_broken + skipped_undecryptable + skipped_plaintext > 0;
    if !args.apply {
        plan_text.push_str("(run with --apply to write)\n");
        out.print(&plan_text, &json)?;
        return Ok(Outcome::of(skipped_any || !writes.is_empty()));
    }
    if same && !writes.is_empty() {
        check_unchanged(&s, &a)?;
    }
    let written = produce(&s, &to, &writes, out.quiet)?;
    let after = scan(&target, out.quiet)?;
    let (after_text, after_json) = after.report(&to);
    json["written"] = json!(written);
    json["after"] = after_json;
    plan_text.push_str(&format!("wrote {written} records; {to} now:\n{after_text}"));
    out.print(&plan_text, &json)?;
    Ok(Outcome::of(skipped_any || after.findings()))
}
