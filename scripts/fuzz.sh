#!/usr/bin/env bash
# Runs every fuzz target briefly, as CI does: FUZZ_SECONDS each (default 20).
# Installs the pinned cargo-fuzz if it is missing. Each target starts from a
# copy of its committed seed corpus in a scratch directory, so the committed
# corpus is never touched. Fails if any target finds a crash; prints each
# target's final libFuzzer stats line.
#
#   ./scripts/fuzz.sh                 # 20 s per target
#   FUZZ_SECONDS=600 ./scripts/fuzz.sh
#   ./scripts/fuzz.sh roundtrip       # some targets only
#
#   FUZZ_SANITIZER   cargo-fuzz's sanitizer (default address; the test
#                    command's smoke run uses none: this crate forbids
#                    unsafe code, and a build without AddressSanitizer's
#                    instrumentation costs less on 2 cores)
#   FUZZ_STEP        build | run | both (default both): the test command
#                    builds first and runs the targets later, beside the
#                    compacting broker's suites
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
SECONDS_PER_TARGET="${FUZZ_SECONDS:-20}"
SANITIZER="${FUZZ_SANITIZER:-address}"
STEP="${FUZZ_STEP:-both}"
# cargo-fuzz needs nightly flags (-Zsanitizer); the stable toolchain allows
# them with RUSTC_BOOTSTRAP.
export RUSTC_BOOTSTRAP=1

step() { printf '\n==> %s\n' "$*" >&2; }

if [[ "$(cargo fuzz --version 2>/dev/null || true)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    step "installing cargo-fuzz $CARGO_FUZZ_VERSION"
    cargo install cargo-fuzz --version "$CARGO_FUZZ_VERSION" --locked
fi

if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    mapfile -t targets < <(cargo fuzz list)
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "no fuzz targets" >&2; exit 1; }

if [[ $STEP != run ]]; then
    step "building the fuzz targets (sanitizer: $SANITIZER)"
    cargo fuzz build --sanitizer "$SANITIZER"
fi
[[ $STEP != build ]] || exit 0

scratch=fuzz/target/scratch-corpus
logs=fuzz/target/fuzz-logs
mkdir -p "$logs"
failed=()
summary=()
for t in "${targets[@]}"; do
    step "fuzzing $t for ${SECONDS_PER_TARGET}s"
    rm -rf "${scratch:?}/$t"
    mkdir -p "$scratch/$t"
    if [[ -d "fuzz/corpus/$t" ]]; then
        find "fuzz/corpus/$t" -maxdepth 1 -type f -name 'seed-*' -exec cp {} "$scratch/$t/" \;
    fi
    args=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=512)
    if [[ -f "fuzz/dict/$t.dict" ]]; then
        args+=(-dict="fuzz/dict/$t.dict")
    fi
    log="$logs/$t.log"
    rc=0
    cargo fuzz run --sanitizer "$SANITIZER" "$t" "$scratch/$t" -- "${args[@]}" >"$log" 2>&1 || rc=$?
    stats="$(grep -E '^#[0-9]+[[:space:]]+(DONE|pulse|NEW|REDUCE|INITED)' "$log" | tail -n 1 || true)"
    if [[ $rc -ne 0 ]]; then
        failed+=("$t")
        grep -E 'panicked|ERROR|SUMMARY|artifact_prefix|Test unit written' "$log" | head -n 20 >&2 || true
        summary+=("$t: FAILED (exit $rc, log $log) ${stats}")
    else
        summary+=("$t: ${stats:-no stats line (log $log)}")
    fi
done

step "fuzz summary"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "crashes in: ${failed[*]} (inputs under fuzz/artifacts/)" >&2
    exit 1
fi
