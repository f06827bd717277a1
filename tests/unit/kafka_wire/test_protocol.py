"""The Kafka wire protocol (``kafka_wire/protocol.py``): any version built from one description, frames checked,
batches rewritten."""

from __future__ import annotations

import datetime
import io
import struct
import uuid

import pytest
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch

from kafka_wire import protocol as kp


def test_one_metadata_description_encodes_in_every_served_version() -> None:
    body = {"throttle_time": 0, "brokers": [{"node_id": 1, "host": "h", "port": 9092, "rack": None}],
            "cluster_id": "kfed", "controller_id": 1,
            "topics": [{"error_code": 0, "name": "t", "topic_id": uuid.uuid4(), "is_internal": False,
                        "partitions": [{"error_code": 0, "partition_index": 3, "leader_id": 1, "leader_epoch": -1,
                                        "replica_nodes": [1], "isr_nodes": [1], "offline_replicas": []}]}]}  # fmt: skip
    low, high = kp.SERVED_VERSIONS[kp.METADATA]
    for version in range(low, high + 1):
        frame = kp.encode_response(kp.METADATA, version, 42, body)
        assert kp.SIZE.unpack_from(frame)[0] == len(frame) - 4
        correlation_id, decoded = kp.decode_response(kp.METADATA, version, bytes(frame[4:]))
        assert correlation_id == 42
        assert decoded.topics[0].partitions[0].partition_index == 3
        assert decoded.brokers[0].port == 9092


def test_a_request_round_trips_and_a_truncated_one_is_refused() -> None:
    frame = kp.encode_request(kp.FETCH, 12, 7, "client", {
        "replica_id": -1, "max_wait": 500, "min_bytes": 1, "max_bytes": 1024, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1,
        "topics": [{"topic": "t", "partitions": [{"partition": 0, "fetch_offset": 5, "partition_max_bytes": 100}]}],
    })  # fmt: skip
    frame = bytes(frame[4:])
    prefix = kp.request_prefix(frame)
    assert prefix == kp.RequestPrefix(kp.FETCH, 12, 7)
    request = kp.decode_request(frame, prefix)
    assert request.client_id == "client"
    assert kp.milliseconds(request.body.max_wait) == 500
    assert request.body.topics[0].partitions[0].fetch_offset == 5
    for bad in (frame[:-1], frame[: len(frame) // 2]):
        with pytest.raises(kp.ProtocolError):
            kp.decode_request(bad, prefix)
    assert kp.decode_request(frame + b"\0\0\0", prefix).body == request.body, "trailing bytes are ignored"
    with pytest.raises(kp.ProtocolError):
        kp.request_prefix(b"\0\1")


def test_an_unsupported_api_versions_request_is_answered_in_v0_with_the_versions_served() -> None:
    frame = kp.encode_unsupported_api_versions(9, {kp.PRODUCE: (3, 11)})
    _, body = kp.decode_response(kp.API_VERSIONS, 0, bytes(frame[4:]))
    assert body.error_code == kp.ErrorCode.unsupported_version
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(0, 3, 11)]


def test_the_consumer_protocol_messages_round_trip() -> None:
    assignment = kp.encode_assignment([("b", 2), ("a", 1), ("a", 0)])
    assert sorted(kp.decode_assignment(assignment)) == [("a", 0), ("a", 1), ("b", 2)]
    subscription = struct.pack(">h", 0) + struct.pack(">i", 1) + struct.pack(">h", 1) + b"t" + struct.pack(">i", -1)
    assert kp.decode_subscription(subscription) == kp.Subscription(("t",), ())
    with pytest.raises(kp.ProtocolError):
        kp.decode_subscription(b"\0")


def batch(producer_id: int, epoch: int, sequence: int, count: int = 3) -> bytes:
    now = datetime.datetime.now(datetime.UTC)
    records = tuple(Record(attributes=0, timestamp=now, offset=i, key=None, value=b"v%d" % i, headers=())
                    for i in range(count))  # fmt: skip
    out = io.BytesIO()
    write_batch(out, NewRecordBatch(producer_id=producer_id, producer_epoch=epoch, base_sequence=sequence,
                                    records=records, attributes=0))  # fmt: skip
    return out.getvalue()


def test_rewriting_the_producer_keeps_every_batch_valid_and_its_records_unchanged() -> None:
    two = batch(2**62 + 5, 3, 10) + batch(2**62 + 5, 3, 13, count=2)
    rewritten = kp.rewrite_producer(two, 1001, 0, sequence_shift=10)
    assert len(rewritten) == len(two)
    first, size = read_batch(rewritten, 0)  # kio checks each batch's CRC-32C
    second, _ = read_batch(rewritten, size)
    for got, sequence, count in ((first, 0, 3), (second, 3, 2)):
        assert (got.producer_id, got.producer_epoch, got.base_sequence) == (1001, 0, sequence)
        assert [r.value for r in got.records] == [b"v%d" % i for i in range(count)]
    assert kp.batch_producer(two) == kp.BatchProducer(2**62 + 5, 3, 10, 14, False)
    assert kp.batch_producer(rewritten) == kp.BatchProducer(1001, 0, 0, 4, False)
    with pytest.raises(kp.ProtocolError):
        kp.rewrite_producer(two[:-5], 1, 0)
