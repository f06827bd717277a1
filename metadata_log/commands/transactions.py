"""The transaction coordinator of kfed: its commands, pure functions of the image (docs/TRANSACTIONS.md).

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

Only the records of ``records.py`` enter the log; the state is the image's ``transactions``
(``metadata_log.image.transactions``), rebuilt from them by replay.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from typing import Any, Final

from ..errors import Conflict, InvalidRequest, NotFound, Unavailable
from ..image import MetadataImage, PartitionLocation, apply
from ..image.transactions import (
    MAX_EPOCH,
    Transaction,
    Transactions,
    TxnProducer,
)
from ..records import (
    Record,
    TxnDecided,
    TxnGroupAdded,
    TxnParticipantCompleted,
    TxnPartitionAdded,
    TxnProducerInitialized,
    TxnRecord,
)
from ..views import producer_view
from .common import Result, check_name

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


MAX_PARTITIONS_PER_TRANSACTION: Final = 10_000
"""Most physical partitions plus groups in one transaction: bounds the records a transaction writes."""
MAX_REASON_CHARS: Final = 200


MAX_EXPIRIES_PER_CALL: Final = 1_000
"""Most producers ``expire`` fences in one call, so one Raft command stays small; the rest go next tick."""

_CLUSTER_FIELD: Final = "cluster_id"


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


def _producer_after(image: MetadataImage, records: Sequence[Record], transactional_id: str) -> dict[str, Any]:
    """The reply: ``transactional_id``'s state once ``records`` are applied."""
    return producer_view(apply(image, records).transactions.producers[transactional_id])


def _check_caught_up(image: MetadataImage, min_offset: int | None) -> None:
    """A producer sends the offset of its last registration: a node behind it would see no transaction,
    and an answer from that state ("nothing to decide") is never given (docs/TRANSACTIONS.md)."""
    if min_offset is not None and image.offset < min_offset:
        raise Unavailable(
            f"this node has applied up to {image.offset}, not yet {min_offset}",
            retry_after_s=0.2,
            applied_offset=image.offset,
        )


def txn_refusal(image: MetadataImage, cluster_id: str) -> str | None:
    """Why ``cluster_id`` cannot take part in a transaction, or None."""
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        return "it is not registered"
    if cluster.state == "decommissioned":
        return "it is decommissioned"
    return None


def init_transactions(image: MetadataImage, transactional_id: str, timeout_ms: int, at_ms: int) -> Result:
    """init_transactions: a new epoch for ``transactional_id``, fencing every older instance. Its undecided
    transaction is aborted with it; a decided one keeps completing (the reply lists where), and the new
    owner's first transaction waits for it (``CONCURRENT_TRANSACTIONS``)."""
    txns = image.transactions
    check_transactional_id(transactional_id)
    _check_int(timeout_ms, "timeout_ms", 1, MAX_TRANSACTION_TIMEOUT_MS)
    current = txns.producers.get(transactional_id)
    if current is None:
        pid, epoch = _next_identity(txns, None)
        records: tuple[TxnRecord, ...] = (TxnProducerInitialized(transactional_id, pid, epoch, timeout_ms, at_ms),)
    else:
        records = _fence(txns, replace(current, timeout_ms=timeout_ms), "fenced by a new producer instance", at_ms)
    return Result(records, _producer_after(image, records, transactional_id))


def add_to_transaction(
    image: MetadataImage,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    at_ms: int,
    partitions: Sequence[PartitionLocation] = (),
    groups: Sequence[tuple[str, str]] = (),
    completed: Collection[str] = (),
    min_offset: int | None = None,
    refusals: Mapping[str, str] | None = None,
) -> Result:
    """Register ``partitions`` and group offsets ``groups`` (cluster_id, group) in transaction ``sequence``
    before writing to them; the first registration of a sequence starts it. ``completed``: the clusters on
    which the owner itself completed its previous transaction (logged in the same batch). ``refusals``: why
    clusters cannot take part (Tansu, ...), as the leader learnt from their brokers (``txn_refusal`` adds the
    log's)."""
    check_transactional_id(transactional_id)
    _check_caught_up(image, min_offset)
    for i, (_, group) in enumerate(groups):
        check_name(group, f"groups.{i}.group")
    for i, p in enumerate(partitions):
        check_name(p.physical_topic, f"partitions.{i}.physical_topic")
    txns = image.transactions
    producer = _owner(txns, transactional_id, producer_id, epoch)
    _check_int(sequence, "sequence", 0, 2**62)
    if len(partitions) + len(groups) > MAX_PARTITIONS_PER_TRANSACTION:
        raise InvalidRequest(
            "partitions", f"at most {MAX_PARTITIONS_PER_TRANSACTION} partitions and groups per request"
        )
    wanted = [(f"partitions.{i}", p.cluster_id) for i, p in enumerate(partitions)]
    wanted += [(f"groups.{i}", cluster_id) for i, (cluster_id, _) in enumerate(groups)]
    for field_name, cluster_id in wanted:
        reason = (refusals or {}).get(cluster_id) or txn_refusal(image, cluster_id)
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
        records.append(TxnPartitionAdded(transactional_id, producer_id, epoch, sequence, *p, at_ms))
    for cluster_id, group in sorted(set(groups) - known[1]):
        records.append(TxnGroupAdded(transactional_id, producer_id, epoch, sequence, cluster_id, group, at_ms))
    return Result(tuple(records), _producer_after(image, records, transactional_id))


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
    image: MetadataImage,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    sequence: int,
    commit: bool,
    at_ms: int,
    min_offset: int | None = None,
) -> Result:
    """commit_transaction / abort_transaction by the owner: the decision. The current epoch only (no zombie
    commits; the coordinator's own aborts come from ``expire``); the same decision again is a no-op (a retry
    after an unknown outcome), the other one is refused."""
    check_transactional_id(transactional_id)
    _check_caught_up(image, min_offset)
    producer = _owner(image.transactions, transactional_id, producer_id, epoch)
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
    return Result(records, _producer_after(image, records, transactional_id))


def _complete_participant(
    image: MetadataImage, transactional_id: str, producer_id: int, epoch: int, sequence: int, cluster_id: str
) -> tuple[TxnRecord, ...]:
    """A participant cluster ended its part of a decided transaction; again is a no-op."""
    producer = _producer(image.transactions, transactional_id)
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
            return ()
        raise NotFound(f"{cluster_id!r} is no participant of transaction {sequence}", field=_CLUSTER_FIELD)
    return (TxnParticipantCompleted(transactional_id, producer_id, epoch, sequence, cluster_id),)


def complete_participants(
    image: MetadataImage, transactional_id: str, producer_id: int, epoch: int, sequence: int, cluster_ids: Sequence[str]
) -> Result:
    """Participant clusters ended their part as decided (each again is a no-op)."""
    check_transactional_id(transactional_id)
    after, records = image, list[Record]()
    for cluster_id in cluster_ids:
        completed = _complete_participant(after, transactional_id, producer_id, epoch, sequence, cluster_id)
        after = apply(after, completed) if completed else after
        records += completed
    producer = after.transactions.producers.get(transactional_id)
    return Result(tuple(records), producer_view(producer) if producer is not None and cluster_ids else {})


# -- the leader's periodic decisions ----------------------------------------------------------------------


def expire_transactions(
    image: MetadataImage, now_ms: int, completion_grace_ms: int = DEFAULT_COMPLETION_GRACE_MS
) -> Result:
    """Records the coordinator proposes at ``now_ms`` (its wall clock): fence and abort each undecided
    transaction past its timeout (or whose owner is already fenced); fence the owner of each decided
    transaction still incomplete ``completion_grace_ms`` after its decision, which hands it to the driver."""
    txns = image.transactions
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
    return Result(tuple(records))


def _pid_after(fence: tuple[TxnRecord, ...]) -> int:
    init = fence[0]
    assert isinstance(init, TxnProducerInitialized)
    return init.producer_id + 1 if init.epoch == 0 else 0
