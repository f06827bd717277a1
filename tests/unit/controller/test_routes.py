"""The HTTP edge without a quorum: the routers over a fake service, given through FastAPI's dependency
overrides (``deps.get_service``, ``deps.get_peers``), and the hot path built from the routers' declarations.

The fake service applies commands to a real image at once (no Raft); what is tested is the edge: what a
route passes to the service, how it encodes the answer, which node answers, and that the hot path and the
FastAPI route answer a write alike."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
import msgpack
import pytest
from fastapi import FastAPI
from starlette.responses import Response

from controller import problems
from controller.config import QuorumConfig, Voter
from controller.http import build_app, deps
from controller.http.app import ROUTERS
from controller.http.log import SSE_MAX_PER_CLIENT, LogStreams, get_streams
from controller.readmodel import ReadModel
from controller.service import WriteReply, fingerprint
from metadata_client.client import READS
from metadata_log.commands import Result
from metadata_log.image import MetadataImage, apply
from metadata_log.records import (
    ClusterRegistered,
    MetadataVersionChanged,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PhysicalLeadersReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from tests.unit.samples import ONE_OF_EACH

from ..samples import log_delta

VOTERS = QuorumConfig(tuple(Voter(i, f"127.0.0.1:{9100 + i}", f"http://127.0.0.1:{8000 + i}") for i in (1, 2, 3)))


@dataclass
class _Status:
    role: str
    term: int = 4
    leader_raft: str | None = None
    stalls: int = 0


class _Raft:
    def __init__(self, service: FakeService) -> None:
        self.service = service

    def status(self) -> _Status:
        return _Status("leader" if self.service.leading else "follower")

    def current_age_s(self) -> float:
        return 0.0


def committed(rm: ReadModel, records: Sequence[Record]) -> None:
    """``records`` committed: the read model gets them as a node's publisher hands them over."""
    rm.on_update(log_delta(rm.image, tuple(records)), apply(rm.image, records))


class FakeService:
    """The service as the routes use it: a real image, writes applied at once, every write recorded."""

    commit_timeout_s = 5.0
    node_status_of = None

    def __init__(self, leading: bool = True, replayed: bool = False) -> None:
        self.node_id = 1
        self.leading = leading
        self.replayed = replayed
        self.raft = _Raft(self)
        self.read_model = ReadModel()
        committed(self.read_model, ONE_OF_EACH[:9])
        self.writes: list[tuple[str | None, str]] = []

    def is_leader(self) -> bool:
        return self.leading

    def leader(self) -> Voter | None:
        return VOTERS.voters[0]

    def voters(self) -> QuorumConfig:
        return VOTERS

    async def image_at_least(self, min_offset: int | None, timeout_s: float) -> MetadataImage:
        return self.read_model.image

    async def write(
        self,
        command: Callable[[MetadataImage], Result],
        render: Callable[[MetadataImage], dict[str, Any]],
        key: str | None,
        request_fingerprint: str,
    ) -> WriteReply:
        self.writes.append((key, request_fingerprint))
        rm = self.read_model
        result = command(rm.image)
        committed(rm, result.records)
        if self.replayed:
            return WriteReply(render(self.read_model.image), self.read_model.image.offset, replayed=True)
        return WriteReply(result.reply, self.read_model.image.offset)


class FakePeers:
    """Other voters that answer what the test says; requests passed on to the leader are recorded."""

    def __init__(self, statuses: Mapping[str, dict[str, Any] | None] | None = None) -> None:
        self.statuses = dict(statuses or {})
        self.forwarded: list[tuple[str, str, bytes]] = []

    async def forward(
        self, method: str, raw_path: str, query: str, headers: Mapping[str, str], body: bytes
    ) -> Response:
        self.forwarded.append((method, raw_path.split("?")[0], body))
        return Response(b'{"from":"leader"}', status_code=202, media_type="application/json")

    async def node_status(self, voter_http: str, timeout_s: float = 0.5) -> dict[str, Any] | None:
        return self.statuses.get(voter_http)

    async def aclose(self) -> None:
        pass


def routers_only(service: FakeService, peers: FakePeers | None = None) -> FastAPI:
    """The routers alone (no hot path, no middleware), their dependencies overridden."""
    app = FastAPI()
    problems.install(app)
    for router in ROUTERS:
        app.include_router(router)
    app.dependency_overrides[deps.get_service] = lambda: service
    app.dependency_overrides[deps.get_peers] = lambda: peers or FakePeers()
    return app


def client(app: FastAPI) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://node")


CLUSTER = {"cluster_id": "c9", "region": "r1", "bootstrap_servers": "127.0.0.1:9092"}


async def test_a_write_commits_its_plan_under_the_key_and_answers_with_the_offset() -> None:
    service = FakeService()
    async with client(routers_only(service)) as http:
        r = await http.post("/v1/clusters", json=CLUSTER, headers={"Idempotency-Key": "k1"})
    assert r.status_code == 201 and r.headers["content-type"] == "application/json"
    assert r.json() == {**r.json(), "cluster_id": "c9", "region": "r1", "offset": service.read_model.image.offset}
    assert service.writes == [("k1", fingerprint("POST", "/v1/clusters", r.request.content))]
    assert "c9" in service.read_model.image.clusters


async def test_the_hot_path_and_the_fastapi_route_answer_a_write_alike() -> None:
    answers = []
    for app_of in (routers_only, lambda s: build_app(s, peers=FakePeers())):  # type: ignore[arg-type]
        for replayed in (False, True):
            service = FakeService(replayed=replayed)
            async with client(app_of(service)) as http:
                for accept in ("application/json", "application/msgpack"):
                    r = await http.put("/v1/topics/U_TopicA/partitions/1/state", json={"state": "read_only"},
                                       headers={"Accept": accept, "Idempotency-Key": "k"})  # fmt: skip
                    answers.append((replayed, accept, r.status_code, dict(r.headers), r.content))
            assert len(service.writes) == 2
    fastapi_route, hot_path = answers[:4], answers[4:]
    assert fastapi_route == hot_path
    assert [a[3].get("idempotent-replayed") for a in hot_path] == [None, None, "true", "true"]
    assert msgpack.unpackb(hot_path[1][4])["offset"] == json.loads(hot_path[0][4])["offset"]


async def test_a_bad_write_gets_fastapis_answer_from_the_hot_path() -> None:
    async with client(build_app(FakeService(), peers=FakePeers())) as http:
        r = await http.post("/v1/clusters", json={**CLUSTER, "extra": 1})
        assert r.status_code == 422 and r.json()["field"] == "extra"
        r = await http.post("/v1/topics", json={"name": "bad name", "region": "r1", "partitions_per_cluster": 1})
        assert r.status_code == 422 and r.json()["field"] == "name"
        r = await http.post("/v1/clusters", json=CLUSTER, headers={"Idempotency-Key": ""})
        assert r.status_code == 422 and r.json()["field"] == "Idempotency-Key"


async def test_a_follower_passes_leader_routes_on_unparsed_and_answers_reads_itself() -> None:
    peers = FakePeers()
    async with client(build_app(FakeService(leading=False), peers=peers)) as http:
        for method, path, body in [
            ("POST", "/v1/clusters", b"{not json"),
            ("PUT", "/v1/topics/T/partitions/+7/state", b"{}"),  # FastAPI would read +7 as 7: the leader decides
            ("DELETE", "/v1/topics/T", b""),
            ("GET", "/v1/agents", b""),
            ("POST", "/v1/groups/g/leave", b'{"member_id":"m"}'),
            ("DELETE", "/v1/quorum/voters/3", b""),
        ]:
            r = await http.request(method, path, content=body)
            assert (r.status_code, r.json()) == (202, {"from": "leader"}), (method, path)
            assert peers.forwarded[-1] == (method, path, body)
        for path in ("/v1/clusters", "/v1/topics/U_TopicA", "/v1/groups/g1/coordinator", "/v1/node"):
            assert (await http.get(path)).status_code == 200, path
    assert len(peers.forwarded) == 6


async def test_a_leader_route_reached_on_a_follower_is_refused_for_a_retry() -> None:
    async with client(routers_only(FakeService(leading=False))) as http:
        for method, path in [("GET", "/v1/agents"), ("POST", "/v1/clusters"), ("GET", "/v1/drain")]:
            r = await http.request(method, path, json=CLUSTER if method == "POST" else None)
            assert r.status_code == 503 and r.headers["retry-after"] == "1", path
            assert r.headers["content-type"] == "application/problem+json"


async def test_reads_answer_in_the_encoding_asked_for_and_errors_as_problems() -> None:
    async with client(routers_only(FakeService())) as http:
        as_json = (await http.get("/v1/clusters/c1")).json()
        as_msgpack = await http.get("/v1/clusters/c1", headers={"Accept": "application/msgpack"})
        assert as_msgpack.headers["content-type"] == "application/msgpack"
        assert msgpack.unpackb(as_msgpack.content) == as_json and as_json["cluster_id"] == "c1"
        missing = await http.get("/v1/topics/nope")
        assert missing.status_code == 404 and missing.headers["content-type"] == "application/problem+json"
        assert missing.json()["detail"] == "topic 'nope' does not exist"


async def test_the_quorum_view_merges_what_each_voter_says_about_itself() -> None:
    peers = FakePeers({"http://127.0.0.1:8002": {"role": "follower", "term": 4, "applied_offset": 3,
                                                 "high_watermark": 99}})  # fmt: skip
    service = FakeService()
    async with client(routers_only(service, peers)) as http:
        view = (await http.get("/v1/quorum")).json()
    assert [(v["id"], v["role"], v["applied_offset"]) for v in view["voters"]] == [
        (1, "leader", service.read_model.image.offset),
        (2, "follower", 3),
        (3, "unreachable", None),
    ]
    assert view["high_watermark"] == 99 and view["leader_id"] == 1


async def test_a_voter_is_added_only_when_the_node_answers_as_that_id() -> None:
    peers = FakePeers({"http://127.0.0.1:8004": {"id": 5}})
    async with client(routers_only(FakeService(), peers)) as http:
        for http_url in ("http://127.0.0.1:8004", "http://127.0.0.1:8005"):
            r = await http.post("/v1/quorum/voters", json={"id": 4, "raft": "127.0.0.1:9104", "http": http_url})
            assert r.status_code == 409 and r.json()["field"] == "http"


async def test_a_client_gets_a_bounded_number_of_log_streams() -> None:
    app = routers_only(FakeService())
    streams = LogStreams()
    app.dependency_overrides[get_streams] = lambda: streams
    for _ in range(SSE_MAX_PER_CLIENT):
        streams.admit("127.0.0.1")
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app, client=("127.0.0.1", 5000))) as http:
        r = await http.get("http://node/v1/log/stream")
    assert r.status_code == 429 and r.json()["limit"] == SSE_MAX_PER_CLIENT and r.headers["retry-after"] == "5"
    streams.release("127.0.0.1")
    streams.admit("127.0.0.1")  # a closed stream makes room
    assert streams.open == SSE_MAX_PER_CLIENT


async def test_the_built_app_gives_routes_its_own_service_and_peers() -> None:
    service = FakeService()
    service.raft.alive = lambda: True  # type: ignore[attr-defined]
    peers = FakePeers({"http://127.0.0.1:8003": {"role": "follower", "term": 4, "applied_offset": 1,
                                                 "high_watermark": 5}})  # fmt: skip
    async with client(build_app(service, peers=peers)) as http:  # type: ignore[arg-type]
        assert (await http.get("/v1/metadata")).json()["offset"] == service.read_model.image.offset
        assert [v["role"] for v in (await http.get("/v1/quorum")).json()["voters"]] == [
            "leader", "unreachable", "follower"
        ]  # fmt: skip
        assert (await http.get("/healthz")).status_code == 200


async def test_a_long_poll_answers_with_the_records_committed_while_it_waits() -> None:
    service = FakeService()
    rm = service.read_model
    next_offset = rm.high_watermark
    async with client(routers_only(service)) as http:
        waiting = asyncio.create_task(http.get("/v1/log", params={"offset": next_offset, "wait_ms": 10_000}))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        async with client(routers_only(service)) as writer:
            await writer.post("/v1/clusters", json=CLUSTER)
        page = (await asyncio.wait_for(waiting, 5)).json()
    assert [r["offset"] for r in page["records"]] == [next_offset]
    assert page["records"][0]["type"] == "ClusterRegistered" and page["next_offset"] == next_offset + 1


async def test_offsets_below_the_window_are_gone_with_where_to_continue() -> None:
    service = FakeService()
    service.read_model = ReadModel(retention_records=2)
    committed(service.read_model, ONE_OF_EACH[:9])
    async with client(routers_only(service)) as http:
        gone = await http.get("/v1/log", params={"offset": 0, "wait_ms": 10_000})
        kept = await http.get("/v1/log", params={"offset": service.read_model.log_start_offset})
    assert gone.status_code == 410 and gone.headers["content-type"] == "application/problem+json"
    assert gone.json()["log_start_offset"] == service.read_model.log_start_offset > 0
    assert gone.json()["snapshot_offset"] == 8 and kept.json()["next_offset"] == 9


def test_each_write_is_declared_once_and_the_hot_path_takes_those_with_a_body() -> None:
    from controller.http.app import LEADER_ROUTES

    declared = [(r.method, r.template) for r in LEADER_ROUTES]
    assert len(declared) == len(set(declared))
    writes = {template for _, template in declared if template.startswith("/v1/topics")}
    assert writes == {"/v1/topics", "/v1/topics/{name}/partitions", "/v1/topics/{name}/partitions/{partition}/state",
                      "/v1/topics/{name}", "/v1/topics/{name}/shrink", "/v1/topics/{name}/key_order"}  # fmt: skip
    hot = {r.template for r in LEADER_ROUTES if r.hot}
    assert "/v1/topics/{name}/partitions/{partition}/state" in hot and "/v1/topics/{name}" not in hot


async def test_a_reader_gets_only_the_records_of_the_metadata_version_it_says_it_reads() -> None:
    """Range records are of metadata version 4: a reader that does not say it reads them (an older client, which
    does not know the parameter) gets the log up to the first of them, then a 409 naming ``metadata_version``,
    on ``/v1/log``, its stream and ``/v1/snapshot``; one that asks for 4 gets them."""
    service = FakeService()
    rm = service.read_model
    first = rm.high_watermark
    ranges = [
        ClusterRegistered("c7", "r1", "127.0.0.1:1"),
        TopicCreated("id-r", "R", "r1"),
        MetadataVersionChanged(4),  # the quorum reads range records from here on
        PartitionRangeAdded("R", 0, 100, "c7", "R", 0),
    ]
    committed(rm, ranges)
    app = routers_only(service)
    streams = LogStreams()
    app.dependency_overrides[get_streams] = lambda: streams
    async with client(app) as http:
        old = (await http.get("/v1/log", params={"offset": first})).json()
        refused = await http.get("/v1/log", params={"offset": first + 2})
        new = (await http.get("/v1/log", params={"offset": first, "metadata_version": 4})).json()
        too_new = await http.get("/v1/log", params={"offset": first, "metadata_version": 5})
        stream = await http.get("/v1/log/stream", params={"offset": first + 2})
        # a stream of one topic: the federation-wide records, not another topic's (then the newer one ends it)
        selected = await http.get("/v1/log/stream", params={"offset": first, "topics": "Q"})
        snapshot_old = await http.get("/v1/snapshot")
    assert [r["type"] for r in old["records"]] == ["ClusterRegistered", "TopicCreated"]
    assert old["next_offset"] == first + 2 and old["high_watermark"] == first + 4  # the page stops before it
    assert refused.status_code == 409 and refused.json()["field"] == "metadata_version"
    assert "metadata version 4" in refused.json()["detail"]
    assert [r["type"] for r in new["records"]][-1] == "PartitionRangeAdded" and new["next_offset"] == first + 4
    assert too_new.status_code == 422 and too_new.json()["field"] == "metadata_version"
    assert b"event: newer" in stream.content and b"metadata_version" in stream.content
    assert b'"ClusterRegistered"' in selected.content and b'"TopicCreated"' not in selected.content
    assert b"event: newer" in selected.content
    assert snapshot_old.status_code == 409 and snapshot_old.json()["field"] == "metadata_version"  # a version 4 image


def test_a_topic_is_read_in_pages_and_the_client_reads_them_all() -> None:
    from starlette.testclient import TestClient

    from controller.http.metadata import RenderedMetadata
    from metadata_client.client import ControllerClient

    service = FakeService()
    rm = service.read_model
    committed(
        rm,
        [ClusterRegistered("c7", "r1", "127.0.0.1:1"), TopicCreated("id-r", "R", "r1"),
         PartitionRangeAdded("R", 0, 2500, "c7", "R", 0)],
    )  # fmt: skip
    app = routers_only(service)
    app.state.rendered_metadata = RenderedMetadata()
    with TestClient(app, base_url="http://node") as http:
        first = http.get("/v1/topics/R").json()
        last = http.get("/v1/topics/R", params={"first_partition": 2000, "partition_limit": 1000}).json()
        beyond = http.get("/v1/topics/R", params={"first_partition": 5000}).json()
        one = http.get("/v1/metadata", params={"topic": "R", "first_partition": 2400}).json()["topics"][0]
        everything = http.get("/v1/metadata").json()["topics"]
        too_many = http.get("/v1/topics/R", params={"partition_limit": 10_001})
        no_topic = http.get("/v1/metadata", params={"first_partition": 5})
        names = sorted(rm.image.topics)
        page1 = http.get("/v1/metadata", params={"topic_limit": 1}).json()
        page2 = http.get("/v1/metadata", params={"first_topic": page1["next_topic"], "topic_limit": 10}).json()
        with ControllerClient("http://node", client=http) as client:  # closes the client it is given
            whole = client.topic("R")
    assert [t["name"] for t in page1["topics"]] == names[:1] and page1["next_topic"] == names[1]
    assert [t["name"] for t in page2["topics"]] == names[1:] and page2["next_topic"] is None
    assert (len(first["partitions"]), first["partition_count"], first["next_partition"]) == (1000, 2500, 1000)
    assert [p["partition"] for p in last["partitions"]] == list(range(2000, 2500)) and last["next_partition"] is None
    assert (beyond["partitions"], beyond["partition_count"], beyond["next_partition"]) == ([], 2500, None)
    assert [p["partition"] for p in one["partitions"]] == list(range(2400, 2500))
    assert [len(t["partitions"]) for t in everything if t["name"] == "R"] == [1000]  # a page per topic
    assert too_many.status_code == 422 and too_many.json()["field"] == "partition_limit"
    assert no_topic.status_code == 422 and no_topic.json()["field"] == "first_partition"
    assert [p["partition"] for p in whole["partitions"]] == list(range(2500)) and whole["next_partition"] is None


def test_a_follower_of_one_topic_gets_its_records_and_snapshot_and_nothing_of_another() -> None:
    from starlette.testclient import TestClient

    from metadata_client.follower import LogFollower
    from metadata_log.selection import Selection

    service = FakeService()
    rm = service.read_model
    committed(rm, [ClusterRegistered("c7", "r1", "127.0.0.1:1"), TopicCreated("id-x", "X", "r1"),
                   PartitionRangeAdded("X", 0, 10, "c7", "X", 0)])  # fmt: skip
    app = routers_only(service)
    with TestClient(app, base_url="http://node") as http:
        follower = LogFollower("http://node", client=http, topics={"X"}, wait_ms=0)
        follower.poll()
        assert follower.image == Selection.of({"X"}, rm.image).image(rm.image) and follower.snapshots_loaded == 1
        committed(rm, [TopicCreated("id-y", "Y", "r1"), PartitionRangeAdded("Y", 0, 5, "c7", "Y", 0),
                       PhysicalLeadersReported("c7", "Y", ("127.0.0.1:1",), (0, 5), (0, 0, 0, 0, 0)),
                       PhysicalLeadersReported("c7", "X", ("127.0.0.1:1",), (0, 2), (0, 0))])  # fmt: skip
        page = http.get("/v1/log", params={"offset": follower.next_offset, "topics": "X", **READS}).json()
        assert [r["type"] for r in page["records"]] == ["PhysicalLeadersReported"]
        assert page["next_offset"] == rm.high_watermark
        assert follower.poll() == 1 and follower.image.offset == rm.image.offset and "Y" not in follower.image.topics
        assert follower.image == Selection.of({"X"}, rm.image).image(rm.image)
        follower.follow({"Y"})  # a producer writes to Y now: its snapshot of both
        assert set(follower.image.topics) == {"X", "Y"} and follower.snapshots_loaded == 2
        too_many = http.get("/v1/log", params={"offset": 0, "topics": ",".join(f"t{i}" for i in range(1001))})
        assert too_many.status_code == 422 and too_many.json()["field"] == "topics"


def test_an_agents_follower_holds_its_clusters_topics_and_loads_a_topic_expanded_onto_it() -> None:
    from starlette.testclient import TestClient

    from metadata_client.follower import LogFollower
    from metadata_log.selection import Selection

    service = FakeService()
    rm = service.read_model
    committed(rm, [ClusterRegistered("c7", "r1", "127.0.0.1:1"), ClusterRegistered("c8", "r1", "127.0.0.1:2"),
                   TopicCreated("id-x", "X", "r1"), PartitionRangeAdded("X", 0, 10, "c7", "X", 0),
                   TopicCreated("id-z", "Z", "r1"), PartitionRangeAdded("Z", 0, 4, "c8", "Z", 0),
                   TopicCreated("id-w", "W", "r1"), PartitionRangeAdded("W", 0, 4, "c8", "W", 0)])  # fmt: skip
    app = routers_only(service)
    with TestClient(app, base_url="http://node") as http:
        follower = LogFollower("http://node", client=http, clusters={"c7"}, wait_ms=0)
        follower.poll()
        assert follower.image == Selection.of((), rm.image, {"c7"}).image(rm.image)
        assert "X" in follower.image.topics and not {"Z", "W"} & set(follower.image.topics)
        committed(rm, [PhysicalLeadersReported("c8", "Z", ("127.0.0.1:2",), (0, 4), (0, 0, 0, 0)),
                       TopicDeleted("W"),
                       PhysicalLeadersReported("c7", "X", ("127.0.0.1:1",), (0, 2), (0, 0))])  # fmt: skip
        assert follower.poll() == 1, "only its own cluster's leaders; the deletion of W, not held, skipped"
        assert follower.image == Selection.of((), rm.image, {"c7"}).image(rm.image)
        loads = follower.snapshots_loaded
        committed(rm, [PartitionRangeAdded("Z", 4, 4, "c7", "Z", 0)])  # Z expanded onto c7
        follower.poll()
        assert follower.snapshots_loaded == loads + 1 and "Z" in follower.image.topics
        follower.poll()
        assert follower.image == Selection.of((), rm.image, {"c7"}).image(rm.image)
        assert follower.image.offset == rm.image.offset
        too_many = http.get("/v1/log", params={"offset": 0, "clusters": ",".join(f"c{i}" for i in range(101))})
        assert too_many.status_code == 422 and too_many.json()["field"] == "clusters"


class Nodes(httpx.BaseTransport):
    """Requests to http://a, http://b, ..., each to its node's app; a node in ``down`` refuses connections."""

    def __init__(self, clients: dict[str, Any]) -> None:  # host -> starlette TestClient
        self.clients, self.down = clients, set[str]()

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if request.url.host in self.down:
            raise httpx.ConnectError("connection refused", request=request)
        response: httpx.Response = self.clients[request.url.host]._transport.handle_request(request)
        return response


def test_a_selection_that_cannot_grow_for_want_of_a_controller_stays_as_it_was_until_a_poll_grows_it() -> None:
    from starlette.testclient import TestClient

    from metadata_client.follower import FollowerError, LogFollower

    service = FakeService()
    committed(service.read_model, [ClusterRegistered("c7", "r1", "127.0.0.1:1"), TopicCreated("id-x", "X", "r1"),
                                   TopicCreated("id-y", "Y", "r1")])  # fmt: skip
    with TestClient(routers_only(service), base_url="http://a") as ta:
        nodes = Nodes({"a": ta})
        with httpx.Client(transport=nodes) as http:
            follower = LogFollower(["http://a"], client=http, topics={"X"}, wait_ms=0)
            follower.poll()
            before = follower.image
            nodes.down.add("a")
            with pytest.raises(FollowerError):
                follower.follow({"Y"})
            assert follower.topics == {"X"} and follower.image is before, "neither half-switched"
            with pytest.raises(FollowerError):
                follower.select(None)
            assert follower.topics == {"X"} and follower.image is before
            nodes.down.clear()
            follower.poll()  # the follower's own thread retries what it was asked to follow
            assert follower.topics == {"X", "Y"}
    assert set(follower.image.topics) == {"X", "Y"}


def test_a_growing_selection_says_it_follows_its_new_topics_only_once_their_snapshot_loaded() -> None:
    from starlette.testclient import TestClient

    from metadata_client.follower import LogFollower

    service = FakeService()
    committed(service.read_model, [TopicCreated("id-x", "X", "r1"), TopicCreated("id-y", "Y", "r1")])
    seen: list[bool] = []  # follows("Y") while each snapshot is being served

    class Watching(Nodes):
        def handle_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/v1/snapshot":
                seen.append(follower.follows("Y"))
            return super().handle_request(request)

    with (
        TestClient(routers_only(service), base_url="http://a") as ta,
        httpx.Client(transport=Watching({"a": ta})) as http,
    ):
        follower = LogFollower(["http://a"], client=http, topics={"X"}, wait_ms=0)
        follower.poll()
        follower.follow({"Y"})  # a concurrent request for Y must not be answered from the image without it
    assert seen == [False, False] and follower.follows("Y") and "Y" in follower.image.topics


def test_a_follower_of_one_topic_carries_on_across_a_dead_node_and_a_410_holding_only_its_topic() -> None:
    from starlette.testclient import TestClient

    from metadata_client.follower import LogFollower
    from metadata_log.selection import Selection

    a, b = FakeService(), FakeService()
    b.read_model = ReadModel(retention_records=4)  # a short window: a follower that was away gets 410
    committed(b.read_model, ONE_OF_EACH[:9])
    start = [ClusterRegistered("c7", "r1", "127.0.0.1:1"), TopicCreated("id-x", "X", "r1"),
             PartitionRangeAdded("X", 0, 8, "c7", "X", 0), TopicCreated("id-y", "Y", "r1"),
             PartitionRangeAdded("Y", 0, 8, "c7", "Y", 0)]  # fmt: skip
    for node in (a, b):
        committed(node.read_model, start)
    with TestClient(routers_only(a), base_url="http://a") as ta, TestClient(routers_only(b), base_url="http://b") as tb:
        nodes = Nodes({"a": ta, "b": tb})
        with httpx.Client(transport=nodes) as http:
            follower = LogFollower(["http://a", "http://b"], client=http, topics={"X"}, wait_ms=0)
            follower.poll()
            assert follower.url == "http://a" and set(follower.image.topics) == {"X"}
            nodes.down.add("a")  # node a dies; b goes on (the new leader) and trims its log
            for i in range(12):
                topic = "X" if i % 2 else "Y"
                leader = f"127.0.0.1:{100 + i}"
                committed(b.read_model, [PhysicalLeadersReported("c7", topic, (leader,), (0, 8), (0,) * 8)])
            committed(b.read_model, [PartitionRangeStateChanged("X", 2, 2, "read_only"),
                                     PartitionRangeAdded("Y", 8, 8, "c7", "Y", 8)])  # fmt: skip
            loads = follower.snapshots_loaded
            while follower.poll() or not follower.caught_up:
                pass
    whole = b.read_model.image
    assert follower.url == "http://b" and follower.snapshots_loaded == loads + 1, "a 410 on b: its snapshot"
    assert follower.image == Selection.of({"X"}, whole).image(whole) and follower.image.offset == whole.offset
    assert [p.state for p in follower.image.topics["X"].partitions][2:4] == ["read_only"] * 2
    assert set(follower.image.topics) == {"X"} and ("Y", 0) not in follower.image.clusters["c7"].leaders
    assert follower.image.clusters["c7"].leaders.get(("X", 7)) == "127.0.0.1:111"  # X's last report
