#!/usr/bin/env bash
# Confluent's format written and read one record at a time by this library
# (ConfluentJson, "ours") and by Confluent's Rust client schema-registry-client
# 0.4.2 ("theirs"): confluent-peer-rs/benches/records.rs, ROUNDS times (each
# round runs every row back to back, ours and theirs alternating), fastest
# sample of each row over all rounds, and the spread of the per-round ratios.
#
#   scripts/bench-confluent-peer.sh            # 3 rounds
#   ROUNDS=5 scripts/bench-confluent-peer.sh
#
# The peer lives in its own workspace (confluent-peer-rs/): its
# dependencies never join the library's build.
set -euo pipefail
cd "$(dirname "$0")/../confluent-peer-rs"

ROUNDS="${ROUNDS:-3}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 1 --measurement-time 3}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
cargo bench --bench records --no-run >"$OUT/build" 2>&1 || {
    cat "$OUT/build" >&2
    exit 1
}
for round in $(seq 1 "$ROUNDS"); do
    printf '==> round %s of %s\n' "$round" "$ROUNDS" >&2
    rm -rf target/criterion/confluent_peer_*
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
    cargo bench --bench records -- --noplot $BENCH_ARGS >"$OUT/log.$round" 2>&1 || {
        cat "$OUT/log.$round" >&2
        exit 1
    }
    mkdir -p "$OUT/$round"
    cp -r target/criterion/confluent_peer_* "$OUT/$round/"
done
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, os, platform, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def fastest(round_, group, bench):
    s = json.load(open(os.path.join(out, str(round_), group, bench, "new", "sample.json")))
    return min(t / n for t, n in zip(s["times"], s["iters"]))

def best(group, bench):
    return min(fastest(r, group, bench) for r in range(1, rounds + 1))

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
print(f"CPU: {cpu}, {os.cpu_count()} cores; {rounds} rounds; fastest sample of each row (ns per record)\n")
print("| direction | rule | ours (ConfluentJson) | theirs (schema-registry-client) | ours/theirs (spread) | theirs/ours (spread) |")
print("|---|---|---:|---:|---:|---:|")
for d in ["encrypt", "decrypt"]:
    for rule in ["fields", "payload"]:
        g = f"confluent_peer_{d}_{rule}"
        o, t = best(g, "ours"), best(g, "theirs")
        per_round = [fastest(k, g, "ours") / fastest(k, g, "theirs") for k in range(1, rounds + 1)]
        lo, hi = min(per_round), max(per_round)
        print(f"| {d} | {rule} | {o:.0f} | {t:.0f} | {o / t:.3f} ({lo:.3f}-{hi:.3f}) | {t / o:.1f} ({1 / hi:.1f}-{1 / lo:.1f}) |")
PY
