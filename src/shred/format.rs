//! The bytes of a subject-key value: its first byte, the subject's tag,
//! the DEK id, the nonce; and the associated data a value is sealed under.

use crate::cipher::{NONCE_LEN, TAG_LEN};

/// The first byte of a subject-key value.
pub const FORMAT: u8 = 0x53;
/// A subject tag's length.
pub const TAG: usize = 16;
/// A DEK id's length.
pub(super) const DEK_ID: usize = 8;
/// The header: format, subject tag, DEK id, nonce.
pub(super) const HEADER: usize = 1 + TAG + DEK_ID + NONCE_LEN;
/// Bytes a value adds to its plaintext.
pub const OVERHEAD: usize = HEADER + TAG_LEN;
/// Whether `value` has the shape of a subject-key value: [`FORMAT`] first,
/// and room for the header and the tag. A hint only (a plaintext may start
/// so): a value's format comes from its topic's policy, never from this;
/// what a reader under a keyset tells apart from a plaintext value.
///
/// ```
/// use tombstone_crypt::shred::{has_subject_shape, FORMAT, OVERHEAD};
///
/// assert!(has_subject_shape(&[FORMAT; OVERHEAD]));
/// assert!(!has_subject_shape(&[FORMAT; OVERHEAD - 1]));
/// assert!(!has_subject_shape(b"{\"balance\": 100}"));
/// ```
pub fn has_subject_shape(value: &[u8]) -> bool {
    value.first() == Some(&FORMAT) && value.len() >= OVERHEAD
}

/// The key store's id of the naming key (no subject tag is this, but with
/// probability 2^-128).
pub(super) const NAMING_ID: [u8; TAG] = [0xff; TAG];
/// The naming key's associated data under the KEK.
pub(super) const NAMING_AD: &[u8] = b"tombstone-crypt subject naming key";
/// The naming key record `id`'s associated data under the KEK: a naming
/// key's ciphertext opens only under its own record id.
pub(super) fn naming_ad(id: &[u8; DEK_ID]) -> Vec<u8> {
    let mut ad = NAMING_AD.to_vec();
    ad.extend_from_slice(id);
    ad
}

/// A DEK's length: AES-256.
pub(super) const DEK_LEN: usize = 32;

/// The subject tag of a subject: a keyed hash, the only name a subject has
/// on the wire and in the key store.
pub type SubjectTag = [u8; TAG];

/// Record associated data up to this long, with a value's header after
/// it, is built on the stack; longer takes one allocation.
pub(super) const INLINE_AD: usize = 128;

/// Room for a value's associated data: the record's (its topic and key),
/// then the value's header; on the stack unless the record's is longer
/// than [`INLINE_AD`].
pub(super) struct ValueAd {
    pub(super) inline: [u8; INLINE_AD + HEADER],
    pub(super) heap: Vec<u8>,
}

impl ValueAd {
    #[inline]
    pub(super) fn new() -> Self {
        ValueAd {
            inline: [0; INLINE_AD + HEADER],
            heap: Vec::new(),
        }
    }

    /// `record`, then `HEADER` bytes for the header to be written in.
    #[inline]
    pub(super) fn with_record(&mut self, record: &[u8]) -> &mut [u8] {
        let len = record.len() + HEADER;
        let out = match self.inline.get_mut(..len) {
            Some(out) => out,
            None => {
                self.heap.resize(len, 0);
                &mut self.heap[..]
            }
        };
        out[..record.len()].copy_from_slice(record);
        out
    }
}
