"""The Raft shell in-process: one voter, the asyncio bridge, the threaded dump, a restart from disk."""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import inspect
import mmap
import struct
import subprocess
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.journal as pso_journal
import pysyncobj.pickle as pso_pickle
import pysyncobj.syncobj as pso
import pysyncobj.tcp_connection as pso_tcp
import pytest
from pysyncobj.monotonic import monotonic as pysyncobj_clock

from deploy.local import free_ports
from metadata_log import raft
from metadata_log.codec import pack
from metadata_log.errors import Unavailable
from metadata_log.image import MetadataImage
from metadata_log.records import ClusterRegistered, NoOp
from metadata_log.state import CorruptState, LogState, Proposal


def test_pinned_pysyncobj_internals_are_routed_through_ours() -> None:
    # raft.py reaches into pysyncobj's module names (and, in the test below, a private attribute);
    # an upgrade that changes them must fail here, not in production.
    assert importlib.metadata.version("pysyncobj") == "0.3.17"
    assert pso.createJournal is raft._create_journal
    assert pso.Serializer is raft._ThreadedDumpWriter
    # _Replica overrides or calls these SyncObj privates by their mangled names.
    for name in ("onMessageReceived", "sendNextNodeIdx", "getEntries", "getCurrentLogIndex", "deleteEntriesFrom",
                 "parseChangeClusterRequest", "doChangeCluster"):  # fmt: skip
        assert callable(getattr(pso.SyncObj, f"_SyncObj__{name}")), name
    # _Replica._onTick wraps pysyncobj's tick, which checks these before it reads its sockets.
    tick = inspect.getsource(pso.SyncObj._onTick)
    assert "self.__raftElectionDeadline < monotonicTime()" in tick and "self.__lastResponseTime[node] >" in tick
    for name in ("generateRaftTimeout", "getCurrentLogTerm", "connectedToAnyone"):  # the pre-vote's
        assert callable(getattr(pso.SyncObj, f"_SyncObj__{name}")), name
    assert "self.__transferInProgress = True" in inspect.getsource(pso.SyncObj)
    # _Replica._applyCommand queues as pysyncobj's does and wakes the tick that drains the queue once per burst.
    assert "self.__pipeNotifier.notify()" in inspect.getsource(pso.SyncObj._applyCommand)
    assert "self.__commandsQueue.get_nowait()" in inspect.getsource(pso.SyncObj._checkCommandsToApply)
    # TCP connections call the module-level zlib, which RaftNode replaces to set the compression level.
    assert "zlib.compress(" in inspect.getsource(pso_tcp.TcpConnection.send)
    assert "zlib.decompress(" in inspect.getsource(pso_tcp.TcpConnection)
    # ... and pickle through pysyncobj.pickle, whose protocol is the module global RaftNode sets.
    assert pso_tcp.pickle is pso_pickle and pso.pickle is pso_pickle
    assert "__protocol" in vars(pso_pickle) and "__protocol)" in inspect.getsource(pso_pickle.dumps)


def test_raft_messages_use_our_compression_level_and_stay_zlib_streams() -> None:
    message = b"PartitionsAdded" * 1000
    for level in (0, 3):
        wire = raft._WireZlib(level)
        packed = wire.compress(message, 3)  # pysyncobj passes its own level 3: ignored
        assert packed == zlib.compress(message, level) and zlib.decompress(packed) == message


@pytest.mark.parametrize("size", [0, 1, 70, 65_534, 65_535, 65_536, 2 * 65_535, 2 * 65_535 + 1, 300_000])
def test_level_0_is_a_zlib_stream_of_stored_blocks_at_every_block_boundary(size: int) -> None:
    message = bytes(range(256)) * (size // 256) + bytes(size % 256)
    packed = raft.zlib_stored(message)
    assert zlib.decompress(packed) == message
    blocks = max(1, -(-size // 65_535))
    assert len(packed) == 2 + 5 * blocks + size + 4  # header, a 5-byte head per block, the bytes, Adler-32


async def wait_leader(node: raft.RaftNode, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not node.is_leader():
        assert time.monotonic() < deadline, "single voter did not become leader"
        await asyncio.sleep(0.02)


async def restart_and_replay(
    address: str, data_dir: Path, image_before: MetadataImage, what: str, settings: raft.RaftSettings | None = None
) -> LogState:
    """Start a single voter again on ``data_dir``; its state once it has replayed up to ``image_before``
    (which it must then equal). ``what`` says what was lost when it does not get there."""
    state = LogState()
    node = raft.RaftNode(address, [], data_dir, state, settings)
    try:
        await wait_leader(node)
        deadline = time.monotonic() + 30  # a generous wait for the replay on a loaded machine, not a bound
        while state.image.offset < image_before.offset:
            assert time.monotonic() < deadline, what
            await asyncio.sleep(0.05)
        assert state.image == image_before
        return state
    finally:
        node.close()


async def test_a_journal_pickled_by_pysyncobjs_own_protocol_replays(tmp_path: Path) -> None:
    """Nodes pickle with protocol 4 (bytes as bytes); journals and peers of pysyncobj's protocol 2 still work."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    state = LogState()
    node = raft.RaftNode(address, [], tmp_path, state)
    assert vars(pso_pickle)["__protocol"] == raft.PICKLE_PROTOCOL == 4
    vars(pso_pickle)["__protocol"] = 2  # what an older kfed wrote
    try:
        await wait_leader(node)
        for i in range(5):
            await asyncio.wait_for(node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]), 5)
        image = state.image
    finally:
        node.close()
        vars(pso_pickle)["__protocol"] = raft.PICKLE_PROTOCOL
    assert image.offset == 4
    await restart_and_replay(address, tmp_path, image, "a protocol-2 journal did not replay")


async def test_a_committed_command_this_node_cannot_read_is_not_skipped_on_restart_either(tmp_path: Path) -> None:
    """A command of a newer metadata version (what a leader of a newer kfed replicates) halts the node when it
    commits, and again at the same place when the node replays its journal: never applied past silently."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    halts: list[str] = []
    state = LogState(halt=halts.append)  # returns: the node goes on here, so what it did next can be checked
    node = raft.RaftNode(address, [], tmp_path, state)
    try:
        await wait_leader(node)
        await asyncio.wait_for(node.propose([Proposal((ClusterRegistered("c1", "r1", "h:1"),))]), 5)
        image = state.image
        newer = pack([3, [[None, None, [[1, "ClusterRegistered", 0, ["c2"], ["r1"], ["h:2"]]]]]])
        await asyncio.to_thread(node._syncobj.apply_command, newer, sync=True, timeout=5)
        assert len(halts) == 1 and "metadata version 3 is newer than this kfed reads" in halts[0]
        assert state.image is image
    finally:
        node.close()
    again: list[str] = []
    restarted = LogState(halt=again.append)
    node = raft.RaftNode(address, [], tmp_path, restarted)
    try:
        deadline = time.monotonic() + 30  # a generous wait for the replay on a loaded machine, not a bound
        while not again:
            assert time.monotonic() < deadline, "the journal's newer command was not met again on restart"
            await asyncio.sleep(0.05)
        assert restarted.image == image
    finally:
        node.close()


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

    restarted = await restart_and_replay(address, tmp_path, image_before, "journal after the dump was not replayed",
                                         settings)  # fmt: skip
    assert restarted.outcome_for_key("k7") is not None  # idempotency keys survive restarts


async def test_a_kill_between_the_dump_and_the_journal_truncation_loses_nothing(tmp_path: Path) -> None:
    """The dump is durable, the journal not yet truncated behind it (a kill -9 in between): pysyncobj
    cleared such a journal at the restart, losing every entry after the dump."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    settings = raft.RaftSettings(compaction_min_entries=20, compaction_min_s=1)
    state = LogState()
    node = raft.RaftNode(address, [], tmp_path, state, settings)
    try:
        await wait_leader(node)
        for i in range(30):
            await asyncio.wait_for(node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]), 5)
        node.force_compaction()
        deadline = time.monotonic() + 10
        while node._syncobj.getStatus()["log_len"] > 2:
            assert time.monotonic() < deadline, "journal not truncated behind the dump"
            await asyncio.sleep(0.05)
        for _ in range(5):  # acknowledged entries after the dump: in the journal only
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
        image_before = state.image
    finally:
        node.close()
        await asyncio.sleep(0.3)
    journal = tmp_path / "raft.journal"
    _, entries = raft.read_journal(journal)
    first_idx, term = entries[0][1], entries[0][2]
    older = [(b"\x00", i, term) for i in range(first_idx - 3, first_idx)]  # what the truncation would drop
    raft._write_journal_file(journal, [*older, *entries])

    await restart_and_replay(address, tmp_path, image_before, "the entries after the dump were lost at the restart",
                             settings)  # fmt: skip


async def test_proposals_without_a_leader_fail_fast(tmp_path: Path) -> None:
    # Two voters, only one running: no leader can be elected, and a proposal must not queue forever.
    self_port, peer_port = free_ports(2)  # one call: two calls may hand out the same port twice
    node = raft.RaftNode(f"127.0.0.1:{self_port}", [f"127.0.0.1:{peer_port}"], tmp_path, LogState())
    try:
        with pytest.raises(Unavailable):
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
    finally:
        node.close()


@contextlib.contextmanager
def tick_parked(node: raft.RaftNode) -> Iterator[None]:
    """The node's Raft thread held at the end of a tick (in an on-tick callback, after it drained its command
    queue and before it waits on its sockets) for the body of the ``with``: what is queued meanwhile stays
    queued, however the interpreter switches threads."""
    parked, go = threading.Event(), threading.Event()

    def park() -> None:
        parked.set()
        go.wait()

    node._syncobj.addOnTickCallback(park)
    try:
        assert parked.wait(10), "the Raft thread did not come round"
        yield
    finally:
        go.set()  # first: the parked thread holds the lock that removing a callback takes
        node._syncobj.removeOnTickCallback(park)


async def test_a_burst_of_proposals_wakes_the_raft_thread_once_and_every_one_commits(tmp_path: Path) -> None:
    node = raft.RaftNode(
        f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(), raft.RaftSettings(journal_fsync=False)
    )
    notifier = node._syncobj._SyncObj__pipeNotifier
    wakes = 0
    notify = notifier.notify

    def counted() -> None:
        nonlocal wakes
        wakes += 1
        notify()

    notifier.notify = counted
    try:
        await wait_leader(node)
        with tick_parked(node):
            before = wakes
            burst = [node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]) for i in range(50)]
            # pysyncobj wrote a byte down the pipe per command; one wakes the thread that drains them all
            assert wakes - before == 1
        outcomes = await asyncio.wait_for(asyncio.gather(*burst), 10)
        offsets = [o[0].first_offset for o in outcomes]
        assert offsets == list(range(offsets[0], offsets[0] + 50))
        before = wakes
        for _ in range(20):  # one at a time: each must wake it again (not wait for its next tick)
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
        assert wakes - before == 20
    finally:
        node.close()


async def test_a_full_command_queue_fails_the_proposal_as_not_committed(tmp_path: Path) -> None:
    settings = raft.RaftSettings(journal_fsync=False, command_queue_size=3)
    node = raft.RaftNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(), settings)
    try:
        await wait_leader(node)
        with tick_parked(node):  # nothing drains the queue: the fourth proposal finds it full
            burst = [node.propose([Proposal((NoOp(),))]) for _ in range(10)]
        results = await asyncio.wait_for(asyncio.gather(*burst, return_exceptions=True), 10)
        refused = [r for r in results if isinstance(r, Unavailable)]
        assert len(refused) == 7 and all("QUEUE_FULL" in str(r) for r in refused)
        assert all(isinstance(r, list) and r[0].status == "committed" for r in results if r not in refused)
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


def test_a_batch_append_syncs_twice_and_reads_back_like_single_appends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A follower appends all the entries of one message with two syncs (entries, then the header's end over
    # them) instead of two per entry; the file is the same as after single appends, and sync-ordered.
    single = checked_journal(tmp_path / "single.journal")
    batched = raft._CheckedJournal(str(tmp_path / "batched.journal"), fsync=True)
    events: list[str] = []
    real_sync_range, real_write = raft.sync_range, batched._FileJournal__journalFile.write

    def sync_range(mm: object, offset: int, size: int) -> None:
        events.append(f"sync [{offset}, {offset + size})")
        real_sync_range(mm, offset, size)  # type: ignore[arg-type]

    monkeypatch.setattr(raft, "sync_range", sync_range)
    batched._FileJournal__journalFile.write = lambda at, data: (events.append(f"write@{at}"), real_write(at, data))[1]
    batched.add_entries([(b"command-%d" % i, i, 1 + i // 3) for i in range(1, 6)])
    end = batched._FileJournal__currentOffset
    assert raft._END_FIELD + 4 <= raft._HEADER_SIZE
    assert events == [
        f"write@{raft._HEADER_SIZE}",
        f"sync [{raft._HEADER_SIZE}, {end})",  # exactly the entries written
        f"write@{raft._END_FIELD}",
        f"sync [0, {raft._HEADER_SIZE})",  # the header, with the end field
    ]
    batched.add_entries([])
    assert len(events) == 4
    assert [batched[i] for i in range(len(batched))] == [single[i] for i in range(len(single))]
    single._destroy()
    batched._destroy()
    assert raft.read_journal(tmp_path / "batched.journal") == raft.read_journal(tmp_path / "single.journal")


def test_sync_range_msyncs_whole_pages_covering_the_range_and_leaves_the_mapping_resizable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if raft._msync is None:
        pytest.skip("no libc msync with a known MS_SYNC here: mmap.flush() is used")
    calls: list[tuple[int, int]] = []
    real_msync = raft._msync

    def msync(address: int, length: int, flags: int) -> int:
        calls.append((address, length))
        assert flags == raft._MS_SYNC
        return int(real_msync(address, length, flags))

    monkeypatch.setattr(raft, "_msync", msync)
    path = tmp_path / "mapped"
    path.write_bytes(bytes(3 * mmap.PAGESIZE))
    page = mmap.PAGESIZE
    with path.open("r+b") as f, mmap.mmap(f.fileno(), 0) as mm:
        mm[page + 10 : page + 20] = b"0123456789"
        raft.sync_range(mm, page + 10, 10)  # unaligned: from the start of its page
        raft.sync_range(mm, 5, 2 * page)  # across pages
        (first, first_length), (second, second_length) = calls
        assert first % page == 0 and first_length == 20  # [page, page + 20)
        assert second == first - page and second_length == 2 * page + 5  # [0, 2 pages + 5)
        mm.resize(4 * page)  # no buffer export left behind
        with pytest.raises(ValueError, match="not inside"):
            raft.sync_range(mm, 4 * page - 1, 2)
    assert path.read_bytes()[page + 10 : page + 20] == b"0123456789"


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


# -- the follower's append_entries rule (Raft Figure 2), driven through a real _Replica ------------------
def test_plan_append_deletes_only_from_the_first_conflict() -> None:
    log = {1: 0, 2: 1, 3: 1, 4: 1, 5: 1}  # index -> term
    e = [(b"x", i, t) for i, t in ((2, 1), (3, 1), (4, 2), (5, 2))]
    # a repeated/late message whose entries all match, shorter than the log: nothing deleted or appended
    assert raft.plan_append(log.get, 1, e[:2]) == raft.AppendPlan(None, (), 3)
    assert raft.plan_append(log.get, 2, []) == raft.AppendPlan(None, (), 2)  # a heartbeat verifies prevLogIdx
    # a conflict (index 4: term 1 here, 2 in the message) deletes from there and appends the rest
    assert raft.plan_append(log.get, 1, e) == raft.AppendPlan(4, e[2:], 5)
    # past the end: append what is new only
    longer = [*e[:2], (b"y", 4, 1), (b"y", 5, 1), (b"y", 6, 1)]
    assert raft.plan_append(log.get, 1, longer) == raft.AppendPlan(None, longer[4:], 6)


class ManualTick(raft.RaftSettings):
    def conf(self, data_dir: Path, node: raft.RaftNode) -> pso.SyncObjConf:
        conf = super().conf(data_dir, node)
        conf.autoTick = False  # messages and ticks are delivered by the test only: no thread, no races
        return conf


def manual_tick_node(tmp_path: Path) -> tuple[raft.RaftNode, str]:
    """A follower of a 3-voter quorum whose peers never answer, and one of those peers' address."""
    self_port, leader_port, other_port = free_ports(3)
    leader = f"127.0.0.1:{leader_port}"
    node = raft.RaftNode(f"127.0.0.1:{self_port}", [leader, f"127.0.0.1:{other_port}"], tmp_path, LogState(),
                         ManualTick())  # fmt: skip
    return node, leader


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
        assert [(i, t) for _, i, t in raft.read_journal(tmp_path / "raft.journal")[1]] == log()
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
        mark = raft.TickMark(now - 1.0, 0.05, now - 0.1, {quiet: now - 0.9, refreshed: now - 0.5})
        # a tick within its wait plus the guard: nothing moves
        assert not raft.excuse_stall(replica, raft.TickMark(now - 0.09, 0.05, 0, {}), now)
        assert replica._SyncObj__raftElectionDeadline == now - 0.1 and replica.kfed_stalls == 0

        assert raft.excuse_stall(replica, mark, now)  # stalled 0.95 s
        assert replica._SyncObj__raftElectionDeadline == pytest.approx(now + 0.85)
        # the quiet peer's time moves on (capped at now); the refreshed one heard from meanwhile stays
        assert replica._SyncObj__lastResponseTime == {quiet: now, refreshed: now - 0.05}
        assert replica.kfed_stalls == 1

        replica._SyncObj__raftElectionDeadline = now + 5  # refreshed by a heartbeat during the tick: kept
        assert raft.excuse_stall(replica, mark, now) and replica._SyncObj__raftElectionDeadline == now + 5

        # The tick marks how it started and judges the previous one by it.
        replica._onTick(0)
        assert replica._kfed_tick is not None and replica._kfed_tick.wait_s == 0
        replica._kfed_tick = raft.TickMark(pysyncobj_clock() - 2.0, 0, replica._SyncObj__raftElectionDeadline, {})
        deadline = replica._SyncObj__raftElectionDeadline
        replica._onTick(0)
        assert replica.kfed_stalls == 3 and replica._SyncObj__raftElectionDeadline >= deadline + 1.9
        assert node.status().stalls == 3  # what /metrics reports as kfed_raft_stalls_total
    finally:
        node.close()


def test_pre_vote_rules() -> None:
    # a peer agrees only if it is not the leader, heard no leader for an election timeout, and the asker's
    # log (last term, last index) is at least as up to date as its own
    assert raft.PreVote.agree((3, 10), (3, 10), 0.5, 0.3, is_leader=False)
    assert raft.PreVote.agree((4, 2), (3, 10), 0.5, 0.3, is_leader=False)
    assert not raft.PreVote.agree((3, 9), (3, 10), 0.5, 0.3, is_leader=False)  # behind: a wiped follower
    assert not raft.PreVote.agree((3, 10), (3, 10), 0.1, 0.3, is_leader=False)  # its leader is alive
    assert not raft.PreVote.agree((3, 10), (3, 10), 9.0, 0.3, is_leader=True)
    votes = raft.PreVote()
    votes.start(5)
    votes.answer("b", 4, True, voters=3)  # an answer to an older round
    votes.answer("b", 5, False, voters=3)
    assert not votes.won and not votes.granted
    votes.answer("b", 5, True, voters=3)
    assert votes.won  # itself + b of 3
    votes.start(6)
    votes.answer("b", 6, True, voters=5)
    assert not votes.won
    votes.answer("b", 6, True, voters=5)  # the same peer twice counts once
    votes.answer("c", 6, True, voters=5)
    assert votes.won
    votes.cancel()  # a leader was heard
    assert votes.term is None and not votes.won and not votes.granted
    votes.answer("d", 6, True, voters=5)
    assert not votes.granted


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
        asked = [m for _, m in sent if m["type"] == raft.PreVote.REQUEST]
        assert len(asked) == 2 and asked[0]["term"] == term + 1
        assert not any(m["type"] == "request_vote" for _, m in sent)

        # a peer that still hears its leader says no; another refusal: still no election
        replica._SyncObj__onMessageReceived(peer_b, {"type": raft.PreVote.REPLY, "term": term + 1, "granted": False})
        replica._onTick(0)
        assert replica.raftCurrentTerm == term
        # a majority agrees: the next tick campaigns
        replica._SyncObj__onMessageReceived(peer_c, {"type": raft.PreVote.REPLY, "term": term + 1, "granted": True})
        replica._onTick(0)
        assert replica.raftCurrentTerm == term + 1
        assert any(m["type"] == "request_vote" for _, m in sent)

        # asked by a peer while this node hears a leader: no, and the term stays
        sent.clear()
        replica._kfed_leader_heard = pysyncobj_clock()
        replica._SyncObj__onMessageReceived(peer_b, {"type": raft.PreVote.REQUEST, "term": term + 5, "log": [9, 99]})
        assert sent == [(peer_b, {"type": raft.PreVote.REPLY, "term": term + 5, "granted": False})]
        assert replica.raftCurrentTerm == term + 1

        # no leader heard: an asker whose term lags this node's, but whose log is as up to date, gets a yes
        # (it may hold the last committed entry; its real elections then raise its term)
        sent.clear()
        replica._kfed_leader_heard = pysyncobj_clock() - 5
        own_log = [replica._SyncObj__getCurrentLogTerm(), replica._SyncObj__getCurrentLogIndex()]
        replica._SyncObj__onMessageReceived(peer_b, {"type": raft.PreVote.REQUEST, "term": 1, "log": own_log})
        assert sent == [(peer_b, {"type": raft.PreVote.REPLY, "term": 1, "granted": True})]
        # ... and a node holding its elections until it is led (joining) still answers by its real timeout
        sent.clear()
        node.hold_elections_until_led()
        replica._SyncObj__onMessageReceived(peer_c, {"type": raft.PreVote.REQUEST, "term": 9, "log": own_log})
        assert sent == [(peer_c, {"type": raft.PreVote.REPLY, "term": 9, "granted": True})]
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
        stranger = raft.TCPNode("127.0.0.1:1")
        replica._SyncObj__onMessageReceived(stranger, {"type": raft.PreVote.REPLY, "term": term + 1, "granted": True})
        assert not replica._kfed_pre_vote.won
        # a heartbeat of a current leader arrives before the majority's answer: the round is over
        replica._SyncObj__onMessageReceived(peer, {
            "type": "append_entries", "term": term, "commit_index": 0, "prevLogIdx": 1, "prevLogTerm": 0,
            "entries": [],
        })  # fmt: skip
        assert replica._kfed_pre_vote.term is None
        replica._SyncObj__onMessageReceived(peer, {"type": raft.PreVote.REPLY, "term": term + 1, "granted": True})
        assert not replica._kfed_pre_vote.won and replica._SyncObj__raftElectionDeadline > pysyncobj_clock()
    finally:
        node.close()


def test_a_leader_ignores_replies_to_another_term() -> None:
    reply = {"type": "next_node_idx", "next_node_idx": 9, "reset": False, "success": True}
    assert raft.stale_reply({**reply, "term": 4}, 5)
    assert not raft.stale_reply({**reply, "term": 5}, 5)
    assert not raft.stale_reply(reply, 5)  # unstamped (an older kfed): as before
    assert not raft.stale_reply({"type": "append_entries", "term": 4}, 5)


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
    lost = "the journal written before the disk filled was not replayed"
    await restart_and_replay(address, tiny_disk, image_before, lost)


def test_only_a_plain_success_answer_keeps_the_leaders_next_index_ahead() -> None:
    def reply(**fields: object) -> dict[str, object]:
        return {"type": "next_node_idx", "next_node_idx": 7, "reset": False, "success": True, "term": 3, **fields}

    assert raft.is_progress_reply(reply())
    assert not raft.is_progress_reply(reply(reset=True))  # the follower lacks entries: go back
    assert not raft.is_progress_reply(reply(success=False, reset=True))
    assert not raft.is_progress_reply(reply(success=1))
    assert not raft.is_progress_reply({"type": "append_entries", "success": True})


def test_results_for_a_closed_loop_are_dropped_not_raised_in_the_tick() -> None:
    # at shutdown the loop that waited for a commit is closed before the Raft thread stops
    loop = asyncio.new_event_loop()
    got: list[int] = []
    raft.hand_over(loop, got.append, 1)
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    raft.hand_over(loop, got.append, 2)  # would raise "Event loop is closed" from call_soon_threadsafe
    assert got == [1]


def test_calls_handed_over_from_other_threads_run_in_order_and_a_failing_one_stops_none() -> None:
    loop = asyncio.new_event_loop()
    got: list[int] = []
    reported: list[BaseException] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context["exception"]))
    wakeups = 0
    call_soon_threadsafe = loop.call_soon_threadsafe

    def counted(*args: Any) -> Any:
        nonlocal wakeups
        wakeups += 1
        return call_soon_threadsafe(*args)

    loop.call_soon_threadsafe = counted  # type: ignore[method-assign]  # count how often the loop is woken

    def fail(n: int) -> None:
        raise ValueError(n)

    def post(first: int) -> None:
        for n in range(first, first + 5_000):
            raft.hand_over(loop, fail if n == first + 10 else got.append, n)

    async def run() -> None:
        threads = [threading.Thread(target=post, args=(first,)) for first in (0, 10_000)]
        for t in threads:
            t.start()
        while any(t.is_alive() for t in threads) or len(got) < 9_998:
            await asyncio.sleep(0.001)

    try:
        loop.run_until_complete(asyncio.wait_for(run(), 30))
    finally:
        loop.close()
    assert [n for n in got if n < 10_000] == [n for n in range(5_000) if n != 10]  # each thread's calls in order
    assert [n for n in got if n >= 10_000] == [n for n in range(10_000, 15_000) if n != 10_010]
    assert [str(e) for e in reported] in (["10", "10010"], ["10010", "10"])
    assert 1 <= wakeups < 10_000  # woken per burst, not per call
