"""Where a logical partition's requests go: its sub-cluster's client and its partition leader there.

A logical partition is exactly one physical partition, so offsets, high watermarks and batches pass
unchanged; only the envelopes are rewritten (topic names and partition ids). Errors that mean "your metadata
is stale" (a partition that stopped taking writes, a leader that moved, a broker that cannot be reached) come
back to clients as NOT_LEADER_OR_FOLLOWER: every client then refreshes its metadata, and sees the
partition's new state there.
"""

from __future__ import annotations

import asyncio
from typing import Final, NamedTuple

from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import ClusterClient, Upstream

from .producers import PhysicalKey
from .view import ClusterView, PartitionRoute

REQUEST_MARGIN_S: Final = 5.0
"""Added to a request's own timeout for the broker's answer to reach the gateway."""
STALE: Final = frozenset(
    {
        ErrorCode.not_leader_or_follower,
        ErrorCode.unknown_topic_or_partition,
        ErrorCode.leader_not_available,
        ErrorCode.fenced_leader_epoch,
        ErrorCode.unknown_leader_epoch,
    }
)
"""Broker errors after which the gateway asks the sub-cluster again where its partitions are."""


class Refused(NamedTuple):
    """Why a partition's part of a request is not sent on: the error code for the client, and a message."""

    code: ErrorCode
    message: str | None


class Routed(NamedTuple):
    """One partition's batches on their way to a broker."""

    topic: str
    partition: int
    placement: PartitionRoute
    records: bytes | None
    producer: PhysicalKey | None  # the physical producer they were rewritten for, if idempotent
    spread: bool = False  # a strict topic's records, placed by key: one of maybe several parts of the answer


def cluster_of(upstream: Upstream, view: ClusterView, cluster_id: str) -> ClusterClient | None:
    """The client of a registered sub-cluster, or None for one the view does not know."""
    bootstrap = view.bootstrap_of(cluster_id)
    return upstream.cluster(cluster_id, bootstrap) if bootstrap else None


async def leader_of(cluster: ClusterClient, p: PartitionRoute) -> str:
    """The address of the broker leading ``p``'s physical partition (asked when not known)."""
    return cluster.known_leader(p.physical_topic, p.physical_partition, asyncio.get_running_loop().time()) or (
        await cluster.leader(p.physical_topic, p.physical_partition)
    )
