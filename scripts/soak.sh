#!/usr/bin/env bash
# Load through the whole stack against the loopback broker (not part of the
# test command: it takes minutes). Writes RECORDS operations (puts of 100 B
# to 1 KiB values and deletes, over KEYS keys) through
# EncryptedStore<ChangeLoggingStore<MemoryStore, KafkaChangelog>>, restores
# a fresh store from the topic (streamed), checks every key, and prints
# records/s written and restored and peak RSS, with and without encryption
# in the same run, then the restore's peak RSS at a second, smaller size;
# then CLIENT_RECORDS (10^5) values of 1 KiB through TypedProducer and
# TypedConsumer, plain and encrypted, alternating for CLIENT_ROUNDS (3)
# rounds (the medians are compared).
#
#   scripts/soak.sh                          # 10^6 records over 10^5 keys
#   RECORDS=200000 SMALL=50000 scripts/soak.sh
#   PARTS=clients scripts/soak.sh            # only the typed clients
#   PARTS=writers scripts/soak.sh            # only the end-to-end model suite
#
# The `writers` part (not in the default PARTS) runs cli/tests/writers_model.rs
# (the write and reading rules on the compacting broker, built and started
# by scripts/broker.sh) with E2E_CASES cases (default 1024) instead of the
# test command's 64; it needs no KMS server.
#
# Uses TOMBSTONE_KAFKA_BOOTSTRAP when set, else starts scripts/broker.sh
# (and stops it on exit). Memory storage: the broker holds every record.
set -euo pipefail
cd "$(dirname "$0")/.."

RECORDS="${RECORDS:-1000000}"
KEYS="${KEYS:-100000}"
SMALL="${SMALL:-200000}"
SEED="${SEED:-42}"
CLIENT_RECORDS="${CLIENT_RECORDS:-100000}"
CLIENT_ROUNDS="${CLIENT_ROUNDS:-3}"
PARTS="${PARTS:-store clients}"
E2E_CASES="${E2E_CASES:-1024}"

if [[ " $PARTS " == *" writers "* ]]; then
    own_broker=""
    stop_writers() {
        bash scripts/broker.sh stop-compacting >&2 || true
        if [[ -n "$own_broker" ]]; then bash scripts/broker.sh stop >&2 || true; fi
    }
    trap stop_writers EXIT
    memory="${TOMBSTONE_KAFKA_BOOTSTRAP:-}"
    if [[ -z "$memory" ]]; then
        own_broker=1
        memory="$(bash scripts/broker.sh start | tail -n 1)"
    fi
    compacting="$(bash scripts/broker.sh start-compacting | tail -n 1)"
    log=target/soak-writers.log
    if ! TOMBSTONE_KAFKA_BOOTSTRAP="$memory" TOMBSTONE_KAFKA_COMPACTING_BOOTSTRAP="$compacting" \
        TOMBSTONE_E2E_CASES="$E2E_CASES" cargo test --workspace --all-features --test writers_model \
        -- --test-threads 4 --nocapture every_writer >"$log" 2>&1; then
        grep -E "cases in|^test |test result" "$log" >&2
        grep -B2 -A40 "minimal failing input" "$log" >&2 || tail -n 60 "$log" >&2
        echo "the end-to-end suite failed; whole output: $log" >&2
        exit 1
    fi
    grep -E "cases in|^test |test result" "$log" >&2
    stop_writers
    trap - EXIT
    PARTS="$(printf '%s\n' $PARTS | grep -vx writers | tr '\n' ' ' || true)"
    [[ -n "${PARTS// /}" ]] || exit 0
fi

cargo build --release --example soak --features kafka >&2
bin=target/release/examples/soak

work="$(mktemp -d)"
started=""
cleanup() {
    rm -rf "$work"
    if [[ -n "$started" ]]; then bash scripts/broker.sh stop >&2 || true; fi
}
trap cleanup EXIT
if [[ -z "${TOMBSTONE_KAFKA_BOOTSTRAP:-}" ]]; then
    started=1
    TOMBSTONE_KAFKA_BOOTSTRAP="$(bash scripts/broker.sh start | tail -n 1)"
fi
boot="$TOMBSTONE_KAFKA_BOOTSTRAP"
keyset="$work/keyset.json"
out="$work/figures"
stamp="$(date +%s)-$$"

run() { # size mode
    local topic="soak-$2-$1-$stamp"
    "$bin" write "$boot" "$topic" "$1" "$KEYS" "$SEED" "$2" "$keyset" | tee -a "$out"
    "$bin" restore "$boot" "$topic" "$1" "$KEYS" "$SEED" "$2" "$keyset" | tee -a "$out"
}

touch "$out"
if [[ " $PARTS " == *" store "* ]]; then
    run "$RECORDS" plain
    run "$RECORDS" encrypted
    run "$SMALL" encrypted
fi
if [[ " $PARTS " == *" clients "* ]]; then
    for round in $(seq "$CLIENT_ROUNDS"); do
        for mode in plain encrypted; do
            "$bin" clients "$boot" "soak-clients-$mode-$round-$stamp" "$CLIENT_RECORDS" "$KEYS" "$SEED" "$mode" "$keyset" | tee -a "$out"
        done
    done
fi

python3 - "$out" "$RECORDS" "$SMALL" <<'PY'
import statistics
import sys
rows = [dict(kv.split("=") for kv in line.split()) for line in open(sys.argv[1])]
big, small = sys.argv[2], sys.argv[3]
def get(mode, enc, n):
    for r in rows:
        if r["mode"] == mode and r["encrypted"] == enc and r["records"] == n:
            return r
w_plain, w_enc = get("write", "false", big), get("write", "true", big)
print()
if w_plain and w_enc:
    r_plain, r_enc = get("restore", "false", big), get("restore", "true", big)
    r_small = get("restore", "true", small)
    print(f"written  plain {float(w_plain['records_per_s']):>9.0f} rec/s, encrypted {float(w_enc['records_per_s']):>9.0f} rec/s, "
          f"ratio {float(w_enc['records_per_s']) / float(w_plain['records_per_s']):.2f}")
    print(f"restored plain {float(r_plain['records_per_s']):>9.0f} rec/s, encrypted {float(r_enc['records_per_s']):>9.0f} rec/s, "
          f"ratio {float(r_enc['records_per_s']) / float(r_plain['records_per_s']):.2f}")
    print(f"peak RSS write plain {w_plain['peak_rss_mib']} MiB, encrypted {w_enc['peak_rss_mib']} MiB")
    print(f"peak RSS restore plain {r_plain['peak_rss_mib']} MiB, encrypted {r_enc['peak_rss_mib']} MiB "
          f"({big} records); encrypted {r_small['peak_rss_mib']} MiB ({small} records)")
clients = [r for r in rows if r["mode"] == "clients"]
if clients:
    for half in ("produced", "consumed"):
        rate = {enc: [float(r[half + "_per_s"]) for r in clients if r["encrypted"] == enc] for enc in ("false", "true")}
        p, e = statistics.median(rate["false"]), statistics.median(rate["true"])
        print(f"typed clients, 1 KiB values, {half} (median of {len(rate['true'])}): plain {p:.0f} rec/s, "
              f"encrypted {e:.0f} rec/s, ratio {e / p:.2f}")
PY
