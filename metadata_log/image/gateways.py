"""Gateway instances (``kfed gateway``, the Kafka-protocol server): their image and delta.

A gateway process registers at ``host:port`` under a Kafka broker id (``GatewayRegistered``) and is live
until its lease runs out on the quorum leader (``GatewayExpired``). The live ones are the brokers of the
virtual Kafka cluster every gateway presents.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from ..records import GatewayExpired, GatewayRegistered
from .common import InvalidRecord

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


def check_gateway_fields(gateway_id: int, host: str, port: int) -> str | None:
    """What is wrong with these registration fields (naming the field), or None."""
    if type(gateway_id) is not int or not 0 <= gateway_id <= MAX_GATEWAY_ID:
        return f"gateway_id must be an integer in 0..{MAX_GATEWAY_ID}"
    if not isinstance(host, str) or not _HOST_RE.match(host):
        return "host must be a host name or IP address"
    if type(port) is not int or not 0 < port < 65536:
        return "port must be an integer in 1..65535"
    return None


class GatewaysDelta:
    """Changes to the gateways over ``gateways``: registrations and expiries, checked against the image."""

    __slots__ = ("_base", "_changed")

    def __init__(self, gateways: Mapping[int, GatewayImage]) -> None:
        self._base = gateways
        self._changed: dict[int, GatewayImage] | None = None

    def _current(self) -> dict[int, GatewayImage]:
        if self._changed is None:
            self._changed = dict(self._base)
        return self._changed

    def replay_registered(self, record: GatewayRegistered) -> None:
        problem = check_gateway_fields(record.gateway_id, record.host, record.port)
        if problem is not None:
            raise InvalidRecord(problem)
        gateways = self._current()
        if record.gateway_id not in gateways and len(gateways) >= MAX_GATEWAYS:
            raise InvalidRecord(f"the federation has {MAX_GATEWAYS} gateway ids already")
        if record.incarnation < next_incarnation(gateways):
            raise InvalidRecord(f"incarnation {record.incarnation} is not above every earlier registration's")
        gateways[record.gateway_id] = GatewayImage(
            record.gateway_id,
            record.host,
            record.port,
            record.instance,
            record.incarnation,
            record.rack,
            record.listener,
        )

    def replay_expired(self, record: GatewayExpired) -> None:
        gateways = self._current()
        current = gateways.get(record.gateway_id)
        if current is None or not current.live:
            raise InvalidRecord(f"gateway {record.gateway_id} is not live")
        gateways[record.gateway_id] = dataclasses.replace(current, live=False)

    def apply(self) -> Mapping[int, GatewayImage]:
        return self._changed if self._changed is not None else self._base


def next_incarnation(gateways: Mapping[int, GatewayImage]) -> int:
    """The incarnation of the next registration: above all in the map (entries are replaced by higher ones
    and never dropped, so this only grows)."""
    return max((g.incarnation for g in gateways.values()), default=0) + 1


def live_gateways(gateways: Mapping[int, GatewayImage]) -> list[GatewayImage]:
    return sorted((g for g in gateways.values() if g.live), key=lambda g: g.gateway_id)
