"""The Raft node in-process: one voter, the asyncio bridge, the threaded dump, a restart from disk."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pysyncobj.pickle as pso_pickle
import pytest

from deploy.launcher import free_ports
from metadata_log.codec import pack
from metadata_log.errors import Unavailable
from metadata_log.records import ClusterRegistered, NoOp
from metadata_quorum import Mailboxes, RaftNode, RaftSettings, journal, wire
from metadata_quorum.state import LogState, Proposal
from tests.waiting import wait_until

from .raft_support import private_name, restart_and_replay, tmpfs, wait_leader


async def test_a_journal_pickled_by_pysyncobjs_own_protocol_replays(tmp_path: Path) -> None:
    """Nodes pickle with protocol 4 (bytes as bytes); journals and peers of pysyncobj's protocol 2 still work."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    state = LogState()
    node = RaftNode(address, [], tmp_path, state)
    assert vars(pso_pickle)["__protocol"] == wire.PICKLE_PROTOCOL == 4
    vars(pso_pickle)["__protocol"] = 2  # what an older kfed wrote
    try:
        await wait_leader(node)
        for i in range(5):
            await asyncio.wait_for(node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]), 5)
        image = state.image
    finally:
        node.close()
        vars(pso_pickle)["__protocol"] = wire.PICKLE_PROTOCOL
    assert image.offset == 4
    await restart_and_replay(address, tmp_path, image, "a protocol-2 journal did not replay")


async def test_a_committed_command_this_node_cannot_read_is_not_skipped_on_restart_either(tmp_path: Path) -> None:
    """A command of a newer metadata version (what a leader of a newer kfed replicates) halts the node when it
    commits, and again at the same place when the node replays its journal: never applied past silently."""
    address = f"127.0.0.1:{free_ports(1)[0]}"
    halts: list[str] = []
    state = LogState(halt=halts.append)  # returns: the node goes on here, so what it did next can be checked
    node = RaftNode(address, [], tmp_path, state)
    try:
        await wait_leader(node)
        await asyncio.wait_for(node.propose([Proposal((ClusterRegistered("c1", "r1", "h:1"),))]), 5)
        image = state.image
        newer = pack([5, [[None, None, [[1, "ClusterRegistered", 0, ["c2"], ["r1"], ["h:2"]]]]]])
        await asyncio.to_thread(node._syncobj.apply_command, newer, sync=True, timeout=5)
        assert len(halts) == 1 and "metadata version 5 is newer than this kfed reads" in halts[0]
        assert state.image is image
    finally:
        node.close()
    again: list[str] = []
    restarted = LogState(halt=again.append)
    node = RaftNode(address, [], tmp_path, restarted)
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
    settings = RaftSettings(compaction_min_entries=20, compaction_min_s=1)
    state = LogState()
    node = RaftNode(address, [], tmp_path, state, settings)
    try:
        await wait_leader(node)
        assert hasattr(node._syncobj, private_name("__raftElectionDeadline"))
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
    settings = RaftSettings(compaction_min_entries=20, compaction_min_s=1)
    state = LogState()
    node = RaftNode(address, [], tmp_path, state, settings)
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
    path = tmp_path / "raft.journal"
    _, entries = journal.read_journal(path)
    first_idx, term = entries[0][1], entries[0][2]
    older = [(b"\x00", i, term) for i in range(first_idx - 3, first_idx)]  # what the truncation would drop
    journal._write_journal_file(path, [*older, *entries])

    await restart_and_replay(address, tmp_path, image_before, "the entries after the dump were lost at the restart",
                             settings)  # fmt: skip


async def test_proposals_without_a_leader_fail_fast(tmp_path: Path) -> None:
    # Two voters, only one running: no leader can be elected, and a proposal must not queue forever.
    self_port, peer_port = free_ports(2)  # one call: two calls may hand out the same port twice
    node = RaftNode(f"127.0.0.1:{self_port}", [f"127.0.0.1:{peer_port}"], tmp_path, LogState())
    try:
        with pytest.raises(Unavailable):
            await asyncio.wait_for(node.propose([Proposal((NoOp(),))]), 5)
    finally:
        node.close()


@contextlib.contextmanager
def tick_parked(node: RaftNode) -> Iterator[None]:
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
    node = RaftNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(), RaftSettings(journal_fsync=False))
    notifier = getattr(node._syncobj, private_name("__pipeNotifier"))
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
    settings = RaftSettings(journal_fsync=False, command_queue_size=3)
    node = RaftNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(), settings)
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


@pytest.fixture
def tiny_disk(tmp_path: Path) -> Iterator[Path]:
    """A 2 MiB tmpfs (needs root and mount; skipped elsewhere)."""
    with tmpfs(tmp_path / "disk") as mount_point:
        yield mount_point


async def test_write_on_a_full_disk_fails_and_the_state_survives(tiny_disk: Path) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    state = LogState()
    node = RaftNode(address, [], tiny_disk, state)
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


def test_results_for_a_closed_loop_are_dropped_not_raised_in_the_tick() -> None:
    # at shutdown the loop that waited for a commit is closed before the Raft thread stops
    loop = asyncio.new_event_loop()
    got: list[int] = []
    hand_over = Mailboxes().hand_over
    hand_over(loop, got.append, 1)
    loop.run_until_complete(asyncio.sleep(0))
    loop.close()
    hand_over(loop, got.append, 2)  # would raise "Event loop is closed" from call_soon_threadsafe
    assert got == [1]


def test_calls_handed_over_from_other_threads_run_in_order_and_a_failing_one_stops_none() -> None:
    loop = asyncio.new_event_loop()
    hand_over = Mailboxes().hand_over
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
            hand_over(loop, fail if n == first + 10 else got.append, n)

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


async def test_a_writes_reply_never_overtakes_the_update_that_published_it(tmp_path: Path) -> None:
    """A node's mailboxes are its own; a publisher handing over to the same loop shares them (as the controller's
    read model does), so a client that got its reply reads its write."""
    loop = asyncio.get_running_loop()
    mailboxes = Mailboxes()
    published: list[int] = []

    class OnLoop:
        def on_update(self, delta: Any, image: Any) -> None:  # on the Raft thread
            mailboxes.hand_over(loop, published.append, image.offset)

    node = RaftNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(OnLoop()), RaftSettings(), mailboxes)
    try:
        assert node.mailboxes is mailboxes and Mailboxes().hand_over != mailboxes.hand_over
        await wait_leader(node)
        replies = [node.propose([Proposal((ClusterRegistered(f"c{i}", "r1", "h:1"),))]) for i in range(30)]
        for reply in asyncio.as_completed(replies):
            outcome = (await asyncio.wait_for(reply, 10))[0]
            assert published and published[-1] >= outcome.last_offset
    finally:
        node.close()


async def test_a_raft_address_another_socket_holds_is_said_and_taken_once_it_is_free(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """pysyncobj retries a failed bind every second and says nothing: a node that never joined its quorum, with
    no word why. Here the port is the source port of an outgoing connection, as a port picked free a moment
    earlier can become."""
    listener = socket.create_server(("127.0.0.1", 0))
    holder = socket.create_connection(listener.getsockname())
    address = f"127.0.0.1:{holder.getsockname()[1]}"
    node = RaftNode(address, [], tmp_path, LogState())
    try:
        await logged(caplog, f"cannot listen on the Raft address {address}")
        listener.close()  # resets the connection it never accepted: the port is free at once
        holder.close()
        await logged(caplog, f"listening on the Raft address {address} now")
        await wait_leader(node)
    finally:
        node.close()
        holder.close()
        listener.close()


async def logged(caplog: pytest.LogCaptureFixture, text: str) -> None:
    """Until ``text`` is in the log (the Raft thread writes it); waited for off the event loop."""
    await asyncio.to_thread(wait_until, lambda: text in caplog.text, 30, f"logged: {text}")
