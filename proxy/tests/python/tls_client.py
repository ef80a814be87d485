"""confluent-kafka (librdkafka, with TLS in its wheel) against the
tombstone-crypt proxy's TLS listener, for proxy/tests/tls.rs.

Usage:
  tls_client.py metadata BOOTSTRAP CA          # CA "-": plaintext
  tls_client.py roundtrip BOOTSTRAP CA TOPIC

metadata prints {"brokers": N} (exit 0), or exits 1 when no metadata came
within 5 s. roundtrip writes k0 = "over tls", k1 = a tombstone and k2 = an
empty value to partition 0 of TOPIC, reads them back from the start, and
prints {"values": [...]} (each value in hex, a tombstone as null).
"""

import json
import sys
import time

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition, OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient


def conf(bootstrap: str, ca: str) -> dict:
    c = {"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 5000}
    if ca != "-":
        c.update({"security.protocol": "ssl", "ssl.ca.location": ca})
    return c


def metadata(bootstrap: str, ca: str) -> int:
    try:
        md = AdminClient(conf(bootstrap, ca)).list_topics(timeout=5)
    except KafkaException as e:
        print(json.dumps({"error": str(e)}))
        return 1
    print(json.dumps({"brokers": len(md.brokers)}))
    return 0


def roundtrip(bootstrap: str, ca: str, topic: str) -> int:
    values = [b"over tls", None, b""]
    p = Producer({**conf(bootstrap, ca), "message.timeout.ms": 10000})
    failed = []
    for i, v in enumerate(values):
        p.produce(topic, key=f"k{i}".encode(), value=v, partition=0,
                  on_delivery=lambda err, _m: err and failed.append(str(err)))
    p.flush(15)
    if failed or len(p) != 0:
        print(json.dumps({"error": failed or "not delivered"}))
        return 1
    c = Consumer({**conf(bootstrap, ca), "group.id": f"tls-{topic}", "enable.auto.commit": False})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got = []
    deadline = time.time() + 30
    while len(got) < len(values) and time.time() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            print(json.dumps({"error": str(m.error())}))
            return 1
        v = m.value()
        got.append(None if v is None else v.hex())
    c.close()
    print(json.dumps({"values": got}))
    return 0


def main() -> int:
    if sys.argv[1] == "metadata":
        return metadata(sys.argv[2], sys.argv[3])
    return roundtrip(sys.argv[2], sys.argv[3], sys.argv[4])


if __name__ == "__main__":
    sys.exit(main())
