#!/usr/bin/env bash
# Runs the throughput benches briefly and prints the layer's overhead as
# ratios (layer / raw primitive, medians, measured in the same run), per size,
# for encrypt and decrypt, on both backends when the `aws-lc` feature exists.
#
#   scripts/bench.sh                  # three brief runs (about 5 minutes)
#   ROUNDS=5 scripts/bench.sh         # five runs
#   BENCH_ARGS='--measurement-time 5' ROUNDS=1 scripts/bench.sh
#   PEERS=0 scripts/bench.sh          # without the peers' run at the end
#
# Then, unless PEERS=0, it runs scripts/bench-peers.sh (the same ROUNDS and
# BENCH_ARGS): the layer beside Tink's Rust port, the raw primitives in
# place, the envelope key and two threads, whose tables it prints and
# whose plot it writes to target/bench-peers/peers.svg.
#
# Ratios are what matter: absolute times move with whatever else the machine
# runs, but both sides of a ratio are measured back to back, and the median
# of the per-run ratios shrugs off a run disturbed by a neighbour. "ratio"
# uses criterion's median (new/estimates.json); "fastest" is the same ratio
# from the fastest sample of each (new/sample.json), which a neighbour's load
# disturbs less.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 0.5 --measurement-time 1}"
FEATURES=()
if grep -q '^aws-lc *=' Cargo.toml; then
    FEATURES=(--features aws-lc)
fi

CRITERION=target/criterion
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

for round in $(seq 1 "$ROUNDS"); do
    printf '==> bench round %s of %s %s\n' "$round" "$ROUNDS" "${FEATURES[*]:-}" >&2
    # Only this run's results: stale ids (say, from an earlier aws-lc run)
    # must not show up in the table.
    rm -rf "$CRITERION"/{encrypt,decrypt,decrypt_fail,tombstone,typed}
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
    cargo bench --bench throughput "${FEATURES[@]}" -- --noplot $BENCH_ARGS >"$OUT/log.$round" 2>&1 || {
        cat "$OUT/log.$round" >&2
        exit 1
    }
    mkdir -p "$OUT/$round"
    (cd "$CRITERION" && find encrypt decrypt decrypt_fail tombstone typed \
        \( -path '*/new/estimates.json' -o -path '*/new/sample.json' \) 2>/dev/null |
        while read -r f; do
            mkdir -p "$OUT/$round/$(dirname "$f")"
            cp "$f" "$OUT/$round/$f"
        done)
done

python3 - "$OUT" "$ROUNDS" <<'PY'
import json, os, statistics, sys

out, rounds = sys.argv[1], int(sys.argv[2])
SIZES = [0, 64, 1024, 16384, 65536]

def median_ns(rnd, bench_id):
    """Criterion's median point estimate for one id in one round, in ns."""
    path = os.path.join(out, str(rnd), bench_id, "new", "estimates.json")
    try:
        with open(path) as f:
            return json.load(f)["median"]["point_estimate"]
    except FileNotFoundError:
        return None

def fastest_ns(rnd, bench_id):
    """The fastest per-iteration time among criterion's samples, in ns: a
    neighbour on the machine only ever adds time, so this moves less."""
    path = os.path.join(out, str(rnd), bench_id, "new", "sample.json")
    try:
        with open(path) as f:
            s = json.load(f)
    except FileNotFoundError:
        return None
    return min(t / n for t, n in zip(s["times"], s["iters"]))

def per_round(bench_id, est=median_ns):
    vals = [est(r, bench_id) for r in range(1, rounds + 1)]
    return None if None in vals else vals

def ratio(a, b, est=median_ns):
    """Median over rounds of the per-round ratio a / b."""
    va, vb = per_round(a, est), per_round(b, est)
    if va is None or vb is None:
        return None
    return statistics.median(x / y for x, y in zip(va, vb))

def ns(bench_id):
    v = per_round(bench_id)
    return None if v is None else statistics.median(v)

def fmt_time(t):
    if t is None:
        return "-"
    return f"{t:.1f} ns" if t < 1000 else f"{t / 1000:.2f} us"

def fmt_thrpt(n, t):
    if t is None or n == 0:
        return "-"
    return f"{n / t * 1e9 / 2**20:.0f} MiB/s"

def target(n, backend):
    if backend == "aws_lc":
        return 1.10 if n >= 1024 else None
    return {1024: 1.10, 65536: 1.03}.get(n)

missed = []
pairs = [("rustcrypto", "layer", "raw_aes_gcm"), ("aws_lc", "layer_aws_lc", "raw_aws_lc")]
for backend, layer, raw in pairs:
    if per_round(f"encrypt/{layer}/0") is None:
        continue
    print(f"\n{backend}: {layer} / {raw} (median of {rounds} run(s))")
    print(f"{'op':8} {'size':>6} {'layer':>10} {'raw':>10} {'ratio':>6} {'target':>10} "
          f"{'layer thrpt':>12} {'fastest':>8}")
    for op in ("encrypt", "decrypt"):
        for n in SIZES:
            a, b = f"{op}/{layer}/{n}", f"{op}/{raw}/{n}"
            r, t = ratio(a, b), target(n, backend)
            mark = ""
            if r is not None and t is not None:
                mark = f"<={t:.2f}" + (" ok" if r <= t else " MISS")
                if r > t:
                    missed.append(f"{a}: {r:.3f} > {t:.2f}")
            rf = ratio(a, b, fastest_ns)
            print(f"{op:8} {n:>6} {fmt_time(ns(a)):>10} {fmt_time(ns(b)):>10} "
                  f"{'-' if r is None else f'{r:.3f}':>6} {mark:>10} {fmt_thrpt(n, ns(a)):>12} "
                  f"{'-' if rf is None else f'{rf:.3f}':>8}")

print("\nother")
for bench_id in ("tombstone/serialize", "tombstone/deserialize",
                 "decrypt_fail/layer/1024", "decrypt_fail/raw_aes_gcm/1024",
                 "decrypt_fail/layer_aws_lc/1024", "decrypt_fail/raw_aws_lc/1024",
                 "typed/bincode/serialize", "typed/bincode_plain/serialize",
                 "typed/bincode/deserialize", "typed/bincode_plain/deserialize",
                 "encrypt/siv/64", "decrypt/siv/64"):
    print(f"{bench_id:34} {fmt_time(ns(bench_id)):>10}")
for op in ("encrypt", "decrypt"):
    r = ratio(f"{op}/siv/64", f"{op}/layer/64")
    if r is not None:
        print(f"{op}/siv/64 / {op}/layer/64 (AES-SIV key / AES-GCM value): {r:.2f}")
for op in ("encrypt", "decrypt"):
    a, b = f"{op}/envelope/1024", f"{op}/layer/1024"
    r, rf = ratio(a, b), ratio(a, b, fastest_ns)
    if r is not None:
        print(f"{a} / {b} (KMS envelope, warm DEK / AES-GCM key): {r:.2f} "
              f"(fastest samples: {rf:.3f})")
        if r > 1.10:
            missed.append(f"{a} / {b}: {r:.2f} > 1.10")
for bench_id in ("tombstone/serialize", "tombstone/deserialize"):
    t = ns(bench_id)
    if t is not None and t >= 5.0:
        missed.append(f"{bench_id}: {t:.1f} ns >= 5 ns")

if missed:
    print("\ntargets missed in this run (a busy machine moves ratios: rerun, or raise ROUNDS):")
    for m in missed:
        print(f"  {m}")
else:
    print("\nall targets met in this run")
PY

if [[ "${PEERS:-1}" != 0 ]]; then
    echo
    echo "==> beside the peers (scripts/bench-peers.sh)"
    scripts/bench-peers.sh
fi
