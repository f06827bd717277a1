"""The bridge to pysyncobj: every private name pinned against the installed pysyncobj, nothing patched at import,
frames decoded safely, and kfed's Raft rules driven through a real ``Replica`` (ticks and messages by hand)."""

from __future__ import annotations

import importlib.metadata
import inspect
import json
import pickle
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from typing import Any

import pysyncobj.journal as pso_journal
import pysyncobj.pickle as pso_pickle
import pysyncobj.syncobj as pso
import pysyncobj.tcp_connection as pso_tcp
import pysyncobj.tcp_server as pso_tcp_server
import pysyncobj.transport as pso_transport
import pytest
from pysyncobj.monotonic import monotonic as pysyncobj_clock
from pysyncobj.node import TCPNode
from pysyncobj.poller import createPoller

from deploy.launcher import free_ports
from metadata_quorum import bridge, journal, privates, wire
from metadata_quorum.bridge import replica
from metadata_quorum.rules import PreVote, TickMark

from .raft_support import manual_tick_node

REPO = Path(__file__).resolve().parents[3]
PRODUCT_PACKAGES = ("metadata_log", "controller", "broker_agent", "sdk", "spark_pipeline", "deploy", "kfed")


def test_pinned_pysyncobj_internals_are_routed_through_ours() -> None:
    # The bridge reaches into pysyncobj's module names (and private attributes: PRIVATE_NAMES, pinned below);
    # an upgrade that changes them must fail here, not in production.
    assert importlib.metadata.version("pysyncobj") == "0.3.17"
    bridge.install(0)
    assert pso.createJournal is replica._create_journal
    assert pso.Serializer is bridge.DumpSerializer
    # Replica overrides or calls these SyncObj privates by their mangled names.
    for name in ("onMessageReceived", "sendNextNodeIdx", "getEntries", "getCurrentLogIndex", "deleteEntriesFrom",
                 "parseChangeClusterRequest", "doChangeCluster"):  # fmt: skip
        assert callable(getattr(pso.SyncObj, f"_SyncObj__{name}")), name
    # Replica._onTick wraps pysyncobj's tick, which checks these before it reads its sockets.
    tick = inspect.getsource(pso.SyncObj._onTick)
    assert "self.__raftElectionDeadline < monotonicTime()" in tick and "self.__lastResponseTime[node] >" in tick
    for name in ("generateRaftTimeout", "getCurrentLogTerm", "connectedToAnyone"):  # the pre-vote's
        assert callable(getattr(pso.SyncObj, f"_SyncObj__{name}")), name
    assert "self.__transferInProgress = True" in inspect.getsource(pso.SyncObj)
    # Replica._applyCommand queues as pysyncobj's does and wakes the tick that drains the queue once per burst.
    assert "self.__pipeNotifier.notify()" in inspect.getsource(pso.SyncObj._applyCommand)
    assert "self.__commandsQueue.get_nowait()" in inspect.getsource(pso.SyncObj._checkCommandsToApply)
    # TCP connections call the module-level zlib, which RaftNode replaces to set the compression level.
    assert "zlib.compress(" in inspect.getsource(pso_tcp.TcpConnection.send)
    assert "zlib.decompress(" in inspect.getsource(pso_tcp.TcpConnection)
    # ... and pickle through pysyncobj.pickle, whose protocol is the module global RaftNode sets.
    assert pso_tcp.pickle is pso_pickle and pso.pickle is pso_pickle
    assert "__protocol" in vars(pso_pickle) and "__protocol)" in inspect.getsource(pso_pickle.dumps)
    # Every frame, and every command at apply, is decoded through pysyncobj.pickle.loads: the restricted one.
    assert "pickle.loads(zlib.decompress(data))" in inspect.getsource(pso_tcp.TcpConnection)
    assert inspect.getsource(pso.SyncObj).count("pickle.loads(") == 4  # version, command, big entry, membership
    assert pso_pickle.loads == bridge.SAFE_PICKLE.loads and pso_pickle.load == bridge.SAFE_PICKLE.load


def test_a_follower_keeps_acknowledged_entries_and_commits_only_what_a_message_verified(tmp_path: Path) -> None:
    """A duplicated and a reordered append_entries (TCP reconnects, a paused follower, a leader re-sending
    after a late reply) reach a real follower. pysyncobj 0.3.17 deleted every entry after prevLogIdx, which
    removed entries the follower had acknowledged (the lost write of ``make faults SEED=4``)."""

    node, leader = manual_tick_node(tmp_path)
    replica = node._syncobj
    replies: list[dict[str, object]] = []
    replica._SyncObj__transport.send = lambda to, message: replies.append(message) or True
    peer = next(n for n in replica.otherNodes if n.address == leader)

    def append(prev: tuple[int, int], entries: list[tuple[int, int]], commit: int, term: int = 1) -> dict[str, object]:
        replica._SyncObj__onMessageReceived(peer, {
            "type": "append_entries", "term": term, "commit_index": commit, "prevLogIdx": prev[0],
            "prevLogTerm": prev[1], "entries": [(b"\x00", i, t) for i, t in entries],
        })  # fmt: skip
        return replies[-1]

    def log() -> list[tuple[int, int]]:
        journal = replica._SyncObj__raftLog
        return [(journal[i][1], journal[i][2]) for i in range(len(journal))]

    try:
        assert log() == [(1, 0)]
        assert append((1, 0), [(2, 1), (3, 1), (4, 1)], commit=1)["next_node_idx"] == 5
        reply = append((4, 1), [(5, 1)], commit=3)
        assert reply == {"type": "next_node_idx", "next_node_idx": 6, "reset": False, "success": True, "term": 1}
        assert replica.raftCommitIndex == 3
        # The first message again, late: it verifies up to 4 and must not delete the acknowledged 5.
        assert append((1, 0), [(2, 1), (3, 1), (4, 1)], commit=1)["next_node_idx"] == 5
        assert log() == [(1, 0), (2, 1), (3, 1), (4, 1), (5, 1)]
        # A reordered heartbeat with a newer commit index: it verified only index 2, so it commits no more.
        assert append((2, 1), [], commit=5)["next_node_idx"] == 3
        assert log()[-1] == (5, 1) and replica.raftCommitIndex == 3
        # prevLogIdx past the end, then a term mismatch: refused, nothing changes.
        assert append((9, 1), [(10, 1)], commit=5) == {**reply, "next_node_idx": 6, "reset": True, "success": False}
        assert append((5, 2), [(6, 2)], commit=5)["reset"] is True and log()[-1] == (5, 1)
        # A new leader (term 2) conflicting at 5: only the conflicting entry and what follows it go.
        assert append((3, 1), [(4, 1), (5, 2), (6, 2)], commit=4, term=2)["next_node_idx"] == 7
        assert log() == [(1, 0), (2, 1), (3, 1), (4, 1), (5, 2), (6, 2)] and replica.raftCommitIndex == 4
        assert replica.raftCurrentTerm == 2 and replica._getLeader() == peer
        # A heartbeat verifying 6 with the leader's commit at 6 commits it.
        assert append((6, 2), [], commit=9, term=2)["success"] is True and replica.raftCommitIndex == 6
        # The journal on disk holds what the follower acknowledged.
        assert [(i, t) for _, i, t in journal.read_journal(tmp_path / "raft.journal")[1]] == log()
    finally:
        node.close()


def test_a_stalled_raft_tick_does_not_count_its_stall_as_the_peers_silence(tmp_path: Path) -> None:
    """After a tick that could not read its sockets for a while (a backlog of applies, GC, a dump holding the
    GIL), heartbeats wait unread: the election deadline and the leader's last-reply times move on by the
    stall, unless something refreshed them meanwhile, so the node reads them before it would start an
    election or step down."""

    node, _ = manual_tick_node(tmp_path)
    replica = node._syncobj
    try:
        quiet, refreshed = list(replica.otherNodes)
        now = pysyncobj_clock()
        replica._SyncObj__raftElectionDeadline = now - 0.1  # expired during the stall
        replica._SyncObj__lastResponseTime.update({quiet: now - 0.9, refreshed: now - 0.05})
        mark = TickMark(now - 1.0, 0.05, now - 0.1, {quiet: now - 0.9, refreshed: now - 0.5})
        # a tick within its wait plus the guard: nothing moves
        assert not bridge.excuse_stall(replica, TickMark(now - 0.09, 0.05, 0, {}), now)
        assert replica._SyncObj__raftElectionDeadline == now - 0.1 and replica.kfed_stalls == 0

        assert bridge.excuse_stall(replica, mark, now)  # stalled 0.95 s
        assert replica._SyncObj__raftElectionDeadline == pytest.approx(now + 0.85)
        # the quiet peer's time moves on (capped at now); the refreshed one heard from meanwhile stays
        assert replica._SyncObj__lastResponseTime == {quiet: now, refreshed: now - 0.05}
        assert replica.kfed_stalls == 1

        replica._SyncObj__raftElectionDeadline = now + 5  # refreshed by a heartbeat during the tick: kept
        assert bridge.excuse_stall(replica, mark, now) and replica._SyncObj__raftElectionDeadline == now + 5

        # The tick marks how it started and judges the previous one by it.
        replica._onTick(0)
        assert replica._kfed_tick is not None and replica._kfed_tick.wait_s == 0
        replica._kfed_tick = TickMark(pysyncobj_clock() - 2.0, 0, replica._SyncObj__raftElectionDeadline, {})
        deadline = replica._SyncObj__raftElectionDeadline
        replica._onTick(0)
        assert replica.kfed_stalls == 3 and replica._SyncObj__raftElectionDeadline >= deadline + 1.9
        assert node.status().stalls == 3  # what /metrics reports as kfed_raft_stalls_total
    finally:
        node.close()


def test_a_follower_asks_before_it_campaigns(tmp_path: Path) -> None:
    """An expired election timeout sends pre-votes and leaves the term alone; only a majority's agreement
    lets pysyncobj campaign (term + 1, request_vote)."""

    node, _ = manual_tick_node(tmp_path)
    replica = node._syncobj
    sent: list[tuple[object, dict[str, object]]] = []
    replica._SyncObj__transport.send = lambda to, message: sent.append((to, message)) or True
    replica._SyncObj__connectedToAnyone = lambda: True
    try:
        peer_b, peer_c = list(replica.otherNodes)
        term = replica.raftCurrentTerm
        replica._kfed_leader_heard = pysyncobj_clock() - 5
        replica._SyncObj__raftElectionDeadline = 0
        replica._onTick(0)
        assert replica.raftCurrentTerm == term and replica._SyncObj__raftState == 0  # still a follower
        asked = [m for _, m in sent if m["type"] == PreVote.REQUEST]
        assert len(asked) == 2 and asked[0]["term"] == term + 1
        assert not any(m["type"] == "request_vote" for _, m in sent)

        # a peer that still hears its leader says no; another refusal: still no election
        replica._SyncObj__onMessageReceived(peer_b, {"type": PreVote.REPLY, "term": term + 1, "granted": False})
        replica._onTick(0)
        assert replica.raftCurrentTerm == term
        # a majority agrees: the next tick campaigns
        replica._SyncObj__onMessageReceived(peer_c, {"type": PreVote.REPLY, "term": term + 1, "granted": True})
        replica._onTick(0)
        assert replica.raftCurrentTerm == term + 1
        assert any(m["type"] == "request_vote" for _, m in sent)

        # asked by a peer while this node hears a leader: no, and the term stays
        sent.clear()
        replica._kfed_leader_heard = pysyncobj_clock()
        replica._SyncObj__onMessageReceived(peer_b, {"type": PreVote.REQUEST, "term": term + 5, "log": [9, 99]})
        assert sent == [(peer_b, {"type": PreVote.REPLY, "term": term + 5, "granted": False})]
        assert replica.raftCurrentTerm == term + 1

        # no leader heard: an asker whose term lags this node's, but whose log is as up to date, gets a yes
        # (it may hold the last committed entry; its real elections then raise its term)
        sent.clear()
        replica._kfed_leader_heard = pysyncobj_clock() - 5
        own_log = [replica._SyncObj__getCurrentLogTerm(), replica._SyncObj__getCurrentLogIndex()]
        replica._SyncObj__onMessageReceived(peer_b, {"type": PreVote.REQUEST, "term": 1, "log": own_log})
        assert sent == [(peer_b, {"type": PreVote.REPLY, "term": 1, "granted": True})]
        # ... and a node holding its elections until it is led (joining) still answers by its real timeout
        sent.clear()
        node.hold_elections_until_led()
        replica._SyncObj__onMessageReceived(peer_c, {"type": PreVote.REQUEST, "term": 9, "log": own_log})
        assert sent == [(peer_c, {"type": PreVote.REPLY, "term": 9, "granted": True})]
    finally:
        node.close()


def test_a_joining_node_holds_its_elections_until_its_tick_hears_a_leader_and_leaves_no_thread(tmp_path: Path) -> None:
    node, leader = manual_tick_node(tmp_path)
    replica = node._syncobj
    replica._SyncObj__transport.send = lambda to, message: True
    conf = replica._SyncObj__conf
    normal = (conf.raftMinTimeout, conf.raftMaxTimeout)
    threads = set(threading.enumerate())
    try:
        node.hold_elections_until_led()
        assert conf.raftMinTimeout > 1000 and set(threading.enumerate()) == threads  # nothing polls
        replica._onTick(0)
        assert conf.raftMinTimeout > 1000  # no leader yet
        peer = next(n for n in replica.otherNodes if n.address == leader)
        replica._SyncObj__onMessageReceived(peer, {
            "type": "append_entries", "term": 1, "commit_index": 0, "prevLogIdx": 1, "prevLogTerm": 0, "entries": [],
        })  # fmt: skip
        replica._onTick(0)
        assert (conf.raftMinTimeout, conf.raftMaxTimeout) == normal
    finally:
        node.close()


def test_a_leader_heard_cancels_a_pre_vote_round_and_strangers_do_not_count(tmp_path: Path) -> None:
    node, leader = manual_tick_node(tmp_path)
    replica = node._syncobj
    replica._SyncObj__transport.send = lambda to, message: True
    try:
        peer = next(n for n in replica.otherNodes if n.address == leader)
        term = replica.raftCurrentTerm
        replica._kfed_leader_heard = pysyncobj_clock() - 5
        replica._SyncObj__raftElectionDeadline = 0
        replica._onTick(0)
        assert replica._kfed_pre_vote.term == term + 1
        stranger = TCPNode("127.0.0.1:1")
        replica._SyncObj__onMessageReceived(stranger, {"type": PreVote.REPLY, "term": term + 1, "granted": True})
        assert not replica._kfed_pre_vote.won
        # a heartbeat of a current leader arrives before the majority's answer: the round is over
        replica._SyncObj__onMessageReceived(peer, {
            "type": "append_entries", "term": term, "commit_index": 0, "prevLogIdx": 1, "prevLogTerm": 0,
            "entries": [],
        })  # fmt: skip
        assert replica._kfed_pre_vote.term is None
        replica._SyncObj__onMessageReceived(peer, {"type": PreVote.REPLY, "term": term + 1, "granted": True})
        assert not replica._kfed_pre_vote.won and replica._SyncObj__raftElectionDeadline > pysyncobj_clock()
    finally:
        node.close()


# -- the private names: one table, pinned; no other module names one ----------------------------------------------
def mangled(name: str, owner: str = "SyncObj") -> str:
    return f"_{owner}{name}" if name.startswith("__") and not name.endswith("__") else name


@pytest.fixture(scope="module")
def bare_syncobj() -> Any:
    """pysyncobj's own SyncObj (not our subclass, which could hide a missing attribute), with our options."""
    conf = pso.SyncObjConf(autoTick=False, appendEntriesUseBatch=False, dynamicMembershipChange=True)
    obj = pso.SyncObj(f"127.0.0.1:{free_ports(1)[0]}", [], conf)
    yield obj
    obj._destroy()


@pytest.mark.parametrize("private", [p for p in privates.PRIVATE_NAMES if p.owner == "SyncObj"], ids=lambda p: p.name)
def test_each_private_name_of_syncobj_exists_with_the_signature_the_bridge_expects(
    private: privates.Private, bare_syncobj: Any
) -> None:
    name = mangled(private.name)
    if private.signature is None:
        assert name in vars(bare_syncobj), f"SyncObj has no attribute {private.name} any more"
        return
    method = vars(pso.SyncObj).get(name)
    assert callable(method), f"SyncObj has no method {private.name} any more"
    assert str(inspect.signature(method)) == private.signature
    override = vars(bridge.Replica).get(name)
    if override is not None:  # an override keeps the parameters pysyncobj calls it with

        def parameters(f: Any) -> list[tuple[str, Any]]:
            return [(p.name, p.default) for p in inspect.signature(f).parameters.values()]

        assert parameters(override) == parameters(method)


CLASSES = {"SyncObj": pso.SyncObj, "TcpConnection": pso_tcp.TcpConnection, "TCPTransport": pso_transport.TCPTransport}


def instances(bare_syncobj: Any) -> dict[str, Any]:
    """An instance of each class whose private names the bridge uses: pysyncobj's own, not our subclasses."""
    return {"SyncObj": bare_syncobj, "TcpConnection": pso_tcp.TcpConnection(createPoller("auto")),
            "TCPTransport": bare_syncobj._SyncObj__transport}  # fmt: skip


@pytest.mark.parametrize("private", [p for p in privates.PRIVATE_NAMES if p.owner in ("TcpConnection", "TCPTransport")],
                         ids=lambda p: f"{p.owner}.{p.name}")  # fmt: skip
def test_each_private_name_of_the_connection_and_transport_exists_with_the_signature_the_bridge_expects(
    private: privates.Private, bare_syncobj: Any
) -> None:
    cls, name = CLASSES[private.owner], mangled(private.name, private.owner)
    if private.signature is None:
        assert name in vars(instances(bare_syncobj)[private.owner]), f"{private.owner} has no {private.name} any more"
        return
    method = vars(cls).get(name)
    assert callable(method), f"{private.owner} has no method {private.name} any more"
    assert str(inspect.signature(method)) == private.signature
    subclass = {"TcpConnection": bridge.BoundedConnection, "TCPTransport": bridge.GuardedTransport}[private.owner]
    override = vars(subclass).get(name)
    assert override is not None, f"{private.name} is listed as overridden"
    assert [(p.name, p.default) for p in inspect.signature(override).parameters.values()] == [
        (p.name, p.default) for p in inspect.signature(method).parameters.values()
    ]


BRIDGE_FILES = frozenset(p.resolve() for p in Path(bridge.__file__).parent.glob("*.py"))
"""The modules of the bridge package: the only ones that may import pysyncobj or name its privates."""


def test_every_private_name_the_bridge_uses_is_in_its_table(bare_syncobj: Any) -> None:
    source = "\n".join(p.read_text() for p in sorted(BRIDGE_FILES))
    table = {p.name for p in privates.PRIVATE_NAMES}
    for owner in ("SyncObj", "TcpConnection"):
        mangled_used = {f"__{n}" for n in re.findall(rf"_{owner}__(\w+)", source)}
        assert mangled_used and mangled_used <= table, mangled_used - table
    # single-underscore names of SyncObj and TCPTransport (not their public API), used on a replica, a transport
    # or the classes themselves
    for owner, instance in instances(bare_syncobj).items():
        listed = {p.name for p in privates.PRIVATE_NAMES if p.owner == owner}
        underscored = {n for n in re.findall(r"\.(_[a-zA-Z]\w*)", source) if hasattr(instance, n)}
        underscored -= {f"_{owner}{n}" for n in listed} | {"_kfed_frames"}
        assert underscored <= listed, (owner, underscored - listed)
    # module globals of pysyncobj the bridge reads or replaces
    modules = ((pso, "_pso"), (pso_tcp, "pso_tcp"), (pso_pickle, "pso_pickle"), (pso_transport, "pso_transport"),
               (pso_tcp_server, "pso_tcp_server"))  # fmt: skip
    for module, alias in modules:
        used = set(re.findall(rf"\b{alias}\.(\w+)", source)) | set(re.findall(rf"vars\({alias}\)\[\"(\w+)\"\]", source))
        listed = {p.name for p in privates.PRIVATE_NAMES if p.owner == module.__name__}
        assert used <= listed, (module.__name__, used - listed)


def product_sources() -> list[Path]:
    return [p for package in PRODUCT_PACKAGES if (REPO / package).is_dir() for p in (REPO / package).rglob("*.py")]


def test_no_other_module_of_kfed_imports_pysyncobj_or_names_its_privates() -> None:
    private = re.compile(r"\b_(SyncObj|FileJournal|ResizableFile|MetaStorer|TcpConnection|TCPTransport|Serializer)__")
    imports = re.compile(r"^\s*(import|from)\s+pysyncobj\b", re.MULTILINE)
    source = "\n".join(p.read_text() for p in sorted(BRIDGE_FILES))
    assert len(BRIDGE_FILES) >= 3 and private.search(source) and imports.search(source)  # the scan works
    offenders = [
        str(p.relative_to(REPO))
        for p in product_sources()
        if p.resolve() not in BRIDGE_FILES and (private.search(p.read_text()) or imports.search(p.read_text()))
    ]
    assert offenders == []


MANGLED = re.compile(r"\b_(SyncObj|FileJournal|ResizableFile|MetaStorer|TcpConnection|TCPTransport|Serializer)(__\w+)")
PYSYNCOBJ_MODULE = re.compile(r"^\s*import (pysyncobj(?:\.\w+)*)(?: as (\w+))?$", re.MULTILINE)


def test_outside_the_bridge_only_tests_name_pysyncobjs_privates_and_only_those_the_bridge_lists() -> None:
    """The benchmark names none and patches no pysyncobj module (it uses ``bridge.journal_of`` and ``leads``);
    a test may name one only if ``PRIVATE_NAMES`` lists it, so that the table pins it."""
    listed = {(p.owner, p.name) for p in privates.PRIVATE_NAMES}
    for path in sorted((REPO / "bench").rglob("*.py")):
        text = path.read_text()
        assert not MANGLED.search(text), path
        underscored = {n for n in re.findall(r"\.(_[a-zA-Z]\w*)\(", text) if hasattr(pso.SyncObj, n)}
        assert not underscored, (path, underscored)
        for module, alias in PYSYNCOBJ_MODULE.findall(text):
            assert not re.search(rf"^\s*{re.escape(alias or module)}\.\w+\s*=[^=]", text, re.MULTILINE), path
    scanned = 0
    for path in sorted((REPO / "tests").rglob("*.py")):
        for owner, name in MANGLED.findall(path.read_text()):
            scanned += 1
            assert (owner, name) in listed, f"{path.relative_to(REPO)} names {owner}.{name}, which PRIVATE_NAMES lacks"
    assert scanned  # the scan works: this file drives a Replica through them


def test_the_journal_implements_pysyncobjs_journal_interface() -> None:
    for name, method in vars(pso_journal.Journal).items():
        if callable(method) and (not name.startswith("__") or name in ("__getitem__", "__len__")):
            ours = getattr(journal.CheckedJournal, name, None)
            assert callable(ours), name
            assert list(inspect.signature(ours).parameters) == list(inspect.signature(method).parameters), name


NOTHING_PATCHED_AT_IMPORT = r"""
import inspect, json, sys, zlib
import pysyncobj.journal, pysyncobj.pickle, pysyncobj.serializer, pysyncobj.syncobj, pysyncobj.tcp_connection

import pysyncobj.tcp_server, pysyncobj.transport
MODULES = {m.__name__: m for m in (pysyncobj.syncobj, pysyncobj.tcp_connection, pysyncobj.pickle,
                                   pysyncobj.transport, pysyncobj.tcp_server)}

def snapshot():
    names = {f"SyncObj.{k}": v for k, v in vars(pysyncobj.syncobj.SyncObj).items()}
    for module in MODULES.values():
        names.update({f"{module.__name__}.{k}": v for k, v in vars(module).items() if not k.startswith("__")})
    return {k: id(v) for k, v in names.items()}, pysyncobj.pickle.__dict__["__protocol"]

before = snapshot()
pristine = (pysyncobj.syncobj.createJournal is pysyncobj.journal.createJournal
            and pysyncobj.syncobj.Serializer is pysyncobj.serializer.Serializer
            and pysyncobj.tcp_connection.zlib is zlib and before[1] == 2)
import metadata_quorum
import metadata_quorum.privates
from metadata_quorum import STALL_GUARD_MS
import controller.http.health  # imports STALL_GUARD_MS from the package
after = snapshot()
changed = sorted(k for k in before[0].keys() | after[0].keys() if before[0].get(k) != after[0].get(k))
signatures = {}
for p in metadata_quorum.privates.PRIVATE_NAMES:
    if p.owner in MODULES:
        value = vars(MODULES[p.owner]).get(p.name, vars(MODULES[p.owner]).get(p.name))
        signatures[f"{p.owner}.{p.name}"] = (p.name in vars(MODULES[p.owner]),
                              None if p.signature is None else str(inspect.signature(value)))
metadata_quorum.bridge.install(0)  # the control: an install is seen
installed = snapshot()
print(json.dumps({"pristine": pristine, "changed": changed, "protocol": after[1], "signatures": signatures,
                  "install_changes": sorted(k for k in before[0] if before[0][k] != installed[0].get(k))}))
"""


def test_importing_the_raft_package_changes_nothing_in_pysyncobj() -> None:
    """A fresh interpreter imports ``metadata_quorum`` (and ``controller.http.health``, which takes a constant from
    it): pysyncobj's module globals and SyncObj's methods are the same objects as before, and every module-level name
    in the bridge's table exists with its signature in the pristine pysyncobj."""
    result = subprocess.run([sys.executable, "-c", NOTHING_PATCHED_AT_IMPORT], capture_output=True, text=True,
                            timeout=120, cwd=REPO)  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    assert seen["pristine"] and seen["changed"] == [] and seen["protocol"] == 2
    for p in privates.PRIVATE_NAMES:
        if p.owner.startswith("pysyncobj."):
            assert seen["signatures"][f"{p.owner}.{p.name}"] == [True, p.signature], p.name
    assert {
        "pysyncobj.syncobj.createJournal", "pysyncobj.syncobj.Serializer", "pysyncobj.tcp_connection.zlib",
        "pysyncobj.pickle.loads", "pysyncobj.pickle.load", "pysyncobj.transport.TcpConnection",
        "pysyncobj.tcp_server.TcpConnection",
    } <= set(seen["install_changes"])  # fmt: skip


def test_install_is_idempotent() -> None:
    bridge.install(3)
    first = (pso.createJournal, pso.Serializer, pso_pickle.loads, pso_pickle.load, pso_tcp.zlib)
    bridge.install(3)
    assert (pso.createJournal, pso.Serializer, pso_pickle.loads, pso_pickle.load, pso_tcp.zlib) == first
    assert pso_tcp.zlib.level == 3 and vars(pso_pickle)["__protocol"] == 4
    bridge.install(0)
    assert pso_tcp.zlib.level == 0


# -- frames: a connection that receives a code-running pickle is closed, and nothing runs ---------------------------
class Touch:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str]]:
        import os

        return os.system, (f"touch {self.path}",)


def frame(message_pickle: bytes) -> bytes:
    """A Raft frame exactly as pysyncobj's TcpConnection.send makes one (no password)."""
    data = zlib.compress(message_pickle, 3)
    return struct.pack("i", len(data)) + data


def delivered_until_closed(frames: list[bytes]) -> list[Any]:
    """Feed ``frames`` to a pysyncobj connection (as accepted by its server, the bridge installed); the messages
    it delivered before it closed itself. Fails if it stays open."""
    bridge.install(0)
    poller = createPoller("auto")
    ours, theirs = socket.socketpair()
    ours.setblocking(False)  # as pysyncobj's server sets up an accepted connection
    received: list[Any] = []
    closed: list[bool] = []
    conn = pso_tcp.TcpConnection(poller, onMessageReceived=received.append, onDisconnected=lambda: closed.append(True),
                                 socket=ours, timeout=10)  # fmt: skip
    try:
        for data in frames:
            theirs.sendall(data)
        deadline = time.monotonic() + 10
        while not closed and time.monotonic() < deadline:
            poller.poll(0.05)
        assert closed and conn.state == pso_tcp.CONNECTION_STATE.DISCONNECTED, "the connection stayed open"
        return received
    finally:
        conn.disconnect()
        theirs.close()


def test_a_frame_that_names_a_global_closes_the_connection_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    evil = frame(pickle.dumps(Touch(marker)))
    # The exploit is real: what pysyncobj does with a frame's bytes, with plain pickle, runs the command.
    pickle.loads(zlib.decompress(evil[4:]))
    assert marker.exists()
    marker.unlink()
    control = {"type": "response_vote", "term": 4}  # delivered before it: the connection did read frames
    assert delivered_until_closed([frame(pickle.dumps(control, 4)), evil]) == [control]
    assert not marker.exists()


def test_a_zlib_bomb_closes_the_connection() -> None:
    deflate = zlib.compressobj(9)
    inflated = pickle.dumps(bytes(wire.MAX_MESSAGE_BYTES + (1 << 20)), 4)  # a valid pickle, just too big
    bomb = deflate.compress(inflated) + deflate.flush()
    del inflated
    control = {"type": "response_vote", "term": 4}
    assert delivered_until_closed([frame(pickle.dumps(control, 4)), struct.pack("i", len(bomb)) + bomb]) == [control]
