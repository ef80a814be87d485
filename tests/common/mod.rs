pub mod naive;
pub mod tink;
