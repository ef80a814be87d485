//! Size-prefixed frames: the Kafka protocol's unit on the wire.

use std::sync::Arc;

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Why a frame could not be read.
#[derive(Debug)]
pub(crate) enum FrameError {
    /// The peer closed the connection between frames.
    Closed,
    /// The length prefix is negative or above the limit; nothing was
    /// allocated for it.
    TooLong { claimed: i64, max: usize },
    /// The connection failed or closed inside a frame.
    Io(std::io::Error),
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Closed => write!(f, "connection closed"),
            FrameError::TooLong { claimed, max } => write!(
                f,
                "a frame claims {claimed} bytes, outside 0..={max} (max_frame_bytes)"
            ),
            FrameError::Io(e) => write!(f, "{e}"),
        }
    }
}

/// What a frame's buffer starts with; it grows (doubling) as its bytes
/// arrive, never to more than twice what arrived, but for a frame held in
/// the pool ([`read_frame_held`]), whose rest takes one block of its
/// claimed length once this much arrived.
pub(crate) const FIRST_READ: usize = 64 << 10;

/// Reads one frame's body (without its 4-byte length). The length is
/// checked against `max` before anything is allocated for it, and the
/// buffer grows with the bytes that arrive, not with the length claimed:
/// a client that claims 100 MiB and sends a few bytes, on many
/// connections, takes a few bytes each (a block the buffer leaves is
/// wiped: a request frame holds plaintext).
pub(crate) async fn read_frame<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
) -> Result<Bytes, FrameError> {
    read(r, max, None).await.map(|(body, _)| body)
}

/// Reads one frame as [`read_frame`] does, with what its length claims
/// past the first block (64 KiB) taken from `in_hand` (one byte, one
/// permit) before its body is read, all at once, as a Kafka broker's
/// request memory pool does: the large frames of all connections in hand
/// together take at most the semaphore's permits (`max_buffered_bytes`),
/// beside a block each. When the pool lacks them the read waits (the
/// connection's socket is not read meanwhile) until frames in hand are let
/// go: a client that sends large frames on many connections and stalls
/// makes other large frames wait, not the process's memory grow, and a
/// frame of 64 KiB or less (ApiVersions, Metadata, a Fetch request, a
/// small Produce) never waits. Taken whole, never piece by piece, so that
/// no frame holding part of the pool waits for more of it (frames that
/// each hold part and wait for the rest would wait on each other for
/// ever). The bytes are held by the permit returned, until it is dropped.
/// The semaphore must hold at least `max` permits. Its first 64 KiB in,
/// the frame is read into one block of the length it claims (counted in
/// the pool already), allocated fallibly: a block the system refuses is
/// an error of this frame (`OutOfMemory`), not the process's abort. Cut
/// short, it wipes what arrived, not the block.
pub(crate) async fn read_frame_held<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    in_hand: &Arc<Semaphore>,
) -> Result<(Bytes, OwnedSemaphorePermit), FrameError> {
    let (body, held) = read(r, max, Some(in_hand)).await?;
    match held {
        Some(held) => Ok((body, held)),
        None => Err(FrameError::Io(std::io::Error::other(
            "a frame read without its bytes held",
        ))),
    }
}

async fn read<R: AsyncRead + Unpin>(
    r: &mut R,
    max: usize,
    in_hand: Option<&Arc<Semaphore>>,
) -> Result<(Bytes, Option<OwnedSemaphorePermit>), FrameError> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Err(FrameError::Closed),
        Err(e) => return Err(FrameError::Io(e)),
    }
    let claimed = i32::from_be_bytes(len);
    let size = usize::try_from(claimed).ok().filter(|n| *n <= max);
    let Some(size) = size else {
        return Err(FrameError::TooLong {
            claimed: i64::from(claimed),
            max,
        });
    };
    // All of what the frame may take past its first block, before any of
    // it is read: a frame that holds part of the pool never waits for
    // more (no frame waits on another that waits too).
    let held = match in_hand {
        Some(pool) => Some(take(pool, size.saturating_sub(FIRST_READ)).await?),
        None => None,
    };
    // Only appended to: a frame cut short wipes what arrived, not the
    // block of its claimed length.
    let mut body = crate::wipe::Buf::appended_only(size.min(FIRST_READ), true);
    while body.len() < size {
        // Held in the pool, a frame whose first block arrived takes the
        // rest of its length at once: one move of that block, not one
        // per doubling (a 1 MB frame copied, wiped and faulted in about
        // four times over, into a block of 2 MiB).
        if held.is_some() && body.len() >= FIRST_READ {
            let room = size - body.len();
            body.try_reserve_exact(room).map_err(|_| {
                FrameError::Io(std::io::Error::new(
                    std::io::ErrorKind::OutOfMemory,
                    format!("no memory for a frame of {size} bytes"),
                ))
            })?;
        } else {
            body.reserve((size - body.len()).min(body.len().max(FIRST_READ)));
        }
        let room = size - body.len();
        let n = (&mut *r)
            .take(room as u64)
            .read_buf(body.inner())
            .await
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok((body.freeze(), held))
}

/// Holds an answer of `len` bytes the proxy made itself, queued for a
/// client: its first 64 KiB from the connection's own allowance
/// (`connection`, [`FIRST_READ`] permits), the rest from `in_hand` (the
/// responses' pool), waiting for both. So the answers a connection has
/// queued take at most 64 KiB beside the pool, however many requests it
/// sends and however large the answers they ask for, and never more than
/// the pool (`pool_size`: an answer larger than it is refused).
pub(crate) async fn hold_answer(
    len: usize,
    connection: &Arc<Semaphore>,
    in_hand: &Arc<Semaphore>,
    pool_size: usize,
) -> Result<(OwnedSemaphorePermit, Option<OwnedSemaphorePermit>), FrameError> {
    let past = len.saturating_sub(FIRST_READ);
    if past > pool_size {
        return Err(FrameError::TooLong {
            claimed: i64::try_from(len).unwrap_or(i64::MAX),
            max: pool_size + FIRST_READ,
        });
    }
    let own = take(connection, len.min(FIRST_READ)).await?;
    let pooled = if past > 0 {
        Some(take(in_hand, past).await?)
    } else {
        None
    };
    Ok((own, pooled))
}

/// `n` permits of `pool`, waiting for them.
async fn take(pool: &Arc<Semaphore>, n: usize) -> Result<OwnedSemaphorePermit, FrameError> {
    let n = u32::try_from(n)
        .map_err(|_| FrameError::Io(std::io::Error::other("a frame over 4 GiB")))?;
    pool.clone()
        .acquire_many_owned(n)
        .await
        .map_err(|_| FrameError::Io(std::io::Error::other("the proxy is stopping")))
}

/// Writes one frame: its length, then its body, in one vectored write
/// where the stream takes one (a TCP socket: with `TCP_NODELAY` set, the
/// length written alone went as a segment of its own, a system call and a
/// packet more for each frame).
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    body: &[u8],
) -> std::io::Result<()> {
    let len = i32::try_from(body.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "a frame over 2 GiB"))?;
    let len = len.to_be_bytes();
    let mut frame = bytes::Buf::chain(&len[..], body);
    w.write_all_buf(&mut frame).await?;
    // A TLS stream may hold the last record until flushed.
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn large_frames_in_hand_take_the_pool_and_wait_for_it() {
        let size = FIRST_READ + 1000;
        let frame = |fill: u8| {
            let mut f = (size as i32).to_be_bytes().to_vec();
            f.extend(std::iter::repeat_n(fill, size));
            f
        };
        // Room for one large frame's bytes past its first block, not two.
        let pool = Arc::new(Semaphore::new(1500));
        let (first_bytes, second_bytes) = (frame(1), frame(2));
        let mut first: &[u8] = &first_bytes;
        let (body, held) = read_frame_held(&mut first, size, &pool).await.unwrap();
        assert_eq!((body.len(), held.num_permits()), (size, 1000));
        assert_eq!(pool.available_permits(), 500);
        let in_hand = pool.clone();
        let waiting = tokio::spawn(async move {
            let mut second: &[u8] = &second_bytes;
            read_frame_held(&mut second, size, &pool)
                .await
                .map(|(b, h)| (b[0], b.len(), h.num_permits()))
        });
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert!(!waiting.is_finished(), "read while the pool was short");
        drop(held);
        assert_eq!(waiting.await.unwrap().unwrap(), (2, size, 1000));
        assert_eq!(in_hand.available_permits(), 1500);
        // A frame of one block or less takes nothing, even from an empty pool.
        let empty = Arc::new(Semaphore::new(0));
        let mut small: &[u8] = &[0, 0, 0, 3, 7, 7, 7];
        let (body, held) = read_frame_held(&mut small, 3, &empty).await.unwrap();
        assert_eq!((&body[..], held.num_permits()), (&[7u8, 7, 7][..], 0));
    }

    /// Hands out its bytes `chunk` at a time, as a socket does.
    struct Trickle<'a> {
        data: &'a [u8],
        chunk: usize,
    }

    impl AsyncRead for Trickle<'_> {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let n = self.chunk.min(self.data.len()).min(buf.remaining());
            buf.put_slice(&self.data[..n]);
            self.data = &self.data[n..];
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_large_frame_in_hand_is_read_into_one_block_of_its_size() {
        // A Fetch response of a 1 MB batch, encrypted: past 1 MiB.
        let size = (1 << 20) + 50_000;
        let mut wire = (size as i32).to_be_bytes().to_vec();
        wire.extend((0..size).map(|i| i as u8));
        let pool = Arc::new(Semaphore::new(size));
        let mut socket = Trickle {
            data: &wire,
            chunk: 16 << 10,
        };
        let (body, held) = read_frame_held(&mut socket, size, &pool).await.unwrap();
        assert_eq!(held.num_permits(), size - FIRST_READ);
        assert_eq!(&body[..], &wire[4..]);
        // Its block is its size, not the next power of two (2 MiB) that
        // doubling from the first block reaches.
        let block = body.try_into_mut().expect("the only handle");
        assert_eq!(block.capacity(), size);
    }

    /// Takes at most `chunk` bytes a write; counts the writes.
    #[derive(Default)]
    struct Writes {
        out: Vec<u8>,
        calls: usize,
        chunk: usize,
    }

    impl tokio::io::AsyncWrite for Writes {
        fn poll_write(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            buf: &[u8],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let n = buf.len().min(self.chunk);
            self.out.extend_from_slice(&buf[..n]);
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn poll_write_vectored(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            bufs: &[std::io::IoSlice<'_>],
        ) -> std::task::Poll<std::io::Result<usize>> {
            let mut n = 0;
            for b in bufs {
                let take = b.len().min(self.chunk - n);
                self.out.extend_from_slice(&b[..take]);
                n += take;
            }
            self.calls += 1;
            std::task::Poll::Ready(Ok(n))
        }

        fn is_write_vectored(&self) -> bool {
            true
        }

        fn poll_flush(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn poll_shutdown(
            self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            std::task::Poll::Ready(Ok(()))
        }
    }

    #[tokio::test]
    async fn a_frame_goes_in_one_write_its_length_with_its_body() {
        let mut w = Writes {
            chunk: 1 << 20,
            ..Default::default()
        };
        write_frame(&mut w, b"hello").await.unwrap();
        assert_eq!(w.out, b"\0\0\0\x05hello");
        assert_eq!(w.calls, 1, "the length went alone");
        // A stream that takes little at a time gets all of it, in order.
        let body: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
        let mut w = Writes {
            chunk: 7,
            ..Default::default()
        };
        write_frame(&mut w, &body).await.unwrap();
        assert_eq!(w.out[..4], 1000i32.to_be_bytes());
        assert_eq!(w.out[4..], body[..]);
    }

    #[tokio::test]
    async fn a_frame_longer_than_the_limit_is_refused_before_allocation() {
        let mut input: &[u8] = &[0x7f, 0xff, 0xff, 0xff, 1, 2, 3];
        match read_frame(&mut input, 1024).await {
            Err(FrameError::TooLong { claimed, max }) => {
                assert_eq!((claimed, max), (i64::from(i32::MAX), 1024));
            }
            other => panic!("{other:?}"),
        }
        let mut negative: &[u8] = &[0xff, 0xff, 0xff, 0xff];
        assert!(matches!(
            read_frame(&mut negative, 1024).await,
            Err(FrameError::TooLong { claimed: -1, .. })
        ));
        let mut ok: &[u8] = &[0, 0, 0, 2, 9, 8, 0, 0];
        assert_eq!(&read_frame(&mut ok, 2).await.unwrap()[..], &[9, 8]);
        let mut short: &[u8] = &[0, 0, 0, 5, 1];
        assert!(matches!(
            read_frame(&mut short, 9).await,
            Err(FrameError::Io(_))
        ));
        let mut empty: &[u8] = &[];
        assert!(matches!(
            read_frame(&mut empty, 9).await,
            Err(FrameError::Closed)
        ));
    }
}
