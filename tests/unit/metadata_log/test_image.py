"""Image algebra: apply composes, snapshots round-trip, every prefix is a valid image, bad records refused."""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import gc
import itertools

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from metadata_log.codec import CodecError, decode_runs, encode_runs, pack, record_to_wire, records_of, unpack
from metadata_log.image import (
    EMPTY_IMAGE,
    InvalidRecord,
    MetadataDelta,
    MetadataImage,
    PartitionImage,
    apply,
    apply_runs,
    is_writable,
)
from metadata_log.image.cluster import LastRegistrations
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    ClusterFenced,
    ClusterRegistered,
    ClusterStateChanged,
    ClusterUnfenced,
    MetadataVersionChanged,
    NewerMetadataVersion,
    NoOp,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from metadata_log.snapshot import read_records, read_rows, read_runs, write_records, write_rows, write_runs
from tests.unit.samples import BATCH_ENDS, ONE_OF_EACH


def test_apply_composes() -> None:
    for cut in BATCH_ENDS:
        stepwise = apply(apply(EMPTY_IMAGE, ONE_OF_EACH[:cut]), ONE_OF_EACH[cut:])
        assert stepwise == apply(EMPTY_IMAGE, ONE_OF_EACH)


def test_offset_counts_records() -> None:
    assert apply(EMPTY_IMAGE, ONE_OF_EACH).offset == len(ONE_OF_EACH) - 1
    assert apply(EMPTY_IMAGE, []).offset == -1


def test_every_prefix_replays_and_snapshots_round_trip() -> None:
    image = EMPTY_IMAGE
    for start, end in itertools.pairwise(BATCH_ENDS):
        image = apply(image, ONE_OF_EACH[start:end])
        assert read_records(write_records(image), image.offset) == image
        # the bulk path (dumps, msgpack snapshots) writes and reads exactly the same thing
        assert list(write_rows(image)) == [record_to_wire(r) for r in write_records(image)]
        assert read_rows(list(write_rows(image)), image.offset) == image
        # and so do runs (dumps and snapshots at metadata version 2), also once through msgpack
        assert read_runs(write_runs(image), image.offset) == image
        assert read_runs(unpack(pack(write_runs(image))), image.offset) == image


def test_bulk_snapshot_path_refuses_what_apply_refuses() -> None:
    # written at metadata version 3: a record per partition
    rows = list(write_rows(dataclasses.replace(apply(EMPTY_IMAGE, ONE_OF_EACH), metadata_version=3)))
    partition_rows = [i for i, r in enumerate(rows) if r[0] == "PartitionsAdded"]
    bad = [list(r) for r in rows]
    bad[partition_rows[1]][3] = 7  # partition id that is not the next one
    with pytest.raises(InvalidRecord, match="not the next id"):
        read_rows(bad, 0)
    bad = [list(r) for r in rows]
    bad[partition_rows[0]][3] = "0"
    with pytest.raises(CodecError):
        read_rows(bad, 0)


def test_snapshot_of_decommissioned_cluster_with_partitions() -> None:
    records = [
        ClusterRegistered("c1", "r1", "h:1"),
        ClusterRegistered("c2", "r1", "h:2"),
        TopicCreated("id", "t", "r1"),
        PartitionsAdded("t", 0, "c1", "t", 0),
        PartitionsAdded("t", 1, "c2", "t", 0),
        PartitionStateChanged("t", 1, "read_only"),
        PartitionStateChanged("t", 1, "removed"),
        ClusterStateChanged("c2", "read_only"),
        ClusterStateChanged("c2", "draining"),
        ClusterStateChanged("c2", "decommissioned"),
    ]
    image = apply(EMPTY_IMAGE, records)
    assert read_records(write_records(image), image.offset) == image


def test_seeds_example_placement_and_writability() -> None:
    image = apply(EMPTY_IMAGE, ONE_OF_EACH)
    topic = image.topics["U_TopicA"]
    assert [p.cluster_id for p in topic.partitions] == ["c1", "c2", "c2"]
    assert [p.state for p in topic.partitions] == ["writable", "removed", "writable"]
    # c1 is fenced at the end of the sample log, c2 unfenced again
    assert [is_writable(image, p) for p in topic.partitions] == [False, False, True]
    assert image.clusters["c1"].leaders == {
        ("U_TopicA", 0): "127.0.0.1:19092",
        ("D", 0): "127.0.0.1:19092",
        ("D", 2): "127.0.0.1:19093",
    }
    assert "C" not in image.topics


def test_apply_is_atomic_and_leaves_the_input_untouched() -> None:
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    before = copy.deepcopy(base)  # a deep copy: a shallow one shares the maps a bug would mutate
    with pytest.raises(InvalidRecord):
        apply(base, [TopicCreated("x", "X", "r1"), PartitionsAdded("X", 0, "nope", "X", 0)])
    assert base == before
    assert "X" not in base.topics


@pytest.mark.parametrize(
    "records, message",
    [
        ([ClusterStateChanged("c9", "read_only")], "not registered"),
        ([ClusterRegistered("c1", "r2", "h:1")], "registered in region"),
        ([ClusterStateChanged("c1", "decommissioned")], "cannot go from active"),
        ([ClusterFenced("c1", "x", 1)], "already fenced"),
        ([ClusterUnfenced("c2", 1)], "not fenced"),
        ([TopicCreated("x", "U_TopicA", "r1")], "already exists"),
        ([PartitionsAdded("U_TopicA", 5, "c1", "U_TopicA", 9)], "not the next id"),
        ([PartitionsAdded("U_TopicA", 3, "c1", "U_TopicA", 0)], "already backs a partition"),
        ([PartitionsAdded("U_TopicA", 3, "c3", "U_TopicA", 0)], "region"),
        ([PartitionsAdded("nope", 0, "c1", "nope", 0)], "does not exist"),
        ([PartitionStateChanged("U_TopicA", 1, "writable")], "cannot go from removed"),
        ([PartitionStateChanged("U_TopicA", 0, "removed")], "cannot go from writable"),
        ([PartitionStateChanged("U_TopicA", 7, "read_only")], "no partition 7"),
        ([TopicDeleted("nope")], "does not exist"),
        ([MetadataVersionChanged(1)], "cannot go back to 1"),
    ],
)
def test_records_that_do_not_fit_are_refused(records: list, message: str) -> None:
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    with pytest.raises(InvalidRecord, match=message):
        apply(base, records)


def test_a_metadata_version_newer_than_this_code_is_not_an_invalid_record() -> None:
    """Refusing it depends on the reader's code, not on the image: the caller must not treat it as a record
    that every node refuses alike."""
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    with pytest.raises(NewerMetadataVersion, match="newer than this kfed reads") as refused:
        apply(base, [MetadataVersionChanged(LATEST_METADATA_VERSION + 1)])
    assert not isinstance(refused.value, InvalidRecord)


def test_images_share_unchanged_maps() -> None:
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    after = apply(base, [PartitionStateChanged("U_TopicA", 0, "read_only")])
    assert after.clusters is base.clusters
    assert after.topics["B"] is base.topics["B"]
    assert after.topics["U_TopicA"] is not base.topics["U_TopicA"]


def test_empty_image_is_empty() -> None:
    assert MetadataImage(-1, {}, {}, {}) == EMPTY_IMAGE
    assert list(write_records(EMPTY_IMAGE)) == []


def _one_at_a_time(image: MetadataImage, records: list) -> MetadataImage:  # type: ignore[type-arg]
    for record in records:
        image = apply(image, [record])
    return image


def test_runs_of_partitions_added_apply_like_one_record_at_a_time() -> None:
    # ``apply`` replays consecutive PartitionsAdded of one topic as a run: same image, same first error.
    base = apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "eu", "h:1"),
            ClusterRegistered("c2", "eu", "h:2"),
            ClusterRegistered("x", "us", "h:3"),
            TopicCreated("t1", "a", "eu"),
            TopicCreated("t2", "b", "eu"),
        ],
    )
    good = [
        PartitionsAdded("a", 0, "c1", "a", 0),
        PartitionsAdded("a", 1, "c2", "a", 0),
        PartitionsAdded("b", 0, "c1", "b", 0),
        PartitionStateChanged("b", 0, "read_only"),
        PartitionsAdded("b", 1, "c2", "b", 0),
        PartitionsAdded("a", 2, "c1", "a", 1),
    ]
    assert apply(base, good) == _one_at_a_time(base, good)
    bad_cases = [
        [PartitionsAdded("a", 0, "c1", "a", 0), PartitionsAdded("a", 2, "c1", "a", 1)],  # not the next id
        [PartitionsAdded("a", 0, "c1", "a", 0), PartitionsAdded("a", 1, "c1", "a", 0)],  # placement reused
        [PartitionsAdded("a", 0, "c1", "a", 0), PartitionsAdded("a", 1, "x", "a", 0)],  # other region
        [PartitionsAdded("a", 0, "c1", "a", 0), PartitionsAdded("zz", 0, "c1", "a", 0)],  # no such topic
        [PartitionsAdded("a", 0, "nope", "a", 0)],  # no such cluster
        [PartitionsAdded("a", 0, "c1", "a", -1)],
    ]
    for records in bad_cases:
        with pytest.raises(InvalidRecord) as batched:
            apply(base, records)
        with pytest.raises(InvalidRecord) as single:
            _one_at_a_time(base, records)
        assert str(batched.value) == str(single.value)


def test_evolve_refuses_a_field_the_image_does_not_have() -> None:
    from metadata_log.image import ClusterImage
    from metadata_log.image.common import evolve as _evolve

    cluster = ClusterImage("c1", "eu", "h:1")
    assert _evolve(cluster, state="draining") == ClusterImage("c1", "eu", "h:1", state="draining")
    with pytest.raises(TypeError):
        _evolve(cluster, stat="draining")


def test_partitions_added_in_bulk_are_the_partition_images_the_class_makes() -> None:
    # Partitions builds PartitionImage tuples directly and topic_view unpacks them: the field list is fixed
    assert PartitionImage._fields == ("partition", "cluster_id", "physical_topic", "physical_partition", "state")
    image = apply(apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")]), [TopicCreated("i", "t", "r1")])
    image = apply(image, [PartitionsAdded("t", 0, "c1", "pt", 7)])
    (p,) = image.topics["t"].partitions
    assert p == PartitionImage(0, "c1", "pt", 7) and type(p) is PartitionImage and p.state == "writable"


def _run_base() -> MetadataImage:
    return apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "h:1"),
            ClusterRegistered("c2", "r1", "h:2"),
            ClusterRegistered("x", "r2", "h:3"),
            ClusterRegistered("old", "r1", "h:4"),
            ClusterStateChanged("old", "read_only"),
            ClusterStateChanged("old", "draining"),
            ClusterStateChanged("old", "decommissioned"),
            TopicCreated("i", "t", "r1"),
            TopicCreated("j", "u", "r1"),
            PartitionsAdded("t", 0, "c1", "t", 0),
        ],
    )


def _run(n: int = 6, **change: object) -> list[PartitionsAdded]:
    """Partitions 1.. of ``t`` over c1/c2; ``change`` maps "index.field" to a value for that record."""
    rows = [PartitionsAdded("t", 1 + i, ("c1", "c2")[i % 2], "t", 1 + i // 2) for i in range(n)]
    for key, value in change.items():
        index, name = key.split("__")
        rows[int(index[1:])] = dataclasses.replace(rows[int(index[1:])], **{name: value})
    return rows


@pytest.mark.parametrize(
    "records",
    [
        _run(r3__partition=9),  # not the next id
        _run(r4__cluster_id="nope"),  # unknown cluster
        _run(r2__cluster_id="x"),  # other region
        _run(r5__cluster_id="old"),  # decommissioned
        _run(r1__physical_partition=-1),
        _run(r3__physical_partition=1),  # c2/t/1 twice in the run
        _run(r0__cluster_id="c1", r0__physical_partition=0),  # c1/t/0 already backs t/0
        _run(r2__partition=9, r4__cluster_id="nope"),  # two problems: the first one is reported
        _run(r1__partition=9, r3__physical_partition=None),  # and a later value of the wrong type is not it
        _run(r2__topic="nope"),  # a run of another topic, which does not exist
        _run(r3__topic="u", r4__topic="u", r5__topic="u"),  # two runs: u's first partition is not 0
    ],
)
def test_a_run_of_partitions_fails_with_the_error_one_at_a_time_gives(records: list[PartitionsAdded]) -> None:
    # the columnar checks only detect a problem; the error reported is the first row's, as replayed alone
    base = _run_base()
    with pytest.raises(InvalidRecord) as single:
        _one_at_a_time(base, records)
    with pytest.raises(InvalidRecord) as batched:
        apply(base, records)
    with pytest.raises(InvalidRecord) as from_wire:
        read_rows(list(write_rows(base)) + [record_to_wire(r) for r in records], 0)
    assert str(batched.value) == str(from_wire.value) == str(single.value)


def test_runs_over_several_topics_replay_like_one_record_at_a_time() -> None:
    base = _run_base()
    records = [*_run(3), *(PartitionsAdded("u", i, "c2", "u", i) for i in range(4)), *_run(2)[1:]]
    records[-1] = PartitionsAdded("t", 4, "c1", "t9", 0)
    stepwise = _one_at_a_time(base, records)
    assert apply(base, records) == stepwise
    wire = list(write_rows(stepwise))
    assert read_rows(wire, stepwise.offset) == stepwise
    assert read_rows(iter(wire), stepwise.offset) == stepwise  # any iterable of rows


def test_bulk_snapshot_path_decodes_odd_rows_one_by_one() -> None:
    base = _run_base()
    rows = list(write_rows(base))
    longer = [*record_to_wire(PartitionsAdded("t", 1, "c2", "t", 0)), "a field from a newer writer"]
    expected = apply(base, [PartitionsAdded("t", 1, "c2", "t", 0)])
    assert read_rows([*rows, longer], expected.offset) == expected
    for bad in ([*rows, "PartitionsAdded"], [*rows, []], [*rows, ["PartitionsAdded", 0, "t", 1, "c2", "t", True]]):
        with pytest.raises(CodecError):
            read_rows(bad, 0)


def test_leader_reports_replay_in_order_whether_in_bulk_one_by_one_or_from_a_snapshot() -> None:
    base = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1"), ClusterRegistered("c2", "r1", "h:2")])
    reports = [
        PhysicalPartitionsReported("c1", "t", 0, "b1:9092"),
        PhysicalPartitionsReported("c1", "t", 1, "b2:9092"),
        PhysicalPartitionsReported("c2", "t", 0, "b3:9092"),
        PhysicalPartitionsReported("c1", "t", 0, None),  # gone
        PhysicalPartitionsReported("c1", "t", 1, "b4:9092"),  # moved
        PhysicalPartitionsReported("c1", "u", 0, None),  # never had one
    ]
    expected = {"c1": {("t", 1): "b4:9092"}, "c2": {("t", 0): "b3:9092"}}
    one_by_one = base
    for report in reports:
        one_by_one = apply(one_by_one, [report])
    bulk = apply(base, reports)
    rows = [record_to_wire(r) for r in (ClusterRegistered("c1", "r1", "h:1"), ClusterRegistered("c2", "r1", "h:2"))]
    from_rows = read_rows([*rows, *(record_to_wire(r) for r in reports)], bulk.offset)
    for image in (bulk, one_by_one, from_rows, read_rows(list(write_rows(bulk)), bulk.offset)):
        assert {c: dict(image.clusters[c].leaders) for c in expected} == expected
    assert bulk == one_by_one == from_rows
    assert bulk.offset == base.offset + len(reports)
    assert dict(base.clusters["c1"].leaders) == {}  # the base image is untouched
    unknown = PhysicalPartitionsReported("c9", "t", 0, "b9:9092")
    for records in ([*reports, unknown], [unknown, *reports]):
        with pytest.raises(InvalidRecord, match="'c9' is not registered"):
            apply(base, records)
        with pytest.raises(InvalidRecord, match="'c9' is not registered"):
            read_rows([*rows, *(record_to_wire(r) for r in records)], 0)


def test_the_metadata_version_starts_at_1_only_goes_up_and_is_in_snapshots() -> None:
    assert EMPTY_IMAGE.metadata_version == 1
    image = apply(EMPTY_IMAGE, [MetadataVersionChanged(2), MetadataVersionChanged(2)])  # the same again: no change
    assert image.metadata_version == 2
    assert list(write_records(image)) == [MetadataVersionChanged(2)]
    assert read_rows(list(write_rows(image)), image.offset) == image
    assert list(write_records(EMPTY_IMAGE)) == []


def test_an_image_as_runs_is_a_run_per_topic_and_per_cluster_s_leaders_and_refuses_what_apply_refuses() -> None:
    records: list = [ClusterRegistered(f"c{i}", "r1", f"h:{i}") for i in range(3)]
    for t in range(2):
        records.append(TopicCreated(f"id{t}", f"t{t}", "r1"))
        records += (PartitionsAdded(f"t{t}", i, f"c{i % 3}", f"t{t}", i // 3) for i in range(30))
    records += (PhysicalPartitionsReported("c1", "t0", p, "h:1") for p in range(10))
    image = apply(EMPTY_IMAGE, records)
    runs = write_runs(image)
    shape = [item[:2] if isinstance(item[0], int) else item[0] for item in runs]
    assert shape == [
        [2, "ClusterRegistered"], [10, "PhysicalPartitionsReported"], "ClusterRegistered",  # c0 c1, leaders, c2
        "TopicCreated", [30, "PartitionsAdded"], "TopicCreated", [30, "PartitionsAdded"],
    ]  # fmt: skip
    assert records_of(decode_runs(runs)) == list(write_records(image))
    assert read_runs(runs, image.offset) == image
    assert len(pack(runs)) < len(pack(list(write_rows(image)))) / 2
    bad = [list(item) for item in runs]
    first_run = next(i for i, item in enumerate(bad) if item[1:2] == ["PartitionsAdded"])
    bad[first_run][4] = [0, 1, 2, *range(4, 31)]  # partition ids with one missing
    with pytest.raises(InvalidRecord, match="not the next id"):
        read_runs(bad, 0)
    bad[first_run][4] = ["0", *range(1, 30)]
    with pytest.raises(CodecError):
        read_runs(bad, 0)


_REGISTRATIONS = st.lists(
    st.builds(
        ClusterRegistered,
        st.sampled_from(["c1", "c2", "c3", "gone", "new1", "new2"]),
        st.sampled_from(["r1", "r2"]),
        st.sampled_from(["h:1", "h:2", "127.0.0.1:19092"]),
    ),
    min_size=1,
    max_size=8,
)


@settings(max_examples=300, deadline=None)
@given(_REGISTRATIONS)
@example([ClusterRegistered("c1", "r1", "127.0.0.1:19092"), ClusterRegistered("c3", "r2", "127.0.0.1:39092")])  # as is
@example([ClusterRegistered("c1", "r1", "127.0.0.1:19092"), ClusterRegistered("gone", "r1", "h:9")])  # as is, gone
def test_a_run_of_registrations_applies_like_one_record_at_a_time(run: list[ClusterRegistered]) -> None:
    gone = [ClusterStateChanged("gone", s) for s in ("read_only", "draining", "decommissioned")]
    base = apply(EMPTY_IMAGE, [*ONE_OF_EACH, ClusterRegistered("gone", "r1", "h:9"), *gone])
    try:
        one_by_one: MetadataImage | InvalidRecord = replayed_one_by_one(base, run)
    except InvalidRecord as e:
        one_by_one = e
    try:
        together: MetadataImage | InvalidRecord = apply(base, run)
    except InvalidRecord as e:
        together = e
    if isinstance(one_by_one, InvalidRecord):
        assert str(together) == str(one_by_one)
    else:
        assert together == one_by_one and list(together.clusters) == list(one_by_one.clusters)
        assert read_runs(write_runs(together), together.offset) == together


def test_a_registration_is_checked_against_the_image_it_is_applied_to() -> None:
    # A run that repeats what the image holds is checked against the image's registrations, kept for its
    # cluster map from the second time it is asked about: a map of another image must never be answered
    # from them. Each apply runs twice, so the second one uses what the first kept.
    def twice(image: MetadataImage, records: list[Record]) -> MetadataImage:
        first = apply(image, records)
        assert apply(image, records) == first
        return first

    base = twice(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")])
    again = twice(base, [ClusterRegistered("c1", "r1", "h:1")])
    assert again.clusters is base.clusters and again.offset == base.offset + 1
    moved = twice(base, [ClusterRegistered("c1", "r1", "h:2")])
    assert twice(moved, [ClusterRegistered("c1", "r1", "h:1")]).clusters["c1"].bootstrap_servers == "h:1"
    retired = [ClusterStateChanged("c1", s) for s in ("read_only", "draining", "decommissioned")]
    gone = twice(moved, retired)
    assert twice(moved, [ClusterRegistered("c1", "r1", "h:2")]).clusters is moved.clusters
    for _ in range(2):
        with pytest.raises(InvalidRecord, match="decommissioned"):
            apply(gone, [ClusterRegistered("c1", "r1", "h:2")])
        with pytest.raises(InvalidRecord, match="region"):
            apply(moved, [ClusterRegistered("c1", "r2", "h:2")])


def test_the_registrations_of_a_cluster_map_are_built_when_it_is_asked_about_again() -> None:
    # A run of new clusters changes the map with every command: building its set each time was O(clusters).
    last = LastRegistrations()
    one = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")]).clusters
    two = apply(EMPTY_IMAGE, [ClusterRegistered("c2", "r1", "h:2")]).clusters
    assert last.of(one) is None
    assert last.of(one) == {("c1", "r1", "h:1")}
    assert last.of(two) is None and last.of(one) is None  # only the last map is kept
    assert last.of(one) == {("c1", "r1", "h:1")}


def replayed_one_by_one(image: MetadataImage, records: list[Record]) -> MetadataImage:
    """The reference for the bulk paths: ``apply`` without runs, each record replayed on its own."""
    delta = MetadataDelta(image)
    for record in records:
        delta.replay(record)
    return delta.apply()


_MIXED = st.lists(
    st.sampled_from(
        [
            *(ClusterRegistered(c, "r1", h) for c in ("c1", "c2", "new") for h in ("h:1", "127.0.0.1:19092")),
            ClusterRegistered("c3", "r1", "h:1"),  # c3 is in r2: does not fit
            ClusterStateChanged("c2", "read_only"),
            ClusterFenced("c1", "down", 1),
            TopicCreated("id-u", "u", "r1"),
            *(PartitionsAdded("u", p, c, "u", p) for p in range(3) for c in ("c1", "c2")),
            *(PhysicalPartitionsReported(c, "u", p, "127.0.0.1:1") for p in range(2) for c in ("c1", "c2")),
            PartitionStateChanged("u", 0, "read_only"),
        ]
    ),
    max_size=12,
)


@settings(max_examples=300, deadline=None)
@given(_MIXED)
def test_a_command_applied_from_its_runs_is_applied_as_from_its_records(records: list[Record]) -> None:
    """A follower applies a command of runs without building its records (``apply_runs`` over ``decode_runs``):
    the same image, or the same first error, as ``apply`` of the records and as each record on its own."""
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    items = list(decode_runs(encode_runs(records)[0]))
    outcomes: list[MetadataImage | str] = []
    for applied in (
        lambda: replayed_one_by_one(base, records),
        lambda: apply(base, records),
        lambda: apply_runs(base, items),
    ):
        try:
            outcomes.append(applied())
        except InvalidRecord as e:
            outcomes.append(str(e))
    assert outcomes[1] == outcomes[0] and outcomes[2] == outcomes[0]
    assert apply_runs(base, []) == base


def test_what_replay_keeps_between_images_belongs_to_their_line_not_to_the_process() -> None:
    one = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")])
    other = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")])
    assert one == other and one.replay_memo is not None and one.replay_memo is not other.replay_memo
    assert apply(one, [NoOp()]).replay_memo is one.replay_memo
    assert apply(one, [ClusterRegistered("c2", "r1", "h:2")]).replay_memo is one.replay_memo


def test_a_batch_leaves_no_reference_cycle_for_the_garbage_collector() -> None:
    # A delta and its parts are freed by reference counting as soon as the batch is applied (or refused): with
    # a cycle, each batch's partition lists and placements would wait for a collection, which then walks them.
    base = apply(EMPTY_IMAGE, ONE_OF_EACH)
    batches = [
        ONE_OF_EACH,
        [TopicCreated("x", "X", "r1"), *(PartitionsAdded("X", i, "c2", "X", i) for i in range(5))],
        [PhysicalPartitionsReported("c2", "U_TopicA", 2, "b:1"), ClusterUnfenced("c1", 9)],
        [TopicCreated("x", "X", "r1"), PartitionsAdded("X", 0, "nope", "X", 0)],  # refused
    ]
    gc.collect()
    gc.disable()
    try:
        for records in batches:
            with contextlib.suppress(InvalidRecord):
                apply(EMPTY_IMAGE, records)
                apply(base, records)
        assert gc.collect() == 0
    finally:
        gc.enable()
