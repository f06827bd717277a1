"""Model-based test of strict key order (Hypothesis ``RuleBasedStateMachine``): producers, routing epochs,
seals, a consumer group and the hold-back rule, run against the pure core in ``metadata_log.keyorder``.

The world is small and adversarial: a few partitions on a few clusters, 2 producers each writing their own
keys with a sequence number per key, and a group of 2 members. Producers route by whatever epoch they last
saw, and their records reach the partitions in any interleaving (per partition in order, as an idempotent
producer does). Members see the metadata late, own partitions that move between them, commit, and give up
waiting after ``MAX_WAIT_MS``. Clusters are fenced (unreadable, unwritable, unsealable) and come back. The
model keeps its own map per epoch, and knows which keys broke order: one written behind a seal (possible only
when seals are measured before every producer saw the epoch: ``HONEST = False``), or one of a range the
group gave up waiting for.

After every step:
- every record delivered after a later record of its key is flagged as an order break;
- a key whose order did not break is delivered in sequence, with no gap (a redelivery after a rebalance
  repeats records, never skips one);
- a flagged delivery belongs to a key whose order did break;
- nothing is held without a reason: every held record waits for a parent of its own slot that its member has
  not seen released, for an epoch its member does not know yet, or behind an earlier held record of its
  slot in its partition (so only moved ranges wait, and nothing waits once its parents are released).
At the end, with every cluster back, everything is read: each record is delivered, nothing is held, and the
group gave up only on parents whose seal can no longer be measured.

The tests at the bottom plant a bug each and check the model finds it. One the model does not find in a
reasonable number of examples (the coordinator's gate, ``history.acted_on``: it takes a give-up or a late
write, a stale owner of the old partition and about ten steps in one order) has its own scenario in
``test_keyorder.py``.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from metadata_client import holdback
from metadata_client.holdback import Delivery, HoldBack
from metadata_log.image import key_order_history as history
from metadata_log.image.key_order_history import (
    KeyOrderTopic,
    Parent,
    Release,
    blocking_seals,
    next_change,
    pending_seals,
    releasable,
    strict_topic,
    with_change,
    with_release,
    with_seal,
)
from metadata_log.keymap import KeyMap, slot_of
from tests.unit.planted import FIND_BUG as PLANTED
from tests.unit.planted import finds_a_bug

MAX_SEQ = 16  # records per key
GROUP = "g"
MEMBERS = 2
MAX_WAIT_MS = 1_000

Item = tuple[bytes, int, int, int]  # key, seq, partition, offset


@dataclass(frozen=True)
class World:
    partitions: tuple[int, ...]
    cluster_of: dict[int, int]  # partition -> cluster
    keys: tuple[tuple[bytes, ...], ...]  # producer -> the keys it writes

    @property
    def clusters(self) -> tuple[int, ...]:
        return tuple(sorted(set(self.cluster_of.values())))


# One key in each first partition: fewer moving parts, so late writes meet their readers often.
SMALL = World((0, 1, 2, 3), {0: 0, 1: 0, 2: 1, 3: 1}, ((b"p0-b", b"p0-a"), (b"p1-b", b"p1-a")))
# More partitions than keys: slots move through chains of partitions (p -> q -> r).
WIDE = World(
    (0, 1, 2, 3, 4, 5), {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2}, ((b"p0-a", b"p0-b", b"p0-c"), (b"p1-a", b"p1-b", b"p1-c"))
)


@dataclass
class Producer:
    map: KeyMap
    seq: dict[bytes, int] = field(default_factory=dict)
    inflight: dict[int, deque[tuple[bytes, int, int]]] = field(default_factory=dict)  # p -> (key, seq, stamp)


@dataclass
class Member:
    view: int  # index of the last log version it has seen
    engine: HoldBack[Item]
    positions: dict[int, int] = field(default_factory=dict)
    released: dict[Parent, Release] = field(default_factory=dict)  # the releases it last observed


class KeyOrderMachine(RuleBasedStateMachine):
    WORLD = SMALL
    HONEST = True  # seals measured only once every producer saw the epoch and sent what it had (the grace)

    def __init__(self) -> None:
        super().__init__()
        world = self.WORLD
        self.now = 0
        self.topic = strict_topic(world.partitions)
        self.versions: list[KeyOrderTopic] = [self.topic]  # the log: one version per key-order record
        self.maps: dict[int, KeyMap] = {self.topic.epoch: self.topic.map}
        self.intended: frozenset[int] = frozenset(world.partitions)
        self.fenced: set[int] = set()
        self.producers = [Producer(self.topic.map) for _ in world.keys]
        self.logs: dict[int, list[tuple[bytes, int, int]]] = {p: [] for p in world.partitions}
        self.members = [Member(0, HoldBack(GROUP, max_held=10_000, max_wait_ms=MAX_WAIT_MS)) for _ in range(MEMBERS)]
        self.owner: dict[int, int | None] = {p: p % MEMBERS for p in world.partitions}
        for p in world.partitions:
            self.members[p % MEMBERS].positions[p] = 0
        self.committed = dict.fromkeys(world.partitions, 0)
        self.max_seq: dict[bytes, int] = {}
        self.first_delivered: set[tuple[int, int]] = set()
        self.broken: set[bytes] = set()
        self.gave_up: set[Parent] = set()

    # -- the log and the coordinator --------------------------------------------------------------
    def record(self, topic: KeyOrderTopic) -> None:
        self.topic = topic
        self.versions.append(topic)

    def unreadable(self) -> set[int]:
        return {p for p in self.WORLD.partitions if self.WORLD.cluster_of[p] in self.fenced}

    def effective(self) -> dict[Parent, Release]:
        """The releases members may act on (the coordinator's gate: the parent's owner has seen them)."""
        seen = {p: None if owner is None else self.members[owner].view for p, owner in self.owner.items()}
        return history.acted_on(self.topic, GROUP, seen)

    def coordinate(self) -> None:
        """Release every parent the group committed up to its seal."""
        for parent in releasable(self.topic, GROUP, self.committed):
            self.release(parent, broken=False)

    def may_give_up(self, parent: Parent) -> bool:
        return history.may_give_up(self.topic, parent, self.unreadable())

    def release(self, parent: Parent, broken: bool) -> None:
        at = len(self.versions)  # the log offset of the release: members' views are offsets too
        self.record(with_release(self.topic, GROUP, *parent, broken, "gave up" if broken else "", at_offset=at))
        if broken:
            self.gave_up.add(parent)
            epoch, p = parent
            before, after = self.maps[epoch - 1], self.maps[epoch]
            self.broken.update(
                k for keys in self.WORLD.keys for k in keys if before.owner(slot_of(k)) == p != after.owner(slot_of(k))
            )

    # -- the model's own answers ------------------------------------------------------------------
    def moved_out_at(self, p: int, slot: int, stamp: int) -> int | None:
        """The first epoch after ``stamp`` where ``slot`` left ``p``."""
        for epoch in range(stamp + 1, self.topic.epoch + 1):
            before, after = self.maps[epoch - 1].owner(slot), self.maps[epoch].owner(slot)
            if before != after:
                return epoch if before == p else None
        return None

    def moved_by(self, slot: int, epoch: int) -> bool:
        """Whether ``slot`` had moved by ``epoch``: a producer routing by that epoch stamps its records."""
        return any(self.maps[e - 1].owner(slot) != self.maps[e].owner(slot) for e in range(2, epoch + 1))

    def parents(self, slot: int, stamp: int) -> set[Parent]:
        return {
            (e, self.maps[e - 1].owner(slot))
            for e in range(2, stamp + 1)
            if self.maps[e - 1].owner(slot) != self.maps[e].owner(slot)
        }

    def check(self, deliveries: list[Delivery[Item]]) -> None:
        for d in deliveries:
            key, seq, p, offset = d.item
            assert (d.partition, d.offset) == (p, offset)
            if (p, offset) in self.first_delivered:
                continue  # a redelivery after a rebalance
            self.first_delivered.add((p, offset))
            last = self.max_seq.get(key, 0)
            if seq < last:
                assert d.order_break is not None, f"{key!r} #{seq} delivered after #{last}, unflagged: {d}"
            if key not in self.broken:
                assert seq == last + 1, f"{key!r} #{seq} delivered after #{last} though its order never broke: {d}"
            if d.order_break is not None:
                assert key in self.broken, f"{key!r} #{seq} flagged {d.order_break} though its order never broke"
            self.max_seq[key] = max(last, seq)

    # -- producers --------------------------------------------------------------------------------
    @initialize()
    def some_traffic(self) -> None:
        for member in range(MEMBERS):
            self.observe(member)
        for producer in range(len(self.producers)):
            self.produce(producer, None, 2, wait=False)

    def produce(self, producer: int, key: bytes | None, n: int, wait: bool) -> None:
        """``n`` records of ``key`` (None: of each of the producer's keys), routed by the epoch this producer
        last saw; they stay in flight (``wait``) or arrive at once."""
        prod = self.producers[producer]
        for k in self.WORLD.keys[producer] if key is None else (key,):
            for _ in range(n):
                seq = prod.seq.get(k, 0) + 1
                if seq > MAX_SEQ:
                    break
                prod.seq[k] = seq
                p = prod.map.owner(slot_of(k))
                prod.inflight.setdefault(p, deque()).append((k, seq, prod.map.epoch))
        if not wait:
            self.arrive(producer, None, 100)

    @rule(data=st.data(), n=st.integers(1, 4), wait=st.booleans())
    def write(self, data: st.DataObject, n: int, wait: bool) -> None:
        producer = data.draw(st.sampled_from(range(len(self.producers))), label="producer")
        key = data.draw(st.sampled_from(self.WORLD.keys[producer]), label="key")
        self.produce(producer, key, n, wait)

    @rule(data=st.data())
    def burst(self, data: st.DataObject) -> None:
        """A record of each key of one producer, with the latest epoch, written and arrived."""
        producer = data.draw(st.sampled_from(range(len(self.producers))), label="producer")
        self.refresh(producer)
        self.produce(producer, None, 1, wait=False)

    def arrive(self, producer: int, partition: int | None, n: int) -> None:
        """Up to ``n`` in-flight records of one producer reach ``partition`` (None: each), in order."""
        for p in self.WORLD.partitions if partition is None else (partition,):
            queue = self.producers[producer].inflight.get(p)
            for _ in range(n):
                if not queue or self.WORLD.cluster_of[p] in self.fenced:
                    break
                k, seq, stamp = queue.popleft()
                epoch = self.moved_out_at(p, slot_of(k), stamp)
                if epoch is not None and (epoch, p) in self.topic.seals:
                    self.broken.add(k)  # written behind the seal: possible only with HONEST = False
                self.logs[p].append((k, seq, stamp))

    @rule(data=st.data(), everywhere=st.booleans(), n=st.integers(1, 6))
    def arrival(self, data: st.DataObject, everywhere: bool, n: int) -> None:
        producer = data.draw(st.sampled_from(range(len(self.producers))), label="producer")
        partition = None if everywhere else data.draw(st.sampled_from(self.WORLD.partitions), label="partition")
        self.arrive(producer, partition, n)

    @rule(data=st.data())
    def refresh_one(self, data: st.DataObject) -> None:
        self.refresh(data.draw(st.sampled_from(range(len(self.producers))), label="producer"))

    def refresh(self, producer: int) -> None:
        self.producers[producer].map = self.topic.map

    # -- operators, failures, the leader's loop ---------------------------------------------------
    @rule(data=st.data())
    def change_writable_set(self, data: st.DataObject) -> None:
        """An operator's planned change (expand, shrink, decommission, a cluster read-only)."""
        self.intended = frozenset(data.draw(st.sets(st.sampled_from(self.WORLD.partitions), min_size=1)))
        self.plan()

    @rule(data=st.data())
    def fence_or_unfence(self, data: st.DataObject) -> None:
        """An unplanned change: a fenced cluster's partitions can be neither read, written nor sealed."""
        cluster = data.draw(st.sampled_from(self.WORLD.clusters), label="cluster")
        self.fenced ^= {cluster}
        self.plan()

    @rule()
    def plan(self) -> None:
        """The leader's loop: a new epoch when the writable set differs, once the latest one is sealed."""
        desired = self.intended - self.unreadable()
        if not desired or blocking_seals(self.topic, self.unreadable()):
            return
        change = next_change(self.topic, desired, "writable set changed")
        if change is not None:
            self.record(with_change(self.topic, change))
            self.maps[self.topic.epoch] = self.topic.map

    def may_measure(self, partition: int) -> bool:
        if partition not in pending_seals(self.topic) or partition in self.unreadable():
            return False
        if not self.HONEST:
            return True
        epoch = self.topic.epoch
        return all(
            prod.map.epoch >= epoch and all(stamp >= epoch for _, _, stamp in prod.inflight.get(partition, ()))
            for prod in self.producers
        )

    @rule()
    def measure_seals(self) -> None:
        """The agents measure the end offsets of the latest epoch's givers (once the grace has passed)."""
        for partition in self.WORLD.partitions:
            if self.may_measure(partition):
                self.record(with_seal(self.topic, self.topic.epoch, partition, len(self.logs[partition])))
        self.coordinate()

    # -- the group --------------------------------------------------------------------------------
    @rule(member=st.integers(0, MEMBERS - 1))
    def observe(self, member: int) -> None:
        m = self.members[member]
        m.view = len(self.versions) - 1
        m.released = self.effective()
        self.check(m.engine.observe(self.versions[m.view], m.released, self.now))

    @rule(data=st.data(), n=st.integers(1, 3), commit=st.booleans())
    def consume(self, data: st.DataObject, n: int, commit: bool) -> None:
        self.read(data.draw(st.sampled_from(self.WORLD.partitions), label="partition"), n, commit)

    def read(self, partition: int, n: int, commit: bool) -> None:
        """The owner reads up to ``n`` records of ``partition`` (and commits, as auto commit does)."""
        owner = self.owner[partition]
        if owner is None or partition in self.unreadable():
            return
        m = self.members[owner]
        for _ in range(n):
            at = m.positions[partition]
            if at >= len(self.logs[partition]) or partition in m.engine.paused():
                break
            k, seq, stamp = self.logs[partition][at]
            m.positions[partition] = at + 1
            sent = stamp if self.moved_by(slot_of(k), stamp) else None  # what the producer stamps (decision 3)
            self.check(m.engine.offer(partition, at, slot_of(k), sent, (k, seq, partition, at), self.now))
        if commit:
            self.commit(partition)

    def commit(self, partition: int) -> None:
        owner = self.owner[partition]
        if owner is None:
            return
        m = self.members[owner]
        self.committed[partition] = m.engine.commit_position(partition, m.positions[partition])
        self.coordinate()

    @rule(data=st.data(), member=st.sampled_from((None, *range(MEMBERS))))
    def rebalance_one(self, data: st.DataObject, member: int | None) -> None:
        self.rebalance(data.draw(st.sampled_from(self.WORLD.partitions), label="partition"), member)

    def rebalance(self, partition: int, member: int | None) -> None:
        """The partition moves to ``member`` (None: nobody owns it for a while): the old owner commits and
        drops it; the new one starts from the committed offset, with metadata at least as new as the
        coordinator's (the startable gate)."""
        old = self.owner[partition]
        if old == member:
            return
        if old is not None:
            self.commit(partition)
            self.members[old].engine.drop(partition, self.now)
            del self.members[old].positions[partition]
        self.owner[partition] = member
        if member is not None:
            self.members[member].positions[partition] = self.committed[partition]
            self.observe(member)

    @rule(ms=st.sampled_from((10, 300, MAX_WAIT_MS)))
    def tick(self, ms: int) -> None:
        """Time passes; members that waited too long for a parent ask to give it up (a broken release)."""
        self.now += ms
        for m in self.members:
            for parent in m.engine.expired(self.now):
                if (GROUP, *parent) not in self.topic.releases and self.may_give_up(parent):
                    self.release(parent, broken=True)

    # -- invariants -------------------------------------------------------------------------------
    @invariant()
    def nothing_is_held_without_a_reason(self) -> None:
        for m in self.members:
            view = self.versions[m.view]
            seen: set[tuple[int, int]] = set()
            for partition, offset, slot, stamp in m.engine.waiting():
                behind = (partition, slot) in seen
                seen.add((partition, slot))
                if behind or stamp is None:
                    assert behind, f"unstamped record held at {partition}/{offset}"
                    continue
                if stamp > view.epoch:
                    continue
                waits = {p for p in self.parents(slot, stamp) if p[0] >= view.changes[0].epoch} - set(m.released)
                assert waits, f"{partition}/{offset} (slot {slot}, epoch {stamp}) held, its parents all released"

    def teardown(self) -> None:
        """Everything comes back: each record gets read and delivered, without giving up on anything that
        could still be read to its seal."""
        self.fenced.clear()
        self.settle()
        abandoned = {
            (c.epoch, p) for c in self.topic.changes[:-1] for p in c.givers() if (c.epoch, p) not in self.topic.seals
        }
        stuck = self.stuck_behind(abandoned)
        for m in self.members:
            for partition, offset, slot, stamp in m.engine.waiting():
                assert stamp is not None
                waits = self.parents(slot, stamp) - set(self.effective())
                assert waits <= stuck, f"{partition}/{offset} held for {waits - stuck}, though all is read and sealed"
        gave_up = set(self.gave_up)
        for _ in range(20):
            if not any(m.engine.held() for m in self.members):
                break
            self.tick(MAX_WAIT_MS)
            self.settle()
        assert self.gave_up - gave_up <= abandoned, "gave up on a parent that could be read to its seal"
        assert all(m.engine.held() == 0 for m in self.members)
        for p, log in self.logs.items():
            assert all((p, offset) in self.first_delivered for offset in range(len(log))), f"partition {p} not all read"

    def stuck_behind(self, abandoned: set[Parent]) -> set[Parent]:
        """The parents that cannot be released without a give-up: those ``abandoned``, and the sealed ones
        whose partition holds, below its seal, a record waiting for a stuck parent."""
        stuck = set(abandoned)
        while True:
            more = set()
            for (epoch, p), seal in self.topic.seals.items():
                if (epoch, p) in stuck or (GROUP, epoch, p) in self.topic.releases or self.owner[p] is None:
                    continue
                for partition, offset, slot, stamp in self.members[self.owner[p]].engine.waiting():
                    if partition == p and offset < seal and stamp is not None and self.parents(slot, stamp) & stuck:
                        more.add((epoch, p))
            if not more:
                return stuck
            stuck |= more

    def settle(self) -> None:
        """Run every producer, agent and member until nothing changes (no time passes)."""
        before = None
        for _ in range(50):
            for i in range(len(self.producers)):
                self.refresh(i)
                self.arrive(i, None, 1_000)
            self.plan()
            self.measure_seals()
            for p in self.WORLD.partitions:
                if self.owner[p] is None:
                    self.rebalance(p, 0)
            for member in range(MEMBERS):
                self.observe(member)
            for p in self.WORLD.partitions:
                self.read(p, 1_000, commit=True)
            released = tuple(len(m.released) for m in self.members)
            now = (len(self.versions), len(self.first_delivered), tuple(self.committed.values()), released)
            if now == before:
                return
            before = now
        raise AssertionError("the model does not settle")


MODEL = settings(max_examples=150, stateful_step_count=100, deadline=None)


class WideMachine(KeyOrderMachine):
    WORLD = WIDE


class LateWritersMachine(KeyOrderMachine):
    """Seals measured before every producer saw the epoch: records land behind seals (late writes); every
    reorder must still be flagged, and only keys written late (or given up on) may break."""

    HONEST = False


TestKeyOrderModel = KeyOrderMachine.TestCase
TestKeyOrderModel.settings = MODEL
TestKeyOrderModelWide = WideMachine.TestCase
TestKeyOrderModelWide.settings = settings(MODEL, max_examples=100)
TestKeyOrderModelWithLateWriters = LateWritersMachine.TestCase
TestKeyOrderModelWithLateWriters.settings = settings(MODEL, max_examples=60)


# -- the model can fail: one planted bug each ------------------------------------------------------
FIND_BUG = settings(PLANTED, max_examples=600, stateful_step_count=100)


def _finds_a_bug(machine: type[RuleBasedStateMachine], match: str) -> None:
    finds_a_bug(machine, match, FIND_BUG)


def test_the_model_finds_a_release_that_does_not_wait_for_the_commit() -> None:
    class ReleaseAtSeal(KeyOrderMachine):
        def coordinate(self) -> None:  # the bug: a parent counts as read once it is sealed
            for epoch, p in history.open_parents(self.topic, GROUP):
                if (epoch, p) in self.topic.seals:
                    self.release((epoch, p), broken=False)

    _finds_a_bug(ReleaseAtSeal, "unflagged|never broke")


def test_the_model_finds_a_consumer_that_does_not_hold_back(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holdback, "parents_of", lambda topic, slot, stamp: [])
    _finds_a_bug(KeyOrderMachine, "unflagged|never broke")


def test_the_model_finds_a_hold_on_the_last_parent_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """A key can skip an epoch in a producer: waiting for the last move of its slot is not enough."""
    every = history.parents_of
    monkeypatch.setattr(holdback, "parents_of", lambda topic, slot, stamp: every(topic, slot, stamp)[-1:])
    _finds_a_bug(WideMachine, "unflagged|never broke")


def test_the_model_finds_late_writes_that_are_not_flagged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(holdback, "moved_out", lambda *args: None)
    _finds_a_bug(LateWritersMachine, "unflagged")


def test_the_model_finds_a_seal_measured_while_producers_still_write_the_old_epoch() -> None:
    class EarlySeal(KeyOrderMachine):
        HONEST = False  # the bug: no grace, and the model still counts the keys written late as unbroken

        def arrive(self, producer: int, partition: int | None, n: int) -> None:
            broken = set(self.broken)
            super().arrive(producer, partition, n)
            self.broken = broken

    _finds_a_bug(EarlySeal, "unflagged|never broke")


def test_the_model_finds_a_give_up_on_a_readable_sealed_parent() -> None:
    class GiveUpAnything(KeyOrderMachine):
        def may_give_up(self, parent: Parent) -> bool:  # the bug: a slow reader is taken for a dead cluster
            return True

    _finds_a_bug(GiveUpAnything, "gave up on a parent that could be read")
