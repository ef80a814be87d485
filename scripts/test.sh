#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts what the tests
# need (a Python venv with Google Tink and confluent-kafka, a loopback
# Kafka-compatible broker, loopback KMS servers, cargo-fuzz), runs every
# check, stops the broker and the KMS servers.
#
#   FUZZ_SECONDS   seconds per fuzz target (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }
started=$(date +%s)

step "format"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check

step "clippy (all features)"
cargo clippy --all-targets --all-features -- -D warnings

step "Python venv with tink and confluent-kafka (pinned with hashes, cached under target/venv)"
TOMBSTONE_TINK_PYTHON="$(bash scripts/tink-venv.sh | tail -n 1)"
export TOMBSTONE_TINK_PYTHON

step "brokers: tansu on 127.0.0.1, in memory and compacting on SQLite (built once into target/tansu-sqlite; stopped on exit)"
trap 'bash scripts/broker.sh stop-compacting >&2 || true; bash scripts/broker.sh stop >&2 || true' EXIT
TOMBSTONE_KAFKA_BOOTSTRAP="$(bash scripts/broker.sh start | tail -n 1)"
export TOMBSTONE_KAFKA_BOOTSTRAP
TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP="$(bash scripts/broker.sh start-compacting | tail -n 1)"
export TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP

step "KMS servers: OpenBao 2.7.2 (transit) and moto (AWS KMS) on 127.0.0.1 (stopped on exit)"
trap 'bash scripts/kms.sh stop >&2 || true; bash scripts/broker.sh stop-compacting >&2 || true; bash scripts/broker.sh stop >&2 || true' EXIT
KMS_ENV="$(bash scripts/kms.sh start | tail -n 1)"
# VAULT_ADDR, VAULT_TOKEN, AWS_* (loopback endpoint, dummy keys), the key URIs.
# shellcheck disable=SC1090
source "$KMS_ENV"

step "tests, all features (aws-lc backend, kafka, redb): unit, integration, doc"
cargo test --all-features

step "tests, default features (RustCrypto backend)"
cargo test

step "tests without default features"
cargo test --no-default-features --lib --tests

step "fuzz smoke run: every target ${FUZZ_SECONDS:-20} s"
bash scripts/fuzz.sh

step "all green in $(( $(date +%s) - started )) s"
