//! [`TypedConsumer`]: records decoded through the deserializers, a
//! tombstone as `None`.

use core::fmt;
use core::marker::PhantomData;

use futures_util::stream::{Stream, StreamExt as _};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{Consumer as _, StreamConsumer};
use rdkafka::message::{BorrowedMessage, Headers as _, Message as _};
use rdkafka::TopicPartitionList;

use super::{kafka_err, off_the_worker, RecordHeaders};
use crate::error::Error;
use crate::kafka::record::decode_message;
use crate::record_key::KeyBinding;
use crate::serde::Deserializer;
use crate::work::BlockingWork;

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
