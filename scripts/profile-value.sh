#!/usr/bin/env bash
# Where the time of one small value goes: runs bench-peers' per_value example
# under `perf record` (DWARF call graphs, line tables) for one path, one
# operation and one size, and splits the samples by what costs them (the
# AES key broadcast of the VAES backends, AES-CTR, GHASH, the allocator,
# copies, the RNG, the associated data, the layer itself, ...), by the
# innermost frame (inlined frames included) that names one of them.
#
#   scripts/profile-value.sh                          # ours_rustcrypto, encrypt and decrypt, 100 B
#   scripts/profile-value.sh tink_aead encrypt 100
#   PERF_ITERS=4000000 scripts/profile-value.sh ours_rustcrypto decrypt 16
#
# Also prints allocations per value for every path. Needs perf. The
# profiling build (release with line tables) goes to target/prof, apart
# from the warm release build.
set -euo pipefail
cd "$(dirname "$0")/.."

PEER="${1:-ours_rustcrypto}"
OPS="${2:-encrypt decrypt}"
SIZE="${3:-100}"
ITERS="${PERF_ITERS:-2000000}"
export CARGO_TARGET_DIR="${PROF_TARGET_DIR:-$PWD/target/prof}"
(cd bench-peers && CARGO_PROFILE_RELEASE_DEBUG=line-tables-only \
    cargo build --release --example per_value) >&2
BIN="$CARGO_TARGET_DIR/release/examples/per_value"
OUT="$(mktemp -d)"
trap 'rm -rf "$OUT"' EXIT

"$BIN" allocs "$SIZE"
for op in $OPS; do
    echo
    "$BIN" loop "$op" "$PEER" "$SIZE" "$ITERS"
    perf record -q -o "$OUT/perf.data" --call-graph dwarf -F 4000 -- \
        "$BIN" loop "$op" "$PEER" "$SIZE" "$ITERS" >/dev/null 2>"$OUT/record.log" || {
        cat "$OUT/record.log" >&2
        exit 1
    }
    perf script -i "$OUT/perf.data" -F comm,ip,sym --inline 2>/dev/null |
        python3 -c '
import re, sys

# (bucket, pattern): the innermost frame that matches any pattern decides.
RULES = [
    ("AES round-key broadcast (aes 0.9 VAES, per call)", r"broadcast_keys"),
    ("AES-CTR keystream (aes, ctr)", r"x86_vaes|x86_aes|aes::ni|aes::autodetect|aes::soft|ctr::|ctr_core|cipher::stream|aes::backends"),
    ("GHASH (ghash, polyval)", r"polyval|ghash"),
    ("tink wrapper (prefix, primitive set, IV vec)", r"tink_"),
    ("aes-gcm mode glue (init_ctr, compute_tag, tag compare)", r"^<?aes_gcm::|AesGcm<Aes|ctutils|ConstantTimeEq|subtle::Choice"),
    ("aws-lc", r"aws_lc|aws-lc|EVP_|CRYPTO_|aes_gcm_enc|aes_gcm_dec|gcm_|aesni_|aes_hw_"),
    ("RNG (nonce)", r"rand::|rand_core|rand_chacha|chacha|ThreadRng|ReseedingCore|getrandom"),
    ("allocator (malloc, free)", r"malloc|free|_int_|__rust_alloc|__rust_dealloc|__rust_realloc|realloc|alloc::alloc|RawVec|finish_grow|tcache"),
    ("copies and fills (memcpy, memmove, memset)", r"__mem|memcpy|memmove|memset"),
    ("an Error built and dropped on the success path (ok_or)", r"drop_in_place<tombstone_crypt::error::Error>"),
    ("associated data (AadBuf, the context)", r"AadBuf|encode_aad|aad_layout|copy_short|context::"),
    ("keyset lookup, prefix parse", r"parse_prefix|decrypting_key|primary_key|primary_entry|min_ciphertext_len|Keys for"),
    ("the layer (header, buffer, dispatch, errors)", r"tombstone_crypt"),
    ("bench loop", r"per_value::|black_box"),
]
counts, total = {}, 0

def classify(frames):
    for group in frames:
        for name in group:
            for bucket, pat in RULES:
                if re.search(pat, name):
                    return bucket
    return "other (" + (frames[0][0] if frames and frames[0] else "?") + ")"

def flush(frames):
    global total
    if not frames:
        return
    total += 1
    b = classify(frames)
    counts[b] = counts.get(b, 0) + 1

frames, last_ip = [], None
for line in sys.stdin:
    line = line.rstrip("\n")
    if not line.strip():
        flush(frames)
        frames, last_ip = [], None
        continue
    if not line.startswith("\t") and not line.startswith(" "):
        flush(frames)
        frames, last_ip = [], None
        continue
    parts = line.strip().split(None, 1)
    if len(parts) < 2:
        continue
    ip, name = parts
    if ip == last_ip and frames:
        frames[-1].append(name)
    else:
        frames.append([name])
        last_ip = ip
flush(frames)
print(f"{total} samples")
for b, n in sorted(counts.items(), key=lambda kv: -kv[1]):
    if n / total >= 0.005:
        print(f"  {100 * n / total:5.1f}%  {b}")
'
done
