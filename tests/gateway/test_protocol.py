"""The gateway's protocol module: any version built from one description, frames checked, batches rewritten."""

from __future__ import annotations

import datetime
import io
import struct
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kio.index import load_entity_schema
from kio.records.readers import read_batch
from kio.records.schema import NewRecordBatch, Record
from kio.records.writers import write_batch
from kio.serial import entity_writer
from kio.static.constants import EntityType
from kio.static.primitive import Records

from gateway.producers import PhysicalProducer, StrictSequence
from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from kafka_wire.writer import compiled


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


def test_a_physical_producer_takes_its_first_batch_the_next_one_or_a_recent_resend_and_nothing_else() -> None:
    p = PhysicalProducer(7, 0)
    assert p.follows(5, 9) and p.shift == 5, "the client's first sequence here is the broker's 0"
    assert p.follows(10, 10) and p.follows(11, 14)
    assert p.follows(5, 9), "a resend of a recent batch goes through (the broker deduplicates it)"
    assert not p.follows(16, 17), "a gap: the client went on elsewhere"
    assert not p.follows(6, 9), "an old sequence that was never a batch of this producer"
    for start in range(15, 15 + 5):
        assert p.follows(start, start)
    assert not p.follows(5, 9), "a batch older than the last five is not a resend"


def test_a_strict_topics_client_sequence_writes_in_order_answers_resends_and_refuses_the_rest() -> None:
    """What a broker does for an idempotent producer, kept by the gateway for strict topics' regrouped batches."""
    s = StrictSequence()
    assert s.verdict(5, 9) is None, "a first batch here starts the sequence wherever the client is"
    s.written(5, 9)
    assert s.verdict(10, 12) is None
    assert s.verdict(5, 9) == ErrorCode.none, "a resend of a written batch: answered, not written again"
    assert s.verdict(13, 14) == ErrorCode.out_of_order_sequence_number, "a gap: the client sends again in order"
    s.refused(10)
    assert s.verdict(13, 14) == ErrorCode.out_of_order_sequence_number, "a refused batch is not skipped"
    fresh = StrictSequence()
    fresh.refused(20)
    assert fresh.verdict(25, 30) == ErrorCode.out_of_order_sequence_number, "a refused first batch goes first"
    assert fresh.verdict(20, 24) is None


def _every_served_schema() -> list[tuple[str, Any]]:
    schemas = []
    for key, (low, high) in sorted({**kp.SERVED_VERSIONS, **kp.SASL_VERSIONS}.items()):
        for version in range(low, high + 1):
            request, response = kp.request_class(key, version), kp.response_class(key, version)
            schemas += [(f"{request.__name__} v{version}", request), (f"{response.__name__} v{version}", response)]
            schemas += [(f"{request.__header_schema__.__name__} v{version}", request.__header_schema__)]
    for name in ("consumer_protocol_subscription", "consumer_protocol_assignment"):
        for version in range(4):
            cls = load_entity_schema(name, version, EntityType.data)
            schemas.append((f"{name} v{version}", cls))
    return schemas


SCHEMAS = _every_served_schema()
st.register_type_strategy(Records, st.binary(max_size=40).map(Records))


@pytest.mark.slow  # some 370 schemas: minutes on a loaded machine
@pytest.mark.parametrize(("name", "cls"), SCHEMAS, ids=[name for name, _ in SCHEMAS])
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data())
def test_the_compiled_writers_write_what_kio_writes(name: str, cls: Any, data: st.DataObject) -> None:
    entity = data.draw(st.from_type(cls))
    expected = io.BytesIO()
    entity_writer(cls)(expected, entity)
    got = bytearray()
    compiled(cls)(got, entity)
    assert bytes(got) == expected.getvalue()
