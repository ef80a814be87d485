//! The library's integration tests in one binary (`suite`): each file of
//! `tests/` is a module of it, so the helpers of `tests/common/` build once
//! and the test command links one binary, not one per file. cargo-nextest
//! (the test command's runner) still runs each test in a process of its
//! own. Three files stay binaries of their own (`Cargo.toml`): a global
//! allocator (`freed_memory`), `fork()` (`fork_nonces`) and process-wide
//! counters (`stats_process`).

mod common;

mod apache_compaction;
mod aws_lc_compat;
mod aws_sigv4;
mod compaction;
mod confluent;
mod confluent_attacks;
mod confluent_avro;
mod confluent_corpus;
mod confluent_edges;
mod confluent_rules;
mod confluent_tag_places;
mod context_binding;
mod debug_redaction;
mod dek_lifetime;
mod encrypted_key_order;
mod encrypted_keys;
mod errors;
mod faults;
mod field_roundtrip;
mod fields;
mod hint_attacks;
mod in_place;
mod interop_tink;
mod kafka;
mod kafka_clients;
mod kafka_confluent;
mod kafka_crash;
mod kafka_faults;
mod kafka_fields;
mod kafka_transactions;
mod key_store_view;
mod keyset_json;
mod kms_envelope;
mod kms_servers;
mod limits;
mod metrics_example;
mod migration;
mod partitioner;
mod primitive;
mod rotation;
mod shred;
mod shred_crash;
mod shred_demo;
mod shred_evidence;
mod shred_kafka;
mod shred_kms;
mod shred_races;
mod stats;
mod store_and_serde_gaps;
mod store_properties;
mod store_reading_order;
mod tamper;
mod tombstones;
mod topic_id;
mod topic_id_hostile;
mod tracing_secrets;
mod typed_producer_keys;
mod vectors;
mod write_order;
mod wycheproof;
