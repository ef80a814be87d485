//! Kafka records: a write's records through the write rule
//! ([`encode_write`]) and a consumed message back to a key and a value
//! ([`decode_message`]), sans IO.
//!
//! A tombstone reaches the broker as a record **with no payload at all**
//! (Kafka's null value), never as an empty payload; a consumed record with no
//! payload comes back as `None` without touching the value deserializer.

use rdkafka::message::Message;
use rdkafka::producer::BaseRecord;

use crate::context::Context;
use crate::error::Error;
use crate::record_key::{KeyBinding, KeyForms};
use crate::serde::{Deserializer, Serializer};

/// A record ready to produce: its topic, key bytes and payload, `None` being
/// a tombstone (produced with no payload).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaRecord {
    /// The topic.
    pub topic: String,
    /// The serialized record key.
    pub key: Vec<u8>,
    /// The serialized (encrypted) value, or `None` for a tombstone.
    pub payload: Option<Vec<u8>>,
    /// The partition, when the record chose one (an encrypted key's, by its
    /// plaintext: see [`KeyForms::partition`]); `None` leaves it to the
    /// producer's partitioner, which hashes the key bytes on the wire: set
    /// `partitioner=murmur2_random` on it to put the key where the Java
    /// client does ([`TypedProducer`](crate::kafka::TypedProducer) sets it).
    pub partition: Option<i32>,
}

impl KafkaRecord {
    /// The record as rdkafka's `BaseRecord`, to hand to a producer. A
    /// tombstone gets no payload at all.
    pub fn as_base_record(&self) -> BaseRecord<'_, [u8], [u8]> {
        let mut record = BaseRecord::to(&self.topic).key(&self.key[..]);
        if let Some(p) = self.partition {
            record = record.partition(p);
        }
        match &self.payload {
            Some(p) => record.payload(&p[..]),
            None => record,
        }
    }
}

/// Encodes one write of a typed `(key, Option<value>)` to `topic` (of
/// `partitions` partitions) through any serializer pair, as the records the
/// write rule puts on the log, in order (see [`KeyForms`]): a tombstone for
/// each older form of an encrypted key, then the record under the primary
/// form, all to the partition of the plaintext key. A key that is not
/// encrypted gives one record, left to the producer's partitioner (use
/// `partitioner=murmur2_random`, the Java client's, as
/// [`TypedProducer`](crate::kafka::TypedProducer) does).
///
/// The value's context is the topic and the key bytes that `binding` names
/// (the plaintext key by default: see [`KeyBinding`]). `partitions` is the
/// topic's partition count; it chooses an encrypted key's partition.
///
/// # Errors
/// A serde failed; [`Error::InnerReturnedNone`] if the value serializer
/// returned no bytes for a present value; [`Error::Kafka`] if the key is
/// encrypted and `partitions` is 0.
pub fn encode_write<K, V, KS, VS>(
    topic: &str,
    partitions: u32,
    binding: KeyBinding,
    key_ser: &KS,
    value_ser: &VS,
    key: &K,
    value: Option<&V>,
) -> Result<Vec<KafkaRecord>, Error>
where
    K: ?Sized,
    V: ?Sized,
    KS: Serializer<K> + ?Sized,
    VS: Serializer<V> + ?Sized,
{
    let forms = key_ser.key_forms(&Context::new(topic), key)?;
    encode_forms(topic, partitions, binding, &forms, value_ser, value)
}

/// [`encode_write`] for a key whose forms are known.
pub(crate) fn encode_forms<V, VS>(
    topic: &str,
    partitions: u32,
    binding: KeyBinding,
    forms: &KeyForms,
    value_ser: &VS,
    value: Option<&V>,
) -> Result<Vec<KafkaRecord>, Error>
where
    V: ?Sized,
    VS: Serializer<V> + ?Sized,
{
    let payload =
        value_ser.serialize(&Context::new(topic).with_key(forms.bound(binding)), value)?;
    if value.is_some() && payload.is_none() {
        return Err(Error::InnerReturnedNone);
    }
    if forms.is_encrypted() && partitions == 0 {
        return Err(Error::Kafka {
            detail: format!(
                "an encrypted key's partition is chosen from the partition count of {topic}, and 0 was given"
            ),
            cause: None,
        });
    }
    let partition = forms.partition(partitions);
    // One record of the write carries the payload: the rule is asked with
    // a stand-in, and the payload is moved into that record, not copied.
    let stand_in: Option<&[u8]> = payload.as_ref().map(|_| &[][..]);
    let mut payload = payload;
    let mut records = Vec::with_capacity(forms.write_count());
    for (key, value) in forms.writes(stand_in) {
        records.push(KafkaRecord {
            topic: topic.to_owned(),
            key: key.to_vec(),
            payload: value.and_then(|_| payload.take()),
            partition,
        });
    }
    Ok(records)
}

/// Decodes a consumed message into `(key, Option<value>)` through any
/// deserializer pair, with the message's topic and the key bytes that
/// `binding` names as context (see [`KeyBinding`]). A message without a
/// payload is a tombstone: `None`.
///
/// # Errors
/// A serde failed (a value that does not decrypt);
/// [`Error::MissingRecordKey`] if the message has no key.
pub fn decode_message<K, V, KD, VD, M>(
    message: &M,
    binding: KeyBinding,
    key_de: &KD,
    value_de: &VD,
) -> Result<(K, Option<V>), Error>
where
    KD: Deserializer<K> + ?Sized,
    VD: Deserializer<V> + ?Sized,
    M: Message,
{
    let topic = message.topic();
    let wire = message.key().ok_or(Error::MissingRecordKey)?;
    let (key, plaintext) = key_de.deserialize_key(&Context::new(topic), wire)?;
    let bound = match binding {
        KeyBinding::Plaintext => &plaintext[..],
        KeyBinding::Wire => wire,
    };
    let value = value_de.deserialize(&Context::new(topic).with_key(bound), message.payload())?;
    Ok((key, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{Bytes, Utf8};
    use crate::keyset::Keyset;
    use crate::primitive::KeyTemplate;
    use crate::serde::{DeterministicSerializer, EncryptingSerializer};

    #[test]
    fn an_encrypted_key_needs_the_partition_count_and_a_plain_one_does_not() {
        let values = EncryptingSerializer::new(Bytes, Keyset::generate());
        let mut keys = Keyset::generate_with(KeyTemplate::aes256_siv()).unwrap();
        keys.rotate();
        let siv = DeterministicSerializer::new(Utf8, keys);
        let b = KeyBinding::Plaintext;
        assert!(encode_write("t", 0, b, &siv, &values, "k", Some(&b"v"[..])).is_err());
        let records = encode_write("t", 3, b, &siv, &values, "k", Some(&b"v"[..])).unwrap();
        assert_eq!(records.len(), 2);
        assert!(records[0].payload.is_none() && records[1].payload.is_some());
        let p = Some(crate::record_key::murmur2_partition(b"k", 3));
        assert!(records.iter().all(|r| r.partition == p));
        let plain = encode_write("t", 0, b, &Utf8, &values, "k", None).unwrap();
        assert_eq!(plain.len(), 1);
        assert_eq!(
            (plain[0].partition, plain[0].payload.is_none()),
            (None, true)
        );
    }
}
