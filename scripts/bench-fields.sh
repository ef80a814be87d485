#!/usr/bin/env bash
# Field-level encryption beside the whole-value layer, the bare codec and the
# raw primitive: the `fields/*` rows of benches/throughput.rs, ROUNDS times
# (alternating with nothing else: each round runs every row back to back),
# fastest sample of each row over all rounds, and the spread of the per-round
# ratios.
#
#   scripts/bench-fields.sh              # 3 rounds, about 4 minutes
#   ROUNDS=5 scripts/bench-fields.sh
#
# A: a record of 10 fields with 3 encrypted (32 B each) through
#    FieldEncrypting, over the same record encrypted as one whole value.
# B: each field's cost, (fields - codec) / 3, over the raw AES-GCM of its
#    32 bytes plus what the codec pays for the field's longer wire form,
#    raw32 + (codec_wire - codec) / 3.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 0.5 --measurement-time 2}"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    printf '==> round %s of %s\n' "$round" "$ROUNDS" >&2
    rm -rf target/criterion/fields_*
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
    cargo bench --bench throughput --features confluent -- --noplot $BENCH_ARGS 'fields/' >"$OUT/log.$round" 2>&1 || {
        cat "$OUT/log.$round" >&2
        exit 1
    }
    mkdir -p "$OUT/$round"
    cp -r target/criterion/fields_* "$OUT/$round/"
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
print(f"CPU: {cpu}; {rounds} rounds; fastest sample of each row (ns per record)\n")
print("| format | direction | fields | whole | codec | codec_wire | raw32 | A = fields/whole (goal <= 3.3) | B per field (goal <= 1.2) |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|")
for fmt in ["json", "bincode"]:
    for d in ["encrypt", "decrypt"]:
        g = f"fields_{fmt}_{d}"
        f, w, c, cw = (best(g, b) for b in ["fields", "whole", "codec", "codec_wire"])
        r = best("fields_raw32", d)
        a = f / w
        b = ((f - c) / 3) / (r + max(cw - c, 0) / 3)
        per_round = []
        for k in range(1, rounds + 1):
            fk, wk = fastest(k, g, "fields"), fastest(k, g, "whole")
            per_round.append(fk / wk)
        spread = f"{min(per_round):.2f}-{max(per_round):.2f}"
        print(f"| {fmt} | {d} | {f:.0f} | {w:.0f} | {c:.0f} | {cw:.0f} | {r:.0f} | {a:.2f} ({spread}) | {b:.2f} |")

print("\nConfluent's format (ConfluentSerde, JSON Schema, AES256_GCM) beside this library's (FieldEncrypting<Json>, whole value), ns per record\n")
print("| direction | Confluent fields | Confluent payload | our fields | our whole value | Confluent fields / our fields |")
print("|---|---:|---:|---:|---:|---:|")
for d in ["encrypt", "decrypt"]:
    cf, cp = best(f"fields_confluent_{d}", "fields"), best(f"fields_confluent_{d}", "payload")
    of, ow = best(f"fields_json_{d}", "fields"), best(f"fields_json_{d}", "whole")
    print(f"| {d} | {cf:.0f} | {cp:.0f} | {of:.0f} | {ow:.0f} | {cf / of:.2f} |")
PY
