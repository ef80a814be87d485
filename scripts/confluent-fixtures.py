#!/usr/bin/env python3
"""Writes tests/fixtures/confluent/*.json: records that Confluent's own client
(confluent-kafka 2.16.1 for Python) wrote with field and payload encryption
(JSON Schema and Avro),
through tests/interop/confluent_peer.py (`write`): offline, `mock://`
registries and the `local-kms` KEK. Each fixture holds the records' bytes
(base64, null for a tombstone), the values they were made from, and what a
reader needs besides: the schema and its rule, the secret, the wrapped DEKs.
The fixtures do not change; tests/confluent.rs also runs the peer live.

    scripts/tink-venv.sh     # the venv with confluent-kafka and its rules
    target/venv/bin/python scripts/confluent-fixtures.py [write | write-avro]
"""
import json
import os
import subprocess
import sys

root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
out = os.path.join(root, "tests", "fixtures", "confluent")
# JSON Schema cases (`write`), Avro cases (`write-avro`); a mode as argument
# writes only its cases.
cases = []
for mode in sys.argv[1:] or ["write", "write-avro"]:
    cases += json.loads(subprocess.run(
        [sys.executable, os.path.join(root, "tests", "interop", "confluent_peer.py"), mode],
        check=True, capture_output=True, text=True).stdout)
os.makedirs(out, exist_ok=True)
for c in cases:
    with open(os.path.join(out, c["case"] + ".json"), "w") as f:
        json.dump(c, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(c["case"], len(c["deks"]), "DEKs", file=sys.stderr)
