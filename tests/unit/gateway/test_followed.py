"""The topics a gateway follows (``gateway/followed.py``): a real ``LogFollower`` and controller client on the
controller's routes (``tests/unit/controller/test_routes.py``'s fake service), a fake clock."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import httpx
import pytest
from starlette.testclient import TestClient

from controller.http.metadata import RenderedMetadata
from gateway import followed
from gateway.followed import FollowedTopics
from metadata_client.client import AsyncControllerClient
from metadata_client.follower import LogFollower
from metadata_log.records import ClusterRegistered, PartitionRangeAdded, TopicCreated
from metadata_log.selection import MAX_SELECTED_TOPICS
from tests.unit.controller.test_routes import FakeService, committed, routers_only


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@contextmanager
def gateway_side() -> Iterator[tuple[FakeService, FollowedTopics, Clock]]:
    """A controller holding X (10 partitions) and Y (5), and a gateway's followed topics on it."""
    service = FakeService()
    committed(service.read_model, [
        ClusterRegistered("c7", "r1", "127.0.0.1:1"),
        TopicCreated("id-x", "X", "r1"), PartitionRangeAdded("X", 0, 10, "c7", "X", 0),
        TopicCreated("id-y", "Y", "r1"), PartitionRangeAdded("Y", 0, 5, "c7", "Y", 0),
    ])  # fmt: skip
    app = routers_only(service)
    app.state.rendered_metadata = RenderedMetadata()
    clock = Clock()
    with TestClient(app, base_url="http://node") as http:
        follower = LogFollower("http://node", client=http, topics=(), wait_ms=0)
        follower.poll()
        quorum = AsyncControllerClient(
            "http://node", client=httpx.AsyncClient(transport=httpx.ASGITransport(app), base_url="http://node")
        )
        yield service, FollowedTopics(follower, quorum, forget_after_s=60, clock=clock), clock


async def test_a_gateway_follows_the_topics_its_requests_name_and_forgets_those_unused() -> None:
    with gateway_side() as (_, topics, clock):
        follower = topics.follower
        assert follower.topics == frozenset() and not follower.image.topics and follower.image.clusters
        await topics.resolve(["X", "not a name", "a" * 250])
        assert follower.topics == {"X"} and set(follower.image.topics) == {"X"}  # illegal names are not followed
        await topics.resolve(["Y"])  # a Produce here for a topic whose metadata the client asked of another gateway
        assert set(follower.image.topics) == {"X", "Y"}
        loads = follower.snapshots_loaded
        clock.now += 45
        await topics.resolve(["Y"])  # named again: kept
        clock.now += 45  # X unnamed for 90 s, Y for 45
        await topics.forget()
        assert follower.topics == {"Y"} and set(follower.image.topics) == {"Y"}
        assert follower.snapshots_loaded == loads, "forgetting loads nothing"
        assert (follower.image.clusters["c7"].leaders is not None) and follower.image.offset >= 0


async def test_every_topic_is_answered_whole_up_to_its_limit_and_by_name_past_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with gateway_side() as (service, topics, clock):
        follower = topics.follower
        every = sorted(service.read_model.image.topics)  # X, Y and a sample's
        await topics.resolve(["Y"])
        assert await topics.every_topic() == (every, True)  # a few partitions: each followed by name
        assert follower.topics == set(every) and set(follower.image.topics) == set(every)
        clock.now += 61
        await topics.forget()  # nobody asked for every topic since: back to what is named
        assert follower.topics == frozenset() and not follower.image.topics
        monkeypatch.setattr(followed, "MAX_ALL_TOPICS_PARTITIONS", service.read_model.image.partition_count() - 1)
        assert await topics.every_topic() == (every, False)  # by name only: too many partitions
        assert follower.topics == frozenset()
        committed(service.read_model, [TopicCreated("id-z", "Z", "r1")])
        assert (await topics.every_topic())[0] == every, "the listing is reused for a while"
        clock.now += followed.TOPIC_SIZES_TTL_S + 1
        assert (await topics.every_topic())[0] == sorted([*every, "Z"])


async def test_every_topic_listed_is_answered_though_the_node_reuses_a_snapshot_older_than_the_listing() -> None:
    with gateway_side() as (service, topics, _clock):
        committed(service.read_model, [TopicCreated("id-z", "Z", "r1")])  # after the snapshot the follower loaded
        names, whole = await topics.every_topic()
        assert "Z" in names and whole
        assert "Z" in topics.follower.image.topics, "listed, so answered with its partitions"


async def test_every_topic_listed_is_answered_though_it_was_followed_before_it_was_created(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with gateway_side() as (service, topics, _clock):
        follower = topics.follower
        await topics.resolve([*service.read_model.image.topics, "Z"])  # a client asked for Z before it existed
        committed(service.read_model, [TopicCreated("id-z", "Z", "r1")])  # not polled yet

        def poll_once(offset: int, timeout_s: float) -> bool:  # what the follower's thread does meanwhile
            follower.poll()
            return follower.image.offset >= offset

        monkeypatch.setattr(follower, "wait_for", poll_once)
        names, whole = await topics.every_topic()
        assert "Z" in names and whole
        assert "Z" in follower.image.topics, "listed, so answered with its partitions"


async def test_a_gateway_following_the_whole_log_that_grows_past_the_limit_keeps_only_what_is_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with gateway_side() as (service, topics, _clock):
        follower = topics.follower
        await topics.resolve(["Y"])
        monkeypatch.setattr(followed, "fits", lambda names: False)  # more names than one selection holds
        await topics.every_topic()
        assert follower.topics is None
        monkeypatch.setattr(followed, "MAX_ALL_TOPICS_PARTITIONS", service.read_model.image.partition_count() - 1)
        assert await topics.every_topic() == (sorted(service.read_model.image.topics), False)
        assert follower.topics == {"Y"} and set(follower.image.topics) == {"Y"}


def test_a_selection_past_what_a_node_accepts_follows_the_whole_log() -> None:
    with gateway_side() as (_, topics, _clock):
        follower = topics.follower
        follower.select([f"{i:03d}" for i in range(MAX_SELECTED_TOPICS)])  # 3,999 characters: fits
        assert follower.topics is not None and len(follower.topics) == MAX_SELECTED_TOPICS
        follower.follow(["X"])  # one more than a node takes
        assert follower.topics is None and {"X", "Y"} <= set(follower.image.topics)
        follower.select([f"{'b' * 200}{i}" for i in range(20)])  # 4,000+ characters
        assert follower.topics is None
