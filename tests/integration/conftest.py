"""Real controller processes on free loopback ports, started and cleaned up by the tests themselves."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from deploy.local import LocalQuorum
from metadata_log.client import ControllerClient


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalQuorum]:
    """One 3-node quorum shared by a module's read/write tests."""
    with LocalQuorum(tmp_path_factory.mktemp("quorum")) as q:
        q.wait_ready()
        yield q


@pytest.fixture
def make_quorum(tmp_path: Path) -> Iterator[Callable[..., LocalQuorum]]:
    """A fresh quorum per test, for tests that kill, pause or restart nodes."""
    started: list[LocalQuorum] = []

    def make(*extra_args: str, size: int = 3) -> LocalQuorum:
        q = LocalQuorum(tmp_path / f"q{len(started)}", size=size, extra_args=extra_args)
        started.append(q)
        q.start()
        q.wait_ready()
        return q

    yield make
    for q in started:
        q.stop()


@pytest.fixture
def client(quorum: LocalQuorum) -> Iterator[ControllerClient]:
    with ControllerClient(quorum.urls) as c:
        yield c


def log_of(q: LocalQuorum, node_id: int) -> list[dict]:
    """The whole retained log of one node, read page by page."""
    records: list[dict] = []
    offset = 0
    while True:
        body = q.client.get(q.url(node_id) + "/v1/log", params={"offset": offset, "limit": 10_000}).json()
        records += body["records"]
        if body["next_offset"] >= body["high_watermark"]:
            return records
        offset = body["next_offset"]
