pub mod broker;
pub mod naive;
pub mod tink;
