#!/usr/bin/env bash
# Builds the Go client of the proxy's tests (proxy/tests/go: franz-go's kgo
# and kadm, pinned with their hashes in go.mod and go.sum, run by
# proxy/tests/go_clients.rs) into target/go/proxyclients and prints its path
# last.
#
# The module cache and the build cache are the repository's own
# (target/go/mod, target/go/cache); -mod=readonly: go.mod and go.sum are
# taken as they are, never rewritten; GOTOOLCHAIN=local: the Go on PATH
# (1.26 or later, as go.mod says) builds it, none is downloaded. Go's build
# cache makes a second build take about a second. Everything but the path
# goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

command -v go >/dev/null || { echo "go-clients: go is missing: the Go client needs Go 1.26" >&2; exit 1; }
export GOMODCACHE="$ROOT/target/go/mod"
export GOCACHE="$ROOT/target/go/cache"
export GOFLAGS="-mod=readonly -buildvcs=false"
export GOTOOLCHAIN=local
mkdir -p target/go
start=$(date +%s%N)
(cd proxy/tests/go && go build -trimpath -o "$ROOT/target/go/proxyclients" .) >&2
echo "go-clients: built in $(( ($(date +%s%N) - start) / 1000000 )) ms" >&2
printf '%s\n' "$ROOT/target/go/proxyclients"
