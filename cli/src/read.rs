//! Reading a topic: what a command reads it with ([`Setup`], from the
//! topic arguments), its partitions and their end offsets
//! ([`partitions`]), and one partition at a time from an offset to its end
//! or to an offset given ([`read_partition`]), in offset order, record by
//! record, behind the command's one progress bar on stderr.

use std::collections::BTreeSet;
use std::io::IsTerminal as _;
use std::path::Path;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::sync::Arc;
use tombstone_crypt::kafka::rdkafka::config::ClientConfig;
use tombstone_crypt::kafka::rdkafka::consumer::{BaseConsumer, Consumer as _};
use tombstone_crypt::kafka::rdkafka::error::KafkaError;
use tombstone_crypt::kafka::rdkafka::message::{Headers as _, Message as _};
use tombstone_crypt::kafka::rdkafka::{Offset, TopicPartitionList};

use tombstone_crypt::confluent::{ConfluentJson, LocalKms, Registry};
use tombstone_crypt::files::{open_key_store, KeyStoreAt, KeyStorePart};
use tombstone_crypt::policy::TopicPolicy;
use tombstone_crypt::shred::SubjectKeys;
use tombstone_crypt::{AadPolicy, Keyset};

use crate::args::{ClientArgs, NullMarker, SubjectKeyArgs, TopicArgs, ValueKey};
use crate::client::{client_config, reach};
use crate::fields::FieldKeys;
use crate::key_state::MAX_FORMS;
use crate::keysets;
use crate::outcome::{fail, Fail};

/// The header every record the commands write carries: the run's id, so
/// that a resumed run tells its own records from anyone else's.
pub(crate) const RUN_HEADER: &str = "tombstone-crypt-run";

/// What a command reads a topic with.
#[derive(Clone)]
pub(crate) struct Setup {
    /// The topic (`--topic`).
    pub(crate) topic: String,
    /// The name the associated data binds to (`--aad-name`, else the topic).
    pub(crate) name: String,
    /// Which bytes of the record key values are bound to (`--value-key`).
    pub(crate) value_key: ValueKey,
    /// The subject keys' KEK (`--subject-keyset`): with `keyset`, what a
    /// run is named by ([`Setup::run_keys`]).
    pub(crate) kek: Option<Keyset>,
    /// What a broken delete decrypts to (`--null-marker`).
    pub(crate) marker: NullMarker,
    /// The values' associated data (`--aad`).
    pub(crate) aad: AadPolicy,
    /// The brokers and the `-X` settings.
    pub(crate) config: ClientConfig,
    /// How long a read may go without a record (`--timeout`).
    pub(crate) timeout: Duration,
    /// How long the brokers have to answer at first (`--connect-timeout`).
    pub(crate) connect_timeout: Duration,
    /// The partitions to read (`--partitions`; all when `None`).
    pub(crate) only: Option<BTreeSet<i32>>,
    /// How many partitions are read at once (`--parallel`).
    pub(crate) parallel: usize,
    /// The keys of the values' encrypted fields (`reencrypt --fields`):
    /// with them, each present value's fields are checked as it is read.
    pub(crate) fields: Option<FieldKeys>,
    /// Confluent's format (`--schema-registry`): the values are read with
    /// this codec, subject `{topic}-value` (the policy's are foreign).
    pub(crate) confluent: Option<Arc<ConfluentJson>>,
    /// How the records are read: the library's topic policy, its values
    /// under the values' keyset (bound as `--aad` says), under subject
    /// keys (`--subject-keyset`), or in Confluent's format (a policy of
    /// foreign values, `confluent` reading them); its record keys under the
    /// key keyset (`--key-keyset`). Every present value is read as it
    /// says, never by its first byte; the keysets are asked of it.
    pub(crate) values: TopicPolicy,
}

/// The subject keys `a` names (`None` without `--subject-keyset`), and
/// their KEK keyset: the KEK, and the redb file or the compacted topic (on
/// `config`'s brokers) that keeps them. The store must exist and hold a naming key
/// the KEK opens (a mistyped path or topic is an error, never an empty
/// store), unless `create` (`shred create-key-store`), which makes it.
///
/// # Errors
/// A keyset that does not load, a store that does not exist (or, with
/// `create`, does), a store with no naming key or another KEK's, a KEK
/// with no store.
pub(crate) fn subject_keys(
    a: &SubjectKeyArgs,
    decrypt_with: Option<&str>,
    config: Option<&ClientConfig>,
    connect: Duration,
    create: bool,
    strict: bool,
) -> Result<Option<(Arc<SubjectKeys>, Keyset)>, Fail> {
    let Some(kek_path) = &a.subject_kek else {
        return Ok(None);
    };
    let kek = keysets::load(kek_path, decrypt_with)?;
    let named_by = kek.clone();
    let at = match (&a.subject_key_store, &a.subject_key_topic) {
        (Some(path), _) => KeyStoreAt::File(path.clone()),
        (None, Some(topic)) => {
            let config = config
                .cloned()
                .ok_or_else(|| fail("--subject-key-topic needs --bootstrap"))?;
            reach(&config, topic, connect)?;
            KeyStoreAt::Topic {
                config,
                topic: topic.clone(),
                view: a.subject_key_view.clone(),
                fence: None,
            }
        }
        (None, None) => {
            return Err(fail(
                "--subject-keyset needs the key store: --subject-key-store FILE or --subject-key-topic TOPIC",
            ))
        }
    };
    // Each part named by its flag.
    let named = |part: KeyStorePart| match (part, &a.subject_key_store, &a.subject_key_topic) {
        (KeyStorePart::View, _, _) => format!(
            "--subject-key-view {}",
            a.subject_key_view
                .as_deref()
                .map(|d| d.display().to_string())
                .unwrap_or_default()
        ),
        (_, Some(path), _) => format!("--subject-key-store {}", path.display()),
        (_, None, Some(topic)) => format!("--subject-key-topic {topic}"),
        (_, None, None) => String::new(),
    };
    let store = open_key_store(&at, create)
        .map_err(|(part, e)| fail(format!("{}: {}", named(part), crate::outcome::chain(&e))))?;
    let named = named(KeyStorePart::File);
    let keys = if create {
        SubjectKeys::create(kek, store)
    } else {
        SubjectKeys::open(kek, store)
    };
    let keys = keys.map_err(|e| fail(format!("{named}: {}", crate::outcome::chain(&e))))?;
    Ok(Some((
        Arc::new(if strict { keys.strict() } else { keys }),
        named_by,
    )))
}

/// The codec of Confluent-format records with the Schema Registry at
/// `url`: the local-kms secret from `LOCAL_SECRET` (KEKs in AWS KMS or
/// Vault with the KMS clients configured from the environment), the
/// registry's auth from `SCHEMA_REGISTRY_BASIC_AUTH` (`user:password`) or
/// `SCHEMA_REGISTRY_BEARER_TOKEN`.
///
/// # Errors
/// A URL that is not one, a basic auth without `:`.
pub(crate) fn confluent_codec(url: &str) -> Result<ConfluentJson, Fail> {
    // local-kms KEKs need the secret; KEKs in AWS KMS or Vault are opened
    // with the KMS clients configured from the environment, as for this
    // library's own envelope keys.
    let codec = match std::env::var("LOCAL_SECRET") {
        Ok(secret) => ConfluentJson::new(LocalKms::new(&secret)),
        Err(_) => ConfluentJson::without_local_kms(),
    };
    let mut registry = Registry::new(url)?;
    if let Ok(auth) = std::env::var("SCHEMA_REGISTRY_BASIC_AUTH") {
        let (user, password) = auth
            .split_once(':')
            .ok_or_else(|| fail("SCHEMA_REGISTRY_BASIC_AUTH: expected user:password"))?;
        registry = registry.with_basic_auth(user, password);
    } else if let Ok(token) = std::env::var("SCHEMA_REGISTRY_BEARER_TOKEN") {
        registry = registry.with_bearer_token(&token);
    }
    if registry.sends_credentials_in_clear() {
        tracing::warn!("the Schema Registry's credentials go over plain http:// (use https://)");
    }
    // Avro bytes print as base64 (not arrays of numbers).
    Ok(codec.with_registry(registry).avro_bytes_as_base64())
}

/// What a topic's values and record keys are read with, as every topic
/// command names them: `--keyset`, `--key-keyset`, `--subject-keyset` and
/// its store, `--aad`, `--decrypt-with`, `--strict`.
pub(crate) struct Sources<'a> {
    /// The values' keyset file.
    pub(crate) keyset: Option<&'a Path>,
    /// The record keys' keyset file.
    pub(crate) key_keyset: Option<&'a Path>,
    /// The KMS key the keyset files are encrypted with.
    pub(crate) decrypt_with: Option<&'a str>,
    /// The values' associated data.
    pub(crate) aad: AadPolicy,
    /// The subject keys and their store.
    pub(crate) subject: &'a SubjectKeyArgs,
    /// A shredded subject's value is a finding, not a delete.
    pub(crate) strict: bool,
}

/// A topic's policy as the options give it, and the KEK of its subject
/// keys.
pub(crate) struct Policy {
    /// The policy: values under a keyset or subject keys, or in
    /// Confluent's format (foreign values, read by its codec); record keys
    /// under the key keyset.
    pub(crate) values: TopicPolicy,
    /// The subject keys' KEK.
    pub(crate) kek: Option<Keyset>,
}

/// The policy every topic command reads a topic with, built in this one
/// place from its options; `confluent` when the values are in Confluent's
/// format (read by its codec: then no keyset is asked for). The subject
/// keys' store is reached through `config`'s brokers within `connect`.
///
/// # Errors
/// Both a keyset and subject keys (a topic's values are under one
/// policy), neither (and not Confluent's format), a deterministic
/// `--keyset`, a `--key-keyset` that is not, a keyset or store that does
/// not open.
pub(crate) fn policy(
    src: &Sources<'_>,
    confluent: bool,
    config: &ClientConfig,
    connect: Duration,
) -> Result<Policy, Fail> {
    let subject_kek = src.subject.subject_kek.is_some();
    let keyset: Option<Keyset> = match src.keyset {
        Some(_) if subject_kek && !confluent => {
            return Err(fail(
                "give one of --keyset and --subject-keyset: a topic's values are under one policy, a keyset or subject keys (a value's format is never guessed from its bytes)",
            ))
        }
        Some(path) => Some(keysets::load(path, src.decrypt_with)?),
        // Values in Confluent's format, or all under subject keys: no
        // keyset.
        None if confluent || subject_kek => None,
        None => return Err(fail("--keyset FILE is required (the values' keyset)")),
    };
    if keyset.as_ref().is_some_and(Keyset::is_deterministic) {
        return Err(fail(
            "--keyset holds a deterministic (AES-SIV) keyset: that is for record keys (--key-keyset)",
        ));
    }
    let key_keyset = match src.key_keyset {
        Some(p) => {
            let k = keysets::load(p, src.decrypt_with)?;
            if !k.is_deterministic() {
                return Err(fail(
                    "--key-keyset must be a deterministic (AES-SIV) keyset",
                ));
            }
            Some(k)
        }
        None => None,
    };
    let subjects = subject_keys(
        src.subject,
        src.decrypt_with,
        Some(config),
        connect,
        false,
        src.strict,
    )?;
    let (values, kek) = match (subjects, &keyset) {
        (Some((keys, kek)), _) => (TopicPolicy::subject_keys(keys), Some(kek)),
        (None, Some(keyset)) => (TopicPolicy::keyset(keyset.clone()).with_aad(src.aad)?, None),
        // Confluent's format: the codec reads the values, never this.
        (None, None) => (TopicPolicy::foreign_values(), None),
    };
    // Record keys read through the policy too (their disabled keys'
    // forms told apart by it).
    let values = match key_keyset {
        Some(k) => values.with_record_keys(k)?,
        None => values,
    };
    Ok(Policy { values, kek })
}

/// Loads the keysets and builds the client configuration of a topic
/// command.
///
/// # Errors
/// A keyset that does not load, a deterministic `--keyset`, a
/// `--key-keyset` that is not deterministic, a `-X` without `=`.
pub(crate) fn setup(a: &TopicArgs) -> Result<Setup, Fail> {
    setup_with(a, None)
}

/// [`setup`], the values of Confluent's format read with `confluent`
/// (then `--keyset` is not given, and the policy's values are foreign:
/// `TopicPolicy::foreign_values`).
///
/// # Errors
/// As [`setup`]; `--keyset` missing without `confluent`.
pub(crate) fn setup_with(a: &TopicArgs, confluent: Option<ConfluentJson>) -> Result<Setup, Fail> {
    let config = client_config(&a.bootstrap, &a.client)?;
    let Policy { values, kek } = policy(
        &Sources {
            keyset: a.keyset.as_deref(),
            key_keyset: a.key_keyset.as_deref(),
            decrypt_with: a.decrypt_with.as_deref(),
            aad: a.aad.into(),
            subject: &a.subject,
            strict: a.strict,
        },
        confluent.is_some(),
        &config,
        Duration::from_secs(a.client.connect_timeout.max(1)),
    )?;
    let forms = values.record_keys().map_or(0, |k| k.keys().count());
    if forms > MAX_FORMS {
        return Err(fail(format!(
            "--key-keyset holds {forms} keys: the topic commands read at most {MAX_FORMS} (enabled and disabled); destroy the keys no record key is under any more"
        )));
    }
    let parallel = match a.parallel {
        Some(0) => return Err(fail("--parallel 0: at least one reader")),
        Some(n) => n,
        None => std::thread::available_parallelism().map_or(1, usize::from),
    };
    Ok(Setup {
        topic: a.topic.clone(),
        name: a.aad_name.clone().unwrap_or_else(|| a.topic.clone()),
        value_key: a.value_key,
        kek,
        marker: a.null_marker.clone().unwrap_or(NullMarker::Empty),
        aad: a.aad.into(),
        config,
        timeout: Duration::from_secs(a.timeout.max(1)),
        connect_timeout: Duration::from_secs(a.client.connect_timeout.max(1)),
        only: a.partitions.clone(),
        parallel,
        fields: None,
        confluent: confluent.map(Arc::new),
        values,
    })
}

impl Setup {
    /// The part of a setup that `consume`'s options give alike: the
    /// brokers, `-X` settings, timeout and partitions. Its policy reads no
    /// value (foreign values) until `consume` puts the topic's there.
    ///
    /// # Errors
    /// A `-X` without `=`.
    pub(crate) fn for_reading(
        topic: &str,
        bootstrap: &str,
        client: &ClientArgs,
        timeout: u64,
        only: Option<BTreeSet<i32>>,
    ) -> Result<Setup, Fail> {
        let config = client_config(bootstrap, client)?;
        Ok(Setup {
            // `consume` puts the topic's policy here.
            values: TopicPolicy::foreign_values(),
            topic: topic.to_owned(),
            name: topic.to_owned(),
            value_key: ValueKey::Plaintext,
            kek: None,
            marker: NullMarker::None,
            aad: AadPolicy::TopicAndKey,
            config,
            timeout: Duration::from_secs(timeout.max(1)),
            connect_timeout: Duration::from_secs(client.connect_timeout.max(1)),
            only,
            parallel: 1,
            fields: None,
            confluent: None,
        })
    }
}

impl Setup {
    /// The keys a run of `repair` or `reencrypt` is named by (its
    /// checkpoint's primary key and plan): the values' keyset, else the
    /// subject keys' KEK; `None` for Confluent's format.
    pub(crate) fn run_keys(&self) -> Option<&Keyset> {
        self.keyset().or(self.kek.as_ref())
    }

    /// The values' keyset (`--keyset`), as the policy holds it; `None` when
    /// the values are under subject keys or in Confluent's format.
    pub(crate) fn keyset(&self) -> Option<&Keyset> {
        self.values.value_keyset()
    }

    /// The record keys' keyset (`--key-keyset`), as the policy holds it.
    pub(crate) fn key_keyset(&self) -> Option<&Keyset> {
        self.values.record_keys()
    }

    /// The form of a record key under key id `id`: the position of its key
    /// in the key keyset, enabled or not (at most [`MAX_FORMS`]).
    pub(crate) fn form_index(&self, id: u32) -> Option<usize> {
        self.key_keyset()?.keys().position(|(k, _)| k.0 == id)
    }
}

/// The partitions of `topic` and their first and end offsets now (the end
/// as the broker reports it: a change detector, not where a read stops).
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
///
/// librdkafka prefetches up to `queued.max.messages.kbytes` per partition
/// (64 MiB by default); the commands read one partition per consumer, so
/// they cap it at 4 MiB and 20,000 records unless `-X` says otherwise: memory stays bounded
/// by the keys, not by what the broker can send ahead; and a full queue
/// holds the fetches back for 10 ms, not a second.
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
    if s.config.get("queued.max.messages.kbytes").is_none() {
        config.set("queued.max.messages.kbytes", "4096");
    }
    // And at 20,000 records, not 100,000: librdkafka's own share per
    // record makes small records cost more than their bytes (an audit of
    // 10^6 records of 100 B: 86 MiB peak with 100,000, 52 with 20,000, as
    // fast).
    if s.config.get("queued.min.messages").is_none() {
        config.set("queued.min.messages", "20000");
    }
    // With the queue full, librdkafka stops fetching for
    // `fetch.queue.backoff.ms` (1 s by default): a reader that decrypts a
    // little slower than the broker sends would stall a second at a time
    // (5 times slower, measured). 10 ms.
    if s.config.get("fetch.queue.backoff.ms").is_none() {
        config.set("fetch.queue.backoff.ms", "10");
    }
    config
        .create()
        .map_err(|e| fail(format!("creating a consumer: {e}")))
}

/// The command's one progress bar: `total` records on stderr, hidden with
/// `--quiet` or when stderr is not a terminal.
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

/// Partitions, each with its first and end offsets.
pub(crate) type Partitions = Vec<(i32, i64, i64)>;

/// The partitions a command reads (`--partitions`, else all), each with
/// its first and end offsets as the broker reports them; and the topic's
/// partition count.
///
/// # Errors
/// No answer from the brokers within `--connect-timeout`; a partition
/// asked for that the topic lacks; the metadata unread.
pub(crate) fn partitions(s: &Setup) -> Result<(Partitions, usize), Fail> {
    reach(&s.config, &s.topic, s.connect_timeout)?;
    let all = end_offsets(&consumer(s)?, s)?;
    let count = all.len();
    let Some(only) = &s.only else {
        return Ok((all, count));
    };
    let missing: Vec<i32> = only
        .iter()
        .copied()
        .filter(|p| !all.iter().any(|(q, _, _)| q == p))
        .collect();
    if !missing.is_empty() {
        return Err(fail(format!(
            "--partitions names {missing:?}, which {} does not have (it has 0 to {})",
            s.topic,
            count - 1
        )));
    }
    Ok((
        all.into_iter()
            .filter(|(p, _, _)| only.contains(p))
            .collect(),
        count,
    ))
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
    /// The run id it was written by ([`RUN_HEADER`]), if a command wrote
    /// it.
    pub(crate) run: Option<&'a [u8]>,
    /// Its timestamp (milliseconds since the epoch), if it has one.
    pub(crate) timestamp: Option<i64>,
}

/// Reads `partition` from offset `start` in offset order until its end
/// (where librdkafka reports it: the fetch's high watermark, right on
/// every broker tried), or until the first record at or after `stop`;
/// `f` sees each record. Returns the offset after the last record read
/// (`start` when none was).
///
/// A record at or below an offset already read is skipped: one broker
/// (tansu 0.6.0 on SQLite) answered a fetch after compacting with the kept
/// records several times over. A transient error (a connection down for a
/// moment) is waited out; no record for `--timeout` fails the read.
pub(crate) fn read_partition(
    s: &Setup,
    topic: &str,
    partition: i32,
    start: i64,
    stop: Option<i64>,
    bar: &ProgressBar,
    mut f: impl FnMut(&Rec<'_>) -> Result<(), Fail>,
) -> Result<i64, Fail> {
    if stop.is_some_and(|e| start >= e) {
        return Ok(start);
    }
    let consumer = consumer(s)?;
    let mut tpl = TopicPartitionList::new();
    // Offset 0 (or where a resumed pass goes on), which resets to the
    // earliest offset when compaction has moved the log start: `Beginning`
    // is looked up with a request that librdkafka schedules about 0.5 s
    // after the assignment.
    tpl.add_partition_offset(topic, partition, Offset::Offset(start.max(0)))
        .map_err(|e| fail(format!("assigning {topic}/{partition}: {e}")))?;
    consumer
        .assign(&tpl)
        .map_err(|e| fail(format!("assigning {topic}/{partition}: {e}")))?;
    let mut last_progress = Instant::now();
    let mut next = start;
    let mut read = 0u64;
    loop {
        match consumer.poll(Duration::from_millis(200)) {
            None => {
                if last_progress.elapsed() > s.timeout {
                    return Err(fail(format!(
                        "no record from {topic}/{partition} for {} s ({read} read, not at its end); is the broker up?",
                        s.timeout.as_secs(),
                    )));
                }
            }
            Some(Err(KafkaError::PartitionEOF(_))) => return Ok(next),
            // librdkafka reconnects by itself (a broker connection down
            // for a moment); give up only when that outlasts the timeout.
            Some(Err(e)) if tombstone_crypt::kafka::is_transient_kafka_error(&e) => {
                if last_progress.elapsed() > s.timeout {
                    return Err(fail(format!(
                        "reading {topic}/{partition}: {e}, and no record for {} s",
                        s.timeout.as_secs()
                    )));
                }
            }
            Some(Err(e)) => return Err(fail(format!("reading {topic}/{partition}: {e}"))),
            Some(Ok(m)) => {
                last_progress = Instant::now();
                if m.offset() < next {
                    continue;
                }
                if stop.is_some_and(|e| m.offset() >= e) {
                    return Ok(next);
                }
                next = m.offset() + 1;
                let run = m
                    .headers()
                    .and_then(|h| h.iter().find(|h| h.key == RUN_HEADER).and_then(|h| h.value));
                f(&Rec {
                    partition,
                    offset: m.offset(),
                    key: m.key(),
                    value: m.payload(),
                    run,
                    timestamp: m.timestamp().to_millis(),
                })?;
                read += 1;
                bar.inc(1);
            }
        }
    }
}
