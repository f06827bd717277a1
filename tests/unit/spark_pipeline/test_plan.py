"""The kfed source's option checks and offset planning, as plain functions (no Spark, no brokers)."""

from __future__ import annotations

import gc
import itertools
import json

import pytest
from pyspark.sql.datasource import InputPartition

from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.records import ClusterRegistered, PartitionsAdded, PartitionStateChanged, TopicCreated
from spark_pipeline.options import SourceOptionError, parse_options
from spark_pipeline.plan import (
    EMPTY_STREAM_OFFSET,
    DataLossError,
    OffsetRange,
    SourcePartition,
    StreamOffset,
    Watermarks,
    batch_ranges,
    bootstraps,
    next_offset,
    rate_limit,
    resolve_placements,
    split_ranges,
    spread_over_clusters,
    stream_ranges,
)

BASE = {"kfed.controllers": "http://127.0.0.1:8001", "subscribe": "T"}


def image_with(partitions: int = 4, removed: tuple[int, ...] = ()):
    records = [
        ClusterRegistered("c1", "r1", "h1:1"),
        ClusterRegistered("c2", "r1", "h2:2"),
        TopicCreated("id-T", "T", "r1"),
        *[PartitionsAdded("T", i, "c1" if i % 2 == 0 else "c2", "T", i // 2) for i in range(partitions)],
    ]
    for p in removed:
        records += [PartitionStateChanged("T", p, "read_only"), PartitionStateChanged("T", p, "removed")]
    return apply(EMPTY_IMAGE, records)


def marks_for(placements, low=0, high=100):
    return {p.physical: Watermarks(low, high) for p in placements}


# -- options --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "mode", "option"),
    [
        ({"kfed.controllers": ""}, "batch", "kfed.controllers"),
        ({"kfed.controllers": "127.0.0.1:8001"}, "batch", "kfed.controllers"),
        ({"subscribe": " , "}, "batch", "subscribe"),
        ({"startingOffsets": "latest"}, "batch", "startingOffsets"),
        ({"startingOffsets": '{"T": {"0": -1}}'}, "batch", "startingOffsets"),
        ({"startingOffsets": '{"Other": {"0": 1}}'}, "batch", "startingOffsets"),
        ({"startingOffsets": '{"T": {"x": 1}}'}, "batch", "startingOffsets"),
        ({"startingOffsets": "{not json"}, "batch", "startingOffsets"),
        ({"endingOffsets": "earliest"}, "batch", "endingOffsets"),
        ({"startingOffsets": '{"T": {"0": 9}}', "endingOffsets": '{"T": {"0": 5}}'}, "batch", "endingOffsets"),
        ({"endingOffsets": "latest"}, "stream", "endingOffsets"),
        ({"maxOffsetsPerTrigger": "0"}, "stream", "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "10"}, "batch", "maxOffsetsPerTrigger"),
        ({"metadataOffset": "-1"}, "batch", "metadataOffset"),
        ({"metadataOffset": "5"}, "stream", "metadataOffset"),
        ({"failOnDataLoss": "maybe"}, "batch", "failOnDataLoss"),
        ({"kafka.bootstrap.servers": "x:1"}, "batch", "kafka.bootstrap.servers"),
        ({"subscrbe": "T"}, "batch", "subscrbe"),
    ],
)
def test_bad_options_are_rejected_naming_the_option(extra: dict[str, str], mode: str, option: str) -> None:
    with pytest.raises(SourceOptionError) as e:
        parse_options({**BASE, **extra}, mode)  # type: ignore[arg-type]
    assert e.value.option.lower() == option.lower()
    assert option in str(e.value)


def test_options_defaults_and_json_offsets() -> None:
    batch = parse_options({**BASE, "startingOffsets": json.dumps({"T": {"1": 5, "2": -2}})}, "batch")
    assert batch.starting == {"T": {1: 5, 2: -2}} and batch.ending == "latest"
    assert batch.fail_on_data_loss and not batch.include_headers
    stream = parse_options({**BASE, "maxOffsetsPerTrigger": "100", "kafka.fetch.wait.max.ms": "5"}, "stream")
    assert stream.starting == "latest" and stream.max_offsets_per_trigger == 100
    assert stream.kafka == {"fetch.wait.max.ms": "5"}


# -- batch planning -------------------------------------------------------------------------------
def test_placements_skip_removed_partitions_and_missing_topics_are_an_error_for_batch() -> None:
    image = image_with(4, removed=(1,))
    placements = resolve_placements(image, ["T"], require_all=True)
    assert [p.partition for p in placements] == [0, 2, 3]
    assert placements[1] == SourcePartition("T", 2, "id-T", "c1", "T", 1)
    assert bootstraps(image, placements) == {"c1": "h1:1", "c2": "h2:2"}
    with pytest.raises(SourceOptionError, match="'U' does not exist"):
        resolve_placements(image, ["T", "U"], require_all=True)
    assert len(resolve_placements(image, ["T", "U"], require_all=False)) == 3


def test_batch_ranges_resolve_earliest_latest_and_json_and_report_data_loss() -> None:
    image = image_with(2)
    placements = resolve_placements(image, ["T"], require_all=True)
    clusters = bootstraps(image, placements)
    marks = {placements[0].physical: Watermarks(10, 50), placements[1].physical: Watermarks(0, 0)}
    ranges = batch_ranges(placements, clusters, marks, "earliest", "latest", True)
    assert [(r.placement.partition, r.start, r.end, r.bootstrap) for r in ranges] == [(0, 10, 50, "h1:1")]
    ranges = batch_ranges(placements, clusters, marks, {"T": {0: 20}}, {"T": {0: 30}}, True)
    assert [(r.start, r.end) for r in ranges] == [(20, 30)]
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        batch_ranges(placements, clusters, marks, {"T": {0: 5}}, "latest", True)
    assert [(r.start, r.end) for r in batch_ranges(placements, clusters, marks, {"T": {0: 5}}, "latest", False)] == [
        (10, 50)
    ]
    with pytest.raises(SourceOptionError, match="T/7"):
        batch_ranges(placements, clusters, marks, {"T": {7: 0}}, "latest", True)


def test_split_ranges_cover_exactly_the_range_in_bounded_pieces() -> None:
    p = SourcePartition("T", 0, "id", "c1", "T", 0)
    ranges = [OffsetRange(p, "h", 3, 1003), OffsetRange(p, "h", 0, 10)]
    split = split_ranges(ranges, 300, None)
    assert max(r.size for r in split) <= 300
    assert sum(r.size for r in split) == 1010
    first = [r for r in split if r.end <= 1003 and r.start >= 3]
    assert first[0].start == 3 and first[-1].end == 1003
    assert all(a.end == b.start for a, b in itertools.pairwise(first))
    assert len(split_ranges(ranges, 10_000, 8)) >= 8


# -- streaming ------------------------------------------------------------------------------------
def test_stream_offset_json_round_trip_is_stable() -> None:
    image = image_with(3)
    placements = resolve_placements(image, ["T"], require_all=True)
    end = next_offset(EMPTY_STREAM_OFFSET, placements, bootstraps(image, placements), marks_for(placements), True)
    doc = end.to_json()
    assert json.dumps(StreamOffset.from_json(json.loads(json.dumps(doc))).to_json()) == json.dumps(doc)
    assert doc["topics"]["T"]["partitions"]["1"] == {"cluster": "c2", "topic": "T", "partition": 0, "offset": 100}


def test_next_offset_adds_new_partitions_from_earliest_and_drops_removed_ones() -> None:
    before = image_with(2)
    placements = resolve_placements(before, ["T"], require_all=True)
    start = next_offset(EMPTY_STREAM_OFFSET, placements, bootstraps(before, placements), marks_for(placements), True)
    after = apply(before, [PartitionsAdded("T", 2, "c1", "T2", 0), PartitionStateChanged("T", 0, "read_only")])
    after = apply(after, [PartitionStateChanged("T", 0, "removed")])
    now = resolve_placements(after, ["T"], require_all=True)
    marks = {**marks_for(now, 0, 150), ("c1", "T2", 0): Watermarks(3, 7)}
    end = next_offset(start, now, bootstraps(after, now), marks, True)
    assert {k[1]: p.offset for k, p in end.positions.items()} == {1: 150, 2: 7}
    ranges = stream_ranges(start, end, {("c1", "T2", 0): Watermarks(3, 7)}, True)
    assert [(r.placement.partition, r.start, r.end) for r in ranges] == [(1, 100, 150), (2, 3, 7)]


def test_replay_reads_with_the_recorded_mapping_even_after_the_topic_was_recreated() -> None:
    image = image_with(1)
    placements = resolve_placements(image, ["T"], require_all=True)
    start = next_offset(EMPTY_STREAM_OFFSET, placements, bootstraps(image, placements), marks_for(placements), True)
    moved = SourcePartition("T", 0, "id-T2", "c2", "T", 0)  # the topic was deleted and created again elsewhere
    end = next_offset(start, [moved], {"c2": "h2:2"}, {moved.physical: Watermarks(0, 40)}, True)
    assert end.positions[("T", 0)].placement == moved
    # the checkpointed batch (start, end) is replayed as planned: the new mapping reads from earliest
    ranges = stream_ranges(start, end, {moved.physical: Watermarks(0, 40)}, True)
    assert [(r.placement.cluster_id, r.start, r.end, r.bootstrap) for r in ranges] == [("c2", 0, 40, "h2:2")]


def test_next_offset_reports_a_partition_that_went_backwards() -> None:
    image = image_with(1)
    placements = resolve_placements(image, ["T"], require_all=True)
    start = next_offset(EMPTY_STREAM_OFFSET, placements, bootstraps(image, placements), marks_for(placements), True)
    with pytest.raises(DataLossError):
        next_offset(start, placements, bootstraps(image, placements), marks_for(placements, 0, 10), True)
    end = next_offset(start, placements, bootstraps(image, placements), marks_for(placements, 0, 10), False)
    ranges = stream_ranges(start, end, marks_for(placements, 0, 10), False)
    assert [(r.start, r.end) for r in ranges] == [(0, 10)]


def test_available_now_target_caps_every_partition_and_admits_no_later_partition() -> None:
    image = image_with(2)
    placements = resolve_placements(image, ["T"], require_all=True)
    clusters = bootstraps(image, placements)
    target = next_offset(EMPTY_STREAM_OFFSET, placements, clusters, marks_for(placements, 0, 100), True)
    start = next_offset(EMPTY_STREAM_OFFSET, placements, clusters, marks_for(placements, 0, 0), True)
    grown = apply(image, [PartitionsAdded("T", 2, "c1", "T", 1)])
    now = resolve_placements(grown, ["T"], require_all=True)
    end = next_offset(start, now, bootstraps(grown, now), marks_for(now, 0, 500), True, 60, target)
    assert sorted((k[1], p.offset) for k, p in end.positions.items()) == [(0, 30), (1, 30)]
    end = next_offset(end, now, bootstraps(grown, now), marks_for(now, 0, 500), True, None, target)
    assert sorted((k[1], p.offset) for k, p in end.positions.items()) == [(0, 100), (1, 100)]


def test_rate_limit_spreads_the_limit_by_lag_and_never_exceeds_it() -> None:
    begin = {("T", 0): 0, ("T", 1): 0, ("T", 2): 5}
    latest = {("T", 0): 900, ("T", 1): 100, ("T", 2): 5}
    limited = rate_limit(begin, latest, 100)
    assert limited == {("T", 0): 90, ("T", 1): 10, ("T", 2): 5}
    assert rate_limit(begin, latest, 10_000) == latest
    tiny = rate_limit(begin, latest, 1)
    assert sum(tiny[k] - begin[k] for k in begin) == 1


def test_only_a_spark_python_worker_freezes_what_it_has_imported_and_only_once(monkeypatch: pytest.MonkeyPatch) -> None:
    from spark_pipeline import source

    gc.unfreeze()
    monkeypatch.setattr(source, "_worker_settled", False)
    monkeypatch.delenv("SPARK_PYTHON_RUNTIME", raising=False)
    monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
    try:
        source.settle_python_worker()
        assert gc.get_freeze_count() == 0  # an application's own process (the driver, a test) is left alone

        monkeypatch.setenv("SPARK_PYTHON_RUNTIME", "PYTHON_WORKER")
        monkeypatch.delenv("SPARK_REUSE_WORKER")
        source.settle_python_worker()
        assert gc.get_freeze_count() == 0  # a worker used for one task only: no collection after it to spare

        monkeypatch.setenv("SPARK_REUSE_WORKER", "1")
        assert list(source._read(InputPartition(0))) == []  # a task's first call into the source
        frozen = gc.get_freeze_count()
        assert frozen > 0  # the imports: skipped by the full collection pyspark runs after every task

        created_by_a_task = [[] for _ in range(100)]  # tracked objects made after the freeze
        source.settle_python_worker()
        # not more (a second freeze would add the 100 lists); fewer when another thread of this process let
        # frozen objects go meanwhile
        assert gc.get_freeze_count() <= frozen, "a second task must not freeze what the first left behind"
        assert created_by_a_task
    finally:
        gc.unfreeze()


def test_tasks_running_side_by_side_read_from_different_clusters() -> None:
    def rng(cluster_id: str, partition: int) -> OffsetRange:
        return OffsetRange(SourcePartition("T", partition, "id", cluster_id, "T", partition % 4), "b:1", 0, 10)

    listed = [rng("c1", p) for p in range(4)] + [rng("c2", p) for p in range(4, 8)]  # as resolved: by cluster
    spread = spread_over_clusters(listed)
    assert [(r.placement.cluster_id, r.placement.partition) for r in spread] == [
        ("c1", 0), ("c2", 4), ("c1", 1), ("c2", 5), ("c1", 2), ("c2", 6), ("c1", 3), ("c2", 7)
    ]  # fmt: skip
    from spark_pipeline.source import _tasks

    tasks = _tasks(listed, parse_options(BASE, "batch"))  # what Spark is given: index order is start order
    assert [(t.value, t.range) for t in tasks] == list(enumerate(spread))  # type: ignore[attr-defined]
    uneven = [rng("c2", 4), rng("c1", 0), rng("c1", 1), rng("c1", 2)]
    assert [r.placement.partition for r in spread_over_clusters(uneven)] == [0, 4, 1, 2]
    assert spread_over_clusters([]) == []
