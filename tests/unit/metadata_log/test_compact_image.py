"""The compact image (``image/partitions.py``) against the reference image: a topic's partitions as a plain list
of ``PartitionImage`` and a cluster's leaders as a plain dict, replayed here from one record per partition as
the image was before range records. On random histories of range records (metadata version 4), the compact
image equals the reference, refuses what the reference refuses, and equals the image the same history gives
written the old way (one record per partition), with the same error; its snapshots in both layouts read back
to it. Each planted bug at the end must make the property fail."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_log.codec import pack, unpack
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, PartitionImage, apply
from metadata_log.image import partitions as compact
from metadata_log.image.topics import PARTITION_TRANSITIONS
from metadata_log.records import (
    LATEST_METADATA_VERSION,
    ClusterRegistered,
    MetadataVersionChanged,
    PartitionRangeAdded,
    PartitionRangeStateChanged,
    PartitionsAdded,
    PartitionState,
    PartitionStateChanged,
    PhysicalLeadersReported,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
    TopicDeleted,
)
from metadata_log.snapshot import read_rows, read_runs, write_rows, write_runs
from tests.unit.planted import FIND_BUG

CLUSTERS = {"c0": "r1", "c1": "r1", "c2": "r1", "c9": "r2"}
TOPICS = ("t0", "t1")
BROKERS = ("h:1", "h:2", "h:3")
SETUP: list[Record] = [
    MetadataVersionChanged(LATEST_METADATA_VERSION),
    *(ClusterRegistered(c, region, f"{c}:9092") for c, region in CLUSTERS.items()),
    *(TopicCreated(f"id-{t}", t, "r1") for t in TOPICS),
]


def one_by_one(record: Record) -> list[Record]:
    """A range record as the records of one partition each that say the same (the log before version 4)."""
    if isinstance(record, PartitionRangeAdded):
        return [
            PartitionsAdded(
                record.topic,
                record.first_partition + i,
                record.cluster_id,
                record.physical_topic,
                record.first_physical_partition + i,
            )
            for i in range(record.count)
        ]
    if isinstance(record, PartitionRangeStateChanged):
        return [
            PartitionStateChanged(record.topic, record.first_partition + i, record.state) for i in range(record.count)
        ]
    if isinstance(record, PhysicalLeadersReported):
        pairs = zip(record.ranges[::2], record.ranges[1::2], strict=True)
        partitions = [p for first, count in pairs for p in range(first, first + count)]
        return [
            PhysicalPartitionsReported(
                record.cluster_id, record.physical_topic, p, record.brokers[i] if i >= 0 else None
            )
            for p, i in zip(partitions, record.leaders, strict=True)
        ]
    return [record]


class Reference:
    """The image's topics and leaders as they were kept before: a list of tuples, a dict. Only what compaction
    changed is modelled; ``apply`` raises ``InvalidRecord`` where the image must refuse."""

    def __init__(self) -> None:
        self.topics: dict[str, list[PartitionImage]] = {t: [] for t in TOPICS}
        self.leaders: dict[str, dict[tuple[str, int], str]] = {c: {} for c in CLUSTERS}

    def apply(self, records: Sequence[Record]) -> None:
        topics = {name: list(parts) for name, parts in self.topics.items()}
        leaders = {c: dict(m) for c, m in self.leaders.items()}
        for record in (row for r in records for row in one_by_one(r)):
            if isinstance(record, PartitionsAdded):
                parts = topics.get(record.topic)
                used = {(p.cluster_id, p.physical_topic, p.physical_partition) for p in parts or ()}
                if (
                    parts is None
                    or CLUSTERS[record.cluster_id] != "r1"
                    or record.partition != len(parts)
                    or record.physical_partition < 0
                    or (record.cluster_id, record.physical_topic, record.physical_partition) in used
                ):
                    raise InvalidRecord("the reference refuses it")
                parts.append(
                    PartitionImage(
                        record.partition, record.cluster_id, record.physical_topic, record.physical_partition
                    )
                )
            elif isinstance(record, PartitionStateChanged):
                parts = topics.get(record.topic)
                if parts is None or not 0 <= record.partition < len(parts):
                    raise InvalidRecord("the reference refuses it")
                current = parts[record.partition]
                if record.state not in PARTITION_TRANSITIONS[current.state]:
                    raise InvalidRecord("the reference refuses it")
                parts[record.partition] = current._replace(state=record.state)
            elif isinstance(record, PhysicalPartitionsReported):
                key = (record.physical_topic, record.physical_partition)
                if record.leader is None:
                    leaders[record.cluster_id].pop(key, None)
                else:
                    leaders[record.cluster_id][key] = record.leader
            elif isinstance(record, TopicDeleted):
                topics.pop(record.name)
            elif isinstance(record, TopicCreated):
                topics[record.name] = []
        self.topics, self.leaders = topics, leaders

    def check(self, image: MetadataImage) -> None:
        assert {name: list(t.partitions) for name, t in image.topics.items()} == self.topics
        assert {c: dict(cluster.leaders.items()) for c, cluster in image.clusters.items()} == self.leaders
        for name, t in image.topics.items():  # equal as sequences, item by item and by length
            assert t.partitions == self.topics[name] and len(t.partitions) == len(self.topics[name])
        for c, cluster in image.clusters.items():
            assert cluster.leaders == self.leaders[c] and len(cluster.leaders) == len(self.leaders[c])


@st.composite
def batches(draw: st.DrawFn, counts: dict[str, int]) -> list[Record]:
    """One batch of range records (mostly ones that fit the image as ``counts`` says it is, some not)."""
    kind = draw(st.sampled_from(["add", "add", "add", "state", "state", "leaders", "leaders", "recreate"]))
    topic = draw(st.sampled_from(TOPICS))
    n = counts.get(topic, 0)
    if kind == "add":
        first = n if draw(st.integers(0, 9)) else draw(st.integers(0, n + 2))
        cluster = draw(st.sampled_from(sorted(CLUSTERS)))
        physical = draw(st.sampled_from([topic, "shared"]))
        return [
            PartitionRangeAdded(topic, first, draw(st.integers(1, 6)), cluster, physical, draw(st.integers(-1, 12)))
        ]
    if kind == "state":
        first = draw(st.integers(0, max(0, n)))
        count = draw(st.integers(1, max(1, n - first + 1)))
        state: PartitionState = draw(st.sampled_from(["read_only", "writable", "removed"]))
        return [PartitionRangeStateChanged(topic, first, count, state)]
    if kind == "leaders":
        physical = draw(st.sampled_from([*TOPICS, "shared"]))
        pairs = draw(st.lists(st.tuples(st.integers(0, 15), st.integers(1, 4)), min_size=1, max_size=4))
        n = sum(count for _first, count in pairs)
        leaders = draw(st.lists(st.integers(-1, len(BROKERS) - 1), min_size=n, max_size=n))
        cluster = draw(st.sampled_from(sorted(CLUSTERS)))
        ranges = tuple(v for pair in pairs for v in pair)
        brokers = tuple(draw(st.permutations(BROKERS)))  # mostly not in the order of the cluster's table
        return [PhysicalLeadersReported(cluster, physical, brokers, ranges, tuple(leaders))]
    return [TopicDeleted(topic), TopicCreated(f"id-{topic}-again", topic, "r1")]


def check_history(data: st.DataObject) -> None:
    image = old = apply(EMPTY_IMAGE, SETUP)
    reference = Reference()
    for _ in range(data.draw(st.integers(1, 14), label="steps")):
        batch = data.draw(batches({name: len(t.partitions) for name, t in image.topics.items()}))
        rows = [row for r in batch for row in one_by_one(r)]
        try:
            after = apply(image, batch)
        except InvalidRecord as e:
            with pytest.raises(InvalidRecord) as refused:  # the old records say the same, and are refused alike
                apply(old, rows)
            assert str(refused.value) == str(e)
            with pytest.raises(InvalidRecord):
                reference.apply(batch)
            continue
        try:
            reference.apply(batch)
        except InvalidRecord:
            raise AssertionError(f"the image took what the reference refuses: {batch}") from None
        image, old = after, apply(old, rows)
        reference.check(image)
        assert dataclasses.replace(old, offset=image.offset) == image  # the same image, at more offsets
    # a snapshot in range records (version 4), and one per partition (as version 3 wrote it), read back equal
    assert read_runs(unpack(pack(write_runs(image))), image.offset) == image
    older = dataclasses.replace(image, metadata_version=3)
    assert read_rows(unpack(pack(list(write_rows(older)))), image.offset) == older


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_compact_image_equals_the_reference_on_random_histories(data: st.DataObject) -> None:
    check_history(data)


def test_a_topic_placed_over_four_clusters_is_four_runs_and_its_leaders_two_bytes_each() -> None:
    image = apply(EMPTY_IMAGE, SETUP)
    records: list[Record] = [PartitionRangeAdded("t0", i * 2500, 2500, f"c{i}", "t0", 0) for i in range(3)]
    records += [PhysicalLeadersReported("c0", "t0", BROKERS, (0, 2500), tuple(i % 3 for i in range(2500)))]
    image = apply(image, records)
    parts = image.topics["t0"].partitions
    assert (len(parts), len(parts.runs), parts.states) == (7500, 3, None)
    assert parts[2500] == PartitionImage(2500, "c1", "t0", 0) and parts[-1] == PartitionImage(7499, "c2", "t0", 2499)
    leaders = image.clusters["c0"].leaders
    assert [a.itemsize * len(a) for _, a in leaders.indexes()] == [5000]
    assert leaders[("t0", 4)] == "h:2" and ("t0", 2500) not in leaders and len(leaders) == 2500


def test_a_range_record_that_names_a_partition_past_the_limit_is_refused() -> None:
    image = apply(EMPTY_IMAGE, SETUP)
    too_far = compact.MAX_PHYSICAL_PARTITION + 1
    with pytest.raises(InvalidRecord, match="above"):
        apply(image, [PhysicalLeadersReported("c0", "t0", BROKERS, (too_far, 1), (0,))])
    with pytest.raises(InvalidRecord, match="physical_partition must be <="):
        apply(image, [PartitionRangeAdded("t0", 0, 2, "c0", "t0", too_far - 1)])
    with pytest.raises(InvalidRecord, match="outside the 3 brokers"):
        apply(image, [PhysicalLeadersReported("c0", "t0", BROKERS, (1, 1), (3,))])
    with pytest.raises(InvalidRecord, match="ranges must be"):
        apply(image, [PhysicalLeadersReported("c0", "t0", BROKERS, (1,), (0,))])
    with pytest.raises(InvalidRecord, match="cover 2 partitions"):
        apply(image, [PhysicalLeadersReported("c0", "t0", BROKERS, (1, 2), (0,))])


# -- the property can fail: one planted bug each ------------------------------------------------------


def _finds_the_bug() -> None:
    @FIND_BUG
    @given(st.data())
    def history(data: st.DataObject) -> None:
        check_history(data)

    with pytest.raises(AssertionError):
        history()


def test_the_property_finds_a_second_partition_on_a_used_physical_partition(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compact.PartitionsBuilder, "overlap", lambda self, *args: None)
    _finds_the_bug()


def test_the_property_finds_runs_merged_across_physical_topics(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = compact.PartitionsBuilder.append

    def append(self: compact.PartitionsBuilder, cluster_id: str, physical_topic: str, first: int, count: int) -> None:
        runs = self._runs
        if runs and runs[-1].cluster_id == cluster_id and runs[-1].first + runs[-1].size == first:
            physical_topic = runs[-1].physical_topic  # the bug: the physical topic is not compared
        honest(self, cluster_id, physical_topic, first, count)

    monkeypatch.setattr(compact.PartitionsBuilder, "append", append)
    _finds_the_bug()


def test_the_property_finds_a_leader_lost_when_a_topic_is_trimmed(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = compact.LeadersBuilder.freeze

    def freeze(self: compact.LeadersBuilder) -> compact.Leaders:
        for name, slots in list(self._topics.items()):
            if len(slots) > 1 and name in self._copied:
                self._topics[name] = slots[:-1]  # the bug: the last partition's leader is dropped
        return honest(self)

    monkeypatch.setattr(compact.LeadersBuilder, "freeze", freeze)
    _finds_the_bug()


def test_the_property_finds_a_state_range_applied_one_short(monkeypatch: pytest.MonkeyPatch) -> None:
    honest = compact.PartitionsBuilder.set_states
    monkeypatch.setattr(
        compact.PartitionsBuilder,
        "set_states",
        lambda self, start, count, code: honest(self, start, max(1, count - 1), code),
    )
    _finds_the_bug()


def test_a_clusters_address_table_keeps_only_the_addresses_in_use_once_past_half_its_size() -> None:
    churned = compact.LeadersBuilder(compact.EMPTY_LEADERS)
    for i in range(20_000):  # one partition whose leader moved through 20,000 addresses
        churned.set("t", (0,), (f"10.0.{i // 250}.{i % 250}:9092",))
    before = churned.freeze()
    assert len(before.brokers) == 20_000 and dict(before.items()) == {("t", 0): "10.0.79.249:9092"}
    again = compact.LeadersBuilder(before)
    again.set("t", (1,), ("10.9.9.9:9092",))
    after = again.freeze()
    assert after.brokers == ("10.0.79.249:9092", "10.9.9.9:9092")
    assert dict(after.items()) == {("t", 0): "10.0.79.249:9092", ("t", 1): "10.9.9.9:9092"}
    overflowing = compact.LeadersBuilder(compact.EMPTY_LEADERS)
    with pytest.raises(InvalidRecord, match="distinct leaders"):
        for i in range(40_000):
            overflowing.set("t", (0,), (f"10.1.{i // 250}.{i % 250}:9092",))


@pytest.mark.parametrize("brokers", [0, 1, 3, 254, 255, 256, 300])
def test_a_leader_index_is_taken_exactly_when_it_is_minus_one_or_below_the_brokers_reported(brokers: int) -> None:
    """The check on the array's bytes (up to 255 brokers) agrees with comparing each index, at every edge."""
    edges = [-32769, -32768, -257, -256, -255, -2, -1, 0, 1, 2, 3, 126, 127, 128, 253, 254, 255, 256, 257, 299,
             300, 511, 32767, 32768]  # fmt: skip
    for index in edges:
        for leaders in ([index], [0, index, -1] if brokers else [index, -1], [-1] * 5 + [index]):
            expected = all(-1 <= i < brokers for i in leaders)
            pairs = (0, len(leaders))
            if expected:
                assert compact.checked_leader_report("t", brokers, pairs, leaders)[0] == [(0, len(leaders))]
            else:
                with pytest.raises(InvalidRecord, match="outside"):
                    compact.checked_leader_report("t", brokers, pairs, leaders)
