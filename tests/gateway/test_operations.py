"""Federation operations under load through the gateway: while kcat and the Java client produce and consume
(one group of a kcat member and a Java member), a scale-up, a shrink, a decommission and a sub-cluster kill.
The audit finds nothing acknowledged lost, and the drains complete from the Kafka clients' own commits."""

from __future__ import annotations

import shutil
import time
import uuid

import pytest

from deploy.launcher import LocalFederation
from tests.waiting import wait_until

from .clients import JavaStream, KcatMember, KcatStream, java_classpath, java_member
from .conftest import TOPIC, Gateways
from .scenario import received

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat is not installed (make kcat)"),
]


def partition_states(fed: LocalFederation) -> dict[int, tuple[str, str]]:
    """Logical partition -> (cluster, state)."""
    topic = fed.metadata(topic=TOPIC)["topics"][0]
    return {p["partition"]: (p["cluster_id"], p["state"]) for p in topic["partitions"]}


def test_scale_up_shrink_and_decommission_lose_nothing_acknowledged_and_a_sub_cluster_kill_only_what_it_held(
    fed: LocalFederation, gateways: Gateways
) -> None:
    classpath = java_classpath()
    bootstrap = f"{gateways.start()},{gateways.start()}"
    run = uuid.uuid4().hex[:8]
    group = f"ops-{run}"
    client = fed.quorum.controller_client()
    members = [KcatMember("kcat", bootstrap, group, run), java_member(classpath)("java", bootstrap, group, run)]
    java = JavaStream(classpath, bootstrap, f"{run}-j", "delivery.timeout.ms=20000", "request.timeout.ms=5000",
                      "metadata.max.age.ms=5000")  # fmt: skip
    for m in members:
        m.start()
    try:
        wait_until(lambda: all(m.assigned() for m in members), 90, "both members have partitions")
        java.start()
        kcat = KcatStream(bootstrap, f"{run}-c", "message.timeout.ms=20000")
        time.sleep(3)

        fed.add_cluster("c3", "r1")  # scale-up: P8-P11 on a new cluster
        fed.wait_clusters_healthy(["c3"])
        client.post(f"/v1/topics/{TOPIC}/partitions", {"cluster_id": "c3", "count": 4})
        fed.wait_writable(TOPIC)
        time.sleep(3)
        client.post(f"/v1/topics/{TOPIC}/shrink", {"partitions": [0]})  # shrink: P0 read-only, then removed
        time.sleep(3)
        client.post("/v1/clusters/c3/decommission")  # decommission: P8-P11 read-only, then c3 gone
        time.sleep(3)

        kcat.stop()  # its messages still on their way to a partition that stopped taking writes fail
        assert kcat.failed < len(kcat.sent) / 10
        wait_until(lambda: len(set(received(members, f"{run}-c"))) >= len(kcat.sent) - kcat.failed, 90,
                   "every kcat message acknowledged consumed")  # fmt: skip

        fed.clusters["c2"].kill_broker()  # a sub-cluster kill (on Tansu, its data gone with it: memory storage)
        wait_until(lambda: any(c["cluster_id"] == "c2" and c["fenced"] for c in fed.metadata()["clusters"]), 30,
                   "c2 fenced")  # fmt: skip
        time.sleep(5)
        java.stop()
        states = partition_states(fed)
        on_c2 = {p for p, (cluster, _) in states.items() if cluster == "c2"}
        expected = {value for value, partition in java.acked.items() if partition not in on_c2}
        assert len(expected) > 1000
        wait_until(lambda: set(received(members, f"{run}-j")) >= expected, 90, "every Java message consumed")
        assert any(p not in on_c2 for p in java.acked.values())

        wait_until(lambda: partition_states(fed)[0][1] == "removed", 90, "P0 drained by the group's commits")
        wait_until(lambda: {c["cluster_id"]: c["state"] for c in fed.metadata()["clusters"]}["c3"] == "decommissioned",
                   90, "c3 drained and decommissioned")  # fmt: skip
    finally:
        for m in members:
            m.stop()
        client.close()
