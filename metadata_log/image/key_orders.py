"""The key-order part of the image (``docs/KEY_ORDER.md``): per topic that was ever strict, its routing epochs,
seals and releases (``TopicKeyOrder``); a topic absent from the map is ``key_order: none``.

For one batch, ``KeyOrdersDelta`` replays the key-order records over the image's map (copy on write, like
``MetadataDelta``) and ``apply`` gives the next map. An epoch is one ``KeyOrderEpochStarted`` announcing how many
``KeyRangeMoved`` follow, all in one batch: ``apply`` refuses a batch that leaves one incomplete. A record that
does not fit is ``InvalidRecord``, saying why (the history's rules, ``key_order_history``, raise
``KeyOrderError``). ``snapshot_records`` writes the map back as records that replay to an equal one.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass

from ..keymap import KEY_SLOTS, NO_PARTITION, Move
from ..records import (
    KEY_ORDERS,
    KeyOrder,
    KeyOrderEpochStarted,
    KeyOrderRecord,
    KeyOrderSealed,
    KeyRangeMoved,
    KeyRangeReleased,
    TopicKeyOrderChanged,
)
from .common import InvalidRecord
from .key_order_history import (
    EpochChange,
    KeyOrderError,
    KeyOrderTopic,
    with_change,
    with_release,
    with_seal,
)


@dataclass(frozen=True, slots=True)
class TopicKeyOrder:
    """A topic's key order: ``history`` while strict; kept when switched back to none, so that a later strict
    period continues its epoch numbers (records stamped in an earlier period are never taken for later ones)."""

    key_order: KeyOrder
    history: KeyOrderTopic | None

    @property
    def last_epoch(self) -> int:
        return self.history.epoch if self.history is not None else 0


KeyOrders = Mapping[str, TopicKeyOrder]
EMPTY_KEY_ORDERS: KeyOrders = {}


def strict_history(key_orders: KeyOrders, topic: str) -> KeyOrderTopic | None:
    """The history of ``topic`` if it is strict now, else None."""
    current = key_orders.get(topic)
    return current.history if current is not None and current.key_order == "strict" else None


@dataclass(slots=True)
class _Pending:
    """An epoch announced in this batch, its moves still arriving."""

    epoch: int
    moves: int
    cause: str
    got: list[Move]
    restart: bool  # the first epoch of a strict period (its moves come from NO_PARTITION)


class KeyOrdersDelta:
    """The key-order records of one batch over an image's map; ``replay`` each, then ``apply`` once.
    ``partition_count(topic)``: the topic's logical partitions as replayed so far in the batch (None: no such
    topic)."""

    __slots__ = ("_base", "_changed", "_partition_count", "_pending")

    def __init__(self, base: KeyOrders, partition_count: Callable[[str], int | None]) -> None:
        self._base = base
        self._partition_count = partition_count
        self._changed: dict[str, TopicKeyOrder | None] = {}  # None: the topic was deleted
        self._pending: dict[str, _Pending] = {}

    def _get(self, topic: str) -> TopicKeyOrder | None:
        return self._changed[topic] if topic in self._changed else self._base.get(topic)

    def _strict(self, topic: str) -> KeyOrderTopic:
        current = self._get(topic)
        if current is None or current.key_order != "strict" or current.history is None:
            raise KeyOrderError(f"topic {topic!r} is not strict")
        if topic in self._pending:
            raise KeyOrderError(f"epoch {self._pending[topic].epoch} of topic {topic!r} is still incomplete")
        return current.history

    def forget(self, topic: str) -> None:
        """The topic was deleted: its key order goes with it (a topic created under its name starts none)."""
        if self._get(topic) is not None:
            self._changed[topic] = None
        self._pending.pop(topic, None)

    def replay(self, record: KeyOrderRecord, offset: int) -> None:
        """Fold in one record, which takes log ``offset``; ``InvalidRecord`` when it does not fit."""
        try:
            self._replay(record, offset, self._partition_count(record.topic))
        except KeyOrderError as e:
            raise InvalidRecord(str(e)) from None

    def _replay(self, record: KeyOrderRecord, offset: int, partition_count: int | None) -> None:
        if partition_count is None:
            raise KeyOrderError(f"topic {record.topic!r} does not exist")
        topic = record.topic
        match record:
            case TopicKeyOrderChanged():
                self._replay_switch(topic, record.key_order)
            case KeyOrderEpochStarted():
                self._replay_epoch(topic, record)
            case KeyRangeMoved():
                self._replay_move(topic, record, partition_count)
            case KeyOrderSealed():
                if not 0 <= record.partition < partition_count:
                    raise KeyOrderError(f"topic {topic!r} has no partition {record.partition}")
                history = with_seal(self._strict(topic), record.epoch, record.partition, record.end_offset)
                self._changed[topic] = TopicKeyOrder("strict", history)
            case KeyRangeReleased():
                at = record.at_offset if record.at_offset >= 0 else offset
                history = with_release(
                    self._strict(topic), record.group, record.epoch, record.partition, record.broken, record.reason, at
                )
                self._changed[topic] = TopicKeyOrder("strict", history)
            case _:
                raise KeyOrderError(f"not a key-order record: {type(record).__name__}")

    def _replay_switch(self, topic: str, key_order: str) -> None:
        if key_order not in KEY_ORDERS:
            raise KeyOrderError(f"key_order must be one of {', '.join(KEY_ORDERS)}, not {key_order!r}")
        current = self._get(topic)
        now: KeyOrder = current.key_order if current is not None else "none"
        if key_order == now:
            raise KeyOrderError(f"topic {topic!r} is already {now}")
        if topic in self._pending:
            raise KeyOrderError(f"epoch {self._pending[topic].epoch} of topic {topic!r} is still incomplete")
        history = current.history if current is not None else None
        self._changed[topic] = TopicKeyOrder("strict" if key_order == "strict" else "none", history)
        if key_order == "strict":
            # the first epoch's records follow: until they complete, the topic has no map of this period
            self._pending[topic] = _Pending((history.epoch if history else 0) + 1, -1, "", [], restart=True)

    def _replay_epoch(self, topic: str, record: KeyOrderEpochStarted) -> None:
        pending = self._pending.get(topic)
        if pending is not None and pending.restart and pending.moves < 0:  # announced by the switch to strict
            if record.epoch != pending.epoch:
                raise KeyOrderError(f"topic {topic!r} goes strict at epoch {pending.epoch}, not {record.epoch}")
        else:
            history = self._strict(topic)
            if record.epoch != history.epoch + 1:
                raise KeyOrderError(f"epoch {record.epoch} of topic {topic!r} does not follow epoch {history.epoch}")
            pending = _Pending(record.epoch, -1, "", [], restart=False)
        if not 1 <= record.moves <= KEY_SLOTS:
            raise KeyOrderError(f"an epoch moves 1 to {KEY_SLOTS} ranges, not {record.moves}")
        pending.moves, pending.cause = record.moves, record.cause
        self._pending[topic] = pending

    def _replay_move(self, topic: str, record: KeyRangeMoved, partition_count: int) -> None:
        pending = self._pending.get(topic)
        if pending is None or pending.moves < 0 or record.epoch != pending.epoch:
            raise KeyOrderError(f"a range of epoch {record.epoch} of topic {topic!r} comes without its epoch")
        for field, p in (("to_partition", record.to_partition), ("from_partition", record.from_partition)):
            if not (0 <= p < partition_count or (field == "from_partition" and p == NO_PARTITION)):
                raise KeyOrderError(f"{field} {p} is not a partition of topic {topic!r}")
        pending.got.append(Move(record.first_slot, record.end_slot, record.from_partition, record.to_partition))
        if len(pending.got) < pending.moves:
            return
        del self._pending[topic]
        change = EpochChange(pending.epoch, tuple(pending.got), pending.cause)
        base = None if pending.restart else self._strict(topic)
        self._changed[topic] = TopicKeyOrder("strict", with_change(base, change))

    def apply(self) -> KeyOrders:
        """The key-order map after every replayed record (the base map itself when nothing changed)."""
        if self._pending:
            topic, pending = next(iter(self._pending.items()))
            raise InvalidRecord(
                f"epoch {pending.epoch} of topic {topic!r} announced {max(pending.moves, 0)} ranges; "
                f"the batch ends after {len(pending.got)}"
            )
        if not self._changed:
            return self._base
        out = dict(self._base)
        for topic, value in self._changed.items():
            if value is None:
                out.pop(topic, None)
            else:
                out[topic] = value
        return out


def epoch_records(topic: str, change: EpochChange) -> list[KeyOrderRecord]:
    """The records of one epoch change."""
    records: list[KeyOrderRecord] = [KeyOrderEpochStarted(topic, change.epoch, len(change.moves), change.cause)]
    records += (
        KeyRangeMoved(topic, change.epoch, m.first_slot, m.end_slot, m.from_partition, m.to_partition)
        for m in change.moves
    )
    return records


def snapshot_records(key_orders: KeyOrders) -> Iterator[KeyOrderRecord]:
    """The map as records that replay to an equal one, topic by topic (after the topics themselves): each
    change then the seals of its epoch (a seal is recorded only while its epoch is the latest), the releases
    with their original offsets, and a switch back to none last."""
    for name in sorted(key_orders):
        value = key_orders[name]
        history = value.history
        if history is None:
            continue
        yield TopicKeyOrderChanged(name, "strict")
        for change in history.changes:
            yield from epoch_records(name, change)
            for (epoch, partition), end in sorted(history.seals.items()):
                if epoch == change.epoch:
                    yield KeyOrderSealed(name, epoch, partition, end)
        for (group, epoch, partition), r in sorted(history.releases.items()):
            yield KeyRangeReleased(group, name, epoch, partition, r.broken, r.reason, r.at_offset)
        if value.key_order == "none":
            yield TopicKeyOrderChanged(name, "none")
