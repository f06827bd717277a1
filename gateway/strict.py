"""A ``key_order: strict`` topic's produce: the gateway places each record itself (``docs/KEY_ORDER.md``).

A request's batches for a strict topic are taken apart and regrouped by the partition the topic's key map
gives each key (``kafka_wire.batches.regroup``): one batch per target partition. Keyed records go to their
slot's partition of the current epoch, stamped with it once their slot has moved; key-less ones stay in the
client's partition when it takes writes, else go to a writable one. The client partitions placed together
are answered together: all written, or all refused.

No broker sees an idempotent client's sequences on a strict topic, so the gateway keeps them
(``producers.StrictSequence``): a batch waits for the answer to its partition's previous one, and goes only
if it follows what was written.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_wire import batches
from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import ClusterClient, UpstreamError
from metadata_log.keymap import KEY_SLOTS

from .context import ProduceContext
from .producers import DROP, StrictBatch, not_minted
from .routing import Refused, Routed, cluster_of, leader_of
from .view import ClusterView, StrictRoute

WAIT_ALL: Final = array("i", [-1] * KEY_SLOTS).tobytes()
"""A strict topic's slot table while no controller confirmed the key map lately: every keyed record waits."""

Placed = tuple[ClusterClient, str, Routed]
"""A regrouped batch, with the client of its cluster and the address of its partition's leader."""


@dataclass(slots=True)
class StrictPlan:
    """Where a strict topic's part of one request goes, and which client partitions are answered how."""

    placed: list[Placed] = field(default_factory=list)
    together: list[tuple[str, int]] = field(default_factory=list)  # client partitions placed: answered together
    alone: dict[tuple[str, int], Refused] = field(default_factory=dict)  # answered on their own (a resend: none)
    sent: list[StrictBatch] = field(default_factory=list)
    written: set[int] = field(default_factory=set)  # target partitions that took their part (filled by the answer)


async def route_strict(
    ctx: ProduceContext,
    route: StrictRoute,
    name: str,
    partition_data: Any,
    refused: Refused | None,
    wait_s: float,
) -> StrictPlan:
    """A strict topic's records of one request, regrouped by where the key map places them (the module's
    docstring); ``refused``: why the whole topic's part is refused, if it is."""
    tps = [(name, int(data.index)) for data in partition_data]
    if refused is not None:
        return StrictPlan(alone=dict.fromkeys(tps, refused))
    plan = StrictPlan()
    pending: list[tuple[bytes, int, StrictBatch | None]] = []
    for data, tp in zip(partition_data, tps, strict=True):
        records = data.records or b""
        try:
            producer = kp.batch_producer(records)
        except kp.ProtocolError as e:
            plan.alone[tp] = Refused(ErrorCode.corrupt_message, str(e))
            continue
        if producer is not None and producer.producer_id >= 0:
            if not ctx.producers.minted(producer.producer_id, ctx.view().next_incarnation):
                plan.alone[tp] = Refused(ErrorCode.unknown_producer_id, not_minted(producer.producer_id))
                continue
            sequence = ctx.producers.strict((producer.producer_id, producer.producer_epoch, name, tp[1]))
            await sequence.previous_answered(wait_s)
            verdict = sequence.verdict(producer.base_sequence, producer.last_sequence)
            if verdict is not None:
                plan.alone[tp] = Refused(verdict, None)
                continue
            sent = StrictBatch(sequence, producer.base_sequence, producer.last_sequence, tp, written=plan.written)
            plan.sent.append(sent)
            pending.append((records, tp[1], sent))
        else:
            pending.append((records, tp[1], None))
        plan.together.append(tp)
    placed = await _place_now(ctx, route, name, pending)
    if isinstance(placed, Refused):
        for sent in plan.sent:
            sent.sequence.refused(sent.base_sequence)
        return StrictPlan(alone={**plan.alone, **dict.fromkeys(plan.together, placed)})
    plan.placed = placed
    return plan


async def _place_now(
    ctx: ProduceContext, route: StrictRoute, name: str, pending: list[tuple[bytes, int, StrictBatch | None]]
) -> list[Placed] | Refused:
    """``pending`` (batches, their client partitions, their sequences' notes) placed by the key map as it is
    now, not as the request found it: waiting for earlier answers can take seconds, and a batch placed by an
    epoch that ended meanwhile could land behind its seal. Records of a batch already written in part are
    left out (``producers.Partial``)."""
    view = ctx.view()
    route = view.strict(name) or route  # a topic switched to none meanwhile: its last map, for this request
    held = ctx.key_order_lease_held()
    table = route.table if held else WAIT_ALL

    def placement(partition: int) -> batches.SlotTargets:
        keyless = partition
        if partition not in route.writable:
            keyless = route.writable[partition % len(route.writable)] if route.writable else -1
        return batches.SlotTargets(table, route.stamped, keyless, route.header)

    sources = []
    for records, p, sent in pending:
        where = placement(p)
        if sent is not None:
            where = sent.placed = sent.sequence.placement(sent.base_sequence, sent.last_sequence, where)
        sources.append((records, where))
    placed = await _place(ctx, view, name, sources)
    latest = ctx.view().strict(name)
    if not isinstance(placed, Refused) and latest is not None and latest.epoch != route.epoch:
        placed = Refused(ErrorCode.not_leader_or_follower, f"{name}: a new key map came while placing; retry")
    if isinstance(placed, Refused) and not held and placed.code == ErrorCode.not_leader_or_follower:
        placed = Refused(placed.code, f"{name}: no controller confirmed the key map lately; retry")
    return placed


async def _place(
    ctx: ProduceContext, view: ClusterView, name: str, sources: list[tuple[bytes, batches.SlotTargets]]
) -> list[Placed] | Refused:
    """The regrouped batches of a strict topic with the broker each goes to, or why the request is refused
    (before anything is written)."""
    try:
        grouped = batches.regroup(sources, ctx.limits.max_frame_bytes)
    except batches.NoPartitionNow as e:
        return Refused(ErrorCode.not_leader_or_follower, f"{name}: {e.detail}")
    except batches.UnsupportedCompression as e:
        return Refused(ErrorCode.unsupported_compression_type, str(e))
    except batches.BadBatch as e:
        return Refused(ErrorCode.corrupt_message, str(e))
    grouped.pop(DROP, None)  # written already
    placed = []
    for partition, records in grouped.items():
        placement = view.placement(name, partition)
        cluster = cluster_of(ctx.upstream, view, placement.cluster_id) if placement is not None else None
        if placement is None or cluster is None:
            return Refused(ErrorCode.not_leader_or_follower, f"{name}/{partition} is not placed now")
        try:
            address = await leader_of(cluster, placement)
        except UpstreamError as e:
            return Refused(ErrorCode.not_leader_or_follower, str(e))
        placed.append((cluster, address, Routed(name, partition, placement, records, None, spread=True)))
    return placed
