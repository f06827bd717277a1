"""Transactions across sub-clusters (docs/TRANSACTIONS.md): their part of the image, and its delta.

The value is ``txn.Transactions`` (producer id and epoch per transactional.id, its current or last
transaction with its participants and decision); the rules are ``txn.replay_into``, shared with the
coordinator's model test. This module only makes them a part of the image: a copy-on-write map per batch,
and a record that does not fit its state refused as ``InvalidRecord`` like any other.
"""

from __future__ import annotations

from ..records import TxnRecord
from ..txn import EMPTY_TRANSACTIONS, Transactions, TxnProducer, TxnRecordRejected, replay_into
from .common import InvalidRecord

__all__ = ["EMPTY_TRANSACTIONS", "Transactions", "TransactionsDelta"]


class TransactionsDelta:
    """Changes to the transactions of one batch over ``base``."""

    __slots__ = ("_base", "_next_pid", "_producers")

    def __init__(self, base: Transactions) -> None:
        self._base = base
        self._producers: dict[str, TxnProducer] | None = None
        self._next_pid = base.next_producer_id

    def replay(self, record: TxnRecord) -> None:
        if self._producers is None:
            self._producers = dict(self._base.producers)
        try:
            self._next_pid = replay_into(self._producers, self._next_pid, record)
        except TxnRecordRejected as e:
            raise InvalidRecord(str(e)) from None

    def apply(self) -> Transactions:
        if self._producers is None:
            return self._base
        return Transactions(self._producers, self._next_pid)
