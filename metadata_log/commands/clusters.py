"""Commands on physical clusters: register one, move its admin state (active <-> read_only -> draining ->
decommissioned), decommission it losslessly, fence and unfence it, and record the leaders its agent reports.

A change that leaves a strict topic's keys somewhere else starts that topic's next routing epoch in the same
batch (``key_order.with_epochs``).
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence
from dataclasses import dataclass, replace
from itertools import pairwise

from ..errors import Conflict, InvalidRequest
from ..image import CLUSTER_TRANSITIONS, ClusterImage, InvalidRecord, MetadataImage
from ..image.partitions import MAX_PHYSICAL_PARTITION, checked_leader_report, ranges_of, translated
from ..records import (
    CLUSTER_STATES,
    MAX_LEADERS_PER_RECORD,
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    ClusterUnfenced,
    PartitionStateChanged,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
    Record,
)
from ..views import cluster_view
from .common import (
    MAX_PARTITIONS_PER_REQUEST,
    MAX_REASON_CHARS,
    Result,
    apply_checked,
    check_bootstrap,
    check_name,
    registered_cluster,
    writes_ranges,
)
from .key_order import with_epochs


def register_cluster(image: MetadataImage, cluster_id: str, region: str, bootstrap_servers: str) -> Result:
    """Register a physical cluster in a region; re-registering the same cluster is a no-op."""
    check_name(cluster_id, "cluster_id")
    check_name(region, "region")
    check_bootstrap(bootstrap_servers)
    existing = image.clusters.get(cluster_id)
    if existing is not None:
        if existing.region != region:
            raise Conflict(
                f"cluster {cluster_id!r} is already registered in region {existing.region!r}",
                field="region",
            )
        if existing.state == "decommissioned":
            raise Conflict(f"cluster {cluster_id!r} is decommissioned; register it under a new id")
        if existing.bootstrap_servers == bootstrap_servers:
            return Result((), cluster_view(existing))
    records = (ClusterRegistered(cluster_id, region, bootstrap_servers),)
    # the cluster as apply() will make it: applying here would copy the image's cluster map per request
    cluster = (
        ClusterImage(cluster_id, region, bootstrap_servers)
        if existing is None
        else replace(existing, bootstrap_servers=bootstrap_servers)
    )
    return Result(records, cluster_view(cluster))


def change_cluster_state(image: MetadataImage, cluster_id: str, state: str) -> Result:
    """Move a cluster along its admin-state path (active <-> read_only -> draining -> decommissioned), with the
    routing epochs that starts."""
    return with_epochs(image, _change_cluster_state(image, cluster_id, state), f"{cluster_id} {state}")


def _change_cluster_state(image: MetadataImage, cluster_id: str, state: str) -> Result:
    cluster = registered_cluster(image, cluster_id)
    if state not in CLUSTER_STATES:
        raise InvalidRequest("state", f"state must be one of {', '.join(CLUSTER_STATES)}")
    target: ClusterState = state  # narrowed by the membership check above
    if target == cluster.state:
        return Result((), cluster_view(cluster))
    if target not in CLUSTER_TRANSITIONS[cluster.state]:
        allowed: list[str] = sorted(CLUSTER_TRANSITIONS[cluster.state]) or ["none"]
        raise Conflict(
            f"cluster {cluster_id!r} cannot go from {cluster.state} to {target} (allowed: {', '.join(allowed)})",
            field="state",
        )
    if target in ("draining", "decommissioned"):
        check_can_retire(image, cluster)
    records = (
        decommissioned(image, cluster_id) if target == "decommissioned" else (ClusterStateChanged(cluster_id, target),)
    )
    after = apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


def placement_clusters(image: MetadataImage, region: str) -> list[str]:
    """Clusters that take new partitions of a region's topics: active, not fenced, in id order."""
    return sorted(
        c.cluster_id for c in image.clusters.values() if c.region == region and c.state == "active" and not c.fenced
    )


def fence_cluster(image: MetadataImage, cluster_id: str, reason: str, at_ms: int) -> Result:
    """Fence a cluster (its partitions stop being writable); a no-op when it already is."""
    cluster = registered_cluster(image, cluster_id)
    if cluster.fenced:
        return Result((), cluster_view(cluster))
    records = (ClusterFenced(cluster_id, reason[:MAX_REASON_CHARS], at_ms),)
    after = apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


def unfence_cluster(image: MetadataImage, cluster_id: str, at_ms: int) -> Result:
    """Lift the fence of a cluster that is healthy again; a no-op when it is not fenced."""
    cluster = registered_cluster(image, cluster_id)
    if not cluster.fenced:
        return Result((), cluster_view(cluster))
    records = (ClusterUnfenced(cluster_id, at_ms),)
    after = apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


@dataclass(frozen=True, slots=True)
class PhysicalPartition:
    """What an agent saw of one physical partition: its leader "host:port", or None when it has none."""

    physical_topic: str
    physical_partition: int
    leader: str | None


def report_physical_partitions(
    image: MetadataImage, cluster_id: str, partitions: Sequence[PhysicalPartition]
) -> Result:
    """Record the leaders an agent reports, only where they differ from the image (no record per scan): from
    metadata version 4 as ``PhysicalLeadersReported`` per physical topic (``MAX_LEADERS_PER_RECORD`` each)."""
    cluster = registered_cluster(image, cluster_id)
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest("partitions", f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per report")
    changed: list[PhysicalPartition] = []
    seen: set[tuple[str, int]] = set()
    for i, p in enumerate(partitions):
        check_name(p.physical_topic, f"partitions.{i}.physical_topic")
        if not isinstance(p.physical_partition, int) or not 0 <= p.physical_partition <= MAX_PHYSICAL_PARTITION:
            raise InvalidRequest(
                f"partitions.{i}.physical_partition", f"physical_partition must be 0 to {MAX_PHYSICAL_PARTITION}"
            )
        if p.leader is not None:
            check_bootstrap(p.leader, f"partitions.{i}.leader")
        key = (p.physical_topic, p.physical_partition)
        if key in seen:
            raise InvalidRequest(f"partitions.{i}", f"{p.physical_topic}/{p.physical_partition} is listed twice")
        seen.add(key)
        if cluster.leaders.get(key) != p.leader:
            changed.append(p)
    records = (
        _leader_records(cluster_id, changed)
        if writes_ranges(image)
        else tuple(
            PhysicalPartitionsReported(cluster_id, p.physical_topic, p.physical_partition, p.leader) for p in changed
        )
    )
    after = apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


@dataclass(frozen=True, slots=True)
class LeaderRanges:
    """What an agent saw of one physical topic's partitions, in compact form: the partitions of each (first,
    count) pair of ``ranges``, in order, have the leaders ``leaders`` names by index into ``brokers`` (-1: none)."""

    physical_topic: str
    brokers: Sequence[str]
    ranges: Sequence[int]
    leaders: Sequence[int]


def report_leader_ranges(image: MetadataImage, cluster_id: str, reports: Sequence[LeaderRanges]) -> Result:
    """``report_physical_partitions`` of reports in compact form (an agent of a cluster with 100,000 partitions
    sends a few hundred kilobytes): each name checked once, and each range compared with the image as a whole
    (an array comparison), recorded as reported where it differs. Before metadata version 4, the partitions
    that differ, one record each."""
    cluster = registered_cluster(image, cluster_id)
    if sum(len(r.leaders) for r in reports) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest("leaders", f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per report")
    table = {address: i for i, address in enumerate(cluster.leaders.brokers)}
    taken: dict[str, list[tuple[int, int, int]]] = {}  # per physical topic: (first, end, report index)
    changed: list[tuple[LeaderRanges, int, int, int]] = []  # (report, first partition, count, first leader)
    for i, r in enumerate(reports):
        pairs, indexes = _checked_ranges(r, i)
        reported = translated(indexes, [table.get(address, -2) for address in r.brokers])  # -2: never the cluster's
        at = 0
        for first, count in pairs:
            taken.setdefault(r.physical_topic, []).append((first, first + count, i))
            if reported[at : at + count] != cluster.leaders.segment(r.physical_topic, first, count):
                changed.append((r, first, count, at))
            at += count
    for physical_topic, spans in taken.items():
        spans.sort()
        for (_, end, _i), (first, _end, i) in pairwise(spans):
            if first < end:
                raise InvalidRequest(f"leaders.{i}", f"{physical_topic}/{first} is listed twice")
    records: list[Record] = []
    for r, first, count, at in changed:
        for start in range(0, count, MAX_LEADERS_PER_RECORD):
            n = min(MAX_LEADERS_PER_RECORD, count - start)
            leaders = tuple(r.leaders[at + start : at + start + n])
            if writes_ranges(image):
                ranges = (first + start, n)
                records.append(PhysicalLeadersReported(cluster_id, r.physical_topic, tuple(r.brokers), ranges, leaders))
                continue
            records += (
                PhysicalPartitionsReported(cluster_id, r.physical_topic, p, r.brokers[j] if j >= 0 else None)
                for p, j in zip(range(first + start, first + start + n), leaders, strict=True)
                if cluster.leaders.get((r.physical_topic, p)) != (r.brokers[j] if j >= 0 else None)
            )
    after = apply_checked(image, records)
    return Result(tuple(records), cluster_view(after.clusters[cluster_id]))


def _checked_ranges(r: LeaderRanges, i: int) -> tuple[list[tuple[int, int]], array[int]]:
    """The (first, count) pairs of report ``i`` and its leaders as an array, each of its fields checked
    (``InvalidRequest`` naming it)."""
    check_name(r.physical_topic, f"leaders.{i}.physical_topic")
    for j, broker in enumerate(r.brokers):
        check_bootstrap(broker, f"leaders.{i}.brokers.{j}")
    try:
        return checked_leader_report(r.physical_topic, len(r.brokers), r.ranges, r.leaders)
    except InvalidRecord as e:  # what replay would refuse, said of the request's field
        raise InvalidRequest(f"leaders.{i}.{e.extra['field']}", e.detail) from None


def leader_ranges(changes: Sequence[PhysicalPartition]) -> list[LeaderRanges]:
    """``changes`` in compact form: per physical topic, in order, up to ``MAX_LEADERS_PER_RECORD`` partitions a
    report, each address once, the partitions as (first, count) ranges (what an agent sends, and what the
    ``PhysicalLeadersReported`` records of ``report_physical_partitions`` say)."""
    by_topic: dict[str, list[PhysicalPartition]] = {}
    for p in changes:
        by_topic.setdefault(p.physical_topic, []).append(p)
    reports = []
    for physical_topic, rows in by_topic.items():
        for at in range(0, len(rows), MAX_LEADERS_PER_RECORD):
            chunk = rows[at : at + MAX_LEADERS_PER_RECORD]
            brokers = tuple(dict.fromkeys(p.leader for p in chunk if p.leader is not None))
            index = {address: i for i, address in enumerate(brokers)}
            leaders = tuple(index[p.leader] if p.leader is not None else -1 for p in chunk)
            ranges = tuple(n for pair in ranges_of([p.physical_partition for p in chunk]) for n in pair)
            reports.append(LeaderRanges(physical_topic, brokers, ranges, leaders))
    return reports


def _leader_records(cluster_id: str, changed: Sequence[PhysicalPartition]) -> tuple[Record, ...]:
    return tuple(
        PhysicalLeadersReported(cluster_id, r.physical_topic, tuple(r.brokers), tuple(r.ranges), tuple(r.leaders))
        for r in leader_ranges(changed)
    )


def decommission_cluster(image: MetadataImage, cluster_id: str) -> Result:
    """The seeds' decommission: the cluster goes read_only (producers stop writing to it) and draining, with
    the routing epochs that starts; the controller leader marks it decommissioned once all its partitions are
    drained or expired, and its agent then deletes the physical topics. Re-running is a no-op once the cluster
    is draining.
    """
    return with_epochs(image, _decommission_cluster(image, cluster_id), f"{cluster_id} decommissioned")


def _decommission_cluster(image: MetadataImage, cluster_id: str) -> Result:
    cluster = registered_cluster(image, cluster_id)
    if cluster.state in ("draining", "decommissioned"):
        return Result((), cluster_view(cluster))
    check_can_retire(image, cluster)
    steps: list[ClusterState] = ["read_only", "draining"] if cluster.state == "active" else ["draining"]
    records = tuple(ClusterStateChanged(cluster_id, s) for s in steps)
    after = apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


def check_can_retire(image: MetadataImage, cluster: ClusterImage) -> None:
    """A cluster may leave its region only if the region's topics can still be written elsewhere."""
    topics = [t for t in image.topics.values() if t.region == cluster.region]
    if not topics:
        return
    others = {
        c.cluster_id
        for c in image.clusters.values()
        if c.region == cluster.region and c.cluster_id != cluster.cluster_id and c.state == "active"
    }
    if not others:
        raise Conflict(
            f"cluster {cluster.cluster_id!r} is the last active cluster of region {cluster.region!r}, which still "
            f"has {len(topics)} topic(s); add a cluster to the region first",
            field="cluster_id",
        )
    stranded = sorted(
        t.name
        for t in topics
        if any(p.cluster_id == cluster.cluster_id and p.state != "removed" for p in t.partitions)
        and not any(p.cluster_id in others and p.state == "writable" for p in t.partitions)
    )
    if stranded:
        raise Conflict(
            f"topic(s) {', '.join(stranded[:10])} would have no writable partition left; expand them onto "
            f"another cluster of {cluster.region!r} first (kfed topic expand TOPIC --cluster ID --partitions N)",
            field="cluster_id",
        )


def decommissioned(image: MetadataImage, cluster_id: str) -> tuple[Record, ...]:
    """The records that end a cluster: each of its partitions still in use removed (through read_only),
    then the cluster decommissioned, so consumers drop them and logical ids stay retired."""
    records: list[Record] = []
    for topic in image.topics.values():
        for p in topic.partitions:
            if p.cluster_id != cluster_id or p.state == "removed":
                continue
            if p.state == "writable":
                records.append(PartitionStateChanged(topic.name, p.partition, "read_only"))
            records.append(PartitionStateChanged(topic.name, p.partition, "removed"))
    records.append(ClusterStateChanged(cluster_id, "decommissioned"))
    return tuple(records)
