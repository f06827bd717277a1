"""Exactly once across rebalances: a quorum-coordinated SDK group grows from one member to three and
shrinks back to one while a producer keeps writing; every value is counted, not collected into a set."""

from __future__ import annotations

import itertools
import threading
import time
from collections import Counter, defaultdict
from typing import Any

import pytest

from deploy.launcher import LocalFederation
from sdk import FederatedProducer
from tests.waiting import wait_until

from .conftest import TOPIC, Member, controllers, wait_for

pytestmark = pytest.mark.slow


class CountingMember(Member):
    """A member that stamps each receipt; receipts and its ownership intervals share one monotonic clock,
    and both are taken on the member's own thread (the SDK calls on_assign / on_revoke inside consume)."""

    def __init__(self, fed: LocalFederation, name: str, group: str) -> None:
        super().__init__(fed, name, group)
        self.receipts: list[tuple[str, int, float]] = []  # (value, logical partition, when)

    def consume_once(self) -> None:
        for m in self.consumer.consume(1000, 0.2):
            value, partition = m.value().decode(), m.partition()
            self.received.append((value, partition, m.offset()))
            self.receipts.append((value, partition, time.monotonic()))


class Producing(threading.Thread):
    """Numbered values, key-less and keyed, at a steady pace until stopped; every delivery report kept."""

    def __init__(self, fed: LocalFederation) -> None:
        super().__init__(daemon=True, name="producer")
        self.acked: set[str] = set()
        self.failed: list[tuple[str, str]] = []
        self.stop_flag = threading.Event()
        self.producer = FederatedProducer(
            {"kfed.controllers": controllers(fed), "linger.ms": 5, "on_delivery": self._report}
        )

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value().decode())
        else:
            self.failed.append((msg.value().decode(), err.str()))

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            self.producer.produce(TOPIC, value=str(i).encode(), key=f"k{i % 101}".encode() if i % 2 else None)
            i += 1
            if i % 50 == 0:
                self.producer.poll(0)
                time.sleep(0.01)

    def finish(self) -> None:
        self.stop_flag.set()
        self.join(90)
        assert self.producer.flush(60) == 0
        self.producer.close()


def test_a_group_growing_from_one_to_three_members_and_back_reads_every_value_exactly_once(
    fed: LocalFederation,
) -> None:
    group = "g-exactly-once"
    members = [CountingMember(fed, f"m{i}", group) for i in (1, 2, 3)]
    producing = Producing(fed)
    producing.start()
    members[0].start()
    wait_until(lambda: len(members[0].receipts) > 1000, 30, "m1 consumes alone")
    for joining in members[1:]:  # grow: each join moves partitions away from members reading them
        joining.start()
        wait_until(lambda m=joining: len(m.receipts) > 500, 30, f"{joining.name} consumes after joining")
    for leaving in reversed(members[1:]):  # shrink: each leaver's partitions move to the members left
        before = sum(len(m.receipts) for m in members[:1])
        leaving.finish()
        wait_until(lambda b=before: sum(len(m.receipts) for m in members[:1]) > b + 500, 30,
                   f"m1 consumes after {leaving.name} left")  # fmt: skip
    producing.finish()
    assert not producing.failed, f"{len(producing.failed)} deliveries failed, e.g. {producing.failed[:3]}"
    wait_for(members[:1], producing.acked, 60)
    members[0].finish()

    counts = Counter(v for m in members for v, _, _ in m.receipts)
    doubles = {v: n for v, n in counts.items() if n > 1}
    assert not doubles, f"{len(doubles)} values read more than once, e.g. {sorted(doubles.items())[:5]}"
    missing = producing.acked - set(counts)
    assert not missing, f"{len(missing)} acknowledged values never read"
    assert set(counts) == producing.acked, "a value read that was never acknowledged"
    assert all(m.receipts for m in members), "every member consumed"
    # each receipt lies inside one of the receiving member's ownership intervals of that partition ...
    for m in members:
        owned: dict[int, list[tuple[float, float]]] = defaultdict(list)
        for (_, partition), start, end in m.intervals:
            owned[partition].append((start, end))
        outside = [(v, p) for v, p, t in m.receipts if not any(s <= t <= e for s, e in owned[p])]
        assert not outside, f"{m.name} read {len(outside)} values of partitions it did not own, e.g. {outside[:3]}"
    # ... and no two members owned a partition at once
    by_partition: dict[int, list[tuple[float, float, str]]] = defaultdict(list)
    for m in members:
        for (_, partition), start, end in m.intervals:
            by_partition[partition].append((start, end, m.name))
    for partition, intervals in by_partition.items():
        intervals.sort()
        for (_, e1, a), (s2, _, b) in itertools.pairwise(intervals):
            assert e1 <= s2, f"P{partition} owned by {a} and {b} at once"
    moved = sum(1 for intervals in by_partition.values() if len({name for _, _, name in intervals}) > 1)
    assert moved >= 4, f"only {moved} partitions changed hands: the rebalances did not move work"
