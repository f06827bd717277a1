"""Three real controller processes behind Raft proxies and HTTP proxies, optionally sub-clusters (a Tansu
broker and a ``kfed agent`` each), and the faults the harness applies to them.

Only processes started here are ever signalled, by PID; ``stop()`` resumes paused ones and ends all.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from controller.config import Voter, render_quorum
from deploy.launcher import SubCluster, free_ports, make_brokers, stop_processes
from metadata_client.access import write_secret
from metadata_client.client import READS
from metadata_log.codec import record_from_dict
from metadata_log.snapshot import read_records
from metadata_log.views import metadata_view

from .proxy import HttpProxies, RaftProxies

NODE_IDS = (1, 2, 3)
# A real lease: a killed agent's cluster is fenced once it runs out. The clusters the writers register
# have no agent; the harness's heartbeater keeps their leases (clients.Heartbeater).
LEASE_MS = 4000
AGENT_REGION = "r-agents"


class FaultQuorum:
    """``start()`` / ``stop()``; ``kill``, ``pause``, ``resume``, ``restart``, ``cut``, ``heal`` one node."""

    def __init__(self, work_dir: Path, extra_args: tuple[str, ...] = (), agents: int = 0, secure: bool = False) -> None:
        """``agents``: sub-clusters a1, a2, ... in ``AGENT_REGION``, each a Tansu broker with its agent.
        ``secure``: the controllers run as deployed, with a Raft secret (encrypted, authenticated Raft traffic)
        and an admin token (``admin_token``, which the writers and agents send); otherwise ``--insecure``."""
        proxy_ports, real_ports, http_ports, http_proxy_ports = (free_ports(12)[i::4] for i in range(4))
        self.work_dir = work_dir
        self.extra_args = extra_args
        self.raft_secret_file = work_dir / "raft.secret" if secure else None
        self.token_file = work_dir / "admin.token" if secure else None
        self.admin_token = write_secret(self.token_file) if self.token_file else None
        if self.raft_secret_file:
            write_secret(self.raft_secret_file)
        self.voters = [
            Voter(n, f"127.0.0.1:{proxy_ports[i]}", f"http://127.0.0.1:{http_ports[i]}") for i, n in enumerate(NODE_IDS)
        ]
        self.real_raft = {n: real_ports[i] for i, n in enumerate(NODE_IDS)}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.paused: set[int] = set()
        self.proxies = RaftProxies({n: (proxy_ports[i], real_ports[i]) for i, n in enumerate(NODE_IDS)}, self.pids)
        self.http_proxies = HttpProxies({n: (http_proxy_ports[i], http_ports[i]) for i, n in enumerate(NODE_IDS)})
        self.client_urls = [f"http://127.0.0.1:{port}" for port in http_proxy_ports]
        """What clients use: through the HTTP proxies (``lose_replies``); the harness itself goes direct."""
        agent_args = ("--token-file", str(self.token_file)) if self.token_file else ()
        self.agents = {  # on Tansu brokers: light, and a restart is all the agent faults need of them
            cid: SubCluster(
                cid,
                AGENT_REGION,
                make_brokers("tansu", work_dir, cid, base_port=port),
                work_dir,
                self.client_urls,
                agent_args=agent_args,
            )
            for cid, port in ((f"a{i + 1}", port) for i, port in enumerate(free_ports(agents)))
        }
        self.client = httpx.Client(timeout=1.0)

    def url(self, node_id: int) -> str:
        return self.voters[node_id - 1].http

    @property
    def urls(self) -> list[str]:
        return [v.http for v in self.voters]

    def data_dir(self, node_id: int) -> Path:
        return self.work_dir / f"node-{node_id}"

    def pids(self) -> dict[int, int]:
        return {n: p.pid for n, p in self.procs.items() if p.poll() is None}

    def start(self) -> None:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        (self.work_dir / "quorum.toml").write_text(render_quorum(self.voters))
        self.proxies.start()
        self.http_proxies.start()
        for n in NODE_IDS:
            self.start_node(n)
        for agent in self.agents.values():
            agent.start_broker()
            agent.start_agent()

    def command(self, node_id: int) -> list[str]:
        security = ["--insecure"]
        if self.raft_secret_file and self.token_file:
            security = ["--raft-secret-file", str(self.raft_secret_file), "--admin-token-file", str(self.token_file)]
        return [sys.executable, "-m", "kfed", "controller",
                "--config", str(self.work_dir / "quorum.toml"), "--node-id", str(node_id),
                "--data-dir", str(self.data_dir(node_id)),
                "--raft-bind", f"127.0.0.1:{self.real_raft[node_id]}",
                "--lease-ms", str(LEASE_MS), *security, *self.extra_args]  # fmt: skip

    def start_node(self, node_id: int) -> None:
        if self.running(node_id):
            return
        log_path = self.work_dir / f"node-{node_id}.log"
        with open(log_path, "ab") as log_file:
            self.procs[node_id] = subprocess.Popen(
                self.command(node_id), stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.paused.discard(node_id)

    def running(self, node_id: int) -> bool:
        proc = self.procs.get(node_id)
        return proc is not None and proc.poll() is None

    def kill(self, node_id: int) -> None:
        """kill -9 (a paused node dies too)."""
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        self.paused.discard(node_id)

    def pause(self, node_id: int) -> None:
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            self.paused.add(node_id)

    def resume(self, node_id: int) -> None:
        proc = self.procs.get(node_id)
        if node_id in self.paused and proc is not None and proc.poll() is None:
            os.kill(proc.pid, signal.SIGCONT)
        self.paused.discard(node_id)

    def cut(self, node_id: int) -> None:
        self.proxies.cut(node_id)

    def heal(self, node_id: int | None = None) -> None:
        self.proxies.heal(node_id)
        self.http_proxies.heal(node_id)

    def lose_replies(self, node_id: int) -> None:
        self.http_proxies.lose_replies(node_id)

    def cluster(self, cluster_id: str, node_id: int = 1) -> dict[str, Any] | None:
        """One cluster as ``node_id``'s /v1/metadata shows it (None when unknown or the node does not answer)."""
        try:
            clusters = self.client.get(self.url(node_id) + "/v1/metadata", timeout=2).json()["clusters"]
        except (httpx.HTTPError, ValueError, KeyError):
            return None
        return next((c for c in clusters if c["cluster_id"] == cluster_id), None)

    def node_status(self, node_id: int, timeout_s: float = 0.5) -> dict[str, Any] | None:
        try:
            r = self.client.get(self.url(node_id) + "/v1/node", timeout=timeout_s)
            return r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None

    def leader(self) -> int | None:
        """The node that says it leads right now (the one with the highest term if several do)."""
        claims = []
        for n in NODE_IDS:
            if n in self.paused or not self.running(n):
                continue
            status = self.node_status(n)
            if status and status["role"] == "leader":
                claims.append((status["term"], n))
        return max(claims)[1] if claims else None

    def wait_leader(self, timeout_s: float) -> int:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            leader = self.leader()
            if leader is not None:
                return leader
            time.sleep(0.1)
        raise TimeoutError(f"no leader within {timeout_s} s; node logs in {self.work_dir}")

    def wait_ready(self, timeout_s: float) -> None:
        """Every node answers /readyz 200 (knows the leader and has caught up)."""
        deadline = time.monotonic() + timeout_s
        for n in NODE_IDS:
            while True:
                try:
                    if self.client.get(self.url(n) + "/readyz", timeout=0.5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if not self.running(n):
                    raise RuntimeError(f"node {n} exited (code {self.procs[n].returncode}); see {self.work_dir}")
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {n} not ready within {timeout_s} s; node logs in {self.work_dir}")
                time.sleep(0.1)

    def wait_converged(self, timeout_s: float, stable_s: float = 1.0) -> int:
        """Until every node has applied the same offset and it stayed so for ``stable_s``; that offset."""
        deadline = time.monotonic() + timeout_s
        since, last = time.monotonic(), None
        while time.monotonic() < deadline:
            statuses = [self.node_status(n) for n in NODE_IDS]
            offsets = {s["applied_offset"] if s else None for s in statuses}
            if len(offsets) == 1 and None not in offsets:
                offset = offsets.pop()
                if offset != last:
                    since, last = time.monotonic(), offset
                elif time.monotonic() - since >= stable_s:
                    return int(offset)
            else:
                last = None
            time.sleep(0.1)
        raise TimeoutError(f"nodes did not converge within {timeout_s} s; node logs in {self.work_dir}")

    def log_of(self, node_id: int) -> list[dict[str, Any]]:
        """The log one node serves, page by page: from 0, or from just after the dump it restarted from."""
        records: list[dict[str, Any]] = []
        offset = 0
        while True:
            r = self.client.get(
                self.url(node_id) + "/v1/log", params={"offset": offset, "limit": 10_000, **READS}, timeout=10
            )
            if r.status_code == 410 and not records:
                offset = r.json()["log_start_offset"]
                continue
            r.raise_for_status()
            body = r.json()
            records += body["records"]
            if body["next_offset"] >= body["high_watermark"]:
                return records
            offset = body["next_offset"]

    def metadata_of(self, node_id: int) -> dict[str, Any]:
        r = self.client.get(self.url(node_id) + "/v1/metadata", timeout=10)
        r.raise_for_status()
        body: dict[str, Any] = r.json()
        return body

    def snapshot_metadata_of(self, node_id: int) -> dict[str, Any]:
        """``/v1/snapshot`` as merged metadata (``metadata_view`` of the image its records make)."""
        applied = self.metadata_of(node_id)["offset"]
        r = self.client.get(self.url(node_id) + "/v1/snapshot", params={"min_offset": applied, **READS}, timeout=10)
        r.raise_for_status()
        body = r.json()
        image = read_records([record_from_dict(x["type"], x["data"]) for x in body["records"]], body["offset"])
        view: dict[str, Any] = json.loads(json.dumps(metadata_view(image)))
        return view

    def stop(self) -> None:
        for n in list(self.paused):
            self.resume(n)
        stop_processes([p for agent in self.agents.values() for p in agent.processes()])
        stop_processes(list(self.procs.values()))
        self.proxies.stop()
        self.http_proxies.stop()
        self.client.close()
