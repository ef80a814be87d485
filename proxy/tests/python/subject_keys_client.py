"""confluent-kafka (librdkafka) as a client of the tombstone-crypt proxy for
a topic under subject keys (cli/tests/proxy_subject_keys.rs).

Usage:
  subject_keys_client.py produce BOOTSTRAP TOPIC RECORDS_JSON
  subject_keys_client.py read BOOTSTRAP TOPIC SECONDS MAX_ERRORS

produce: RECORDS_JSON is a list of [key_hex, value_hex_or_null]; each is
produced to partition 0 (idempotent, acks=all) and flushed. Prints one line
{"delivered": [offset, ...]} in the order sent; exits 1 on any delivery
error.

read: a consumer of a fresh group, partition 0 assigned from the beginning,
polls until the partition's end, SECONDS have passed, or MAX_ERRORS error
events came. Prints one JSON line per event, as it came:
{"offset": N, "key": hex|null, "value": hex|null} for a record (null: a
null value, told apart from an empty one, ""), {"error": text, "code": N}
for an error event, and last {"end": "eof"|"time"|"errors"}.
"""

import json
import sys
import time
import uuid

from confluent_kafka import Consumer, KafkaError, OFFSET_BEGINNING, Producer, TopicPartition


def produce(bootstrap, topic, records):
    errors, delivered = [], {}

    def report(n):
        def on_delivery(err, msg):
            if err is not None:
                errors.append(str(err))
            else:
                delivered[n] = msg.offset()

        return on_delivery

    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": 20000,
        }
    )
    for n, (key, value) in enumerate(records):
        p.produce(
            topic,
            key=bytes.fromhex(key),
            value=None if value is None else bytes.fromhex(value),
            partition=0,
            on_delivery=report(n),
        )
        p.poll(0)
    left = p.flush(30)
    if errors or left or len(delivered) != len(records):
        print(f"produce to {topic} via {bootstrap}: {errors[:3]} ({left} left)", file=sys.stderr)
        return 1
    print(json.dumps({"delivered": [delivered[n] for n in range(len(records))]}), flush=True)
    return 0


def read(bootstrap, topic, seconds, max_errors):
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"subject-keys-{uuid.uuid4()}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.error.backoff.ms": 100,
        }
    )
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    deadline = time.monotonic() + seconds
    errors = 0
    end = "time"
    try:
        while time.monotonic() < deadline:
            msg = c.poll(0.1)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    end = "eof"
                    break
                print(json.dumps({"error": err.str(), "code": err.code()}), flush=True)
                errors += 1
                if errors >= max_errors:
                    end = "errors"
                    break
                continue
            key, value = msg.key(), msg.value()
            print(
                json.dumps(
                    {
                        "offset": msg.offset(),
                        "key": None if key is None else key.hex(),
                        "value": None if value is None else value.hex(),
                    }
                ),
                flush=True,
            )
    finally:
        c.close()
    print(json.dumps({"end": end}), flush=True)
    return 0


def main():
    mode = sys.argv[1]
    if mode == "produce":
        bootstrap, topic, records = sys.argv[2:5]
        return produce(bootstrap, topic, json.loads(records))
    if mode == "read":
        bootstrap, topic, seconds, max_errors = sys.argv[2:6]
        return read(bootstrap, topic, float(seconds), int(max_errors))
    print(f"unknown mode {mode}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
