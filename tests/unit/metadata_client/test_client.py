"""The sync and the async client are transports of the one retry policy: they send where it says, with its
headers, hand it every outcome (a transport error included) and wait what it decides. The controllers are
stood in for by httpx's ``MockTransport`` and the clock's sleep by a recorder: the policy is what is tested
(``test_retry.py``), here only that each transport drives it."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from metadata_client.client import AsyncControllerClient, ControllerClient
from metadata_client.retry import BACKOFF_MIN_S
from metadata_log.errors import Conflict, Unavailable

URLS = ["http://a:1", "http://b:1", "http://c:1"]


class Quorum:
    """Three controllers: a is down, b has no leader yet (503, Retry-After: 1), c answers."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []  # (host, Idempotency-Key) of each request

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.seen.append((request.url.host, request.headers.get("idempotency-key")))
        if request.url.host == "a":
            raise httpx.ConnectError("refused", request=request)
        if request.url.host == "b":
            body = {"type": "about:blank", "title": "t", "status": 503, "detail": "no leader elected yet"}
            headers = {"content-type": "application/problem+json", "retry-after": "1"}
            return httpx.Response(503, content=orjson.dumps(body), headers=headers)
        if request.url.path == "/v1/taken":
            body = {"type": "about:blank", "title": "t", "status": 409, "detail": "taken"}
            return httpx.Response(409, content=orjson.dumps(body), headers={"content-type": "application/problem+json"})
        return httpx.Response(200, json={"offset": 7, "path": request.url.path})


def check(quorum: Quorum, slept: list[float], reply: Any, again: Any) -> None:
    hosts = [host for host, _ in quorum.seen]
    keys = {key for _, key in quorum.seen[:3]}
    assert reply == {"offset": 7, "path": "/v1/topics"}
    assert hosts[:3] == ["a", "b", "c"]  # failed over past a refused connection and a 503
    assert slept == [BACKOFF_MIN_S, 1.0]  # the back-off, then b's Retry-After
    assert len(keys) == 1 and None not in keys  # one key for the write's three attempts
    assert again == {"offset": 7, "path": "/v1/metadata"} and hosts[3] == "c"  # the next call starts at c
    assert quorum.seen[3][1] is None  # a read carries no key


_REAL_SLEEP, _REAL_MONOTONIC = time.sleep, time.monotonic


class Clock:
    """A fake monotonic clock that only a sleep moves, for the thread that made it: a thread another test left
    behind in this process (its sleeps patched too) keeps the real clock and is not counted."""

    def __init__(self) -> None:
        self.now = 0.0
        self.slept: list[float] = []
        self.thread = threading.get_ident()

    def monotonic(self) -> float:
        return self.now if threading.get_ident() == self.thread else _REAL_MONOTONIC()

    def sleep(self, seconds: float) -> None:
        if threading.get_ident() != self.thread:
            _REAL_SLEEP(seconds)
            return
        self.slept.append(seconds)
        self.now += seconds

    @contextlib.contextmanager
    def on_the_loop(self, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
        """This clock as the running event loop's, and its sleep as ``asyncio.sleep``, inside the block."""

        async def sleep(seconds: float) -> None:
            self.sleep(seconds)

        monkeypatch.setattr(asyncio, "sleep", sleep)
        monkeypatch.setattr(asyncio.get_running_loop(), "time", self.monotonic)
        try:
            yield
        finally:
            monkeypatch.undo()


def test_the_sync_client_drives_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    quorum, clock = Quorum(), Clock()
    monkeypatch.setattr(time, "sleep", clock.sleep)
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    with ControllerClient(URLS, client=httpx.Client(transport=httpx.MockTransport(quorum))) as client:
        reply = client.post("/v1/topics", {"name": "T"})
        again = client.get("/v1/metadata")
        with pytest.raises(Conflict):
            client.post("/v1/taken", {})
    check(quorum, clock.slept, reply, again)


async def test_the_async_client_drives_the_policy(monkeypatch: pytest.MonkeyPatch) -> None:
    quorum, clock = Quorum(), Clock()
    async with AsyncControllerClient(URLS, client=httpx.AsyncClient(transport=httpx.MockTransport(quorum))) as client:
        with clock.on_the_loop(monkeypatch):
            reply = await client.post("/v1/topics", {"name": "T"})
            again = await client.get("/v1/metadata")
            with pytest.raises(Conflict):
                await client.post("/v1/taken", {})
    check(quorum, clock.slept, reply, again)


def test_the_deadline_of_one_call_overrides_the_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    quorum, clock = Quorum(), Clock()
    monkeypatch.setattr(time, "sleep", clock.sleep)
    monkeypatch.setattr(time, "monotonic", clock.monotonic)
    mock = httpx.Client(transport=httpx.MockTransport(quorum))
    client = ControllerClient(URLS[:2], deadline_s=60.0, client=mock)
    with client, pytest.raises(Unavailable, match="no leader elected yet"):  # the last error, b's
        client.post("/v1/topics", {}, 0.5)  # a's back-off fits in 0.5 s; b's Retry-After does not
    assert [host for host, _ in quorum.seen] == ["a", "b"] and clock.slept == [BACKOFF_MIN_S]


async def test_the_async_client_takes_the_deadline_of_one_call_too(monkeypatch: pytest.MonkeyPatch) -> None:
    quorum, clock = Quorum(), Clock()
    mock = httpx.AsyncClient(transport=httpx.MockTransport(quorum))
    async with AsyncControllerClient(URLS[:2], deadline_s=60.0, client=mock) as client:
        with clock.on_the_loop(monkeypatch), pytest.raises(Unavailable, match="no leader elected yet"):
            await client.post("/v1/topics", {}, 0.5)
    assert [host for host, _ in quorum.seen] == ["a", "b"] and clock.slept == [BACKOFF_MIN_S]
