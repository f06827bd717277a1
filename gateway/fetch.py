"""Fetch and ListOffsets: each logical partition read from the broker leading its physical partition.

Offsets, high watermarks and batches pass unchanged (a logical partition is exactly one physical one); the
envelopes are rewritten (``routing.py``). A strict topic's answers end before the first record its readers'
groups must not have yet (``holdback.py``).
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Mapping
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import ClusterClient, UpstreamError
from metadata_client.brokers import from_api_keys
from metadata_log.image.key_orders import strict_history

from .context import FetchContext, JobHandler
from .routing import REQUEST_MARGIN_S, STALE, cluster_of, leader_of
from .server import ClientConnection, Held
from .view import ClusterView, PartitionRoute

FetchKey = tuple[tuple[str, int, int, int], ...]
"""What one broker's part of a fetch asks: (logical topic, partition, fetch offset, partition max bytes)."""
Broker = tuple[ClusterClient, str]
"""A broker: the client of its cluster and its address."""
Answers = dict[tuple[str, int], dict[str, Any]]
"""Per logical partition, its part of the answer."""
NOTHING_ASKED_WAIT_S_MAX: Final = 30.0
"""The longest a fetch that asks for no partition waits (its ``max_wait``, as a broker would)."""
EARLIEST: Final = -2
"""ListOffsets' timestamp that asks for a partition's first offset."""


async def fetch(ctx: FetchContext, conn: ClientConnection, request: kp.Request) -> Any:
    """Admit a fetch (ordered: before the connection's next request is read): room for its answer's records,
    ``max_bytes`` or what is left of the connection's budgets, taken in request order. A fetch that holds
    nothing yet while others' answers wait is never what they wait for, so full budgets stall reading, never
    the answers. With no room within ``max_wait``, the fetch goes on with none: its answer carries no
    records (a client is answered, not hung, while clients that do not read hold the budget)."""
    body = request.body
    max_bytes = min(int(getattr(body, "max_bytes", ctx.limits.max_fetch_bytes)), ctx.limits.max_fetch_bytes)
    max_wait_s = max(0, kp.milliseconds(body.max_wait)) / 1000
    deadline = asyncio.get_running_loop().time() + max_wait_s  # the admission's wait counts in max_wait
    granted = await conn.reserve(max_bytes, max_wait_s)
    return asyncio.ensure_future(_fetch(ctx, conn, request, granted, deadline))


async def _fetch(ctx: FetchContext, conn: ClientConnection, request: kp.Request, granted: int, deadline: float) -> Any:
    """Scatter to each broker holding a requested partition, gather, and answer once ``min_bytes`` arrived,
    every broker answered, or the ``deadline`` (the request's ``max_wait`` from its admission) passed.

    A broker's part still under way when the answer goes out is *parked* on the connection, not dropped: the
    client asks again for what it did not get, at the same offsets, and the parked part answers that (a
    consumer of partitions on two sub-clusters would otherwise get one broker's data per fetch and throw the
    other's away). A part asking anything else is fetched anew; at most one is parked per broker.

    The ``granted`` bytes are shared among the brokers asked (Kafka's ``max_bytes`` bounds the whole
    answer); each part's records stay held in the connection's budgets until the answer that carries them is
    written (``Held``), or until the part is dropped."""
    conn.saw("consumer")
    body = request.body
    if int(getattr(body, "session_id", 0)) != 0:  # this gateway never opens fetch sessions
        conn.release(granted)
        return {"error_code": ErrorCode.fetch_session_id_not_found, "session_id": 0, "responses": ()}
    if granted == 0:  # no room came within max_wait: no broker is asked (each would send a batch anyway)
        return Held(_answer(body, {}), 0)
    try:
        await ctx.resolve([topic.topic for topic in body.topics])
        view = ctx.view()
        answers: Answers = {}
        brokers = await _brokers(ctx, view, body, answers)
    except BaseException:
        conn.release(granted)
        raise
    max_wait_s = max(0.0, deadline - asyncio.get_running_loop().time())
    min_bytes = max(0, int(body.min_bytes))
    isolation = int(getattr(body, "isolation_level", 0))
    asked = _ask(conn, brokers, max_wait_s, min_bytes, granted, isolation)  # from here the parts hold it
    if not brokers and not answers:  # nothing asked: a broker waits out max_wait, so that clients do not spin
        await asyncio.sleep(min(max_wait_s, NOTHING_ASKED_WAIT_S_MAX))
    return await _gather(ctx, conn, body, view, asked, answers, deadline, min_bytes)


async def _gather(
    ctx: FetchContext,
    conn: ClientConnection,
    body: Any,
    view: ClusterView,
    asked: dict[asyncio.Future[Any], tuple[Broker, FetchKey]],
    answers: Answers,
    deadline: float,
    min_bytes: int,
) -> Held:
    """The answer, from the parts done by the deadline; the rest parked."""
    loop = asyncio.get_running_loop()
    tasks = set(asked)
    gathered = 0  # record bytes of the parts taken: held until this answer is written
    try:
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
        tasks = set()
        if _hold_back(ctx, conn, view, body, answers) and not any(a["records"] for a in answers.values()):
            await asyncio.sleep(max(0.0, deadline - loop.time()))  # all of it waits: as a broker with nothing new
    except BaseException:
        conn.release(gathered)
        for part in tasks:
            conn.drop_part(part)
        raise
    return Held(_answer(body, answers), gathered)


def _answer(body: Any, answers: Answers) -> dict[str, Any]:
    """The Fetch answer: each partition asked, with its part of ``answers`` or nothing yet."""
    responses = []
    for topic in body.topics:
        partitions = [int(p.partition) for p in topic.partitions]
        parts = [answers.get((topic.topic, p)) or _fetch_error(p, ErrorCode.none, empty=True) for p in partitions]
        responses.append({"topic": topic.topic, "partitions": parts})
    return {"error_code": 0, "session_id": 0, "responses": responses, "throttle_time": 0}


async def _brokers(
    ctx: FetchContext, view: ClusterView, body: Any, answers: Answers
) -> dict[Broker, list[tuple[str, int, PartitionRoute, Any]]]:
    """The requested partitions by the broker leading each; one that cannot be read gets its error in
    ``answers``."""
    brokers: dict[Broker, list[tuple[str, int, PartitionRoute, Any]]] = defaultdict(list)
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.topic, int(p.partition))
            placement = view.placement(*tp)
            if placement is None or not placement.readable:
                code = ErrorCode.unknown_topic_or_partition if placement is None else ErrorCode.not_leader_or_follower
                answers[tp] = _fetch_error(tp[1], code)
                continue
            cluster = cluster_of(ctx.upstream, view, placement.cluster_id)
            try:
                if cluster is None:
                    raise UpstreamError(f"cluster {placement.cluster_id} is not registered")
                address = await leader_of(cluster, placement)
            except UpstreamError:
                answers[tp] = _fetch_error(tp[1], ErrorCode.not_leader_or_follower)
                continue
            brokers[(cluster, address)].append((tp[0], tp[1], placement, p))
    return brokers


def _ask(
    conn: ClientConnection,
    brokers: dict[Broker, list[tuple[str, int, PartitionRoute, Any]]],
    max_wait_s: float,
    min_bytes: int,
    granted: int,
    isolation: int,
) -> dict[asyncio.Future[Any], tuple[Broker, FetchKey]]:
    """Each broker's part of the fetch: the one parked on the connection when it asks the same, else a new
    fetch, which holds its share of ``granted``. What this fetch does not take of the parked parts is
    dropped."""
    parked, conn.parked_fetches = conn.parked_fetches, {}
    asked: dict[asyncio.Future[Any], tuple[Broker, FetchKey]] = {}
    if not brokers:
        conn.release(granted)
    share, extra = divmod(granted, max(1, len(brokers)))
    for i, (where, wanted) in enumerate(brokers.items()):
        part_share = share + (extra if i == 0 else 0)
        key: FetchKey = tuple((t, n, int(p.fetch_offset), int(p.partition_max_bytes)) for t, n, _, p in wanted)
        earlier = parked.pop(where, None)
        if earlier is not None:
            if earlier[0] == key:  # it holds its own records already
                asked[earlier[1]] = (where, key)
                conn.release(part_share)
                continue
            conn.drop_part(earlier[1])
        cluster, address = where
        part: asyncio.Future[Any] = asyncio.ensure_future(
            _fetch_from(conn, cluster, address, wanted, max_wait_s, min_bytes, part_share, isolation)
        )
        part.add_done_callback(_ignore_result)  # it may end unread (parked, then not asked for again)
        asked[part] = (where, key)
    for _key, dropped in parked.values():
        conn.drop_part(dropped)
    return asked


def _hold_back(ctx: FetchContext, conn: ClientConnection, view: ClusterView, body: Any, answers: Answers) -> bool:
    """End each strict partition's answer before the first record its readers' groups must not have yet
    (``gateway/holdback.py``); whether any was cut."""
    image = view.image
    if not image.key_orders:
        return False
    cut = False
    key_order = ctx.members.key_order
    here = ctx.members.by_client.get((conn.client_id, conn.peer_host), {}).values()  # this client's members
    for topic in body.topics:
        history = strict_history(image.key_orders, topic.topic)
        if history is None:
            continue
        for p in topic.partitions:
            tp = (topic.topic, int(p.partition))
            answer = answers.get(tp)
            if answer is None or not answer["records"]:
                continue
            groups = key_order.readers(image, here, tp)
            fetched = answer["records"]
            records = key_order.cut(history, groups, tp[0], int(p.fetch_offset), fetched, ctx.limits.max_fetch_bytes)
            if len(records) != len(fetched):
                answer["records"] = records
                cut = True
    return cut


def _fetch_error(partition: int, code: ErrorCode, empty: bool = False) -> dict[str, Any]:
    """A partition's answer without data: an error, or (``empty``) nothing yet."""
    return {
        "partition_index": partition,
        "error_code": code,
        "high_watermark": -1,
        "last_stable_offset": -1,
        "log_start_offset": -1,
        "aborted_transactions": None if not empty else (),
        "preferred_read_replica": -1,
        "records": b"",
    }


def _ignore_result(task: asyncio.Future[Any]) -> None:
    if not task.cancelled():
        task.exception()


async def _fetch_from(
    conn: ClientConnection,
    cluster: ClusterClient,
    address: str,
    parts: list[tuple[str, int, PartitionRoute, Any]],
    max_wait_s: float,
    min_bytes: int,
    max_bytes: int,
    isolation: int,
) -> tuple[Answers, int]:
    """One broker's part of a fetch, holding ``max_bytes`` in the connection's budgets while it asks:
    (answers by logical partition, record bytes), which it then holds instead."""
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, placement, p in parts:
        by_topic[placement.physical_topic].append(
            {
                "partition": placement.physical_partition,
                "current_leader_epoch": -1,
                "fetch_offset": p.fetch_offset,
                "last_fetched_epoch": -1,
                "log_start_offset": getattr(p, "log_start_offset", -1),
                "partition_max_bytes": p.partition_max_bytes,
            }
        )
    physical = {
        "replica_id": -1,
        "max_wait": round(max_wait_s * 1000),
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": isolation,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [{"topic": t, "partitions": ps} for t, ps in by_topic.items()],
    }
    answers: Answers = {}
    granted = max_bytes
    try:
        async with cluster.fetch_connection(address) as upstream:
            version = upstream.version(kp.FETCH)
            response = await upstream.call(kp.FETCH, version, physical, max_wait_s + REQUEST_MARGIN_S)
    except UpstreamError:
        conn.release(granted)
        for topic_name, partition, _, _ in parts:
            answers[(topic_name, partition)] = _fetch_error(partition, ErrorCode.not_leader_or_follower)
        return answers, 0
    except BaseException:
        conn.release(granted)
        raise
    size = sum(len(p.records or b"") for t in response.responses for p in t.partitions)
    if size < granted:
        conn.release(granted - size)
    else:
        conn.hold(size - granted)  # a broker answers at least one batch, however large (KIP-74)
    if response.error_code != ErrorCode.none:
        conn.release(size)
        for topic_name, partition, _, _ in parts:
            answers[(topic_name, partition)] = _fetch_error(partition, response.error_code)
        return answers, 0
    got = {(t.topic, int(p.partition_index)): p for t in response.responses for p in t.partitions}
    for topic_name, partition, placement, _ in parts:
        p = got.get((placement.physical_topic, placement.physical_partition))
        if p is None:
            answers[(topic_name, partition)] = _fetch_error(partition, ErrorCode.none, empty=True)
            continue
        if p.error_code in STALE:
            cluster.forget_leaders(placement.physical_topic)
        # records null (Tansu sends it for none) is refused by librdkafka: empty, as Kafka sends
        answers[(topic_name, partition)] = kp.fields_of(
            p, partition_index=partition, preferred_read_replica=-1, records=p.records or b""
        )
    return answers, size


# -- ListOffsets -----------------------------------------------------------------------------------
async def list_offsets(ctx: FetchContext, conn: ClientConnection, request: kp.Request) -> Any:
    conn.saw("consumer")
    body = request.body
    await ctx.resolve([topic.name for topic in body.topics])
    view = ctx.view()
    isolation = int(getattr(body, "isolation_level", 0))
    answers: dict[tuple[str, int], dict[str, Any]] = {}
    brokers: dict[Broker, list[tuple[str, int, PartitionRoute, int]]] = defaultdict(list)
    for topic in body.topics:
        for p in topic.partitions:
            tp = (topic.name, int(p.partition_index))
            placement = view.placement(*tp)
            cluster = cluster_of(ctx.upstream, view, placement.cluster_id) if placement is not None else None
            if placement is None or cluster is None or not (placement.readable or placement.writable):
                code = ErrorCode.unknown_topic_or_partition if placement is None else ErrorCode.not_leader_or_follower
                answers[tp] = {"partition_index": tp[1], "error_code": code}
                continue
            try:
                address = await leader_of(cluster, placement)
            except UpstreamError:
                answers[tp] = {"partition_index": tp[1], "error_code": ErrorCode.not_leader_or_follower}
                continue
            brokers[(cluster, address)].append((tp[0], tp[1], placement, int(p.timestamp)))
    results = await asyncio.gather(
        *(_list_from(cluster, address, parts, isolation) for (cluster, address), parts in brokers.items())
    )
    for got in results:
        answers.update(got)
    topics = [
        {"name": t.name, "partitions": [answers[(t.name, int(p.partition_index))] for p in t.partitions]}
        for t in body.topics
    ]
    return {"topics": topics, "throttle_time": 0}


async def _list_from(
    cluster: ClusterClient, address: str, parts: list[tuple[str, int, PartitionRoute, int]], isolation: int
) -> dict[tuple[str, int], dict[str, Any]]:
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for _, _, placement, timestamp in parts:
        by_topic[placement.physical_topic].append(
            {"partition_index": placement.physical_partition, "current_leader_epoch": -1, "timestamp": timestamp}
        )
    physical = {
        "replica_id": -1,
        "isolation_level": isolation,
        "topics": [{"name": t, "partitions": ps} for t, ps in by_topic.items()],
    }
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


HANDLERS: Final[Mapping[int, tuple[JobHandler[FetchContext], bool]]] = {
    kp.FETCH: (fetch, True),
    kp.LIST_OFFSETS: (list_offsets, False),
}
"""What serves Fetch and ListOffsets. Fetch is ordered only for its admission (room for its answer, taken in
request order); the rest runs beside the connection's other requests (see ``KafkaServer``)."""
