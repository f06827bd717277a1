"""The logical topics of the image and their partitions (Kafka's ``TopicsImage`` / ``TopicsDelta``).

``TopicsDelta`` replays the records of one batch that change topics, one record at a time (``replay_*``)
or a run of ``PartitionsAdded`` at a time from columns (``add_partitions``); both give the same image and
the same first error. A topic's partitions are kept compact (``partitions.py``): a range record, or a run of
``PartitionsAdded`` that forms a range, is checked and added as one. Where a partition may go depends on its
cluster, which the delta reads from the clusters as replayed so far.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from ..records import (
    PARTITION_STATES,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    TopicCreated,
    TopicDeleted,
)
from .cluster import ClusterImage
from .common import InvalidRecord, evolve
from .partitions import (
    EMPTY_PARTITIONS,
    MAX_PHYSICAL_PARTITION,
    STATE_CODES,
    Partitions,
    PartitionsBuilder,
)

PARTITION_TRANSITIONS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    "writable": frozenset({"read_only"}),
    "read_only": frozenset({"writable", "removed"}),
    "removed": frozenset(),
}
"""Allowed partition state changes: removal always passes through read_only (lossless scale-down)."""


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: str
    name: str
    region: str
    retention_ms: int | None
    partitions: Partitions  # index == logical partition id


class PartitionLocation(NamedTuple):
    """Where a logical partition's data lives: one physical partition of one cluster. A physical partition backs at
    most one partition of a topic."""

    cluster_id: str
    physical_topic: str
    physical_partition: int


class TopicsDelta:
    """Changes to the topics over ``base`` (copy-on-write: the base map and its topics are never changed).
    ``clusters`` gives the clusters as replayed so far in the same batch."""

    __slots__ = ("_base", "_changed", "_clusters", "_partitions", "_states_set", "_whole")

    def __init__(self, base: Mapping[str, TopicImage], clusters: Callable[[], Mapping[str, ClusterImage]]) -> None:
        self._base = base
        self._clusters = clusters
        self._changed: dict[str, TopicImage] | None = None
        self._partitions: dict[str, PartitionsBuilder] = {}  # topics whose partitions changed
        self._whole: set[str] = set()  # topics created or deleted
        self._states_set: dict[str, set[int]] = {}  # per topic: partitions whose state a record set

    def _writable(self) -> dict[str, TopicImage]:
        if self._changed is None:
            self._changed = dict(self._base)
        return self._changed

    def _topic(self, name: str) -> TopicImage:
        topic = (self._changed if self._changed is not None else self._base).get(name)
        if topic is None:
            raise InvalidRecord(f"topic {name!r} does not exist")
        return topic

    def _builder(self, name: str) -> PartitionsBuilder:
        parts = self._partitions.get(name)
        if parts is None:
            parts = self._partitions[name] = PartitionsBuilder(self._topic(name).partitions)
        return parts

    def partition_count(self, name: str) -> int | None:
        """How many logical partitions topic ``name`` has as replayed so far (None: no such topic)."""
        parts = self._partitions.get(name)
        if parts is not None:
            return parts.count
        topic = (self._changed if self._changed is not None else self._base).get(name)
        return None if topic is None else len(topic.partitions)

    # -- one record at a time ------------------------------------------------------------------------
    def replay_created(self, record: TopicCreated) -> None:
        topics = self._writable()
        if record.name in topics:
            raise InvalidRecord(f"topic {record.name!r} already exists")
        topics[record.name] = TopicImage(
            record.topic_id, record.name, record.region, record.retention_ms, EMPTY_PARTITIONS
        )
        self._partitions[record.name] = PartitionsBuilder(EMPTY_PARTITIONS)
        self._whole.add(record.name)

    def replay_partition_added(self, record: PartitionsAdded) -> None:
        self._add_range(
            record.topic, record.partition, 1, record.cluster_id, record.physical_topic, record.physical_partition
        )

    def replay_range_added(self, record: PartitionRangeAdded) -> None:
        if record.count < 1:
            raise InvalidRecord(f"a range of {record.count} partitions of {record.topic} adds none")
        self._add_range(
            record.topic,
            record.first_partition,
            record.count,
            record.cluster_id,
            record.physical_topic,
            record.first_physical_partition,
        )

    def replay_partition_state(self, record: PartitionStateChanged) -> None:
        self._set_states(record.topic, record.partition, 1, record.state)

    def replay_range_state(self, record: PartitionRangeStateChanged) -> None:
        if record.count < 1:
            raise InvalidRecord(f"a range of {record.count} partitions of {record.topic} changes none")
        self._set_states(record.topic, record.first_partition, record.count, record.state)

    def _set_states(self, topic: str, first: int, count: int, state: PartitionState) -> None:
        """Partitions ``first..first+count-1`` go to ``state``, checked as ``count`` ``PartitionStateChanged``
        would be: the error is the one of the first partition that does not fit."""
        parts = self._builder(topic)
        target = STATE_CODES.get(state)
        if target is None:
            raise InvalidRecord(f"partition {topic}/{first}: {state!r} is not a partition state")
        there = max(0, min(count, parts.count - first)) if first >= 0 else 0  # those that exist, from ``first``
        codes = parts.state_codes(first, there)
        # every state has one state it may come from (writable <-> read_only -> removed)
        source = next(STATE_CODES[s] for s, to in PARTITION_TRANSITIONS.items() if state in to)
        if codes.count(source) != there:
            at = next(i for i, code in enumerate(codes) if code != source)
            raise InvalidRecord(
                f"partition {topic}/{first + at} cannot go from {PARTITION_STATES[codes[at]]} to {state}"
            )
        if there < count:
            raise InvalidRecord(f"topic {topic!r} has no partition {first + there}")
        parts.set_states(first, count, target)
        states_set = self._states_set.get(topic)
        if states_set is None:
            states_set = self._states_set[topic] = set()
        states_set.update(range(first, first + count))

    def replay_deleted(self, record: TopicDeleted) -> None:
        self._topic(record.name)
        del self._writable()[record.name]
        self._partitions.pop(record.name, None)
        self._whole.add(record.name)

    def _add_range(
        self, topic_name: str, partition: int, count: int, cluster_id: str, physical_topic: str, physical_first: int
    ) -> None:
        """``count`` partitions from ``partition`` on physical ``physical_first..`` of one cluster, checked as
        ``count`` ``PartitionsAdded`` would be (``InvalidRecord`` saying what does not fit)."""
        topic = self._topic(topic_name)
        parts = self._builder(topic_name)
        cluster = self._clusters().get(cluster_id)
        if cluster is None:
            raise InvalidRecord(f"cluster {cluster_id!r} is not registered")
        if cluster.region != topic.region:
            raise InvalidRecord(
                f"cluster {cluster_id!r} is in region {cluster.region!r}; "
                f"topic {topic.name!r} lives in {topic.region!r}"
            )
        if cluster.state == "decommissioned":
            raise InvalidRecord(f"cluster {cluster_id!r} is decommissioned")
        if partition != parts.count:
            raise InvalidRecord(f"partition {topic.name}/{partition} is not the next id ({parts.count})")
        if physical_first < 0:
            raise InvalidRecord("physical_partition must be >= 0")
        if physical_first + count - 1 > MAX_PHYSICAL_PARTITION:
            raise InvalidRecord(f"physical_partition must be <= {MAX_PHYSICAL_PARTITION}")
        used = parts.overlap(cluster_id, physical_topic, physical_first, count)
        if used is not None:
            raise InvalidRecord(f"{cluster_id}/{physical_topic}/{used} already backs a partition of {topic.name}")
        parts.append(cluster_id, physical_topic, physical_first, count)

    # -- a run at a time, from columns ---------------------------------------------------------------------
    def add_partitions(
        self,
        topics: Sequence[str],
        partitions: Sequence[int],
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
    ) -> None:
        """Consecutive ``PartitionsAdded``, given as columns of their fields (an old log's topic creation or
        scale-up, or a snapshot of metadata version 2 or 3), replayed as the ranges they form: rows of one topic,
        cluster and physical topic whose logical and physical ids both go up by one. The same image and the same
        first error as one at a time."""
        for row in _ranges(topics, partitions, cluster_ids, physical_topics, physical_partitions):
            self._add_range(*row)

    def apply(self) -> Mapping[str, TopicImage]:
        """The topics after every replayed record: the base map itself when none changed."""
        if self._partitions:
            topics = self._writable()
            for name, parts in self._partitions.items():
                topic = topics[name]
                frozen = parts.freeze()
                if frozen is not topic.partitions:
                    topics[name] = evolve(topic, partitions=frozen)
        return self._changed if self._changed is not None else self._base

    def touched(self) -> tuple[set[str], dict[str, Collection[int]]]:
        """(topics created or deleted, per topic whose partitions changed: those whose state was set): the
        names ``Touched`` holds. Every topic whose partitions changed is in ``_partitions`` until deleted."""
        states = self._states_set
        return self._whole, {name: states.get(name, ()) for name in self._partitions}


def _ranges(
    topics: Sequence[str],
    partitions: Sequence[int],
    cluster_ids: Sequence[str],
    physical_topics: Sequence[str],
    physical_partitions: Sequence[int],
) -> Iterator[tuple[str, int, int, str, str, int]]:
    """(topic, first partition, count, cluster, physical topic, first physical partition) of the longest ranges
    the rows form, in order: rows of one topic, cluster and physical topic whose ids both count up by one."""
    n, at = len(partitions), 0
    while at < n:
        key = (topics[at], cluster_ids[at], physical_topics[at])
        stop = at + 1
        while (
            stop < n
            and (topics[stop], cluster_ids[stop], physical_topics[stop]) == key
            and partitions[stop] == partitions[stop - 1] + 1
            and physical_partitions[stop] == physical_partitions[stop - 1] + 1
        ):
            stop += 1
        yield key[0], partitions[at], stop - at, key[1], key[2], physical_partitions[at]
        at = stop
