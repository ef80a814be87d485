//! The Kafka error codes the proxy answers with itself.

/// `CORRUPT_MESSAGE`: retriable for producers; what a partition whose
/// records the proxy cannot encrypt or decrypt gets.
pub(crate) const CORRUPT_MESSAGE: i16 = 2;
/// `TOPIC_AUTHORIZATION_FAILED`: what a client gets for a key-store topic
/// of subject keys, which it may neither write nor read through the proxy.
pub(crate) const TOPIC_AUTHORIZATION_FAILED: i16 = 29;
/// `UNKNOWN_PRODUCER_ID`: what an idempotent batch gets that the proxy
/// cannot place at a sequence the broker is known to expect
/// (`crate::sequences`): this proxy process holds no record of its
/// producer. Producers start a new epoch on it (KIP-360; librdkafka's
/// idempotent producer on its own, as the tests show across a proxy
/// restart; the Java client's by the same KIP), where
/// `OUT_OF_ORDER_SEQUENCE_NUMBER` stops a librdkafka producer with a fatal
/// error.
pub(crate) const UNKNOWN_PRODUCER_ID: i16 = 59;
/// `UNKNOWN_TOPIC_ID`: what a Produce or Fetch gets that names a topic by
/// an id no Metadata response through the proxy has named
/// (`crate::topic_ids`); retriable: the client asks Metadata again.
pub(crate) const UNKNOWN_TOPIC_ID: i16 = 100;
/// `UNSUPPORTED_VERSION`: the proxy's answer to an ApiVersions at a
/// version it cannot read.
pub(crate) const UNSUPPORTED_VERSION: i16 = 35;
/// `MESSAGE_TOO_LARGE`: a partition whose records, encrypted, a Fetch
/// through the proxy could not decode back (past the request's decoding
/// budget, or decompressing past `max_frame_bytes`). Not retriable as it
/// is; the Java producer splits its batch and tries again.
pub(crate) const MESSAGE_TOO_LARGE: i16 = 10;
