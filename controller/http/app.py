"""``build_app``: one controller node's HTTP API, put together from the routers of ``controller/http``.

A request meets, from the outside in: the body limit and latency metrics (``limits.py``), the token check
(``controller/auth.py``, before anything of the request is read), the hot path (``hotpath.py``: leader-only
routes forwarded from a follower, hot writes served on the leader), then FastAPI's routes. Errors are
answered as problem+json (``controller/problems.py``).
"""

from __future__ import annotations

import contextlib
import ssl
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI

from .. import auth, dashboard, metrics, problems
from ..service import ControllerService
from . import (
    agents,
    clusters,
    gateways,
    groups,
    health,
    key_order,
    log,
    metadata,
    operations,
    quorum,
    topics,
    transactions,
)
from .hotpath import HotPath
from .limits import MeasureAndLimit
from .log import LogStreams
from .metadata import RenderedMetadata
from .peers import Peers
from .routing import LeaderRoute, Router

ROUTERS: tuple[Router, ...] = (  # the most requested first: FastAPI tries them in this order
    log.router,
    quorum.router,
    agents.router,
    groups.router,
    metadata.router,
    clusters.router,
    topics.router,
    operations.router,
    gateways.router,
    transactions.router,
    key_order.router,
)
LEADER_ROUTES: tuple[LeaderRoute, ...] = tuple(route for router in ROUTERS for route in router.leader_routes)
"""What the hot path forwards from a follower (and, for writes with a body, serves on the leader)."""


def build_app(
    service: ControllerService,
    lifespan: Callable[[FastAPI], contextlib.AbstractAsyncContextManager[Any]] | None = None,
    tokens: auth.Tokens = auth.Tokens(),  # noqa: B008 - immutable
    peer_verify: ssl.SSLContext | bool = True,
    peers: Peers | None = None,
) -> FastAPI:
    """``lifespan``: what runs around serving (the node starts and stops its service there); ``tokens``:
    what requests need (see ``auth``); ``peer_verify``: how this node verifies the other voters' HTTPS
    certificates; ``peers``: this node's access to the other voters (made from those when None)."""
    if peers is None:
        # the node's own token for its status calls to the other voters (forwarded requests carry the caller's)
        peers = Peers(service, peer_verify, tokens.admin or tokens.read)

    @contextlib.asynccontextmanager
    async def serving(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with lifespan(app) if lifespan is not None else contextlib.nullcontext():
                yield
        finally:
            await peers.aclose()

    app = FastAPI(
        title="kfed controller",
        version="1",
        summary="Federated Kafka metadata: a Raft-replicated event log, merged metadata and admin writes.",
        lifespan=serving,
    )
    app.state.service = service
    app.state.peers = peers
    app.state.latency = metrics.RequestLatency()
    app.state.streams = LogStreams()
    app.state.rendered_metadata = RenderedMetadata()
    service.node_status_of = peers.node_status  # the leader asks the voters which metadata version they read

    problems.install(app)
    auth.document(app, tokens)
    # Starlette wraps the last added outermost: requests meet the limits, then the token check, then the hot path.
    app.add_middleware(HotPath, service=service, routes=LEADER_ROUTES, forward=peers.forward)
    if tokens.enabled:  # an open node pays nothing per request
        app.add_middleware(auth.Authorize, tokens=tokens)
    app.add_middleware(MeasureAndLimit, latency=app.state.latency)  # outermost, so refusals are measured too

    for router in ROUTERS:
        app.include_router(router)
    app.include_router(health.router)
    dashboard.mount(app)
    return app
