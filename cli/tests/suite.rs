//! The command line's integration tests in one binary (`suite`): each file
//! of `cli/tests/` is a module of it, so the helpers of `common/` build once
//! and the test command links one binary, not one per file. cargo-nextest
//! (the test command's runner) still runs each test in a process of its
//! own.

mod common;

mod cli;
mod client_settings;
mod client_settings_safety;
mod consume;
mod fields;
mod help;
mod keyset_files;
mod logging;
mod proxy;
mod proxy_repair;
mod proxy_subject_keys;
mod shred;
mod shred_check;
mod shredded_copies;
mod transactions;
mod walkthrough;
mod writers_model;
