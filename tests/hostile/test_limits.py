"""Hostile input by hand: oversize and malformed bodies, limits on request parameters and open streams,
voter changes aimed at nothing, and a broken or hostile controller answering a LogFollower."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import httpx
import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from controller.http.limits import MAX_REQUEST_BYTES
from controller.http.log import LOG_LIMIT_MAX, SSE_MAX_PER_CLIENT, WAIT_MS_MAX
from deploy.launcher import LocalQuorum
from metadata_client.client import READS
from metadata_client.follower import FollowerError, LogFollower
from metadata_log.codec import MAX_DECODE_BYTES, CodecError, decode, record_from_dict, record_from_wire, unpack
from metadata_log.image import InvalidRecord
from metadata_log.snapshot import read_rows


@pytest.fixture(scope="module")
def q(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalQuorum]:
    with LocalQuorum(tmp_path_factory.mktemp("limits")) as quorum:
        quorum.wait_ready()
        yield quorum


def assert_problem(r: httpx.Response, status: int, field: str | None = None) -> dict:
    assert r.status_code == status, r.text[:300]
    assert r.headers["content-type"] == "application/problem+json"
    body = r.json()
    assert body["status"] == status and body["detail"]
    if field is not None:
        assert body["field"] == field, body
    return body


def test_oversize_bodies_are_refused_before_they_are_read(q: LocalQuorum) -> None:
    url = q.url(q.leader()) + "/v1/clusters"
    big = b"x" * (MAX_REQUEST_BYTES + 1)
    assert_problem(q.client.post(url, content=big, headers={"content-type": "application/json"}), 413)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the limit must hold on what arrives
        for _ in range(64):
            yield b" " * (64 * 1024)

    assert_problem(q.client.post(url, content=chunks(), headers={"content-type": "application/json"}), 413)
    assert q.client.get(q.url(q.leader()) + "/readyz").status_code == 200


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/json", b"{not json"),
        ("application/json", b"[]"),
        ("application/json", b'{"cluster_id": 1, "region": [], "bootstrap_servers": null}'),
        ("application/msgpack", b"\xc1\xff\x00garbage"),
        ("application/msgpack", msgpack.packb({"cluster_id": "c9"})),
        ("text/plain", b"hello"),
        ("application/json", b'{"cluster_id": "c9", "region": "r1", "bootstrap_servers": "h:1", "extra": 1}'),
    ],
)
def test_malformed_bodies_are_4xx_problems(q: LocalQuorum, content_type: str, body: bytes) -> None:
    r = q.client.post(q.url(1) + "/v1/clusters", content=body, headers={"content-type": content_type})
    assert 400 <= r.status_code < 500, r.text
    assert_problem(r, r.status_code)


def test_parameters_have_limits(q: LocalQuorum) -> None:
    url = q.url(1)
    assert_problem(q.client.get(url + "/v1/log", params={"offset": 0, "limit": LOG_LIMIT_MAX + 1}), 422, "limit")
    assert_problem(q.client.get(url + "/v1/log", params={"offset": 0, "wait_ms": WAIT_MS_MAX + 1}), 422, "wait_ms")
    assert_problem(q.client.get(url + "/v1/log", params={"offset": 2**64}), 422, "offset")
    assert_problem(q.client.get(url + "/v1/metadata", params={"min_offset": 2**70}), 422, "min_offset")
    stream = q.client.get(url + "/v1/log/stream", headers={"Last-Event-ID": "9" * 40})
    assert_problem(stream, 422, "Last-Event-ID")
    shrink = {"partitions": list(range(100_001))}
    assert_problem(q.client.post(url + "/v1/topics/T/shrink", json=shrink), 422, "partitions")


def test_open_log_streams_per_client_are_bounded(q: LocalQuorum) -> None:
    url = q.url(1) + "/v1/log/stream"
    limits = httpx.Limits(max_connections=SSE_MAX_PER_CLIENT + 2)
    with contextlib.ExitStack() as streams, httpx.Client(timeout=10, limits=limits) as client:
        for _ in range(SSE_MAX_PER_CLIENT):
            r = streams.enter_context(client.stream("GET", url, params={"offset": 0, **READS}))
            assert r.status_code == 200
        refused = client.get(url, params={"offset": 0, **READS})
        assert_problem(refused, 429)
        assert refused.headers["retry-after"]
    # the streams closed: their slots are free again
    with client_stream(url) as r:
        assert r.status_code == 200


@contextlib.contextmanager
def client_stream(url: str) -> Iterator[httpx.Response]:
    with httpx.Client(timeout=10) as client, client.stream("GET", url, params={"offset": 0, **READS}) as r:
        yield r


def test_voter_changes_aimed_at_nothing_change_nothing(q: LocalQuorum) -> None:
    leader = q.url(q.leader())
    before = q.client.get(leader + "/v1/quorum").json()["voters"]
    ghost = {"id": 9, "raft": "127.0.0.1:1", "http": "http://127.0.0.1:1"}
    assert_problem(q.client.post(leader + "/v1/quorum/voters", json=ghost), 409, "http")
    impostor = {"id": 9, "raft": "127.0.0.1:1", "http": q.url(2)}  # a live node, but not node 9
    assert_problem(q.client.post(leader + "/v1/quorum/voters", json=impostor), 409, "http")
    assert_problem(q.client.post(leader + "/v1/quorum/voters", json={**ghost, "raft": "no port"}), 422, "raft")
    assert q.client.delete(leader + "/v1/quorum/voters/99").status_code == 200  # not a voter: nothing to do
    assert q.client.get(leader + "/v1/quorum").json()["voters"] == before


# -- the codec and the follower against malformed data ----------------------------------------------
json_like = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=True)
    | st.text(max_size=20)
    | st.binary(max_size=20),
    lambda children: st.lists(children, max_size=8) | st.dictionaries(st.text(max_size=10), children, max_size=8),
    max_leaves=40,
)


@settings(max_examples=500, suppress_health_check=list(HealthCheck), deadline=None)
@given(data=st.binary(max_size=512))
def test_unpack_and_decode_refuse_garbage_with_codec_errors(data: bytes) -> None:
    for parse in (unpack, decode):
        with contextlib.suppress(CodecError):
            parse(data)


@settings(max_examples=500, suppress_health_check=list(HealthCheck), deadline=None)
@given(value=json_like, tag=st.sampled_from(["ClusterRegistered", "TopicCreated", "PartitionsAdded", "Nope"]))
def test_records_from_malformed_values_are_codec_errors(value: object, tag: str) -> None:
    with contextlib.suppress(CodecError):
        record_from_wire(value)
    with contextlib.suppress(CodecError):
        record_from_wire([tag, 1, *value] if isinstance(value, list) else [tag, 1, value])
    if isinstance(value, dict):
        with contextlib.suppress(CodecError):
            record_from_dict(tag, value)
    with contextlib.suppress(CodecError, InvalidRecord):
        read_rows(value if isinstance(value, list) else [value], 0)


def test_unpack_refuses_oversize_payloads_without_decoding() -> None:
    with pytest.raises(CodecError, match="exceeds"):
        unpack(b"\x90" * (MAX_DECODE_BYTES + 1))


def hostile_controller(body: bytes | None, status: int = 200, declared: int | None = None) -> httpx.Client:
    """An httpx client whose every answer is ``body`` (a generator of 1 MiB chunks without end when None)."""

    def endless() -> Iterator[bytes]:
        while True:
            yield b"\x00" * (1024 * 1024)

    def answer(request: httpx.Request) -> httpx.Response:
        headers = {"content-type": "application/msgpack"}
        if declared is not None:
            headers["content-length"] = str(declared)
        return httpx.Response(status, headers=headers, content=endless() if body is None else body)

    return httpx.Client(transport=httpx.MockTransport(answer))


@pytest.mark.parametrize(
    ("body", "status", "declared"),
    [
        (b"\xc1garbage", 200, None),
        (msgpack.packb([1, 2, 3]), 200, None),
        (msgpack.packb({"offset": "x", "records": 5}), 200, None),
        (msgpack.packb({"records": [{"offset": 0, "type": "Nope", "data": {}}]}), 200, None),
        (b"", 500, None),
        (b"\x00" * 10, 200, MAX_DECODE_BYTES + 1),
        (None, 200, None),  # a server that never stops sending
    ],
    ids=["garbage", "not-a-map", "wrong-types", "unknown-record", "5xx", "declared-oversize", "endless"],
)
def test_a_follower_refuses_what_a_broken_controller_sends(
    body: bytes | None, status: int, declared: int | None
) -> None:
    with LogFollower(["http://controller.invalid"], client=hostile_controller(body, status, declared)) as follower:
        with pytest.raises(FollowerError):
            follower.poll(0)
        assert follower.image.offset == -1
