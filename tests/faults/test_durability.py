"""Durability edges through the real ``kfed controller`` command: a damaged journal or dump stops the
node at start with a clear error and exit status 2, before it serves anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from controller.config import Voter, render_quorum
from deploy.launcher import free_ports
from metadata_client.access import write_secret
from metadata_log.records import ClusterRegistered
from metadata_quorum.journal import CheckedJournal
from metadata_quorum.state import LogState, Proposal, encode_command


def start_controller(tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """``kfed controller`` as deployed: with a Raft secret and an admin token."""
    raft_port, http_port = free_ports(2)
    config = tmp_path / "quorum.toml"
    config.write_text(render_quorum([Voter(1, f"127.0.0.1:{raft_port}", f"http://127.0.0.1:{http_port}")]))
    write_secret(tmp_path / "raft.secret")
    write_secret(tmp_path / "admin.token")
    return subprocess.run(
        [sys.executable, "-m", "kfed", "controller", "--config", str(config), "--node-id", "1",
         "--data-dir", str(tmp_path / "node"), "--raft-secret-file", str(tmp_path / "raft.secret"),
         "--admin-token-file", str(tmp_path / "admin.token")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_truncated_journal_stops_the_node(tmp_path: Path) -> None:
    (tmp_path / "node").mkdir()
    path = tmp_path / "node" / "raft.journal"
    journal = CheckedJournal(str(path), fsync=True)
    for i in range(1, 20):
        journal.add(b"x" * 100, i, 1)
    journal._destroy()
    path.write_bytes(path.read_bytes()[:1000])  # the header still says the entries go on
    result = start_controller(tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "raft.journal: truncated" in result.stderr and "Refusing to start" in result.stderr


@pytest.mark.parametrize("cut", [0.5, 0.999])
def test_truncated_dump_stops_the_node(tmp_path: Path, cut: float) -> None:
    (tmp_path / "node").mkdir()
    state = LogState()
    state.apply_command(encode_command([Proposal((ClusterRegistered("c1", "r1", "h:1"),))]))
    dump = state.dump({"last": [5, 1], "prev": [4, 1], "cluster": []})
    (tmp_path / "node" / "raft.dump").write_bytes(dump[: int(len(dump) * cut)])
    result = start_controller(tmp_path)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "raft.dump" in result.stderr and "truncated" in result.stderr
