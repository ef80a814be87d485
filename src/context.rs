//! Where a value lives: its topic (or store name) and its record key, which
//! of the two the associated data binds it to, and the encoding of that
//! associated data (`docs/FORMAT.md`).

use crate::error::Error;

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
    /// [`Error::ContextTooLong`] if the topic
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
    pub fn associated_data(&self, policy: AadPolicy) -> Result<Vec<u8>, Error> {
        aad(policy, self)
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

/// The shape of a non-empty associated data.
struct AadLayout<'a> {
    /// Its length in bytes.
    len: usize,
    /// The record key it includes, if any.
    key: Option<&'a [u8]>,
}

/// The shape of the associated data for `ctx` under `policy`; `None` for the
/// empty associated data of [`AadPolicy::None`].
#[inline]
fn aad_layout<'a>(policy: AadPolicy, ctx: &Context<'a>) -> Result<Option<AadLayout<'a>>, Error> {
    let key = match policy {
        AadPolicy::None => return Ok(None),
        AadPolicy::Topic => None,
        AadPolicy::TopicAndKey => ctx.key(),
    };
    len_u32(ctx.topic().len())?;
    let key_part = match key {
        None => 0,
        Some(k) => {
            len_u32(k.len())?;
            k.len()
                .checked_add(4)
                .ok_or_else(|| Error::ContextTooLong)?
        }
    };
    let len = ctx
        .topic()
        .len()
        .checked_add(5)
        .and_then(|n| n.checked_add(key_part))
        .ok_or_else(|| Error::ContextTooLong)?;
    Ok(Some(AadLayout { len, key }))
}

/// Writes the associated data for `ctx` (and `key`, if any) into `out`, which
/// is exactly as long as [`aad_layout`] says.
#[inline]
fn encode_aad(ctx: &Context<'_>, key: Option<&[u8]>, out: &mut [u8]) -> Result<(), Error> {
    let topic = ctx.topic().as_bytes();
    let (len, rest) = out.split_at_mut(4);
    len.copy_from_slice(&len_u32(topic.len())?.to_be_bytes());
    let (t, rest) = rest.split_at_mut(topic.len());
    copy_short(t, topic);
    let (flag, rest) = rest.split_at_mut(1);
    match key {
        None => flag[0] = 0,
        Some(k) => {
            flag[0] = 1;
            let (len, rest) = rest.split_at_mut(4);
            len.copy_from_slice(&len_u32(k.len())?.to_be_bytes());
            copy_short(rest, k);
        }
    }
    Ok(())
}

/// `dst.copy_from_slice(src)` for slices of the same length, without a call
/// to `memcpy` for the short pieces of an associated data (a call costs
/// more than the bytes): two overlapping fixed-size copies cover 4 to 16
/// bytes.
#[inline(always)]
fn copy_short(dst: &mut [u8], src: &[u8]) {
    let n = src.len();
    if n > 16 || dst.len() != n {
        dst.copy_from_slice(src);
    } else if n >= 8 {
        dst[..8].copy_from_slice(&src[..8]);
        dst[n - 8..].copy_from_slice(&src[n - 8..]);
    } else if n >= 4 {
        dst[..4].copy_from_slice(&src[..4]);
        dst[n - 4..].copy_from_slice(&src[n - 4..]);
    } else {
        for (d, s) in dst.iter_mut().zip(src) {
            *d = *s;
        }
    }
}

fn len_u32(n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::ContextTooLong)
}

/// The associated data for `ctx` under `policy`, in a new `Vec`.
pub(crate) fn aad(policy: AadPolicy, ctx: &Context<'_>) -> Result<Vec<u8>, Error> {
    let Some(AadLayout { len, key }) = aad_layout(policy, ctx)? else {
        return Ok(Vec::new());
    };
    let mut out = vec![0; len];
    encode_aad(ctx, key, &mut out)?;
    Ok(out)
}

/// [`aad`] written into `out` (cleared first), which keeps its capacity.
pub(crate) fn aad_into(
    policy: AadPolicy,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    out.clear();
    let Some(AadLayout { len, key }) = aad_layout(policy, ctx)? else {
        return Ok(());
    };
    out.resize(len, 0);
    encode_aad(ctx, key, out)
}

/// Associated data up to this long is computed on the stack: a topic and a
/// record key of up to 119 bytes together. Longer ones take one allocation.
const INLINE_AAD: usize = 128;

/// Room for the associated data of one value, so that the per-value path
/// computes it without allocating:
/// `let mut buf = AadBuf::new(); let aad = buf.encode(policy, ctx)?;`.
pub(crate) struct AadBuf {
    inline: [u8; INLINE_AAD],
    heap: Vec<u8>,
}

impl AadBuf {
    #[inline]
    pub(crate) fn new() -> Self {
        AadBuf {
            inline: [0; INLINE_AAD],
            heap: Vec::new(),
        }
    }

    /// The associated data for `ctx` under `policy`, in this buffer.
    #[inline]
    pub(crate) fn encode(&mut self, policy: AadPolicy, ctx: &Context<'_>) -> Result<&[u8], Error> {
        let Some(AadLayout { len, key }) = aad_layout(policy, ctx)? else {
            return Ok(&[]);
        };
        let out = match self.inline.get_mut(..len) {
            Some(out) => out,
            None => {
                self.heap.resize(len, 0);
                &mut self.heap[..]
            }
        };
        encode_aad(ctx, key, out)?;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The associated data as docs/FORMAT.md spells it, written the plain way.
    fn reference(policy: AadPolicy, topic: &str, key: Option<&[u8]>) -> Vec<u8> {
        let key = match policy {
            AadPolicy::None => return Vec::new(),
            AadPolicy::Topic => None,
            _ => key,
        };
        let mut out = (topic.len() as u32).to_be_bytes().to_vec();
        out.extend_from_slice(topic.as_bytes());
        match key {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                out.extend_from_slice(&(k.len() as u32).to_be_bytes());
                out.extend_from_slice(k);
            }
        }
        out
    }

    #[test]
    fn inline_and_heap_aad_match_the_format_for_every_short_length() {
        let text: String = (0..200)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let bytes: Vec<u8> = (0..200u8).collect();
        let mut lens: Vec<usize> = (0..=40).collect();
        lens.extend([63, 64, 100, 119, 120, 121, 200]);
        for policy in [AadPolicy::TopicAndKey, AadPolicy::Topic, AadPolicy::None] {
            for &t in &lens {
                for k in std::iter::once(None).chain(lens.iter().map(|&k| Some(k))) {
                    let topic = &text[..t];
                    let key = k.map(|k| &bytes[..k]);
                    let ctx = match key {
                        Some(key) => Context::new(topic).with_key(key),
                        None => Context::new(topic),
                    };
                    let want = reference(policy, topic, key);
                    let mut buf = AadBuf::new();
                    assert_eq!(buf.encode(policy, &ctx).unwrap(), &want[..], "{t} {k:?}");
                    assert_eq!(aad(policy, &ctx).unwrap(), want, "{t} {k:?}");
                }
            }
        }
    }
}
