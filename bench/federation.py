"""Issue 3 and 25 benchmarks: how fast a failed sub-cluster is fenced, what idle agents cost the leader, and
how long ``kfed local up`` takes to start.

fencing, on each broker (Apache Kafka, Tansu): kill -9 a sub-cluster's broker and time (a) until merged
metadata says ``fenced`` (polling ``/v1/metadata`` every 20 ms) and (b) until a ``LogFollower`` — what
agents, the SDK and Spark use — applies the ``ClusterFenced`` record. The broker is restarted (Kafka on its
data) and unfenced between trials.

idle: N sub-clusters (Tansu brokers: N JVMs would not fit the machine) with their agents beating at the
default interval, nothing else: the leader's CPU and the metadata log's growth per minute. Heartbeats are
leases held in memory, so the log must not grow at all.

startup: ``kfed local up --once`` on fresh ports and a fresh data dir, for each broker: seconds until it
prints that the federation is up (3 controllers, 2 sub-clusters, their agents, the demo topic); for Kafka
also the restart on the same data dir (no storage format).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from deploy.launcher import BrokerKind, LocalFederation, LocalQuorum
from deploy.local_up import LocalLayout, free_layout
from deploy.processes import stop_processes

from .common import BenchResult, FenceWatch, Goal, Row, Sizes, fmt, median

FENCING_GOAL_S = 3.0


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks / 100.0  # USER_HZ is 100 on Linux


def run_fencing(trials: int, workdir: Path, result: BenchResult, broker: BrokerKind) -> None:
    fed = LocalFederation(workdir / f"fencing-{broker}", broker=broker)
    fenced_s: list[float] = []
    seen_s: list[float] = []
    try:
        fed.start()
        fed.wait_clusters_healthy(timeout_s=60)
        c1 = fed.clusters["c1"]
        for trial in range(trials):
            watch = FenceWatch(fed, "c1")
            time.sleep(0.5)
            watch.arm(fed)
            c1.kill_broker()
            killed = time.monotonic()
            while not next(c for c in fed.metadata()["clusters"] if c["cluster_id"] == "c1")["fenced"]:
                if time.monotonic() - killed > 30:
                    raise TimeoutError("c1 not fenced after 30 s")
                time.sleep(0.02)
            fenced_s.append(time.monotonic() - killed)
            seen_s.append(watch.wait(30, "the follower did not see ClusterFenced") - killed)
            watch.stop()
            print(f"    trial {trial + 1}: fenced in metadata after {fenced_s[-1]:.2f} s, "
                  f"seen by a follower after {seen_s[-1]:.2f} s", flush=True)  # fmt: skip
            c1.start_broker()
            fed.wait_clusters_healthy(["c1"], timeout_s=30)
    finally:
        fed.stop()
    goal = Goal("<=", FENCING_GOAL_S, "s")
    name = BROKER_NAMES[broker]
    result.rows += [
        Row(f"{name} broker kill -9 -> fenced in merged metadata, median", median(fenced_s), "s",
            "Tencent: < 1 min", goal, f"{trials} trials, max {fmt(max(fenced_s))} s"),
        Row(f"{name} broker kill -9 -> a LogFollower applied ClusterFenced, median", median(seen_s), "s",
            "Tencent: < 1 min", goal, f"max {fmt(max(seen_s))} s"),
    ]  # fmt: skip
    result.details[f"fencing_{broker}"] = {"fenced_s": fenced_s, "follower_s": seen_s}


def run_idle(clusters: int, measure_s: float, workdir: Path, result: BenchResult) -> None:
    quorum = LocalQuorum(workdir / "idle" / "quorum")
    fed = LocalFederation(workdir / "idle", [(f"c{i:02d}", "r1", 0) for i in range(clusters)], quorum, broker="tansu")
    try:
        started = time.monotonic()
        fed.start()
        fed.wait_clusters_healthy(timeout_s=180)
        print(f"    {clusters} sub-clusters and agents up in {time.monotonic() - started:.0f} s", flush=True)
        time.sleep(3.0)  # let registration traffic settle
        leader = quorum.leader()
        pid = quorum.procs[leader].pid
        follower_pids = [quorum.procs[v.id].pid for v in quorum.voters if v.id != leader]
        hw0 = quorum.node(leader)["high_watermark"]  # type: ignore[index]
        cpu0 = _cpu_seconds(pid)
        followers_cpu0 = [_cpu_seconds(p) for p in follower_pids]
        time.sleep(measure_s)
        cpu1 = _cpu_seconds(pid)
        followers_cpu1 = [_cpu_seconds(p) for p in follower_pids]
        hw1 = quorum.node(leader)["high_watermark"]  # type: ignore[index]
        agents = quorum.client.get(quorum.url(leader) + "/v1/agents").json()["agents"]
        grown = quorum.client.get(quorum.url(leader) + "/v1/log", params={"offset": hw0, "limit": 10_000}).json()
        kinds: dict[str, int] = {}
        for record in grown["records"]:
            kinds[record["type"]] = kinds.get(record["type"], 0) + 1
        if kinds:
            result.notes.append(f"records written while idle, by type: {kinds}")
    finally:
        fed.stop()
    minutes = measure_s / 60
    leader_cpu = (cpu1 - cpu0) / measure_s * 100
    follower_cpu = max(b - a for a, b in zip(followers_cpu0, followers_cpu1, strict=True)) / measure_s * 100
    beats_per_s = clusters / 0.5
    result.rows += [
        Row(f"log growth with {clusters} idle agents beating", (hw1 - hw0) / minutes, "records/min",
            f"{fmt(beats_per_s)} heartbeats/s", Goal("<=", 0, "records/min"), f"over {fmt(measure_s)} s"),
        Row("leader CPU while idle", leader_cpu, "% of a core", f"busiest follower {fmt(follower_cpu)} %"),
    ]  # fmt: skip
    result.details["idle"] = {"clusters": clusters, "measure_s": measure_s, "records": hw1 - hw0,
                              "leader_cpu_pct": leader_cpu, "agents_reporting": len(agents)}  # fmt: skip
    if len(agents) != clusters:
        result.notes.append(f"only {len(agents)} of {clusters} agents held a lease at the end")


BROKER_NAMES = {"kafka": "Apache Kafka", "tansu": "Tansu"}
UP_LINE = "kfed local federation is up"
STARTUP_TIMEOUT_S = 300.0


def local_up_seconds(layout: LocalLayout) -> float:
    """Seconds from running ``kfed local up --once`` to its line saying the federation is up (its stop after
    that line is not counted)."""
    kfed = str(Path(sys.executable).parent / "kfed")
    args = [kfed, "local", "up", "--once", "--data-dir", str(layout.data_dir), "--broker", layout.broker,
            "--http-base-port", str(layout.http_base_port), "--raft-base-port", str(layout.raft_base_port),
            "--broker-base-port", str(layout.broker_base_port)]  # fmt: skip
    started = time.monotonic()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    up_at = None
    output = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            output.append(line)
            if up_at is None and UP_LINE in line:
                up_at = time.monotonic()
        proc.wait(STARTUP_TIMEOUT_S)
    finally:
        stop_processes([proc], grace_s=60)
    if up_at is None or proc.returncode != 0:
        raise RuntimeError(
            f"kfed local up --broker {layout.broker} failed ({proc.returncode}): {''.join(output)[-2000:]}"
        )
    return up_at - started


def run_startup(workdir: Path, result: BenchResult) -> None:
    figures: dict[str, float] = {}
    for broker in ("tansu", "kafka"):
        layout = free_layout(workdir / f"local-{broker}", broker)
        figures[broker] = local_up_seconds(layout)
        print(f"    kfed local up --broker {broker}: up after {figures[broker]:.1f} s", flush=True)
        if broker == "kafka":
            figures["kafka_restart"] = local_up_seconds(free_layout(layout.data_dir, broker))
            print(f"    again on its data: up after {figures['kafka_restart']:.1f} s", flush=True)
    result.rows += [
        Row("kfed local up --broker tansu: start -> up", figures["tansu"], "s", "", None,
            "3 controllers, 2 Tansu sub-clusters, agents, demo topic"),
        Row("kfed local up (Apache Kafka): start -> up", figures["kafka"], "s",
            f"{figures['kafka'] / figures['tansu']:.1f}x Tansu's", None,
            "2 sub-clusters of 1 KRaft broker: storage formatted, JVMs started"),
        Row("kfed local up (Apache Kafka) again on its data", figures["kafka_restart"], "s", "", None,
            "no storage format; the brokers reopen their logs"),
    ]  # fmt: skip
    result.details["startup_s"] = figures


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    quick = sizes.quick
    for broker in ("kafka", "tansu"):
        run_fencing(2 if quick else 5, workdir, result, broker)
    run_idle(6 if quick else 60, 10.0 if quick else 60.0, workdir, result)
    run_startup(workdir, result)
