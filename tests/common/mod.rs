pub mod broker;
pub mod kafka;
pub mod naive;
pub mod tink;
