#!/usr/bin/env python3
"""Google Tink (Python) peer for the tombstone-crypt interop tests.

Run it with the interpreter printed by scripts/tink-venv.sh, which installs the
pinned `tink` package. Uses only tink and the standard library. All key
material stays inside keyset JSON; no command prints raw key bytes except as
part of a cleartext keyset (gen-keyset, rotate-keyset), which is what the
interop tests exchange.

Commands (input on stdin, output on stdout, both UTF-8):

  gen-keyset [--template T]
      No input. Prints a Tink cleartext JSON keyset holding one fresh ENABLED
      primary key made from template T, exactly as Tink's JSON keyset
      serializer writes it.

  rotate-keyset [--template T]
      Input: a Tink cleartext JSON keyset (raw JSON text). Adds a fresh key of
      template T with an unused key id, makes it the primary, keeps the old
      keys as they are, prints the new keyset JSON (Tink's serializer).

  encrypt
      Input:  {"keyset": "<keyset json text>",
               "items": [{"aad_hex": "..", "pt_hex": ".."}, ...]}
      Output: {"items": [{"ct_hex": ".."}, ...]}
      Encrypts each item with the keyset's tink.aead.Aead (primary key).

  decrypt
      Input:  {"keyset": "<keyset json text>",
               "items": [{"aad_hex": "..", "ct_hex": ".."}, ...]}
      Output: {"items": [{"pt_hex": ".." | null,
                          "error": null | "<ExceptionClass>: <message>"}, ...]}
      A failed decryption is reported in its item; the command still exits 0.

  daead-encrypt, daead-decrypt
      As encrypt and decrypt, with the keyset's
      tink.daead.DeterministicAead (AES-SIV keysets, template AES256_SIV):
      encrypt_deterministically / decrypt_deterministically.

  info
      Input:  a Tink cleartext JSON keyset (raw JSON text).
      Output: {"primary_key_id": N,
               "keys": [{"key_id": N, "status": "ENABLED",
                         "type_url": "...", "output_prefix_type": "TINK",
                         "key_len": 32}, ...]}
      key_len is the length of the raw AES key, read from the AesGcmKey proto
      (null for key types other than AesGcmKey). Key bytes are never printed.

Templates T: AES256_GCM (default), AES128_GCM, AES256_GCM_RAW, AES128_GCM_RAW,
AES256_SIV.
Hex input is case-insensitive; hex output is lower case. JSON outputs other
than keysets are written on one line.

Exit codes: 0 success; 2 usage or input error (bad arguments, malformed JSON,
bad hex, missing fields); 1 any other failure (for example a keyset Tink
rejects, or encryption failing). Errors go to stderr as one line.
"""

import argparse
import json
import sys

import tink
from tink import aead
from tink import daead
from tink import secret_key_access
from tink.proto import aes_gcm_pb2
from tink.proto import tink_pb2

TEMPLATES = {
    "AES256_GCM": aead.aead_key_templates.AES256_GCM,
    "AES128_GCM": aead.aead_key_templates.AES128_GCM,
    "AES256_GCM_RAW": aead.aead_key_templates.AES256_GCM_RAW,
    "AES128_GCM_RAW": aead.aead_key_templates.AES128_GCM_RAW,
    "AES256_SIV": daead.deterministic_aead_key_templates.AES256_SIV,
}

AES_GCM_TYPE_URL = "type.googleapis.com/google.crypto.tink.AesGcmKey"


class UsageError(Exception):
    """Bad command line or malformed input; exit code 2."""


# --------------------------------------------------------------------------
# Keyset helpers


def parse_keyset(text):
    """Parses a cleartext JSON keyset into a tink.KeysetHandle."""
    if not isinstance(text, str):
        raise UsageError("keyset must be a JSON keyset given as a string")
    return tink.json_proto_keyset_format.parse(text, secret_key_access.TOKEN)


def serialize_keyset(handle):
    return tink.json_proto_keyset_format.serialize(handle, secret_key_access.TOKEN)


def keyset_proto(handle):
    """Returns the tink_pb2.Keyset behind a handle (through the binary format)."""
    data = tink.proto_keyset_format.serialize(handle, secret_key_access.TOKEN)
    return tink_pb2.Keyset.FromString(data)


def handle_from_proto(keyset):
    """Builds a handle from a tink_pb2.Keyset; Tink validates it on parse."""
    return tink.proto_keyset_format.parse(
        keyset.SerializeToString(), secret_key_access.TOKEN
    )


def read_stdin_text():
    data = sys.stdin.buffer.read()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise UsageError("stdin is not UTF-8: %s" % e)


def read_stdin_json():
    text = read_stdin_text()
    try:
        return json.loads(text)
    except ValueError as e:
        raise UsageError("stdin is not valid JSON: %s" % e)


def read_request():
    """Reads {"keyset": str, "items": [obj, ...]} from stdin."""
    req = read_stdin_json()
    if not isinstance(req, dict):
        raise UsageError("stdin must be a JSON object")
    if "keyset" not in req or "items" not in req:
        raise UsageError('stdin must have "keyset" and "items"')
    if not isinstance(req["items"], list):
        raise UsageError('"items" must be a list')
    return req


def hex_field(item, index, name):
    if not isinstance(item, dict) or name not in item:
        raise UsageError('item %d: missing "%s"' % (index, name))
    value = item[name]
    if not isinstance(value, str):
        raise UsageError('item %d: "%s" must be a hex string' % (index, name))
    try:
        return bytes.fromhex(value)
    except ValueError as e:
        raise UsageError('item %d: "%s" is not hex: %s' % (index, name, e))


def write_json(obj):
    sys.stdout.write(json.dumps(obj, separators=(",", ":")) + "\n")


# --------------------------------------------------------------------------
# Commands


def cmd_gen_keyset(args):
    handle = tink.new_keyset_handle(TEMPLATES[args.template])
    sys.stdout.write(serialize_keyset(handle) + "\n")


def cmd_rotate_keyset(args):
    old = keyset_proto(parse_keyset(read_stdin_text()))
    used = {k.key_id for k in old.key}
    # Tink Python has no keyset manager; generate a one-key keyset from the
    # template and move its key over, with a key id not already in use.
    while True:
        fresh = keyset_proto(tink.new_keyset_handle(TEMPLATES[args.template]))
        new_key = fresh.key[0]
        if new_key.key_id not in used:
            break
    old.key.append(new_key)
    old.primary_key_id = new_key.key_id
    sys.stdout.write(serialize_keyset(handle_from_proto(old)) + "\n")


def cmd_encrypt(_args):
    req = read_request()
    items = []
    for i, item in enumerate(req["items"]):
        items.append((hex_field(item, i, "aad_hex"), hex_field(item, i, "pt_hex")))
    primitive = parse_keyset(req["keyset"]).primitive(aead.Aead)
    out = [{"ct_hex": primitive.encrypt(pt, aad).hex()} for aad, pt in items]
    write_json({"items": out})


def cmd_decrypt(_args):
    req = read_request()
    items = []
    for i, item in enumerate(req["items"]):
        items.append((hex_field(item, i, "aad_hex"), hex_field(item, i, "ct_hex")))
    primitive = parse_keyset(req["keyset"]).primitive(aead.Aead)
    out = []
    for aad, ct in items:
        try:
            out.append({"pt_hex": primitive.decrypt(ct, aad).hex(), "error": None})
        except Exception as e:  # pylint: disable=broad-except
            out.append({"pt_hex": None, "error": "%s: %s" % (type(e).__name__, e)})
    write_json({"items": out})


def cmd_daead_encrypt(_args):
    req = read_request()
    items = []
    for i, item in enumerate(req["items"]):
        items.append((hex_field(item, i, "aad_hex"), hex_field(item, i, "pt_hex")))
    primitive = parse_keyset(req["keyset"]).primitive(daead.DeterministicAead)
    out = [
        {"ct_hex": primitive.encrypt_deterministically(pt, aad).hex()} for aad, pt in items
    ]
    write_json({"items": out})


def cmd_daead_decrypt(_args):
    req = read_request()
    items = []
    for i, item in enumerate(req["items"]):
        items.append((hex_field(item, i, "aad_hex"), hex_field(item, i, "ct_hex")))
    primitive = parse_keyset(req["keyset"]).primitive(daead.DeterministicAead)
    out = []
    for aad, ct in items:
        try:
            pt = primitive.decrypt_deterministically(ct, aad)
            out.append({"pt_hex": pt.hex(), "error": None})
        except Exception as e:  # pylint: disable=broad-except
            out.append({"pt_hex": None, "error": "%s: %s" % (type(e).__name__, e)})
    write_json({"items": out})


def cmd_info(_args):
    keyset = keyset_proto(parse_keyset(read_stdin_text()))
    keys = []
    for key in keyset.key:
        key_len = None
        if key.key_data.type_url == AES_GCM_TYPE_URL:
            key_len = len(aes_gcm_pb2.AesGcmKey.FromString(key.key_data.value).key_value)
        keys.append(
            {
                "key_id": key.key_id,
                "status": tink_pb2.KeyStatusType.Name(key.status),
                "type_url": key.key_data.type_url,
                "output_prefix_type": tink_pb2.OutputPrefixType.Name(
                    key.output_prefix_type
                ),
                "key_len": key_len,
            }
        )
    write_json({"primary_key_id": keyset.primary_key_id, "keys": keys})


# --------------------------------------------------------------------------
# Entry point


class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise UsageError(message)


def build_parser():
    parser = Parser(
        prog="tink_peer.py",
        description="Google Tink (Python) peer for the interop tests.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    sub.required = True
    for name, func, takes_template in (
        ("gen-keyset", cmd_gen_keyset, True),
        ("rotate-keyset", cmd_rotate_keyset, True),
        ("encrypt", cmd_encrypt, False),
        ("decrypt", cmd_decrypt, False),
        ("daead-encrypt", cmd_daead_encrypt, False),
        ("daead-decrypt", cmd_daead_decrypt, False),
        ("info", cmd_info, False),
    ):
        p = sub.add_parser(name)
        if takes_template:
            p.add_argument("--template", choices=sorted(TEMPLATES), default="AES256_GCM")
        p.set_defaults(func=func)
    return parser


def main(argv):
    try:
        args = build_parser().parse_args(argv)
        aead.register()
        daead.register()
        args.func(args)
    except UsageError as e:
        sys.stderr.write("tink_peer: usage error: %s\n" % e)
        return 2
    except Exception as e:  # pylint: disable=broad-except
        sys.stderr.write("tink_peer: error: %s: %s\n" % (type(e).__name__, e))
        return 1
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
