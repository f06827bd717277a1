"""Gateway leases on the leader (``controller/gateways.py``): pure, with the clock passed in."""

from __future__ import annotations

from controller.gateways import GatewayLeases
from metadata_log.image import EMPTY_IMAGE
from metadata_log.records import GatewayExpired

from ..samples import register_gateway as register


def test_a_lease_that_runs_out_expires_its_gateway_and_a_new_leader_gives_a_full_lease() -> None:
    image, _ = register(EMPTY_IMAGE, 0, 9092, "a")
    leases = GatewayLeases(lease_ms=1000)
    leases.start_term(now_s=100.0)
    assert leases.decide(image, 100.9, 0) == [], "a full lease from the start of the term"
    assert leases.decide(image, 101.0, 7) == [GatewayExpired(0, 7)]
    leases.beat(0, "a", now_s=101.0, now_ms=0)
    assert leases.decide(image, 101.9, 0) == []
    assert leases.decide(image, 102.0, 9) == [GatewayExpired(0, 9)]
    leases.beat(0, "another-process", now_s=102.0, now_ms=0)
    assert leases.decide(image, 102.1, 1) == [GatewayExpired(0, 1)], "a beat of another instance renews nothing"
