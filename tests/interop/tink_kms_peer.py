#!/usr/bin/env python3
"""Google Tink (Python) peer for the KMS envelope encryption tests.

Run it with the interpreter printed by scripts/tink-venv.sh (tink 1.16.1,
boto3, hvac), against the loopback servers of scripts/kms.sh: source the env
file that `scripts/kms.sh start` prints, or set the same variables.

Environment (as written by scripts/kms.sh into target/kms.env):
  AWS_ENDPOINT_URL_KMS   moto's address, http://127.0.0.1:PORT (required for aws-kms://)
  AWS_REGION             region of the boto3 client (default us-east-1); must be the
                         region in the key ARNs
  AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY   dummy credentials (default tombstone-test)
  VAULT_TOKEN            OpenBao/Vault token (required for hcvault://)
  TOMBSTONE_KMS_PEER_TIMEOUT   connect and read timeout per KMS request, seconds
                         (default 10); no retries
  TOMBSTONE_KMS_PEER_TRACE=1   log every KMS HTTP request (method, URL, JSON body:
                         this includes DEKs in base64) to stderr, one JSON line each
Only loopback endpoints are accepted (127.0.0.1, localhost, ::1): a key URI or
endpoint naming any other host is an input error.

Key URIs:
  aws-kms://arn:aws:kms:REGION:ACCOUNT:key/UUID (or :alias/NAME)
  hcvault://HOST:PORT/MOUNT/keys/NAME, e.g. hcvault://127.0.0.1:18200/transit/keys/tombstone-kek
  The Vault client talks plain http to HOST:PORT (a dev server has no TLS).

How the remote AEADs are made (the tink 1.16.1 API):
  AWS:   tink.integration.awskms.new_client(
             boto3_client=boto3.client("kms", endpoint_url=..., region_name=...))
         registered with tink.register_kms_client (not bound to one key URI).
         Its AEAD sends Encrypt/Decrypt with KeyId = the ARN and
         EncryptionContext = {"associatedData": hex(ad)} when ad is non-empty,
         {} when it is empty (boto3 then sends "EncryptionContext": {}).
  Vault: Tink Python has no KmsClient for Vault, only
         tink.integration.hcvault.new_aead(key_path, hvac_client), where key_path is
         the URI's path "/transit/keys/NAME". This peer registers a small
         tink.KmsClient for hcvault:// URIs that returns that AEAD, so Tink's own
         keyset machinery (KmsEnvelopeAeadKeyManager, the AEAD wrapper that adds the
         output prefix) is used for Vault exactly as for AWS. The AEAD POSTs
         /v1/MOUNT/encrypt/NAME {"plaintext": base64(pt), "context": ""} and
         /v1/MOUNT/decrypt/NAME {"ciphertext": "vault:v1:...", "context": ""};
         the wrapped key is the ASCII text "vault:v1:<base64>". It rejects any
         non-empty associated data (NotImplementedError inside a TinkError).
  --manual (encrypt/decrypt commands): instead of the keyset primitive, builds
         tink.aead.KmsEnvelopeAead(dek_template, remote_aead) per key and adds the
         output prefix by hand (TINK: 0x01 | key id u32be; RAW: none). Same bytes
         as the keyset path; it exists to cross-check Tink's wrapper.

Envelope ciphertext (KmsEnvelopeAeadKey, TINK prefix, AES-GCM DEK):
  0x01 | key id u32be | len(EDEK) u32be | EDEK | nonce 12 | ciphertext | tag 16
  where EDEK = remote.encrypt(serialized AesGcmKey proto, b"") -- the proto is
  0x1a 0x20 | 32 key bytes (version 0 is omitted) -- and the AES-GCM payload is
  made with the record's associated data. Tink's
  aead_key_templates.create_kms_envelope_aead_key_template gives RAW output
  prefix (no 5-byte prefix); gen-keyset changes it to TINK unless --prefix RAW.

Commands (input on stdin, output on stdout, both UTF-8 JSON, one line):

  gen-keyset --kek-uri URI [--prefix TINK|RAW] [--dek-template AES256_GCM|AES128_GCM]
      No input. Prints a cleartext Tink JSON keyset with one KmsEnvelopeAeadKey
      (key material type REMOTE: the keyset holds only the KEK URI and the DEK
      template, no secret), exactly as Tink's JSON serializer writes it.

  rotate-keyset --kek-uri URI [--prefix TINK|RAW] [--dek-template ...]
      Input: a keyset JSON (raw text). Adds a fresh KmsEnvelopeAeadKey for URI with
      an unused key id, makes it the primary, keeps the old keys, prints the keyset.
      KEKs of one keyset may mix aws-kms:// and hcvault://.

  encrypt | aws-encrypt | vault-encrypt  [--manual]
      Input:  {"keyset": "<keyset json>" | "kek_uri": URI [, "prefix": "TINK"|"RAW"],
               "items": [{"aad_hex": "..", "pt_hex": ".."}, ...]}
      Output: {"keyset": "<keyset json used>", "items": [{"ct_hex": ".."}, ...]}
      With "kek_uri" instead of "keyset", a fresh keyset is made (as gen-keyset).
      aws-*/vault-* also check that every key's KEK URI has that scheme.

  decrypt | aws-decrypt | vault-decrypt  [--manual]
      Input:  {"keyset": "<keyset json>", "items": [{"aad_hex": "..", "ct_hex": ".."}, ...]}
      Output: {"items": [{"pt_hex": ".." | null, "error": null | "<Class>: <message>"}, ...]}
      A failed decryption is reported in its item; the command still exits 0.

  kms-encrypt | kms-decrypt
      The remote AEAD alone (no envelope): the KMS wraps/unwraps each item.
      Input:  {"kek_uri": URI, "items": [{"aad_hex": "..", "pt_hex"|"ct_hex": ".."}]}
      Output: {"items": [{"ct_hex": ".."}]} / {"items": [{"pt_hex": .. | null, "error": ..}]}

  keyset-encrypt
      Input:  {"kek_uri": URI, "associated_data_hex": ".." (default ""),
               "keyset": "<cleartext keyset json>" (default: a fresh AES256_GCM keyset)}
      Output: {"encrypted_keyset": "<json>", "keyset": "<cleartext keyset json>"}
      tink.json_proto_keyset_format.serialize_encrypted(handle, remote_aead, ad),
      i.e. keyset_handle.write_with_associated_data(JsonKeysetWriter, remote_aead, ad).
      Tink encrypts, then decrypts once to check (two KMS calls).

  keyset-decrypt
      Input:  {"kek_uri": URI, "associated_data_hex": "..", "encrypted_keyset": "<json>"}
      Output: {"keyset": "<cleartext keyset json>"}
      tink.json_proto_keyset_format.parse_encrypted(text, remote_aead, ad).

  info
      Input:  a keyset JSON (raw text). Output: {"primary_key_id": N, "keys": [
               {"key_id", "status", "type_url", "output_prefix_type", "prefix_hex",
                "kek_uri", "dek_type_url", "dek_output_prefix_type", "dek_key_size"}]}

  split [--prefix TINK|RAW]
      Input:  {"items": [{"ct_hex": ".."}]}. Output: {"items": [{"prefix_hex",
               "key_id", "edek_len", "edek_hex", "edek_ascii", "nonce_hex",
               "ct_hex", "tag_hex"}]}: the envelope layout above (AES-GCM DEK);
      edek_ascii is the EDEK as text when it is printable ASCII (Vault), else null.

Hex input is case-insensitive; hex output is lower case.
Exit codes: 0 success; 2 usage or input error; 1 any other failure (KMS down,
Tink error). Errors go to stderr as one line.
"""

import argparse
import json
import os
import struct
import sys
import urllib.parse

import tink
from tink import aead
from tink import secret_key_access
from tink.proto import aes_gcm_pb2
from tink.proto import kms_envelope_pb2
from tink.proto import tink_pb2

KMS_ENVELOPE_TYPE_URL = "type.googleapis.com/google.crypto.tink.KmsEnvelopeAeadKey"
AES_GCM_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesGcmKey"
DEK_TEMPLATES = {
    "AES256_GCM": aead.aead_key_templates.AES256_GCM,
    "AES128_GCM": aead.aead_key_templates.AES128_GCM,
}
PREFIXES = {"TINK": tink_pb2.TINK, "RAW": tink_pb2.RAW}
LOOPBACK = {"127.0.0.1", "localhost", "::1"}
AWS_PREFIX = "aws-kms://"
VAULT_PREFIX = "hcvault://"


class UsageError(Exception):
    """Bad command line or malformed input; exit code 2."""


def timeout():
    try:
        return float(os.environ.get("TOMBSTONE_KMS_PEER_TIMEOUT", "10"))
    except ValueError:
        raise UsageError("TOMBSTONE_KMS_PEER_TIMEOUT must be a number")


def tracing():
    return os.environ.get("TOMBSTONE_KMS_PEER_TRACE") == "1"


def trace(service, method, url, headers, body):
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    try:
        body = json.loads(body) if body else None
    except ValueError:
        pass
    shown = {}
    for name in ("Content-Type", "X-Amz-Target"):
        value = headers.get(name)
        if value is not None:
            shown[name] = value.decode() if isinstance(value, bytes) else str(value)
    sys.stderr.write(
        json.dumps(
            {"trace": service, "method": method, "url": url, "headers": shown, "body": body}
        )
        + "\n"
    )


def require_loopback(url, what):
    host = urllib.parse.urlsplit(url).hostname
    if host not in LOOPBACK:
        raise UsageError("%s must be a loopback address, not %r" % (what, url))


# --------------------------------------------------------------------------
# KMS clients


def boto3_kms_client():
    import boto3  # pylint: disable=g-import-not-at-top
    from botocore.config import Config  # pylint: disable=g-import-not-at-top

    endpoint = os.environ.get("AWS_ENDPOINT_URL_KMS")
    if not endpoint:
        raise UsageError("AWS_ENDPOINT_URL_KMS is not set (source target/kms.env)")
    require_loopback(endpoint, "AWS_ENDPOINT_URL_KMS")
    t = timeout()
    client = boto3.client(
        "kms",
        endpoint_url=endpoint,
        region_name=os.environ.get("AWS_REGION") or "us-east-1",
        aws_access_key_id=os.environ.get("AWS_ACCESS_KEY_ID") or "tombstone-test",
        aws_secret_access_key=os.environ.get("AWS_SECRET_ACCESS_KEY") or "tombstone-test",
        config=Config(
            connect_timeout=t,
            read_timeout=t,
            retries={"mode": "standard", "total_max_attempts": 1},
        ),
    )
    if tracing():
        client.meta.events.register(
            "before-send.kms",
            lambda request, **_: trace(
                "aws-kms", request.method, request.url, request.headers, request.body
            ),
        )
    return client


def vault_base_and_path(key_uri):
    """hcvault://HOST:PORT/transit/keys/NAME -> ("http://HOST:PORT", "/transit/keys/NAME")."""
    if not key_uri.startswith(VAULT_PREFIX):
        raise UsageError("not an hcvault:// key URI: %r" % key_uri)
    parts = urllib.parse.urlsplit(key_uri)
    if parts.hostname not in LOOPBACK:
        raise UsageError("Vault key URI host must be loopback: %r" % key_uri)
    if not parts.path or "/keys/" not in parts.path:
        raise UsageError("Vault key URI must be hcvault://HOST:PORT/MOUNT/keys/NAME: %r" % key_uri)
    return "http://" + parts.netloc, parts.path


class HcVaultKmsClient(tink.KmsClient):
    """tink.KmsClient for hcvault:// URIs over tink.integration.hcvault.new_aead."""

    def __init__(self):
        self._clients = {}

    def does_support(self, key_uri):
        return key_uri.startswith(VAULT_PREFIX)

    def _hvac(self, base):
        if base not in self._clients:
            import hvac  # pylint: disable=g-import-not-at-top
            import requests  # pylint: disable=g-import-not-at-top

            token = os.environ.get("VAULT_TOKEN")
            if not token:
                raise UsageError("VAULT_TOKEN is not set (source target/kms.env)")
            session = requests.Session()
            session.trust_env = False  # no proxy, no netrc: loopback only
            if tracing():
                session.hooks["response"].append(
                    lambda r, *a, **k: trace(
                        "vault", r.request.method, r.request.url, r.request.headers,
                        r.request.body,
                    )
                )
            self._clients[base] = hvac.Client(
                url=base, token=token, timeout=timeout(), session=session
            )
        return self._clients[base]

    def get_aead(self, key_uri):
        from tink.integration import hcvault  # pylint: disable=g-import-not-at-top

        base, path = vault_base_and_path(key_uri)
        return hcvault.new_aead(path, self._hvac(base))


_REGISTERED = set()


def register_clients_for(kek_uris):
    """Registers (once) the Tink KMS clients needed for these KEK URIs."""
    for uri in kek_uris:
        if uri.startswith(AWS_PREFIX):
            if "aws" not in _REGISTERED:
                from tink.integration import awskms  # pylint: disable=g-import-not-at-top

                tink.register_kms_client(awskms.new_client(boto3_client=boto3_kms_client()))
                _REGISTERED.add("aws")
        elif uri.startswith(VAULT_PREFIX):
            vault_base_and_path(uri)  # validates the URI
            if "vault" not in _REGISTERED:
                tink.register_kms_client(HcVaultKmsClient())
                _REGISTERED.add("vault")
        else:
            raise UsageError("unsupported KEK URI (aws-kms:// or hcvault://): %r" % uri)


def remote_aead(kek_uri):
    register_clients_for([kek_uri])
    return tink.kms_client_from_uri(kek_uri).get_aead(kek_uri)


# --------------------------------------------------------------------------
# Keyset helpers


def parse_keyset(text):
    if not isinstance(text, str):
        raise UsageError("keyset must be a JSON keyset given as a string")
    return tink.json_proto_keyset_format.parse(text, secret_key_access.TOKEN)


def serialize_keyset(handle):
    return tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN)


def keyset_proto(handle):
    data = tink.proto_keyset_format.serialize(handle, secret_key_access.TOKEN)
    return tink_pb2.Keyset.FromString(data)


def envelope_params(key):
    if key.key_data.type_url != KMS_ENVELOPE_TYPE_URL:
        raise UsageError("key %d is not a KmsEnvelopeAeadKey: %s" % (key.key_id, key.key_data.type_url))
    return kms_envelope_pb2.KmsEnvelopeAeadKey.FromString(key.key_data.value).params


def kek_uris(keyset):
    return [envelope_params(k).kek_uri for k in keyset.key]


def output_prefix(key):
    if key.output_prefix_type == tink_pb2.RAW:
        return b""
    if key.output_prefix_type == tink_pb2.TINK:
        return b"\x01" + struct.pack(">I", key.key_id)
    # LEGACY and CRUNCHY
    return b"\x00" + struct.pack(">I", key.key_id)


def new_envelope_keyset(kek_uri, prefix="TINK", dek="AES256_GCM"):
    if not isinstance(kek_uri, str) or not kek_uri:
        raise UsageError("kek_uri must be a non-empty string")
    if prefix not in PREFIXES:
        raise UsageError("prefix must be TINK or RAW")
    template = aead.aead_key_templates.create_kms_envelope_aead_key_template(
        kek_uri=kek_uri, dek_template=DEK_TEMPLATES[dek]
    )
    # Tink's template says RAW; the tombstone-crypt design uses TINK.
    template.output_prefix_type = PREFIXES[prefix]
    return tink.new_keyset_handle(template)


def read_stdin_text():
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError("stdin is not UTF-8: %s" % e)


def read_stdin_json():
    try:
        obj = json.loads(read_stdin_text())
    except ValueError as e:
        raise UsageError("stdin is not valid JSON: %s" % e)
    if not isinstance(obj, dict):
        raise UsageError("stdin must be a JSON object")
    return obj


def items_of(req):
    items = req.get("items")
    if not isinstance(items, list):
        raise UsageError('"items" must be a list')
    return items


def hex_field(item, index, name, default=None):
    if not isinstance(item, dict):
        raise UsageError("item %s: must be an object" % index)
    if name not in item:
        if default is not None:
            return default
        raise UsageError('item %s: missing "%s"' % (index, name))
    value = item[name]
    if not isinstance(value, str):
        raise UsageError('item %s: "%s" must be a hex string' % (index, name))
    try:
        return bytes.fromhex(value)
    except ValueError as e:
        raise UsageError('item %s: "%s" is not hex: %s' % (index, name, e))


def str_field(req, name):
    value = req.get(name)
    if not isinstance(value, str) or not value:
        raise UsageError('"%s" must be a non-empty string' % name)
    return value


def write_json(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")


def error_text(e):
    return "%s: %s" % (type(e).__name__, e)


# --------------------------------------------------------------------------
# Envelope AEAD: through the keyset (Tink's wrapper) or by hand (--manual)


class ManualEnvelope:
    """KmsEnvelopeAead per key, output prefix added and matched by hand."""

    def __init__(self, keyset):
        self._primary = None
        self._entries = []  # (prefix, KmsEnvelopeAead)
        for key in keyset.key:
            if key.status != tink_pb2.ENABLED:
                continue
            params = envelope_params(key)
            env = aead.KmsEnvelopeAead(params.dek_template, remote_aead(params.kek_uri))
            entry = (output_prefix(key), env)
            self._entries.append(entry)
            if key.key_id == keyset.primary_key_id:
                self._primary = entry
        if self._primary is None:
            raise tink.TinkError("keyset has no enabled primary key")

    def encrypt(self, pt, ad):
        prefix, env = self._primary
        return prefix + env.encrypt(pt, ad)

    def decrypt(self, ct, ad):
        last = None
        for prefix, env in self._entries:  # prefixed keys first, as Tink does
            if prefix and ct.startswith(prefix) and len(ct) > len(prefix):
                try:
                    return env.decrypt(ct[len(prefix):], ad)
                except tink.TinkError as e:
                    last = e
        for prefix, env in self._entries:
            if not prefix:
                try:
                    return env.decrypt(ct, ad)
                except tink.TinkError as e:
                    last = e
        raise last or tink.TinkError("Decryption failed.")


def envelope_primitive(keyset_text, args, scheme):
    keyset = keyset_proto(parse_keyset(keyset_text))
    uris = kek_uris(keyset)
    if scheme and not all(u.startswith(scheme) for u in uris):
        raise UsageError("%s: every KEK URI must start with %s, got %s" % (args.command, scheme, uris))
    register_clients_for(uris)
    if args.manual:
        return ManualEnvelope(keyset)
    return parse_keyset(keyset_text).primitive(aead.Aead)


SCHEMES = {"aws": AWS_PREFIX, "vault": VAULT_PREFIX}


def scheme_of(command):
    head = command.split("-", 1)[0]
    return SCHEMES.get(head)


# --------------------------------------------------------------------------
# Commands


def cmd_gen_keyset(args):
    handle = new_envelope_keyset(args.kek_uri, args.prefix, args.dek_template)
    sys.stdout.write(serialize_keyset(handle) + "\n")


def cmd_rotate_keyset(args):
    old = keyset_proto(parse_keyset(read_stdin_text()))
    used = {k.key_id for k in old.key}
    # Tink Python has no keyset manager: make a one-key keyset and move its
    # key over, with a key id not already in use.
    while True:
        fresh = keyset_proto(new_envelope_keyset(args.kek_uri, args.prefix, args.dek_template))
        new_key = fresh.key[0]
        if new_key.key_id not in used:
            break
    old.key.append(new_key)
    old.primary_key_id = new_key.key_id
    handle = tink.proto_keyset_format.parse(old.SerializeToString(), secret_key_access.TOKEN)
    sys.stdout.write(serialize_keyset(handle) + "\n")


def cmd_encrypt(args):
    req = read_stdin_json()
    if "keyset" in req:
        keyset_text = req["keyset"]
    elif "kek_uri" in req:
        keyset_text = serialize_keyset(
            new_envelope_keyset(req["kek_uri"], req.get("prefix", "TINK"))
        )
    else:
        raise UsageError('stdin must have "keyset" or "kek_uri"')
    items = [
        (hex_field(it, i, "aad_hex"), hex_field(it, i, "pt_hex"))
        for i, it in enumerate(items_of(req))
    ]
    primitive = envelope_primitive(keyset_text, args, scheme_of(args.command))
    out = [{"ct_hex": primitive.encrypt(pt, ad).hex()} for ad, pt in items]
    write_json({"keyset": keyset_text, "items": out})


def cmd_decrypt(args):
    req = read_stdin_json()
    if "keyset" not in req:
        raise UsageError('stdin must have "keyset"')
    items = [
        (hex_field(it, i, "aad_hex"), hex_field(it, i, "ct_hex"))
        for i, it in enumerate(items_of(req))
    ]
    primitive = envelope_primitive(req["keyset"], args, scheme_of(args.command))
    out = []
    for ad, ct in items:
        try:
            out.append({"pt_hex": primitive.decrypt(ct, ad).hex(), "error": None})
        except Exception as e:  # pylint: disable=broad-except
            out.append({"pt_hex": None, "error": error_text(e)})
    write_json({"items": out})


def cmd_kms_encrypt(_args):
    req = read_stdin_json()
    remote = remote_aead(str_field(req, "kek_uri"))
    items = [
        (hex_field(it, i, "aad_hex", b""), hex_field(it, i, "pt_hex"))
        for i, it in enumerate(items_of(req))
    ]
    write_json({"items": [{"ct_hex": remote.encrypt(pt, ad).hex()} for ad, pt in items]})


def cmd_kms_decrypt(_args):
    req = read_stdin_json()
    remote = remote_aead(str_field(req, "kek_uri"))
    items = [
        (hex_field(it, i, "aad_hex", b""), hex_field(it, i, "ct_hex"))
        for i, it in enumerate(items_of(req))
    ]
    out = []
    for ad, ct in items:
        try:
            out.append({"pt_hex": remote.decrypt(ct, ad).hex(), "error": None})
        except Exception as e:  # pylint: disable=broad-except
            out.append({"pt_hex": None, "error": error_text(e)})
    write_json({"items": out})


def cmd_keyset_encrypt(_args):
    req = read_stdin_json()
    master = remote_aead(str_field(req, "kek_uri"))
    ad = hex_field(req, "-", "associated_data_hex", b"")
    if "keyset" in req:
        handle = parse_keyset(req["keyset"])
    else:
        handle = tink.new_keyset_handle(aead.aead_key_templates.AES256_GCM)
    encrypted = tink.json_proto_keyset_format.serialize_encrypted(handle, master, ad)
    write_json({"encrypted_keyset": encrypted, "keyset": serialize_keyset(handle)})


def cmd_keyset_decrypt(_args):
    req = read_stdin_json()
    master = remote_aead(str_field(req, "kek_uri"))
    ad = hex_field(req, "-", "associated_data_hex", b"")
    handle = tink.json_proto_keyset_format.parse_encrypted(
        str_field(req, "encrypted_keyset"), master, ad
    )
    write_json({"keyset": serialize_keyset(handle)})


def cmd_info(_args):
    keyset = keyset_proto(parse_keyset(read_stdin_text()))
    keys = []
    for key in keyset.key:
        entry = {
            "key_id": key.key_id,
            "status": tink_pb2.KeyStatusType.Name(key.status),
            "type_url": key.key_data.type_url,
            "key_material_type": tink_pb2.KeyData.KeyMaterialType.Name(
                key.key_data.key_material_type
            ),
            "output_prefix_type": tink_pb2.OutputPrefixType.Name(key.output_prefix_type),
            "prefix_hex": output_prefix(key).hex(),
            "kek_uri": None,
            "dek_type_url": None,
            "dek_output_prefix_type": None,
            "dek_key_size": None,
        }
        if key.key_data.type_url == KMS_ENVELOPE_TYPE_URL:
            params = envelope_params(key)
            entry["kek_uri"] = params.kek_uri
            entry["dek_type_url"] = params.dek_template.type_url
            entry["dek_output_prefix_type"] = tink_pb2.OutputPrefixType.Name(
                params.dek_template.output_prefix_type
            )
            if params.dek_template.type_url == AES_GCM_TYPE_URL:
                entry["dek_key_size"] = aes_gcm_pb2.AesGcmKeyFormat.FromString(
                    params.dek_template.value
                ).key_size
        keys.append(entry)
    write_json({"primary_key_id": keyset.primary_key_id, "keys": keys})


def cmd_split(args):
    req = read_stdin_json()
    out = []
    for i, it in enumerate(items_of(req)):
        ct = hex_field(it, i, "ct_hex")
        pos = 0
        entry = {"prefix_hex": "", "key_id": None}
        if args.prefix == "TINK":
            if len(ct) < 5:
                raise UsageError("item %d: shorter than the 5-byte prefix" % i)
            entry["prefix_hex"] = ct[:5].hex()
            entry["key_id"] = struct.unpack(">I", ct[1:5])[0]
            pos = 5
        if len(ct) < pos + 4:
            raise UsageError("item %d: no EDEK length" % i)
        (n,) = struct.unpack(">I", ct[pos:pos + 4])
        pos += 4
        edek = ct[pos:pos + n]
        if len(edek) != n:
            raise UsageError("item %d: EDEK length %d past the end" % (i, n))
        pos += n
        payload = ct[pos:]
        if len(payload) < 28:
            raise UsageError("item %d: AES-GCM payload shorter than 28 bytes" % i)
        printable = all(0x20 <= b < 0x7F for b in edek)
        entry.update(
            {
                "edek_len": n,
                "edek_hex": edek.hex(),
                "edek_ascii": edek.decode("ascii") if printable else None,
                "nonce_hex": payload[:12].hex(),
                "ct_hex": payload[12:-16].hex(),
                "tag_hex": payload[-16:].hex(),
            }
        )
        out.append(entry)
    write_json({"items": out})


# --------------------------------------------------------------------------
# Entry point


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser():
    parser = Parser(
        prog="tink_kms_peer.py",
        description="Google Tink (Python) peer for the KMS envelope encryption tests.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True

    for name, func in (("gen-keyset", cmd_gen_keyset), ("rotate-keyset", cmd_rotate_keyset)):
        p = sub.add_parser(name)
        p.add_argument("--kek-uri", required=True)
        p.add_argument("--prefix", choices=sorted(PREFIXES), default="TINK")
        p.add_argument("--dek-template", choices=sorted(DEK_TEMPLATES), default="AES256_GCM")
        p.set_defaults(func=func)

    for name, func in (
        ("encrypt", cmd_encrypt),
        ("aws-encrypt", cmd_encrypt),
        ("vault-encrypt", cmd_encrypt),
        ("decrypt", cmd_decrypt),
        ("aws-decrypt", cmd_decrypt),
        ("vault-decrypt", cmd_decrypt),
    ):
        p = sub.add_parser(name)
        p.add_argument("--manual", action="store_true")
        p.set_defaults(func=func)

    for name, func in (
        ("kms-encrypt", cmd_kms_encrypt),
        ("kms-decrypt", cmd_kms_decrypt),
        ("keyset-encrypt", cmd_keyset_encrypt),
        ("keyset-decrypt", cmd_keyset_decrypt),
        ("info", cmd_info),
    ):
        sub.add_parser(name).set_defaults(func=func)

    p = sub.add_parser("split")
    p.add_argument("--prefix", choices=sorted(PREFIXES), default="TINK")
    p.set_defaults(func=cmd_split)
    return parser


def main(argv):
    # No SDK may look for credentials or a region at the instance metadata
    # address, nor go through a proxy: everything this peer talks to is on
    # loopback.
    os.environ["AWS_EC2_METADATA_DISABLED"] = "true"
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        os.environ.pop(var, None)
    try:
        args = build_parser().parse_args(argv)
        aead.register()
        args.func(args)
    except UsageError as e:
        sys.stderr.write("tink_kms_peer: usage error: %s\n" % e)
        return 2
    except Exception as e:  # pylint: disable=broad-except
        sys.stderr.write("tink_kms_peer: error: %s\n" % error_text(e))
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
