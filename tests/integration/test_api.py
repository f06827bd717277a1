"""The HTTP contract on a real 3-node quorum: writes through any node, identical logs, errors, tails."""

from __future__ import annotations

import threading
import time
import uuid

import httpx
import msgpack
import pytest

from controller.http.app import LEADER_ROUTES
from deploy.launcher import LocalQuorum
from metadata_client.client import READS, ControllerClient
from metadata_client.follower import LogFollower
from metadata_log.errors import InvalidRequest
from metadata_log.records import LATEST_METADATA_VERSION
from metadata_log.snapshot import read_rows, read_runs
from metadata_log.views import metadata_view
from tests.waiting import wait_until

from .conftest import log_of

MSGPACK = {"Accept": "application/msgpack"}


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def test_one_leader_and_every_node_agrees(quorum: LocalQuorum) -> None:
    leader = quorum.leader()
    views = [quorum.client.get(u + "/v1/quorum").json() for u in quorum.urls]
    assert {v["leader_id"] for v in views} == {leader}
    roles = sorted(v["role"] for v in views[0]["voters"])
    assert roles == ["follower", "follower", "leader"]
    assert {v["id"] for v in views[0]["voters"]} == {1, 2, 3}


def test_the_quorum_moves_to_the_newest_metadata_version_every_voter_reads(quorum: LocalQuorum) -> None:
    # a new quorum starts at version 1; the leader raises it once every voter says it reads the newest
    deadline = time.monotonic() + 15
    while True:
        nodes = [quorum.client.get(u + "/v1/node").json() for u in quorum.urls]
        if all(n["metadata_version"] == LATEST_METADATA_VERSION for n in nodes) or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    latest = LATEST_METADATA_VERSION
    assert [(n["metadata_version"], n["reads_metadata_up_to"]) for n in nodes] == [(latest, latest)] * 3
    changes = [r for r in log_of(quorum, quorum.leader()) if r["type"] == "MetadataVersionChanged"]
    assert [r["data"] for r in changes] == [{"version": latest}], "straight to the newest every voter reads"


def test_writes_through_any_node_and_logs_are_identical(quorum: LocalQuorum) -> None:
    region = unique("r")
    for i, url in enumerate(quorum.urls):
        r = quorum.client.post(
            url + "/v1/clusters",
            json={"cluster_id": f"{region}-c{i}", "region": region, "bootstrap_servers": f"127.0.0.1:{19000 + i}"},
        )
        assert r.status_code == 201, r.text
        assert isinstance(r.json()["offset"], int)
    r = quorum.client.post(
        quorum.urls[1] + "/v1/topics", json={"name": unique("T"), "region": region, "partitions_per_cluster": 4}
    )
    assert r.status_code == 201, r.text
    topic = r.json()
    assert [p["partition"] for p in topic["partitions"]] == list(range(12))
    assert [p["cluster_id"] for p in topic["partitions"]] == [f"{region}-c{i}" for i in range(3) for _ in range(4)]
    quorum.wait_applied(topic["offset"])
    logs = [log_of(quorum, n) for n in (1, 2, 3)]
    assert logs[0] == logs[1] == logs[2]
    assert [r["offset"] for r in logs[0]] == list(range(len(logs[0])))


def test_idempotency_key_through_a_follower(quorum: LocalQuorum) -> None:
    follower = next(v.id for v in quorum.voters if v.id != quorum.leader())
    url = quorum.url(follower) + "/v1/clusters"
    body = {"cluster_id": unique("c"), "region": "r-idem", "bootstrap_servers": "127.0.0.1:1"}
    key = {"Idempotency-Key": unique("key")}
    first = quorum.client.post(url, json=body, headers=key)
    again = quorum.client.post(url, json=body, headers=key)
    assert first.status_code == again.status_code == 201
    assert again.headers.get("idempotent-replayed") == "true"
    assert again.json()["offset"] == first.json()["offset"]
    other = quorum.client.post(url, json={**body, "cluster_id": unique("c")}, headers=key)
    assert other.status_code == 422
    assert other.json()["field"] == "Idempotency-Key"
    # a forwarded write is answered by the leader: the follower applies it on the leader's next message
    applied = quorum.url(follower) + "/v1/node"
    wait_until(lambda: quorum.client.get(applied).json()["applied_offset"] >= first.json()["offset"], 10,
               "the follower applies the write")  # fmt: skip
    registered = [r for r in log_of(quorum, follower) if r["type"] == "ClusterRegistered" and r["data"] == {**body}]
    assert len(registered) == 1


@pytest.mark.parametrize(
    "method, path, body, status, field",
    [
        ("POST", "/v1/topics", {"name": "bad name", "region": "r1", "partitions_per_cluster": 1}, 422, "name"),
        (
            "POST",
            "/v1/topics",
            {"name": "t", "region": "r1", "partitions_per_cluster": "x"},
            422,
            "partitions_per_cluster",
        ),
        ("POST", "/v1/topics", {"name": "t", "region": "r1", "partitions_per_cluster": 1, "x": 1}, 422, "x"),
        ("POST", "/v1/topics", {"region": "r1", "partitions_per_cluster": 1}, 422, "name"),
        ("POST", "/v1/topics", {"name": "t", "region": "nowhere", "partitions_per_cluster": 1}, 409, "region"),
        (
            "POST",
            "/v1/clusters",
            {"cluster_id": "c", "region": "r", "bootstrap_servers": "nope"},
            422,
            "bootstrap_servers",
        ),
        ("PUT", "/v1/clusters/missing/state", {"state": "read_only"}, 404, None),
        ("PUT", "/v1/topics/missing/partitions/0/state", {"state": "read_only"}, 404, None),
        ("DELETE", "/v1/topics/missing", None, 404, None),
        ("GET", "/v1/log?offset=-1", None, 422, "offset"),
        ("GET", "/v1/log?offset=0&limit=0", None, 422, "limit"),
        ("GET", "/v1/log?offset=0&wait_ms=99999999", None, 422, "wait_ms"),
        ("GET", "/v1/log", None, 422, "offset"),
        ("GET", "/v1/metadata?topic=missing", None, 404, None),
        ("GET", "/v1/nothing-here", None, 404, None),
    ],
)
def test_bad_input_gets_problem_json_naming_the_field(
    quorum: LocalQuorum, method: str, path: str, body: dict | None, status: int, field: str | None
) -> None:
    for url in quorum.urls:  # the leader and the followers (which forward writes) answer alike
        r = quorum.client.request(method, url + path, json=body)
        assert r.status_code == status, r.text
        assert r.headers["content-type"] == "application/problem+json"
        problem = r.json()
        assert problem["status"] == status and problem["title"] and problem["detail"]
        if field is not None:
            assert problem["field"] == field


def test_malformed_and_oversize_bodies(quorum: LocalQuorum) -> None:
    url = quorum.urls[0] + "/v1/topics"
    r = quorum.client.post(url, content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.headers["content-type"] == "application/problem+json"
    r = quorum.client.post(url, content=b"x" * (2 * 1024 * 1024), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["limit_bytes"] == 1024 * 1024


def test_read_your_writes_and_msgpack(quorum: LocalQuorum, client: ControllerClient) -> None:
    region = unique("r")
    client.post("/v1/clusters", {"cluster_id": unique("c"), "region": region, "bootstrap_servers": "127.0.0.1:1"})
    name = unique("T")
    created = client.post("/v1/topics", {"name": name, "region": region, "partitions_per_cluster": 2})
    for url in quorum.urls:
        r = quorum.client.get(url + "/v1/metadata", params={"topic": name, "min_offset": created["offset"]})
        assert r.status_code == 200
        assert r.json()["offset"] >= created["offset"]
        assert [t["name"] for t in r.json()["topics"]] == [name]
        packed = quorum.client.get(
            url + "/v1/metadata", params={"topic": name}, headers={"Accept": "application/msgpack"}
        )
        assert packed.headers["content-type"] == "application/msgpack"
        assert msgpack.unpackb(packed.content)["topics"][0]["partitions"] == r.json()["topics"][0]["partitions"]
        # the snapshot in both msgpack layouts: records as rows, or runs of one type as columns
        msgpack_snapshots = [
            msgpack.unpackb(quorum.client.get(url + "/v1/snapshot", params=params, headers=MSGPACK).content)
            for params in (
                {"min_offset": created["offset"], **READS},
                {"min_offset": created["offset"], "layout": "runs", **READS},
            )
        ]
        rows, runs = msgpack_snapshots
        assert set(rows) == {"offset", "records"} and set(runs) == {"offset", "runs"}
        from_rows, from_runs = (
            read_rows(rows["records"], rows["offset"]),
            read_runs(runs["runs"], runs["offset"]),
        )
        assert from_rows.topics[name] == from_runs.topics[name]


def test_long_poll_wakes_on_commit(quorum: LocalQuorum, client: ControllerClient) -> None:
    next_offset = quorum.client.get(quorum.urls[2] + "/v1/log", params={"offset": 0, "limit": 1, **READS}).json()[
        "high_watermark"
    ]
    result: dict = {}

    def tail() -> None:
        result["body"] = quorum.client.get(
            quorum.urls[2] + "/v1/log", params={"offset": next_offset, "wait_ms": 10_000, **READS}
        ).json()

    t = threading.Thread(target=tail)
    t.start()
    cluster_id = unique("c")
    client.post("/v1/clusters", {"cluster_id": cluster_id, "region": "r-lp", "bootstrap_servers": "127.0.0.1:1"})
    t.join(15)
    first = result["body"]["records"][0]
    assert first["offset"] == next_offset
    assert first["type"] == "ClusterRegistered" and first["data"]["cluster_id"] == cluster_id


def read_sse(url: str, headers: dict[str, str], count: int) -> list[tuple[int, dict]]:
    """The first ``count`` record events of a stream, as (id, data)."""
    import json

    events: list[tuple[int, dict]] = []
    with httpx.stream("GET", url, headers=headers, timeout=10) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        event: dict[str, str] = {}
        for line in r.iter_lines():
            if line == "":
                if event.get("event") == "record":
                    events.append((int(event["id"]), json.loads(event["data"])))
                    if len(events) == count:
                        return events
                event = {}
            elif not line.startswith(":"):
                key, _, value = line.partition(": ")
                event[key] = value
    return events


def test_sse_resume_with_last_event_id_delivers_every_record_once(
    quorum: LocalQuorum, client: ControllerClient
) -> None:
    start = quorum.client.get(quorum.urls[0] + "/v1/node").json()["high_watermark"]
    ids = [unique("c") for _ in range(10)]
    for cluster_id in ids[:5]:
        client.post("/v1/clusters", {"cluster_id": cluster_id, "region": "r-sse", "bootstrap_servers": "127.0.0.1:1"})
    url = quorum.urls[1] + f"/v1/log/stream?offset={start}"
    quorum.wait_applied(start + 4, [2])
    first = read_sse(url, {}, 3)
    for cluster_id in ids[5:]:
        client.post("/v1/clusters", {"cluster_id": cluster_id, "region": "r-sse", "bootstrap_servers": "127.0.0.1:1"})
    quorum.wait_applied(start + 9, [3])
    # resume on another node, from the last id seen
    rest = read_sse(quorum.urls[2] + "/v1/log/stream", {"Last-Event-ID": str(first[-1][0])}, 7)
    seen = first + rest
    assert [offset for offset, _ in seen] == list(range(start, start + 10))
    assert [data["data"]["cluster_id"] for _, data in seen] == ids


def test_follower_client_fails_over_and_matches_merged_metadata(quorum: LocalQuorum, client: ControllerClient) -> None:
    region = unique("r")
    client.post("/v1/clusters", {"cluster_id": unique("c"), "region": region, "bootstrap_servers": "127.0.0.1:1"})
    dead = "http://127.0.0.1:9"  # nothing listens on the discard port
    with LogFollower([dead, *quorum.urls], wait_ms=200) as follower:
        follower.start()
        created = client.post("/v1/topics", {"name": unique("T"), "region": region, "partitions_per_cluster": 3})
        assert follower.wait_for(created["offset"], 10)
        # nothing else writes meanwhile, so the node and the follower are at the same offset
        merged = quorum.client.get(quorum.urls[0] + "/v1/metadata", params={"min_offset": created["offset"]})
        assert follower.image.offset == created["offset"] == merged.json()["offset"]
        assert merged.json() == metadata_view(follower.image)
        assert follower.url != dead


def test_client_surfaces_4xx_without_retrying(client: ControllerClient) -> None:
    with pytest.raises(InvalidRequest) as e:
        client.post("/v1/topics", {"name": "bad name", "region": "r", "partitions_per_cluster": 1})
    assert e.value.field == "name"


def test_openapi_and_ops_endpoints(quorum: LocalQuorum) -> None:
    url = quorum.urls[0]
    spec = quorum.client.get(url + "/openapi.json").json()
    for path in (
        "/v1/quorum",
        "/v1/metadata",
        "/v1/log",
        "/v1/log/stream",
        "/v1/snapshot",
        "/v1/clusters",
        "/v1/topics",
    ):
        assert path in spec["paths"]
    # the hot path's routes are FastAPI's routes: same path, method and body model (one place to drift from)
    hot_writes = [route for route in LEADER_ROUTES if route.hot]
    assert len(hot_writes) >= 5
    for route in LEADER_ROUTES:
        operation = spec["paths"][route.template][route.method.lower()]
        if route.hot:
            assert route.body is not None
            body_schema = operation["requestBody"]["content"]["application/json"]["schema"]
            assert body_schema["$ref"].endswith("/" + route.body.__name__), route.template
        assert str(route.status) in operation["responses"], route.template
        path_params = {p["name"]: p["schema"]["type"] for p in operation.get("parameters", []) if p["in"] == "path"}
        declared = {name for _, name in route.segments if name is not None}
        assert path_params == {n: "integer" if n in route.int_params else "string" for n in declared}
    assert quorum.client.get(url + "/docs").status_code == 200
    assert quorum.client.get(url + "/healthz").status_code == 200
    assert quorum.client.get(url + "/readyz").status_code == 200
    metrics = quorum.client.get(url + "/metrics").text
    for name in ("kfed_raft_role", "kfed_raft_term", "kfed_raft_stalls_total", "kfed_applied_offset",
                 "kfed_high_watermark", "kfed_http_request_duration_seconds_bucket"):  # fmt: skip
        assert name in metrics


def test_a_write_bigger_than_64_kib_replicates_to_every_node(quorum: LocalQuorum, client: ControllerClient) -> None:
    # An agent's report of 1,000 physical topics with long names is one ~250 KB Raft command (one record per
    # physical topic), which pysyncobj sends in chunks. (Its chunking bug above 64 KiB only slowed such
    # commands down, so this checks the outcome, not the speed.) A topic's partitions are ranges: no longer big.
    region = unique("r")
    cluster_id = f"{region}-c0"
    client.post("/v1/clusters", {"cluster_id": cluster_id, "region": region, "bootstrap_servers": "h:1"})
    names = [f"{'p' * 240}{i:04d}" for i in range(1000)]
    report = [{"physical_topic": name, "physical_partition": 0, "leader": "127.0.0.1:9092"} for name in names]
    reported = client.post(f"/v1/agents/{cluster_id}/partitions", {"partitions": report})
    quorum.wait_applied(reported["offset"], timeout_s=30)
    pages = [
        quorum.client.get(url + "/v1/log", params={"offset": reported["offset"] - 999, "limit": 1000, **READS}).json()
        for url in quorum.urls
    ]
    for page in pages:
        records = page["records"]
        assert records == pages[0]["records"] and len(records) == 1000
        assert [r["data"]["physical_topic"] for r in records] == names


def test_hot_writes_answer_as_the_fastapi_routes_do(quorum: LocalQuorum) -> None:
    """The leader serves well-formed JSON writes on ``controller/http/hotpath.py``; the same request without a
    Content-Type of application/json goes through FastAPI (a ``+json`` type is JSON to it too).
    Both must answer alike."""
    leader, c = quorum.url(quorum.leader()), quorum.client
    cluster, topic = unique("hot-c"), unique("hot-t")
    c.post(leader + "/v1/clusters", json={"cluster_id": cluster, "region": cluster, "bootstrap_servers": "h:1"})
    c.post(leader + "/v1/topics", json={"name": topic, "region": cluster, "partitions_per_cluster": 2})
    path = f"{leader}/v1/topics/{topic}/partitions/0/state"

    def put(state: str, content_type: str | None, **headers: str) -> httpx.Response:
        body = f'{{"state": "{state}"}}'.encode()
        if content_type:
            headers["Content-Type"] = content_type
        return c.put(path, content=body, headers=headers)

    hot, routed = put("read_only", "application/json"), put("writable", "application/vnd.kfed+json")
    assert hot.status_code == routed.status_code == 200
    assert hot.headers["content-type"] == routed.headers["content-type"] == "application/json"
    assert routed.json()["offset"] > hot.json()["offset"]  # not always + 1: a lease's fence may commit between
    for reply, state in ((hot, "read_only"), (routed, "writable")):
        page = c.get(leader + "/v1/log", params={"offset": reply.json()["offset"], "limit": 1, **READS}).json()
        assert (page["records"][0]["type"], page["records"][0]["data"]["state"]) == ("PartitionStateChanged", state)
    assert hot.json()["partitions"][0]["state"] == "read_only"
    assert routed.json()["partitions"][0]["state"] == "writable"
    assert {**hot.json(), "offset": 0, "partitions": []} == {**routed.json(), "offset": 0, "partitions": []}

    # an Idempotency-Key first used on one path is honoured on the other (same fingerprint)
    first = put("read_only", "application/json", **{"Idempotency-Key": topic})
    again = put("read_only", "application/vnd.kfed+json", **{"Idempotency-Key": topic})
    assert again.headers["idempotent-replayed"] == "true" and again.json()["offset"] == first.json()["offset"]
    other = put("writable", "application/json", **{"Idempotency-Key": topic})
    assert other.status_code == 422 and other.json()["field"] == "Idempotency-Key"

    packed = put("writable", "application/json", Accept="application/msgpack")
    assert packed.headers["content-type"] == "application/msgpack"
    assert msgpack.unpackb(packed.content)["partitions"][0]["state"] == "writable"

    # errors: bad bodies are FastAPI's 422 naming the field; the service's own errors are problem+json too
    bad = c.put(path, json={"state": 5})
    assert bad.status_code == 422 and bad.json()["field"] == "state"
    unknown = c.put(f"{leader}/v1/topics/{topic}-nope/partitions/0/state", json={"state": "read_only"})
    assert unknown.status_code == 404 and unknown.headers["content-type"] == "application/problem+json"
    metrics = c.get(leader + "/metrics").text
    assert 'route="/v1/topics/{name}/partitions/{partition}/state",status="2xx"' in metrics
