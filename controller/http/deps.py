"""The dependencies routes declare (FastAPI ``Depends``): the node's service, its access to the other
voters, its request metrics, and the rule that a route runs on the leader only.

``build_app`` puts the objects in ``app.state``; a test of the routes alone sets
``app.dependency_overrides[get_service]`` (or ``get_peers``…) instead. Every provider is ``async``:
FastAPI runs a plain ``def`` dependency in a worker thread, which would cost each request a thread hop.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from metadata_log.errors import Unavailable

from .. import metrics
from ..service import ControllerService
from .peers import Peers


async def get_service(request: Request) -> ControllerService:
    service: ControllerService = request.app.state.service
    return service


async def get_peers(request: Request) -> Peers:
    peers: Peers = request.app.state.peers
    return peers


async def get_latency(request: Request) -> metrics.RequestLatency:
    latency: metrics.RequestLatency = request.app.state.latency
    return latency


Service = Annotated[ControllerService, Depends(get_service)]
PeerAccess = Annotated[Peers, Depends(get_peers)]
Latency = Annotated[metrics.RequestLatency, Depends(get_latency)]

IdempotencyKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retry-safe write key: a retry with the same key returns the "
        "first outcome and commits nothing new.",
    ),
]


async def on_leader(service: Service) -> None:
    """A leader-only route on a follower: the hot path (``hotpath.py``) forwards such requests to the leader
    before they reach FastAPI, so this refuses only what arrives while leadership moves (503: retry)."""
    if not service.is_leader():
        raise Unavailable("this node is not the leader", retry_after_s=0.2)
