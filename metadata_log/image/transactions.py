"""Transactions across sub-clusters (docs/TRANSACTIONS.md): the coordinator's state in the image, and its replay.

A transaction spans physical partitions on several sub-clusters. Each cluster's part is that cluster's own Kafka
transaction (transactional id ``participant_transactional_id(tid, cluster)``); the quorum decides for all of them.
The state per transactional.id is its producer id and epoch and its current or last transaction, with its
participants and decision (``TxnProducer``, ``Transaction``); the rules that make records are
``metadata_log.commands.transactions``. Replay re-checks each record against the state (the decision is one
record and final; a fenced epoch adds nothing), so two writers validated against the same image cannot both win:
a record that does not fit is ``InvalidRecord``. ``snapshot_records`` writes the state back as records, and
``completion_tasks`` reads from it what the participant driver must still do.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from typing import Final, Literal

from ..records import (
    TxnDecided,
    TxnGroupAdded,
    TxnParticipantCompleted,
    TxnPartitionAdded,
    TxnProducerInitialized,
    TxnProducerRestored,
    TxnRecord,
    TxnRestored,
)
from .common import InvalidRecord
from .topics import PartitionLocation

TxnState = Literal["ongoing", "committing", "aborting", "complete_commit", "complete_abort"]
"""Kafka's TransactionState without its Empty (no transaction yet: ``TxnProducer.txn is None``) and
PrepareEpochFence (here a fence is its own record). committing/aborting = decided, completion pending."""

MAX_EPOCH: Final = 32766
"""Kafka's producer epoch is an int16 and it moves to a new producer id at Short.MAX_VALUE - 1; so do we,
so that a gateway can hand these ids to Kafka clients unchanged."""
PARTICIPANT_TRANSACTION_TIMEOUT_MS: Final = 900_000
"""The transaction.timeout.ms of each participant's Kafka transaction (a broker's default
transaction.max.timeout.ms): it must outlive the federated transaction's decision and completion, so that
Kafka never aborts a part the log decided to commit (docs/TRANSACTIONS.md)."""


@dataclass(frozen=True, slots=True)
class Transaction:
    """The current or last transaction of a transactional.id, named by (producer_id, epoch, sequence)."""

    producer_id: int
    epoch: int
    sequence: int
    state: TxnState
    started_at_ms: int
    partitions: frozenset[PartitionLocation] = frozenset()  # where it wrote
    groups: frozenset[tuple[str, str]] = frozenset()  # (cluster_id, group)
    pending: frozenset[str] = frozenset()  # decided: clusters not completed yet
    decided_at_ms: int | None = None
    reason: str = ""

    @property
    def clusters(self) -> frozenset[str]:
        """Every participant cluster: where it wrote, and where it commits group offsets."""
        return frozenset(p.cluster_id for p in self.partitions) | frozenset(c for c, _ in self.groups)

    @property
    def decided(self) -> bool:
        return self.state != "ongoing"

    @property
    def complete(self) -> bool:
        return self.state in ("complete_commit", "complete_abort")

    @property
    def commit(self) -> bool:
        """The decision (meaningful once decided)."""
        return self.state in ("committing", "complete_commit")


@dataclass(frozen=True, slots=True)
class TxnProducer:
    transactional_id: str
    producer_id: int
    epoch: int
    timeout_ms: int
    initialized_at_ms: int
    txn: Transaction | None = None

    def owns(self, txn: Transaction) -> bool:
        """Whether ``txn`` ran under this producer's current epoch (its owner is not fenced)."""
        return (txn.producer_id, txn.epoch) == (self.producer_id, self.epoch)


@dataclass(frozen=True, slots=True)
class Transactions:
    """The coordinator's state: one entry per transactional.id, and the next free producer id."""

    producers: Mapping[str, TxnProducer] = field(default_factory=dict)
    next_producer_id: int = 0


EMPTY_TRANSACTIONS: Final = Transactions()


@dataclass(frozen=True, slots=True)
class CompletionTask:
    """End ``transactional_id``'s part on ``cluster_id`` as decided, then log ``TxnParticipantCompleted``."""

    transactional_id: str
    producer_id: int
    epoch: int
    sequence: int
    cluster_id: str
    commit: bool


def participant_transactional_id(transactional_id: str, cluster_id: str) -> str:
    """The Kafka transactional.id of ``transactional_id``'s part on ``cluster_id``: one per cluster, so each
    cluster's transaction coordinator fences that cluster's producers of this transactional.id."""
    return f"{transactional_id}@{cluster_id}"


def replay(txns: Transactions, records: Iterable[TxnRecord]) -> Transactions:
    """The state after ``records`` (a batch: all or nothing). Raises ``InvalidRecord``."""
    producers = dict(txns.producers)
    next_pid = txns.next_producer_id
    for record in records:
        next_pid = replay_into(producers, next_pid, record)
    return Transactions(producers, next_pid)


def replay_into(producers: dict[str, TxnProducer], next_pid: int, record: TxnRecord) -> int:
    """Fold one record into ``producers`` (the caller's copy); returns the next free producer id. Raises
    ``InvalidRecord`` and then leaves ``producers`` as it was."""
    if isinstance(record, TxnProducerInitialized):
        return _replay_init(producers, next_pid, record)
    if isinstance(record, TxnProducerRestored):
        current = producers.get(record.transactional_id)
        if not 0 <= record.epoch <= MAX_EPOCH or record.producer_id < 0:
            raise InvalidRecord(f"producer {record.producer_id} epoch {record.epoch} is out of range")
        producers[record.transactional_id] = TxnProducer(
            record.transactional_id,
            record.producer_id,
            record.epoch,
            record.timeout_ms,
            record.at_ms,
            current.txn if current is not None else None,
        )
        return max(next_pid, record.producer_id + 1)
    producer = producers.get(record.transactional_id)
    if producer is None:
        raise InvalidRecord(f"transactional id {record.transactional_id!r} was never initialized")
    if isinstance(record, TxnRestored):
        if (record.producer_id, record.epoch) != (producer.producer_id, producer.epoch):
            raise InvalidRecord(f"{record.transactional_id!r}: a restored transaction must be the producer's")
        txn = Transaction(record.producer_id, record.epoch, record.sequence, "ongoing", record.started_at_ms)
    elif isinstance(record, TxnDecided):
        txn = _replay_decided(producer, record)
    elif isinstance(record, TxnParticipantCompleted):
        txn = _replay_completed(producer, record)
    else:
        txn = _replay_add(producer, record)
    producers[record.transactional_id] = replace(producer, txn=txn)
    return next_pid


def snapshot_records(txns: Transactions) -> Iterator[TxnRecord]:
    """Records that rebuild ``txns`` from ``EMPTY_TRANSACTIONS`` (a snapshot): per transactional.id, its
    transaction replayed under the epoch that ran it (restored, its partitions and groups added, decided,
    completed where it is), then the producer as it is now. ``next_producer_id`` follows: producer ids are
    handed out in order and the newest is always some producer's current one."""
    for producer in sorted(txns.producers.values(), key=lambda p: p.producer_id):
        tid, txn = producer.transactional_id, producer.txn
        if txn is not None:
            yield TxnProducerRestored(tid, txn.producer_id, txn.epoch, producer.timeout_ms, producer.initialized_at_ms)
            yield TxnRestored(tid, txn.producer_id, txn.epoch, txn.sequence, txn.started_at_ms)
            key = (tid, txn.producer_id, txn.epoch, txn.sequence)
            for p in sorted(txn.partitions):
                yield TxnPartitionAdded(*key, *p, txn.started_at_ms)
            for cluster_id, group in sorted(txn.groups):
                yield TxnGroupAdded(*key, cluster_id, group, txn.started_at_ms)
            if txn.decided:
                yield TxnDecided(*key, txn.commit, txn.reason, txn.decided_at_ms or 0)
                for cluster_id in sorted(txn.clusters - txn.pending):
                    yield TxnParticipantCompleted(*key, cluster_id)
        yield TxnProducerRestored(
            tid, producer.producer_id, producer.epoch, producer.timeout_ms, producer.initialized_at_ms
        )


def _replay_init(producers: dict[str, TxnProducer], next_pid: int, r: TxnProducerInitialized) -> int:
    current = producers.get(r.transactional_id)
    if r.producer_id == next_pid:
        if r.epoch != 0:
            raise InvalidRecord(f"a new producer id starts at epoch 0, not {r.epoch}")
        next_pid += 1
    elif current is None or r.producer_id != current.producer_id or r.epoch != current.epoch + 1:
        raise InvalidRecord(
            f"{r.transactional_id!r} cannot move to producer {r.producer_id} epoch {r.epoch}: neither the next "
            f"epoch of its producer nor the next free producer id ({next_pid})"
        )
    if not 0 <= r.epoch <= MAX_EPOCH:
        raise InvalidRecord(f"epoch {r.epoch} is outside 0..{MAX_EPOCH}")
    txn = current.txn if current is not None else None
    producers[r.transactional_id] = TxnProducer(r.transactional_id, r.producer_id, r.epoch, r.timeout_ms, r.at_ms, txn)
    return next_pid


def _same_txn(
    txn: Transaction | None, r: TxnPartitionAdded | TxnGroupAdded | TxnDecided | TxnParticipantCompleted
) -> bool:
    return txn is not None and (txn.producer_id, txn.epoch, txn.sequence) == (r.producer_id, r.epoch, r.sequence)


def _replay_add(producer: TxnProducer, r: TxnPartitionAdded | TxnGroupAdded) -> Transaction:
    if (r.producer_id, r.epoch) != (producer.producer_id, producer.epoch):
        raise InvalidRecord(f"{r.transactional_id!r}: epoch {r.epoch} of producer {r.producer_id} is fenced")
    txn = producer.txn
    if _same_txn(txn, r):
        assert txn is not None  # for mypy: _same_txn checked it
        if txn.decided:
            raise InvalidRecord(f"{r.transactional_id!r}: transaction {r.sequence} is already decided")
    else:
        expected = txn.sequence + 1 if txn is not None and producer.owns(txn) else 0
        if r.sequence != expected:
            raise InvalidRecord(f"{r.transactional_id!r}: the next transaction is {expected}, not {r.sequence}")
        if txn is not None and not txn.complete:
            raise InvalidRecord(f"{r.transactional_id!r}: transaction {txn.sequence} is not complete")
        txn = Transaction(r.producer_id, r.epoch, r.sequence, "ongoing", r.at_ms)
    if isinstance(r, TxnPartitionAdded):
        part = PartitionLocation(r.cluster_id, r.physical_topic, r.physical_partition)
        return replace(txn, partitions=txn.partitions | {part})
    return replace(txn, groups=txn.groups | {(r.cluster_id, r.group)})


def _replay_decided(producer: TxnProducer, r: TxnDecided) -> Transaction:
    txn = producer.txn
    if txn is None or not _same_txn(txn, r):
        raise InvalidRecord(f"{r.transactional_id!r} has no transaction {r.producer_id}/{r.epoch}/{r.sequence}")
    if txn.decided:
        raise InvalidRecord(f"{r.transactional_id!r}: transaction {r.sequence} is already decided (final)")
    if r.commit and not producer.owns(txn):
        raise InvalidRecord(f"{r.transactional_id!r}: a fenced epoch ({r.epoch}) cannot commit")
    pending = txn.clusters
    state: TxnState
    if r.commit:
        state = "committing" if pending else "complete_commit"
    else:
        state = "aborting" if pending else "complete_abort"
    return replace(txn, state=state, pending=pending, decided_at_ms=r.at_ms, reason=r.reason)


def _replay_completed(producer: TxnProducer, r: TxnParticipantCompleted) -> Transaction:
    txn = producer.txn
    if txn is None or not _same_txn(txn, r) or not txn.decided:
        raise InvalidRecord(f"{r.transactional_id!r}: no decided transaction {r.sequence} to complete")
    if r.cluster_id not in txn.pending:
        raise InvalidRecord(f"{r.transactional_id!r}: {r.cluster_id!r} is not pending in transaction {r.sequence}")
    pending = txn.pending - {r.cluster_id}
    state = txn.state
    if not pending:
        state = "complete_commit" if txn.commit else "complete_abort"
    return replace(txn, pending=pending, state=state)


def completion_tasks(txns: Transactions) -> tuple[CompletionTask, ...]:
    """What the participant driver must do: each pending participant of each decided transaction whose
    owner is fenced. An owner that is not fenced completes its own transactions (see the module doc)."""
    tasks: list[CompletionTask] = []
    for producer in txns.producers.values():
        txn = producer.txn
        if txn is None or not txn.decided or txn.complete or producer.owns(txn):
            continue
        for cluster_id in sorted(txn.pending):
            tasks.append(
                CompletionTask(
                    producer.transactional_id, txn.producer_id, txn.epoch, txn.sequence, cluster_id, txn.commit
                )
            )
    return tuple(tasks)


class TransactionsDelta:
    """Changes to the transactions of one batch over ``base`` (a copy-on-write map of producers)."""

    __slots__ = ("_base", "_next_pid", "_producers")

    def __init__(self, base: Transactions) -> None:
        self._base = base
        self._producers: dict[str, TxnProducer] | None = None
        self._next_pid = base.next_producer_id

    def replay(self, record: TxnRecord) -> None:
        if self._producers is None:
            self._producers = dict(self._base.producers)
        self._next_pid = replay_into(self._producers, self._next_pid, record)

    def apply(self) -> Transactions:
        if self._producers is None:
            return self._base
        return Transactions(self._producers, self._next_pid)
