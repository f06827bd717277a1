"""``RaftSettings``: what a quorum node is configured with, and every pysyncobj option kfed derives from it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .wire import APPEND_ENTRIES_BATCH_BYTES, SOCKET_BUFFER_BYTES


@dataclass(frozen=True, slots=True)
class RaftSettings:
    """What a node is configured with; every pysyncobj option kfed sets derives from it (the defaults give 100 ms
    commits and lose state): what each does and why it has its value, ``options``."""

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
    # zlib level of Raft messages. pysyncobj compresses every message at level 3, once per follower, on the
    # Raft thread of the leader; level 0 (stored blocks: still a zlib stream every pysyncobj node reads,
    # framed by ``wire.zlib_stored``) costs a copy instead of a deflate. Raise it for links where bandwidth
    # costs more than CPU.
    wire_compression: int = 0
    # pysyncobj's own thread ticks the node (timers, reading sockets). Off only where a caller delivers every
    # message and tick itself, step by step: the bridge's unit tests.
    auto_tick: bool = True

    def options(self, data_dir: Path) -> dict[str, Any]:
        """Every pysyncobj option kfed sets, explicitly, with its reason (the node's hooks: ``conf``)."""
        return dict(
            # Entries leave at once instead of on the next heartbeat (100 ms commits otherwise);
            # we batch records per command ourselves (group commit in the controller).
            appendEntriesUseBatch=False,
            # pysyncobj 0.3.17 splits a command above this size into chunks and detects the last chunk by
            # the command's length, not the pickled entry's, so commands over 64 KiB (the default) fail
            # to replicate ("pickle data was truncated"). Group commit makes such commands routinely.
            appendEntriesBatchSizeBytes=APPEND_ENTRIES_BATCH_BYTES,
            # pysyncobj sets SO_SNDBUF/SO_RCVBUF of every Raft socket to 64 KiB (which also stops Linux from
            # sizing them itself) and sends a dump to a follower in 64 KiB messages. Catching a follower up
            # means tens of MB queued on the leader, and each send() of 128 KiB copied the rest of that queue
            # (pysyncobj slices a bytes buffer), holding the GIL. Bigger buffers, and dump messages as big as
            # log batches, move the same bytes with far fewer copies.
            sendBufferSize=SOCKET_BUFFER_BYTES,
            recvBufferSize=SOCKET_BUFFER_BYTES,
            logCompactionBatchSize=APPEND_ENTRIES_BATCH_BYTES,
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
            logCompactionMinEntries=self.compaction_min_entries,
            logCompactionMinTime=self.compaction_min_s,
            logCompactionSplit=True,  # nodes compact at different times, never all at once
            password=self.password,
            bindAddress=self.bind_address,
            autoTick=self.auto_tick,
        )
