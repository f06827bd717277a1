"""The replica: pysyncobj's ``SyncObj`` as kfed runs it, and the module globals ``install`` points at kfed's parts.

Part of the bridge into pysyncobj (the package's docstring says what it changes and why).
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Protocol

import pysyncobj.pickle as pso_pickle
import pysyncobj.syncobj as _pso
import pysyncobj.tcp_connection as pso_tcp
import pysyncobj.tcp_server as pso_tcp_server
import pysyncobj.transport as pso_transport
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.journal import MemoryJournal
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.node import TCPNode
from pysyncobj.serializer import Serializer

from .. import rules, wire
from ..dump import DumpState, DumpWriter, RaftBookkeeping
from ..journal import CheckedJournal
from ..rules import Entry, TickMark
from ..settings import RaftSettings
from ..state import LogState, Outcome
from ..wire import WireZlib
from .connections import SAFE_PICKLE, BoundedConnection, GuardedTransport

log = logging.getLogger(__name__)


def install(wire_compression: int) -> None:
    """Route pysyncobj through kfed's parts; idempotent (each node calls it when it starts). Process-wide, as
    pysyncobj reaches them through module globals: every SyncObj of the process then works kfed's way."""
    _pso.createJournal = _create_journal
    _pso.Serializer = DumpSerializer
    vars(pso_pickle)["__protocol"] = wire.PICKLE_PROTOCOL
    pso_pickle.loads = SAFE_PICKLE.loads
    pso_pickle.load = SAFE_PICKLE.load
    installed = pso_tcp.zlib
    if not (isinstance(installed, WireZlib) and installed.level == wire_compression):
        pso_tcp.zlib = WireZlib(wire_compression)
    pso_transport.TcpConnection = BoundedConnection
    pso_tcp_server.TcpConnection = BoundedConnection


_journal_fsync = threading.local()  # what the journal about to be built syncs (set around Replica's construction)


def _create_journal(journal_file: str | None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return CheckedJournal(journal_file, fsync=getattr(_journal_fsync, "on", False))


class DumpSerializer(Serializer):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's full-dump Serializer, writing through ``DumpWriter`` (a thread) instead of its fork().
    ``serialize`` (Raft thread) only calls the node's capture; ``checkSerializing`` answers SERIALIZING until
    the dump is durable, so pysyncobj truncates its journal only then; a dump received from the leader goes
    through the writer too (``setTransmissionData``). Reading and sending dumps to followers stay pysyncobj's."""

    _STATES: Final = {
        DumpState.IDLE: SERIALIZER_STATE.NOT_SERIALIZING,
        DumpState.WRITING: SERIALIZER_STATE.SERIALIZING,
        DumpState.WRITTEN: SERIALIZER_STATE.SUCCESS,
        DumpState.FAILED: SERIALIZER_STATE.FAILED,
    }

    def __init__(
        self, file_name: str, batch_size: int, try_use_fork: bool, capture: Any, deserializer: Any, checker: Any
    ) -> None:
        super().__init__(file_name, batch_size, False, capture, deserializer, checker)
        self._capture = capture
        self._writer = DumpWriter(file_name)

    def serialize(self, data: Any, dump_id: Any) -> None:
        if self._writer.busy:
            return
        _state, last, prev, cluster = data
        self._writer.start(self._capture(last, prev, [n.address for n in cluster]), dump_id)

    def checkSerializing(self) -> tuple[int, Any]:
        state, dump_id = self._writer.poll()
        return self._STATES[state], dump_id

    def setTransmissionData(self, data: Any) -> bool:
        """A chunk of the leader's dump (``DumpWriter.receive``: durable before pysyncobj clears its journal)."""
        return data is not None and self._writer.receive(*data)


def _deserializer(restore: Callable[[str], tuple[list[Any], list[Any], list[str]]] | None) -> Any:
    """pysyncobj's dump loader from the node's: entries as tuples (pysyncobj compares them with its log's) and
    the voters as TCPNodes (it compares them with its own)."""
    if restore is None:
        return None

    def deserialize(file_name: str) -> tuple[Any, Any, Any]:
        last, prev, cluster = restore(file_name)
        return tuple(last), tuple(prev), {TCPNode(a) for a in cluster}

    return deserialize


_ROLES: Final = {0: "follower", 1: "candidate", 2: "leader"}  # pysyncobj's _RAFT_STATE values


class NodeHooks(Protocol):
    """What the bridge calls on its node (``node.RaftNode``), on the Raft thread."""

    state: LogState
    settings: RaftSettings

    def capture(self, last: Sequence[Any], prev: Sequence[Any], cluster: list[str]) -> Callable[[], bytes]: ...

    def restore(self, file_name: str) -> RaftBookkeeping: ...

    def on_role(self, role: str) -> None: ...


def sync_obj_conf(settings: RaftSettings, data_dir: Path, node: NodeHooks) -> SyncObjConf:
    """pysyncobj's options: every one kfed sets (``RaftSettings.options``), and ``node``'s hooks (None ones are
    left to pysyncobj). The node's capture only freezes the state on the Raft thread; ``DumpSerializer``
    (installed as pysyncobj's Serializer) encodes, fsyncs and renames it on a thread of its own."""
    on_role = node.on_role
    return SyncObjConf(
        **settings.options(data_dir),
        serializer=node.capture,
        deserializer=_deserializer(node.restore),
        onStateChanged=None if on_role is None else lambda old, new: on_role(_ROLES.get(new, "unknown")),
    )


@dataclass(frozen=True, slots=True)
class Failure:
    """Why pysyncobj did not confirm a command, in kfed's terms."""

    name: str  # pysyncobj's FAIL_REASON name
    may_have_committed: bool  # False: certainly not committed (retry freely); True: the outcome is unknown


_FAIL_NAMES: Final = {v: k for k, v in vars(FAIL_REASON).items() if isinstance(v, int)}
_NOT_COMMITTED: Final = frozenset(
    {FAIL_REASON.MISSING_LEADER, FAIL_REASON.NOT_LEADER, FAIL_REASON.QUEUE_FULL, FAIL_REASON.REQUEST_DENIED}
)


def failure(error: int) -> Failure | None:
    """pysyncobj's callback error code: None for success; DISCARDED, LEADER_CHANGED and UNKNOWN_OUTCOME may
    still commit, every other failure certainly did not."""
    if error == FAIL_REASON.SUCCESS:
        return None
    return Failure(_FAIL_NAMES.get(error, str(error)), error not in _NOT_COMMITTED)


def journal_of(syncobj: SyncObj) -> Any:
    """The journal a SyncObj keeps its log in (a Replica's, or a bare one's: the benchmark compares both)."""
    return syncobj._SyncObj__raftLog


def leads(syncobj: SyncObj) -> bool:
    """Whether a SyncObj is the leader, as it sees itself now (not a lease: see docs/PYSYNCOBJ.md)."""
    return bool(syncobj._SyncObj__raftState == _pso._RAFT_STATE.LEADER)


def excuse_stall(replica: Replica, mark: TickMark, now: float) -> bool:
    """Apply ``rules.stall_excuse`` to the replica's clocks after a tick that began at ``mark``; True if it was
    a stall (counted in ``kfed_stalls``, reported by /metrics)."""
    heard = replica._SyncObj__lastResponseTime
    excuse = rules.stall_excuse(mark, now, replica._SyncObj__raftElectionDeadline, heard)
    if excuse is None:
        return False
    replica.kfed_stalls += 1
    replica._SyncObj__raftElectionDeadline = excuse.election_deadline
    heard.update(excuse.last_replies)
    if excuse.stalled_s > 0.2:
        log.info("raft tick stalled %.0f ms; the peers' silence during it is not counted", excuse.stalled_s * 1000)
    return True


class Replica(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """The pysyncobj object. Its single replicated method is the whole state machine (see the module doc)."""

    # pysyncobj's privates this class works on (see privates.PRIVATE_NAMES)
    _SyncObj__raftLog: Any
    _SyncObj__raftCommitIndex: int
    _SyncObj__raftNextIndex: dict[Any, int]
    _SyncObj__raftCurrentTerm: int
    _SyncObj__raftLastApplied: int
    _SyncObj__leaderCommitIndex: int | None
    _SyncObj__recvTransmission: Any
    _SyncObj__transport: Any
    _SyncObj__raftElectionDeadline: float
    _SyncObj__lastResponseTime: dict[Any, float]
    _SyncObj__raftState: int
    _SyncObj__transferInProgress: bool
    _SyncObj__commandsQueue: Any
    _SyncObj__pipeNotifier: Any
    _SyncObj__conf: Any

    def __init__(self, self_raft: str, peers: list[str], conf: SyncObjConf, node: NodeHooks) -> None:
        self._kfed_state = node.state
        self._kfed_settings = node.settings
        self._kfed_tick: TickMark | None = None  # how the last tick started
        self._kfed_pre_vote = rules.PreVote()
        self._kfed_leader_heard = pysyncobj_clock()  # when an append_entries of a current leader came
        self.kfed_stalls = 0  # ticks that took STALL_GUARD_MS longer than their socket wait (/metrics)
        self._kfed_wake_sent = False  # the Raft thread was woken for the commands queued (``_applyCommand``)
        self._kfed_held_timeouts: tuple[float, float] | None = None  # the election timeouts, while held
        _journal_fsync.on = node.settings.journal_fsync
        try:
            super().__init__(self_raft, peers, conf, transportClass=GuardedTransport)
        finally:
            _journal_fsync.on = False

    @replicated  # type: ignore[untyped-decorator]  # pysyncobj is untyped
    def apply_command(self, data: bytes) -> list[Outcome]:
        return self._kfed_state.apply_command(data)

    # -- for RaftNode, in kfed's terms ----------------------------------------------------------------------
    def journal_room_for(self, command_bytes: int) -> bool:
        """Whether the journal can take a command of this size now (read-only: safe off the Raft thread)."""
        journal = self._SyncObj__raftLog
        return not isinstance(journal, CheckedJournal) or journal.room_for(command_bytes)

    def leader_address(self) -> str | None:
        leader = self._getLeader()
        return None if leader is None else str(leader.address)

    def current_age_s(self) -> float:
        """How long ago this node last knew its log current (inf: it does not know): a follower, when its
        leader's last ``append_entries`` came; the leader, when the voters that make a majority with it had
        all answered it (CheckQuorum's clocks). A node cut off from the others ages; read off the Raft thread
        (``otherNodes`` is replaced, never mutated; a reply time is one float)."""
        now = pysyncobj_clock()
        if self._SyncObj__raftState == _pso._RAFT_STATE.LEADER:
            others = self.otherNodes
            heard = sorted((self._SyncObj__lastResponseTime.get(n, float("-inf")) for n in others), reverse=True)
            needed = (len(others) + 1) // 2  # besides itself
            return 0.0 if needed == 0 else now - heard[needed - 1]
        if self._getLeader() is None:
            return float("inf")
        return float(now - self._kfed_leader_heard)

    def peer_addresses(self) -> set[str]:
        """The other voters' Raft addresses (``otherNodes`` is a set pysyncobj replaces, never mutates)."""
        return {n.address for n in self.otherNodes}

    def hold_elections_until_led(self) -> None:
        """No election (and no pre-vote) until a leader is heard: for a node joining a running quorum. The tick
        restores the election timeouts once it knows a leader (``_onTick``)."""
        conf = self._SyncObj__conf
        normal = (conf.raftMinTimeout, conf.raftMaxTimeout)
        conf.raftMinTimeout, conf.raftMaxTimeout = 3600.0, 3601.0
        self._SyncObj__raftElectionDeadline = pysyncobj_clock() + 3600.0
        self._kfed_held_timeouts = normal  # last: the tick thread may restore them at once

    # -- the tick ---------------------------------------------------------------------------------------------
    def _onTick(self, timeToWait: float = 0.0) -> None:
        """pysyncobj's tick, after taking out the time the last tick could not listen (``rules.stall_excuse``)
        and running the pre-vote."""
        now = pysyncobj_clock()
        if self._kfed_held_timeouts is not None and self._getLeader() is not None:
            conf = self._SyncObj__conf
            conf.raftMinTimeout, conf.raftMaxTimeout = self._kfed_held_timeouts
            self._kfed_held_timeouts = None
            log.info("joined: following leader %s", self._getLeader().address)
        if self._kfed_tick is not None:
            excuse_stall(self, self._kfed_tick, now)
        self._pre_vote(now)
        self._kfed_tick = TickMark(
            now, timeToWait, self._SyncObj__raftElectionDeadline, dict(self._SyncObj__lastResponseTime)
        )
        SyncObj._onTick(self, timeToWait)

    def _pre_vote(self, now: float) -> None:
        """Before pysyncobj's tick would campaign (see ``PreVote``): ask first, or let it if a majority agreed."""
        step = rules.pre_vote_step(
            is_leader=self._SyncObj__raftState == _pso._RAFT_STATE.LEADER,
            election_deadline=self._SyncObj__raftElectionDeadline,
            now=now,
            transfer_in_progress=self._SyncObj__transferInProgress,
            has_peers=bool(self.otherNodes),
            is_voter=self.selfNode is not None,
            won=self._kfed_pre_vote.won,
        )
        if step is rules.PreVoteStep.WAIT:
            return
        if step is rules.PreVoteStep.CAMPAIGN:
            self._kfed_pre_vote.start(None)  # campaign now; a later timeout asks again
            self._SyncObj__raftElectionDeadline = 0  # also when it was within the margin: pysyncobj must see it
            return
        term = self._SyncObj__raftCurrentTerm + 1
        self._kfed_pre_vote.start(term)
        own_log = [self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex()]
        for peer in self.otherNodes:
            self._SyncObj__transport.send(peer, {"type": rules.PreVote.REQUEST, "term": term, "log": own_log})
        # no answer in an election timeout: ask again then
        self._SyncObj__raftElectionDeadline = now + self._SyncObj__generateRaftTimeout()

    def _on_pre_vote_message(self, node: Any, message: dict[str, Any]) -> None:
        if message["type"] == rules.PreVote.REQUEST:
            asked_log = message.get("log") or [0, 0]
            granted = rules.PreVote.agree(
                (int(asked_log[0]), int(asked_log[1])),
                (self._SyncObj__getCurrentLogTerm(), self._SyncObj__getCurrentLogIndex()),
                pysyncobj_clock() - self._kfed_leader_heard,
                # the configured timeout: a joining node's conf holds a much longer one while it waits
                # to be led (``hold_elections_until_led``), and must not refuse everyone meanwhile
                self._kfed_settings.election_timeout_ms_min / 1000,
                self._SyncObj__raftState == _pso._RAFT_STATE.LEADER,
            )
            self._SyncObj__transport.send(
                node, {"type": rules.PreVote.REPLY, "term": message["term"], "granted": granted}
            )
            return
        if node not in self.otherNodes:
            return  # not a voter (any more)
        self._kfed_pre_vote.answer(node, message["term"], bool(message.get("granted")), len(self.otherNodes) + 1)
        if self._kfed_pre_vote.won:
            self._SyncObj__raftElectionDeadline = 0  # the next tick campaigns

    # -- messages ---------------------------------------------------------------------------------------------
    # SyncObj's transport callback is bound in SyncObj.__init__ as ``self.__onMessageReceived``, i.e. this
    # name: every Raft message, from the first one, comes through here.
    def _SyncObj__onMessageReceived(self, node: Any, message: Any) -> None:
        if isinstance(message, dict):
            kind = message.get("type")
            if kind in (rules.PreVote.REQUEST, rules.PreVote.REPLY):
                self._on_pre_vote_message(node, message)
                return
            if kind == "append_entries" and message.get("term", -1) >= self._SyncObj__raftCurrentTerm:
                self._kfed_leader_heard = pysyncobj_clock()
                self._kfed_pre_vote.cancel()  # a leader is there: a round won before it must not campaign
            if kind == "append_entries" and "prevLogIdx" in message:
                if self._kfed_append_entries(node, message):
                    return
            elif rules.stale_reply(message, self._SyncObj__raftCurrentTerm):
                return
            elif rules.is_progress_reply(message):
                sent_up_to = self._SyncObj__raftNextIndex.get(node)
                SyncObj._SyncObj__onMessageReceived(self, node, message)
                kept = rules.next_index_after_progress(sent_up_to, self._SyncObj__raftNextIndex.get(node))
                if kept is not None:
                    self._SyncObj__raftNextIndex[node] = kept
                return
            else:
                message = rules.guard_snapshot_commit(message, self._SyncObj__raftCommitIndex)
        SyncObj._SyncObj__onMessageReceived(self, node, message)

    def _SyncObj__sendNextNodeIdx(
        self, node: Any, reset: bool = False, nextNodeIdx: int | None = None, success: bool = False
    ) -> None:
        """pysyncobj's follower reply, stamped with the term it answers (see ``rules.stale_reply``)."""
        if nextNodeIdx is None:
            nextNodeIdx = self._SyncObj__getCurrentLogIndex() + 1
        self._SyncObj__transport.send(
            node,
            {
                "type": "next_node_idx",
                "next_node_idx": nextNodeIdx,
                "reset": reset,
                "success": success,
                "term": self._SyncObj__raftCurrentTerm,
            },
        )

    def _kfed_append_entries(self, node: Any, message: dict[str, Any]) -> bool:
        """A regular ``append_entries`` (with ``prevLogIdx``), handled by Raft's rule; False: left to pysyncobj.

        pysyncobj 0.3.17, once ``prevLogIdx``/``prevLogTerm`` match, deletes *every* entry after ``prevLogIdx``
        and appends the message's entries again: after a late "reset" answer a follower deleted entries it had
        acknowledged (a kill -9 then loses a committed entry), and a shorter message removed them outright.
        Here the follower keeps every matching entry, deletes only from the first conflicting one, appends only
        what it lacks (``rules.plan_append``), and commits only up to what the message verified
        (``rules.follower_commit``). The rest of an accepted ``append_entries`` (election deadline, leader,
        term, leadership transfer) stays pysyncobj's: it gets the message without entries or commit index."""
        term = message["term"]
        transmission = message.get("transmission")
        if term < self._SyncObj__raftCurrentTerm or transmission not in (None, "finish"):
            return False  # a stale leader's (ignored), or a chunk of a big entry (only buffered and answered)
        entries: Sequence[Entry] = message.get("entries", [])
        if transmission == "finish":  # the last chunk of one entry too big for a single message
            entries = [SAFE_PICKLE.loads(self._SyncObj__recvTransmission + message["data"])]
            self._SyncObj__recvTransmission = ""
        SyncObj._SyncObj__onMessageReceived(
            self, node, {"type": "append_entries", "term": term, "commit_index": self._SyncObj__raftCommitIndex}
        )
        self._SyncObj__leaderCommitIndex = leader_commit = message["commit_index"]

        prev_idx, prev_term = message["prevLogIdx"], message["prevLogTerm"]
        prev = self._SyncObj__getEntries(prev_idx, 1)
        if not prev:  # not in the log (past its end, or below the dump): "send from my end"
            self._SyncObj__sendNextNodeIdx(node, success=False, reset=True)
            return True
        if prev[0][2] != prev_term:  # Raft step 2: the log does not contain prevLogIdx with prevLogTerm
            self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=prev_idx, success=False, reset=True)
            return True

        def term_at(idx: int) -> int | None:
            found = self._SyncObj__getEntries(idx, 1)
            return int(found[0][2]) if found else None

        plan = rules.plan_append(term_at, prev_idx, entries)
        last = self._SyncObj__getCurrentLogIndex()
        if plan.truncate_from is None and plan.verified < last:  # pysyncobj would have deleted them
            log.info(
                "append_entries (term %d, prevLogIdx %d) verified up to %d; entries up to %d kept",
                term,
                prev_idx,
                plan.verified,
                last,
            )
        if plan.truncate_from is not None:  # Raft step 3: a conflicting entry and all that follow it
            self._truncate_from(plan.truncate_from)
        journal = self._SyncObj__raftLog  # Raft step 4: the entries not already in the log (journal-synced)
        if isinstance(journal, CheckedJournal):
            journal.add_entries(plan.append)  # one sync for the whole message, before the reply below
        else:
            for entry in plan.append:
                journal.add(*entry)
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in plan.append:
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change)

        # Answered only once the entries are durable (``CheckedJournal.add_entries`` syncs before returning),
        # and only for what this message verified: entries held past it are not claimed.
        self._SyncObj__sendNextNodeIdx(node, nextNodeIdx=plan.verified + 1, success=True)

        # Raft step 5
        commit = rules.follower_commit(
            self._SyncObj__raftCommitIndex, self._SyncObj__getCurrentLogIndex(), leader_commit, plan.verified
        )
        self._SyncObj__raftCommitIndex = commit
        self._SyncObj__raftLog.setRaftCommitIndex(commit)
        return True

    def _truncate_from(self, index: int) -> None:
        """Drop the entries from ``index`` on, undoing the membership changes they carried (pysyncobj applies
        them on append)."""
        if self._SyncObj__conf.dynamicMembershipChange:
            for entry in reversed(self._SyncObj__getEntries(index)):
                change = self._SyncObj__parseChangeClusterRequest(entry[0])
                if change is not None:
                    self._SyncObj__doChangeCluster(change, reverse=True)
        if index <= self._SyncObj__raftLastApplied:
            # Cannot happen in Raft (an applied entry is committed, and a leader holds every committed
            # entry); kept as pysyncobj's loud signal that the state machine has diverged.
            log.critical(
                "a conflicting append_entries truncates applied entries from index %d (last applied "
                "%d): this node's state has diverged from the quorum; wipe its data dir",
                index,
                self._SyncObj__raftLastApplied,
            )
        self._SyncObj__deleteEntriesFrom(index)

    def _SyncObj__getEntries(
        self, fromIDx: int | None, count: int | None = None, maxSizeBytes: int | None = None
    ) -> list[Entry]:
        """pysyncobj's: the entries from index ``fromIDx`` (``count`` of them), up to and including the one that
        makes ``maxSizeBytes``; but each entry counted with what it pickles to (``wire.ENTRY_PICKLE_BYTES``), so
        that a message is bounded (``wire.MAX_MESSAGE_BYTES``) whatever its entries, and without copying the
        rest of the log first."""
        journal = self._SyncObj__raftLog
        first = journal[0][1]
        if fromIDx is None or fromIDx < first:
            return []
        start = fromIDx - first
        if maxSizeBytes is None:
            return journal[start:] if count is None else journal[start : start + count]  # type: ignore[no-any-return]
        overhead = wire.ENTRY_PICKLE_BYTES
        most = maxSizeBytes // overhead + 1  # each entry counts at least ``overhead``: no more can be taken
        candidates: list[Entry] = journal[start : start + (most if count is None else min(count, most))]
        size = 0
        for taken, entry in enumerate(candidates, 1):
            size += len(entry[0]) + overhead
            if size >= maxSizeBytes:
                return candidates[:taken]
        return candidates

    # -- proposals --------------------------------------------------------------------------------------------
    def _applyCommand(self, command: bytes, callback: Any, commandType: int | None = None) -> None:
        """pysyncobj's: queue a command for the Raft thread; but the thread is woken (a byte down its pipe) once
        per burst of commands, not per command: each wake-up was a write() here and a poll() and tick there.
        ``_checkCommandsToApply`` clears the mark before it drains, so a command queued after that wakes it."""
        if commandType is not None:
            command = bytes((commandType,)) + command
        try:
            self._SyncObj__commandsQueue.put_nowait((command, callback))
        except queue.Full:
            self._SyncObj__callErrCallback(FAIL_REASON.QUEUE_FULL, callback)
            return
        if not self._kfed_wake_sent:
            self._kfed_wake_sent = True
            self._SyncObj__pipeNotifier.notify()

    def _checkCommandsToApply(self) -> None:
        self._kfed_wake_sent = False
        SyncObj._checkCommandsToApply(self)
