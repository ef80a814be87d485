#!/usr/bin/env python3
"""Self-check of the Apache Kafka broker that scripts/kafka.sh starts.

    scripts/kafka.sh selfcheck
    target/venv/bin/python scripts/kafka/selfcheck.py 127.0.0.1:19292

Needs confluent-kafka (the venv of scripts/tink-venv.sh has 2.16.1). Each run
makes its own topics (a random suffix), so it can run again on the same broker.
It checks, and prints how long each step took:

1. Compaction: a topic with cleanup.policy=compact, segment.ms=100,
   min.cleanable.dirty.ratio=0.01, delete.retention.ms=1000 and
   min.compaction.lag.ms=0 gets five values for one key, then a tombstone for
   it (and one record of another key, which must survive). The log cleaner
   only cleans closed segments, and a segment is closed (rolled) only by an
   append that comes after segment.ms, so a filler record (always the same
   key) is written every 200 ms while the partition is read back from its
   start: first the old values must go (the tombstone stays, for
   delete.retention.ms), then the tombstone itself.
2. Transactions: a transactional producer commits, aborts, commits; a
   read_committed consumer sees the two committed records only, a
   read_uncommitted one sees all three.
3. Share groups (KIP-932): a share consumer, with the group's
   share.auto.offset.reset set to earliest, receives the records of a topic.

Exit status 0 when every check passes; progress goes to stdout.
"""

import sys
import time
import uuid

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

COMPACTION_TIMEOUT_S = 60.0
FILLER_INTERVAL_S = 0.2
KEY = b"k"


def log(msg):
    print(f"selfcheck: {msg}", flush=True)


class CheckFailed(Exception):
    pass


def read_partition(consumer, topic):
    """Every record of partition 0, from the log start to the end, as
    (offset, key, value) tuples."""
    consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    records = []
    try:
        while True:
            msg = consumer.poll(10.0)
            if msg is None:
                raise CheckFailed(f"no end of partition seen reading {topic}")
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    return records
                raise CheckFailed(f"reading {topic}: {err}")
            records.append((msg.offset(), msg.key(), msg.value()))
    finally:
        consumer.unassign()


def check_compaction(bootstrap, admin, run):
    topic = f"selfcheck-compact-{run}"
    create_topics(
        admin,
        [
            NewTopic(
                topic,
                num_partitions=1,
                replication_factor=1,
                config={
                    "cleanup.policy": "compact",
                    "segment.ms": "100",
                    "min.cleanable.dirty.ratio": "0.01",
                    "delete.retention.ms": "1000",
                    "min.compaction.lag.ms": "0",
                },
            )
        ],
    )
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"selfcheck-reader-{run}",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "fetch.wait.max.ms": 10,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    # Connect both clients before the clock starts: the first read of the
    # (empty) partition and an empty flush.
    read_partition(consumer, topic)
    producer.flush(30)
    for i in range(5):
        producer.produce(topic, key=KEY, value=f"v{i}".encode())
    producer.produce(topic, key=KEY, value=None)
    producer.produce(topic, key=b"other", value=b"keep")
    if producer.flush(30) != 0:
        raise CheckFailed("compaction records not delivered")
    t0 = time.monotonic()
    values_gone_s = None
    rounds = 0
    try:
        while True:
            rounds += 1
            producer.produce(topic, key=b"filler", value=b"x")
            if producer.flush(30) != 0:
                raise CheckFailed("filler record not delivered")
            records = read_partition(consumer, topic)
            elapsed = time.monotonic() - t0
            ours = [value for _, key, value in records if key == KEY]
            if not any(key == b"other" for _, key, _ in records):
                raise CheckFailed(f"the record of another key was removed: {records}")
            if values_gone_s is None and ours == [None]:
                values_gone_s = elapsed
                log(f"compaction: old values removed after {values_gone_s:.2f} s, tombstone kept")
            if not ours:
                if values_gone_s is None:
                    # Both went in one cleaning pass, values and tombstone.
                    values_gone_s = elapsed
                log(
                    f"compaction: tombstone removed after {elapsed:.2f} s "
                    f"({rounds} filler writes; {len(records)} records left in the log)"
                )
                return values_gone_s, elapsed
            if elapsed > COMPACTION_TIMEOUT_S:
                raise CheckFailed(
                    f"compaction not done after {COMPACTION_TIMEOUT_S} s; records of {KEY!r}: {ours}"
                )
            time.sleep(FILLER_INTERVAL_S)
    finally:
        consumer.close()


def check_transactions(bootstrap, admin, run):
    topic = f"selfcheck-tx-{run}"
    create_topics(admin, [NewTopic(topic, num_partitions=1, replication_factor=1)])
    t0 = time.monotonic()
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"selfcheck-{run}"}
    )
    producer.init_transactions(30)
    for value, commit in ((b"committed-1", True), (b"aborted", False), (b"committed-2", True)):
        producer.begin_transaction()
        producer.produce(topic, key=b"t", value=value)
        if commit:
            producer.commit_transaction(30)
        else:
            # Delivered to the log first, so the abort has something to hide.
            producer.flush(30)
            producer.abort_transaction(30)
    elapsed = time.monotonic() - t0
    seen = {}
    for isolation in ("read_committed", "read_uncommitted"):
        consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"selfcheck-tx-reader-{run}",
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "isolation.level": isolation,
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            seen[isolation] = [value for _, _, value in read_partition(consumer, topic)]
        finally:
            consumer.close()
    if seen["read_committed"] != [b"committed-1", b"committed-2"]:
        raise CheckFailed(f"read_committed saw {seen['read_committed']}")
    if seen["read_uncommitted"] != [b"committed-1", b"aborted", b"committed-2"]:
        raise CheckFailed(f"read_uncommitted saw {seen['read_uncommitted']}")
    log(
        f"transactions: commit, abort, commit in {elapsed:.2f} s; "
        "read_committed sees the 2 committed records, read_uncommitted all 3"
    )


def check_share_group(bootstrap, admin, run):
    topic = f"selfcheck-share-{run}"
    group = f"selfcheck-share-{run}"
    create_topics(admin, [NewTopic(topic, num_partitions=1, replication_factor=1)])
    # A share group starts at the log end by default; read from the start.
    resource = ConfigResource(
        ResourceType.GROUP,
        group,
        incremental_configs=[
            ConfigEntry(
                "share.auto.offset.reset",
                "earliest",
                incremental_operation=AlterConfigOpType.SET,
            )
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0})
    want = [f"s{i}".encode() for i in range(3)]
    for value in want:
        producer.produce(topic, value=value)
    if producer.flush(30) != 0:
        raise CheckFailed("share-group records not delivered")
    t0 = time.monotonic()
    got = []
    consumer = ShareConsumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        consumer.subscribe([topic])
        while len(got) < len(want):
            if time.monotonic() - t0 > 30:
                raise CheckFailed(f"share consumer got {got} after 30 s")
            for msg in consumer.poll(1.0):
                if msg.error() is not None:
                    raise CheckFailed(f"share consumer: {msg.error()}")
                got.append(msg.value())
    finally:
        consumer.close()
    if sorted(got) != want:
        raise CheckFailed(f"share consumer got {got}, want {want}")
    log(f"share group: {len(got)} records received in {time.monotonic() - t0:.2f} s")


def create_topics(admin, topics):
    for future in admin.create_topics(topics, operation_timeout=30).values():
        future.result()


def main(argv):
    if len(argv) != 2:
        print("usage: selfcheck.py HOST:PORT", file=sys.stderr)
        return 2
    bootstrap = argv[1]
    run = uuid.uuid4().hex[:8]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    t0 = time.monotonic()
    try:
        check_compaction(bootstrap, admin, run)
        check_transactions(bootstrap, admin, run)
        check_share_group(bootstrap, admin, run)
    except CheckFailed as e:
        log(f"FAILED: {e}")
        return 1
    log(f"all checks passed in {time.monotonic() - t0:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
