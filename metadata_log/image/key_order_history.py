"""A strict topic's key-order history: its routing epochs, their seal points, and each group's releases.

``KeyOrderTopic`` is the value the log builds for a ``key_order: strict`` topic (one per topic, in the image):

- ``map``, the current ``KeyMap``; ``changes``, the last ``MAX_EPOCHS_KEPT`` epoch changes, each the slot
  ranges it moved (the first epoch's moves come from ``NO_PARTITION``);
- ``seals``: per *parent* ``(epoch, from_partition)`` (a partition that gave slots away in that epoch's
  change), the physical end offset of that partition after which no record of an earlier epoch is written;
- ``releases``: per ``(group, epoch, from_partition)``, that the group may deliver what moved away from that
  partition in that epoch, because it committed it up to its seal (or, ``broken``, because it gave up
  waiting: an order break).

The rules, argued in ``docs/KEY_ORDER.md``:

- a seal is recorded only for the latest epoch, and the next epoch starts only once every seal of the latest
  one is recorded, or cannot be measured (its cluster is fenced): a record below a seal then never waits for
  anything of that epoch or later, which is what makes waits end;
- a record stamped with epoch ``e`` whose slot moved at epochs ``<= e`` waits for every such move's parent
  (``parents_of``), not only the last one: a key can skip an epoch in a producer;
- a group gives up waiting for a parent only when that partition cannot be read to its seal
  (``may_give_up``).

Pure values and functions; ``KeyOrderError`` (a ``ValueError``) says why a change does not fit.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from ..errors import CorruptData
from ..keymap import (
    FIRST_EPOCH,
    KEY_SLOTS,
    NO_PARTITION,
    KeyMap,
    Move,
    initial_map,
    map_after,
    map_of,
    moves_between,
    next_map,
)

MAX_EPOCHS_KEPT: Final = 64
"""Epoch changes a topic keeps (the oldest re-based as a first map). A record stamped with an older epoch, or
whose slot moved in an older change, waits for nothing (those parents count as released): a group more than
63 resizes behind gets no key order for that data. Bounds the history, its seals and its releases."""

MAX_CAUSE_CHARS: Final = 200

Parent = tuple[int, int]
"""``(epoch, from_partition)``: the change of ``epoch`` moved slots away from ``from_partition``."""


class KeyOrderError(CorruptData, ValueError):
    """A key-order change that does not fit the history it is applied to."""


@dataclass(frozen=True, slots=True)
class EpochChange:
    """The moves that made the map of ``epoch``, sorted by slot (``cause``: what started it, for operators)."""

    epoch: int
    moves: tuple[Move, ...]
    cause: str = ""
    firsts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        moves = tuple(sorted(self.moves, key=lambda m: m.first_slot))
        object.__setattr__(self, "moves", moves)  # frozen: set once, here
        object.__setattr__(self, "firsts", tuple(m.first_slot for m in moves))

    def move_of(self, slot: int) -> Move | None:
        """The move of this change that covers ``slot``, if any."""
        i = bisect_right(self.firsts, slot) - 1
        if i < 0:
            return None
        move = self.moves[i]
        return move if slot < move.end_slot else None

    def givers(self) -> tuple[int, ...]:
        """The partitions that gave slots away in this change, sorted (none for a first map)."""
        return tuple(sorted({m.from_partition for m in self.moves if m.from_partition != NO_PARTITION}))


@dataclass(frozen=True, slots=True)
class Release:
    """A group's release of one parent: ``broken`` when it gave up waiting (the order of those keys broke);
    ``at_offset``: the log offset of the record that released it."""

    broken: bool = False
    reason: str = ""
    at_offset: int = -1


@dataclass(frozen=True, slots=True)
class KeyOrderTopic:
    map: KeyMap
    changes: tuple[EpochChange, ...]  # oldest kept first; the last one made ``map``
    seals: Mapping[Parent, int] = field(default_factory=dict)
    releases: Mapping[tuple[str, int, int], Release] = field(default_factory=dict)

    @property
    def epoch(self) -> int:
        return self.map.epoch

    def change(self, epoch: int) -> EpochChange | None:
        """The kept change that made ``epoch``."""
        i = epoch - self.changes[0].epoch
        return self.changes[i] if 0 <= i < len(self.changes) else None

    def release(self, group: str, parent: Parent) -> Release | None:
        return self.releases.get((group, *parent))


def strict_topic(partitions: Collection[int], cause: str = "created", epoch: int = FIRST_EPOCH) -> KeyOrderTopic:
    """The history of a topic that becomes strict now, routing to ``partitions`` from ``epoch`` on (after the
    last epoch of an earlier strict period, so that records stamped then are never taken for later ones)."""
    first = initial_map(partitions, epoch)
    return KeyOrderTopic(first, (EpochChange(first.epoch, moves_between(None, first), cause[:MAX_CAUSE_CHARS]),))


def next_change(topic: KeyOrderTopic, writable: Collection[int], cause: str) -> EpochChange | None:
    """The change to the next epoch for the partitions ``writable`` (None: the map already routes to them)."""
    new = next_map(topic.map, writable)
    return None if new is None else EpochChange(new.epoch, moves_between(topic.map, new), cause[:MAX_CAUSE_CHARS])


def pending_seals(topic: KeyOrderTopic) -> tuple[int, ...]:
    """The givers of the latest change whose seal is not recorded yet."""
    latest = topic.changes[-1]
    return tuple(p for p in latest.givers() if (latest.epoch, p) not in topic.seals)


def blocking_seals(topic: KeyOrderTopic, unmeasurable: Collection[int]) -> tuple[int, ...]:
    """The pending seals that keep the next epoch from starting: those that can still be measured. The others
    (on a fenced cluster) are abandoned when the next epoch starts: what waits for them ends by a give-up."""
    return tuple(p for p in pending_seals(topic) if p not in unmeasurable)


def check_may_advance(topic: KeyOrderTopic, unmeasurable: Collection[int]) -> None:
    """``KeyOrderError`` unless the next epoch may start now (no ``blocking_seals``). A command's check, not a
    replay's: whether a seal could be measured depends on the clusters' health when the epoch was decided."""
    blocking = blocking_seals(topic, unmeasurable)
    if blocking:
        raise KeyOrderError(
            f"epoch {topic.epoch + 1} cannot start before the seal of epoch {topic.epoch} on partition(s) "
            f"{', '.join(map(str, blocking))} is recorded"
        )


def with_change(topic: KeyOrderTopic | None, change: EpochChange) -> KeyOrderTopic:
    """The history after ``change`` (the first one when ``topic`` is None: its moves then come from
    NO_PARTITION). Keeps the last ``MAX_EPOCHS_KEPT`` changes: the oldest kept one is re-based as moves from
    NO_PARTITION to its whole map (its parents count as released), and seals and releases go with the
    changes they belonged to; so a snapshot writes the history as it is, and replays it exactly."""
    try:
        new_map = map_after(topic.map if topic is not None else None, change.epoch, change.moves)
    except ValueError as e:
        raise KeyOrderError(f"epoch {change.epoch}: {e}") from e
    if topic is None:
        return KeyOrderTopic(new_map, (change,))
    changes = (*topic.changes, change)
    if len(changes) <= MAX_EPOCHS_KEPT:
        return KeyOrderTopic(new_map, changes, topic.seals, topic.releases)
    changes = changes[-MAX_EPOCHS_KEPT:]
    oldest = changes[0]
    base = _map_at(new_map, changes[1:])
    changes = (EpochChange(oldest.epoch, moves_between(None, base), oldest.cause), *changes[1:])
    seals = {k: v for k, v in topic.seals.items() if k[0] > oldest.epoch}
    releases = {k: v for k, v in topic.releases.items() if k[1] > oldest.epoch}
    return KeyOrderTopic(new_map, changes, seals, releases)


def _map_at(current: KeyMap, later: Sequence[EpochChange]) -> KeyMap:
    """The map before the ``later`` changes that led to ``current``: their moves undone, newest first."""
    table = current.table()
    for change in reversed(later):
        for m in change.moves:
            table[m.first_slot : m.end_slot] = [m.from_partition] * (m.end_slot - m.first_slot)
    return map_of(later[0].epoch - 1 if later else current.epoch, table)


def with_seal(topic: KeyOrderTopic, epoch: int, partition: int, end_offset: int) -> KeyOrderTopic:
    """The history with the seal of ``partition`` for ``epoch`` at ``end_offset``: only for the latest epoch
    (a later epoch may have given the partition slots back, and a seal measured after that would count
    those records as the old epoch's), only for a giver, once."""
    if epoch != topic.epoch:
        raise KeyOrderError(f"only the latest epoch ({topic.epoch}) is sealed, not epoch {epoch}")
    if partition not in topic.changes[-1].givers():
        raise KeyOrderError(f"partition {partition} gave no slots away in epoch {epoch}: it has nothing to seal")
    if (epoch, partition) in topic.seals:
        raise KeyOrderError(f"partition {partition} is already sealed for epoch {epoch}")
    if end_offset < 0:
        raise KeyOrderError(f"a seal is an offset >= 0, not {end_offset}")
    return KeyOrderTopic(topic.map, topic.changes, {**topic.seals, (epoch, partition): end_offset}, topic.releases)


def with_release(
    topic: KeyOrderTopic, group: str, epoch: int, partition: int, broken: bool, reason: str = "", at_offset: int = -1
) -> KeyOrderTopic:
    """The history with ``group``'s release of parent ``(epoch, partition)``, recorded at log offset
    ``at_offset``. The coordinator decides it (``releasable``, ``may_give_up``): a normal one usually follows
    the parent's seal, but a drained and removed partition is released without one (everything in it was
    read)."""
    change = topic.change(epoch)
    if change is None or partition not in change.givers():
        raise KeyOrderError(f"epoch {epoch} moved nothing away from partition {partition} (or is no longer kept)")
    if (group, epoch, partition) in topic.releases:
        raise KeyOrderError(f"group {group!r} already released partition {partition} of epoch {epoch}")
    release = Release(broken, reason[:MAX_CAUSE_CHARS], at_offset)
    return KeyOrderTopic(topic.map, topic.changes, topic.seals, {**topic.releases, (group, epoch, partition): release})


def may_give_up(topic: KeyOrderTopic, parent: Parent, unreadable: Collection[int]) -> bool:
    """Whether a group may stop waiting for ``parent`` (a broken release): only when its partition cannot be
    read up to its seal. That is, its seal will never be recorded (an older epoch's seal that was not measured
    before the next epoch started: its cluster was fenced then), or its partition is ``unreadable`` now (on a
    fenced cluster). A parent that is sealed, or about to be, on a readable partition is waited for as long as
    the group takes to read it: a slow consumer is no reason to break order."""
    epoch, partition = parent
    if partition in unreadable:
        return True
    return epoch < topic.epoch and parent not in topic.seals


def open_parents(topic: KeyOrderTopic, group: str) -> list[Parent]:
    """The parents of the kept changes that ``group`` has not released, oldest first."""
    return [(c.epoch, p) for c in topic.changes for p in c.givers() if (group, c.epoch, p) not in topic.releases]


def releasable(
    topic: KeyOrderTopic,
    group: str,
    committed: Mapping[int, int],
    log_start: Mapping[int, int] | None = None,
    drained: Collection[int] = (),
) -> list[Parent]:
    """The open parents of ``group`` that it has read: their seal is recorded and the group committed the
    partition up to it (``committed``: partition -> next offset the group reads), or the partition no longer
    holds anything below it (``log_start``: partition -> first offset still held, after retention), or the
    partition was drained and removed (``drained``: every group reading the topic committed it to its end)."""
    out = []
    for parent in open_parents(topic, group):
        p = parent[1]
        if p in drained:
            out.append(parent)
            continue
        seal = topic.seals.get(parent)
        if seal is None:
            continue
        if committed.get(p, -1) >= seal or (log_start is not None and log_start.get(p, -1) >= seal):
            out.append(parent)
    return out


def acted_on(topic: KeyOrderTopic, group: str, seen_by_owner: Mapping[int, int | None]) -> dict[Parent, Release]:
    """The releases of ``group`` its members may act on: those that the current owner of the parent partition
    has seen (``seen_by_owner``: partition -> the metadata offset its owner last reported; None, or absent:
    nobody owns it, and whoever starts it next starts with metadata at least this new).

    Until the old partition's owner has seen a release, the records it reads from there are judged without
    it: a late write or a record after a give-up would go out unflagged while the moved records go ahead."""
    out = {}
    for (g, epoch, p), release in topic.releases.items():
        if g != group:
            continue
        seen = seen_by_owner.get(p)
        if seen is None or seen >= release.at_offset:
            out[(epoch, p)] = release
    return out


def first_moves(topic: KeyOrderTopic) -> list[int]:
    """Per slot, the epoch of the first kept change that moved it away from a partition (0: none did).

    Producers stamp a record only when its slot has moved by the epoch they route with (decision 3): a slot
    that never moved has no earlier partition to wait for, and the header costs librdkafka a third of a
    produce. An unstamped record of slot ``s`` was therefore routed before ``first_moves[s]``."""
    out = [0] * KEY_SLOTS
    for change in reversed(topic.changes):  # the earliest change writes last
        for move in change.moves:
            if move.from_partition != NO_PARTITION:
                out[move.first_slot : move.end_slot] = [change.epoch] * (move.end_slot - move.first_slot)
    return out


def parents_of(topic: KeyOrderTopic, slot: int, stamp: int) -> list[Parent]:
    """Every parent a record of ``slot`` stamped with epoch ``stamp`` follows: the giver of each kept move of
    that slot at an epoch up to ``stamp``, oldest first."""
    out = []
    for change in topic.changes:
        if change.epoch > stamp:
            break
        move = change.move_of(slot)
        if move is not None and move.from_partition != NO_PARTITION:
            out.append((change.epoch, move.from_partition))
    return out


def moved_out(topic: KeyOrderTopic, partition: int, slot: int, stamp: int) -> Parent | None:
    """The first change after ``stamp`` that moved ``slot``, when it moved it away from ``partition``: a record
    of epoch ``stamp`` read from ``partition`` is one of that parent's (None: the slot stayed there)."""
    first = stamp + 1 - topic.changes[0].epoch
    for change in topic.changes[max(0, first) :]:
        move = change.move_of(slot)
        if move is not None:
            return (change.epoch, partition) if move.from_partition == partition else None
    return None
