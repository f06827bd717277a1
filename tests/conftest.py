"""Sub-cluster brokers for every suite: Apache Kafka by default, Tansu where a test asks for it.

``@pytest.mark.brokers("kafka", "tansu")`` runs a test once per kind of broker (the ``broker`` fixture); a
test without the mark runs on Apache Kafka. Kafka brokers are JVMs that take seconds to start, so they are
started once per session and lent to each test's federation (``kafka_pool``), emptied between tests:
every topic and consumer group deleted, a broker a test killed started again on its data.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

from deploy.kafka_cluster import KafkaCluster
from deploy.launcher import BrokerKind, BrokerSource

EMPTY_TIMEOUT_S = 30.0
UI_TESTS = Path(__file__).parent / "ui"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "brokers(*kinds): run the test once per kind of broker (kafka, tansu)")
    config.addinivalue_line("markers", "chaos: the data plane's chaos schedule (make test-chaos), not in make test")


# Split over pytest-xdist's workers (``make test``), a file's tests run on one worker, so its module fixtures
# start once. The longest files go first, so that no worker is left with a long one at the end: Spark's, then
# the other process tests' slow files, then the other process tests, then the pure ones.
PROCESS_TESTS = ("faults", "gateway", "hostile", "integration", "spark", "ui")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    slow_files = {item.nodeid.split("::")[0] for item in items if item.get_closest_marker("slow")}

    def weight(item: pytest.Item) -> int:
        path = item.nodeid.split("::")[0]
        if path.startswith("tests/spark/"):
            return 0
        if path in slow_files:
            return 1
        folder = path.split("/")[1] if path.count("/") > 1 else ""  # tests/<folder>/...
        return 2 if folder in PROCESS_TESTS else 3

    items.sort(key=weight)  # stable: a file's tests stay together, in their order


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    mark = metafunc.definition.get_closest_marker("brokers")
    if mark is not None and "broker" in metafunc.fixturenames:
        metafunc.parametrize("broker", list(mark.args))


@pytest.fixture(autouse=True)
def no_event_loop_left_running(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test must not leave an event loop running in the main thread: every later async test (and the
    dashboard's Playwright) would then fail, far from the cause. An open browser keeps Playwright's loop
    running until its fixture's scope ends: a test using one, and every test of ``tests/ui`` (whose package
    keeps one open), are checked at the next test after them."""
    yield
    if "browser" in request.fixturenames or request.node.path.is_relative_to(UI_TESTS):
        return
    loop = asyncio._get_running_loop()
    if loop is not None:
        asyncio._set_running_loop(None)  # so that the tests after this one run
        pytest.fail(f"this test left an event loop running in the main thread: {loop!r}")


@pytest.fixture
def broker() -> BrokerKind:
    """The kind of broker of this test's sub-clusters (parametrized by the ``brokers`` mark)."""
    return "kafka"


class KafkaPool:
    """Running Apache Kafka sub-clusters by name, kept for the session. The first loan starts c1, c2 and c3
    side by side (a JVM starting later, during a test, would starve that test's brokers of CPU)."""

    WARM = ("c1", "c2", "c3")

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.clusters: dict[tuple[str, int], KafkaCluster] = {}
        self.started: dict[tuple[str, int], Future[None]] = {}
        self.starter = ThreadPoolExecutor(len(self.WARM), thread_name_prefix="kafka-pool")
        self.lock = threading.Lock()  # federations borrow side by side: one launcher per cluster, ever

    def _start(self, key: tuple[str, int]) -> Future[None]:
        with self.lock:
            if key not in self.started:
                kafka = self.clusters[key] = KafkaCluster(self.data_dir / f"{key[0]}-{key[1]}", key[1])
                self.started[key] = self.starter.submit(kafka.start)
            return self.started[key]

    def lend(self, cluster_id: str, brokers: int = 1) -> KafkaCluster:
        """The sub-cluster ``cluster_id`` of ``brokers`` brokers, every broker running, no topic, no group."""
        for warm in self.WARM:
            self._start((warm, 1))
        key = (cluster_id, brokers)
        self._start(key).result()
        kafka = self.clusters[key]
        kafka.start()  # the brokers a test killed (running ones are left alone)
        empty(kafka.bootstrap)
        return kafka

    def source(self, brokers: int = 1) -> BrokerSource:
        return lambda cluster_id: self.lend(cluster_id, brokers)

    def stop(self) -> None:
        self.starter.shutdown(wait=True)
        for kafka in self.clusters.values():
            kafka.stop()


def empty(bootstrap: str) -> None:
    """Delete every topic (but the broker's own) and every consumer group of a cluster, and wait until gone."""
    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 3})
    deadline = time.monotonic() + EMPTY_TIMEOUT_S
    groups = admin.list_consumer_groups(request_timeout=10).result().valid
    if groups:
        for future in admin.delete_consumer_groups([g.group_id for g in groups], request_timeout=10).values():
            future.result()
    while True:
        topics = [t for t in admin.list_topics(timeout=10).topics if not t.startswith("__")]
        if not topics:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topics {topics} of {bootstrap} not deleted within {EMPTY_TIMEOUT_S} s")
        for future in admin.delete_topics(topics, request_timeout=10).values():
            with contextlib.suppress(KafkaException):  # already being deleted: checked again on the next round
                future.result()
        time.sleep(0.2)


@pytest.fixture(scope="session")
def kafka_pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[KafkaPool]:
    pool = KafkaPool(tmp_path_factory.mktemp("kafka"))
    yield pool
    pool.stop()


@pytest.fixture
def lend_brokers(broker: BrokerKind, request: pytest.FixtureRequest) -> BrokerSource | None:
    """Where a test's federation takes its sub-clusters' brokers: the session's pool for Kafka; None (each
    federation starts its own, in milliseconds) for Tansu."""
    if broker != "kafka":
        return None
    pool: KafkaPool = request.getfixturevalue("kafka_pool")
    return pool.source()
