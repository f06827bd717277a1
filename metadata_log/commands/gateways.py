"""Commands on ``kfed gateway`` instances: register one live at an address, expire one whose lease ran out."""

from __future__ import annotations

from typing import Final

from ..errors import Conflict, InvalidRequest
from ..image import MetadataImage
from ..image.gateways import MAX_GATEWAY_ID, check_gateway_fields, next_incarnation
from ..records import GatewayExpired, GatewayRegistered, Record
from .common import Result, apply_checked, check_name

MAX_INSTANCE_CHARS: Final = 64


def register_gateway(
    image: MetadataImage,
    gateway_id: int | None,
    host: str,
    port: int,
    instance: str,
    rack: str | None = None,
    listener: str = "PLAINTEXT",
) -> Result:
    """Register a gateway process live at ``host:port`` (``instance``: new per process). Without an id it
    gets the one its address had, else the lowest no live gateway holds. A registration that changes nothing
    writes nothing (the lease keeps it live); a live gateway elsewhere with the same id is a conflict, and
    another live one at the same address expires (only one process listens there)."""
    if gateway_id is not None and check_gateway_fields(gateway_id, "x", 1) is not None:
        raise InvalidRequest("gateway_id", f"gateway_id must be an integer in 0..{MAX_GATEWAY_ID}")
    problem = check_gateway_fields(0, host, port)
    if problem is not None:
        raise InvalidRequest(problem.split(" ", 1)[0], problem)
    if not isinstance(instance, str) or not 0 < len(instance) <= MAX_INSTANCE_CHARS or not instance.isprintable():
        raise InvalidRequest("instance", f"instance must be 1-{MAX_INSTANCE_CHARS} printable characters")
    if rack is not None:
        check_name(rack, "rack")
    check_name(listener, "listener")
    live = {g.gateway_id: g for g in image.gateways.values() if g.live}
    if gateway_id is None:
        own = [
            g.gateway_id
            for g in image.gateways.values()
            if (g.host, g.port) == (host, port) and live.get(g.gateway_id, g).address == g.address
        ]
        gateway_id = min(own) if own else next(i for i in range(len(live) + 1) if i not in live)
    current = live.get(gateway_id)
    if current is not None and (current.host, current.port) != (host, port) and current.instance != instance:
        raise Conflict(
            f"gateway {gateway_id} is live at {current.address}; give this one another --id", field="gateway_id"
        )
    unchanged = (host, port, instance, rack, listener)
    if (
        current is not None
        and (current.host, current.port, current.instance, current.rack, current.listener) == unchanged
    ):
        return Result((), {"gateway_id": gateway_id, "registered": False, "incarnation": current.incarnation})
    records: list[Record] = [
        GatewayExpired(g.gateway_id, 0)
        for g in live.values()
        if (g.host, g.port) == (host, port) and g.gateway_id != gateway_id
    ]
    incarnation = next_incarnation(image.gateways)
    records.append(GatewayRegistered(gateway_id, host, port, instance, incarnation, rack, listener))
    apply_checked(image, records)
    return Result(tuple(records), {"gateway_id": gateway_id, "registered": True, "incarnation": incarnation})


def expire_gateway(image: MetadataImage, gateway_id: int, at_ms: int) -> Result:
    """Take a gateway out of the live ones (its lease ran out); a no-op when it is not live."""
    current = image.gateways.get(gateway_id)
    if current is None or not current.live:
        return Result((), {"gateway_id": gateway_id, "live": False})
    return Result((GatewayExpired(gateway_id, at_ms),), {"gateway_id": gateway_id, "live": False})
