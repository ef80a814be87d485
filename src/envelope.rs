//! The wire format (Tink's AEAD output with output prefix TINK) of each key
//! type, over the cipher backend. The associated data comes in as bytes
//! (`context.rs` encodes it), the keys through the [`Keys`] trait.
//!
//! ```text
//! AES-GCM:  0x01 | key_id (u32 BE) | nonce (12) | ciphertext | tag (16)
//! AES-SIV:  0x01 | key_id (u32 BE) | SIV (16) | ciphertext
//! KMS envelope: 0x01 | key_id | u32be(len EDEK) | EDEK | nonce (12) | ciphertext | tag (16)
//! ```
//!
//! Nothing here knows about keysets, stores, codecs or Kafka, and nothing
//! here ever sees a tombstone: callers pass present values only.

use zeroize::Zeroize as _;

use crate::cipher::{AesGcmKey, NONCE_LEN, SIV_LEN, TAG_LEN};
use crate::error::Error;
use crate::key_id::KeyId;
use crate::kms::dek::{EnvelopeKey, MAX_EDEK_LEN};
use crate::primitive::{Primitive, KMS_MIN_LEN, PREFIX_LEN};
use crate::stats::{Counters, Event};
use crate::work::BlockingWork;

/// The version byte of Tink's output prefix TINK.
pub(crate) const VERSION: u8 = 0x01;
/// Offset of an AES-GCM ciphertext's body.
const HEADER_LEN: usize = PREFIX_LEN + NONCE_LEN;
/// Bytes an AES-GCM ciphertext carries beyond its plaintext: version byte,
/// key id, nonce and tag (33). Other key types carry more or less (see
/// `docs/FORMAT.md`); [`EncryptingSerializer::size_hint`] asks the key.
///
/// [`EncryptingSerializer::size_hint`]: crate::Serializer::size_hint
pub const OVERHEAD: usize = HEADER_LEN + TAG_LEN;

/// Plaintext bytes reserved up front at most, whatever a size hint says: a
/// huge or wrong hint costs a regrowth, never a huge allocation.
pub(crate) const MAX_PREALLOC: usize = 1 << 20;

/// What the wire format needs from a set of keys: the key to seal under,
/// the key a ciphertext's key id names, and the shortest ciphertext of any
/// key. [`Keyset`](crate::Keyset) implements it, in `keyset.rs` above this
/// module: the format is handed its keys and never sees a keyset.
pub(crate) trait Keys {
    /// The primary key: its id and its primitive.
    fn primary_key(&self) -> (KeyId, &Primitive);

    /// The key that may decrypt a value under `id`: an enabled key, or
    /// [`Error::UnknownKeyId`] / [`Error::KeyDisabled`].
    fn decrypting_key(&self, id: KeyId) -> Result<&Primitive, Error>;

    /// The shortest ciphertext any of the keys writes.
    fn min_ciphertext_len(&self) -> usize;

    /// Where what is sealed and opened with them is counted.
    fn counters(&self) -> &Counters;
}

/// Counts a value sealed (or not) under `keys`.
#[inline]
fn count_sealed<T>(keys: &impl Keys, r: &Result<T, Error>) {
    keys.counters().bump(match r {
        Ok(_) => Event::Encrypted,
        Err(_) => Event::EncryptFailed,
    });
}

/// Counts a value opened (or not) under `keys`, as `ok` when it opened.
#[inline]
fn count_opened<T>(keys: &impl Keys, r: &Result<T, Error>, ok: Event) {
    keys.counters().bump(match r {
        Ok(_) => ok,
        Err(e) => Event::failure(e),
    });
}

/// Appends the ciphertext of a present value under the primary key of
/// `keys` to `out`.
///
/// `write_plaintext` appends the plaintext to the buffer it is given; the
/// buffer already holds the header, and room for `size_hint` bytes (at most
/// [`MAX_PREALLOC`]) is reserved beyond the tag, so an exact hint means one
/// allocation. The plaintext is encrypted where it was written. On any error
/// `out` is zeroized and cut back to its length on entry: no partial
/// plaintext is left behind.
#[inline]
pub(crate) fn seal_into(
    keys: &impl Keys,
    aad: &[u8],
    out: &mut Vec<u8>,
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    let start = out.len();
    let (id, primitive) = keys.primary_key();
    let sealed = match primitive {
        Primitive::AesGcm(key) => seal_gcm(id, key, aad, out, size_hint, write_plaintext),
        Primitive::KmsEnvelope(key) => seal_envelope(id, key, aad, out, size_hint, write_plaintext),
        Primitive::AesSiv(_) => Err(Error::WrongKeyType {
            key_id: id,
            operation:
                "encrypt with a randomized AEAD (it is deterministic: use it for record keys)",
        }),
    };
    count_sealed(keys, &sealed);
    if sealed.is_err() {
        if let Some(tail) = out.get_mut(start..) {
            tail.zeroize();
        }
        out.truncate(start);
    }
    sealed
}

/// The bytes the primary key of `keys` writes before the plaintext: what
/// a buffer for [`seal_in_place`] leaves free at its front. An envelope
/// key's depends on its EDEK: the current one's length once it has made a
/// DEK (a new DEK may wrap to another length), and before that, when the
/// length is not known yet, the longest EDEK accepted ([`MAX_EDEK_LEN`]):
/// room that is too long costs one move of the plaintext, room that is
/// too short a new buffer.
pub(crate) fn header_len(keys: &impl Keys) -> usize {
    match keys.primary_key().1 {
        Primitive::AesGcm(_) => HEADER_LEN,
        Primitive::KmsEnvelope(key) => {
            let edek = match key.edek_len_hint() {
                0 => MAX_EDEK_LEN,
                n => n,
            };
            (PREFIX_LEN + 4 + NONCE_LEN).saturating_add(edek)
        }
        Primitive::AesSiv(_) => PREFIX_LEN + SIV_LEN,
    }
}

/// Encrypts the plaintext `buf[head..]` where it lies, under the primary
/// key of `keys`: the header is written into `buf[..head]` and the tag
/// appended, so `buf` becomes the ciphertext without the plaintext being
/// copied. When `head` is not the header's length the plaintext is moved
/// once to make it fit; when `buf` has too little capacity for the header
/// and the tag, the plaintext is copied into a new buffer of the
/// ciphertext's size and the old block zeroized before it is freed (see
/// [`make_room`]). On success no copy of the plaintext is left anywhere
/// else (not in `buf`'s spare capacity, not in a freed block); on any
/// error `buf` is zeroized and emptied.
pub(crate) fn seal_in_place(
    keys: &impl Keys,
    aad: &[u8],
    buf: &mut Vec<u8>,
    head: usize,
) -> Result<(), Error> {
    let sealed = seal_in_place_unguarded(keys, aad, buf, head);
    count_sealed(keys, &sealed);
    if sealed.is_err() {
        buf.zeroize();
    }
    sealed
}

fn seal_in_place_unguarded(
    keys: &impl Keys,
    aad: &[u8],
    buf: &mut Vec<u8>,
    head: usize,
) -> Result<(), Error> {
    if head > buf.len() {
        return Err(Error::Headroom {
            head,
            len: buf.len(),
        });
    }
    let (id, primitive) = keys.primary_key();
    let mut nonce = [0u8; NONCE_LEN];
    match primitive {
        Primitive::AesGcm(key) => {
            crate::random::nonce(&mut nonce);
            make_room(buf, head, HEADER_LEN);
            buf[0] = VERSION;
            buf[1..PREFIX_LEN].copy_from_slice(&id.0.to_be_bytes());
            buf[PREFIX_LEN..HEADER_LEN].copy_from_slice(&nonce);
            let tag = key.seal_in_place(&nonce, aad, &mut buf[HEADER_LEN..])?;
            buf.extend_from_slice(&tag);
        }
        Primitive::KmsEnvelope(key) => key.with_writer_dek(|dek| {
            let edek_len = u32::try_from(dek.edek.len()).map_err(|_| Error::Encryption)?;
            crate::random::nonce(&mut nonce);
            let nonce_at = PREFIX_LEN + 4 + dek.edek.len();
            let body = nonce_at + NONCE_LEN;
            make_room(buf, head, body);
            buf[0] = VERSION;
            buf[1..PREFIX_LEN].copy_from_slice(&id.0.to_be_bytes());
            buf[PREFIX_LEN..PREFIX_LEN + 4].copy_from_slice(&edek_len.to_be_bytes());
            buf[PREFIX_LEN + 4..nonce_at].copy_from_slice(&dek.edek);
            buf[nonce_at..body].copy_from_slice(&nonce);
            dek.add_bytes(buf.len() - body);
            let tag = dek.key.seal_in_place(&nonce, aad, &mut buf[body..])?;
            buf.extend_from_slice(&tag);
            Ok(())
        })?,
        Primitive::AesSiv(_) => {
            return Err(Error::WrongKeyType {
                key_id: id,
                operation:
                    "encrypt with a randomized AEAD (it is deterministic: use it for record keys)",
            })
        }
    }
    Ok(())
}

/// Makes `buf[..want]` the room for a header of `want` bytes in front of
/// the plaintext `buf[head..]` (`head <= buf.len()`), with spare capacity
/// for the tag, and leaves no other copy of the plaintext behind:
/// - too little capacity: the plaintext is copied into a new buffer of
///   exactly the ciphertext's size, and the old block is zeroized (its
///   whole capacity) before it is freed; growing `buf` itself would have
///   the allocator free the old block with the plaintext in it;
/// - room too long: the plaintext is moved to the front, and the bytes it
///   leaves behind past the new length are zeroized;
/// - room too short: the plaintext is moved back, within the capacity.
fn make_room(buf: &mut Vec<u8>, head: usize, want: usize) {
    let len = buf.len();
    let end = want + (len - head);
    if buf.capacity() < end.saturating_add(TAG_LEN) {
        let mut fresh = Vec::with_capacity(end.saturating_add(TAG_LEN));
        fresh.resize(want, 0);
        fresh.extend_from_slice(&buf[head..]);
        buf.zeroize();
        *buf = fresh;
    } else if head > want {
        buf.copy_within(head.., want);
        buf[end..].zeroize();
        buf.truncate(end);
    } else if head < want {
        buf.resize(end, 0);
        buf.copy_within(head..len, want);
    }
}

/// Decrypts the ciphertext in `buf` where it lies, under whichever enabled
/// key its key id names, with the checks of [`open`]; then moves the
/// plaintext to the front of `buf` and cuts it to the plaintext (no
/// allocation), zeroizing what the move leaves behind past it: the spare
/// capacity holds no piece of the plaintext. On any error `buf` is
/// zeroized and emptied.
pub(crate) fn open_in_place(keys: &impl Keys, aad: &[u8], buf: &mut Vec<u8>) -> Result<(), Error> {
    let opened = open_in_place_unguarded(keys, aad, buf);
    count_opened(keys, &opened, Event::Decrypted);
    if opened.is_err() {
        buf.zeroize();
    }
    opened
}

fn open_in_place_unguarded(keys: &impl Keys, aad: &[u8], buf: &mut Vec<u8>) -> Result<(), Error> {
    let (id, primitive, _) = parse_prefix(keys, buf)?;
    match primitive {
        Primitive::AesGcm(key) => open_gcm_in_place(key, aad, buf, PREFIX_LEN),
        Primitive::KmsEnvelope(key) => {
            let (edek, _) = split_edek(buf.len(), &buf[PREFIX_LEN..])?;
            let nonce_at = PREFIX_LEN + 4 + edek.len();
            // The EDEK borrows the buffer the DEK decrypts: copied out
            // first (it is public), on the stack for any real KMS's.
            let edek = EdekCopy::new(edek);
            key.with_reader_dek(edek.as_slice(), keys.counters(), |dek| {
                open_gcm_in_place(dek, aad, buf, nonce_at)
            })
        }
        Primitive::AesSiv(_) => Err(Error::WrongKeyType {
            key_id: id,
            operation: "decrypt with a randomized AEAD (it is deterministic)",
        }),
    }
}

/// A copy of an EDEK (public bytes): on the stack up to 512 bytes (every
/// real KMS's), else on the heap. It lives on the stack for one call:
/// the large variant is the point.
#[allow(clippy::large_enum_variant)]
enum EdekCopy {
    Stack([u8; 512], usize),
    Heap(Vec<u8>),
}

impl EdekCopy {
    fn new(edek: &[u8]) -> Self {
        let mut stack = [0u8; 512];
        match stack.get_mut(..edek.len()) {
            Some(to) => {
                to.copy_from_slice(edek);
                EdekCopy::Stack(stack, edek.len())
            }
            None => EdekCopy::Heap(edek.to_vec()),
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            EdekCopy::Stack(b, n) => &b[..*n],
            EdekCopy::Heap(v) => v,
        }
    }
}

/// `nonce | ciphertext | tag` at `buf[nonce_at..]` under an AES-GCM key,
/// decrypted in place and moved to the front of `buf`.
fn open_gcm_in_place(
    key: &AesGcmKey,
    aad: &[u8],
    buf: &mut Vec<u8>,
    nonce_at: usize,
) -> Result<(), Error> {
    let len = buf.len();
    let body = nonce_at + NONCE_LEN;
    if len < body + TAG_LEN {
        return Err(Error::Truncated {
            len,
            min: body + TAG_LEN,
        });
    }
    let end = len - TAG_LEN;
    let mut nonce = [0u8; NONCE_LEN];
    nonce.copy_from_slice(&buf[nonce_at..body]);
    let mut tag = [0u8; TAG_LEN];
    tag.copy_from_slice(&buf[end..]);
    key.open_in_place(&nonce, aad, &mut buf[body..end], &tag)?;
    buf.copy_within(body..end, 0);
    // The plaintext's last `body` bytes are still where they were moved
    // from, and the tag after them: zeroized before they become spare
    // capacity.
    buf[end - body..].zeroize();
    buf.truncate(end - body);
    Ok(())
}

/// `0x01 | key id | nonce | ciphertext | tag` for an AES-GCM key.
#[inline]
fn seal_gcm(
    id: KeyId,
    key: &AesGcmKey,
    aad: &[u8],
    out: &mut Vec<u8>,
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    let mut nonce = [0u8; NONCE_LEN];
    // Fork-safe: see crate::random.
    crate::random::nonce(&mut nonce);
    let mut header = [0u8; HEADER_LEN];
    header[0] = VERSION;
    header[1..PREFIX_LEN].copy_from_slice(&id.0.to_be_bytes());
    header[PREFIX_LEN..].copy_from_slice(&nonce);
    out.reserve(OVERHEAD.saturating_add(size_hint.min(MAX_PREALLOC)));
    out.extend_from_slice(&header);
    let body = out.len();
    write_plaintext(out)?;
    let tag = key.seal_in_place(&nonce, aad, &mut out[body..])?;
    out.extend_from_slice(&tag);
    Ok(())
}

/// `0x01 | key id | u32be(len EDEK) | EDEK | nonce | ciphertext | tag`
/// under the envelope key's current data key (a KMS call only when a new
/// DEK is due).
#[inline]
fn seal_envelope(
    id: KeyId,
    key: &EnvelopeKey,
    aad: &[u8],
    out: &mut Vec<u8>,
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    key.with_writer_dek(|dek| {
        let edek_len = u32::try_from(dek.edek.len()).map_err(|_| Error::Encryption)?;
        let mut nonce = [0u8; NONCE_LEN];
        crate::random::nonce(&mut nonce);
        out.reserve(
            (PREFIX_LEN + 4 + NONCE_LEN + TAG_LEN)
                .saturating_add(dek.edek.len())
                .saturating_add(size_hint.min(MAX_PREALLOC)),
        );
        out.push(VERSION);
        out.extend_from_slice(&id.0.to_be_bytes());
        out.extend_from_slice(&edek_len.to_be_bytes());
        out.extend_from_slice(&dek.edek);
        out.extend_from_slice(&nonce);
        let body = out.len();
        write_plaintext(out)?;
        dek.add_bytes(out.len() - body);
        let tag = dek.key.seal_in_place(&nonce, aad, &mut out[body..])?;
        out.extend_from_slice(&tag);
        Ok(())
    })
}

/// `u32be(len EDEK) | EDEK | nonce | ciphertext | tag` under an envelope
/// key: the lengths are checked against the record before anything else
/// (nothing is allocated from the EDEK length, and a malformed record never
/// reaches the KMS), then the DEK comes from the cache or the KMS.
#[inline]
fn open_envelope(
    counters: &Counters,
    key: &EnvelopeKey,
    aad: &[u8],
    len: usize,
    rest: &[u8],
) -> Result<Vec<u8>, Error> {
    let (edek, rest) = split_edek(len, rest)?;
    key.with_reader_dek(edek, counters, |dek| open_gcm(dek, aad, len, rest))
}

/// Splits what follows an envelope ciphertext's prefix into the EDEK and
/// the rest (nonce, ciphertext, tag), checking the EDEK's length and that
/// a nonce and a tag still fit: the one check before any KMS call, for
/// opening and for [`blocking_work_to_open`] alike. `len` is the whole
/// ciphertext's length, for the error.
fn split_edek(len: usize, rest: &[u8]) -> Result<(&[u8], &[u8]), Error> {
    let (n, rest) = rest
        .split_first_chunk::<4>()
        .ok_or_else(|| Error::Truncated {
            len,
            min: KMS_MIN_LEN,
        })?;
    let n = u32::from_be_bytes(*n);
    let edek_len = usize::try_from(n)
        .ok()
        .filter(|&n| (1..=MAX_EDEK_LEN).contains(&n))
        .ok_or_else(|| {
            Error::kms_msg(format!(
                "the encrypted data key length {n} is not between 1 and {MAX_EDEK_LEN}"
            ))
        })?;
    if rest.len() < edek_len + NONCE_LEN + TAG_LEN {
        return Err(Error::Truncated {
            len,
            min: PREFIX_LEN + 4 + edek_len + NONCE_LEN + TAG_LEN,
        });
    }
    Ok(rest.split_at(edek_len))
}

/// Checks what every ciphertext starts with, in this order: the length
/// against the keys' shortest ciphertext, the version byte, the key id
/// (an enabled key of `keys`). Returns the key and the bytes after the
/// prefix.
#[inline]
fn parse_prefix<'k, 'd, K: Keys>(
    keys: &'k K,
    data: &'d [u8],
) -> Result<(KeyId, &'k Primitive, &'d [u8]), Error> {
    let min = keys.min_ciphertext_len();
    let truncated = || Error::Truncated {
        len: data.len(),
        min,
    };
    if data.len() < min {
        return Err(truncated());
    }
    let (prefix, rest) = data
        .split_first_chunk::<PREFIX_LEN>()
        .ok_or_else(truncated)?;
    if prefix[0] != VERSION {
        return Err(Error::UnsupportedVersion);
    }
    let id = KeyId(u32::from_be_bytes([
        prefix[1], prefix[2], prefix[3], prefix[4],
    ]));
    Ok((id, keys.decrypting_key(id)?, rest))
}

/// Decrypts a ciphertext with whichever enabled key its key id names; the
/// body is copied once, into the buffer that is returned, and decrypted
/// there. On any failure no plaintext is returned.
///
/// The checks run in this order: the length against the keys' shortest
/// ciphertext, the version byte, the key id, then the key's own format and
/// authentication.
#[inline]
pub(crate) fn open(keys: &impl Keys, aad: &[u8], data: &[u8]) -> Result<Vec<u8>, Error> {
    let opened = open_uncounted(keys, aad, data);
    count_opened(keys, &opened, Event::Decrypted);
    opened
}

#[inline]
fn open_uncounted(keys: &impl Keys, aad: &[u8], data: &[u8]) -> Result<Vec<u8>, Error> {
    let (id, primitive, rest) = parse_prefix(keys, data)?;
    match primitive {
        Primitive::AesGcm(key) => open_gcm(key, aad, data.len(), rest),
        Primitive::KmsEnvelope(key) => open_envelope(keys.counters(), key, aad, data.len(), rest),
        // A keyset holds one family of keys; a deterministic ciphertext is
        // not a value's.
        Primitive::AesSiv(_) => Err(Error::WrongKeyType {
            key_id: id,
            operation: "decrypt with a randomized AEAD (it is deterministic)",
        }),
    }
}

/// The KMS call that sealing the next value under the primary key of `keys`
/// would make (a new DEK is due), as work for a blocking thread; `None`
/// when sealing makes no KMS call.
pub(crate) fn blocking_work_to_seal(keys: &impl Keys) -> Option<BlockingWork> {
    match keys.primary_key().1 {
        Primitive::KmsEnvelope(key) if key.writer_needs_kms() => {
            let key = key.clone();
            Some(BlockingWork::new(move || key.prepare_writer()))
        }
        _ => None,
    }
}

/// The KMS call that opening `data` would make (its DEK is not cached), as
/// work for a blocking thread; `None` when opening makes no KMS call, or
/// `data` is malformed (opening it reports why, without calling the KMS).
pub(crate) fn blocking_work_to_open(keys: &impl Keys, data: &[u8]) -> Option<BlockingWork> {
    let (_, primitive, rest) = parse_prefix(keys, data).ok()?;
    let Primitive::KmsEnvelope(key) = primitive else {
        return None;
    };
    let (edek, _) = split_edek(data.len(), rest).ok()?;
    if key.reader_has(edek) {
        return None;
    }
    let key = key.clone();
    let edek = edek.to_vec();
    Some(BlockingWork::new(move || key.reader_dek(&edek).map(drop)))
}

/// Appends the deterministic ciphertext of a present plaintext under the
/// primary key of `keys` (which must be deterministic) to `out`:
/// `0x01 | key id | SIV (16) | ciphertext`, AES-SIV with exactly one
/// associated-data component, `ad` (even when empty, as Tink does).
/// On error `out` is zeroized and cut back to its length on entry.
pub(crate) fn seal_deterministic_into(
    keys: &impl Keys,
    ad: &[u8],
    out: &mut Vec<u8>,
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    let (id, primitive) = keys.primary_key();
    let sealed = seal_deterministic_with(id, primitive, ad, out, size_hint, write_plaintext);
    keys.counters().bump(match sealed {
        Ok(()) => Event::RecordKeyEncrypted,
        Err(_) => Event::EncryptFailed,
    });
    sealed
}

/// [`seal_deterministic_into`] under the key `primitive`, whose id is `id`.
pub(crate) fn seal_deterministic_with(
    id: KeyId,
    primitive: &Primitive,
    ad: &[u8],
    out: &mut Vec<u8>,
    size_hint: usize,
    write_plaintext: impl FnOnce(&mut Vec<u8>) -> Result<(), Error>,
) -> Result<(), Error> {
    let Primitive::AesSiv(key) = primitive else {
        return Err(Error::WrongKeyType {
            key_id: id,
            operation: "encrypt deterministically (it is a randomized AEAD: use it for values)",
        });
    };
    let start = out.len();
    let sealed = (|| {
        out.reserve((PREFIX_LEN + SIV_LEN).saturating_add(size_hint.min(MAX_PREALLOC)));
        out.push(VERSION);
        out.extend_from_slice(&id.0.to_be_bytes());
        out.extend_from_slice(&[0; SIV_LEN]);
        let body = out.len();
        write_plaintext(out)?;
        let siv = key.seal_in_place(ad, &mut out[body..])?;
        out[body - SIV_LEN..body].copy_from_slice(&siv);
        Ok(())
    })();
    if sealed.is_err() {
        if let Some(tail) = out.get_mut(start..) {
            tail.zeroize();
        }
        out.truncate(start);
    }
    sealed
}

/// Decrypts a deterministic ciphertext under the enabled key its key id
/// names. The checks run in the order of [`open`].
pub(crate) fn open_deterministic(
    keys: &impl Keys,
    ad: &[u8],
    data: &[u8],
) -> Result<Vec<u8>, Error> {
    let opened = open_deterministic_uncounted(keys, ad, data);
    count_opened(keys, &opened, Event::RecordKeyDecrypted);
    opened
}

fn open_deterministic_uncounted(
    keys: &impl Keys,
    ad: &[u8],
    data: &[u8],
) -> Result<Vec<u8>, Error> {
    let (id, primitive, rest) = parse_prefix(keys, data)?;
    let Primitive::AesSiv(key) = primitive else {
        return Err(Error::WrongKeyType {
            key_id: id,
            operation: "decrypt deterministically (it is a randomized AEAD)",
        });
    };
    let (siv, body) = rest
        .split_first_chunk::<SIV_LEN>()
        .ok_or_else(|| Error::Truncated {
            len: data.len(),
            min: PREFIX_LEN + SIV_LEN,
        })?;
    let mut buf = body.to_vec();
    key.open_in_place(ad, &mut buf, siv)?;
    Ok(buf)
}

/// `nonce | ciphertext | tag` under an AES-GCM key.
#[inline]
fn open_gcm(key: &AesGcmKey, aad: &[u8], len: usize, rest: &[u8]) -> Result<Vec<u8>, Error> {
    let truncated = || Error::Truncated { len, min: OVERHEAD };
    let (nonce, rest) = rest
        .split_first_chunk::<NONCE_LEN>()
        .ok_or_else(truncated)?;
    let (body, tag) = rest.split_last_chunk::<TAG_LEN>().ok_or_else(truncated)?;
    let mut buf = body.to_vec();
    key.open_in_place(nonce, aad, &mut buf, tag)?;
    Ok(buf)
}
