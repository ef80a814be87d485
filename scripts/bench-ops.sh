#!/usr/bin/env bash
# What observability costs the value path, at 100 B and 1 KiB, encrypt and
# decrypt, on both backends: the layer / the raw primitive (the same
# bench-peers ids, `benches/peers.rs`) built three ways, in alternating
# rounds of one run:
#
#   off   the library's default build (the counters are always there)
#   on    with the features `metrics` and `tracing` (bench-peers' `ops`)
#   base  (when BASE=<git rev> is given) the library at that revision,
#         built from a worktree under target/: before the counters, say
#
#   scripts/bench-ops.sh                     # off and on, 3 rounds
#   BASE=2b896ef ROUNDS=3 scripts/bench-ops.sh
#
# Each id's time in a round is its fastest sample; a variant's layer / raw
# ratio is its fastest round's layer against its fastest round's raw. The
# table gives each variant's ratios and on / off (and off / base): the
# cost of the features (and of the counters), the raw primitive in each
# build cancelling the machine's drift.
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
BASE="${BASE:-}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 0.5 --measurement-time 1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
FILTER='^(en|de)crypt/(ours_aws_lc|raw_aws_lc|ours_rustcrypto|raw_aes_gcm)/(100|1024)$'
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

VARIANTS=(off on)
declare -A DIR=([off]="$PWD/bench-peers" [on]="$PWD/bench-peers")
declare -A FEATS=([off]="" [on]="--features ops")
if [[ -n "$BASE" ]]; then
    wt="$PWD/target/bench-ops-base"
    if [[ ! -d "$wt" ]]; then
        git worktree add --detach "$wt" "$BASE" >&2
    else
        git -C "$wt" checkout -q --detach "$BASE"
    fi
    VARIANTS+=(base)
    DIR[base]="$wt/bench-peers"
    FEATS[base]=""
fi

run() { # variant round
    local v="$1" r="$2" crit="$OUT/crit.$1.$2"
    # shellcheck disable=SC2086 # FEATS and BENCH_ARGS are lists of words
    (cd "${DIR[$v]}" && CRITERION_HOME="$crit" cargo bench --bench peers ${FEATS[$v]} -- \
        --noplot $BENCH_ARGS "$FILTER") >"$OUT/log.$v.$r" 2>&1 || {
        cat "$OUT/log.$v.$r" >&2
        exit 1
    }
}

for r in $(seq 1 "$ROUNDS"); do
    order=("${VARIANTS[@]}")
    if ((r % 2 == 0)); then
        order=()
        for ((i = ${#VARIANTS[@]} - 1; i >= 0; i--)); do order+=("${VARIANTS[$i]}"); done
    fi
    for v in "${order[@]}"; do
        printf '==> round %s of %s: %s\n' "$r" "$ROUNDS" "$v" >&2
        run "$v" "$r"
    done
done

python3 - "$OUT" "$ROUNDS" "${VARIANTS[@]}" <<'PY'
import json, os, sys
out, rounds, variants = sys.argv[1], int(sys.argv[2]), sys.argv[3:]

def fastest(v, r, bench_id):
    p = os.path.join(out, f"crit.{v}.{r}", bench_id, "new", "sample.json")
    with open(p) as f:
        s = json.load(f)
    return min(t / n for t, n in zip(s["times"], s["iters"]))

def best(v, bench_id):
    return min(fastest(v, r, bench_id) for r in range(1, rounds + 1))

def spread(v, a, b):
    rs = [fastest(v, r, a) / fastest(v, r, b) for r in range(1, rounds + 1)]
    return f"{min(rs):.3f}-{max(rs):.3f}"

print(f"Fastest sample per id, fastest of {rounds} alternating round(s); "
      f"ratio = layer / raw primitive in the same build.")
head = "| backend | op | size | " + " | ".join(f"{v}: layer / raw (spread)" for v in variants)
head += " | on / off |" + (" off / base |" if "base" in variants else "")
print(head)
print("|" + "---|" * (head.count("|") - 1))
worst = 0.0
for backend, ours, raw in (("aws-lc", "ours_aws_lc", "raw_aws_lc"),
                           ("RustCrypto", "ours_rustcrypto", "raw_aes_gcm")):
    for op in ("encrypt", "decrypt"):
        for n in (100, 1024):
            a, b = f"{op}/{ours}/{n}", f"{op}/{raw}/{n}"
            ratio = {v: best(v, a) / best(v, b) for v in variants}
            cells = [f"{ratio[v]:.3f} ({spread(v, a, b)})" for v in variants]
            on_off = ratio["on"] / ratio["off"]
            worst = max(worst, on_off)
            row = f"| {backend} | {op} | {n} B | " + " | ".join(cells) + f" | {on_off:.3f} |"
            if "base" in variants:
                row += f" {ratio['off'] / ratio['base']:.3f} |"
            print(row)
print(f"\nworst on / off: {worst:.3f} (goal <= 1.02)")
PY
