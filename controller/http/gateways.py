"""Gateway instances (``kfed gateway``): their heartbeat, which registers a process and renews its lease,
and the list of gateways with their leases. Both are the leader's: leases are its soft state."""

from __future__ import annotations

import time

from fastapi import Request
from starlette.responses import Response

from ..gateways import GatewayHeartbeat
from .deps import Service
from .encoding import respond
from .routing import Router

router = Router(prefix="/v1/gateways", tags=["gateways"])


@router.leader("POST", "/heartbeat", summary="Register a gateway process or renew its lease (a record only on change)")
async def heartbeat(request: Request, service: Service, body: GatewayHeartbeat) -> Response:
    return respond(request, await service.gateways.heartbeat(body))


@router.leader("GET", "", summary="Gateway instances: live or not, their lease and load (the leader's view)")
async def gateways(request: Request, service: Service) -> Response:
    image = service.state.image
    rows = service.gateways.leases.view(image, time.monotonic())
    return respond(request, {"gateways": rows, "lease_ms": service.gateways.leases.lease_ms, "offset": image.offset})
