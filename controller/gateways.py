"""Gateway instances (``kfed gateway``): registration, leases, and the routes they use.

A gateway heartbeats ``POST /v1/gateways/heartbeat`` about once a second. The first beat of a process
registers it (``GatewayRegistered``: a Kafka broker id and the address clients reach it at); later beats only
renew its lease, soft state on the leader like an agent's. When a live gateway's lease runs out the leader
commits ``GatewayExpired``, and every gateway leaves it out of its Metadata answers at its next log offset.
A node that just became leader gives every live gateway one full lease to find it first.

``GatewayLeases`` decides (pure, clock passed in); ``GatewayRegistry`` commits through the service; the
routes are in ``controller/http/gateways.py``.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from typing import Any, Final

from pydantic import BaseModel, ConfigDict, Field

from metadata_log import commands
from metadata_log.errors import KfedError
from metadata_log.image import MetadataImage
from metadata_log.image.gateways import MAX_GATEWAY_ID
from metadata_log.records import GatewayExpired

log = logging.getLogger(__name__)

DEFAULT_GATEWAY_LEASE_MS: Final = 4_000
"""How long a gateway stays live without a heartbeat: what a client of a killed gateway waits, at most, for
Metadata answers without it."""
GATEWAY_HEARTBEAT_MS: Final = 1_000


@dataclass(frozen=True, slots=True)
class GatewayLease:
    gateway_id: int
    instance: str
    expires_at_s: float  # monotonic
    last_beat_ms: int  # wall clock, for display
    connections: int
    requests: int
    beat_at_s: float  # monotonic
    requests_per_s: float | None  # since the previous beat of the same instance


class GatewayLeases:
    def __init__(self, lease_ms: int = DEFAULT_GATEWAY_LEASE_MS) -> None:
        if lease_ms < 1:
            raise ValueError("lease_ms must be positive")
        self.lease_ms = lease_ms
        self._leases: dict[int, GatewayLease] = {}
        self._term_start_s = 0.0

    def start_term(self, now_s: float) -> None:
        """This node just became leader: forget old leases; the live gateways get a full lease from now."""
        self._leases.clear()
        self._term_start_s = now_s

    def beat(
        self, gateway_id: int, instance: str, now_s: float, now_ms: int, connections: int = 0, requests: int = 0
    ) -> GatewayLease:
        previous = self._leases.get(gateway_id)
        rate = None
        if previous is not None and previous.instance == instance and now_s > previous.beat_at_s:
            rate = max(0, requests - previous.requests) / (now_s - previous.beat_at_s)
        lease = GatewayLease(
            gateway_id, instance, now_s + self.lease_ms / 1000, now_ms, connections, requests, now_s, rate
        )
        self._leases[gateway_id] = lease
        return lease

    def decide(self, image: MetadataImage, now_s: float, now_ms: int) -> list[GatewayExpired]:
        """``GatewayExpired`` for each live gateway whose lease ran out (or that never beat this term)."""
        expired = []
        for g in image.gateways.values():
            if not g.live:
                continue
            lease = self._leases.get(g.gateway_id)
            expires_at_s = self._term_start_s + self.lease_ms / 1000
            if lease is not None and lease.instance == g.instance:
                expires_at_s = lease.expires_at_s
            if now_s >= expires_at_s:
                expired.append(GatewayExpired(g.gateway_id, now_ms))
        return expired

    def view(self, image: MetadataImage, now_s: float) -> list[dict[str, Any]]:
        rows = []
        for g in sorted(image.gateways.values(), key=lambda g: g.gateway_id):
            lease = self._leases.get(g.gateway_id)
            rows.append(
                {
                    "gateway_id": g.gateway_id,
                    "host": g.host,
                    "port": g.port,
                    "rack": g.rack,
                    "listener": g.listener,
                    "live": g.live,
                    "incarnation": g.incarnation,
                    "last_heartbeat_ms": lease.last_beat_ms if lease else None,
                    "lease_remaining_ms": max(0, int((lease.expires_at_s - now_s) * 1000)) if lease else None,
                    "connections": lease.connections if lease else None,
                    "requests": lease.requests if lease else None,
                    "requests_per_s": round(lease.requests_per_s, 1)
                    if lease and lease.requests_per_s is not None
                    else None,
                }
            )
        return rows


class GatewayRegistry:
    """The leader's side of gateway registration, bound to one controller service."""

    def __init__(self, service: Any, lease_ms: int = DEFAULT_GATEWAY_LEASE_MS) -> None:
        self._service = service  # the ControllerService (not imported: it imports this module)
        self.leases = GatewayLeases(lease_ms)

    def start_term(self, now_s: float) -> None:
        self.leases.start_term(now_s)

    async def heartbeat(self, body: GatewayHeartbeat) -> dict[str, Any]:
        """Register the gateway process when the image does not hold it as it is, and renew its lease."""
        service = self._service
        service.require_leader()

        def register(image: MetadataImage) -> commands.Result:
            return commands.register_gateway(
                image, body.gateway_id, body.host, body.port, body.instance, body.rack, body.listener
            )

        result = await service.write(register, lambda image: {}, None, "", confirm_noop=False)
        gateway_id = result.body["gateway_id"]
        self.leases.beat(gateway_id, body.instance, time.monotonic(), _now_ms(), body.connections, body.requests)
        return {
            **result.body,
            "lease_ms": self.leases.lease_ms,
            "heartbeat_ms": GATEWAY_HEARTBEAT_MS,
            "offset": result.offset,
        }

    async def enforce(self) -> None:
        """Expire the live gateways whose lease ran out (called by the service's lease loop)."""
        service = self._service
        if not service.sync_term():
            return
        for record in self.leases.decide(service.state.image, time.monotonic(), _now_ms()):
            try:
                await service.write(
                    lambda image, r=record: commands.expire_gateway(image, r.gateway_id, r.at_ms),
                    lambda image: {},
                    None,
                    "",
                )
                log.warning("gateway %d: lease expired", record.gateway_id)
            except (KfedError, TimeoutError) as e:
                log.info("gateway %d expiry not committed (%s); the next check retries", record.gateway_id, e)


class GatewayHeartbeat(BaseModel):
    model_config = ConfigDict(extra="forbid")

    gateway_id: int | None = Field(None, ge=0, le=MAX_GATEWAY_ID, description="Its Kafka broker id; null: assigned.")
    host: str = Field(max_length=253, description="The host Kafka clients reach this gateway at (advertised).")
    port: int = Field(ge=1, le=65535, description="The port Kafka clients reach this gateway at.")
    instance: str = Field(min_length=1, max_length=64, description="New in every process (a restart registers anew).")
    rack: str | None = Field(None, max_length=249, description="Its rack, shown to rack-aware clients.")
    listener: str = Field(
        "PLAINTEXT",
        max_length=249,
        description="Its listener's security; clients are told only of gateways with the same (e.g. SASL_SSL).",
    )
    connections: int = Field(0, ge=0, le=2**31 - 1, description="Kafka client connections open now (for display).")
    requests: int = Field(0, ge=0, le=2**63 - 1, description="Kafka requests served since it started (for display).")


def _now_ms() -> int:
    return int(time.time() * 1000)
