"""The highest-rate writes, served on the leader without FastAPI's router and dependency solving.

Measured (py-spy on the leader, 64 clients toggling partition states, BENCHMARKS.md): the leader's event-loop
thread is saturated, and 56 % of its time per write went to FastAPI/Starlette routing (the included
router matches every request twice, route by route) and dependency solving, against 14 % in the write
itself. ``HotWrites`` answers the common case of a few write routes directly:

- on the leader; a follower passes the request on to the leader (``LeaderForwarder``, as the FastAPI
  routes do) without parsing it;
- only a well-formed request: a JSON body that its pydantic model accepts and path parameters of the
  expected shape. Anything else, including every error FastAPI would report, is handed to FastAPI
  unchanged (with the body it already read), so error answers have exactly one source;
- the same command, reply body, idempotency and problem+json as the FastAPI route, because both use the
  route's one ``WritePlan`` function and this module's ``write_response``.

It sits inside the auth and limit middlewares (``controller/app.py`` adds it first), so tokens, body
limits and latency metrics apply to it unchanged; the FastAPI routes stay declared for OpenAPI.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Final

import orjson
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metadata_log import commands
from metadata_log.codec import pack
from metadata_log.errors import KfedError, OutcomeUnknown, Unavailable
from metadata_log.image import MetadataImage

from . import problems
from .service import ControllerService, WriteReply, check_idempotency_key, fingerprint

if TYPE_CHECKING:
    import aiohttp

log = logging.getLogger(__name__)

MSGPACK: Final = "application/msgpack"
FORWARDED_HEADER: Final = "X-Kfed-Forwarded-By"  # on a request a follower forwarded to the leader


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What a write route commits (``command``) and how its reply is rebuilt from an image (``render``)."""

    command: Callable[[MetadataImage], commands.Result]
    render: Callable[[MetadataImage], dict[str, Any]]


def encode(body: Any, msgpack: bool, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    if msgpack:
        return Response(pack(body), status_code=status, media_type=MSGPACK, headers=headers)
    return Response(orjson.dumps(body), status_code=status, media_type="application/json", headers=headers)


def write_response(reply: WriteReply, msgpack: bool, status: int = 200) -> Response:
    body = {**reply.body, "offset": reply.offset}
    headers = {"Idempotent-Replayed": "true"} if reply.replayed else None
    return encode(body, msgpack, status, headers)


async def commit(
    service: ControllerService, plan: WritePlan, key: str | None, method: str, path: str, body: bytes
) -> WriteReply:
    """Commit ``plan`` on this (leader) node; the request's fingerprint binds an Idempotency-Key to it."""
    key = check_idempotency_key(key)
    fp = fingerprint(method, path, body) if key is not None else ""
    return await service.write(plan.command, plan.render, key, fp)


class LeaderForwarder:
    """Sends a request a follower cannot answer (a write, a lease, a group call) on to the leader, and its
    answer back. Used by the FastAPI routes and by ``HotWrites`` on followers.

    Through aiohttp, not httpx: httpcore's pool checks every connection (a ``poll()`` on its socket) for
    every request, so with the dozens of writes a busy follower has in flight each forwarded write cost
    ~1 ms of the follower's CPU, more than the leader spent committing it (py-spy: 29 % of a forwarding
    follower's samples in ``_assign_requests_to_connections``; encode/httpcore#1035 and #924 are open)."""

    PASSED_ON: Final = ("content-type", "accept", "idempotency-key", "authorization")
    PASSED_BACK: Final = ("content-type", "retry-after", "idempotent-replayed")
    KEEPALIVE_S: Final = 4.0
    """How long an idle connection to the leader is reused: under uvicorn's 5 s, so the leader never closes
    one just as a request goes out on it."""
    MAX_CONNECTIONS: Final = 256

    def __init__(self, service: ControllerService, timeout_s: float, verify: ssl.SSLContext | bool = True) -> None:
        self.service = service
        self.timeout_s = timeout_s
        self.verify = verify
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        """The session, made on first use: aiohttp binds it to the running loop. aiohttp is imported then
        too (~0.2 s): a node that never forwards, like the leader, or a follower catching up after a
        restart, does not pay for it at start."""
        import aiohttp

        if self._session is None:
            session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    limit=self.MAX_CONNECTIONS, keepalive_timeout=self.KEEPALIVE_S, ssl=self.verify
                ),
                # sock_connect, not connect: aiohttp's connect also bounds the wait for a free connection
                # of the pool, which a burst of slow commits can make longer than a second
                timeout=aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=1.0),
                auto_decompress=False,
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),  # pass on only ours
            )
            # aiohttp sends a PUT or DELETE again when the connection drops before the answer (RFC 9112
            # allows it for idempotent methods). A write the leader committed would then get the answer of
            # its repeat (a 409 or a 404) instead of "outcome unknown". aiohttp's own test client turns the
            # retry off through this attribute; there is no public switch (tested).
            session._retry_connection = False
            self._session = session
        return self._session

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    async def __call__(
        self, method: str, raw_path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> Response:
        """``raw_path``: as received, still percent-encoded; ``headers``: looked up by lower-case name."""
        if headers.get(FORWARDED_HEADER.lower()):
            raise Unavailable("leadership moved while the write was forwarded", retry_after_s=0.2)
        leader = self.service.leader()
        if leader is None:
            raise Unavailable("no leader elected yet", retry_after_s=1.0)
        onward = {name: value for name in self.PASSED_ON if (value := headers.get(name)) is not None}
        onward[FORWARDED_HEADER] = str(self.service.node_id)
        url = leader.http + raw_path + (f"?{query}" if query else "")
        client = self._client()
        import aiohttp  # imported by _client()
        import yarl

        try:
            async with client.request(method, yarl.URL(url, encoded=True), data=body, headers=onward) as upstream:
                content = await upstream.read()
                back = {name: value for name in self.PASSED_BACK if (value := upstream.headers.get(name)) is not None}
                status = upstream.status
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as e:  # nothing was sent
            raise Unavailable(f"leader {leader.id} unreachable: {type(e).__name__}", retry_after_s=0.5) from None
        except (aiohttp.ClientError, TimeoutError) as e:  # sent, then no answer: it may have committed
            raise OutcomeUnknown(
                f"the leader did not answer ({type(e).__name__}); retry with the same Idempotency-Key"
            ) from None
        return Response(content, status_code=status, headers=back)


@dataclass(frozen=True, slots=True)
class HotRoute:
    """One write route: its FastAPI path template, body model and plan (called with the path parameters
    by name and ``body=``). ``int_params`` are path parameters FastAPI declares as ``int``."""

    method: str
    template: str
    body: type[BaseModel]
    plan: Callable[..., WritePlan]
    status: int = 200
    int_params: frozenset[str] = frozenset()
    # the template split once: (literal segment, None) or (None, parameter name)
    segments: tuple[tuple[str | None, str | None], ...] = field(init=False)

    def __post_init__(self) -> None:
        split = tuple((None, s[1:-1]) if s.startswith("{") else (s, None) for s in self.template.split("/"))
        object.__setattr__(self, "segments", split)

    def match(self, method: str, path: str) -> dict[str, Any] | None:
        got = path.split("/")
        if method != self.method or len(got) != len(self.segments):
            return None
        params: dict[str, Any] = {}
        for (literal, name), seg in zip(self.segments, got, strict=True):
            if name is None:
                if seg != literal:
                    return None
            elif not seg:
                return None
            elif name in self.int_params:
                if not seg.isascii() or not seg.isdigit():
                    return None  # FastAPI reports it (or another route takes it)
                params[name] = int(seg)
            else:
                params[name] = seg
        return params


@dataclass(frozen=True, slots=True)
class _RouteLabel:
    path: str  # what the latency metric labels a request with (FastAPI's route object has the same)


class HotWrites:
    """ASGI middleware: serves ``routes`` on the leader for well-formed JSON requests and passes them on to the
    leader from a follower; anything else goes to ``app`` (FastAPI)."""

    def __init__(
        self, app: ASGIApp, service: ControllerService, routes: list[HotRoute], to_leader: LeaderForwarder
    ) -> None:
        self.app = app
        self.service = service
        self.routes = routes
        self.to_leader = to_leader
        self.labels = {r.template: _RouteLabel(r.template) for r in routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        for route in self.routes:
            params = route.match(scope["method"], path)
            if params is not None:
                break
        else:
            await self.app(scope, receive, send)
            return
        headers = _first_headers(scope["headers"])
        if not headers.get("content-type", "").startswith("application/json"):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except KfedError as e:  # the body limit of the outer middleware
            await problems.kfed_error_response(e)(scope, receive, send)
            return
        if not self.service.is_leader():  # the leader validates it; a follower only passes it on
            scope["route"] = self.labels[route.template]
            raw_path = scope.get("raw_path", b"").decode("latin-1") or path
            try:
                forwarded = await self.to_leader(
                    scope["method"], raw_path, scope.get("query_string", b"").decode("latin-1"), headers, body
                )
            except KfedError as e:
                forwarded = problems.kfed_error_response(e)
            await forwarded(scope, receive, send)
            return
        try:
            model = route.body.model_validate_json(body)
        except ValidationError:  # FastAPI answers with its own error, from the same bytes
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = self.labels[route.template]
        try:
            reply = await commit(
                self.service,
                route.plan(**params, body=model),
                headers.get("idempotency-key"),
                scope["method"],
                scope.get("root_path", "") + path,
                body,
            )
            response = write_response(reply, MSGPACK in headers.get("accept", ""), route.status)
        except KfedError as e:
            response = problems.kfed_error_response(e)
        except Exception as e:  # the same answer as FastAPI's catch-all handler
            log.exception("unhandled error on %s %s", scope["method"], path)
            response = problems.problem(500, "Internal error", f"{type(e).__name__}; see the node's log")
        await response(scope, receive, send)


def _first_headers(raw: list[tuple[bytes, bytes]]) -> dict[str, str]:
    """Header name (lower case, as ASGI gives it) -> its first value, as Starlette's ``Headers.get`` answers."""
    out: dict[str, str] = {}
    for name, value in raw:
        out.setdefault(name.decode("latin-1"), value.decode("latin-1"))
    return out


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    """A receive channel that gives ``body`` once, then whatever the client sends (its disconnect)."""
    sent = False

    async def again() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again
