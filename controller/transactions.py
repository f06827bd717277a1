"""The quorum leader as transaction coordinator: what it does on its own (docs/TRANSACTIONS.md).

Every ``TXN_CHECK_MS`` the leader

- commits ``commands.expire_transactions``: an undecided transaction past its ``transaction.timeout.ms`` is aborted (its
  owner fenced), and the owner of a decided one left incomplete past the completion grace is fenced. A
  leader that died before a decision thus leaves an abort, decided by whichever leader sees the timeout;
- completes ``completion_tasks``, the pending participants of decided transactions whose owner is
  fenced: a decision a dead leader (or a dead producer) committed is carried out by the next leader.

One participant is completed by ``complete``: describe the participant's Kafka transaction; make sure, by a
committed record (a linearizable read), that this node still leads and the participant is still pending;
end the transaction seen, by its producer id and epoch, as decided; fence that epoch; log
``TxnParticipantCompleted``. A step that fails is retried at a later check, from the start.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any, Final

from kafka_wire.protocol import ErrorCode
from kafka_wire.upstream import UpstreamError
from metadata_log import commands
from metadata_log.errors import KfedError
from metadata_log.image import MetadataImage
from metadata_log.image.transactions import (
    PARTICIPANT_TRANSACTION_TIMEOUT_MS,
    CompletionTask,
    completion_tasks,
    participant_transactional_id,
)
from metadata_log.records import NoOp

from .txn_kafka import DESCRIBE_TRANSACTIONS, END_TXN, Described, Participant

log = logging.getLogger(__name__)

TXN_CHECK_MS: Final = 500
"""How often the leader looks for expired transactions and completions to do."""
MAX_COMPLETIONS_IN_FLIGHT: Final = 64
RETRY_AFTER_S: Final = 1.0
"""A participant whose completion failed is tried again after this long."""
FENCE_ATTEMPTS: Final = 50
FENCE_BACKOFF_S: Final = 0.1
"""After EndTxn the participant writes its markers; until then InitProducerId answers CONCURRENT_TRANSACTIONS."""

PROBE_TIMEOUT_S: Final = 3.0
_NEEDED_APIS: Final = ((DESCRIBE_TRANSACTIONS, "DescribeTransactions"), (END_TXN, "EndTxn"), (22, "InitProducerId"))

_NOTHING_OPEN: Final = frozenset({"Empty", "CompleteCommit", "CompleteAbort", "Dead"})
_ENDING: Final = frozenset({"PrepareCommit", "PrepareAbort", "PrepareEpochFence"})


class CompletionFailed(KfedError):
    """A participant could not be completed this time (retried at a later check)."""


class TransactionDriver:
    """The leader's side of the coordinator, bound to one controller service."""

    def __init__(self, service: Any, completion_grace_ms: int = commands.DEFAULT_COMPLETION_GRACE_MS) -> None:
        self._service = service  # the ControllerService (not imported: it imports this module)
        self.completion_grace_ms = completion_grace_ms
        self._running: dict[CompletionTask, asyncio.Task[None]] = {}
        self._retry_at: dict[CompletionTask, float] = {}
        self._participants: dict[str, Participant] = {}
        self._refusals: dict[tuple[str, str], str | None] = {}  # (cluster, bootstrap) -> why it cannot take part
        self.completed = 0

    def start_term(self) -> None:
        self._retry_at.clear()

    async def enforce(self) -> None:
        """Commit what the clock calls for, and start the completions to do (called by the lease loop)."""
        service = self._service
        if not service.sync_term():
            return
        now_ms = _now_ms()
        grace = self.completion_grace_ms
        if commands.expire_transactions(service.state.image, now_ms, grace).records:

            def expire(image: MetadataImage) -> commands.Result:
                return commands.expire_transactions(image, now_ms, grace)

            try:
                await service.write(expire, lambda image: {}, None, "")
            except (KfedError, TimeoutError) as e:
                log.info("transaction expiry not committed (%s); the next check retries", e)
        now_s = time.monotonic()
        for task in completion_tasks(service.state.image.transactions):
            if task in self._running or self._retry_at.get(task, 0) > now_s:
                continue
            if len(self._running) >= MAX_COMPLETIONS_IN_FLIGHT:
                break
            self._running[task] = asyncio.get_running_loop().create_task(self._complete(task))

    async def _complete(self, task: CompletionTask) -> None:
        try:
            await self.complete(task)
            self._retry_at.pop(task, None)
            self.completed += 1
        except (KfedError, TimeoutError, OSError) as e:
            log.info(
                "transaction %s: %s on %s not completed yet (%s)",
                task.transactional_id,
                task.sequence,
                task.cluster_id,
                e,
            )
            self._retry_at[task] = time.monotonic() + RETRY_AFTER_S
        except Exception:
            log.exception("transaction %s: completing on %s failed", task.transactional_id, task.cluster_id)
            self._retry_at[task] = time.monotonic() + RETRY_AFTER_S
        finally:
            self._running.pop(task, None)

    async def complete(self, task: CompletionTask) -> None:
        """End ``task``'s participant as decided and log it (see the module)."""
        service = self._service
        cluster = service.state.image.clusters.get(task.cluster_id)
        if cluster is None:
            raise CompletionFailed(f"cluster {task.cluster_id!r} is not registered")
        participant = self._participant(task.cluster_id, cluster.bootstrap_servers)
        ktid = participant_transactional_id(task.transactional_id, task.cluster_id)
        try:
            seen = await participant.describe(ktid)
            if seen is not None and seen.state in _ENDING:
                raise CompletionFailed(f"{ktid!r} is {seen.state} on {task.cluster_id}")
            await self._check_still_pending(task)
            if seen is not None:
                await self._end(participant, ktid, seen, task)
        except UpstreamError as e:
            raise CompletionFailed(str(e)) from None

        def completed(image: MetadataImage) -> commands.Result:
            return commands.complete_participants(
                image, task.transactional_id, task.producer_id, task.epoch, task.sequence, [task.cluster_id]
            )

        await service.write(completed, lambda image: {}, None, "")
        log.warning(
            "transaction %s/%d/%d/%d: %s on %s (its owner is fenced)",
            task.transactional_id,
            task.producer_id,
            task.epoch,
            task.sequence,
            "committed" if task.commit else "aborted",
            task.cluster_id,
        )

    async def _check_still_pending(self, task: CompletionTask) -> None:
        """A linearizable read: a record committed now, then the participant still pending in the image.
        What was described can then only be this transaction's part (a newer owner's would need this one
        complete first), and a deposed leader fails here instead of acting."""
        service = self._service
        await service.write(lambda image: commands.Result((NoOp(),), {}), lambda image: {}, None, "")
        if task not in completion_tasks(service.state.image.transactions):
            raise CompletionFailed("no longer pending")

    async def _end(self, participant: Participant, ktid: str, seen: Described, task: CompletionTask) -> None:
        if seen.state == "Ongoing":
            code = await participant.end(ktid, seen.producer_id, seen.epoch, task.commit)
            if code != ErrorCode.none:
                raise CompletionFailed(f"EndTxn {ktid!r} on {task.cluster_id}: {code.name}")
        elif task.commit and seen.state == "CompleteAbort":
            # The part was aborted by Kafka itself (its timeout, a broker that lost it): the divergence
            # the long participant timeout is there to prevent. Reported, not hidden; nothing can undo it.
            log.error(
                "transaction %s/%d: committed in the log but its part on %s was aborted by Kafka",
                task.transactional_id,
                task.sequence,
                task.cluster_id,
            )
        for _ in range(FENCE_ATTEMPTS):
            code = await participant.fence(ktid, seen.producer_id, seen.epoch, PARTICIPANT_TRANSACTION_TIMEOUT_MS)
            if code != ErrorCode.concurrent_transactions:
                break
            await asyncio.sleep(FENCE_BACKOFF_S)
        if code not in (ErrorCode.none, ErrorCode.producer_fenced, ErrorCode.invalid_producer_epoch):
            raise CompletionFailed(f"InitProducerId (fence) {ktid!r} on {task.cluster_id}: {code.name}")

    async def refusal(self, cluster_id: str) -> str | None:
        """Why ``cluster_id`` cannot take part in a transaction, from what its brokers serve (asked once per
        bootstrap list): this coordinator completes a part without its producer by DescribeTransactions,
        EndTxn and InitProducerId. Tansu serves no DescribeTransactions. None when it can, and when its
        brokers cannot be asked now (they are asked again at the next registration)."""
        cluster = self._service.state.image.clusters.get(cluster_id)
        if cluster is None:
            return None  # the command refuses an unknown cluster itself
        key = (cluster_id, cluster.bootstrap_servers)
        if key in self._refusals:
            return self._refusals[key]
        try:
            versions = await asyncio.wait_for(self._participant(*key).api_versions(), PROBE_TIMEOUT_S)
        except (UpstreamError, TimeoutError) as e:
            log.info("cluster %s: cannot ask what its brokers serve (%s)", cluster_id, e)
            return None
        missing = [name for key_, name in _NEEDED_APIS if key_ not in versions]
        reason = None
        if missing:
            reason = (
                f"its brokers do not serve {', '.join(missing)}, which completing a transaction without its "
                "producer needs (Tansu serves no DescribeTransactions; Apache Kafka 3.0+ does)"
            )
        self._refusals[key] = reason
        return reason

    def _participant(self, cluster_id: str, bootstrap: str) -> Participant:
        participant = self._participants.get(cluster_id)
        if participant is None or participant.bootstrap != bootstrap:
            if participant is not None:
                participant.close()
            participant = self._participants[cluster_id] = Participant(cluster_id, bootstrap)
        return participant

    async def stop(self) -> None:
        for task in list(self._running.values()):
            task.cancel()
        for participant in self._participants.values():
            participant.close()


def _now_ms() -> int:
    return int(time.time() * 1000)
