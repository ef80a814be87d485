"""A plain Kafka consumer nobody here wrote (confluent-kafka, on librdkafka),
reading a topic the way any downstream consumer would.

Usage: kafka_peer.py BOOTSTRAP TOPIC
Prints one JSON object: {"records": [{"offset": N, "key_hex": "..",
"value_hex": ".." or null, "value_is_none": bool}]}, read from the beginning
of partition 0 to its end.
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaError, TopicPartition, OFFSET_BEGINNING


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: kafka_peer.py BOOTSTRAP TOPIC", file=sys.stderr)
        return 2
    bootstrap, topic = sys.argv[1], sys.argv[2]
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafka-peer-" + topic,
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records = []
    deadline = time.monotonic() + 30
    try:
        while True:
            if time.monotonic() > deadline:
                print("timed out before the end of the partition", file=sys.stderr)
                return 1
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    break
                print(f"consume error: {msg.error()}", file=sys.stderr)
                return 1
            value = msg.value()
            records.append(
                {
                    "offset": msg.offset(),
                    "key_hex": (msg.key() or b"").hex(),
                    "value_hex": None if value is None else value.hex(),
                    "value_is_none": value is None,
                }
            )
    finally:
        consumer.close()
    print(json.dumps({"records": records}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
