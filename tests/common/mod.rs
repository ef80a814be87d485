#[cfg(feature = "kafka")]
pub mod broker;
#[cfg(feature = "kafka")]
pub mod compacting;
#[cfg(feature = "confluent")]
pub mod confluent;
pub mod envelope;
#[cfg(feature = "kafka")]
pub mod kafka;
pub mod naive;
#[cfg(feature = "kafka")]
pub mod own_broker;
pub mod rng;
pub mod root;
pub mod tink;

/// The name libtest gives the test `name` of the module `module` (its
/// `module_path!()`): the module's path without the crate's name, then the
/// test's. A test that runs its own binary again on one `#[ignore]`d test
/// (`--exact`) names it so, as every file of `tests/` is a module of one
/// binary (`tests/suite.rs`).
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_string(),
    }
}
