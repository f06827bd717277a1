"""Commands on logical topics: create one over its region's clusters (with its first routing epoch when
``key_order: strict``), add partitions (scale up: no data moves), move a partition's state (writable <->
read_only -> removed), shrink losslessly, delete.

A change of a strict topic's writable partitions starts its next routing epoch in the same batch
(``key_order.with_epochs``); an expand's epoch starts from the leader's loop once the new partitions have
leaders (docs/KEY_ORDER.md).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from ..errors import Conflict, InvalidRequest, NotFound
from ..image import PARTITION_TRANSITIONS, MetadataImage, Partitions, TopicImage, apply
from ..image.partitions import MAX_PHYSICAL_PARTITION, PlacementRun, ranges_of
from ..records import (
    PARTITION_STATES,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    Record,
    TopicCreated,
    TopicDeleted,
)
from ..views import key_order_view, topic_view
from .clusters import placement_clusters
from .common import (
    MAX_PARTITIONS_PER_REQUEST,
    MAX_PARTITIONS_PER_TOPIC,
    Result,
    apply_checked,
    check_count,
    check_name,
    existing_topic,
    writes_ranges,
)
from .key_order import check_key_order, first_epoch, with_epochs


def _check_keeps_a_writable(topic: TopicImage, leaving: Collection[int], field_name: str, hint: str = "") -> None:
    """Producers must keep somewhere to write: a writable partition outside ``leaving`` must remain."""
    parts = topic.partitions
    if parts.count_in_state("writable") <= sum(1 for p in leaving if parts.state(p) == "writable"):
        raise Conflict(f"topic {topic.name!r} must keep at least one writable partition{hint}", field=field_name)


def create_topic(
    image: MetadataImage,
    name: str,
    region: str,
    partitions_per_cluster: int,
    topic_id: str,
    physical_topic: str | None = None,
    retention_ms: int | None = None,
    key_order: Any = "none",
) -> Result:
    """A logical topic with ``partitions_per_cluster`` partitions on each placement cluster of its region.

    Logical ids are numbered cluster by cluster in cluster-id order; physical partitions are 0..N-1 of
    a physical topic named like the logical one unless ``physical_topic`` says otherwise. A ``strict`` topic
    gets its first routing epoch over all its partitions in the same batch (their leaders are not known yet:
    producers queue keyed messages until they are).
    """
    order = check_key_order(key_order)
    check_name(name, "name")
    check_name(region, "region")
    physical = check_name(physical_topic, "physical_topic") if physical_topic is not None else name
    check_count(partitions_per_cluster, "partitions_per_cluster")
    if retention_ms is not None and (not isinstance(retention_ms, int) or retention_ms <= 0):
        raise InvalidRequest("retention_ms", "retention_ms must be a positive integer or null")
    if name in image.topics:
        raise Conflict(f"topic {name!r} already exists", field="name")
    clusters = placement_clusters(image, region)
    if not clusters:
        raise Conflict(f"region {region!r} has no active, unfenced cluster to place partitions on", field="region")
    total = partitions_per_cluster * len(clusters)
    if total > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(
            "partitions_per_cluster",
            f"{total} partitions ({len(clusters)} clusters x {partitions_per_cluster}) exceed "
            f"{MAX_PARTITIONS_PER_REQUEST} per request",
        )
    # Logical ids 0.. cluster by cluster, physical 0..N-1 on each: one range per cluster.
    runs = tuple(
        PlacementRun(i * partitions_per_cluster, partitions_per_cluster, cluster_id, physical, 0)
        for i, cluster_id in enumerate(clusters)
    )
    records: tuple[Record, ...] = (TopicCreated(topic_id, name, region, retention_ms), *_added(image, name, runs))
    # The reply without applying the records to the whole image first (a large share of this command's time
    # for a big topic): every check that apply makes holds by construction here (a new name, the
    # region's active clusters, ids from 0, distinct physical partitions), and the commit applies them.
    topic = TopicImage(topic_id, name, region, retention_ms, Partitions(runs))
    reply = topic_view(image, topic)
    if order == "none":
        return Result(records, reply)
    records += tuple(first_epoch(name, range(total), 0, "created strict"))
    return Result(records, {**reply, **key_order_view(apply(image, records).key_orders, name)})


def add_partitions(
    image: MetadataImage,
    topic: str,
    cluster_id: str,
    count: int,
    physical_topic: str | None = None,
) -> Result:
    """``count`` new logical partitions on ``cluster_id`` (scale-up: no data moves).

    The physical partitions continue after the highest one this topic already uses in that physical
    topic on that cluster; a cluster new to the topic starts at 0.
    """
    image_topic = existing_topic(image, topic)
    check_name(cluster_id, "cluster_id")
    check_count(count, "count")
    physical = check_name(physical_topic, "physical_topic") if physical_topic is not None else topic
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} is not registered", field="cluster_id")
    if cluster.region != image_topic.region:
        raise Conflict(
            f"cluster {cluster_id!r} is in region {cluster.region!r}; topic {topic!r} lives in {image_topic.region!r}",
            field="cluster_id",
        )
    if cluster.state != "active":
        raise Conflict(
            f"cluster {cluster_id!r} is {cluster.state}; new partitions need an active cluster", field="cluster_id"
        )
    if len(image_topic.partitions) + count > MAX_PARTITIONS_PER_TOPIC:
        raise InvalidRequest("count", f"topic would exceed {MAX_PARTITIONS_PER_TOPIC:,} logical partitions")
    first_physical = max(
        (
            run.first + run.size
            for run in image_topic.partitions.runs
            if run.cluster_id == cluster_id and run.physical_topic == physical
        ),
        default=0,
    )
    if first_physical + count - 1 > MAX_PHYSICAL_PARTITION:
        raise InvalidRequest("count", f"physical partitions of {physical} would pass {MAX_PHYSICAL_PARTITION:,}")
    run = PlacementRun(len(image_topic.partitions), count, cluster_id, physical, first_physical)
    records = _added(image, topic, (run,))
    after = apply_checked(image, records)
    return Result(records, topic_view(after, after.topics[topic]))


def change_partition_state(image: MetadataImage, topic: str, partition: int, state: str) -> Result:
    """Move one logical partition along writable <-> read_only -> removed, with the routing epochs that
    starts."""
    result = _change_partition_state(image, topic, partition, state)
    return with_epochs(image, result, f"partition {partition} {state}")


def _change_partition_state(image: MetadataImage, topic: str, partition: int, state: str) -> Result:
    image_topic = existing_topic(image, topic)
    if not isinstance(partition, int) or not 0 <= partition < len(image_topic.partitions):
        raise NotFound(f"topic {topic!r} has no partition {partition}", field="partition")
    if state not in PARTITION_STATES:
        raise InvalidRequest("state", f"state must be one of {', '.join(PARTITION_STATES)}")
    target: PartitionState = state  # narrowed by the membership check above
    current = image_topic.partitions[partition]
    if current.state == target:
        return Result((), topic_view(image, image_topic))
    if target not in PARTITION_TRANSITIONS[current.state]:
        allowed: list[str] = sorted(PARTITION_TRANSITIONS[current.state]) or ["none"]
        raise Conflict(
            f"partition {topic}/{partition} cannot go from {current.state} to {target} (allowed: {', '.join(allowed)})",
            field="state",
        )
    if target != "writable":
        _check_keeps_a_writable(image_topic, (partition,), "state")
    records = (PartitionStateChanged(topic, partition, target),)
    after = apply_checked(image, records)
    return Result(records, topic_view(after, after.topics[topic]))


def delete_topic(image: MetadataImage, name: str) -> Result:
    """Delete a logical topic (its physical topics are removed by the agents)."""
    existing_topic(image, name)
    return Result((TopicDeleted(name),), {"name": name, "deleted": True})


def shrink_partitions(image: MetadataImage, topic: str, partitions: Sequence[int]) -> Result:
    """Lossless scale-down, step one: ``partitions`` go read_only at once (producers stop writing there,
    consumers go on reading), with the routing epochs that starts. The controller leader moves each to removed
    once it is drained (every group reading the topic has committed to its end) or its data has expired.
    Re-running is a no-op for the partitions already on their way out.
    """
    return with_epochs(image, _shrink_partitions(image, topic, partitions), f"{topic} shrunk")


def _shrink_partitions(image: MetadataImage, topic: str, partitions: Sequence[int]) -> Result:
    image_topic = existing_topic(image, topic)
    if not isinstance(partitions, (list, tuple)) or not partitions:
        raise InvalidRequest("partitions", "partitions must be a non-empty list of logical partition ids")
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest("partitions", f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per request")
    wanted: set[int] = set()
    for p in partitions:
        if not isinstance(p, int) or isinstance(p, bool) or not 0 <= p < len(image_topic.partitions):
            raise InvalidRequest("partitions", f"topic {topic!r} has no partition {p!r}")
        wanted.add(p)
    _check_keeps_a_writable(image_topic, wanted, "partitions", hint="; shrink fewer partitions")
    leaving = [p for p in sorted(wanted) if image_topic.partitions.state(p) == "writable"]
    records: tuple[Record, ...]
    if writes_ranges(image):
        records = tuple(PartitionRangeStateChanged(topic, first, n, "read_only") for first, n in ranges_of(leaving))
    else:
        records = tuple(PartitionStateChanged(topic, p, "read_only") for p in leaving)
    after = apply_checked(image, records) if records else image
    return Result(records, topic_view(after, after.topics[topic]))


def _added(image: MetadataImage, topic: str, runs: Sequence[PlacementRun]) -> tuple[Record, ...]:
    """The records that add ``runs`` to ``topic``: one ``PartitionRangeAdded`` each from metadata version 4,
    else a ``PartitionsAdded`` per partition."""
    if writes_ranges(image):
        return tuple(PartitionRangeAdded(topic, *run) for run in runs)
    return tuple(
        PartitionsAdded(topic, run.start + i, run.cluster_id, run.physical_topic, run.first + i)
        for run in runs
        for i in range(run.size)
    )
