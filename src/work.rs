//! Blocking work (a KMS call) that a caller may run ahead, off an async
//! worker. At the bottom: the wire format hands it out, the serde traits and
//! the Kafka clients pass it on.

use crate::error::Error;

/// Blocking work that a (de)serialization would otherwise do inline: a
/// KMS call for a new data key, or to unwrap one that is not cached.
///
/// Async callers ask for it first
/// ([`Serializer::blocking_work`](crate::Serializer::blocking_work),
/// [`Deserializer::blocking_work`](crate::Deserializer::blocking_work)),
/// run it where blocking is allowed (tokio's `spawn_blocking`), then
/// (de)serialize without blocking. The
/// typed Kafka clients do this; a synchronous caller can ignore it, since
/// (de)serializing does the same work inline.
pub struct BlockingWork(Box<dyn FnOnce() -> Result<(), Error> + Send + 'static>);

impl BlockingWork {
    /// Work that runs `f`.
    pub fn new(f: impl FnOnce() -> Result<(), Error> + Send + 'static) -> Self {
        BlockingWork(Box::new(f))
    }

    /// Runs the work (blocking the calling thread).
    ///
    /// # Errors
    /// What the work reports (an [`Error::Kms`] for a KMS call that failed);
    /// the (de)serialization it prepared would fail the same way.
    pub fn run(self) -> Result<(), Error> {
        (self.0)()
    }

    /// Both `a` and `b`, in that order (either may be `None`).
    pub fn both(a: Option<BlockingWork>, b: Option<BlockingWork>) -> Option<BlockingWork> {
        match (a, b) {
            (Some(a), Some(b)) => Some(BlockingWork::new(move || {
                a.run()?;
                b.run()
            })),
            (a, b) => a.or(b),
        }
    }
}

impl core::fmt::Debug for BlockingWork {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("BlockingWork")
    }
}
