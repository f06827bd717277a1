"""The transaction routes (``controller/http/transactions.py``) over the fake service of ``test_routes``: a
real image, writes applied at once. What is checked is the edge: each call's records and answer, and the
Kafka error a refusal names for the SDK."""

from __future__ import annotations

from typing import Any

import httpx

from controller.http import build_app

from .test_routes import FakePeers, FakeService, client, routers_only


class FakeDriver:
    """The leader's transaction driver as the routes use it: what it learnt of each cluster's brokers."""

    def __init__(self, refusals: dict[str, str] | None = None) -> None:
        self.refusals = refusals or {}
        self.asked: list[str] = []

    async def refusal(self, cluster_id: str) -> str | None:
        self.asked.append(cluster_id)
        return self.refusals.get(cluster_id)


def txn_service(refusals: dict[str, str] | None = None) -> FakeService:
    service = FakeService()
    service.transactions = FakeDriver(refusals)  # type: ignore[attr-defined]
    return service


PART = {"cluster_id": "c1", "physical_topic": "U_TopicA", "physical_partition": 0}


async def _init(http: httpx.AsyncClient, tid: str = "tx") -> dict[str, Any]:
    r = await http.post(f"/v1/transactions/{tid}/init", json={"timeout_ms": 30_000})
    assert r.status_code == 200, r.text
    return dict(r.json())


async def test_a_transaction_goes_from_init_to_complete_through_the_log() -> None:
    service = txn_service()
    async with client(routers_only(service)) as http:
        me = await _init(http)
        assert (me["producer_id"], me["epoch"], me["transaction"]) == (0, 0, None)
        ident = {"producer_id": 0, "epoch": 0, "sequence": 0}
        group = {"cluster_id": "c2", "group": "g"}
        r = await http.post("/v1/transactions/tx/add", json={**ident, "partitions": [PART], "groups": [group]})
        assert r.status_code == 200, r.text
        assert r.json()["transaction"]["state"] == "ongoing"
        r = await http.post("/v1/transactions/tx/end", json={**ident, "commit": True, "min_offset": r.json()["offset"]})
        assert r.json()["transaction"]["state"] == "committing"
        assert r.json()["transaction"]["pending"] == ["c1", "c2"]
        r = await http.post("/v1/transactions/tx/completed", json={**ident, "cluster_ids": ["c1"]})
        assert r.json()["transaction"]["pending"] == ["c2"]
        r = await http.post("/v1/transactions/tx/completed", json={**ident, "cluster_ids": ["c1", "c2"]})
        assert r.status_code == 200, r.text  # c1 again: a no-op
        r = await http.get("/v1/transactions/tx")
    assert r.json()["transaction"]["state"] == "complete_commit"
    assert r.json()["offset"] == service.read_model.image.offset


async def test_a_second_init_fences_the_first_instance_and_aborts_its_open_transaction() -> None:
    service = txn_service()
    async with client(routers_only(service)) as http:
        await _init(http)
        ident = {"producer_id": 0, "epoch": 0, "sequence": 0}
        await http.post("/v1/transactions/tx/add", json={**ident, "partitions": [PART]})
        second = await _init(http)
        assert (second["producer_id"], second["epoch"]) == (0, 1)
        assert second["transaction"]["state"] == "aborting"  # the zombie's open transaction, in the same batch
        r = await http.post("/v1/transactions/tx/end", json={**ident, "commit": True})
    assert r.status_code == 409
    assert r.json()["kafka_error"] == "PRODUCER_FENCED" and r.json()["field"] == "epoch"


async def test_bad_requests_name_the_field_and_the_kafka_error() -> None:
    async with client(build_app(txn_service(), peers=FakePeers())) as http:
        r = await http.post("/v1/transactions/a@b/init", json={})
        assert r.status_code == 422 and r.json()["field"] == "transactional_id"
        r = await http.post("/v1/transactions/tx/init", json={"timeout_ms": 0})
        assert r.status_code == 422 and r.json()["field"] == "timeout_ms"
        r = await http.post("/v1/transactions/tx/add", json={"producer_id": 0, "epoch": 0, "sequence": 0})
        assert r.status_code == 404 and r.json()["kafka_error"] == "INVALID_PRODUCER_ID_MAPPING"
        await _init(http)
        ident = {"producer_id": 0, "epoch": 0, "sequence": 0}
        r = await http.post("/v1/transactions/tx/add", json={**ident, "partitions": [{**PART, "cluster_id": "c9"}]})
        assert r.status_code == 409 and r.json()["field"] == "partitions.0.cluster_id"
        assert r.json()["kafka_error"] == "_UNSUPPORTED_FEATURE"
        r = await http.post("/v1/transactions/tx/add", json={**ident, "sequence": 3, "partitions": [PART]})
        assert r.status_code == 422 and r.json()["field"] == "sequence"
        r = await http.post("/v1/transactions/tx/add", json={**ident, "extra": 1})
        assert r.status_code == 422 and r.json()["field"] == "extra"
        r = await http.post("/v1/transactions/tx/end", json={**ident, "commit": True})
        assert r.status_code == 409 and r.json()["kafka_error"] == "INVALID_TXN_STATE"  # nothing registered
        r = await http.post("/v1/transactions/tx/end", json={**ident, "commit": True, "min_offset": 10**9})
        assert r.status_code == 503  # this node is behind the producer: retry, never "nothing to decide"
        r = await http.get("/v1/transactions/nobody")
        assert r.status_code == 404 and r.json()["field"] == "transactional_id"


async def test_the_hot_path_and_the_fastapi_route_answer_transaction_writes_alike() -> None:
    answers = []
    for app_of in (routers_only, lambda s: build_app(s, peers=FakePeers())):  # type: ignore[arg-type]
        async with client(app_of(txn_service())) as http:
            r = await http.post("/v1/transactions/tx/init", json={"timeout_ms": 1000})
            answers.append((r.status_code, r.json()))
    assert answers[0] == answers[1]


async def test_a_cluster_whose_brokers_cannot_take_part_is_refused_naming_it_and_why() -> None:
    service = txn_service({"c2": "its brokers do not serve DescribeTransactions"})
    async with client(build_app(service, peers=FakePeers())) as http:
        await _init(http)
        ident = {"producer_id": 0, "epoch": 0, "sequence": 0}
        part = {**PART, "cluster_id": "c2"}
        r = await http.post("/v1/transactions/tx/add", json={**ident, "partitions": [PART, part]})
    assert r.status_code == 409 and r.json()["field"] == "partitions.1.cluster_id"
    assert r.json()["kafka_error"] == "_UNSUPPORTED_FEATURE" and "DescribeTransactions" in r.json()["detail"]
    assert service.transactions.asked == ["c1", "c2"]  # type: ignore[attr-defined]
    assert service.read_model.image.transactions.producers["tx"].txn is None  # nothing registered
