"""The logical topics of the image and their partitions (Kafka's ``TopicsImage`` / ``TopicsDelta``).

``TopicsDelta`` replays the records of one batch that change topics, one record at a time (``replay_*``)
or a run of ``PartitionsAdded`` at a time from columns (``add_partitions``); both give the same image and
the same first error. Where a partition may go depends on its cluster, which the delta reads from the
clusters as replayed so far.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Final, NamedTuple

from ..records import PartitionsAdded, PartitionState, PartitionStateChanged, TopicCreated, TopicDeleted
from .cluster import ClusterImage
from .common import InvalidRecord, evolve, runs_of

PARTITION_TRANSITIONS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    "writable": frozenset({"read_only"}),
    "read_only": frozenset({"writable", "removed"}),
    "removed": frozenset(),
}
"""Allowed partition state changes: removal always passes through read_only (lossless scale-down)."""


class PartitionImage(NamedTuple):
    """One logical partition. A NamedTuple, not a dataclass: images hold up to millions of these, and
    a tuple is built much faster and is smaller than a frozen dataclass."""

    partition: int
    cluster_id: str
    physical_topic: str
    physical_partition: int
    state: PartitionState = "writable"


def new_partitions(
    partitions: Sequence[int],
    cluster_ids: Sequence[str],
    physical_topics: Sequence[str],
    physical_partitions: Sequence[int],
) -> Iterator[PartitionImage]:
    """Writable ``PartitionImage``s from columns of their fields, built in C: ``tuple.__new__`` with every
    field in order, without the Python frame of the generated ``__new__`` (``test_image`` checks the
    field order). For bulk paths: topics have up to 1M partitions."""
    states = repeat("writable", len(partitions))
    fields = zip(partitions, cluster_ids, physical_topics, physical_partitions, states, strict=True)
    return map(tuple.__new__, repeat(PartitionImage), fields)


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: str
    name: str
    region: str
    retention_ms: int | None
    partitions: tuple[PartitionImage, ...]  # index == logical partition id


class PartitionLocation(NamedTuple):
    """Where a logical partition's data lives: one physical partition of one cluster. A physical partition backs at
    most one partition of a topic; replay keeps the locations a topic uses as plain tuples of these fields."""

    cluster_id: str
    physical_topic: str
    physical_partition: int


_Location = tuple[str, str, int]
"""``PartitionLocation``'s fields as replay keeps them (a plain tuple per partition: no class call per record)."""


class TopicsDelta:
    """Changes to the topics over ``base`` (copy-on-write: the base map and its topics are never changed).
    ``clusters`` gives the clusters as replayed so far in the same batch."""

    __slots__ = ("_base", "_changed", "_clusters", "_partitions", "_placements", "_states_set", "_whole")

    def __init__(self, base: Mapping[str, TopicImage], clusters: Callable[[], Mapping[str, ClusterImage]]) -> None:
        self._base = base
        self._clusters = clusters
        self._changed: dict[str, TopicImage] | None = None
        self._partitions: dict[str, list[PartitionImage]] = {}  # topics whose partitions changed
        self._placements: dict[str, set[_Location]] = {}  # per topic that gained partitions: placements used
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

    def _partition_list(self, name: str) -> list[PartitionImage]:
        parts = self._partitions.get(name)
        if parts is None:
            parts = self._partitions[name] = list(self._topic(name).partitions)
        return parts

    def _placements_of(self, topic_name: str, parts: list[PartitionImage]) -> set[_Location]:
        placements = self._placements.get(topic_name)
        if placements is None:
            placements = {(p.cluster_id, p.physical_topic, p.physical_partition) for p in parts}
            self._placements[topic_name] = placements
        return placements

    def partition_count(self, name: str) -> int | None:
        """How many logical partitions topic ``name`` has as replayed so far (None: no such topic)."""
        parts = self._partitions.get(name)
        if parts is not None:
            return len(parts)
        topic = (self._changed if self._changed is not None else self._base).get(name)
        return None if topic is None else len(topic.partitions)

    # -- one record at a time ------------------------------------------------------------------------
    def replay_created(self, record: TopicCreated) -> None:
        topics = self._writable()
        if record.name in topics:
            raise InvalidRecord(f"topic {record.name!r} already exists")
        topics[record.name] = TopicImage(record.topic_id, record.name, record.region, record.retention_ms, ())
        self._partitions[record.name] = []
        self._placements.pop(record.name, None)
        self._whole.add(record.name)

    def replay_partition_added(self, record: PartitionsAdded) -> None:
        topic = self._topic(record.topic)
        parts = self._partition_list(record.topic)
        self._add_partition(
            topic,
            parts,
            self._placements_of(record.topic, parts),
            record.partition,
            record.cluster_id,
            record.physical_topic,
            record.physical_partition,
        )

    def replay_partition_state(self, record: PartitionStateChanged) -> None:
        parts = self._partition_list(record.topic)
        if not 0 <= record.partition < len(parts):
            raise InvalidRecord(f"topic {record.topic!r} has no partition {record.partition}")
        current = parts[record.partition]
        if record.state not in PARTITION_TRANSITIONS[current.state]:
            raise InvalidRecord(
                f"partition {record.topic}/{record.partition} cannot go from {current.state} to {record.state}"
            )
        parts[record.partition] = current._replace(state=record.state)
        states_set = self._states_set.get(record.topic)
        if states_set is None:
            states_set = self._states_set[record.topic] = set()
        states_set.add(record.partition)

    def replay_deleted(self, record: TopicDeleted) -> None:
        self._topic(record.name)
        del self._writable()[record.name]
        self._partitions.pop(record.name, None)
        self._placements.pop(record.name, None)
        self._whole.add(record.name)

    def _add_partition(
        self,
        topic: TopicImage,
        parts: list[PartitionImage],
        placements: set[_Location],
        partition: int,
        cluster_id: str,
        physical_topic: str,
        physical_partition: int,
    ) -> None:
        """One ``PartitionsAdded``, checked field by field (``InvalidRecord`` saying what does not fit)."""
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
        if partition != len(parts):
            raise InvalidRecord(f"partition {topic.name}/{partition} is not the next id ({len(parts)})")
        if physical_partition < 0:
            raise InvalidRecord("physical_partition must be >= 0")
        placement = (cluster_id, physical_topic, physical_partition)
        if placement in placements:
            raise InvalidRecord(
                f"{cluster_id}/{physical_topic}/{physical_partition} already backs a partition of {topic.name}"
            )
        placements.add(placement)
        parts.append(PartitionImage(partition, cluster_id, physical_topic, physical_partition))

    # -- a run at a time, from columns ---------------------------------------------------------------------
    def add_partitions(
        self,
        topics: Sequence[str],
        partitions: Sequence[int],
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
    ) -> None:
        """Consecutive ``PartitionsAdded``, given as columns of their fields (usually of one topic: its
        creation or a scale-up), split into runs of one topic."""
        n = len(topics)
        for topic_name, start, stop in runs_of(topics):
            if stop - start == n:
                self._add_topic_partitions(topic_name, partitions, cluster_ids, physical_topics, physical_partitions)
            else:
                self._add_topic_partitions(
                    topic_name,
                    partitions[start:stop],
                    cluster_ids[start:stop],
                    physical_topics[start:stop],
                    physical_partitions[start:stop],
                )

    def _add_topic_partitions(
        self,
        topic_name: str,
        partitions: Sequence[int],
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
    ) -> None:
        """Consecutive ``PartitionsAdded`` of one topic. Each check runs over whole columns, in C (``map``,
        ``set``, tuple comparison): a 1,000-partition run costs a fraction of a loop over its rows. Only when
        a check fails are the rows replayed one by one, so the error raised is the one of the first row that
        does not fit, as if replayed alone."""
        n = len(partitions)
        topic = self._topic(topic_name)
        parts = self._partition_list(topic_name)
        placements = self._placements_of(topic_name, parts)
        try:
            new_placements = set(zip(cluster_ids, physical_topics, physical_partitions, strict=True))
            fits = (
                tuple(partitions) == tuple(range(len(parts), len(parts) + n))
                and (n == 0 or min(physical_partitions) >= 0)
                and all(self._can_place(cluster_id, topic) for cluster_id in set(cluster_ids))
                and len(new_placements) == n
                and placements.isdisjoint(new_placements)
            )
        except TypeError:  # a value of the wrong type (not from the codec, which checks them): row by row
            fits = False
        if fits:
            placements |= new_placements
            parts += new_partitions(partitions, cluster_ids, physical_topics, physical_partitions)
            return
        for row in zip(partitions, cluster_ids, physical_topics, physical_partitions, strict=True):
            self._add_partition(topic, parts, placements, *row)

    def _can_place(self, cluster_id: str, topic: TopicImage) -> bool:
        cluster = self._clusters().get(cluster_id)
        return cluster is not None and cluster.region == topic.region and cluster.state != "decommissioned"

    def apply(self) -> Mapping[str, TopicImage]:
        """The topics after every replayed record: the base map itself when none changed."""
        if self._partitions:
            topics = self._writable()
            for name, parts in self._partitions.items():
                topics[name] = evolve(topics[name], partitions=tuple(parts))
        return self._changed if self._changed is not None else self._base

    def touched(self) -> tuple[set[str], dict[str, Collection[int]]]:
        """(topics created or deleted, per topic whose partitions changed: those whose state was set): the
        names ``Touched`` holds. Every topic whose partitions changed is in ``_partitions`` until deleted."""
        states = self._states_set
        return self._whole, {name: states.get(name, ()) for name in self._partitions}
