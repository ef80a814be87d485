"""A Kafka client nobody here wrote (confluent-kafka on librdkafka) with
Google Tink (Python) for the crypto, for the typed-client tests.

Usage:
  kafka_tink_peer.py consume BOOTSTRAP TOPIC PARTITIONS KEYSET_FILE
      Reads every partition from the beginning to its end. For each record
      prints, in one JSON object {"records": [...]}: partition, offset,
      key_hex, is_none (no payload), and for a present value "pt_hex" (Tink
      decrypted it with the TopicAndKey associated data, computed here from
      docs/FORMAT.md) or "error".
  produce-migration BOOTSTRAP TOPIC KEYSET_FILE N
      Produces N plaintext values (keys "plain-0".. , values "legacy-i"),
      then N values Tink encrypts (keys "enc-0".., values "new-i") with the
      TopicAndKey associated data, to partition 0. Prints {"produced": 2N}.
"""

import json
import struct
import sys
import time

import tink
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition, OFFSET_BEGINNING
from tink import aead, secret_key_access


def aad(topic: str, key: bytes) -> bytes:
    """TopicAndKey: u32be(len topic) | topic | 0x01 | u32be(len key) | key."""
    t = topic.encode("utf-8")
    return struct.pack(">I", len(t)) + t + b"\x01" + struct.pack(">I", len(key)) + key


def primitive(keyset_file: str):
    aead.register()
    with open(keyset_file, encoding="utf-8") as f:
        handle = tink.json_proto_keyset_format.parse(f.read(), secret_key_access.TOKEN)
    return handle.primitive(aead.Aead)


def consume(bootstrap, topic, partitions, keyset_file):
    p = primitive(keyset_file)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafka-tink-peer-" + topic,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, i, OFFSET_BEGINNING) for i in range(partitions)])
    at_end, records = set(), []
    deadline = time.monotonic() + 60
    try:
        while len(at_end) < partitions:
            if time.monotonic() > deadline:
                print("timed out before the end of the partitions", file=sys.stderr)
                return 1
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                print(f"consume error: {msg.error()}", file=sys.stderr)
                return 1
            at_end.discard(msg.partition())
            key, value = msg.key() or b"", msg.value()
            rec = {"partition": msg.partition(), "offset": msg.offset(), "key_hex": key.hex(), "is_none": value is None}
            if value is not None:
                try:
                    rec["pt_hex"] = p.decrypt(value, aad(topic, key)).hex()
                except Exception as e:  # pylint: disable=broad-except
                    rec["error"] = f"{type(e).__name__}: {e}"
            records.append(rec)
    finally:
        consumer.close()
    print(json.dumps({"records": records}))
    return 0


def produce_migration(bootstrap, topic, keyset_file, n):
    p = primitive(keyset_file)
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, key=f"plain-{i}".encode(), value=f"legacy-{i}".encode(), partition=0)
    for i in range(n):
        key = f"enc-{i}".encode()
        producer.produce(topic, key=key, value=p.encrypt(f"new-{i}".encode(), aad(topic, key)), partition=0)
    if producer.flush(30) != 0:
        print("records still queued after 30 s", file=sys.stderr)
        return 1
    print(json.dumps({"produced": 2 * n}))
    return 0


def main() -> int:
    args = sys.argv[1:]
    if len(args) == 5 and args[0] == "consume":
        return consume(args[1], args[2], int(args[3]), args[4])
    if len(args) == 5 and args[0] == "produce-migration":
        return produce_migration(args[1], args[2], args[3], int(args[4]))
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
