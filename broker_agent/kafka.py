"""The agent's view of its physical Kafka cluster. The only module of the agent importing confluent_kafka.

Apache Kafka takes the normal path; what differs on Tansu (docs/TANSU.md) is decided by ``metadata_client.brokers``
(probed once per cluster) and handled here: its latest offsets (ListOffsets) are the start of the last
batch + 1 — wrong, but they never go backwards on a healthy cluster, which is all the loss check uses them
for — so the true end offsets that drain decisions need are read from a fetch response's high watermark
instead; and it has no CreatePartitions, so a physical topic there keeps the count it was created with.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_END,
    Consumer,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic, OffsetSpec

from metadata_client.brokers import BrokerKind
from metadata_log.errors import Conflict, Unavailable
from sdk.brokers import BrokerUnknown, probe


class ClusterUnreachable(Unavailable):
    """The cluster did not answer a metadata request in time."""


class CannotGrow(Conflict):
    """The broker has no CreatePartitions (Tansu): a physical topic keeps the count it was created with."""


@dataclass(frozen=True, slots=True)
class Scan:
    """Topics of the cluster: name -> {partition: leader "host:port" or None}."""

    topics: Mapping[str, Mapping[int, str | None]]

    def partition_counts(self) -> dict[str, int]:
        return {name: len(parts) for name, parts in self.topics.items()}


class PhysicalCluster:
    def __init__(self, bootstrap: str, timeout_s: float = 1.0, replication_factor: int = -1) -> None:
        self.bootstrap = bootstrap
        self.timeout_s = timeout_s
        self.replication_factor = replication_factor  # -1: the broker's default
        self._admin = AdminClient(
            {
                "bootstrap.servers": bootstrap,
                "socket.timeout.ms": max(1000, int(timeout_s * 1000)),
                "reconnect.backoff.max.ms": 1000,
                "log_level": 3,  # errors only: a down broker is reported by the agent, not by librdkafka
            }
        )
        self._broker: BrokerKind | None = None

    @property
    def broker(self) -> BrokerKind:
        """The kind of broker, probed on first use (``ClusterUnreachable`` while it does not answer)."""
        if self._broker is None:
            try:
                self._broker = probe(self._admin, self.timeout_s)
            except BrokerUnknown as e:
                raise ClusterUnreachable(str(e)) from None
        return self._broker

    def scan(self) -> Scan:
        """One metadata request; ``ClusterUnreachable`` when the cluster does not answer in time."""
        try:
            md = self._admin.list_topics(timeout=self.timeout_s)
        except KafkaException as e:
            raise ClusterUnreachable(_describe(e)) from None
        brokers = {b.id: f"{b.host}:{b.port}" for b in md.brokers.values()}
        topics: dict[str, dict[int, str | None]] = {}
        for name, topic in md.topics.items():
            if name.startswith("__") or topic.error is not None:
                continue
            topics[name] = {
                pid: brokers.get(p.leader) if p.leader >= 0 else None for pid, p in topic.partitions.items()
            }
        return Scan(topics)

    def create_topics(self, topics: Mapping[str, int]) -> None:
        """Create topics with their partition counts; one that already exists is fine."""
        if not topics:
            return
        new = [NewTopic(name, count, self.replication_factor) for name, count in sorted(topics.items())]
        self._wait(self._admin.create_topics(new, request_timeout=self.timeout_s * 5), KafkaError.TOPIC_ALREADY_EXISTS)

    def grow_topics(self, topics: Mapping[str, int]) -> None:
        """Add partitions to existing topics, up to the given counts (CreatePartitions); ``CannotGrow`` on a
        broker without it."""
        if not topics:
            return
        if not self.broker.grows_topics:
            raise CannotGrow(f"{self.broker.name} has no CreatePartitions: {', '.join(sorted(topics))} cannot grow")
        new = [NewPartitions(name, count) for name, count in sorted(topics.items())]
        self._wait(
            self._admin.create_partitions(new, request_timeout=self.timeout_s * 5), KafkaError.INVALID_PARTITIONS
        )

    def delete_topics(self, names: Iterable[str]) -> None:
        """Delete topics; one that does not exist is fine."""
        names = sorted(names)
        if names:
            self._wait(
                self._admin.delete_topics(names, request_timeout=self.timeout_s * 5), KafkaError.UNKNOWN_TOPIC_OR_PART
            )

    def latest_offsets(self, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Latest offsets as the broker reports them (the end on Kafka, approximate on Tansu; monotonic on a
        healthy cluster)."""
        return self._list_offsets(partitions, OffsetSpec.latest())  # type: ignore[no-untyped-call]  # untyped

    def _list_offsets(self, partitions: Iterable[tuple[str, int]], spec: OffsetSpec) -> dict[tuple[str, int], int]:
        """The offsets the broker knows; a partition it answers with no offset (-1001: a new leader whose high
        watermark is not settled yet, for a few seconds after a broker dies) is left out."""
        request = {TopicPartition(t, p): spec for t, p in partitions}
        if not request:
            return {}
        try:
            futures = self._admin.list_offsets(request, request_timeout=self.timeout_s)
            offsets = {(tp.topic, tp.partition): f.result().offset for tp, f in futures.items()}
        except KafkaException as e:
            raise ClusterUnreachable(_describe(e)) from None
        return {tp: offset for tp, offset in offsets.items() if offset >= 0}

    def drain_offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, int]]:
        """(first offset held, true end offset) per partition; partitions not measured in time are left out."""
        if not partitions:
            return {}
        exact = self.broker.exact_list_offsets
        ends = self.latest_offsets(partitions) if exact else self._tansu_end_offsets(partitions)
        if self.broker.log_start is not None:  # its ListOffsets(earliest) is not to be trusted either
            return {tp: (self.broker.log_start, end) for tp, end in ends.items()}
        starts = self._list_offsets(partitions, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        return {tp: (starts[tp], end) for tp, end in ends.items() if tp in starts}

    def _tansu_end_offsets(self, partitions: Sequence[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """Tansu's true ends: assigned at the end of each partition, the end-of-partition event carries the
        fetch response's high watermark (not Tansu's ListOffsets(latest), the last batch's start).

        A reader per measurement, closed at once: a live consumer that has known a topic crashes in
        librdkafka 2.16 when that topic is deleted on Tansu (and a drained topic is deleted next)."""
        reader = Consumer(
            {
                "bootstrap.servers": self.bootstrap,
                "group.id": "kfed-agent-drain-probe",  # required by assign(); nothing is ever committed
                "enable.auto.commit": False,
                "enable.partition.eof": True,
                "auto.offset.reset": "earliest",
                "isolation.level": "read_uncommitted",
                "fetch.wait.max.ms": 10,
                "fetch.queue.backoff.ms": 10,
                "enable.metrics.push": False,
                "log_level": 3,
            }
        )
        reader.assign([TopicPartition(t, p, OFFSET_END) for t, p in partitions])
        ends: dict[tuple[str, int], int] = {}
        deadline = time.monotonic() + self.timeout_s * 2
        try:
            while len(ends) < len(partitions) and time.monotonic() < deadline:
                for m in reader.consume(10_000, 0.1):
                    error = m.error()
                    topic, partition, offset = m.topic(), m.partition(), m.offset()
                    eof = error is not None and error.code() == KafkaError._PARTITION_EOF
                    if eof and topic is not None and partition is not None and offset is not None:
                        ends[(topic, partition)] = offset
        finally:
            reader.close()
        return ends

    def committed_offsets(
        self, groups: Iterable[str], partitions: Sequence[tuple[str, int]]
    ) -> dict[tuple[str, int], dict[str, int]]:
        """Committed offset per partition and group, for the groups that have committed there.

        confluent-kafka lists one group per request: they are all sent before any answer is awaited, so
        this takes one round trip (at most ``timeout_s``) however many groups the log knows."""
        committed: dict[tuple[str, int], dict[str, int]] = {tp: {} for tp in partitions}
        if not partitions:
            return committed
        topic_partitions = [TopicPartition(t, p) for t, p in partitions]
        futures = {}
        for group in sorted(groups):
            request = [ConsumerGroupTopicPartitions(group, topic_partitions)]
            futures.update(self._admin.list_consumer_group_offsets(request, request_timeout=self.timeout_s))
        try:
            for group, future in futures.items():
                for tp in future.result().topic_partitions:
                    if tp.error is None and tp.offset >= 0:
                        committed[(tp.topic, tp.partition)][group] = tp.offset
        except KafkaException as e:
            raise ClusterUnreachable(_describe(e)) from None
        return committed

    def _wait(self, futures: Mapping[str, object], tolerated: int) -> None:
        for name, future in futures.items():
            try:
                future.result()  # type: ignore[attr-defined]  # concurrent.futures.Future
            except KafkaException as e:
                if e.args and e.args[0].code() == tolerated:
                    continue
                raise ClusterUnreachable(f"{name}: {_describe(e)}") from None


def _describe(e: KafkaException) -> str:
    error = e.args[0] if e.args else None
    return error.str() if isinstance(error, KafkaError) else str(e)
