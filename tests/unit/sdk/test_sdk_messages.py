"""The SDK's message labels and commit bookkeeping, without Kafka (confluent-kafka's test constructors).

Most tests run twice: with labels written in place (the C module, as installed here) and with the wrapper
the SDK falls back to when the module is missing or does not fit confluent-kafka's ``Message``."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_INVALID, KafkaError, Message, TopicPartition

from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.records import ClusterRegistered, PartitionsAdded, TopicCreated
from sdk import messages
from sdk.consumer import handed_out
from sdk.messages import (
    FederatedMessage,
    Origin,
    PartitionLocation,
    Slots,
    origin_in,
    place_batch,
    placement_in,
    set_slot,
)

A0 = Origin("U_TopicA", 0, "c1")
A5 = Origin("U_TopicA", 5, "c1")
SLOTS: Slots = {"U_TopicA": [A0, A5]}  # physical U_TopicA/0 is logical partition 0, physical /1 is logical 5


def msg(partition: int, offset: int, topic: str = "U_TopicA", **kw: object) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=f"{partition}@{offset}".encode(), **kw)


@pytest.fixture(params=["in place", "wrapped"])
def mode(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    if request.param == "wrapped":
        monkeypatch.setattr(messages, "_labels", None)
    yield request.param


def read(batch: list[Message]) -> list[tuple[str | None, int | None, int | None, bytes | None]]:
    return [(m.topic(), m.partition(), m.offset(), m.value()) for m in batch]


def test_messages_are_relabelled_in_place_with_the_installed_confluent_kafka() -> None:
    # the fallback works, but a read loop costs a third more: an upgrade that breaks the layout check shows here
    assert messages.IN_PLACE, "sdk._speedups is missing or does not fit confluent_kafka.Message (see the warning)"


def test_a_batch_is_labelled_in_order_with_the_logical_partition_of_each(mode: str) -> None:
    batch = [msg(0, 10), msg(0, 11), msg(1, 3), msg(0, 12), msg(1, 4)]
    out = place_batch(batch, SLOTS)
    assert read(out) == [
        ("U_TopicA", 0, 10, b"0@10"),
        ("U_TopicA", 0, 11, b"0@11"),
        ("U_TopicA", 5, 3, b"1@3"),
        ("U_TopicA", 0, 12, b"0@12"),
        ("U_TopicA", 5, 4, b"1@4"),
    ]
    if mode == "in place":
        assert out is batch and all(type(m) is Message for m in out)  # the very objects, no copy
    else:
        assert all(isinstance(m, FederatedMessage) for m in out)


def test_messages_of_partitions_no_longer_owned_are_dropped_and_the_rest_kept_in_order(mode: str) -> None:
    slots: Slots = {"U_TopicA": [A0, A5, None]}
    batch = [msg(0, 10), msg(2, 7), msg(1, 3), msg(0, 11), msg(0, 5, topic="other"), msg(9, 1)]
    assert [(m.partition(), m.offset()) for m in place_batch(batch, slots)] == [(0, 10), (5, 3), (0, 11)]


def test_partition_eof_is_dropped_other_events_of_owned_partitions_are_handed_out(mode: str) -> None:
    eof = Message(topic="U_TopicA", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))
    failed = Message(topic="U_TopicA", partition=1, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    client_level = Message(error=KafkaError(KafkaError._TRANSPORT))  # no partition: nothing to map it to
    out = place_batch([msg(0, 1), eof, failed, client_level, msg(1, 2)], SLOTS)
    assert [(m.partition(), m.error().code() if m.error() else None) for m in out] == [
        (0, None),
        (5, KafkaError.TOPIC_AUTHORIZATION_FAILED),
        (5, None),
    ]


def test_an_empty_batch_gives_nothing(mode: str) -> None:
    assert place_batch([], SLOTS) == []


def test_a_batch_with_messages_to_drop_comes_back_as_a_new_list(mode: str) -> None:
    batch = [msg(0, 10), msg(1, 3), msg(2, 7)]  # physical partition 2 is not owned
    out = place_batch(batch, SLOTS)
    assert out is not batch and len(batch) == 3 and [m.partition() for m in out] == [0, 5]
    assert (batch[2].topic(), batch[2].partition()) == ("U_TopicA", 2)  # the dropped one keeps its labels


def test_a_single_message_is_labelled_whatever_its_error(mode: str) -> None:
    failed = Message(topic="phys", partition=3, offset=4, error=KafkaError(KafkaError._MSG_TIMED_OUT))
    out = messages.label(failed, A5)
    assert (out.topic(), out.partition(), out.offset(), out.error().code()) == ("U_TopicA", 5, 4, -192)
    assert (out is failed) == (mode == "in place")


def test_a_delivery_report_labels_a_delivered_message_and_passes_a_failed_one_on_as_it_is(mode: str) -> None:
    delivered: list[tuple[object, Message]] = []
    failed: list[tuple[object, Message]] = []
    report = messages.reporter(lambda err, m: delivered.append((err, m)), A5, lambda err, m: failed.append((err, m)))
    ok, timed_out = Message(topic="phys", partition=1, offset=7), Message(topic="phys", partition=1)
    error = KafkaError(KafkaError._MSG_TIMED_OUT)
    report(None, ok)
    report(error, timed_out)
    assert [(err, m.topic(), m.partition(), m.offset()) for err, m in delivered] == [(None, "U_TopicA", 5, 7)]
    assert failed == [(error, timed_out)] and (timed_out.topic(), timed_out.partition()) == ("phys", 1)
    silent = messages.reporter(None, A5, lambda err, m: failed.append((err, m)))
    silent(None, Message(topic="phys", partition=1, offset=8))  # no callback: nothing to call
    assert len(delivered) == 1 and len(failed) == 1


def test_labels_keep_reference_counts_exact() -> None:
    if not messages.IN_PLACE:
        pytest.skip("the C module is not in use")
    physical, logical = "-".join(("phys", "t")), "-".join(("logical", "t"))  # run-time strings are counted
    origin = Origin(logical, 1, "c1")
    batch = [Message(topic=physical, partition=0, offset=n) for n in range(100)]
    physical_refs, logical_refs = sys.getrefcount(physical), sys.getrefcount(logical)
    assert place_batch(batch, {physical: [origin]}) is batch
    assert (sys.getrefcount(physical), sys.getrefcount(logical)) == (physical_refs - 100, logical_refs + 100)
    del batch
    assert (sys.getrefcount(physical), sys.getrefcount(logical)) == (physical_refs - 100, logical_refs)


def test_delivery_reports_keep_reference_counts_exact() -> None:
    if not messages.IN_PLACE:
        pytest.skip("the C module is not in use")
    logical = "-".join(("logical", "t"))  # made at run time: counted
    origin = Origin(logical, 1, "c1")
    delivered = [0]

    def count(err: object, m: Message) -> None:  # keeps nothing
        delivered[0] += 1

    report = messages.reporter(count, origin, count)
    msg = Message(topic="phys", partition=0, offset=1)
    report(None, msg)  # the message now holds the logical topic
    before = sys.getrefcount(logical), sys.getrefcount(msg), sys.getrefcount(origin)
    for _ in range(1_000):
        report(None, msg)
    assert delivered == [1_001] and (sys.getrefcount(logical), sys.getrefcount(msg), sys.getrefcount(origin)) == before


def test_the_c_module_refuses_what_it_cannot_label_and_changes_nothing() -> None:
    relabel = messages._labels
    if relabel is None:
        pytest.skip("the C module is not in use")
    with pytest.raises(ValueError, match="do not fit"):
        relabel.configure(Message, 0, 64, 56)  # inside the object header
    with pytest.raises(ValueError, match="do not fit"):
        relabel.configure(Message, 16, 18, 56)  # overlapping
    with pytest.raises(ValueError, match="do not fit"):
        relabel.configure(Message, 16, 64, 1 << 20)  # past the object
    with pytest.raises(ValueError, match="do not fit"):
        relabel.configure(Message, (1 << 63) - 8, 64, 56)  # so far past that offset + size overflows
    with pytest.raises(TypeError, match="expected a"):
        relabel.relabel(object(), A0)
    with pytest.raises(TypeError, match="an origin is a tuple"):
        relabel.relabel(msg(0, 1), ("U_TopicA", "0"))
    with pytest.raises(ValueError, match="out of range"):
        relabel.relabel(msg(0, 1), ("U_TopicA", -1))
    with pytest.raises(TypeError, match="must be a list"):
        relabel.relabel_batch([msg(0, 1)], {"U_TopicA": (A0,)})
    with pytest.raises(TypeError, match="must be callable"):
        relabel.Reporter(print, A0, None)
    with pytest.raises(TypeError, match="called as"):
        relabel.Reporter(print, A0, print)(None)
    batch = [msg(0, 1), "not a message"]
    assert relabel.relabel_batch(batch, SLOTS) is False and batch[0].partition() == 0
    assert place_batch([msg(0, 1)], SLOTS)[0].partition() == 0  # still configured as it was


def test_a_wrapped_message_reads_like_a_confluent_one() -> None:
    m = FederatedMessage((Message(topic="U_TopicA", partition=1, offset=9, key=b"k", value=b"abc"), A5))
    assert (m.topic(), m.partition(), m.offset(), m.key(), m.value(), len(m), m.error()) == (
        "U_TopicA",
        5,
        9,
        b"k",
        b"abc",
        3,
        None,
    )
    assert repr(m) == "FederatedMessage(U_TopicA/5@9)"


def test_an_unsent_message_keeps_its_value_and_headers_and_has_no_partition_or_offset() -> None:
    m = messages.unsent("U_TopicA", b"v", [("h", b"1")])
    assert (m.topic(), m.partition(), m.offset(), m.value(), m.headers(), m.key()) == (
        "U_TopicA",
        None,
        None,
        b"v",
        [("h", b"1")],
        None,
    )
    assert (m.timestamp(), m.error(), len(m), m.leader_epoch(), m.latency()) == ((0, 0), None, 1, None, None)


def test_slots_grow_to_the_partition_owned_and_forget_a_topic_with_none_owned() -> None:
    slots: Slots = {}
    set_slot(slots, "t", 2, A5)
    assert slots == {"t": [None, None, A5]}
    assert (origin_in(slots, "t", 2), origin_in(slots, "t", 0), origin_in(slots, "t", 3)) == (A5, None, None)
    assert (origin_in(slots, "u", 0), origin_in(slots, None, 0), origin_in(slots, "t", None)) == (None, None, None)
    set_slot(slots, "t", 0, A0)
    set_slot(slots, "t", 2, None)
    assert slots == {"t": [A0, None, None]}
    set_slot(slots, "t", 0, None)
    assert slots == {}


def test_the_placement_of_a_message_is_where_its_logical_partition_lives() -> None:
    image = apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "r1", "h:1"),
            TopicCreated("i", "t", "r1"),
            PartitionsAdded("t", 0, "c1", "phys-t", 4),
        ],
    )
    assert placement_in(image, Message(topic="t", partition=0, offset=1)) == PartitionLocation("c1", "phys-t", 4)
    assert placement_in(image, Message(topic="t", partition=1)) is None
    assert placement_in(image, Message(topic="u", partition=0)) is None
    assert placement_in(image, messages.unsent("t", b"v", None)) is None


def test_only_positions_of_partitions_that_returned_messages_are_committed() -> None:
    # librdkafka's position: the offset after the last message consume() returned, or a logical (negative)
    # offset when none was returned since the partition was assigned
    positions = [
        TopicPartition("U_TopicA", 0, 12),
        TopicPartition("U_TopicA", 1, OFFSET_INVALID),
        TopicPartition("U_TopicA", 2, 0),
    ]
    assert [(tp.partition, tp.offset) for tp in handed_out(positions)] == [(0, 12), (2, 0)]
