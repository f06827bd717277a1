"""A physical topic read straight from a sub-cluster's broker, past the federation: what tests audit against."""

from __future__ import annotations

import time

from confluent_kafka import Consumer, TopicPartition

PhysicalRecord = tuple[int, int, bytes | None]  # partition, offset, value


def physical_records(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[PhysicalRecord] | None:
    """Every record of ``topic`` on the cluster at ``bootstrap``, each partition read from 0 to its end, in
    partition then offset order; None when the cluster has no such topic (never created, or deleted since).
    Commits nothing."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "audit", "enable.auto.commit": False,
                         "enable.partition.eof": True, "fetch.queue.backoff.ms": 10, "log_level": 3})  # fmt: skip
    try:
        metadata = consumer.list_topics(topic, timeout=10).topics.get(topic)
        partitions = sorted(metadata.partitions) if metadata is not None else []
        if not partitions:
            return None
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        records: list[PhysicalRecord] = []
        ended: set[int | None] = set()
        deadline = time.monotonic() + timeout_s
        while len(ended) < len(partitions) and time.monotonic() < deadline:
            for m in consumer.consume(10_000, 1):
                if m.error() is not None:
                    ended.add(m.partition())  # its end (or an error: what was read is the answer)
                else:
                    records.append((m.partition() or 0, m.offset() or 0, m.value()))
        return sorted(records, key=lambda r: r[:2])
    finally:
        consumer.close()
