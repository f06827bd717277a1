"""The immutable metadata image and the one pure function that makes the next one.

``apply(image, records)`` replays records into a ``MetadataDelta`` (copy-on-write over the image's maps)
and freezes it once per batch. Replay checks every record against the image and raises ``InvalidRecord``
when it does not fit (an unknown cluster, a partition id that is not the next one, a state change off its
allowed path): the Raft state machine turns that into a rejected proposal, so a race between two writers
validated against the same image can never corrupt the log. No clock, no randomness, no I/O here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import groupby, repeat
from operator import itemgetter
from typing import Any, Final, NamedTuple, TypeVar, cast

from .codec import (
    COLUMNAR_TYPES,
    TYPE_BY_TAG,
    WIRE_VERSION,
    Run,
    build_records,
    read_runs,
    record_columns,
    record_from_wire,
    record_to_wire,
    run_item,
    wire_groups,
)
from .errors import CorruptData
from .records import (
    LATEST_METADATA_VERSION,
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    ClusterUnfenced,
    GroupCoordinatorAssigned,
    GroupGenerationStarted,
    GroupMember,
    MetadataVersionChanged,
    NewerMetadataVersion,
    NoOp,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    QuorumVoterChanged,
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


_T = TypeVar("_T")


def _evolve(obj: _T, **changes: Any) -> _T:
    """``dataclasses.replace`` for the image's frozen dataclasses, without its per-call field scan
    (it was a third of the apply time of a cluster re-registration). Every field is an init field."""
    cls = type(obj)
    names, known = _FIELD_NAMES[cls]
    if not changes.keys() <= known:
        raise TypeError(f"{cls.__name__} has no field {sorted(changes.keys() - known)}")
    return cls(*[changes[n] if n in changes else getattr(obj, n) for n in names])


class InvalidRecord(CorruptData, ValueError):
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


class PartitionImage(NamedTuple):
    """One logical partition. A NamedTuple, not a dataclass: images hold up to millions of these, and
    a tuple is built ~10x faster and is smaller than a frozen dataclass."""

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


@dataclass(frozen=True, slots=True)
class GroupImage:
    group: str
    coordinator_id: int | None = None
    generation: int = 0
    members: tuple[GroupMember, ...] = ()


@dataclass(frozen=True, slots=True)
class VoterImage:
    """A controller added to (voter) or removed from (not voter) the quorum after its config was written."""

    voter_id: int
    raft: str
    http: str
    voter: bool


@dataclass(frozen=True, slots=True)
class MetadataImage:
    """Everything the log says, as of ``offset`` (the last applied record; -1 for the empty log)."""

    offset: int
    clusters: Mapping[str, ClusterImage]
    topics: Mapping[str, TopicImage]
    groups: Mapping[str, GroupImage]
    voters: Mapping[int, VoterImage] = field(default_factory=dict)
    metadata_version: int = 1  # see ``MetadataVersionChanged``

    def partition_count(self) -> int:
        return sum(len(t.partitions) for t in self.topics.values())


_FIELD_NAMES: Final[dict[type, tuple[tuple[str, ...], frozenset[str]]]] = {
    cls: (names, frozenset(names))
    for cls in (ClusterImage, TopicImage, GroupImage, VoterImage, MetadataImage)
    for names in [tuple(f.name for f in dataclasses.fields(cls))]
}

EMPTY_IMAGE: Final = MetadataImage(offset=-1, clusters={}, topics={}, groups={})


def is_writable(image: MetadataImage, partition: PartitionImage) -> bool:
    """Effective writability: partition writable and its cluster active and not fenced."""
    cluster = image.clusters.get(partition.cluster_id)
    return partition.state == "writable" and cluster is not None and cluster.state == "active" and not cluster.fenced


class MetadataDelta:
    """Changes of one batch over a base image; ``replay`` records, then ``apply`` once."""

    __slots__ = (
        "_base", "_clusters", "_count", "_groups", "_leaders", "_metadata_version", "_partitions", "_placements",
        "_topics", "_voters",
    )  # fmt: skip

    def __init__(self, base: MetadataImage) -> None:
        self._base = base
        self._clusters: dict[str, ClusterImage] | None = None
        self._topics: dict[str, TopicImage] | None = None
        self._groups: dict[str, GroupImage] | None = None
        self._voters: dict[int, VoterImage] | None = None
        self._partitions: dict[str, list[PartitionImage]] = {}  # topics whose partitions changed
        self._leaders: dict[str, dict[tuple[str, int], str]] = {}  # clusters whose leaders changed
        # (cluster, physical topic, physical partition) already used, per topic that gained partitions
        self._placements: dict[str, set[tuple[str, str, int]]] = {}
        self._metadata_version = base.metadata_version
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
                self._cluster_map()[record.cluster_id] = _evolve(cluster, state=record.state)
            case ClusterFenced():
                cluster = self._cluster(record.cluster_id)
                if cluster.fenced:
                    raise InvalidRecord(f"cluster {record.cluster_id!r} is already fenced")
                self._cluster_map()[record.cluster_id] = _evolve(
                    cluster, fenced=True, fenced_reason=record.reason, fenced_since_ms=record.at_ms
                )
            case ClusterUnfenced():
                cluster = self._cluster(record.cluster_id)
                if not cluster.fenced:
                    raise InvalidRecord(f"cluster {record.cluster_id!r} is not fenced")
                self._cluster_map()[record.cluster_id] = _evolve(
                    cluster, fenced=False, fenced_reason=None, fenced_since_ms=None
                )
            case PhysicalPartitionsReported():
                self.report_leaders(
                    (record.cluster_id,), (record.physical_topic,), (record.physical_partition,), (record.leader,)
                )
                return  # counted by report_leaders
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
                self._placements.pop(record.name, None)
            case PartitionsAdded():
                self._replay_partition_added(record)
                return  # counted by add_partition
            case PartitionStateChanged():
                parts = self._partition_list(record.topic)
                if not 0 <= record.partition < len(parts):
                    raise InvalidRecord(f"topic {record.topic!r} has no partition {record.partition}")
                current = parts[record.partition]
                if record.state not in PARTITION_TRANSITIONS[current.state]:
                    raise InvalidRecord(
                        f"partition {record.topic}/{record.partition} cannot go from {current.state} to {record.state}"
                    )
                parts[record.partition] = current._replace(state=record.state)
            case TopicDeleted():
                self._topic(record.name)
                del self._topic_map()[record.name]
                self._partitions.pop(record.name, None)
                self._placements.pop(record.name, None)
            case GroupCoordinatorAssigned():
                groups = self._group_map()
                group = groups.get(record.group, GroupImage(group=record.group))
                groups[record.group] = _evolve(group, coordinator_id=record.coordinator_id)
            case GroupGenerationStarted():
                groups = self._group_map()
                group = groups.get(record.group, GroupImage(group=record.group))
                if record.generation <= group.generation:
                    raise InvalidRecord(
                        f"group {record.group!r} generation {record.generation} is not after {group.generation}"
                    )
                groups[record.group] = _evolve(group, generation=record.generation, members=record.members)
            case NoOp():
                pass
            case QuorumVoterChanged():
                if self._voters is None:
                    self._voters = dict(self._base.voters)
                self._voters[record.voter_id] = VoterImage(record.voter_id, record.raft, record.http, record.voter)
            case MetadataVersionChanged():
                if record.version < self._metadata_version:
                    raise InvalidRecord(f"metadata version {self._metadata_version} cannot go back to {record.version}")
                if record.version > LATEST_METADATA_VERSION:
                    raise NewerMetadataVersion(record.version)
                self._metadata_version = record.version
            case _:
                raise InvalidRecord(f"not a record: {type(record).__name__}")
        self._count += 1

    def _replay_cluster_registered(self, record: ClusterRegistered) -> None:
        existing = (self._clusters if self._clusters is not None else self._base.clusters).get(record.cluster_id)
        if existing is None:
            self._cluster_map()[record.cluster_id] = ClusterImage(
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
        if existing.bootstrap_servers != record.bootstrap_servers:  # else nothing changes (e.g. a retried write)
            self._cluster_map()[record.cluster_id] = _evolve(existing, bootstrap_servers=record.bootstrap_servers)

    def register_clusters(
        self, cluster_ids: Sequence[str], regions: Sequence[str], bootstrap_servers: Sequence[str]
    ) -> None:
        """Replay of consecutive ``ClusterRegistered``, given as columns: each new cluster is added, each
        known one keeps its region and takes the last bootstrap servers of the run. The checks run over
        the run's distinct (cluster, region) pairs; when one fails, the rows are replayed one by one, so the
        error is that of the first row that does not fit. A group commit of many agents' (re-)registrations
        is one such run; when it only repeats what the image holds (agents registering again), it is
        checked in one pass over the run and changes nothing."""
        clusters = self._clusters if self._clusters is not None else self._base.clusters
        # The image's own map (never changed, so its registrations can be kept): does the run only repeat it?
        repeated = _REGISTRATIONS.of(clusters) if self._clusters is None else None
        if repeated is not None and repeated.issuperset(zip(cluster_ids, regions, bootstrap_servers, strict=True)):
            self._count += len(cluster_ids)
            return
        regions_of: dict[str, str] = {}
        fits = True
        for cluster_id, region in dict.fromkeys(zip(cluster_ids, regions, strict=True)):
            existing = clusters.get(cluster_id)
            known = existing.region if existing is not None else regions_of.get(cluster_id, region)
            if known != region or (existing is not None and existing.state == "decommissioned"):
                fits = False
                break
            regions_of[cluster_id] = region
        if not fits:
            for row in zip(cluster_ids, regions, bootstrap_servers, strict=True):
                self.replay(ClusterRegistered(*row))
            return
        changed = []
        for cluster_id, servers in dict(zip(cluster_ids, bootstrap_servers, strict=True)).items():
            existing = clusters.get(cluster_id)
            if existing is None:
                changed.append(ClusterImage(cluster_id, regions_of[cluster_id], servers))
            elif existing.bootstrap_servers != servers:
                changed.append(_evolve(existing, bootstrap_servers=servers))
        if changed:
            self._cluster_map().update((c.cluster_id, c) for c in changed)
        self._count += len(cluster_ids)

    def _replay_partition_added(self, record: PartitionsAdded) -> None:
        self.replay_columns(PartitionsAdded, record_columns((record,)), 1)

    def add_partitions(
        self,
        topic_name: str,
        partitions: Sequence[int],
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
    ) -> None:
        """Replay of consecutive ``PartitionsAdded`` of one topic, given as columns of their fields (the
        bulk paths call it with whole runs and no record objects).

        Each check runs over whole columns, in C (``map``, ``set``, tuple comparison): a 1,000-partition run
        costs a fraction of a loop over its rows. Only when a check fails are the rows replayed one by one,
        so the error raised is the one of the first row that does not fit, as if replayed alone."""
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
            self._count += n
            return
        for row in zip(partitions, cluster_ids, physical_topics, physical_partitions, strict=True):
            self._add_partition(topic, parts, placements, *row)

    def _placements_of(self, topic_name: str, parts: list[PartitionImage]) -> set[tuple[str, str, int]]:
        """(cluster, physical topic, physical partition) already used by the topic: a physical partition
        backs at most one of its logical partitions."""
        placements = self._placements.get(topic_name)
        if placements is None:
            placements = {(p.cluster_id, p.physical_topic, p.physical_partition) for p in parts}
            self._placements[topic_name] = placements
        return placements

    def _can_place(self, cluster_id: str, topic: TopicImage) -> bool:
        clusters = self._clusters if self._clusters is not None else self._base.clusters
        cluster = clusters.get(cluster_id)
        return cluster is not None and cluster.region == topic.region and cluster.state != "decommissioned"

    def _add_partition(
        self,
        topic: TopicImage,
        parts: list[PartitionImage],
        placements: set[tuple[str, str, int]],
        partition: int,
        cluster_id: str,
        physical_topic: str,
        physical_partition: int,
    ) -> None:
        """One ``PartitionsAdded``, checked field by field (``InvalidRecord`` saying what does not fit)."""
        cluster = self._cluster(cluster_id)
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
        self._count += 1

    def report_leaders(
        self,
        cluster_ids: Sequence[str],
        physical_topics: Sequence[str],
        physical_partitions: Sequence[int],
        leaders: Sequence[str | None],
    ) -> None:
        """Replay of consecutive ``PhysicalPartitionsReported``, given as columns of their fields: each
        partition's leader is set (or dropped, for None), in order. A snapshot of a federation whose agents
        report every partition holds one such record per partition; a run of one cluster is one dict update."""
        for cluster_id, start, stop in _runs(cluster_ids):
            current = self._leaders.get(cluster_id)
            if current is None:
                current = self._leaders[cluster_id] = dict(self._cluster(cluster_id).leaders)
            columns = (physical_topics, physical_partitions, leaders)
            if stop - start < len(cluster_ids):  # several clusters: this one's slice
                columns = tuple(column[start:stop] for column in columns)  # type: ignore[assignment]  # same types
            topics, partitions, run = columns
            keys = zip(topics, partitions, strict=True)
            if None not in run:
                current.update(zip(keys, run, strict=True))  # type: ignore[arg-type]  # no None in this run
                continue
            for key, leader in zip(keys, run, strict=True):
                if leader is None:
                    current.pop(key, None)
                else:
                    current[key] = leader
        self._count += len(cluster_ids)

    def replay_columns(self, cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> None:
        """Replay ``n`` consecutive records of type ``cls`` given as checked columns (one per field): partitions
        (per run of one topic), leader reports and registrations a whole run at a time; other types record by
        record."""
        if cls is PartitionsAdded:
            for topic_name, start, stop in _runs(columns[0]):
                if stop - start == n:
                    self.add_partitions(topic_name, *columns[1:])
                else:
                    self.add_partitions(topic_name, *(column[start:stop] for column in columns[1:]))
        elif cls is PhysicalPartitionsReported:
            self.report_leaders(*columns)
        elif cls is ClusterRegistered:
            self.register_clusters(*columns)
        else:
            for record in build_records(cls, columns, n):
                self.replay(record)

    def apply(self) -> MetadataImage:
        """The image after every replayed record."""
        topics: Mapping[str, TopicImage] = self._base.topics
        if self._partitions:
            tmap = self._topic_map()
            for name, parts in self._partitions.items():
                tmap[name] = _evolve(tmap[name], partitions=tuple(parts))
        if self._topics is not None:
            topics = self._topics
        if self._leaders:
            cmap = self._cluster_map()
            for cluster_id, leaders in self._leaders.items():
                cmap[cluster_id] = _evolve(cmap[cluster_id], leaders=leaders)
        return MetadataImage(
            offset=self._base.offset + self._count,
            clusters=self._clusters if self._clusters is not None else self._base.clusters,
            topics=topics,
            groups=self._groups if self._groups is not None else self._base.groups,
            voters=self._voters if self._voters is not None else self._base.voters,
            metadata_version=self._metadata_version,
        )


class _LastRegistrations:
    """(cluster, region, bootstrap servers) of each cluster that is not decommissioned, for the last cluster
    map asked about: what a registration that changes nothing repeats. The map of an image is never changed
    once the image is built (a delta copies it first), and it is held here, so the same object has the same
    content; it stays the same from image to image until a cluster changes, while agents register again
    all along.

    Built only when the same map is asked about a second time: a run of new clusters changes the map with
    every command, and building the set of tens of thousands of clusters per command made 1a's new-cluster
    registrations 3x slower (1,549 against 4,704 records/s, BENCHMARKS.md, eleventh session)."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last: tuple[Mapping[str, ClusterImage], frozenset[tuple[str, str, str]] | None] | None = None

    def of(self, clusters: Mapping[str, ClusterImage]) -> frozenset[tuple[str, str, str]] | None:
        """The registrations of ``clusters``, or None the first time this map is asked about."""
        last = self._last  # one read: another thread may replace it meanwhile
        if last is None or last[0] is not clusters:
            self._last = (clusters, None)
            return None
        if last[1] is not None:
            return last[1]
        registrations = frozenset(
            (c.cluster_id, c.region, c.bootstrap_servers) for c in clusters.values() if c.state != "decommissioned"
        )
        self._last = (clusters, registrations)
        return registrations


_REGISTRATIONS: Final = _LastRegistrations()

BULK_TYPES: Final = frozenset({PartitionsAdded, PhysicalPartitionsReported, ClusterRegistered})
"""Record types ``MetadataDelta.replay_columns`` replays a whole run at a time (others: record by record)."""


def apply(image: MetadataImage, records: Iterable[Record]) -> MetadataImage:
    """The image after ``records``, each taking the next offset; ``InvalidRecord`` if any does not fit.

    Atomic: on error the caller still holds the unchanged ``image``. Runs of consecutive ``PartitionsAdded``
    (a topic creation, a scale-up), ``PhysicalPartitionsReported`` (an agent's report) and
    ``ClusterRegistered`` (a group commit of registrations) are replayed as columns (``add_partitions``,
    ``report_leaders``, ``register_clusters``): the same checks and the same first error as one at a time.
    """
    delta = MetadataDelta(image)
    _replay_records(delta, records)
    return delta.apply()


def apply_runs(image: MetadataImage, items: Iterable[Run | Record]) -> MetadataImage:
    """``apply`` of records of which some come as a ``Run`` (records of one type as checked columns), as
    ``codec.read_runs`` yields them: a follower applies a command without building its record objects. A
    run goes to the delta as it is; consecutive records as ``apply`` says."""
    delta = MetadataDelta(image)
    for is_run, group in groupby(items, _is_run):
        if is_run:
            for run in cast(Iterator[Run], group):
                delta.replay_columns(*run)
        else:
            _replay_records(delta, cast(Iterator[Record], group))
    return delta.apply()


def _replay_records(delta: MetadataDelta, records: Iterable[Record]) -> None:
    for cls, group in groupby(records, type):
        if cls in BULK_TYPES:
            run = list(group)
            delta.replay_columns(cls, record_columns(run, cls), len(run))
        else:
            for record in group:
                delta.replay(record)


def _is_run(item: Run | Record) -> bool:
    return type(item) is Run


def _runs(keys: Sequence[str]) -> Iterator[tuple[str, int, int]]:
    """(key, start, stop) of each run of equal consecutive ``keys`` (usually one: a single topic)."""
    if not keys:
        return
    if keys.count(keys[0]) == len(keys):
        yield keys[0], 0, len(keys)
        return
    start = 0
    for key, run in groupby(keys):
        stop = start + sum(1 for _ in run)
        yield key, start, stop
        start = stop


def _snapshot_rows(image: MetadataImage) -> Iterator[tuple[type[Record], tuple[Any, ...]]]:
    """The image as (record type, field values), in an order that replays from ``EMPTY_IMAGE``."""
    # A partition cannot be added on a decommissioned cluster, so that last step of a cluster's path is
    # replayed after the topics.
    if image.metadata_version != EMPTY_IMAGE.metadata_version:
        yield MetadataVersionChanged, (image.metadata_version,)
    decommissioned: list[str] = []
    for c in sorted(image.clusters.values(), key=lambda c: c.cluster_id):
        yield ClusterRegistered, (c.cluster_id, c.region, c.bootstrap_servers)
        path = _CLUSTER_PATH[c.state]
        if c.state == "decommissioned":
            path = path[:-1]
            decommissioned.append(c.cluster_id)
        for cluster_state in path:
            yield ClusterStateChanged, (c.cluster_id, cluster_state)
        if c.fenced:
            yield ClusterFenced, (c.cluster_id, c.fenced_reason or "", c.fenced_since_ms or 0)
        for (physical_topic, physical_partition), leader in sorted(c.leaders.items()):
            yield PhysicalPartitionsReported, (c.cluster_id, physical_topic, physical_partition, leader)
    for t in sorted(image.topics.values(), key=lambda t: t.name):
        yield TopicCreated, (t.topic_id, t.name, t.region, t.retention_ms)
        for p in t.partitions:
            yield PartitionsAdded, (t.name, p.partition, p.cluster_id, p.physical_topic, p.physical_partition)
        for p in t.partitions:
            for partition_state in _PARTITION_PATH[p.state]:
                yield PartitionStateChanged, (t.name, p.partition, partition_state)
    for cluster_id in decommissioned:
        yield ClusterStateChanged, (cluster_id, "decommissioned")
    for g in sorted(image.groups.values(), key=lambda g: g.group):
        if g.coordinator_id is not None:
            yield GroupCoordinatorAssigned, (g.group, g.coordinator_id)
        if g.generation > 0:
            yield GroupGenerationStarted, (g.group, g.generation, g.members)
    for v in sorted(image.voters.values(), key=lambda v: v.voter_id):
        yield QuorumVoterChanged, (v.voter_id, v.raft, v.http, v.voter)


def image_to_records(image: MetadataImage) -> list[Record]:
    """The image written as records: ``apply(EMPTY_IMAGE, image_to_records(i))`` equals ``i`` except offset."""
    return list(iter_image_records(image))


def iter_image_records(image: MetadataImage) -> Iterator[Record]:
    """``image_to_records`` one at a time (an encoder that writes slices never holds them all)."""
    return (cls(*fields) for cls, fields in _snapshot_rows(image))


def image_to_wire(image: MetadataImage) -> list[list[Any]]:
    """``image_to_records`` in the codec's wire form, without building record objects (bulk path)."""
    return list(iter_image_wire(image))


def iter_image_wire(image: MetadataImage) -> Iterator[list[Any]]:
    """``image_to_wire`` one row at a time."""
    for cls, fields in _snapshot_rows(image):
        if cls is GroupGenerationStarted:
            yield record_to_wire(cls(*fields))
        else:
            yield [cls.TYPE, WIRE_VERSION, *fields]


def image_to_runs(image: MetadataImage) -> list[Any]:
    """``image_to_wire`` as runs (``codec.records_to_runs``'s layout), without record objects: the form of
    dumps and snapshots once the log is at metadata version 2. Each topic's partitions are one run, and
    so is each cluster's leader reports; a topic's name, its cluster, a leader's address are written once
    per run instead of once per partition."""
    items: list[Any] = []
    for cls, group in groupby(_snapshot_rows(image), itemgetter(0)):
        rows = [fields for _cls, fields in group]
        if cls in COLUMNAR_TYPES and len(rows) > 1:
            items.append(run_item(cls, list(map(list, zip(*rows, strict=True))), len(rows))[0])
        elif cls is GroupGenerationStarted:
            items += (record_to_wire(cls(*fields)) for fields in rows)
        else:
            items += ([cls.TYPE, WIRE_VERSION, *fields] for fields in rows)
    return items


def image_from_snapshot(body: Mapping[str, Any], offset: int) -> MetadataImage:
    """The image a decoded snapshot or dump body holds, in either layout: ``runs`` (``image_to_runs``), or
    ``records`` (wire rows, from a writer at metadata version 1 or a controller older than runs)."""
    return image_from_runs(body["runs"], offset) if "runs" in body else image_from_wire(body["records"], offset)


def image_from_runs(items: Any, offset: int) -> MetadataImage:
    """Rebuild a snapshot from ``image_to_runs`` output: partitions and leader reports go to the delta a run
    at a time, as columns. Raises ``CodecError`` or ``InvalidRecord``."""
    return replace(apply_runs(EMPTY_IMAGE, read_runs(items)), offset=offset)


def image_from_wire(rows: Iterable[Any], offset: int) -> MetadataImage:
    """Rebuild a snapshot from wire rows: the same replay as ``apply``, but runs of rows of one type go to the
    delta as columns (``codec.wire_groups``), without record objects for partitions and leader reports (a
    1M-partition snapshot is almost all such rows). Raises ``CodecError`` or ``InvalidRecord``."""
    delta = MetadataDelta(EMPTY_IMAGE)
    for group, columns in wire_groups(rows):
        if columns is None:  # not a well-formed run: record by record, for the exact error
            for row in group:
                delta.replay(record_from_wire(row))
        else:
            delta.replay_columns(TYPE_BY_TAG[group[0][0]], columns, len(group))
    return replace(delta.apply(), offset=offset)


def snapshot_image(records: Iterable[Record], offset: int) -> MetadataImage:
    """Rebuild the image a snapshot at ``offset`` describes."""
    image = apply(EMPTY_IMAGE, records)
    return replace(image, offset=offset)
