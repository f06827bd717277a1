"""kafka-python (a pure-Python Kafka client), unmodified, through the gateway."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from deploy.launcher import LocalFederation

from .clients import KafkaPythonMember, kafka_python_produce
from .conftest import TOPIC, Gateways, physical_messages
from .scenario import group_scenario

pytestmark = pytest.mark.slow


def test_kafka_python_produces_keyed_and_keyless_messages_onto_both_clusters_and_reads_them_back(
    gateway: str, fed: LocalFederation
) -> None:
    run = uuid.uuid4().hex[:8]
    producer = KafkaProducer(bootstrap_servers=[gateway], acks="all", linger_ms=5)
    sent = {}
    for i in range(300):
        key = f"key-{i % 23}".encode() if i % 2 else None
        value = f"{run}-{i}".encode()
        sent[value] = producer.send(TOPIC, key=key, value=value)
    producer.flush(30)
    placed = {value: future.get(timeout=30) for value, future in sent.items()}
    producer.close()
    partitions_of_key: dict[bytes, set[int]] = {}
    for i in range(1, 300, 2):
        partitions_of_key.setdefault(f"key-{i % 23}".encode(), set()).add(placed[f"{run}-{i}".encode()].partition)
    assert all(len(ps) == 1 for ps in partitions_of_key.values()), "a key stays in one partition"

    consumer = KafkaConsumer(bootstrap_servers=[gateway], enable_auto_commit=False, consumer_timeout_ms=5000)
    consumer.assign([TopicPartition(TOPIC, p) for p in range(8)])
    consumer.seek_to_beginning()
    got = [(m.partition, m.offset, m.value) for m in consumer if m.value.startswith(run.encode())]
    consumer.close()
    assert sorted(v for _, _, v in got) == sorted(sent), "every message read back once"
    assert all((m.partition, m.offset) == (p, o) for p, o, v in got for m in [placed[v]]), "offsets pass through"

    landed = {cluster: set(values) & set(sent) for cluster, values in physical_messages(fed).items()}
    assert landed["c1"] and landed["c2"], "messages on both physical clusters"
    assert landed["c1"] | landed["c2"] == set(sent)


def test_kafka_python_consumes_in_a_group_of_two_exactly_once_and_survives_a_gateway_killed_mid_stream(
    fed: LocalFederation, gateways: Gateways
) -> None:
    group_scenario(fed, gateways, kafka_python_produce, KafkaPythonMember)


def test_a_producer_uses_partitions_added_by_a_scale_up_without_waiting_for_its_metadata_max_age(
    gateway: str, fed: LocalFederation
) -> None:
    """The gateway refuses one batch of a producer that was told fewer partitions than the topic has now
    (NOT_LEADER_OR_FOLLOWER): the client refreshes its metadata and spreads over the new ones. The batch is
    retried, not lost."""
    run = uuid.uuid4().hex[:8]
    producer = KafkaProducer(bootstrap_servers=[gateway], acks="all", metadata_max_age_ms=600_000)
    producer.send(TOPIC, value=f"{run}-first".encode()).get(30)
    with fed.quorum.controller_client() as client:
        client.post(f"/v1/topics/{TOPIC}/partitions", {"cluster_id": "c1", "count": 2, "physical_topic": "U_TopicA_b"})
    fed.wait_writable(TOPIC)
    count = len(fed.metadata(topic=TOPIC)["topics"][0]["partitions"])
    time.sleep(1)  # the gateway follows the log
    futures = []
    for i in range(200):
        futures.append(producer.send(TOPIC, value=f"{run}-{i}".encode()))
        time.sleep(0.01)
    partitions = {f.get(30).partition for f in futures}
    producer.close()
    assert partitions & set(range(count - 2, count)), "the new partitions took messages"
