//! Encrypting and decrypting with a keyset: [`Keyset::encrypt`] and
//! [`Keyset::decrypt`] (Tink's `Aead`), the deterministic pair (Tink's
//! `DeterministicAead`), the encrypted forms of a record key under every
//! enabled key, and [`Keys`] for [`Keyset`]: the keys that the wire format
//! (`envelope`, below this module) seals and opens with.

use super::{KeyStatus, Keyset};
use crate::envelope::Keys;
use crate::error::Error;
use crate::key_id::KeyId;
use crate::primitive::Primitive;
use crate::stats::{Counters, Event};

impl Keyset {
    /// Encrypts `plaintext` under the primary key, bound to
    /// `associated_data`: Tink's `Aead::encrypt`, with the output prefix
    /// TINK. The serde wrappers write exactly this for the associated data
    /// of their [`AadPolicy`](crate::AadPolicy) (see
    /// [`Context::associated_data`](crate::Context::associated_data)).
    ///
    /// # Errors
    /// [`Error::Encryption`] if the value is too long for the cipher.
    ///
    /// ```
    /// use tombstone_crypt::Keyset;
    ///
    /// let keyset = Keyset::generate();
    /// let ct = keyset.encrypt(b"hello", b"ad")?;
    /// assert_eq!(keyset.decrypt(&ct, b"ad")?, b"hello");
    /// assert!(keyset.decrypt(&ct, b"other ad").is_err());
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn encrypt(&self, plaintext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        crate::envelope::seal_into(self, associated_data, &mut out, plaintext.len(), |out| {
            out.extend_from_slice(plaintext);
            Ok(())
        })?;
        Ok(out)
    }

    /// Decrypts a ciphertext written by [`encrypt`](Keyset::encrypt) (here
    /// or by Tink) under the enabled key its key id names: Tink's
    /// `Aead::decrypt`.
    ///
    /// # Errors
    /// [`Error::Truncated`], [`Error::UnsupportedVersion`],
    /// [`Error::UnknownKeyId`], [`Error::KeyDisabled`], or
    /// [`Error::Decryption`] for every authentication failure. No plaintext
    /// is returned on failure.
    pub fn decrypt(&self, ciphertext: &[u8], associated_data: &[u8]) -> Result<Vec<u8>, Error> {
        crate::envelope::open(self, associated_data, ciphertext)
    }

    /// The bytes the primary key's ciphertext puts before the plaintext (17
    /// for AES-GCM: version byte, key id, nonce): the room to leave at the
    /// front of a buffer for [`encrypt_in_place`](Keyset::encrypt_in_place).
    /// An envelope key's depends on the length of its current wrapped DEK;
    /// before its first DEK, when that length is not known yet, it is the
    /// room for the longest wrapped DEK accepted
    /// ([`MAX_EDEK_LEN`](crate::kms::MAX_EDEK_LEN)), so a buffer sized from
    /// it never has to grow (the plaintext is moved to the front once).
    pub fn header_len(&self) -> usize {
        crate::envelope::header_len(self)
    }

    /// Encrypts the plaintext `buf[head..]` where it lies, for a caller who
    /// owns the buffer (a codec's output): the header is written into the
    /// first `head` bytes and the tag appended, so `buf` becomes exactly
    /// what [`encrypt`](Keyset::encrypt) returns, with no copy of the
    /// plaintext and no allocation when `head` is
    /// [`header_len`](Keyset::header_len) and `buf` has 16 bytes of spare
    /// capacity. Any other `head` costs one move of the plaintext; too
    /// little capacity, one copy into a new buffer of the ciphertext's
    /// size.
    ///
    /// # Security
    /// On success the plaintext is left nowhere else: room that was too
    /// long is zeroized where the plaintext moved from, and a buffer that
    /// had too little capacity is zeroized (all of its capacity) before it
    /// is freed, never grown with the plaintext in it. Zeroizing is best
    /// effort (see `SECURITY.md`).
    ///
    /// # Errors
    /// As [`encrypt`](Keyset::encrypt); [`Error::Headroom`] if `head` is
    /// longer than `buf`; [`Error::WrongKeyType`] for a deterministic
    /// keyset. On any error `buf` is zeroized and emptied: no plaintext is
    /// left in it.
    ///
    /// ```
    /// use tombstone_crypt::Keyset;
    ///
    /// let keyset = Keyset::generate();
    /// let head = keyset.header_len();
    /// let mut buf = Vec::with_capacity(head + 5 + 16);
    /// buf.resize(head, 0);
    /// buf.extend_from_slice(b"hello"); // a codec writes here
    /// keyset.encrypt_in_place(&mut buf, head, b"ad")?;
    /// assert_eq!(keyset.decrypt(&buf, b"ad")?, b"hello");
    /// keyset.decrypt_in_place(&mut buf, b"ad")?;
    /// assert_eq!(buf, b"hello");
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn encrypt_in_place(
        &self,
        buf: &mut Vec<u8>,
        head: usize,
        associated_data: &[u8],
    ) -> Result<(), Error> {
        crate::envelope::seal_in_place(self, associated_data, buf, head)
    }

    /// Decrypts the ciphertext in `buf` where it lies, with the checks of
    /// [`decrypt`](Keyset::decrypt); `buf` becomes the plaintext (moved to
    /// its front: no allocation). What the move leaves behind is zeroized:
    /// the plaintext is in `buf[..buf.len()]` and nowhere in its spare
    /// capacity.
    ///
    /// # Errors
    /// As [`decrypt`](Keyset::decrypt). On any error `buf` is zeroized and
    /// emptied: keep a copy of the bytes first if a failed record must be
    /// kept (a dead-letter topic, say).
    pub fn decrypt_in_place(&self, buf: &mut Vec<u8>, associated_data: &[u8]) -> Result<(), Error> {
        crate::envelope::open_in_place(self, associated_data, buf)
    }

    /// Encrypts `plaintext` deterministically under the primary key, which
    /// must be an AES-SIV key: Tink's `DeterministicAead`, byte for byte
    /// (`0x01 | key id | SIV | ciphertext`, one associated-data component).
    /// The same plaintext and associated data under the same key always
    /// give the same bytes.
    ///
    /// # Security
    /// Deterministic encryption reveals which plaintexts are equal: it is
    /// for record keys, so that compaction still sees one key, never for
    /// values.
    ///
    /// # Errors
    /// [`Error::WrongKeyType`] if the primary key is not deterministic.
    ///
    /// ```
    /// use tombstone_crypt::{KeyTemplate, Keyset};
    ///
    /// let keys = Keyset::generate_with(KeyTemplate::aes256_siv())?;
    /// let a = keys.encrypt_deterministically(b"customer-17", b"orders")?;
    /// assert_eq!(a, keys.encrypt_deterministically(b"customer-17", b"orders")?);
    /// assert_eq!(keys.decrypt_deterministically(&a, b"orders")?, b"customer-17");
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn encrypt_deterministically(
        &self,
        plaintext: &[u8],
        associated_data: &[u8],
    ) -> Result<Vec<u8>, Error> {
        let mut out = Vec::new();
        crate::envelope::seal_deterministic_into(
            self,
            associated_data,
            &mut out,
            plaintext.len(),
            |out| {
                out.extend_from_slice(plaintext);
                Ok(())
            },
        )?;
        Ok(out)
    }

    /// Decrypts a deterministic ciphertext under the enabled key its key id
    /// names: Tink's `DeterministicAead::decrypt_deterministically`.
    ///
    /// # Errors
    /// As [`decrypt`](Keyset::decrypt); [`Error::WrongKeyType`] if the key
    /// is not deterministic.
    pub fn decrypt_deterministically(
        &self,
        ciphertext: &[u8],
        associated_data: &[u8],
    ) -> Result<Vec<u8>, Error> {
        crate::envelope::open_deterministic(self, associated_data, ciphertext)
    }

    /// The encrypted forms of `plaintext` under every enabled deterministic
    /// key, the primary's first, then from the newest key to the oldest:
    /// what one logical record key may be stored as while old keys are
    /// enabled, in the order they are read.
    pub(crate) fn deterministic_forms(
        &self,
        plaintext: &[u8],
        associated_data: &[u8],
    ) -> Result<Vec<Vec<u8>>, Error> {
        self.enabled_entries()
            .map(|entry| {
                let mut out = Vec::new();
                crate::envelope::seal_deterministic_with(
                    entry.id,
                    &entry.primitive,
                    associated_data,
                    &mut out,
                    plaintext.len(),
                    |out| {
                        out.extend_from_slice(plaintext);
                        Ok(())
                    },
                )?;
                self.counters().bump(Event::RecordKeyEncrypted);
                Ok(out)
            })
            .collect()
    }

    /// Whether `data` starts as a ciphertext of this keyset does: the
    /// version byte, then the id of one of its keys (enabled or not). This
    /// is how [`Unencrypted::PassThrough`](crate::Unencrypted) tells a
    /// ciphertext from a plaintext value.
    ///
    /// ```
    /// let keyset = tombstone_crypt::Keyset::generate();
    /// let ct = keyset.encrypt(b"v", b"")?;
    /// assert!(keyset.names_a_key(&ct));
    /// assert!(!keyset.names_a_key(b"plain text"));
    /// # Ok::<(), tombstone_crypt::Error>(())
    /// ```
    pub fn names_a_key(&self, data: &[u8]) -> bool {
        match data {
            [crate::envelope::VERSION, a, b, c, d, ..] => self
                .find(KeyId(u32::from_be_bytes([*a, *b, *c, *d])))
                .is_some(),
            _ => false,
        }
    }

    /// The bytes the primary key adds to a plaintext (a hint for
    /// allocation).
    #[inline]
    pub(crate) fn primary_overhead(&self) -> usize {
        self.primary_entry().primitive.overhead()
    }
}

/// The keys the wire format seals and opens with (`envelope.rs`, below
/// this module, is handed them and never sees a keyset).
impl Keys for Keyset {
    #[inline]
    fn primary_key(&self) -> (KeyId, &Primitive) {
        let entry = self.primary_entry();
        (entry.id, &entry.primitive)
    }

    /// The key that may decrypt a value under `id`.
    #[inline]
    fn decrypting_key(&self, id: KeyId) -> Result<&Primitive, Error> {
        // The primary first: nearly every value is under it.
        let primary = self.primary_entry();
        if primary.id == id {
            return Ok(&primary.primitive);
        }
        match self.inner.keys.iter().find(|e| e.id == id) {
            Some(e) if e.status == KeyStatus::Enabled => Ok(&e.primitive),
            Some(_) => Err(Error::KeyDisabled(id)),
            None => Err(Error::UnknownKeyId(id)),
        }
    }

    /// The shortest ciphertext any key of the keyset writes.
    #[inline]
    fn min_ciphertext_len(&self) -> usize {
        self.inner.min_len
    }

    #[inline]
    fn counters(&self) -> &Counters {
        Keyset::counters(self)
    }
}
