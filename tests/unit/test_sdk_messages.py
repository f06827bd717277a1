"""The SDK's message wrapping and commit bookkeeping, without Kafka (confluent-kafka's test constructors)."""

from __future__ import annotations

from confluent_kafka import OFFSET_INVALID, KafkaError, Message, TopicPartition

from sdk.consumer import handed_out
from sdk.messages import FederatedMessage, Origin, wrap_batch

A0 = Origin("U_TopicA", 0, "c1")
A5 = Origin("U_TopicA", 5, "c1")
ORIGINS = {("U_TopicA", 0): A0, ("U_TopicA", 1): A5}


def msg(partition: int, offset: int, topic: str = "U_TopicA", **kw: object) -> Message:
    return Message(topic=topic, partition=partition, offset=offset, value=f"{partition}@{offset}".encode(), **kw)


def test_a_batch_of_messages_is_wrapped_in_order_with_the_logical_partition_of_each() -> None:
    batch = [msg(0, 10), msg(0, 11), msg(1, 3), msg(0, 12), msg(1, 4)]
    out = wrap_batch(batch, ORIGINS)
    assert [(m.topic(), m.partition(), m.offset(), m.value()) for m in out] == [
        ("U_TopicA", 0, 10, b"0@10"),
        ("U_TopicA", 0, 11, b"0@11"),
        ("U_TopicA", 5, 3, b"1@3"),
        ("U_TopicA", 0, 12, b"0@12"),
        ("U_TopicA", 5, 4, b"1@4"),
    ]
    assert [(m.physical_topic(), m.physical_partition(), m.cluster_id()) for m in out[2:3]] == [("U_TopicA", 1, "c1")]
    assert all(m.origin() is ORIGINS[(m.physical_topic(), m.physical_partition())] for m in out)


def test_messages_of_partitions_no_longer_owned_are_dropped_and_the_rest_kept_in_order() -> None:
    batch = [msg(0, 10), msg(2, 7), msg(1, 3), msg(0, 11), msg(0, 5, topic="other")]
    out = wrap_batch(batch, ORIGINS)
    assert [(m.partition(), m.offset()) for m in out] == [(0, 10), (5, 3), (0, 11)]


def test_partition_eof_is_dropped_other_events_of_owned_partitions_are_handed_out() -> None:
    eof = Message(topic="U_TopicA", partition=0, error=KafkaError(KafkaError._PARTITION_EOF))
    failed = Message(topic="U_TopicA", partition=1, error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    client_level = Message(error=KafkaError(KafkaError._TRANSPORT))  # no partition: nothing to map it to
    out = wrap_batch([msg(0, 1), eof, failed, client_level, msg(1, 2)], ORIGINS)
    assert [(m.partition(), m.error().code() if m.error() else None) for m in out] == [
        (0, None),
        (5, KafkaError.TOPIC_AUTHORIZATION_FAILED),
        (5, None),
    ]


def test_an_empty_batch_gives_nothing() -> None:
    out = wrap_batch([], ORIGINS)
    assert (len(out), list(out), bool(out)) == (0, [], False)


def test_a_batch_reads_like_a_read_only_list_wrapping_each_message_as_it_is_read() -> None:
    out = wrap_batch([msg(0, 10), msg(1, 3), msg(0, 11)], ORIGINS)
    assert (out[0].partition(), out[0].offset(), out[-1].offset(), out[1].partition()) == (0, 10, 11, 5)
    assert [(m.partition(), m.offset()) for m in out[1:]] == [(5, 3), (0, 11)]
    assert out[0] == out[0] and out[0] is not out[0]  # a new wrapper per read, of the same message
    assert [m.offset() for m in reversed(out)] == [11, 3, 10] and out.index(out[1]) == 1
    more = wrap_batch([msg(1, 4)], ORIGINS)
    joined = out + more
    assert [(m.partition(), m.offset()) for m in joined] == [(0, 10), (5, 3), (0, 11), (5, 4)]
    assert len(out) == 3 and len(more) == 1  # both unchanged
    assert (wrap_batch([], ORIGINS) + more) is more


def test_a_federated_message_reads_like_a_confluent_one() -> None:
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
    assert repr(m) == "FederatedMessage(U_TopicA/5@9 on c1)"


def test_an_unsent_message_keeps_its_value_and_headers_and_has_no_physical_place() -> None:
    m = FederatedMessage.unsent("U_TopicA", b"v", [("h", b"1")])
    assert (m.topic(), m.partition(), m.cluster_id(), m.offset(), m.value(), m.headers(), m.key()) == (
        "U_TopicA",
        -1,
        None,
        -1,
        b"v",
        [("h", b"1")],
        None,
    )
    assert (m.physical_topic(), m.physical_partition(), m.timestamp(), m.error(), len(m)) == (
        None,
        None,
        (0, 0),
        None,
        1,
    )


def test_only_positions_of_partitions_that_returned_messages_are_committed() -> None:
    # librdkafka's position: the offset after the last message consume() returned, or a logical (negative)
    # offset when none was returned since the partition was assigned
    positions = [
        TopicPartition("U_TopicA", 0, 12),
        TopicPartition("U_TopicA", 1, OFFSET_INVALID),
        TopicPartition("U_TopicA", 2, 0),
    ]
    assert [(tp.partition, tp.offset) for tp in handed_out(positions)] == [(0, 12), (2, 0)]
