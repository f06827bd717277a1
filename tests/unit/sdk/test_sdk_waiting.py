"""Producer and consumer parity with confluent-kafka where no controller is needed: settings are
checked in the constructor, a client made while no controller answers does not raise, and a message no
partition can take waits, bounded by ``message.timeout.ms`` and ``queue.buffering.max.messages``."""

from __future__ import annotations

import time
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from deploy.processes import free_ports
from sdk import FederatedConsumer, FederatedProducer


@pytest.fixture
def nowhere() -> str:
    """Controller URLs nobody listens on (free ports, loopback): connections are refused at once."""
    return ",".join(f"http://127.0.0.1:{port}" for port in free_ports(2))


@pytest.mark.parametrize(
    "setting, match",
    [
        ({"linger.ms": "abc"}, "queue.buffering.max.ms"),  # librdkafka names linger.ms by its alias
        ({"no.such.property": 1}, "no.such.property"),
        ({"message.timeout.ms": -5}, "message.timeout.ms"),
        ({"kfed.mute.ms": "soon"}, "kfed.mute.ms"),
    ],
)
def test_invalid_producer_settings_fail_in_the_constructor(nowhere: str, setting: dict[str, Any], match: str) -> None:
    with pytest.raises((KafkaException, ValueError), match=match):
        FederatedProducer({"kfed.controllers": nowhere, **setting})


@pytest.mark.parametrize(
    "setting, match",
    [
        ({"fetch.max.bytes": "lots"}, "fetch.max.bytes"),
        ({"kfed.session.timeout.ms": "x"}, "kfed.session.timeout.ms"),
        ({"max.poll.interval.ms": 0}, "max.poll.interval.ms"),
        ({"enable.auto.commit": "maybe"}, "enable.auto.commit"),
    ],
)
def test_invalid_consumer_settings_fail_in_the_constructor(nowhere: str, setting: dict[str, Any], match: str) -> None:
    with pytest.raises((KafkaException, ValueError), match=match):
        FederatedConsumer({"kfed.controllers": nowhere, "group.id": "g", **setting})


def test_the_kafka_error_is_confluent_kafkas_own(nowhere: str) -> None:
    with pytest.raises(KafkaException) as raised:
        FederatedProducer({"kfed.controllers": nowhere, "linger.ms": "abc"})
    assert raised.value.args[0].code() == KafkaError._INVALID_ARG


def test_clients_made_while_no_controller_answers_do_not_raise(nowhere: str) -> None:
    producer = FederatedProducer({"kfed.controllers": nowhere})
    consumer = FederatedConsumer({"kfed.controllers": nowhere, "group.id": "g"})
    consumer.subscribe(["T"])  # the heartbeat fails and is retried in the background
    assert consumer.consume(10, 0.1) == []
    consumer.close()
    producer.produce("T", b"v")  # the topic is not known either way: it waits
    assert len(producer) == 1
    assert producer.flush(0.2) == 1
    producer.close(0)


def test_a_message_with_no_writable_partition_times_out_through_on_delivery(nowhere: str) -> None:
    reports: list[tuple[KafkaError | None, Any]] = []
    producer = FederatedProducer({"kfed.controllers": nowhere, "message.timeout.ms": 300,
                                  "on_delivery": lambda err, msg: reports.append((err, msg))})  # fmt: skip
    own: list[Any] = []
    producer.produce("T", b"key-less")
    producer.produce("T", b"keyed", key=b"k")
    producer.produce("T", b"pinned", partition=3, headers=[("h", b"1")], on_delivery=lambda e, m: own.append((e, m)))
    assert len(producer) == 3
    assert producer.poll(0) == 0, "nothing is reported before message.timeout.ms"
    deadline = time.monotonic() + 30
    while len(producer) and time.monotonic() < deadline:
        producer.poll(0.1)
    assert len(producer) == 0
    assert [(e.code(), m.value(), m.topic()) for e, m in reports] == [
        (KafkaError._MSG_TIMED_OUT, b"key-less", "T"),
        (KafkaError._MSG_TIMED_OUT, b"keyed", "T"),
    ]
    assert [(e.code(), m.value(), m.headers()) for e, m in own] == [
        (KafkaError._MSG_TIMED_OUT, b"pinned", [("h", b"1")])
    ]
    assert "writable partition" in reports[0][0].str()
    producer.close(0)


def test_waiting_messages_are_bounded_by_queue_buffering_max_messages(nowhere: str) -> None:
    producer = FederatedProducer({"kfed.controllers": nowhere, "queue.buffering.max.messages": 3})
    for i in range(3):
        producer.produce("T", str(i).encode())
    with pytest.raises(BufferError, match="Queue full"):
        producer.produce("T", b"one too many")
    assert len(producer) == 3
    producer.close(0)
