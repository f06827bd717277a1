"""Key order in the log: the commands validate and return records, the replay rebuilds the history from them,
and a snapshot's records replay to an equal map.

"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Sequence

import pytest

from metadata_log import commands
from metadata_log import commands as core
from metadata_log.errors import Conflict, InvalidRequest, NotFound
from metadata_log.image import EMPTY_IMAGE, InvalidRecord, MetadataImage, apply
from metadata_log.image.key_order_history import KeyOrderTopic, strict_topic
from metadata_log.image.key_orders import (
    EMPTY_KEY_ORDERS,
    KeyOrders,
    TopicKeyOrder,
    snapshot_records,
    strict_history,
)
from metadata_log.keymap import KEY_SLOTS, NO_PARTITION
from metadata_log.records import (
    KEY_ORDER_RECORD_TYPES,
    ClusterFenced,
    ClusterRegistered,
    KeyOrderEpochStarted,
    KeyOrderRecord,
    KeyOrderSealed,
    KeyRangeMoved,
    KeyRangeReleased,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicDeleted,
    TopicKeyOrderChanged,
)
from metadata_log.views import key_order_view

Records = Sequence[Record | KeyOrderRecord]


def run(image: MetadataImage, records: Records) -> tuple[MetadataImage, KeyOrders]:
    """``records`` applied as one batch: the image after them, and its key-order map."""
    after = apply(image, records)
    return after, after.key_orders


def with_leaders(image: MetadataImage, topic: str) -> MetadataImage:
    """The agents report a leader for every physical partition of ``topic``."""
    return apply(
        image,
        [
            PhysicalPartitionsReported(p.cluster_id, p.physical_topic, p.physical_partition, "127.0.0.1:9092")
            for p in image.topics[topic].partitions
        ],
    )


@pytest.fixture
def region() -> MetadataImage:
    return apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "127.0.0.1:19092"),
            ClusterRegistered("c2", "r1", "127.0.0.1:29092"),
            ClusterRegistered("c3", "r1", "127.0.0.1:39092"),
        ],
    )


@pytest.fixture
def strict(region: MetadataImage) -> tuple[MetadataImage, KeyOrders]:
    """U_TopicA, strict: 2 partitions on each of c1, c2, c3, leaders known."""
    result = commands.create_topic(region, "U_TopicA", "r1", 2, "id-a", key_order="strict")
    image, key_orders = run(region, result.records)
    return with_leaders(image, "U_TopicA"), key_orders


def test_key_order_records_have_only_plain_fields_the_codec_encodes() -> None:
    """The codec encodes str / int / bool fields (and Literals of strings) with no code of its own: joining
    RECORD_TYPES needs no codec change."""
    for cls in KEY_ORDER_RECORD_TYPES:
        for name, hint in typing.get_type_hints(cls).items():
            if name == "TYPE":
                continue
            args = typing.get_args(hint)
            assert hint in (str, int, bool) or (
                typing.get_origin(hint) is typing.Literal and all(isinstance(a, str) for a in args)
            ), f"{cls.__name__}.{name}: {hint}"


def test_a_strict_topic_is_created_with_its_first_epoch_in_the_same_batch(region: MetadataImage) -> None:
    result = commands.create_topic(region, "U_TopicA", "r1", 2, "id-a", key_order="strict")
    types = [type(r).__name__ for r in result.records]
    assert types[:7] == ["TopicCreated"] + ["PartitionsAdded"] * 6
    assert types[7:9] == ["TopicKeyOrderChanged", "KeyOrderEpochStarted"] and set(types[9:]) == {"KeyRangeMoved"}
    assert result.reply["key_order"] == "strict" and result.reply["key_epoch"] == 1
    assert result.reply["key_ranges"][0] == [0, 2731, 0] and result.reply["key_ranges"][-1][1:] == [KEY_SLOTS, 5]
    assert len(result.reply["partitions"]) == 6, "the topic's own reply is kept"
    _, key_orders = run(region, result.records)
    history = strict_history(key_orders, "U_TopicA")
    assert history is not None and history == strict_topic(range(6), "created strict")
    plain = commands.create_topic(region, "B", "r1", 1, "id-b")
    assert plain.records == core.create_topic(region, "B", "r1", 1, "id-b").records
    assert plain.reply["key_order"] == "none"


def test_a_bad_key_order_names_its_field(region: MetadataImage) -> None:
    for bad in ("STRICT", "", None, 1):
        with pytest.raises(InvalidRequest) as e:
            commands.create_topic(region, "t", "r1", 1, "i", key_order=bad)
        assert e.value.field == "key_order"


def test_an_operator_switches_a_topic_to_strict_and_back(region: MetadataImage) -> None:
    image, _ = run(region, core.create_topic(region, "t", "r1", 1, "i").records)
    with pytest.raises(Conflict, match="no writable partition with a leader"):
        commands.change_key_order(image, "t", "strict")
    image = with_leaders(image, "t")
    on = commands.change_key_order(image, "t", "strict")
    assert on.reply["key_order"] == "strict" and on.reply["key_epoch"] == 1
    image, _ = run(image, on.records)
    assert commands.change_key_order(image, "t", "strict").records == ()
    off = commands.change_key_order(image, "t", "none")
    assert off.records == (TopicKeyOrderChanged("t", "none"),) and off.reply == {"name": "t", "key_order": "none"}
    image, _ = run(image, off.records)
    again = commands.change_key_order(image, "t", "strict")
    assert again.reply["key_epoch"] == 2, "a new strict period continues the epochs of the last one"
    with pytest.raises(NotFound):
        commands.change_key_order(image, "nope", "strict")
    with pytest.raises(InvalidRequest):
        commands.change_key_order(image, "t", "sometimes")


def test_a_shrink_starts_the_next_epoch_in_its_own_batch(strict: tuple[MetadataImage, KeyOrders]) -> None:
    image, key_orders = strict
    shrink = core.shrink_partitions(image, "U_TopicA", [4, 5])
    result = commands.with_epochs(image, shrink, "U_TopicA shrunk")
    image, key_orders = run(image, result.records)
    history = strict_history(key_orders, "U_TopicA")
    assert history is not None and history.epoch == 2 and history.map.partitions() == {0, 1, 2, 3}
    assert {m.from_partition for m in history.changes[-1].moves} == {4, 5}
    assert history.changes[-1].cause == "U_TopicA shrunk"


def test_an_expand_joins_the_map_once_its_partitions_have_leaders(strict: tuple[MetadataImage, KeyOrders]) -> None:
    image, key_orders = strict
    image = apply(image, [ClusterRegistered("c4", "r1", "127.0.0.1:49092")])
    added = core.add_partitions(image, "U_TopicA", "c4", 2)
    result = commands.with_epochs(image, added, "expand onto c4")
    assert result.records == added.records, "no leaders yet: producers keep routing to the map they have"
    image, key_orders = run(image, result.records)
    image = with_leaders(image, "U_TopicA")
    planned = commands.plan_epoch(image, "U_TopicA", "expand onto c4")
    image, key_orders = run(image, planned.records)
    history = strict_history(key_orders, "U_TopicA")
    assert history is not None and history.map.partitions() == set(range(8))
    assert {m.to_partition for m in history.changes[-1].moves} == {6, 7}
    assert commands.plan_epoch(image, "U_TopicA", "again").records == ()


def test_the_next_epoch_waits_for_measurable_seals_and_not_for_a_fenced_cluster(
    strict: tuple[MetadataImage, KeyOrders],
) -> None:
    image, _ = strict
    image, _ = run(
        image,
        core.shrink_partitions(image, "U_TopicA", [5]).records,
    )
    assert commands.seals_to_measure(image, "c3") == [("U_TopicA", 2, 5)]
    assert commands.seals_to_measure(image, "c1") == []
    image = apply(image, [PartitionStateChanged("U_TopicA", 4, "read_only")])
    waiting = commands.plan_epoch(image, "U_TopicA", "shrink 4")
    assert waiting.records == () and "partition(s) 5" in waiting.reply["waiting_for_seals"]
    fenced = apply(image, [ClusterFenced("c3", "lease expired", 1)])
    assert commands.plan_epoch(fenced, "U_TopicA", "c3 fenced").records != (), "a fenced seal is abandoned"
    sealed = commands.record_seals(image, "U_TopicA", 2, {5: 40})
    assert sealed.records == (KeyOrderSealed("U_TopicA", 2, 5, 40),) and sealed.reply["pending_seals"] == []
    image, _ = run(image, sealed.records)
    assert commands.record_seals(image, "U_TopicA", 2, {5: 41}).records == (), "a retried report"
    assert commands.plan_epoch(image, "U_TopicA", "shrink 4").records != ()


@pytest.mark.parametrize(
    "epoch, seals, error, field",
    [
        (1, {5: 1}, Conflict, "epoch"),
        (2, {0: 1}, Conflict, "seals.0"),
        (2, {5: -1}, InvalidRequest, "seals.5"),
        (2, {5: True}, InvalidRequest, "seals.5"),
    ],
)
def test_a_bad_seal_report_names_its_field(
    strict: tuple[MetadataImage, KeyOrders], epoch: int, seals: dict[int, int], error: type[Exception], field: str
) -> None:
    image, _ = strict
    image, _ = run(
        image,
        core.shrink_partitions(image, "U_TopicA", [5]).records,
    )
    with pytest.raises(error) as e:
        commands.record_seals(image, "U_TopicA", epoch, seals)
    assert e.value.extra["field"] == field  # type: ignore[attr-defined]


def test_the_coordinator_releases_what_a_group_read_and_gives_up_only_on_what_it_cannot_read(
    strict: tuple[MetadataImage, KeyOrders],
) -> None:
    image, _ = strict
    image, _ = run(
        image,
        core.shrink_partitions(image, "U_TopicA", [4, 5]).records,
    )
    image, _ = run(image, commands.record_seals(image, "U_TopicA", 2, {4: 10}).records)
    assert commands.release_parents(image, "g", "U_TopicA", {4: 9}).records == ()
    released = commands.release_parents(image, "g", "U_TopicA", {4: 10})
    assert released.records == (KeyRangeReleased("g", "U_TopicA", 2, 4, False, ""),) and released.reply["released"] == [
        [2, 4]
    ]
    with pytest.raises(Conflict, match="can be read to its seal") as e:
        commands.give_up(image, "g", "U_TopicA", 2, 5, "waited 60 s")
    assert e.value.extra["field"] == "partition"
    fenced = apply(image, [ClusterFenced("c3", "lease expired", 1)])
    broken = commands.give_up(fenced, "g", "U_TopicA", 2, 5, "waited 60 s; c3 fenced")
    assert broken.records == (KeyRangeReleased("g", "U_TopicA", 2, 5, True, "waited 60 s; c3 fenced"),)
    image, _ = run(fenced, broken.records)
    assert commands.give_up(image, "g", "U_TopicA", 2, 5, "again").records == ()
    with pytest.raises(NotFound):
        commands.give_up(image, "g", "U_TopicA", 2, 1, "not a parent")
    with pytest.raises(InvalidRequest):
        commands.release_parents(image, "bad group!", "U_TopicA", {})
    removed = apply(image, [PartitionStateChanged("U_TopicA", 4, "removed")])
    assert commands.release_parents(removed, "h", "U_TopicA", {}).reply["released"] == [[2, 4]]


def test_commands_on_a_topic_that_is_not_strict_are_refused(region: MetadataImage) -> None:
    image, _ = run(region, core.create_topic(region, "t", "r1", 1, "i").records)
    with pytest.raises(Conflict, match="not strict"):
        commands.plan_epoch(image, "t", "x")
    with pytest.raises(NotFound):
        commands.record_seals(image, "nope", 1, {})


# -- replay ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "records, error",
    [
        ([KeyOrderEpochStarted("U_TopicA", 3, 1, "")], "does not follow epoch 1"),
        ([KeyOrderEpochStarted("U_TopicA", 2, 0, "")], "1 to 16384 ranges"),
        ([KeyRangeMoved("U_TopicA", 2, 0, 5, 0, 1)], "comes without its epoch"),
        ([KeyOrderEpochStarted("U_TopicA", 2, 2, ""), KeyRangeMoved("U_TopicA", 2, 0, 5, 0, 1)], "announced 2 ranges"),
        ([KeyOrderEpochStarted("U_TopicA", 2, 1, ""), KeyRangeMoved("U_TopicA", 2, 0, 5, 0, 9)], "not a partition"),
        ([KeyOrderEpochStarted("U_TopicA", 2, 1, ""), KeyRangeMoved("U_TopicA", 2, 0, 5, 3, 1)], "not all owned"),
        ([TopicKeyOrderChanged("U_TopicA", "strict")], "already strict"),
        ([TopicKeyOrderChanged("nope", "strict")], "does not exist"),
        ([KeyOrderSealed("U_TopicA", 1, 0, 5)], "nothing to seal"),
        ([KeyRangeReleased("g", "U_TopicA", 1, 0, True, "")], "moved nothing away"),
    ],
)
def test_records_that_do_not_fit_the_history_are_refused(
    strict: tuple[MetadataImage, KeyOrders], records: list[KeyOrderRecord], error: str
) -> None:
    image, _ = strict
    with pytest.raises(InvalidRecord, match=error):
        run(image, records)


def test_a_deleted_topic_forgets_its_key_order(strict: tuple[MetadataImage, KeyOrders], region: MetadataImage) -> None:
    image, key_orders = strict
    image, key_orders = run(image, [TopicDeleted("U_TopicA")])
    assert key_orders == {}
    image, key_orders = run(image, core.create_topic(image, "U_TopicA", "r1", 1, "id-2").records)
    assert key_order_view(key_orders, "U_TopicA") == {"key_order": "none"}


def test_a_snapshot_replays_to_an_equal_key_order_map(strict: tuple[MetadataImage, KeyOrders]) -> None:
    image, key_orders = strict
    steps = [
        lambda i: core.shrink_partitions(i, "U_TopicA", [5]).records,
        lambda i: commands.record_seals(i, "U_TopicA", 2, {5: 17}).records,
        lambda i: commands.release_parents(i, "g1", "U_TopicA", {5: 17}).records,
        lambda i: core.shrink_partitions(i, "U_TopicA", [4]).records,
        lambda i: commands.give_up(apply(i, [ClusterFenced("c3", "x", 1)]), "g2", "U_TopicA", 3, 4, "c3").records,
    ]
    for step in steps:
        image, key_orders = run(image, step(image))
    image, key_orders = run(image, core.create_topic(image, "B", "r1", 1, "id-b").records)
    image = with_leaders(image, "B")
    for switch in ("strict", "none"):
        image, key_orders = run(image, commands.change_key_order(image, "B", switch).records)
    history = strict_history(key_orders, "U_TopicA")
    assert history is not None and history.epoch == 3 and len(history.releases) == 2
    assert key_orders["B"].key_order == "none" and key_orders["B"].last_epoch == 1
    without = dataclasses.replace(image, key_orders=EMPTY_KEY_ORDERS)
    _, replayed = run(without, list(snapshot_records(key_orders)))
    assert replayed == key_orders


def test_the_metadata_view_shows_the_map_the_seals_and_the_releases(strict: tuple[MetadataImage, KeyOrders]) -> None:
    image, key_orders = strict
    image, key_orders = run(
        image,
        core.shrink_partitions(image, "U_TopicA", [5]).records,
    )
    view = key_order_view(key_orders, "U_TopicA")
    assert view["key_order"] == "strict" and view["key_epoch"] == 2 and view["key_epoch_cause"] == "U_TopicA shrunk"
    assert view["pending_seals"] == [5] and view["seals"] == [] and view["releases"] == []
    assert sum(end - first for first, end, _ in view["key_ranges"]) == KEY_SLOTS
    assert {p for _, _, p in view["key_ranges"]} == {0, 1, 2, 3, 4}


def test_a_topic_strict_before_has_its_epochs_continue(region: MetadataImage) -> None:
    value = TopicKeyOrder("none", strict_topic([0], epoch=4))
    assert value.last_epoch == 4 and TopicKeyOrder("none", None).last_epoch == 0
    assert isinstance(value.history, KeyOrderTopic) and value.history.changes[0].moves[0].from_partition == NO_PARTITION


@pytest.mark.parametrize(
    "change, gone",
    [
        (lambda i: core.decommission_cluster(i, "c3"), {4, 5}),
        (lambda i: core.change_cluster_state(i, "c2", "read_only"), {2, 3}),
        (lambda i: core.change_partition_state(i, "U_TopicA", 0, "read_only"), {0}),
        (lambda i: core.fence_cluster(i, "c1", "lease expired", 1), {0, 1}),
    ],
)
def test_every_planned_change_and_a_fence_start_an_epoch_in_their_batch(
    strict: tuple[MetadataImage, KeyOrders], change: typing.Any, gone: set[int]
) -> None:
    image, key_orders = strict
    result = commands.with_epochs(image, change(image), "change")
    image, key_orders = run(image, result.records)
    history = strict_history(key_orders, "U_TopicA")
    assert history is not None and history.epoch == 2
    assert history.map.partitions() == set(range(6)) - gone
    assert {m.from_partition for m in history.changes[-1].moves} == gone
