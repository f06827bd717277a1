"""The gateway as a Kafka client of the sub-clusters: connections to their brokers, pipelined requests,
partition leaders and group coordinators learnt from the brokers themselves.

Per broker a gateway keeps:

- one *control* connection (Metadata, ListOffsets, offsets, coordinators), requests pipelined;
- ``PRODUCE_CONNECTIONS`` produce connections. A client connection's batches of one partition always use
  the same one (``data._lane``), and requests are written to it in the order they arrived: a broker answers
  one request per connection at a time and appends in that order, so each client's batches of a partition
  land in the order it sent them, while its other partitions and other clients do not wait for them;
- up to ``MAX_FETCH_CONNECTIONS`` fetch connections, each carrying one fetch at a time: a fetch can wait
  on the broker for ``max_wait_ms`` and must not hold up anything else.

Every request has a deadline; a broker that misses it loses the connection (a fresh one is opened on the
next request). Nothing here retries: the error goes back to the Kafka client, whose own retry is the
protocol's way to recover.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from metadata_log.errors import Unavailable

from . import protocol as kp
from .protocol import ErrorCode

log = logging.getLogger(__name__)

PREFERRED_VERSIONS: Final = {
    kp.API_VERSIONS: 3,
    kp.METADATA: 9,
    kp.PRODUCE: 9,
    kp.FETCH: 12,
    kp.LIST_OFFSETS: 7,
    kp.OFFSET_COMMIT: 8,
    kp.OFFSET_FETCH: 7,
    kp.FIND_COORDINATOR: 3,
    kp.INIT_PRODUCER_ID: 4,
}
"""The version the gateway speaks to brokers, per API, unless a broker's highest is lower. Topics by name
(Produce, Fetch under 13), flexible encodings where brokers since Kafka 2.4 have them."""

CLIENT_SOFTWARE: Final = {"client_software_name": "kfed-gateway", "client_software_version": "1"}
"""What ApiVersions v3+ says the gateway is. Apache Kafka refuses the request (INVALID_REQUEST) when these are
empty or not of the form ``[a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])?``; Tansu does not check them."""

PRODUCE_CONNECTIONS: Final = 4
MAX_FETCH_CONNECTIONS: Final = 32
"""Fetch connections per broker; a fetch finding them all busy waits for one (its own deadline applies)."""
CONNECT_TIMEOUT_S: Final = 5.0
REQUEST_TIMEOUT_S: Final = 30.0
MAX_RESPONSE_BYTES: Final = 256 * 1024 * 1024
"""Largest response frame read from a broker (fetches are bounded by their max_bytes well below this)."""
STREAM_LIMIT: Final = 4 * 2**20
"""Bytes buffered from a broker before pausing the socket: fetch answers run to megabytes."""
METADATA_MAX_AGE_S: Final = 30.0
"""How long partition leaders learnt from a broker are trusted without an error saying they moved."""


class UpstreamError(Unavailable):
    """A broker could not be reached, did not answer in time, or answered something unusable."""


@dataclass(slots=True)
class _Pending:
    correlation_id: int
    api_key: int
    api_version: int
    future: asyncio.Future[Any]


class BrokerConnection:
    """One TCP connection to a broker, requests pipelined and matched to responses in order."""

    def __init__(self, address: str, client_id: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self.address = address
        self.client_id = client_id
        self._ssl = ssl_context
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._pending: deque[_Pending] = deque()
        self._next_id = 0
        self._task: asyncio.Task[None] | None = None
        self.versions: dict[int, tuple[int, int]] = {}
        self.closed = False

    @property
    def in_flight(self) -> int:
        return len(self._pending)

    async def open(self) -> BrokerConnection:
        host, _, port = self.address.rpartition(":")
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(host.strip("[]"), int(port), ssl=self._ssl, limit=STREAM_LIMIT),
                CONNECT_TIMEOUT_S,
            )
        except (OSError, TimeoutError, ValueError) as e:
            raise UpstreamError(f"cannot connect to broker {self.address}: {type(e).__name__}: {e}") from None
        self._task = asyncio.get_running_loop().create_task(self._read_loop(), name=f"upstream {self.address}")
        try:
            await self._negotiate()
        except BaseException:
            self.close()
            raise
        return self

    async def _negotiate(self) -> None:
        """Learn the broker's API versions (KIP-511: a v0 reply when it does not speak ours)."""
        response = await self.call(kp.API_VERSIONS, PREFERRED_VERSIONS[kp.API_VERSIONS], CLIENT_SOFTWARE)
        if response.error_code == ErrorCode.unsupported_version:
            response = await self.call(kp.API_VERSIONS, 0, {})
        if response.error_code != ErrorCode.none:
            raise UpstreamError(f"broker {self.address} refused ApiVersions: {response.error_code.name}")
        self.versions = {int(k.api_key): (int(k.min_version), int(k.max_version)) for k in response.api_keys}

    def version(self, api_key: int) -> int:
        """The version to speak for ``api_key``: ours unless the broker's highest is lower."""
        ours = PREFERRED_VERSIONS[api_key]
        lo, hi = self.versions.get(api_key, (0, -1))
        kio_lo = (kp.kio_versions(api_key) or (0, -1))[0]
        version = min(ours, hi)
        if version < max(lo, kio_lo):
            raise UpstreamError(f"broker {self.address} does not serve {kp.api_name(api_key)} (versions {lo}-{hi})")
        return version

    def send(self, api_key: int, api_version: int, data: Any, expect_response: bool = True) -> asyncio.Future[Any]:
        """Write one request now (so requests go out in call order) and return the future of its response
        (already done with None when none is expected, as for produce with acks=0)."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        if self.closed or self._writer is None:
            future.set_exception(UpstreamError(f"connection to broker {self.address} is closed"))
            return future
        self._next_id = (self._next_id + 1) & 0x7FFFFFFF
        frame = kp.encode_request(api_key, api_version, self._next_id, self.client_id, data)
        self._writer.write(frame)
        if expect_response:
            self._pending.append(_Pending(self._next_id, api_key, api_version, future))
        else:
            future.set_result(None)
        return future

    async def call(self, api_key: int, api_version: int, data: Any, timeout_s: float = REQUEST_TIMEOUT_S) -> Any:
        """Send and wait for the response; ``UpstreamError`` (and the connection closed) past ``timeout_s``."""
        future = self.send(api_key, api_version, data)
        return await self.wait(future, timeout_s)

    async def wait(self, future: asyncio.Future[Any], timeout_s: float) -> Any:
        try:
            return await asyncio.wait_for(asyncio.shield(future), timeout_s)
        except TimeoutError:
            self.close(UpstreamError(f"broker {self.address} did not answer within {timeout_s:.1f} s"))
            raise UpstreamError(f"broker {self.address} did not answer within {timeout_s:.1f} s") from None

    async def _read_loop(self) -> None:
        assert self._reader is not None
        error: Exception = UpstreamError(f"broker {self.address} closed the connection")
        try:
            while True:
                size = kp.SIZE.unpack(await self._reader.readexactly(4))[0]
                if not 4 <= size <= MAX_RESPONSE_BYTES:
                    raise UpstreamError(f"broker {self.address} sent a response frame of {size} bytes")
                frame = await self._reader.readexactly(size)
                if not self._pending:
                    raise UpstreamError(f"broker {self.address} answered a request it was not sent")
                pending = self._pending.popleft()
                correlation_id, body = kp.decode_response(pending.api_key, pending.api_version, frame)
                if correlation_id != pending.correlation_id:
                    raise UpstreamError(
                        f"broker {self.address} answered {correlation_id} where {pending.correlation_id} was due"
                    )
                if not pending.future.done():
                    pending.future.set_result(body)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            error = UpstreamError(f"connection to broker {self.address} lost: {type(e).__name__}: {e}")
        except (UpstreamError, kp.ProtocolError) as e:
            error = UpstreamError(str(e))
        except asyncio.CancelledError:
            error = UpstreamError(f"connection to broker {self.address} closed")
        self.close(error)

    def close(self, error: Exception | None = None) -> None:
        if self.closed:
            return
        self.closed = True
        error = error or UpstreamError(f"connection to broker {self.address} closed")
        while self._pending:
            future = self._pending.popleft().future
            if not future.done():
                future.set_exception(error)
        if self._writer is not None:
            self._writer.close()
        if self._task is not None and self._task is not asyncio.current_task():
            self._task.cancel()


@dataclass(slots=True)
class _FetchPool:
    idle: list[BrokerConnection] = field(default_factory=list)
    opened: int = 0
    available: asyncio.Condition = field(default_factory=asyncio.Condition)


class ClusterClient:
    """What the gateway knows of one sub-cluster: its brokers, partition leaders and group coordinators as
    its brokers report them, and its connections."""

    def __init__(self, cluster_id: str, bootstrap: str, client_id: str, ssl_context: ssl.SSLContext | None) -> None:
        self.cluster_id = cluster_id
        self.bootstrap = bootstrap
        self._bootstrap = [a.strip() for a in bootstrap.split(",") if a.strip()]
        self._client_id = client_id
        self._ssl = ssl_context
        self._nodes: dict[int, str] = {}
        self._leaders: dict[tuple[str, int], int] = {}
        self._topics_age: dict[str, float] = {}
        self._coordinators: dict[str, str] = {}
        self._control: dict[str, BrokerConnection] = {}
        self._produce: dict[tuple[str, int], BrokerConnection] = {}
        self._fetch: dict[str, _FetchPool] = {}
        self._opening: dict[Any, asyncio.Future[BrokerConnection]] = {}
        self._refreshing: asyncio.Future[None] | None = None

    # -- connections -------------------------------------------------------------------------------
    async def _open(self, key: Any, address: str) -> BrokerConnection:
        """One connection for ``key``, opened once even when several callers ask at the same time."""
        opening = self._opening.get(key)
        if opening is None:
            opening = asyncio.ensure_future(BrokerConnection(address, self._client_id, self._ssl).open())
            self._opening[key] = opening
            opening.add_done_callback(lambda _f: self._opening.pop(key, None))
        return await asyncio.shield(opening)

    async def control(self, address: str) -> BrokerConnection:
        conn = self._control.get(address)
        if conn is None or conn.closed:
            conn = await self._open(("control", address), address)
            self._control[address] = conn
        return conn

    def produce_connection_ready(self, address: str, key: int) -> BrokerConnection | None:
        conn = self._produce.get((address, key % PRODUCE_CONNECTIONS))
        return conn if conn is not None and not conn.closed else None

    async def produce_connection(self, address: str, key: int) -> BrokerConnection:
        slot = (address, key % PRODUCE_CONNECTIONS)
        conn = self._produce.get(slot)
        if conn is None or conn.closed:
            conn = await self._open(("produce", slot), address)
            self._produce[slot] = conn
        return conn

    @contextlib.asynccontextmanager
    async def fetch_connection(self, address: str) -> AsyncIterator[BrokerConnection]:
        """A connection for one fetch, used by nobody else until it is done."""
        pool = self._fetch.setdefault(address, _FetchPool())
        async with pool.available:
            while not pool.idle and pool.opened >= MAX_FETCH_CONNECTIONS:
                await pool.available.wait()
            conn = pool.idle.pop() if pool.idle else None
            if conn is None:
                pool.opened += 1  # a slot for the connection opened below
        try:
            if conn is None or conn.closed:  # a closed idle one's slot is reused
                conn = await BrokerConnection(address, self._client_id, self._ssl).open()
        except BaseException:
            async with pool.available:
                pool.opened -= 1
                pool.available.notify()
            raise
        try:
            yield conn
        finally:
            async with pool.available:
                if conn.closed:
                    pool.opened -= 1
                else:
                    pool.idle.append(conn)
                pool.available.notify()

    # -- partition leaders ---------------------------------------------------------------------------
    def known_leader(self, topic: str, partition: int, now_s: float) -> str | None:
        """The broker address leading a physical partition, if known and fresh (no I/O)."""
        if now_s - self._topics_age.get(topic, -1e9) > METADATA_MAX_AGE_S:
            return None
        node = self._leaders.get((topic, partition))
        return self._nodes.get(node) if node is not None else None

    async def leader(self, topic: str, partition: int) -> str:
        loop = asyncio.get_running_loop()
        address = self.known_leader(topic, partition, loop.time())
        if address is None:
            await self.refresh([topic])
            address = self.known_leader(topic, partition, loop.time())
        if address is None:
            raise UpstreamError(f"cluster {self.cluster_id} reports no leader for {topic}/{partition}")
        return address

    def forget_leaders(self, topic: str) -> None:
        """A broker said a partition of ``topic`` moved: ask again on next use."""
        self._topics_age.pop(topic, None)

    async def refresh(self, topics: Sequence[str]) -> None:
        """Learn leaders for ``topics`` (coalesced: callers during a refresh wait for it and then, if their
        topics were not part of it, refresh again)."""
        while self._refreshing is not None:
            await asyncio.shield(self._refreshing)
            if all(t in self._topics_age for t in topics):
                return
        self._refreshing = asyncio.get_running_loop().create_future()
        try:
            await self._refresh(sorted(set(topics) | set(self._topics_age)))
        finally:
            self._refreshing.set_result(None)
            self._refreshing = None

    async def _refresh(self, topics: list[str]) -> None:
        last: Exception | None = None
        candidates = list(dict.fromkeys([*self._nodes.values(), *self._bootstrap]))
        for address in candidates:
            try:
                conn = await self.control(address)
                body = {"topics": [{"name": t} for t in topics], "allow_auto_topic_creation": False}
                response = await conn.call(kp.METADATA, conn.version(kp.METADATA), body)
            except UpstreamError as e:
                last = e
                continue
            now = asyncio.get_running_loop().time()
            self._nodes = {int(b.node_id): f"{b.host}:{b.port}" for b in response.brokers}
            for t in response.topics:
                if t.error_code != ErrorCode.none:
                    continue
                for p in t.partitions:
                    self._leaders[(t.name, int(p.partition_index))] = int(p.leader_id)
                self._topics_age[t.name] = now
            return
        raise UpstreamError(f"no broker of cluster {self.cluster_id} answered Metadata ({last})")

    # -- group coordinators --------------------------------------------------------------------------
    async def coordinator(self, group: str) -> BrokerConnection:
        address = self._coordinators.get(group)
        if address is None:
            conn = await self.control(await self._any_broker())
            response = await conn.call(
                kp.FIND_COORDINATOR, conn.version(kp.FIND_COORDINATOR), {"key": group, "key_type": 0}
            )
            if response.error_code != ErrorCode.none:
                raise UpstreamError(
                    f"cluster {self.cluster_id} has no coordinator for group {group!r}: {response.error_code.name}"
                )
            address = f"{response.host}:{response.port}"
            if len(self._coordinators) > 10_000:
                self._coordinators.clear()
            self._coordinators[group] = address
        return await self.control(address)

    def forget_coordinator(self, group: str) -> None:
        self._coordinators.pop(group, None)

    async def _any_broker(self) -> str:
        for address in [*self._control, *self._nodes.values(), *self._bootstrap]:
            conn = self._control.get(address)
            if conn is not None and not conn.closed:
                return address
        for address in self._bootstrap:
            try:
                await self.control(address)
                return address
            except UpstreamError:
                continue
        raise UpstreamError(f"no broker of cluster {self.cluster_id} is reachable ({self.bootstrap})")

    async def any_connection(self) -> BrokerConnection:
        return await self.control(await self._any_broker())

    def close(self) -> None:
        for conn in [*self._control.values(), *self._produce.values()]:
            conn.close()
        for pool in self._fetch.values():
            for conn in pool.idle:
                conn.close()


class Upstream:
    """The clients of every sub-cluster the gateway has talked to, by cluster id."""

    def __init__(self, client_id: str, ssl_context: ssl.SSLContext | None = None) -> None:
        self._client_id = client_id
        self._ssl = ssl_context
        self._clusters: dict[str, ClusterClient] = {}

    def cluster(self, cluster_id: str, bootstrap: str) -> ClusterClient:
        """The client of ``cluster_id``; a new one when its bootstrap servers changed in the log."""
        client = self._clusters.get(cluster_id)
        if client is None or client.bootstrap != bootstrap:
            if client is not None:
                client.close()
            client = self._clusters[cluster_id] = ClusterClient(cluster_id, bootstrap, self._client_id, self._ssl)
        return client

    def close(self) -> None:
        for client in self._clusters.values():
            client.close()
        self._clusters.clear()
