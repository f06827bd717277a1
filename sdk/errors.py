"""Errors of the federated SDK: raised at once by ``produce`` (nothing is queued).

A message no partition can take *right now* is not refused: it waits (see ``sdk.producer``).
``NoWritablePartition`` is no longer raised by ``produce``; it stays importable for code that catches it.

They sit in kfed's one error tree (``metadata_log.errors``): ``except KfedError`` catches them, and each is
also the kind of refusal it is (``UnknownTopic`` a ``NotFound``, the others a ``Conflict``).
"""

from __future__ import annotations

from collections.abc import Mapping

from metadata_log.errors import Conflict, KfedError, NotFound


class FederationError(KfedError):
    """Base of the SDK's own errors (Kafka errors keep confluent-kafka's ``KafkaError``)."""


class UnknownTopic(FederationError, NotFound):
    def __init__(self, topic: str, offset: int) -> None:
        super().__init__(f"logical topic {topic!r} does not exist (metadata at offset {offset})")
        self.topic = topic


class PartitionNotWritable(FederationError, Conflict):
    def __init__(self, topic: str, partition: int, why: str) -> None:
        super().__init__(f"partition {topic}/{partition} takes no writes: {why}")
        self.topic, self.partition, self.why = topic, partition, why


class NoWritablePartition(FederationError, Conflict):
    def __init__(self, topic: str, why_not: Mapping[int, str]) -> None:
        reasons = "; ".join(f"P{p}: {w}" for p, w in sorted(why_not.items())[:8])
        super().__init__(f"logical topic {topic!r} has no writable partition ({reasons})")
        self.topic, self.why_not = topic, dict(why_not)
