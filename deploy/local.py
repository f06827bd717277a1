"""``kfed local up``: the embedded local federation, for development and demos."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from controller.config import Voter, render_quorum

STOP_GRACE_S = 5.0


def local_voters(http_base_port: int, raft_base_port: int, count: int = 3) -> list[Voter]:
    return [
        Voter(i, f"127.0.0.1:{raft_base_port + i - 1}", f"http://127.0.0.1:{http_base_port + i - 1}")
        for i in range(1, count + 1)
    ]


def start_controllers(
    voters: Sequence[Voter], data_dir: Path, extra_args: Sequence[str] = ()
) -> list[subprocess.Popen[bytes]]:
    """One ``kfed controller`` process per voter, logging to ``<data_dir>/node-N.log``."""
    data_dir.mkdir(parents=True, exist_ok=True)
    config = data_dir / "quorum.toml"
    config.write_text(render_quorum(list(voters)))
    procs = []
    for v in voters:
        log_file = open(data_dir / f"node-{v.id}.log", "ab")  # noqa: SIM115 - owned by the child
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "controller.cli",
                    "controller",
                    "--config",
                    str(config),
                    "--node-id",
                    str(v.id),
                    "--data-dir",
                    str(data_dir / f"node-{v.id}"),
                    *extra_args,
                ],
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
    return procs


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


def status_line(client: httpx.Client, voters: Sequence[Voter]) -> str:
    parts = []
    leader = "-"
    for v in voters:
        try:
            node = client.get(v.http + "/v1/node", timeout=0.5).json()
            parts.append(f"n{v.id}:{node['role'][0].upper()}@{node['applied_offset']}")
            if node["role"] == "leader":
                leader = f"n{v.id} term {node['term']}"
        except (httpx.HTTPError, ValueError, KeyError):
            parts.append(f"n{v.id}:down")
    return f"leader {leader} | " + " ".join(parts)


def wait_for_leader(client: httpx.Client, voters: Sequence[Voter], timeout_s: float) -> Voter | None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for v in voters:
            try:
                if client.get(v.http + "/v1/node", timeout=0.5).json().get("role") == "leader":
                    return v
            except (httpx.HTTPError, ValueError):
                pass
        time.sleep(0.2)
    return None


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def local_up(data_dir: Path, http_base_port: int, raft_base_port: int, once: bool = False) -> int:
    signal.signal(signal.SIGTERM, _raise_interrupt)  # SIGTERM stops the children too, like Ctrl-C
    voters = local_voters(http_base_port, raft_base_port)
    print(f"kfed local: starting 3 controllers, data in {data_dir}/ (logs: {data_dir}/node-N.log)", flush=True)
    procs = start_controllers(voters, data_dir)
    client = httpx.Client()
    try:
        leader = wait_for_leader(client, voters, 30)
        if leader is None:
            print("kfed local: no leader after 30 s; see the node logs", file=sys.stderr)
            return 1
        first = voters[0].http
        print(
            f"""
kfed local federation is up. Leader: node {leader.id}.
  API docs:          {first}/docs
  quorum:            curl -s {first}/v1/quorum
  merged metadata:   curl -s {first}/v1/metadata
  tail the log:      curl -s '{first}/v1/log?offset=0&wait_ms=10000'
  stream the log:    curl -sN '{first}/v1/log/stream?offset=0'
  register cluster:  curl -s -XPOST {first}/v1/clusters -H 'content-type: application/json' \\
                       -d '{{"cluster_id":"c1","region":"r1","bootstrap_servers":"127.0.0.1:19092"}}'
Ctrl-C stops everything.
""",
            flush=True,
        )
        if once:
            return 0
        while True:
            dead = [p for p in procs if p.poll() is not None]
            line = status_line(client, voters)
            if dead:
                line += f" | {len(dead)} process(es) exited; see logs"
            print("\r" + line.ljust(100), end="", flush=True)
            time.sleep(1)
    except KeyboardInterrupt:
        print("\nkfed local: stopping", flush=True)
        return 0
    finally:
        client.close()
        stop_processes(procs)


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


class LocalQuorum:
    """Three (or ``size``) real controller processes on free loopback ports; for tests and benchmarks.

    ``kill(id)`` is kill -9; ``start(id)`` restarts a node on its data dir. Only our own PIDs are signalled.
    """

    def __init__(self, data_dir: Path, size: int = 3, extra_args: Sequence[str] = ()) -> None:
        ports = free_ports(2 * size)
        self.voters = [
            Voter(i + 1, f"127.0.0.1:{ports[2 * i]}", f"http://127.0.0.1:{ports[2 * i + 1]}") for i in range(size)
        ]
        self.data_dir = data_dir
        self.extra_args = list(extra_args)
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.client = httpx.Client(timeout=5.0)

    @property
    def urls(self) -> list[str]:
        return [v.http for v in self.voters]

    def url(self, node_id: int) -> str:
        return self.voters[node_id - 1].http

    def start(self, node_id: int | None = None) -> None:
        voters = self.voters if node_id is None else [self.voters[node_id - 1]]
        for v in voters:
            self.data_dir.mkdir(parents=True, exist_ok=True)
            config = self.data_dir / "quorum.toml"
            config.write_text(render_quorum(self.voters))
            log_file = open(self.data_dir / f"node-{v.id}.log", "ab")  # noqa: SIM115 - owned by the child
            self.procs[v.id] = subprocess.Popen(
                [sys.executable, "-m", "controller.cli", "controller", "--config", str(config),
                 "--node-id", str(v.id), "--data-dir", str(self.data_dir / f"node-{v.id}"), *self.extra_args],
                stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True,
            )  # fmt: skip

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
        """Id of the node that says it leads (and that another node agrees on); waits up to ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for v in self.voters:
                if v.id == exclude or (self.procs.get(v.id) and self.procs[v.id].poll() is not None):
                    continue
                status = self.node(v.id)
                if status and status["role"] == "leader":
                    return v.id
            time.sleep(0.05)
        raise TimeoutError(f"no leader within {timeout_s} s; logs in {self.data_dir}")

    def wait_ready(self, timeout_s: float = 20.0) -> None:
        """Until every running node answers /readyz 200 (knows the leader and has caught up)."""
        deadline = time.monotonic() + timeout_s
        for v in self.voters:
            if self.procs.get(v.id) is None or self.procs[v.id].poll() is not None:
                continue
            while True:
                try:
                    if self.client.get(v.http + "/readyz", timeout=0.5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"node {v.id} not ready within {timeout_s} s; logs in {self.data_dir}")
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

    def __enter__(self) -> LocalQuorum:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
