"""A fetch's part still under way at one broker when the answer goes out is parked, not dropped
(``gateway/fetch.fetch``): the client's next fetch of the same offsets takes it. Every part asks its broker
for no more than the room left in the connection's budgets and holds its records there until the answer is
written, or until it is dropped. The brokers here are stand-ins that count the fetches they are sent; the
gateway's real consumer paths, on real brokers and clients, are in ``tests/gateway``."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Collection
from types import SimpleNamespace
from typing import Any

from gateway import fetch
from gateway.context import FetchContext
from gateway.members import Members
from gateway.server import ByteBudget, ClientConnection, ClientMemory, Held, Limits
from gateway.view import PartitionRoute
from metadata_log.image import EMPTY_IMAGE


@dataclasses.dataclass
class Partition:  # the fields of a broker's fetch answer the gateway passes on
    partition_index: int
    error_code: int = 0
    high_watermark: int = 100
    records: bytes = b""


class Broker:
    """Answers each fetch with ``records`` for every partition asked, once ``ready`` is set."""

    def __init__(self, records: bytes, ready: bool) -> None:
        self.records = records
        self.ready = asyncio.Event()
        if ready:
            self.ready.set()
        self.asked: list[list[tuple[int, int]]] = []  # per fetch: (physical partition, offset)
        self.max_bytes: list[int] = []  # per fetch

    def version(self, api_key: int) -> int:
        return 12

    async def call(self, api_key: int, version: int, body: dict[str, Any], timeout_s: float) -> Any:
        asked = [(p["partition"], p["fetch_offset"]) for t in body["topics"] for p in t["partitions"]]
        self.asked.append(asked)
        self.max_bytes.append(body["max_bytes"])
        await self.ready.wait()
        partitions = [Partition(partition, records=self.records) for partition, _ in asked]
        return SimpleNamespace(error_code=0, responses=[SimpleNamespace(topic="T", partitions=partitions)])


class Cluster:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker

    def known_leader(self, topic: str, partition: int, now: float) -> str:
        return "leader"

    def forget_leaders(self, topic: str) -> None:
        pass

    @contextlib.asynccontextmanager
    async def fetch_connection(self, address: str) -> AsyncIterator[Broker]:
        yield self.broker


def context(c1: Broker, c2: Broker) -> FetchContext:
    """A fetch's context over stand-in sub-clusters: logical T/0 is physical T/0 on c1, logical T/1 physical
    T/0 on c2."""
    clusters = {"c1": Cluster(c1), "c2": Cluster(c2)}
    placements = {("T", 0): PartitionRoute("T", 0, "c1", "T", 0, True, True),
                  ("T", 1): PartitionRoute("T", 1, "c2", "T", 0, True, True)}  # fmt: skip
    view = SimpleNamespace(placement=lambda t, p: placements.get((t, p)), bootstrap_of=lambda c: f"{c}:9092",
                           image=EMPTY_IMAGE)  # fmt: skip
    upstream = SimpleNamespace(cluster=lambda cluster_id, bootstrap: clusters[cluster_id])
    return FetchContext(view=lambda: view, resolve=followed, upstream=upstream, limits=Limits(), members=Members())  # type: ignore[arg-type]  # the stand-ins


async def followed(names: Collection[str]) -> None:
    """Every topic is followed (as a gateway's resolve finds them)."""


def fetch_request(offset_0: int, offset_1: int) -> Any:
    partitions = [SimpleNamespace(partition=p, fetch_offset=o, partition_max_bytes=1 << 20, log_start_offset=-1)
                  for p, o in ((0, offset_0), (1, offset_1))]  # fmt: skip
    body = SimpleNamespace(session_id=0, max_wait=500, min_bytes=1, max_bytes=1 << 20, isolation_level=0,
                           topics=[SimpleNamespace(topic="T", partitions=partitions)])  # fmt: skip
    return SimpleNamespace(body=body)


async def fetched(ctx: FetchContext, conn: ClientConnection, request: Any) -> Any:
    """A fetch admitted (room for its answer), then answered, as the listener runs it."""
    return await (await fetch.fetch(ctx, conn, request))


def records_by_partition(held: Any) -> dict[int, bytes]:
    assert isinstance(held, Held)
    return {p["partition_index"]: p["records"] for t in held.answer["responses"] for p in t["partitions"]}


async def test_a_second_brokers_data_is_kept_for_the_next_fetch_of_the_same_offsets() -> None:
    c1, c2 = Broker(b"one", ready=True), Broker(b"two", ready=False)
    ctx = context(c1, c2)
    conn = ClientConnection("127.0.0.1", ClientMemory())

    first = await fetched(ctx, conn, fetch_request(5, 7))
    assert records_by_partition(first) == {0: b"one", 1: b""}, "answered with c1's data, c2 still fetching"
    c2.ready.set()  # c2's answer arrives after the client was answered
    await asyncio.sleep(0.01)

    second = await fetched(ctx, conn, fetch_request(6, 7))
    assert records_by_partition(second)[1] == b"two", "c2's data reached the client"
    assert c2.asked == [[(0, 7)]], "c2's parked part answered the second fetch: it was asked once"
    assert c1.asked == [[(0, 5)], [(0, 6)]]

    c2.ready.clear()
    third = asyncio.ensure_future(fetched(ctx, conn, fetch_request(6, 8)))
    await asyncio.sleep(0.05)
    c2.ready.set()
    await third
    assert c2.asked == [[(0, 7)], [(0, 8)]], "another offset is fetched anew"


async def test_a_fetch_asks_its_brokers_for_the_room_left_and_holds_their_records_until_written() -> None:
    c1, c2 = Broker(b"1234", ready=True), Broker(b"abcdef", ready=True)
    conn = ClientConnection("127.0.0.1", ClientMemory(), ByteBudget(1000), ByteBudget(8))
    answer = await fetched(context(c1, c2), conn, fetch_request(0, 0))
    assert isinstance(answer, Held) and answer.held == 10
    assert c1.max_bytes == c2.max_bytes == [4], "the room left, shared between the brokers asked"
    assert (conn.budget.used, conn.shared.used) == (10, 10), "held, one batch past its share (as Kafka answers)"
    conn.release(answer.held)  # the server does so once the answer is written
    assert (conn.budget.used, conn.shared.used) == (0, 0)


async def test_a_fetch_waits_for_room_while_the_budget_is_full() -> None:
    c1, c2 = Broker(b"1234", ready=True), Broker(b"abcd", ready=True)
    conn = ClientConnection("127.0.0.1", ClientMemory(), ByteBudget(100), ByteBudget(100))
    conn.hold(100)  # answers not written yet hold it all
    waiting = asyncio.ensure_future(fetched(context(c1, c2), conn, fetch_request(0, 0)))
    await asyncio.sleep(0.05)
    assert not waiting.done() and c1.asked == c2.asked == [], "no broker asked while there is no room"
    conn.release(100)
    answer = await waiting
    assert answer.held == 8 and conn.budget.used == 8
    assert c1.max_bytes == c2.max_bytes == [50]


async def test_a_fetch_that_gets_no_room_within_its_max_wait_is_answered_without_records() -> None:
    c1, c2 = Broker(b"1234", ready=True), Broker(b"abcd", ready=True)
    conn = ClientConnection("127.0.0.1", ClientMemory(), ByteBudget(100), ByteBudget(100))
    conn.hold(100)
    answer = await fetched(context(c1, c2), conn, fetch_request(0, 0))  # max_wait 500 ms
    assert records_by_partition(answer) == {0: b"", 1: b""} and answer.held == 0
    assert c1.asked == c2.asked == [], "no broker asked (each would answer a batch, whatever max_bytes says)"
    conn.release(100)


async def test_a_dropped_parked_part_gives_back_what_it_holds_once_its_broker_answers() -> None:
    c1, c2 = Broker(b"one", ready=True), Broker(b"two", ready=False)
    conn = ClientConnection("127.0.0.1", ClientMemory(), ByteBudget(1 << 30), ByteBudget(1 << 30))
    ctx = context(c1, c2)
    first = await fetched(ctx, conn, fetch_request(5, 7))
    conn.release(first.held)
    second = asyncio.ensure_future(fetched(ctx, conn, fetch_request(6, 9)))  # c2's parked part is dropped
    await asyncio.sleep(0.01)
    c2.ready.set()
    conn.release((await second).held)
    await asyncio.sleep(0.01)
    parked = sum(len(b"two") for _ in conn.parked_fetches.values())  # the new part, if it answered too late
    assert (conn.budget.used, conn.shared.used) == (parked, parked), "the dropped part held nothing more"
    conn.close()  # the connection ends: what is parked on it is dropped too
    await asyncio.sleep(0.01)
    assert (conn.budget.used, conn.shared.used) == (0, 0)
