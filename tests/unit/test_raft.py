"""The Raft shell in-process: one voter, the asyncio bridge, the threaded dump, a restart from disk."""

from __future__ import annotations

import asyncio
import importlib.metadata
import time
from pathlib import Path

import pysyncobj.syncobj as pso
import pytest

from deploy.local import free_ports
from metadata_log import raft
from metadata_log.errors import Unavailable
from metadata_log.records import ClusterRegistered, NoOp
from metadata_log.state import LogState, Proposal


def test_pinned_pysyncobj_internals_are_routed_through_ours() -> None:
    # raft.py reaches into pysyncobj's module names (and, in the test below, a private attribute);
    # an upgrade that changes them must fail here, not in production.
    assert importlib.metadata.version("pysyncobj") == "0.3.17"
    assert pso.createJournal is raft._create_journal
    assert pso.Serializer is raft._ThreadedDumpWriter


async def wait_leader(node: raft.RaftNode, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not node.is_leader():
        assert time.monotonic() < deadline, "single voter did not become leader"
        await asyncio.sleep(0.02)


async def test_propose_dump_and_restart(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    settings = raft.RaftSettings(compaction_min_entries=20, compaction_min_s=1)
    state = LogState()
    node = raft.RaftNode(address, [], tmp_path, state, settings)
    try:
        await wait_leader(node)
        assert hasattr(node._syncobj, "_SyncObj__raftElectionDeadline")
        for i in range(60):
            outcomes = await asyncio.wait_for(
                node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),), f"k{i}", "fp")]), 5
            )
            assert outcomes[0].status == "committed" and outcomes[0].first_offset == i
        node.force_compaction()
        deadline = time.monotonic() + 10
        while not (tmp_path / "raft.dump").exists():
            assert time.monotonic() < deadline, "no dump written"
            await asyncio.sleep(0.05)
        while node._syncobj.getStatus()["log_len"] > 2:  # pysyncobj drops what the dump covers
            assert time.monotonic() < deadline, "journal not truncated behind the dump"
            await asyncio.sleep(0.05)
        for _ in range(5):  # entries after the dump live only in the journal
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
        image_before = state.image
    finally:
        node.close()
        await asyncio.sleep(0.3)

    restarted_state = LogState()
    restarted = raft.RaftNode(address, [], tmp_path, restarted_state, settings)
    try:
        await wait_leader(restarted)
        deadline = time.monotonic() + 10
        while restarted_state.image.offset < image_before.offset:
            assert time.monotonic() < deadline, "journal after the dump was not replayed"
            await asyncio.sleep(0.05)
        assert restarted_state.image == image_before
        assert restarted_state.outcome_for_key("k7") is not None  # idempotency keys survive restarts
    finally:
        restarted.close()


async def test_proposals_without_a_leader_fail_fast(tmp_path: Path) -> None:
    # Two voters, only one running: no leader can be elected, and a proposal must not queue forever.
    self_port, peer_port = free_ports(2)  # one call: two calls may hand out the same port twice
    node = raft.RaftNode(f"127.0.0.1:{self_port}", [f"127.0.0.1:{peer_port}"], tmp_path, LogState())
    try:
        with pytest.raises(Unavailable):
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
    finally:
        node.close()
