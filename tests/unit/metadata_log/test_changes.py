"""Typed deltas: what a published delta says changed is exactly what differs between the images before and after.

The reference (``expected``) is computed from the two images alone, whole, with nothing from replay; the
delta's changes come from what replay touched (``Touched.settle``), by every path a batch takes: records one
type-run at a time, a command's runs, several commands published as one, a delta made by hand from records, and
a snapshot delta (``changes_between``)."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_log.codec import decode_runs, encode_runs
from metadata_log.image import (
    EMPTY_IMAGE,
    NO_CHANGES,
    InvalidRecord,
    MetadataChanges,
    MetadataImage,
    Touched,
    apply,
    apply_touched,
    changes_between,
)
from metadata_log.image.cluster import ClusterDelta
from metadata_log.image.topics import TopicsDelta
from metadata_log.publisher import LogDelta, Publishers
from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    NoOp,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from tests.unit.planted import FIND_BUG

from ..samples import BATCH_ENDS, ONE_OF_EACH, log_delta

BASE = apply(
    EMPTY_IMAGE,
    [
        ClusterRegistered("c1", "r1", "h:1"),
        ClusterRegistered("c2", "r1", "h:2"),
        TopicCreated("id-u", "u", "r1"),
        *(PartitionsAdded("u", p, ("c1", "c2")[p % 2], "u", p) for p in range(3)),
        PhysicalPartitionsReported("c1", "u", 0, "a"),
        PartitionStateChanged("u", 2, "read_only"),
    ],
)

POOL: list[Record] = [
    ClusterRegistered("c1", "r1", "h:1"),  # what the image holds: no change
    ClusterRegistered("c1", "r1", "h:9"),
    ClusterRegistered("c3", "r1", "h:3"),
    *(ClusterStateChanged("c2", s) for s in ("read_only", "active", "draining")),
    ClusterFenced("c1", "down", 1),
    ClusterUnfenced("c1", 2),
    TopicCreated("id-w", "w", "r1"),
    TopicCreated("id-w2", "w", "r1"),  # the name again, another topic
    TopicCreated("id-u", "u", "r1"),  # u again under its own id, after its deletion
    TopicCreated("id-u2", "u", "r1"),
    TopicDeleted("u"),
    TopicDeleted("w"),
    *(PartitionsAdded(t, p, c, t, p) for t in ("u", "w") for p in range(5) for c in ("c1", "c3")),
    *(PartitionStateChanged(t, p, s) for t in ("u", "w") for p in (0, 2, 3) for s in ("read_only", "writable")),
    PartitionStateChanged("u", 2, "removed"),
    *(
        PhysicalPartitionsReported(c, "u", p, leader)
        for c in ("c1", "c3")
        for p in (0, 1)
        for leader in ("a", "b", None)
    ),
    NoOp(),
]
"""Records of every kind that changes topics or clusters, some that change nothing, and chances to undo."""


def expected(before: MetadataImage, after: MetadataImage) -> MetadataChanges:
    """The changes from ``before`` to ``after``, from the two images whole (the reference)."""

    def same_topic(name: str) -> bool:
        return (
            name in before.topics
            and name in after.topics
            and before.topics[name].topic_id == after.topics[name].topic_id
        )

    def leaders(image: MetadataImage, cluster_id: str) -> dict[tuple[str, int], str]:
        cluster = image.clusters.get(cluster_id)
        return dict(cluster.leaders) if cluster is not None else {}

    def without_leaders(image: MetadataImage, cluster_id: str) -> object:
        cluster = image.clusters.get(cluster_id)
        return dataclasses.replace(cluster, leaders={}) if cluster is not None else None

    both = [name for name in after.topics if same_topic(name)]
    clusters = {*before.clusters, *after.clusters}
    return MetadataChanges(
        topics_created=frozenset(name for name in after.topics if not same_topic(name)),
        topics_deleted=frozenset(name for name in before.topics if not same_topic(name)),
        topics_changed=frozenset(name for name in both if before.topics[name] != after.topics[name]),
        partition_states_changed=frozenset(
            (name, old.partition)
            for name in both
            for old, new in zip(before.topics[name].partitions, after.topics[name].partitions, strict=False)
            if old.state != new.state
        ),
        clusters_changed=frozenset(c for c in clusters if without_leaders(before, c) != without_leaders(after, c)),
        leaders_changed=frozenset(c for c in clusters if leaders(before, c) != leaders(after, c)),
    )


def fitting(image: MetadataImage, drawn: list[Record]) -> tuple[list[Record], MetadataImage]:
    """The drawn records that apply, each to the image after those kept before it; and that image."""
    kept = []
    for record in drawn:
        try:
            image = apply(image, [record])
        except InvalidRecord:
            continue
        kept.append(record)
    return kept, image


BATCHES = st.lists(st.lists(st.sampled_from(POOL), max_size=12), min_size=1, max_size=3)


def check_changes(drawn_batches: list[list[Record]]) -> None:
    image = BASE
    batches: list[list[Record]] = []
    touched: list[Touched] = []
    for drawn in drawn_batches:
        records, after = fitting(image, drawn)
        want = expected(image, after)
        by_type_runs, touched_here = apply_touched(image, records)
        by_command_runs, from_runs = apply_touched(image, list(decode_runs(encode_runs(records)[0])))
        assert by_type_runs == after and by_command_runs == after
        assert touched_here.settle(image, after) == want, records
        assert from_runs.settle(image, after) == want, records
        assert log_delta(image, records).changes == want, records
        assert LogDelta.replaced(image, after).changes == want, records
        batches.append(records)
        touched.append(touched_here)
        image = after
    # several commands published as one (a Raft command of proposals applied one at a time)
    assert Touched.union(touched).settle(BASE, image) == expected(BASE, image), batches


@settings(max_examples=400, deadline=None)
@given(BATCHES)
def test_a_delta_says_exactly_which_topics_partitions_clusters_and_leaders_changed(
    drawn_batches: list[list[Record]],
) -> None:
    check_changes(drawn_batches)


def test_every_batch_of_the_sample_log_says_what_it_changed() -> None:
    image = EMPTY_IMAGE
    for start, end in itertools.pairwise(BATCH_ENDS):
        after, touched = apply_touched(image, ONE_OF_EACH[start:end])
        assert touched.settle(image, after) == expected(image, after)
        image = after
    assert changes_between(EMPTY_IMAGE, image) == expected(EMPTY_IMAGE, image)


def test_a_change_undone_in_the_same_batch_is_no_change() -> None:
    records: list[Record] = [
        PartitionStateChanged("u", 0, "read_only"),
        PartitionStateChanged("u", 0, "writable"),
        ClusterFenced("c2", "down", 1),
        ClusterUnfenced("c2", 2),
        PhysicalPartitionsReported("c1", "u", 0, "b"),
        PhysicalPartitionsReported("c1", "u", 0, "a"),
        TopicCreated("id-x", "x", "r1"),
        TopicDeleted("x"),
    ]
    assert log_delta(BASE, records).changes == NO_CHANGES


def test_a_topic_deleted_and_created_again_under_its_name_is_both_deleted_and_created() -> None:
    changes = log_delta(BASE, [TopicDeleted("u"), TopicCreated("id-u2", "u", "r1")]).changes
    assert changes == MetadataChanges(topics_created=frozenset({"u"}), topics_deleted=frozenset({"u"}))


def test_a_late_subscriber_s_catch_up_says_every_topic_and_cluster_is_new() -> None:
    seen: list[MetadataChanges] = []

    class Subscriber:
        def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
            seen.append(delta.changes)

    publishers = Publishers()
    publishers.publish(BASE, LogDelta.replaced, EMPTY_IMAGE, BASE)
    publishers.subscribe(Subscriber())
    assert seen == [
        MetadataChanges(
            topics_created=frozenset({"u"}),
            clusters_changed=frozenset({"c1", "c2"}),
            leaders_changed=frozenset({"c1"}),
        )
    ]


def test_a_snapshot_delta_needs_the_image_it_loaded() -> None:
    with pytest.raises(TypeError, match="image"):
        LogDelta.replaced(BASE)  # type: ignore[call-arg]  # what this test checks


# -- the property can fail: one planted bug each ---------------------------------------------------------


def _finds_a_bug() -> None:
    with pytest.raises(AssertionError):
        FIND_BUG(given(BATCHES)(check_changes))()


def test_the_property_finds_a_replay_that_does_not_note_partition_states(monkeypatch: pytest.MonkeyPatch) -> None:
    noted = TopicsDelta.touched
    monkeypatch.setattr(TopicsDelta, "touched", lambda self: (noted(self)[0], dict.fromkeys(self._partitions, ())))
    _finds_a_bug()


def test_the_property_finds_a_replay_that_does_not_note_leader_reports(monkeypatch: pytest.MonkeyPatch) -> None:
    noted = ClusterDelta.touched
    monkeypatch.setattr(ClusterDelta, "touched", lambda self: (noted(self)[0], ()))
    _finds_a_bug()
