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
# B derive: the same for the `derive_proto` rows, a prototype of fields
#    whose paths are known at compile time (what a derive would generate,
#    written by hand in the bench; same wire form), beside B.
#
# The machine's load (`uptime`) is printed before each round and at the
# end: on a shared machine, read the figures with it.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 0.5 --measurement-time 2}"
CRITERION="${CARGO_TARGET_DIR:-target}/criterion"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT
for round in $(seq 1 "$ROUNDS"); do
    printf '==> round %s of %s\n' "$round" "$ROUNDS" >&2
    printf 'round %s: %s\n' "$round" "$(uptime)" >>"$OUT/load"
    rm -rf "$CRITERION"/fields_*
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
    cargo bench --bench throughput --features confluent -- --noplot $BENCH_ARGS 'fields/' >"$OUT/log.$round" 2>&1 || {
        cat "$OUT/log.$round" >&2
        exit 1
    }
    mkdir -p "$OUT/$round"
    cp -r "$CRITERION"/fields_* "$OUT/$round/"
done
printf 'end: %s\n' "$(uptime)" >>"$OUT/load"
python3 - "$OUT" "$ROUNDS" <<'PY'
import json, os, platform, sys
out, rounds = sys.argv[1], int(sys.argv[2])

def fastest(round_, group, bench):
    s = json.load(open(os.path.join(out, str(round_), group, bench, "new", "sample.json")))
    return min(t / n for t, n in zip(s["times"], s["iters"]))

def best(group, bench):
    return min(fastest(r, group, bench) for r in range(1, rounds + 1))

cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
def b_of(f, c, cw, r):
    return ((f - c) / 3) / (r + max(cw - c, 0) / 3)

def spread(xs):
    return f"{min(xs):.2f}-{max(xs):.2f}"

print(open(os.path.join(out, "load")).read())
print(f"CPU: {cpu}; {rounds} rounds; fastest sample of each row (ns per record); spreads are of the per-round ratios\n")
print("| format | direction | fields | derive_proto | whole | codec | codec_wire | raw32 | A = fields/whole (goal <= 3.3) | B per field (goal <= 1.2) | B derive_proto |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
rows = []
for fmt in ["json", "bincode"]:
    for d in ["encrypt", "decrypt"]:
        g = f"fields_{fmt}_{d}"
        f, p, w, c, cw = (best(g, b) for b in ["fields", "derive_proto", "whole", "codec", "codec_wire"])
        r = best("fields_raw32", d)
        a = f / w
        b, bp = b_of(f, c, cw, r), b_of(p, c, cw, r)
        per_a, per_b, per_bp = [], [], []
        for k in range(1, rounds + 1):
            fk, pk, wk, ck, cwk = (fastest(k, g, x) for x in ["fields", "derive_proto", "whole", "codec", "codec_wire"])
            rk = fastest(k, "fields_raw32", d)
            per_a.append(fk / wk)
            per_b.append(b_of(fk, ck, cwk, rk))
            per_bp.append(b_of(pk, ck, cwk, rk))
            rows.append((k, fmt, d, fk, pk, wk, ck, cwk, rk, b_of(fk, ck, cwk, rk), b_of(pk, ck, cwk, rk)))
        print(f"| {fmt} | {d} | {f:.0f} | {p:.0f} | {w:.0f} | {c:.0f} | {cw:.0f} | {r:.0f} | {a:.2f} ({spread(per_a)}) | {b:.2f} ({spread(per_b)}) | {bp:.2f} ({spread(per_bp)}) |")

print("\nEach round (fastest sample of the round, ns per record)\n")
print("| round | format | direction | fields | derive_proto | whole | codec | codec_wire | raw32 | B | B derive_proto |")
print("|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
for k, fmt, d, fk, pk, wk, ck, cwk, rk, bk, bpk in sorted(rows):
    print(f"| {k} | {fmt} | {d} | {fk:.0f} | {pk:.0f} | {wk:.0f} | {ck:.0f} | {cwk:.0f} | {rk:.0f} | {bk:.2f} | {bpk:.2f} |")

print("\nConfluent's format (ConfluentSerde, JSON Schema, AES256_GCM) beside this library's (FieldEncrypting<Json>, whole value), ns per record\n")
print("| direction | Confluent fields | Confluent payload | our fields | our whole value | Confluent fields / our fields |")
print("|---|---:|---:|---:|---:|---:|")
for d in ["encrypt", "decrypt"]:
    cf, cp = best(f"fields_confluent_{d}", "fields"), best(f"fields_confluent_{d}", "payload")
    of, ow = best(f"fields_json_{d}", "fields"), best(f"fields_json_{d}", "whole")
    print(f"| {d} | {cf:.0f} | {cp:.0f} | {of:.0f} | {ow:.0f} | {cf / of:.2f} |")
PY
