"""Benchmark 1a/1b: committed records per second through the HTTP API of a 3-node quorum.

1a: single-record writes from 64 concurrent clients (goal >= 2,000 records/s). The write is a partition
state toggle (writable <-> read_only, 1 record) on a topic each client owns, so clients never conflict;
a second row spreads the same clients over all three nodes (two thirds forwarded by a follower), and a
third registers new clusters (1 record each; the image's cluster map grows as it runs).
1b: writes that commit many records at once: creating topics of 500 partitions (501 records each;
goal >= 100,000 records/s) on a cluster whose stand-in agent heartbeats (unfenced).

Both run with the product default (the Raft journal fsynced per append) and with ``--no-journal-fsync``.
The headline is the records committed by acknowledged client writes per second of the measuring window;
the leader's applied offset over the same window, latencies and the HTTP floor are shown alongside.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import orjson

from deploy.launcher import LocalQuorum

from .common import (
    NO_FSYNC,
    Agents,
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    note_log_errors,
    percentile,
    running_quorum,
    wait_unfenced,
)
from .httpconn import TRANSPORT_ERRORS, Connection

SINGLE_GOAL = Goal(">=", 2000, "records/s")
BULK_GOAL = Goal(">=", 100_000, "records/s")


class Workload(Protocol):
    """Makes each client's next request and learns its outcome."""

    def request(self, client: int) -> tuple[str, str, bytes | None, int]:
        """(method, path, body, records it commits when acknowledged)."""
        ...

    def settle(self, client: int, status: int) -> None: ...


class NodeReads:
    """``GET /v1/node``: no write at all; the request rate the HTTP stack of one node sustains."""

    def request(self, client: int) -> tuple[str, str, bytes | None, int]:
        return "GET", "/v1/node", None, 0

    def settle(self, client: int, status: int) -> None:
        pass


class PartitionToggles:
    """Each client flips partition 0 of its own topic between writable and read_only (1 record)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.read_only: dict[int, bool] = {}

    def request(self, client: int) -> tuple[str, str, bytes, int]:
        target = "writable" if self.read_only.get(client, False) else "read_only"
        body = orjson.dumps({"state": target})
        return "PUT", f"/v1/topics/{self.prefix}{client}/partitions/0/state", body, 1

    def settle(self, client: int, status: int) -> None:
        if 200 <= status < 300:  # after a 504 (outcome unknown) the same target is simply sent again
            self.read_only[client] = not self.read_only.get(client, False)


class NewClusters:
    """Each request registers a cluster with a new id (1 record)."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.counter: Counter[int] = Counter()

    def request(self, client: int) -> tuple[str, str, bytes, int]:
        self.counter[client] += 1
        cluster_id = f"{self.prefix}{client}-{self.counter[client]}"
        body = orjson.dumps({"cluster_id": cluster_id, "region": "reg", "bootstrap_servers": "127.0.0.1:9092"})
        return "POST", "/v1/clusters", body, 1

    def settle(self, client: int, status: int) -> None:
        pass


class BigTopics:
    """Each request creates a topic of ``partitions`` partitions on one cluster (1 + partitions records)."""

    def __init__(self, prefix: str, region: str, partitions: int) -> None:
        self.prefix = prefix
        self.region = region
        self.partitions = partitions
        self.counter: Counter[int] = Counter()

    def request(self, client: int) -> tuple[str, str, bytes, int]:
        self.counter[client] += 1
        body = orjson.dumps(
            {
                "name": f"{self.prefix}{client}x{self.counter[client]}",
                "region": self.region,
                "partitions_per_cluster": self.partitions,
            }
        )
        return "POST", "/v1/topics", body, 1 + self.partitions

    def settle(self, client: int, status: int) -> None:
        pass


@dataclass(slots=True)
class LoadStats:
    seconds: float = 0.0
    acked_requests: int = 0
    acked_records: int = 0
    committed_records: int = 0  # leader's applied offset delta over the window
    latencies_s: list[float] = field(default_factory=list)
    errors: Counter[str] = field(default_factory=Counter)

    @property
    def committed_per_s(self) -> float:
        return self.committed_records / self.seconds if self.seconds else 0.0

    @property
    def acked_per_s(self) -> float:
        return self.acked_records / self.seconds if self.seconds else 0.0

    def summary(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "committed_records": self.committed_records,
            "committed_records_per_s": round(self.committed_per_s, 1),
            "acked_requests": self.acked_requests,
            "acked_records": self.acked_records,
            "acked_records_per_s": round(self.acked_per_s, 1),
            "latency_p50_ms": round(percentile(self.latencies_s, 50) * 1000, 2),
            "latency_p99_ms": round(percentile(self.latencies_s, 99) * 1000, 2),
            "errors": dict(self.errors),
        }


async def applied_offset(conn: Connection) -> int:
    return int((await conn.request("GET", "/v1/node", timeout_s=5)).json()["applied_offset"])


async def drive(
    targets: list[str], leader_url: str, clients: int, work: Workload, warmup_s: float, measure_s: float
) -> LoadStats:
    """``clients`` closed-loop clients (client i talks to ``targets[i % len]``) for warmup + measure seconds."""
    stats = LoadStats()
    loop = asyncio.get_running_loop()
    start = loop.time() + warmup_s
    end = start + measure_s
    probe = Connection(leader_url)

    async def client(i: int) -> None:
        conn = Connection(targets[i % len(targets)])
        try:
            while loop.time() < end:
                method, path, body, records = work.request(i)
                t0 = loop.time()
                try:
                    reply = await conn.request(method, path, body, timeout_s=10)
                except TRANSPORT_ERRORS as e:
                    stats.errors[type(e).__name__] += 1
                    await asyncio.sleep(0.05)
                    continue
                t1 = loop.time()
                work.settle(i, reply.status)
                if not start <= t1 < end:
                    continue
                if reply.ok:
                    stats.acked_requests += 1
                    stats.acked_records += records
                    stats.latencies_s.append(t1 - t0)
                else:
                    stats.errors[str(reply.status)] += 1
        finally:
            await conn.close()

    async def window() -> None:
        await asyncio.sleep(max(0.0, start - loop.time()))
        first, t0 = await applied_offset(probe), loop.time()
        await asyncio.sleep(max(0.0, end - loop.time()))
        last, t1 = await applied_offset(probe), loop.time()
        stats.committed_records = last - first
        stats.seconds = t1 - t0

    try:
        await asyncio.gather(window(), *(client(i) for i in range(clients)))
    finally:
        await probe.close()
    return stats


def setup_topics(q: LocalQuorum, prefix: str, count: int) -> None:
    """Clusters for the workloads, and ``count`` topics of 2 partitions (partition 1 stays writable, as a
    topic must keep one, while partition 0 toggles)."""
    url = q.url(q.leader())
    for cluster_id, region in (("w-c", "w"), ("bulk-c", "bulk")):
        body = {"cluster_id": cluster_id, "region": region, "bootstrap_servers": "127.0.0.1:9092"}
        q.client.post(url + "/v1/clusters", json=body).raise_for_status()
    for i in range(count):
        topic: dict[str, object] = {"name": f"{prefix}{i}", "region": "w", "partitions_per_cluster": 2}
        q.client.post(url + "/v1/topics", json=topic).raise_for_status()


@dataclass(frozen=True, slots=True)
class Phase:
    metric: str
    targets: list[str]
    clients: int
    work: Workload
    goal: Goal | None


def phases(q: LocalQuorum, sizes: Sizes, fsync: bool) -> list[Phase]:
    """The default-durability quorum runs every phase; the no-fsync one the two headline phases. New-cluster
    registrations go last: each such cluster, having no agent, is fenced 3 s later (one more record)."""
    label = "fsync" if fsync else "no fsync"
    leader = [q.url(q.leader())]
    n, p = sizes.single_clients, sizes.bulk_partitions
    toggles = PartitionToggles("w")
    out = [Phase(f"1a single-record writes, {n} clients -> leader, {label}", leader, n, toggles, SINGLE_GOAL)]
    if fsync:
        out.append(
            Phase(
                f"1a single-record writes, {n} clients over 3 nodes, {label}",
                q.urls,
                n,
                toggles,
                SINGLE_GOAL,
            )
        )
    out.append(
        Phase(
            f"1b topics of {p} partitions, {sizes.bulk_clients} clients -> leader, {label}",
            leader,
            sizes.bulk_clients,
            BigTopics("b", "bulk", p),
            BULK_GOAL,
        )
    )
    if fsync:
        out.append(
            Phase(
                f"1a new-cluster registrations, {n} clients -> leader, {label}",
                leader,
                n,
                NewClusters("n"),
                SINGLE_GOAL,
            )
        )
    return out


def _latency(stats: LoadStats) -> str:
    p50, p99 = percentile(stats.latencies_s, 50) * 1000, percentile(stats.latencies_s, 99) * 1000
    errors = sum(stats.errors.values())
    return f"p50 {fmt(p50)} / p99 {fmt(p99)} ms" + (f", {errors} errors" if errors else "")


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    for fsync in (True, False):
        label = "fsync" if fsync else "no fsync"
        with running_quorum(tmp / label.replace(" ", ""), () if fsync else (NO_FSYNC,)) as q:
            setup_topics(q, "w", sizes.single_clients)
            with Agents(q.urls, ["bulk-c"]):  # topics are placed only on clusters whose agent heartbeats
                wait_unfenced(q, ["bulk-c"])
                run_phases(q, sizes, fsync, label, result)
            note_log_errors(q, result, label)
            metrics = q.client.get(q.url(q.leader()) + "/metrics").text
            result.details[f"leader metrics ({label})"] = [
                line for line in metrics.splitlines() if line.startswith(("kfed_raft_commands", "kfed_write_"))
            ]
    result.notes.append(
        "measured = records/s committed by acknowledged client writes; baseline column = the leader's applied "
        "offset over the same window (every committed record, including any the quorum wrote itself, e.g. "
        "fencing clusters that have no agent), request latency, and the HTTP floor: GET /v1/node requests/s on "
        "the same leader, i.e. what its HTTP stack serves with no write at all."
    )


def run_phases(q: LocalQuorum, sizes: Sizes, fsync: bool, label: str, result: BenchResult) -> None:
    leader = q.url(q.leader())
    metric = f"HTTP floor: GET /v1/node (no write), {sizes.single_clients} clients -> leader, {label}"
    floor = asyncio.run(drive([leader], leader, sizes.single_clients, NodeReads(), sizes.warmup_s, sizes.measure_s))
    floor_rate = floor.acked_requests / floor.seconds if floor.seconds else 0.0
    result.rows.append(Row(metric, floor_rate, "requests/s", _latency(floor)))
    result.details[metric] = floor.summary()
    for ph in phases(q, sizes, fsync):
        stats = asyncio.run(drive(ph.targets, leader, ph.clients, ph.work, sizes.warmup_s, sizes.measure_s))
        print(f"  {ph.metric}: {fmt(stats.acked_per_s)} records/s", flush=True)
        baseline = f"leader applied {fmt(stats.committed_per_s)} records/s; {_latency(stats)}"
        if ph.goal is SINGLE_GOAL:
            baseline += f"; HTTP floor {fmt(floor_rate)} req/s"
        result.rows.append(Row(ph.metric, stats.acked_per_s, "records/s", baseline, ph.goal))
        result.details[ph.metric] = stats.summary()
        time.sleep(0.5)
