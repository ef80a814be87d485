#!/usr/bin/env python3
"""Writes tests/fixtures/confluent/*.json: records that Confluent's own client
(confluent-kafka for Python, 2.16.1, with its schema registry and encryption
rules) serialized with client-side field encryption (CSFLE, rule ENCRYPT on
fields tagged PII) and payload encryption (CSPE, ENCRYPT_PAYLOAD), offline:
a `mock://` schema and DEK registry, the `local-kms` KEK driver.

Each fixture holds what a reader needs besides the bytes: the schema and its
rule, the local-kms secret, the DEK registry's wrapped DEKs (as
`/dek-registry/v1/keks/{kek}/deks/{subject}/versions/{v}` returns them), the
records' bytes in base64 (null for a tombstone) and the values they were made
from. The fixtures do not change: run this again only to make new ones.

    python3 -m venv /tmp/cf && /tmp/cf/bin/pip install \
        'confluent-kafka[schemaregistry,json,avro]==2.16.1' tink==1.16.1 hkdf==0.0.3
    /tmp/cf/bin/python scripts/confluent-fixtures.py
"""
import base64
import copy
import json
import os
import sys
import time

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONDeserializer, JSONSerializer
from confluent_kafka.schema_registry.rules.encryption.dek_registry.dek_registry_client import (
    DekAlgorithm,
)
from confluent_kafka.schema_registry.rules.encryption.encrypt_executor import (
    Clock,
    EncryptionExecutor,
    FieldEncryptionExecutor,
)
from confluent_kafka.schema_registry.rules.encryption.localkms.local_driver import LocalKmsDriver
from confluent_kafka.schema_registry.schema_registry_client import Rule, RuleKind, RuleMode, RuleParams, RuleSet
from confluent_kafka.serialization import MessageField, SerializationContext

SECRET = "mysecret"
URL = "mock://confluent-fixtures"
DAY_MS = 24 * 60 * 60 * 1000

SCHEMA = {
    "type": "object",
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string"},
        "ssn": {"type": "string", "confluent:tags": ["PII"]},
        "note": {"type": ["null", "string"], "confluent:tags": ["PII"]},
    },
}

RECORDS = [
    {"id": 1, "name": "Ada", "ssn": "078-05-1120", "note": None},
    {"id": 2, "name": "Bo", "ssn": "", "note": "a note"},
    None,  # a tombstone
    {"id": 3, "name": "Cy", "ssn": "078-05-1120", "note": "ünïcode ✓"},
]


class FakeClock(Clock):
    def __init__(self):
        # The mock DEK registry stamps a DEK with the real time.
        self.fixed_now = int(time.time() * 1000)

    def now(self):
        return self.fixed_now


CLOCK = FakeClock()
LocalKmsDriver.register()
FIELD_EXECUTOR = FieldEncryptionExecutor.register_with_clock(CLOCK)
PAYLOAD_EXECUTOR = EncryptionExecutor.register_with_clock(CLOCK)


def case(name, rule_type, algorithm, expiry_days, rotate_after=None):
    # One registry for every case (the rule executors are configured once
    # per registry); each case is a topic of its own.
    topic = "customers-" + name
    subject = topic + "-value"
    client = SchemaRegistryClient.new_client({"url": URL})
    params = {
        "encrypt.kek.name": "kek-" + name,
        "encrypt.kms.type": "local-kms",
        "encrypt.kms.key.id": "local-kms://" + name,
        "encrypt.dek.algorithm": algorithm,
    }
    if expiry_days:
        params["encrypt.dek.expiry.days"] = str(expiry_days)
    if rule_type == "ENCRYPT":
        rule = Rule("encrypt-pii", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, "ENCRYPT", ["PII"],
                    RuleParams(params), None, None, "ERROR,ERROR", False)
        rule_set = RuleSet(None, [rule])
    else:
        rule = Rule("encrypt-payload", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, "ENCRYPT_PAYLOAD", None,
                    RuleParams(params), None, None, "ERROR,ERROR", False)
        rule_set = RuleSet(None, None, [rule])
    schema = Schema(json.dumps(SCHEMA), "JSON", [], None, rule_set)
    schema_id = client.register_schema(subject, schema)
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    rule_conf = {"secret": SECRET}
    ser = JSONSerializer(json.dumps(SCHEMA), client, conf=conf, rule_conf=rule_conf)
    de = JSONDeserializer(None, schema_registry_client=client, rule_conf=rule_conf)
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = []
    for i, value in enumerate(RECORDS):
        if rotate_after is not None and i == rotate_after:
            CLOCK.fixed_now += (expiry_days + 1) * DAY_MS
        # The serializer encrypts the fields of the dict it is given in place.
        data = ser(copy.deepcopy(value), ctx)
        if value is not None:
            assert de(data, ctx) == value, (name, value)
        records.append({"value": value, "bytes": None if data is None else base64.b64encode(data).decode()})
    CLOCK.fixed_now = int(time.time() * 1000)
    # The DEK registry the rule's executor wrote to.
    deks = FIELD_EXECUTOR.executor.client if rule_type == "ENCRYPT" else PAYLOAD_EXECUTOR.client
    kek_name = params["encrypt.kek.name"]
    dek_list = []
    for version in range(1, 21):
        try:
            dek = deks.get_dek(kek_name, subject, DekAlgorithm[algorithm], version)
        except Exception as e:
            print(name, version, repr(e), file=sys.stderr)
            break
        if dek is None or not dek.encrypted_key_material:
            break
        dek_list.append({
            "kekName": kek_name,
            "subject": subject,
            "version": dek.version,
            "algorithm": algorithm,
            "encryptedKeyMaterial": dek.encrypted_key_material,
        })
    return {
        "made_by": "scripts/confluent-fixtures.py, confluent-kafka 2.16.1 (Python), tink 1.16.1",
        "case": name,
        "topic": topic,
        "subject": subject,
        "schema_id": schema_id,
        "schema": schema.to_dict() if hasattr(schema, "to_dict") else None,
        "rule": rule.to_dict(),
        "secret": SECRET,
        "deks": dek_list,
        "records": records,
    }


def main():
    out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "fixtures", "confluent")
    os.makedirs(out, exist_ok=True)
    cases = [
        case("field-gcm", "ENCRYPT", "AES256_GCM", 0),
        case("field-gcm128", "ENCRYPT", "AES128_GCM", 0),
        case("field-siv", "ENCRYPT", "AES256_SIV", 0),
        case("field-gcm-rotated", "ENCRYPT", "AES256_GCM", 1, rotate_after=1),
        case("payload-gcm", "ENCRYPT_PAYLOAD", "AES256_GCM", 0),
        case("payload-gcm-rotated", "ENCRYPT_PAYLOAD", "AES256_GCM", 1, rotate_after=1),
    ]
    for c in cases:
        with open(os.path.join(out, c["case"] + ".json"), "w") as f:
            json.dump(c, f, indent=1, ensure_ascii=False)
            f.write("\n")
        print(c["case"], len(c["deks"]), "DEKs", file=sys.stderr)


if __name__ == "__main__":
    main()
