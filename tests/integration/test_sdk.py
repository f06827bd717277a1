"""The federated SDK on the local federation: real quorum, two Apache Kafka (or Tansu) sub-clusters, real agents."""

from __future__ import annotations

import hashlib
import itertools
import time
from collections import Counter, defaultdict
from typing import Any

import pytest
from confluent_kafka import TopicPartition

from deploy.launcher import LocalFederation
from sdk import FederatedConsumer, FederatedProducer
from tests.waiting import wait_until

from .conftest import TOPIC, Member, controllers, log_of, wait_for

pytestmark = pytest.mark.slow


def produce(fed: LocalFederation, ids: range) -> None:
    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5}) as p:
        for i in ids:
            p.produce(TOPIC, value=str(i).encode(), key=f"key-{i % 997}".encode() if i % 2 else None)
            if i % 2000 == 0:
                p.poll(0)
        assert p.flush(60) == 0


def test_two_members_read_every_message_own_partitions_exclusively_and_resume_from_commits(fed) -> None:
    n = 100_000
    first = Member(fed, "m1", "g-e2e")
    first.start()
    produce(fed, range(0, 40_000))
    second = Member(fed, "m2", "g-e2e")  # joins mid-stream: a rebalance under load
    second.start()
    produce(fed, range(40_000, 70_000))
    wait_until(second.consumer.assignment, 20, "the second member got partitions")
    produce(fed, range(70_000, n))
    expected = {str(i) for i in range(n)}
    seen = wait_for([first, second], expected, 120)
    first.finish()
    second.finish()
    assert seen == expected, f"{len(expected - seen)} messages never consumed"
    all_values = sorted(int(v) for m in (first, second) for v, _, _ in m.received)
    doubles = [v for v, count in Counter(all_values).items() if count > 1]
    assert not doubles, f"{len(doubles)} messages read twice across the rebalance, e.g. {doubles[:5]}"
    assert (
        hashlib.sha256(str(all_values).encode()).hexdigest() == hashlib.sha256(str(list(range(n))).encode()).hexdigest()
    )
    assert {p for m in (first, second) for _, p, _ in m.received} == set(range(8))
    assert first.received and second.received, "both members consumed"
    # each logical partition was consumed by one member at a time
    by_partition: dict[tuple[str, int], list[tuple[float, float, str]]] = defaultdict(list)
    for m in (first, second):
        for tp, start, end in m.intervals:
            by_partition[tp].append((start, end, m.name))
    assert set(by_partition) == {(TOPIC, p) for p in range(8)}
    for tp, intervals in by_partition.items():
        intervals.sort()
        for (s1, e1, a), (s2, e2, b) in itertools.pairwise(intervals):
            assert e1 <= s2, f"{tp} owned by {a} and {b} at once: [{s1:.3f},{e1:.3f}] and [{s2:.3f},{e2:.3f}]"
    # commit happened on close: new members of the group read only what came after
    produce(fed, range(n, n + 1000))
    again = [Member(fed, "m3", "g-e2e"), Member(fed, "m4", "g-e2e")]
    for m in again:
        m.start()
    new = {str(i) for i in range(n, n + 1000)}
    wait_for(again, new, 60)
    for m in again:
        m.finish()
    # No wait for re-reads is needed: a partition is read in offset order, so an old message read again
    # would have come before that partition's new ones, and every partition had new ones.
    assert {p for m in again for _, p, _ in m.received} == set(range(8)), "a partition got no new message"
    reread = {v for m in again for v, _, _ in m.received}
    assert reread == new, f"re-read {len(reread - new)} old messages; missed {len(new - reread)}"


@pytest.mark.brokers("kafka", "tansu")
def test_keyless_production_survives_a_killed_sub_cluster(fed) -> None:
    """The bound on failures, exactly: a message fails only if it was routed to the killed cluster c2
    before this producer learned c2 was gone, from its first delivery error or from the fence in the log
    it follows. Queued ones are taken back and produced again on c1; only those already sent fail. From
    that point on, every message is acknowledged on c1."""
    acked: dict[str, str] = {}
    failed: dict[str, tuple[str, int]] = {}  # value -> (error, logical partition it was routed to)
    produced = 0
    first_failure_at: int | None = None  # messages produced when the first failure was reported

    def report(err: Any, msg: Any) -> None:
        nonlocal first_failure_at
        value = msg.value().decode()
        if err:
            failed[value] = (err.str(), msg.partition())
            first_failure_at = produced if first_failure_at is None else first_failure_at
        else:
            acked[value] = producer.placement(msg).cluster_id

    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": report,
                                  "message.timeout.ms": 8000})  # fmt: skip
    seen_offsets: list[tuple[int, int]] = []  # (messages produced, the producer's metadata offset then)

    def produce_some(count: int) -> None:
        nonlocal produced
        for _ in range(count):
            producer.produce(TOPIC, value=str(produced).encode())
            produced += 1
            if produced % 200 == 0:
                producer.poll(0)
                seen_offsets.append((produced, producer.metadata_offset))
                time.sleep(0.04)  # ~5k messages/s: a load one broker takes on a busy 2-core machine (Kafka's is a JVM)

    produce_some(20_000)
    fed.clusters["c2"].kill_broker()
    deadline = time.monotonic() + 30
    fence = None
    while fence is None:  # production goes on meanwhile
        assert time.monotonic() < deadline, "c2 not fenced in the log within 30 s of its broker's kill"
        produce_some(200)
        log = log_of(fed.quorum, fed.quorum.leader())
        fence = next((r for r in log if r["type"] == "ClusterFenced" and r["data"]["cluster_id"] == "c2"), None)
    while producer.metadata_offset < fence["offset"]:
        assert time.monotonic() < deadline, "the producer did not follow the log to c2's fence within 30 s"
        produce_some(200)
    produce_some(10_000)
    assert producer.flush(60) == 0
    producer.close()
    everything = {str(i) for i in range(produced)}
    assert set(acked) | set(failed) == everything, "a message was neither delivered nor reported failed"
    assert not set(acked) & set(failed), "a message was both delivered and reported failed"
    # the sample after the first that shows the fence: routes are rebuilt just after the image moves
    saw_fence = next(i for i, (_, offset) in enumerate(seen_offsets) if offset >= fence["offset"])
    learned_at = min(seen_offsets[saw_fence + 1][0], first_failure_at if first_failure_at is not None else produced)
    assert all(p >= 4 for _, p in failed.values()), "a message routed to c1 failed"
    late = [v for v in failed if int(v) >= learned_at]
    assert not late, f"{len(late)} messages produced after the producer learned c2 was gone failed"
    after = [str(i) for i in range(learned_at, produced)]
    assert all(acked.get(i) == "c1" for i in after), "production did not continue on c1"
    print(f"{len(failed)} of {produced} messages failed, all in flight to c2 before message {learned_at}")
    # every message acknowledged by the surviving cluster is consumed
    on_c1 = {v for v, cluster in acked.items() if cluster == "c1"}
    member = Member(fed, "reader", "g-kill")
    member.start()
    seen = wait_for([member], on_c1, 60)
    member.finish()
    assert on_c1 <= seen, f"{len(on_c1 - seen)} acknowledged messages on c1 not consumed"


def test_a_read_only_partition_stops_taking_writes_once_the_producer_sees_it_and_stays_readable(fed) -> None:
    """Bounded in the system's own terms: no message produced after the producer's followed log reached the
    read_only record is routed to P3 (checked every 100 messages); before it, P3 took writes."""
    landed: dict[str, int] = {}

    def report(err: Any, msg: Any) -> None:
        if err is None:
            landed[msg.value().decode()] = msg.partition()

    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2, "on_delivery": report})
    produced = 0
    seen_offsets: list[tuple[int, int]] = []  # (messages produced, the producer's metadata offset then)

    def produce_some(count: int) -> None:
        nonlocal produced
        for _ in range(count):
            producer.produce(TOPIC, value=str(produced).encode())
            produced += 1
            if produced % 100 == 0:
                producer.poll(0)
                seen_offsets.append((produced, producer.metadata_offset))

    produce_some(5000)
    marked_at = produced
    with fed.quorum.controller_client() as client:
        read_only = client.put(f"/v1/topics/{TOPIC}/partitions/3/state", {"state": "read_only"})
    deadline = time.monotonic() + 30
    while producer.metadata_offset < read_only["offset"]:
        assert time.monotonic() < deadline, "the producer did not follow the log to the read_only record"
        produce_some(100)
    produce_some(5000)
    assert producer.flush(30) == 0
    producer.close()
    assert len(landed) == produced
    to_p3 = [int(v) for v, p in landed.items() if p == 3]
    assert [v for v in to_p3 if v < marked_at], "nothing reached P3 before it went read-only"
    # the sample after the first that shows the record: routes are rebuilt just after the image moves
    seen_at = next(
        seen_offsets[i + 1][0] for i, (_, offset) in enumerate(seen_offsets) if offset >= read_only["offset"]
    )
    late = [v for v in to_p3 if v >= seen_at]
    assert not late, f"{len(late)} messages produced after the producer saw P3 read_only still went to P3"
    member = Member(fed, "reader", "g-ro")
    member.start()
    seen = wait_for([member], set(landed), 60)
    member.finish()
    assert set(landed) <= seen
    assert {p for _, p, _ in member.received if p == 3} == {3}, "P3's messages are still consumed"


def test_producer_and_consumer_survive_a_controller_leader_change(fed) -> None:
    member = Member(fed, "m1", "g-failover")
    member.start()
    acked: set[str] = set()

    def report(err: Any, msg: Any) -> None:
        if err is None:
            acked.add(msg.value().decode())

    producer = FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": report})
    for i in range(5000):
        producer.produce(TOPIC, value=str(i).encode())
    producer.flush(30)
    old_leader = fed.quorum.leader()
    fed.quorum.kill(old_leader)
    fed.quorum.leader(exclude=old_leader, timeout_s=15)
    for i in range(5000, 10_000):  # routing goes on from the followed image; the follower fails over
        producer.produce(TOPIC, value=str(i).encode())
        if i % 500 == 0:
            producer.poll(0)
    assert producer.flush(30) == 0
    producer.close()
    # the group's coordinator moved with the leadership; the member keeps (or gets back) its partitions
    seen = wait_for([member], acked, 60)
    member.finish()
    assert len(acked) == 10_000
    assert acked <= seen, f"{len(acked - seen)} acknowledged messages not consumed after the leader change"


def test_commit_with_logical_offsets_resumes_the_group_there(fed) -> None:
    with FederatedProducer({"kfed.controllers": controllers(fed), "linger.ms": 2}) as p:
        for i in range(20):
            p.produce(TOPIC, value=str(i).encode(), partition=5)  # P5 lives on c2
        assert p.flush(30) == 0

    def member() -> FederatedConsumer:
        consumer = FederatedConsumer({"kfed.controllers": controllers(fed), "group.id": "g-offsets",
                                      "auto.offset.reset": "earliest", "enable.auto.commit": False})  # fmt: skip
        consumer.subscribe([TOPIC])
        return consumer

    first = member()
    got = []
    deadline = time.monotonic() + 60
    while len(got) < 20 and time.monotonic() < deadline:
        got += [m for m in first.consume(100, 0.5) if m.error() is None and m.partition() == 5]
    assert [m.value() for m in got] == [str(i).encode() for i in range(20)]
    tenth = got[9]
    first.commit(offsets=[TopicPartition(TOPIC, 5, tenth.offset() + 1), TopicPartition(TOPIC, 999, 7)],
                 asynchronous=False)  # fmt: skip
    with pytest.raises(ValueError, match=">= 0"):
        first.commit(offsets=[TopicPartition(TOPIC, 5, -5)])
    first.close()

    second = member()
    again = []
    deadline = time.monotonic() + 60
    while len(again) < 10 and time.monotonic() < deadline:
        again += [m.value() for m in second.consume(100, 0.5) if m.error() is None and m.partition() == 5]
    second.close()
    assert again == [str(i).encode() for i in range(10, 20)], "the group resumes after the committed offset"
