"""Benchmark #38: metadata at the scale a federation exists for.

The federation's shape: ``scale_clusters`` sub-clusters in regions of 4; each topic placed on its region's 4
clusters (``scale_partitions_per_topic`` / 4 partitions each), topics ``key_order: none``. Leaders come from
synthetic agent reports in the compact form real agents send (no real broker holds 100,000 partitions here),
and a swarm of stand-in agents heartbeats every cluster once a second. Full size: 10,000 topics x 10,000
partitions (100 M) on 1,000 clusters; ``--scale TOPICS,PARTITIONS,CLUSTERS`` sets another.

Measured, in order: registering the clusters; creating the topics through ``POST /v1/topics`` until every node
applied them; every physical partition's leader reported and applied everywhere; each node's RSS; 100,000 (or
a cluster's all, if fewer) leaders moving in one cluster, applied by every follower, and the log offsets it
took; a topic expanded by 10,000 partitions, applied by every follower; the leader's CPU while the agents beat;
a wiped follower catching up; the leader killed (-9) and the next acknowledged write.

The baseline, one record and one Python object per partition, is the code before metadata version 4: its
figures at 1 M partitions are the ``image`` benchmark's of that time (~1.1 KiB per partition); it does not fit
this machine at the full size (a 3-node quorum of it stops near 6 M partitions), so it is not run here.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Final

import httpx
import orjson
from confluent_kafka import Producer

from controller.leases import DEFAULT_LEASE_MS
from deploy.kafka_cluster import KafkaCluster
from deploy.launcher import LocalQuorum, SubCluster, free_ports, stop_processes
from deploy.processes import wait_port
from gateway.cli import spawn as spawn_gateway

from .common import (
    NO_FSYNC,
    Agents,
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    leader_applied,
    median,
    node_status,
    note_log_errors,
    proc_status,
    running_quorum,
    wait_unfenced,
)
from .image import post_many, wipe_and_catch_up

BUILD_GOAL = Goal("<=", 120.0, "s")
LEADERS_GOAL = Goal("<=", 120.0, "s")
RSS_GOAL = Goal("<=", 4096, "MiB")
MOVE_GOAL = Goal("<=", 1.0, "s")
MOVE_OFFSETS_GOAL = Goal("<=", 100, "offsets")
EXPAND_GOAL = Goal("<=", 1.0, "s")
AGENTS_CPU_GOAL = Goal("<=", 50.0, "% of a core")
CATCH_UP_GOAL = Goal("<=", 60.0, "s")
SNAPSHOT_GOAL = Goal("<=", 10.0, "s")
DEAD_AGENT_GOAL = Goal("<=", 3.0, "s")
FALSE_FENCES_GOAL = Goal("<=", 0, "clusters")
FAILOVER_GOAL = Goal("<=", 1.0, "s")
GATEWAY_RSS_GOAL = Goal("<=", 128.0, "MiB")
GATEWAY_METADATA_GOAL = Goal("<=", 250.0, "ms")
SDK_RSS_GOAL = Goal("<=", 64.0, "MiB")
SDK_FIRST_ACK_GOAL = Goal("<=", 1.0, "s")
SDK_PARTITIONS = 1000
GATEWAY_TOPICS = 10
METADATA_TRIALS = 5
CLIENTS = 4
LEADERS_PER_REQUEST = 100_000  # the controllers' limit per report
BROKERS = ("127.0.0.1:9092", "127.0.0.1:9093", "127.0.0.1:9094")
MOVED = 100_000
EXPANDED = 10_000
CPU_WINDOW_S = 10.0


def cluster_id(i: int) -> str:
    return f"c{i:04d}"


def topic_name(k: int) -> str:
    return f"t{k:05d}"


def post_all(q: LocalQuorum, bodies: list[tuple[str, bytes]], what: str) -> tuple[float, dict[str, int], int, int]:
    """POST every body (``CLIENTS`` at a time, retried with their keys); (seconds until every node applied the
    last of them, the answers' statuses, log offsets they took, the last offset)."""
    before = leader_applied(q)
    t0 = time.monotonic()
    statuses = asyncio.run(post_many(q.url(q.leader()), bodies, CLIENTS, what, True, what.split()[-1]))
    last = leader_applied(q)
    q.wait_applied(last, timeout_s=1800)
    return time.monotonic() - t0, statuses, last - before, last


def post_and_apply(q: LocalQuorum, path: str, body: dict[str, Any], timeout_s: float = 60) -> tuple[float, int, int]:
    """(seconds from sending ``body`` until every node applied it, log offsets it took, its last offset)."""
    url = q.url(q.leader())
    before = leader_applied(q)
    t0 = time.monotonic()
    reply = q.client.post(url + path, json=body, timeout=120)
    reply.raise_for_status()
    last = int(reply.json()["offset"])
    q.wait_applied(last, timeout_s=timeout_s)
    return time.monotonic() - t0, last - before, last


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    topics, per_topic, clusters = sizes.scale_topics, sizes.scale_partitions_per_topic, sizes.scale_clusters
    regions, partitions = clusters // 4, topics * per_topic
    result.notes.append(
        f"{topics:,} topics x {per_topic:,} partitions = {partitions:,} on {clusters:,} clusters in {regions:,} "
        f"regions of 4; quorum with --no-journal-fsync; stand-in agents heartbeat every cluster once a second"
    )
    with running_quorum(tmp / "quorum", (NO_FSYNC,)) as q:
        rss_before = {node: proc_status(q.procs[node].pid).get("VmRSS", 0) for node in q.procs}
        ids = [cluster_id(i) for i in range(clusters)]
        bodies = [
            ("/v1/clusters", orjson.dumps({"cluster_id": c, "region": f"r{i // 4}", "bootstrap_servers": BROKERS[0]}))
            for i, c in enumerate(ids)
        ]
        t0 = time.monotonic()
        asyncio.run(post_many(q.url(q.leader()), bodies, CLIENTS, "registering clusters", True, "clusters"))
        register_s = time.monotonic() - t0
        with Agents(q.urls, ids, interval_s=1.0) as agents:
            wait_unfenced(q, ids, timeout_s=120)
            result.rows.append(Row(f"register {clusters:,} clusters via POST /v1/clusters", register_s, "s"))
            build(q, sizes, result)
            report(q, sizes, result)
            rss = {node: proc_status(q.procs[node].pid).get("VmRSS", 0) for node in q.procs}
            worst = max(rss.values()) / 1024
            grown = max(rss[n] - rss_before[n] for n in rss) * 1024 / partitions
            result.rows.append(
                Row("controller node RSS (largest of 3)", worst, "MiB", goal=RSS_GOAL,
                    note=f"{fmt(grown)} bytes per partition over the empty node; per node "
                    + ", ".join(f"{n}: {v >> 10} MiB" for n, v in sorted(rss.items())))
            )  # fmt: skip
            move_leaders(q, sizes, result)
            expand(q, result)
            gateway(q, sizes, tmp, result)
            sdk_producer(q, tmp, result)
            leader = q.leader()
            cpu0, t0 = cpu_seconds(q.procs[leader].pid), time.monotonic()
            time.sleep(CPU_WINDOW_S)
            share = (cpu_seconds(q.procs[leader].pid) - cpu0) / (time.monotonic() - t0) * 100
            result.rows.append(
                Row(f"{clusters:,} agents beating once a second: leader CPU", share, "% of a core",
                    goal=AGENTS_CPU_GOAL, note=f"heartbeat failures {agents.failures}")
            )  # fmt: skip
            dead_agent(q, agents, ids[-1], result)
            leader_dumped(q, leader)  # so that the wiped follower is sent the whole image (InstallSnapshot)
            final = leader_applied(q)
            follower = next(n for n in q.procs if n != leader)
            term = node_status(q, leader)["term"]
            caught = wipe_and_catch_up(q, follower, final, timeout_s=1800)
            result.rows.append(
                Row("wiped follower -> caught up", caught["catch_up_s"], "s", goal=CATCH_UP_GOAL,
                    note=f"node {follower}, RSS after {caught['rss_kib'].get('VmRSS', 0) >> 10} MiB")
            )  # fmt: skip
            kept = q.leader() == leader and node_status(q, leader)["term"] == term
            snapshot_rows(q, leader, follower, kept, result)
            failover(q, result)
        note_log_errors(q, result, "scale")


def dead_agent(q: LocalQuorum, agents: Agents, victim: str, result: BenchResult) -> None:
    """One agent of the swarm stops beating: the time from its last answered heartbeat until its cluster is
    fenced; and how many clusters of beating agents a heartbeat found fenced during the whole run."""
    lease_s = DEFAULT_LEASE_MS / 1000
    agents.silenced.add(victim)
    started = time.monotonic()
    fenced = None
    while fenced is None and time.monotonic() < started + 30:
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if q.client.get(q.url(q.leader()) + f"/v1/clusters/{victim}", timeout=2).json().get("fenced"):
                fenced = time.monotonic() - agents.last_ok.get(victim, started)  # a beat in flight may land late
        time.sleep(0.05)
    falsely = sorted(agents.fenced_seen - {victim})
    result.rows.append(
        Row("an agent stops beating -> its cluster fenced (from its last answered heartbeat)", fenced, "s",
            goal=DEAD_AGENT_GOAL,
            note=f"agent lease {lease_s:g} s" + ("" if fenced is None else f": fenced {fenced - lease_s:.2f} s after"))
    )  # fmt: skip
    result.rows.append(
        Row("clusters of beating agents found fenced during the run", len(falsely), "clusters",
            goal=FALSE_FENCES_GOAL, note=", ".join(falsely[:5]) + (" ..." if len(falsely) > 5 else ""))
    )  # fmt: skip


DUMP_WRITTEN: Final = r"dump of (\d+) bytes written in ([\d.]+) s"
"""What a node logs once it wrote its state dump (``metadata_quorum.dump``)."""


def leader_dumped(q: LocalQuorum, leader: int, timeout_s: float = 300) -> None:
    """Wait until the leader writes its next dump, from the whole image: nodes dump on a period (or past a
    number of entries), each in its own slot of it, so whether the leader has dumped since the build is chance."""
    log_path = q.data_dir / f"node-{leader}.log"
    before = len(re.findall(DUMP_WRITTEN, log_path.read_text(errors="replace")))
    deadline = time.monotonic() + timeout_s
    while len(re.findall(DUMP_WRITTEN, log_path.read_text(errors="replace"))) <= before:
        if time.monotonic() > deadline:
            return  # the rows then say no dump was written
        time.sleep(1)


def snapshot_rows(q: LocalQuorum, leader: int, follower: int, kept: bool, result: BenchResult) -> None:
    """From the nodes' logs: the leader's last dump (the one a wiped follower is sent), and that follower's
    install of it; ``kept``: whether the leader led the same term throughout."""
    written = _last_match(q.data_dir / f"node-{leader}.log", DUMP_WRITTEN)
    installed = _last_match(q.data_dir / f"node-{follower}.log", r"installed the leader's dump .* in ([\d.]+) s")
    size = f"{int(written[0]) / 2**20:,.0f} MiB; " if written else "no dump written within 300 s; "
    result.rows.append(
        Row("snapshot (dump) written by the leader", float(written[1]) if written else None, "s", goal=SNAPSHOT_GOAL,
            note=f"{size}leadership {'kept' if kept else 'LOST'} while it was written and sent")
    )  # fmt: skip
    result.rows.append(
        Row("snapshot loaded by the wiped follower (InstallSnapshot)", float(installed[0]) if installed else None,
            "s", goal=SNAPSHOT_GOAL, note=f"node {follower}" + ("" if installed else ", caught up from the log"))
    )  # fmt: skip


def _last_match(path: Path, pattern: str) -> tuple[str, ...] | None:
    found = re.findall(pattern, path.read_text(errors="replace")) if path.exists() else []
    if not found:
        return None
    last = found[-1]
    return last if isinstance(last, tuple) else (last,)


def build(q: LocalQuorum, sizes: Sizes, result: BenchResult) -> None:
    regions, per_cluster = sizes.scale_clusters // 4, sizes.scale_partitions_per_topic // 4
    bodies = [
        ("/v1/topics", orjson.dumps({"name": topic_name(k), "region": f"r{k % regions}",
                                     "partitions_per_cluster": per_cluster}))
        for k in range(sizes.scale_topics)
    ]  # fmt: skip
    build_s, statuses, _offsets, last = post_all(q, bodies, "creating topics")
    result.details["build"] = {"statuses": statuses, "last_offset": last}
    result.rows.append(
        Row(f"{sizes.scale_topics:,} topics x {sizes.scale_partitions_per_topic:,} partitions created via "
            "POST /v1/topics, applied by every node", build_s, "s", goal=BUILD_GOAL,
            note=f"statuses {statuses}; the log at offset {last:,}")
    )  # fmt: skip


def report(q: LocalQuorum, sizes: Sizes, result: BenchResult) -> None:
    """Every cluster's agent reports the leader of each physical partition it holds, in the compact form."""
    regions, per_cluster = sizes.scale_clusters // 4, sizes.scale_partitions_per_topic // 4
    bodies: list[tuple[str, bytes]] = []
    for i in range(sizes.scale_clusters):
        topics = [topic_name(k) for k in range(i // 4, sizes.scale_topics, regions)]
        per_request = max(1, LEADERS_PER_REQUEST // per_cluster)
        for at in range(0, len(topics), per_request):
            leaders = [
                {"physical_topic": t, "brokers": list(BROKERS), "ranges": [0, per_cluster],
                 "leaders": [p % 3 for p in range(per_cluster)]}
                for t in topics[at : at + per_request]
            ]  # fmt: skip
            bodies.append((f"/v1/agents/{cluster_id(i)}/partitions", orjson.dumps({"leaders": leaders})))
    report_s, statuses, offsets, _last = post_all(q, bodies, "reporting leaders")
    result.rows.append(
        Row(f"leaders of all {sizes.scale_topics * sizes.scale_partitions_per_topic:,} physical partitions reported "
            "(synthetic agents) and applied everywhere", report_s, "s", goal=LEADERS_GOAL,
            note=f"{len(bodies):,} reports, {offsets:,} log offsets; statuses {statuses}")
    )  # fmt: skip


def move_leaders(q: LocalQuorum, sizes: Sizes, result: BenchResult) -> None:
    """A broker of cluster c0000 fails: up to 100,000 of its partitions get another leader in one report."""
    regions, per_cluster = sizes.scale_clusters // 4, sizes.scale_partitions_per_topic // 4
    topics = [topic_name(k) for k in range(0, sizes.scale_topics, regions)]
    leaders, moved = [], 0
    for t in topics:
        n = min(per_cluster, MOVED - moved)
        if n <= 0:
            break
        leaders.append({"physical_topic": t, "brokers": list(BROKERS), "ranges": [0, n],
                        "leaders": [(p + 1) % 3 for p in range(n)]})  # fmt: skip
        moved += n
    seconds, offsets, _ = post_and_apply(q, f"/v1/agents/{cluster_id(0)}/partitions", {"leaders": leaders})
    result.rows.append(
        Row(f"{moved:,} partition leaders moving in one sub-cluster -> applied by every node", seconds, "s",
            goal=MOVE_GOAL)
    )  # fmt: skip
    result.rows.append(Row("... log offsets it took", offsets, "offsets", goal=MOVE_OFFSETS_GOAL))


def expand(q: LocalQuorum, result: BenchResult) -> None:
    body = {"cluster_id": cluster_id(0), "count": EXPANDED, "physical_topic": "expanded"}
    seconds, offsets, _ = post_and_apply(q, f"/v1/topics/{topic_name(0)}/partitions", body)
    result.rows.append(
        Row(f"expand a topic by {EXPANDED:,} partitions -> applied by every node", seconds, "s", goal=EXPAND_GOAL,
            note=f"{offsets} log offset(s)")
    )  # fmt: skip


def gateway(q: LocalQuorum, sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    """A gateway whose clients use 10 topics of the federation: its RSS over the same gateway against an empty
    quorum (measured beside it), and kcat listing one topic (``-L -t``: a Metadata request) through it."""
    kcat = shutil.which("kcat")
    names = [topic_name(k) for k in range(1, 1 + min(GATEWAY_TOPICS, sizes.scale_topics - 1))]
    with LocalQuorum(tmp / "empty-quorum", size=1) as empty:
        empty.wait_ready(timeout_s=30)
        with running_gateway(empty, tmp / "gateway-empty.log") as (port, pid):
            if kcat:
                subprocess.run([kcat, "-b", f"127.0.0.1:{port}", "-L"], capture_output=True, timeout=60, check=False)
            baseline = proc_status(pid).get("VmRSS", 0)
    with running_gateway(q, tmp / "gateway.log") as (port, pid):
        if kcat is None:
            result.rows.append(Row("gateway serving 10 topics: RSS over an empty federation's", None, "MiB",
                                   goal=GATEWAY_RSS_GOAL, note="kcat is not installed"))  # fmt: skip
            return
        listing = [kcat, "-b", f"127.0.0.1:{port}", "-L", "-t"]
        for name in names:  # each followed as a client asks for it
            subprocess.run([*listing, name], capture_output=True, timeout=60, check=True)
        grown = (proc_status(pid).get("VmRSS", 0) - baseline) / 1024
        seconds = []
        for _ in range(METADATA_TRIALS):
            t0 = time.monotonic()
            listed = subprocess.run([*listing, names[0]], capture_output=True, timeout=60, check=True, text=True)
            seconds.append(time.monotonic() - t0)
        shown = listed.stdout.count("partition ")
    result.rows.append(
        Row(f"gateway serving {len(names)} topics: RSS over the same gateway against an empty federation", grown,
            "MiB", goal=GATEWAY_RSS_GOAL, note=f"empty federation's gateway {baseline >> 10} MiB")
    )  # fmt: skip
    result.rows.append(
        Row(f"kcat -L -t one {sizes.scale_partitions_per_topic:,}-partition topic through the gateway",
            median(seconds) * 1000, "ms", goal=GATEWAY_METADATA_GOAL,
            note=f"median of {METADATA_TRIALS}, kcat's start included; {shown:,} partitions listed")
    )  # fmt: skip


def sdk_producer(q: LocalQuorum, tmp: Path, result: BenchResult) -> None:
    """A ``FederatedProducer`` writing to a 1,000-partition topic placed on a real local Kafka broker (with its
    agent): its RSS over the same process against an empty federation (measured beside it, on the same broker),
    and the time from its construction to its first acknowledged message (each partition written once before,
    straight to the broker)."""
    broker = KafkaCluster(tmp / "sdk-broker", 1)
    broker.start()
    try:
        with LocalQuorum(tmp / "sdk-empty-quorum", size=1) as empty:
            empty.wait_ready(timeout_s=30)
            baseline = _first_ack(empty, broker, tmp / "sdk-empty", "sdk-empty")
        figures = _first_ack(q, broker, tmp / "sdk", "sdk-scale")
    finally:
        broker.stop()
    grown = (figures["rss_kib"] - baseline["rss_kib"]) / 1024
    result.rows.append(
        Row(f"SDK producer writing to one {SDK_PARTITIONS:,}-partition topic: RSS over the same process against an "
            "empty federation", grown, "MiB", goal=SDK_RSS_GOAL,
            note=f"empty federation's {baseline['rss_kib'] >> 10} MiB; this one's {figures['rss_kib'] >> 10} MiB")
    )  # fmt: skip
    result.rows.append(
        Row("SDK producer: construction -> first acknowledged message", figures["first_ack_s"], "s",
            goal=SDK_FIRST_ACK_GOAL, note=f"against an empty federation {fmt(baseline['first_ack_s'])} s")
    )  # fmt: skip


def _first_ack(q: LocalQuorum, broker: KafkaCluster, data_dir: Path, topic: str) -> dict[str, Any]:
    """The real broker as cluster ``real`` of ``q`` (its agent started), a topic of ``SDK_PARTITIONS`` on it
    with every leader known, and the figures of a producer process writing one message to it."""
    data_dir.mkdir(parents=True, exist_ok=True)
    cluster = SubCluster("real", "real", broker, data_dir, q.urls, q.token_args, owns_brokers=False)
    cluster.start_agent()
    try:
        url = q.url(q.leader())
        body = {"name": topic, "region": "real", "partitions_per_cluster": SDK_PARTITIONS}
        deadline = time.monotonic() + 60
        while q.client.post(url + "/v1/topics", json=body, timeout=30).status_code == 409:  # not registered yet
            if time.monotonic() > deadline:
                raise TimeoutError("the real cluster's agent did not register it within 60 s")
            time.sleep(0.2)
        while not _all_led(q.client.get(url + "/v1/metadata", params={"topic": topic, "partition_limit": 10_000})):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the leaders of {topic} were not reported within 60 s")
            time.sleep(0.2)
        _write_each_partition(broker.bootstrap, topic)
        child = subprocess.run(
            [sys.executable, "-c", "import sys; from bench.scale import first_ack; first_ack(*sys.argv[1:])",
             ",".join(q.urls), topic],
            capture_output=True, text=True, timeout=120, check=True,
        )  # fmt: skip
        figures: dict[str, Any] = orjson.loads(child.stdout.splitlines()[-1])
        return figures
    finally:
        cluster.stop()


def _write_each_partition(bootstrap: str, topic: str) -> None:
    """One message to each physical partition of ``topic``, straight to the broker: a fresh Kafka topic takes
    seconds to acknowledge its first write, a cost of the broker and not of the producer measured."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.metrics.push": False, "log_level": 3})
    for partition in range(SDK_PARTITIONS):
        producer.produce(topic, b"warm", partition=partition)
    if producer.flush(60):
        raise TimeoutError(f"the broker did not acknowledge a first write to each partition of {topic} in 60 s")


def _all_led(reply: httpx.Response) -> bool:
    topics = reply.json()["topics"] if reply.status_code == 200 else []
    return bool(topics) and all(p["leader"] for p in topics[0]["partitions"])


def first_ack(controllers: str, topic: str) -> None:
    """In a process of its own: construct a ``FederatedProducer``, send one message to ``topic``, and print
    (JSON) the seconds until it was acknowledged and the process's RSS then."""
    from sdk import FederatedProducer

    acked: list[float] = []
    t0 = time.monotonic()
    producer = FederatedProducer({"kfed.controllers": controllers, "enable.metrics.push": False})
    producer.produce(topic, b"first", on_delivery=lambda err, msg: acked.append(time.monotonic()) if not err else None)
    producer.flush(60)
    if not acked:
        raise SystemExit(f"the message to {topic} was not acknowledged within 60 s")
    print(orjson.dumps({"first_ack_s": acked[0] - t0, "rss_kib": proc_status(os.getpid()).get("VmRSS", 0)}).decode())
    producer.close()


@contextlib.contextmanager
def running_gateway(q: LocalQuorum, log_path: Path) -> Iterator[tuple[int, int]]:
    """A gateway process of ``q`` on a free port, serving: (its port, its pid)."""
    port = free_ports(1)[0]
    token = ["--token-file", str(q.token_file)] if q.token_file else []
    with open(log_path, "ab") as log:
        proc = spawn_gateway(q.urls, f"127.0.0.1:{port}", log, *token)
    try:
        wait_port(port, 60)
        yield port, proc.pid
    finally:
        stop_processes([proc])


def failover(q: LocalQuorum, result: BenchResult) -> None:
    """kill -9 the leader; time until a write is acknowledged by the new one (retried every 10 ms)."""
    leader = q.leader()
    body = {"cluster_id": "after-failover", "region": "failover", "bootstrap_servers": BROKERS[0]}
    t0 = time.monotonic()
    os.kill(q.procs[leader].pid, signal.SIGKILL)
    deadline = t0 + 60
    while time.monotonic() < deadline:
        for url in (q.url(n) for n in q.procs if n != leader):
            try:
                if q.client.post(url + "/v1/clusters", json=body, timeout=2).status_code < 300:
                    result.rows.append(
                        Row("leader kill -9 -> next acknowledged write", time.monotonic() - t0, "s",
                            goal=FAILOVER_GOAL)
                    )  # fmt: skip
                    stop_processes([q.procs[leader]])
                    return
            except httpx.HTTPError:  # the killed node, or one not leading yet: try the next
                pass
        time.sleep(0.01)
    result.rows.append(Row("leader kill -9 -> next acknowledged write", None, "s", goal=FAILOVER_GOAL,
                           note="no write acknowledged within 60 s"))  # fmt: skip
