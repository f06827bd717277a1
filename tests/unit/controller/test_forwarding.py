"""LeaderForwarder: a follower passes a request on to the leader over real loopback sockets."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import pytest

from controller.http.peers import FORWARDED_HEADER, OFFSET_HEADER, LeaderForwarder
from controller.readmodel import ReadModel
from deploy.launcher import free_ports
from metadata_log.errors import OutcomeUnknown, Unavailable
from metadata_log.image import apply
from metadata_log.records import NoOp

from ..samples import log_delta


@dataclass
class _Voter:
    id: int
    http: str


class _Service:
    """What the forwarder asks the node: who leads, who it is itself, and what it has applied."""

    node_id = 2

    def __init__(self, leader_http: str | None) -> None:
        self._leader = _Voter(1, leader_http) if leader_http else None
        self.read_model = ReadModel()

    def leader(self) -> _Voter | None:
        return self._leader


async def _leader_answering(handle: object) -> tuple[asyncio.Server, str]:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)  # type: ignore[arg-type]
    port = server.sockets[0].getsockname()[1]
    return server, f"http://127.0.0.1:{port}"


async def test_a_request_goes_to_the_leader_and_its_answer_comes_back() -> None:
    seen: list[bytes] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while head := await reader.readuntil(b"\r\n\r\n"):
            length = int(next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1])
            seen.append(head + await reader.readexactly(length))
            body = b'{"offset":7}'
            writer.write(
                b"HTTP/1.1 201 Created\r\ncontent-type: application/json\r\nidempotent-replayed: true\r\n"
                b"x-internal: no\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body)
            )
            await writer.drain()

    server, url = await _leader_answering(handle)
    forwarder = LeaderForwarder(_Service(url), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        for _ in range(2):  # the second request reuses the connection
            response = await forwarder(
                "POST",
                "/v1/topics/a%2Fb/partitions",
                "x=1",
                {"idempotency-key": "k1", "cookie": "secret"},
                b'{"count":1}',
            )
            assert response.status_code == 201 and response.body == b'{"offset":7}'
            assert response.headers["idempotent-replayed"] == "true" and "x-internal" not in response.headers
    finally:
        await forwarder.aclose()
        server.close()
    request = seen[0].decode().lower()
    assert request.startswith("post /v1/topics/a%2fb/partitions?x=1 http/1.1")  # the path stays encoded
    assert f"{FORWARDED_HEADER.lower()}: 2" in request and "idempotency-key: k1" in request
    assert "cookie" not in request and "content-type" not in request  # only what the client sent, and ours
    assert request.endswith('{"count":1}')
    assert len(seen) == 2


async def test_an_unreachable_leader_means_nothing_was_sent() -> None:
    (port,) = free_ports(1)
    forwarder = LeaderForwarder(_Service(f"http://127.0.0.1:{port}"), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        with pytest.raises(Unavailable, match="unreachable"):
            await forwarder("POST", "/v1/clusters", "", {}, b"{}")
    finally:
        await forwarder.aclose()


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
async def test_a_leader_that_hangs_up_may_have_committed(method: str) -> None:
    requests = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal requests
        await reader.readuntil(b"\r\n\r\n")
        requests += 1
        writer.close()  # read the request, then gone without an answer

    server, url = await _leader_answering(handle)
    forwarder = LeaderForwarder(_Service(url), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        with pytest.raises(OutcomeUnknown, match="Idempotency-Key"):
            await forwarder(method, "/v1/clusters/c1/state", "", {}, b"{}")
    finally:
        await forwarder.aclose()
        server.close()
    assert requests == 1  # not sent again: the first may have committed (aiohttp repeats PUT / DELETE)


async def test_writes_wait_for_a_free_connection_to_the_leader() -> None:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readuntil(b"\r\n\r\n"):
            await asyncio.sleep(1.2)  # a commit slower than the connect timeout
            writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}")
            await writer.drain()

    class OneConnection(LeaderForwarder):
        MAX_CONNECTIONS = 1

    server, url = await _leader_answering(handle)
    forwarder = OneConnection(_Service(url), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        calls = (forwarder("GET", "/v1/node", "", {}, b"") for _ in range(2))
        answers = await asyncio.gather(*calls)  # the second waits ~1.2 s for the first one's connection
    finally:
        await forwarder.aclose()
        server.close()
    assert [a.status_code for a in answers] == [200, 200]


async def test_no_leader_or_a_second_hop_is_refused_before_sending() -> None:
    forwarder = LeaderForwarder(_Service(None), timeout_s=5.0)  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="no leader"):
        await forwarder("POST", "/v1/clusters", "", {}, b"{}")
    forwarder = LeaderForwarder(_Service("http://127.0.0.1:9"), timeout_s=5.0)  # type: ignore[arg-type]
    with pytest.raises(Unavailable, match="leadership moved"):
        await forwarder("POST", "/v1/clusters", "", {FORWARDED_HEADER.lower(): "3"}, b"{}")
    await forwarder.aclose()


def _committed_at(offset: int) -> object:
    """A leader whose every answer is a write committed at ``offset``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while await reader.readuntil(b"\r\n\r\n"):
            body = b'{"offset":%d}' % offset
            head = b"content-type: application/json\r\n%s: %d\r\n" % (OFFSET_HEADER.encode(), offset)
            writer.write(b"HTTP/1.1 201 Created\r\n%scontent-length: %d\r\n\r\n%s" % (head, len(body), body))
            await writer.drain()

    return handle


def _advance(model: ReadModel, count: int) -> None:
    records = [NoOp()] * count
    model.on_update(log_delta(model.image, records), apply(model.image, records))


async def test_a_forwarded_write_is_answered_once_this_node_has_applied_it() -> None:
    """Read-your-writes on the node a client asked: its next read there sees the write it just made."""
    server, url = await _leader_answering(_committed_at(4))
    service = _Service(url)
    _advance(service.read_model, 3)  # offsets 0-2 applied here; the write's 3-4 not yet
    forwarder = LeaderForwarder(service, timeout_s=5.0)  # type: ignore[arg-type]
    try:
        answer = asyncio.ensure_future(forwarder("POST", "/v1/topics", "", {}, b"{}"))
        await asyncio.sleep(0.3)  # the leader answered long ago
        assert not answer.done()
        _advance(service.read_model, 1)
        await asyncio.sleep(0.05)
        assert not answer.done()  # offset 3 applied; the write ends at 4
        _advance(service.read_model, 1)
        response = await asyncio.wait_for(answer, 5)
        assert response.status_code == 201 and response.headers[OFFSET_HEADER.lower()] == "4"
        assert service.read_model.image.offset == 4
    finally:
        await forwarder.aclose()
        server.close()


async def test_a_follower_far_behind_answers_a_forwarded_write_after_its_wait() -> None:
    server, url = await _leader_answering(_committed_at(1_000))
    forwarder = LeaderForwarder(_Service(url), timeout_s=5.0)  # type: ignore[arg-type]
    try:
        response = await forwarder("POST", "/v1/topics", "", {}, b"{}")
        assert response.status_code == 201  # committed: said so after the wait, though not applied here
    finally:
        await forwarder.aclose()
        server.close()
