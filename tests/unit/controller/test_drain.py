"""The leader's drain decisions: a partition leaves only once every reader has consumed it."""

from __future__ import annotations

import pytest

from controller.drain import DrainTracker, PartitionDrain, draining_partitions, readers_by_topic
from metadata_log import commands
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import (
    ClusterRegistered,
    ClusterStateChanged,
    GroupGenerationStarted,
    GroupMember,
    PartitionsAdded,
    PartitionStateChanged,
    Record,
    TopicCreated,
    TopicDeleted,
)

GRACE_S = 2.0


@pytest.fixture
def image() -> MetadataImage:
    """t: P0, P1 on c1 (physical 0, 1), P2, P3 on c2; P1 read_only; group g reads t."""
    return apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "h:1"),
            ClusterRegistered("c2", "r1", "h:2"),
            TopicCreated("i", "t", "r1"),
            PartitionsAdded("t", 0, "c1", "t", 0),
            PartitionsAdded("t", 1, "c1", "t", 1),
            PartitionsAdded("t", 2, "c2", "t", 0),
            PartitionsAdded("t", 3, "c2", "t", 1),
            PartitionStateChanged("t", 1, "read_only"),
            GroupGenerationStarted("g", 1, (GroupMember("m", (("t", 0), ("t", 1))),)),
        ],
    )


def states(image: MetadataImage) -> list[str]:
    return [p.state for p in image.topics["t"].partitions]


def test_only_read_only_partitions_and_those_of_draining_clusters_drain(image: MetadataImage) -> None:
    assert [(t, p.partition) for t, p in draining_partitions(image)] == [("t", 1)]
    image = apply(image, [ClusterStateChanged("c2", "read_only"), ClusterStateChanged("c2", "draining")])
    assert [(t, p.partition) for t, p in draining_partitions(image)] == [("t", 1), ("t", 2), ("t", 3)]


def test_readers_are_the_groups_assigned_partitions_of_the_topic(image: MetadataImage) -> None:
    image = apply(image, [GroupGenerationStarted("h", 1, (GroupMember("m", (("u", 0),)), GroupMember("n", ())))])
    assert readers_by_topic(image) == {"t": {"g"}, "u": {"h"}}
    assert readers_by_topic(apply(image, [GroupGenerationStarted("g", 2, ())])) == {"u": {"h"}}


def test_removed_once_every_reader_committed_to_the_end_measured_after_the_grace(image: MetadataImage) -> None:
    tracker = DrainTracker(int(GRACE_S * 1000))
    assert tracker.decide(image, now=0.0) == []  # first seen draining at 0
    tracker.report("c1", {("t", 1): PartitionDrain(0, 100, {"g": 100})}, now=1.0)
    assert tracker.decide(image, now=1.5) == [], "a measurement inside the grace does not count"
    (row,) = tracker.rows(image, 1.5)
    assert not row.drained and "measurement" in row.waiting_for
    tracker.report("c1", {("t", 1): PartitionDrain(0, 120, {"g": 100, "other": 120})}, now=2.5)
    (row,) = tracker.rows(image, 2.6)
    assert (row.drained, row.lag, row.end) == (False, 20, 120)
    assert "group g to commit 20 more" in row.waiting_for
    assert tracker.decide(image, now=2.6) == []
    tracker.report("c1", {("t", 1): PartitionDrain(0, 120, {"g": 120, "other": 120})}, now=3.0)
    assert tracker.decide(image, now=3.1) == [PartitionStateChanged("t", 1, "removed")]


def test_a_reader_without_any_commit_counts_from_the_start(image: MetadataImage) -> None:
    tracker = DrainTracker(0)
    tracker.rows(image, 0.0)
    tracker.report("c1", {("t", 1): PartitionDrain(10, 50, {})}, now=1.0)
    (row,) = tracker.rows(image, 1.0)
    assert (row.drained, row.lag) == (False, 40)


def test_unread_data_waits_for_a_group_or_retention(image: MetadataImage) -> None:
    image = apply(image, [GroupGenerationStarted("g", 2, ())])  # nobody reads t now
    tracker = DrainTracker(0)
    tracker.rows(image, 0.0)
    tracker.report("c1", {("t", 1): PartitionDrain(0, 5, {})}, now=1.0)
    (row,) = tracker.rows(image, 1.0)
    assert not row.drained and "retention" in row.waiting_for
    tracker.report("c1", {("t", 1): PartitionDrain(5, 5, {})}, now=2.0)
    assert tracker.decide(image, 2.0) == [PartitionStateChanged("t", 1, "removed")], "all data expired: drained"


def test_retention_expiry_drains_without_any_measurement() -> None:
    image = apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "h:1"),
            TopicCreated("i", "t", "r1", 10_000),
            PartitionsAdded("t", 0, "c1", "t", 0),
            PartitionsAdded("t", 1, "c1", "t", 1),
            PartitionStateChanged("t", 1, "read_only"),
        ],
    )
    tracker = DrainTracker()
    assert tracker.decide(image, 100.0) == []
    assert tracker.decide(image, 109.0) == []
    assert tracker.decide(image, 110.0) == [PartitionStateChanged("t", 1, "removed")]


def test_a_drained_cluster_is_decommissioned_with_its_partitions_removed(image: MetadataImage) -> None:
    image = apply(image, commands.decommission_cluster(image, "c2").records)
    tracker = DrainTracker(0)
    tracker.rows(image, 0.0)
    tracker.report("c2", {("t", 0): PartitionDrain(0, 7, {"g": 7})}, now=1.0)
    records = tracker.decide(image, 1.0)
    assert PartitionStateChanged("t", 1, "removed") not in records, "c1's P1 has no measurement yet"
    assert records == [], "c2's P3 has no measurement yet: the cluster waits"
    tracker.report("c2", {("t", 1): PartitionDrain(3, 3, {})}, now=1.5)
    image = apply(image, tracker.decide(image, 1.5))
    assert states(image) == ["writable", "read_only", "removed", "removed"]
    assert image.clusters["c2"].state == "decommissioned"
    assert tracker.decide(image, 2.0) == []


def test_a_new_term_forgets_everything_and_waits_again(image: MetadataImage) -> None:
    tracker = DrainTracker(int(GRACE_S * 1000))
    tracker.rows(image, 0.0)
    tracker.report("c1", {("t", 1): PartitionDrain(0, 1, {"g": 1})}, now=3.0)
    tracker.start_term()
    tracker.rows(image, 10.0)
    tracker.report("c1", {("t", 1): PartitionDrain(0, 1, {"g": 1})}, now=11.0)
    assert tracker.decide(image, 11.0) == []
    tracker.report("c1", {("t", 1): PartitionDrain(0, 1, {"g": 1})}, now=12.5)
    assert tracker.decide(image, 12.5) == [PartitionStateChanged("t", 1, "removed")]


def test_the_tracker_rescans_only_changed_topics_and_agrees_with_a_full_scan(image: MetadataImage) -> None:
    tracker = DrainTracker(int(GRACE_S * 1000))
    steps: list[list[Record]] = [
        [TopicCreated("j", "u", "r1"), PartitionsAdded("u", 0, "c2", "u", 0), PartitionsAdded("u", 1, "c1", "u", 1)],
        [PartitionStateChanged("u", 1, "read_only")],
        [ClusterStateChanged("c2", "read_only"), ClusterStateChanged("c2", "draining")],
        [PartitionStateChanged("t", 1, "removed")],
        [TopicDeleted("u")],
    ]
    for records in steps:
        image = apply(image, records)
        rows = [(r.topic, r.partition) for r in tracker.rows(image, now=0.0)]
        assert rows == [(t, p.partition) for t, p in draining_partitions(image)]
