//! The guide: how to use this crate, one chapter per topic. It holds no
//! code; the API is in the other modules, whose pages hold what belongs to
//! one module.
//!
//! Read [`stores`] first (the guarantee at the level of a key-value store
//! and its changelog), then the chapters you need:
//!
//! 1. [`stores`]: stores, changelogs, compaction, restore, and what a store
//!    does when an append or a flush fails;
//! 2. [`kafka`]: Kafka's write and reading rules, records sans IO, a
//!    changelog on a topic, the typed async clients, adding partitions;
//! 3. [`rotation`]: key types and backends, and rotating value keys,
//!    record keys and KEKs, as a runbook;
//! 4. [`record_keys`]: record keys encrypted deterministically, so that
//!    compaction and lookups still work;
//! 5. [`kms`]: keys in a KMS (envelope encryption), the AWS KMS and Vault
//!    clients, a KMS of your own;
//! 6. [`fields`]: encrypting some fields of a record and leaving the rest
//!    readable;
//! 7. [`confluent`]: reading and writing Confluent's client-side
//!    encryption (CSFLE fields, CSPE payloads);
//! 8. [`shredding`]: a key per data subject, and a delete that reaches
//!    every copy;
//! 9. [`observability`]: counters, `metrics` and `tracing`;
//! 10. [`choices`]: the choices made where the design is silent.
//!
//! Every Rust example in the guide is a doctest that runs (those that need
//! a broker are compiled only, and say so). The wire format is the
//! [`format`](crate::format) page. The repository also holds, beside the
//! crate's sources: `docs/CLI.md` (the `tombstone-crypt` command line),
//! `docs/PERFORMANCE.md` (every benchmark with the command that makes it)
//! and `CONTRIBUTING.md` (the test command, and which test proves which
//! claim); the package ships all three.

#[doc = include_str!("stores.md")]
pub mod stores {}

#[doc = include_str!("kafka.md")]
pub mod kafka {}

#[doc = include_str!("rotation.md")]
pub mod rotation {}

#[doc = include_str!("record_keys.md")]
pub mod record_keys {}

#[doc = include_str!("kms.md")]
pub mod kms {}

#[doc = include_str!("fields.md")]
pub mod fields {}

#[doc = include_str!("confluent.md")]
pub mod confluent {}

#[doc = include_str!("shredding.md")]
pub mod shredding {}

#[doc = include_str!("observability.md")]
pub mod observability {}

#[doc = include_str!("choices.md")]
pub mod choices {}
