"""One voter of the metadata quorum (``RaftNode``): proposals as asyncio futures, membership, status.

The node runs pysyncobj through the bridge (``bridge.Replica``) and hands every result over to the event
loop that asked (``Mailboxes``): pysyncobj calls back on its own Raft thread, which must never block.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import weakref
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from metadata_log.errors import OutcomeUnknown, PayloadTooLarge, Unavailable

from . import bridge
from .dump import NodeDump, RaftBookkeeping
from .journal import finish_compaction
from .settings import RaftSettings
from .state import LogState, Outcome, Proposal
from .wire import MAX_COMMAND_BYTES

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # leader / follower / candidate
    term: int
    leader_raft: str | None  # "host:port" of the leader as this node sees it
    stalls: int = 0  # Raft ticks that could not listen for STALL_GUARD_MS beyond their wait (see rules.stall_excuse)


class RaftNode:
    """One voter of the metadata quorum. Construct it in the main thread (pysyncobj's tick thread dies
    with the thread that built it), one per process, and never fork afterwards."""

    def __init__(
        self,
        self_raft: str,
        peers_raft: Sequence[str],
        data_dir: Path,
        state: LogState,
        settings: RaftSettings | None = None,
        mailboxes: Mailboxes | None = None,
    ) -> None:
        self.state = state
        self.mailboxes = mailboxes or Mailboxes()  # results handed over to the event loops that asked
        self.settings = settings or RaftSettings()
        self.data_dir = data_dir
        self.self_raft = self_raft
        self._role = "follower"
        # Proposals not yet settled by pysyncobj, so they can be answered if leadership is lost.
        self._pending_lock = threading.Lock()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Outcome]]]] = {}
        self._next_pending = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        self._dump = NodeDump(data_dir / "raft.dump", state)
        loaded = self._dump.check()
        if loaded is not None:
            finish_compaction(data_dir / "raft.journal", loaded["prev"], loaded["last"])
        bridge.install(self.settings.wire_compression)
        self._conf = bridge.sync_obj_conf(self.settings, data_dir, self)
        self._syncobj = bridge.Replica(self_raft, list(peers_raft), self._conf, self)

    # -- hooks pysyncobj calls (on its Raft thread), through the bridge --------------------------------
    def capture(self, last: Sequence[Any], prev: Sequence[Any], cluster: list[str]) -> Callable[[], bytes]:
        return self._dump.capture(last, prev, cluster)

    def restore(self, file_name: str) -> RaftBookkeeping:
        return self._dump.restore(file_name)

    def on_role(self, role: str) -> None:
        was_leader = self._role == "leader"
        self._role = role
        log.info("raft role -> %s", self._role)
        if was_leader and self._role != "leader":
            # pysyncobj settles a deposed leader's pending commands only when later entries apply, which
            # without a new leader is never: answer them now (they may still commit; retries are keyed).
            with self._pending_lock:
                pending, self._pending = self._pending, {}
            for loop, future in pending.values():
                self.mailboxes.hand_over(
                    loop,
                    _fail,
                    future,
                    OutcomeUnknown(
                        "leadership was lost before the commit was confirmed; retry with the same Idempotency-Key"
                    ),
                )

    # -- membership -------------------------------------------------------------------------------
    def change_membership(self, action: str, raft: str) -> asyncio.Future[None]:
        """Add (``"add"``) or remove (``"remove"``) one voter through the Raft log; resolves when committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()

        def done(result: Any, error: int) -> None:  # on the Raft thread
            self.mailboxes.hand_over(loop, _settle, future, None, error)

        if action == "add":
            self._syncobj.addNodeToCluster(raft, callback=done)
        else:
            self._syncobj.removeNodeFromCluster(raft, callback=done)
        return future

    def transfer_leadership(self) -> None:
        """Ask the most caught-up follower to take over (best effort; used before removing the leader)."""
        self._syncobj.transferLeadership(None, callback=lambda result, error: None)

    def voters(self) -> list[str]:
        """Raft addresses of the current voters, this node included, as this node's log has them."""
        return sorted({self.self_raft} | self._syncobj.peer_addresses())

    def hold_elections_until_led(self) -> None:
        """A node joining a running quorum must not campaign before the leader has added it: its failed
        elections would raise its term and depose the leader the moment it is added."""
        self._syncobj.hold_elections_until_led()

    # -- proposing --------------------------------------------------------------------------------
    def propose(self, proposals: Sequence[Proposal]) -> asyncio.Future[list[Outcome]]:
        """Replicate one command carrying ``proposals``; the future resolves on the calling loop.

        Raises (through the future) ``Unavailable`` when the command certainly did not commit,
        ``OutcomeUnknown`` when it may have, and ``PayloadTooLarge`` for a command above
        ``wire.MAX_COMMAND_BYTES``. Callers add their own timeout.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Outcome]] = loop.create_future()
        data = self.state.encode_proposal(proposals)
        if len(data) > MAX_COMMAND_BYTES:  # no node could decode it; and Raft frames are bounded by it
            future.set_exception(
                PayloadTooLarge(
                    f"a Raft command of {len(data)} bytes; at most {MAX_COMMAND_BYTES}", limit_bytes=MAX_COMMAND_BYTES
                )
            )
            return future
        if not self._syncobj.journal_room_for(len(data) + 64):
            # Refuse before proposing: a leader whose journal append fails (JournalFull) drops the command
            # without answering, so the client would only learn "outcome unknown" after the commit timeout.
            future.set_exception(Unavailable(f"disk full: no room for the Raft journal in {self.data_dir}"))
            return future
        with self._pending_lock:
            self._next_pending += 1
            pending_id = self._next_pending
            self._pending[pending_id] = (loop, future)

        def done(result: Any, error: int) -> None:  # on the Raft thread: never block here
            with self._pending_lock:
                self._pending.pop(pending_id, None)
            self.mailboxes.hand_over(loop, _settle, future, result, error)

        self._syncobj.apply_command(data, callback=done)
        return future

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> RaftStatus:
        s = self._syncobj
        return RaftStatus(
            role=self._role, term=int(s.raftCurrentTerm), leader_raft=s.leader_address(), stalls=s.kfed_stalls
        )

    def alive(self) -> bool:
        """The tick thread runs (it dies with the thread that built the node)."""
        return bool(self._syncobj.tick_thread_alive())

    def caught_up(self) -> bool:
        """pysyncobj's readiness: the node has applied everything the leader had committed when it met it."""
        return bool(self._syncobj.isReady())

    def is_leader(self) -> bool:
        """The role pysyncobj last reported (onStateChanged): cheap enough for every request."""
        return self._role == "leader"

    def current_age_s(self) -> float:
        """How long ago this node last knew its log current (inf: it does not know): a follower heard its
        leader, the leader a majority. What a reader's lease is measured from (``GET /v1/log``)."""
        return float(self._syncobj.current_age_s())

    def force_compaction(self) -> None:
        self._syncobj.forceLogCompaction()

    def close(self) -> None:
        self._syncobj.destroy()


def _fail(future: asyncio.Future[list[Outcome]], error: Exception) -> None:
    if not future.done():
        future.set_exception(error)


def _settle(future: asyncio.Future[Any], result: Any, error: int) -> None:
    if future.done():
        return
    failure = bridge.failure(error)
    if failure is None:
        future.set_result(result)
    elif not failure.may_have_committed:
        future.set_exception(Unavailable(f"not committed: {failure.name}", retry_after_s=0.5))
    else:
        future.set_exception(
            OutcomeUnknown(f"commit outcome unknown ({failure.name}); retry with the same Idempotency-Key")
        )


# -- from the Raft thread to an event loop ------------------------------------------------------------
class Mailboxes:
    """The calls handed over from the Raft thread to event loops: a mailbox per loop, for as long as the loop
    exists. A node owns one (``RaftNode.mailboxes``); whoever else hands calls over to the same loop shares it
    (the controller's read model), so that a write's reply never overtakes the update that published it."""

    def __init__(self) -> None:
        self._by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Mailbox] = weakref.WeakKeyDictionary()
        self._lock = threading.Lock()

    def hand_over(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., None], *args: Any) -> None:
        """Run ``callback(*args)`` on ``loop``, from the Raft thread: in order with every other call handed to
        that loop, never blocking. A loop that is already closed has nobody left waiting (the process is
        shutting down): the call is dropped instead of raising inside pysyncobj's tick, which logged it as a
        failed tick."""
        mailbox = self._by_loop.get(loop)
        if mailbox is None:
            with self._lock:
                mailbox = self._by_loop.setdefault(loop, _Mailbox())
        try:
            mailbox.post(loop, callback, args)
        except RuntimeError:
            if not loop.is_closed():
                raise


class _Mailbox:
    """The calls handed over to one event loop, which is woken once per burst of them.

    pysyncobj settles a tick's commands one after another (and each command publishes to the read model
    first), and a ``call_soon_threadsafe`` per call wrote to the loop's self-pipe each time: a tenth of a
    busy leader's CPU. Here only the first call of a burst wakes the loop; ``_run`` takes every call posted
    until it finds none left."""

    def __init__(self) -> None:
        self._calls: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        self._woken = False

    def post(self, loop: asyncio.AbstractEventLoop, callback: Callable[..., None], args: tuple[Any, ...]) -> None:
        self._calls.append((callback, args))
        if not self._woken:
            self._woken = True
            loop.call_soon_threadsafe(self._run, loop)

    def _run(self, loop: asyncio.AbstractEventLoop) -> None:
        # Cleared before taking the calls: one posted after the last is taken finds it cleared and wakes
        # the loop again (at worst once too often, never too few: posters only ever append).
        self._woken = False
        calls = self._calls
        while calls:
            callback, args = calls.popleft()
            try:
                callback(*args)
            except Exception as e:  # as the loop itself reports a failed callback, and go on with the rest
                loop.call_exception_handler({"message": f"exception in {callback!r}", "exception": e})
