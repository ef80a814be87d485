//! Where a value lives: its topic (or store name) and its record key, and
//! which of the two the associated data binds it to.

/// Where a value lives: a topic or store name and, optionally, the record key.
///
/// Under the default [`AadPolicy::TopicAndKey`] both are bound into the
/// ciphertext, so a value copied to another key or topic fails to decrypt.
///
/// ```
/// use tombstone_crypt::Context;
///
/// let ctx = Context::new("orders").with_key(b"order-17");
/// assert_eq!(ctx.topic(), "orders");
/// assert_eq!(ctx.key(), Some(&b"order-17"[..]));
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context<'a> {
    topic: &'a str,
    key: Option<&'a [u8]>,
}

impl<'a> Context<'a> {
    /// A context for a value of `topic` (a Kafka topic or a store name), with
    /// no record key.
    pub fn new(topic: &'a str) -> Self {
        Context { topic, key: None }
    }

    /// The same context with the record key `key` (the serialized key bytes).
    #[must_use]
    pub fn with_key(self, key: &'a [u8]) -> Self {
        Context {
            key: Some(key),
            ..self
        }
    }

    /// The topic or store name.
    pub fn topic(&self) -> &'a str {
        self.topic
    }

    /// The record key, if any.
    pub fn key(&self) -> Option<&'a [u8]> {
        self.key
    }

    /// The associated data that binds a ciphertext to this context under
    /// `policy`, as `docs/FORMAT.md` spells it: what the serde wrappers pass
    /// to [`Keyset::encrypt`](crate::Keyset::encrypt) and
    /// [`Keyset::decrypt`](crate::Keyset::decrypt).
    ///
    /// # Errors
    /// [`Error::ContextTooLong`](crate::Error::ContextTooLong) if the topic
    /// or the key is longer than 2^32 - 1 bytes.
    ///
    /// ```
    /// use tombstone_crypt::{AadPolicy, Context};
    ///
    /// let ctx = Context::new("t").with_key(b"k");
    /// assert_eq!(ctx.associated_data(AadPolicy::TopicAndKey)?, b"\0\0\0\x01t\x01\0\0\0\x01k");
    /// assert_eq!(ctx.associated_data(AadPolicy::Topic)?, b"\0\0\0\x01t\0");
    /// assert_eq!(ctx.associated_data(AadPolicy::None)?, b"");
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn associated_data(&self, policy: AadPolicy) -> Result<Vec<u8>, crate::Error> {
        crate::envelope::aad(policy, self)
    }
}

/// What the associated data (AAD) of a ciphertext binds it to.
///
/// The encoding is in `docs/FORMAT.md`. Both sides must use the same policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum AadPolicy {
    /// Topic (or store name) and record key: a value moved to another key or
    /// topic fails to decrypt. The default.
    #[default]
    TopicAndKey,
    /// Topic only: values may move between keys of one topic.
    Topic,
    /// Empty associated data, as plain Tink users and Confluent's field-level
    /// encryption use: a value may be moved anywhere.
    None,
}
