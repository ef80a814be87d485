//! Typed async Kafka clients over rdkafka's `FutureProducer` and
//! `StreamConsumer` (feature `kafka`), built on the sans-IO
//! [`encode_write`](crate::kafka::encode_write) / [`decode_message`](crate::kafka::decode_message).
//!
//! A `None` value is produced with no payload at all (Kafka's null), with
//! its headers; a consumed record without a payload is `None` without
//! calling the value deserializer.

use crate::error::Error;
use crate::work::BlockingWork;

mod consumer;
mod line;
mod outgoing;
mod producer;

pub use consumer::{ConsumedRecord, TypedConsumer, UndecodableHook};
pub use producer::TypedProducer;

pub(super) fn kafka_err<E: std::error::Error + Send + Sync + 'static>(what: &str, e: E) -> Error {
    Error::Kafka {
        detail: what.to_owned(),
        cause: Some(std::sync::Arc::new(e)),
    }
}

/// Runs `work` on tokio's blocking pool (a KMS call must not hold up the
/// worker, nor, on a current-thread runtime, everything else). Outside a
/// tokio runtime (another executor) there is no such pool: the work runs
/// inline, as a synchronous call would.
pub(super) async fn off_the_worker(work: BlockingWork) -> Result<(), Error> {
    blocking(move || work.run())
        .await
        .map_err(|e| Error::kms("the blocking task of a KMS call ended", e))?
}

/// Runs a write's `work` where it stands, before the write takes its place:
/// on a multi-thread tokio runtime in `block_in_place` (the worker hands
/// its other tasks to another thread for the call), on a current-thread
/// runtime or outside tokio inline (the runtime waits for the KMS call,
/// once per data key). Never awaited: a write that awaited its KMS call
/// would be overtaken by a later write polled meanwhile.
pub(super) fn in_place(work: BlockingWork) -> Result<(), Error> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(runtime) if runtime.runtime_flavor() == RuntimeFlavor::MultiThread => {
            tokio::task::block_in_place(|| work.run())
        }
        _ => work.run(),
    }
}

/// Runs `f` on tokio's blocking pool, or inline outside a tokio runtime.
async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    match tokio::runtime::Handle::try_current() {
        Ok(runtime) => runtime.spawn_blocking(f).await,
        Err(_) => Ok(f()),
    }
}

/// Where a produced record landed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivered {
    /// The partition.
    pub partition: i32,
    /// The offset in the partition.
    pub offset: i64,
}

/// Record headers: names and optional values, in order.
pub type RecordHeaders = Vec<(String, Option<Vec<u8>>)>;
