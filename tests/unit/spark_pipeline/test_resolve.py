"""``metadataOffset`` replays read only the job's topics (``spark_pipeline.resolve``): a real replay over the
controller's routes (``tests/unit/controller/test_routes.py``'s fake service)."""

from __future__ import annotations

from starlette.testclient import TestClient

from metadata_log.records import (
    ClusterRegistered,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PhysicalLeadersReported,
    TopicCreated,
    TopicDeleted,
)
from spark_pipeline.plan import resolve_placements
from spark_pipeline.resolve import _replay
from tests.unit.controller.test_routes import FakeService, committed, routers_only

URL = "http://node"


def test_a_replay_of_the_jobs_topics_to_an_offset_places_them_as_a_whole_replay_does() -> None:
    service = FakeService()
    rm = service.read_model
    committed(rm, [ClusterRegistered("c7", "r1", "127.0.0.1:1"), ClusterRegistered("c8", "r1", "127.0.0.1:2"),
                   TopicCreated("id-x", "X", "r1"), PartitionRangeAdded("X", 0, 6, "c7", "X", 0),
                   TopicCreated("id-y", "Y", "r1"), PartitionRangeAdded("Y", 0, 4, "c8", "Y", 0),
                   PhysicalLeadersReported("c7", "X", ("127.0.0.1:1",), (0, 6), (0,) * 6),
                   PhysicalLeadersReported("c8", "Y", ("127.0.0.1:2",), (0, 4), (0,) * 4),
                   PartitionRangeStateChanged("X", 4, 2, "read_only")])  # fmt: skip
    pinned = rm.image.offset
    committed(rm, [PartitionRangeAdded("X", 6, 4, "c8", "X", 0), TopicDeleted("Y"),  # after the pinned offset
                   PartitionRangeStateChanged("X", 0, 2, "read_only")])  # fmt: skip
    with TestClient(routers_only(service), base_url=URL) as http:
        whole = _replay(http, URL, pinned, None)
        mine = _replay(http, URL, pinned, "X")
    assert mine.offset == whole.offset == pinned
    assert resolve_placements(mine, ["X"], require_all=True) == resolve_placements(whole, ["X"], require_all=True)
    assert [p.partition for p in resolve_placements(mine, ["X"], require_all=True)] == list(range(6))
    assert set(mine.topics) == {"X"} and "Y" in whole.topics
