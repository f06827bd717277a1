"""Strict key order at the HTTP edge, over the fake service of ``test_routes`` (a real image, writes
applied at once): ``key_order`` on ``POST /v1/topics``, ``PUT /v1/topics/{name}/key_order``, the epoch a
planned change starts in its own batch, the seals agents report, and ``GET /v1/metadata`` showing it all."""

from __future__ import annotations

from controller.http import build_app
from metadata_log.commands import change_key_order, plan_epochs
from metadata_log.image.key_orders import strict_history
from metadata_log.records import KeyOrderEpochStarted, KeyOrderSealed, KeyRangeMoved, PhysicalPartitionsReported

from .test_routes import FakePeers, FakeService, client, committed, routers_only

STRICT = {"name": "S", "region": "r1", "partitions_per_cluster": 2, "key_order": "strict"}


async def test_a_topic_is_created_strict_and_the_metadata_shows_its_key_map() -> None:
    service = FakeService()
    async with client(build_app(service, peers=FakePeers())) as http:  # type: ignore[arg-type]  # the fake
        r = await http.post("/v1/topics", json=STRICT)
        assert r.status_code == 201, r.text
        created = r.json()
        assert (created["key_order"], created["key_epoch"], created["key_slots"]) == ("strict", 1, 16384)
        assert [p for _, _, p in created["key_ranges"]] == [0, 1, 2, 3], "every partition owns one range"
        plain = await http.post("/v1/topics", json={**STRICT, "name": "N", "key_order": "none"})
        assert plain.json()["key_order"] == "none"
        default = await http.post(
            "/v1/topics", json={k: v for k, v in STRICT.items() if k != "key_order"} | {"name": "D"}
        )
        assert default.json()["key_order"] == "none"
        topics = {t["name"]: t for t in (await http.get("/v1/metadata")).json()["topics"]}
    assert topics["S"]["key_order"] == "strict" and topics["S"]["key_ranges"] == created["key_ranges"]
    assert topics["N"]["key_order"] == "none" and topics["U_TopicA"]["key_order"] == "none"
    assert strict_history(service.read_model.image.key_orders, "S") is not None


async def test_a_bad_key_order_is_refused_naming_its_field() -> None:
    async with client(routers_only(FakeService())) as http:
        for bad in ("STRICT", "", 1, None):
            r = await http.post("/v1/topics", json={**STRICT, "key_order": bad})
            assert r.status_code == 422 and r.json()["field"] == "key_order", (bad, r.text)
            r = await http.put("/v1/topics/U_TopicA/key_order", json={"key_order": bad})
            assert r.status_code == 422 and r.json()["field"] == "key_order", (bad, r.text)
        r = await http.put("/v1/topics/nope/key_order", json={"key_order": "strict"})
        assert r.status_code == 404


async def test_an_operator_switches_a_topic_to_strict_once_keys_can_go_somewhere_and_back() -> None:
    service = FakeService()
    async with client(routers_only(service)) as http:
        r = await http.put("/v1/topics/U_TopicA/key_order", json={"key_order": "strict"})
        assert r.status_code == 409 and r.json()["field"] == "key_order", "no partition of it has a leader yet"
        committed(service.read_model, [PhysicalPartitionsReported("c1", "U_TopicA", 0, "127.0.0.1:19092")])
        r = await http.put("/v1/topics/U_TopicA/key_order", json={"key_order": "strict"})
        assert r.status_code == 200 and r.json()["key_order"] == "strict" and r.json()["key_epoch"] == 1
        assert r.json()["key_ranges"] == [[0, 16384, 0]], "only P0 can take keys now"
        again = await http.put("/v1/topics/U_TopicA/key_order", json={"key_order": "strict"})
        assert again.json()["offset"] == r.json()["offset"], "the same mode again records nothing"
        back = await http.put("/v1/topics/U_TopicA/key_order", json={"key_order": "none"})
        assert back.json()["key_order"] == "none"


async def test_a_shrink_of_a_strict_topic_starts_its_next_epoch_in_the_same_batch_and_agents_seal_it() -> None:
    service = FakeService()
    async with client(routers_only(service)) as http:
        assert (await http.post("/v1/topics", json=STRICT)).status_code == 201
        before = service.read_model.image.offset
        r = await http.post("/v1/topics/S/shrink", json={"partitions": [3]})
        assert r.status_code == 200, r.text
        image = service.read_model.image
        history = strict_history(image.key_orders, "S")
        assert history is not None and history.epoch == 2 and history.map.partitions() == {0, 1, 2}
        assert image.offset > before + 1, "the partition's state change and the epoch: one write"
        assert len(service.writes) == 2
        seals = (await http.get("/v1/topics/S")).json()
        assert seals["pending_seals"] == [3] and seals["key_epoch_cause"] == "S shrunk"
        stale = await http.post("/v1/agents/c2/key-seals", json={"topic": "S", "epoch": 1, "end_offsets": {"3": 7}})
        assert stale.status_code == 409 and stale.json()["field"] == "epoch"
        wrong = await http.post("/v1/agents/c2/key-seals", json={"topic": "S", "epoch": 2, "end_offsets": {"1": 7}})
        assert wrong.status_code == 409 and wrong.json()["field"] == "seals.1", "P1 gave nothing away"
        negative = await http.post("/v1/agents/c2/key-seals", json={"topic": "S", "epoch": 2, "end_offsets": {"3": -1}})
        assert negative.status_code == 422
        sealed = await http.post("/v1/agents/c2/key-seals", json={"topic": "S", "epoch": 2, "end_offsets": {"3": 7}})
        assert sealed.status_code == 200, sealed.text
        assert sealed.json()["seals"] == [{"epoch": 2, "partition": 3, "end_offset": 7}]
        assert sealed.json()["pending_seals"] == []
        offset = service.read_model.image.offset
        retried = await http.post("/v1/agents/c2/key-seals", json={"topic": "S", "epoch": 2, "end_offsets": {"3": 9}})
        assert retried.status_code == 200 and service.read_model.image.offset == offset, "a retried report: no record"


async def test_a_cluster_set_read_only_moves_a_strict_topics_keys_in_the_same_batch() -> None:
    service = FakeService()
    async with client(routers_only(service)) as http:
        assert (await http.post("/v1/topics", json=STRICT)).status_code == 201
        r = await http.put("/v1/clusters/c2/state", json={"state": "read_only"})
        assert r.status_code == 200, r.text
        history = strict_history(service.read_model.image.key_orders, "S")
        assert history is not None and history.epoch == 2 and history.map.partitions() == {0, 1}
        assert history.changes[-1].cause == "c2 read_only"


def test_the_leaders_loop_starts_an_expands_epoch_once_the_new_partitions_have_leaders() -> None:
    """``plan_epochs`` as ``ControllerService.enforce_key_order`` calls it: an expand joins the map only once
    the new partitions can take writes, and never while a seal of the latest epoch can still be measured."""
    service = FakeService()
    rm = service.read_model
    committed(rm, [PhysicalPartitionsReported("c1", "U_TopicA", 0, "127.0.0.1:19092")])
    committed(rm, change_key_order(rm.image, "U_TopicA", "strict").records)
    assert plan_epochs(rm.image, "loop") == [], "P1 and P2 have no leader: nothing to do"
    committed(rm, [PhysicalPartitionsReported("c2", "U_TopicA", 0, "127.0.0.1:29092")])
    records = plan_epochs(rm.image, "loop")
    assert isinstance(records[0], KeyOrderEpochStarted) and records[0].epoch == 2
    assert {(m.from_partition, m.to_partition) for m in records[1:] if isinstance(m, KeyRangeMoved)} == {(0, 1)}
    committed(rm, records)
    committed(rm, [PhysicalPartitionsReported("c2", "U_TopicA", 1, "127.0.0.1:29092")])
    assert plan_epochs(rm.image, "loop") == [], "P0's seal of epoch 2 is not measured yet"
    committed(rm, [KeyOrderSealed("U_TopicA", 2, 0, 5)])
    records = plan_epochs(rm.image, "loop")
    assert isinstance(records[0], KeyOrderEpochStarted) and records[0].epoch == 3
