"""OffsetCommit and OffsetFetch: committed offsets live where the data lives.

A logical partition's offset is committed to its physical cluster, under the group id, for its physical
partition: exactly what kfed's SDK consumers commit, so SDK and Kafka clients of one group resume from each
other's commits. Brokers take these as commits of a group with no members there (generation -1), since
group membership is the quorum's.

A member of a group may commit what it owns: the partitions this instance handed it, or, for a member that
joined through another instance, any partition while the log lists it in the group's generation. Commits
from outside the group (generation -1, no member id) are taken only while the group has no members.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import ClusterClient, UpstreamError

from .context import GroupContext
from .routing import cluster_of
from .server import ClientConnection
from .view import ClusterView, PartitionRoute

COORDINATOR_MOVED: Final = frozenset(
    {ErrorCode.not_coordinator, ErrorCode.coordinator_not_available, ErrorCode.coordinator_load_in_progress}
)
COORDINATOR_WAIT_S: Final = 3.0
"""How long a commit or fetch of offsets waits for a sub-cluster's group coordinator to be found and up."""


def _may_commit(ctx: GroupContext, view: ClusterView, group: str, member_id: str, generation: int) -> Any:
    """What ``member_id`` may commit: a set of partitions, None for anything, or an error code."""
    recorded = view.image.groups.get(group)
    if not member_id and generation < 0:
        return None if recorded is None or not recorded.members else ErrorCode.unknown_member_id
    local = ctx.members.members.get((group, member_id))
    if local is not None:
        return local.given | local.reported
    if recorded is not None and any(m.member_id == member_id for m in recorded.members):
        return None
    return ErrorCode.unknown_member_id


async def _call_coordinator(cluster: ClusterClient, group: str, api_key: int, body: dict[str, Any]) -> Any:
    """Send to the cluster's coordinator of ``group``; when it moved or is not up yet, find it again and retry
    for up to ``COORDINATOR_WAIT_S``. A fresh Apache Kafka cluster has no coordinator until its offsets topic
    is created, which the first FindCoordinator starts: that takes it a second or two."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + COORDINATOR_WAIT_S
    delay = 0.05
    while True:
        try:
            conn = await cluster.coordinator(group)
            response = await conn.call(api_key, conn.version(api_key), body)
        except UpstreamError:
            if loop.time() + delay > deadline:
                raise
        else:
            codes = {p.error_code for t in response.topics for p in t.partitions}
            codes.add(getattr(response, "error_code", ErrorCode.none))
            if not codes & COORDINATOR_MOVED or loop.time() + delay > deadline:
                return response
        cluster.forget_coordinator(group)
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.5)


async def offset_commit(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    conn.saw("consumer")
    body = request.body
    await ctx.resolve([topic.name for topic in body.topics])
    view = ctx.view()
    allowed = _may_commit(ctx, view, body.group_id, body.member_id, int(body.generation_id_or_member_epoch))
    answers: dict[tuple[str, int], ErrorCode] = {}
    by_cluster: dict[ClusterClient, list[tuple[str, int, PartitionRoute, Any]]] = defaultdict(list)
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            placement = view.placement(*tp)
            cluster = cluster_of(ctx.upstream, view, placement.cluster_id) if placement is not None else None
            if isinstance(allowed, ErrorCode):
                answers[tp] = allowed
            elif placement is None or cluster is None:
                answers[tp] = ErrorCode.unknown_topic_or_partition
            elif allowed is not None and tp not in allowed:
                answers[tp] = ErrorCode.illegal_generation  # not its partition (any more): its owner commits
            else:
                by_cluster[cluster].append((tp[0], tp[1], placement, p))
    results = await asyncio.gather(*(_commit_to(c, body.group_id, parts) for c, parts in by_cluster.items()))
    for got in results:
        answers.update(got)
    for parts in by_cluster.values():  # for strict topics' releases (gateway/holdback.py)
        for name, partition, _, p in parts:
            if answers[(name, partition)] == ErrorCode.none:
                ctx.members.key_order.committed(view.image, body.group_id, name, partition, int(p.committed_offset))
    topics = [
        {
            "name": t.name,
            "partitions": [
                {"partition_index": p.partition_index, "error_code": answers[(t.name, int(p.partition_index))]}
                for p in t.partitions
            ],
        }
        for t in body.topics
    ]
    return {"throttle_time": 0, "topics": topics}


async def _commit_to(
    cluster: ClusterClient, group: str, parts: list[tuple[str, int, PartitionRoute, Any]]
) -> dict[tuple[str, int], ErrorCode]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, placement, p in parts:
        by_topic[placement.physical_topic].append(
            {
                "partition_index": placement.physical_partition,
                "committed_offset": p.committed_offset,
                "committed_leader_epoch": -1,
                "committed_metadata": p.committed_metadata,
            }
        )
    physical = {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    try:
        response = await _call_coordinator(cluster, group, kp.OFFSET_COMMIT, physical)
    except UpstreamError:
        cluster.forget_coordinator(group)
        return {(t, p): ErrorCode.coordinator_not_available for t, p, _, _ in parts}
    got = {(t.name, int(p.partition_index)): p.error_code for t in response.topics for p in t.partitions}
    return {
        (t, p): got.get((placement.physical_topic, placement.physical_partition), ErrorCode.unknown_server_error)
        for t, p, placement, _ in parts
    }


async def offset_fetch(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    conn.saw("consumer")
    body = request.body
    if body.topics is not None:
        await ctx.resolve([topic.name for topic in body.topics])
    else:  # the topics of the partitions the group's members own: those it commits
        recorded = ctx.view().image.groups.get(body.group_id)
        await ctx.resolve({t for m in recorded.members for t, _ in m.assignment} if recorded else ())
    view = ctx.view()
    group = body.group_id
    require_stable = bool(getattr(body, "require_stable", False))
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    if body.topics is None:  # every partition with a commit, from every cluster
        clusters = {c for c in (cluster_of(ctx.upstream, view, cid) for cid in view.image.clusters) if c is not None}
        results = await asyncio.gather(*(_fetch_from(view, c, group, None, require_stable) for c in clusters))
        wanted = None
    else:
        wanted = [(t.name, [int(p) for p in t.partition_indexes]) for t in body.topics]
        by_cluster: dict[ClusterClient, list[tuple[str, int, PartitionRoute]]] = defaultdict(list)
        for name, partitions in wanted:
            for partition in partitions:
                placement = view.placement(name, partition)
                cluster = cluster_of(ctx.upstream, view, placement.cluster_id) if placement is not None else None
                if placement is None or cluster is None:
                    answers[(name, partition)] = _fetched(partition, ErrorCode.unknown_topic_or_partition)
                else:
                    by_cluster[cluster].append((name, partition, placement))
        results = await asyncio.gather(
            *(_fetch_from(view, c, group, parts, require_stable) for c, parts in by_cluster.items())
        )
    for got in results:
        answers.update(got)
    for (name, partition), answer in answers.items():  # a member starting a partition: the group's commit there
        if answer["error_code"] == ErrorCode.none and answer["committed_offset"] >= 0:
            ctx.members.key_order.committed(view.image, group, name, partition, int(answer["committed_offset"]))
    if wanted is None:
        found: dict[str, list[int]] = defaultdict(list)
        for name, partition in sorted(answers):
            found[name].append(partition)
        wanted = list(found.items())
    topics = [
        {"name": name, "partitions": [answers.get((name, p)) or _fetched(p, ErrorCode.none) for p in partitions]}
        for name, partitions in wanted
    ]
    # A coordinator still not up is the whole request's error, which clients retry (librdkafka gives up a
    # partition whose own error it is).
    moved = [a["error_code"] for a in answers.values() if a["error_code"] in COORDINATOR_MOVED]
    return {"throttle_time": 0, "topics": topics, "error_code": moved[0] if moved else ErrorCode.none}


def _fetched(partition: int, code: ErrorCode, offset: int = -1, metadata: str | None = "") -> dict[str, Any]:
    return {
        "partition_index": partition,
        "committed_offset": offset,
        "committed_leader_epoch": -1,
        "metadata": metadata,
        "error_code": code,
    }


async def _fetch_from(
    view: ClusterView,
    cluster: ClusterClient,
    group: str,
    parts: list[tuple[str, int, PartitionRoute]] | None,
    require_stable: bool,
) -> dict[tuple[str, int], dict[str, Any]]:
    """Committed offsets on one cluster: of ``parts``, or of every logical partition it holds (None)."""
    topics = None
    if parts is not None:
        by_topic: dict[str, list[int]] = defaultdict(list)
        for _, _, placement in parts:
            by_topic[placement.physical_topic].append(placement.physical_partition)
        topics = [{"name": t, "partition_indexes": ps} for t, ps in by_topic.items()]
    physical = {"group_id": group, "topics": topics, "require_stable": require_stable}
    try:
        response = await _call_coordinator(cluster, group, kp.OFFSET_FETCH, physical)
    except UpstreamError:
        cluster.forget_coordinator(group)
        return {(t, p): _fetched(p, ErrorCode.coordinator_not_available) for t, p, _ in parts or ()}
    got = {(t.name, int(p.partition_index)): p for t in response.topics for p in t.partitions}
    answers = {}
    if parts is None:
        for (physical_topic, physical_partition), p in got.items():
            logical = view.logical_of(cluster.cluster_id, physical_topic, physical_partition)
            if logical is not None:
                answers[logical] = _fetched(logical[1], p.error_code, int(p.committed_offset), p.metadata)
        return answers
    for name, partition, placement in parts:
        p = got.get((placement.physical_topic, placement.physical_partition))
        if p is None:
            answers[(name, partition)] = _fetched(partition, ErrorCode.none)
        else:
            answers[(name, partition)] = _fetched(partition, p.error_code, int(p.committed_offset), p.metadata)
    return answers
