#!/usr/bin/env bash
# Start, stop or query a throwaway Apache Kafka broker (Kafka's own broker,
# kafka_2.13 4.4.0 from scripts/kafka/pom.xml) on loopback: one combined KRaft
# node (process.roles=broker,controller), for tests that need real Kafka
# behaviour (log compaction, tombstone removal, transactions, share groups).
#
#   scripts/kafka.sh start      -> last stdout line is the bootstrap address, 127.0.0.1:PORT
#   scripts/kafka.sh restart    -> starts the broker again on the same data (after `stop`):
#                                  its topics and records are kept
#   scripts/kafka.sh stop       -> stops the broker started by `start` and waits for
#                                  the JVM to exit (idempotent)
#   scripts/kafka.sh status     -> exit 0 if that broker is running and accepting connections
#   scripts/kafka.sh classpath  -> resolves (or reuses) the broker's classpath, prints its file last
#   scripts/kafka.sh selfcheck  -> runs scripts/kafka/selfcheck.py against the running
#                                  broker (compaction, tombstone removal, transactions,
#                                  a share group);
#                                  needs the venv of scripts/tink-venv.sh
#
# Environment:
#   TOMBSTONE_APACHE_KAFKA_PORT             PLAINTEXT port on 127.0.0.1 (default 19292)
#   TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT  KRaft CONTROLLER port on 127.0.0.1 (default 19293)
#   TOMBSTONE_APACHE_KAFKA_START_TIMEOUT    seconds to wait for the broker to answer (default 90)
#   TOMBSTONE_APACHE_KAFKA_HEAP             the JVM's -Xms and -Xmx (default 256m; see below)
#   TOMBSTONE_APACHE_KAFKA_DIR              the instance's directory (default target/kafka):
#                                           a test's broker of its own uses another one
#   TOMBSTONE_APACHE_KAFKA_ADVERTISED       the PLAINTEXT address advertised to clients,
#                                           host:port (default 127.0.0.1:PORT; a test puts
#                                           a TLS forwarder there)
#   TOMBSTONE_APACHE_KAFKA_SASL_SSL_PORT    also a SASL_SSL listener on 127.0.0.1 at this port:
#                                           TLS with a CA made at start (INSTANCE/tls/ca.pem),
#                                           SASL PLAIN and SCRAM-SHA-256/512 for the user
#                                           "tombstone" with the password in INSTANCE/tls/password
#   TOMBSTONE_VENV                          the venv for `selfcheck` (default target/venv)
#
# Each `start` is a new, empty cluster: target/kafka/data is wiped and
# formatted (kafka.tools.StorageTool format --standalone, a fresh random
# cluster id, the default feature levels of 4.4-IV2: share.version=2, so share
# groups are on without any setting; transaction.version=2). A broker this
# script already runs is stopped first.
#
# Files (all under the instance's directory; the classpath's under target/kafka/):
#   server.properties  generated at each start     server.log  the broker's log4j2 log (INFO)
#   data/              log.dirs and metadata log   format.log  the format step's log
#   kafka.pid          the JVM's pid               kafka.out   the JVM's own stdout/stderr
#   kafka.port         the PLAINTEXT port          classpath.txt, classpath.key  the resolved
#                                                  runtime classpath and the pom's sha256
# Jars: resolved by Maven (`mvn -B -q -C`, strict checksums) into target/m2,
# once: classpath.txt is reused while scripts/kafka/pom.xml keeps its sha256
# and every jar it names still exists. Everything except the final address
# goes to stderr.
#
# Broker settings for tests: replication factor 1 and min.isr 1 for the
# internal topics (offsets, transactions, share-group state), each with a
# single partition (50 by default, made on first use); no initial rebalance
# delay; consumer (KIP-848) and share groups that heartbeat every second and
# assign at once (the defaults: 5 s, batched each second); auto-created topics
# with 1 partition; a log cleaner that looks for work every 200 ms
# (log.cleaner.backoff.ms) with an 8 MiB dedupe buffer (the default 128 MiB is
# taken from the heap at start-up; 8 MiB maps ~300k keys per pass), retention
# checks every 500 ms and cleaned-away files deleted after 100 ms.
#
# Compaction, as scripts/kafka/selfcheck.py sees it (topic with segment.ms=100,
# min.cleanable.dirty.ratio=0.01, delete.retention.ms=1000,
# min.compaction.lag.ms=0):
# - Only closed segments are cleaned, and a segment closes (rolls) only when a
#   record is appended after segment.ms: records followed by no later write to
#   their partition are never compacted (seen: 6 s, nothing changed).
# - With a write every ~200 ms: the older values of a key are gone ~0.5 s
#   after the tombstone is acknowledged (roll, then the cleaner within 200 ms);
#   the tombstone is kept delete.retention.ms from that first cleaning and
#   removed by the next cleaning after that, ~1.6 s after it was written.
#   That later cleaning also needs a new roll: with no more writes the
#   tombstone stays.
# - The log start offset does not move: a compacted partition has gaps.
#
# Figures on this 2-core machine (Java 17.0.15, Maven 3.8.7):
# - First start, target/m2 empty: Maven resolves 45 jars (42.5 MB; 67 MB in
#   target/m2 with poms, checksums and the dependency plugin) in 6-8 s; 13 s in all.
# - Later starts: 4.7-5.0 s from `start` to the Metadata answer (format JVM
#   ~1.7 s, then the broker); `stop` takes 1.5-2.5 s.
# - Heap: the live set after the self-check is ~47 MB (after a full GC, the
#   8 MiB dedupe buffer included); the self-check also passes with 128m.
#   256m leaves 5x that. RSS: ~200 MB after start, ~230-240 MB after the
#   self-check, nearly the same at 128m, 256m and 512m (G1 touches only the
#   regions it uses).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

KAFKA_VERSION="4.4.0"
POM="scripts/kafka/pom.xml"
LOG4J_CONF="$ROOT/scripts/kafka/log4j2.properties"
SELFCHECK="scripts/kafka/selfcheck.py"
DIR="target/kafka"
INSTANCE="${TOMBSTONE_APACHE_KAFKA_DIR:-$DIR}"
[[ "$INSTANCE" == /* ]] || INSTANCE="$ROOT/$INSTANCE"
DATA="$INSTANCE/data"
PROPS="$INSTANCE/server.properties"
LOG="$INSTANCE/server.log"
FORMAT_LOG="$INSTANCE/format.log"
OUT="$INSTANCE/kafka.out"
PIDFILE="$INSTANCE/kafka.pid"
PORTFILE="$INSTANCE/kafka.port"
CP_FILE="$DIR/classpath.txt"
CP_KEY="$DIR/classpath.key"
M2="$ROOT/target/m2"
HOST="127.0.0.1"
PORT="${TOMBSTONE_APACHE_KAFKA_PORT:-19292}"
CONTROLLER_PORT="${TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT:-19293}"
START_TIMEOUT="${TOMBSTONE_APACHE_KAFKA_START_TIMEOUT:-90}"
HEAP="${TOMBSTONE_APACHE_KAFKA_HEAP:-256m}"
ADVERTISED="${TOMBSTONE_APACHE_KAFKA_ADVERTISED:-$HOST:$PORT}"
SASL_SSL_PORT="${TOMBSTONE_APACHE_KAFKA_SASL_SSL_PORT:-}"
TLS_DIR="$INSTANCE/tls"
SASL_USER="tombstone"
NODE_ID=1

log() { printf 'kafka: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

usage() {
  echo "usage: scripts/kafka.sh start|restart|stop|status|classpath|selfcheck" >&2
  exit 2
}

now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

valid_port() { [[ "$1" =~ ^[1-9][0-9]{0,4}$ ]] && (( $1 <= 65535 )); }

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# True when the broker on 127.0.0.1:$PORT answers a Metadata (v4) request for
# no topics with a broker list that holds itself at its advertised address
# ($ADVERTISED), proof that
# it has caught up with the metadata log and been unfenced. (In 4.4 the
# listener opens at that point too, but an open port alone proves less.)
metadata_ok() {
  local hex
  # Request: length 24, api key 3 (Metadata), version 4, correlation id 42,
  # client id "tombstone"; body: an empty topic array, no auto-creation.
  # The response's length prefix is read first, then exactly that many bytes.
  # shellcheck disable=SC2016 # the inner script expands its own arguments
  hex="$(timeout 3 bash -c '
      exec 3<>"/dev/tcp/$1/$2"
      printf "\x00\x00\x00\x18\x00\x03\x00\x04\x00\x00\x00\x2a\x00\x09tombstone\x00\x00\x00\x00\x00" >&3
      n="$(dd bs=4 count=1 iflag=fullblock status=none <&3 | od -An -v -tu1 \
        | awk "NF == 4 {print \$1 * 16777216 + \$2 * 65536 + \$3 * 256 + \$4}")"
      [[ "$n" =~ ^[0-9]+$ ]] && (( n >= 24 && n < 1048576 )) || exit 1
      dd bs="$n" count=1 iflag=fullblock status=none <&3 | od -An -v -tx1
    ' _ "$HOST" "$PORT" 2>/dev/null | tr -d ' \n')" || return 1
  # The body in hex: correlation id, throttle time, broker count (4 bytes
  # each), then the first broker: node id (4), host (2-byte length + bytes),
  # port (4).
  local ahost="${ADVERTISED%:*}" aport="${ADVERTISED##*:}"
  local hlen=$(( ${#ahost} * 2 )) host_hex
  host_hex="$(printf '%s' "$ahost" | od -An -v -tx1 | tr -d ' \n')"
  (( ${#hex} >= 44 + hlen )) || return 1
  [[ "${hex:0:8}" == 0000002a ]] || return 1
  (( 16#${hex:16:8} >= 1 )) || return 1
  [[ "${hex:32:4}" == "$(printf '%04x' "${#ahost}")" ]] || return 1
  [[ "${hex:36:hlen}" == "$host_hex" ]] || return 1
  [[ "${hex:36+hlen:8}" == "$(printf '%08x' "$aport")" ]]
}

# Prints the PID from the pid file if that process is alive and is this
# script's broker (a java process running kafka.Kafka on our properties file).
running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(tr -dc '0-9' <"$PIDFILE")"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  case "$(ps -p "$pid" -o args= 2>/dev/null || true)" in
    *"kafka.Kafka $PROPS"*) printf '%s\n' "$pid" ;;
    *) return 1 ;;
  esac
}

check_java() {
  command -v java >/dev/null || die "java not found: the Kafka $KAFKA_VERSION broker needs Java 17 or newer"
  local v major
  v="$(java -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1)"
  major="${v%%[.-]*}"
  if ! [[ "$major" =~ ^[0-9]+$ ]] || (( major < 17 )); then
    die "java reports version '${v:-?}': the Kafka $KAFKA_VERSION broker needs Java 17 or newer"
  fi
}

# Prints the path of the runtime classpath file, resolving it with Maven when
# the pom changed since the last resolution or a jar it names is gone.
resolve_classpath() {
  mkdir -p "$DIR"
  local key
  key="$(sha256sum "$POM" | cut -d' ' -f1)"
  # One resolution at a time; a second caller waits, then reuses the result.
  exec 8>"$DIR/resolve.lock"
  flock 8
  if ! classpath_fresh "$key"; then
    command -v mvn >/dev/null || die "mvn not found: it resolves the broker's jars"
    local tmp="$CP_FILE.tmp.$$" start before after
    rm -f "$tmp" "$CP_KEY"
    start="$(now_ms)"
    before="$(du -sm "$M2" 2>/dev/null | cut -f1 || true)"
    log "resolving kafka_2.13 $KAFKA_VERSION and its dependencies with Maven into target/m2"
    # -C: fail on a checksum mismatch instead of warning. Maven's output goes
    # to stderr, less the bare ANSI resets that Maven 3.8 prints even with -B -q.
    if ! mvn -B -q -C -Dmaven.repo.local="$M2" -f "$POM" \
        dependency:build-classpath -Dmdep.includeScope=runtime \
        -Dmdep.outputFile="$ROOT/$tmp" 2>&1 | sed 's/\x1b\[0m//g' >&2; then
      rm -f "$tmp"
      die "mvn could not resolve $POM"
    fi
    [[ -s "$tmp" ]] || { rm -f "$tmp"; die "mvn wrote an empty classpath"; }
    mv "$tmp" "$CP_FILE"
    echo "$key" >"$CP_KEY"
    after="$(du -sm "$M2" 2>/dev/null | cut -f1 || true)"
    log "classpath resolved in $(( $(now_ms) - start )) ms (target/m2: ${before:-0} -> ${after:-?} MB)"
  fi
  flock -u 8
  exec 8>&-
  printf '%s\n' "$ROOT/$CP_FILE"
}

classpath_fresh() {
  [[ -s "$CP_FILE" && -f "$CP_KEY" && "$(cat "$CP_KEY")" == "$1" ]] || return 1
  local jar jars
  IFS=: read -r -a jars <"$CP_FILE"
  for jar in "${jars[@]}"; do
    [[ -f "$jar" ]] || return 1
  done
}

# A random cluster id: 16 bytes, base64url without padding, as Kafka's Uuid
# prints it; one that starts with '-' would read as an option, so draw again.
cluster_id() {
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" == -* ]] || break
  done
  printf '%s\n' "$id"
}

write_properties() {
  cat >"$PROPS" <<EOF
# Generated by scripts/kafka.sh at each start; edits are lost.
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.bootstrap.servers=$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT${SASL_SSL_PORT:+,SASL_SSL://$HOST:$SASL_SSL_PORT}
advertised.listeners=PLAINTEXT://$ADVERTISED,CONTROLLER://$HOST:$CONTROLLER_PORT${SASL_SSL_PORT:+,SASL_SSL://$HOST:$SASL_SSL_PORT}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA

# One node: every internal topic with replication factor 1, min.isr 1, and a
# single partition.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
share.coordinator.state.topic.num.partitions=1
# A transaction open past its producer's transaction.timeout.ms is aborted
# (and its producer fenced) within a second, not ten.
transaction.abort.timed.out.transaction.cleanup.interval.ms=1000
default.replication.factor=1
min.insync.replicas=1

group.initial.rebalance.delay.ms=0
# Consumer (KIP-848) and share (KIP-932) groups: heartbeats every second and
# assignments computed at once, not every 5 s and batched each second.
group.consumer.min.heartbeat.interval.ms=1000
group.consumer.heartbeat.interval.ms=1000
group.consumer.assignment.interval.ms=0
group.share.min.heartbeat.interval.ms=1000
group.share.heartbeat.interval.ms=1000
group.share.assignment.interval.ms=0
auto.create.topics.enable=true
num.partitions=1

# A log cleaner that acts within seconds once a topic sets segment.ms,
# min.cleanable.dirty.ratio, delete.retention.ms and min.compaction.lag.ms.
log.cleaner.enable=true
log.cleaner.threads=1
log.cleaner.backoff.ms=200
log.cleaner.dedupe.buffer.size=8388608
log.retention.check.interval.ms=500
log.segment.delete.delay.ms=100
log.initial.task.delay.ms=0
EOF
  if [[ -n "$SASL_SSL_PORT" ]]; then
    local password
    password="$(cat "$TLS_DIR/password")"
    cat >>"$PROPS" <<EOF

# The SASL_SSL listener: TLS with the key and chain of $TLS_DIR, SASL PLAIN
# and SCRAM for the user $SASL_USER (SCRAM's credentials are stored at format).
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512
listener.name.sasl_ssl.ssl.keystore.type=PEM
listener.name.sasl_ssl.ssl.keystore.location=$TLS_DIR/server.pem
listener.name.sasl_ssl.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required user_$SASL_USER="$password";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;
EOF
  fi
}

# A CA and a server certificate for 127.0.0.1 and localhost (the key and
# chain in one PEM file, as the broker's PEM key store takes them), and a
# random password for the SASL user; made once per instance directory.
make_tls() {
  [[ -s "$TLS_DIR/server.pem" && -s "$TLS_DIR/password" ]] && return 0
  command -v openssl >/dev/null || die "openssl not found: the SASL_SSL listener's certificates need it"
  mkdir -p "$TLS_DIR"
  chmod 700 "$TLS_DIR"
  (
    cd "$TLS_DIR"
    openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 2 \
      -subj /CN=tombstone-test-ca -keyout ca.key -out ca.pem 2>/dev/null
    openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes \
      -subj /CN=127.0.0.1 -keyout server.key -out server.csr 2>/dev/null
    printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\n' >san.ext
    openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 \
      -extfile san.ext -out server.crt 2>/dev/null
    openssl pkcs8 -topk8 -nocrypt -in server.key -out server.pk8
    cat server.pk8 server.crt ca.pem >server.pem
    head -c 18 /dev/urandom | base64 | tr '+/' '-_' >password
    rm -f server.csr san.ext ca.srl
  ) || die "making the SASL_SSL listener's certificates failed"
}

# TERM, then KILL after $2 s; fails only if the process survives KILL.
kill_pid() {
  local pid="$1" grace="$2" i
  kill -TERM "$pid" 2>/dev/null || true
  for (( i = 0; i < grace * 10; i++ )); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  log "pid $pid ignored TERM for ${grace}s; sending KILL"
  kill -KILL "$pid" 2>/dev/null || true
  for (( i = 0; i < 50; i++ )); do
    kill -0 "$pid" 2>/dev/null || return 0
    sleep 0.1
  done
  return 1
}

# $1: "keep" starts on the data of the last start (after a stop) instead of
# a new cluster.
cmd_start() {
  local keep="${1:-}"
  valid_port "$PORT" || die "bad TOMBSTONE_APACHE_KAFKA_PORT: $PORT"
  valid_port "${ADVERTISED##*:}" && [[ "$ADVERTISED" == *:* ]] \
    || die "bad TOMBSTONE_APACHE_KAFKA_ADVERTISED: $ADVERTISED (want host:port)"
  valid_port "$CONTROLLER_PORT" || die "bad TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT: $CONTROLLER_PORT"
  [[ "$PORT" != "$CONTROLLER_PORT" ]] || die "the broker and controller ports must differ (both $PORT)"
  [[ "$START_TIMEOUT" =~ ^[1-9][0-9]*$ ]] || die "bad TOMBSTONE_APACHE_KAFKA_START_TIMEOUT: $START_TIMEOUT"
  [[ "$HEAP" =~ ^[1-9][0-9]*[kKmMgG]$ ]] || die "bad TOMBSTONE_APACHE_KAFKA_HEAP: $HEAP (want e.g. 256m or 1g)"

  local pid
  if pid="$(running_pid)"; then
    log "a broker is already running (pid $pid); stopping it: each start is a new cluster"
    kill_pid "$pid" 30 || die "pid $pid still alive after KILL"
  fi
  rm -f "$PIDFILE" "$PORTFILE"
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_open "$p"; then
      die "$HOST:$p is already in use by another process; set TOMBSTONE_APACHE_KAFKA_PORT / _CONTROLLER_PORT"
    fi
  done

  check_java
  local cp_file cp start_ms
  cp_file="$(resolve_classpath)"
  cp="$(cat "$cp_file")"
  start_ms="$(now_ms)"

  if [[ -n "$SASL_SSL_PORT" ]]; then
    valid_port "$SASL_SSL_PORT" || die "bad TOMBSTONE_APACHE_KAFKA_SASL_SSL_PORT: $SASL_SSL_PORT"
    make_tls
  fi
  local id
  if [[ "$keep" == keep ]]; then
    [[ -f "$DATA/meta.properties" ]] || die "no data in $DATA to start again on; use start"
    id="$(sed -n 's/^cluster.id=//p' "$DATA/meta.properties")"
    write_properties
  else
  rm -rf "$DATA"
  mkdir -p "$DATA"
  write_properties
  id="$(cluster_id)"
  local scram=()
  if [[ -n "$SASL_SSL_PORT" ]]; then
    local password
    password="$(cat "$TLS_DIR/password")"
    scram=(--add-scram "SCRAM-SHA-256=[name=$SASL_USER,password=$password]"
      --add-scram "SCRAM-SHA-512=[name=$SASL_USER,password=$password]")
  fi
  # The format step is a short-lived JVM: a small heap and the C1 compiler
  # only start it faster.
  if ! java -Xmx128m -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$LOG4J_CONF" -Dtombstone.kafka.log="$FORMAT_LOG" \
      -cp "$cp" kafka.tools.StorageTool format --standalone \
      --cluster-id "$id" --config "$PROPS" "${scram[@]}" >&2 </dev/null; then
    die "formatting $DATA failed; see $FORMAT_LOG"
  fi
  fi

  : >"$LOG"
  : >"$OUT"
  # No GC log (the JVM writes none unless -Xlog:gc is given) and no JMX
  # port. setsid detaches the JVM from the caller's process group and
  # session so it outlives this script and its terminal.
  setsid java -Xms"$HEAP" -Xmx"$HEAP" -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
      -XX:+ExplicitGCInvokesConcurrent -Djava.awt.headless=true \
      -Dlog4j2.configurationFile="$LOG4J_CONF" -Dtombstone.kafka.log="$LOG" \
      -cp "$cp" kafka.Kafka "$PROPS" >>"$OUT" 2>&1 </dev/null &
  pid=$!
  echo "$pid" >"$PIDFILE"
  echo "$PORT" >"$PORTFILE"

  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "the broker exited during start-up; last lines of $OUT and $LOG:"
      tail -n 20 "$OUT" >&2 || true
      tail -n 40 "$LOG" >&2 || true
      rm -f "$PIDFILE" "$PORTFILE"
      exit 1
    fi
    if port_open "$PORT" && metadata_ok; then
      break
    fi
    if (( $(date +%s) >= deadline )); then
      log "no Metadata answer on $HOST:$PORT after ${START_TIMEOUT}s; last lines of $LOG:"
      tail -n 40 "$LOG" >&2 || true
      kill_pid "$pid" 5 || log "pid $pid still alive after KILL"
      rm -f "$PIDFILE" "$PORTFILE"
      exit 1
    fi
    sleep 0.1
  done
  log "Apache Kafka $KAFKA_VERSION up (pid $pid, cluster $id, heap $HEAP) in $(( $(now_ms) - start_ms )) ms; log: $LOG"
  echo "$HOST:$PORT"
}

cmd_stop() {
  local pid
  if pid="$(running_pid)"; then
    local t0
    t0="$(now_ms)"
    # A combined node shuts down its broker, then its controller, in a few
    # seconds; 30 s before KILL is ample.
    kill_pid "$pid" 30 || die "pid $pid still alive after KILL"
    log "stopped (pid $pid) in $(( $(now_ms) - t0 )) ms"
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

cmd_selfcheck() {
  local pid port venv
  pid="$(running_pid)" || die "not running; run scripts/kafka.sh start first"
  port="$(cat "$PORTFILE" 2>/dev/null || echo "$PORT")"
  venv="${TOMBSTONE_VENV:-target/venv}"
  [[ -x "$venv/bin/python" ]] || die "no $venv/bin/python; run scripts/tink-venv.sh first"
  "$venv/bin/python" "$SELFCHECK" "$HOST:$port" >&2
  log "self-check passed; broker RSS now $(ps -p "$pid" -o rss= | tr -d ' ') KiB"
}

[[ $# -eq 1 ]] || usage
case "$1" in
  start) cmd_start ;;
  restart) cmd_start keep ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  classpath) check_java; resolve_classpath ;;
  selfcheck) cmd_selfcheck ;;
  *) usage ;;
esac
