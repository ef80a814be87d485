#!/usr/bin/env bash
# The proxy's speed against the broker direct, in one run: produce and
# fetch throughput of 1 KiB records, the latency of single produce requests
# (p50, p99), the proxy's CPU time per MB and its memory per connection
# (proxy/examples/proxy_bench.rs; docs/PERFORMANCE.md, "The proxy").
#
#   scripts/bench-proxy.sh                           # 3 rounds of 100,000 records
#   scripts/bench-proxy.sh --rounds 5 --records 200000
#
# Arguments go to the bench (--records N, --rounds R, --latency N,
# --connections N, --partitions N). Builds the command line and the bench
# in release; the proxy runs as a separate process (`tombstone-crypt
# proxy`). Uses TOMBSTONE_KAFKA_BOOTSTRAP when set, else starts
# scripts/broker.sh (on TOMBSTONE_BROKER_PORT, default 19092) and stops it
# on exit. The broker keeps every record in memory: each round adds about
# 2 x 105 MB at the default size.
set -euo pipefail
cd "$(dirname "$0")/.."

TARGET="${CARGO_TARGET_DIR:-target}"
cargo build --release --locked -p tombstone-crypt-cli >&2
cargo build --release --locked -p tombstone-crypt-proxy --example proxy_bench >&2

bootstrap="${TOMBSTONE_KAFKA_BOOTSTRAP:-}"
own_broker=""
stop_broker() {
    if [[ -n "$own_broker" ]]; then bash scripts/broker.sh stop >&2 || true; fi
}
trap stop_broker EXIT
if [[ -z "$bootstrap" ]]; then
    own_broker=1
    bootstrap="$(bash scripts/broker.sh start | tail -n 1)"
fi

printf 'CPU: %s; %s cores; rustc: %s\n' \
    "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -n 1)" "$(nproc)" "$(rustc --version)"
"$TARGET/release/examples/proxy_bench" "$bootstrap" --proxy-bin "$TARGET/release/tombstone-crypt" "$@"
