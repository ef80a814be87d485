#!/usr/bin/env python3
"""Confluent's own client (confluent-kafka 2.16.1 for Python, its schema
registry client and encryption rules) as a peer of tests/confluent.rs,
offline: `mock://` schema and DEK registries, the `local-kms` KEK driver.

    confluent_peer.py write   prints, for each case (field and payload rules,
                              GCM, SIV, rotated DEKs), the records this
                              client wrote with what a reader needs besides
                              them: the schema and rule, the secret, the
                              wrapped DEKs as the DEK registry holds them
    confluent_peer.py write-avro  the same for the Avro cases (AVRO_SCHEMA,
                              with a tagged bytes field; bytes are lists of
                              numbers in the JSON printed and read)
    confluent_peer.py read    reads stdin [{schema, subject, secret, deks,
                              records: [base64 | null]}, ...]: registers
                              each schema (job i must get id i + 1, the id
                              its records carry) and the wrapped DEKs,
                              deserializes each record with this client,
                              prints [[{"ok": value} | {"error": why}], ...]
    confluent_peer.py read-registry reads stdin {subject, secret, records}:
                              everything else from the registry at
                              CONFLUENT_PEER_REGISTRY, over its REST client
    confluent_peer.py corpus  reads stdin [fixture, ...] (tests/fixtures/
                              confluent-corpus/*.json: Confluent's own test
                              and documented schemas): for each, writes its
                              records with this client under its schema and
                              rule set (as the Schema Registry stores them:
                              a rule's kind and mode filled in where left
                              out; a KEK outside local-kms moved to it,
                              offline), and reads each back; prints what
                              write prints (with "read_back"), or {"case",
                              "write_error"}
    (with CONFLUENT_PEER_REGISTRY=http://..., write and produce use that
    registry instead of one in memory; with CONFLUENT_PEER_KMS="TYPE KEY_ID",
    e.g. "aws-kms arn:aws:kms:..." or "hcvault http://HOST:PORT/transit/
    keys/NAME", write's KEKs are that KMS key, through Confluent's aws-kms
    and hcvault drivers (boto3 and hvac, configured from the environment),
    and CONFLUENT_PEER_CASES="a,b" writes only those cases)
    confluent_peer.py consume reads stdin {bootstrap, topic, count, schema,
                              subject, secret, deks}: reads count records of
                              partition 0 from the broker with its Consumer
    confluent_peer.py produce reads stdin {bootstrap, topic, case}: writes a
                              case's records to partition 0 with its
                              Producer, prints the case as write does
    confluent_peer.py rules   prints, for each rule variant (RULE_VARIANTS:
                              a rule type in lower case, parameters and tags
                              in the schema's metadata, a rule without
                              tags, tags on arrays, items, objects, JSON
                              and Avro), what write prints, or
                              {"case", "write_error"} where this client
                              refuses to write
"""
import base64
import copy
import json
import os
import sys
import uuid
import time

from confluent_kafka.schema_registry import (
    Metadata,
    MetadataProperties,
    MetadataTags,
    Schema,
    SchemaRegistryClient,
)
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
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
# A registry over HTTP (tests/interop/schema_registry_server.py) when the
# test gives one, else one in memory.
URL = os.environ.get("CONFLUENT_PEER_REGISTRY") or "mock://confluent-fixtures"
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

# The same customers in Avro, with a tagged `bytes` field (`blob`) too.
AVRO_SCHEMA = {
    "type": "record",
    "name": "Customer",
    "namespace": "example",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "name", "type": "string"},
        {"name": "ssn", "type": "string", "confluent:tags": ["PII"]},
        {"name": "note", "type": ["null", "string"], "default": None, "confluent:tags": ["PII"]},
        {"name": "blob", "type": "bytes", "confluent:tags": ["PII"]},
    ],
}

AVRO_RECORDS = [
    None if r is None else dict(r, blob=bytes([0, 1, 254, 255]) if i != 1 else b"")
    for i, r in enumerate(RECORDS)
]


def jsonable(value):
    """A record as JSON: Avro bytes as a list of numbers (the JSON form
    tests/confluent_avro.rs reads and writes)."""
    if isinstance(value, dict):
        return {k: jsonable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [jsonable(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return list(value)
    return value


class FakeClock(Clock):
    def __init__(self):
        # The mock DEK registry stamps a DEK with the real time.
        self.fixed_now = int(time.time() * 1000)

    def now(self):
        return self.fixed_now


CLOCK = FakeClock()
LocalKmsDriver.register()
# A KEK in a KMS instead of local-kms: "TYPE KEY_ID".
KMS = os.environ.get("CONFLUENT_PEER_KMS")
if KMS:
    from confluent_kafka.schema_registry.rules.encryption.awskms.aws_driver import AwsKmsDriver
    from confluent_kafka.schema_registry.rules.encryption.hcvault.hcvault_driver import HcVaultKmsDriver

    AwsKmsDriver.register()
    HcVaultKmsDriver.register()
FIELD_EXECUTOR = FieldEncryptionExecutor.register_with_clock(CLOCK)
PAYLOAD_EXECUTOR = EncryptionExecutor.register_with_clock(CLOCK)


def serde_pair(client, fmt, text, avro_text=""):
    """This client's serializer (the subject's latest schema, never
    registered again) and deserializer for `fmt`; the Avro serializer is
    given `avro_text` (default: `text`; None: the registered schema)."""
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    rule_conf = {"secret": SECRET}
    if fmt == "AVRO":
        schema_text = text if avro_text == "" else avro_text
        return (AvroSerializer(client, schema_text, conf=conf, rule_conf=rule_conf),
                AvroDeserializer(client, rule_conf=rule_conf))
    return (JSONSerializer(text, client, conf=conf, rule_conf=rule_conf),
            JSONDeserializer(None, schema_registry_client=client, rule_conf=rule_conf))


def case(name, rule_type, algorithm, expiry_days, rotate_after=None, topic=None, produce=None, fmt="JSON"):
    # One registry for every case (the rule executors are configured once
    # per registry); each case is a topic of its own.
    topic = topic or "customers-" + name
    subject = topic + "-value"
    client = SchemaRegistryClient.new_client({"url": URL})
    params = {
        "encrypt.kek.name": "kek-" + name,
        "encrypt.kms.type": "local-kms",
        "encrypt.kms.key.id": "local-kms://" + name,
        "encrypt.dek.algorithm": algorithm,
    }
    if KMS:
        params["encrypt.kms.type"], params["encrypt.kms.key.id"] = KMS.split(" ", 1)
    if expiry_days:
        params["encrypt.dek.expiry.days"] = str(expiry_days)
    if rule_type == "ENCRYPT":
        rule = Rule("encrypt-pii", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, "ENCRYPT", ["PII"],
                    RuleParams(params), None, None, "ERROR,NONE", False)
        rule_set = RuleSet(None, [rule])
    else:
        rule = Rule("encrypt-payload", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, "ENCRYPT_PAYLOAD", None,
                    RuleParams(params), None, None, "ERROR,NONE", False)
        rule_set = RuleSet(None, None, [rule])
    text = json.dumps(AVRO_SCHEMA if fmt == "AVRO" else SCHEMA)
    schema = Schema(text, fmt, [], None, rule_set)
    schema_id = client.register_schema(subject, schema)
    ser, de = serde_pair(client, fmt, text)
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = []
    for i, value in enumerate(AVRO_RECORDS if fmt == "AVRO" else RECORDS):
        if rotate_after is not None and i == rotate_after:
            CLOCK.fixed_now += (expiry_days + 1) * DAY_MS
        # The serializer encrypts the fields of the dict it is given in place.
        data = ser(copy.deepcopy(value), ctx)
        if produce is not None:
            produce(f"c-{i}".encode(), data)
        if value is not None:
            assert de(data, ctx) == value, (name, value)
        records.append({"value": jsonable(value), "bytes": None if data is None else base64.b64encode(data).decode()})
    CLOCK.fixed_now = int(time.time() * 1000)
    # The DEK registry the rule's executor wrote to.
    deks = FIELD_EXECUTOR.executor.client if rule_type == "ENCRYPT" else PAYLOAD_EXECUTOR.client
    kek_name = params["encrypt.kek.name"]
    dek_list = []
    for version in range(1, 21):
        try:
            dek = deks.get_dek(kek_name, subject, DekAlgorithm[algorithm], version)
        except Exception:
            break  # no such version: the last one was the newest
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



CASES = {
    "field-gcm": ("ENCRYPT", "AES256_GCM", 0, None),
    "field-gcm128": ("ENCRYPT", "AES128_GCM", 0, None),
    "field-siv": ("ENCRYPT", "AES256_SIV", 0, None),
    "field-gcm-rotated": ("ENCRYPT", "AES256_GCM", 1, 1),
    "payload-gcm": ("ENCRYPT_PAYLOAD", "AES256_GCM", 0, None),
    "payload-gcm-rotated": ("ENCRYPT_PAYLOAD", "AES256_GCM", 1, 1),
}

# Avro (AVRO_SCHEMA): written by `write-avro`, or by `write` when named in
# CONFLUENT_PEER_CASES.
AVRO_CASES = {
    "avro-field-gcm": ("ENCRYPT", "AES256_GCM", 0, None),
    "avro-field-siv": ("ENCRYPT", "AES256_SIV", 0, None),
    "avro-field-gcm-rotated": ("ENCRYPT", "AES256_GCM", 1, 1),
    "avro-payload-gcm": ("ENCRYPT_PAYLOAD", "AES256_GCM", 0, None),
}


def write(avro=False):
    only = os.environ.get("CONFLUENT_PEER_CASES")
    names = only.split(",") if only else list(AVRO_CASES if avro else CASES)
    out = []
    for n in names:
        kind = AVRO_CASES.get(n) or CASES[n]
        out.append(case(n, *kind[:3], rotate_after=kind[3], fmt="AVRO" if n in AVRO_CASES else "JSON"))
    return out


# Variants of the field rule and of the schema, each as Confluent's client
# applies it (tests/confluent_rules.rs reads each, or must refuse it). A
# variant is a change to the base case: JSON Schema (SCHEMA, RECORDS) or
# Avro (AVRO_SCHEMA, AVRO_RECORDS), the ENCRYPT rule tagged PII.
STRINGS = {"type": "object", "properties": {
    "name": {"type": "string"}, "ssn": {"type": "string"}, "note": {"type": ["null", "string"]}}}
STRING_RECORDS = [None if r is None else {k: r[k] for k in ("name", "ssn", "note")} for r in RECORDS]
ADDR = {"type": "object", "properties": {
    "id": {"type": "integer"},
    "addr": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}}}
ADDR_RECORDS = [{"id": 1, "addr": {"street": "1 Main St", "city": "Springfield"}}, None,
                {"id": 2, "addr": {"street": "", "city": "Shelbyville"}}]
CARDS_RECORDS = [{"id": 1, "cards": ["4111 1111", "", "5500 0000"]}, None, {"id": 2, "cards": []}]
AVRO_STRINGS = {"type": "record", "name": "Customer", "namespace": "example", "fields": [
    {"name": "name", "type": "string"}, {"name": "ssn", "type": "string"},
    {"name": "note", "type": ["null", "string"], "default": None}, {"name": "blob", "type": "bytes"}]}
AVRO_STRING_RECORDS = [None if r is None else {k: r[k] for k in ("name", "ssn", "note", "blob")}
                       for r in AVRO_RECORDS]
AVRO_BAG = {"type": "record", "name": "Bag", "namespace": "example", "fields": [
    {"name": "id", "type": "long"},
    {"name": "cards", "type": {"type": "array", "items": "string"}},
    {"name": "attrs", "type": {"type": "map", "values": ["null", "bytes"]}},
    {"name": "addr", "type": {"type": "record", "name": "Address", "fields": [
        {"name": "street", "type": "string"}, {"name": "city", "type": "string"}]}}]}
AVRO_BAG_RECORDS = [
    {"id": 1, "cards": ["4111 1111", ""], "attrs": {"a": b"\x00\x01", "b": None},
     "addr": {"street": "1 Main St", "city": "Springfield"}},
    None,
    {"id": 2, "cards": [], "attrs": {}, "addr": {"street": "", "city": "Shelbyville"}},
]


def untagged(doc):
    doc = copy.deepcopy(doc)
    for p in (doc.get("properties") or {}).values():
        p.pop("confluent:tags", None)
    for f in doc.get("fields") or []:
        f.pop("confluent:tags", None)
    return doc


def tag(doc, *path):
    """The doc with PII inline on the property or field at path."""
    doc = copy.deepcopy(doc)
    node = doc
    for p in path:
        node = node["properties"][p] if "properties" in node else next(f for f in node["fields"] if f["name"] == p)
    node["confluent:tags"] = ["PII"]
    return doc


def variant(name):
    """(format, schema, records, rule type, rule tags, metadata tags, metadata properties)."""
    cards = dict(SCHEMA, properties=dict(SCHEMA["properties"], cards={"type": "array", "items": {"type": "string"}}))
    cards_records = [None if r is None else dict(RECORDS[0], **r) for r in CARDS_RECORDS]
    return {
        "type-lowercase": ("JSON", SCHEMA, RECORDS, "encrypt", ["PII"], None, None),
        "params-in-metadata": ("JSON", SCHEMA, RECORDS, "ENCRYPT", ["PII"], None,
                               {"encrypt.dek.algorithm": "AES256_SIV"}),
        "metadata-tags": ("JSON", untagged(SCHEMA), RECORDS, "ENCRYPT", ["PII"],
                          {"**.ssn": ["PII"], "$.not?": ["PII"]}, None),
        "metadata-tags-nested": ("JSON", ADDR, ADDR_RECORDS, "ENCRYPT", ["PII"], {"$.addr.street": ["PII"]}, None),
        "metadata-tags-star": ("JSON", ADDR, ADDR_RECORDS, "ENCRYPT", ["PII"], {"$.*.street": ["PII", "X"]}, None),
        "rule-without-tags": ("JSON", SCHEMA, RECORDS, "ENCRYPT", [], None, None),
        "rule-without-tags-strings": ("JSON", STRINGS, STRING_RECORDS, "ENCRYPT", [], None, None),
        "tag-on-array": ("JSON", tag(cards, "cards"), cards_records, "ENCRYPT", ["PII"], None, None),
        "tag-on-items": ("JSON", dict(cards, properties=dict(cards["properties"], cards={
            "type": "array", "items": {"type": "string", "confluent:tags": ["PII"]}})),
            cards_records, "ENCRYPT", ["PII"], None, None),
        "tag-on-object": ("JSON", tag(ADDR, "addr"), ADDR_RECORDS, "ENCRYPT", ["PII"], None, None),
        "nullable-object": ("JSON", dict(ADDR, properties=dict(ADDR["properties"], addr=dict(
            tag(ADDR, "addr", "street")["properties"]["addr"], type=["object", "null"]))),
            ADDR_RECORDS + [{"id": 3, "addr": None}], "ENCRYPT", ["PII"], None, None),
        "metadata-tags-ref": ("JSON", {"type": "object", "definitions": ADDR["properties"],
                                       "properties": {"addr": {"$ref": "#/definitions/addr"}}},
                              [{"addr": {"street": "1 Main St", "city": "x"}}], "ENCRYPT", ["PII"],
                              {"**.street": ["PII"]}, None),
        "avro-metadata-tags": ("AVRO", untagged(AVRO_SCHEMA), AVRO_RECORDS, "ENCRYPT", ["PII"],
                               {"example.Customer.ssn": ["PII"], "**.n?te": ["PII"], "*.*.blob": ["PII"]}, None),
        "avro-array-map-record": ("AVRO", tag(tag(AVRO_BAG, "cards"), "attrs"), AVRO_BAG_RECORDS, "ENCRYPT", ["PII"],
                                  {"example.Address.street": ["PII"]}, None),
        "avro-rule-without-tags": ("AVRO", AVRO_SCHEMA, AVRO_RECORDS, "ENCRYPT", [], None, None),
        "avro-rule-without-tags-strings": ("AVRO", AVRO_STRINGS, AVRO_STRING_RECORDS, "ENCRYPT", [], None, None),
    }[name]


RULE_VARIANTS = [
    "type-lowercase", "params-in-metadata", "metadata-tags", "metadata-tags-nested", "metadata-tags-star",
    "rule-without-tags", "rule-without-tags-strings", "tag-on-array", "tag-on-items", "tag-on-object",
    "nullable-object", "metadata-tags-ref", "avro-metadata-tags", "avro-array-map-record",
    "avro-rule-without-tags", "avro-rule-without-tags-strings",
]


def rule_variant(name):
    topic = "rules-" + name
    subject = topic + "-value"
    client = SchemaRegistryClient.new_client({"url": URL})
    params = {
        "encrypt.kek.name": "kek-" + name,
        "encrypt.kms.type": "local-kms",
        "encrypt.kms.key.id": "local-kms://" + name,
    }
    fmt, doc, values, rule_type, tags, meta_tags, meta_props = variant(name)
    algorithm = (meta_props or {}).get("encrypt.dek.algorithm", "AES256_GCM")
    metadata = None
    if meta_tags or meta_props:
        metadata = Metadata(MetadataTags(meta_tags) if meta_tags else None,
                            MetadataProperties(meta_props) if meta_props else None, None)
    rule = Rule("encrypt-pii", "", RuleKind.TRANSFORM, RuleMode.WRITEREAD, rule_type, tags,
                RuleParams(params), None, None, "ERROR,NONE", False)
    text = json.dumps(doc)
    schema = Schema(text, fmt, [], metadata, RuleSet(None, [rule]))
    schema_id = client.register_schema(subject, schema)
    conf = {"auto.register.schemas": False, "use.latest.version": True}
    if fmt == "AVRO":
        ser = AvroSerializer(client, text, conf=conf, rule_conf={"secret": SECRET})
    else:
        ser = JSONSerializer(text, client, conf=conf, rule_conf={"secret": SECRET})
    ctx = SerializationContext(topic, MessageField.VALUE)
    records = []
    try:
        for value in values:
            data = ser(copy.deepcopy(value), ctx)
            records.append({"value": jsonable(value), "bytes": None if data is None else base64.b64encode(data).decode()})
    except Exception as e:
        return {"case": name, "write_error": repr(e.__cause__ or e), "subject": subject, "schema_id": schema_id,
                "schema": client.get_latest_version(subject).schema.to_dict(), "deks": []}
    deks = FIELD_EXECUTOR.executor.client
    try:
        dek = deks.get_dek("kek-" + name, subject, DekAlgorithm[algorithm], 1)
    except Exception:
        dek = None  # nothing was encrypted: no DEK
    registered = client.get_latest_version(subject).schema
    return {
        "case": name,
        "subject": subject,
        "schema_id": schema_id,
        "schema": registered.to_dict(),
        "secret": SECRET,
        "deks": [] if dek is None else [{
            "kekName": "kek-" + name,
            "subject": subject,
            "version": 1,
            "algorithm": algorithm,
            "encryptedKeyMaterial": dek.encrypted_key_material,
        }],
        "records": records,
    }


def read(jobs):
    """Reads records written elsewhere: each job {schema, subject, secret,
    deks, records} registers its schema (job i must get id i + 1, the id its
    records carry) and its wrapped DEKs in one registry of this run's own;
    each record gives {"ok": value} or {"error": why}."""
    client = SchemaRegistryClient.new_client({"url": "mock://read-" + uuid.uuid4().hex})
    results = []
    for i, job in enumerate(jobs):
        de, topic = reader(client, i, job)
        out = []
        for r in job["records"]:
            data = None if r is None else base64.b64decode(r)
            try:
                out.append({"ok": jsonable(de(data, SerializationContext(topic, MessageField.VALUE)))})
            except Exception as e:
                out.append({"error": repr(e.__cause__ or e)})
        results.append(out)
    return results


def reader(client, i, job):
    """Registers job i's schema (it must get id i + 1) and wrapped DEKs;
    its deserializer and topic."""
    s = job["schema"]
    rule_set = RuleSet.from_dict(s["ruleSet"]) if s.get("ruleSet") else None
    fmt = s.get("schemaType") or "AVRO"  # the registry leaves AVRO out
    metadata = Metadata.from_dict(s["metadata"]) if s.get("metadata") else None
    schema = Schema(s["schema"], fmt, [], metadata, rule_set)
    schema_id = client.register_schema(job["subject"], schema)
    if schema_id != i + 1:
        raise SystemExit(f"job {i}: the schema got id {schema_id}, not {i + 1}")
    if fmt == "AVRO":
        de = AvroDeserializer(client, rule_conf={"secret": job["secret"]})
    else:
        de = JSONDeserializer(None, schema_registry_client=client, rule_conf={"secret": job["secret"]})
    # Each KEK as the schema's rules name it.
    keks = {}
    for kind in ("domainRules", "encodingRules"):
        for rule in (s.get("ruleSet") or {}).get(kind) or []:
            params = rule.get("params") or {}
            if "encrypt.kek.name" in params:
                keks[params["encrypt.kek.name"]] = (params.get("encrypt.kms.type"), params.get("encrypt.kms.key.id"))
    for d in job["deks"]:
        for registry in (FIELD_EXECUTOR.executor.client, PAYLOAD_EXECUTOR.client):
            if registry is None:
                continue
            kms_type, kms_key_id = keks[d["kekName"]]
            try:
                registry.register_kek(d["kekName"], kms_type, kms_key_id, False)
            except Exception:
                pass  # registered already
            registry.register_dek(d["kekName"], d["subject"], d["encryptedKeyMaterial"],
                                  DekAlgorithm[d["algorithm"]], d["version"])
    return de, job["subject"].removesuffix("-value")


def read_registry(job):
    """Reads records of job["subject"] with everything (schemas, KEKs, DEKs)
    from the registry at CONFLUENT_PEER_REGISTRY, through its REST client:
    [{"ok": value} | {"error": why}]."""
    client = SchemaRegistryClient.new_client({"url": URL})
    de = JSONDeserializer(None, schema_registry_client=client, rule_conf={"secret": job["secret"]})
    topic = job["subject"].removesuffix("-value")
    out = []
    for r in job["records"]:
        data = None if r is None else base64.b64decode(r)
        try:
            out.append({"ok": de(data, SerializationContext(topic, MessageField.VALUE))})
        except Exception as e:
            out.append({"error": repr(e.__cause__ or e)})
    return out


def consume(job):
    """Reads job["count"] records of partition 0 of job["topic"] from the
    broker with confluent-kafka's Consumer, each value through the
    deserializer: [{"key": text, "ok": value} | {"key": text, "error": why}]."""
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING

    client = SchemaRegistryClient.new_client({"url": "mock://consume-" + uuid.uuid4().hex})
    de, topic = reader(client, 0, job)
    consumer = Consumer({"bootstrap.servers": job["bootstrap"], "group.id": "confluent-peer-" + topic,
                         "enable.auto.commit": False})
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out = []
    deadline = time.monotonic() + 60
    try:
        while len(out) < job["count"]:
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out after {len(out)} records")
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                raise SystemExit(f"consume error: {msg.error()}")
            r = {"key": (msg.key() or b"").decode()}
            try:
                r["ok"] = jsonable(de(msg.value(), SerializationContext(topic, MessageField.VALUE)))
            except Exception as e:
                r["error"] = repr(e.__cause__ or e)
            out.append(r)
    finally:
        consumer.close()
    return out


def produce(job):
    """Writes the records of one case to partition 0 of job["topic"] on the
    broker with confluent-kafka's Producer (keys c-0, c-1, ...; a tombstone
    is a null value); prints the case (schema, DEKs, values) as write does."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": job["bootstrap"], "enable.idempotence": True})

    def send(key, value):
        producer.produce(job["topic"], key=key, value=value, partition=0)

    kinds = dict(CASES, **AVRO_CASES)
    rule_type, algorithm, expiry, rotate_after = kinds[job["case"]]
    fmt = "AVRO" if job["case"] in AVRO_CASES else "JSON"
    c = case(job["case"], rule_type, algorithm, expiry, rotate_after=rotate_after, topic=job["topic"],
             produce=send, fmt=fmt)
    if producer.flush(30) != 0:
        raise SystemExit("records not delivered")
    return c


def from_corpus(value):
    """A corpus value as this client takes it: {"$bytes": base64} as bytes."""
    if isinstance(value, dict):
        if set(value) == {"$bytes"}:
            return base64.b64decode(value["$bytes"])
        return {k: from_corpus(v) for k, v in value.items()}
    if isinstance(value, list):
        return [from_corpus(v) for v in value]
    return value


def to_corpus(value):
    """This client's value in the corpus's JSON: bytes as {"$bytes": base64}."""
    if isinstance(value, dict):
        return {k: to_corpus(v) for k, v in value.items()}
    if isinstance(value, list):
        return [to_corpus(v) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": base64.b64encode(value).decode()}
    return value


def as_registered(rule_set):
    """A rule set as Confluent's Schema Registry stores it (a rule without
    kind or mode is a WRITEREAD transform: this client's mock registry
    would keep it without, and this client then skips the rule), each KEK
    in local-kms (offline; the KEK's name and the rule's other fields as
    written)."""
    rule_set = copy.deepcopy(rule_set or {})
    for kind in ("domainRules", "encodingRules", "migrationRules"):
        for rule in rule_set.get(kind) or []:
            rule.setdefault("kind", "TRANSFORM")
            rule.setdefault("mode", "WRITEREAD")
            params = rule.get("params") or {}
            if params.get("encrypt.kms.type") not in (None, "local-kms"):
                params["encrypt.kms.type"] = "local-kms"
                params["encrypt.kms.key.id"] = "mykey"
    return rule_set


def corpus_case(c):
    from confluent_kafka.schema_registry import SchemaReference

    name = c["case"]
    topic = "corpus-" + name
    subject = topic + "-value"
    client = SchemaRegistryClient.new_client({"url": URL})
    refs = []
    for r in c.get("references") or []:
        ref_subject = f"{topic}-{r['subject']}"
        client.register_schema(ref_subject, Schema(json.dumps(r["schema"]), r["format"]))
        refs.append(SchemaReference(r["name"], ref_subject, 1))
    rule_set = as_registered(c["ruleSet"])
    metadata = Metadata.from_dict(c["metadata"]) if c.get("metadata") else None
    text = json.dumps(c["schema"])
    schema = Schema(text, c["format"], refs, metadata, RuleSet.from_dict(rule_set))
    schema_id = client.register_schema(subject, schema)
    # The Avro serializer takes the registered schema (with its references).
    ser, de = serde_pair(client, c["format"], text, avro_text=None)
    ctx = SerializationContext(topic, MessageField.VALUE)
    registered = client.get_latest_version(subject).schema.to_dict()
    out = {"case": name, "subject": subject, "schema_id": schema_id, "schema": registered}
    records = []
    advance = c.get("advance_days") or [0] * len(c["records"])
    try:
        for value, days in zip(c["records"], advance):
            CLOCK.fixed_now += days * DAY_MS
            data = ser(from_corpus(copy.deepcopy(value)), ctx)
            back = None if data is None else to_corpus(de(data, ctx))
            records.append({"value": value, "bytes": None if data is None else base64.b64encode(data).decode(),
                            "read_back": back})
    except Exception as e:
        out["write_error"] = repr(e.__cause__ or e)
        return out
    finally:
        CLOCK.fixed_now = int(time.time() * 1000)
    dek_list = []
    for rule in (rule_set.get("domainRules") or []) + (rule_set.get("encodingRules") or []):
        params = rule.get("params") or {}
        kek = params.get("encrypt.kek.name")
        if not kek or rule.get("type", "").upper() not in ("ENCRYPT", "ENCRYPT_PAYLOAD"):
            continue
        algorithm = params.get("encrypt.dek.algorithm", "AES256_GCM")
        registry = FIELD_EXECUTOR.executor.client if rule["type"].upper() == "ENCRYPT" else PAYLOAD_EXECUTOR.client
        for version in range(1, 21):
            try:
                dek = registry.get_dek(kek, subject, DekAlgorithm[algorithm], version)
            except Exception:
                break
            if dek is None or not dek.encrypted_key_material:
                break
            dek_list.append({"kekName": kek, "subject": subject, "version": dek.version, "algorithm": algorithm,
                             "encryptedKeyMaterial": dek.encrypted_key_material})
    out["deks"] = dek_list
    out["secret"] = SECRET
    out["records"] = records
    return out


def main():
    if sys.argv[1:] == ["write"]:
        json.dump(write(), sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["write-avro"]:
        json.dump(write(avro=True), sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["read-registry"]:
        json.dump(read_registry(json.load(sys.stdin)), sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["consume"]:
        json.dump(consume(json.load(sys.stdin)), sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["produce"]:
        json.dump(produce(json.load(sys.stdin)), sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["rules"]:
        json.dump([rule_variant(n) for n in RULE_VARIANTS], sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["corpus"]:
        json.dump([corpus_case(c) for c in json.load(sys.stdin)], sys.stdout, ensure_ascii=False)
    elif sys.argv[1:] == ["read"]:
        json.dump(read(json.load(sys.stdin)), sys.stdout, ensure_ascii=False)
    else:
        raise SystemExit("usage: confluent_peer.py write|write-avro|rules|corpus|read|read-registry|consume|produce")


if __name__ == "__main__":
    main()
