"""Errors of the federated SDK: raised at once by ``produce`` (nothing is queued)."""

from __future__ import annotations

from collections.abc import Mapping


class FederationError(Exception):
    """Base of the SDK's own errors (Kafka errors keep confluent-kafka's ``KafkaError``)."""


class UnknownTopic(FederationError):
    def __init__(self, topic: str, offset: int) -> None:
        super().__init__(f"logical topic {topic!r} does not exist (metadata at offset {offset})")
        self.topic = topic


class PartitionNotWritable(FederationError):
    def __init__(self, topic: str, partition: int, why: str) -> None:
        super().__init__(f"partition {topic}/{partition} takes no writes: {why}")
        self.topic, self.partition, self.why = topic, partition, why


class NoWritablePartition(FederationError):
    def __init__(self, topic: str, why_not: Mapping[int, str]) -> None:
        reasons = "; ".join(f"P{p}: {w}" for p, w in sorted(why_not.items())[:8])
        super().__init__(f"logical topic {topic!r} has no writable partition ({reasons})")
        self.topic, self.why_not = topic, dict(why_not)
