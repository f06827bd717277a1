"""The gateway on the local federation: a real quorum, real sub-clusters with their agents, real gateway
processes, and real, unmodified Kafka clients started by the tests.

``BROKER`` is the kind of sub-cluster (``KFED_TEST_BROKER``, default ``kafka``: Apache Kafka brokers lent by
the session's pool, see ``tests/conftest.py``); ``tansu`` runs the same tests on Tansu brokers (``make test`` does
so for the kcat, kafka-python and hostile-input suites).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from deploy.launcher import DEMO_TOPIC, BrokerKind, BrokerSource, LocalFederation, free_ports, ready_demo_topic
from deploy.processes import wait_port
from gateway.cli import spawn
from tests.physical import physical_records
from tests.waiting import wait_until

TOPIC = DEMO_TOPIC
BROKER: BrokerKind = "tansu" if os.environ.get("KFED_TEST_BROKER") == "tansu" else "kafka"


def make_federation(data_dir: Path, broker: BrokerKind = BROKER, lend: BrokerSource | None = None) -> LocalFederation:
    """A started federation (c1, c2 in r1) with ``U_TopicA`` writable on both, of ``broker`` sub-clusters
    (taken from ``lend`` when given)."""
    fed = LocalFederation(data_dir, broker=broker, lend_brokers=lend)
    fed.__enter__()
    try:
        ready_demo_topic(fed)
    except BaseException:
        fed.stop()
        raise
    return fed


class Gateways:
    """Gateway processes of one federation, started and killed by PID."""

    def __init__(self, fed: LocalFederation, data_dir: Path) -> None:
        self.fed = fed
        self.data_dir = data_dir
        self.procs: dict[int, subprocess.Popen[bytes]] = {}  # port -> process
        self.ended: set[int] = set()  # ports of the gateways a test killed or stopped, or reported crashed

    def start(self, *extra: str, port: int | None = None) -> str:
        """Start one gateway; returns its HOST:PORT once the quorum lists it live."""
        port = port or free_ports(1)[0]
        token = ["--token-file", str(self.fed.quorum.token_file)] if self.fed.quorum.token_file else []
        with open(self.data_dir / f"gateway-{port}.log", "ab") as log:
            self.procs[port] = spawn(self.fed.quorum.urls, f"127.0.0.1:{port}", log, *token, *extra)
        wait_port(port, 30)
        wait_until(lambda: port in self.live(), 30, f"gateway on port {port} listed live")
        return f"127.0.0.1:{port}"

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{p}" for p, proc in self.procs.items() if proc.poll() is None)

    def live(self) -> set[int]:
        """Ports of the gateways the quorum lists live."""
        for url in self.fed.quorum.urls:
            try:
                r = self.fed.quorum.client.get(url + "/v1/gateways", timeout=2)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                return {g["port"] for g in r.json()["gateways"] if g["live"]}
        return set()

    def wait_live(self, ports: set[int], timeout_s: float = 30.0) -> None:
        """Until exactly ``ports`` are live (a killed one has dropped out)."""
        deadline = time.monotonic() + timeout_s
        while self.live() != ports:
            if time.monotonic() > deadline:
                raise TimeoutError(f"gateways live: {self.live()}, expected {ports}")
            time.sleep(0.1)

    def coordinator_of(self, group: str, among: list[str]) -> str:
        """The gateway (of ``among``) that FindCoordinator names for ``group`` (``ClusterView.coordinator``)."""
        for url in self.fed.quorum.urls:
            r = self.fed.quorum.client.get(url + "/v1/gateways", timeout=2)
            if r.status_code == 200:
                live = sorted((g["gateway_id"], f"{g['host']}:{g['port']}") for g in r.json()["gateways"] if g["live"])
                address = live[zlib.crc32(group.encode()) % len(live)][1]
                return address if address in among else among[0]
        raise AssertionError("no controller answered /v1/gateways")

    def running(self, address: str) -> bool:
        """Whether the gateway at ``address`` runs (a crashed child is not running, even before it is reaped)."""
        return self.procs[int(address.rsplit(":", 1)[1])].poll() is None

    def crashed(self) -> list[str]:
        """The gateways that exited on their own since the last call (not killed or stopped by a test), each
        with its exit code and the end of its log."""
        out = []
        for port, proc in self.procs.items():
            if port not in self.ended and proc.poll() is not None:
                self.ended.add(port)
                log = (self.data_dir / f"gateway-{port}.log").read_text(errors="replace")[-2000:]
                out.append(f"the gateway on port {port} exited with {proc.returncode}; its log ends:\n{log}")
        return out

    def kill(self, address: str, sig: int = signal.SIGKILL) -> None:
        port = int(address.rsplit(":", 1)[1])
        proc = self.procs[port]
        self.ended.add(port)
        if proc.poll() is None:
            os.kill(proc.pid, sig)
            proc.wait(10)

    def stop(self) -> None:
        self.ended |= set(self.procs)
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()


@pytest.fixture(scope="module")
def fed(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator[LocalFederation]:
    lend = request.getfixturevalue("kafka_pool").source() if BROKER == "kafka" else None
    federation = make_federation(tmp_path_factory.mktemp("fed"), lend=lend)
    yield federation
    federation.stop()


@pytest.fixture(scope="module")
def gateways(fed: LocalFederation, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gateways]:
    g = Gateways(fed, tmp_path_factory.mktemp("gateways"))
    try:
        yield g
    finally:
        g.stop()


@pytest.fixture(autouse=True)
def no_gateway_crashed(request: pytest.FixtureRequest) -> Iterator[None]:
    """A gateway that exits during a test, without the test killing or stopping it, fails that test."""
    yield
    if "gateways" in request.fixturenames:
        crashed = request.getfixturevalue("gateways").crashed()
        assert not crashed, "\n".join(crashed)


@pytest.fixture(scope="module")
def gateway(gateways: Gateways) -> str:
    """One gateway of the module's federation (tests may start more): its HOST:PORT."""
    return gateways.start()


def physical_messages(fed: LocalFederation, topic: str = TOPIC) -> dict[str, list[bytes]]:
    """Every message value of ``topic`` on each physical cluster, read straight from its broker."""
    return {
        cluster_id: [value for _, _, value in physical_records(cluster.bootstrap, topic) or () if value is not None]
        for cluster_id, cluster in fed.clusters.items()
    }


def pytest_configure(config: pytest.Config) -> None:
    # kafka-python 3.0 reads its schemas with importlib.resources calls Python 3.11 deprecates
    config.addinivalue_line("filterwarnings", "ignore:.*is deprecated. Use files\\(\\) instead:DeprecationWarning")
