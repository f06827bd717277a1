"""Commands validate against the image, name the bad field, and produce records that apply."""

from __future__ import annotations

import pytest

from metadata_log import commands
from metadata_log.commands.clusters import PhysicalPartition
from metadata_log.errors import Conflict, InvalidRequest, NotFound
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import (
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    MetadataVersionChanged,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    TopicCreated,
)
from metadata_log.views import cluster_view, topic_view


def run(image: MetadataImage, result: commands.Result) -> MetadataImage:
    return apply(image, result.records)


@pytest.fixture
def two_clusters() -> MetadataImage:
    return apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c2", "r1", "127.0.0.1:29092"),
            ClusterRegistered("c1", "r1", "127.0.0.1:19092"),
            ClusterRegistered("x9", "r2", "127.0.0.1:39092"),
        ],
    )


def test_create_topic_places_cluster_by_cluster_in_id_order(two_clusters: MetadataImage) -> None:
    result = commands.create_topic(two_clusters, "U_TopicA", "r1", 4, topic_id="t-1")
    parts = result.reply["partitions"]
    assert [(p["partition"], p["cluster_id"], p["physical_partition"]) for p in parts] == [
        (0, "c1", 0), (1, "c1", 1), (2, "c1", 2), (3, "c1", 3),
        (4, "c2", 0), (5, "c2", 1), (6, "c2", 2), (7, "c2", 3),
    ]  # fmt: skip
    assert {p["physical_topic"] for p in parts} == {"U_TopicA"}
    assert all(p["state"] == "writable" and p["writable"] for p in parts)
    assert len(result.records) == 9
    image = run(two_clusters, result)
    assert len(image.topics["U_TopicA"].partitions) == 8


def test_create_topic_skips_fenced_and_inactive_clusters(two_clusters: MetadataImage) -> None:
    image = apply(two_clusters, [ClusterFenced("c1", "down", 1)])
    parts = commands.create_topic(image, "t", "r1", 2, topic_id="i").reply["partitions"]
    assert {p["cluster_id"] for p in parts} == {"c2"}
    image = apply(image, [ClusterStateChanged("c2", "read_only")])
    with pytest.raises(Conflict, match="no active, unfenced cluster") as e:
        commands.create_topic(image, "t", "r1", 2, topic_id="i")
    assert e.value.extra["field"] == "region"


def test_create_topic_with_physical_name(two_clusters: MetadataImage) -> None:
    parts = commands.create_topic(two_clusters, "t", "r1", 1, topic_id="i", physical_topic="phys").reply["partitions"]
    assert {p["physical_topic"] for p in parts} == {"phys"}


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"name": ""}, "name"),
        ({"name": "has space"}, "name"),
        ({"name": "x" * 250}, "name"),
        ({"name": ".."}, "name"),
        ({"region": "r/1"}, "region"),
        ({"partitions_per_cluster": 0}, "partitions_per_cluster"),
        ({"partitions_per_cluster": True}, "partitions_per_cluster"),
        ({"partitions_per_cluster": 60_000}, "partitions_per_cluster"),
        ({"physical_topic": "a b"}, "physical_topic"),
        ({"retention_ms": -1}, "retention_ms"),
    ],
)
def test_create_topic_rejects_bad_fields(two_clusters: MetadataImage, kwargs: dict, field: str) -> None:
    args = {"name": "t", "region": "r1", "partitions_per_cluster": 2, "topic_id": "i"} | kwargs
    with pytest.raises(InvalidRequest) as e:
        commands.create_topic(two_clusters, **args)
    assert e.value.field == field


def test_create_existing_topic_conflicts(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 1, topic_id="i"))
    with pytest.raises(Conflict, match="already exists"):
        commands.create_topic(image, "t", "r1", 1, topic_id="j")


def test_register_cluster_is_idempotent_and_guards_region(two_clusters: MetadataImage) -> None:
    assert commands.register_cluster(two_clusters, "c1", "r1", "127.0.0.1:19092").records == ()
    moved = commands.register_cluster(two_clusters, "c1", "r1", "10.0.0.1:9092,10.0.0.2:9092")
    assert moved.records == (ClusterRegistered("c1", "r1", "10.0.0.1:9092,10.0.0.2:9092"),)
    with pytest.raises(Conflict, match="already registered in region"):
        commands.register_cluster(two_clusters, "c1", "r2", "127.0.0.1:19092")
    for bad in ("", "nohost", "h:0", "h:99999", "h:1,,h:2"):
        with pytest.raises(InvalidRequest) as e:
            commands.register_cluster(two_clusters, "c5", "r1", bad)
        assert e.value.field == "bootstrap_servers"


def test_register_cluster_replies_with_the_cluster_its_record_makes(two_clusters: MetadataImage) -> None:
    fenced = commands.fence_cluster(two_clusters, "c1", "down", at_ms=5)
    image = apply(two_clusters, fenced.records)
    for cluster_id, servers in (("c1", "10.0.0.1:9092"), ("c9", "10.0.0.9:9092")):  # moved, new
        result = commands.register_cluster(image, cluster_id, "r1", servers)
        assert result.reply == cluster_view(apply(image, result.records).clusters[cluster_id])


def test_cluster_state_paths(two_clusters: MetadataImage) -> None:
    image = two_clusters
    for state in ("read_only", "draining", "decommissioned"):
        image = run(image, commands.change_cluster_state(image, "c1", state))
    assert image.clusters["c1"].state == "decommissioned"
    with pytest.raises(Conflict, match="cannot go from decommissioned to active"):
        commands.change_cluster_state(image, "c1", "active")
    with pytest.raises(Conflict, match=r"allowed: read_only"):
        commands.change_cluster_state(two_clusters, "c2", "draining")
    with pytest.raises(InvalidRequest):
        commands.change_cluster_state(two_clusters, "c2", "sleeping")
    with pytest.raises(NotFound):
        commands.change_cluster_state(two_clusters, "nope", "read_only")
    with pytest.raises(Conflict, match="decommissioned"):
        commands.register_cluster(image, "c1", "r1", "127.0.0.1:19092")
    assert commands.change_cluster_state(two_clusters, "c2", "active").records == ()


def test_add_partitions_continues_physical_numbering(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 2, topic_id="i"))
    result = commands.add_partitions(image, "t", "c2", 3)
    new = result.reply["partitions"][4:]
    assert [(p["partition"], p["cluster_id"], p["physical_partition"]) for p in new] == [
        (4, "c2", 2), (5, "c2", 3), (6, "c2", 4),
    ]  # fmt: skip
    image = run(image, result)
    image = apply(image, [ClusterRegistered("c3", "r1", "h:3")])
    fresh = commands.add_partitions(image, "t", "c3", 2).reply["partitions"][7:]
    assert [(p["partition"], p["physical_partition"]) for p in fresh] == [(7, 0), (8, 1)]
    with pytest.raises(Conflict, match="region"):
        commands.add_partitions(image, "t", "x9", 1)
    with pytest.raises(NotFound):
        commands.add_partitions(image, "nope", "c1", 1)
    with pytest.raises(NotFound):
        commands.add_partitions(image, "t", "c7", 1)


def test_partition_state_paths_and_last_writable(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 1, topic_id="i"))
    image = run(image, commands.change_partition_state(image, "t", 0, "read_only"))
    with pytest.raises(Conflict, match="at least one writable"):
        commands.change_partition_state(image, "t", 1, "read_only")
    with pytest.raises(Conflict, match="cannot go from writable to removed"):
        commands.change_partition_state(image, "t", 1, "removed")
    image = run(image, commands.change_partition_state(image, "t", 0, "removed"))
    with pytest.raises(Conflict, match="cannot go from removed"):
        commands.change_partition_state(image, "t", 0, "writable")
    with pytest.raises(NotFound):
        commands.change_partition_state(image, "t", 2, "read_only")
    with pytest.raises(InvalidRequest):
        commands.change_partition_state(image, "t", 1, "gone")
    assert commands.change_partition_state(image, "t", 1, "writable").records == ()


def test_delete_topic(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 1, topic_id="i"))
    image = run(image, commands.delete_topic(image, "t"))
    assert "t" not in image.topics
    with pytest.raises(NotFound):
        commands.delete_topic(image, "t")
    # a deleted name can be created again, as a new topic
    image = apply(image, [TopicCreated("j", "t", "r1")])
    assert image.topics["t"].topic_id == "j"


def test_shrink_marks_partitions_read_only_keeps_one_writable_and_reruns_as_a_no_op(
    two_clusters: MetadataImage,
) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 2, topic_id="i"))
    result = commands.shrink_partitions(image, "t", [3, 1])
    assert [(r.partition, r.state) for r in result.records] == [(1, "read_only"), (3, "read_only")]  # type: ignore[attr-defined]
    image = run(image, result)
    assert commands.shrink_partitions(image, "t", [1, 3]).records == ()
    image = apply(image, [PartitionStateChanged("t", 1, "removed")])
    assert commands.shrink_partitions(image, "t", [1]).records == (), "a removed partition stays removed"
    with pytest.raises(Conflict, match="at least one writable") as e:
        commands.shrink_partitions(image, "t", [0, 2])
    assert e.value.extra["field"] == "partitions"
    for bad in ([], [9], ["0"], [True], "0"):
        with pytest.raises(InvalidRequest) as bad_request:
            commands.shrink_partitions(image, "t", bad)  # type: ignore[arg-type]
        assert bad_request.value.extra["field"] == "partitions"
    with pytest.raises(NotFound):
        commands.shrink_partitions(image, "nope", [0])


def test_decommission_goes_read_only_then_draining_and_reruns_as_a_no_op(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 2, topic_id="i"))
    result = commands.decommission_cluster(image, "c2")
    assert [(r.cluster_id, r.state) for r in result.records] == [("c2", "read_only"), ("c2", "draining")]  # type: ignore[attr-defined]
    image = run(image, result)
    assert commands.decommission_cluster(image, "c2").records == ()
    from_read_only = apply(two_clusters, [ClusterStateChanged("c1", "read_only")])
    assert [r.state for r in commands.decommission_cluster(from_read_only, "c1").records] == ["draining"]  # type: ignore[attr-defined]


def test_decommission_refuses_the_last_active_cluster_and_stranded_topics(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 1, topic_id="i"))
    assert commands.decommission_cluster(two_clusters, "x9").records, "a region without topics may empty"
    image = run(image, commands.decommission_cluster(image, "c2"))
    with pytest.raises(Conflict, match="last active cluster of region 'r1'") as e:
        commands.decommission_cluster(image, "c1")
    assert e.value.extra["field"] == "cluster_id"
    with pytest.raises(Conflict, match="last active cluster"):
        commands.change_cluster_state(apply(image, [ClusterStateChanged("c1", "read_only")]), "c1", "draining")
    # a topic whose only writable partitions are on the cluster: expand it first
    only_c1 = apply(two_clusters, [TopicCreated("j", "solo", "r1"), PartitionsAdded("solo", 0, "c1", "solo", 0)])
    with pytest.raises(Conflict, match=r"solo would have no writable partition left; expand"):
        commands.decommission_cluster(only_c1, "c1")


def test_decommissioned_removes_the_clusters_partitions_through_read_only(two_clusters: MetadataImage) -> None:
    image = run(two_clusters, commands.create_topic(two_clusters, "t", "r1", 2, topic_id="i"))
    image = apply(image, [PartitionStateChanged("t", 3, "read_only")])
    image = run(image, commands.decommission_cluster(image, "c2"))
    image = run(image, commands.change_cluster_state(image, "c2", "decommissioned"))
    assert [p.state for p in image.topics["t"].partitions] == ["writable", "writable", "removed", "removed"]
    assert image.clusters["c2"].state == "decommissioned"


@pytest.mark.parametrize("physical", [None, "shared"])
def test_create_topic_replies_with_the_topic_its_records_make(
    two_clusters: MetadataImage, physical: str | None
) -> None:
    # the reply is built without applying the records: it must be the view of the image they make,
    # including leaders already reported for the physical topic (a re-created topic on the same name)
    image = apply(two_clusters, [PhysicalPartitionsReported("c2", "shared", 1, "127.0.0.1:29092")])
    result = commands.create_topic(image, "t", "r1", 3, topic_id="i", physical_topic=physical, retention_ms=60_000)
    after = run(image, result)
    assert result.reply == topic_view(after, after.topics["t"])


def test_from_metadata_version_4_commands_write_ranges_that_make_the_same_image(two_clusters: MetadataImage) -> None:
    """Each command that wrote a record per partition writes ranges once the quorum reads them, and the image
    after is the one the records per partition make."""

    def session(image: MetadataImage) -> tuple[MetadataImage, list[int]]:
        sizes = []
        steps = [
            lambda im: commands.create_topic(im, "U_TopicA", "r1", 1000, topic_id="t-1"),
            lambda im: commands.add_partitions(im, "U_TopicA", "c1", 500),
            lambda im: commands.shrink_partitions(im, "U_TopicA", [*range(10, 20), 30, *range(1500, 1600)]),
            lambda im: commands.report_physical_partitions(
                im,
                "c1",
                [PhysicalPartition("U_TopicA", p, f"127.0.0.1:{9000 + p % 3}" if p % 7 else None) for p in range(1500)],
            ),
            lambda im: commands.report_physical_partitions(
                im, "c1", [PhysicalPartition("U_TopicA", p, "127.0.0.1:9005") for p in range(0, 1500, 2)]
            ),
        ]
        for step in steps:
            result = step(image)
            sizes.append(len(result.records))
            image = run(image, result)
        return image, sizes

    old, old_sizes = session(apply(two_clusters, [MetadataVersionChanged(3)]))
    new, new_sizes = session(apply(two_clusters, [MetadataVersionChanged(4)]))
    assert new.topics == old.topics and new.clusters == old.clusters
    assert new_sizes == [3, 1, 3, 1, 1]  # created on 2 clusters; one range; 10-19, 30, 1500-1599; a topic's leaders
    assert old_sizes == [2001, 500, 111, 1500 - len(range(0, 1500, 7)), 750]  # no leader: nothing to drop
    parts = new.topics["U_TopicA"].partitions
    assert len(parts.runs) == 3 and parts.count_in_state("read_only") == 111  # c1, c2, then c1 again


def test_a_leader_report_in_compact_form_records_what_the_one_per_partition_form_does(
    two_clusters: MetadataImage,
) -> None:
    from metadata_log.commands.clusters import LeaderRanges

    image = apply(two_clusters, [MetadataVersionChanged(4)])
    image = run(image, commands.create_topic(image, "T", "r1", 300, topic_id="t"))
    first = [PhysicalPartition("T", p, f"127.0.0.1:{9000 + p % 2}") for p in range(300)]
    image = run(image, commands.report_physical_partitions(image, "c1", first))
    changes = [PhysicalPartition("T", p, "127.0.0.1:9005" if p % 3 else None) for p in (*range(0, 100), 150, 299)]
    compact = commands.leader_ranges(changes)
    by_ranges = commands.report_leader_ranges(image, "c1", compact)
    by_rows = commands.report_physical_partitions(image, "c1", changes)
    assert run(image, by_ranges).clusters == run(image, by_rows).clusters  # the image the changes make
    assert len(by_ranges.records) == 3 and len(by_rows.records) == 1  # each range that differs, as reported
    assert commands.report_leader_ranges(run(image, by_ranges), "c1", compact).records == ()  # nothing changed
    bad = [
        (LeaderRanges("T", ["127.0.0.1:1"], [0], [0]), "leaders.0.ranges"),
        (LeaderRanges("T", ["127.0.0.1:1"], [0, 2], [0]), "leaders.0.leaders"),
        (LeaderRanges("T", ["127.0.0.1:1"], [0, 1], [1]), "leaders.0.leaders"),
        (LeaderRanges("T", ["nohost"], [0, 1], [0]), "leaders.0.brokers.0"),
        (LeaderRanges("T", ["127.0.0.1:1"], [0, 2, 1, 1], [0, 0, 0]), "leaders.0"),
        (LeaderRanges("T", ["127.0.0.1:1"], [2_000_000, 1], [0]), "leaders.0.ranges"),
    ]
    for report, field in bad:
        with pytest.raises(InvalidRequest) as e:
            commands.report_leader_ranges(image, "c1", [report])
        assert e.value.extra["field"] == field
