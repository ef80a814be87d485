"""kafka-python (the pure-Python client) through the tombstone-crypt proxy,
checked beside it with Google Tink (Python).

Usage:
  kafka_python_clients.py PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET CODECS
  kafka_python_clients.py PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET compaction-write
  kafka_python_clients.py PROXY BROKER PREFIX VALUE_KEYSET KEY_KEYSET compaction-read

The same records and checks as confluent_clients.py, with kafka-python's
own protocol code: for each codec of CODECS (none, gzip: the venv has no
lz4, snappy or zstd library for kafka-python) a topic PREFIX + codec of two
partitions created through the proxy, an idempotent producer, a consumer
group through the proxy (subscribe, commit, committed offsets) that must
read exactly what was sent, and a consumer beside the proxy whose records
Tink decrypts to what was sent, tombstones null. compaction-write creates
the compacted topic PREFIX + "compaction" (one partition) through the proxy
and writes several versions of four keys to it, one ending on a tombstone,
one on an empty value; the test then has Apache Kafka's log cleaner compact
it, and compaction-read reads it through the proxy: each key's last record
only, the tombstone null, the empty value empty. Prints {"ok": true, ...};
exits 1 naming the first difference.
"""

import json
import os
import sys
import time

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import KafkaAdminClient, NewTopic
from tink import aead, daead

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from confluent_clients import Failed, handle, records, topic_ad, value_ad  # noqa: E402


def create(proxy, topic, partitions=2, configs=None):
    admin = KafkaAdminClient(bootstrap_servers=proxy, client_id="px-admin")
    try:
        admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1, topic_configs=configs or {})])
    finally:
        admin.close()


def produce(proxy, topic, codec, recs):
    p = KafkaProducer(
        bootstrap_servers=proxy,
        enable_idempotence=True,
        acks="all",
        compression_type=None if codec == "none" else codec,
        linger_ms=20,
    )
    try:
        futures = [p.send(topic, key=key, value=value, partition=partition) for partition, key, value in recs]
        p.flush(30)
        for i, f in enumerate(futures):
            try:
                f.get(timeout=30)
            except Exception as e:  # pylint: disable=broad-except
                raise Failed(f"{topic}: record {i} through the proxy: {type(e).__name__}: {e}") from e
    finally:
        p.close(10)


def read(bootstrap, topic, group, expected, partitions=2):
    """Every record of the topic's partitions, by partition, in offset
    order: as a member of `group` (then commits and reads the committed
    offsets back), or with the partitions assigned when `group` is None."""
    c = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=500,
    )
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    if group is None:
        c.assign(tps)
        c.seek_to_beginning(*tps)
    else:
        c.subscribe([topic])
    got = {p: [] for p in range(partitions)}
    deadline = time.monotonic() + 60
    try:
        while sum(len(v) for v in got.values()) < expected:
            if time.monotonic() > deadline:
                # What the consumer had: its partitions and where it stood
                # in each (a group that never got its partitions, or a
                # position that never moved).
                try:
                    had = {tp.partition: c.position(tp, timeout_ms=2000) for tp in c.assignment()}
                except Exception as e:  # pylint: disable=broad-except
                    had = f"{type(e).__name__}: {e}"
                raise Failed(
                    f"{topic}: read {sum(len(v) for v in got.values())} of {expected} within 60 s via {bootstrap}"
                    f" (group {group}; partitions and positions: {had})"
                )
            try:
                polled = c.poll(timeout_ms=200)
            except Exception as e:  # pylint: disable=broad-except
                raise Failed(f"{topic}: consume error via {bootstrap}: {type(e).__name__}: {e}") from e
            for tp, msgs in polled.items():
                for m in msgs:
                    got[tp.partition].append((m.key, m.value))
        if group is not None:
            c.commit()
            offsets = {tp.partition: c.committed(tp) for tp in tps}
            want = {p: len(v) for p, v in got.items()}
            if offsets != want:
                raise Failed(f"{topic}: committed offsets {offsets}, {want} read (group {group})")
    finally:
        c.close()
    return got


# Several versions of four keys, round by round: k1 ends on a tombstone,
# k2 on an empty value.
VERSIONS = [
    (b"k0", [b"v0-a", b"v0-b", b"v0-c"]),
    (b"k1", [b"v1-a", b"v1-b", None]),
    (b"k2", [b"v2-a", b""]),
    (b"k3", [b"v3-a", b"v3-b"]),
]


def versions():
    return [(0, key, vs[r]) for r in range(3) for key, vs in VERSIONS if r < len(vs)]


def compaction(proxy, prefix, phase):
    """The compaction-write or compaction-read phase."""
    topic = f"{prefix}compaction"
    recs = versions()
    if phase == "compaction-write":
        create(proxy, topic, 1, {"cleanup.policy": "compact"})
        produce(proxy, topic, "none", recs)
        return
    # Each key's last record, in offset order: an older record left would
    # be read before them.
    want = [(k, v) for i, (_, k, v) in enumerate(recs) if all(k != later for _, later, _ in recs[i + 1:])]
    got = read(proxy, topic, None, len(want), 1)[0]
    if got != want:
        raise Failed(f"{topic} (compacted) read through the proxy: {got}, not each key's last record {want}")


def main():
    proxy, broker, prefix, value_keyset, key_keyset, codecs = sys.argv[1:7]
    if codecs.startswith("compaction-"):
        compaction(proxy, prefix, codecs)
        print(json.dumps({"ok": True, "client": "kafka-python", "phase": codecs}))
        return 0
    aead.register()
    daead.register()
    values = handle(value_keyset).primitive(aead.Aead)
    keys = handle(key_keyset).primitive(daead.DeterministicAead)
    # kafka-python sends no record without both key and value (a null
    # key's tombstone).
    recs = [r for r in records() if r[1] is not None or r[2] is not None]
    sent = {0: [], 1: []}
    for partition, key, value in recs:
        sent[partition].append((key, value))
    for codec in codecs.split(","):
        topic = f"{prefix}{codec}"
        create(proxy, topic)
        produce(proxy, topic, codec, recs)
        direct = read(broker, topic, None, len(recs))
        for partition in (0, 1):
            if len(direct[partition]) != len(sent[partition]):
                raise Failed(f"{topic}-{partition}: {len(direct[partition])} records on the broker, {len(sent[partition])} sent")
            for i, ((key, value), (wire_key, wire_value)) in enumerate(zip(sent[partition], direct[partition])):
                where = f"{topic}-{partition} record {i}"
                if value is None:
                    if wire_value is not None:
                        raise Failed(f"{where}: a tombstone reached the broker as a value")
                elif wire_value is None:
                    raise Failed(f"{where}: a value reached the broker as a tombstone")
                elif len(wire_value) != len(value) + 33 or wire_value[0] != 1:
                    raise Failed(f"{where}: the value on the broker is not a ciphertext")
                elif values.decrypt(wire_value, value_ad(topic, key)) != value:
                    raise Failed(f"{where}: Tink decrypts another value")
                if key is None:
                    if wire_key is not None:
                        raise Failed(f"{where}: a null key became a key")
                elif wire_key is None or wire_key == key:
                    raise Failed(f"{where}: the key on the broker is not a ciphertext")
                elif keys.decrypt_deterministically(wire_key, topic_ad(topic)) != key:
                    raise Failed(f"{where}: Tink decrypts another key")
        through = read(proxy, topic, f"{topic}-group", len(recs))
        if through != sent:
            raise Failed(f"{topic}: read through the proxy, the records differ from those sent")
    print(json.dumps({"ok": True, "client": "kafka-python", "codecs": codecs.split(",")}))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Failed as e:
        print(f"FAILED: {e}", file=sys.stderr)
        sys.exit(1)
