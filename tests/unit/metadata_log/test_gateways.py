"""Gateway registration in the log (``commands.register_gateway``); the leader's leases are in
``tests/unit/controller/test_gateways.py``."""

from __future__ import annotations

import pytest

from metadata_log import commands, snapshot
from metadata_log.errors import Conflict, InvalidRequest
from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.records import GatewayExpired

from ..samples import register_gateway as register


def test_ids_are_assigned_kept_per_address_and_a_restart_is_a_new_incarnation() -> None:
    image, first = register(EMPTY_IMAGE, None, 9092, "a")
    image, second = register(image, None, 9093, "b")
    assert (first["gateway_id"], second["gateway_id"]) == (0, 1)
    unchanged = commands.register_gateway(image, 0, "127.0.0.1", 9092, "a")
    assert unchanged.records == () and unchanged.reply["incarnation"] == first["incarnation"]
    image, restarted = register(image, None, 9092, "a-restarted")
    assert restarted["gateway_id"] == 0 and restarted["incarnation"] > second["incarnation"]


def test_a_live_id_elsewhere_is_a_conflict_and_an_expired_one_is_taken_over() -> None:
    image, _ = register(EMPTY_IMAGE, 5, 9092, "a")
    with pytest.raises(Conflict):
        commands.register_gateway(image, 5, "127.0.0.1", 9999, "b")
    image = apply(image, commands.expire_gateway(image, 5, 1).records)
    image, reply = register(image, 5, 9999, "b")
    assert reply["gateway_id"] == 5 and image.gateways[5].live and image.gateways[5].port == 9999


def test_a_new_process_at_a_live_address_under_another_id_expires_the_old_registration() -> None:
    image, _ = register(EMPTY_IMAGE, 1, 9092, "a")
    result = commands.register_gateway(image, 2, "127.0.0.1", 9092, "b")
    assert result.records[0] == GatewayExpired(1, 0)
    image = apply(image, result.records)
    assert [g.gateway_id for g in image.gateways.values() if g.live] == [2]


def test_bad_registrations_name_their_field() -> None:
    for args, field in (((-1, "h", 1, "i"), "gateway_id"), ((None, "bad host!", 1, "i"), "host"),
                        ((None, "h", 70000, "i"), "port"), ((None, "h", 1, ""), "instance")):  # fmt: skip
        with pytest.raises(InvalidRequest) as e:
            commands.register_gateway(EMPTY_IMAGE, *args)
        assert e.value.field == field


def test_gateways_survive_a_snapshot_round_trip() -> None:
    image, _ = register(EMPTY_IMAGE, 3, 9092, "a")
    image, _ = register(image, 1, 9093, "b")
    image = apply(image, commands.expire_gateway(image, 3, 1).records)
    assert snapshot.read_records(snapshot.write_records(image), image.offset).gateways == image.gateways
    assert snapshot.read_rows(snapshot.write_rows(image), image.offset).gateways == image.gateways
    assert snapshot.read_runs(snapshot.write_runs(image), image.offset).gateways == image.gateways
