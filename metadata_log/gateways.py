"""Gateway instances in the image (``kfed gateway``, the Kafka-protocol server): their state and replay.

A gateway process registers at ``host:port`` under a Kafka broker id (``GatewayRegistered``) and is live
until its lease runs out on the quorum leader (``GatewayExpired``). The live ones are the brokers of the
virtual Kafka cluster every gateway presents. Kept in their own module so the image only delegates to it.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from .records import GatewayExpired, GatewayRegistered

MAX_GATEWAYS: Final = 10_000
"""Gateway ids the image holds, live or not (ids stay with their address, so a restart keeps its id)."""
MAX_GATEWAY_ID: Final = 2**31 - 1  # a Kafka broker id is an int32
_HOST_RE: Final = re.compile(r"^[A-Za-z0-9._\-:\[\]]{1,253}$")


@dataclass(frozen=True, slots=True)
class GatewayImage:
    gateway_id: int
    host: str
    port: int
    instance: str
    incarnation: int
    rack: str | None
    listener: str = "PLAINTEXT"
    live: bool = True

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"


class GatewayRecordError(ValueError):
    """A gateway record that does not fit the image (the image turns it into ``InvalidRecord``)."""


def check_gateway_fields(gateway_id: int, host: str, port: int) -> str | None:
    """What is wrong with these registration fields (naming the field), or None."""
    if type(gateway_id) is not int or not 0 <= gateway_id <= MAX_GATEWAY_ID:
        return f"gateway_id must be an integer in 0..{MAX_GATEWAY_ID}"
    if not isinstance(host, str) or not _HOST_RE.match(host):
        return "host must be a host name or IP address"
    if type(port) is not int or not 0 < port < 65536:
        return "port must be an integer in 1..65535"
    return None


def replay_gateway(gateways: dict[int, GatewayImage], record: GatewayRegistered | GatewayExpired) -> None:
    """Fold one gateway record into ``gateways`` (a copy the caller owns); ``GatewayRecordError`` if it does
    not fit."""
    if isinstance(record, GatewayRegistered):
        problem = check_gateway_fields(record.gateway_id, record.host, record.port)
        if problem is not None:
            raise GatewayRecordError(problem)
        if record.gateway_id not in gateways and len(gateways) >= MAX_GATEWAYS:
            raise GatewayRecordError(f"the federation has {MAX_GATEWAYS} gateway ids already")
        if record.incarnation <= max((g.incarnation for g in gateways.values()), default=0):
            raise GatewayRecordError(f"incarnation {record.incarnation} is not above every earlier registration's")
        gateways[record.gateway_id] = GatewayImage(
            record.gateway_id,
            record.host,
            record.port,
            record.instance,
            record.incarnation,
            record.rack,
            record.listener,
        )
        return
    current = gateways.get(record.gateway_id)
    if current is None or not current.live:
        raise GatewayRecordError(f"gateway {record.gateway_id} is not live")
    gateways[record.gateway_id] = dataclasses.replace(current, live=False)


def gateway_snapshot_rows(
    gateways: Mapping[int, GatewayImage],
) -> Iterator[tuple[type[GatewayRegistered] | type[GatewayExpired], tuple[Any, ...]]]:
    """The gateways as (record type, field values) that replay to them from an empty map: in the order of
    their incarnations, as they were registered (expired ones at time 0: the time is not kept)."""
    for g in sorted(gateways.values(), key=lambda g: g.incarnation):
        yield GatewayRegistered, (g.gateway_id, g.host, g.port, g.instance, g.incarnation, g.rack, g.listener)
        if not g.live:
            yield GatewayExpired, (g.gateway_id, 0)


def next_incarnation(gateways: Mapping[int, GatewayImage]) -> int:
    """The incarnation of the next registration: above all in the map (entries are replaced by higher ones
    and never dropped, so this only grows)."""
    return max((g.incarnation for g in gateways.values()), default=0) + 1


def live_gateways(gateways: Mapping[int, GatewayImage]) -> list[GatewayImage]:
    return sorted((g for g in gateways.values() if g.live), key=lambda g: g.gateway_id)
