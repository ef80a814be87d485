//! `tombstone-crypt`: keysets, ciphertext inspection, and the audit and
//! repair of Kafka topics whose deletes an earlier encryption layer turned
//! into values.
//!
//! Exit codes: 0 done and clean, 1 findings (broken tombstones, split
//! keys, undecryptable values, a value that is not a ciphertext), 2 usage,
//! I/O, KMS or broker error, a keyset under which not one value of the
//! topic decrypts (the wrong keyset), or a producer configuration that
//! could reorder a key's records.
//!
//! It uses the library through its public API only. Its files, bottom
//! up, are in docs/LAYERS.md (checked by `scripts/layers.py`): `outcome`
//! (how a command ends, where results go), `args` (the options), the
//! readers, planners and writers, and one file per command; this file
//! parses the arguments, starts logging and runs the command.
#![forbid(unsafe_code)]
// The lints live in Cargo.toml's [lints]; this one is allowed in tests.
#![cfg_attr(not(test), warn(clippy::unwrap_used))]

mod apply;
mod args;
mod audit;
mod checkpoint;
mod client;
mod consume;
mod fields;
mod inspect;
mod key_state;
mod keysets;
mod outcome;
mod plan;
mod proxy;
mod read;
mod record;
mod reencrypt;
mod repair;
mod report;
mod run;
mod scan;
mod shred;
mod write;

/// mimalloc: it keeps the proxy's large blocks for the next request, where
/// glibc's malloc gave them back to the system and faulted them in again
/// (docs/PERFORMANCE.md). Every buffer that held plaintext is zeroized by
/// its owner before it is freed, whatever the allocator.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;

use args::{Cli, Command};
use outcome::{Fail, Outcome, Output};
fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            // Help and version are not errors.
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    if let Err(msg) = init_logging(cli.verbose) {
        let _ = writeln!(std::io::stderr(), "tombstone-crypt: error: {msg}");
        return ExitCode::from(2);
    }
    keysets::register_kms_clients();
    let _span = tracing::info_span!("command", name = cli.command.name()).entered();
    let out = Output {
        json: cli.json,
        quiet: cli.quiet,
    };
    let result = match cli.command {
        Command::Keyset(k) => keysets::run(k, &out),
        Command::Inspect(a) => inspect::inspect(a, &out),
        Command::Audit(a) => audit::audit(&a, &out),
        Command::Repair(a) => repair::repair(&a, &out),
        Command::Reencrypt(a) => reencrypt::reencrypt(&a, &out),
        Command::Consume(a) => consume::consume(&a, &out),
        Command::Shred(a) => shred::shred(&a, &out),
        Command::Proxy(a) => proxy::proxy(&a),
    };
    match result {
        Ok(Outcome::Clean) => ExitCode::SUCCESS,
        Ok(Outcome::Findings) => ExitCode::from(1),
        Err(Fail(msg)) => {
            let _ = writeln!(std::io::stderr(), "tombstone-crypt: error: {msg}");
            ExitCode::from(2)
        }
    }
}

/// Logs to stderr (never stdout, which `--json` keeps for its document):
/// `RUST_LOG` when set, else the level `-v` gives (warnings without it).
fn init_logging(verbose: u8) -> Result<(), String> {
    use tracing_subscriber::filter::{LevelFilter, Targets};
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::util::SubscriberInitExt as _;
    let filter = match std::env::var("RUST_LOG") {
        Ok(spec) if !spec.trim().is_empty() => spec
            .parse::<Targets>()
            .map_err(|e| format!("RUST_LOG={spec:?}: {e}"))?,
        _ => Targets::new().with_default(match verbose {
            0 => LevelFilter::WARN,
            1 => LevelFilter::INFO,
            2 => LevelFilter::DEBUG,
            _ => LevelFilter::TRACE,
        }),
    };
    tracing_subscriber::registry()
        .with(
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(false)
                .with_target(false)
                // A line when a span closes: each command and KMS call with
                // its outcome and time, at `-v`.
                .with_span_events(tracing_subscriber::fmt::format::FmtSpan::CLOSE),
        )
        .with(filter)
        .try_init()
        .map_err(|e| e.to_string())
}
