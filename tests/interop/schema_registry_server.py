#!/usr/bin/env python3
"""A small Schema Registry for the tests, on 127.0.0.1 (Python's standard
library only): the REST endpoints that Confluent's clients use for schemas
and for the DEK registry of client-side encryption, with their JSON shapes
and error codes, state in memory. No Confluent Schema Registry can be
installed here; this serves its API so that confluent-kafka's real REST
client and ours talk to one registry.

    schema_registry_server.py     prints "PORT" on its first line, serves
                                  until stdin closes (or it is killed)

Endpoints: POST /subjects/{s}/versions, POST /subjects/{s} (lookup),
GET /subjects/{s}/versions/{v|latest}, GET /subjects/{s}/versions,
GET /schemas/ids/{id}, GET /schemas/ids/{id}/subjects,
POST /dek-registry/v1/keks, GET /dek-registry/v1/keks/{k},
POST /dek-registry/v1/keks/{k}/deks[/{s}],
GET /dek-registry/v1/keks/{k}/deks/{s}[/versions/{v|-1}]?algorithm=A[&deleted=true],
DELETE /dek-registry/v1/keks/{k}/deks/{s}/versions/{v}?algorithm=A (soft).
"""
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlparse

LOCK = threading.Lock()
SCHEMAS = []  # index = id - 1: the schema dict as registered
SUBJECTS = {}  # subject -> [schema id], version = index + 1
KEKS = {}  # name -> kek dict
DEKS = {}  # (kek, subject, algorithm) -> [dek dict], version = index + 1


def now_ms():
    return int(time.time() * 1000)


def same_schema(a, b):
    return a.get("schema") == b.get("schema") and a.get("schemaType", "AVRO") == b.get("schemaType", "AVRO") \
        and (a.get("ruleSet") or None) == (b.get("ruleSet") or None)


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def answer(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def error(self, status, code, message):
        self.answer(status, {"error_code": code, "message": message})

    def body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return json.loads(self.rfile.read(n) or b"{}")

    def versioned(self, subject, version):
        ids = SUBJECTS.get(subject) or []
        if not ids:
            return self.error(404, 40401, "Subject not found")
        v = len(ids) if version in ("latest", "-1") else int(version)
        if not 1 <= v <= len(ids):
            return self.error(404, 40402, "Version not found")
        sid = ids[v - 1]
        return self.answer(200, dict(SCHEMAS[sid - 1], subject=subject, version=v, id=sid))

    def do_GET(self):
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        p = [unquote(x) for x in url.path.strip("/").split("/")]
        with LOCK:
            if p[:2] == ["schemas", "ids"] and len(p) == 3:
                sid = int(p[2])
                if not 1 <= sid <= len(SCHEMAS):
                    return self.error(404, 40403, "Schema not found")
                return self.answer(200, SCHEMAS[sid - 1])
            if p[:2] == ["schemas", "ids"] and len(p) == 4 and p[3] == "subjects":
                sid = int(p[2])
                return self.answer(200, [s for s, ids in SUBJECTS.items() if sid in ids])
            if p[0] == "subjects" and len(p) == 4 and p[2] == "versions":
                return self.versioned(p[1], p[3])
            if p[0] == "subjects" and len(p) == 3 and p[2] == "versions":
                return self.answer(200, list(range(1, len(SUBJECTS.get(p[1]) or []) + 1)))
            if p[:3] == ["dek-registry", "v1", "keks"] and len(p) == 4:
                kek = KEKS.get(p[3])
                return self.answer(200, kek) if kek else self.error(404, 40470, "Key Not Found")
            if p[:3] == ["dek-registry", "v1", "keks"] and len(p) >= 6 and p[4] == "deks":
                alg = q.get("algorithm", "AES256_GCM")
                versions = DEKS.get((p[3], p[5], alg)) or []
                v = p[7] if len(p) == 8 and p[6] == "versions" else "-1"
                v = len(versions) if v in ("-1", "latest") else int(v)
                if not 1 <= v <= len(versions):
                    return self.error(404, 40470, "Key Not Found")
                # A soft-deleted DEK only for a client that asks for them.
                if versions[v - 1]["deleted"] and q.get("deleted") != "true":
                    return self.error(404, 40470, "Key Not Found")
                return self.answer(200, versions[v - 1])
        return self.error(404, 404, "no such endpoint: " + url.path)

    def do_DELETE(self):
        """DELETE /dek-registry/v1/keks/{k}/deks/{s}/versions/{v}?algorithm=A:
        the DEK version soft-deleted (kept, answered only with deleted=true)."""
        url = urlparse(self.path)
        q = {k: v[0] for k, v in parse_qs(url.query).items()}
        p = [unquote(x) for x in url.path.strip("/").split("/")]
        with LOCK:
            if p[:3] == ["dek-registry", "v1", "keks"] and len(p) == 8 and p[4] == "deks" and p[6] == "versions":
                versions = DEKS.get((p[3], p[5], q.get("algorithm", "AES256_GCM"))) or []
                v = int(p[7])
                if not 1 <= v <= len(versions):
                    return self.error(404, 40470, "Key Not Found")
                versions[v - 1]["deleted"] = True
                return self.answer(200, {})
        return self.error(404, 404, "no such endpoint: " + url.path)

    def do_POST(self):
        url = urlparse(self.path)
        p = [unquote(x) for x in url.path.strip("/").split("/")]
        body = self.body()
        with LOCK:
            if p[0] == "subjects" and len(p) == 3 and p[2] == "versions":
                subject = p[1]
                ids = SUBJECTS.setdefault(subject, [])
                for sid in ids:
                    if same_schema(SCHEMAS[sid - 1], body):
                        return self.answer(200, {"id": sid})
                for i, s in enumerate(SCHEMAS):
                    if same_schema(s, body):
                        ids.append(i + 1)
                        return self.answer(200, {"id": i + 1})
                schema = {k: body[k] for k in ("schema", "schemaType", "references", "ruleSet", "metadata") if k in body}
                schema.setdefault("schemaType", "AVRO")
                SCHEMAS.append(schema)
                ids.append(len(SCHEMAS))
                return self.answer(200, {"id": len(SCHEMAS)})
            if p[0] == "subjects" and len(p) == 2:
                for v, sid in enumerate(SUBJECTS.get(p[1]) or []):
                    if same_schema(SCHEMAS[sid - 1], body):
                        return self.answer(200, dict(SCHEMAS[sid - 1], subject=p[1], version=v + 1, id=sid))
                return self.error(404, 40403, "Schema not found")
            if p == ["dek-registry", "v1", "keks"]:
                name = body["name"]
                if name in KEKS:
                    return self.error(409, 40972, "Key already exists")
                KEKS[name] = {"name": name, "kmsType": body.get("kmsType"), "kmsKeyId": body.get("kmsKeyId"),
                              "kmsProps": body.get("kmsProps") or {}, "doc": body.get("doc"),
                              "shared": bool(body.get("shared")), "ts": now_ms(), "deleted": False}
                return self.answer(200, KEKS[name])
            if p[:3] == ["dek-registry", "v1", "keks"] and len(p) in (5, 6) and p[4] == "deks":
                kek = p[3]
                if kek not in KEKS:
                    return self.error(404, 40470, "Key Not Found")
                subject = body["subject"]
                alg = body.get("algorithm") or "AES256_GCM"
                versions = DEKS.setdefault((kek, subject, alg), [])
                v = int(body.get("version") or 1)
                if v <= len(versions):
                    return self.error(409, 40972, "Key already exists")
                if v != len(versions) + 1:
                    return self.error(422, 42271, "DEK versions are made in order")
                dek = {"kekName": kek, "subject": subject, "version": v, "algorithm": alg,
                       "encryptedKeyMaterial": body.get("encryptedKeyMaterial"), "ts": now_ms(), "deleted": False}
                versions.append(dek)
                return self.answer(200, dek)
        return self.error(404, 404, "no such endpoint: " + url.path)


def main():
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    print(server.server_address[1], flush=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sys.stdin.read()  # until the test closes stdin (or exits)
    server.shutdown()


if __name__ == "__main__":
    main()
