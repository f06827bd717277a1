"""What the Raft layer's tests share: a single voter's lifecycle, a follower driven by hand, a tiny disk."""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from deploy.launcher import free_ports
from metadata_log.image import MetadataImage
from metadata_quorum import RaftNode, RaftSettings, privates
from metadata_quorum.state import LogState


async def wait_leader(node: RaftNode, timeout_s: float = 10) -> None:
    deadline = time.monotonic() + timeout_s
    while not node.is_leader():
        assert time.monotonic() < deadline, "single voter did not become leader"
        await asyncio.sleep(0.02)


async def restart_and_replay(
    address: str, data_dir: Path, image_before: MetadataImage, what: str, settings: RaftSettings | None = None
) -> LogState:
    """Start a single voter again on ``data_dir``; its state once it has replayed up to ``image_before``
    (which it must then equal). ``what`` says what was lost when it does not get there."""
    state = LogState()
    node = RaftNode(address, [], data_dir, state, settings)
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


def manual_tick_node(tmp_path: Path) -> tuple[RaftNode, str]:
    """A follower of a 3-voter quorum whose peers never answer, and one of those peers' address."""
    self_port, leader_port, other_port = free_ports(3)
    leader = f"127.0.0.1:{leader_port}"
    # messages and ticks are delivered by the test only: no thread, no races
    node = RaftNode(f"127.0.0.1:{self_port}", [leader, f"127.0.0.1:{other_port}"], tmp_path, LogState(),
                    RaftSettings(auto_tick=False))  # fmt: skip
    assert node._conf.autoTick is False, "the node must not tick itself"
    return node, leader


@contextlib.contextmanager
def tmpfs(mount_point: Path, size: str = "2m") -> Iterator[Path]:
    """A tmpfs of ``size`` at ``mount_point`` (needs root and mount; the test is skipped elsewhere)."""
    mount_point.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount_point)],
                            capture_output=True)  # fmt: skip
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode().strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "-l", str(mount_point)], check=False)


def private_name(name: str, owner: str = "SyncObj") -> str:
    """The attribute name of one of pysyncobj's privates, as ``privates.PRIVATE_NAMES`` lists it (``__raftLog`` of
    SyncObj: ``_SyncObj__raftLog``): tests reach pysyncobj's internals only through that table."""
    assert any(p.owner == owner and p.name == name for p in privates.PRIVATE_NAMES), f"{owner}.{name} is not listed"
    return f"_{owner}{name}" if name.startswith("__") and not name.endswith("__") else name
