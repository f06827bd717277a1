"""What a follower of some topics receives (``GET /v1/log?topics=``, ``GET /v1/snapshot?topics=``).

A client that writes to one topic should not hold the whole federation. A ``Selection`` names the logical
topics a follower uses; it receives:

- the records of those topics (their creation, partitions, states, deletion, key order);
- the leaders of the physical topics that back them (``PhysicalPartitionsReported`` /
  ``PhysicalLeadersReported`` of a (cluster, physical topic) one of its topics is placed on, or of a physical
  topic named like one of them);
- every record of a federation-wide kind: clusters (registration, state, fencing: a thousand clusters are a
  few hundred kilobytes), groups, transactions, gateways, the quorum and its metadata version.

A record of another topic, or another physical topic's leaders, is left out; the page's ``next_offset`` still
moves past it, and the follower applies each record at its own offset (``image.offset`` is then the offset
its image is of, for its topics). A follower whose topics gain a placement it did not have (a selected topic
created, or expanded onto another physical topic whose leaders it was not sent) loads a filtered snapshot
(``metadata_client.follower``): leader reports are recorded only on change, so the ones before it would be
missing otherwise.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, replace
from typing import Final

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
_BY_NAME: Final = (TopicCreated, TopicDeleted)


@dataclass(frozen=True, slots=True)
class Selection:
    """The logical topics a follower uses, and the (cluster, physical topic) pairs that back them in an image."""

    topics: frozenset[str]
    backing: frozenset[tuple[str, str]] = frozenset()

    @staticmethod
    def of(topics: Iterable[str], image: MetadataImage) -> Selection:
        """The selection of ``topics`` with their placements in ``image``."""
        names = frozenset(topics)
        return Selection(names, backing_of(names, image))

    def wants(self, record: Record) -> bool:
        """Whether a follower of these topics receives ``record``."""
        if isinstance(record, _BY_TOPIC):
            return record.topic in self.topics
        if isinstance(record, _LEADERS):
            physical = record.physical_topic
            return physical in self.topics or (record.cluster_id, physical) in self.backing
        if isinstance(record, _BY_NAME):
            return record.name in self.topics
        return True

    def image(self, image: MetadataImage) -> MetadataImage:
        """``image`` as a follower of these topics holds it: their topics and key orders, every cluster with
        only the leaders of the physical topics that back them, every federation-wide part."""
        return replace(
            image,
            topics={name: t for name, t in image.topics.items() if name in self.topics},
            key_orders={name: k for name, k in image.key_orders.items() if name in self.topics},
            clusters={c.cluster_id: _leaders_kept(c, self) for c in image.clusters.values()},
        )


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
    kept = {
        physical: slots
        for physical, slots in leaders.indexes()
        if physical in selection.topics or (cluster.cluster_id, physical) in selection.backing
    }
    if len(kept) == sum(1 for _ in leaders.indexes()):
        return cluster
    return replace(cluster, leaders=Leaders(leaders.brokers, kept))
