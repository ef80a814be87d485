#!/usr/bin/env python3
"""Known-answer vectors for tombstone-crypt, computed independently of it.

Regenerate (from the crate root):

    python3 tests/vectors/generate.py

This writes `tests/vectors/aes_gcm.json` (values that must decrypt) and
`tests/vectors/fail_aes_gcm.json` (values that must be rejected, each naming
the `tombstone_crypt::Error` variant expected). Both files are committed data,
read by `tests/vectors.rs`.

The encryption is done by the Python `cryptography` package's `AESGCM` (an
implementation independent of the crate's Rust code); the wire format, the
associated data (AAD) encoding and the Tink keyset JSON are written here
from docs/FORMAT.md, not from the crate's sources.

TEST ONLY: every key and nonce below is FIXED (derived from a label by
SHA-256) so that the output is deterministic: running the script twice gives
byte-identical files. A fixed nonce is catastrophic for real data under
AES-GCM; never reuse these keys or this approach outside of test vectors.

Dependencies: Python 3 and `cryptography` (for AESGCM) only.
"""

import base64
import hashlib
import json
import os
import struct

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

HERE = os.path.dirname(os.path.abspath(__file__))

VERSION = 0x01  # Tink output prefix TINK
HEADER_LEN = 1 + 4 + 12  # version | key_id u32 BE | nonce
TAG_LEN = 16
OVERHEAD = HEADER_LEN + TAG_LEN  # 33

TYPE_URL = "type.googleapis.com/google.crypto.tink.AesGcmKey"


# --- fixed test material ----------------------------------------------------


def fixed_bytes(label, n):
    """n deterministic bytes from a label (TEST ONLY: not secret, not random)."""
    out = b""
    counter = 0
    while len(out) < n:
        out += hashlib.sha256(b"tombstone-crypt kat %d %s" % (counter, label.encode())).digest()
        counter += 1
    return out[:n]


def fixed_key(size, label):
    return fixed_bytes("key %d %s" % (size, label), size // 8)


def fixed_nonce(label):
    return fixed_bytes("nonce " + label, 12)


# --- docs/FORMAT.md, written independently ----------------------------------


def aad_bytes(policy, topic, record_key):
    """The associated data for (topic, record_key) under policy.

    TopicAndKey: u32be(len(topic)) | topic | flag u8, then when flag is 1
                 u32be(len(key)) | key. No record key: flag 0, no key part.
    Topic:       as TopicAndKey with flag 0 and no key part.
    None:        empty.
    """
    if policy == "None":
        return b""
    t = topic.encode("utf-8")
    out = struct.pack(">I", len(t)) + t
    if policy == "TopicAndKey" and record_key is not None:
        out += b"\x01" + struct.pack(">I", len(record_key)) + record_key
    elif policy in ("TopicAndKey", "Topic"):
        out += b"\x00"
    else:
        raise ValueError("unknown policy %r" % policy)
    return out


def wire(key_id, nonce, ct_and_tag, version=VERSION):
    """0x01 | key_id u32 BE | nonce 12 | ciphertext | tag 16."""
    assert len(nonce) == 12
    return bytes([version]) + struct.pack(">I", key_id) + nonce + ct_and_tag


def seal(key, key_id, nonce, aad, plaintext):
    return wire(key_id, nonce, AESGCM(key).encrypt(nonce, plaintext, aad))


def aes_gcm_key_proto(key):
    """AesGcmKey proto: field 3 (key_value, bytes) = 0x1a | len | key.
    Field 1 (version = 0) is omitted, as Tink writes it."""
    assert len(key) < 128  # one-byte varint length
    return bytes([0x1A, len(key)]) + key


def keyset_entry(key_id, key, status="ENABLED"):
    return {
        "keyData": {
            "typeUrl": TYPE_URL,
            "value": base64.b64encode(aes_gcm_key_proto(key)).decode("ascii"),
            "keyMaterialType": "SYMMETRIC",
        },
        "status": status,
        "keyId": key_id,
        "outputPrefixType": "TINK",
    }


def keyset_json(primary_id, entries):
    """A Tink cleartext JSON keyset (as one compact JSON text)."""
    obj = {"primaryKeyId": primary_id, "key": entries}
    return json.dumps(obj, separators=(",", ":"))


def single_keyset(key_id, key):
    return keyset_json(key_id, [keyset_entry(key_id, key)])


def hx(b):
    return None if b is None else b.hex()


# --- valid vectors ----------------------------------------------------------

PLAINTEXTS = [
    ("empty", b""),
    ("short", b"hello, tombstone"),
    ("1000b", bytes((i * 37 + 11) % 256 for i in range(1000))),
    ("all-bytes", bytes(range(256))),
]

# (label, policy, topic, record key or None)
CONTEXTS = [
    ("topic-and-key", "TopicAndKey", "orders", b"order-1"),
    ("topic-and-key-no-key", "TopicAndKey", "orders", None),
    ("topic", "Topic", "orders", b"order-1"),  # key given but not bound
    ("none", "None", "orders", b"order-1"),  # nothing bound
]

# Key ids cycled over the vectors: every one of them appears for both sizes.
KEY_IDS = [0, 1, 0x7FFFFFFF, 0xFFFFFFFF, 0x12345678, 0x80000000]

# Contexts at the edges of the AAD encoding, with the short plaintext.
EDGE_CONTEXTS = [
    ("empty-topic", "TopicAndKey", "", b"k"),
    ("empty-record-key", "TopicAndKey", "orders", b""),  # present, not absent
    ("binary-record-key", "TopicAndKey", "orders", bytes([0x00, 0xFF, 0x01, 0x80])),
    ("utf8-topic", "TopicAndKey", "commandes-\u00e9t\u00e9-\u65e5\u672c", b"cl\xc3\xa9"),
    ("topic-no-key", "Topic", "events", None),
    ("none-no-key", "None", "", None),
    ("long-topic", "TopicAndKey", "t" * 300, b"r" * 200),
]


def vector(name, size, key_id, policy, topic, record_key, plaintext):
    key = fixed_key(size, name)
    nonce = fixed_nonce(name)
    aad = aad_bytes(policy, topic, record_key)
    ct = seal(key, key_id, nonce, aad, plaintext)
    assert len(ct) == OVERHEAD + len(plaintext)
    # Self-check with the same independent implementation.
    assert AESGCM(key).decrypt(nonce, ct[HEADER_LEN:], aad) == plaintext
    return {
        "name": name,
        "key_size_bits": size,
        "key_hex": hx(key),
        "key_id": key_id,
        "nonce_hex": hx(nonce),
        "policy": policy,
        "topic": topic,
        "record_key_hex": hx(record_key),
        "aad_hex": hx(aad),
        "plaintext_hex": hx(plaintext),
        "ciphertext_hex": hx(ct),
        "keyset_json": single_keyset(key_id, key),
    }


def valid_vectors():
    out = []
    i = 0
    for size in (256, 128):
        for ctx_label, policy, topic, record_key in CONTEXTS:
            for pt_label, pt in PLAINTEXTS:
                key_id = KEY_IDS[i % len(KEY_IDS)]
                i += 1
                name = "aes%d/%s/%s/id-%d" % (size, ctx_label, pt_label, key_id)
                out.append(vector(name, size, key_id, policy, topic, record_key, pt))
        for ctx_label, policy, topic, record_key in EDGE_CONTEXTS:
            key_id = KEY_IDS[i % len(KEY_IDS)]
            i += 1
            name = "aes%d/%s/short/id-%d" % (size, ctx_label, key_id)
            out.append(vector(name, size, key_id, policy, topic, record_key, PLAINTEXTS[1][1]))
    return out


# --- vectors that must be rejected ------------------------------------------


def flip(b, index, bit=0):
    b = bytearray(b)
    b[index] ^= 1 << bit
    return bytes(b)


def fail_vectors():
    out = []

    def add(name, expect_error, keyset, policy, topic, record_key, ct, note):
        out.append(
            {
                "name": name,
                "expect_error": expect_error,
                "note": note,
                "policy": policy,
                "topic": topic,
                "record_key_hex": hx(record_key),
                "ciphertext_hex": hx(ct),
                "keyset_json": keyset,
            }
        )

    key_id = 0x0BADC0DE
    key = fixed_key(256, "fail")
    ks = single_keyset(key_id, key)
    topic, rk = "orders", b"order-1"
    pt = b"attack at dawn"
    nonce = fixed_nonce("fail")
    aad = aad_bytes("TopicAndKey", topic, rk)
    good = seal(key, key_id, nonce, aad, pt)
    body_len = len(good) - HEADER_LEN - TAG_LEN

    # Truncated: shorter than the 33 bytes of every ciphertext.
    for n in (0, 1, 32):
        add("truncated/len-%d" % n, "Truncated", ks, "TopicAndKey", topic, rk,
            good[:n], "first %d bytes of a valid ciphertext (minimum 33)" % n)
    empty_ct = seal(key, key_id, nonce, aad, b"")
    add("truncated/empty-value-minus-one", "Truncated", ks, "TopicAndKey", topic, rk,
        empty_ct[:-1], "a valid 33-byte ciphertext of an empty value, last byte removed")

    # UnsupportedVersion: the first byte is not 0x01.
    for v in (0x00, 0x02):
        add("version/0x%02x" % v, "UnsupportedVersion", ks, "TopicAndKey", topic, rk,
            bytes([v]) + good[1:], "valid ciphertext with version byte 0x%02x" % v)

    # UnknownKeyId: the key id of the ciphertext is not in the keyset.
    other_id = 0x0BADC0DF
    add("unknown-key-id/adjacent", "UnknownKeyId", ks, "TopicAndKey", topic, rk,
        seal(key, other_id, nonce, aad, pt),
        "sealed under the keyset's key bytes but with header key id %d, "
        "which the keyset does not hold" % other_id)
    add("unknown-key-id/zero", "UnknownKeyId", ks, "TopicAndKey", topic, rk,
        good[:1] + struct.pack(">I", 0) + good[5:],
        "valid ciphertext with its key id rewritten to 0")

    # KeyDisabled: the key id names a DISABLED key of the keyset.
    dis_id, dis_key = 7, fixed_key(256, "disabled")
    ks_dis = keyset_json(key_id, [keyset_entry(key_id, key), keyset_entry(dis_id, dis_key, "DISABLED")])
    add("key-disabled", "KeyDisabled", ks_dis, "TopicAndKey", topic, rk,
        seal(dis_key, dis_id, nonce, aad, pt),
        "valid ciphertext under a key that is in the keyset but DISABLED")

    # Decryption: tampering.
    add("decryption/tag-bit", "Decryption", ks, "TopicAndKey", topic, rk,
        flip(good, len(good) - 1, 7), "last bit of the tag flipped")
    add("decryption/tag-first-bit", "Decryption", ks, "TopicAndKey", topic, rk,
        flip(good, len(good) - TAG_LEN, 0), "first bit of the tag flipped")
    add("decryption/ciphertext-bit", "Decryption", ks, "TopicAndKey", topic, rk,
        flip(good, HEADER_LEN + body_len // 2, 3), "one ciphertext bit flipped")
    add("decryption/nonce-bit", "Decryption", ks, "TopicAndKey", topic, rk,
        flip(good, 5, 0), "one nonce bit flipped")
    add("decryption/empty-value-tag-bit", "Decryption", ks, "TopicAndKey", topic, rk,
        flip(empty_ct, len(empty_ct) - 1, 0), "33-byte ciphertext of an empty value, tag bit flipped")
    add("decryption/tag-truncated", "Decryption", ks, "TopicAndKey", topic, rk,
        good[:-1], "last byte removed (still at least 33 bytes)")
    add("decryption/byte-appended", "Decryption", ks, "TopicAndKey", topic, rk,
        good + b"\x00", "a zero byte appended")
    add("decryption/wrong-key-same-id", "Decryption", single_keyset(key_id, fixed_key(256, "other")),
        "TopicAndKey", topic, rk, good, "keyset holds another key under the same key id")
    add("decryption/aes128-key-of-aes256", "Decryption", single_keyset(key_id, key[:16]),
        "TopicAndKey", topic, rk, good, "keyset holds the first 16 bytes of the key (AES-128)")

    # Decryption: wrong associated data.
    add("decryption/record-key-changed", "Decryption", ks, "TopicAndKey", topic, b"order-2",
        good, "sealed for orders/order-1, opened as orders/order-2")
    add("decryption/record-key-dropped", "Decryption", ks, "TopicAndKey", topic, None,
        good, "sealed for orders/order-1, opened for orders with no record key")
    add("decryption/record-key-empty", "Decryption", ks, "TopicAndKey", topic, b"",
        good, "sealed for orders/order-1, opened with an empty (present) record key")
    add("decryption/topic-changed", "Decryption", ks, "TopicAndKey", "orders2", rk,
        good, "sealed for orders/order-1, opened as orders2/order-1")
    add("decryption/policy-topic-and-key-as-topic", "Decryption", ks, "Topic", topic, rk,
        good, "sealed under TopicAndKey, opened under Topic")
    add("decryption/policy-topic-and-key-as-none", "Decryption", ks, "None", topic, rk,
        good, "sealed under TopicAndKey, opened under None")
    sealed_topic = seal(key, key_id, nonce, aad_bytes("Topic", topic, None), pt)
    add("decryption/policy-topic-as-topic-and-key", "Decryption", ks, "TopicAndKey", topic, rk,
        sealed_topic, "sealed under Topic, opened under TopicAndKey with a record key")
    add("decryption/policy-topic-as-none", "Decryption", ks, "None", topic, rk,
        sealed_topic, "sealed under Topic, opened under None")
    sealed_none = seal(key, key_id, nonce, b"", pt)
    add("decryption/policy-none-as-topic", "Decryption", ks, "Topic", topic, rk,
        sealed_none, "sealed under None, opened under Topic")
    add("decryption/policy-none-as-topic-and-key", "Decryption", ks, "TopicAndKey", topic, rk,
        sealed_none, "sealed under None, opened under TopicAndKey")
    # The key part's length prefix: moving bytes between topic and key.
    add("decryption/topic-key-boundary", "Decryption", ks, "TopicAndKey", "orders-", b"1",
        seal(key, key_id, nonce, aad_bytes("TopicAndKey", "orders", b"-1"), pt),
        "sealed for orders/-1, opened as orders-/1")

    # Sanity: every Decryption vector really fails under AESGCM with the
    # AAD of its opening context and the key its keyset holds.
    for v in out:
        if v["expect_error"] != "Decryption":
            continue
        ks_obj = json.loads(v["keyset_json"])
        proto = base64.b64decode(ks_obj["key"][0]["keyData"]["value"])
        k = proto[2:]
        ct = bytes.fromhex(v["ciphertext_hex"])
        rkey = None if v["record_key_hex"] is None else bytes.fromhex(v["record_key_hex"])
        a = aad_bytes(v["policy"], v["topic"], rkey)
        try:
            AESGCM(k).decrypt(ct[5:HEADER_LEN], ct[HEADER_LEN:], a)
        except Exception:  # cryptography.exceptions.InvalidTag
            continue
        raise AssertionError("fail vector %s decrypts" % v["name"])
    return out


def write(name, doc):
    path = os.path.join(HERE, name)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        json.dump(doc, f, indent=2, ensure_ascii=False)
        f.write("\n")
    return path


HEADER_NOTE = (
    "Generated by tests/vectors/generate.py with Python cryptography AESGCM "
    "and FIXED keys and nonces (TEST ONLY, never reuse). Regenerate: "
    "python3 tests/vectors/generate.py"
)


def main():
    valid = valid_vectors()
    fail = fail_vectors()
    names = [v["name"] for v in valid] + [v["name"] for v in fail]
    assert len(names) == len(set(names)), "duplicate vector names"
    write("aes_gcm.json", {
        "comment": HEADER_NOTE,
        "format": "0x01 | key_id u32 BE | nonce 12 | ciphertext | tag 16; see docs/FORMAT.md",
        "vectors": valid,
    })
    write("fail_aes_gcm.json", {
        "comment": HEADER_NOTE,
        "format": "each vector must be rejected with the tombstone_crypt::Error variant expect_error",
        "vectors": fail,
    })
    print("wrote %d valid and %d fail vectors" % (len(valid), len(fail)))


if __name__ == "__main__":
    main()
