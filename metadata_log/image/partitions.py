"""A topic's logical partitions in compact form, and physical partitions' leaders in compact form.

An image holds every partition of the federation, up to 100 million of them: at one Python object per
partition a process needs about a kilobyte each (``docs/DESIGN.md``, "Scale"). Here they cost what the
federation's *shape* costs:

- ``Partitions``: a topic's partitions as *placement runs* (logical partitions ``start..start+n-1`` on
  physical partitions ``first..first+n-1`` of one physical topic of one cluster: a topic created over four
  clusters is four runs whatever its size) and, once any partition is not writable, one state byte per
  partition. It is a ``Sequence[PartitionImage]`` whose items are built when read.
- ``Leaders``: one cluster's reported leaders, per physical topic an array of 2-byte indexes into the
  cluster's table of broker addresses. It is a ``Mapping[(physical_topic, physical_partition), address]``.

Both are immutable; ``PartitionsBuilder`` and ``LeadersBuilder`` are what a delta changes (copy-on-write:
a builder copies only the run list, state bytes or per-topic array it changes) and freezes once per batch.
"""

from __future__ import annotations

import sys
from array import array
from bisect import bisect_right, insort
from collections.abc import Iterable, Iterator, Mapping, Sequence
from itertools import repeat
from typing import Final, NamedTuple, overload

from ..records import PARTITION_STATES, PartitionState
from .common import InvalidRecord

STATE_CODES: Final[Mapping[PartitionState, int]] = {state: code for code, state in enumerate(PARTITION_STATES)}
"""A partition state's byte in ``Partitions``' state bytes (0: writable)."""


class PartitionImage(NamedTuple):
    """One logical partition, as ``Partitions`` hands it out (built when read, not stored)."""

    partition: int
    cluster_id: str
    physical_topic: str
    physical_partition: int
    state: PartitionState = "writable"


class PlacementRun(NamedTuple):
    """Logical partitions ``start .. start+size-1`` on physical partitions ``first .. first+size-1`` of
    ``physical_topic`` on ``cluster_id``."""

    start: int
    size: int
    cluster_id: str
    physical_topic: str
    first: int


class Partitions(Sequence[PartitionImage]):
    """A topic's logical partitions (index == logical partition id): placement runs, each as long as it can be
    (two runs that continue each other are one), and state bytes (``None`` while every partition is writable).
    Equal to any sequence of the same ``PartitionImage`` values, as the tuple it replaces was."""

    __slots__ = ("_runs", "_starts", "_states")

    def __init__(self, runs: tuple[PlacementRun, ...] = (), states: bytes | None = None) -> None:
        self._runs = runs
        self._starts = tuple(run.start for run in runs)
        self._states = states if states and states.count(0) != len(states) else None

    @property
    def runs(self) -> tuple[PlacementRun, ...]:
        return self._runs

    @property
    def states(self) -> bytes | None:
        """One ``STATE_CODES`` byte per partition; None: every partition is writable."""
        return self._states

    def __len__(self) -> int:
        runs = self._runs
        return runs[-1].start + runs[-1].size if runs else 0

    @overload
    def __getitem__(self, index: int) -> PartitionImage: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[PartitionImage, ...]: ...
    def __getitem__(self, index: int | slice) -> PartitionImage | tuple[PartitionImage, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        n = len(self)
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError("partition index out of range")
        run = self._runs[bisect_right(self._starts, index) - 1]
        states = self._states
        state = PARTITION_STATES[states[index]] if states is not None else "writable"
        return PartitionImage(index, run.cluster_id, run.physical_topic, run.first + index - run.start, state)

    def __iter__(self) -> Iterator[PartitionImage]:
        states = self._states
        for start, count, cluster_id, physical_topic, first in self._runs:
            codes = (
                map(PARTITION_STATES.__getitem__, states[start : start + count])
                if states is not None
                else repeat("writable", count)
            )
            fields = zip(
                range(start, start + count),
                repeat(cluster_id, count),
                repeat(physical_topic, count),
                range(first, first + count),
                codes,
                strict=True,
            )
            yield from map(tuple.__new__, repeat(PartitionImage), fields)

    def state(self, index: int) -> PartitionState:
        """The state of partition ``index`` (without building its ``PartitionImage``)."""
        if not 0 <= index < len(self):
            raise IndexError("partition index out of range")
        return PARTITION_STATES[self._states[index]] if self._states is not None else "writable"

    def count_in_state(self, state: PartitionState) -> int:
        states = self._states
        if states is None:
            return len(self) if state == "writable" else 0
        return states.count(STATE_CODES[state])

    def states_differ(self, other: Partitions, indices: Sequence[int] | None = None) -> list[int]:
        """The partitions (among ``indices``, or all both have) whose state differs between ``self`` and ``other``."""
        n = min(len(self), len(other))
        mine, theirs = self._states, other._states
        if mine is None and theirs is None:
            return []
        mine = mine if mine is not None else bytes(n)
        theirs = theirs if theirs is not None else bytes(n)
        candidates = range(n) if indices is None else (i for i in indices if 0 <= i < n)
        return [i for i in candidates if mine[i] != theirs[i]]

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Partitions):
            return self._runs == other._runs and self._states == other._states
        if isinstance(other, Sequence) and not isinstance(other, str | bytes):
            return len(self) == len(other) and all(map(tuple.__eq__, self, other))
        return NotImplemented

    def __hash__(self) -> int:
        return hash((self._runs, self._states))

    def __repr__(self) -> str:
        states = f", {self.count_in_state('writable')} writable" if self._states is not None else ""
        return f"Partitions({len(self)} in {len(self._runs)} runs{states})"


EMPTY_PARTITIONS: Final = Partitions()


class PartitionsBuilder:
    """The partitions of one topic while a batch replays: runs appended, states set, and the physical
    partitions each (cluster, physical topic) already backs, as disjoint sorted intervals, to refuse a second
    partition on one of them. Built from the topic's ``Partitions`` (not changed)."""

    __slots__ = ("_base", "_runs", "_states", "_used", "count")

    def __init__(self, base: Partitions) -> None:
        self._base = base
        self._runs: list[PlacementRun] = list(base.runs)
        self._states: bytearray | None = bytearray(base.states) if base.states is not None else None
        self._used: dict[tuple[str, str], list[tuple[int, int]]] | None = None
        self.count = len(base)

    def state_codes(self, start: int, count: int) -> bytes:
        return bytes(self._states[start : start + count]) if self._states is not None else bytes(count)

    def set_states(self, start: int, count: int, code: int) -> None:
        states = self._states
        if states is None:
            if code == 0:
                return
            states = self._states = bytearray(self.count)
        states[start : start + count] = bytes((code,)) * count

    def _intervals(self, cluster_id: str, physical_topic: str) -> list[tuple[int, int]]:
        used = self._used
        if used is None:
            used = self._used = {}
            for run in self._runs:
                _insert(used.setdefault((run.cluster_id, run.physical_topic), []), run.first, run.first + run.size)
        return used.setdefault((cluster_id, physical_topic), [])

    def overlap(self, cluster_id: str, physical_topic: str, first: int, count: int) -> int | None:
        """The first of physical partitions ``first .. first+count-1`` that already backs a partition, or None."""
        intervals = self._intervals(cluster_id, physical_topic)
        end = first + count
        at = bisect_right(intervals, (first, end))
        for lo, hi in intervals[max(0, at - 1) : at + 1]:
            if lo < end and first < hi:
                return max(lo, first)
        # an interval after those two starts at or after ``end``: no overlap
        return None

    def append(self, cluster_id: str, physical_topic: str, first: int, count: int) -> None:
        """Logical partitions ``count .. count+n-1`` on physical ``first ..``; the caller checked ``overlap``."""
        runs = self._runs
        last = runs[-1] if runs else None
        if (
            last is not None
            and last.cluster_id == cluster_id
            and last.physical_topic == physical_topic
            and last.first + last.size == first
        ):
            runs[-1] = last._replace(size=last.size + count)
        else:
            runs.append(PlacementRun(self.count, count, cluster_id, physical_topic, first))
        if self._used is not None:
            _insert(self._intervals(cluster_id, physical_topic), first, first + count)
        if self._states is not None:
            self._states += bytes(count)
        self.count += count

    def freeze(self) -> Partitions:
        runs, states = tuple(self._runs), self._states
        base = self._base
        if runs == base.runs and (states is None or states == (base.states or bytes(len(states)))):
            return base
        return Partitions(runs, bytes(states) if states is not None else None)


def _insert(intervals: list[tuple[int, int]], lo: int, hi: int) -> None:
    """Add [lo, hi) (disjoint from every interval) to sorted disjoint ``intervals``, merging it with a neighbour
    it touches, so that physical partitions used in order stay one interval."""
    at = bisect_right(intervals, (lo, hi))
    if at > 0 and intervals[at - 1][1] == lo:
        lo = intervals[at - 1][0]
        at -= 1
        del intervals[at]
    if at < len(intervals) and intervals[at][0] == hi:
        hi = intervals[at][1]
        del intervals[at]
    insort(intervals, (lo, hi))


# -- leaders ---------------------------------------------------------------------------------------------
MAX_PHYSICAL_PARTITION: Final = 1_000_000
"""Highest physical partition id a record may name (Kafka topics stay far below it): a leader report's
partition indexes an array, which a larger id would make as large."""

_NO_LEADER: Final = -1
_MAX_BROKERS: Final = 32_767
"""Most distinct addresses one cluster's table holds (2-byte indexes). A builder over a table past half of it
first keeps only the addresses in use, so one batch has the other half to add to."""


def _led(arrays: Iterable[array[int]]) -> int:
    """How many partitions of these arrays have a leader: those whose high byte is not 0xff (an index is -1 or
    below 32,767), counted on bytes at C speed."""
    high = 1 if sys.byteorder == "little" else 0
    return sum(len(a) - a.tobytes()[high::2].count(0xFF) for a in arrays)


_IS_FF: Final = bytes(1 if byte == 0xFF else 0 for byte in range(256))
"""A ``bytes.translate`` table: 1 for 0xff, 0 for any other byte."""


def _none(count: int) -> array[int]:
    """``count`` slots without a leader (a repeated array is copied in blocks, not made one by one)."""
    return array("h", [_NO_LEADER]) * count


class Leaders(Mapping[tuple[str, int], str]):
    """One cluster's reported leaders: (physical topic, physical partition) -> "host:port". Per physical topic
    an ``array('h')`` of indexes into ``brokers`` (-1: no leader), so a partition's leader costs 2 bytes."""

    __slots__ = ("_brokers", "_count", "_topics")

    def __init__(
        self, brokers: tuple[str, ...] = (), topics: Mapping[str, array[int]] | None = None, count: int | None = None
    ) -> None:
        """``count``: how many partitions have a leader, when the caller knows (else counted)."""
        self._brokers = brokers
        self._topics: Mapping[str, array[int]] = topics or {}
        self._count = _led(self._topics.values()) if count is None else count

    def __getitem__(self, key: tuple[str, int]) -> str:
        try:
            physical_topic, partition = key
            slots = self._topics[physical_topic]
            index = slots[partition] if partition >= 0 else _NO_LEADER
        except (KeyError, IndexError, TypeError, ValueError):
            raise KeyError(key) from None
        if index == _NO_LEADER:
            raise KeyError(key)
        return self._brokers[index]

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[tuple[str, int]]:
        for physical_topic, slots in self._topics.items():
            for partition, index in enumerate(slots):
                if index != _NO_LEADER:
                    yield physical_topic, partition

    def items(self) -> Iterator[tuple[tuple[str, int], str]]:  # type: ignore[override]  # an iterator view is enough
        brokers = self._brokers
        for physical_topic, slots in self._topics.items():
            for partition, index in enumerate(slots):
                if index != _NO_LEADER:
                    yield (physical_topic, partition), brokers[index]

    @property
    def brokers(self) -> tuple[str, ...]:
        """The addresses the indexes of ``indexes`` name (maybe some no partition uses any more)."""
        return self._brokers

    def segment(self, physical_topic: str, first: int, count: int) -> array[int]:
        """The leaders of partitions ``first..first+count-1`` as indexes into ``brokers`` (-1: none)."""
        slots = self._topics.get(physical_topic)
        part = slots[first : first + count] if slots is not None else array("h")
        if len(part) < count:
            part.extend(_none(count - len(part)))
        return part

    def indexes(self) -> Iterator[tuple[str, array[int]]]:
        """Per physical topic, its partitions' leaders as indexes into ``brokers``, in partition order (-1: none)."""
        return iter(self._topics.items())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Leaders):
            if self._count != other._count:
                return False
            short, long = sorted((self._brokers, other._brokers), key=len)
            if long[: len(short)] == short:
                # One table extends the other (a builder only appends): an address has the same index in both,
                # and arrays are trimmed and topics without a leader dropped, so equal leaders are equal arrays.
                return self._topics == other._topics
        if isinstance(other, Mapping):
            return len(self) == len(other) and dict(self.items()) == dict(other.items())
        return NotImplemented

    def __hash__(self) -> int:  # immutable (equal values have equal counts), so an image field may default to one
        return hash(self._count)

    def __repr__(self) -> str:
        return f"Leaders({self._count} leaders over {len(self._topics)} physical topics)"


EMPTY_LEADERS: Final = Leaders()


class LeadersBuilder:
    """One cluster's leaders while a batch replays: copies the topic map once, and a topic's array when it
    first changes."""

    __slots__ = ("_base", "_brokers", "_copied", "_index", "_topics")

    def __init__(self, base: Leaders) -> None:
        self._base = base
        self._brokers: list[str] = list(base._brokers)
        self._topics: dict[str, array[int]] = dict(base._topics)
        self._copied: set[str] = set()
        if len(self._brokers) > _MAX_BROKERS // 2:  # a cluster's brokers came and went some 16,000 times
            used = sorted({i for slots in self._topics.values() for i in slots if i != _NO_LEADER})
            renumber = {old: new for new, old in enumerate(used)} | {_NO_LEADER: _NO_LEADER}
            self._brokers = [self._brokers[i] for i in used]
            self._topics = {name: array("h", map(renumber.__getitem__, slots)) for name, slots in self._topics.items()}
            self._copied = set(self._topics)
        self._index: dict[str, int] = {address: i for i, address in enumerate(self._brokers)}

    def _slots(self, physical_topic: str, size: int) -> array[int]:
        slots = self._topics.get(physical_topic)
        if physical_topic not in self._copied:
            slots = array("h", slots if slots is not None else ())
            self._topics[physical_topic] = slots
            self._copied.add(physical_topic)
        assert slots is not None
        if len(slots) < size:
            slots.extend(_none(size - len(slots)))
        return slots

    def _broker(self, address: str) -> int:
        index = self._index.get(address)
        if index is None:
            if len(self._brokers) >= _MAX_BROKERS:  # the same on every node: a batch that does this is refused
                raise InvalidRecord(f"a cluster's partitions cannot have more than {_MAX_BROKERS} distinct leaders")
            index = self._index[address] = len(self._brokers)
            self._brokers.append(address)
        return index

    def set(self, physical_topic: str, partitions: Sequence[int], leaders: Sequence[str | None]) -> None:
        """Each partition's leader (None: drops it), in order."""
        if not partitions:
            return
        if min(partitions) < 0:
            return self._set_rows(physical_topic, partitions, leaders)
        highest = max(partitions)
        if highest > MAX_PHYSICAL_PARTITION:
            raise InvalidRecord(f"physical partition {physical_topic}/{highest} is above {MAX_PHYSICAL_PARTITION}")
        slots = self._slots(physical_topic, highest + 1)
        broker = self._broker
        for partition, leader in zip(partitions, leaders, strict=True):
            slots[partition] = broker(leader) if leader is not None else _NO_LEADER
        return None

    def _set_rows(self, physical_topic: str, partitions: Sequence[int], leaders: Sequence[str | None]) -> None:
        for partition, leader in zip(partitions, leaders, strict=True):
            if partition < 0:
                if leader is not None:  # a negative partition cannot be held in an array: refused
                    raise InvalidRecord(f"physical partition {physical_topic}/{partition} must be >= 0")
                continue
            self.set(physical_topic, (partition,), (leader,))

    def set_ranges(
        self, physical_topic: str, brokers: Sequence[str], ranges: Sequence[int], leaders: Sequence[int]
    ) -> None:
        """A ``PhysicalLeadersReported``: the partitions of each (first, count) pair of ``ranges`` take, in order,
        the leaders named by index into ``brokers`` (-1: none), checked (``checked_leader_report``) before any is
        set."""
        pairs, values = checked_leader_report(physical_topic, len(brokers), ranges, leaders)
        if not pairs:
            return
        values = translated(values, [self._broker(address) for address in brokers])
        slots = self._slots(physical_topic, max(first + count for first, count in pairs))
        at = 0
        for first, count in pairs:
            slots[first : first + count] = values[at : at + count]
            at += count

    def freeze(self) -> Leaders:
        if not self._copied:
            return self._base
        base_topics = self._base._topics
        count = self._base._count - _led(base_topics[name] for name in self._copied if name in base_topics)
        topics: dict[str, array[int]] = {}
        for name, slots in self._topics.items():
            if name not in self._copied:
                topics[name] = slots
                continue
            end = len(slots)
            while end and slots[end - 1] == _NO_LEADER:
                end -= 1
            if end:
                topics[name] = slots if end == len(slots) else slots[:end]
                count += _led((slots,))
        return Leaders(tuple(self._brokers), topics, count)


def translated(leaders: Sequence[int], to: Sequence[int]) -> array[int]:
    """``leaders`` (indexes into a report's brokers, -1: none) as indexes into a table where the report's broker
    ``i`` is ``to[i]``. Reports name their brokers in the table's order almost always: then no lookup per
    partition."""
    if all(index == i for i, index in enumerate(to)):
        return array("h", leaders)
    lookup = dict(enumerate(to)) | {_NO_LEADER: _NO_LEADER}
    return array("h", map(lookup.__getitem__, leaders))


def checked_leader_report(
    physical_topic: str, brokers: int, ranges: Sequence[int], leaders: Sequence[int]
) -> tuple[list[tuple[int, int]], array[int]]:
    """The (first, count) pairs of a leader report's ``ranges``, and its ``leaders`` (indexes into ``brokers``
    addresses, or -1) as an array, both checked: ``InvalidRecord`` whose ``extra["field"]`` names the field that
    does not fit (the command names it in its 422; replay refuses the record)."""
    pairs = list(zip(ranges[::2], ranges[1::2], strict=False))
    if len(ranges) % 2 or any(first < 0 or count < 1 for first, count in pairs):
        raise InvalidRecord("ranges must be (first partition >= 0, count >= 1) pairs", field="ranges")
    if (covered := sum(count for _first, count in pairs)) != len(leaders):
        raise InvalidRecord(f"the ranges cover {covered} partitions; {len(leaders)} leaders", field="leaders")
    values = _indexes(leaders, brokers)
    if values is None:
        raise InvalidRecord(f"a leader index is outside the {brokers} brokers reported", field="leaders")
    highest = max((first + count - 1 for first, count in pairs), default=-1)
    if highest > MAX_PHYSICAL_PARTITION:
        message = f"physical partition {physical_topic}/{highest} is above {MAX_PHYSICAL_PARTITION}"
        raise InvalidRecord(message, field="ranges")
    return pairs, values


def _indexes(leaders: Sequence[int], brokers: int) -> array[int] | None:
    """``leaders`` as an array when each is -1 or an index below ``brokers``, else None. Up to 255 brokers (a
    report names a cluster's few) checked on the array's bytes at C speed, not index by index: each is two
    bytes, (k, 0) for 0 <= k < 256 and (0xff, 0xff) for -1 (low byte first)."""
    try:
        values = array("h", leaders)
    except (OverflowError, TypeError):
        return None
    if brokers > 255 or not values:
        return values if not values or -1 <= min(values) <= max(values) < brokers else None
    data = values.tobytes()
    low, high = (data[0::2], data[1::2]) if sys.byteorder == "little" else (data[1::2], data[0::2])
    fits = (
        not high.translate(None, b"\x00\xff")  # high bytes 0 (0 <= k < 256) or 0xff (-1, or below -1)
        and high.translate(_IS_FF) == low.translate(_IS_FF)  # 0xff low exactly where 0xff high: -1
        and not low.translate(None, bytes(range(brokers)) + b"\xff")
    )
    return values if fits else None


def ranges_of(ids: Sequence[int]) -> list[tuple[int, int]]:
    """(first, count) of each run of consecutive ``ids``, in their order: ``[3, 4, 5, 9]`` is ``[(3, 3), (9, 1)]``."""
    runs: list[tuple[int, int]] = []
    for i in ids:
        if runs and runs[-1][0] + runs[-1][1] == i:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((i, 1))
    return runs
