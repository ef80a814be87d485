pub mod broker;
#[cfg(feature = "kafka")]
pub mod compacting;
pub mod envelope;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod naive;
pub mod tink;
