#!/usr/bin/env bash
# Runs bench-peers/ (the layer beside tink-aead, tink-daead and the raw
# primitives, one process per round) in alternating rounds and prints the
# ratios: ours / tink-aead on each backend, layer / raw primitive, and
# DeterministicSerializer / tink-daead, per size, for encrypt and decrypt.
#
#   scripts/bench-peers.sh                 # three rounds (about 2 minutes each)
#   ROUNDS=5 scripts/bench-peers.sh
#   BENCH_ARGS='--warm-up-time 1 --measurement-time 3' scripts/bench-peers.sh
#
# Each id's time in a round is its fastest sample (criterion's
# new/sample.json: the least time / iters), which a neighbour's load
# disturbs least. Even rounds run each size's peers in the reverse order
# (PEERS_ORDER=reverse), so a drift within a round favours no side.
# "ratio" is each side's fastest round against the other's; "spread" is the
# least and the greatest of the per-round ratios.
#
# Writes, under target/bench-peers/: table.md (what is printed), peers.csv
# (one row per ratio) and peers.svg (ratio against size, one line per peer).
# The package has its own workspace and lockfile; its first build compiles
# the Tink crates (a few minutes on 2 cores).
set -euo pipefail
cd "$(dirname "$0")/.."

ROUNDS="${ROUNDS:-3}"
BENCH_ARGS="${BENCH_ARGS:---warm-up-time 0.5 --measurement-time 1}"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
OUT=target/bench-peers
export CRITERION_HOME="$PWD/$OUT/criterion"
mkdir -p "$OUT" "$CRITERION_HOME"
SAMPLES="$(mktemp -d)"
trap 'rm -rf "$SAMPLES"' EXIT

GROUPS_=(encrypt decrypt det_encrypt det_decrypt)
(cd bench-peers && cargo bench --bench peers --no-run) >"$SAMPLES/build.log" 2>&1 || {
    cat "$SAMPLES/build.log" >&2
    exit 1
}
for round in $(seq 1 "$ROUNDS"); do
    order=forward
    if ((round % 2 == 0)); then order=reverse; fi
    printf '==> peers round %s of %s (%s)\n' "$round" "$ROUNDS" "$order" >&2
    (cd "$CRITERION_HOME" && rm -rf "${GROUPS_[@]}")
    # shellcheck disable=SC2086 # BENCH_ARGS is a list of words
    (cd bench-peers && PEERS_ORDER="$order" cargo bench --bench peers -- --noplot $BENCH_ARGS) \
        >"$SAMPLES/log.$round" 2>&1 || {
        cat "$SAMPLES/log.$round" >&2
        exit 1
    }
    (cd "$CRITERION_HOME" && find "${GROUPS_[@]}" -path '*/new/sample.json' |
        while read -r f; do
            mkdir -p "$SAMPLES/$round/$(dirname "$f")"
            cp "$f" "$SAMPLES/$round/$f"
        done)
done

MACHINE="$(nproc) cores, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), load $(cut -d' ' -f1-3 /proc/loadavg) at the end; $(rustc --version | cut -d' ' -f1-2)"

python3 - "$SAMPLES" "$ROUNDS" "$OUT" "$MACHINE" <<'PY'
import json, math, os, sys

samples, rounds, out, machine = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
SIZES = [16, 100, 1024, 16384, 65536]
DET_SIZES = [16, 64, 256]

def fastest(rnd, bench_id):
    """The least time per iteration among one round's samples, in ns."""
    path = os.path.join(samples, str(rnd), bench_id, "new", "sample.json")
    try:
        with open(path) as f:
            s = json.load(f)
    except FileNotFoundError:
        return None
    return min(t / n for t, n in zip(s["times"], s["iters"]))

def per_round(bench_id):
    vals = [fastest(r, bench_id) for r in range(1, rounds + 1)]
    return None if None in vals else vals

def compare(a, b):
    """(a's fastest, b's fastest, ratio of the two, least and greatest
    per-round ratio), or None when either id is missing."""
    va, vb = per_round(a), per_round(b)
    if va is None or vb is None:
        return None
    per = [x / y for x, y in zip(va, vb)]
    return min(va), min(vb), min(va) / min(vb), min(per), max(per)

def fmt_time(t):
    if t < 1000:
        return f"{t:.0f} ns"
    return f"{t / 1000:.2f} us"

def size_name(n):
    return f"{n // 1024} KiB" if n >= 1024 else f"{n} B"

# The goals of the [speed] issue: (numerator, denominator) -> goal(size).
def goal(num, den, n):
    if den == "tink_aead" and num == "ours_rustcrypto":
        return 1.00 if n < 1024 else 0.60
    if den == "tink_aead" and num == "ours_aws_lc":
        return 0.35 if n >= 1024 else None
    if den == "tink_daead":
        return 1.00
    return None

COMPARISONS = [
    # (label, numerator, denominator, groups, sizes)
    ("ours (RustCrypto) / tink-aead", "ours_rustcrypto", "tink_aead", ("encrypt", "decrypt"), SIZES),
    ("ours (aws-lc) / tink-aead", "ours_aws_lc", "tink_aead", ("encrypt", "decrypt"), SIZES),
    ("layer / raw aes-gcm (RustCrypto)", "ours_rustcrypto", "raw_aes_gcm", ("encrypt", "decrypt"), SIZES),
    ("layer / raw aws-lc-rs (aws-lc)", "ours_aws_lc", "raw_aws_lc", ("encrypt", "decrypt"), SIZES),
    ("raw aes-gcm / tink-aead", "raw_aes_gcm", "tink_aead", ("encrypt", "decrypt"), SIZES),
    ("raw aws-lc-rs / tink-aead", "raw_aws_lc", "tink_aead", ("encrypt", "decrypt"), SIZES),
    ("DeterministicSerializer / tink-daead", "ours_siv", "tink_daead", ("det_encrypt", "det_decrypt"), DET_SIZES),
]

lines, rows, missed = [], [], []
say = lines.append
say(f"Fastest sample per id per round, {rounds} alternating round(s); "
    "ratio = each side's fastest round, spread = per-round ratios.")
say(f"Machine: {machine}.")
for label, num, den, groups, sizes in COMPARISONS:
    say("")
    say(f"### {label}")
    say("")
    say(f"| size | op | {num} | {den} | ratio | spread | goal |")
    say("|---:|---|---:|---:|---:|---|---|")
    for n in sizes:
        for group in groups:
            c = compare(f"{group}/{num}/{n}", f"{group}/{den}/{n}")
            if c is None:
                continue
            a, b, r, lo, hi = c
            g = goal(num, den, n)
            mark = ""
            if g is not None:
                ok = r <= g
                mark = f"<= {g:.2f} " + ("ok" if ok else "MISS")
                if not ok:
                    missed.append(f"{group} {size_name(n)} {label}: {r:.2f} > {g:.2f}")
            op = group.replace("det_", "")
            say(f"| {size_name(n)} | {op} | {fmt_time(a)} | {fmt_time(b)} | {r:.2f} | "
                f"{lo:.2f}-{hi:.2f} | {mark} |")
            rows.append([label, num, den, op, n, f"{a:.1f}", f"{b:.1f}", f"{r:.4f}",
                         f"{lo:.4f}", f"{hi:.4f}", "" if g is None else f"{g:.2f}"])
say("")
if missed:
    say("Goals missed in this run:")
    for m in missed:
        say(f"- {m}")
else:
    say("All goals met in this run.")

text = "\n".join(lines) + "\n"
sys.stdout.write(text)
with open(os.path.join(out, "table.md"), "w") as f:
    f.write(text)
with open(os.path.join(out, "peers.csv"), "w") as f:
    f.write("comparison,numerator,denominator,op,size_bytes,numerator_ns,denominator_ns,"
            "ratio,ratio_min,ratio_max,goal\n")
    for r in rows:
        f.write(",".join(f'"{x}"' if isinstance(x, str) and " " in x else str(x) for x in r) + "\n")

# The plot: ratio to tink (log size on x), one line per peer, encrypt solid,
# decrypt dashed; the ratio 1 and the goals as grey rules.
W, H, L, R, T, B = 840, 440, 60, 270, 40, 50
PEERS = [("ours_rustcrypto", "tink_aead", "ours, RustCrypto", "#1f77b4"),
         ("ours_aws_lc", "tink_aead", "ours, aws-lc", "#d62728"),
         ("raw_aes_gcm", "tink_aead", "raw aes-gcm", "#9ecae1"),
         ("raw_aws_lc", "tink_aead", "raw aws-lc-rs", "#fcae91"),
         ("ours_siv", "tink_daead", "ours AES-SIV vs tink-daead", "#2ca02c")]
series = []
for num, den, name, colour in PEERS:
    groups = ("det_encrypt", "det_decrypt") if den == "tink_daead" else ("encrypt", "decrypt")
    sizes = DET_SIZES if den == "tink_daead" else SIZES
    for group, dash in zip(groups, ("", "6,4")):
        pts = []
        for n in sizes:
            c = compare(f"{group}/{num}/{n}", f"{group}/{den}/{n}")
            if c is not None:
                pts.append((n, c[2]))
        if pts:
            series.append((f"{name} {group.replace('det_', '')}", colour, dash, pts))
if series:
    ymax = max(1.2, max(r for _, _, _, pts in series for _, r in pts) * 1.1)
    x0, x1 = math.log2(16), math.log2(65536)
    def px(n):
        return L + (math.log2(n) - x0) / (x1 - x0) * (W - L - R)
    def py(r):
        return T + (1 - r / ymax) * (H - T - B)
    svg = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" '
           f'font-family="sans-serif" font-size="12">',
           f'<rect width="{W}" height="{H}" fill="white"/>',
           f'<text x="{L}" y="20" font-size="14">time / Tink\'s time (lower is faster), '
           f'fastest of {rounds} round(s)</text>']
    step = 0.2 if ymax <= 2 else 0.5
    y = 0.0
    while y <= ymax + 1e-9:
        svg.append(f'<line x1="{L}" x2="{W - R}" y1="{py(y):.1f}" y2="{py(y):.1f}" '
                   f'stroke="{"#888" if abs(y - 1) < 1e-9 else "#eee"}"/>')
        svg.append(f'<text x="{L - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
        y += step
    for n in [16, 100, 256, 1024, 16384, 65536]:
        svg.append(f'<text x="{px(n):.1f}" y="{H - B + 16}" text-anchor="middle">'
                   f'{size_name(n)}</text>')
    svg.append(f'<text x="{(L + W - R) / 2}" y="{H - 12}" text-anchor="middle">'
               'value size (log scale)</text>')
    for i, (name, colour, dash, pts) in enumerate(series):
        d = " ".join(f"{px(n):.1f},{py(r):.1f}" for n, r in pts)
        extra = f' stroke-dasharray="{dash}"' if dash else ""
        svg.append(f'<polyline points="{d}" fill="none" stroke="{colour}" '
                   f'stroke-width="2"{extra}/>')
        for n, r in pts:
            svg.append(f'<circle cx="{px(n):.1f}" cy="{py(r):.1f}" r="2.5" fill="{colour}"/>')
        ly = T + 10 + i * 18
        svg.append(f'<line x1="{W - R + 10}" x2="{W - R + 34}" y1="{ly}" y2="{ly}" '
                   f'stroke="{colour}" stroke-width="2"{extra}/>')
        svg.append(f'<text x="{W - R + 40}" y="{ly + 4}">{name}</text>')
    svg.append("</svg>")
    with open(os.path.join(out, "peers.svg"), "w") as f:
        f.write("\n".join(svg) + "\n")
print(f"\nwrote {out}/table.md, {out}/peers.csv, {out}/peers.svg", file=sys.stderr)
PY
