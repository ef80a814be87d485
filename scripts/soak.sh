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
#   PARTS=commands scripts/soak.sh           # only the command line at scale
#
# The `writers` part (not in the default PARTS) runs cli/tests/writers_model.rs
# (the write and reading rules through Apache Kafka's log cleaner, started
# by scripts/kafka.sh unless TOMBSTONE_APACHE_KAFKA_BOOTSTRAP names one)
# with E2E_CASES cases (default 1024) instead of the test command's 64; it
# needs no KMS server.
#
# The `commands` part (not in the default PARTS) writes, for each size in
# CMD_SIZES (records:keys:min value bytes:max value bytes; default
# "1000000:100000:100:1024 10000000:1000000:100:100 10000000:100000:100:100",
# the last to show that memory follows keys), a topic of CMD_PARTITIONS (4)
# partitions with examples/soak_topic.rs (one record in 20 a tombstone, one
# in 20 a broken delete) and, for each reader count in READERS ("1 2"),
# runs the release `tombstone-crypt` on its own copy of the topic: `audit`,
# `repair --apply`, then (after a rotation of the values' keyset)
# `reencrypt --apply`; it prints records/s (the topic's records at the
# start over the wall time) and peak RSS (/usr/bin/time), and peak RSS per
# key. Figures go to target/soak-commands.txt too. About 12 minutes on 2
# cores; the broker holds up to about 14 GiB at the 10^7-record sizes.
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
        if [[ -n "$own_broker" ]]; then bash scripts/kafka.sh stop >&2 || true; fi
    }
    trap stop_writers EXIT
    kafka="${TOMBSTONE_APACHE_KAFKA_BOOTSTRAP:-}"
    if [[ -z "$kafka" ]]; then
        own_broker=1
        kafka="$(bash scripts/kafka.sh start | tail -n 1)"
    fi
    log=target/soak-writers.log
    if ! TOMBSTONE_KAFKA_BOOTSTRAP="$kafka" TOMBSTONE_APACHE_KAFKA_BOOTSTRAP="$kafka" \
        TOMBSTONE_E2E_CASES="$E2E_CASES" cargo test -p tombstone-crypt-cli --all-features --test suite \
        -- --test-threads 4 --nocapture writers_model::every_writer >"$log" 2>&1; then
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

if [[ " $PARTS " == *" commands "* ]]; then
    CMD_SIZES="${CMD_SIZES:-1000000:100000:100:1024 10000000:1000000:100:100 10000000:100000:100:100}"
    CMD_PARTITIONS="${CMD_PARTITIONS:-4}"
    READERS="${READERS:-1 2}"
    cargo build --release --example soak_topic --features kafka >&2
    cargo build --release -p tombstone-crypt-cli >&2
    cli=target/release/tombstone-crypt
    gen=target/release/examples/soak_topic
    work="$(mktemp -d)"
    own=""
    stop_commands() {
        rm -rf "$work"
        if [[ -n "$own" ]]; then bash scripts/broker.sh stop >&2 || true; fi
    }
    trap stop_commands EXIT
    if [[ -z "${TOMBSTONE_KAFKA_BOOTSTRAP:-}" ]]; then
        own=1
        TOMBSTONE_KAFKA_BOOTSTRAP="$(bash scripts/broker.sh start | tail -n 1)"
    fi
    boot="$TOMBSTONE_KAFKA_BOOTSTRAP"
    figures=target/soak-commands.txt
    : >"$figures"
    stamp="$(date +%s)-$$"
    timed() { # label records keys command...
        local label="$1" records="$2" keys="$3"
        shift 3
        local t0 t1 code=0
        t0="$(date +%s.%N)"
        /usr/bin/time -f "%M" -o "$work/rss" "$@" >"$work/out.json" 2>"$work/err" || code=$?
        t1="$(date +%s.%N)"
        if ((code > 1)); then
            cat "$work/err" >&2
            echo "$label failed (exit $code)" >&2
            exit 1
        fi
        python3 - "$label" "$records" "$keys" "$t0" "$t1" "$(tail -n 1 "$work/rss")" <<'PY' | tee -a "$figures"
import sys
label, records, keys, t0, t1, rss_kib = sys.argv[1:]
secs = float(t1) - float(t0)
rss = int(rss_kib) * 1024
keys = int(keys)
print(f"{label:<34} {int(records):>9} records {keys:>8} keys {secs:7.1f} s {int(records) / secs:>9.0f} rec/s "
      f"peak RSS {rss / 2**20:6.1f} MiB = 100 MiB + {max(rss - 100 * 2**20, 0) / keys:5.1f} B/key "
      f"({rss / keys:6.1f} B/key in all)")
PY
    }
    for size in $CMD_SIZES; do
        IFS=: read -r records keys min max <<<"$size"
        for readers in $READERS; do
            topic="soak-commands-$records-$keys-$readers-$stamp"
            values="$work/values-$records-$keys-$readers.json"
            "$cli" keyset new --out-keyset "$values" >/dev/null
            echo "writing $topic ($records records over $keys keys, values of $min-$max bytes)" >&2
            "$gen" "$boot" "$topic" "$CMD_PARTITIONS" "$records" "$keys" "$SEED" "$min" "$max" "$values" >&2
            args=(--quiet --json --bootstrap "$boot" --topic "$topic" --keyset "$values" --parallel "$readers")
            live="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["keys"])' < <("$cli" audit "${args[@]}" || true))"
            timed "audit, $readers reader(s)" "$records" "$live" "$cli" audit "${args[@]}"
            timed "repair --apply, $readers reader(s)" "$records" "$live" \
                "$cli" repair "${args[@]}" --apply --null-marker empty --checkpoint "$work/repair.ck"
            "$cli" keyset rotate --keyset "$values" >/dev/null
            now="$(python3 -c 'import json,sys; print(json.load(sys.stdin)["records"])' < <("$cli" audit "${args[@]}" || true))"
            timed "reencrypt --apply, $readers reader(s)" "$now" "$live" \
                "$cli" reencrypt "${args[@]}" --apply --checkpoint "$work/reencrypt.ck"
        done
    done
    echo >&2
    cat "$figures" >&2
    stop_commands
    trap - EXIT
    PARTS="$(printf '%s\n' $PARTS | grep -vx commands | tr '\n' ' ' || true)"
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
