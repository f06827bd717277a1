"""Pure commands: validate a request against an image and return the records that carry it out.

A command never mutates anything; the controller proposes ``Result.records`` and replies with
``Result.reply`` once they are committed. Validation here gives the caller a precise 4xx; ``apply``
re-checks every record at commit time, so two writers validated against the same image cannot both win.
"""

from __future__ import annotations

import re
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import repeat
from typing import Any, Final

from . import txn
from .errors import Conflict, InvalidRequest, NotFound, Unavailable
from .image import (
    CLUSTER_TRANSITIONS,
    PARTITION_TRANSITIONS,
    ClusterImage,
    InvalidRecord,
    MetadataImage,
    TopicImage,
    apply,
    new_partitions,
)
from .image.gateways import MAX_GATEWAY_ID, check_gateway_fields, next_incarnation
from .records import (
    CLUSTER_STATES,
    PARTITION_STATES,
    ClusterFenced,
    ClusterRegistered,
    ClusterState,
    ClusterStateChanged,
    ClusterUnfenced,
    GatewayExpired,
    GatewayRegistered,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from .views import cluster_view, topic_view

MAX_PARTITIONS_PER_REQUEST: Final = 100_000
"""Most logical partitions one request may create (keeps one Raft command a few MB at most)."""

MAX_PARTITIONS_PER_TOPIC: Final = 1_000_000
"""Most logical partitions one topic may have; removed ones count, as their ids are never reused."""

MAX_REASON_CHARS: Final = 500
MAX_NAME_CHARS: Final = 249  # Kafka's topic name limit, applied to every name
_NAME_RE: Final = re.compile(r"^[A-Za-z0-9._-]+$")
_ENDPOINT_RE: Final = re.compile(r"^[A-Za-z0-9._\-\[\]:]+:\d{1,5}$")


@dataclass(frozen=True, slots=True)
class Result:
    records: tuple[Record, ...]
    reply: dict[str, Any] = field(default_factory=dict)


def check_name(value: Any, field_name: str) -> str:
    """A cluster, region or topic name: 1-249 of ``[A-Za-z0-9._-]`` (Kafka's rule), not '.' or '..'."""
    if not isinstance(value, str) or not value:
        raise InvalidRequest(field_name, f"{field_name} must be a non-empty string")
    if len(value) > MAX_NAME_CHARS:
        raise InvalidRequest(field_name, f"{field_name} is longer than {MAX_NAME_CHARS} characters")
    if not _NAME_RE.match(value) or value in (".", ".."):
        raise InvalidRequest(field_name, f"{field_name} {value!r} may only contain letters, digits, '.', '_', '-'")
    return value


def check_bootstrap(value: Any, field_name: str = "bootstrap_servers") -> str:
    """A comma-separated list of host:port endpoints."""
    if not isinstance(value, str) or not value.strip():
        raise InvalidRequest(field_name, f"{field_name} must be a non-empty 'host:port[,host:port...]' list")
    for endpoint in value.split(","):
        endpoint = endpoint.strip()
        if not _ENDPOINT_RE.match(endpoint) or not 0 < int(endpoint.rsplit(":", 1)[1]) < 65536:
            raise InvalidRequest(field_name, f"{endpoint!r} in {field_name} is not host:port")
    return value


def _registered_cluster(image: MetadataImage, cluster_id: str) -> ClusterImage:
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} is not registered")
    return cluster


def _existing_topic(image: MetadataImage, name: str) -> TopicImage:
    topic = image.topics.get(name)
    if topic is None:
        raise NotFound(f"topic {name!r} does not exist")
    return topic


def _check_keeps_a_writable(topic: TopicImage, leaving: Container[int], field_name: str, hint: str = "") -> None:
    """Producers must keep somewhere to write: a writable partition outside ``leaving`` must remain."""
    if not any(p.state == "writable" and p.partition not in leaving for p in topic.partitions):
        raise Conflict(f"topic {topic.name!r} must keep at least one writable partition{hint}", field=field_name)


def _apply_checked(image: MetadataImage, records: Sequence[Record]) -> MetadataImage:
    """The image after ``records``; a record that does not apply is a bug in the command itself."""
    try:
        return apply(image, records)
    except InvalidRecord as e:  # pragma: no cover - commands validate before producing records
        raise AssertionError(f"command produced a record that does not apply: {e}") from e


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
    """Move a cluster along its admin-state path (active <-> read_only -> draining -> decommissioned)."""
    cluster = _registered_cluster(image, cluster_id)
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
    after = _apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


def placement_clusters(image: MetadataImage, region: str) -> list[str]:
    """Clusters that take new partitions of a region's topics: active, not fenced, in id order."""
    return sorted(
        c.cluster_id for c in image.clusters.values() if c.region == region and c.state == "active" and not c.fenced
    )


def create_topic(
    image: MetadataImage,
    name: str,
    region: str,
    partitions_per_cluster: int,
    topic_id: str,
    physical_topic: str | None = None,
    retention_ms: int | None = None,
) -> Result:
    """A logical topic with ``partitions_per_cluster`` partitions on each placement cluster of its region.

    Logical ids are numbered cluster by cluster in cluster-id order; physical partitions are 0..N-1 of
    a physical topic named like the logical one unless ``physical_topic`` says otherwise.
    """
    check_name(name, "name")
    check_name(region, "region")
    physical = check_name(physical_topic, "physical_topic") if physical_topic is not None else name
    _check_count(partitions_per_cluster, "partitions_per_cluster")
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
    # Columns of the partitions' fields: logical ids 0.. cluster by cluster, physical 0..N-1 on each.
    cluster_ids = [cluster_id for cluster_id in clusters for _ in range(partitions_per_cluster)]
    physical_partitions = list(range(partitions_per_cluster)) * len(clusters)
    columns = (range(total), cluster_ids, [physical] * total, physical_partitions)  # each read twice
    records: tuple[Record, ...] = (
        TopicCreated(topic_id, name, region, retention_ms),
        *map(PartitionsAdded, repeat(name), *columns),
    )
    # The reply without applying the records to the whole image first (a third of this command's time for
    # a 500-partition topic): every check that apply makes holds by construction here (a new name, the
    # region's active clusters, ids from 0, distinct physical partitions), and the commit applies them.
    topic = TopicImage(topic_id, name, region, retention_ms, tuple(new_partitions(*columns)))
    return Result(records, topic_view(image, topic))


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
    image_topic = _existing_topic(image, topic)
    check_name(cluster_id, "cluster_id")
    _check_count(count, "count")
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
    used = [
        p.physical_partition
        for p in image_topic.partitions
        if p.cluster_id == cluster_id and p.physical_topic == physical
    ]
    first_physical = max(used) + 1 if used else 0
    first_logical = len(image_topic.partitions)
    records: tuple[Record, ...] = tuple(
        PartitionsAdded(topic, first_logical + i, cluster_id, physical, first_physical + i) for i in range(count)
    )
    after = _apply_checked(image, records)
    return Result(records, topic_view(after, after.topics[topic]))


def change_partition_state(image: MetadataImage, topic: str, partition: int, state: str) -> Result:
    """Move one logical partition along writable <-> read_only -> removed."""
    image_topic = _existing_topic(image, topic)
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
    after = _apply_checked(image, records)
    return Result(records, topic_view(after, after.topics[topic]))


def delete_topic(image: MetadataImage, name: str) -> Result:
    """Delete a logical topic (its physical topics are removed by the agents)."""
    _existing_topic(image, name)
    return Result((TopicDeleted(name),), {"name": name, "deleted": True})


def _check_count(value: Any, field_name: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequest(field_name, f"{field_name} must be a positive integer")
    if value > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest(field_name, f"{field_name} must be at most {MAX_PARTITIONS_PER_REQUEST}")


def fence_cluster(image: MetadataImage, cluster_id: str, reason: str, at_ms: int) -> Result:
    """Fence a cluster (its partitions stop being writable); a no-op when it already is."""
    cluster = _registered_cluster(image, cluster_id)
    if cluster.fenced:
        return Result((), cluster_view(cluster))
    records = (ClusterFenced(cluster_id, reason[:MAX_REASON_CHARS], at_ms),)
    after = _apply_checked(image, records)
    return Result(records, cluster_view(after.clusters[cluster_id]))


def unfence_cluster(image: MetadataImage, cluster_id: str, at_ms: int) -> Result:
    """Lift the fence of a cluster that is healthy again; a no-op when it is not fenced."""
    cluster = _registered_cluster(image, cluster_id)
    if not cluster.fenced:
        return Result((), cluster_view(cluster))
    records = (ClusterUnfenced(cluster_id, at_ms),)
    after = _apply_checked(image, records)
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
    """Record the leaders an agent reports, only where they differ from the image (no record per scan)."""
    cluster = _registered_cluster(image, cluster_id)
    if len(partitions) > MAX_PARTITIONS_PER_REQUEST:
        raise InvalidRequest("partitions", f"at most {MAX_PARTITIONS_PER_REQUEST} partitions per report")
    records: list[Record] = []
    seen: set[tuple[str, int]] = set()
    for i, p in enumerate(partitions):
        check_name(p.physical_topic, f"partitions.{i}.physical_topic")
        if not isinstance(p.physical_partition, int) or p.physical_partition < 0:
            raise InvalidRequest(f"partitions.{i}.physical_partition", "physical_partition must be >= 0")
        if p.leader is not None:
            check_bootstrap(p.leader, f"partitions.{i}.leader")
        key = (p.physical_topic, p.physical_partition)
        if key in seen:
            raise InvalidRequest(f"partitions.{i}", f"{p.physical_topic}/{p.physical_partition} is listed twice")
        seen.add(key)
        if cluster.leaders.get(key) != p.leader:
            records.append(PhysicalPartitionsReported(cluster_id, p.physical_topic, p.physical_partition, p.leader))
    after = _apply_checked(image, records)
    return Result(tuple(records), cluster_view(after.clusters[cluster_id]))


def shrink_partitions(image: MetadataImage, topic: str, partitions: Sequence[int]) -> Result:
    """Lossless scale-down, step one: ``partitions`` go read_only at once (producers stop writing there,
    consumers go on reading). The controller leader moves each to removed once it is drained (every group
    reading the topic has committed to its end) or its data has expired. Re-running is a no-op for the
    partitions already on their way out.
    """
    image_topic = _existing_topic(image, topic)
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
    records = tuple(
        PartitionStateChanged(topic, p, "read_only")
        for p in sorted(wanted)
        if image_topic.partitions[p].state == "writable"
    )
    after = _apply_checked(image, records) if records else image
    return Result(records, topic_view(after, after.topics[topic]))


def decommission_cluster(image: MetadataImage, cluster_id: str) -> Result:
    """The seeds' decommission: the cluster goes read_only (producers stop writing to it) and draining; the
    controller leader marks it decommissioned once all its partitions are drained or expired, and its
    agent then deletes the physical topics. Re-running is a no-op once the cluster is draining.
    """
    cluster = _registered_cluster(image, cluster_id)
    if cluster.state in ("draining", "decommissioned"):
        return Result((), cluster_view(cluster))
    check_can_retire(image, cluster)
    steps: list[ClusterState] = ["read_only", "draining"] if cluster.state == "active" else ["draining"]
    records = tuple(ClusterStateChanged(cluster_id, s) for s in steps)
    after = _apply_checked(image, records)
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


# -- gateway instances (kfed gateway) ---------------------------------------------------------------
MAX_INSTANCE_CHARS: Final = 64


def register_gateway(
    image: MetadataImage,
    gateway_id: int | None,
    host: str,
    port: int,
    instance: str,
    rack: str | None = None,
    listener: str = "PLAINTEXT",
) -> Result:
    """Register a gateway process live at ``host:port`` (``instance``: new per process). Without an id it
    gets the one its address had, else the lowest no live gateway holds. A registration that changes nothing
    writes nothing (the lease keeps it live); a live gateway elsewhere with the same id is a conflict, and
    another live one at the same address expires (only one process listens there)."""
    if gateway_id is not None and check_gateway_fields(gateway_id, "x", 1) is not None:
        raise InvalidRequest("gateway_id", f"gateway_id must be an integer in 0..{MAX_GATEWAY_ID}")
    problem = check_gateway_fields(0, host, port)
    if problem is not None:
        raise InvalidRequest(problem.split(" ", 1)[0], problem)
    if not isinstance(instance, str) or not 0 < len(instance) <= MAX_INSTANCE_CHARS or not instance.isprintable():
        raise InvalidRequest("instance", f"instance must be 1-{MAX_INSTANCE_CHARS} printable characters")
    if rack is not None:
        check_name(rack, "rack")
    check_name(listener, "listener")
    live = {g.gateway_id: g for g in image.gateways.values() if g.live}
    if gateway_id is None:
        own = [
            g.gateway_id
            for g in image.gateways.values()
            if (g.host, g.port) == (host, port) and live.get(g.gateway_id, g).address == g.address
        ]
        gateway_id = min(own) if own else next(i for i in range(len(live) + 1) if i not in live)
    current = live.get(gateway_id)
    if current is not None and (current.host, current.port) != (host, port) and current.instance != instance:
        raise Conflict(
            f"gateway {gateway_id} is live at {current.address}; give this one another --id", field="gateway_id"
        )
    unchanged = (host, port, instance, rack, listener)
    if (
        current is not None
        and (current.host, current.port, current.instance, current.rack, current.listener) == unchanged
    ):
        return Result((), {"gateway_id": gateway_id, "registered": False, "incarnation": current.incarnation})
    records: list[Record] = [
        GatewayExpired(g.gateway_id, 0)
        for g in live.values()
        if (g.host, g.port) == (host, port) and g.gateway_id != gateway_id
    ]
    incarnation = next_incarnation(image.gateways)
    records.append(GatewayRegistered(gateway_id, host, port, instance, incarnation, rack, listener))
    _apply_checked(image, records)
    return Result(tuple(records), {"gateway_id": gateway_id, "registered": True, "incarnation": incarnation})


def expire_gateway(image: MetadataImage, gateway_id: int, at_ms: int) -> Result:
    """Take a gateway out of the live ones (its lease ran out); a no-op when it is not live."""
    current = image.gateways.get(gateway_id)
    if current is None or not current.live:
        return Result((), {"gateway_id": gateway_id, "live": False})
    return Result((GatewayExpired(gateway_id, at_ms),), {"gateway_id": gateway_id, "live": False})


# -- transactions across sub-clusters (the rules are ``txn.py``, docs/TRANSACTIONS.md) -----------------------
# Each command here reads the image's transactions and returns txn's records; replay re-checks them at commit.


def _txn(result: txn.Result) -> Result:
    return Result(result.records, result.reply)


def _check_caught_up(image: MetadataImage, min_offset: int | None) -> None:
    """A producer sends the offset of its last registration: a node behind it would see no transaction,
    and an answer from that state ("nothing to decide") is never given (docs/TRANSACTIONS.md)."""
    if min_offset is not None and image.offset < min_offset:
        raise Unavailable(
            f"this node has applied up to {image.offset}, not yet {min_offset}",
            retry_after_s=0.2,
            applied_offset=image.offset,
        )


def txn_refusal(image: MetadataImage, cluster_id: str) -> str | None:
    """Why ``cluster_id`` cannot take part in a transaction, or None."""
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        return "it is not registered"
    if cluster.state == "decommissioned":
        return "it is decommissioned"
    return None


def init_transactions(image: MetadataImage, transactional_id: str, timeout_ms: int, at_ms: int) -> Result:
    """A new epoch for ``transactional_id`` (fences every older instance; see ``txn.init_producer``)."""
    return _txn(txn.init_producer(image.transactions, transactional_id, timeout_ms, at_ms))


def add_to_transaction(
    image: MetadataImage,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    at_ms: int,
    partitions: Sequence[txn.TxnPartition] = (),
    groups: Sequence[tuple[str, str]] = (),
    completed: Sequence[str] = (),
    min_offset: int | None = None,
    refusals: Mapping[str, str] | None = None,
) -> Result:
    """Register partitions and group offsets in transaction ``sequence`` before writing to them. ``refusals``:
    why clusters cannot take part, as the leader learnt from their brokers (``txn_refusal`` adds the log's)."""
    txn.check_transactional_id(transactional_id)
    _check_caught_up(image, min_offset)
    for i, (_, group) in enumerate(groups):
        check_name(group, f"groups.{i}.group")
    for i, p in enumerate(partitions):
        check_name(p.physical_topic, f"partitions.{i}.physical_topic")
    return _txn(
        txn.add_to_transaction(
            image.transactions,
            transactional_id,
            producer_id,
            epoch,
            sequence,
            at_ms,
            partitions,
            groups,
            completed,
            lambda c: (refusals or {}).get(c) or txn_refusal(image, c),
        )
    )


def end_transaction(
    image: MetadataImage,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    commit: bool,
    at_ms: int,
    min_offset: int | None = None,
) -> Result:
    """The owner's decision, commit or abort: one record, final."""
    txn.check_transactional_id(transactional_id)
    _check_caught_up(image, min_offset)
    return _txn(txn.end_transaction(image.transactions, transactional_id, producer_id, epoch, sequence, commit, at_ms))


def complete_participants(
    image: MetadataImage, transactional_id: str, producer_id: int, epoch: int, sequence: int, cluster_ids: Sequence[str]
) -> Result:
    """Participant clusters ended their part as decided (each again is a no-op)."""
    txn.check_transactional_id(transactional_id)
    txns, records = image.transactions, list[Record]()
    result = txn.Result(())
    for cluster_id in cluster_ids:
        result = txn.complete_participant(txns, transactional_id, producer_id, epoch, sequence, cluster_id)
        txns = txn.replay(txns, result.records)
        records += result.records
    return Result(tuple(records), result.reply)
