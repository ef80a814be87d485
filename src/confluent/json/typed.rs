//! [`ConfluentSerde`]: the codec as one of this crate's serializers and
//! deserializers.

use std::marker::PhantomData;
use std::sync::Arc;

use super::*;
use crate::context::Context;
use crate::error::Error;
use crate::serde::{Deserializer, Serializer};

/// Records of type `T` in Confluent's format, through a shared
/// [`ConfluentJson`]: one of this crate's [`Serializer`]s and
/// [`Deserializer`]s, so it goes where a codec goes (the typed Kafka
/// clients, the stores). The subject is Confluent's default
/// (`TopicNameStrategy`): `{topic}-value`, or `{topic}-key` with
/// [`for_keys`](ConfluentSerde::for_keys). A tombstone (`None`) is `None`
/// both ways, before any schema, DEK or cipher.
///
/// ```
/// use std::sync::Arc;
/// use serde::{Deserialize, Serialize};
/// use serde_json::json;
/// use tombstone_crypt::confluent::{ConfluentJson, ConfluentSerde, LocalKms};
/// use tombstone_crypt::{Context, Deserializer as _, Serializer as _};
///
/// #[derive(Serialize, Deserialize, Debug, PartialEq)]
/// struct Customer { id: u64, ssn: String, note: Option<String> }
///
/// let mut codec = ConfluentJson::new(LocalKms::new("mysecret"));
/// codec.register(1, "customers-value", &json!({
///     "schemaType": "JSON",
///     "schema": r#"{"type":"object","properties":{"id":{"type":"integer"},
///         "ssn":{"type":"string","confluent:tags":["PII"]},
///         "note":{"type":["null","string"],"confluent:tags":["PII"]}}}"#,
///     "ruleSet": {"domainRules": [{"mode": "WRITEREAD", "type": "ENCRYPT", "tags": ["PII"],
///         "params": {"encrypt.kek.name": "k1"}}]}
/// }))?;
/// let serde = ConfluentSerde::<Customer>::new(Arc::new(codec));
/// let ctx = Context::new("customers");
/// let c = Customer { id: 1, ssn: "078-05-1120".into(), note: None };
/// let bytes = serde.serialize(&ctx, Some(&c))?.unwrap();
/// assert!(String::from_utf8_lossy(&bytes).contains(r#""note":null"#)); // a null field stays null
/// assert_eq!(serde.deserialize(&ctx, Some(&bytes))?, Some(c));
/// assert_eq!(serde.serialize(&ctx, None)?, None); // a tombstone stays one
/// # Ok::<(), tombstone_crypt::Error>(())
/// ```
pub struct ConfluentSerde<T> {
    codec: Arc<ConfluentJson>,
    suffix: &'static str,
    marker: PhantomData<fn() -> T>,
}

impl<T> Clone for ConfluentSerde<T> {
    fn clone(&self) -> Self {
        ConfluentSerde {
            codec: Arc::clone(&self.codec),
            suffix: self.suffix,
            marker: PhantomData,
        }
    }
}

impl<T> std::fmt::Debug for ConfluentSerde<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfluentSerde")
            .field("codec", &self.codec)
            .field("subject", &format_args!("{{topic}}{}", self.suffix))
            .finish()
    }
}

impl<T> ConfluentSerde<T> {
    /// Record values of the topics `codec` has schemas for (`{topic}-value`).
    pub fn new(codec: Arc<ConfluentJson>) -> Self {
        ConfluentSerde {
            codec,
            suffix: "-value",
            marker: PhantomData,
        }
    }

    /// For record keys instead (`{topic}-key`). A key schema's encryption
    /// rules must be deterministic (`AES256_SIV`): writing a key under a
    /// randomized rule is refused, as compaction could never match its
    /// writes.
    #[must_use]
    pub fn for_keys(self) -> Self {
        ConfluentSerde {
            suffix: "-key",
            ..self
        }
    }

    fn subject(&self, ctx: &Context<'_>) -> String {
        format!("{}{}", ctx.topic(), self.suffix)
    }
}

impl<T: ::serde::Serialize> Serializer<T> for ConfluentSerde<T> {
    fn serialize_into(&self, ctx: &Context<'_>, value: &T, out: &mut Vec<u8>) -> Result<(), Error> {
        let subject = self.subject(ctx);
        let id = self.codec.latest_id(&subject)?;
        if self.suffix == "-key" {
            // A record key is what compaction matches: under a randomized
            // rule the same key is written differently each time, and a
            // tombstone never meets the value it deletes.
            let schema = self.codec.schema(id, Some(&subject))?;
            let randomized = schema
                .fields
                .iter()
                .map(|(r, _)| r)
                .chain(schema.payload.as_ref())
                .any(|r| r.algorithm != crate::confluent::DekAlgorithm::Aes256Siv);
            if randomized {
                return Err(Error::confluent(format!(
                    "record keys of {subject} under a randomized rule (AES-GCM): each write of a key would differ and compaction would never meet its tombstone; the key schema's rules need encrypt.dek.algorithm AES256_SIV"
                )));
            }
        }
        let value = serde_json::to_value(value).map_err(|e| {
            Error::codec(
                "json",
                format!("cannot encode the record: {}", json_kind(&e)),
            )
        })?;
        out.extend_from_slice(&self.codec.encode_value(&subject, id, value)?);
        Ok(())
    }
}

impl<T: ::serde::de::DeserializeOwned> Deserializer<T> for ConfluentSerde<T> {
    fn deserialize_owned(&self, ctx: &Context<'_>, data: Vec<u8>) -> Result<T, Error> {
        self.deserialize_slice(ctx, &data)
    }

    fn deserialize_slice(&self, ctx: &Context<'_>, data: &[u8]) -> Result<T, Error> {
        let value = self
            .codec
            .decode_for(Some(&self.subject(ctx)), Some(data))?
            .ok_or_else(|| Error::confluent("a present record read as none"))?;
        serde_json::from_value(value).map_err(|e| {
            Error::codec(
                "json",
                format!("a Confluent record's value: {}", json_kind(&e)),
            )
        })
    }
}
