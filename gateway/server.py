"""The Kafka listener: connections, frames, bounds, and the order of answers.

Per connection:

- a frame is a 4-byte size then the request; a size below a request header or above ``max_frame_bytes``
  closes the connection, as does a frame that does not parse, an API key or version the gateway does not
  translate (ApiVersions excepted: it is answered with the versions served, KIP-511), a request before
  SASL authentication when SASL is on, or a frame whose body does not arrive within ``frame_s``. Kafka
  brokers do the same; nothing a client sends raises further;
- requests are read while fewer than ``max_in_flight`` of them await their answers and their bytes fit the
  connection's ``max_buffered_bytes`` and every connection's ``max_total_buffered_bytes``; past that the
  connection is not read, and the client's TCP window closes (backpressure). The record bytes of Fetch
  answers count in both budgets too, from the broker's answer until the client's answer is written: a fetch
  is admitted with room for its answer, in request order, and asks its brokers for no more (``fetch.py``).
  A slow reader of answers stalls the same way, since answers leave in request order (the protocol's rule)
  and each write waits for the socket to drain. So a gateway holds at most
  ``min(connections * max_buffered_bytes, max_total_buffered_bytes)`` of requests and records (the memory
  bound ``gateway/README.md`` states);
- requests are served concurrently, except Produce, SASL and a Fetch's admission: those run their first
  part before the next frame is read, so batches reach brokers in the order the client sent them, and room
  is given in request order (an answer never waits for room that answers behind it hold).

Each connection also says whether its client produces or consumes (Tencent's pproxy/cproxy, without two
proxies): a connection is a producer's from its first Produce or InitProducerId, a consumer's from its
first Fetch, ListOffsets, FindCoordinator or group request. A connection that has not shown it yet takes
what other connections from the same host with the same client id showed, and otherwise the producer's
metadata: a producer must never pick a partition that takes no writes, while a consumer shown a leaderless
read-only partition asks again at once (on a connection that by then is known as a consumer's).
"""

from __future__ import annotations

import asyncio
import inspect
import itertools
import logging
import ssl
from collections import OrderedDict, deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from kafka_wire import protocol as kp

log = logging.getLogger(__name__)

Role = Literal["producer", "consumer"]
Handler = Callable[["ClientConnection", kp.Request], Awaitable[Any]]
"""Serves one API key: a coroutine of the connection and the request (bound to what it may use, ``context.py``)."""

STREAM_LIMIT: Final = 64 * 1024
"""A connection's read-ahead: its reader stops reading the socket once it holds twice this (asyncio's
``StreamReader``), so what a connection costs beyond its ``Limits`` is this, not what its client sends. A
longer frame is still read whole (the reader resumes the socket to complete it)."""
NO_RESPONSE: Final[object] = object()
"""A handler's result when the protocol sends no answer (Produce with acks=0)."""
MAX_REMEMBERED_CLIENTS: Final = 10_000
"""(host, client id) pairs remembered (least recently seen forgotten)."""
MAX_TOPICS_TOLD: Final = 1_000
"""Topics whose partition count is remembered per client."""
ANSWER_AFTER_CLOSE_S: Final = 5.0
"""How long the answers of requests read before a client closed its side may take to go out."""


@dataclass(frozen=True, slots=True)
class Limits:
    max_frame_bytes: int = 16 * 1024 * 1024
    """Largest request frame (Kafka's socket.request.max.bytes is 100 MB; clients send 1 MB by default)."""
    max_in_flight: int = 64
    """Requests of one connection read and not yet answered."""
    max_buffered_bytes: int = 64 * 1024 * 1024
    """Bytes of request frames of one connection read and not yet answered, with its Fetch answers' records."""
    max_total_buffered_bytes: int = 512 * 1024 * 1024
    """The same, across every connection."""
    max_connections: int = 10_000
    max_fetch_bytes: int = 64 * 1024 * 1024
    """Most record bytes one Fetch answer carries per broker asked (a client's max_bytes above is lowered)."""
    idle_s: float = 600.0
    """A connection with no request for this long is closed (Kafka's connections.max.idle.ms)."""
    frame_s: float = 60.0
    """A frame whose size came but whose body does not arrive whole within this long closes the connection
    (what a slow-loris client holds is then bounded in time as well as in bytes)."""


class ByteBudget:
    """Bytes that may be held at once (a connection's, or every connection's: ``Limits``), taken before they
    are held and given back after; the coroutines of one event loop wait in turn for room."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def room(self) -> int:
        return max(0, self.limit - self.used)

    def fits(self, n: int) -> bool:
        """Whether ``n`` more bytes fit (anything fits while nothing is held: one item larger than the whole
        budget still goes)."""
        return not self.used or self.used + n <= self.limit

    async def wait_for_room(self, n: int) -> None:
        """Until ``n`` bytes fit."""
        while not self.fits(n):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                if not waiter.done():
                    waiter.cancel()

    def take(self, n: int) -> None:
        self.used += n

    def give(self, n: int) -> None:
        """Give back ``n`` bytes (on the loop's thread, done-callbacks included: nothing here is locked)."""
        if n:
            self.used -= n
            while self._waiters:
                waiter = self._waiters.popleft()
                if not waiter.done():
                    waiter.set_result(None)


class Held:
    """A handler's answer with the record bytes it holds in the connection's budgets until it is written."""

    __slots__ = ("answer", "held")

    def __init__(self, answer: Any, held: int) -> None:
        self.answer = answer
        self.held = held


@dataclass(slots=True)
class _Client:
    roles: set[Role]
    told: dict[str, int]  # topic -> partition count this client was last told (in Metadata)


class ClientMemory:
    """What connections from (host, client id) showed and were told, across their connections: the roles
    they showed (for a connection that has not shown one) and the partition counts they were given (so a
    producer whose topic has grown since is asked to refresh: a scale-up reaches it at once, not after its
    metadata.max.age.ms)."""

    def __init__(self) -> None:
        self._clients: OrderedDict[tuple[str, str | None], _Client] = OrderedDict()

    def _client(self, key: tuple[str, str | None]) -> _Client:
        client = self._clients.get(key)
        if client is None:
            client = self._clients[key] = _Client(set(), {})
            while len(self._clients) > MAX_REMEMBERED_CLIENTS:
                self._clients.popitem(last=False)
        else:
            self._clients.move_to_end(key)
        return client

    def note(self, key: tuple[str, str | None], role: Role) -> None:
        self._client(key).roles.add(role)

    def roles(self, key: tuple[str, str | None]) -> set[Role]:
        client = self._clients.get(key)
        return client.roles if client is not None else set()

    def told(self, key: tuple[str, str | None], topic: str, partitions: int) -> None:
        told = self._client(key).told
        if topic in told or len(told) < MAX_TOPICS_TOLD:
            told[topic] = partitions

    def grown(self, key: tuple[str, str | None], topic: str, partitions: int) -> bool:
        """Whether ``topic`` has more partitions than this client was told: True once per growth."""
        client = self._clients.get(key)
        if client is None:
            return False
        told = client.told.get(topic)
        if told is None or told >= partitions:
            return False
        client.told[topic] = partitions
        return True


class ClientConnection:
    """What the gateway knows of one client connection."""

    _keys = itertools.count()

    def __init__(
        self, peer_host: str, memory: ClientMemory, budget: ByteBudget | None = None, shared: ByteBudget | None = None
    ) -> None:
        self.key = next(self._keys)
        self.budget = budget or ByteBudget(Limits().max_buffered_bytes)
        """This connection's bytes held (``Limits.max_buffered_bytes``)."""
        self.shared = shared or ByteBudget(Limits().max_total_buffered_bytes)
        """Every connection's (``Limits.max_total_buffered_bytes``)."""
        self.peer_host = peer_host
        self.client_id: str | None = None
        self.role: Role | None = None
        self.memory = memory
        self.sasl_mechanism: str | None = None
        self.authenticated = False
        self.admin = False
        self.principal: str | None = None
        self.close_after_response = False
        self.parked_fetches: dict[Any, tuple[Any, asyncio.Future[Any]]] = {}
        """Per upstream broker, the part of a fetch still under way when its answer went out (``fetch.fetch``):
        its result is (answers, record bytes held in this connection's budgets)."""

    def saw(self, role: Role) -> None:
        if self.role != role:
            self.role = role
            self.memory.note((self.peer_host, self.client_id), role)

    def producer_view(self) -> bool:
        if self.role is not None:
            return self.role == "producer"
        return self.memory.roles((self.peer_host, self.client_id)) != {"consumer"}

    @property
    def client_key(self) -> tuple[str, str | None]:
        return (self.peer_host, self.client_id)

    # -- bytes held -----------------------------------------------------------------------------------
    async def reserve(self, want: int, timeout_s: float) -> int:
        """Room for up to ``want`` bytes in both budgets, taken: what there is once there is some (at most
        ``want``), or 0 when none came within ``timeout_s``."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        while True:
            granted = min(want, self.budget.room(), self.shared.room())
            if granted > 0 or want <= 0:
                self.hold(max(0, granted))
                return max(0, granted)
            full = self.budget if not self.budget.room() else self.shared
            try:
                await asyncio.wait_for(full.wait_for_room(1), max(0.0, deadline - loop.time()))
            except TimeoutError:
                return 0

    def fits(self, n: int) -> bool:
        """Whether ``n`` more bytes fit both budgets."""
        return self.budget.fits(n) and self.shared.fits(n)

    def hold(self, n: int) -> None:
        """Count ``n`` more bytes held without waiting (a broker may answer one batch past what was asked)."""
        self.budget.take(n)
        self.shared.take(n)

    def release(self, n: int) -> None:
        self.budget.give(n)
        self.shared.give(n)

    def release_when_done(self, answer: Any) -> None:
        """Give back what ``answer`` (a handler's, maybe not done yet) holds, once it is done: it will never be
        written (the connection closed)."""
        if isinstance(answer, Held):
            self.release(answer.held)
        elif isinstance(answer, asyncio.Future):
            answer.add_done_callback(self._release_result)

    def _release_result(self, future: asyncio.Future[Any]) -> None:
        if not future.cancelled() and future.exception() is None and isinstance(future.result(), Held):
            self.release(future.result().held)

    def drop_part(self, part: asyncio.Future[Any]) -> None:
        """A fetch part nobody will take (parked, then not asked for again): it gives back what it holds once
        done (it is not cancelled: its broker connection is mid-request)."""
        part.add_done_callback(self._release_part)

    def _release_part(self, part: asyncio.Future[Any]) -> None:
        if not part.cancelled() and part.exception() is None:
            self.release(part.result()[1])

    def close(self) -> None:
        """The connection ended: the fetch parts parked on it are dropped."""
        for _key, part in self.parked_fetches.values():
            self.drop_part(part)
        self.parked_fetches = {}


@dataclass(slots=True)
class _InFlight:
    request: kp.Request | None  # None: an answer already encoded (``frame``)
    answer: Awaitable[Any] | None
    size: int
    frame: bytes | bytearray | None = None


def served_versions(api_keys: Iterable[int], sasl: bool) -> dict[int, tuple[int, int]]:
    """What ApiVersions advertises: the versions of ``api_keys`` the gateway translates, and SASL's when on."""
    keys = set(api_keys)
    versions = {k: v for k, v in kp.SERVED_VERSIONS.items() if k in keys}
    if sasl:
        versions.update(kp.SASL_VERSIONS)
    return versions


class KafkaServer:
    def __init__(
        self,
        handlers: dict[int, tuple[Handler, bool]],
        limits: Limits,
        ssl_context: ssl.SSLContext | None = None,
        sasl: bool = False,
    ) -> None:
        """``handlers``: per API key, the handler and whether it is *ordered* (its result is awaited before
        the next frame is read, and is itself what completes the answer)."""
        self.handlers = handlers
        self.versions = served_versions(handlers, sasl)
        self.limits = limits
        self.ssl_context = ssl_context
        self.sasl = sasl
        self.clients = ClientMemory()
        self.budget = ByteBudget(limits.max_total_buffered_bytes)
        """Bytes every connection holds together (``Limits.max_total_buffered_bytes``)."""
        self.connections = 0
        self.requests = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def bind(self, host: str, port: int) -> int:
        """Bind without accepting yet (the gateway registers first); returns the port (useful with port 0)."""
        self._server = await asyncio.start_server(
            self._accept, host, port, ssl=self.ssl_context, limit=STREAM_LIMIT, reuse_address=True, start_serving=False
        )
        return int(self._server.sockets[0].getsockname()[1])

    async def serve(self) -> None:
        assert self._server is not None
        await self._server.start_serving()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if self.connections >= self.limits.max_connections:
            log.warning("refusing a connection: %d open already", self.connections)
            writer.close()
            return
        self._tasks.add(task)
        self.connections += 1
        peer = writer.get_extra_info("peername")
        conn = ClientConnection(
            str(peer[0]) if peer else "?", self.clients, ByteBudget(self.limits.max_buffered_bytes), self.budget
        )
        try:
            await self._serve(conn, reader, writer)
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.connections -= 1
            self._tasks.discard(task)
            conn.close()
            writer.close()

    async def _serve(self, conn: ClientConnection, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        limits = self.limits
        answers = _Answers(conn, writer, limits.max_in_flight)
        answering = asyncio.ensure_future(answers.run())
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(4), limits.idle_s)
                size = kp.SIZE.unpack(head)[0]
                if not kp.REQUEST_PREFIX.size <= size <= limits.max_frame_bytes:
                    log.info(
                        "%s: closing: a frame of %d bytes (allowed %d to %d)",
                        conn.peer_host,
                        size,
                        kp.REQUEST_PREFIX.size,
                        limits.max_frame_bytes,
                    )
                    return
                if not answers.room_now(size) and not await _unless_done(answering, answers.room_for(size)):
                    return  # it can answer no more: its writer is closed
                conn.hold(size)
                try:
                    frame = await asyncio.wait_for(reader.readexactly(size), limits.frame_s)
                except TimeoutError:
                    log.info("%s: closing: a frame of %d bytes not received within %.0f s", conn.peer_host, size,
                             limits.frame_s)  # fmt: skip
                    conn.release(size)
                    return
                except BaseException:
                    conn.release(size)
                    raise
                try:
                    item = await self._request(conn, frame, size)
                except BaseException:
                    conn.release(size)
                    raise
                if item is None:
                    conn.release(size)
                    return
                answers.add(item)
                self.requests += 1
        finally:
            await answers.close(answering)

    async def _request(self, conn: ClientConnection, frame: bytes, size: int) -> _InFlight | None:
        """Parse and start one request; None closes the connection."""
        prefix = kp.request_prefix(frame)
        versions = self.versions
        served = versions.get(prefix.api_key)
        if served is None or not served[0] <= prefix.api_version <= served[1]:
            if prefix.api_key == kp.API_VERSIONS:
                return _InFlight(None, None, size, kp.encode_unsupported_api_versions(prefix.correlation_id, versions))
            log.info(
                "%s: closing: %s v%d is not served", conn.peer_host, kp.api_name(prefix.api_key), prefix.api_version
            )
            return None
        try:
            request = kp.decode_request(frame, prefix)
        except kp.ProtocolError as e:
            log.info("%s: closing: %s", conn.peer_host, e)
            return None
        if conn.client_id is None:
            conn.client_id = request.client_id
        if self.sasl and not conn.authenticated and prefix.api_key not in (kp.API_VERSIONS, *kp.SASL_VERSIONS):
            log.info("%s: closing: %s before SASL authentication", conn.peer_host, kp.api_name(prefix.api_key))
            return None
        handler, ordered = self.handlers[prefix.api_key]
        if ordered:
            answer = await handler(conn, request)
            if not inspect.isawaitable(answer):
                answer = done(answer)
        else:
            answer = asyncio.ensure_future(handler(conn, request))
        return _InFlight(request, answer, size)


class _Answers:
    """A connection's requests read and not answered yet, answered in request order (the protocol's rule):
    each answer is awaited, encoded, written, and what it held given back once the socket took it."""

    def __init__(self, conn: ClientConnection, writer: asyncio.StreamWriter, max_in_flight: int) -> None:
        self.conn, self.writer, self.max_in_flight = conn, writer, max_in_flight
        self.pending: deque[_InFlight] = deque()
        self._room = asyncio.Condition()  # for a place among the max_in_flight
        self._ready = asyncio.Event()
        self._closing = False

    def add(self, item: _InFlight) -> None:
        self.pending.append(item)
        self._ready.set()

    def room_now(self, size: int) -> bool:
        """Whether a request of ``size`` bytes may be read at once."""
        return len(self.pending) < self.max_in_flight and self.conn.fits(size)

    async def room_for(self, size: int) -> None:
        """Until a request of ``size`` bytes may be read: a place among ``max_in_flight``, its bytes in both
        budgets."""
        conn = self.conn
        while not self.room_now(size):
            async with self._room:
                while len(self.pending) >= self.max_in_flight:
                    await self._room.wait()
            await conn.budget.wait_for_room(size)
            await conn.shared.wait_for_room(size)

    async def run(self) -> None:
        try:
            await self._in_order()
        except BaseException:
            self.writer.close()  # the reading side then ends too
            raise

    async def _in_order(self) -> None:
        pending, conn, writer = self.pending, self.conn, self.writer
        while True:
            while not pending:
                if self._closing:
                    return
                self._ready.clear()
                await self._ready.wait()
            item = pending[0]
            frame = item.frame
            held = 0
            if item.answer is not None:
                result = await item.answer
                if isinstance(result, Held):
                    result, held = result.answer, result.held
                request = item.request
                assert request is not None
                if result is not NO_RESPONSE:
                    frame = kp.encode_response(request.api_key, request.api_version, request.correlation_id, result)
                del result
            # From here the answer is only its frame, then what the socket has not taken of it: nothing else
            # keeps its records while a slow reader drains it (they stay counted until it has).
            pending.popleft()
            size = item.size + held
            del item
            try:
                if frame is not None:
                    writer.write(frame)
                    frame = None
                    await writer.drain()
            finally:
                conn.release(size)
            async with self._room:
                self._room.notify()
            if conn.close_after_response:
                raise ConnectionResetError("closing after a failed authentication")

    async def close(self, answering: asyncio.Future[None]) -> None:
        """The reading side ended: the answers due go out (``_finish``); what the others hold goes back (an
        answer's once it is done)."""
        self._closing = True
        self._ready.set()
        await _finish(self.conn, answering)
        for left in self.pending:
            self.conn.release(left.size)
            if left.answer is not None:
                self.conn.release_when_done(left.answer)


async def _unless_done(answering: asyncio.Future[None], waiting: Awaitable[None]) -> bool:
    """Wait for ``waiting`` unless ``answering`` ends first (False: then the wait is dropped)."""
    task = asyncio.ensure_future(waiting)
    try:
        await asyncio.wait({task, answering}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        if not task.done():
            task.cancel()
    if task.cancelled():
        return False
    task.result()  # its exception, if any
    return True


async def _finish(conn: ClientConnection, answering: asyncio.Future[None]) -> None:
    """The end of a connection's reading side: its answers still due go out (a client may half-close after
    its last request), unless it is closed for a failed authentication."""
    if not answering.done():
        if conn.close_after_response:
            answering.cancel()
        else:
            try:
                await asyncio.wait_for(answering, ANSWER_AFTER_CLOSE_S)
            except (TimeoutError, ConnectionError, asyncio.CancelledError):
                pass
            except Exception:
                log.exception("%s: answering failed", conn.peer_host)
    elif not answering.cancelled() and answering.exception() is not None:
        error = answering.exception()
        if not isinstance(error, ConnectionError):
            log.error("%s: answering failed: %r", conn.peer_host, error, exc_info=error)


def done(value: Any) -> asyncio.Future[Any]:
    """A future that already holds ``value``: an answer ready at once, where an answer may be awaited later."""
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    future.set_result(value)
    return future
