"""The federation a chaos run drives: the fault harness's quorum (three controllers behind Raft and HTTP
proxies, ``tests/faults/cluster.py``), three Apache Kafka sub-clusters with their agents, two gateways, and
the processes' faults.

Three ways into the quorum, each its own set of proxies, so that one can be cut alone: the agents go through
``FaultQuorum.client_urls``; the SDK's clients and the gateways through ``data_urls``; the strict producer
follows one node only (``STRICT_NODE``), whose Raft links the ``cut_node`` fault cuts.

c1 and c2 hold the topics from the start; c3's brokers run from the start too, but its agent registers it
only when the ``expand`` operation adds it (as an operator adds a sub-cluster), and ``decommission`` removes
it again. Only processes started here are ever signalled, by PID.
"""

from __future__ import annotations

import signal
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from deploy.launcher import BrokerSource, SubCluster, free_ports, make_brokers, stop_processes
from deploy.processes import kill_process, wait_port
from gateway.cli import spawn as spawn_gateway
from metadata_client.client import ControllerClient
from tests.faults.cluster import NODE_IDS, FaultQuorum
from tests.faults.proxy import HttpProxies

REGION = "r1"
CLUSTERS = ("c1", "c2", "c3")
STRICT_NODE = 1
"""The controller the strict producer follows, and the one ``cut_node`` isolates."""
GATEWAYS = 2
START_TIMEOUT_S = 120.0  # the machine is shared: be patient


class ChaosFederation:
    """``start()`` / ``stop()``; the faults' actions on its processes by name."""

    def __init__(self, work_dir: Path, lend_brokers: BrokerSource | None = None) -> None:
        """``lend_brokers``: take the sub-clusters' brokers from a pool (tests), else start them here."""
        self.work_dir = work_dir
        work_dir.mkdir(parents=True, exist_ok=True)
        self.quorum = FaultQuorum(work_dir / "quorum")
        ports = zip(NODE_IDS, free_ports(3), strict=True)
        routes = {n: (port, urlsplit(self.quorum.url(n)).port or 0) for n, port in ports}
        self.data_proxies = HttpProxies(routes)
        self.data_urls = [f"http://127.0.0.1:{proxy}" for proxy, _ in routes.values()]
        self.lent = lend_brokers is not None
        brokers = {cid: lend_brokers(cid) if lend_brokers else make_brokers("kafka", work_dir, cid) for cid in CLUSTERS}
        self.clusters = {
            cid: SubCluster(cid, REGION, b, work_dir, self.quorum.client_urls, owns_brokers=not self.lent)
            for cid, b in brokers.items()
        }
        self.gateway_ports = free_ports(GATEWAYS)
        self.gateways: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: list[subprocess.Popen[bytes]] = []

    # -- start and stop ------------------------------------------------------------------------------
    def start(self) -> None:
        self.quorum.start()
        self.data_proxies.start()
        if not self.lent:
            with ThreadPoolExecutor(len(self.clusters)) as pool:
                list(pool.map(lambda c: c.start_broker(), self.clusters.values()))
        self.quorum.wait_ready(START_TIMEOUT_S)
        for cid in ("c1", "c2"):
            self.clusters[cid].start_agent()
        for port in self.gateway_ports:
            self.start_gateway(port)
        self.wait_healthy(("c1", "c2"))

    def stop(self) -> None:
        for proc in self.paused:
            kill_process(proc, signal.SIGCONT)
        stop_processes(list(self.gateways.values()))
        stop_processes([c.agent for c in self.clusters.values() if c.agent is not None])
        if not self.lent:
            with ThreadPoolExecutor(len(self.clusters)) as pool:
                list(pool.map(lambda c: c.brokers.stop(), self.clusters.values()))
        self.data_proxies.stop()
        self.quorum.stop()

    def controller_client(self) -> ControllerClient:
        """The harness's own client (straight to the nodes: the faults' proxies are for the workload)."""
        return ControllerClient(self.quorum.urls, deadline_s=30.0)

    @property
    def bootstrap(self) -> str:
        """Every gateway, as unmodified clients are given them."""
        return ",".join(f"127.0.0.1:{port}" for port in self.gateway_ports)

    # -- the processes' faults -----------------------------------------------------------------------
    def start_gateway(self, port: int) -> None:
        with open(self.work_dir / f"gateway-{port}.log", "ab") as log:
            self.gateways[port] = spawn_gateway(self.data_urls, f"127.0.0.1:{port}", log)
        wait_port(port, START_TIMEOUT_S, self.gateways[port], self.work_dir / f"gateway-{port}.log")

    def kill_gateway(self, port: int) -> None:
        kill_process(self.gateways.get(port))

    def gateway_crashed(self) -> list[str]:
        """Gateways that exited on their own (not killed here): their exit codes."""
        return [f"gateway on {port} exited with {p.returncode}" for port, p in self.gateways.items()
                if p.poll() is not None and p.returncode != -signal.SIGKILL]  # fmt: skip

    def pause(self, proc: subprocess.Popen[bytes] | None) -> None:
        if proc is not None and proc.poll() is None:
            kill_process(proc, signal.SIGSTOP)
            self.paused.append(proc)

    def resume(self) -> None:
        for proc in self.paused:
            kill_process(proc, signal.SIGCONT)
        self.paused.clear()

    def broker(self, cluster_id: str) -> subprocess.Popen[bytes] | None:
        procs = self.clusters[cluster_id].brokers.processes()
        return procs[0] if procs else None

    # -- waiting ----------------------------------------------------------------------------------------
    def metadata(self) -> dict[str, Any] | None:
        for url in self.quorum.urls:
            try:
                r = self.quorum.client.get(url + "/v1/metadata", timeout=2)
            except httpx.HTTPError:
                continue
            if r.status_code == 200:
                body: dict[str, Any] = r.json()
                return body
        return None

    def cluster_states(self) -> dict[str, dict[str, Any]]:
        body = self.metadata()
        return {c["cluster_id"]: c for c in body["clusters"]} if body else {}

    def wait_healthy(self, cluster_ids: tuple[str, ...], timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every given cluster is registered and not fenced."""
        deadline = time.monotonic() + timeout_s
        while True:
            clusters = self.cluster_states()
            if all(cid in clusters and not clusters[cid]["fenced"] for cid in cluster_ids):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"clusters {cluster_ids} not healthy within {timeout_s} s; logs in {self.work_dir}")
            time.sleep(0.2)

    def wait_writable(self, topic: str, timeout_s: float = START_TIMEOUT_S) -> None:
        """Until every writable partition of ``topic`` has a leader."""
        deadline = time.monotonic() + timeout_s
        while True:
            body = self.metadata()
            topics = [t for t in (body or {}).get("topics", []) if t["name"] == topic]
            parts = topics[0]["partitions"] if topics else []
            if parts and all(p["writable"] and p["leader"] for p in parts if p["state"] == "writable"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not writable within {timeout_s} s; logs in {self.work_dir}")
            time.sleep(0.2)
