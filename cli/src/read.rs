//! Reading a topic: what a command reads it with ([`Setup`], from the
//! topic arguments), and every partition from its first offset to its end
//! (where librdkafka reports it), in offset order, record by record
//! ([`read_topic`]), behind a progress bar on stderr.

use std::collections::HashSet;
use std::io::IsTerminal as _;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::message::Message as _;
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};
use tombstone_crypt::{AadPolicy, KeyStatus, Keyset};

use crate::{fail, keysets, Fail, NullMarker, TopicArgs, ValueKey};

/// What a command reads a topic with.
#[derive(Clone)]
pub(crate) struct Setup {
    /// The topic (`--topic`).
    pub(crate) topic: String,
    /// The name the associated data binds to (`--aad-name`, else the topic).
    pub(crate) name: String,
    /// Which bytes of the record key values are bound to (`--value-key`).
    pub(crate) value_key: ValueKey,
    /// The values' keyset (`--keyset`).
    pub(crate) keyset: Keyset,
    /// The record keys' keyset (`--key-keyset`).
    pub(crate) key_keyset: Option<Keyset>,
    /// The key keyset with its disabled keys enabled: to recognize the
    /// forms of a key under keys it no longer reads (`None` when it has no
    /// disabled key).
    pub(crate) widened_keys: Option<Keyset>,
    /// What a broken delete decrypts to (`--null-marker`).
    pub(crate) marker: NullMarker,
    /// The values' associated data (`--aad`).
    pub(crate) aad: AadPolicy,
    /// The brokers and the `-X` settings.
    pub(crate) config: ClientConfig,
    /// How long a read may go without a record (`--timeout`).
    pub(crate) timeout: Duration,
}

/// Loads the keysets and builds the client configuration of a topic
/// command.
///
/// # Errors
/// A keyset that does not load, a deterministic `--keyset`, a
/// `--key-keyset` that is not deterministic, a `-X` without `=`.
pub(crate) fn setup(a: &TopicArgs) -> Result<Setup, Fail> {
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

/// A record as read.
pub(crate) struct Rec<'a> {
    /// Its partition.
    pub(crate) partition: i32,
    /// Its offset.
    pub(crate) offset: i64,
    /// Its key, if it has one.
    pub(crate) key: Option<&'a [u8]>,
    /// Its value; `None` for a tombstone.
    pub(crate) value: Option<&'a [u8]>,
}

/// The partitions of `topic` and their end offsets now.
pub(crate) fn end_offsets(
    consumer: &BaseConsumer,
    s: &Setup,
) -> Result<Vec<(i32, i64, i64)>, Fail> {
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
            tombstone_crypt::kafka::rdkafka::error::RDKafkaErrorCode::from(e)
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

/// A consumer of its own group that reads from the first offset and
/// reports each partition's end.
pub(crate) fn consumer(s: &Setup) -> Result<BaseConsumer, Fail> {
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

/// A progress bar of `total` records on stderr, hidden with `--quiet` or
/// when stderr is not a terminal.
pub(crate) fn progress(total: u64, quiet: bool, what: &str) -> ProgressBar {
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
pub(crate) fn read_topic(
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
            Some(Err(e)) if tombstone_crypt::kafka::is_transient_kafka_error(&e) => {
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
