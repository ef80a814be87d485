"""Orders with confluent-kafka: four orders keyed by order id, two of them
deleted (a null value: a tombstone), then the topic read from the start and
each order's last state printed.

Usage: python3 orders.py BOOTSTRAP [TOPIC]   (TOPIC: orders by default)
"""

import json
import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, Producer, TopicPartition

bootstrap = sys.argv[1]
topic = sys.argv[2] if len(sys.argv) > 2 else "orders"

producer = Producer({"bootstrap.servers": bootstrap})
orders = {
    "order-1": {"item": "book", "qty": 1},
    "order-2": {"item": "lamp", "qty": 2},
    "order-3": {"item": "desk", "qty": 1},
    "order-4": {"item": "pen", "qty": 10},
}
for order_id, order in orders.items():
    producer.produce(topic, key=order_id, value=json.dumps(order))
for order_id in ("order-2", "order-3"):
    producer.produce(topic, key=order_id, value=None)  # a delete
producer.flush(30)

consumer = Consumer(
    {"bootstrap.servers": bootstrap, "group.id": "orders-py", "enable.partition.eof": True}
)
partitions = consumer.list_topics(topic, timeout=30).topics[topic].partitions
consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
state, at_end = {}, set()
while len(at_end) < len(partitions):
    msg = consumer.poll(30)
    if msg is None:
        sys.exit("no record for 30 s")
    if msg.error():
        if msg.error().code() != KafkaError._PARTITION_EOF:
            sys.exit(str(msg.error()))
        at_end.add(msg.partition())
    else:
        state[msg.key().decode()] = msg.value()
consumer.close()

for order_id, value in sorted(state.items()):
    print(f"python: {order_id} deleted" if value is None else f"python: {order_id} = {value.decode()}")
