"""The Raft shell in-process: one voter, the asyncio bridge, the threaded dump, a restart from disk."""

from __future__ import annotations

import asyncio
import importlib.metadata
import struct
import subprocess
import time
from pathlib import Path

import pysyncobj.journal as pso_journal
import pysyncobj.syncobj as pso
import pytest

from deploy.local import free_ports
from metadata_log import raft
from metadata_log.errors import Unavailable
from metadata_log.records import ClusterRegistered, NoOp
from metadata_log.state import CorruptState, LogState, Proposal


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


# -- durability edges: a damaged journal is refused at start, disk full fails the write ---------------
def checked_journal(path: Path, entries: int = 5) -> raft._CheckedJournal:
    journal = raft._CheckedJournal(str(path), fsync=True)
    for i in range(1, entries + 1):
        journal.add(b"command-%d" % i, i, 1 + i // 3)
    return journal


def test_journal_round_trip_and_an_unfinished_append_past_the_end_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    checked_journal(path)._destroy()
    fmt, entries = raft.read_journal(path)
    assert fmt == raft._CHECKED_FORMAT and [e[1] for e in entries] == [1, 2, 3, 4, 5]
    # Bytes of an append whose header update never happened (a crash mid-append): not an entry.
    _, end = struct.unpack_from("<II", path.read_bytes(), raft._FORMAT_FIELD)
    with open(path, "r+b") as f:
        f.seek(end)
        f.write(raft._encode_entry(b"never acknowledged", 6, 2)[:-7])
    assert raft.read_journal(path)[1] == entries
    reopened = raft._CheckedJournal(str(path), fsync=True)
    assert [reopened[i] for i in range(len(reopened))] == entries
    reopened._destroy()


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda data: data[: len(data) // 2], "truncated"),  # the header's end is past the file's end
        (lambda data: data[:-40] + bytes(40), "bad size"),  # the tail zeroed (lost pages)
        (lambda data: data[:60] + bytes([data[60] ^ 0x01]) + data[61:], "checksum"),  # one bit flipped
        (lambda data: b"garbage!" + data[8:], "not a Raft journal"),
    ],
)
def test_damaged_journal_is_refused_with_a_clear_error(tmp_path: Path, damage, message: str) -> None:
    path = tmp_path / "raft.journal"
    checked_journal(path)._destroy()
    _, end = struct.unpack_from("<II", path.read_bytes(), raft._FORMAT_FIELD)
    path.write_bytes(damage(path.read_bytes()[:end]))
    with pytest.raises(CorruptState, match=message) as error:
        raft._CheckedJournal(str(path), fsync=True)
    assert "Refusing to start" in str(error.value) and str(path) in str(error.value)


def test_damaged_term_and_vote_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path)
    journal.setCurrentTerm(7, "127.0.0.1:1")
    journal._destroy()
    Path(str(path) + ".meta").write_bytes(b"\x80\x04garbage")
    with pytest.raises(CorruptState, match="term and vote"):
        raft._CheckedJournal(str(path), fsync=True)


def test_legacy_journal_is_checked_and_rewritten_with_checksums(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    legacy = pso_journal.FileJournal(str(path))
    for i in range(1, 4):
        legacy.add(b"old-%d" % i, i, 1)
    legacy._destroy()
    assert raft.read_journal(path)[0] == raft._LEGACY_FORMAT
    journal = raft._CheckedJournal(str(path), fsync=True)
    assert [journal[i] for i in range(3)] == [(b"old-%d" % i, i, 1) for i in range(1, 4)]
    journal._destroy()
    assert raft.read_journal(path)[0] == raft._CHECKED_FORMAT


def test_compaction_rewrites_the_journal_atomically(tmp_path: Path) -> None:
    path = tmp_path / "raft.journal"
    journal = checked_journal(path, entries=8)
    journal.deleteEntriesTo(5)  # what pysyncobj does once a dump covers entries 1-5
    journal.add(b"after", 9, 3)
    journal._destroy()
    assert [(c, i) for c, i, _ in raft.read_journal(path)[1]] == [
        (b"command-6", 6), (b"command-7", 7), (b"command-8", 8), (b"after", 9)
    ]  # fmt: skip
    assert not (tmp_path / "raft.journal.tmp").exists()


def test_guard_keeps_a_snapshot_message_from_committing_unchecked_entries() -> None:
    chunk = {"type": "append_entries", "term": 9, "commit_index": 500, "serialized": ("data", True, False)}
    assert raft.guard_snapshot_commit(chunk, 120)["commit_index"] == 120
    regular = {"type": "append_entries", "term": 9, "commit_index": 500, "prevLogIdx": 499, "prevLogTerm": 9}
    assert raft.guard_snapshot_commit(regular, 120) is regular  # checked against the log: may commit


@pytest.fixture
def tiny_disk(tmp_path: Path):
    """A 2 MiB tmpfs (needs root and mount; skipped elsewhere)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount_point)],
                            capture_output=True)  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def test_journal_on_a_full_disk_refuses_the_entry_and_stays_readable(tiny_disk: Path) -> None:
    path = tiny_disk / "raft.journal"
    journal = raft._CheckedJournal(str(path), fsync=True)
    added = 0
    with pytest.raises(raft.JournalFull):
        while True:
            journal.add(bytes(20_000), added + 1, 1)
            added += 1
    assert len(journal) == added and added > 10
    journal._destroy()
    assert len(raft.read_journal(path)[1]) == added  # nothing half-written


async def test_write_on_a_full_disk_fails_and_the_state_survives(tiny_disk: Path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    state = LogState()
    node = raft.RaftNode(address, [], tiny_disk, state)
    big = "h:1," * 2000  # ~8 kB of bootstrap servers per record
    committed = 0
    try:
        await wait_leader(node)
        with pytest.raises(Unavailable, match="disk full"):
            for i in range(1000):
                await asyncio.wait_for(node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", big),))]), 10)
                committed += 1
        assert committed > 10
        image_before = state.image
    finally:
        node.close()
        await asyncio.sleep(0.3)
    restarted_state = LogState()
    restarted = raft.RaftNode(address, [], tiny_disk, restarted_state)
    try:
        await wait_leader(restarted)
        deadline = time.monotonic() + 10
        while restarted_state.image.offset < image_before.offset:
            assert time.monotonic() < deadline, "the journal written before the disk filled was not replayed"
            await asyncio.sleep(0.05)
        assert restarted_state.image == image_before
    finally:
        restarted.close()
