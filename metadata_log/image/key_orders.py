"""The key-order part of the image (``docs/KEY_ORDER.md``): per topic that was ever strict, its
routing epochs, seals and releases (``TopicKeyOrder``). A topic absent from the map is ``key_order: none``.

The replay itself is ``metadata_log.image.key_order_replay`` (pure, shared with the commands that check a change
before proposing it); this part adapts it to the delta: the log offset of each record, the topic's partition
count as replayed so far in the batch, and ``InvalidRecord`` for a record that does not fit.
"""

from __future__ import annotations

from collections.abc import Callable

from ..records import KeyOrderRecord
from .common import InvalidRecord
from .key_order_history import KeyOrderError
from .key_order_replay import EMPTY_KEY_ORDERS, KeyOrderDelta, KeyOrders, TopicKeyOrder

__all__ = ["EMPTY_KEY_ORDERS", "KeyOrders", "KeyOrdersDelta", "TopicKeyOrder"]


class KeyOrdersDelta:
    """Key-order changes of one batch. ``partition_count(topic)``: its logical partitions as replayed so far
    (None: no such topic)."""

    __slots__ = ("_delta", "_partition_count")

    def __init__(self, base: KeyOrders, partition_count: Callable[[str], int | None]) -> None:
        self._delta = KeyOrderDelta(base)
        self._partition_count = partition_count

    def replay(self, record: KeyOrderRecord, offset: int) -> None:
        """Fold in one record, which takes log ``offset``."""
        try:
            self._delta.replay(record, offset, self._partition_count(record.topic))
        except KeyOrderError as e:
            raise InvalidRecord(str(e)) from None

    def forget(self, topic: str) -> None:
        """The topic was deleted."""
        self._delta.forget(topic)

    def apply(self) -> KeyOrders:
        try:
            return self._delta.apply()
        except KeyOrderError as e:
            raise InvalidRecord(str(e)) from None
