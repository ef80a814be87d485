"""A changelog written and restored through the tombstone-crypt proxy by
confluent-kafka (librdkafka), not by the library.

Usage:
  changelog_restore.py PROXY TOPIC produce OPS_JSON
  changelog_restore.py PROXY TOPIC restore

produce: OPS_JSON is a list of [key, value or null] (null: a delete, a
tombstone), written in order by an idempotent producer (acks=all); exits 1
on any delivery error. restore: reads every partition of TOPIC from the
start to its end, and prints one JSON list of [partition, offset, key,
value or null], by partition then offset (the broker's repeated records
dropped).
"""

import json
import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition


def produce(proxy, topic, path):
    with open(path, encoding="utf-8") as f:
        ops = json.load(f)
    p = Producer({"bootstrap.servers": proxy, "enable.idempotence": True, "acks": "all",
                  "linger.ms": 5, "message.timeout.ms": 20000})
    errors = []

    def done(err, _msg):
        if err is not None:
            errors.append(str(err))

    for key, value in ops:
        p.produce(topic, key=key.encode(), value=None if value is None else value.encode(),
                  on_delivery=done)
        p.poll(0)
    left = p.flush(30)
    if left or errors:
        print(json.dumps({"ok": False, "left": left, "errors": errors}))
        sys.exit(1)
    print(json.dumps({"ok": True, "written": len(ops)}))


def restore(proxy, topic):
    c = Consumer({"bootstrap.servers": proxy, "group.id": f"restore-{time.time_ns()}",
                  "enable.auto.commit": False, "enable.partition.eof": True,
                  "auto.offset.reset": "earliest"})
    md = c.list_topics(topic, timeout=10)
    parts = sorted(md.topics[topic].partitions)
    c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
    at_end, last, out = set(), {}, []
    deadline = time.time() + 30
    while len(at_end) < len(parts):
        if time.time() > deadline:
            print("no end of the topic within 30 s", file=sys.stderr)
            sys.exit(1)
        m = c.poll(0.2)
        if m is None:
            continue
        if m.error():
            if m.error().code() == KafkaError._PARTITION_EOF:
                at_end.add(m.partition())
                continue
            print(f"consuming: {m.error()}", file=sys.stderr)
            sys.exit(1)
        p, o = m.partition(), m.offset()
        at_end.discard(p)
        if p in last and o <= last[p]:
            continue
        last[p] = o
        v = m.value()
        out.append([p, o, m.key().decode(), None if v is None else v.decode()])
    c.close()
    out.sort(key=lambda r: (r[0], r[1]))
    print(json.dumps(out))


if __name__ == "__main__":
    proxy, topic, mode = sys.argv[1:4]
    if mode == "produce":
        produce(proxy, topic, sys.argv[4])
    else:
        restore(proxy, topic)
