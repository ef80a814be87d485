//! The wire format (Tink's AEAD output with output prefix TINK) and the
//! encoding of the associated data, over the cipher backend.
//!
//! ```text
//! 0x01 | key_id (u32 BE) | nonce (12) | ciphertext | tag (16)
//! ```
//!
//! Nothing here knows about stores, codecs or Kafka, and nothing here ever
//! sees a tombstone: callers pass present values only.

use rand::Rng as _;

use crate::cipher::{NONCE_LEN, TAG_LEN};
use crate::context::{AadPolicy, Context};
use crate::error::Error;
use crate::keyset::{KeyId, Keyset};

/// The version byte of Tink's output prefix TINK.
pub(crate) const VERSION: u8 = 0x01;
/// Length of the prefix: version byte and key id.
pub(crate) const PREFIX_LEN: usize = 5;
/// Offset of the ciphertext body.
pub(crate) const HEADER_LEN: usize = PREFIX_LEN + NONCE_LEN;
/// Bytes a ciphertext carries beyond its plaintext.
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// Appends the associated data for `ctx` under `policy` to `out`.
pub(crate) fn write_aad(
    policy: AadPolicy,
    ctx: &Context<'_>,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    let key = match policy {
        AadPolicy::None => return Ok(()),
        AadPolicy::Topic => None,
        AadPolicy::TopicAndKey => ctx.key(),
    };
    let topic = ctx.topic().as_bytes();
    out.reserve(4 + topic.len() + 1 + key.map_or(0, |k| 4 + k.len()));
    out.extend_from_slice(&len_u32(topic.len())?.to_be_bytes());
    out.extend_from_slice(topic);
    match key {
        None => out.push(0),
        Some(k) => {
            out.push(1);
            out.extend_from_slice(&len_u32(k.len())?.to_be_bytes());
            out.extend_from_slice(k);
        }
    }
    Ok(())
}

fn len_u32(n: usize) -> Result<u32, Error> {
    u32::try_from(n).map_err(|_| Error::ContextTooLong)
}

/// The associated data for `ctx` under `policy`.
pub(crate) fn aad(policy: AadPolicy, ctx: &Context<'_>) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    write_aad(policy, ctx, &mut out)?;
    Ok(out)
}

/// Encrypts a present value under the primary key of `keyset`.
///
/// `write_plaintext` appends the plaintext to the buffer it is given; the
/// buffer already holds the header, and `size_hint` bytes of room are
/// reserved for it beyond the tag, so an exact hint means one allocation.
pub(crate) fn seal_with(
    keyset: &Keyset,
    aad: &[u8],
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<Vec<u8>, Error> {
    let entry = keyset.primary_entry();
    let mut out = Vec::with_capacity(OVERHEAD.saturating_add(size_hint));
    out.push(VERSION);
    out.extend_from_slice(&entry.id.0.to_be_bytes());
    let mut nonce = [0u8; NONCE_LEN];
    // ThreadRng: a CSPRNG seeded and periodically reseeded from the OS (see
    // SECURITY.md), no syscall per value.
    rand::rng().fill_bytes(&mut nonce);
    out.extend_from_slice(&nonce);
    write_plaintext(&mut out)?;
    let tag = entry
        .material
        .seal_in_place(&nonce, aad, &mut out[HEADER_LEN..])?;
    out.extend_from_slice(&tag);
    Ok(out)
}

/// Encrypts `plaintext` under the primary key of `keyset`.
pub(crate) fn seal(keyset: &Keyset, aad: &[u8], plaintext: &[u8]) -> Result<Vec<u8>, Error> {
    seal_with(keyset, aad, plaintext.len(), |out| {
        out.extend_from_slice(plaintext);
        Ok(())
    })
}

/// The parts of a ciphertext, checked for length and version only.
pub(crate) struct Parsed<'a> {
    pub(crate) key_id: KeyId,
    pub(crate) nonce: &'a [u8; NONCE_LEN],
    pub(crate) body: &'a [u8],
    pub(crate) tag: &'a [u8; TAG_LEN],
}

/// Splits a ciphertext into its parts.
pub(crate) fn parse(data: &[u8]) -> Result<Parsed<'_>, Error> {
    if data.len() < OVERHEAD {
        return Err(Error::Truncated {
            len: data.len(),
            min: OVERHEAD,
        });
    }
    if data[0] != VERSION {
        return Err(Error::UnsupportedVersion(data[0]));
    }
    let (prefix, rest) = data.split_at(PREFIX_LEN);
    let (nonce, rest) = rest.split_at(NONCE_LEN);
    let (body, tag) = rest.split_at(rest.len() - TAG_LEN);
    let id = u32::from_be_bytes([prefix[1], prefix[2], prefix[3], prefix[4]]);
    Ok(Parsed {
        key_id: KeyId(id),
        nonce: nonce.try_into().map_err(|_| Error::Decryption)?,
        body,
        tag: tag.try_into().map_err(|_| Error::Decryption)?,
    })
}

/// Decrypts a ciphertext with whichever enabled key its key id names.
/// On any failure no plaintext is returned.
pub(crate) fn open(keyset: &Keyset, aad: &[u8], data: &[u8]) -> Result<Vec<u8>, Error> {
    let parsed = parse(data)?;
    let key = keyset.decrypting_key(parsed.key_id)?;
    let mut buf = parsed.body.to_vec();
    key.open_in_place(parsed.nonce, aad, &mut buf, parsed.tag)?;
    Ok(buf)
}
