"""Routes only the leader serves, declared once.

A router module declares each such route with ``Router.leader`` (a read or soft-state call: leases,
groups, drain status) or ``Router.write`` (a change to the log). Both add an ordinary FastAPI route and
record a ``LeaderRoute``; the hot path (``hotpath.py``) reads those records, so nothing is listed twice:

- on a follower it passes every leader route's request on to the leader, unparsed;
- on the leader it commits the writes that have a JSON body itself, without FastAPI's routing and
  dependency solving, with the very ``WritePlan`` the FastAPI route commits.

A write is declared as the function that makes its ``WritePlan`` from the path parameters and ``body``,
taken by name::

    @router.write("PUT", "/{cluster_id}/state", summary="Change a cluster's admin state")
    def change_cluster_state(cluster_id: str, body: ChangeState) -> WritePlan:
        return WritePlan(lambda image: commands.change_cluster_state(image, cluster_id, body.state),
                         lambda image: render_cluster(image, cluster_id))

and its FastAPI endpoint is made from that signature (``_write_endpoint``).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel
from starlette.responses import Response
from starlette.routing import Match
from starlette.types import Scope

from metadata_log import commands
from metadata_log.image import MetadataImage

from ..service import ControllerService, WriteReply, check_idempotency_key, fingerprint
from .deps import IdempotencyKey, Service, on_leader
from .encoding import encode, wants_msgpack
from .peers import OFFSET_HEADER

Endpoint = TypeVar("Endpoint", bound=Callable[..., Any])


@dataclass(frozen=True, slots=True)
class WritePlan:
    """What a write route commits (``command``) and how its reply is rebuilt from an image (``render``)."""

    command: Callable[[MetadataImage], commands.Result]
    render: Callable[[MetadataImage], dict[str, Any]]


async def commit(
    service: ControllerService, plan: WritePlan, key: str | None, method: str, path: str, body: bytes
) -> WriteReply:
    """Commit ``plan`` on this (leader) node; the request's fingerprint binds an Idempotency-Key to it."""
    key = check_idempotency_key(key)
    fp = fingerprint(method, path, body) if key is not None else ""
    return await service.write(plan.command, plan.render, key, fp)


def write_response(reply: WriteReply, msgpack: bool, status: int = 200) -> Response:
    body = {**reply.body, "offset": reply.offset}
    headers = {OFFSET_HEADER: str(reply.offset)}  # a forwarding follower reads it (peers.LeaderForwarder)
    if reply.replayed:
        headers["Idempotent-Replayed"] = "true"
    return encode(body, msgpack, status, headers)


@dataclass(frozen=True, slots=True)
class LeaderRoute:
    """A route only the leader serves: its method, FastAPI path template and, for a write, its body model
    and plan (called with the path parameters by name and ``body=``). ``int_params``: the path
    parameters FastAPI declares as ``int``."""

    method: str
    template: str
    body: type[BaseModel] | None = None
    plan: Callable[..., WritePlan] | None = None
    status: int = 200
    int_params: frozenset[str] = frozenset()
    # the template split once: (literal segment, None) or (None, parameter name)
    segments: tuple[tuple[str | None, str | None], ...] = field(init=False)
    hot: bool = field(init=False)
    """Served on the leader by the hot path: a write with a (JSON) body."""
    _literals: tuple[tuple[int, str], ...] = field(init=False, repr=False)  # (index, literal)
    _params: tuple[tuple[int, str, bool], ...] = field(init=False, repr=False)  # (index, name, is an int)

    def __post_init__(self) -> None:
        split = tuple((None, s[1:-1]) if s.startswith("{") else (s, None) for s in self.template.split("/"))
        set_field = object.__setattr__  # frozen: the derived fields are set once, here
        set_field(self, "segments", split)
        set_field(self, "hot", self.plan is not None and self.body is not None)
        set_field(self, "_literals", tuple((i, lit) for i, (lit, _) in enumerate(split) if lit is not None))
        set_field(self, "_params", tuple((i, n, n in self.int_params) for i, (_, n) in enumerate(split) if n))

    def routes(self, parts: list[str]) -> bool:
        """Whether FastAPI routes a path of these segments (as many as the template's) here: the literals
        equal, the parameters not empty."""
        for i, literal in self._literals:
            if parts[i] != literal:
                return False
        for i, _, _ in self._params:  # noqa: SIM110 - a loop: cheaper than all() of a generator, per request
            if not parts[i]:
                return False
        return True

    def match(self, method: str, path: str) -> dict[str, Any] | None:
        """The typed path parameters when FastAPI would route ``method path`` here and accept its
        parameters as plain non-negative integers where it wants ints; None otherwise."""
        parts = path.split("/")
        if method != self.method or len(parts) != len(self.segments) or not self.routes(parts):
            return None
        return self.parameters(parts)

    def parameters(self, parts: list[str]) -> dict[str, Any] | None:
        """The path parameters of a path this route ``routes``; None when an int one is not a plain
        non-negative integer (FastAPI's answer then: a 422, or its own reading of '+7')."""
        params: dict[str, Any] = {}
        for i, name, is_int in self._params:
            seg = parts[i]
            if is_int:
                if not seg.isascii() or not seg.isdigit():
                    return None
                params[name] = int(seg)
            else:
                params[name] = seg
        return params


class Router(APIRouter):
    """An ``APIRouter`` that records its leader-only routes in ``leader_routes`` (see the module)."""

    def __init__(self, prefix: str = "", tags: list[str] | None = None) -> None:
        super().__init__(prefix=prefix, tags=list(tags or []))
        self.leader_routes: list[LeaderRoute] = []
        self._literal_starts: tuple[str, ...] = ()  # each route's path up to its first parameter
        self._literal_starts_of = -1  # the number of routes they were collected from

    def matches(self, scope: Scope) -> tuple[Match, Scope]:
        # FastAPI tries the included routers in turn, route by route (a few µs each). A path that starts
        # with none of this router's literal route prefixes has no route here, and is told so at once: a
        # request does not pay for every route of the routers included before its own.
        if self._literal_starts_of != len(self.routes):  # routes were added since they were collected
            self._literal_starts = tuple({getattr(r, "path", "/").split("{")[0] for r in self.routes})
            self._literal_starts_of = len(self.routes)
        path = scope.get("path", "")
        root_path = scope.get("root_path", "")
        if root_path and path.startswith(root_path):
            path = path[len(root_path) :]
        if not path.startswith(self._literal_starts):
            return Match.NONE, {}
        return super().matches(scope)

    def leader(self, method: str, path: str, **route: Any) -> Callable[[Endpoint], Endpoint]:
        """Declare a route only the leader serves; ``route``: the options of ``APIRouter.add_api_route``."""

        def declare(endpoint: Endpoint) -> Endpoint:
            self.add_api_route(path, endpoint, methods=[method], dependencies=[Depends(on_leader)], **route)
            hints = typing.get_type_hints(endpoint)
            self.leader_routes.append(LeaderRoute(method, self.prefix + path, int_params=_int_params(path, hints)))
            return endpoint

        return declare

    def write(
        self, method: str, path: str, *, status_code: int = 200, **route: Any
    ) -> Callable[[Callable[..., WritePlan]], Callable[..., WritePlan]]:
        """Declare a write by its plan function (see the module); ``status_code``: its status on success."""

        def declare(plan: Callable[..., WritePlan]) -> Callable[..., WritePlan]:
            hints = typing.get_type_hints(plan, include_extras=True)
            endpoint = _write_endpoint(plan, hints, status_code)
            self.add_api_route(
                path, endpoint, methods=[method], status_code=status_code, dependencies=[Depends(on_leader)], **route
            )
            body = hints.get("body")
            if typing.get_origin(body) is typing.Annotated:  # Body(openapi_examples=...) and the like
                body = typing.get_args(body)[0]
            int_params = _int_params(path, hints)
            self.leader_routes.append(LeaderRoute(method, self.prefix + path, body, plan, status_code, int_params))
            return plan

        return declare


def _int_params(path: str, hints: dict[str, Any]) -> frozenset[str]:
    names = {s[1:-1] for s in path.split("/") if s.startswith("{")}
    return frozenset(n for n in names if hints.get(n) is int)


def _write_endpoint(plan: Callable[..., WritePlan], hints: dict[str, Any], status: int) -> Callable[..., Any]:
    """The FastAPI endpoint of a write: the plan's parameters (path parameters, ``body``) plus the request,
    the service and the Idempotency-Key; it commits the plan and answers with the write's reply."""

    async def endpoint(request: Request, service: Any, idempotency_key: str | None = None, **params: Any) -> Response:
        reply = await commit(
            service, plan(**params), idempotency_key, request.method, request.url.path, await request.body()
        )
        return write_response(reply, wants_msgpack(request), status)

    keyword = inspect.Parameter.KEYWORD_ONLY
    own = [p.replace(kind=keyword, annotation=hints[name]) for name, p in inspect.signature(plan).parameters.items()]
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]  # read by FastAPI
        [
            *own,
            inspect.Parameter("request", keyword, annotation=Request),
            inspect.Parameter("service", keyword, annotation=Service),
            inspect.Parameter("idempotency_key", keyword, annotation=IdempotencyKey, default=None),
        ],
        return_annotation=Response,
    )
    endpoint.__name__ = endpoint.__qualname__ = plan.__name__  # FastAPI's operation id
    endpoint.__doc__ = plan.__doc__
    return endpoint
