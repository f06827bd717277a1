"""The Raft shell: one pysyncobj node around ``LogState``. The only module that imports pysyncobj.

What this layer adds to pysyncobj, each for a measured reason (see shared/PYSYNCOBJ.md):
- exactly one replicated method, taking bytes; it never raises (``LogState.apply_command``);
- its own full dump (records in msgpack, not pickle; length+CRC framed), written off the Raft thread
  from the immutable image, fsynced, renamed and the directory fsynced before pysyncobj truncates
  its journal; a damaged dump stops the node at start instead of pysyncobj's silent empty start;
- an fsynced journal (pysyncobj's mmap journal never syncs: power loss could lose acknowledged entries);
- CheckQuorum at election scale, fast reconnects, and fail-fast proposals without a leader;
- a bridge from the Raft thread to asyncio (``propose`` returns an awaitable; callbacks never block);
- a guard against self-inflicted elections: a node that stalled in its own apply gets a fresh
  election timeout instead of deposing a healthy leader (pysyncobj has no pre-vote).
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pysyncobj.syncobj as _pso
from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated
from pysyncobj.config import SERIALIZER_STATE
from pysyncobj.journal import FileJournal, MemoryJournal
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.node import TCPNode
from pysyncobj.serializer import Serializer

from .errors import OutcomeUnknown, Unavailable
from .state import CorruptState, LogState, Outcome, Proposal, encode_command

log = logging.getLogger(__name__)

APPEND_ENTRIES_BATCH_BYTES: Final = 4 * 1024 * 1024
STALL_GUARD_MS: Final = 50
"""A local apply or dump longer than this resets the node's election deadline (see module doc)."""


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """Every pysyncobj option we set, explicitly (the defaults give 100 ms commits and lose state)."""

    election_timeout_ms_min: int = 300
    election_timeout_ms_max: int = 900
    heartbeat_ms: int = 50  # appendEntriesPeriod; must stay below election_timeout_ms_min / 3
    compaction_min_entries: int = 100_000  # default 5,000 re-dumps a big image far too often
    # With logCompactionSplit each node may only dump in its own 30% slice of its third of this
    # period, so a node can wait up to ~one period after crossing compaction_min_entries.
    compaction_min_s: int = 120
    journal_fsync: bool = True  # msync the journal after every append before it is acknowledged
    password: str | None = None  # encrypts + authenticates Raft traffic (needs `cryptography`)
    # Listen here instead of on the node's own Raft address (which peers dial and which identifies the
    # node): for a node behind a NAT or port mapping, or a fault-injection proxy in tests.
    bind_address: str | None = None
    command_queue_size: int = 10_000

    def conf(self, data_dir: Path, node: RaftNode) -> SyncObjConf:
        return SyncObjConf(
            # Entries leave at once instead of on the next heartbeat (100 ms commits otherwise);
            # we batch records per command ourselves (group commit in the controller).
            appendEntriesUseBatch=False,
            # pysyncobj 0.3.17 splits a command above this size into chunks and detects the last chunk by
            # the command's length, not the pickled entry's, so commands over 64 KiB (the default) fail
            # to replicate ("pickle data was truncated"). Group commit makes such commands routinely.
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
            appendEntriesPeriod=self.heartbeat_ms / 1000,
            raftMinTimeout=self.election_timeout_ms_min / 1000,
            raftMaxTimeout=self.election_timeout_ms_max / 1000,
            # Reconnect to a peer that was down within half a second (default 5 s delays a restarted
            # node's return, and a node started before its peers, by that long).
            connectionRetryTime=0.5,
            # CheckQuorum: a leader that heard from no majority for an election timeout steps down
            # (default 30 s, during which an isolated leader keeps taking writes that cannot commit).
            leaderFallbackTimeout=self.election_timeout_ms_max / 1000,
            # Fail fast without a leader: the HTTP edge answers 503 + Retry-After instead of queueing.
            commandsWaitLeader=False,
            # Voters can be added and removed one at a time (kfed quorum add-voter / remove-voter); the
            # membership lives in the Raft log and the dump, the config only seeds a first start.
            dynamicMembershipChange=True,
            commandsQueueSize=self.command_queue_size,
            # Journal *and* full dump: a journal alone comes back empty after a compaction + restart.
            journalFile=str(data_dir / "raft.journal"),
            fullDumpFile=str(data_dir / "raft.dump"),
            # Our serializer only captures the state on the Raft thread; _ThreadedDumpWriter (installed
            # below as pysyncobj's Serializer) encodes, fsyncs and renames it on a thread of its own.
            serializer=node._capture,
            deserializer=node._deserialize,
            logCompactionMinEntries=self.compaction_min_entries,
            logCompactionMinTime=self.compaction_min_s,
            logCompactionSplit=True,  # nodes compact at different times, never all at once
            password=self.password,
            bindAddress=self.bind_address,
            onStateChanged=node._on_state_changed,
        )


class _FsyncJournal(FileJournal):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's file journal, made durable: every append is on disk before it is acknowledged."""

    def __init__(self, path: str) -> None:
        self._bulk = False
        super().__init__(path)

    def add(self, command: bytes, idx: int, term: int) -> None:
        super().add(command, idx, term)
        if not self._bulk:
            self.flush()

    def deleteEntriesTo(self, entryTo: int) -> None:  # rewrites the journal: sync once, not per entry
        self._bulk = True
        try:
            super().deleteEntriesTo(entryTo)
        finally:
            self._bulk = False
        self.flush()

    def deleteEntriesFrom(self, entryFrom: int) -> None:
        super().deleteEntriesFrom(entryFrom)
        self.flush()

    def setCurrentTerm(self, term: int, votedForNodeId: Any) -> None:
        super().setCurrentTerm(term, votedForNodeId)  # Raft: term + vote durable before any vote is sent
        _fsync_path(self._FileJournal__metaStorer.getPath())


def _fsync_path(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_journal_fsync = threading.local()


def _create_journal(journal_file: str | None) -> Any:
    if journal_file is None:
        return MemoryJournal()
    return _FsyncJournal(journal_file) if getattr(_journal_fsync, "on", False) else FileJournal(journal_file)


class _ThreadedDumpWriter(Serializer):  # type: ignore[misc]  # pysyncobj is untyped
    """pysyncobj's full-dump Serializer, made asynchronous with a thread instead of its fork().

    ``serialize`` runs on the Raft thread and only calls our capture function (an immutable image
    reference and a copy of the keys); a writer thread encodes it, writes ``<dump>.tmp``, fsyncs it,
    renames it over the dump and fsyncs the directory. Until then ``checkSerializing`` answers
    SERIALIZING, so pysyncobj truncates its journal only once the new dump is durable. Encoding a
    1M-partition image takes seconds: done on the Raft thread, it would cost the leader its leadership.
    Reading and transmitting the dump to a lagging follower stay pysyncobj's own code.
    """

    def __init__(self, file_name: str, batch_size: int, try_use_fork: bool, capture: Any, deserializer: Any,
                 checker: Any) -> None:  # fmt: skip
        super().__init__(file_name, batch_size, False, capture, deserializer, checker)
        self._file_name = file_name
        self._capture = capture
        self._writer: threading.Thread | None = None
        self._written_ok = False
        self._dump_id: Any = None

    def serialize(self, data: Any, dump_id: Any) -> None:
        if self._writer is not None:
            return
        started = time.monotonic()
        encode = self._capture(data[1:])
        log.debug("state captured for a dump in %.1f ms", (time.monotonic() - started) * 1000)
        self._dump_id = dump_id
        self._writer = threading.Thread(target=self._write, args=(encode,), name="kfed-dump", daemon=True)
        self._writer.start()

    def _write(self, encode: Callable[[], bytes]) -> None:
        started = time.monotonic()
        tmp = self._file_name + ".tmp"
        try:
            data = encode()
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self._file_name)
            _fsync_path(os.path.dirname(self._file_name) or ".")
            self._written_ok = True
            log.info("dump of %d bytes written in %.2f s", len(data), time.monotonic() - started)
        except Exception:
            log.exception("writing the state dump failed; the journal is kept")
            self._written_ok = False

    def checkSerializing(self) -> tuple[int, Any]:
        if self._writer is None:
            return SERIALIZER_STATE.NOT_SERIALIZING, None
        if self._writer.is_alive():
            return SERIALIZER_STATE.SERIALIZING, self._dump_id
        self._writer = None
        return (SERIALIZER_STATE.SUCCESS if self._written_ok else SERIALIZER_STATE.FAILED), self._dump_id


# SyncObj builds its journal and its dump serializer through these module-level names; route them
# through ours (pysyncobj is pinned to 0.3.17; tests/unit/test_raft.py checks the names exist).
_pso.createJournal = _create_journal
_pso.Serializer = _ThreadedDumpWriter


@dataclass(frozen=True, slots=True)
class RaftStatus:
    role: str  # leader / follower / candidate
    term: int
    leader_raft: str | None  # "host:port" of the leader as this node sees it


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
    ) -> None:
        self.state = state
        self.settings = settings or RaftSettings()
        self.data_dir = data_dir
        self.self_raft = self_raft
        self._role = "follower"
        # Proposals not yet settled by pysyncobj, so they can be answered if leadership is lost.
        self._pending_lock = threading.Lock()
        self._pending: dict[int, tuple[asyncio.AbstractEventLoop, asyncio.Future[list[Outcome]]]] = {}
        self._next_pending = 0
        data_dir.mkdir(parents=True, exist_ok=True)
        self._loaded_raft_internal = self._validate_dump(data_dir / "raft.dump")
        _journal_fsync.on = self.settings.journal_fsync
        try:
            self._conf = self.settings.conf(data_dir, self)
            self._syncobj = _Replica(self_raft, list(peers_raft), self._conf, self)
        finally:
            _journal_fsync.on = False

    # -- durable state ----------------------------------------------------------------------------
    def _validate_dump(self, path: Path) -> Any:
        """Load and check the dump before pysyncobj does (it swallows errors and starts empty)."""
        if not path.exists():
            return None
        data = path.read_bytes()
        try:
            internal = self.state.load(data)
        except CorruptState as e:
            raise CorruptState(f"{path}: {e}. Refusing to start; restore the file or wipe the data dir.") from e
        log.info("loaded dump %s at offset %d (%d bytes)", path, self.state.image.offset, len(data))
        return internal

    def _capture(self, internal: Any) -> Callable[[], bytes]:
        """On the Raft thread: our state + pysyncobj's (last entry, previous entry, cluster), frozen."""
        last_entry, prev_entry, cluster = internal
        raft_internal = {
            "last": list(last_entry),
            "prev": list(prev_entry),
            "cluster": sorted(n.address for n in cluster),
        }
        return self.state.capture(raft_internal)

    def _deserialize(self, file_name: str) -> tuple[Any, Any, Any]:
        """pysyncobj's custom deserializer: the state was loaded (and checked) before start."""
        internal = self._loaded_raft_internal
        if internal is None:  # a dump received from the leader (InstallSnapshot) since start
            internal = self.state.load(Path(file_name).read_bytes())
        self._loaded_raft_internal = None
        last, prev = internal["last"], internal["prev"]
        cluster = {TCPNode(a) for a in internal["cluster"]}
        return (tuple(last), tuple(prev), cluster)

    def _after_stall(self, started: float, what: str) -> None:
        """Never raises: it runs inside the replicated method."""
        elapsed_ms = (time.monotonic() - started) * 1000
        syncobj = getattr(self, "_syncobj", None)  # None while SyncObj.__init__ is still running
        if elapsed_ms <= STALL_GUARD_MS or syncobj is None:
            return
        timeout = random.uniform(self._conf.raftMinTimeout, self._conf.raftMaxTimeout)
        # Name-mangled private of SyncObj 0.3.17 (pinned); tests/unit/test_raft.py checks it exists.
        # pysyncobj's own clock (CLOCK_MONOTONIC_RAW), not time.monotonic(): they differ by ~0.1 s here
        syncobj._SyncObj__raftElectionDeadline = pysyncobj_clock() + timeout
        log.info("%s took %.0f ms; election deadline reset", what, elapsed_ms)

    def _on_state_changed(self, old: int, new: int) -> None:
        was_leader = self._role == "leader"
        self._role = {0: "follower", 1: "candidate", 2: "leader"}.get(new, "unknown")
        log.info("raft role -> %s", self._role)
        if was_leader and self._role != "leader":
            # pysyncobj settles a deposed leader's pending commands only when later entries apply, which
            # without a new leader is never: answer them now (they may still commit; retries are keyed).
            with self._pending_lock:
                pending, self._pending = self._pending, {}
            for loop, future in pending.values():
                loop.call_soon_threadsafe(
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
            loop.call_soon_threadsafe(_settle, future, None, error)

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
        others = self._syncobj.otherNodes  # a set pysyncobj replaces, never mutates in place
        return sorted({self.self_raft} | {n.address for n in others})

    def hold_elections_until_led(self) -> None:
        """A node joining a running quorum must not campaign before the leader has added it: its failed
        elections would raise its term and depose the leader the moment it is added."""
        conf = self._conf
        normal = (conf.raftMinTimeout, conf.raftMaxTimeout)
        conf.raftMinTimeout, conf.raftMaxTimeout = 3600.0, 3601.0
        self._syncobj._SyncObj__raftElectionDeadline = pysyncobj_clock() + 3600.0

        def restore() -> None:
            while self._syncobj._getLeader() is None:
                time.sleep(0.05)
            conf.raftMinTimeout, conf.raftMaxTimeout = normal
            log.info("joined: following leader %s", self._syncobj._getLeader().address)

        threading.Thread(target=restore, name="join-wait", daemon=True).start()

    # -- proposing --------------------------------------------------------------------------------
    def propose(self, proposals: Sequence[Proposal]) -> asyncio.Future[list[Outcome]]:
        """Replicate one command carrying ``proposals``; the future resolves on the calling loop.

        Raises (through the future) ``Unavailable`` when the command certainly did not commit and
        ``OutcomeUnknown`` when it may have. Callers add their own timeout.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Outcome]] = loop.create_future()
        data = encode_command(proposals)
        with self._pending_lock:
            self._next_pending += 1
            pending_id = self._next_pending
            self._pending[pending_id] = (loop, future)

        def done(result: Any, error: int) -> None:  # on the Raft thread: never block here
            with self._pending_lock:
                self._pending.pop(pending_id, None)
            loop.call_soon_threadsafe(_settle, future, result, error)

        self._syncobj.apply_command(data, callback=done)
        return future

    # -- status -----------------------------------------------------------------------------------
    def status(self) -> RaftStatus:
        s = self._syncobj
        leader = s._getLeader()
        return RaftStatus(
            role=self._role,
            term=int(s.raftCurrentTerm),
            leader_raft=leader.address if leader is not None else None,
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
    if error == FAIL_REASON.SUCCESS:
        future.set_result(result)
    elif error in (
        FAIL_REASON.MISSING_LEADER,
        FAIL_REASON.NOT_LEADER,
        FAIL_REASON.QUEUE_FULL,
        FAIL_REASON.REQUEST_DENIED,
    ):
        future.set_exception(Unavailable(f"not committed: {_FAIL_NAMES.get(error, error)}", retry_after_s=0.5))
    else:  # DISCARDED, LEADER_CHANGED, UNKNOWN_OUTCOME: the entry may still commit
        future.set_exception(
            OutcomeUnknown(
                f"commit outcome unknown ({_FAIL_NAMES.get(error, error)}); retry with the same Idempotency-Key"
            )
        )


_FAIL_NAMES: Final = {v: k for k, v in vars(FAIL_REASON).items() if isinstance(v, int)}


class _Replica(SyncObj):  # type: ignore[misc]  # pysyncobj is untyped
    """The pysyncobj object. Its single replicated method is the whole state machine."""

    def __init__(self, self_raft: str, peers: list[str], conf: SyncObjConf, node: RaftNode) -> None:
        self._kfed_state = node.state
        self._kfed_node = node
        super().__init__(self_raft, peers, conf)

    @replicated  # type: ignore[untyped-decorator]  # pysyncobj is untyped
    def apply_command(self, data: bytes) -> list[Outcome]:
        started = time.monotonic()
        outcomes = self._kfed_state.apply_command(data)
        self._kfed_node._after_stall(started, "apply")
        return outcomes
