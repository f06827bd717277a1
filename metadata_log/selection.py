"""What a follower of some topics receives (``GET /v1/log?topics=``, ``GET /v1/snapshot?topics=``).

A client that writes to one topic should not hold the whole federation. A ``Selection`` names the logical
topics a follower uses, and the clusters (``clusters=``: a sub-cluster's agent follows its own) whose topics
it uses; it receives:

- the records of those topics, and of every topic placed on one of those clusters (their creation,
  partitions, states, key order), and their deletion (a follower of clusters gets every deletion: the topic
  was placed on them until then; one that does not hold the topic skips it);
- the leaders of the physical topics that back the named topics (``PhysicalPartitionsReported`` /
  ``PhysicalLeadersReported`` of a (cluster, physical topic) one of them is placed on, or of a physical topic
  named like one of them), and every leader report of the selected clusters;
- every record of a federation-wide kind: clusters (registration, state, fencing: a thousand clusters are a
  few hundred kilobytes), groups, transactions, gateways, the quorum and its metadata version.

A record of another topic, or another physical topic's leaders, is left out; the page's ``next_offset`` still
moves past it, and the follower applies each record at its own offset (``image.offset`` is then the offset
its image is of, for its topics). A follower whose topics gain a placement it did not have (a selected topic
created, or expanded onto another physical topic whose leaders it was not sent) loads a filtered snapshot
(``metadata_client.follower``): leader reports are recorded only on change, so the ones before it would be
missing otherwise. So does a follower of clusters sent a record of a topic it does not hold (a topic expanded
onto its cluster).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from .codec import record_from_dict
from .image import ClusterImage, Leaders, MetadataImage
from .records import (
    KEY_ORDER_RECORD_TYPES,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)

MAX_SELECTED_TOPICS: Final = 1000
"""Most topics one follower may select (``topics=``): a follower of more follows the whole log."""

MAX_SELECTED_CLUSTERS: Final = 100
"""Most clusters one follower may select (``clusters=``)."""

MAX_SELECTION_CHARS: Final = 4000
"""Longest ``topics=`` a node accepts: percent-encoded (up to 12 bytes a character) the request must stay under
the 64 KiB the HTTP server reads before answering 400 itself. A follower whose names are longer follows the
whole log."""


def fits(topics: Collection[str]) -> bool:
    """Whether a node accepts ``topics`` as one selection (``MAX_SELECTED_TOPICS``, ``MAX_SELECTION_CHARS``)."""
    return len(topics) <= MAX_SELECTED_TOPICS and sum(len(name) + 1 for name in topics) - 1 <= MAX_SELECTION_CHARS


_BY_TOPIC: Final = (
    PartitionsAdded,
    PartitionRangeAdded,
    PartitionStateChanged,
    PartitionRangeStateChanged,
    *KEY_ORDER_RECORD_TYPES,
)
_LEADERS: Final = (PhysicalPartitionsReported, PhysicalLeadersReported)


@dataclass(frozen=True, slots=True)
class Selection:
    """The logical topics a follower uses (named, or placed on a selected cluster), the (cluster, physical
    topic) pairs that back the named ones in an image, and the selected clusters."""

    topics: frozenset[str]
    backing: frozenset[tuple[str, str]] = frozenset()
    clusters: frozenset[str] = frozenset()

    @staticmethod
    def of(topics: Iterable[str], image: MetadataImage, clusters: Iterable[str] = ()) -> Selection:
        """The selection of ``topics`` and of the topics on ``clusters``, placed as ``image`` says."""
        names, on = frozenset(topics), frozenset(clusters)
        placed = placed_on(image)
        return Selection(names.union(*(placed.get(c, ()) for c in on)), backing_of(names, image), on)

    def wants(self, record: Record) -> bool:
        """Whether a follower of these topics receives ``record``."""
        if isinstance(record, _LEADERS):
            physical = record.physical_topic
            return (
                record.cluster_id in self.clusters
                or physical in self.topics
                or (record.cluster_id, physical) in self.backing
            )
        if isinstance(record, TopicDeleted):
            return record.name in self.topics or bool(self.clusters)
        topic = topic_of(record)
        return topic is None or topic in self.topics

    def image(self, image: MetadataImage) -> MetadataImage:
        """``image`` as a follower of these topics holds it: their topics and key orders, every cluster with
        only the leaders of the physical topics that back them (all of a selected cluster's), every
        federation-wide part."""
        return replace(
            image,
            topics={name: t for name, t in image.topics.items() if name in self.topics},
            key_orders={name: k for name, k in image.key_orders.items() if name in self.topics},
            clusters={c.cluster_id: _leaders_kept(c, self) for c in image.clusters.values()},
        )


def topic_of(record: Record) -> str | None:
    """The logical topic ``record`` is about (its creation, partitions, states, key order, deletion); None for
    a leader report or a federation-wide kind."""
    if isinstance(record, _BY_TOPIC):
        return record.topic
    if isinstance(record, TopicCreated | TopicDeleted):
        return record.name
    return None


_placed: list[tuple[MetadataImage, dict[str, frozenset[str]]]] = []  # the last image's, for the next reader


def placed_on(image: MetadataImage) -> dict[str, frozenset[str]]:
    """The logical topics with a partition on each cluster, by cluster id. Computed once per image: every
    agent's page of the same image reads it."""
    cached = _placed[0] if _placed else None
    if cached is not None and cached[0] is image:
        return cached[1]
    by_cluster: dict[str, set[str]] = {}
    for name, topic in image.topics.items():
        for run in topic.partitions.runs:
            by_cluster.setdefault(run.cluster_id, set()).add(name)
    placed = {cluster: frozenset(names) for cluster, names in by_cluster.items()}
    _placed[:] = [(image, placed)]
    return placed


def page_records(items: Iterable[Mapping[str, Any]], first: int, end: int) -> list[tuple[int, Record]]:
    """The records of a (filtered) ``/v1/log`` page read from offset ``first``, with their offsets: increasing
    and within ``first .. end - 1`` (``end``: the page's ``next_offset``), else ``ValueError``; a record that
    does not decode is a ``CodecError``."""
    pairs: list[tuple[int, Record]] = []
    expected = first
    for item in items:
        offset = int(item["offset"])
        if not expected <= offset < end:
            raise ValueError(f"offset {offset} outside {expected}..{end - 1}")
        pairs.append((offset, record_from_dict(item["type"], item["data"])))
        expected = offset + 1
    return pairs


def offset_runs(pairs: Iterable[tuple[int, Record]]) -> list[tuple[int, list[Record]]]:
    """``pairs`` as runs of consecutive offsets, (first offset, records): a follower applies each run at its own
    offsets, what was left out between them having changed nothing it holds."""
    runs: list[tuple[int, list[Record]]] = []
    for offset, record in pairs:
        if runs and offset == runs[-1][0] + len(runs[-1][1]):
            runs[-1][1].append(record)
        else:
            runs.append((offset, [record]))
    return runs


def backing_of(topics: Collection[str], image: MetadataImage) -> frozenset[tuple[str, str]]:
    """The (cluster, physical topic) pairs the partitions of ``topics`` are placed on in ``image``."""
    return frozenset(
        (run.cluster_id, run.physical_topic)
        for name in topics
        if (topic := image.topics.get(name)) is not None
        for run in topic.partitions.runs
    )


def _leaders_kept(cluster: ClusterImage, selection: Selection) -> ClusterImage:
    leaders = cluster.leaders
    if cluster.cluster_id in selection.clusters:
        return cluster
    kept = {
        physical: slots
        for physical, slots in leaders.indexes()
        if physical in selection.topics or (cluster.cluster_id, physical) in selection.backing
    }
    if len(kept) == sum(1 for _ in leaders.indexes()):
        return cluster
    return replace(cluster, leaders=Leaders(leaders.brokers, kept))
