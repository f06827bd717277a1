"""Producer parity with confluent-kafka on the local federation: ``produce()`` does not raise because
no partition takes writes right now, and clients made while no controller answers start once one does."""

from __future__ import annotations

import signal
import subprocess
from typing import Any

import pytest
from confluent_kafka import KafkaError

from deploy.launcher import LocalFederation, kfed_command
from sdk import FederatedConsumer, FederatedProducer
from tests.waiting import wait_until

from .conftest import TOPIC, controllers

pytestmark = pytest.mark.slow


def _reporter(into: dict[bytes, KafkaError | None]) -> Any:
    def report(err: KafkaError | None, msg: Any) -> None:
        into[msg.value()] = err

    return report


@pytest.mark.brokers("tansu")
def test_a_producer_made_right_after_topic_create_delivers_its_first_messages(fed: LocalFederation) -> None:
    """The agents are paused around the create (shorter than their lease), so no leader of the new topic
    can be known when the producer starts: its first messages, key-less, keyed and to an explicit
    partition, must wait rather than raise, and be delivered once the agents have made the partitions."""
    agents = [c.agent for c in fed.clusters.values()]
    for agent in agents:
        assert agent is not None
        agent.send_signal(signal.SIGSTOP)
    try:
        create = ["topic", "create", "Fresh", "--region", "r1", "--partitions-per-cluster", "2",
                  "--controller", controllers(fed), *fed.quorum.token_args]  # fmt: skip
        subprocess.run(kfed_command(*create), check=True, capture_output=True, timeout=60)
        delivered: dict[bytes, KafkaError | None] = {}
        producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2,
                                      "on_delivery": _reporter(delivered)})  # fmt: skip
        [topic] = fed.metadata(topic="Fresh")["topics"]
        assert not any(p["leader"] for p in topic["partitions"]), "a leader is known: the test proves nothing"
        producer.produce("Fresh", b"key-less")
        producer.produce("Fresh", b"keyed", key=b"k")
        producer.produce("Fresh", b"pinned", partition=3)
        assert len(producer) == 3
    finally:
        for agent in agents:
            assert agent is not None
            agent.send_signal(signal.SIGCONT)
    producer.produce("Fresh", b"behind them")  # queues behind the waiting ones, or goes if they went
    assert producer.flush(60) == 0
    producer.close()
    assert delivered == dict.fromkeys([b"key-less", b"keyed", b"pinned", b"behind them"])


def test_clients_made_while_no_controller_runs_start_once_the_quorum_does(fed: LocalFederation) -> None:
    """Every controller is down when the producer and the consumer are made and the messages produced:
    nothing raises, the messages wait, and once the quorum is back they are delivered and consumed."""
    for node_id in range(1, 4):
        fed.quorum.kill(node_id)
    delivered: dict[bytes, KafkaError | None] = {}
    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2,
                                  "on_delivery": _reporter(delivered)})  # fmt: skip
    consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": "g-late",
                                  "auto.offset.reset": "earliest"})  # fmt: skip
    consumer.subscribe([TOPIC])
    sent = {str(i).encode() for i in range(200)}
    for value in sorted(sent):
        producer.produce(TOPIC, value, key=value if int(value) % 2 else None)
    assert producer.flush(0.5) == len(sent), "delivered with no controller up?"
    fed.quorum.start()
    fed.quorum.wait_ready()
    assert producer.flush(90) == 0
    producer.close()
    assert delivered == dict.fromkeys(sent)
    received: set[bytes] = set()

    def consumed_everything() -> bool:
        received.update(m.value() for m in consumer.consume(500, 0.2) if m.error() is None)
        return sent <= received

    wait_until(consumed_everything, 90, "the consumer made while no controller ran reads what was produced")
    consumer.close()
