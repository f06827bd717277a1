"""The consumer side of strict key order: which records a group member may hand out now, and which wait.

A member feeds ``HoldBack.offer`` each record it reads from a strict topic (logical partition, physical
offset, key slot, epoch stamp), in offset order per partition, and calls ``observe`` whenever its metadata
or the group's releases change. Both return the records the application may have now, as ``Delivery``
values; the others are *held*. The rule (``docs/KEY_ORDER.md`` argues it):

- a record stamped with epoch ``e`` waits while any parent of its slot up to ``e`` (``parents_of``: each
  move of that slot at an epoch <= ``e`` and the partition it came from) is not released for the group; a
  release comes from the group coordinator once the group has committed that partition up to its seal, or
  once the group gave up waiting (a *broken* release);
- a record stamped with an epoch this member's metadata does not know yet waits until it does;
- a record never overtakes an earlier held record of its own slot in its own partition (the per-key order
  within one partition that Kafka itself gives);
- unstamped records, and records of slots that did not move, are never held: only moved ranges wait.

Every delivery that may come out of key order says so (``OrderBreak``): a record written behind its
partition's seal by a producer that had not seen the new epoch (``late_write``), a held record released by
a broken release (``gave_up``), and a record of the old partition read after a broken release
(``after_give_up``). Nothing is ever dropped.

Bounded: past ``max_held`` held records, ``paused()`` names the partitions holding some, for the caller to
stop fetching them (never one that holds nothing: it may be the parent everyone waits for). The clock is
passed in (milliseconds, any monotonic origin); no I/O here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Final, Generic, Literal, TypeVar

from metadata_log.image.key_order_history import KeyOrderTopic, Parent, Release, first_moves, moved_out, parents_of
from metadata_log.keymap import FIRST_EPOCH

DEFAULT_MAX_HELD: Final = 100_000
"""Held records per member before it pauses the partitions that hold them (``kfed.key.order.max.held``)."""

DEFAULT_MAX_WAIT_MS: Final = 60_000
"""How long a member holds records for one parent before it asks to give up (``kfed.key.order.max.wait.ms``)."""

BreakKind = Literal["late_write", "gave_up", "after_give_up"]
BREAK_KINDS: Final[tuple[BreakKind, ...]] = ("late_write", "gave_up", "after_give_up")

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class OrderBreak:
    """Why a delivery may be out of key order, for the keys of slots ``[first_slot, end_slot)`` that
    moved from ``from_partition`` in ``epoch``'s change."""

    kind: BreakKind
    epoch: int
    from_partition: int
    first_slot: int
    end_slot: int
    detail: str


@dataclass(frozen=True, slots=True)
class Delivery(Generic[T]):
    """A record the application may have now (``item`` is the caller's, e.g. the Kafka message)."""

    partition: int
    offset: int
    item: T
    order_break: OrderBreak | None = None
    held_ms: int = 0  # how long it was held (0: not held)


@dataclass(slots=True)
class HoldStats:
    held: int = 0  # records held now
    held_total: int = 0  # records ever held
    delivered: int = 0
    longest_hold_ms: int = 0  # the longest a record was held by this member, delivered or dropped with its partition
    breaks: dict[str, int] = field(default_factory=lambda: dict.fromkeys(BREAK_KINDS, 0))


@dataclass(slots=True)
class _Held(Generic[T]):
    offset: int
    stamp: int | None
    item: T
    since_ms: int
    waits: tuple[Parent, ...] | None  # the parents it was held for, once its epoch is known


def waits_for(
    topic: KeyOrderTopic | None, released: Collection[Parent], slot: int, stamp: int | None
) -> list[Parent] | None:
    """The rule for one record of ``slot`` stamped ``stamp``: the parents it waits for that ``released`` (the
    group's releases its members may act on) lacks ([]: it may go), or None when its epoch is newer than
    ``topic`` (the reader's metadata is behind: it waits until it knows that epoch)."""
    if topic is None or stamp is None or stamp < FIRST_EPOCH:
        return []
    if stamp > topic.epoch:
        return None
    return [p for p in parents_of(topic, slot, stamp) if p not in released]


def first_held(
    topic: KeyOrderTopic | None, released: Collection[Parent], records: Iterable[tuple[int, int, int | None]]
) -> tuple[int, tuple[Parent, ...]] | None:
    """For a reader that cannot hold a record and hand out the ones after it (a Kafka client reads a
    partition by offset, and its position passes whatever it was given): the first of ``records`` (offset,
    slot, stamp), in offset order, that waits, with the parents it waits for (none known yet when its epoch
    is newer than ``topic``); None when every one may go. Whatever follows it in its partition waits behind
    it, which keeps each key's order within the partition, as ``HoldBack``'s per-slot queues do."""
    for offset, slot, stamp in records:
        blockers = waits_for(topic, released, slot, stamp)
        if blockers != []:
            return offset, tuple(blockers or ())
    return None


class HoldBack(Generic[T]):
    """One group member's held records of one strict topic."""

    def __init__(self, group: str, max_held: int = DEFAULT_MAX_HELD, max_wait_ms: int = DEFAULT_MAX_WAIT_MS) -> None:
        if max_held < 1 or max_wait_ms < 0:
            raise ValueError("max_held must be >= 1 and max_wait_ms >= 0")
        self.group = group
        self.max_held = max_held
        self.max_wait_ms = max_wait_ms
        self.stats = HoldStats()
        self._topic: KeyOrderTopic | None = None
        self._first_moves: list[int] | None = None  # first_moves(self._topic)
        self._released: Mapping[Parent, Release] = {}
        self._open_from = 0  # no open parent before this epoch: records stamped earlier wait for nothing
        self._queues: dict[int, dict[int, deque[_Held[T]]]] = {}  # partition -> slot -> held, offset order
        self._waiting_since: dict[Parent, int] = {}

    # -- the rule ---------------------------------------------------------------------------------
    def _blockers(self, slot: int, stamp: int | None) -> list[Parent] | None:
        """The unreleased parents a record waits for ([]: none), or None when its epoch is not known yet."""
        if stamp is not None and stamp < self._open_from:
            return []
        return waits_for(self._topic, self._released, slot, stamp)

    def _flag(
        self, partition: int, offset: int, slot: int, stamp: int | None, waits: tuple[Parent, ...]
    ) -> OrderBreak | None:
        topic = self._topic
        if topic is None:
            return None
        if stamp is None:  # routed before its slot first moved (``first_moves``), or not stamped at all
            first = self._first_moves[slot] if self._first_moves is not None else 0
            if first == 0:
                return None
            stamp = first - 1
        for parent in waits:  # held, and let go by a broken release of a parent it waited for?
            release = self._released.get(parent) or topic.release(self.group, parent)
            if release is not None and release.broken:
                return self._break("gave_up", topic, parent, slot, release.reason)
        if stamp >= topic.epoch:
            return None
        left = moved_out(topic, partition, slot, stamp)
        if left is None:
            return None
        seal = topic.seals.get(left)
        if seal is not None and offset >= seal:
            detail = f"written at offset {offset}, behind the seal at {seal}, by a producer still on epoch {stamp}"
            return self._break("late_write", topic, left, slot, detail)
        release = self._released.get(left) or topic.release(self.group, left)
        if release is not None and release.broken:
            return self._break("after_give_up", topic, left, slot, release.reason)
        return None

    @staticmethod
    def _break(kind: BreakKind, topic: KeyOrderTopic, parent: Parent, slot: int, detail: str) -> OrderBreak:
        change = topic.change(parent[0])
        move = change.move_of(slot) if change is not None else None
        first, end = (move.first_slot, move.end_slot) if move is not None else (slot, slot + 1)
        return OrderBreak(kind, parent[0], parent[1], first, end, detail)

    def _deliver(
        self,
        partition: int,
        offset: int,
        slot: int,
        stamp: int | None,
        item: T,
        now_ms: int,
        since_ms: int | None = None,
        waits: tuple[Parent, ...] = (),
    ) -> Delivery[T]:
        order_break = self._flag(partition, offset, slot, stamp, waits)
        held_ms = max(0, now_ms - since_ms) if since_ms is not None else 0
        stats = self.stats
        stats.delivered += 1
        stats.longest_hold_ms = max(stats.longest_hold_ms, held_ms)
        if order_break is not None:
            stats.breaks[order_break.kind] += 1
        return Delivery(partition, offset, item, order_break, held_ms)

    # -- the caller's side ------------------------------------------------------------------------
    def offer(
        self, partition: int, offset: int, slot: int, stamp: int | None, item: T, now_ms: int
    ) -> list[Delivery[T]]:
        """A record just read; what may be handed out now (it, or nothing when it is held)."""
        if stamp is not None and stamp < FIRST_EPOCH:
            stamp = None  # not an epoch: unstamped
        slots = self._queues.get(partition)
        queue = slots.get(slot) if slots is not None else None
        blockers = self._blockers(slot, stamp)
        if queue is None:
            if blockers == []:
                return [self._deliver(partition, offset, slot, stamp, item, now_ms)]
            queue = self._queues.setdefault(partition, {}).setdefault(slot, deque())
            for parent in blockers or ():  # the head of its queue: its parents' wait starts now
                self._waiting_since.setdefault(parent, now_ms)
        queue.append(_Held(offset, stamp, item, now_ms, None if blockers is None else tuple(blockers)))
        self.stats.held += 1
        self.stats.held_total += 1
        return []

    def observe(
        self, topic: KeyOrderTopic | None, released: Mapping[Parent, Release], now_ms: int
    ) -> list[Delivery[T]]:
        """New metadata (``topic`` None: the topic is not strict) and the group's releases that this member
        may act on; the held records that may go now, in (partition, offset) order."""
        if topic is not self._topic:
            self._first_moves = first_moves(topic) if topic is not None else None
        self._topic = topic
        self._released = released
        if topic is None:
            self._open_from = 0
        else:
            open_epochs = [c.epoch for c in topic.changes for p in c.givers() if (c.epoch, p) not in released]
            self._open_from = min(open_epochs) if open_epochs else topic.epoch + 1
        out: list[Delivery[T]] = []
        for partition, slots in self._queues.items():
            for slot, queue in list(slots.items()):
                while queue:
                    h = queue[0]
                    blockers = self._blockers(slot, h.stamp)
                    if h.waits is None and blockers is not None:  # its epoch is known now
                        h.waits = tuple(blockers)
                    if blockers != []:
                        break
                    queue.popleft()
                    self.stats.held -= 1
                    waits = h.waits or ()
                    out.append(self._deliver(partition, h.offset, slot, h.stamp, h.item, now_ms, h.since_ms, waits))
                if not queue:
                    del slots[slot]
        self._queues = {p: slots for p, slots in self._queues.items() if slots}
        self._restart_waits(now_ms)
        out.sort(key=lambda d: (d.partition, d.offset))
        return out

    def expired(self, now_ms: int) -> list[Parent]:
        """Parents this member has waited for ``max_wait_ms`` or longer while they hold records back: the
        caller asks the group coordinator to give them up (a broken release), then ``observe``s it. A parent
        stays in this list until it is released."""
        return sorted(p for p, since in self._waiting_since.items() if now_ms - since >= self.max_wait_ms)

    def commit_position(self, partition: int, position: int) -> int:
        """The offset this member may commit for ``partition`` having read up to ``position``: never past a
        held record, which the next owner of the partition must read again."""
        slots = self._queues.get(partition)
        if not slots:
            return position
        return min(position, min(queue[0].offset for queue in slots.values()))

    def paused(self) -> frozenset[int]:
        """Partitions to stop fetching: those holding records, once ``max_held`` records are held."""
        if self.stats.held < self.max_held:
            return frozenset()
        return frozenset(self._queues)

    def drop(self, partition: int, now_ms: int) -> int:
        """Forget a partition this member no longer owns (its next owner reads again from the committed
        offset); returns how many held records were dropped."""
        slots = self._queues.pop(partition, {})
        dropped = sum(len(q) for q in slots.values())
        self.stats.held -= dropped
        if dropped:  # they waited that long here too: the next owner's wait for them comes on top
            oldest = min(q[0].since_ms for q in slots.values())
            self.stats.longest_hold_ms = max(self.stats.longest_hold_ms, now_ms - oldest)
        self._restart_waits(now_ms)
        return dropped

    def held(self, partition: int | None = None) -> int:
        """Records held now (of ``partition``, or of all)."""
        if partition is None:
            return self.stats.held
        return sum(len(q) for q in self._queues.get(partition, {}).values())

    def waiting(self) -> list[tuple[int, int, int, int | None]]:
        """``(partition, offset, slot, stamp)`` of every held record, in (partition, offset) order."""
        return sorted(
            (partition, h.offset, slot, h.stamp)
            for partition, slots in self._queues.items()
            for slot, queue in slots.items()
            for h in queue
        )

    def _restart_waits(self, now_ms: int) -> None:
        """Wait clocks for the parents that hold back the head of some queue, only: a clock keeps running while
        its parent blocks a head, and starts when one becomes a head (a record behind a blocked head waits
        for that head first, so its own parents' clocks start when it is at the head, at most one wait later)."""
        waiting: dict[Parent, int] = {}
        for slots in self._queues.values():
            for slot, queue in slots.items():
                for parent in self._blockers(slot, queue[0].stamp) or ():
                    waiting[parent] = self._waiting_since.get(parent, now_ms)
        self._waiting_since = waiting
