"""Producer and consumer parity with confluent-kafka where no controller is needed: settings are
checked in the constructor, a client made while no controller answers does not raise, and a message no
partition can take waits, bounded by ``message.timeout.ms`` and ``queue.buffering.max.messages``."""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
from confluent_kafka import KafkaError, KafkaException

from deploy.processes import free_ports
from metadata_log import commands
from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.publisher import LogDelta
from metadata_log.records import ClusterFenced, ClusterRegistered, ClusterStateChanged, PhysicalPartitionsReported
from sdk import FederatedConsumer, FederatedProducer
from tests.waiting import wait_until

from ..samples import log_delta


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
        ({"kfed.key.order.lease.ms": "short"}, "kfed.key.order.lease.ms"),
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


@pytest.fixture
def silent_broker() -> Iterator[str]:
    """A broker that takes connections and never answers: messages handed on stay queued, and nothing errs."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield f"127.0.0.1:{server.getsockname()[1]}"


def following(producer: FederatedProducer, broker: str, topic: str, key_order: str = "none") -> None:
    """Stands in for the controllers' answers (private: the follower is stopped and given the metadata by
    hand): cluster c1 at ``broker`` with ``topic``'s two partitions on it."""
    image = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", broker)])
    created = commands.create_topic(image, topic, "r1", 2, f"id-{topic}",
                                              key_order=key_order)  # fmt: skip
    image = apply(image, created.records)
    image = apply(image, [PhysicalPartitionsReported("c1", topic, p, broker) for p in (0, 1)])
    producer._follower.stop()
    producer._follower.topics = None  # the image set here is the whole one: no topic to load on first use
    before, producer._follower.image = producer._follower.image, image
    producer.on_update(LogDelta.replaced(before, image), image)  # the routes are made again from the image


def test_keyed_messages_of_a_strict_topic_wait_while_no_controller_confirms_the_routing(
    nowhere: str, silent_broker: str
) -> None:
    """The key-order lease (``kfed.key.order.lease.ms``): a producer cut off from the controllers stops
    routing keys by a map that may have been replaced (and its partitions sealed) meanwhile; what it
    produced waits, in order, and goes once a controller answers again. Here the metadata is set by hand and
    "a controller answered" is the follower's ``confirmed_at``: nothing listens at ``nowhere``."""
    producer = FederatedProducer({"kfed.controllers": nowhere, "kfed.key.order.lease.ms": 1000})
    following(producer, silent_broker, "S", key_order="strict")
    follower = producer._follower
    follower.confirmed_at = time.monotonic()
    producer.produce("S", b"1", key=b"k")
    assert producer._waiting_count == 0, "confirmed just now: routed at once"
    assert follower.wait_ms <= 1000 // 3, "a strict topic's producer polls the log often enough to keep its lease"
    follower.confirmed_at = time.monotonic() - 1.5  # as if the last answer came 1.5 s ago
    # the lease lapses, and its watchdog has the producer make its routes again (held is set just before)
    wait_until(
        lambda: not producer._lease.held and "S" not in producer._routes, 10, "the lease lapses", interval_s=0.01
    )
    producer.produce("S", b"2", key=b"k")
    producer.produce("S", b"3")  # key-less: queued behind at first, then goes (its key does not move)
    assert producer._waiting_count == 2
    producer.poll(0)
    assert producer._waiting_count == 1 and len(producer) == 3, "the keyed one waits for its lease"
    follower.confirmed_at = time.monotonic() + 3600  # confirmed, and for the rest of the test
    wait_until(lambda: producer._lease.held, 10, "the lease holds again", interval_s=0.01)
    producer.poll(0)
    assert producer._waiting_count == 0 and len(producer) == 3, "handed on once confirmed again"
    producer.close(0)


def test_a_planned_decommission_keeps_queued_messages_and_a_fence_reports_them(
    nowhere: str, silent_broker: str
) -> None:
    """Messages routed to a cluster before it went read-only stay queued for its brokers (the CI run that
    failed a keyed message of a strict topic with ``_PURGE_QUEUE`` mid-decommission); a fenced cluster's
    keyed messages are reported with their error, nothing dropped silently."""
    reports: list[Any] = []
    producer = FederatedProducer({"kfed.controllers": nowhere, "on_delivery": lambda e, m: reports.append(e)})
    following(producer, silent_broker, "T")
    image = producer._follower.image
    producer.produce("T", b"keyed", key=b"k")
    for state in ("read_only", "draining"):
        records = [ClusterStateChanged("c1", state)]
        before, image = image, apply(image, records)
        producer.on_update(log_delta(before, records), image)
        producer.poll(0.1)
        assert reports == [] and len(producer) == 1, state
    records = [ClusterFenced("c1", "broker down", 0)]
    before, image = image, apply(image, records)
    producer.on_update(log_delta(before, records), image)
    wait_until(lambda: producer.poll(0.05) or reports, 10, "the fenced cluster's queue reported")
    assert [e.code() for e in reports] == [KafkaError._PURGE_QUEUE] and len(producer) == 0
    producer.close(0)


def native_threads() -> int:
    """Threads of this process, librdkafka's included (``threading`` sees only Python's)."""
    return len(os.listdir("/proc/self/task"))


def test_close_drops_what_is_undelivered_and_ends_the_physical_producers(nowhere: str, silent_broker: str) -> None:
    """A closed producer leaves no librdkafka thread behind reconnecting to its clusters (before, they lived
    until the garbage collector found the producer's reference cycles, logging every second), returns how
    many messages it dropped, and refuses to produce again, as confluent-kafka's ``close()`` does."""
    before = native_threads()
    producer = FederatedProducer({"kfed.controllers": nowhere})
    following(producer, silent_broker, "T")
    producer.produce("T", b"1")
    assert len(producer._producers) == 1 and native_threads() > before + 1
    assert producer.close(0.2) == 1, "the message the silent broker never took"
    assert native_threads() <= before, "a physical producer's threads outlived close()"
    with pytest.raises(RuntimeError, match="closed"):
        producer.produce("T", b"2")
