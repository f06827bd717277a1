"""Messages as the SDK hands them out: logical topic and partition, physical offset, and the cluster."""

from __future__ import annotations

from typing import Any

from confluent_kafka import Message


class FederatedMessage:
    """A confluent-kafka ``Message`` seen through the federation: ``topic()`` and ``partition()`` are the
    logical ones; ``offset()`` is the offset in the physical partition; ``cluster_id()`` says where."""

    __slots__ = ("_cluster_id", "_headers", "_msg", "_partition", "_topic", "_value")

    def __init__(self, msg: Message | None, topic: str, partition: int, cluster_id: str | None) -> None:
        self._msg = msg
        self._topic = topic
        self._partition = partition
        self._cluster_id = cluster_id
        self._value: Any = None
        self._headers: Any = None

    @classmethod
    def unsent(cls, topic: str, value: Any, headers: Any) -> FederatedMessage:
        """A message that never reached any cluster (for failed delivery reports)."""
        m = cls(None, topic, -1, None)
        m._value, m._headers = value, headers
        return m

    def topic(self) -> str:
        return self._topic

    def partition(self) -> int:
        return self._partition

    def cluster_id(self) -> str | None:
        return self._cluster_id

    def offset(self) -> int:
        offset = self._msg.offset() if self._msg is not None else None
        return offset if offset is not None else -1

    def value(self) -> Any:
        return self._msg.value() if self._msg is not None else self._value

    def key(self) -> Any:
        return self._msg.key() if self._msg is not None else None

    def headers(self) -> Any:
        return self._msg.headers() if self._msg is not None else self._headers

    def timestamp(self) -> tuple[int, int]:
        return self._msg.timestamp() if self._msg is not None else (0, 0)

    def error(self) -> Any:
        return self._msg.error() if self._msg is not None else None

    def physical_topic(self) -> str | None:
        return self._msg.topic() if self._msg is not None else None

    def physical_partition(self) -> int | None:
        return self._msg.partition() if self._msg is not None else None

    def __len__(self) -> int:
        value = self.value()
        return len(value) if value is not None else 0

    def __repr__(self) -> str:
        return f"FederatedMessage({self._topic}/{self._partition}@{self.offset()} on {self._cluster_id})"
