#!/usr/bin/env bash
# The proxy's speed against the broker direct, and beside other proxies, in
# one run: produce and fetch throughput of 1 KiB records, the latency of
# single produce requests (p50, p99), each proxy's CPU time per MB and its
# memory per connection (proxy/examples/proxy_bench.rs; docs/PERFORMANCE.md,
# "The proxy").
#
#   scripts/bench-proxy.sh                           # 3 rounds of 100,000 records
#   scripts/bench-proxy.sh --rounds 5 --records 200000
#   scripts/bench-proxy.sh --apache-kafka --rounds 5 # on Apache Kafka 4.4.0
#   scripts/bench-proxy.sh --apache-kafka --other-proxy NAME=127.0.0.1:PORT,PID
#   scripts/bench-proxy.sh --apache-kafka --forward-only
#
# --apache-kafka runs the bench on a broker of its own from scripts/kafka.sh
# (Apache Kafka 4.4.0, one KRaft node, its log on disk under
# target/kafka-bench/, 127.0.0.1:20210 and controller port 20211, a 512 MiB
# heap), with the proxy listening at 127.0.0.1:20200 (node 1 at 20202); the
# broker is stopped and its data removed on exit. Without it, the bench
# uses TOMBSTONE_KAFKA_BOOTSTRAP when set, else starts scripts/broker.sh
# (tansu, memory engine, on TOMBSTONE_BROKER_PORT, default 19092), which
# keeps every record in memory: each round adds about 2 x 105 MB at the
# default size.
#
# --other-proxy NAME=ADDR[,PID] (repeatable): another proxy, started by the
# caller in front of the same broker (with --apache-kafka, 127.0.0.1:20210),
# that encrypts the topics named bench-*; clients bootstrap at ADDR. With
# PID, its CPU time and resident memory are read from /proc/PID. It is
# measured in the same rounds, in a rotating order.
#
# --forward-only: beside the bench's proxy, the same binary with a policy
# that covers none of the bench's topics (only topics named nothing-*), at
# 127.0.0.1:20300, measured as the other proxy "forward-only": what framing
# and forwarding cost, without the record path (stopped on exit). The
# bench's CPU goal line against it does not apply: it encrypts nothing.
#
# --values-only: the bench's proxy encrypts the values alone (no key
# keyset), as a proxy that leaves keys as they are does: to set it beside
# one such in the same rounds.
#
# Other arguments go to the bench (--records N, --rounds R, --latency N,
# --connections N, --partitions N, --values-only, --warm-up N: records each
# side produces and fetches once, untimed, before the rounds). Builds the command line and the bench
# in release; this project's proxy runs as a separate process
# (`tombstone-crypt proxy`).
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-target}"
KAFKA_DIR="target/kafka-bench"
KAFKA_PORT=20210
KAFKA_CONTROLLER_PORT=20211
PROXY_PORT=20200
FORWARD_ONLY_PORT=20300

apache_kafka=""
forward_only=""
bench_args=()
for arg in "$@"; do
    case "$arg" in
        --apache-kafka) apache_kafka=1 ;;
        --forward-only) forward_only=1 ;;
        *) bench_args+=("$arg") ;;
    esac
done

cargo build --release --locked -p tombstone-crypt-cli >&2
cargo build --release --locked -p tombstone-crypt-proxy --example proxy_bench >&2

kafka() {
    TOMBSTONE_APACHE_KAFKA_DIR="$KAFKA_DIR" TOMBSTONE_APACHE_KAFKA_PORT="$KAFKA_PORT" \
        TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT="$KAFKA_CONTROLLER_PORT" \
        TOMBSTONE_APACHE_KAFKA_HEAP=512m bash scripts/kafka.sh "$1"
}

bootstrap="${TOMBSTONE_KAFKA_BOOTSTRAP:-}"
own_broker=""
forward_pid=""
stop_broker() {
    if [[ -n "$forward_pid" ]]; then
        kill "$forward_pid" 2>/dev/null || true
        wait "$forward_pid" 2>/dev/null || true
    fi
    case "$own_broker" in
        tansu) bash scripts/broker.sh stop >&2 || true ;;
        apache-kafka)
            kafka stop >&2 || true
            rm -rf "$KAFKA_DIR/data"
            ;;
    esac
}
trap stop_broker EXIT
proxy_args=()
if [[ -n "$apache_kafka" ]]; then
    own_broker=apache-kafka
    bootstrap="$(kafka start | tail -n 1)"
    proxy_args=(--proxy-port "$PROXY_PORT")
    broker="Apache Kafka 4.4.0 (scripts/kafka.sh, $(java -version 2>&1 | head -n 1))"
elif [[ -z "$bootstrap" ]]; then
    own_broker=tansu
    bootstrap="$(bash scripts/broker.sh start | tail -n 1)"
    broker="tansu (scripts/broker.sh)"
else
    broker="TOMBSTONE_KAFKA_BOOTSTRAP"
fi

if [[ -n "$forward_only" ]]; then
    dir="target/bench-forward-only"
    rm -rf "$dir"
    mkdir -p "$dir"
    "$TARGET/release/tombstone-crypt" keyset new --out-keyset "$dir/values.json" >/dev/null
    cat >"$dir/proxy.json" <<JSON
{"listen": "127.0.0.1:$FORWARD_ONLY_PORT", "bootstrap": "$bootstrap",
 "topics": [{"prefix": "nothing-", "value_keyset": "values.json"}]}
JSON
    "$TARGET/release/tombstone-crypt" proxy --config "$dir/proxy.json" >"$dir/log" 2>&1 &
    forward_pid=$!
    listening=""
    for _ in $(seq 100); do
        if (exec 3<>"/dev/tcp/127.0.0.1/$FORWARD_ONLY_PORT") 2>/dev/null; then
            listening=1
            break
        fi
        sleep 0.1
    done
    if [[ -z "$listening" ]]; then
        echo "the forward-only proxy did not listen: $(cat "$dir/log")" >&2
        exit 1
    fi
    bench_args+=(--other-proxy "forward-only=127.0.0.1:$FORWARD_ONLY_PORT,$forward_pid")
fi

printf 'CPU: %s; %s cores; rustc: %s; broker: %s\n' \
    "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)" "$(nproc)" "$(rustc --version)" "$broker"
"$TARGET/release/examples/proxy_bench" "$bootstrap" --proxy-bin "$TARGET/release/tombstone-crypt" \
    "${proxy_args[@]}" "${bench_args[@]}"
