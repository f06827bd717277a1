"""The transaction coordinator of kfed, as pure state and pure functions (docs/TRANSACTIONS.md).

A transaction spans physical partitions on several sub-clusters. Each cluster's part is that cluster's own
Kafka transaction (transactional id ``participant_transactional_id(tid, cluster)``); the quorum decides for
all of them. The contract:

- **The epoch fences.** ``init_producer`` gives a transactional.id a new (producer_id, epoch); a request
  carrying an older one is refused (``PRODUCER_FENCED``). Only the owner, at the current epoch, may add
  partitions or decide *commit*; anybody may decide *abort* of a transaction that is not decided yet.
- **Register before writing.** A producer logs each physical partition (``TxnPartitionAdded``) before it
  writes to it, as Kafka's AddPartitionsToTxn, so the coordinator knows every cluster it may have to end
  the transaction on. The owner's "prepare" is its flush: every write acknowledged; it needs no record.
- **The decision is one record and final.** ``TxnDecided`` is appended once per transaction; ``replay``
  refuses a second one, so a commit racing a timeout abort loses at apply time whichever was validated
  first. What follows a decision is completion: one ``TxnParticipantCompleted`` per participant cluster.
- **Completion is taken over only from a fenced owner.** Kafka participants keep one producer epoch
  across transactions (librdkafka runs transaction version 1), so ending a participant's transaction by
  its producer id and epoch could end the owner's *next* transaction there. The driver therefore only
  completes transactions whose owner's epoch has moved on (``completion_tasks``): a fenced owner can
  register nothing more, so nothing but the decided transaction can be open on a participant.
- **Time comes in.** ``expire`` takes the clock: an undecided transaction past its ``timeout_ms`` is
  fenced and aborted; a decided one its owner leaves incomplete past ``completion_grace_ms`` is fenced,
  which hands it to the driver. The records carry the proposer's wall clock; replay reads no clock.

Only the records of ``records.py`` enter the log; everything here is recomputed from them by ``replay``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, Literal

from .errors import Conflict, CorruptData, InvalidRequest, NotFound
from .records import (
    TxnDecided,
    TxnGroupAdded,
    TxnParticipantCompleted,
    TxnPartitionAdded,
    TxnProducerInitialized,
    TxnProducerRestored,
    TxnRecord,
    TxnRestored,
)

TxnState = Literal["ongoing", "committing", "aborting", "complete_commit", "complete_abort"]
"""Kafka's TransactionState without its Empty (no transaction yet: ``TxnProducer.txn is None``) and
PrepareEpochFence (here a fence is its own record). committing/aborting = decided, completion pending."""

MAX_EPOCH: Final = 32766
"""Kafka's producer epoch is an int16 and it moves to a new producer id at Short.MAX_VALUE - 1; so do we,
so that a gateway can hand these ids to Kafka clients unchanged."""
MAX_TRANSACTIONAL_ID_CHARS: Final = 249
"""A transactional.id names per-cluster Kafka transactional ids (``participant_transactional_id``)."""
MAX_TRANSACTION_TIMEOUT_MS: Final = 900_000
"""Longest undecided transaction (Kafka's default transaction.max.timeout.ms): it holds back every
read_committed consumer of its partitions until it ends."""
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 60_000
"""confluent-kafka's transaction.timeout.ms default."""
DEFAULT_COMPLETION_GRACE_MS: Final = 30_000
"""How long the owner of a decided transaction has to complete it on every participant before the
coordinator fences it and completes the transaction itself."""
PARTICIPANT_TRANSACTION_TIMEOUT_MS: Final = 900_000
"""The transaction.timeout.ms of each participant's Kafka transaction (a broker's default
transaction.max.timeout.ms): it must outlive the federated transaction's decision and completion, so that
Kafka never aborts a part the log decided to commit (docs/TRANSACTIONS.md)."""
MAX_PARTITIONS_PER_TRANSACTION: Final = 10_000
"""Most physical partitions plus groups in one transaction: bounds the records a transaction writes."""
MAX_REASON_CHARS: Final = 200
MAX_EXPIRIES_PER_CALL: Final = 1_000
"""Most producers ``expire`` fences in one call, so one Raft command stays small; the rest go next tick."""

_CLUSTER_FIELD: Final = "cluster_id"


class TxnRecordRejected(CorruptData, ValueError):
    """A transaction record that does not fit the state (the image turns it into ``InvalidRecord``)."""


@dataclass(frozen=True, slots=True, order=True)
class TxnPartition:
    """One physical partition of a transaction (not a record: a value)."""

    cluster_id: str
    physical_topic: str
    physical_partition: int


@dataclass(frozen=True, slots=True)
class Transaction:
    """The current or last transaction of a transactional.id, named by (producer_id, epoch, sequence)."""

    producer_id: int
    epoch: int
    sequence: int
    state: TxnState
    started_at_ms: int
    partitions: frozenset[TxnPartition] = frozenset()
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
class Result:
    records: tuple[TxnRecord, ...]
    reply: dict[str, Any] = field(default_factory=dict)


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


# -- replay: record -> state ------------------------------------------------------------------------------


def replay(txns: Transactions, records: Iterable[TxnRecord]) -> Transactions:
    """The state after ``records`` (a batch: all or nothing). Raises ``TxnRecordRejected``."""
    producers = dict(txns.producers)
    next_pid = txns.next_producer_id
    for record in records:
        next_pid = replay_into(producers, next_pid, record)
    return Transactions(producers, next_pid)


def replay_into(producers: dict[str, TxnProducer], next_pid: int, record: TxnRecord) -> int:
    """Fold one record into ``producers`` (the caller's copy); returns the next free producer id. Raises
    ``TxnRecordRejected`` and then leaves ``producers`` as it was."""
    if isinstance(record, TxnProducerInitialized):
        return _replay_init(producers, next_pid, record)
    if isinstance(record, TxnProducerRestored):
        current = producers.get(record.transactional_id)
        if not 0 <= record.epoch <= MAX_EPOCH or record.producer_id < 0:
            raise TxnRecordRejected(f"producer {record.producer_id} epoch {record.epoch} is out of range")
        producers[record.transactional_id] = TxnProducer(record.transactional_id, record.producer_id, record.epoch,
            record.timeout_ms, record.at_ms, current.txn if current is not None else None)  # fmt: skip
        return max(next_pid, record.producer_id + 1)
    producer = producers.get(record.transactional_id)
    if producer is None:
        raise TxnRecordRejected(f"transactional id {record.transactional_id!r} was never initialized")
    if isinstance(record, TxnRestored):
        if (record.producer_id, record.epoch) != (producer.producer_id, producer.epoch):
            raise TxnRecordRejected(f"{record.transactional_id!r}: a restored transaction must be the producer's")
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
                yield TxnPartitionAdded(*key, *_fields(p), txn.started_at_ms)
            for cluster_id, group in sorted(txn.groups):
                yield TxnGroupAdded(*key, cluster_id, group, txn.started_at_ms)
            if txn.decided:
                yield TxnDecided(*key, txn.commit, txn.reason, txn.decided_at_ms or 0)
                for cluster_id in sorted(txn.clusters - txn.pending):
                    yield TxnParticipantCompleted(*key, cluster_id)
        yield TxnProducerRestored(tid, producer.producer_id, producer.epoch, producer.timeout_ms,
                                  producer.initialized_at_ms)  # fmt: skip


def _replay_init(producers: dict[str, TxnProducer], next_pid: int, r: TxnProducerInitialized) -> int:
    current = producers.get(r.transactional_id)
    if r.producer_id == next_pid:
        if r.epoch != 0:
            raise TxnRecordRejected(f"a new producer id starts at epoch 0, not {r.epoch}")
        next_pid += 1
    elif current is None or r.producer_id != current.producer_id or r.epoch != current.epoch + 1:
        raise TxnRecordRejected(
            f"{r.transactional_id!r} cannot move to producer {r.producer_id} epoch {r.epoch}: neither the next "
            f"epoch of its producer nor the next free producer id ({next_pid})"
        )
    if not 0 <= r.epoch <= MAX_EPOCH:
        raise TxnRecordRejected(f"epoch {r.epoch} is outside 0..{MAX_EPOCH}")
    txn = current.txn if current is not None else None
    producers[r.transactional_id] = TxnProducer(r.transactional_id, r.producer_id, r.epoch, r.timeout_ms, r.at_ms, txn)
    return next_pid


def _same_txn(
    txn: Transaction | None, r: TxnPartitionAdded | TxnGroupAdded | TxnDecided | TxnParticipantCompleted
) -> bool:
    return txn is not None and (txn.producer_id, txn.epoch, txn.sequence) == (r.producer_id, r.epoch, r.sequence)


def _replay_add(producer: TxnProducer, r: TxnPartitionAdded | TxnGroupAdded) -> Transaction:
    if (r.producer_id, r.epoch) != (producer.producer_id, producer.epoch):
        raise TxnRecordRejected(f"{r.transactional_id!r}: epoch {r.epoch} of producer {r.producer_id} is fenced")
    txn = producer.txn
    if _same_txn(txn, r):
        assert txn is not None  # for mypy: _same_txn checked it
        if txn.decided:
            raise TxnRecordRejected(f"{r.transactional_id!r}: transaction {r.sequence} is already decided")
    else:
        expected = txn.sequence + 1 if txn is not None and producer.owns(txn) else 0
        if r.sequence != expected:
            raise TxnRecordRejected(f"{r.transactional_id!r}: the next transaction is {expected}, not {r.sequence}")
        if txn is not None and not txn.complete:
            raise TxnRecordRejected(f"{r.transactional_id!r}: transaction {txn.sequence} is not complete")
        txn = Transaction(r.producer_id, r.epoch, r.sequence, "ongoing", r.at_ms)
    if isinstance(r, TxnPartitionAdded):
        part = TxnPartition(r.cluster_id, r.physical_topic, r.physical_partition)
        return replace(txn, partitions=txn.partitions | {part})
    return replace(txn, groups=txn.groups | {(r.cluster_id, r.group)})


def _replay_decided(producer: TxnProducer, r: TxnDecided) -> Transaction:
    txn = producer.txn
    if txn is None or not _same_txn(txn, r):
        raise TxnRecordRejected(f"{r.transactional_id!r} has no transaction {r.producer_id}/{r.epoch}/{r.sequence}")
    if txn.decided:
        raise TxnRecordRejected(f"{r.transactional_id!r}: transaction {r.sequence} is already decided (final)")
    if r.commit and not producer.owns(txn):
        raise TxnRecordRejected(f"{r.transactional_id!r}: a fenced epoch ({r.epoch}) cannot commit")
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
        raise TxnRecordRejected(f"{r.transactional_id!r}: no decided transaction {r.sequence} to complete")
    if r.cluster_id not in txn.pending:
        raise TxnRecordRejected(f"{r.transactional_id!r}: {r.cluster_id!r} is not pending in transaction {r.sequence}")
    pending = txn.pending - {r.cluster_id}
    state = txn.state
    if not pending:
        state = "complete_commit" if txn.commit else "complete_abort"
    return replace(txn, pending=pending, state=state)


# -- commands: request -> records + reply -----------------------------------------------------------------


def _fenced(transactional_id: str, producer: TxnProducer, producer_id: int, epoch: int) -> Conflict:
    return Conflict(
        f"producer {producer_id} epoch {epoch} of {transactional_id!r} is fenced: producer {producer.producer_id} "
        f"epoch {producer.epoch} took over",
        field="epoch",
        kafka_error="PRODUCER_FENCED",
    )


def _producer(txns: Transactions, transactional_id: str) -> TxnProducer:
    producer = txns.producers.get(transactional_id)
    if producer is None:
        raise NotFound(
            f"transactional id {transactional_id!r} is not initialized: call init_transactions first",
            field="transactional_id",
            kafka_error="INVALID_PRODUCER_ID_MAPPING",
        )
    return producer


def _owner(txns: Transactions, transactional_id: str, producer_id: int, epoch: int) -> TxnProducer:
    producer = _producer(txns, transactional_id)
    if (producer_id, epoch) != (producer.producer_id, producer.epoch):
        raise _fenced(transactional_id, producer, producer_id, epoch)
    return producer


def check_transactional_id(value: Any) -> str:
    if not isinstance(value, str) or not value or not value.isprintable():
        raise InvalidRequest("transactional_id", "transactional_id must be a non-empty printable string")
    if len(value) > MAX_TRANSACTIONAL_ID_CHARS:
        raise InvalidRequest("transactional_id", f"transactional_id is longer than {MAX_TRANSACTIONAL_ID_CHARS}")
    if "@" in value:
        raise InvalidRequest("transactional_id", "transactional_id may not contain '@' (it names per-cluster ids)")
    return value


def _check_int(value: Any, field_name: str, low: int, high: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise InvalidRequest(field_name, f"{field_name} must be an integer in {low}..{high}")
    return value


def _next_identity(txns: Transactions, producer: TxnProducer | None) -> tuple[int, int]:
    """The (producer_id, epoch) after ``producer``'s: the next epoch, or a new id once epochs run out."""
    if producer is None or producer.epoch >= MAX_EPOCH:
        return txns.next_producer_id, 0
    return producer.producer_id, producer.epoch + 1


def _fence(
    txns: Transactions, producer: TxnProducer, reason: str, at_ms: int, next_pid: int | None = None
) -> tuple[TxnRecord, ...]:
    """The records that fence ``producer``'s epoch, aborting its transaction if it is still undecided."""
    free = txns.next_producer_id if next_pid is None else next_pid
    pid, epoch = _next_identity(replace(txns, next_producer_id=free), producer)
    records: list[TxnRecord] = [
        TxnProducerInitialized(producer.transactional_id, pid, epoch, producer.timeout_ms, at_ms)
    ]
    txn = producer.txn
    if txn is not None and not txn.decided:
        records.append(
            TxnDecided(producer.transactional_id, txn.producer_id, txn.epoch, txn.sequence, False, reason, at_ms)
        )
    return tuple(records)


def init_producer(txns: Transactions, transactional_id: str, timeout_ms: int, at_ms: int) -> Result:
    """init_transactions: a new epoch for ``transactional_id``, fencing every older instance. Its undecided
    transaction is aborted with it; a decided one keeps completing (the reply lists where), and the new
    owner's first transaction waits for it (``CONCURRENT_TRANSACTIONS``)."""
    check_transactional_id(transactional_id)
    _check_int(timeout_ms, "timeout_ms", 1, MAX_TRANSACTION_TIMEOUT_MS)
    current = txns.producers.get(transactional_id)
    if current is None:
        pid, epoch = _next_identity(txns, None)
        records: tuple[TxnRecord, ...] = (TxnProducerInitialized(transactional_id, pid, epoch, timeout_ms, at_ms),)
    else:
        records = _fence(txns, replace(current, timeout_ms=timeout_ms), "fenced by a new producer instance", at_ms)
    after = replay(txns, records).producers[transactional_id]
    return Result(records, producer_view(after))


def add_to_transaction(
    txns: Transactions,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    at_ms: int,
    partitions: Sequence[TxnPartition] = (),
    groups: Sequence[tuple[str, str]] = (),
    completed: Collection[str] = (),
    refusal: Callable[[str], str | None] = lambda cluster_id: None,
) -> Result:
    """Register ``partitions`` and group offsets ``groups`` (cluster_id, group) in transaction ``sequence``
    before writing to them; the first registration of a sequence starts it. ``completed``: the clusters on
    which the owner itself completed its previous transaction (logged in the same batch). ``refusal`` says
    why a cluster cannot take part (unknown, Tansu, ...), or None."""
    producer = _owner(txns, transactional_id, producer_id, epoch)
    _check_int(sequence, "sequence", 0, 2**62)
    if len(partitions) + len(groups) > MAX_PARTITIONS_PER_TRANSACTION:
        raise InvalidRequest(
            "partitions", f"at most {MAX_PARTITIONS_PER_TRANSACTION} partitions and groups per request"
        )
    wanted = [(f"partitions.{i}", p.cluster_id) for i, p in enumerate(partitions)]
    wanted += [(f"groups.{i}", cluster_id) for i, (cluster_id, _) in enumerate(groups)]
    for field_name, cluster_id in wanted:
        reason = refusal(cluster_id)
        if reason is not None:
            raise Conflict(
                f"cluster {cluster_id!r} cannot take part in a transaction: {reason}",
                field=f"{field_name}.{_CLUSTER_FIELD}",
                kafka_error="_UNSUPPORTED_FEATURE",
            )
    for i, p in enumerate(partitions):
        _check_int(p.physical_partition, f"partitions.{i}.physical_partition", 0, 2**31 - 1)
    records: list[TxnRecord] = []
    txn = producer.txn
    if txn is not None and (txn.producer_id, txn.epoch, txn.sequence) == (producer_id, epoch, sequence):
        if txn.decided:
            raise Conflict(
                f"transaction {sequence} of {transactional_id!r} is already decided ({txn.state})",
                field="sequence",
                kafka_error="INVALID_TXN_STATE",
            )
    else:
        expected = txn.sequence + 1 if txn is not None and producer.owns(txn) else 0
        if sequence != expected:
            raise InvalidRequest("sequence", f"the next transaction of {transactional_id!r} is {expected}")
        if txn is not None and not txn.complete:
            records += _own_completions(transactional_id, txn, producer, completed)
            missing = sorted(txn.pending - set(completed)) if txn.decided else []
            if not txn.decided or missing:
                raise Conflict(
                    f"transaction {txn.sequence} of {transactional_id!r} is still {txn.state}"
                    + (f" on {', '.join(missing)}" if missing else ""),
                    field="sequence",
                    kafka_error="CONCURRENT_TRANSACTIONS",
                )
        txn = None
    known = (txn.partitions, txn.groups) if txn is not None else (frozenset(), frozenset())
    for p in sorted(set(partitions) - known[0]):
        records.append(TxnPartitionAdded(transactional_id, producer_id, epoch, sequence, *_fields(p), at_ms))
    for cluster_id, group in sorted(set(groups) - known[1]):
        records.append(TxnGroupAdded(transactional_id, producer_id, epoch, sequence, cluster_id, group, at_ms))
    after = replay(txns, records).producers[transactional_id]
    return Result(tuple(records), producer_view(after))


def _fields(p: TxnPartition) -> tuple[str, str, int]:
    return p.cluster_id, p.physical_topic, p.physical_partition


def _own_completions(
    transactional_id: str, txn: Transaction, producer: TxnProducer, completed: Collection[str]
) -> list[TxnRecord]:
    """The owner's report that its previous, decided transaction ended on ``completed`` clusters."""
    if not txn.decided or not producer.owns(txn):
        return []
    return [
        TxnParticipantCompleted(transactional_id, txn.producer_id, txn.epoch, txn.sequence, cluster_id)
        for cluster_id in sorted(txn.pending & set(completed))
    ]


def end_transaction(
    txns: Transactions,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    commit: bool,
    at_ms: int,
) -> Result:
    """commit_transaction / abort_transaction by the owner: the decision. The current epoch only (no zombie
    commits; the coordinator's own aborts come from ``expire``); the same decision again is a no-op (a retry
    after an unknown outcome), the other one is refused."""
    producer = _owner(txns, transactional_id, producer_id, epoch)
    txn = producer.txn
    if txn is None or (txn.producer_id, txn.epoch, txn.sequence) != (producer_id, epoch, sequence):
        # Also when this node's state is behind the caller's registration: a "nothing to decide" here would
        # let the caller end participant transactions that the log never decided (a producer that
        # registered nothing has nothing to decide and does not ask).
        raise Conflict(
            f"{transactional_id!r} has no transaction {producer_id}/{epoch}/{sequence}",
            field="sequence",
            kafka_error="INVALID_TXN_STATE",
        )
    if txn.decided:
        if txn.commit == commit:
            return Result((), producer_view(producer))
        raise Conflict(
            f"transaction {sequence} of {transactional_id!r} was already decided: {txn.state} ({txn.reason})",
            field="commit",
            kafka_error="INVALID_TXN_STATE",
        )
    reason = "committed by its producer" if commit else "aborted by its producer"
    records: tuple[TxnRecord, ...] = (
        TxnDecided(transactional_id, producer_id, epoch, sequence, commit, reason, at_ms),
    )
    after = replay(txns, records).producers[transactional_id]
    return Result(records, producer_view(after))


def complete_participant(
    txns: Transactions, transactional_id: str, producer_id: int, epoch: int, sequence: int, cluster_id: str
) -> Result:
    """A participant cluster ended its part of a decided transaction; again is a no-op."""
    producer = _producer(txns, transactional_id)
    txn = producer.txn
    if txn is None or (txn.producer_id, txn.epoch, txn.sequence) != (producer_id, epoch, sequence):
        raise Conflict(
            f"{transactional_id!r} has no transaction {producer_id}/{epoch}/{sequence} to complete",
            field="sequence",
            kafka_error="INVALID_TXN_STATE",
        )
    if not txn.decided:
        raise Conflict(f"transaction {sequence} of {transactional_id!r} is not decided", field="sequence")
    if cluster_id not in txn.pending:
        if cluster_id in txn.clusters:
            return Result((), producer_view(producer))
        raise NotFound(f"{cluster_id!r} is no participant of transaction {sequence}", field=_CLUSTER_FIELD)
    records: tuple[TxnRecord, ...] = (
        TxnParticipantCompleted(transactional_id, producer_id, epoch, sequence, cluster_id),
    )
    return Result(records, producer_view(replay(txns, records).producers[transactional_id]))


# -- the leader's periodic decisions ----------------------------------------------------------------------


def expire(
    txns: Transactions, now_ms: int, completion_grace_ms: int = DEFAULT_COMPLETION_GRACE_MS
) -> tuple[TxnRecord, ...]:
    """Records the coordinator proposes at ``now_ms`` (its wall clock): fence and abort each undecided
    transaction past its timeout (or whose owner is already fenced); fence the owner of each decided
    transaction still incomplete ``completion_grace_ms`` after its decision, which hands it to the driver."""
    records: list[TxnRecord] = []
    next_pid = txns.next_producer_id
    fenced = 0
    for producer in txns.producers.values():
        txn = producer.txn
        if txn is None or txn.complete or fenced >= MAX_EXPIRIES_PER_CALL:
            continue
        owned = producer.owns(txn)
        if not txn.decided and not owned:
            records.append(
                TxnDecided(
                    producer.transactional_id,
                    txn.producer_id,
                    txn.epoch,
                    txn.sequence,
                    False,
                    "its producer was fenced",
                    now_ms,
                )
            )
            fenced += 1
        elif not txn.decided and now_ms >= txn.started_at_ms + producer.timeout_ms:
            reason = f"transaction.timeout.ms ({producer.timeout_ms}) passed"
            fence = _fence(txns, producer, reason, now_ms, next_pid)
            records += fence
            next_pid = max(next_pid, _pid_after(fence))
            fenced += 1
        elif (
            txn.decided
            and owned
            and txn.decided_at_ms is not None
            and now_ms >= txn.decided_at_ms + completion_grace_ms
        ):
            fence = _fence(txns, producer, "", now_ms, next_pid)
            records += fence
            next_pid = max(next_pid, _pid_after(fence))
            fenced += 1
    return tuple(records)


def _pid_after(fence: tuple[TxnRecord, ...]) -> int:
    init = fence[0]
    assert isinstance(init, TxnProducerInitialized)
    return init.producer_id + 1 if init.epoch == 0 else 0


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


def producer_view(producer: TxnProducer) -> dict[str, Any]:
    """The JSON form of a transactional.id's state (replies, ``GET /v1/transactions/{id}``)."""
    view: dict[str, Any] = {
        "transactional_id": producer.transactional_id,
        "producer_id": producer.producer_id,
        "epoch": producer.epoch,
        "timeout_ms": producer.timeout_ms,
        "transaction": None,
    }
    txn = producer.txn
    if txn is not None:
        view["transaction"] = {
            "producer_id": txn.producer_id,
            "epoch": txn.epoch,
            "sequence": txn.sequence,
            "state": txn.state,
            "started_at_ms": txn.started_at_ms,
            "decided_at_ms": txn.decided_at_ms,
            "reason": txn.reason,
            "partitions": [list(_fields(p)) for p in sorted(txn.partitions)],
            "groups": [list(g) for g in sorted(txn.groups)],
            "pending": sorted(txn.pending),
        }
    return view
