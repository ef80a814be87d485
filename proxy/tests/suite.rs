//! The proxy's integration tests in one binary (`suite`): each file of
//! `proxy/tests/` is a module of it, so the helpers of `common/` build once
//! and the test command links one binary, not one per file. cargo-nextest
//! (the test command's runner) still runs each test in a process of its
//! own. Four files stay binaries of their own (`Cargo.toml`): two with a
//! global allocator (`freed_memory`, `review_fetch_drop`), one that sets
//! the global `tracing` subscriber (`spans`) and one that counts the
//! process-wide counters exactly (`counters`).

mod common;

mod api_guard;
mod busy_clients;
mod decode_bounds;
mod faults;
mod fuzz_regressions;
mod go_clients;
mod headers;
mod hostile_bounds;
mod hostile_frames;
mod java_clients;
mod kms;
mod kms_down;
mod node_clients;
mod policy_attacks;
mod proxy_compacting;
mod python_clients;
mod rdkafka_clients;
mod readable_writes;
mod record_encoding;
mod refused_writes;
mod sequence_attacks;
mod sequence_flood;
mod shred_attacks;
mod shutdown;
mod tls;
mod topic_ids;
