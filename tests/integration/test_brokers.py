"""What differs between the brokers, on real ones: the probe that tells them apart, the agent growing a physical
topic (CreatePartitions on Apache Kafka; a clear refusal on Tansu), end offsets on each, and the SDK re-routing
key-less messages from a fenced cluster (or reporting one it could not re-route)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer

from broker_agent.kafka import CannotGrow, ClusterUnreachable, PhysicalCluster
from deploy.kafka_cluster import KafkaCluster
from deploy.launcher import LocalFederation, LocalQuorum
from deploy.processes import free_ports
from deploy.tansu import TansuBroker
from metadata_client.brokers import APACHE_KAFKA, TANSU
from sdk import FederatedProducer
from sdk.brokers import BrokerUnknown, broker_at
from spark_pipeline.kafka_io import watermarks
from tests.waiting import wait_until

from ..conftest import KafkaPool
from .conftest import controllers, physical_topics


@pytest.fixture
def tansu(tmp_path: Path) -> Iterator[TansuBroker]:
    with TansuBroker(tmp_path, "t1") as broker:
        yield broker


@pytest.fixture
def kafka(kafka_pool: KafkaPool) -> KafkaCluster:
    return kafka_pool.lend("c1")


def produce(bootstrap: str, topic: str, counts: dict[int, int]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})
    for partition, n in counts.items():
        for i in range(n):
            producer.produce(topic, f"m{i}".encode(), partition=partition)
    assert producer.flush(30) == 0


@pytest.mark.slow
def test_the_probe_tells_apache_kafka_from_tansu_and_an_unreachable_cluster_from_both(
    kafka: KafkaCluster, tansu: TansuBroker
) -> None:
    assert broker_at(kafka.bootstrap) is APACHE_KAFKA
    assert broker_at(tansu.bootstrap) is TANSU
    with pytest.raises(BrokerUnknown):
        broker_at(f"127.0.0.1:{free_ports(1)[0]}", timeout_s=1.0)
    assert "__kfed_broker_probe" not in physical_topics(kafka.bootstrap), "the probe changes nothing"


@pytest.mark.slow
def test_the_agent_grows_a_physical_topic_on_kafka_and_says_why_it_cannot_on_tansu(
    kafka: KafkaCluster, tansu: TansuBroker
) -> None:
    on_kafka = PhysicalCluster(kafka.bootstrap, timeout_s=5.0)
    on_kafka.create_topics({"grow_me": 2})
    produce(kafka.bootstrap, "grow_me", {0: 3, 1: 4})
    on_kafka.grow_topics({"grow_me": 5})
    assert physical_topics(kafka.bootstrap)["grow_me"] == 5
    ends: dict[tuple[str, int], tuple[int, int]] = {}

    def measured() -> bool:  # the new partitions' leaders settle a moment after CreatePartitions answers
        try:
            got = on_kafka.drain_offsets([("grow_me", p) for p in range(5)])
        except ClusterUnreachable:  # "Not leader for partition": the agent measures again at its next beat
            return False
        ends.clear()
        ends.update(got)
        return len(got) == 5  # a partition whose new leader has no high watermark yet is left out

    wait_until(measured, 30, "the grown topic's offsets measured")
    assert ends == {("grow_me", 0): (0, 3), ("grow_me", 1): (0, 4), **{("grow_me", p): (0, 0) for p in (2, 3, 4)}}

    on_tansu = PhysicalCluster(tansu.bootstrap, timeout_s=5.0)
    on_tansu.create_topics({"grow_me": 2})
    with pytest.raises(CannotGrow, match="tansu has no CreatePartitions: grow_me"):
        on_tansu.grow_topics({"grow_me": 5})
    assert physical_topics(tansu.bootstrap)["grow_me"] == 2


@pytest.mark.slow
@pytest.mark.parametrize("end_offsets_from", ["auto", "fetch", "list"])
def test_end_offsets_are_exact_on_kafka_by_every_path_and_on_tansu_by_auto(
    kafka: KafkaCluster, tansu: TansuBroker, end_offsets_from: str
) -> None:
    for cluster in (kafka, tansu):
        PhysicalCluster(cluster.bootstrap, timeout_s=5.0).create_topics({"ends": 2})
        produce(cluster.bootstrap, "ends", {0: 20_000, 1: 1})
    on_kafka = watermarks(kafka.bootstrap, [("ends", 0), ("ends", 1)], end_offsets_from=end_offsets_from)
    assert [(m.low, m.high) for m in on_kafka.values()] == [(0, 20_000), (0, 1)]
    on_tansu = watermarks(tansu.bootstrap, [("ends", 0), ("ends", 1)], end_offsets_from=end_offsets_from)
    if end_offsets_from != "list":  # ListOffsets(latest) on Tansu is the start of its last batch + 1
        assert [(m.low, m.high) for m in on_tansu.values()] == [(0, 20_000), (0, 1)]


@pytest.mark.slow
def test_a_message_that_cannot_be_rerouted_reaches_the_configured_on_delivery(tmp_path: Path) -> None:
    """Key-less messages queued for a cluster that gets fenced are taken back and produced elsewhere; with no
    other writable partition, each waits for one, as librdkafka's messages wait for a leader, and is reported
    failed to the producer's ``on_delivery`` once ``message.timeout.ms`` passes (never dropped)."""
    with LocalQuorum(tmp_path / "q") as quorum:
        quorum.wait_ready()
        dead = f"127.0.0.1:{free_ports(1)[0]}"  # no broker there: messages stay queued
        with quorum.controller_client() as client:
            client.post("/v1/clusters", {"cluster_id": "c1", "region": "r1", "bootstrap_servers": dead})
            client.post("/v1/topics", {"name": "T", "region": "r1", "partitions_per_cluster": 1})
            client.post("/v1/agents/c1/partitions",
                        {"partitions": [{"physical_topic": "T", "physical_partition": 0, "leader": dead}]})  # fmt: skip
        reports: list[tuple[Any, bytes]] = []
        producer = FederatedProducer(
            {
                "kfed.controllers": ",".join(quorum.urls),
                "on_delivery": lambda err, msg: reports.append((err, msg.value())),
                "message.timeout.ms": 10_000,
            }
        )
        wait_until(lambda: producer.metadata_offset >= 3, 10, "the producer follows the log")
        for i in range(5):
            producer.produce("T", value=f"m{i}".encode())
        # no agent beats for c1: its lease expires and the leader fences it; the queue is taken back
        assert producer.flush(30) == 0
        producer.close()
    assert sorted(value for _, value in reports) == [f"m{i}".encode() for i in range(5)]
    assert all(err is not None for err, _ in reports)


@pytest.mark.slow
def test_key_less_messages_queued_for_a_cluster_that_gets_fenced_are_all_delivered_on_another(
    tmp_path: Path, kafka: KafkaCluster
) -> None:
    """Key-less messages routed to a cluster that never took them (its broker is unreachable) are taken back
    when the log fences it and produced on the other cluster: every one acknowledged, none reported failed."""
    with LocalQuorum(tmp_path / "q") as quorum:
        quorum.wait_ready()
        dead = f"127.0.0.1:{free_ports(1)[0]}"  # no broker there: what is routed to c2 stays queued
        PhysicalCluster(kafka.bootstrap, timeout_s=5.0).create_topics({"R": 1})
        with quorum.controller_client() as client:
            for cluster_id, bootstrap in (("c1", kafka.bootstrap), ("c2", dead)):
                client.post("/v1/clusters", {"cluster_id": cluster_id, "region": "r1", "bootstrap_servers": bootstrap})
                client.post(f"/v1/agents/{cluster_id}/heartbeat", {})
            client.post("/v1/topics", {"name": "R", "region": "r1", "partitions_per_cluster": 1})
            for cluster_id, leader in (("c1", kafka.bootstrap), ("c2", dead)):
                partition = {"physical_topic": "R", "physical_partition": 0, "leader": leader}
                client.post(f"/v1/agents/{cluster_id}/partitions", {"partitions": [partition]})
            offset = client.get("/v1/metadata")["offset"]
        stop, c2_down = threading.Event(), threading.Event()

        def beat() -> None:  # the agents' part: both leases held, c2's until it is reported down
            with quorum.controller_client() as client:
                while not stop.wait(0.3):
                    for cluster_id in ("c1",) if c2_down.is_set() else ("c1", "c2"):
                        client.post(f"/v1/agents/{cluster_id}/heartbeat", {})

        beater = threading.Thread(target=beat, daemon=True)
        beater.start()
        reports: list[tuple[Any, bytes, str | None]] = []
        producer = FederatedProducer(
            {
                "kfed.controllers": ",".join(quorum.urls),
                "on_delivery": lambda err, msg: reports.append((err, msg.value(), placed(producer, msg))),
                "message.timeout.ms": 30_000,
            }
        )
        try:
            wait_until(lambda: producer.metadata_offset >= offset, 10, "the producer follows the log")
            sent = [f"m{i}".encode() for i in range(100)]
            for value in sent:
                producer.produce("R", value=value)
            producer.poll(0)
            assert len(producer._producers["c2"]) > 0, "some messages wait for c2 (the case under test)"
            c2_down.set()
            with quorum.controller_client() as client:
                client.post("/v1/agents/c2/heartbeat", {"healthy": False, "reason": "the test's broker is gone"})
            assert producer.flush(30) == 0
        finally:
            stop.set()
            beater.join()
            producer.close()
    failed = [(value, err.str()) for err, value, _ in reports if err is not None]
    assert not failed, f"{len(failed)} of {len(sent)} messages failed instead of being re-routed, e.g. {failed[:3]}"
    assert sorted(value for _, value, _ in reports) == sorted(sent), "each message reported once"
    assert {cluster for _, _, cluster in reports} == {"c1"}


def placed(producer: FederatedProducer, msg: Any) -> str | None:
    location = producer.placement(msg)
    return location.cluster_id if location is not None else None


def test_a_stopped_launcher_starts_nothing(tmp_path: Path) -> None:
    """``stop()`` is final: a ``start()`` racing with it (a Ctrl-C while JVMs start) fails, it leaves no process."""
    kafka = KafkaCluster(tmp_path / "k")
    kafka.stop()
    with pytest.raises(RuntimeError, match="stopped while it started"):
        kafka.start()
    assert kafka.processes() == []


@pytest.mark.slow
@pytest.mark.brokers("kafka", "tansu")
def test_an_expand_onto_a_cluster_holding_the_physical_topic_grows_it_on_kafka_only(
    fed: LocalFederation, broker: str
) -> None:
    c1 = fed.clusters["c1"]
    with fed.quorum.controller_client() as client:
        grown = client.post("/v1/topics/U_TopicA/partitions", {"cluster_id": "c1", "count": 2})
    assert [(p["partition"], p["physical_partition"]) for p in grown["partitions"]][8:] == [(8, 4), (9, 5)]
    if broker == "kafka":
        fed.wait_writable("U_TopicA", timeout_s=30, min_offset=grown["offset"])
        assert physical_topics(c1.bootstrap)["U_TopicA"] == 6, "CreatePartitions: 4 -> 6, no data moved"
        with FederatedProducer({"kfed.controllers": controllers(fed)}) as producer:
            for p in (8, 9):
                producer.produce("U_TopicA", value=b"x", partition=p)
            assert producer.flush(30) == 0
    else:
        log = c1.data_dir / "agent-c1.log"
        wait_until(lambda: "tansu has no CreatePartitions: U_TopicA cannot grow" in log.read_text(), 20,
                   "the agent says why it cannot grow the topic")  # fmt: skip
        assert physical_topics(c1.bootstrap)["U_TopicA"] == 4
        parts = fed.metadata(topic="U_TopicA")["topics"][0]["partitions"]
        assert [p["leader"] for p in parts][8:] == [None, None], "no leader: producers leave them alone"
