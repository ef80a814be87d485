#!/usr/bin/env python3
"""What confluent-kafka 2.16.1 (Python) does with the schemas of
tests/confluent_edges.rs. For each case: the record it writes (base64) or
its error, and whether the secret shows in the bytes.

    confluent_edges_peer.py            all cases, a JSON list on stdout
    confluent_edges_peer.py NAME ...   those cases
"""
import base64
import copy
import json
import sys
import uuid

from confluent_kafka.schema_registry import Metadata, MetadataProperties, MetadataTags, Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer, AvroDeserializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer, JSONDeserializer
from confluent_kafka.schema_registry.rules.encryption.encrypt_executor import EncryptionExecutor, FieldEncryptionExecutor
from confluent_kafka.schema_registry.rules.encryption.localkms.local_driver import LocalKmsDriver
from confluent_kafka.schema_registry.schema_registry_client import RuleSet
from confluent_kafka.serialization import MessageField, SerializationContext

SECRET = "078-05-1120"
LocalKmsDriver.register()
FieldEncryptionExecutor.register()
EncryptionExecutor.register()


def rule(tags=("PII",), **extra):
    r = {"name": "pii", "kind": "TRANSFORM", "mode": "WRITEREAD", "type": "ENCRYPT", "tags": list(tags),
         "params": {"encrypt.kek.name": "k1", "encrypt.kms.type": "local-kms", "encrypt.kms.key.id": "local-kms://k1"}}
    r.update(extra)
    return r


OBJ = lambda props, **kw: dict({"type": "object", "properties": props}, **kw)
S = {"type": "string"}
T = {"type": "string", "confluent:tags": ["PII"]}

# name: (fmt, schema doc, ruleSet, metadata, record)
CASES = {
    # a string property that also has `items`
    "json-string-with-items": ("JSON", OBJ({"ssn": dict(T, items={"type": "string"})}),
                               {"domainRules": [rule()]}, None, {"ssn": SECRET}),
    "json-nullable-string-with-items": ("JSON", OBJ({"ssn": {"type": ["string", "null"], "items": S,
                                                              "confluent:tags": ["PII"]}}),
                                        {"domainRules": [rule()]}, None, {"ssn": SECRET}),
    # an object that also has `items`, its property tagged by metadata / a rule without tags
    "json-object-with-items-metadata": ("JSON", OBJ({"ssn": S}, items={}), {"domainRules": [rule()]},
                                        {"tags": {"$.ssn": ["PII"]}}, {"ssn": SECRET}),
    "json-object-with-items-no-tags": ("JSON", OBJ({"ssn": S}, items={}), {"domainRules": [rule(tags=())]},
                                       None, {"ssn": SECRET}),
    # confluent:tags an object (Python's set() of a dict is its keys)
    "json-tags-object": ("JSON", OBJ({"ssn": {"type": "string", "confluent:tags": {"PII": True}}}),
                         {"domainRules": [rule()]}, None, {"ssn": SECRET}),
    "avro-tags-object": ("AVRO", {"type": "record", "name": "C", "fields": [
        {"name": "ssn", "type": "string", "confluent:tags": {"PII": True}}]},
        {"domainRules": [rule()]}, None, {"ssn": SECRET}),
    # a record not as its schema says: Confluent validates (after its rules)
    "json-record-shape-differs": ("JSON", OBJ({"addr": OBJ({"street": T})}), {"domainRules": [rule()]}, None,
                                  {"addr": [{"street": SECRET}]}),
    # enableAt other than ALL / CLIENT: every rule off in Confluent's client
    "enable-at-server": ("JSON", OBJ({"ssn": T}), {"domainRules": [rule()], "enableAt": "SERVER"}, None,
                         {"ssn": SECRET}),
    # rule tags that are not strings
    "rule-tags-not-strings": ("JSON", OBJ({"ssn": S, "name": S}), {"domainRules": [rule(tags=(1,))]}, None,
                              {"ssn": SECRET, "name": "Ada"}),
    # expiry days as a number
    "expiry-days-number": ("JSON", OBJ({"ssn": T}), {"domainRules": [dict(rule(), params=dict(
        rule()["params"], **{"encrypt.dek.expiry.days": 1}))]}, None, {"ssn": SECRET}),
    # Avro: a nested record with an empty namespace inside a namespaced one
    "avro-empty-namespace": ("AVRO", {"type": "record", "name": "R", "namespace": "ns", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "I", "namespace": "", "fields": [
            {"name": "ssn", "type": "string"}]}}]},
        {"domainRules": [rule()]}, {"tags": {"I.ssn": ["PII"]}}, {"inner": {"ssn": SECRET}}),
    "avro-nested-inherits-namespace": ("AVRO", {"type": "record", "name": "R", "namespace": "ns", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "ssn", "type": "string"}]}}]},
        {"domainRules": [rule()]}, {"tags": {"ns.I.ssn": ["PII"]}}, {"inner": {"ssn": SECRET}}),
    "avro-dotted-name": ("AVRO", {"type": "record", "name": "a.b.R", "namespace": "x", "fields": [
        {"name": "inner", "type": {"type": "record", "name": "I", "fields": [
            {"name": "ssn", "type": "string"}]}}]},
        {"domainRules": [rule()]}, {"tags": {"a.b.I.ssn": ["PII"]}}, {"inner": {"ssn": SECRET}}),
    # a field rule among the encoding rules, a payload rule among the domain rules
    "field-rule-in-encoding-rules": ("JSON", OBJ({"ssn": T}), {"encodingRules": [rule()]}, None, {"ssn": SECRET}),
    "payload-rule-in-domain-rules": ("JSON", OBJ({"ssn": S}), {"domainRules": [dict(rule(), type="ENCRYPT_PAYLOAD")]},
                                     None, {"ssn": SECRET}),
    # a disabled rule given as a string
    "disabled-string": ("JSON", OBJ({"ssn": T}), {"domainRules": [rule(disabled="false")]}, None, {"ssn": SECRET}),
}


def run(name):
    fmt, doc, rule_set, metadata, record = CASES[name]
    client = SchemaRegistryClient.new_client({"url": "mock://confluent-edges"})
    topic = "t-" + name
    subject = topic + "-value"
    text = json.dumps(doc)
    md = None
    if metadata:
        md = Metadata(MetadataTags(metadata["tags"]) if metadata.get("tags") else None,
                      MetadataProperties(metadata["properties"]) if metadata.get("properties") else None, None)
    schema = Schema(text, fmt, [], md, RuleSet.from_dict(rule_set))
    out = {"case": name}
    try:
        sid = client.register_schema(subject, schema)
        conf = {"auto.register.schemas": False, "use.latest.version": True}
        rc = {"secret": "mysecret"}
        if fmt == "AVRO":
            ser = AvroSerializer(client, text, conf=conf, rule_conf=rc)
        else:
            ser = JSONSerializer(text, client, conf=conf, rule_conf=rc)
        data = ser(copy.deepcopy(record), SerializationContext(topic, MessageField.VALUE))
        out["bytes"] = base64.b64encode(data).decode()
        out["secret_in_plaintext"] = SECRET.encode() in data
        out["body"] = data[5:].decode("utf-8", "replace")
    except Exception as e:
        out["write_error"] = repr(e.__cause__ or e)
    return out


if __name__ == "__main__":
    names = sys.argv[1:] or list(CASES)
    json.dump([run(n) for n in names], sys.stdout, indent=1)
    print()
