#!/usr/bin/env bash
# The whole test suite, from a fresh clone: installs and starts what the tests
# need (a Python venv with Google Tink and confluent-kafka, Apache Kafka's
# own broker from Maven's jars (scripts/kafka.sh: transactions, a log
# cleaner), a loopback tansu broker for the two suites that plant what
# Apache Kafka refuses, loopback KMS servers, the proxy's Java and Go
# clients, strace, cargo-fuzz), runs every check, stops the brokers and the
# KMS servers.
#
# The suites that wait on Apache Kafka's log cleaner or start a broker of
# their own (tests whose names contain "compacting_broker") run last,
# beside the fuzz smoke run.
#
#   FUZZ_SECONDS   seconds per fuzz target (default 20)
set -euo pipefail
cd "$(dirname "$0")/.."

started=$(date +%s)
step() { printf '\n==> [%d s] %s\n' "$(( $(date +%s) - started ))" "$*" >&2; }

mkdir -p target

# The proxy's Go client (franz-go: scripts/go-clients.sh) builds in the
# background from here, its modules downloading while the Rust builds
# run; waited for before the suites.
bash scripts/go-clients.sh >target/go-clients.out 2>target/go-clients.log &
go_clients=$!

step "format; the crate root's re-exports (25 at most: the rest is in modules); the crate's docs hold no relative links; the layers of docs/LAYERS.md"
cargo fmt --all -- --check
cargo fmt --manifest-path fuzz/Cargo.toml -- --check
cargo fmt --manifest-path fuzz/proxy/Cargo.toml -- --check
python3 scripts/root-names.py 25
# Rustdoc resolves no relative link to a file, and the published docs hold
# none of the repository's files: links in src/**/*.rs docs and the
# markdown they include are intra-doc links or absolute URLs. Also: the
# README's Quick start is examples/quickstart.rs, which the crate docs
# include and the test stages build.
python3 scripts/doc-links.py
# docs/LAYERS.md places every source file of the library, the command line
# and the proxy; each file names only its own layer and those below.
python3 scripts/layers.py

step "clippy (all features)"
cargo clippy --workspace --all-targets --all-features -- -D warnings

step "the library's own dependencies hold no command-line or proxy crate (clap, indicatif: cli/ only; tokio-rustls and the proxy: proxy/ only); kafka-protocol without its compression codecs (the library asks a topic's id with it)"
if cargo tree -p tombstone-crypt -e normal --all-features --prefix none | grep -E '^(clap|indicatif|tokio-rustls|tombstone-crypt-proxy) v'; then
  echo "the library depends on a command-line or proxy crate: it belongs in cli/Cargo.toml or proxy/Cargo.toml" >&2
  exit 1
fi

step "cargo-nextest 0.9.148, the suites' runner (pinned with hashes in scripts/requirements-nextest.txt, installed by pip into target/nextest-wheel)"
PATH="$(bash scripts/nextest.sh | tail -n 1):$PATH"
export PATH

step "Python venv with tink and confluent-kafka (pinned with hashes, cached under target/venv)"
TOMBSTONE_TINK_PYTHON="$(bash scripts/tink-venv.sh | tail -n 1)"
export TOMBSTONE_TINK_PYTHON

step "kafkajs 2.2.4 for the proxy's tests (pinned with its integrity hash in proxy/tests/node/package-lock.json; npm ci into target/proxy-node)"
if ! command -v npm >/dev/null; then
  echo "npm is missing: the proxy's kafkajs test needs Node 20 with npm" >&2
  exit 1
fi
mkdir -p target/proxy-node
cp proxy/tests/node/package.json proxy/tests/node/package-lock.json target/proxy-node/
(cd target/proxy-node && npm ci --ignore-scripts --no-audit --no-fund >&2)
TOMBSTONE_PROXY_NODE_MODULES="$PWD/target/proxy-node/node_modules"
export TOMBSTONE_PROXY_NODE_MODULES

step "brokers: tansu on 127.0.0.1, in memory, and Apache Kafka 4.4.0 (scripts/kafka.sh: one KRaft node, jars pinned in scripts/kafka/pom.xml, resolved by Maven into target/m2); both stopped on exit"
for tool in java mvn; do
  if ! command -v "$tool" >/dev/null; then
    echo "$tool is missing: Apache Kafka's broker needs Java 17 and Maven" >&2
    exit 1
  fi
done
stop_all() {
  if [[ -n "${fuzz_build:-}" ]]; then stop_fuzz_build; fi
  kill "$go_clients" 2>/dev/null || true
  if [[ -n "${streams_demo:-}" ]]; then
    kill "$streams_demo" 2>/dev/null || true
    wait "$streams_demo" 2>/dev/null || true
  fi
  bash scripts/kafka.sh stop >&2 || true
  bash scripts/kms.sh stop >&2 || true
  bash scripts/broker.sh stop >&2 || true
}
trap stop_all EXIT
# Apache Kafka is the broker of every suite (TOMBSTONE_KAFKA_BOOTSTRAP);
# tansu (TOMBSTONE_TANSU_BOOTSTRAP) serves the two proxy suites that plant
# on a broker a batch Apache Kafka refuses (proxy/tests/decode_bounds.rs,
# proxy/tests/hostile_bounds.rs).
TOMBSTONE_TANSU_BOOTSTRAP="$(bash scripts/broker.sh start | tail -n 1)"
export TOMBSTONE_TANSU_BOOTSTRAP
TOMBSTONE_APACHE_KAFKA_BOOTSTRAP="$(bash scripts/kafka.sh start | tail -n 1)"
export TOMBSTONE_APACHE_KAFKA_BOOTSTRAP
TOMBSTONE_KAFKA_BOOTSTRAP="$TOMBSTONE_APACHE_KAFKA_BOOTSTRAP"
export TOMBSTONE_KAFKA_BOOTSTRAP

step "the proxy's Java and Go clients: kafka-clients 4.4.0 (proxy/tests/java/pom.xml, its jars in target/m2 beside the broker's, compiled by javac: scripts/java-clients.sh) and franz-go 1.22.3 (proxy/tests/go/go.mod and go.sum, built into target/go by scripts/go-clients.sh, in the background since the start)"
TOMBSTONE_JAVA_CLIENTS_CP="$(bash scripts/java-clients.sh | tail -n 1)"
export TOMBSTONE_JAVA_CLIENTS_CP
if ! wait "$go_clients"; then
  cat target/go-clients.log >&2
  echo "the Go client did not build (scripts/go-clients.sh)" >&2
  exit 1
fi
cat target/go-clients.log >&2
TOMBSTONE_GO_CLIENT="$(tail -n 1 target/go-clients.out)"
export TOMBSTONE_GO_CLIENT

step "strace (cli/tests/keyset_files.rs traces the keyset files' fsync calls)"
if ! command -v strace >/dev/null; then
  if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    apt-get install -y -qq strace >&2 || { apt-get update -qq >&2 && apt-get install -y -qq strace >&2; }
  else
    echo "strace is missing: install it (apt-get install strace)" >&2
    exit 1
  fi
fi

step "KMS servers: OpenBao 2.7.2 (transit) and moto (AWS KMS) on 127.0.0.1 (stopped on exit)"
KMS_ENV="$(bash scripts/kms.sh start | tail -n 1)"
# VAULT_ADDR, VAULT_TOKEN, AWS_* (loopback endpoint, dummy keys), the key URIs.
# shellcheck disable=SC1090
source "$KMS_ENV"

step "fuzz targets: built in the background at the lowest priority, on the time the suites below leave idle (without AddressSanitizer: this crate forbids unsafe code; their own target directory)"
# Its own process group (setsid), so that an early exit stops cargo with
# it. setsid also makes it a session of its own, and where the kernel
# groups a session's processes for scheduling (autogroup), a nice value
# counts only within its group: the group's own nice value
# (/proc/self/autogroup) puts it behind the stages below (they mostly
# wait on the brokers). Measured: the build took 117 s in the foreground
# after the suites.
setsid bash -c 'echo 19 >/proc/self/autogroup 2>/dev/null || true; exec nice -n 19 env FUZZ_DIRS=fuzz FUZZ_SANITIZER=none FUZZ_STEP=build bash scripts/fuzz.sh' \
  >target/fuzz-build.log 2>&1 &
fuzz_build=$!
stop_fuzz_build() { kill -- "-$fuzz_build" 2>/dev/null || true; }

step "tests, all features (aws-lc backend, kafka, redb), the library, the command line (cli/) and the proxy (proxy/: librdkafka, and confluent-kafka with Tink in the venv, through it): unit, integration, doc (those that wait on the log cleaner come last)"
# cargo-nextest runs the tests of every binary side by side, each in a
# process of its own (.config/nextest.toml: four at a time, the KMS
# servers' pauses alone). Doctests are cargo test's.
cargo nextest run --workspace --all-features -E 'not test(compacting_broker)'
cargo test --workspace --all-features --doc

step "the key-store tests again, each KafkaKeyStore with its view on disk (a redb file), not in memory"
# The suites of what a view decides (shreds, evidence, stale views, the
# command line's shred and check). The racing makers' and the crash
# suites (80 s more) run with the view in memory only: the unit tests of
# kafka::view hold both views to the same decisions on random logs, and
# tests/key_store_view.rs covers the disk view's own crash and restart.
TOMBSTONE_KEY_STORE_VIEW=disk cargo nextest run --workspace --all-features \
  -E 'kind(test) & not test(compacting_broker) & test(/^(shred|shred_kafka|shred_evidence|shred_check)::/)'

step "the report's scenario in Kafka Streams 4.4.0 (examples/streams/, scripts/streams-demo.sh): plain, through a naive encrypting Serde and through the proxy, on an Apache Kafka of its own; in the background beside the stages below, which only build and run unit tests (its report comes before the end-to-end suites); fails unless naive > 0 and plain and proxy are 0"
# The command line the all-features stage built (a build for its own
# feature set would compile the library again), copied: the stages below
# build other feature sets.
cp target/debug/tombstone-crypt target/streams-demo-cli
TOMBSTONE_STREAMS_DEMO_CLI="$PWD/target/streams-demo-cli" bash scripts/streams-demo.sh >target/streams-demo.log 2>&1 &
streams_demo=$!

step "tests of the library, pure Rust (RustCrypto backend: no aws-lc, the default's other half)"
cargo nextest run -p tombstone-crypt --no-default-features --features redb
cargo test -p tombstone-crypt --no-default-features --features redb --doc

step "the library without default features (no redb): its unit tests, and its integration tests checked"
# The integration tests ran pure Rust in the stage above (with redb, which
# they need only for their own cases); here they must still compile
# (checked, not built: no code generation or linking, which the stage
# above did for the same code).
cargo test -p tombstone-crypt --no-default-features --lib
cargo check -p tombstone-crypt --no-default-features --tests

step "the library's docs build without a warning (every intra-doc link resolves), all features, as the published docs are built"
RUSTDOCFLAGS='-D warnings' cargo doc -p tombstone-crypt --all-features --no-deps

step "packaging: the library, the proxy and the command line package as a release would (built from their .crate files)"
# After the test stages on purpose: the verify build reuses their
# artifacts (16 s on 2 cores, the library and then the command line
# against it through cargo's temporary local registry; cargo >= 1.90).
# The command line's dependency on the library needs a version, and both
# ship the LICENSE; the library ships no tests, benches, scripts or CI
# files (cargo's "ignoring test" lines for those are left out here).
packaged=$(date +%s)
# The verify build unpacks the library from cargo's temporary local
# registry into $CARGO_HOME/registry/src/<hash of that registry's path>/,
# and does not unpack it again if an earlier run at the same path left
# one there: the command line would then be built against that earlier
# library (seen on a second fresh clone at one path). These crates are
# never fetched from a real registry, so their unpacked copies can go.
rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tombstone-crypt-[0-9]* \
  "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tombstone-crypt-cli-[0-9]* \
  "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/tombstone-crypt-proxy-[0-9]*
if ! pkg_log=$(cargo package -p tombstone-crypt -p tombstone-crypt-proxy -p tombstone-crypt-cli --allow-dirty 2>&1); then
  printf '%s\n' "$pkg_log" >&2
  echo "cargo package failed" >&2
  exit 1
fi
grep -v -E '^warning: ignoring (test|benchmark|example) ' <<<"$pkg_log" >&2 || true
lib_files=$(cargo package -p tombstone-crypt --list --allow-dirty 2>/dev/null)
cli_files=$(cargo package -p tombstone-crypt-cli --list --allow-dirty 2>/dev/null)
proxy_files=$(cargo package -p tombstone-crypt-proxy --list --allow-dirty 2>/dev/null)
for f in LICENSE README.md CONTRIBUTING.md SECURITY.md docs/FORMAT.md docs/CLI.md docs/PERFORMANCE.md examples/quickstart.rs src/lib.rs src/guide/mod.rs; do
  grep -qx "$f" <<<"$lib_files" || { echo "the library's package lacks $f" >&2; exit 1; }
done
grep -qx LICENSE <<<"$cli_files" || { echo "the command line's package lacks LICENSE" >&2; exit 1; }
grep -qx LICENSE <<<"$proxy_files" || { echo "the proxy's package lacks LICENSE" >&2; exit 1; }
if grep -E '^(\.ci/|scripts/|tests/|benches/|target/)' <<<"$lib_files"; then
  echo "the library's package ships files a release must not (above)" >&2
  exit 1
fi
echo "packaged and verified in $(( $(date +%s) - packaged )) s" >&2

step "the Kafka Streams scenario's report"
streams_rc=0
wait "$streams_demo" || streams_rc=$?
streams_demo=""
cat target/streams-demo.log >&2
if [[ $streams_rc -ne 0 ]]; then
  echo "the Kafka Streams scenario failed (scripts/streams-demo.sh, exit $streams_rc)" >&2
  exit 1
fi

step "waiting for the fuzz targets' build"
if ! wait "$fuzz_build"; then
  tail -n 40 target/fuzz-build.log >&2
  echo "building the fuzz targets failed (log: target/fuzz-build.log)" >&2
  exit 1
fi
tail -n 3 target/fuzz-build.log >&2

step "fuzz smoke run, in the background: every target ${FUZZ_SECONDS:-20} s (its report follows the suites below)"
# One core for the fuzzers (one target at a time), the other for the
# suites, which mostly wait on the broker's compaction: run one after the
# other, the two took 140 s more.
FUZZ_DIRS=fuzz FUZZ_SANITIZER=none FUZZ_STEP=run bash scripts/fuzz.sh >target/fuzz-smoke.log 2>&1 &
fuzz_run=$!

step "end-to-end suites through Apache Kafka's log cleaner: the write and reading rules (${TOMBSTONE_E2E_CASES:-64} cases) and their negative controls, compaction itself, a resumed reencrypt"
cargo nextest run --workspace --all-features --test-threads 4 \
  -E 'kind(test) & test(compacting_broker) & test(/^(writers_model|compaction)::/)'
# The report's scenario through the proxy: a changelog written by
# confluent-kafka for Python through a key rotation, compacted, restored;
# and the proxy across a restart of an Apache Kafka of its own
# (scripts/kafka.sh restart keeps its records); a shred that a client's
# writes through the proxy to the key-store topic cannot undo once it is
# compacted; TLS to every broker connection (an Apache Kafka of its
# own advertising a TLS forwarder); and the compacted topics of
# librdkafka, the Java and Go clients (theirs also transactions after a
# key rotation, compacted), kafka-python and kafkajs.
cargo nextest run --workspace --all-features --test-threads 2 \
  -E 'kind(test) & test(compacting_broker) & test(/^(proxy_compacting|faults|shred_attacks|tls|rdkafka_clients|java_clients|go_clients|python_clients|node_clients)::/)'
# The command line's resumes across a compaction (and into a topic
# deleted and created again), with their negative control, the shredding
# model with the command line as a second process, and the typed
# producer's write-order model checked after compaction (with the
# workspace's features, as the first stage: with `-p` alone the library
# and librdkafka were built again, about 3 minutes; this way 15 s).
cargo nextest run --workspace --all-features --test-threads 2 \
  -E 'kind(test) & test(compacting_broker) & test(/^(cli|shred|write_order)::/)'

step "fuzz smoke run's report"
fuzz_rc=0
wait "$fuzz_run" || fuzz_rc=$?
cat target/fuzz-smoke.log >&2
if [[ $fuzz_rc -ne 0 ]]; then
  echo "the fuzz smoke run failed (exit $fuzz_rc)" >&2
  exit 1
fi

step "all green in $(( $(date +%s) - started )) s"
