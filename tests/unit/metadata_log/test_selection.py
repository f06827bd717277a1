"""A follower of some topics (``metadata_log.selection``): the records it is sent, replayed at their own offsets,
make the image the selection keeps of the whole one; it never holds another topic or another physical topic's
leaders, and it still holds every federation-wide part."""

from __future__ import annotations

import dataclasses
import itertools

import pytest

from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import (
    ClusterRegistered,
    PartitionRangeAdded,
    PhysicalLeadersReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from metadata_log.selection import Selection, offset_runs, page_records
from tests.unit.samples import BATCH_ENDS, ONE_OF_EACH


def held(image: MetadataImage, record: Record) -> bool:
    """False for the deletion of a topic the follower does not hold: a follower of clusters skips it."""
    return not isinstance(record, TopicDeleted) or record.name in image.topics


def followed(batches: list[list[Record]], selection: Selection) -> MetadataImage:
    """What a follower of ``selection`` holds after ``batches``: each record it is sent applied at its offset."""
    image, offset = EMPTY_IMAGE, -1
    for batch in batches:
        sent = [(offset + 1 + i, r) for i, r in enumerate(batch) if selection.wants(r) and held(image, r)]
        for _, run in itertools.groupby(enumerate(sent), lambda item: item[1][0] - item[0]):
            pairs = [pair for _, pair in run]
            image = apply(dataclasses.replace(image, offset=pairs[0][0] - 1), [r for _, r in pairs])
        offset += len(batch)
        image = dataclasses.replace(image, offset=offset)
    return image


@pytest.mark.parametrize("topics", [{"U_TopicA"}, {"D"}, {"B", "D"}, {"nothing-yet"}])
def test_a_follower_of_some_topics_holds_what_the_selection_keeps_of_the_image(topics: set[str]) -> None:
    batches = [ONE_OF_EACH[a:b] for a, b in itertools.pairwise(BATCH_ENDS)]
    whole = apply(EMPTY_IMAGE, ONE_OF_EACH)
    selection = Selection.of(topics, whole)
    mine = followed(batches, selection)
    assert mine == selection.image(whole) and mine.offset == whole.offset
    assert set(mine.topics) == topics & set(whole.topics) and set(mine.key_orders) <= topics
    assert (mine.groups, mine.transactions, mine.gateways, mine.voters) == (
        whole.groups, whole.transactions, whole.gateways, whole.voters,
    )  # fmt: skip
    assert mine.clusters.keys() == whole.clusters.keys()


def test_another_topics_partitions_and_its_physical_topics_leaders_are_not_sent() -> None:
    image = apply(
        EMPTY_IMAGE,
        [ClusterRegistered("c1", "r1", "h:1"), TopicCreated("a", "A", "r1"), TopicCreated("b", "B", "r1"),
         PartitionRangeAdded("A", 0, 4, "c1", "A", 0), PartitionRangeAdded("B", 0, 4, "c1", "shared", 0)],
    )  # fmt: skip
    selection = Selection.of({"A"}, image)
    assert selection.backing == {("c1", "A")}
    assert not selection.wants(PartitionRangeAdded("B", 4, 1, "c1", "shared", 4))
    assert not selection.wants(PhysicalLeadersReported("c1", "shared", ("h:1",), (0, 1), (0,)))
    assert selection.wants(PhysicalLeadersReported("c1", "A", ("h:1",), (0, 1), (0,)))
    assert selection.wants(PhysicalLeadersReported("c9", "A", ("h:1",), (0, 1), (0,)))  # named like a selected topic
    reported = apply(image, [PhysicalLeadersReported("c1", "shared", ("h:1",), (0, 4), (0, 0, 0, 0)),
                             PhysicalLeadersReported("c1", "A", ("h:1",), (0, 4), (0, 0, 0, 0))])  # fmt: skip
    kept = selection.image(reported).clusters["c1"].leaders
    assert set(kept) == {("A", p) for p in range(4)}


@pytest.mark.parametrize("clusters", [{"c1"}, {"c3"}, {"c1", "c3"}])
def test_a_follower_of_clusters_holds_their_topics_and_leaders_and_skips_other_deletions(clusters: set[str]) -> None:
    batches = [ONE_OF_EACH[a:b] for a, b in itertools.pairwise(BATCH_ENDS)]
    whole = apply(EMPTY_IMAGE, ONE_OF_EACH)
    selection = Selection.of((), whole, clusters)
    mine = followed(batches, selection)
    assert mine == selection.image(whole) and mine.offset == whole.offset
    on = {name for name, t in whole.topics.items() if any(run.cluster_id in clusters for run in t.partitions.runs)}
    assert set(mine.topics) == on and on
    for cid in clusters:
        assert mine.clusters[cid].leaders == whole.clusters[cid].leaders
    assert any(isinstance(r, TopicDeleted) for r in ONE_OF_EACH) and all(
        selection.wants(r) for r in ONE_OF_EACH if isinstance(r, TopicDeleted)
    )
    assert not selection.wants(PhysicalLeadersReported("c2", "elsewhere", ("h:1",), (0, 1), (0,))) or "c2" in clusters


def test_a_filtered_page_is_read_in_runs_of_consecutive_offsets_and_refused_out_of_order() -> None:
    created = {"type": "TopicCreated", "data": {"topic_id": "a", "name": "A", "region": "r1"}}
    items = [{"offset": o, **created} for o in (5, 6, 9)]
    pairs = page_records(items, 5, 10)
    assert [o for o, _ in pairs] == [5, 6, 9]
    assert [(first, len(records)) for first, records in offset_runs(pairs)] == [(5, 2), (9, 1)]
    for bad, first, end in (([9, 6], 5, 10), ([5, 6], 6, 10), ([5, 10], 5, 10), ([5, 5], 5, 10)):
        with pytest.raises(ValueError, match="outside"):
            page_records([{"offset": o, **created} for o in bad], first, end)
