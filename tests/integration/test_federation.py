"""Sub-clusters joining through their agents: real Apache Kafka (or Tansu) brokers, real agents, a real quorum.

Physical state is checked with confluent-kafka's AdminClient directly, not through kfed.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from deploy.launcher import BrokerKind, BrokerSource, LocalFederation, create_demo_topic
from tests.waiting import wait_until

from .conftest import log_of, partitions, physical_topics

pytestmark = pytest.mark.slow


def cluster(fed: LocalFederation, cluster_id: str) -> dict[str, Any]:
    return next(c for c in fed.metadata()["clusters"] if c["cluster_id"] == cluster_id)


@pytest.fixture
def fed(tmp_path: Path, broker: BrokerKind, lend_brokers: BrokerSource | None) -> Iterator[LocalFederation]:
    """Overrides conftest's: a third cluster in another region, and the demo topic not yet awaited (the
    first test measures how soon its partitions get leaders)."""
    clusters = (("c1", "r1", 0), ("c2", "r1", 0), ("c3", "r2", 0))
    with LocalFederation(tmp_path, clusters, broker=broker, lend_brokers=lend_brokers) as federation:
        federation.wait_clusters_healthy(timeout_s=40)
        create_demo_topic(federation)
        yield federation


def all_led(partitions: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """The partitions, if every one has a leader."""
    return partitions if partitions and all(p["leader"] for p in partitions) else None


def test_sub_clusters_join_and_the_demo_topic_is_placed_with_live_leaders(fed: LocalFederation) -> None:
    c1, c2 = fed.clusters["c1"], fed.clusters["c2"]
    parts = wait_until(lambda: all_led(partitions(fed)), 15, "every partition has a leader")
    assert [(p["partition"], p["cluster_id"], p["physical_partition"]) for p in parts] == [
        (i, "c1" if i < 4 else "c2", i % 4) for i in range(8)
    ]
    assert {p["leader"] for p in parts if p["cluster_id"] == "c1"} == {c1.bootstrap}
    assert {p["leader"] for p in parts if p["cluster_id"] == "c2"} == {c2.bootstrap}
    assert all(p["writable"] for p in parts)
    # the physical topics exist with 4 partitions on both brokers, and not on r2's cluster
    wait_until(lambda: physical_topics(c1.bootstrap).get("U_TopicA") == 4, 10, "U_TopicA on c1")
    wait_until(lambda: physical_topics(c2.bootstrap).get("U_TopicA") == 4, 10, "U_TopicA on c2")
    assert "U_TopicA" not in physical_topics(fed.clusters["c3"].bootstrap)


def test_regions_keep_topics_on_their_own_clusters(fed: LocalFederation) -> None:
    with fed.quorum.controller_client() as client:
        r2 = client.post("/v1/topics", {"name": "R2_Topic", "region": "r2", "partitions_per_cluster": 3})
        r1 = client.post("/v1/topics", {"name": "R1_Topic", "region": "r1", "partitions_per_cluster": 1})
    assert {p["cluster_id"] for p in r2["partitions"]} == {"c3"}
    assert {p["cluster_id"] for p in r1["partitions"]} == {"c1", "c2"}
    wait_until(lambda: physical_topics(fed.clusters["c3"].bootstrap).get("R2_Topic") == 3, 10, "R2_Topic on c3")
    assert "R2_Topic" not in physical_topics(fed.clusters["c1"].bootstrap)


@pytest.mark.brokers("kafka", "tansu")
def test_killed_broker_is_fenced_then_unfenced_after_restart(fed: LocalFederation) -> None:
    c1 = fed.clusters["c1"]
    wait_until(lambda: all(p["leader"] for p in partitions(fed)), 15, "leaders reported")
    c1.kill_broker()
    fenced = wait_until(lambda: cluster(fed, "c1")["fenced"] and cluster(fed, "c1"), 10, "c1 fenced")
    parts = partitions(fed)
    assert [p["writable"] for p in parts] == [False] * 4 + [True] * 4
    # The fast path, bounded in the system's own terms: the live agent reported its cluster unreachable and
    # was fenced on that report, while its lease still ran (a lease lapse would read "agent lease expired").
    assert fenced["fenced_reason"].startswith("cluster unreachable"), fenced["fenced_reason"]
    c1.start_broker()  # Kafka: on its data; Tansu (memory storage): empty
    wait_until(lambda: not cluster(fed, "c1")["fenced"], 20, "c1 unfenced")
    assert physical_topics(c1.bootstrap).get("U_TopicA") == 4  # recreated by the agent
    assert all(p["writable"] for p in partitions(fed))
    fences = [r for r in log_of(fed.quorum, fed.quorum.leader()) if r["type"] in ("ClusterFenced", "ClusterUnfenced")]
    assert [r["type"] for r in fences][-2:] == ["ClusterFenced", "ClusterUnfenced"]


@pytest.mark.brokers("tansu")  # Apache Kafka keeps its data: tests/spark/test_kafka_durability.py wipes it instead
def test_a_broker_that_comes_back_empty_is_reported_even_between_probes(fed: LocalFederation) -> None:
    c2 = fed.clusters["c2"]
    wait_until(lambda: physical_topics(c2.bootstrap).get("U_TopicA") == 4, 10, "U_TopicA on c2")
    time.sleep(1.5)  # let the agent see the topic once
    c2.kill_broker()
    c2.start_broker()  # back within milliseconds, empty
    leader = fed.quorum.leader()

    def c2_fences() -> list[dict[str, Any]]:
        log = log_of(fed.quorum, leader)
        return [r for r in log if r["type"] == "ClusterFenced" and r["data"]["cluster_id"] == "c2"]

    fenced = wait_until(c2_fences, 15, "c2's loss reported in the log")
    assert "came back empty" in fenced[-1]["data"]["reason"] or "unreachable" in fenced[-1]["data"]["reason"]
    wait_until(lambda: not cluster(fed, "c2")["fenced"], 20, "c2 unfenced after its topics were recreated")
    assert physical_topics(c2.bootstrap).get("U_TopicA") == 4


def test_a_dead_agent_loses_its_lease_and_a_restarted_agent_duplicates_nothing(fed: LocalFederation) -> None:
    c2 = fed.clusters["c2"]
    before = wait_until(lambda: physical_topics(c2.bootstrap), 10, "the agent created c2's physical topics")
    c2.kill_agent()
    fenced = wait_until(lambda: cluster(fed, "c2")["fenced"] and cluster(fed, "c2"), 10, "c2 fenced by its lease")
    assert fenced["fenced_reason"] == "agent lease expired"
    c2.start_agent()
    wait_until(lambda: not cluster(fed, "c2")["fenced"], 15, "c2 unfenced by its restarted agent")
    # No wait for a late registration is needed: an agent registers before its first heartbeat, and only a
    # heartbeat of the restarted agent can have lifted the fence.
    log = log_of(fed.quorum, fed.quorum.leader())
    assert sum(1 for r in log if r["type"] == "ClusterRegistered" and r["data"]["cluster_id"] == "c2") == 1
    assert sum(1 for r in log if r["type"] == "TopicCreated") == 1
    assert physical_topics(c2.bootstrap) == before


def test_deleted_topics_and_removed_partitions_leave_the_brokers(fed: LocalFederation) -> None:
    c1, c2 = fed.clusters["c1"], fed.clusters["c2"]
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": "Gone", "region": "r1", "partitions_per_cluster": 1})
        wait_until(lambda: "Gone" in physical_topics(c1.bootstrap) and "Gone" in physical_topics(c2.bootstrap), 10,
                   "Gone created on both")  # fmt: skip
        client.put("/v1/topics/Gone/partitions/1/state", {"state": "read_only"})
        client.put("/v1/topics/Gone/partitions/1/state", {"state": "removed"})
        wait_until(lambda: "Gone" not in physical_topics(c2.bootstrap), 10, "Gone deleted from c2 (partition removed)")
        assert "Gone" in physical_topics(c1.bootstrap)
        client.delete("/v1/topics/Gone")
        wait_until(lambda: "Gone" not in physical_topics(c1.bootstrap), 10, "Gone deleted from c1 (topic deleted)")


def test_a_controller_leader_change_does_not_fence_healthy_clusters(fed: LocalFederation) -> None:
    leader = fed.quorum.leader()
    offset_before = fed.quorum.node(leader)["applied_offset"]  # type: ignore[index]
    fed.quorum.kill(leader)
    new_leader = fed.quorum.leader(exclude=leader, timeout_s=10)
    # A new leader gives every agent one lease to find it, then fences the clusters whose agent did not.
    # Once it holds a lease of every agent, that first-lease fence can no longer come; one it decided before
    # is already proposed, so it commits before the next write of this leader, made here.
    url = fed.quorum.url(new_leader)
    wait_until(lambda: {a["cluster_id"] for a in fed.quorum.client.get(url + "/v1/agents").json()["agents"]}
               >= set(fed.clusters),
               15, "every agent heartbeat the new leader")  # fmt: skip
    with fed.quorum.controller_client() as client:
        after = client.post("/v1/topics", {"name": "After_Failover", "region": "r2", "partitions_per_cluster": 1})
    fed.quorum.wait_applied(after["offset"], node_ids=[new_leader])
    log = log_of(fed.quorum, new_leader)
    assert not [r for r in log[offset_before + 1 : after["offset"] + 1] if r["type"] == "ClusterFenced"]
    assert not any(c["fenced"] for c in fed.metadata()["clusters"])
