"""Real processes on free loopback ports, started and cleaned up by the tests themselves: controller
quorums, and the local federation (quorum, sub-clusters of Apache Kafka brokers — or Tansu ones for tests
marked ``brokers("tansu")`` — and their agents) with the helpers its tests share."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient

from deploy.launcher import DEMO_TOPIC, BrokerKind, BrokerSource, LocalFederation, LocalQuorum, ready_demo_topic
from metadata_client.client import READS, ControllerClient
from sdk import FederatedConsumer

TOPIC = DEMO_TOPIC


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalQuorum]:
    """One 3-node quorum shared by a module's read/write tests. Its clusters have no agents, so a one-hour
    lease keeps them from being fenced mid-test (a fence would add records the tests do not expect)."""
    with LocalQuorum(tmp_path_factory.mktemp("quorum"), extra_args=["--lease-ms", "3600000"]) as q:
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
    with quorum.controller_client() as c:
        yield c


@pytest.fixture
def fed(tmp_path: Path, broker: BrokerKind, lend_brokers: BrokerSource | None) -> Iterator[LocalFederation]:
    """The local federation (c1 and c2 in r1, their agents) with the demo topic writable on both; Kafka
    brokers come from the session's pool (tests/conftest.py), emptied for this test."""
    with LocalFederation(tmp_path, broker=broker, lend_brokers=lend_brokers) as federation:
        ready_demo_topic(federation)
        yield federation


def log_of(q: LocalQuorum, node_id: int) -> list[dict]:
    """The whole retained log of one node, read page by page."""
    records: list[dict] = []
    offset = 0
    while True:
        body = q.client.get(q.url(node_id) + "/v1/log", params={"offset": offset, "limit": 10_000, **READS}).json()
        records += body["records"]
        if body["next_offset"] >= body["high_watermark"]:
            return records
        offset = body["next_offset"]


def controllers(fed: LocalFederation) -> str:
    return ",".join(fed.quorum.urls)


def physical_topics(bootstrap: str) -> dict[str, int]:
    """Topic -> partition count as the broker itself reports it (confluent-kafka's AdminClient, not kfed)."""
    md = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3}).list_topics(timeout=5)
    return {name: len(t.partitions) for name, t in md.topics.items() if not name.startswith("__")}


def partitions(fed: LocalFederation, topic: str = TOPIC) -> list[dict[str, Any]]:
    """The logical partitions of ``topic`` in the merged metadata."""
    return list(fed.metadata(topic=topic)["topics"][0]["partitions"])


class Member(threading.Thread):
    """One group member in a thread: records every message and its ownership intervals."""

    def __init__(self, fed: LocalFederation, name: str, group: str) -> None:
        super().__init__(daemon=True, name=name)
        self.consumer = FederatedConsumer(
            {"kfed.controllers": controllers(fed), "group.id": group, "auto.offset.reset": "earliest",
             "kfed.session.timeout.ms": 6000}
        )  # fmt: skip
        self.received: list[tuple[str, int, int]] = []  # (value, logical partition, physical offset)
        self.intervals: list[tuple[tuple[str, int], float, float]] = []
        self._owned_since: dict[tuple[str, int], float] = {}
        self.stop_flag = threading.Event()

    def on_assign(self, consumer: Any, partitions: list[tuple[str, int]]) -> None:
        now = time.monotonic()
        for tp in partitions:
            self._owned_since[tp] = now

    def on_revoke(self, consumer: Any, partitions: list[tuple[str, int]]) -> None:
        now = time.monotonic()
        for tp in partitions:
            self.intervals.append((tp, self._owned_since.pop(tp), now))

    def run(self) -> None:
        self.consumer.subscribe([TOPIC], on_assign=self.on_assign, on_revoke=self.on_revoke)
        while not self.stop_flag.is_set():
            self.consume_once()
        self.consumer.close()  # commits and leaves: on_revoke closes the open intervals

    def consume_once(self) -> None:
        for m in self.consumer.consume(1000, 0.2):
            self.received.append((m.value().decode(), m.partition(), m.offset()))

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(30)


def wait_for(members: list[Member], expected: set[str], timeout_s: float) -> set[str]:
    """What the members have received once it covers ``expected``, or after ``timeout_s`` (the caller asserts)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = {v for m in members for v, _, _ in m.received}
        if expected <= seen or time.monotonic() > deadline:
            return seen
        time.sleep(0.2)


class KeyedReader(threading.Thread):
    """A member of a reading group of a keyed topic whose values are "key:sequence": appends (key, sequence) as
    handed out to a list the group shares; ``config``: more consumer settings."""

    def __init__(self, fed: LocalFederation, topic: str, group: str, delivered: list[tuple[str, int]],
                 **config: Any) -> None:  # fmt: skip
        super().__init__(daemon=True)
        self.topic = topic
        self.breaks: list[Any] = []
        self.consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": group,
                                           "auto.offset.reset": "earliest", "kfed.session.timeout.ms": 6000,
                                           "on_order_break": lambda c, b: self.breaks.append(b), **config})  # fmt: skip
        self.delivered = delivered
        self.partitions: dict[str, set[int]] = {}  # key -> the logical partitions its records were read from
        self.stop_flag = threading.Event()

    def run(self) -> None:
        self.consumer.subscribe([self.topic])
        while not self.stop_flag.is_set():
            for m in self.consumer.consume(1000, 0.1):
                if m.error() is None and m.key() is not None:
                    key, seq = m.value().decode().split(":")
                    self.delivered.append((key, int(seq)))
                    self.partitions.setdefault(key, set()).add(m.partition())
        self.consumer.close()
