"""Key routing of ``key_order: strict`` topics: an explicit map from a fixed hash space to logical partitions.

A key's *slot* is ``crc32(key) mod KEY_SLOTS``; a ``KeyMap`` gives every slot one owner, as sorted ranges,
and carries the *epoch* that numbers it (the first map of a topic is ``FIRST_EPOCH``). A change of the
writable set makes the next epoch's map with ``next_map``: balanced (every owner holds ``KEY_SLOTS // n``
or one slot more) and moving as few slots as that balance allows. ``moves_between`` says which slot
ranges changed owner; ``map_after`` replays such moves, which is how the log carries a map.

Each partition of one change is a *giver* (it loses slots), a *receiver* (it gains slots) or untouched,
never a giver and a receiver at once: the hold-back rule relies on it (see ``docs/KEY_ORDER.md``).
Pure: no clock, no I/O. Why a fixed slot space rather than jump or ring hashing: ``docs/KEY_ORDER.md``.
"""

from __future__ import annotations

import zlib
from bisect import bisect_right
from collections import Counter
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from itertools import compress
from operator import ne
from typing import Final

KEY_SLOTS: Final = 16_384
"""Size of the hash space. A power of two (a slot is the low bits of crc32) large enough that a topic of
``MAX_STRICT_PARTITIONS`` partitions is balanced to within 1/16, small enough that a map is at most
``KEY_SLOTS`` ranges and a producer's slot -> partition table is 16,384 entries (Redis Cluster's choice)."""

SLOT_MASK: Final = KEY_SLOTS - 1

MAX_STRICT_PARTITIONS: Final = 1_024
"""Most partitions a strict topic's map may use at once: each then owns at least 16 slots."""

FIRST_EPOCH: Final = 1
"""Epoch of a strict topic's first map. Records without an epoch header (key_order none, explicit partitions,
clients that do not stamp) count as unstamped, never as an epoch."""

NO_PARTITION: Final = -1
"""The ``from_partition`` of the moves of a first map: those slots had no owner, so nothing waits for them."""


EPOCH_HEADER: Final = "kfed-epoch"
"""The record header in which a producer stamps the epoch it routed a record by (ASCII decimal)."""

MAX_STAMP_BYTES: Final = 19  # the digits of the largest int64


def slot_of(key: bytes) -> int:
    """The slot of a key (its bytes as the producer sends them)."""
    return zlib.crc32(key) & SLOT_MASK


def epoch_header(epoch: int) -> tuple[str, bytes]:
    """The header that stamps a record with ``epoch`` (a producer makes it once per epoch and reuses it)."""
    return (EPOCH_HEADER, str(epoch).encode())


def stamp_of(headers: Sequence[tuple[str, bytes | None]] | None) -> int | None:
    """The epoch a record was stamped with, from its headers as confluent-kafka gives them; None when it has
    none or one that is not an epoch (a record that is not stamped is never held back)."""
    if not headers:
        return None
    for name, value in headers:
        if name == EPOCH_HEADER:
            if value is None or not 0 < len(value) <= MAX_STAMP_BYTES or not value.isdigit():
                return None
            epoch = int(value)
            return epoch if epoch >= FIRST_EPOCH else None
    return None


@dataclass(frozen=True, slots=True)
class Move:
    """Slots ``[first_slot, end_slot)`` change owner from ``from_partition`` to ``to_partition``."""

    first_slot: int
    end_slot: int
    from_partition: int
    to_partition: int


@dataclass(frozen=True, slots=True)
class KeyMap:
    """Owner of every slot, as ranges: range ``i`` is ``[starts[i], starts[i + 1])`` (the last ends at
    ``KEY_SLOTS``) and belongs to ``owners[i]``. Canonical: ``starts[0] == 0``, starts increase, and two
    adjacent ranges have different owners, so two maps are equal exactly when they route alike."""

    epoch: int
    starts: tuple[int, ...]
    owners: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.epoch < FIRST_EPOCH:
            raise ValueError(f"epoch {self.epoch} is before the first epoch {FIRST_EPOCH}")
        if not self.starts or self.starts[0] != 0 or len(self.starts) != len(self.owners):
            raise ValueError("a key map needs one owner per range and its first range at slot 0")
        if any(b <= a for a, b in zip(self.starts, self.starts[1:], strict=False)) or self.starts[-1] >= KEY_SLOTS:
            raise ValueError(f"range starts must increase within [0, {KEY_SLOTS})")
        if any(o < 0 for o in self.owners) or any(a == b for a, b in zip(self.owners, self.owners[1:], strict=False)):
            raise ValueError("owners must be partitions (>= 0), and adjacent ranges of one owner merged")

    def owner(self, slot: int) -> int:
        """The partition that owns ``slot``."""
        return self.owners[bisect_right(self.starts, slot) - 1]

    def ranges(self) -> Iterator[tuple[int, int, int]]:
        """``(first_slot, end_slot, owner)`` of every range, in slot order."""
        ends = (*self.starts[1:], KEY_SLOTS)
        return zip(self.starts, ends, self.owners, strict=True)

    def partitions(self) -> frozenset[int]:
        """The partitions that own at least one slot (the writable set this map was made for)."""
        return frozenset(self.owners)

    def slot_counts(self) -> dict[int, int]:
        """Slots owned, per partition."""
        counts: Counter[int] = Counter()
        for first, end, owner in self.ranges():
            counts[owner] += end - first
        return dict(counts)

    def table(self) -> list[int]:
        """The owner of each slot, indexed by slot: a producer routes a key with one index into it."""
        table: list[int] = []
        for first, end, owner in self.ranges():
            table += [owner] * (end - first)
        return table


def map_of(epoch: int, table: Sequence[int]) -> KeyMap:
    """The canonical map of a slot -> owner table (a range starts wherever the owner changes; in C)."""
    starts = (0, *compress(range(1, len(table)), map(ne, table[1:], table)))
    return KeyMap(epoch, starts, tuple(map(table.__getitem__, starts)))


def check_partitions(partitions: Collection[int]) -> list[int]:
    """The partitions a map may be made for, sorted; ``ValueError`` saying why not."""
    if any(not isinstance(p, int) or isinstance(p, bool) or p < 0 for p in partitions):
        raise ValueError("partitions must be logical partition ids (integers >= 0)")
    ordered = sorted(set(partitions))
    if not ordered:
        raise ValueError("a strict topic needs at least one writable partition to route keys to")
    if len(ordered) > MAX_STRICT_PARTITIONS:
        raise ValueError(
            f"a strict topic routes keys to at most {MAX_STRICT_PARTITIONS} partitions, not {len(ordered)}"
        )
    return ordered


def initial_map(partitions: Collection[int], epoch: int = FIRST_EPOCH) -> KeyMap:
    """A topic's first map: one contiguous range per partition, in id order; the first ``KEY_SLOTS % n``
    partitions hold one slot more than the others."""
    ordered = check_partitions(partitions)
    base, extra = divmod(KEY_SLOTS, len(ordered))
    table: list[int] = []
    for i, p in enumerate(ordered):
        table += [p] * (base + (1 if i < extra else 0))
    return map_of(epoch, table)


def next_map(old: KeyMap, writable: Collection[int]) -> KeyMap | None:
    """The map of epoch ``old.epoch + 1`` for the partitions ``writable``; None when they are the partitions
    ``old`` already routes to (nothing to change).

    Balanced, and among balanced maps one that moves the fewest slots: the ``KEY_SLOTS % n`` partitions
    allowed one slot more are those holding the most now (so they keep it), a partition keeps every slot
    up to its quota, and only the rest move: all the slots of partitions that leave, and each remaining
    partition's slots beyond its quota, taken from its smallest ranges first (so that fewer, larger ranges
    remain). The freed slots go, in slot order, to the partitions below their quota, in id order.
    """
    targets = check_partitions(writable)
    if frozenset(targets) == old.partitions():
        return None
    table = old.table()
    held = old.slot_counts()
    base, extra = divmod(KEY_SLOTS, len(targets))
    by_size = sorted(targets, key=lambda p: (-held.get(p, 0), p))
    quota = {p: base + (1 if i < extra else 0) for i, p in enumerate(by_size)}
    freed: list[int] = []
    ranges_of: dict[int, list[tuple[int, int]]] = {}
    for first, end, owner in old.ranges():
        if owner in quota:
            ranges_of.setdefault(owner, []).append((first, end))
        else:
            freed += range(first, end)
    for owner, ranges in ranges_of.items():
        excess = held[owner] - quota[owner]
        for first, end in sorted(ranges, key=lambda r: (r[1] - r[0], r[0])):
            if excess <= 0:
                break
            take = min(excess, end - first)
            freed += range(end - take, end)
            excess -= take
    freed.sort()
    at = 0
    for p in targets:
        deficit = quota[p] - held.get(p, 0)
        for slot in freed[at : at + max(0, deficit)]:
            table[slot] = p
        at += max(0, deficit)
    if at != len(freed):  # pragma: no cover - the quotas add up to KEY_SLOTS by construction
        raise AssertionError(f"{len(freed)} slots freed but {at} given out")
    return map_of(old.epoch + 1, table)


def moves_between(old: KeyMap | None, new: KeyMap) -> tuple[Move, ...]:
    """The slot ranges whose owner differs between ``old`` and ``new``, in slot order, adjacent ones of the
    same (from, to) merged. Against no map (``old`` None), every range of ``new`` moves from NO_PARTITION."""
    if old is None:
        return tuple(Move(first, end, NO_PARTITION, owner) for first, end, owner in new.ranges())
    cuts = sorted({*old.starts, *new.starts})
    moves: list[Move] = []
    for first, end in zip(cuts, (*cuts[1:], KEY_SLOTS), strict=True):
        was, now = old.owner(first), new.owner(first)
        if was == now:
            continue
        last = moves[-1] if moves else None
        if last is not None and last.end_slot == first and (last.from_partition, last.to_partition) == (was, now):
            moves[-1] = Move(last.first_slot, end, was, now)
        else:
            moves.append(Move(first, end, was, now))
    return tuple(moves)


def map_after(old: KeyMap | None, epoch: int, moves: Sequence[Move]) -> KeyMap:
    """The map of ``epoch`` made by applying ``moves`` to ``old`` (None: no map yet, the moves must then
    cover every slot, from NO_PARTITION). ``ValueError`` when the moves do not fit: overlapping, out of the
    slot space, from a partition that does not own those slots, or to the partition they come from."""
    if old is not None and epoch != old.epoch + 1:
        raise ValueError(f"epoch {epoch} does not follow epoch {old.epoch}")
    table = old.table() if old is not None else [NO_PARTITION] * KEY_SLOTS
    end = 0
    for m in sorted(moves, key=lambda m: m.first_slot):
        if not 0 <= m.first_slot < m.end_slot <= KEY_SLOTS or m.first_slot < end:
            raise ValueError(f"move of slots [{m.first_slot}, {m.end_slot}) overlaps another or leaves the slot space")
        if m.to_partition < 0 or m.to_partition == m.from_partition:
            raise ValueError(f"move of slots [{m.first_slot}, {m.end_slot}) must go to another partition")
        if table[m.first_slot : m.end_slot].count(m.from_partition) != m.end_slot - m.first_slot:
            raise ValueError(f"slots [{m.first_slot}, {m.end_slot}) are not all owned by partition {m.from_partition}")
        table[m.first_slot : m.end_slot] = [m.to_partition] * (m.end_slot - m.first_slot)
        end = m.end_slot
    if NO_PARTITION in table:
        raise ValueError("a first map must give every slot an owner")
    new = map_of(epoch, table)
    check_partitions(new.partitions())
    return new
