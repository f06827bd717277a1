"""Produce: each logical partition's batches passed through to the broker leading its physical partition.

Only the envelope is rewritten (topic names and partition ids, ``routing.py``), and for idempotent producers
the producer id in batch headers (``producers.py``). A ``key_order: strict`` topic's records are placed by
key instead (``strict.py``). The kfed gateway serves no transactions.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Awaitable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import PRODUCE_CONNECTIONS, ClusterClient, UpstreamError

from .context import JobHandler, ProduceContext
from .producers import STATE_LOST, ClientKey, ProducerIds, StrictBatch, not_minted
from .routing import REQUEST_MARGIN_S, STALE, Refused, Routed, cluster_of, leader_of
from .server import NO_RESPONSE, ClientConnection, done
from .strict import route_strict
from .view import ClusterView, PartitionRoute

NO_TRANSACTIONS: Final = "the kfed gateway serves no transactions"
AFTER_REFUSED: Final = "a batch before it was refused: send the partition's batches again in order"

Errors = dict[tuple[str, int], Refused]
Spread = dict[str, list[tuple[str, int]]]
"""Per strict topic, its client partitions placed (and answered) together."""
Send = tuple[ClusterClient, Any, list[Routed], asyncio.Future[Any]]
"""One physical request under way: the cluster, the broker connection, the parts it carries, its answer."""


@dataclass(slots=True)
class _Routes:
    """A produce request's parts, by (cluster, broker address, produce connection), and what was refused."""

    parts: dict[tuple[ClusterClient, str, int], list[Routed]] = field(default_factory=lambda: defaultdict(list))
    errors: Errors = field(default_factory=dict)
    spread: Spread = field(default_factory=dict)
    sequences: list[StrictBatch] = field(default_factory=list)  # idempotent batches of strict topics
    written: dict[str, set[int]] = field(default_factory=dict)  # per strict topic, the target partitions written
    idempotent: dict[tuple[str, int], tuple[ClientKey, int, int]] = field(default_factory=dict)  # tp -> key, sequences

    def add(self, conn: ClientConnection, cluster: ClusterClient, address: str, part: Routed) -> None:
        self.parts[(cluster, address, _lane(conn, part.placement))].append(part)


async def produce(ctx: ProduceContext, conn: ClientConnection, request: kp.Request) -> Awaitable[Any]:
    """The ordered part of a produce: each partition's batches are written to their broker before the next
    request of this connection is read (clients rely on that order). Returns what completes the answer."""
    conn.saw("producer")
    body = request.body
    timeout_ms = kp.milliseconds(body.timeout)
    timeout_s = timeout_ms / 1000 + REQUEST_MARGIN_S
    await ctx.resolve([topic.name for topic in body.topic_data])
    routes = await _route(ctx, conn, body, timeout_s)
    acks = int(body.acks)
    sends = await _send(routes, acks, timeout_ms)
    for _, _, parts, _ in sends:  # on their way to a broker: from now on it judges their resends
        for r in parts:
            key, _, last_sequence = routes.idempotent.get((r.topic, r.partition), (None, 0, 0))
            if key is not None and not r.spread:
                ctx.producers.sent(key, last_sequence)
    if acks == 0:
        for sent in routes.sequences:
            sent.sent(None)
        return done(NO_RESPONSE)
    answer = asyncio.ensure_future(_produce_answer(ctx.producers, body, routes, sends, timeout_s))
    for sent in routes.sequences:
        sent.sent(answer)
    return answer


async def _route(ctx: ProduceContext, conn: ClientConnection, body: Any, timeout_s: float) -> _Routes:
    """Where each partition's batches go, or why they do not."""
    view = ctx.view()
    routes = _Routes()
    for topic in body.topic_data:
        grown = _grown(view, conn, topic.name)
        strict = view.strict(topic.name)
        if strict is not None:
            refused = _refused_topic(topic.name, grown, body.transactional_id)
            plan = await route_strict(ctx, strict, topic.name, topic.partition_data, refused, timeout_s)
            routes.spread[topic.name] = plan.together
            routes.written[topic.name] = plan.written
            routes.errors.update(plan.alone)
            routes.sequences += plan.sent
            for cluster, address, part in plan.placed:
                routes.add(conn, cluster, address, part)
            continue
        for data in topic.partition_data:
            tp = (topic.name, int(data.index))
            batch = _batch_producer(data.records)
            if _out_of_order(ctx.producers, routes, tp, batch):
                routes.errors[tp] = Refused(ErrorCode.not_leader_or_follower, AFTER_REFUSED)
                continue
            if grown:  # one partition refused, so that the client refreshes and sees the new ones
                routes.errors[tp] = Refused(ErrorCode.not_leader_or_follower, f"{topic.name} has more partitions now")
                grown = False
                continue
            if body.transactional_id is not None:
                routes.errors[tp] = Refused(ErrorCode.transactional_id_authorization_failed, NO_TRANSACTIONS)
                continue
            routed = await _route_batches(ctx, view, tp, data.records, batch)
            if isinstance(routed, Refused):
                routes.errors[tp] = routed
            else:
                routes.add(conn, *routed)
    return routes


async def _send(routes: _Routes, acks: int, timeout_ms: int) -> list[Send]:
    """One physical request per broker connection, sent (its answer not awaited)."""
    sends = []
    for (cluster, address, lane), parts in routes.parts.items():
        try:
            upstream = cluster.produce_connection_ready(address, lane)
            if upstream is None:
                upstream = await cluster.produce_connection(address, lane)
            version = upstream.version(kp.PRODUCE)
        except UpstreamError as e:
            for r in parts:
                _refuse(routes.errors, routes.spread, r, Refused(ErrorCode.not_leader_or_follower, str(e)))
            continue
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in parts:
            by_topic[r.placement.physical_topic].append({"index": r.placement.physical_partition, "records": r.records})
        physical = {
            "transactional_id": None,
            "acks": acks,
            "timeout": timeout_ms,
            "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()],
        }
        sends.append((cluster, upstream, parts, upstream.send(kp.PRODUCE, version, physical, acks != 0)))
    return sends


def _batch_producer(records: bytes | None) -> kp.BatchProducer | kp.ProtocolError | None:
    """The producer fields of a partition's batches, read once per request (``ProtocolError``: refused as
    corrupt where the batches are routed)."""
    try:
        return kp.batch_producer(records)
    except kp.ProtocolError as e:
        return e


def _out_of_order(
    producers: ProducerIds, routes: _Routes, tp: tuple[str, int], batch: kp.BatchProducer | kp.ProtocolError | None
) -> bool:
    """Whether an idempotent client's batch comes after one of its partition this instance refused (noted in
    ``routes`` for the answer, which notes a refusal in turn)."""
    if not isinstance(batch, kp.BatchProducer) or batch.producer_id < 0 or batch.transactional:
        return False
    key = (batch.producer_id, batch.producer_epoch, tp[0], tp[1])
    routes.idempotent[tp] = (key, batch.base_sequence, batch.last_sequence)
    return producers.out_of_order(key, batch.base_sequence)


HANDLERS: Final[Mapping[int, tuple[JobHandler[ProduceContext], bool]]] = {kp.PRODUCE: (produce, True)}
"""Produce is ordered: batches reach brokers in the order the client sent them (see ``KafkaServer``)."""


def _refuse(errors: Errors, spread: Spread, r: Routed, refused: Refused) -> None:
    """A part failed: its client partition did, or for a strict topic every client partition placed with it."""
    for tp in spread.get(r.topic, ()) if r.spread else [(r.topic, r.partition)]:
        errors[tp] = refused


def _lane(conn: ClientConnection, placement: PartitionRoute) -> int:
    """Which of a broker's produce connections carries this client's batches of this partition: always the
    same one (a broker appends what one connection sends in order), and the partitions of one client spread
    over them (a broker serves one request per connection at a time)."""
    return (conn.key + hash((placement.physical_topic, placement.physical_partition))) % PRODUCE_CONNECTIONS


def _grown(view: ClusterView, conn: ClientConnection, name: str) -> bool:
    topic = view.topic(name)
    return topic is not None and conn.memory.grown(conn.client_key, name, len(topic.placements))


async def _route_batches(
    ctx: ProduceContext,
    view: ClusterView,
    tp: tuple[str, int],
    records: bytes | None,
    batch: kp.BatchProducer | kp.ProtocolError | None,
) -> tuple[ClusterClient, str, Routed] | Refused:
    """Where one partition's batches go, with their producer rewritten for the cluster, or why not."""
    placement = view.placement(*tp)
    if placement is None:
        return Refused(ErrorCode.unknown_topic_or_partition, f"no logical partition {tp[0]}/{tp[1]}")
    if not placement.writable:
        return Refused(ErrorCode.not_leader_or_follower, f"{tp[0]}/{tp[1]} takes no writes now (read-only or fenced)")
    cluster = cluster_of(ctx.upstream, view, placement.cluster_id)
    if cluster is None:
        return Refused(ErrorCode.not_leader_or_follower, f"cluster {placement.cluster_id} is not registered")
    key = None
    try:
        address = await leader_of(cluster, placement)
        if isinstance(batch, kp.ProtocolError):
            raise batch
        if batch is not None and batch.producer_id >= 0:
            if batch.transactional:
                return Refused(ErrorCode.transactional_id_authorization_failed, NO_TRANSACTIONS)
            if not ctx.producers.minted(batch.producer_id, view.next_incarnation):
                return Refused(ErrorCode.unknown_producer_id, not_minted(batch.producer_id))
            key = (
                batch.producer_id,
                batch.producer_epoch,
                cluster.cluster_id,
                placement.physical_topic,
                placement.physical_partition,
            )
            producer = await ctx.producers.physical(key, cluster, batch.base_sequence, batch.last_sequence)
            assert records is not None and producer.shift is not None
            records = kp.rewrite_producer(records, producer.producer_id, producer.producer_epoch, producer.shift)
    except UpstreamError as e:
        return Refused(ErrorCode.not_leader_or_follower, str(e))
    except kp.ProtocolError as e:
        return Refused(ErrorCode.corrupt_message, str(e))
    return cluster, address, Routed(tp[0], tp[1], placement, records, key)


def _refused_topic(name: str, grown: bool, transactional_id: str | None) -> Refused | None:
    if transactional_id is not None:
        return Refused(ErrorCode.transactional_id_authorization_failed, NO_TRANSACTIONS)
    if grown:  # refused, so that the client refreshes and sees the new partitions
        return Refused(ErrorCode.not_leader_or_follower, f"{name} has more partitions now")
    return None


async def _produce_answer(
    producers: ProducerIds, body: Any, routes: _Routes, sends: list[Send], timeout_s: float
) -> dict[str, Any]:
    errors, spread = routes.errors, routes.spread
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    for cluster, upstream, parts, future in sends:
        try:
            response = await upstream.wait(future, timeout_s)
        except UpstreamError as e:
            for r in parts:
                _refuse(errors, spread, r, Refused(ErrorCode.not_leader_or_follower, str(e)))
            continue
        physical = {(t.name, int(p.index)): p for t in response.responses for p in t.partition_responses}
        for r in parts:
            p = physical.get((r.placement.physical_topic, r.placement.physical_partition))
            if p is None:
                _refuse(errors, spread, r, Refused(ErrorCode.unknown_server_error, "no answer from the broker"))
                continue
            if p.error_code in STALE:
                cluster.forget_leaders(r.placement.physical_topic)
            if p.error_code in STATE_LOST and r.producer is not None:
                producers.forget(r.producer)
            if not r.spread:
                answers[(r.topic, r.partition)] = kp.fields_of(p, index=r.partition)
            elif p.error_code != ErrorCode.none:  # one part failed: so did every client partition placed with it
                code = ErrorCode.not_leader_or_follower if p.error_code in STALE else p.error_code
                _refuse(errors, spread, r, Refused(code, p.error_message))
            else:  # written: a resend of its client batches leaves this part out (producers.Partial)
                routes.written[r.topic].add(r.partition)
    for tp, (key, base_sequence, _) in routes.idempotent.items():
        refused = tp in errors or answers.get(tp, {}).get("error_code", ErrorCode.none) != ErrorCode.none
        if refused:  # ProducerIds.refused ignores a batch that went to a broker: one that may be written
            producers.refused(key, base_sequence)
    return _answer(body, answers, errors, spread)


def _answer(
    body: Any, answers: dict[tuple[str, int], dict[str, Any]], errors: Errors, spread: Spread
) -> dict[str, Any]:
    """The client's answer, in its request's order: each partition's broker answer, or its error."""
    topics = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            tp = (topic.name, int(data.index))
            answer = answers.get(tp)
            if answer is None and topic.name in spread and tp not in errors:  # every part written: no one offset
                answer = _partition_answer(tp[1], ErrorCode.none, None)
            if answer is None:
                code, message = errors.get(tp, Refused(ErrorCode.unknown_server_error, None))
                answer = _partition_answer(tp[1], code, message)
            partitions.append(answer)
        topics.append({"name": topic.name, "partition_responses": partitions})
    return {"responses": topics, "throttle_time": 0}


def _partition_answer(partition: int, code: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "index": partition,
        "error_code": code,
        "base_offset": -1,
        "log_append_time": -1,
        "log_start_offset": -1,
        "record_errors": (),
        "error_message": message,
    }
