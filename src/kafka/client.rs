//! Typed async Kafka clients over rdkafka's `FutureProducer` and
//! `StreamConsumer` (feature `kafka`), built on the sans-IO
//! [`encode_write`](crate::kafka::encode_write) / [`decode_message`](crate::kafka::decode_message).
//!
//! A `None` value is produced with no payload at all (Kafka's null), with
//! its headers; a consumed record without a payload is `None` without
//! calling the value deserializer.

use core::fmt;
use core::marker::PhantomData;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures_util::stream::{Stream, StreamExt as _};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Header, Headers as _, Message as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer as _};
use rdkafka::TopicPartitionList;

use super::record::{decode_message, encode_forms};
use crate::error::Error;
use crate::record_key::{KeyBinding, WriteRule};
use crate::serde::{Deserializer, Serializer};
use crate::work::BlockingWork;

fn kafka_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> Error {
    Error::Kafka {
        detail: what.to_owned(),
        cause: Some(std::sync::Arc::new(e)),
    }
}

/// Runs `work` on tokio's blocking pool (a KMS call must not hold up the
/// worker, nor, on a current-thread runtime, everything else). Outside a
/// tokio runtime (another executor) there is no such pool: the work runs
/// inline, as a synchronous call would.
async fn off_the_worker(work: BlockingWork) -> Result<(), Error> {
    blocking(move || work.run())
        .await
        .map_err(|e| Error::kms("the blocking task of a KMS call ended", e))?
}

/// Runs `f` on tokio's blocking pool, or inline outside a tokio runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(f).await,
        Err(_) => Ok(f()),
    }
}

/// Where a produced record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The partition.
    pub partition: i32,
    /// The offset in the partition.
    pub offset: i64,
}

/// Record headers: names and optional values, in order.
pub type RecordHeaders = Vec<(String, Option<Vec<u8>>)>;

/// A typed producer: keys and values go through their serializers (plain,
/// [`EncryptingSerializer`](crate::EncryptingSerializer),
/// [`DeterministicSerializer`](crate::DeterministicSerializer)) into an
/// rdkafka `FutureProducer`.
///
/// Every send follows the write rule (see [`KeyForms`](crate::record_key::KeyForms)):
/// with a key encrypted under a key keyset with several enabled keys, a
/// tombstone for each older form of the key goes first, then the record
/// under the primary form, all to the partition of the **plaintext** key
/// (murmur2, as the Java client's default partitioner), so a rotation never
/// moves a key to another partition and a delete deletes every form. The
/// partition count of a topic is read from the broker once and kept. Keys
/// that are not encrypted are one record, left to the producer's
/// partitioner. Values are bound to the plaintext key
/// ([`KeyBinding::Plaintext`], the default; see
/// [`with_binding`](TypedProducer::with_binding)).
///
/// Idempotence is on by default (`enable.idempotence=true`, so retries never
/// reorder a key's records); an explicit setting in the configuration wins,
/// and [`is_idempotent`](TypedProducer::is_idempotent) says which it is:
/// with `false`, a retried value may land after its key's tombstone.
pub struct TypedProducer<K: ?Sized, V: ?Sized, KS, VS> {
    producer: FutureProducer,
    key_ser: KS,
    value_ser: VS,
    idempotent: bool,
    queue_timeout: Duration,
    binding: KeyBinding,
    rule: WriteRule,
    partitions: Mutex<HashMap<String, u32>>,
    types: PhantomData<fn(&K, &V)>,
}

impl<K: ?Sized, V: ?Sized, KS, VS> fmt::Debug for TypedProducer<K, V, KS, VS> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedProducer")
            .field("idempotent", &self.idempotent)
            .finish_non_exhaustive()
    }
}

impl<K, V, KS, VS> TypedProducer<K, V, KS, VS>
where
    K: ?Sized,
    V: ?Sized,
    KS: Serializer<K>,
    VS: Serializer<V>,
{
    /// A producer from `config` (your `bootstrap.servers` and security
    /// settings are kept) and a serializer for keys and one for values.
    ///
    /// # Errors
    /// [`Error::Kafka`] if rdkafka refuses the configuration.
    pub fn new(config: &ClientConfig, key_ser: KS, value_ser: VS) -> Result<Self, Error> {
        let mut config = config.clone();
        let idempotent = match config.get("enable.idempotence") {
            Some(v) => v.eq_ignore_ascii_case("true"),
            None => {
                config.set("enable.idempotence", "true");
                true
            }
        };
        let producer: FutureProducer = config
            .create()
            .map_err(|e| kafka_err("create the producer", e))?;
        Ok(TypedProducer {
            producer,
            key_ser,
            value_ser,
            idempotent,
            queue_timeout: Duration::from_secs(30),
            binding: KeyBinding::default(),
            rule: WriteRule::default(),
            partitions: Mutex::new(HashMap::new()),
            types: PhantomData,
        })
    }

    /// The same producer binding values to the key bytes that `binding`
    /// names ([`KeyBinding::Plaintext`] by default). Its readers must use
    /// the same.
    #[must_use]
    pub fn with_binding(self, binding: KeyBinding) -> Self {
        TypedProducer { binding, ..self }
    }

    /// The same producer following a broken write rule: the negative
    /// controls of the tests. Never use it.
    #[cfg(feature = "test-hooks")]
    #[doc(hidden)]
    #[must_use]
    pub fn with_write_rule(self, rule: WriteRule) -> Self {
        TypedProducer { rule, ..self }
    }

    /// The partition count of `topic`, read from the broker once.
    async fn partition_count(&self, topic: &str) -> Result<u32, Error> {
        if let Some(n) = self
            .partitions
            .lock()
            .ok()
            .and_then(|m| m.get(topic).copied())
        {
            return Ok(n);
        }
        let client = self.producer.clone();
        let name = topic.to_owned();
        let timeout = self.queue_timeout;
        let md = blocking(move || {
            client
                .client()
                .fetch_metadata(Some(&name), timeout)
                .map_err(|e| kafka_err(&format!("read the partitions of {name}"), e))
        })
        .await
        .map_err(|e| kafka_err("the metadata task ended", e))??;
        let n = md
            .topics()
            .iter()
            .find(|t| t.name() == topic)
            .filter(|t| t.error().is_none())
            .map_or(0, |t| t.partitions().len());
        let n = u32::try_from(n).unwrap_or(0);
        if n == 0 {
            return Err(Error::Kafka {
                detail: format!(
                    "the topic {topic} has no partitions the broker reports (create it first): an encrypted key's partition is chosen from the partition count"
                ),
                cause: None,
            });
        }
        if let Ok(mut m) = self.partitions.lock() {
            m.insert(topic.to_owned(), n);
        }
        Ok(n)
    }

    /// Whether the producer is idempotent (see the type's docs).
    pub fn is_idempotent(&self) -> bool {
        self.idempotent
    }

    /// The rdkafka producer underneath (to flush it, say).
    pub fn producer(&self) -> &FutureProducer {
        &self.producer
    }

    /// Sends `(key, value)` to `topic`; `None` is a tombstone, produced with
    /// no payload. Resolves once the broker acknowledged the record (and,
    /// with an encrypted key under a rotated key keyset, the tombstones of
    /// its older forms first): the result is where the record landed.
    ///
    /// # Errors
    /// A serializer failed, or [`Error::Kafka`] if a record was not
    /// delivered (the tombstones sent before it may have been: a failed
    /// write can leave the key deleted; send it again).
    pub async fn send(&self, topic: &str, key: &K, value: Option<&V>) -> Result<Delivered, Error> {
        self.send_with(topic, key, value, None, &[]).await
    }

    /// [`send`](TypedProducer::send) to a given partition (`None`: the
    /// partition of the plaintext key for an encrypted key, else the
    /// producer's partitioner) with headers, kept on a tombstone too (and
    /// on the tombstones of older forms).
    ///
    /// # Errors
    /// As [`send`](TypedProducer::send).
    pub async fn send_with(
        &self,
        topic: &str,
        key: &K,
        value: Option<&V>,
        partition: Option<i32>,
        headers: &[(&str, Option<&[u8]>)],
    ) -> Result<Delivered, Error> {
        // A KMS call for a new data key runs on tokio's blocking pool, never
        // on this task's worker; the encryption below then finds the key.
        let value_work = value.and_then(|_| self.value_ser.blocking_work());
        if let Some(work) = BlockingWork::both(self.key_ser.blocking_work(), value_work) {
            off_the_worker(work).await?;
        }
        let forms = self
            .key_ser
            .key_forms(&crate::context::Context::new(topic), key)?
            .with_rule(self.rule);
        // The partition count chooses an encrypted key's partition; an
        // explicit partition wins over it (and needs no lookup).
        let partitions = match (partition, forms.is_encrypted()) {
            (None, true) => self.partition_count(topic).await?,
            _ => 1,
        };
        let records = encode_forms(
            topic,
            partitions,
            self.binding,
            &forms,
            &self.value_ser,
            value,
        )?;
        let mut delivered = None;
        // One record after another, each acknowledged before the next: the
        // order on the log is the write rule's, idempotent or not.
        for record in &records {
            let mut future = FutureRecord::to(topic).key(&record.key[..]);
            if let Some(p) = &record.payload {
                future = future.payload(&p[..]);
            }
            if let Some(p) = partition.or(record.partition) {
                future = future.partition(p);
            }
            if !headers.is_empty() {
                let mut h = OwnedHeaders::new_with_capacity(headers.len());
                for (name, value) in headers {
                    h = h.insert(Header {
                        key: name,
                        value: *value,
                    });
                }
                future = future.headers(h);
            }
            match self.producer.send(future, self.queue_timeout).await {
                Ok(d) => {
                    delivered = Some(Delivered {
                        partition: d.partition,
                        offset: d.offset,
                    })
                }
                Err((e, _)) => return Err(kafka_err(&format!("produce to {topic}"), e)),
            }
        }
        delivered.ok_or_else(|| Error::Kafka {
            detail: format!("produce to {topic}: no record to send"),
            cause: None,
        })
    }
}

/// A consumed, decoded record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConsumedRecord<K, V> {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The offset.
    pub offset: i64,
    /// The timestamp (milliseconds since the epoch), if the record has one.
    pub timestamp: Option<i64>,
    /// The headers, in order.
    pub headers: RecordHeaders,
    /// The key.
    pub key: K,
    /// The value; `None` for a tombstone (no payload).
    pub value: Option<V>,
}

/// What a [`TypedConsumer`] hands a record it cannot decode, once
/// [`on_undecodable`](TypedConsumer::on_undecodable) is set: the raw record
/// (to send on to a dead-letter topic, say) and the [`Error::Record`] that
/// names it. `Ok(())` goes on to the next record; an error is what `recv`
/// (or the stream) returns.
pub type UndecodableHook =
    Box<dyn Fn(&BorrowedMessage<'_>, &Error) -> Result<(), Error> + Send + Sync>;

/// A typed consumer over rdkafka's `StreamConsumer`: every record is decoded
/// with the topic and the record key (its plaintext by default,
/// [`KeyBinding`]) as context.
///
/// The reading rule: replayed in order, a key's state is its last record,
/// whatever form of an encrypted key it came under. Writers that follow
/// the write rule ([`KeyForms`](crate::record_key::KeyForms)) put the tombstones of a
/// key's older forms before its record, so the last record of a write is
/// the write itself, and a replaying consumer agrees with a store restored
/// from the topic.
///
/// A record that cannot be decoded (a value that does not decrypt, a
/// plaintext value under [`Unencrypted::Reject`](crate::Unencrypted)) is
/// never skipped silently: [`recv`](TypedConsumer::recv) returns
/// [`Error::Record`], naming its topic, partition and offset. The consumer
/// has moved past it: call `recv` again to go on, or stop. To go on
/// without handling the error at each call site, set a hook with
/// [`on_undecodable`](TypedConsumer::on_undecodable): it gets each such
/// record, raw, and decides.
pub struct TypedConsumer<K, V, KD, VD> {
    consumer: StreamConsumer,
    key_de: KD,
    value_de: VD,
    on_undecodable: Option<UndecodableHook>,
    binding: KeyBinding,
    types: PhantomData<fn() -> (K, V)>,
}

impl<K, V, KD, VD> fmt::Debug for TypedConsumer<K, V, KD, VD> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TypedConsumer")
            .field("on_undecodable", &self.on_undecodable.is_some())
            .finish_non_exhaustive()
    }
}

impl<K, V, KD, VD> TypedConsumer<K, V, KD, VD>
where
    KD: Deserializer<K>,
    VD: Deserializer<V>,
{
    /// A consumer from `config` (it must set `group.id`; your security
    /// settings are kept) and a deserializer for keys and one for values.
    ///
    /// # Errors
    /// [`Error::Kafka`] if rdkafka refuses the configuration.
    pub fn new(config: &ClientConfig, key_de: KD, value_de: VD) -> Result<Self, Error> {
        let consumer: StreamConsumer = config
            .create()
            .map_err(|e| kafka_err("create the consumer", e))?;
        Ok(TypedConsumer {
            consumer,
            key_de,
            value_de,
            on_undecodable: None,
            binding: KeyBinding::default(),
            types: PhantomData,
        })
    }

    /// The same consumer reading values bound to the key bytes that
    /// `binding` names ([`KeyBinding::Plaintext`] by default), as the
    /// topic's writers bound them.
    #[must_use]
    pub fn with_binding(self, binding: KeyBinding) -> Self {
        TypedConsumer { binding, ..self }
    }

    /// Hands every record that does not decode to `hook` instead of
    /// returning it as an error: the hook gets the raw record and the
    /// [`Error::Record`] naming it; `Ok(())` skips the record (the hook has
    /// kept it: a dead-letter topic, a log), an error stops `recv` or the
    /// stream with that error.
    ///
    /// A cause of [`Error::Kms`] may pass (the KMS was unreachable for a
    /// data key not yet cached) or not (the KMS refuses a forged or foreign
    /// encrypted data key): the error does not tell which. A hook that
    /// returns the error stops the consumer at that record, and a restart
    /// meets it again; the example below dead-letters everything, saying
    /// which were KMS failures, so they can be replayed once the KMS is
    /// back.
    ///
    /// The hook is synchronous and runs on the task that polls the
    /// consumer: keep it short. To dead-letter through Kafka, enqueue with
    /// a non-blocking producer (rdkafka's `ThreadedProducer`) and, if the
    /// dead letter must not be lost, commit offsets only after its
    /// delivery: with `enable.auto.commit` the offset moves past the record
    /// when `recv` returns the next one.
    ///
    /// ```no_run
    /// # use tombstone_crypt::{Bytes, DecryptingDeserializer, Error, Keyset, Utf8};
    /// # use tombstone_crypt::kafka::TypedConsumer;
    /// # use tombstone_crypt::kafka::rdkafka::{ClientConfig, Message as _};
    /// # fn demo(config: &ClientConfig, keyset: Keyset) -> Result<(), Error> {
    /// let consumer: TypedConsumer<String, Vec<u8>, _, _> =
    ///     TypedConsumer::new(config, Utf8, DecryptingDeserializer::new(Bytes, keyset))?
    ///         .on_undecodable(|raw, error| {
    ///             let kms = matches!(error, Error::Record { cause, .. }
    ///                 if matches!(**cause, Error::Kms { .. }));
    ///             // Enqueue `raw` to a dead-letter topic here, marked `kms`.
    ///             eprintln!("dead-lettered {error} (KMS: {kms}): {} bytes", raw.payload_len());
    ///             Ok(())
    ///         });
    /// # Ok(()) }
    /// ```
    #[must_use]
    pub fn on_undecodable<F>(mut self, hook: F) -> Self
    where
        F: Fn(&BorrowedMessage<'_>, &Error) -> Result<(), Error> + Send + Sync + 'static,
    {
        self.on_undecodable = Some(Box::new(hook));
        self
    }

    /// Subscribes to `topics` (partitions assigned by the consumer group).
    ///
    /// # Errors
    /// [`Error::Kafka`].
    pub fn subscribe(&self, topics: &[&str]) -> Result<(), Error> {
        self.consumer
            .subscribe(topics)
            .map_err(|e| kafka_err("subscribe", e))
    }

    /// Reads exactly these partitions, from these offsets.
    ///
    /// # Errors
    /// [`Error::Kafka`].
    pub fn assign(&self, partitions: &TopicPartitionList) -> Result<(), Error> {
        self.consumer
            .assign(partitions)
            .map_err(|e| kafka_err("assign", e))
    }

    /// The rdkafka consumer underneath (offsets, commits, watermarks).
    pub fn consumer(&self) -> &StreamConsumer {
        &self.consumer
    }

    /// The next record, decoded.
    ///
    /// # Errors
    /// [`Error::Kafka`] from the consumer; [`Error::Record`] for a record
    /// that does not decode. A Kafka error whose cause
    /// [`is_transient_kafka_error`](crate::kafka::is_transient_kafka_error) says is
    /// transient (a broker connection down for a moment) is one librdkafka
    /// recovers from: call `recv` again.
    pub async fn recv(&self) -> Result<ConsumedRecord<K, V>, Error> {
        loop {
            let m = self
                .consumer
                .recv()
                .await
                .map_err(|e| kafka_err("consume", e))?;
            if let Some(record) = self.next_record(&m).await? {
                return Ok(record);
            }
        }
    }

    /// The records as a `Stream`, each as [`recv`](TypedConsumer::recv)
    /// gives it.
    pub fn stream(&self) -> impl Stream<Item = Result<ConsumedRecord<K, V>, Error>> + '_ {
        self.consumer.stream().filter_map(move |m| async move {
            match m {
                Ok(m) => self.next_record(&m).await.transpose(),
                Err(e) => Some(Err(kafka_err("consume", e))),
            }
        })
    }

    /// `m` decoded; `None` when it does not decode and the hook skipped it.
    async fn next_record(
        &self,
        m: &BorrowedMessage<'_>,
    ) -> Result<Option<ConsumedRecord<K, V>>, Error> {
        let decoded = match self.prepare(m).await {
            Ok(()) => self.decode(m),
            Err(e) => Err(e),
        };
        match (decoded, &self.on_undecodable) {
            (Err(e @ Error::Record { .. }), Some(hook)) => hook(m, &e).map(|()| None),
            (decoded, _) => decoded.map(Some),
        }
    }

    /// Runs the KMS call a record's key or value would need (a data key
    /// not in the cache) on tokio's blocking pool, so decoding does not
    /// block the worker.
    async fn prepare(&self, m: &BorrowedMessage<'_>) -> Result<(), Error> {
        let key_work = m.key().and_then(|k| self.key_de.blocking_work(k));
        let value_work = m.payload().and_then(|v| self.value_de.blocking_work(v));
        match BlockingWork::both(key_work, value_work) {
            None => Ok(()),
            Some(work) => off_the_worker(work).await.map_err(|cause| Error::Record {
                topic: m.topic().to_owned(),
                partition: m.partition(),
                offset: m.offset(),
                cause: Box::new(cause),
            }),
        }
    }

    fn decode(&self, m: &BorrowedMessage<'_>) -> Result<ConsumedRecord<K, V>, Error> {
        let (key, value) =
            decode_message(m, self.binding, &self.key_de, &self.value_de).map_err(|cause| {
                Error::Record {
                    topic: m.topic().to_owned(),
                    partition: m.partition(),
                    offset: m.offset(),
                    cause: Box::new(cause),
                }
            })?;
        let headers = m
            .headers()
            .map(|h| {
                h.iter()
                    .map(|h| (h.key.to_owned(), h.value.map(<[u8]>::to_vec)))
                    .collect()
            })
            .unwrap_or_default();
        Ok(ConsumedRecord {
            topic: m.topic().to_owned(),
            partition: m.partition(),
            offset: m.offset(),
            timestamp: m.timestamp().to_millis(),
            headers,
            key,
            value,
        })
    }
}
