"""What a physical cluster should hold according to the log, and what to do about the difference. Pure.

The agent scans its cluster, calls ``plan`` with the ``placement`` of the image it follows, and carries
the plan out. A plan
only ever touches *managed* physical topics — those the log places on this cluster — so topics that
kfed does not know about (internal ones, other applications') are never deleted.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from metadata_log.image import MetadataImage


@dataclass(frozen=True, slots=True)
class Plan:
    create: Mapping[str, int] = field(default_factory=dict)  # physical topic -> partition count
    recreate: Mapping[str, int] = field(default_factory=dict)  # exists with too few partitions: delete + create
    grow: Mapping[str, int] = field(default_factory=dict)  # exists with too few partitions: add the missing ones
    delete: tuple[str, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.create or self.recreate or self.grow or self.delete)


@dataclass(frozen=True, slots=True)
class ClusterPlan:
    """What the log places on one cluster, from a single pass over the image."""

    desired: Mapping[str, int]  # physical topic -> partitions needed (some logical partition not removed)
    retired: frozenset[str]  # physical topics whose logical partitions are all removed, or cluster gone
    draining: tuple[tuple[str, int], ...] = ()  # physical partitions on their way out (read_only / draining)


def placement(image: MetadataImage, cluster_id: str) -> ClusterPlan:
    cluster = image.clusters.get(cluster_id)
    gone = cluster is None or cluster.state == "decommissioned"
    cluster_draining = cluster is not None and cluster.state == "draining"
    needed: dict[str, int] = {}
    placed: set[str] = set()
    draining: list[tuple[str, int]] = []
    for topic in image.topics.values():
        for p in topic.partitions:
            if p.cluster_id == cluster_id:
                placed.add(p.physical_topic)
                if p.state != "removed" and not gone:
                    needed[p.physical_topic] = max(needed.get(p.physical_topic, 0), p.physical_partition + 1)
                    if p.state == "read_only" or cluster_draining:
                        draining.append((p.physical_topic, p.physical_partition))
    return ClusterPlan(needed, frozenset(placed - set(needed)), tuple(sorted(set(draining))))


def plan(
    where: ClusterPlan,
    physical: Mapping[str, int],
    also_delete: Iterable[str] = (),
    recovering: bool = False,
) -> Plan:
    """The changes that make ``physical`` (topic -> partition count) match the log's ``where``.

    ``also_delete``: physical topics of logical topics deleted from the log (the image no longer names
    them; the agent remembers them from the records it followed). A managed topic with too few partitions
    grows to the count the log needs (an expand onto a cluster that already holds the physical topic) —
    except with ``recovering`` (the cluster came back empty): then it was made after the loss, e.g.
    auto-created by a producer, and is deleted and created again with the right count.
    """
    desired = where.desired
    create = {t: n for t, n in desired.items() if t not in physical}
    short = {t: n for t, n in desired.items() if t in physical and physical[t] < n}
    gone = (where.retired | set(also_delete)) - set(desired)
    delete = tuple(sorted(t for t in gone if t in physical))
    if recovering:
        return Plan(create=create, recreate=short, delete=delete)
    return Plan(create=create, grow=short, delete=delete)
