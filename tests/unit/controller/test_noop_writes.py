"""A write that changes nothing is answered from an image that holds every write acknowledged before it: the
leader commits a ``NoOp`` first (``ControllerService._barrier``). Found by the fault harness's ``ack-order``: a
leader cut off from the others answered such a write from an image 47 records old."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest

from controller.config import QuorumConfig, Voter
from controller.readmodel import ReadModel
from controller.service import ControllerService
from metadata_log import commands
from metadata_log.errors import Unavailable
from metadata_log.records import ClusterRegistered, ClusterStateChanged, NoOp, Record
from metadata_quorum.state import LogState, Outcome, Proposal


class ApplyingRaft:
    """A leader that commits each command into a real ``LogState``: first the records its predecessor had
    committed that it has not applied yet (``behind``), then the command. ``stuck``: a deposed leader, whose
    commands never commit."""

    def __init__(self, state: LogState) -> None:
        self.state = state
        self.behind: list[Record] = []
        self.stuck = False
        self.log: list[Record] = []

    def is_leader(self) -> bool:
        return True

    def _commit(self, proposals: Sequence[Proposal]) -> list[Outcome]:
        self.log += [r for p in proposals for r in p.records]
        return self.state.apply_command(self.state.encode_proposal(proposals))

    def propose(self, proposals: Sequence[Proposal]) -> asyncio.Future[list[Outcome]]:
        future: asyncio.Future[list[Outcome]] = asyncio.get_running_loop().create_future()
        if self.stuck:
            return future
        if self.behind:
            self._commit([Proposal(tuple(self.behind))])
            self.behind = []
        future.set_result(self._commit(proposals))
        return future


def service_on(records: Sequence[Record]) -> tuple[ControllerService, ApplyingRaft]:
    state = LogState()
    raft = ApplyingRaft(state)
    raft._commit([Proposal(tuple(records))])
    quorum = QuorumConfig((Voter(1, "127.0.0.1:1", "http://127.0.0.1:2"),))
    service = ControllerService(1, quorum, raft, state, ReadModel(), commit_timeout_s=0.2)  # type: ignore[arg-type]
    return service, raft


def set_state(state: str):  # type: ignore[no-untyped-def]
    return lambda image: commands.change_cluster_state(image, "c1", state)


C1 = ClusterRegistered("c1", "r1", "127.0.0.1:9092")


async def test_a_write_that_changes_nothing_is_answered_after_a_noop_committed() -> None:
    service, raft = service_on([C1])
    service.committer.start()
    try:
        reply = await service.write(set_state("active"), lambda image: {}, None, "")
        assert raft.log[-1] == NoOp()
        assert reply.offset == service.state.image.offset == 1
        assert reply.body["state"] == "active"
    finally:
        await service.committer.stop()


async def test_a_new_leader_decides_again_on_the_records_it_had_not_applied() -> None:
    """In the image it started from, c1 is active already; its predecessor had committed c1 read_only."""
    service, raft = service_on([C1])
    raft.behind = [ClusterStateChanged("c1", "read_only")]
    service.committer.start()
    try:
        reply = await service.write(set_state("active"), lambda image: {}, None, "")
        assert raft.log[-3:] == [ClusterStateChanged("c1", "read_only"), NoOp(), ClusterStateChanged("c1", "active")]
        assert reply.offset == 3 and service.state.image.clusters["c1"].state == "active"
    finally:
        await service.committer.stop()


async def test_a_deposed_leader_refuses_for_a_retry_rather_than_answer_from_its_image() -> None:
    service, raft = service_on([C1])
    raft.stuck = True
    service.committer.start()
    try:
        with pytest.raises(Unavailable, match="could not confirm the leadership") as e:
            await service.write(set_state("active"), lambda image: {}, None, "")
        assert e.value.retryable
    finally:
        await service.committer.stop()


async def test_a_gateways_heartbeat_is_answered_from_the_image_without_a_noop() -> None:
    service, raft = service_on([C1])
    service.committer.start()
    try:
        reply = await service.write(set_state("active"), lambda image: {}, None, "", confirm_noop=False)
        assert reply.offset == 0 and raft.log == [C1]
    finally:
        await service.committer.stop()
