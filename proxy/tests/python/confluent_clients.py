"""confluent-kafka (librdkafka) through the tombstone-crypt proxy, checked
beside it with Google Tink (Python).

Usage:
  confluent_clients.py PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET CODECS

For each codec of CODECS (comma-separated: none, gzip, snappy, lz4, zstd),
a topic PREFIX + codec of two partitions, created through the proxy; an
idempotent producer writes keyed and unkeyed records, tombstones (keyed and
not) and empty values through the proxy; a consumer group reads them back
through the proxy (subscribe, commit, committed offsets: on the first
codec's topic; the others are read with assigned partitions) and must get
exactly what was sent; a consumer beside the proxy must see ciphertext:
every value decrypts with Tink's AEAD under VALUE_KEYSET with the
TopicAndKey associated data of the plaintext key (docs/FORMAT.md), every
key with Tink's deterministic AEAD under KEY_KEYSET with the Topic
associated data, and every tombstone is null. Prints {"ok": true, ...};
exits 1 naming the first difference.
"""

import json
import struct
import sys
import time

import tink
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, NewTopic
from tink import aead, daead, secret_key_access


class Failed(Exception):
    """A check that did not hold."""


def topic_ad(topic: str) -> bytes:
    t = topic.encode("utf-8")
    return struct.pack(">I", len(t)) + t + b"\x00"


def value_ad(topic: str, key) -> bytes:
    if key is None:
        return topic_ad(topic)
    t = topic.encode("utf-8")
    return struct.pack(">I", len(t)) + t + b"\x01" + struct.pack(">I", len(key)) + key


def handle(path: str):
    with open(path, encoding="utf-8") as f:
        return tink.json_proto_keyset_format.parse(f.read(), secret_key_access.TOKEN)


def records():
    """(partition, key, value): keyed, unkeyed, tombstones, empty values."""
    out = []
    for i in range(40):
        key = None if i % 4 == 3 else f"key-{i % 6}".encode()
        if i % 5 == 2:
            value = None
        elif i % 7 == 4:
            value = b""
        else:
            value = (f"value {i} ".encode()) * (1 + i % 9)
        out.append((i % 2, key, value))
    return out


def create(proxy, topic):
    admin = AdminClient({"bootstrap.servers": proxy})
    for _, f in admin.create_topics([NewTopic(topic, 2, 1)]).items():
        f.result(30)


def produce(proxy, topic, codec, recs):
    errors, delivered = [], []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            delivered.append(msg.offset())

    p = Producer(
        {
            "bootstrap.servers": proxy,
            "enable.idempotence": True,
            "acks": "all",
            "compression.type": codec,
            "linger.ms": 20,
            "batch.num.messages": 7,
            "message.timeout.ms": 20000,
        }
    )
    for partition, key, value in recs:
        p.produce(topic, value=value, key=key, partition=partition, on_delivery=report)
        p.poll(0)
    left = p.flush(30)
    if errors or left or len(delivered) != len(recs):
        raise Failed(f"{topic}: produce through the proxy: {errors[:3]} ({left} left, {len(delivered)} delivered)")


def read(bootstrap, topic, group, expected, subscribe):
    """Every record of both partitions, by partition, in offset order: as a
    member of `group` (subscribed; then commits and reads its committed
    offsets back) or with the partitions assigned."""
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )
    if subscribe:
        c.subscribe([topic])
    else:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in (0, 1)])
    got = {0: [], 1: []}
    at_end = set()
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < 2 or sum(len(v) for v in got.values()) < expected:
            if time.monotonic() > deadline:
                raise Failed(f"{topic}: read {sum(len(v) for v in got.values())} of {expected} within 60 s via {bootstrap}")
            msg = c.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise Failed(f"{topic}: consume error via {bootstrap}: {msg.error()}")
            at_end.discard(msg.partition())
            got[msg.partition()].append((msg.key(), msg.value()))
        if not subscribe:
            return got
        c.commit(asynchronous=False)
        committed = c.committed([TopicPartition(topic, 0), TopicPartition(topic, 1)], timeout=20)
        offsets = {tp.partition: tp.offset for tp in committed}
        want = {p: len(v) for p, v in got.items()}
        if offsets != want:
            raise Failed(f"{topic}: committed offsets {offsets}, {want} read (group {group})")
    finally:
        c.close()
    return got


def main():
    proxy, broker, prefix, value_keyset, key_keyset, codecs = sys.argv[1:7]
    aead.register()
    daead.register()
    values = handle(value_keyset).primitive(aead.Aead)
    keys = handle(key_keyset).primitive(daead.DeterministicAead)
    recs = records()
    sent = {0: [], 1: []}
    for partition, key, value in recs:
        sent[partition].append((key, value))
    for n, codec in enumerate(codecs.split(",")):
        topic = f"{prefix}{codec}"
        create(proxy, topic)
        produce(proxy, topic, codec, recs)
        direct = read(broker, topic, f"{topic}-direct", len(recs), False)
        for partition in (0, 1):
            for i, ((key, value), (wire_key, wire_value)) in enumerate(zip(sent[partition], direct[partition])):
                where = f"{topic}-{partition} record {i}"
                if value is None:
                    if wire_value is not None:
                        raise Failed(f"{where}: a tombstone reached the broker as a value")
                else:
                    if wire_value is None:
                        raise Failed(f"{where}: a value reached the broker as a tombstone")
                    if len(wire_value) != len(value) + 33 or wire_value[0] != 1:
                        raise Failed(f"{where}: the value on the broker is not a ciphertext")
                    try:
                        pt = values.decrypt(wire_value, value_ad(topic, key))
                    except Exception as e:  # pylint: disable=broad-except
                        raise Failed(f"{where}: Tink cannot decrypt the value: {e}") from e
                    if pt != value:
                        raise Failed(f"{where}: Tink decrypts another value")
                if key is None:
                    if wire_key is not None:
                        raise Failed(f"{where}: a null key became a key")
                else:
                    if wire_key is None or wire_key == key:
                        raise Failed(f"{where}: the key on the broker is not a ciphertext")
                    try:
                        k = keys.decrypt_deterministically(wire_key, topic_ad(topic))
                    except Exception as e:  # pylint: disable=broad-except
                        raise Failed(f"{where}: Tink cannot decrypt the key: {e}") from e
                    if k != key:
                        raise Failed(f"{where}: Tink decrypts another key")
            if len(direct[partition]) != len(sent[partition]):
                raise Failed(f"{topic}-{partition}: {len(direct[partition])} records on the broker, {len(sent[partition])} sent")
        # A consumer group through the proxy on the first topic (a group
        # join costs seconds on tansu), assigned partitions on the others.
        through = read(proxy, topic, f"{topic}-through", len(recs), n == 0)
        if through != sent:
            raise Failed(f"{topic}: read through the proxy, the records differ from those sent")
    print(json.dumps({"ok": True, "codecs": codecs.split(","), "records_per_topic": len(recs)}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
