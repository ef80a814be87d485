"""A Java-compatible Kafka producer nobody here wrote (confluent-kafka, on
librdkafka, with `partitioner=murmur2_random`: the Java client's and Kafka
Streams' murmur2 of the key bytes), writing plain record keys.

Usage: kafka_murmur2_peer.py BOOTSTRAP TOPIC
Reads one record key per line on stdin, hex-encoded; produces each with the
value b"peer" and waits for every delivery. Prints one JSON object:
{"partitions": {"KEY_HEX": PARTITION, ...}}, the partition each delivery
report gave.
"""

import json
import sys

from confluent_kafka import Producer


def main() -> int:
    if len(sys.argv) != 3:
        print("usage: kafka_murmur2_peer.py BOOTSTRAP TOPIC", file=sys.stderr)
        return 2
    bootstrap, topic = sys.argv[1], sys.argv[2]
    keys = [bytes.fromhex(line.strip()) for line in sys.stdin if line.strip()]
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "partitioner": "murmur2_random",
            "enable.idempotence": True,
        }
    )
    partitions = {}
    errors = []

    def report(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            partitions[msg.key().hex()] = msg.partition()

    for key in keys:
        producer.produce(topic, key=key, value=b"peer", on_delivery=report)
        producer.poll(0)
    left = producer.flush(30)
    if left or errors:
        print(f"{left} undelivered, errors: {errors}", file=sys.stderr)
        return 1
    print(json.dumps({"partitions": partitions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
