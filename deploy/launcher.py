"""The launchers of the local federation: the library that ``kfed local up`` (``deploy.local_up``), tests and
benchmarks share.

Everything runs as real processes on loopback: controller nodes (``kfed controller``), sub-clusters of
Apache Kafka brokers in KRaft mode (``deploy.kafka_cluster``, the default) or Tansu brokers
(``deploy.tansu``, memory storage, ``broker="tansu"``), and one agent per sub-cluster (``kfed agent``).
Only processes started here are ever signalled, by PID.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import httpx

from controller.config import Voter, render_quorum
from metadata_client.access import Access, write_secret
from metadata_client.client import ControllerClient

from .kafka_cluster import KafkaCluster
from .processes import Processes as _Processes
from .processes import free_ports, kill_process, stop_processes
from .processes import spawn as _spawn
from .tansu import TansuBroker, tansu_binary

__all__ = ["free_ports", "stop_processes", "tansu_binary"]  # re-exported: tests and benchmarks import them here

DEMO_TOPIC = "U_TopicA"
DEMO_PARTITIONS_PER_CLUSTER = 4
BrokerKind = Literal["kafka", "tansu"]
BROKER_KINDS: tuple[BrokerKind, ...] = ("kafka", "tansu")


def kfed_command(*args: str) -> list[str]:
    """A ``kfed`` command line run by this Python (the installed package, wherever the venv is)."""
    return [sys.executable, "-m", "kfed", *args]


class LocalQuorum(_Processes):
    """Three (or ``size``) real controller processes on loopback; for ``kfed local up``, tests, benchmarks.

    Ports are free ones unless given. ``kill(id)`` is kill -9; ``start(id)`` restarts a node on its data dir.
    ``secure`` (the default): admin writes need the token in ``<secrets_dir>/admin.token`` and Raft traffic
    is encrypted with the secret in ``<secrets_dir>/raft.secret`` (both generated once, owner-only).
    ``tls``: (certificate, key, CA bundle) PEM files; the API is then served over HTTPS and verified with the CA.
    """

    def __init__(
        self,
        data_dir: Path,
        size: int = 3,
        extra_args: Sequence[str] = (),
        http_ports: Sequence[int] | None = None,
        raft_ports: Sequence[int] | None = None,
        secure: bool = True,
        secrets_dir: Path | None = None,
        tls: tuple[Path, Path, Path] | None = None,
    ) -> None:
        if http_ports is None or raft_ports is None:
            ports = free_ports(2 * size)
            raft_ports, http_ports = ports[:size], ports[size:]
        scheme = "https" if tls else "http"
        self.voters = [
            Voter(i + 1, f"127.0.0.1:{raft_ports[i]}", f"{scheme}://127.0.0.1:{http_ports[i]}") for i in range(size)
        ]
        self.tls = tls
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        secrets_dir = secrets_dir or data_dir
        self.token_file: Path | None = secrets_dir / "admin.token" if secure else None
        self.raft_secret_file: Path | None = secrets_dir / "raft.secret" if secure else None
        self.admin_token = write_secret(self.token_file) if self.token_file else None
        if self.raft_secret_file:
            write_secret(self.raft_secret_file)
        self.access = Access(
            self.admin_token,
            ca_file=str(tls[2]) if tls else None,
            token_file=str(self.token_file) if self.token_file else None,
        )
        self.client = self.access.http_client(5.0)  # carries the admin token

    @property
    def urls(self) -> list[str]:
        return [v.http for v in self.voters]

    def url(self, node_id: int) -> str:
        return self.voters[node_id - 1].http

    def start(self, node_id: int | None = None) -> None:
        config = self.data_dir / "quorum.toml"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        config.write_text(render_quorum(self.voters))
        for v in self.voters if node_id is None else [self.voters[node_id - 1]]:
            self._spawn_node(v.id, config)

    def add_node(self) -> Voter:
        """Start one more node with ``--join`` (a config listing the voters and itself); it becomes a voter
        once ``kfed quorum add-voter`` adds it."""
        raft_port, http_port = free_ports(2)
        voter = Voter(max(v.id for v in self.voters) + 1, f"127.0.0.1:{raft_port}", f"http://127.0.0.1:{http_port}")
        self.voters.append(voter)
        config = self.data_dir / f"quorum-{voter.id}.toml"
        config.write_text(render_quorum(self.voters))
        self._spawn_node(voter.id, config, "--join")
        return voter

    def controller_client(self, **kwargs: Any) -> ControllerClient:
        """A ``ControllerClient`` of this quorum with its admin token."""
        return ControllerClient(self.urls, access=self.access, **kwargs)

    @property
    def token_args(self) -> list[str]:
        """``--token-file`` (and ``--tls-ca``) for a client command (agent, kfed cluster/topic/quorum)."""
        args = ["--token-file", str(self.token_file)] if self.token_file else []
        return args + (["--tls-ca", str(self.tls[2])] if self.tls else [])

    def _spawn_node(self, node_id: int, config: Path, *flags: str) -> None:
        secrets = ["--insecure"]  # a quorum made with secure=False
        if self.token_file and self.raft_secret_file:
            secrets = ["--admin-token-file", str(self.token_file), "--raft-secret-file", str(self.raft_secret_file)]
        if self.tls:
            secrets += ["--tls-cert", str(self.tls[0]), "--tls-key", str(self.tls[1]), "--tls-ca", str(self.tls[2])]
        args = [
            "controller",
            "--config",
            str(config),
            "--node-id",
            str(node_id),
            *flags,
            *secrets,
            "--data-dir",
            str(self.data_dir / f"node-{node_id}"),
            *self.extra_args,
        ]
        self.procs[node_id] = _spawn(kfed_command(*args), self.data_dir / f"node-{node_id}.log")

    def running(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def kill(self, node_id: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, sig)
            if sig == signal.SIGKILL:
                proc.wait()

    def node(self, node_id: int) -> dict[str, Any] | None:
        try:
            r = self.client.get(self.url(node_id) + "/v1/node", timeout=0.5)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self, timeout_s: float = 20.0, exclude: int | None = None) -> int:
        """Id of the node that says it leads; waits up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for v in self.voters:
                if v.id == exclude or not self.running(v.id):
                    continue
                status = self.node(v.id)
                if status and status["role"] == "leader":
                    return v.id
            time.sleep(0.05)
        raise TimeoutError(f"no leader within {timeout_s} s; logs in {self.data_dir}")

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Until every running node answers /readyz 200 (knows the leader and has caught up), and the log is at
        the newest metadata version they all read (a new quorum raises it within a second or two)."""
        deadline = time.monotonic() + timeout_s
        for v in self.voters:
            while self.running(v.id):
                try:
                    if self.client.get(v.http + "/readyz", timeout=0.5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {v.id} not ready within {timeout_s} s; logs in {self.data_dir}")
                time.sleep(0.05)
        while True:
            nodes = [self.node(v.id) for v in self.voters if self.running(v.id)]
            if all(n is not None for n in nodes):
                newest = min(n["reads_metadata_up_to"] for n in nodes if n)
                if all(n["metadata_version"] >= newest for n in nodes if n):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"metadata version not raised within {timeout_s} s: {nodes}")
            time.sleep(0.05)

    def wait_applied(self, offset: int, node_ids: Sequence[int] | None = None, timeout_s: float = 20.0) -> None:
        deadline = time.monotonic() + timeout_s
        for node_id in node_ids or [v.id for v in self.voters]:
            while True:
                status = self.node(node_id)
                if status and status["applied_offset"] >= offset:
                    break
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {node_id} did not apply offset {offset}: {status}")
                time.sleep(0.05)

    def stop(self) -> None:
        stop_processes(list(self.procs.values()))
        self.client.close()


class SubCluster:
    """One physical sub-cluster as processes: its brokers (``KafkaCluster`` or ``TansuBroker``) and its agent."""

    def __init__(
        self,
        cluster_id: str,
        region: str,
        brokers: KafkaCluster | TansuBroker,
        data_dir: Path,
        controllers: Sequence[str],
        agent_args: Sequence[str] = (),  # extra flags, e.g. the quorum's --token-file
        owns_brokers: bool = True,  # False: the brokers are lent (a pool shared by tests) and outlive this
    ) -> None:
        self.cluster_id = cluster_id
        self.region = region
        self.brokers = brokers
        self.owns_brokers = owns_brokers
        self.data_dir = data_dir
        self.controllers = controllers
        self.agent_args = list(agent_args)
        self.agent: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return self.brokers.bootstrap

    @property
    def kind(self) -> BrokerKind:
        return "kafka" if isinstance(self.brokers, KafkaCluster) else "tansu"

    def start_broker(self, index: int | None = None) -> None:
        """Start every broker (or the one at ``index``) and wait until they serve: Kafka on its data, Tansu empty."""
        self.brokers.start(index)

    def kill_broker(self, index: int | None = None, sig: int = signal.SIGKILL) -> None:
        """kill -9 every broker of the sub-cluster, or the one at ``index``."""
        self.brokers.kill(index, sig)

    def start_agent(self) -> None:
        rf = ["--replication-factor", str(self.brokers.replication_factor)] if self.kind == "kafka" else []
        args = [
            "agent",
            "--cluster-id",
            self.cluster_id,
            "--region",
            self.region,
            "--bootstrap",
            self.bootstrap,
            "--controller",
            ",".join(self.controllers),
            *rf,
            *self.agent_args,
        ]
        self.agent = _spawn(kfed_command(*args), self.data_dir / f"agent-{self.cluster_id}.log")

    def kill_agent(self, sig: int = signal.SIGKILL) -> None:
        kill_process(self.agent, sig)

    def stop(self) -> None:
        """The agent first (it would report the brokers' shutdown as a failure), then the brokers it owns."""
        stop_processes([self.agent] if self.agent is not None else [])
        if self.owns_brokers:
            self.brokers.stop()

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in (self.agent, *self.brokers.processes()) if p is not None]


def make_brokers(
    kind: BrokerKind, data_dir: Path, cluster_id: str, brokers: int = 1, base_port: int = 0
) -> KafkaCluster | TansuBroker:
    """The brokers of one sub-cluster. ``base_port``: Kafka's brokers listen on base, base+1, … and their
    controllers on base+100, base+101, …; Tansu on base. 0: free ports."""
    if kind == "tansu":
        if brokers != 1:
            raise ValueError("a Tansu sub-cluster is one broker (--brokers-per-cluster 1)")
        return TansuBroker(data_dir, cluster_id, base_port)
    ports = [(base_port + i, base_port + 100 + i) for i in range(brokers)] if base_port else None
    return KafkaCluster(data_dir / cluster_id, brokers, ports)


BrokerSource = Callable[[str], KafkaCluster | TansuBroker]
"""Lends the running brokers of a sub-cluster by its id (a pool of brokers shared by tests)."""


class LocalFederation(_Processes):
    """A quorum plus sub-clusters with their agents. ``clusters``: (cluster_id, region, base port or 0).

    ``broker``: "kafka" (Apache Kafka in KRaft mode, ``brokers_per_cluster`` brokers each) or "tansu".
    ``lend_brokers``: take each sub-cluster's brokers from there instead of starting them; they are not
    stopped with the federation.
    """

    def __init__(
        self,
        data_dir: Path,
        clusters: Sequence[tuple[str, str, int]] = (("c1", "r1", 0), ("c2", "r1", 0)),
        quorum: LocalQuorum | None = None,
        agent_args: Sequence[str] = (),
        broker: BrokerKind = "kafka",
        brokers_per_cluster: int = 1,
        lend_brokers: BrokerSource | None = None,
    ) -> None:
        self.data_dir = data_dir
        self.broker = broker
        self.brokers_per_cluster = brokers_per_cluster
        self.lend_brokers = lend_brokers
        self.quorum = quorum or LocalQuorum(data_dir / "quorum", secrets_dir=data_dir)
        self.agent_args = [*self.quorum.token_args, *agent_args]
        ids = [cid for cid, _, _ in clusters]
        lent: dict[str, KafkaCluster | TansuBroker] = {}
        if lend_brokers is not None:  # lending may start brokers: side by side
            with ThreadPoolExecutor(max(1, len(ids))) as pool:
                lent = dict(zip(ids, pool.map(lend_brokers, ids), strict=True))
        self.clusters = {
            cid: self._sub_cluster(cid, region, port, lent=lent.get(cid)) for cid, region, port in clusters
        }

    def _sub_cluster(
        self,
        cluster_id: str,
        region: str,
        base_port: int,
        agent_args: Sequence[str] = (),
        lent: KafkaCluster | TansuBroker | None = None,
    ) -> SubCluster:
        if lent is not None:
            brokers = lent
        elif self.lend_brokers is not None:
            brokers = self.lend_brokers(cluster_id)
        else:
            brokers = make_brokers(self.broker, self.data_dir, cluster_id, self.brokers_per_cluster, base_port)
        return SubCluster(
            cluster_id,
            region,
            brokers,
            self.data_dir,
            self.quorum.urls,
            [*self.agent_args, *agent_args],
            owns_brokers=self.lend_brokers is None,
        )

    def start(self) -> None:
        self.quorum.start()
        self.quorum.wait_ready()
        self.start_brokers()
        for c in self.clusters.values():
            c.start_agent()

    def start_brokers(self, cluster_ids: Sequence[str] | None = None) -> None:
        """Start the brokers of the given sub-clusters (all by default) side by side, and wait for them."""
        chosen = [self.clusters[cid] for cid in cluster_ids or self.clusters]
        if len(chosen) <= 1:
            for c in chosen:
                c.start_broker()
            return
        with ThreadPoolExecutor(len(chosen)) as pool:
            for future in [pool.submit(c.start_broker) for c in chosen]:
                future.result()

    def add_cluster(
        self, cluster_id: str, region: str, agent_args: Sequence[str] = (), base_port: int = 0
    ) -> SubCluster:
        """One more sub-cluster with its agent (which registers it); returns once its brokers serve."""
        c = self._sub_cluster(cluster_id, region, base_port, agent_args)
        self.clusters[cluster_id] = c
        try:
            c.start_broker()
            c.start_agent()
        except BaseException:
            del self.clusters[cluster_id]  # nothing of it left: the same id can be added again
            c.stop()
            raise
        return c

    def metadata(self, **params: Any) -> dict[str, Any]:
        for url in self.quorum.urls:
            try:
                r = self.quorum.client.get(url + "/v1/metadata", params=params)
                if r.status_code == 200:
                    return dict(r.json())
            except httpx.HTTPError:
                continue
        raise RuntimeError("no controller answered /v1/metadata")

    def wait_clusters_healthy(self, cluster_ids: Sequence[str] | None = None, timeout_s: float = 30.0) -> None:
        """Until every given cluster is registered and not fenced."""
        wanted = set(cluster_ids or self.clusters)
        deadline = time.monotonic() + timeout_s
        while True:
            clusters = {c["cluster_id"]: c for c in self.metadata()["clusters"]}
            if all(cid in clusters and not clusters[cid]["fenced"] for cid in wanted):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"clusters not healthy after {timeout_s} s: {clusters}; logs in {self.data_dir}")
            time.sleep(0.1)

    def wait_writable(self, topic: str, timeout_s: float = 30.0, min_offset: int = -1) -> None:
        """Until every writable partition of ``topic`` has a leader and takes writes (its physical topic
        exists and its cluster is healthy): what a producer needs before its first message.

        ``min_offset``: the offset of a write just made (a follower may not have applied it yet)."""
        deadline = time.monotonic() + timeout_s
        while True:
            topics = self.metadata(topic=topic, min_offset=min_offset)["topics"]
            parts = topics[0]["partitions"] if topics else []
            if parts and all(p["writable"] and p["leader"] for p in parts if p["state"] == "writable"):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic} not writable after {timeout_s} s: {parts}; logs in {self.data_dir}")
            time.sleep(0.1)

    def stop(self) -> None:
        """Agents, then brokers (every sub-cluster's at once), then the quorum."""
        stop_processes([c.agent for c in self.clusters.values() if c.agent is not None])
        owned = [c.brokers for c in self.clusters.values() if c.owns_brokers]
        with ThreadPoolExecutor(max(1, len(owned))) as pool:
            list(pool.map(lambda brokers: brokers.stop(), owned))
        self.quorum.stop()


# -- the demo topic -------------------------------------------------------------------------------
def create_demo_topic(fed: LocalFederation) -> dict[str, Any]:
    """``U_TopicA``: 4 partitions on each of the two clusters (P0-P3 on c1, P4-P7 on c2), once."""
    from metadata_log.errors import Conflict

    with fed.quorum.controller_client() as client:
        try:
            return dict(
                client.post(
                    "/v1/topics",
                    {"name": DEMO_TOPIC, "region": "r1", "partitions_per_cluster": DEMO_PARTITIONS_PER_CLUSTER},
                )
            )
        except Conflict:
            return dict(client.get(f"/v1/topics/{DEMO_TOPIC}"))


def ready_demo_topic(fed: LocalFederation, timeout_s: float = 40.0) -> None:
    """On a started ``fed``: wait for its sub-clusters, create ``U_TopicA`` and wait until it takes writes
    everywhere (what tests and benchmarks need before their first message)."""
    fed.wait_clusters_healthy(timeout_s=timeout_s)
    create_demo_topic(fed)
    fed.wait_writable(DEMO_TOPIC, timeout_s)
