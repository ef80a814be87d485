//! Plaintext the proxy owns, zeroized before it is freed: the client's
//! Produce frames, the records it decrypts on Fetch and the batches and
//! response frames made of them, the buffers it decompresses into.
//!
//! A frame or a batch is a shared buffer ([`Bytes`]): the records decoded
//! from it are slices of it. It is reclaimed (and wiped) only by its last
//! handle, once every slice of it is dropped ([`Bytes::try_into_mut`]);
//! while another handle shares it, [`bytes`] only lets this one go, and
//! the buffer is wiped by whoever drops the last handle, if that code
//! wipes (the proxy's does).
//!
//! The whole block is wiped, its spare capacity too, but for a buffer
//! that is only appended to ([`Buf::appended_only`]: a frame as it is
//! read), whose contents are all it ever held. A buffer that grows moves
//! to a new block and frees the old one unwiped: the proxy sizes its
//! buffers up front, or grows them with [`Buf::reserve`], which wipes the
//! block it leaves.
//!
//! The test hook `skip_wipe` turns every wipe of this module into a plain
//! drop (the negative control of `tests/freed_memory.rs`).

use bytes::{Bytes, BytesMut};
use zeroize::Zeroize;

/// Zeroizes the buffer of `b` and frees it when `b` is its last handle
/// (and `on`); returns whether it did. Otherwise `b` is only dropped: a
/// buffer still shared is wiped by its last handle's owner.
pub(crate) fn bytes(b: Bytes, on: bool) -> bool {
    if !on || b.is_empty() {
        return false;
    }
    match b.try_into_mut() {
        Ok(m) => {
            buf_mut(m);
            true
        }
        Err(_) => false,
    }
}

/// Zeroizes the whole block of `m` (before its start and past its length
/// too) and frees it.
pub(crate) fn buf_mut(m: BytesMut) {
    // The unique buffer back as its `Vec`: its offset and capacity
    // restored, nothing copied.
    vec(Vec::<u8>::from(m));
}

/// Zeroizes the whole block of `v` and frees it. (Emptied first, the
/// block is zeroized as one slice of spare capacity, at `memset`'s speed:
/// `Vec`'s own `zeroize` writes its elements one by one.)
pub(crate) fn vec(mut v: Vec<u8>) {
    v.clear();
    v.spare_capacity_mut().zeroize();
}

/// A [`Bytes`] wiped when dropped (if it is then the last handle to its
/// buffer): a frame read from a client or written to one.
#[derive(Debug)]
pub(crate) struct Wiped {
    bytes: Bytes,
    on: bool,
}

impl Wiped {
    pub(crate) fn new(bytes: Bytes, on: bool) -> Self {
        Wiped { bytes, on }
    }
}

impl std::ops::Deref for Wiped {
    type Target = Bytes;
    fn deref(&self) -> &Bytes {
        &self.bytes
    }
}

impl Drop for Wiped {
    fn drop(&mut self) {
        bytes(std::mem::take(&mut self.bytes), self.on);
    }
}

/// A [`BytesMut`] wiped when dropped, unless frozen first; it grows
/// through [`Buf::reserve`], which wipes the block it leaves.
#[derive(Debug)]
pub(crate) struct Buf {
    buf: BytesMut,
    on: bool,
    /// Whether only its contents are wiped, not its spare capacity
    /// ([`Buf::appended_only`]).
    contents_only: bool,
}

impl Buf {
    pub(crate) fn with_capacity(capacity: usize, on: bool) -> Self {
        Buf {
            buf: BytesMut::with_capacity(capacity),
            on,
            contents_only: false,
        }
    }

    /// A buffer that is only ever appended to (a frame as its bytes
    /// arrive): nothing it held lies past its length, so it wipes its
    /// contents, not its spare capacity. A frame read into a block of the
    /// length it claims and cut short (a client that stalls and is timed
    /// out, or closes) then costs a wipe of what arrived, not of the
    /// whole claim: 64 KiB sent must not buy a wipe of 100 MiB.
    pub(crate) fn appended_only(capacity: usize, on: bool) -> Self {
        Buf {
            buf: BytesMut::with_capacity(capacity),
            on,
            contents_only: true,
        }
    }

    /// Wipes what `old` holds (its contents, or its whole block) and frees
    /// it.
    fn wipe_block(&self, mut old: BytesMut) {
        if !self.on {
            return;
        }
        if self.contents_only {
            let contents: &mut [u8] = &mut old;
            contents.zeroize();
        } else {
            buf_mut(old);
        }
    }

    /// Room for `additional` more bytes: when there is not, the contents
    /// move to a new block (at least twice as large) and the old one is
    /// wiped.
    pub(crate) fn reserve(&mut self, additional: usize) {
        if self.buf.capacity() - self.buf.len() >= additional {
            return;
        }
        let capacity = self
            .buf
            .len()
            .saturating_add(additional)
            .max(self.buf.capacity().saturating_mul(2));
        let mut grown = BytesMut::with_capacity(capacity);
        grown.extend_from_slice(&self.buf);
        let old = std::mem::replace(&mut self.buf, grown);
        self.wipe_block(old);
    }

    /// Room for exactly `additional` more bytes, as [`Buf::reserve`] makes
    /// it (the contents moved, the old block wiped), but a block the
    /// system refuses is an error rather than the process's abort: a
    /// frame's block is as long as its peer claims (within the limits), and
    /// a process under an address-space limit (`ulimit -v`, strict
    /// overcommit) must refuse the frame, not stop every connection.
    pub(crate) fn try_reserve_exact(
        &mut self,
        additional: usize,
    ) -> Result<(), std::collections::TryReserveError> {
        if self.buf.capacity() - self.buf.len() >= additional {
            return Ok(());
        }
        let mut block = Vec::new();
        block.try_reserve_exact(self.buf.len().saturating_add(additional))?;
        block.extend_from_slice(&self.buf);
        // The block as a `BytesMut`, its capacity kept: the only handle,
        // so never copied.
        let block = Bytes::from(block)
            .try_into_mut()
            .unwrap_or_else(|shared| BytesMut::from(&shared[..]));
        let old = std::mem::replace(&mut self.buf, block);
        self.wipe_block(old);
        Ok(())
    }

    /// `data` appended, through [`Buf::reserve`].
    pub(crate) fn extend_from_slice(&mut self, data: &[u8]) {
        self.reserve(data.len());
        self.buf.extend_from_slice(data);
    }

    /// What lies from `len` on wiped (when on) and taken back: the
    /// buffer is `len` long again.
    pub(crate) fn take_back(&mut self, len: usize) {
        if len >= self.buf.len() {
            return;
        }
        if self.on {
            self.buf[len..].zeroize();
        }
        self.buf.truncate(len);
    }

    /// The buffer itself, for an encoder to append to (reserve first:
    /// what it grows is not wiped).
    pub(crate) fn inner(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// The contents as a [`Bytes`], no longer wiped by this.
    pub(crate) fn freeze(mut self) -> Bytes {
        std::mem::take(&mut self.buf).freeze()
    }
}

impl std::ops::Deref for Buf {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.buf
    }
}

impl std::ops::DerefMut for Buf {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

impl Drop for Buf {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.buf);
        self.wipe_block(buf);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_last_handle_reclaims_the_buffer() {
        let whole = Bytes::from(vec![7u8; 64]);
        let slice = whole.slice(8..16);
        assert!(!bytes(whole.clone(), true), "shared three ways");
        assert!(!bytes(whole, true), "the slice still shares it");
        assert!(bytes(slice, true), "the last handle");
        assert!(!bytes(Bytes::from(vec![1u8; 8]), false), "off");
        assert!(!bytes(Bytes::from_static(b"static"), true));
    }

    #[test]
    fn a_buffer_grows_and_freezes() {
        let mut b = Buf::with_capacity(4, true);
        b.extend_from_slice(b"abcd");
        b.extend_from_slice(b"efgh");
        assert!(b.inner().capacity() >= 8);
        b[0] = b'A';
        assert_eq!(&b.freeze()[..], b"Abcdefgh");
    }
}
