#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs what the tests need
# (a Python venv with Google Tink), then runs every check.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*" >&2; }

step "format"
cargo fmt --all -- --check

step "clippy"
cargo clippy --all-targets --all-features -- -D warnings

step "Tink venv (pinned, cached under target/venv)"
TOMBSTONE_TINK_PYTHON="$(bash scripts/tink-venv.sh | tail -n 1)"
export TOMBSTONE_TINK_PYTHON

step "tests: unit, integration (Tink interop included), doc"
cargo test --all-features

step "tests without default features"
cargo test --no-default-features --lib --tests
