"""No Raft frame runs code in a node: real ``kfed controller`` processes, with and without the Raft secret.

pysyncobj frames a message as ``length | zlib(pickle(message))`` (Fernet-encrypted with the secret) and
unpickles what it receives. The frame sent here is the classic exploit: a pickle whose ``__reduce__`` runs a
shell command. Its harm is shown first by plain ``pickle.loads`` in this process (so the test cannot pass by
accident); the nodes must refuse it, close the connection, and go on committing writes.
"""

from __future__ import annotations

import os
import pickle
import socket
import struct
import zlib
from pathlib import Path

import pytest
from pysyncobj.encryptor import getEncryptor
from pysyncobj.monotonic import monotonic

from deploy.launcher import LocalQuorum


class Shell:
    """Unpickling this runs ``command`` in a shell."""

    def __init__(self, command: str) -> None:
        self.command = command

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (self.command,)


def exploit(marker: Path, secret: str | None = None) -> bytes:
    """One Raft frame as pysyncobj's ``TcpConnection.send`` makes it; encrypted when given the secret."""
    data = zlib.compress(pickle.dumps(Shell(f"touch {marker}")), 3)
    if secret is not None:
        data = getEncryptor(secret).encrypt_at_time(data, int(monotonic()))
    return struct.pack("i", len(data)) + data


def send(raft_address: str, frame: bytes) -> bool:
    """Send ``frame`` to a Raft port as a stranger would; True if the node then closed the connection."""
    host, port = raft_address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as s:
        s.sendall(frame)
        try:
            return s.recv(1) == b""
        except TimeoutError:
            return False


def harmful(frame: bytes, secret: str | None = None) -> None:
    """What the node does with a frame's bytes (decrypt, decompress, unpickle), with plain pickle."""
    data = frame[4:]
    if secret is not None:
        data = getEncryptor(secret).decrypt(data)
    pickle.loads(zlib.decompress(data))


@pytest.mark.parametrize("secure", [False, True], ids=["without the Raft secret", "with the Raft secret"])
def test_a_pickle_that_runs_code_is_refused_and_the_quorum_goes_on(tmp_path: Path, secure: bool) -> None:
    marker = tmp_path / "ran"
    with LocalQuorum(tmp_path / "q", secure=secure) as q:
        q.wait_ready()
        leader = q.leader()
        secret = q.raft_secret_file.read_text().strip() if q.raft_secret_file else None
        frames = {"a stranger's frame": exploit(marker)}
        assert len(frames["a stranger's frame"]) < 150  # a few dozen bytes of zlib, plus the path
        if secret is not None:  # one who holds the secret cannot run code either
            frames["a frame encrypted with the secret"] = exploit(marker, secret)
        for what, frame in frames.items():
            harmful(frame, secret if "encrypted" in what else None)
            assert marker.exists(), f"{what}: the exploit does not work in-process, so the test proves nothing"
            marker.unlink()
            for voter in q.voters:
                assert send(voter.raft, frame), f"{what}: node {voter.id} kept the connection open"
            assert not marker.exists(), f"{what}: a node ran the pickle"
        assert all(q.running(v.id) for v in q.voters)
        assert q.leader() == leader, "the frames disturbed the quorum"
        with q.controller_client() as admin:
            written = admin.post("/v1/clusters", {"cluster_id": "c1", "region": "r1", "bootstrap_servers": "h:1"})
        q.wait_applied(written["offset"])
        assert not marker.exists()
    for voter in q.voters:  # the frames that decrypted reached the unpickler, which said what it refused
        log = (tmp_path / "q" / f"node-{voter.id}.log").read_text()
        assert "refused a Raft message: a Raft message may not name posix.system" in log
