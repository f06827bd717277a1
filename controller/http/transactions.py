"""Transactions across sub-clusters (docs/TRANSACTIONS.md): the quorum is their coordinator.

A transactional producer (``sdk/transactions.py``) calls, in order: ``init`` (init_transactions: a new
epoch, every older instance fenced), ``add`` before its first write to each physical partition and for
``send_offsets_to_transaction`` (Kafka's AddPartitionsToTxn / AddOffsetsToTxn), ``end`` (the decision, one
final record), and ``completed`` once a participant cluster ended its part. "Prepare" is the producer's own
flush and writes nothing here. Every write names the transaction by (producer_id, epoch, sequence); what
the owner leaves undone the leader finishes (``controller/transactions.py``).

Errors carry ``kafka_error``, the Kafka error the SDK raises (``PRODUCER_FENCED``, ``INVALID_TXN_STATE``,
``CONCURRENT_TRANSACTIONS``, ``_UNSUPPORTED_FEATURE``...).
"""

from __future__ import annotations

import time
from typing import Annotated, Any

from fastapi import Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response

from metadata_log import commands
from metadata_log.commands import (
    DEFAULT_TRANSACTION_TIMEOUT_MS,
    MAX_PARTITIONS_PER_TRANSACTION,
    MAX_TRANSACTION_TIMEOUT_MS,
)
from metadata_log.errors import NotFound
from metadata_log.image import MetadataImage, PartitionLocation
from metadata_log.image.transactions import MAX_EPOCH
from metadata_log.views import producer_view

from .bodies import INT32_MAX, INT64_MAX
from .deps import IdempotencyKey, Service
from .encoding import respond, wants_msgpack
from .log import MIN_OFFSET_WAIT_S
from .routing import Router, WritePlan, commit, write_response

router = Router(prefix="/v1/transactions", tags=["transactions"])

MAX_SEQUENCE = 2**62


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class InitTransactions(_Strict):
    timeout_ms: int = Field(
        DEFAULT_TRANSACTION_TIMEOUT_MS,
        ge=1,
        le=MAX_TRANSACTION_TIMEOUT_MS,
        description="transaction.timeout.ms: an undecided transaction older is aborted.",
    )


class _TxnId(_Strict):
    producer_id: int = Field(ge=0, le=INT64_MAX, description="From init.")
    epoch: int = Field(ge=0, le=MAX_EPOCH, description="From init; an older one is fenced.")
    sequence: int = Field(ge=0, le=MAX_SEQUENCE, description="The transaction's number under this epoch.")


class TxnPartitionBody(_Strict):
    cluster_id: str = Field(max_length=249)
    physical_topic: str = Field(max_length=249)
    physical_partition: int = Field(ge=0, le=INT32_MAX)


class TxnGroupBody(_Strict):
    cluster_id: str = Field(max_length=249, description="The cluster whose partitions the offsets are of.")
    group: str = Field(max_length=249)


class AddToTransaction(_TxnId):
    partitions: list[TxnPartitionBody] = Field([], max_length=MAX_PARTITIONS_PER_TRANSACTION)
    groups: list[TxnGroupBody] = Field([], max_length=MAX_PARTITIONS_PER_TRANSACTION)
    completed: list[str] = Field(
        [],
        max_length=10_000,
        description="Clusters on which the owner ended its "
        "previous, decided transaction (logged with this registration).",
    )
    min_offset: int | None = Field(None, ge=-1, le=INT64_MAX, description="The producer's last log offset.")


class EndTransaction(_TxnId):
    commit: bool = Field(description="True: commit_transaction; false: abort_transaction.")
    min_offset: int | None = Field(None, ge=-1, le=INT64_MAX, description="The producer's last log offset.")


class ParticipantsCompleted(_TxnId):
    cluster_ids: list[str] = Field(min_length=1, max_length=10_000, description="Where its part ended.")


def render(image: MetadataImage, transactional_id: str) -> dict[str, Any]:
    producer = image.transactions.producers.get(transactional_id)
    return producer_view(producer) if producer is not None else {"transactional_id": transactional_id}


def _now_ms() -> int:
    return int(time.time() * 1000)  # the proposer's clock goes into the records; replay reads none


@router.get("/{transactional_id}", summary="A transactional.id: its producer id, epoch and last transaction")
async def get_transaction(
    request: Request,
    service: Service,
    transactional_id: str,
    min_offset: Annotated[int | None, Query(ge=-1, le=INT64_MAX, description="Wait until it is applied.")] = None,
) -> Response:
    image = await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
    producer = image.transactions.producers.get(transactional_id)
    if producer is None:
        raise NotFound(
            f"transactional id {transactional_id!r} is not initialized", field="transactional_id", offset=image.offset
        )
    return respond(request, {**producer_view(producer), "offset": image.offset})


@router.write("POST", "/{transactional_id}/init", summary="init_transactions: a new epoch, older instances fenced")
def init_transactions(transactional_id: str, body: InitTransactions) -> WritePlan:
    at_ms = _now_ms()
    return WritePlan(
        lambda image: commands.init_transactions(image, transactional_id, body.timeout_ms, at_ms),
        lambda image: render(image, transactional_id),
    )


@router.leader("POST", "/{transactional_id}/add", summary="Register partitions and group offsets before writing")
async def add_to_transaction(
    request: Request,
    service: Service,
    transactional_id: str,
    body: AddToTransaction,
    idempotency_key: IdempotencyKey = None,
) -> Response:
    """A leader route rather than a plain write: the leader first asks the clusters' brokers whether they
    can take part (``TransactionDriver.refusal``), which a pure plan cannot."""
    at_ms = _now_ms()
    partitions = [PartitionLocation(p.cluster_id, p.physical_topic, p.physical_partition) for p in body.partitions]
    groups = [(g.cluster_id, g.group) for g in body.groups]
    refusals: dict[str, str] = {}
    for cluster_id in sorted({p.cluster_id for p in partitions} | {c for c, _ in groups}):
        reason = await service.transactions.refusal(cluster_id)
        if reason is not None:
            refusals[cluster_id] = reason
    plan = WritePlan(
        lambda image: commands.add_to_transaction(
            image,
            transactional_id,
            body.producer_id,
            body.epoch,
            body.sequence,
            at_ms,
            partitions,
            groups,
            body.completed,
            body.min_offset,
            refusals,
        ),
        lambda image: render(image, transactional_id),
    )
    reply = await commit(service, plan, idempotency_key, request.method, request.url.path, await request.body())
    return write_response(reply, wants_msgpack(request))


@router.write("POST", "/{transactional_id}/end", summary="The decision: commit or abort (one final record)")
def end_transaction(transactional_id: str, body: EndTransaction) -> WritePlan:
    at_ms = _now_ms()
    return WritePlan(
        lambda image: commands.end_transaction(
            image, transactional_id, body.producer_id, body.epoch, body.sequence, body.commit, at_ms, body.min_offset
        ),
        lambda image: render(image, transactional_id),
    )


@router.write("POST", "/{transactional_id}/completed", summary="Participant clusters ended their part as decided")
def participants_completed(transactional_id: str, body: ParticipantsCompleted) -> WritePlan:
    return WritePlan(
        lambda image: commands.complete_participants(
            image, transactional_id, body.producer_id, body.epoch, body.sequence, body.cluster_ids
        ),
        lambda image: render(image, transactional_id),
    )
