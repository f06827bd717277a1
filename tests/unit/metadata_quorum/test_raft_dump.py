"""The node's full dump: written by a thread of its own, or received from the leader; never the older over the
newer, and durable before pysyncobj clears the journal behind it."""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from deploy.launcher import free_ports
from metadata_log.records import ClusterRegistered
from metadata_quorum import RaftNode, RaftSettings, bridge
from metadata_quorum import dump as raft_dump
from metadata_quorum.state import LogState, Proposal


def serializer(path: Path) -> Any:
    """The dump serializer pysyncobj builds (``bridge.install`` makes it ours), as pysyncobj builds it."""
    return bridge.DumpSerializer(str(path), 4 << 20, True, None, None, None)


def wait_done(dump: Any) -> tuple[int, Any]:
    deadline = time.monotonic() + 30  # a generous wait for a thread on a loaded machine, not a bound
    while True:
        state = dump.checkSerializing()
        if state[0] != bridge.SERIALIZER_STATE.SERIALIZING:
            return state  # type: ignore[no-any-return]
        assert time.monotonic() < deadline, "the dump writer never finished"
        time.sleep(0.01)


def test_a_dump_received_from_the_leader_is_not_overwritten_by_an_older_one_being_written(tmp_path: Path) -> None:
    """A local dump that started before a snapshot from the leader was installed used to rename its older state
    over the received one; after a restart the entries acknowledged since were gone."""
    path = tmp_path / "raft.dump"
    path.write_bytes(b"the dump before")
    dump = serializer(path)
    started, release = threading.Event(), threading.Event()

    def slow_encode() -> bytes:
        started.set()
        release.wait(30)
        return b"older: captured before the leader's snapshot"

    dump._writer.start(slow_encode, 7)
    assert started.wait(30)
    assert not dump.setTransmissionData((b"newer: from ", True, False))
    assert dump.setTransmissionData((b"the leader", False, True))
    assert path.read_bytes() == b"newer: from the leader"
    release.set()
    state, dump_id = wait_done(dump)
    assert (state, dump_id) == (bridge.SERIALIZER_STATE.FAILED, 7)  # pysyncobj keeps its journal
    assert path.read_bytes() == b"newer: from the leader"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["raft.dump"]
    # and a dump started after the install is written as before
    dump._writer.start(lambda: b"next", 8)
    assert wait_done(dump) == (bridge.SERIALIZER_STATE.SUCCESS, 8) and path.read_bytes() == b"next"


def test_a_received_dump_is_durable_before_it_replaces_the_dump(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """pysyncobj renamed it over the dump unsynced, then cleared the journal: a power loss could leave neither."""
    path = tmp_path / "raft.dump"
    events: list[str] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd: int) -> None:
        events.append(f"fsync {Path(os.readlink(f'/proc/self/fd/{fd}')).name}")
        real_fsync(fd)

    def replace(src: str, dst: str) -> None:
        events.append(f"rename {Path(src).name} {Path(dst).name}")
        real_replace(src, dst)

    monkeypatch.setattr(raft_dump.os, "fsync", fsync)
    monkeypatch.setattr(raft_dump.os, "replace", replace)
    monkeypatch.setattr("metadata_quorum.journal.os.fsync", fsync)
    dump = serializer(path)
    assert not dump.setTransmissionData((b"a", True, False))
    assert events == []
    assert dump.setTransmissionData((b"b", False, True))
    assert events == ["fsync raft.dump.1.tmp", "rename raft.dump.1.tmp raft.dump", f"fsync {tmp_path.name}"]
    assert path.read_bytes() == b"ab"


def test_received_chunks_follow_pysyncobjs_protocol(tmp_path: Path) -> None:
    path = tmp_path / "raft.dump"
    dump = serializer(path)
    assert not dump.setTransmissionData(None)
    assert not dump.setTransmissionData((b"x", False, True))  # no first chunk: nothing to finish
    assert not path.exists()
    assert not dump.setTransmissionData((b"abandoned", True, False))
    assert dump.setTransmissionData((b"again", True, True))  # a new first chunk starts over
    assert path.read_bytes() == b"again"


def test_a_received_dump_that_cannot_be_written_is_refused_and_the_old_one_kept(tmp_path: Path) -> None:
    path = tmp_path / "raft.dump"
    path.write_bytes(b"old")
    dump = serializer(path)
    (tmp_path / "raft.dump.1.tmp").mkdir()  # cannot be opened as a file
    assert not dump.setTransmissionData((b"new", True, True))
    assert path.read_bytes() == b"old" and dump.checkSerializing()[0] == bridge.SERIALIZER_STATE.NOT_SERIALIZING


async def test_a_wiped_voter_catches_up_from_the_dump_its_leader_sends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three voters in this process; one is wiped while the others write and compact past what it held: the
    leader sends it the dump (pysyncobj's snapshot), which it receives through ``DumpWriter.receive``."""
    installed: list[str] = []
    receive = raft_dump.DumpWriter.receive

    def counted(writer: raft_dump.DumpWriter, chunk: bytes, first: bool, last: bool) -> bool:
        done = receive(writer, chunk, first, last)
        if done:
            installed.append(writer._file_name)
        return done

    monkeypatch.setattr(raft_dump.DumpWriter, "receive", counted)
    addresses = [f"127.0.0.1:{port}" for port in free_ports(3)]
    settings = RaftSettings(compaction_min_entries=20, compaction_min_s=1, journal_fsync=False)

    def start(i: int) -> RaftNode:
        peers = [a for a in addresses if a != addresses[i]]
        return RaftNode(addresses[i], peers, tmp_path / f"n{i}", LogState(), settings)

    async def leader_of(nodes: list[RaftNode]) -> RaftNode:
        deadline = time.monotonic() + 30  # a generous wait for an election on a loaded machine, not a bound
        while not any(n.is_leader() for n in nodes):
            assert time.monotonic() < deadline, "no leader"
            await asyncio.sleep(0.05)
        return next(n for n in nodes if n.is_leader())

    async def write(nodes: list[RaftNode], first: int, count: int) -> None:
        for i in range(first, first + count):
            proposal = Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))
            await asyncio.wait_for((await leader_of(nodes)).propose([proposal]), 10)

    nodes = [start(i) for i in range(3)]
    try:
        await write(nodes, 0, 5)
        nodes[2].close()
        shutil.rmtree(tmp_path / "n2")
        await write(nodes[:2], 5, 60)
        for node in nodes[:2]:
            node.force_compaction()
        deadline = time.monotonic() + 30
        while not all((tmp_path / f"n{i}" / "raft.dump").exists() for i in range(2)):
            assert time.monotonic() < deadline, "the two voters did not dump"
            await asyncio.sleep(0.05)
        await write(nodes[:2], 65, 5)  # the journal after the dump
        nodes[2] = start(2)
        leader = await leader_of(nodes[:2])
        deadline = time.monotonic() + 30
        while nodes[2].state.image != leader.state.image:
            assert time.monotonic() < deadline, "the wiped voter did not catch up"
            await asyncio.sleep(0.05)
        assert nodes[2].state.image.offset == 69
        assert installed == [str(tmp_path / "n2" / "raft.dump")]
        assert (tmp_path / "n2" / "raft.dump").exists() and not list((tmp_path / "n2").glob("*.tmp"))
    finally:
        for node in nodes:
            node.close()
