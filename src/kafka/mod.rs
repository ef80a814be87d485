//! Kafka (feature `kafka`, on rdkafka with the bundled librdkafka): records
//! through the write rule, typed async clients, and a store changelog on a
//! topic.
//!
//! - [`encode_write`] / [`decode_message`]: one write's records (tombstones
//!   for an encrypted key's older forms first, then the record, all to the
//!   partition of the key's plaintext) and a consumed message back to a key
//!   and a value, sans IO, for any producer or consumer;
//! - [`TypedProducer`] / [`TypedConsumer`]: rdkafka's `FutureProducer` and
//!   `StreamConsumer` with serdes on both sides; a consumer's KMS calls run
//!   on tokio's blocking pool, a producer's in `block_in_place` on a
//!   multi-thread runtime (inline elsewhere), in the write's first poll;
//! - [`KafkaChangelog`]: a [`Changelog`](crate::store::Changelog) on a
//!   compacted topic, for [`ChangeLoggingStore`](crate::store::ChangeLoggingStore)
//!   and restores.
//!
//! **Write order.** A [`TypedProducer`]'s writes reach the broker in the
//! order they were started (first polled: nothing is awaited before a
//! write takes its place; a KMS call for a new data key runs in that first
//! poll, and an encrypted key's partition count is read in the write's
//! place), whatever the caller does
//! with their futures
//! (drops them, times them out, awaits them out of order) and whatever the
//! queue does: a write the full queue cannot take holds back every later
//! one, and a dropped future still sends its write, whole and in its
//! place ([`TypedProducer::flush`] waits for it). librdkafka keeps that
//! order per partition on an idempotent producer (the default) or one
//! request in flight; a producer with neither sends one record at a time,
//! each acknowledged before the next (see [`TypedProducer`]).
//!
//! A tombstone reaches the broker as a record **with no payload at all**
//! (Kafka's null value), never as an empty payload; a consumed record
//! without a payload is `None` without calling the value deserializer.
//!
//! ```
//! use tombstone_crypt::kafka::encode_write;
//! use tombstone_crypt::record_key::KeyBinding;
//! use tombstone_crypt::{Bytes, EncryptingSerializer, Keyset, Utf8};
//!
//! let values = EncryptingSerializer::new(Bytes, Keyset::generate());
//! let put = encode_write("orders", 0, KeyBinding::Plaintext, &Utf8, &values, "k", Some(&b"v"[..]))?;
//! assert!(put[0].payload.is_some());
//! let delete = encode_write("orders", 0, KeyBinding::Plaintext, &Utf8, &values, "k", None)?;
//! assert!(delete[0].payload.is_none()); // a tombstone stays a tombstone
//! # Ok::<(), tombstone_crypt::Error>(())
//! ```

mod changelog;
mod client;
mod key_store;
mod record;
mod topic_id;
mod view;

pub use changelog::{is_transient_kafka_error, KafkaChangelog, TopicSettings};
pub use client::{
    ConsumedRecord, Delivered, RecordHeaders, TypedConsumer, TypedProducer, UndecodableHook,
};
pub use key_store::KafkaKeyStore;
pub use record::{decode_message, encode_write, KafkaRecord};
pub use topic_id::{topic_identity, TopicId, TopicIdentity};

/// The rdkafka crate this one is built on, for its `ClientConfig`,
/// producers and consumers.
pub use rdkafka;

/// A librdkafka boolean setting's value as librdkafka reads it: `true`,
/// `t` (any case) or `1` is true, `false`, `f` (any case) or `0` false;
/// anything else (spaces included) is no boolean (`None`: librdkafka
/// refuses it). The library and the command line decide "is idempotence
/// on?" with it, so they agree with the producer librdkafka makes.
///
/// ```
/// use tombstone_crypt::kafka::librdkafka_bool;
/// assert_eq!(librdkafka_bool("TRUE"), Some(true));
/// assert_eq!(librdkafka_bool("1"), Some(true));
/// assert_eq!(librdkafka_bool("f"), Some(false));
/// assert_eq!(librdkafka_bool("yes"), None);
/// ```
pub fn librdkafka_bool(value: &str) -> Option<bool> {
    if value.eq_ignore_ascii_case("true") || value.eq_ignore_ascii_case("t") || value == "1" {
        Some(true)
    } else if value.eq_ignore_ascii_case("false") || value.eq_ignore_ascii_case("f") || value == "0"
    {
        Some(false)
    } else {
        None
    }
}

/// Why a writer refuses `config`: an `acks` (or one of librdkafka's other names
/// of it: `request.required.acks`, `topic.acks`, `topic.request.required.acks`) other than `all` (`-1`). With `acks=0` or
/// `acks=1` a delivery report does not mean the record is stored (a leader
/// that fails before its followers copy it loses it, and with `0` nothing
/// is acknowledged at all), so a write that reported success, or a flush
/// that returned `Ok`, could be lost. `None` when all are absent or
/// `all`; the writers then set `acks=all` themselves.
pub(crate) fn acks_refused(config: &rdkafka::ClientConfig) -> Option<String> {
    [
        "acks",
        "request.required.acks",
        "topic.acks",
        "topic.request.required.acks",
    ]
        .into_iter()
        .find_map(|name| {
            let v = config.get(name)?.trim();
            let all = v.eq_ignore_ascii_case("all") || v == "-1";
            (!all).then(|| {
                format!(
                    "the configuration sets {name}={v}: a delivery report would not mean the record is stored; use acks=all (or leave it unset)"
                )
            })
        })
}

/// Why a writer refuses `config`: a `queuing.strategy` (or
/// `topic.queuing.strategy`) other than `fifo`. A LIFO queue sends the
/// newer of two queued records first (librdkafka refuses it only with
/// idempotence), so a delete queued after its key's put would land before
/// it. `None` when absent or `fifo`.
pub(crate) fn queuing_refused(config: &rdkafka::ClientConfig) -> Option<String> {
    ["queuing.strategy", "topic.queuing.strategy"]
        .into_iter()
        .find_map(|name| {
            let v = config.get(name)?.trim();
            (!v.eq_ignore_ascii_case("fifo")).then(|| {
                format!(
                    "the configuration sets {name}={v}: writes keep their order only in a first in, first out queue; use fifo (or leave it unset)"
                )
            })
        })
}
