"""The immutable metadata image and the one pure function that makes the next one.

``apply(image, records)`` replays records into a ``MetadataDelta`` (copy-on-write over the image's maps)
and freezes it once per batch. Replay checks every record against the image and raises ``InvalidRecord``
when it does not fit (an unknown cluster, a partition id that is not the next one, a state change off its
allowed path): the Raft state machine turns that into a rejected proposal, so a race between two writers
validated against the same image can never corrupt the log. No clock, no randomness, no I/O here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Final

from .records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    ClusterUnfenced,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    GroupMember,
    NoOp,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)

CLUSTER_TRANSITIONS: Final[Mapping[ClusterState, frozenset[ClusterState]]] = {
    "active": frozenset({"read_only"}),
    "read_only": frozenset({"active", "draining"}),
    "draining": frozenset({"read_only", "decommissioned"}),
    "decommissioned": frozenset(),
}
"""Allowed cluster admin-state changes (decommission is the seeds' read_only -> draining -> decommissioned)."""

PARTITION_TRANSITIONS: Final[Mapping[PartitionState, frozenset[PartitionState]]] = {
    "writable": frozenset({"read_only"}),
    "read_only": frozenset({"writable", "removed"}),
    "removed": frozenset(),
}
"""Allowed partition state changes: removal always passes through read_only (lossless scale-down)."""

# The shortest allowed path from a new value's initial state to each state; snapshots replay these.
_CLUSTER_PATH: Final[Mapping[ClusterState, tuple[ClusterState, ...]]] = {
    "active": (),
    "read_only": ("read_only",),
    "draining": ("read_only", "draining"),
    "decommissioned": ("read_only", "draining", "decommissioned"),
}
_PARTITION_PATH: Final[Mapping[PartitionState, tuple[PartitionState, ...]]] = {
    "writable": (),
    "read_only": ("read_only",),
    "removed": ("read_only", "removed"),
}


class InvalidRecord(ValueError):
    """A record that does not apply to the image it was replayed on."""


@dataclass(frozen=True, slots=True)
class ClusterImage:
    cluster_id: str
    region: str
    bootstrap_servers: str
    state: ClusterState = "active"
    fenced: bool = False
    fenced_reason: str | None = None
    fenced_since_ms: int | None = None
    # (physical_topic, physical_partition) -> leader "host:port", as last reported by the agent
    leaders: Mapping[tuple[str, int], str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class PartitionImage:
    partition: int
    cluster_id: str
    physical_topic: str
    physical_partition: int
    state: PartitionState = "writable"


@dataclass(frozen=True, slots=True)
class TopicImage:
    topic_id: str
    name: str
    region: str
    retention_ms: int | None
    partitions: tuple[PartitionImage, ...]  # index == logical partition id


@dataclass(frozen=True, slots=True)
class GroupImage:
    group: str
    coordinator_id: int | None = None
    generation: int = 0
    members: tuple[GroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything the log says, as of ``offset`` (the last applied record; -1 for the empty log)."""

    offset: int
    clusters: Mapping[str, ClusterImage]
    topics: Mapping[str, TopicImage]
    groups: Mapping[str, GroupImage]

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())


EMPTY_IMAGE: Final = MetadataImage(offset=-1, clusters={}, topics={}, groups={})


def is_writable(image: MetadataImage, partition: PartitionImage) -> bool:
    """Effective writability: partition writable and its cluster active and not fenced."""
    cluster = image.clusters.get(partition.cluster_id)
    return partition.state == "writable" and cluster is not None and cluster.state == "active" and not cluster.fenced


class MetadataDelta:
    """Changes of one batch over a base image; ``replay`` records, then ``apply`` once."""

    __slots__ = ("_base", "_clusters", "_count", "_groups", "_leaders", "_partitions", "_topics")

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._clusters: dict[str, ClusterImage] | None = None
        self._topics: dict[str, TopicImage] | None = None
        self._groups: dict[str, GroupImage] | None = None
        self._partitions: dict[str, list[PartitionImage]] = {}  # topics whose partitions changed
        self._leaders: dict[str, dict[tuple[str, int], str]] = {}  # clusters whose leaders changed
        self._count = 0

    # -- copy-on-write accessors -------------------------------------------------------------------
    def _cluster_map(self) -> dict[str, ClusterImage]:
        if self._clusters is None:
            self._clusters = dict(self._base.clusters)
        return self._clusters

    def _topic_map(self) -> dict[str, TopicImage]:
        if self._topics is None:
            self._topics = dict(self._base.topics)
        return self._topics

    def _group_map(self) -> dict[str, GroupImage]:
        if self._groups is None:
            self._groups = dict(self._base.groups)
        return self._groups

    def _cluster(self, cluster_id: str) -> ClusterImage:
        clusters = self._clusters if self._clusters is not None else self._base.clusters
        cluster = clusters.get(cluster_id)
        if cluster is None:
            raise InvalidRecord(f"cluster {cluster_id!r} is not registered")
        return cluster

    def _topic(self, name: str) -> TopicImage:
        topics = self._topics if self._topics is not None else self._base.topics
        topic = topics.get(name)
        if topic is None:
            raise InvalidRecord(f"topic {name!r} does not exist")
        return topic

    def _partition_list(self, name: str) -> list[PartitionImage]:
        parts = self._partitions.get(name)
        if parts is None:
            parts = list(self._topic(name).partitions)
            self._partitions[name] = parts
        return parts

    # -- replay ------------------------------------------------------------------------------------
    def replay(self, record: Record) -> None:
        """Fold one record into the delta; ``InvalidRecord`` if it does not fit."""
        match record:
            case ClusterRegistered():
                self._replay_cluster_registered(record)
            case ClusterStateChanged():
                cluster = self._cluster(record.cluster_id)
                if record.state not in CLUSTER_TRANSITIONS[cluster.state]:
                    raise InvalidRecord(
                        f"cluster {record.cluster_id!r} cannot go from {cluster.state} to {record.state}"
                    )
                self._cluster_map()[record.cluster_id] = replace(cluster, state=record.state)
            case ClusterFenced():
                cluster = self._cluster(record.cluster_id)
                if cluster.fenced:
                    raise InvalidRecord(f"cluster {record.cluster_id!r} is already fenced")
                self._cluster_map()[record.cluster_id] = replace(
                    cluster, fenced=True, fenced_reason=record.reason, fenced_since_ms=record.at_ms
                )
            case ClusterUnfenced():
                cluster = self._cluster(record.cluster_id)
                if not cluster.fenced:
                    raise InvalidRecord(f"cluster {record.cluster_id!r} is not fenced")
                self._cluster_map()[record.cluster_id] = replace(
                    cluster, fenced=False, fenced_reason=None, fenced_since_ms=None
                )
            case PhysicalPartitionsReported():
                cluster = self._cluster(record.cluster_id)
                leaders = self._leaders.get(record.cluster_id)
                if leaders is None:
                    leaders = self._leaders[record.cluster_id] = dict(cluster.leaders)
                key = (record.physical_topic, record.physical_partition)
                if record.leader is None:
                    leaders.pop(key, None)
                else:
                    leaders[key] = record.leader
            case TopicCreated():
                topics = self._topic_map()
                if record.name in topics:
                    raise InvalidRecord(f"topic {record.name!r} already exists")
                topics[record.name] = TopicImage(
                    topic_id=record.topic_id,
                    name=record.name,
                    region=record.region,
                    retention_ms=record.retention_ms,
                    partitions=(),
                )
                self._partitions[record.name] = []
            case PartitionsAdded():
                self._replay_partition_added(record)
            case PartitionStateChanged():
                parts = self._partition_list(record.topic)
                if not 0 <= record.partition < len(parts):
                    raise InvalidRecord(f"topic {record.topic!r} has no partition {record.partition}")
                current = parts[record.partition]
                if record.state not in PARTITION_TRANSITIONS[current.state]:
                    raise InvalidRecord(
                        f"partition {record.topic}/{record.partition} cannot go from {current.state} to {record.state}"
                    )
                parts[record.partition] = replace(current, state=record.state)
            case TopicDeleted():
                self._topic(record.name)
                del self._topic_map()[record.name]
                self._partitions.pop(record.name, None)
            case GroupCoordinatorAssigned():
                groups = self._group_map()
                group = groups.get(record.group, GroupImage(group=record.group))
                groups[record.group] = replace(group, coordinator_id=record.coordinator_id)
            case GroupGenerationStarted():
                groups = self._group_map()
                group = groups.get(record.group, GroupImage(group=record.group))
                if record.generation <= group.generation:
                    raise InvalidRecord(
                        f"group {record.group!r} generation {record.generation} is not after {group.generation}"
                    )
                groups[record.group] = replace(group, generation=record.generation, members=record.members)
            case NoOp():
                pass
            case _:
                raise InvalidRecord(f"not a record: {type(record).__name__}")
        self._count += 1

    def _replay_cluster_registered(self, record: ClusterRegistered) -> None:
        clusters = self._cluster_map()
        existing = clusters.get(record.cluster_id)
        if existing is None:
            clusters[record.cluster_id] = ClusterImage(
                cluster_id=record.cluster_id,
                region=record.region,
                bootstrap_servers=record.bootstrap_servers,
            )
            return
        if existing.region != record.region:
            raise InvalidRecord(
                f"cluster {record.cluster_id!r} is registered in region {existing.region!r}, not {record.region!r}"
            )
        if existing.state == "decommissioned":
            raise InvalidRecord(f"cluster {record.cluster_id!r} is decommissioned")
        clusters[record.cluster_id] = replace(existing, bootstrap_servers=record.bootstrap_servers)

    def _replay_partition_added(self, record: PartitionsAdded) -> None:
        topic = self._topic(record.topic)
        cluster = self._cluster(record.cluster_id)
        if cluster.region != topic.region:
            raise InvalidRecord(
                f"cluster {record.cluster_id!r} is in region {cluster.region!r}; "
                f"topic {record.topic!r} lives in {topic.region!r}"
            )
        if cluster.state == "decommissioned":
            raise InvalidRecord(f"cluster {record.cluster_id!r} is decommissioned")
        parts = self._partition_list(record.topic)
        if record.partition != len(parts):
            raise InvalidRecord(f"partition {record.topic}/{record.partition} is not the next id ({len(parts)})")
        if record.physical_partition < 0:
            raise InvalidRecord("physical_partition must be >= 0")
        placement = (record.cluster_id, record.physical_topic, record.physical_partition)
        # A physical partition backs at most one logical partition. Checked per cluster+topic, which
        # is a short scan of this topic's partitions, not of the whole image.
        for p in parts:
            if (p.cluster_id, p.physical_topic, p.physical_partition) == placement:
                raise InvalidRecord(
                    f"{record.cluster_id}/{record.physical_topic}/{record.physical_partition} "
                    f"already backs {record.topic}/{p.partition}"
                )
        parts.append(
            PartitionImage(
                partition=record.partition,
                cluster_id=record.cluster_id,
                physical_topic=record.physical_topic,
                physical_partition=record.physical_partition,
            )
        )

    def apply(self) -> MetadataImage:
        """The image after every replayed record."""
        topics: Mapping[str, TopicImage] = self._base.topics
        if self._partitions:
            tmap = self._topic_map()
            for name, parts in self._partitions.items():
                tmap[name] = replace(tmap[name], partitions=tuple(parts))
        if self._topics is not None:
            topics = self._topics
        if self._leaders:
            cmap = self._cluster_map()
            for cluster_id, leaders in self._leaders.items():
                cmap[cluster_id] = replace(cmap[cluster_id], leaders=leaders)
        return MetadataImage(
            offset=self._base.offset + self._count,
            clusters=self._clusters if self._clusters is not None else self._base.clusters,
            topics=topics,
            groups=self._groups if self._groups is not None else self._base.groups,
        )


def apply(image: MetadataImage, records: Iterable[Record]) -> MetadataImage:
    """The image after ``records``, each taking the next offset; ``InvalidRecord`` if any does not fit.

    Atomic: on error the caller still holds the unchanged ``image``.
    """
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply()


def image_to_records(image: MetadataImage) -> list[Record]:
    """The image written as records: ``apply(EMPTY_IMAGE, image_to_records(i))`` equals ``i`` except offset."""
    out: list[Record] = []
    # A partition cannot be added on a decommissioned cluster, so that last step of a cluster's path is
    # replayed after the topics.
    decommissions: list[Record] = []
    for c in sorted(image.clusters.values(), key=lambda c: c.cluster_id):
        out.append(ClusterRegistered(c.cluster_id, c.region, c.bootstrap_servers))
        path = _CLUSTER_PATH[c.state]
        if c.state == "decommissioned":
            path = path[:-1]
            decommissions.append(ClusterStateChanged(c.cluster_id, "decommissioned"))
        out.extend(ClusterStateChanged(c.cluster_id, s) for s in path)
        if c.fenced:
            out.append(ClusterFenced(c.cluster_id, c.fenced_reason or "", c.fenced_since_ms or 0))
        out.extend(
            PhysicalPartitionsReported(c.cluster_id, t, p, leader) for (t, p), leader in sorted(c.leaders.items())
        )
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        out.append(TopicCreated(t.topic_id, t.name, t.region, t.retention_ms))
        for p in t.partitions:
            out.append(PartitionsAdded(t.name, p.partition, p.cluster_id, p.physical_topic, p.physical_partition))
        for p in t.partitions:
            out.extend(PartitionStateChanged(t.name, p.partition, s) for s in _PARTITION_PATH[p.state])
    out.extend(decommissions)
    for g in sorted(image.groups.values(), key=lambda g: g.group):
        if g.coordinator_id is not None:
            out.append(GroupCoordinatorAssigned(g.group, g.coordinator_id))
        if g.generation > 0:
            out.append(GroupGenerationStarted(g.group, g.generation, g.members))
    return out


def snapshot_image(records: Iterable[Record], offset: int) -> MetadataImage:
    """Rebuild the image a snapshot at ``offset`` describes."""
    image = apply(EMPTY_IMAGE, records)
    return replace(image, offset=offset)
