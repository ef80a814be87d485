pub mod broker;
#[cfg(feature = "kafka")]
pub mod compacting;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod naive;
pub mod root;
pub mod tink;
