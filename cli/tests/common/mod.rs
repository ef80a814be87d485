//! The library's test helpers (`tests/common/` at the repository's root),
//! shared, not copied: each module is the library's file. Listed here
//! rather than through the library's `common/mod.rs`, which gates the
//! Kafka helpers on the library's `kafka` feature (this crate always has
//! Kafka).
#![allow(dead_code)]

#[path = "../../../tests/common/broker.rs"]
pub mod broker;
#[path = "../../../tests/common/compacting.rs"]
pub mod compacting;
#[path = "../../../tests/common/dir.rs"]
pub mod dir;
#[path = "../../../tests/common/kafka.rs"]
pub mod kafka;
#[path = "../../../tests/common/naive.rs"]
pub mod naive;
#[path = "../../../tests/common/own_broker.rs"]
pub mod own_broker;
pub mod process;
#[path = "../../../tests/common/rng.rs"]
pub mod rng;
#[path = "../../../tests/common/root.rs"]
pub mod root;
#[path = "../../../tests/common/tink.rs"]
pub mod tink;
