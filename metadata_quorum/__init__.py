"""The server side of the metadata log: the state machine (``LogState``) and the Raft node that replicates it.

What this layer adds to pysyncobj 0.3.17, each for a measured reason (see docs/PYSYNCOBJ.md):

- exactly one replicated method, taking bytes; it never raises (``LogState.apply_command``);
- its own full dump (records in msgpack, not pickle; length+CRC framed), written off the Raft thread
  from the immutable image, fsynced, renamed and the directory fsynced before pysyncobj truncates
  its journal; a damaged dump stops the node at start instead of pysyncobj's silent empty start;
- an fsynced, checksummed journal (pysyncobj's mmap journal never syncs: power loss could lose acknowledged
  entries);
- Raft's own follower rule for ``append_entries``, term-stamped replies, and a snapshot that cannot commit the
  follower's unchecked entries (pysyncobj 0.3.17 breaks each of these);
- CheckQuorum at election scale, fast reconnects, and fail-fast proposals without a leader;
- a bridge from the Raft thread to asyncio (``propose`` returns an awaitable; callbacks never block);
- guards against self-inflicted elections: time this node's Raft thread spent on its own work or could
  not run does not count against its peers; and a pre-vote (pysyncobj has none);
- Raft frames and commands decoded with an unpickler that builds plain values only: no frame runs code; a
  frame's size and the connections a stranger can hold are bounded before anything is authenticated.

The modules, from pure to pysyncobj-facing:

- ``rules``: the Raft rules as pure functions of values, each citing the paper;
- ``wire``: the frame encoding (compression, the restricted unpickler);
- ``journal``: the log on disk; ``dump``: the full dump;
- ``settings``: ``RaftSettings``, and every pysyncobj option kfed derives from them;
- ``node``: ``RaftNode``, ``RaftStatus``, and ``Mailboxes`` (results handed over to asyncio);
- ``bridge``: the only module that touches pysyncobj's internals, all listed in ``privates.PRIVATE_NAMES``.

Importing this package changes nothing in pysyncobj: a ``RaftNode`` installs the bridge when it starts.

Its errors (``metadata_log.errors``' tree):

    CorruptData
    └── CorruptState               a damaged dump or snapshot file
    KfedError
    ├── JournalFull                the journal's disk is full      (also OSError)
    ├── ForbiddenPickle            a Raft frame that would run code (also UnpicklingError)
    ├── FrameTooLarge              a Raft frame over its bound      (also ValueError)
    └── MessageTooLarge            a Raft message over its bound    (also ValueError)
"""

from __future__ import annotations

from .journal import JournalFull, read_journal
from .node import Mailboxes, RaftNode, RaftStatus
from .rules import STALL_GUARD_MS
from .settings import RaftSettings

__all__ = [
    "STALL_GUARD_MS",
    "JournalFull",
    "Mailboxes",
    "RaftNode",
    "RaftSettings",
    "RaftStatus",
    "read_journal",
]
