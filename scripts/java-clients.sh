#!/usr/bin/env bash
# Builds the Java client of the proxy's tests (proxy/tests/java: Apache
# Kafka's kafka-clients 4.4.0, run by proxy/tests/java_clients.rs) and prints
# its runtime classpath last: the compiled classes, then every jar.
#
# The jars: resolved by Maven from proxy/tests/java/pom.xml (versions pinned,
# `mvn -B -q -C`: checksums checked) into target/m2, the cache scripts/kafka.sh
# fills (kafka-clients and its codecs are already there once the broker has
# started); the classpath is cached in target/java-clients/classpath.txt,
# keyed on the pom's sha256, and resolved again when the pom changes or a
# jar it names is gone. The classes: javac --release 17 into
# target/java-clients/classes, again only when the pom, a source or javac
# changes. Needs Java 17 and Maven. Everything but the classpath goes to
# stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

POM="proxy/tests/java/pom.xml"
SRC="proxy/tests/java/src/main/java"
DIR="target/java-clients"
CP_FILE="$DIR/classpath.txt"
CP_KEY="$DIR/classpath.key"
CLASSES="$DIR/classes"
CLASSES_KEY="$DIR/classes.key"
M2="$ROOT/target/m2"

log() { printf 'java-clients: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

for tool in java javac mvn; do
  command -v "$tool" >/dev/null || die "$tool is missing: the Java client needs Java 17 and Maven"
done
mkdir -p "$DIR"
# One build at a time; a second caller waits, then reuses the result.
exec 8>"$DIR/build.lock"
flock 8

classpath_fresh() {
  [[ -s "$CP_FILE" && -f "$CP_KEY" && "$(cat "$CP_KEY")" == "$1" ]] || return 1
  local jar jars
  IFS=: read -r -a jars <"$CP_FILE"
  for jar in "${jars[@]}"; do
    [[ -f "$jar" ]] || return 1
  done
}

key="$(sha256sum "$POM" | cut -d' ' -f1)"
if ! classpath_fresh "$key"; then
  start=$(date +%s%N)
  tmp="$CP_FILE.tmp.$$"
  rm -f "$tmp" "$CP_KEY"
  # Maven 3.8 prints bare ANSI resets even with -B -q: left out.
  if ! mvn -B -q -C -Dmaven.repo.local="$M2" -f "$POM" \
      dependency:build-classpath -Dmdep.includeScope=runtime \
      -Dmdep.outputFile="$ROOT/$tmp" 2>&1 | sed 's/\x1b\[0m//g' >&2; then
    rm -f "$tmp"
    die "mvn could not resolve $POM"
  fi
  [[ -s "$tmp" ]] || { rm -f "$tmp"; die "mvn wrote an empty classpath"; }
  mv "$tmp" "$CP_FILE"
  echo "$key" >"$CP_KEY"
  log "classpath resolved in $(( ($(date +%s%N) - start) / 1000000 )) ms"
fi

mapfile -t sources < <(find "$SRC" -name '*.java' | LC_ALL=C sort)
classes_key="$( { cat "$POM" "${sources[@]}"; javac -version 2>&1; } | sha256sum | cut -d' ' -f1)"
if [[ ! -f "$CLASSES_KEY" || "$(cat "$CLASSES_KEY")" != "$classes_key" ]]; then
  start=$(date +%s%N)
  rm -rf "$CLASSES" "$CLASSES_KEY"
  javac --release 17 -Xlint:all -Werror -d "$CLASSES" -cp "$(cat "$CP_FILE")" "${sources[@]}" >&2 \
    || die "javac failed"
  echo "$classes_key" >"$CLASSES_KEY"
  log "compiled in $(( ($(date +%s%N) - start) / 1000000 )) ms"
fi

flock -u 8
exec 8>&-
printf '%s:%s\n' "$ROOT/$CLASSES" "$(cat "$CP_FILE")"
