"""Raft connections are bounded before anything is authenticated: a frame's declared length, the first frame of
an accepted connection, the connections that never say who they are; against pysyncobj's own connection class
(the bridge installed) and a real node, with and without the Raft secret."""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import socket
import struct
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pysyncobj.pickle as pso_pickle
import pysyncobj.tcp_server as pso_tcp_server
import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.poller import createPoller
from pysyncobj.syncobj import SyncObj
from pysyncobj.tcp_connection import CONNECTION_STATE

from deploy.launcher import free_ports
from metadata_log import codec
from metadata_log.errors import PayloadTooLarge
from metadata_log.records import ClusterRegistered
from metadata_quorum import RaftNode, RaftSettings, bridge, wire
from metadata_quorum import node as raft_node
from metadata_quorum.state import LogState, Proposal

from .raft_support import wait_leader

HEAD = struct.Struct("i")  # pysyncobj's frame length: struct.pack('i', len(data))


def frame(message: Any, level: int = 0) -> bytes:
    data = wire.WireZlib(level).compress(pickle.dumps(message, 4))
    return HEAD.pack(len(data)) + data


@dataclass
class Accepted:
    """A pysyncobj connection as its server accepts one (the bridge installed), and its peer's socket."""

    conn: Any
    peer: socket.socket
    poller: Any
    received: list[Any] = field(default_factory=list)
    closed: list[bool] = field(default_factory=list)

    def poll_until(self, done: Any, timeout_s: float = 10) -> None:
        deadline = time.monotonic() + timeout_s
        while not done() and time.monotonic() < deadline:
            self.poller.poll(0.02)


@contextlib.contextmanager
def accepted_connection() -> Iterator[Accepted]:
    bridge.install(0)
    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    poller = createPoller("auto")
    accepted = Accepted(None, theirs, poller)
    accepted.conn = pso_tcp_server.TcpConnection(
        poller, onMessageReceived=accepted.received.append, onDisconnected=lambda: accepted.closed.append(True),
        socket=ours, timeout=3600, recvBufferSize=1 << 20,
    )  # fmt: skip
    try:
        yield accepted
    finally:
        accepted.conn.disconnect()
        theirs.close()


def send_behind(sock: socket.socket, data: bytes) -> threading.Thread:
    """``sock.sendall(data)`` on a thread (the connection reads on this one); a dropped connection ends it."""

    def send() -> None:
        with contextlib.suppress(OSError):
            sock.sendall(data)

    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("declared", [2**31 - 1, wire.MAX_FRAME_BYTES + 1, -1, -(2**31)])
def test_a_frame_declaring_more_than_the_limit_or_a_negative_length_drops_the_connection_at_once(declared: int) -> None:
    with accepted_connection() as a:
        a.peer.sendall(frame("127.0.0.1:1") + HEAD.pack(declared) + b"\0" * 1000)  # a first frame, then the lie
        a.poll_until(lambda: bool(a.closed))
        assert a.closed and a.received == ["127.0.0.1:1"]


def test_the_first_frame_of_an_accepted_connection_is_small_and_later_ones_may_be_big() -> None:
    big = {"type": "append_entries", "term": 1, "entries": [(bytes(5 << 20), 2, 1)]}  # more than a hello
    with accepted_connection() as a:
        send_behind(a.peer, frame(big))
        a.poll_until(lambda: bool(a.closed))
        assert a.closed and a.received == []
    with accepted_connection() as a:
        send_behind(a.peer, frame("127.0.0.1:1") + frame(big) + frame({"type": "response_vote", "term": 1}))
        a.poll_until(lambda: len(a.received) == 3 or bool(a.closed))
        assert a.received == ["127.0.0.1:1", big, {"type": "response_vote", "term": 1}] and not a.closed


def test_a_frame_trickling_in_is_buffered_once_not_copied_per_piece() -> None:
    """pysyncobj kept the received bytes in a bytes object, copied whole on every receive: a frame that trickles
    in cost the square of its size on the Raft thread. Here the buffer grows in place."""
    message = {"type": "append_entries", "term": 1, "entries": [(bytes(range(256)) * 8192, 2, 1)]}  # 2 MiB
    with accepted_connection() as a:
        a.peer.sendall(frame("127.0.0.1:1"))
        a.poll_until(lambda: bool(a.received))
        data = frame(message)
        buffers: list[tuple[type, int]] = []
        for start in range(0, len(data), 64 * 1024):
            a.peer.sendall(data[start : start + 64 * 1024])
            a.poller.poll(0.05)
            if not a.received[1:]:
                buffers.append((type(a.conn.kfed_frames.data), id(a.conn.kfed_frames.data)))
        a.poll_until(lambda: len(a.received) == 2)
        assert a.received[1] == message and not a.closed
        assert len(buffers) > 10 and len(set(buffers[1:])) == 1  # from the second piece on: one buffer
        assert buffers[1][0] is bytearray  # growing in place


def test_a_frame_of_the_largest_message_fits_the_limit_with_the_password() -> None:
    """The largest message a node sends, measured: entries up to the batch size, counted as the bridge counts
    them, then the biggest command that crosses it; pickled, compressed (at the configured level) and encrypted
    as pysyncobj does."""
    bridge.install(0)

    def small(i: int) -> bytes:  # about the smallest command kfed proposes; each a bytes object of its own
        return b"\x00" + pickle.dumps((0, (i.to_bytes(40, "big"),)), 4)

    below_batch = (wire.APPEND_ENTRIES_BATCH_BYTES - 1) // (len(small(0)) + wire.ENTRY_PICKLE_BYTES)
    log = [(small(i), i, 7) for i in range(1, below_batch + 1)]
    log.append((bytes(wire.MAX_COMMAND_BYTES), len(log) + 1, 7))

    class Log:  # what Replica's __getEntries reads
        _SyncObj__raftLog = log

    entries = bridge.Replica._SyncObj__getEntries(Log(), 1, None, wire.APPEND_ENTRIES_BATCH_BYTES)
    assert entries == log  # the big command crossed the batch
    message = {"type": "append_entries", "term": 7, "commit_index": 10**9, "entries": entries,
               "prevLogIdx": 10**9, "prevLogTerm": 7}  # fmt: skip
    plain = wire.WireZlib(RaftSettings().wire_compression).compress(pso_pickle.dumps((bytes(32), message)))
    encrypted = getEncryptor("secret").encrypt_at_time(plain, int(time.monotonic()))
    assert len(encrypted) <= wire.MAX_FRAME_BYTES
    assert wire.MAX_FRAME_BYTES - len(encrypted) < 4 << 20  # and the limit is no looser than a few MiB


def test_the_bridge_counts_each_entry_with_what_it_pickles_to() -> None:
    """pysyncobj counts only the commands' bytes: a batch of small entries pickled to several times the batch."""
    assert "totalSize += len(entry[0])" in __import__("inspect").getsource(SyncObj._SyncObj__getEntries)
    log = [(b"x", i, 1) for i in range(1, 100_001)]

    class Log:
        _SyncObj__raftLog = log

    entries = bridge.Replica._SyncObj__getEntries(Log(), 1, None, 64 * 1024)
    assert len(pickle.dumps(entries, 4)) <= 64 * 1024 + wire.ENTRY_PICKLE_BYTES
    assert len(entries) == -(-64 * 1024 // (1 + wire.ENTRY_PICKLE_BYTES))
    assert bridge.Replica._SyncObj__getEntries(Log(), 99_999, None, 1 << 20) == log[-2:]
    assert bridge.Replica._SyncObj__getEntries(Log(), 5, 2) == log[4:6]
    assert bridge.Replica._SyncObj__getEntries(Log(), 0, None, 10) == []


# -- against a real node ------------------------------------------------------------------------------------------
def stranger(address: str) -> socket.socket:
    host, port = address.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=5)


def dropped(sock: socket.socket, timeout_s: float = 30) -> bool:
    """Whether the node closed this connection (EOF or reset), waiting up to ``timeout_s``."""
    sock.settimeout(timeout_s)
    try:
        return sock.recv(1 << 16) == b""
    except (ConnectionResetError, BrokenPipeError):
        return True
    except TimeoutError:
        return False


async def commits(node: RaftNode, count: int) -> None:
    for i in range(count):
        outcome = await asyncio.wait_for(node.propose([Proposal((ClusterRegistered(f"c{i}", "r", "h:1"),))]), 10)
        assert outcome[0].status == "committed"


@pytest.mark.parametrize("password", [None, "s3cret"])
async def test_a_stranger_cannot_stall_a_node_with_a_huge_or_trickling_frame(
    tmp_path: Path, password: str | None
) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(address, [], tmp_path, LogState(), RaftSettings(password=password))
    try:
        await wait_leader(node)
        term = node.status().term
        huge = stranger(address)
        huge.sendall(HEAD.pack(2**31 - 1) + b"\0" * (1 << 20))
        assert await asyncio.to_thread(dropped, huge)
        trickle = stranger(address)  # a first frame that never completes: dropped once it had its time
        trickle.sendall(HEAD.pack(60_000))

        async def drip() -> None:
            with contextlib.suppress(OSError):
                for _ in range(400):
                    trickle.send(b"\0")
                    await asyncio.sleep(0.02)

        dripping = asyncio.create_task(drip())
        await commits(node, 20)
        assert await asyncio.to_thread(dropped, trickle)
        dripping.cancel()
        await commits(node, 5)
        assert node.is_leader() and node.status().term == term
    finally:
        node.close()


async def test_connections_that_never_say_who_they_are_are_bounded(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    address = f"127.0.0.1:{free_ports(1)[0]}"
    node = RaftNode(address, [], tmp_path, LogState(), RaftSettings(password="s3cret"))
    idle: list[socket.socket] = []
    try:
        await wait_leader(node)
        for _ in range(bridge.MAX_UNKNOWN_CONNECTIONS + 8):
            idle.append(stranger(address))
            await asyncio.sleep(0.01)
        await commits(node, 5)
        assert all(await asyncio.gather(*(asyncio.to_thread(dropped, s) for s in idle)))
        assert node.is_leader()
    finally:
        for s in idle:
            s.close()
        node.close()
    # the oldest went first past the bound (to keep room for a voter's connection), the rest once they had had
    # their time to say who they are (a loaded machine may time some out before the last ones arrive)
    evicted = sum("more than 16 that did not say who they are" in r.getMessage() for r in caplog.records)
    timed_out = sum("did not say who it is in time" in r.getMessage() for r in caplog.records)
    assert evicted >= 1 and evicted + timed_out == len(idle)


async def test_a_command_above_the_bound_of_every_frame_is_refused_before_it_is_proposed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert wire.MAX_COMMAND_BYTES == codec.MAX_DECODE_BYTES  # a bigger one no node could decode
    monkeypatch.setattr(raft_node, "MAX_COMMAND_BYTES", 10_000)
    node = RaftNode(f"127.0.0.1:{free_ports(1)[0]}", [], tmp_path, LogState(), RaftSettings())
    try:
        await wait_leader(node)
        await commits(node, 1)
        with pytest.raises(PayloadTooLarge, match="at most 10000"):
            await node.propose([Proposal((ClusterRegistered("big", "r", "h" * 20_000 + ":1"),))])
        await commits(node, 1)
        assert node.state.image.offset == 1  # the two small ones only
    finally:
        node.close()


async def test_a_raft_message_due_before_the_key_exchange_is_not_sent_and_no_connection_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With a password, a tick right after a dialled connection counts as connected, before the keys are
    exchanged, must not send: the peer could not decode the message and would drop the connection. The test
    sends in that window every time; pysyncobj's own tick does when it has something due there (seen when
    every voter restarted at once and a candidate asked for votes)."""
    early: list[bool] = []
    dialled: dict[Any, bool] = {}  # connection -> a message was due on it already
    connected, tick = bridge.GuardedTransport._onOutgoingConnected, bridge.GuardedTransport._onTick

    def note(self: Any, conn: Any) -> None:
        dialled[conn] = False
        connected(self, conn)

    def a_message_first(self: Any) -> None:
        """The transport's tick runs before the poll that could read the peer's key: a message sent here is
        due in the window, as one of the Raft tick's own just before it."""
        for conn, sent in list(dialled.items()):  # both voters' threads come here
            if not sent and conn.state == CONNECTION_STATE.CONNECTED and self._connToNode(conn) is not None:
                dialled[conn] = True
                early.append(self.send(self._connToNode(conn), {"type": "a message of the next tick"}))
        tick(self)

    monkeypatch.setattr(bridge.GuardedTransport, "_onOutgoingConnected", note)
    monkeypatch.setattr(bridge.GuardedTransport, "_onTick", a_message_first)
    addresses = [f"127.0.0.1:{port}" for port in free_ports(2)]
    settings = RaftSettings(password="s3cret", journal_fsync=False)
    nodes = [RaftNode(a, [b for b in addresses if b != a], tmp_path / f"n{i}", LogState(), settings)
             for i, a in enumerate(addresses)]  # fmt: skip
    try:
        deadline = time.monotonic() + 30  # a generous wait for an election on a loaded machine, not a bound
        while not any(n.is_leader() for n in nodes):
            assert time.monotonic() < deadline, f"no leader: connections dropped {drops(caplog)} times"
            await asyncio.sleep(0.05)
        await commits(next(n for n in nodes if n.is_leader()), 3)
    finally:
        for node in nodes:
            node.close()
    assert early and not any(early), "a message went out before the key exchange"
    assert drops(caplog) == 0


def drops(caplog: pytest.LogCaptureFixture) -> int:
    return sum("dropped a Raft connection" in r.getMessage() for r in caplog.records)
