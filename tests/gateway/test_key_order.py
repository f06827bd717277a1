"""Strict key order for clients that know nothing of kfed (docs/KEY_ORDER.md): kafka-python, unmodified,
produces keyed records to a ``key_order: strict`` topic through the gateway, which places each record by the
topic's key map and stamps the keys that moved, across an expand and a shrink."""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.record.default_records import DefaultRecordBatchBuilder

from deploy.launcher import LocalFederation
from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from metadata_log.keymap import slot_of
from tests.waiting import wait_until

from .test_hostile import connect, read_frame

pytestmark = pytest.mark.slow

GATEWAY_FOLLOWS_S = 1.0
"""Let the gateway follow the log to what the test just saw committed (it long-polls for 0.5 s at most)."""


def topic(fed: LocalFederation, name: str) -> dict[str, Any]:
    return dict(fed.metadata(topic=name)["topics"][0])


def owner(key_ranges: list[list[int]], key: bytes) -> int:
    slot = slot_of(key)
    return next(p for first, end, p in key_ranges if first <= slot < end)


def produce(gateway: str, name: str, keys: list[bytes], value: bytes, **config: Any) -> None:
    """One record per key and a key-less one, every send acknowledged."""
    producer = KafkaProducer(bootstrap_servers=[gateway], acks="all", linger_ms=5, **config)
    futures = [producer.send(name, key=key, value=value) for key in [*keys, None]]
    producer.flush(60)
    for f in futures:
        f.get(timeout=60)
    producer.close()


def read_back(gateway: str, name: str, value: bytes) -> list[tuple[bytes | None, int, list[tuple[str, bytes]]]]:
    """(key, partition, headers) of every record valued ``value``, read through the gateway."""
    consumer = KafkaConsumer(bootstrap_servers=[gateway], enable_auto_commit=False, consumer_timeout_ms=5000)
    partitions = sorted(consumer.partitions_for_topic(name) or ())
    consumer.assign([TopicPartition(name, p) for p in partitions])
    consumer.seek_to_beginning()
    got = [(m.key, m.partition, list(m.headers)) for m in consumer if m.value == value]
    consumer.close()
    return got


def create_strict(fed: LocalFederation) -> tuple[str, dict[str, Any]]:
    name = f"Strict-{uuid.uuid4().hex[:6]}"
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": name, "region": "r1", "partitions_per_cluster": 2, "key_order": "strict"})
    fed.wait_writable(name)
    time.sleep(GATEWAY_FOLLOWS_S)
    return name, topic(fed, name)


def test_a_strict_topic_takes_any_clients_keys_where_its_key_map_puts_them_across_an_expand_and_a_shrink(
    gateway: str, fed: LocalFederation
) -> None:
    name, first = create_strict(fed)
    keys = [f"key-{i}".encode() for i in range(300)]
    produce(gateway, name, keys, b"epoch-1", compression_type="gzip")  # murmur2 places keys elsewhere than crc32
    got = read_back(gateway, name, b"epoch-1")
    assert sorted(k for k, _, _ in got if k) == sorted(keys), "every keyed record once"
    assert [k for k, _, _ in got if k is None] == [None], "and the key-less one"
    for key, partition, headers in got:
        if key is not None:
            assert partition == owner(first["key_ranges"], key), "a key goes where the epoch maps its slot"
        assert headers == [], "no slot has moved yet: nothing is stamped"

    with fed.quorum.controller_client() as client:
        client.post(f"/v1/topics/{name}/partitions", {"cluster_id": "c2", "count": 2, "physical_topic": f"{name}-more"})
    expanded = wait_until(lambda: (t := topic(fed, name))["key_epoch"] == 2 and t, 30, "the expand's epoch")
    time.sleep(GATEWAY_FOLLOWS_S)
    produce(gateway, name, keys, b"epoch-2")
    after = read_back(gateway, name, b"epoch-2")
    assert {p for k, p, _ in after if k} == {0, 1, 2, 3, 4, 5}, "the new partitions take keyed traffic"
    moved = {k for k in keys if owner(first["key_ranges"], k) != owner(expanded["key_ranges"], k)}
    assert moved and len(moved) < len(keys), "the expand moved some keys, not all"
    for key, partition, headers in after:
        if key is not None:
            assert partition == owner(expanded["key_ranges"], key)
            assert headers == ([("kfed-epoch", b"2")] if key in moved else []), (key, headers)

    # a shrunk partition takes no writes: its keys go to their new owners, whatever partition the client picked
    with fed.quorum.controller_client() as client:
        client.post(f"/v1/topics/{name}/shrink", {"partitions": [0]})
    shrunk = wait_until(lambda: (t := topic(fed, name))["key_epoch"] == 3 and t, 30, "the shrink's epoch")
    wait_until(lambda: not topic(fed, name)["pending_seals"], 30, "the shrink's seals")
    time.sleep(GATEWAY_FOLLOWS_S)
    produce(gateway, name, keys, b"epoch-3")
    last = read_back(gateway, name, b"epoch-3")
    assert sorted(k for k, _, _ in last if k) == sorted(keys)
    assert 0 not in {p for _, p, _ in last}, "nothing written to the shrunk partition"
    assert all(p == owner(shrunk["key_ranges"], k) for k, p, _ in last if k)


def test_an_idempotent_clients_batches_to_a_strict_topic_are_written_once_and_in_order(
    gateway: str, fed: LocalFederation
) -> None:
    """The gateway keeps the client's sequences on a strict topic (no broker sees them there): a resend is
    answered without writing it again, a batch that skips one is refused so that the client sends in order.
    A producer id no gateway minted is refused (UNKNOWN_PRODUCER_ID: the client asks for one)."""
    name, _ = create_strict(fed)

    def produce(first: int, count: int) -> ErrorCode:
        builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                            producer_id=producer_id, producer_epoch=0, base_sequence=first,
                                            batch_size=1 << 20)  # fmt: skip
        for i in range(first, first + count):
            builder.append(i - first, timestamp=None, key=f"key-{i}".encode(), value=f"seq-{i}".encode(), headers=[])
        data = [{"index": 0, "records": bytes(builder.build())}]
        body = {"transactional_id": None, "acks": -1, "timeout": 30_000,
                "topic_data": [{"name": name, "partition_data": data}]}  # fmt: skip
        s.sendall(kp.encode_request(kp.PRODUCE, 9, first, "test", body))
        frame = read_frame(s)
        assert frame is not None
        _, answer = kp.decode_response(kp.PRODUCE, 9, frame)
        return ErrorCode(answer.responses[0].partition_responses[0].error_code)

    s = connect(gateway)
    s.settimeout(40)
    try:
        producer_id = (1 << 62) | 12_345  # invented: no gateway has incarnation 0
        assert produce(0, 10) == ErrorCode.unknown_producer_id
        s.sendall(kp.encode_request(kp.INIT_PRODUCER_ID, 1, 99, "test",
                                    {"transactional_id": None, "transaction_timeout": -1}))  # fmt: skip
        frame = read_frame(s)
        assert frame is not None
        _, minted = kp.decode_response(kp.INIT_PRODUCER_ID, 1, frame)
        producer_id = int(minted.producer_id)
        assert produce(0, 10) == ErrorCode.none
        assert produce(0, 10) == ErrorCode.none, "a resend: answered as written"
        assert produce(20, 5) == ErrorCode.out_of_order_sequence_number, "10..19 were never written"
        assert produce(10, 10) == ErrorCode.none
        assert produce(20, 5) == ErrorCode.none
    finally:
        s.close()
    values = sorted(int(v.decode().split("-")[1]) for _, _, _, v in read_values(gateway, name))
    assert values == list(range(25)), "every record once: the resend was not written again"


def read_values(gateway: str, name: str) -> list[tuple[bytes | None, int, int, bytes]]:
    consumer = KafkaConsumer(bootstrap_servers=[gateway], enable_auto_commit=False, consumer_timeout_ms=5000)
    partitions = sorted(consumer.partitions_for_topic(name) or ())
    consumer.assign([TopicPartition(name, p) for p in partitions])
    consumer.seek_to_beginning()
    got = [(m.key, m.partition, m.offset, m.value) for m in consumer]
    consumer.close()
    return got
