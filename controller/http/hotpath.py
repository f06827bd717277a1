"""The hot path: leader-only routes answered before FastAPI routes them (ASGI middleware).

Under many small writes the leader's event-loop thread is saturated, and FastAPI/Starlette routing (the included
router matches every request twice, route by route) and dependency solving cost it several times what the write
itself does (a py-spy profile of the leader under the writes benchmark shows it). So, for the routes the
routers declare leader-only (``routing.py``, nothing listed here):

- on a follower, the request is passed on to the leader (``LeaderForwarder``) without being parsed, for
  every path FastAPI would route to such a route;
- on the leader, a write with a body is committed here when it is well-formed: a JSON body that its
  pydantic model accepts and path parameters of the expected shape. Anything else, including every error
  FastAPI would report, is handed to FastAPI unchanged (with the body already read), so error answers have
  exactly one source. The command, reply, idempotency and problem+json are the FastAPI route's, because
  both use the route's one ``WritePlan`` and ``routing.write_response``.

It sits inside the auth and limit middlewares (``app.py`` adds it first), so tokens, body limits and
latency metrics apply to it unchanged.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import ValidationError
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metadata_log.errors import KfedError

from .. import problems
from ..service import ControllerService
from .encoding import MSGPACK
from .peers import LeaderForwarder
from .routing import LeaderRoute, commit, write_response

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _RouteLabel:
    path: str  # what the latency metric labels a request with (FastAPI's route object has the same)


class HotPath:
    """ASGI middleware: forwards ``routes`` from a follower and serves their writes on the leader; anything
    else goes to ``app`` (FastAPI)."""

    def __init__(
        self, app: ASGIApp, service: ControllerService, routes: Sequence[LeaderRoute], forward: LeaderForwarder
    ) -> None:
        self.app = app
        self.service = service
        self.forward = forward
        # (method, number of path segments) -> the routes of that shape: most requests need one dict lookup
        by_shape: dict[tuple[str, int], list[LeaderRoute]] = defaultdict(list)
        for route in routes:
            for method in (route.method, "HEAD") if route.method == "GET" else (route.method,):  # as Starlette
                by_shape[(method, len(route.segments))].append(route)
        self.by_shape = dict(by_shape)
        self.labels = {r.template: _RouteLabel(r.template) for r in routes}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        parts = path.split("/")
        for route in self.by_shape.get((scope["method"], len(parts)), ()):
            if route.routes(parts):
                break
        else:
            await self.app(scope, receive, send)
            return
        if not self.service.is_leader():  # the leader validates it; a follower only passes it on
            await self._forward(route, scope, receive, send)
            return
        params = route.parameters(parts) if route.hot else None
        if params is None:
            await self.app(scope, receive, send)
            return
        headers = _first_headers(scope["headers"])
        if not headers.get("content-type", "").startswith("application/json"):
            await self.app(scope, receive, send)
            return
        assert route.body is not None and route.plan is not None  # route.hot
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
            response = problems.internal_error(e)
        await response(scope, receive, send)

    async def _forward(self, route: LeaderRoute, scope: Scope, receive: Receive, send: Send) -> None:
        scope["route"] = self.labels[route.template]
        try:
            body = await _read_body(receive)
            raw_path = scope.get("raw_path", b"").decode("latin-1") or scope["path"]  # still percent-encoded
            query = scope.get("query_string", b"").decode("latin-1")
            forwarded = await self.forward(scope["method"], raw_path, query, _first_headers(scope["headers"]), body)
        except KfedError as e:  # the body limit; no leader, or none that answered
            forwarded = problems.kfed_error_response(e)
        await forwarded(scope, receive, send)


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
