//! Confluent's Rust client (schema-registry-client 0.4.2) as a peer, driven
//! as tests/interop/confluent_peer.py is:
//!
//!     confluent-peer write   prints, for each case (field-gcm, field-siv,
//!                            payload-gcm under the Python peer's schema;
//!                            field-gcm-note-string, field-siv-note-string
//!                            with `note` not nullable;
//!                            CONFLUENT_PEER_CASES="a,b" for some), the
//!                            records the crate wrote (or `error`) with what
//!                            a reader needs besides them: the schema and
//!                            rule, the secret, the wrapped DEKs
//!     confluent-peer read    reads stdin [{schema, subject, secret, deks,
//!                            records: [base64 | null]}, ...] (each job's
//!                            records under schema id 1), prints
//!                            [[{"ok": value} | {"error": why}], ...]

use std::io::Read as _;
use std::process::ExitCode;

use serde_json::Value;
use tombstone_crypt_confluent_peer::{read_jobs, records, write_case, CASES};

fn run(mode: &str) -> Result<Value, String> {
    match mode {
        "write" => {
            let only = std::env::var("CONFLUENT_PEER_CASES").ok();
            let names: Vec<String> = match only {
                Some(o) => o.split(',').map(str::to_owned).collect(),
                None => CASES.iter().map(|c| c.0.to_owned()).collect(),
            };
            let records = records();
            names
                .iter()
                .map(|n| write_case(n, &records))
                .collect::<Result<Vec<_>, _>>()
                .map(Value::Array)
        }
        "read" => {
            let mut input = String::new();
            std::io::stdin()
                .read_to_string(&mut input)
                .map_err(|e| format!("stdin: {e}"))?;
            let jobs: Value =
                serde_json::from_str(&input).map_err(|e| format!("stdin is not JSON: {e}"))?;
            read_jobs(&jobs)
        }
        _ => Err("usage: confluent-peer write|read".to_owned()),
    }
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode] = &args[..] else {
        eprintln!("usage: confluent-peer write|read");
        return ExitCode::from(2);
    };
    match run(mode) {
        Ok(out) => {
            println!("{out}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("confluent-peer: {e}");
            ExitCode::FAILURE
        }
    }
}
