#!/usr/bin/env bash
# The report's scenario in Kafka Streams (examples/streams/), on an Apache
# Kafka of its own: a Punctuator sends each stored event downstream and then
# deletes it from a persistent (RocksDB) store with a changelog, under
# processing.guarantee=exactly_once_v2, with a repartition topic before it.
# Half the keys are deleted with put(key, null), half with delete(key).
#
# Three modes, one application:
#   plain  no encryption
#   naive  a naive encrypting Serde (AES-GCM, javax.crypto) that encrypts a
#          null as the ciphertext of nothing, on the store's and the sink's
#          values
#   proxy  the plain application unchanged, its bootstrap a `tombstone-crypt
#          proxy` whose policy (prefix "proxy-") covers its source, sink,
#          changelog and repartition topics: values under AES-GCM, record
#          keys under AES-SIV
#
# For each: 20 events to delete and 2 to keep; the application runs until
# every event was sent and deleted (and one punctuation more), and stops;
# the changelog is compacted by the broker's log cleaner until no tombstone
# is left (delete.retention.ms passed); the local state is wiped and the
# application started again, restoring from the changelog. It counts the
# deleted keys that came back: in the store after the restore (what the
# next punctuation's all() yields), and sent downstream again (the sink,
# read_committed).
#
# The changelog (set by the store's withLoggingEnabled): cleanup.policy=
# compact, segment.ms=100, min.cleanable.dirty.ratio=0.01,
# delete.retention.ms=1000, min.compaction.lag.ms=0. Apache Kafka cleans
# only closed segments and rolls one only when something is appended after
# segment.ms, and a stopped application appends nothing: while it waits for
# the cleaner, the script appends a tombstone of a key no event has
# ("~roll", a delete of nothing) every 300 ms, through the application's
# bootstrap, until every key has one record at most and no tombstone is
# left (about 2-4 s).
#
# Then, through the proxy, under a key keyset after a rotation (two enabled
# keys: the write rule puts a tombstone of each key's older form in front of
# every record, in the client's batch and so in its transaction): a
# transaction that aborts (the punctuator throws once right after its
# deletes: the thread dies, is replaced, and its transaction aborts) and a
# kill -9 between deletes and their commit (the punctuator sleeps after its
# deletes; the script kills the JVM once they are on the broker,
# uncommitted, and starts it again). No committed delete may come back,
# every event must be downstream exactly once, and after a compaction and a
# restore no deleted key is back.
#
# The last line is "resurrected: naive=N proxy=0". Exit 0 when naive > 0 and
# plain and proxy are 0, and every check above holds; 1 otherwise.
#
# Ports (127.0.0.1): Apache Kafka 20110 (controller 20111), the proxy 20120
# (broker node 1 at 20122). Files: target/streams-demo/ (the Java build, its
# classpath, and run/: logs, state directories, keysets), the broker in
# target/kafka-streams-demo/ (stopped on exit).
#
# Environment:
#   TOMBSTONE_STREAMS_DEMO_CLI  a tombstone-crypt binary to use (default:
#                               target/debug/tombstone-crypt, built with
#                               `cargo build -p tombstone-crypt-cli` when
#                               missing or older than a source file)
#
# Needs Java 17 and Maven (jars resolved into target/m2), and Rust for the
# command line.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

POM="examples/streams/pom.xml"
OUT="target/streams-demo"
RUN="$OUT/run"
M2="$ROOT/target/m2"
KAFKA_PORT=20110
PROXY_PORT=20120
EVENTS=20
LIVE=2

started=$(date +%s)
log() { printf 'streams-demo: [%d s] %s\n' "$(( $(date +%s) - started ))" "$*" >&2; }
die() { log "$*"; exit 1; }

export TOMBSTONE_APACHE_KAFKA_DIR=target/kafka-streams-demo
export TOMBSTONE_APACHE_KAFKA_PORT=$KAFKA_PORT
export TOMBSTONE_APACHE_KAFKA_CONTROLLER_PORT=20111

pids=()
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  bash scripts/kafka.sh stop >/dev/null 2>&1 || true
}
trap cleanup EXIT

for tool in java mvn; do
  command -v "$tool" >/dev/null || die "$tool is missing: the demo needs Java 17 and Maven"
done

# --- the Java build: again only when the pom or a source file changed ------
build_key="$(find "$POM" examples/streams/src -type f -print0 | sort -z | xargs -0 sha256sum \
  | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$OUT/build.key" || "$(cat "$OUT/build.key")" != "$build_key" || ! -d "$OUT/classes" ]]; then
  log "building examples/streams with Maven (jars into target/m2)"
  rm -f "$OUT/build.key"
  nice mvn -B -q -C -Dmaven.repo.local="$M2" -f "$POM" package 2>&1 | sed 's/\x1b\[0m//g' >&2 \
    || die "mvn package failed"
  echo "$build_key" >"$OUT/build.key"
fi
# The runtime classpath, resolved once per pom (its sha256), as scripts/kafka.sh does.
pom_key="$(sha256sum "$POM" | cut -d' ' -f1)"
classpath_fresh() {
  [[ -s "$OUT/classpath.txt" && "$(cat "$OUT/classpath.key" 2>/dev/null)" == "$pom_key" ]] || return 1
  local jar jars
  IFS=: read -r -a jars <"$OUT/classpath.txt"
  for jar in "${jars[@]}"; do [[ -f "$jar" ]] || return 1; done
}
if ! classpath_fresh; then
  rm -f "$OUT/classpath.key"
  nice mvn -B -q -C -Dmaven.repo.local="$M2" -f "$POM" dependency:build-classpath \
    -Dmdep.includeScope=runtime -Dmdep.outputFile="$ROOT/$OUT/classpath.txt" 2>&1 \
    | sed 's/\x1b\[0m//g' >&2 || die "mvn could not resolve the classpath"
  echo "$pom_key" >"$OUT/classpath.key"
fi
CP="$ROOT/$OUT/classes:$(cat "$OUT/classpath.txt")"

# --- the command line --------------------------------------------------------
CLI="${TOMBSTONE_STREAMS_DEMO_CLI:-}"
if [[ -z "$CLI" ]]; then
  CLI="$ROOT/target/debug/tombstone-crypt"
  if [[ ! -x "$CLI" ]] || [[ -n "$(find src proxy/src cli/src Cargo.toml Cargo.lock cli/Cargo.toml \
      proxy/Cargo.toml -newer "$CLI" -print -quit)" ]]; then
    log "building the command line (cargo build -p tombstone-crypt-cli)"
    nice cargo build -q -p tombstone-crypt-cli >&2 || die "cargo build failed"
  fi
fi
[[ -x "$CLI" ]] || die "no tombstone-crypt binary at $CLI"

rm -rf "$RUN"
mkdir -p "$RUN/proxy"

# --- Apache Kafka and the proxy ----------------------------------------------
log "starting Apache Kafka on 127.0.0.1:$KAFKA_PORT (scripts/kafka.sh, target/kafka-streams-demo)"
BROKER="$(bash scripts/kafka.sh start 2>"$RUN/kafka-start.log" | tail -n 1)" \
  || { cat "$RUN/kafka-start.log" >&2; die "Apache Kafka did not start"; }

"$CLI" keyset new --template aes-gcm --out-keyset "$RUN/proxy/values.json" >/dev/null
"$CLI" keyset new --template aes-siv --out-keyset "$RUN/proxy/keys.json" >/dev/null
# The faults' application writes its keys after a rotation: the write rule
# puts a tombstone of each key's older form in front of every record, in
# the client's batch, so in its transaction.
"$CLI" keyset rotate --keyset "$RUN/proxy/keys.json" --out-keyset "$RUN/proxy/keys-rotated.json" >/dev/null
cat >"$RUN/proxy/proxy.json" <<EOF
{
  "listen": "127.0.0.1:$PROXY_PORT",
  "bootstrap": "$BROKER",
  "topics": [
    { "prefix": "proxy-faults-", "value_keyset": "values.json", "key_keyset": "keys-rotated.json" },
    { "prefix": "proxy-", "value_keyset": "values.json", "key_keyset": "keys.json" }
  ]
}
EOF
"$CLI" proxy --config "$RUN/proxy/proxy.json" >"$RUN/proxy/proxy.log" 2>&1 &
pids+=($!)
proxy_pid=$!
for (( i = 0; i < 100; i++ )); do
  kill -0 "$proxy_pid" 2>/dev/null || { cat "$RUN/proxy/proxy.log" >&2; die "the proxy exited"; }
  timeout 1 bash -c "exec 3<>/dev/tcp/127.0.0.1/$PROXY_PORT" 2>/dev/null && break
  sleep 0.1
done
PROXY="127.0.0.1:$PROXY_PORT"
log "the proxy serves on $PROXY (policy: prefix proxy-, values AES-GCM, keys AES-SIV; proxy-faults- after a key rotation)"

# --- helpers -----------------------------------------------------------------
# demo NAME ARGS...: one run of the Java tools, stdout to $RUN/NAME.out (and
# returned), stderr to $RUN/NAME.err; a failure shows both and the proxy's log.
demo() {
  local name="$1"; shift
  if ! timeout 150 nice java -XX:TieredStopAtLevel=1 -cp "$CP" tombstone.streams.Demo "$@" \
      >"$RUN/$name.out" 2>"$RUN/$name.err"; then
    failed "$name"
  fi
  cat "$RUN/$name.out"
}
failed() {
  log "$1 failed; its output, its last log lines and the proxy's:"
  cat "$RUN/$1.out" >&2 || true
  grep -v 'GlobalThread' "$RUN/$1.err" | tail -n 30 >&2 || true
  tail -n 20 "$RUN/proxy/proxy.log" >&2 || true
  exit 1
}
# field NAME TEXT: the value of NAME=... in TEXT.
field() { sed -n "s/.*\\b$1=\\([0-9]*\\).*/\\1/p" <<<"$2" | tail -n 1; }

problems=0
check() {
  if ! eval "$1"; then
    echo "  FAILED: $2"
    problems=$(( problems + 1 ))
  fi
}

declare -A resurrected

# scenario MODE BOOTSTRAP: the report's scenario, prints its counts.
scenario() {
  local mode="$1" bootstrap="$2" app="$1-demo"
  local state="$RUN/state-$app" out first restore sink
  log "$mode: $EVENTS events to send and delete, $LIVE to keep"
  demo "$app-produce" produce "$bootstrap" "$app" "0-$EVENTS" --live "$LIVE" >/dev/null
  first="$(demo "$app-run" app "$bootstrap" "$mode" "$app" "$state" --exit-when-deleted "0-$EVENTS" --linger 1)"
  demo "$app-sink-before" sink "$bootstrap" "$app-sink" --save "$RUN/$app-sink.offsets" >/dev/null
  log "$mode: stopped; waiting for the log cleaner (delete.retention.ms=1000)"
  out="$(demo "$app-compact" compact "$bootstrap" "$app-events-changelog" 60)"
  rm -rf "$state"
  log "$mode: state wiped; restoring from the changelog"
  restore="$(demo "$app-restore" app "$bootstrap" "$mode" "$app" "$state" --exit-after-first-punctuation)"
  sink="$(demo "$app-sink-after" sink "$bootstrap" "$app-sink" --since "$RUN/$app-sink.offsets")"

  local deleted again back getnull live sent
  deleted="$(field deleted "$first")"
  again="$(field seen_after_delete "$first")"
  back="$(field first_seen "$restore")"
  getnull="$(field first_get_null "$restore")"
  live="$(field first_live "$restore")"
  sent="$(field keys "$sink")"
  resurrected[$mode]=$back
  if [[ "$mode" != naive ]]; then
    check "[[ '$again' == 0 ]]" "$mode: the live punctuation saw a deleted key again"
  fi
  echo "$mode: deleted $deleted of $EVENTS ($(( EVENTS / 2 )) with put(key, null), $(( EVENTS / 2 )) with delete(key)); the next punctuation saw $again of them again"
  echo "$mode: ${out#changelog }"
  echo "$mode: after a restore from the changelog: $back deleted keys back in the store (get() answers null for $getnull), $sent sent downstream again; kept events restored: $live of $LIVE"
  check "[[ '$deleted' == $EVENTS ]]" "$mode: not every event was deleted"
  check "[[ '$live' == $LIVE ]]" "$mode: the kept events did not all come back from the restore"
  check "[[ -n '$back' && '$sent' == '$back' ]]" "$mode: keys back in the store ($back) and sent again ($sent) differ"
  if [[ "$mode" == proxy ]]; then
    local plain
    plain="$(demo "$app-plaintext" plaintext "$BROKER" "$app-source" "$app-sink" \
      "$app-events-changelog" "$app-by-id-repartition")"
    echo "proxy: at the broker, records holding an event's key or value in plaintext: $(field records "$plain") of $(field of "$plain")"
    check "[[ '$(field records "$plain")' == 0 ]]" "proxy: plaintext at the broker"
  fi
}

# faults BOOTSTRAP: an aborted transaction and a kill -9 through the proxy.
faults() {
  local bootstrap="$1" mode=proxy app=proxy-faults
  local state="$RUN/state-$app" pause="$RUN/$app.paused" out abort paused graves restart sink restore
  log "proxy: a transaction that aborts and a kill -9 after a key rotation, $EVENTS events in three batches"
  demo "$app-produce-1" produce "$bootstrap" "$app" 0-7 --live "$LIVE" >/dev/null
  # Not under timeout: $! must be the JVM itself, for kill -9 (the
  # application gives up by itself after 90 s).
  nice java -XX:TieredStopAtLevel=1 -cp "$CP" tombstone.streams.Demo app "$bootstrap" \
    "$mode" "$app" "$state" --exit-when-deleted "0-$EVENTS" --fail-after key-13 \
    --pause-after key-19 --pause-file "$pause" >"$RUN/$app-run.out" 2>"$RUN/$app-run.err" &
  local app_pid=$!
  pids+=("$app_pid")
  demo "$app-await-1" await "$bootstrap" "$app" 0-7 >/dev/null
  # The punctuation that deletes key-13 throws after its deletes: the
  # thread dies, is replaced, its transaction aborts.
  demo "$app-produce-2" produce "$bootstrap" "$app" 7-14 --await >/dev/null || failed "$app-run"
  # The punctuation that deletes key-19 sleeps after its deletes: killed there.
  demo "$app-produce-3" produce "$bootstrap" "$app" "14-$EVENTS" >/dev/null
  for (( i = 0; i < 600; i++ )); do
    [[ -s "$pause" ]] && break
    kill -0 "$app_pid" 2>/dev/null || failed "$app-run"
    sleep 0.1
  done
  [[ -s "$pause" ]] || failed "$app-run"
  graves="$(demo "$app-tombstones" tombstones "$BROKER" "$app-events-changelog")"
  kill -KILL "$app_pid"
  wait "$app_pid" 2>/dev/null || true
  log "proxy: killed (kill -9) between its deletes and their commit; starting it again"
  # It runs until every event is downstream, committed (what was not
  # before the kill is sent again once restored), then stops cleanly.
  nice java -XX:TieredStopAtLevel=1 -cp "$CP" tombstone.streams.Demo app "$bootstrap" "$mode" \
    "$app" "$state" --stop-file "$RUN/$app.stop" >"$RUN/$app-restart.out" 2>"$RUN/$app-restart.err" &
  app_pid=$!
  pids+=("$app_pid")
  demo "$app-await-2" await "$bootstrap" "$app" "0-$EVENTS" >/dev/null
  touch "$RUN/$app.stop"
  wait "$app_pid" || failed "$app-restart"
  restart="$(cat "$RUN/$app-restart.out")"
  sink="$(demo "$app-sink" sink "$bootstrap" "$app-sink")"
  out="$(demo "$app-compact" compact "$bootstrap" "$app-events-changelog" 60)"
  rm -rf "$state"
  restore="$(demo "$app-restore" app "$bootstrap" "$mode" "$app" "$state" --exit-after-first-punctuation)"

  abort="$(grep '^after the abort:' "$RUN/$app-run.out" || true)"
  paused="$(grep '^fault: paused' "$RUN/$app-run.out" || true)"
  local aborted back_abort committed_back killed back_kill once more extra back live
  aborted="$(field of "$abort")"
  back_abort="$(field back "$abort")"
  committed_back="$(field committed_deletes_back "$abort")"
  killed="$(field deletes "$paused")"
  back_kill="$(field deleted "$restart")"
  once="$(field keys "$sink")"
  more="$(field more_than_once "$sink")"
  extra="$(field tombstones "$sink")"
  back="$(field first_seen "$restore")"
  live="$(field first_live "$restore")"
  local uncommitted
  uncommitted="$(field pending "$graves")"
  echo "proxy, a transaction that aborts (the punctuator throws after its deletes): deletes undone ${aborted:-?}, their keys back in the store ${back_abort:-?} (their sends were undone too); keys whose delete had committed seen again: ${committed_back:-?}"
  echo "proxy, kill -9 between deletes and their commit (deletes ${killed:-?}; changelog tombstones at the broker in the open transaction $uncommitted, the write rule's included): keys back after the restart, sent and deleted once more, ${back_kill:-?}"
  echo "proxy, downstream (read_committed): $once of $EVENTS events, $more of them more than once and $extra tombstones (the write rule's of older key forms are on the broker, left out of a fetch through the proxy)"
  echo "proxy, after compaction and a restore: $back deleted keys back; kept events restored: $live of $LIVE"
  local plain
  plain="$(demo "$app-plaintext" plaintext "$BROKER" "$app-source" "$app-sink" \
    "$app-events-changelog" "$app-by-id-repartition")"
  echo "proxy, at the broker, records holding an event's key or value in plaintext: $(field records "$plain") of $(field of "$plain")"
  check "[[ '$(field records "$plain")' == 0 ]]" "proxy: plaintext at the broker"
  check "[[ -n '$aborted' && '$aborted' -gt 0 && '$back_abort' == '$aborted' && '$committed_back' == 0 ]]" "proxy: the aborted transaction"
  # The keys back are those whose deletes were in the open transaction:
  # the paused punctuation's, and an earlier one's if no commit came between.
  check "[[ -n '$killed' && '$killed' -gt 0 && '$uncommitted' -gt 0 && '$back_kill' -ge '$killed' ]]" "proxy: the kill -9"
  check "[[ '$once' == $EVENTS && '$more' == 0 ]]" "proxy: every event downstream exactly once"
  check "[[ '$extra' == 0 ]]" "proxy: downstream reads what was written, no tombstone of an older key form"
  check "[[ '$live' == $LIVE ]]" "proxy: the kept events after the faults' restore"
  # A committed delete that came back would have been sent downstream again.
  resurrected[proxy]=$(( resurrected[proxy] + more + back + ${committed_back:-0} ))
}

scenario plain "$BROKER"
scenario naive "$BROKER"
scenario proxy "$PROXY"
faults "$PROXY"

check "[[ '${resurrected[plain]}' == 0 ]]" "plain: a deleted key came back"
check "[[ '${resurrected[naive]}' -gt 0 ]]" "naive: no deleted key came back (the negative control proves nothing)"
check "[[ '${resurrected[proxy]}' == 0 ]]" "proxy: a deleted key came back"
log "done in $(( $(date +%s) - started )) s"
echo "plain: resurrected ${resurrected[plain]}; naive: resurrected ${resurrected[naive]}; proxy: resurrected ${resurrected[proxy]}"
echo "resurrected: naive=${resurrected[naive]} proxy=${resurrected[proxy]}"
if (( problems > 0 )); then
  log "$problems check(s) failed (above)"
  exit 1
fi
