"""The controller's service layer: writes (group commit, idempotency, leader forwarding) and reads.

Routes parse and delegate here; nothing in this module knows about HTTP statuses.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from metadata_log import commands
from metadata_log.commands import Result
from metadata_log.errors import Conflict, InvalidRequest, KfedError, NotFound, OutcomeUnknown, Unavailable
from metadata_log.image import MetadataImage
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    MetadataVersionChanged,
    NoOp,
    QuorumVoterChanged,
    Record,
    version_needed,
)
from metadata_quorum import RaftNode
from metadata_quorum.state import MAX_IDEMPOTENCY_KEY_CHARS, LogState, Outcome, Proposal

from .config import QuorumConfig, Voter
from .drain import DEFAULT_GRACE_MS, DrainRow, DrainTracker, PartitionDrain
from .gateways import GatewayRegistry
from .groups import GroupCoordinator
from .leases import DEFAULT_HEARTBEAT_MS, DEFAULT_LEASE_MS, FencingRecord, LeaseTable
from .readmodel import ReadModel
from .transactions import TXN_CHECK_MS, TransactionDriver

log = logging.getLogger(__name__)

MAX_RECORDS_PER_COMMAND: Final = 20_000
"""Group commit stops adding proposals to a Raft command past this many records."""
MAX_INFLIGHT_COMMANDS: Final = 4
"""Raft commands in flight at once; writers arriving meanwhile are grouped into the next one."""
MAX_PENDING_WRITES: Final = 10_000
"""Writes waiting for a Raft command; beyond this a write is refused with 503 (back-pressure)."""
LEASE_CHECK_MS: Final = 100
"""How often the leader compares agent leases with the image (fencing latency adds at most this)."""
DRAIN_CHECK_EVERY: Final = 5
"""Lease checks between two drain checks (a drain check scans the draining partitions)."""
VERSION_CHECK_EVERY: Final = 10
"""Lease checks between two looks at whether the metadata version can go up (only while it is not the latest)."""


@dataclass(frozen=True, slots=True)
class WriteReply:
    body: dict[str, Any]
    offset: int  # last committed offset of this write (or the image offset when it changed nothing)
    replayed: bool = False  # an Idempotency-Key retry answered from the first outcome


@dataclass(slots=True)
class _Pending:
    proposal: Proposal
    future: asyncio.Future[Outcome] = field(repr=False)


class GroupCommitter:
    """Turns concurrent writes into few Raft commands: at most ``MAX_INFLIGHT_COMMANDS`` in flight,
    and everything that queued up meanwhile goes into the next one."""

    def __init__(self, raft: RaftNode) -> None:
        self._raft = raft
        self._queue: asyncio.Queue[_Pending] = asyncio.Queue(MAX_PENDING_WRITES)
        self._slots = asyncio.Semaphore(MAX_INFLIGHT_COMMANDS)
        self._task: asyncio.Task[None] | None = None
        self.commands = 0
        self.proposals = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run(), name="group-commit")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def submit(self, proposal: Proposal) -> Outcome:
        """The outcome once committed. ``Unavailable`` for records of a type newer than the quorum's metadata
        version: the leader raises it (``upgrade_metadata_version``) once every voter reads it."""
        version = self._raft.state.image.metadata_version
        if version < LATEST_METADATA_VERSION and (needed := version_needed(proposal.records)) > version:
            raise Unavailable(
                f"the quorum is at metadata version {version}; these records are written from version {needed}, "
                "to which the leader moves once every controller runs a kfed that reads it",
                retry_after_s=1.0,
            )
        future: asyncio.Future[Outcome] = asyncio.get_running_loop().create_future()
        try:
            self._queue.put_nowait(_Pending(proposal, future))
        except asyncio.QueueFull:
            raise Unavailable("too many writes waiting to commit", retry_after_s=1.0) from None
        return await future

    async def _run(self) -> None:
        while True:
            first = await self._queue.get()
            await self._slots.acquire()
            batch = [first]
            records = len(first.proposal.records)
            while not self._queue.empty() and records < MAX_RECORDS_PER_COMMAND:
                item = self._queue.get_nowait()
                batch.append(item)
                records += len(item.proposal.records)
            batch = [p for p in batch if not p.future.done()]  # callers that gave up (timeout)
            if not batch:
                self._slots.release()
                continue
            self.commands += 1
            self.proposals += len(batch)
            try:
                command = self._raft.propose([p.proposal for p in batch])
            except Exception as e:  # e.g. the Raft queue refused it
                self._slots.release()
                for p in batch:
                    if not p.future.done():
                        p.future.set_exception(Unavailable(f"could not propose: {e}"))
                continue
            command.add_done_callback(functools.partial(self._settle, batch=batch))

    def _settle(self, command: asyncio.Future[list[Outcome]], *, batch: list[_Pending]) -> None:
        self._slots.release()
        error = command.exception()
        for i, p in enumerate(batch):
            if p.future.done():
                continue
            if error is not None:
                p.future.set_exception(error)
            else:
                p.future.set_result(command.result()[i])


def fingerprint(method: str, path: str, body: bytes) -> str:
    """What an Idempotency-Key is bound to: the same key with another request is refused (422)."""
    return hashlib.sha256(method.encode() + b" " + path.encode() + b"\n" + body).hexdigest()[:32]


def check_idempotency_key(key: str | None) -> str | None:
    if key is None:
        return None
    if not key or len(key) > MAX_IDEMPOTENCY_KEY_CHARS or not key.isprintable():
        raise InvalidRequest(
            "Idempotency-Key", f"Idempotency-Key must be 1-{MAX_IDEMPOTENCY_KEY_CHARS} printable characters"
        )
    return key


class ControllerService:
    """One node's view: its Raft replica, its read model, and who the leader is."""

    def __init__(
        self,
        node_id: int,
        quorum: QuorumConfig,
        raft: RaftNode,
        state: LogState,
        read_model: ReadModel,
        commit_timeout_s: float = 5.0,
        lease_ms: int = DEFAULT_LEASE_MS,
        heartbeat_ms: int = DEFAULT_HEARTBEAT_MS,
        drain_grace_ms: int = DEFAULT_GRACE_MS,
    ) -> None:
        self.node_id = node_id
        self.quorum = quorum
        self.raft = raft
        self.state = state
        self.read_model = read_model
        self.commit_timeout_s = commit_timeout_s
        self.committer = GroupCommitter(raft)
        self.leases = LeaseTable(lease_ms)
        self.heartbeat_ms = heartbeat_ms
        self._was_leader = False
        self._fencing_in_flight: set[str] = set()
        self.groups = GroupCoordinator()
        self.gateways = GatewayRegistry(self)
        self.transactions = TransactionDriver(self)
        self._group_commit_lock = asyncio.Lock()
        self.drains = DrainTracker(drain_grace_ms)
        self._drain_commit_lock = asyncio.Lock()
        self._membership_lock = asyncio.Lock()
        self._lease_task: asyncio.Task[None] | None = None
        # GET /v1/node of a voter (its http URL), or None when it does not answer; set by the HTTP app
        self.node_status_of: Callable[[str], Awaitable[dict[str, Any] | None]] | None = None

    def start(self) -> None:
        self.committer.start()
        self._lease_task = asyncio.get_running_loop().create_task(self._lease_loop(), name="leases")

    async def stop(self) -> None:
        if self._lease_task is not None:
            self._lease_task.cancel()
        await self.transactions.stop()
        await self.committer.stop()

    # -- leadership ------------------------------------------------------------------------------
    def voters(self) -> QuorumConfig:
        """The config's voters with the membership changes the log has recorded since."""
        changes = self.state.image.voters.values()
        if not changes:
            return self.quorum
        return self.quorum.changed((Voter(v.voter_id, v.raft, v.http), v.voter) for v in changes)

    def leader(self) -> Voter | None:
        status = self.raft.status()
        if status.role == "leader":
            return self.quorum.voter(self.node_id)
        return self.voters().by_raft(status.leader_raft) if status.leader_raft else None

    # -- quorum membership (one change at a time) --------------------------------------------------
    async def add_voter(self, voter_id: int, raft: str, http: str, reads_up_to: int = 1) -> dict[str, Any]:
        """Make a started node (``kfed controller --join``) a voter: in Raft first, then in the log.
        ``reads_up_to``: the newest metadata version the node says it reads (``/v1/node``)."""
        self.require_leader()
        current = self.voters()
        same_id = next((v for v in current.voters if v.id == voter_id), None)
        if same_id is not None and (same_id.raft, same_id.http) != (raft, http):
            raise Conflict(f"voter {voter_id} exists with raft {same_id.raft} and http {same_id.http}", field="id")
        other = current.by_raft(raft)
        if other is not None and other.id != voter_id:
            raise Conflict(f"raft address {raft} belongs to voter {other.id}", field="raft")
        async with self._membership_lock:
            version = self.state.image.metadata_version
            if reads_up_to < version:
                raise Conflict(
                    f"the node at {http} reads metadata versions up to {reads_up_to}; the log is at {version}: "
                    "upgrade its kfed first",
                    field="http",
                )
            await self._membership("add", raft)
            await self._commit_membership(QuorumVoterChanged(voter_id, raft, http, True))
        return self.membership_view()

    async def remove_voter(self, voter_id: int) -> dict[str, Any]:
        """Remove a voter; the leader hands its leadership over first (the caller retries)."""
        self.require_leader()
        current = self.voters()
        voter = next((v for v in current.voters if v.id == voter_id), None)
        if voter is None:
            return self.membership_view()  # already removed: a re-run changes nothing
        if len(current.voters) <= 1:
            raise Conflict("the last voter cannot be removed", field="id")
        if voter_id == self.node_id:
            self.raft.transfer_leadership()
            raise Unavailable(f"voter {voter_id} leads; handing leadership over, retry shortly", retry_after_s=1.0)
        async with self._membership_lock:
            await self._membership("remove", voter.raft)
            await self._commit_membership(QuorumVoterChanged(voter_id, voter.raft, voter.http, False))
        return self.membership_view()

    def membership_view(self) -> dict[str, Any]:
        return {
            "voters": [{"id": v.id, "raft": v.raft, "http": v.http} for v in self.voters().voters],
            "raft_voters": self.raft.voters(),
        }

    async def _membership(self, action: str, raft: str) -> None:
        try:
            await asyncio.wait_for(self.raft.change_membership(action, raft), self.commit_timeout_s)
        except TimeoutError:
            raise OutcomeUnknown("the membership change did not commit in time; re-run the command") from None

    async def _commit_membership(self, record: QuorumVoterChanged) -> None:
        outcome = await asyncio.wait_for(self.committer.submit(Proposal((record,))), self.commit_timeout_s)
        if outcome.status != "committed":
            raise Conflict(f"membership record not applied: {outcome.detail}")

    def is_leader(self) -> bool:
        return self.raft.is_leader()

    # -- writes ----------------------------------------------------------------------------------
    async def write(
        self,
        command: Callable[[MetadataImage], Result],
        render: Callable[[MetadataImage], dict[str, Any]],
        idempotency_key: str | None,
        request_fingerprint: str,
        confirm_noop: bool = True,
    ) -> WriteReply:
        """Validate ``command`` against the latest image, commit its records, reply when committed.

        ``render`` rebuilds the reply body from an image, for a retry answered from the first outcome. A
        write that changes nothing is answered once a ``NoOp`` committed (``_barrier``) showed the image holds
        every write acknowledged before; ``confirm_noop=False`` skips that for a caller whose no-op answer is
        only its own registration (a gateway's heartbeat, once a second per gateway).
        """
        self.require_leader()
        if idempotency_key is not None:
            replay = self._replay(idempotency_key, request_fingerprint, render)
            if replay is not None:
                return replay
        result = command(self.state.image)
        if not result.records and confirm_noop:
            await self._barrier()
            result = command(self.state.image)  # on an image past every write committed before this one
        if not result.records:
            return WriteReply(result.reply, self.state.image.offset)
        proposal = Proposal(result.records, idempotency_key, request_fingerprint if idempotency_key else None)
        try:
            outcome = await asyncio.wait_for(self.committer.submit(proposal), self.commit_timeout_s)
        except TimeoutError:
            raise OutcomeUnknown(
                f"not committed within {self.commit_timeout_s:g} s; the write may still commit. "
                "Retry with the same Idempotency-Key."
            ) from None
        if outcome.status == "committed":
            return WriteReply(result.reply, outcome.last_offset)
        if outcome.status == "duplicate":
            return WriteReply(render(self.state.image), outcome.last_offset, replayed=True)
        if outcome.status == "key_reused":
            raise InvalidRequest("Idempotency-Key", outcome.detail)
        raise Conflict(f"the write lost a race with another write: {outcome.detail}")

    async def _barrier(self) -> None:
        """Commit a ``NoOp`` before a write is answered as one: a leader that was deposed while cut off from
        the others, or a new one still applying its predecessor's log, would otherwise answer from an image
        older than writes already acknowledged (the fault harness's ``ack-order``). Committing proves this
        node still leads, and the image then holds everything committed before."""
        unconfirmed = "could not confirm the leadership to answer this write (it changes nothing)"
        try:
            outcome = await asyncio.wait_for(self.committer.submit(Proposal((NoOp(),))), self.commit_timeout_s)
        except TimeoutError:
            raise Unavailable(f"{unconfirmed}; retry", retry_after_s=0.2) from None
        if outcome.status != "committed":
            raise Unavailable(f"{unconfirmed}: {outcome.detail}", retry_after_s=0.2)

    def _replay(
        self, key: str, request_fingerprint: str, render: Callable[[MetadataImage], dict[str, Any]]
    ) -> WriteReply | None:
        seen = self.state.outcome_for_key(key)
        if seen is None:
            return None
        first_fingerprint, outcome = seen
        if first_fingerprint != request_fingerprint:
            raise InvalidRequest("Idempotency-Key", "Idempotency-Key was used for a different request")
        return WriteReply(render(self.state.image), outcome.last_offset, replayed=True)

    # -- agents: leases and fencing -------------------------------------------------------------
    def sync_term(self) -> bool:
        """Whether this node leads; a node that just became leader starts its lease table afresh."""
        leading = self.is_leader()
        if leading and not self._was_leader:
            self.leases.start_term(time.monotonic())
            self.groups.start_term(time.monotonic())
            self.gateways.start_term(time.monotonic())
            self.transactions.start_term()
            self.drains.start_term()
            log.info("leading: agents have %d ms to heartbeat before their clusters are fenced", self.leases.lease_ms)
        self._was_leader = leading
        return leading

    def require_leader(self, role: str = "") -> None:
        """Refuse a leader-only call on a follower (503: retry, the client finds the leader)."""
        if not self.sync_term():
            raise Unavailable(f"this node is not the leader{role}", retry_after_s=0.2)

    async def heartbeat(
        self, cluster_id: str, healthy: bool, reason: str | None, applied_offset: int
    ) -> dict[str, Any]:
        """Renew a cluster's lease (soft state, no record); fence or unfence at once if its health changed."""
        self.require_leader()
        cluster = self.state.image.clusters.get(cluster_id)
        if cluster is None:
            raise NotFound(f"cluster {cluster_id!r} is not registered; register it first")
        self.leases.beat(cluster_id, healthy, reason, applied_offset, time.monotonic(), _now_ms())
        if cluster.fenced == healthy or (cluster.fenced and reason != cluster.fenced_reason):
            await self.enforce_leases()  # a change (or a new reason): act now rather than at the next lease check
        cluster = self.state.image.clusters[cluster_id]
        leader = self.leader()
        return {
            "cluster_id": cluster_id,
            "fenced": cluster.fenced,
            "fenced_reason": cluster.fenced_reason,
            "lease_ms": self.leases.lease_ms,
            "heartbeat_ms": self.heartbeat_ms,
            "leader_id": leader.id if leader else None,
            "offset": self.state.image.offset,
        }

    async def enforce_leases(self) -> None:
        """Propose the fencing changes the leases call for (one proposal per cluster, none in flight twice)."""
        if not self.sync_term():
            return
        by_cluster: dict[str, list[FencingRecord]] = {}
        for r in self.leases.decide(self.state.image, time.monotonic(), _now_ms()):
            if r.cluster_id not in self._fencing_in_flight:
                by_cluster.setdefault(r.cluster_id, []).append(r)
        if by_cluster:
            await asyncio.gather(*(self._commit_fencing(cid, rs) for cid, rs in by_cluster.items()))

    async def _commit_fencing(self, cluster_id: str, records: list[FencingRecord]) -> None:
        self._fencing_in_flight.add(cluster_id)
        try:
            if await self._commit_own(records, f"fencing change for {cluster_id}"):
                for record in records:
                    log.warning("%s: %s", record.TYPE, record)
        finally:
            self._fencing_in_flight.discard(cluster_id)

    async def _commit_own(self, records: Sequence[Record], what: str) -> bool:
        """Commit records this node decided on (leases, groups); a failure is logged and retried by the
        next check, never raised."""
        try:
            outcome = await asyncio.wait_for(self.committer.submit(Proposal(tuple(records))), self.commit_timeout_s)
        except (KfedError, TimeoutError) as e:
            log.info("%s not committed (%s); the next check retries", what, e)
            return False
        if outcome.status != "committed":
            log.info("%s not applied: %s", what, outcome.detail)
        return outcome.status == "committed"

    async def upgrade_metadata_version(self) -> None:
        """Raise the log's metadata version to the newest that every voter reads (``MetadataVersionChanged``):
        a new quorum, or one whose last node was just upgraded, moves to the compact command layout. Each
        voter is asked (``/v1/node``); while one does not answer, nothing changes. Never goes down."""
        ask = self.node_status_of
        if self.state.image.metadata_version >= LATEST_METADATA_VERSION or ask is None or not self.sync_term():
            return
        async with self._membership_lock:  # no voter joins between the question and the record
            voters = self.voters().voters
            if sorted(v.raft for v in voters) != self.raft.voters():
                return  # a membership change half done (in Raft, not yet in the log): ask again later
            others = [v for v in voters if v.id != self.node_id]
            answers = await asyncio.gather(*(ask(v.http) for v in others))
            reads: list[int] = [LATEST_METADATA_VERSION]
            for voter, answer in zip(others, answers, strict=True):
                version = answer.get("reads_metadata_up_to", 1) if answer and answer.get("id") == voter.id else None
                if type(version) is not int:
                    return  # a voter that does not answer (as itself, with a version): nothing changes
                reads.append(version)
            target = min(reads)
            raise_to = target > self.state.image.metadata_version
            if raise_to and await self._commit_own([MetadataVersionChanged(target)], f"metadata version {target}"):
                log.info("metadata version %d: every voter reads it", target)

    async def _lease_loop(self) -> None:
        ticks = 0
        while True:
            await asyncio.sleep(LEASE_CHECK_MS / 1000)
            ticks += 1
            try:
                await self.enforce_leases()
                await self.enforce_groups()
                await self.gateways.enforce()
                if ticks % (TXN_CHECK_MS // LEASE_CHECK_MS) == 0:
                    await self.transactions.enforce()
                if ticks % DRAIN_CHECK_EVERY == 0:
                    await self.enforce_drains()
                    await self.enforce_key_order()
                if ticks % VERSION_CHECK_EVERY == 0:
                    await self.upgrade_metadata_version()
            except Exception:
                log.exception("lease / group / drain check failed")

    # -- lossless scale-down: drain reports and decisions ----------------------------------------
    def report_drain(self, cluster_id: str, partitions: dict[tuple[str, int], PartitionDrain]) -> dict[str, Any]:
        """Keep an agent's drain measurements (soft state, no record)."""
        self.require_leader()
        if cluster_id not in self.state.image.clusters:
            raise NotFound(f"cluster {cluster_id!r} is not registered")
        self.drains.report(cluster_id, partitions, time.monotonic())
        return {"cluster_id": cluster_id, "accepted": len(partitions), "offset": self.state.image.offset}

    def drain_rows(self) -> list[DrainRow]:
        self.require_leader()
        return self.drains.rows(self.state.image, time.monotonic())

    async def enforce_drains(self) -> None:
        """Remove drained partitions and decommission drained clusters (one batch at a time)."""
        if not self.sync_term():
            return
        async with self._drain_commit_lock:
            records = self.drains.decide(self.state.image, time.monotonic())
            if records and await self._commit_own(records, "drain decision"):
                log.warning("drained: %s", ", ".join(_describe(r) for r in records[:10]))

    # -- strict key order -----------------------------------------------------------------
    async def enforce_key_order(self) -> None:
        """Start the next routing epoch of each strict topic whose keys should go to other partitions than its
        map says: an expand once the new partitions have leaders, a fence, a planned change made while the
        latest epoch still waited for seals (docs/KEY_ORDER.md, decision 2). Apply re-checks the epoch number,
        so a racing write makes this proposal fail and the next check retry."""
        image = self.state.image
        if not image.key_orders or not self.sync_term():
            return
        records = commands.plan_epochs(image, "writable partitions changed")
        if records and await self._commit_own(records, "key-order epochs"):
            log.warning("key order: %s", ", ".join(_describe(r) for r in records if r.TYPE == "KeyOrderEpochStarted"))

    # -- consumer groups -------------------------------------------------------------------------
    async def group_heartbeat(
        self,
        group: str,
        member_id: str | None,
        topics: list[str],
        owned: list[tuple[str, int]],
        session_timeout_ms: int,
        metadata_offset: int = -1,
        committed: Sequence[tuple[str, int, int]] = (),
        give_up: Sequence[tuple[str, int, int]] = (),
    ) -> dict[str, Any]:
        """Join or renew a member; rebalance when needed; answer with its assignment and what it may start.
        Strict key order: record the releases its committed offsets and give-ups call for."""
        self.require_leader(" (the group coordinator)")
        member_id = self.groups.heartbeat(
            group, member_id, topics, owned, session_timeout_ms, time.monotonic(), metadata_offset
        )
        if self.state.image.key_orders:
            releases = commands.heartbeat_releases(self.state.image, group, topics, committed, give_up).records
            if releases:
                await self._commit_own(releases, f"key-order releases of group {group}")
        await self.enforce_groups()
        return self.groups.reply(group, member_id, self.state.image)

    async def group_leave(self, group: str, member_id: str) -> dict[str, Any]:
        self.require_leader(" (the group coordinator)")
        left = self.groups.leave(group, member_id)
        await self.enforce_groups()
        return {"group": group, "member_id": member_id, "left": left}

    async def enforce_groups(self) -> None:
        """Commit the generations the live members and the topics call for (one batch at a time)."""
        if not self.sync_term():
            return
        async with self._group_commit_lock:
            records = self.groups.decide(self.state.image, self.node_id, time.monotonic())
            if records:
                await self._commit_own(records, "group change")

    # -- reads -----------------------------------------------------------------------------------
    async def image_at_least(self, min_offset: int | None, timeout_s: float) -> MetadataImage:
        """The read model's image, once it reflects ``min_offset`` (read-your-writes)."""
        if min_offset is not None and self.read_model.image.offset < min_offset:
            # The leader knows every committed offset: one beyond them is none a client was ever told of.
            beyond_commits = self.is_leader() and min_offset >= self.read_model.high_watermark
            ok = False if beyond_commits else await self.read_model.wait_beyond(min_offset, timeout_s)
            rm = self.read_model
            if not ok and self.leader() is not None and rm.image.offset + 1 >= rm.high_watermark:
                # caught up with a live leader for a whole wait: the offset is not in the log at all
                raise InvalidRequest(
                    "min_offset",
                    f"offset {min_offset} is beyond the committed log (its next offset is {rm.high_watermark})",
                    high_watermark=rm.high_watermark,
                )
            if not ok:
                raise Unavailable(
                    f"this node has applied up to {self.read_model.image.offset}, not yet {min_offset}",
                    retry_after_s=0.5,
                    applied_offset=self.read_model.image.offset,
                )
        return self.read_model.image


def _describe(record: Record) -> str:
    fields = ", ".join(str(getattr(record, f)) for f in record.__dataclass_fields__)
    return f"{record.TYPE}({fields})"


def _now_ms() -> int:
    return int(time.time() * 1000)
