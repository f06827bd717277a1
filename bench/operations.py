"""Issue 5 benchmarks: federation operations end to end, on a live federation with a producer running.

scale-up: a new Tansu sub-cluster joins, ``POST /v1/topics/U_TopicA/partitions`` gives the topic 4
partitions on it; measured from the committed reply to the first message a running key-less
FederatedProducer gets acknowledged on one of them (the agent creates the physical partitions, the
producer's followed image routes to them).

failure: kill -9 of a sub-cluster's broker under the producer, until a LogFollower (what the producer
routes with) applies its ClusterFenced record: from then on no message is routed there.

decommission of a drained cluster: the producer stopped, a consumer group read everything and committed;
``POST /v1/clusters/c3/decommission`` until the cluster is ``decommissioned`` (the drain grace, one agent
measurement and one leader check).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from deploy.launcher import DEMO_TOPIC as TOPIC
from deploy.launcher import LocalFederation
from sdk import FederatedConsumer

from .common import BenchResult, FenceWatch, Goal, Producing, Row, Sizes, fmt, median, start_demo_federation


def _wait(predicate: Any, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(what)
        time.sleep(0.02)


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    trials = 2 if sizes.quick else 3
    fed = LocalFederation(workdir / "operations")
    scale_up_s: list[float] = []
    fenced_s: list[float] = []
    try:
        start_demo_federation(fed)
        producing = Producing(fed, TOPIC)
        producing.start()
        client = fed.quorum.controller_client()
        for trial in range(trials):
            cluster_id = f"n{trial}"
            fed.add_cluster(cluster_id, "r1")
            fed.wait_clusters_healthy([cluster_id], timeout_s=60)
            reply = client.post(f"/v1/topics/{TOPIC}/partitions", {"cluster_id": cluster_id, "count": 4})
            committed = time.monotonic()
            new = {p["partition"] for p in reply["partitions"] if p["cluster_id"] == cluster_id}
            _wait(lambda new=new: new & set(producing.first_ack), 60, "no message reached the new partitions")
            scale_up_s.append(min(producing.first_ack[p] for p in new if p in producing.first_ack) - committed)
            print(f"    scale-up {trial + 1}: first ack on {cluster_id} after {scale_up_s[-1]:.2f} s", flush=True)
        for trial in range(trials):
            watch = FenceWatch(fed, "c2")
            time.sleep(0.5)
            watch.arm(fed)
            fed.clusters["c2"].kill_broker()
            killed = time.monotonic()
            fenced_s.append(watch.wait(30, "c2 never fenced") - killed)
            watch.stop()
            print(f"    failure {trial + 1}: routed around c2 after {fenced_s[-1]:.2f} s", flush=True)
            fed.clusters["c2"].start_broker()
            fed.wait_clusters_healthy(["c2"], timeout_s=60)
        producing.stop_flag.set()
        producing.join(60)
        consumer = FederatedConsumer(
            {"kfed.controllers": ",".join(fed.quorum.urls), "group.id": "bench-ops", "auto.offset.reset": "earliest"}
        )
        consumer.subscribe([TOPIC])
        idle_since = time.monotonic()
        while time.monotonic() - idle_since < 3.0:  # read until nothing more arrives for 3 s
            if consumer.consume(10_000, 0.5):
                idle_since = time.monotonic()
        consumer.close()  # commits what it read
        started = time.monotonic()
        client.post(f"/v1/clusters/{'n0'}/decommission")
        _wait(lambda: client.get("/v1/clusters/n0")["state"] == "decommissioned", 120, "n0 never decommissioned")
        decommission_s = time.monotonic() - started
        print(f"    decommission of drained n0: {decommission_s:.2f} s", flush=True)
        client.close()
    finally:
        fed.stop()
    result.rows += [
        Row("scale-up: partitions added -> first ack on them, median", median(scale_up_s), "s",
            "Tencent: 2 min", Goal("<=", 5.0, "s"), f"{trials} trials, max {fmt(max(scale_up_s))} s"),
        Row("sub-cluster kill -9 -> producers route around it, median", median(fenced_s), "s",
            "Tencent: < 1 min", Goal("<=", 3.0, "s"), f"{trials} trials, max {fmt(max(fenced_s))} s"),
        Row("decommission of a drained cluster -> decommissioned", decommission_s, "s",
            "", Goal("<=", 10.0, "s"), "drain grace 2 s + agent measurement + leader check"),
    ]  # fmt: skip
    result.details["operations"] = {"scale_up_s": scale_up_s, "fenced_s": fenced_s, "decommission_s": decommission_s}
