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
#   FUZZ_DIRS        the fuzz directories (default "fuzz fuzz/proxy"; the
#                    test command's smoke run: fuzz alone)
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

# Two fuzz directories: fuzz/ (the library, its pure-Rust backend) and
# fuzz/proxy/ (the proxy's frame and batch decoding: the proxy builds the
# library with its own features, which must not unify into fuzz/).
# FUZZ_DIRS (space-separated) picks some: scripts/test.sh runs fuzz/ alone,
# since building fuzz/proxy/ from clean builds aws-lc and librdkafka again
# under the fuzzer's flags (about 15 minutes on 2 shared cores); its
# findings are regression tests in proxy/tests/fuzz_regressions.rs.
read -r -a FUZZ_DIRS <<<"${FUZZ_DIRS:-fuzz fuzz/proxy}"
declare -A dir_of=()
for d in "${FUZZ_DIRS[@]}"; do
    while read -r t; do
        [[ -n $t ]] && dir_of[$t]=$d
    done < <(cargo fuzz list --fuzz-dir "$d")
done
if [[ $# -gt 0 ]]; then
    targets=("$@")
else
    targets=()
    for d in "${FUZZ_DIRS[@]}"; do
        mapfile -t -O "${#targets[@]}" targets < <(cargo fuzz list --fuzz-dir "$d")
    done
fi
[[ ${#targets[@]} -gt 0 ]] || { echo "no fuzz targets" >&2; exit 1; }
for t in "${targets[@]}"; do
    [[ -n ${dir_of[$t]:-} ]] || { echo "no fuzz target $t" >&2; exit 1; }
done

if [[ $STEP != run ]]; then
    for d in "${FUZZ_DIRS[@]}"; do
        step "building the fuzz targets of $d (sanitizer: $SANITIZER)"
        cargo fuzz build --fuzz-dir "$d" --sanitizer "$SANITIZER"
    done
fi
[[ $STEP != build ]] || exit 0

scratch=fuzz/target/scratch-corpus
logs=fuzz/target/fuzz-logs
mkdir -p "$logs"
failed=()
summary=()
for t in "${targets[@]}"; do
    d="${dir_of[$t]}"
    step "fuzzing $t for ${SECONDS_PER_TARGET}s"
    rm -rf "${scratch:?}/$t"
    mkdir -p "$scratch/$t"
    if [[ -d "$d/corpus/$t" ]]; then
        find "$d/corpus/$t" -maxdepth 1 -type f -name 'seed-*' -exec cp {} "$scratch/$t/" \;
    fi
    args=(-max_total_time="$SECONDS_PER_TARGET" -rss_limit_mb=2048 -malloc_limit_mb=512)
    if [[ -f "$d/dict/$t.dict" ]]; then
        args+=(-dict="$d/dict/$t.dict")
    fi
    log="$logs/$t.log"
    rc=0
    cargo fuzz run --fuzz-dir "$d" --sanitizer "$SANITIZER" "$t" "$scratch/$t" -- "${args[@]}" >"$log" 2>&1 || rc=$?
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
    echo "crashes in: ${failed[*]} (inputs under fuzz/artifacts/ and fuzz/proxy/artifacts/)" >&2
    exit 1
fi
