"""``GroupCommitter``: proposals queued into few Raft commands, and no record type newer than the quorum's
metadata version (``records.FIRST_VERSION``) proposed before every voter reads it."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from types import SimpleNamespace

import pytest

from controller.service import GroupCommitter
from metadata_log.errors import Unavailable
from metadata_log.records import (
    FIRST_VERSION,
    LATEST_METADATA_VERSION,
    RECORD_TYPES,
    ClusterRegistered,
    GatewayRegistered,
    KeyOrderSealed,
    TxnDecided,
    version_needed,
)
from metadata_quorum.state import Outcome, Proposal


class FakeRaft:
    """Commits every command at once, at consecutive offsets; its log is at ``metadata_version``."""

    def __init__(self, metadata_version: int) -> None:
        self.commands: list[list[Proposal]] = []
        self.state = SimpleNamespace(image=SimpleNamespace(metadata_version=metadata_version))

    def propose(self, proposals: Sequence[Proposal]) -> asyncio.Future[list[Outcome]]:
        self.commands.append(list(proposals))
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        future.set_result([Outcome("committed", i, i) for i, _ in enumerate(proposals)])
        return future


CLUSTER = ClusterRegistered("c1", "r1", "127.0.0.1:9092")
GATEWAY = GatewayRegistered(0, "127.0.0.1", 9092, "instance-a", 1)


async def test_records_newer_than_the_quorums_metadata_version_wait_until_it_is_raised() -> None:
    raft = FakeRaft(metadata_version=2)
    committer = GroupCommitter(raft)  # type: ignore[arg-type]  # the fake
    committer.start()
    try:
        with pytest.raises(Unavailable, match="metadata version 2; these records are written from version 3") as e:
            await committer.submit(Proposal((CLUSTER, GATEWAY)))
        assert e.value.retryable and e.value.retry_after_s > 0
        assert raft.commands == [], "nothing of it was proposed"
        assert (await committer.submit(Proposal((CLUSTER,)))).status == "committed", "older types go on"
        raft.state.image.metadata_version = 3
        assert (await committer.submit(Proposal((CLUSTER, GATEWAY)))).status == "committed"
        assert [len(c[0].records) for c in raft.commands] == [1, 2]
    finally:
        await committer.stop()


def test_each_newer_record_type_names_a_version_this_kfed_reads() -> None:
    assert set(FIRST_VERSION) <= set(RECORD_TYPES)
    assert all(2 <= v <= LATEST_METADATA_VERSION for v in FIRST_VERSION.values())
    assert version_needed([]) == 1 and version_needed([CLUSTER]) == 1
    assert version_needed([CLUSTER, GATEWAY]) == 3
    assert {FIRST_VERSION[KeyOrderSealed], FIRST_VERSION[TxnDecided]} == {3}
