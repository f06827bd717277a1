"""Produce, Fetch and ListOffsets: logical partitions translated to physical ones, batches passed through.

A logical partition is exactly one physical partition, so offsets, high watermarks and batches pass
unchanged; only the envelopes are rewritten (topic names and partition ids), and for idempotent producers
the producer id in batch headers (``producers.py``).

On a ``key_order: strict`` topic the gateway places each record itself (``_route_strict``): the batches are
taken apart and regrouped by the partition the topic's key map gives each key (``protocol.batches``).

Errors that mean "your metadata is stale" (a partition that stopped taking writes, a leader that moved, a
broker that cannot be reached) come back as NOT_LEADER_OR_FOLLOWER: every client then refreshes its
metadata, and sees the partition's new state there.
"""

from __future__ import annotations

import asyncio
import contextlib
from array import array
from collections import defaultdict
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final, NamedTuple

from kafka_wire import batches
from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import PRODUCE_CONNECTIONS, ClusterClient, UpstreamError
from metadata_client.brokers import from_api_keys
from metadata_log.image.key_orders import strict_history
from metadata_log.keymap import KEY_SLOTS

from .producers import STATE_LOST, PhysicalKey, ProducerIds, StrictSequence
from .server import NO_RESPONSE, ClientConnection
from .view import ClusterView, Placement, StrictRoute

if TYPE_CHECKING:
    from .app import Gateway

NO_TRANSACTIONS: Final = "the kfed gateway serves no transactions"
WAIT_ALL: Final = array("i", [-1] * KEY_SLOTS).tobytes()
"""A strict topic's slot table while no controller confirmed the key map lately: every keyed record waits."""
REQUEST_MARGIN_S: Final = 5.0
"""Added to a request's own timeout for the broker's answer to reach the gateway."""
STALE: Final = frozenset(
    {ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition, ErrorCode.leader_not_available,
     ErrorCode.fenced_leader_epoch, ErrorCode.unknown_leader_epoch}
)  # fmt: skip
"""Broker errors after which the gateway asks the sub-cluster again where its partitions are."""


class Refused(NamedTuple):
    """Why a partition's part of a request is not sent on: the error code for the client, and a message."""

    code: ErrorCode
    message: str | None


class Routed(NamedTuple):
    """One partition's batches on their way to a broker."""

    topic: str
    partition: int
    placement: Placement
    records: bytes | None
    producer: PhysicalKey | None  # the physical producer they were rewritten for, if idempotent
    spread: bool = False  # a strict topic's records, placed by key: one of maybe several parts of the answer


def _done(value: Any) -> asyncio.Future[Any]:
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future


async def _leader(cluster: ClusterClient, p: Placement) -> str:
    return cluster.known_leader(p.physical_topic, p.physical_partition, asyncio.get_running_loop().time()) or (
        await cluster.leader(p.physical_topic, p.physical_partition)
    )


def _cluster(gw: Gateway, view: ClusterView, cluster_id: str) -> ClusterClient | None:
    bootstrap = view.bootstrap_of(cluster_id)
    return gw.upstream.cluster(cluster_id, bootstrap) if bootstrap else None


# -- Produce ---------------------------------------------------------------------------------------
async def produce(gw: Gateway, conn: ClientConnection, request: kp.Request) -> Awaitable[Any]:
    """The ordered part of a produce: each partition's batches are written to their broker before the next
    request of this connection is read (clients rely on that order). Returns what completes the answer."""
    conn.saw("producer")
    body = request.body
    view = gw.view()
    errors: dict[tuple[str, int], Refused] = {}
    spread: dict[str, list[tuple[str, int]]] = {}  # a strict topic's client partitions: placed and answered together
    sequences: list[_Sent] = []  # idempotent batches of strict topics on their way
    routes: dict[tuple[ClusterClient, str, int], list[Routed]] = defaultdict(list)
    timeout_ms = kp.milliseconds(body.timeout)
    timeout_s = timeout_ms / 1000 + REQUEST_MARGIN_S
    for topic in body.topic_data:
        grown = _grown(view, conn, topic.name)
        strict = view.strict(topic.name)
        if strict is not None:
            plan = await _route_strict(gw, view, strict, topic.name, topic.partition_data,
                                       _refused_topic(topic.name, grown, body.transactional_id), timeout_s)  # fmt: skip
            spread[topic.name] = plan.together
            errors.update(plan.alone)
            sequences += plan.sent
            for cluster, address, part in plan.placed:
                routes[(cluster, address, _lane(conn, part.placement))].append(part)
            continue
        for data in topic.partition_data:
            tp = (topic.name, int(data.index))
            if grown:  # one partition refused, so that the client refreshes and sees the new ones
                errors[tp] = Refused(ErrorCode.not_leader_or_follower, f"{topic.name} has more partitions now")
                grown = False
                continue
            if body.transactional_id is not None:
                errors[tp] = Refused(ErrorCode.transactional_id_authorization_failed, NO_TRANSACTIONS)
                continue
            routed = await _route_batches(gw, view, tp, data.records)
            if isinstance(routed, Refused):
                errors[tp] = routed
            else:
                cluster, address, batches = routed
                routes[(cluster, address, _lane(conn, batches.placement))].append(batches)
    acks = int(body.acks)
    sends = []
    for (cluster, address, lane), parts in routes.items():
        try:
            upstream = cluster.produce_connection_ready(address, lane)
            if upstream is None:
                upstream = await cluster.produce_connection(address, lane)
            version = upstream.version(kp.PRODUCE)
        except UpstreamError as e:
            for r in parts:
                _refuse(errors, spread, r, Refused(ErrorCode.not_leader_or_follower, str(e)))
            continue
        by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for r in parts:
            by_topic[r.placement.physical_topic].append({"index": r.placement.physical_partition, "records": r.records})
        physical = {"transactional_id": None, "acks": acks, "timeout": timeout_ms,
                    "topic_data": [{"name": t, "partition_data": ps} for t, ps in by_topic.items()]}  # fmt: skip
        sends.append((cluster, upstream, parts, upstream.send(kp.PRODUCE, version, physical, acks != 0)))
    if acks == 0:
        for sent in sequences:
            sent.sequence.written(sent.base_sequence, sent.last_sequence)
        return _done(NO_RESPONSE)
    answer = asyncio.ensure_future(_produce_answer(gw.producers, body, errors, spread, sends, timeout_s))
    for sent in sequences:
        sent.sequence.previous = answer
        answer.add_done_callback(sent.answered)
    return answer


def _refuse(errors: dict[tuple[str, int], Refused], spread: dict[str, list[tuple[str, int]]], r: Routed,
            refused: Refused) -> None:  # fmt: skip
    """A part failed: its client partition did, or for a strict topic every client partition placed with it."""
    for tp in spread.get(r.topic, ()) if r.spread else [(r.topic, r.partition)]:
        errors[tp] = refused


def _lane(conn: ClientConnection, placement: Placement) -> int:
    """Which of a broker's produce connections carries this client's batches of this partition: always the
    same one (a broker appends what one connection sends in order), and the partitions of one client spread
    over them (a broker serves one request per connection at a time)."""
    return (conn.key + hash((placement.physical_topic, placement.physical_partition))) % PRODUCE_CONNECTIONS


def _grown(view: ClusterView, conn: ClientConnection, name: str) -> bool:
    topic = view.topic(name)
    return topic is not None and conn.memory.grown(conn.client_key, name, len(topic.placements))


async def _route_batches(
    gw: Gateway, view: ClusterView, tp: tuple[str, int], records: bytes | None
) -> tuple[ClusterClient, str, Routed] | Refused:
    """Where one partition's batches go, with their producer rewritten for the cluster, or why not."""
    placement = view.placement(*tp)
    if placement is None:
        return Refused(ErrorCode.unknown_topic_or_partition, f"no logical partition {tp[0]}/{tp[1]}")
    if not placement.writable:
        return Refused(ErrorCode.not_leader_or_follower, f"{tp[0]}/{tp[1]} takes no writes now (read-only or fenced)")
    cluster = _cluster(gw, view, placement.cluster_id)
    if cluster is None:
        return Refused(ErrorCode.not_leader_or_follower, f"cluster {placement.cluster_id} is not registered")
    key = None
    try:
        address = await _leader(cluster, placement)
        batch = kp.batch_producer(records)
        if batch is not None and batch.producer_id >= 0:
            if batch.transactional:
                return Refused(ErrorCode.transactional_id_authorization_failed, NO_TRANSACTIONS)
            key = (batch.producer_id, batch.producer_epoch, cluster.cluster_id, placement.physical_topic,
                   placement.physical_partition)  # fmt: skip
            producer = await gw.producers.physical(key, cluster, batch.base_sequence, batch.last_sequence)
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


@dataclass(slots=True)
class _Sent:
    """An idempotent client's batch of a strict topic, sent: noted in its sequence once answered."""

    sequence: StrictSequence
    base_sequence: int
    last_sequence: int
    tp: tuple[str, int]

    def answered(self, answer: asyncio.Future[Any]) -> None:
        if not answer.cancelled() and answer.exception() is None:
            for topic in answer.result()["responses"]:
                for p in topic["partition_responses"] if topic["name"] == self.tp[0] else ():
                    if p["index"] == self.tp[1] and p["error_code"] == ErrorCode.none:
                        self.sequence.written(self.base_sequence, self.last_sequence)
                        return
        self.sequence.refused(self.base_sequence)


@dataclass(slots=True)
class _StrictPlan:
    placed: list[tuple[ClusterClient, str, Routed]] = field(default_factory=list)
    together: list[tuple[str, int]] = field(default_factory=list)  # client partitions placed: answered together
    alone: dict[tuple[str, int], Refused] = field(default_factory=dict)  # answered on their own (a resend: none)
    sent: list[_Sent] = field(default_factory=list)


async def _route_strict(
    gw: Gateway,
    view: ClusterView,
    route: StrictRoute,
    name: str,
    partition_data: Any,
    refused: Refused | None,
    wait_s: float,
) -> _StrictPlan:
    """A strict topic's records of one request, regrouped by where the key map places them
    (``docs/KEY_ORDER.md``): one batch per target partition. Keyed records go to their slot's partition of the
    current epoch, stamped with it once their slot has moved; key-less ones stay in the client's partition
    when it takes writes, else go to a writable one. An idempotent client's batch waits for the answer to its
    partition's previous one, and goes only if it follows what was written (``producers.StrictSequence``)."""
    tps = [(name, int(data.index)) for data in partition_data]
    if refused is not None:
        return _StrictPlan(alone=dict.fromkeys(tps, refused))
    plan = _StrictPlan()
    pending: list[tuple[bytes, int]] = []
    for data, tp in zip(partition_data, tps, strict=True):
        records = data.records or b""
        try:
            producer = kp.batch_producer(records)
        except kp.ProtocolError as e:
            plan.alone[tp] = Refused(ErrorCode.corrupt_message, str(e))
            continue
        if producer is not None and producer.producer_id >= 0:
            sequence = gw.producers.strict((producer.producer_id, producer.producer_epoch, name, tp[1]))
            await _answered(sequence.previous, wait_s)
            verdict = sequence.verdict(producer.base_sequence, producer.last_sequence)
            if verdict is not None:
                plan.alone[tp] = Refused(verdict, None)
                continue
            plan.sent.append(_Sent(sequence, producer.base_sequence, producer.last_sequence, tp))
        pending.append((records, tp[1]))
        plan.together.append(tp)
    # The key map as it is now, not as the request found it: waiting for earlier answers can take seconds,
    # and a batch placed by an epoch that ended meanwhile could land behind its seal.
    view = gw.view()
    route = view.strict(name) or route  # a topic switched to none meanwhile: its last map, for this request
    held = gw.key_order_lease_held()
    table = route.table if held else WAIT_ALL

    def placement(partition: int) -> batches.Placement:
        keyless = partition
        if partition not in route.writable:
            keyless = route.writable[partition % len(route.writable)] if route.writable else -1
        return batches.Placement(table, route.stamped, keyless, route.header)

    placed = await _place(gw, view, name, [(records, placement(p)) for records, p in pending])
    latest = gw.view().strict(name)
    if not isinstance(placed, Refused) and latest is not None and latest.epoch != route.epoch:
        placed = Refused(ErrorCode.not_leader_or_follower, f"{name}: a new key map came while placing; retry")
    if isinstance(placed, Refused) and not held and placed.code == ErrorCode.not_leader_or_follower:
        placed = Refused(placed.code, f"{name}: no controller confirmed the key map lately; retry")
    if isinstance(placed, Refused):
        for sent in plan.sent:
            sent.sequence.refused(sent.base_sequence)
        return _StrictPlan(alone={**plan.alone, **dict.fromkeys(plan.together, placed)})
    plan.placed = placed
    return plan


async def _answered(previous: asyncio.Future[Any] | None, wait_s: float) -> None:
    """Until the previous batch of a client partition was answered (or ``wait_s`` passed)."""
    if previous is not None and not previous.done():
        # its outcome is noted by its own callback; a timeout leaves the sequence as it is
        with contextlib.suppress(Exception):
            await asyncio.wait_for(asyncio.shield(previous), wait_s)


async def _place(
    gw: Gateway, view: ClusterView, name: str, sources: list[tuple[bytes, batches.Placement]]
) -> list[tuple[ClusterClient, str, Routed]] | Refused:
    """The regrouped batches of a strict topic with the broker each goes to, or why the request is refused
    (before anything is written)."""
    try:
        grouped = batches.regroup(sources, gw.limits.max_frame_bytes)
    except batches.NoPartitionNow as e:
        return Refused(ErrorCode.not_leader_or_follower, f"{name}: {e.detail}")
    except batches.UnsupportedCompression as e:
        return Refused(ErrorCode.unsupported_compression_type, str(e))
    except batches.BadBatch as e:
        return Refused(ErrorCode.corrupt_message, str(e))
    placed = []
    for partition, records in grouped.items():
        placement = view.placement(name, partition)
        cluster = _cluster(gw, view, placement.cluster_id) if placement is not None else None
        if placement is None or cluster is None:
            return Refused(ErrorCode.not_leader_or_follower, f"{name}/{partition} is not placed now")
        try:
            address = await _leader(cluster, placement)
        except UpstreamError as e:
            return Refused(ErrorCode.not_leader_or_follower, str(e))
        placed.append((cluster, address, Routed(name, partition, placement, records, None, spread=True)))
    return placed


async def _produce_answer(
    producers: ProducerIds,
    body: Any,
    errors: dict[tuple[str, int], Refused],
    spread: dict[str, list[tuple[str, int]]],
    sends: list[tuple[ClusterClient, Any, list[Routed], asyncio.Future[Any]]],
    timeout_s: float,
) -> dict[str, Any]:
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
    topics = []
    for topic in body.topic_data:
        partitions = []
        for data in topic.partition_data:
            tp = (topic.name, int(data.index))
            answer = answers.get(tp)
            if answer is None and topic.name in spread and tp not in errors:  # every part written: no one offset
                answer = {"index": tp[1], "error_code": ErrorCode.none, "base_offset": -1, "log_append_time": -1,
                          "log_start_offset": -1, "record_errors": (), "error_message": None}  # fmt: skip
            if answer is None:
                code, message = errors.get(tp, Refused(ErrorCode.unknown_server_error, None))
                answer = {"index": tp[1], "error_code": code, "base_offset": -1, "log_append_time": -1,
                          "log_start_offset": -1, "record_errors": (), "error_message": message}  # fmt: skip
            partitions.append(answer)
        topics.append({"name": topic.name, "partition_responses": partitions})
    return {"responses": topics, "throttle_time": 0}


# -- Fetch -----------------------------------------------------------------------------------------
FetchKey = tuple[tuple[str, int, int, int], ...]
"""What one broker's part of a fetch asks: (logical topic, partition, fetch offset, partition max bytes)."""


async def fetch(gw: Gateway, conn: ClientConnection, request: kp.Request) -> Any:
    """Scatter to each broker holding a requested partition, gather, and answer once ``min_bytes`` arrived,
    every broker answered, or ``max_wait`` passed.

    A broker's part still under way when the answer goes out is *parked* on the connection, not dropped: the
    client asks again for what it did not get, at the same offsets, and the parked part answers that (a
    consumer of partitions on two sub-clusters would otherwise get one broker's data per fetch and throw the
    other's away). A part asking anything else is fetched anew; at most one is parked per broker."""
    conn.saw("consumer")
    body = request.body
    if int(getattr(body, "session_id", 0)) != 0:  # this gateway never opens fetch sessions
        return {"error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": ()}
    view = gw.view()
    max_wait_s = max(0, kp.milliseconds(body.max_wait)) / 1000
    min_bytes = max(0, int(body.min_bytes))
    max_bytes = min(int(getattr(body, "max_bytes", gw.limits.max_fetch_bytes)), gw.limits.max_fetch_bytes)
    isolation = int(getattr(body, "isolation_level", 0))
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    groups: dict[tuple[ClusterClient, str], list[tuple[str, int, Placement, Any]]] = defaultdict(list)
    order: list[tuple[str, list[int]]] = []
    for topic in body.topics:
        order.append((topic.topic, [int(p.partition) for p in topic.partitions]))
        for p in topic.partitions:
            tp = (topic.topic, int(p.partition))
            placement = view.placement(*tp)
            if placement is None or not placement.readable:
                code = ErrorCode.unknown_topic_or_partition if placement is None else ErrorCode.not_leader_or_follower
                answers[tp] = _fetch_error(tp[1], code)
                continue
            cluster = _cluster(gw, view, placement.cluster_id)
            try:
                if cluster is None:
                    raise UpstreamError(f"cluster {placement.cluster_id} is not registered")
                address = await _leader(cluster, placement)
            except UpstreamError:
                answers[tp] = _fetch_error(tp[1], ErrorCode.not_leader_or_follower)
                continue
            groups[(cluster, address)].append((tp[0], tp[1], placement, p))
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    if not groups and not answers:  # nothing asked: a broker waits out max_wait, so that clients do not spin
        await asyncio.sleep(min(max_wait_s, 30.0))
    parked, conn.parked_fetches = conn.parked_fetches, {}  # what this fetch does not take is dropped
    asked: dict[asyncio.Future[Any], tuple[tuple[ClusterClient, str], FetchKey]] = {}
    for where, wanted in groups.items():
        key: FetchKey = tuple((t, n, int(p.fetch_offset), int(p.partition_max_bytes)) for t, n, _, p in wanted)
        earlier = parked.pop(where, None)
        if earlier is not None and earlier[0] == key:
            asked[earlier[1]] = (where, key)
            continue
        cluster, address = where
        part: asyncio.Future[Any] = asyncio.ensure_future(
            _fetch_from(cluster, address, wanted, max_wait_s, min_bytes, max_bytes, isolation)
        )
        part.add_done_callback(_ignore_result)  # it may end unread (parked, then not asked for again)
        asked[part] = (where, key)
    tasks = set(asked)
    gathered = 0
    while tasks:
        timeout_s = max(0.0, deadline - loop.time()) + REQUEST_MARGIN_S
        done, tasks = await asyncio.wait(tasks, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
        if not done:
            break
        for task in done:
            got, size = task.result()
            answers.update(got)
            gathered += size
        # Only data ends the wait early: a broker that fails at once must not cut short a wait on the others
        # (their data would be dropped, fetch after fetch). Its errors go out with their answers.
        if gathered > 0 and gathered >= min_bytes:
            break
    for part in tasks:  # still waiting on a broker: parked for the client's next fetch
        where, key = asked[part]
        conn.parked_fetches[where] = (key, part)
    if _hold_back(gw, conn, view, body, answers) and not any(a["records"] for a in answers.values()):
        await asyncio.sleep(max(0.0, deadline - loop.time()))  # all of it waits: as a broker with nothing new
    responses = []
    for topic_name, partitions in order:
        parts = [answers.get((topic_name, p)) or _fetch_error(p, ErrorCode.none, empty=True) for p in partitions]
        responses.append({"topic": topic_name, "partitions": parts})
    return {"error_code": 0, "session_id": 0, "responses": responses, "throttle_time": 0}


def _hold_back(gw: Gateway, conn: ClientConnection, view: ClusterView, body: Any,
               answers: dict[tuple[str, int], dict[str, Any]]) -> bool:  # fmt: skip
    """End each strict partition's answer before the first record its readers' groups must not have yet
    (``gateway/holdback.py``); whether any was cut."""
    image = view.image
    if not image.key_orders:
        return False
    cut = False
    here = gw.groups.by_client.get((conn.client_id, conn.peer_host), {}).values()  # this client's members
    for topic in body.topics:
        history = strict_history(image.key_orders, topic.topic)
        if history is None:
            continue
        for p in topic.partitions:
            tp = (topic.topic, int(p.partition))
            answer = answers.get(tp)
            if answer is None or not answer["records"]:
                continue
            groups = gw.groups.key_order.readers(image, here, tp)
            records = gw.groups.key_order.cut(history, groups, tp[0], int(p.fetch_offset), answer["records"],
                                              gw.limits.max_fetch_bytes)  # fmt: skip
            if len(records) != len(answer["records"]):
                answer["records"] = records
                cut = True
    return cut


def _fetch_error(partition: int, code: ErrorCode, empty: bool = False) -> dict[str, Any]:
    """A partition's answer without data: an error, or (``empty``) nothing yet."""
    return {"partition_index": partition, "error_code": code, "high_watermark": -1, "last_stable_offset": -1,
            "log_start_offset": -1, "aborted_transactions": None if not empty else (), "preferred_read_replica": -1,
            "records": b""}  # fmt: skip


def _ignore_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _fetch_from(
    cluster: ClusterClient,
    address: str,
    parts: list[tuple[str, int, Placement, Any]],
    max_wait_s: float,
    min_bytes: int,
    max_bytes: int,
    isolation: int,
) -> tuple[dict[tuple[str, int], dict[str, Any]], int]:
    """One broker's part of a fetch: (answers by logical partition, record bytes)."""
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, placement, p in parts:
        by_topic[placement.physical_topic].append({
            "partition": placement.physical_partition, "current_leader_epoch": -1, "fetch_offset": p.fetch_offset,
            "last_fetched_epoch": -1, "log_start_offset": getattr(p, "log_start_offset", -1),
            "partition_max_bytes": p.partition_max_bytes,
        })  # fmt: skip
    physical = {"replica_id": -1, "max_wait": round(max_wait_s * 1000), "min_bytes": min_bytes, "max_bytes": max_bytes,
                "isolation_level": isolation, "session_id": 0, "session_epoch": -1,
                "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()]}  # fmt: skip
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    try:
        async with cluster.fetch_connection(address) as upstream:
            response = await upstream.call(kp.FETCH, upstream.version(kp.FETCH), physical,
                                           max_wait_s + REQUEST_MARGIN_S)  # fmt: skip
    except UpstreamError:
        for topic_name, partition, _, _ in parts:
            answers[(topic_name, partition)] = _fetch_error(partition, ErrorCode.not_leader_or_follower)
        return answers, 0
    if response.error_code != ErrorCode.none:
        for topic_name, partition, _, _ in parts:
            answers[(topic_name, partition)] = _fetch_error(partition, response.error_code)
        return answers, 0
    got = {(t.topic, int(p.partition_index)): p for t in response.responses for p in t.partitions}
    size = 0
    for topic_name, partition, placement, _ in parts:
        p = got.get((placement.physical_topic, placement.physical_partition))
        if p is None:
            answers[(topic_name, partition)] = _fetch_error(partition, ErrorCode.none, empty=True)
            continue
        if p.error_code in STALE:
            cluster.forget_leaders(placement.physical_topic)
        size += len(p.records or b"")
        # records null (Tansu sends it for none) is refused by librdkafka: empty, as Kafka sends
        answers[(topic_name, partition)] = kp.fields_of(
            p, partition_index=partition, preferred_read_replica=-1, records=p.records or b""
        )
    return answers, size


# -- ListOffsets -----------------------------------------------------------------------------------
EARLIEST: Final = -2
"""ListOffsets' timestamp that asks for a partition's first offset."""


async def list_offsets(gw: Gateway, conn: ClientConnection, request: kp.Request) -> Any:
    conn.saw("consumer")
    body = request.body
    view = gw.view()
    isolation = int(getattr(body, "isolation_level", 0))
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    groups: dict[tuple[ClusterClient, str], list[tuple[str, int, Placement, int]]] = defaultdict(list)
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            placement = view.placement(*tp)
            cluster = _cluster(gw, view, placement.cluster_id) if placement is not None else None
            if placement is None or cluster is None or not (placement.readable or placement.writable):
                code = ErrorCode.unknown_topic_or_partition if placement is None else ErrorCode.not_leader_or_follower
                answers[tp] = {"partition_index": tp[1], "error_code": code}
                continue
            try:
                address = await _leader(cluster, placement)
            except UpstreamError:
                answers[tp] = {"partition_index": tp[1], "error_code": ErrorCode.not_leader_or_follower}
                continue
            groups[(cluster, address)].append((tp[0], tp[1], placement, int(p.timestamp)))
    results = await asyncio.gather(
        *(_list_from(cluster, address, parts, isolation) for (cluster, address), parts in groups.items())
    )
    for got in results:
        answers.update(got)
    topics = [
        {"name": t.name, "partitions": [answers[(t.name, int(p.partition_index))] for p in t.partitions]}
        for t in body.topics
    ]
    return {"topics": topics, "throttle_time": 0}


async def _list_from(
    cluster: ClusterClient, address: str, parts: list[tuple[str, int, Placement, int]], isolation: int
) -> dict[tuple[str, int], dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, placement, timestamp in parts:
        by_topic[placement.physical_topic].append(
            {"partition_index": placement.physical_partition, "current_leader_epoch": -1, "timestamp": timestamp}
        )
    physical = {"replica_id": -1, "isolation_level": isolation,
                "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()]}  # fmt: skip
    answers = {}
    try:
        upstream = await cluster.control(address)
        response = await upstream.call(kp.LIST_OFFSETS, upstream.version(kp.LIST_OFFSETS), physical)
    except UpstreamError:
        for topic_name, partition, _, _ in parts:
            answers[(topic_name, partition)] = {
                "partition_index": partition,
                "error_code": ErrorCode.not_leader_or_follower,
            }
        return answers
    got = {(t.name, int(p.partition_index)): p for t in response.topics for p in t.partitions}
    log_start = from_api_keys(upstream.versions).log_start  # Tansu's: 0, whatever its ListOffsets says
    for topic_name, partition, placement, timestamp in parts:
        p = got.get((placement.physical_topic, placement.physical_partition))
        if p is None:
            answers[(topic_name, partition)] = {
                "partition_index": partition,
                "error_code": ErrorCode.unknown_server_error,
            }
            continue
        if p.error_code in STALE:
            cluster.forget_leaders(placement.physical_topic)
        answer = kp.fields_of(p, partition_index=partition, leader_epoch=-1)
        if timestamp == EARLIEST and log_start is not None and p.error_code == ErrorCode.none:
            answer["offset"] = log_start  # a client reset to earliest must not skip a partition's first batch
        answers[(topic_name, partition)] = answer
    return answers
