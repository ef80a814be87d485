//! Size-prefixed frames: the Kafka protocol's unit on the wire.

use bytes::Bytes;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

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
/// arrive, never to more than twice what arrived.
const FIRST_READ: usize = 64 << 10;

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
    let mut body = crate::wipe::Buf::with_capacity(size.min(FIRST_READ), true);
    while body.len() < size {
        let room = (size - body.len()).min(body.len().max(FIRST_READ));
        body.reserve(room);
        let n = (&mut *r)
            .take(room as u64)
            .read_buf(body.inner())
            .await
            .map_err(FrameError::Io)?;
        if n == 0 {
            return Err(FrameError::Io(std::io::ErrorKind::UnexpectedEof.into()));
        }
    }
    Ok(body.freeze())
}

/// Writes one frame: its length, then its body.
pub(crate) async fn write_frame<W: AsyncWrite + Unpin>(
    w: &mut W,
    body: &[u8],
) -> std::io::Result<()> {
    let len = i32::try_from(body.len())
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "a frame over 2 GiB"))?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(body).await?;
    // A TLS stream may hold the last record until flushed.
    w.flush().await
}

#[cfg(test)]
mod tests {
    use super::*;

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
