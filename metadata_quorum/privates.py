"""The table of pysyncobj's private names that ``bridge`` uses, and what it does with each.

``tests/unit/metadata_quorum/test_raft_bridge.py`` pins every entry against the installed pysyncobj (it exists,
with the signature given; an overridden method keeps pysyncobj's parameters) and checks that the bridge uses no
other and that no other module names one. Apart from the bridge's code, so that the module that reaches into
pysyncobj stays readable as code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final


@dataclass(frozen=True, slots=True)
class Private:
    """A name of pysyncobj that is not its public API, and what kfed does with it."""

    owner: str  # "SyncObj", "TcpConnection", "TCPTransport": of that class (an instance attribute, or a
    # method); otherwise the module
    name: str  # as pysyncobj's source spells it (``__raftLog``; Python prefixes the class name to reach it)
    signature: str | None  # of a method or function, as ``inspect.signature`` shows it; None: not callable
    use: str


_SYNCOBJ: Final = "SyncObj"
_CONNECTION: Final = "TcpConnection"
_TRANSPORT: Final = "TCPTransport"
# fmt: off
PRIVATE_NAMES: Final = (
    # SyncObj's state: read, and written where the rules say so
    Private(_SYNCOBJ, "__raftLog", None, "the journal: room checked before proposing, a message appended at once"),
    Private(_SYNCOBJ, "__raftCommitIndex", None, "raised only to what a message verified (rules.follower_commit)"),
    Private(_SYNCOBJ, "__raftNextIndex", None, "kept ahead after a success (rules.next_index_after_progress)"),
    Private(_SYNCOBJ, "__raftCurrentTerm", None, "stamps replies, drops stale ones, names the pre-vote's term"),
    Private(_SYNCOBJ, "__raftLastApplied", None, "a conflicting append that reaches it is logged as critical"),
    Private(_SYNCOBJ, "__leaderCommitIndex", None, "set from each append_entries, as pysyncobj does"),
    Private(_SYNCOBJ, "__recvTransmission", None, "the chunks of an entry too big for one message"),
    Private(_SYNCOBJ, "__transport", None, "sends pre-votes and the stamped replies"),
    Private(_SYNCOBJ, "__raftElectionDeadline", None, "moved by stalls, pre-votes and hold_elections_until_led"),
    Private(_SYNCOBJ, "__lastResponseTime", None, "the leader's CheckQuorum clocks, moved by stalls"),
    Private(_SYNCOBJ, "__raftState", None, "a leader neither pre-votes nor grants pre-votes"),
    Private(_SYNCOBJ, "__transferInProgress", None, "a leadership transfer campaigns without a pre-vote"),
    Private(_SYNCOBJ, "__commandsQueue", None, "_applyCommand queues proposals as pysyncobj does"),
    Private(_SYNCOBJ, "__pipeNotifier", None, "_applyCommand wakes the Raft thread once per burst"),
    Private(_SYNCOBJ, "__conf", None, "dynamicMembershipChange: membership entries are (un)done on append"),
    # SyncObj's methods, called
    Private(_SYNCOBJ, "__getCurrentLogIndex", "(self)", "the follower's last index"),
    Private(_SYNCOBJ, "__getCurrentLogTerm", "(self)", "the pre-vote compares logs"),
    Private(_SYNCOBJ, "__deleteEntriesFrom", "(self, fromIDx)", "Raft step 3: drop a conflict and what follows"),
    Private(_SYNCOBJ, "__parseChangeClusterRequest", "(self, command)", "membership entries appended or dropped"),
    Private(_SYNCOBJ, "__doChangeCluster", "(self, request, reverse=False)", "... applied or undone"),
    Private(_SYNCOBJ, "__generateRaftTimeout", "(self)", "a pre-vote round lasts one election timeout"),
    Private(_SYNCOBJ, "__callErrCallback", "(self, err, callback)", "a full command queue fails the proposal"),
    Private(_SYNCOBJ, "_getLeader", "(self)", "the leader's address, for status"),
    Private(_SYNCOBJ, "__connectedToAnyone", "(self)", "pysyncobj's tick campaigns only when connected to a peer"),
    # SyncObj's methods, overridden with the same signature (the override calls pysyncobj's, unless said)
    Private(_SYNCOBJ, "__getEntries", "(self, fromIDx, count=None, maxSizeBytes=None)",
            "replaced: a batch counts what its entries pickle to"),
    Private(_SYNCOBJ, "__onMessageReceived", "(self, node, message)", "every Raft message comes through it"),
    Private(_SYNCOBJ, "__sendNextNodeIdx", "(self, node, reset=False, nextNodeIdx=None, success=False)",
            "the follower's reply, stamped with its term"),
    Private(_SYNCOBJ, "_onTick", "(self, timeToWait=0.0)", "stalls excused and the pre-vote run first"),
    Private(_SYNCOBJ, "_applyCommand", "(self, command, callback, commandType=None)", "one wake per burst"),
    Private(_SYNCOBJ, "_checkCommandsToApply", "(self)", "clears the burst's wake mark"),
    # the TCP connection and transport, subclassed
    Private(_CONNECTION, "__init__", "(self, poller, onMessageReceived=None, onConnected=None, onDisconnected=None, "
            "socket=None, timeout=10.0, sendBufferSize=8192, recvBufferSize=8192, keepalive=None)",
            "public, but BoundedConnection's takes the same parameters"),
    Private(_CONNECTION, "__readBuffer", None, "what __processRead received, moved into a FrameBuffer"),
    Private(_CONNECTION, "__processRead", "(self)", "one recv(); the bytes are bounded and kept in a FrameBuffer"),
    Private(_CONNECTION, "__processParseMessage", "(self)", "replaced: frames from the FrameBuffer, decoded safely"),
    Private(_TRANSPORT, "_onNewIncomingConnection", "(self, conn)", "counts the connections not yet known"),
    Private(_TRANSPORT, "_onTick", "(self)", "drops those that did not say who they are in time"),
    Private(_TRANSPORT, "send", "(self, node, message)", "not before a dialled connection's key exchange"),
    Private(_TRANSPORT, "_connections", None, "each peer's connection, to see whether its keys are exchanged"),
    Private(_TRANSPORT, "_unknownConnections", None, "the accepted connections not yet known as a voter's"),
    Private(_TRANSPORT, "_syncObj", None, "its conf: how long a connection may stay unknown"),
    Private(_TRANSPORT, "_server", None, "its bind() is wrapped: a failure is logged (pysyncobj retries in silence)"),
    # module globals
    Private("pysyncobj.syncobj", "_RAFT_STATE", None, "LEADER"),
    Private("pysyncobj.syncobj", "createJournal", "(journalFile=None)", "replaced: builds a CheckedJournal"),
    Private("pysyncobj.syncobj", "Serializer",
            "(fileName, transmissionBatchSize, tryUseFork, serializer, deserializer, serializeChecker)",
            "replaced: DumpSerializer (a dump written on a thread)"),
    Private("pysyncobj.tcp_connection", "zlib", None, "replaced: WireZlib (the wire's compression level)"),
    Private("pysyncobj.tcp_connection", "TcpConnection", None, "subclassed: BoundedConnection"),
    Private("pysyncobj.transport", "TcpConnection", None, "replaced: BoundedConnection (connections it dials)"),
    Private("pysyncobj.tcp_server", "TcpConnection", None, "replaced: BoundedConnection (connections it accepts)"),
    Private("pysyncobj.pickle", "__protocol", None, "set to wire.PICKLE_PROTOCOL"),
    Private("pysyncobj.pickle", "loads", "(data)", "replaced: SafePickle.loads (frames and commands)"),
    Private("pysyncobj.pickle", "load", "(file)", "replaced: SafePickle.load"),
)
# fmt: on
