"""The highest-rate writes, served on the leader without FastAPI's router and dependency solving.

Measured (py-spy on the leader, 64 clients toggling partition states, BENCHMARKS.md): the leader's event-loop
thread is saturated, and 56 % of its time per write went to FastAPI/Starlette routing (the included
router matches every request twice, route by route) and dependency solving, against 14 % in the write
itself. ``HotWrites`` answers the common case of a few write routes directly:

- only on the leader (a follower's request goes on to FastAPI, which forwards it here);
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
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import orjson
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metadata_log import commands
from metadata_log.codec import pack
from metadata_log.errors import KfedError
from metadata_log.image import MetadataImage

from . import problems
from .service import ControllerService, WriteReply, check_idempotency_key, fingerprint

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

    def match(self, method: str, path: str) -> dict[str, Any] | None:
        if method != self.method:
            return None
        wanted, got = self.template.split("/"), path.split("/")
        if len(wanted) != len(got):
            return None
        params: dict[str, Any] = {}
        for want, seg in zip(wanted, got, strict=True):
            if want.startswith("{"):
                name = want[1:-1]
                if not seg:
                    return None
                if name in self.int_params:
                    if not seg.isascii() or not seg.isdigit():
                        return None  # FastAPI reports it (or another route takes it)
                    params[name] = int(seg)
                else:
                    params[name] = seg
            elif want != seg:
                return None
        return params


@dataclass(frozen=True, slots=True)
class _RouteLabel:
    path: str  # what the latency metric labels a request with (FastAPI's route object has the same)


class HotWrites:
    """ASGI middleware: serves ``routes`` on the leader for well-formed requests, else calls ``app``."""

    def __init__(self, app: ASGIApp, service: ControllerService, routes: list[HotRoute]) -> None:
        self.app = app
        self.service = service
        self.routes = routes
        self.labels = {r.template: _RouteLabel(r.template) for r in routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.service.is_leader():
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
        if not headers.get(b"content-type", b"").startswith(b"application/json"):
            await self.app(scope, receive, send)
            return
        try:
            body = await _read_body(receive)
        except KfedError as e:  # the body limit of the outer middleware
            await problems.kfed_error_response(e)(scope, receive, send)
            return
        try:
            model = route.body.model_validate_json(body)
        except ValidationError:  # FastAPI answers with its own error, from the same bytes
            await self.app(scope, _replay(body, receive), send)
            return
        scope["route"] = self.labels[route.template]
        key = headers.get(b"idempotency-key")
        try:
            reply = await commit(
                self.service,
                route.plan(**params, body=model),
                key.decode("latin-1") if key is not None else None,
                scope["method"],
                scope.get("root_path", "") + path,
                body,
            )
            response = write_response(reply, MSGPACK.encode() in headers.get(b"accept", b""), route.status)
        except KfedError as e:
            response = problems.kfed_error_response(e)
        except Exception as e:  # the same answer as FastAPI's catch-all handler
            log.exception("unhandled error on %s %s", scope["method"], path)
            response = problems.problem(500, "Internal error", f"{type(e).__name__}; see the node's log")
        await response(scope, receive, send)


def _first_headers(raw: list[tuple[bytes, bytes]]) -> dict[bytes, bytes]:
    """Header name -> its first value, as Starlette's ``Headers.get`` answers."""
    out: dict[bytes, bytes] = {}
    for name, value in raw:
        out.setdefault(name, value)
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
