"""A strict topic's batches taken apart and regrouped by target partition (``gateway/protocol/batches.py``).

Batches are built and read back by kafka-python's record code, an implementation independent of the one
under test, which checks lengths and the CRC-32C."""

from __future__ import annotations

import struct
import zlib
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gateway.protocol import batches

NO_COMPRESSION, GZIP, SNAPPY = 0, 1, 2
Sent = tuple[bytes | None, bytes, int, list[tuple[str, bytes]]]  # key, value, timestamp, headers


def batch(records: list[Sent], compression: int = NO_COMPRESSION, producer_id: int = 7) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=compression, is_transactional=False,
                                        producer_id=producer_id, producer_epoch=0, base_sequence=0,
                                        batch_size=1 << 20)  # fmt: skip
    for i, (key, value, timestamp, headers) in enumerate(records):
        builder.append(i, timestamp=timestamp, key=key, value=value, headers=headers)
    return bytes(builder.build())


def read(raw: bytes) -> list[tuple[DefaultRecordBatch, list[Any]]]:
    """Every batch of ``raw`` with its records, each batch's CRC checked."""
    out, at = [], 0
    while at < len(raw):
        (length,) = struct.unpack_from(">i", raw, at + 8)
        b = DefaultRecordBatch(raw[at : at + 12 + length])
        assert b.validate_crc(), "a regrouped batch has a valid CRC-32C"
        out.append((b, list(b)))
        at += 12 + length
    return out


def by_crc(n: int, stamp_if: Any = lambda key: False) -> batches.Place:
    return lambda key: (0, None) if key is None else (zlib.crc32(key) % n, b"3" if stamp_if(key) else None)


@pytest.mark.parametrize("compression", [NO_COMPRESSION, GZIP])
def test_records_go_to_their_partition_in_order_with_everything_but_the_offset_delta_kept(compression: int) -> None:
    sent: list[Sent] = [
        (f"k{i}".encode() if i % 4 else None, f"v{i}".encode(), 1_700_000_000_000 + 7 * i,
         [("trace", f"t{i}".encode())] if i % 3 == 0 else [])
        for i in range(40)
    ]  # fmt: skip
    first = batch(sent[:25], compression)
    raw, split = first + batch(sent[25:], compression), len(first)  # two client partitions' batches
    place = by_crc(3, lambda key: key.endswith(b"1"))
    out = batches.regroup([(raw[:split], place), (raw[split:], place)], b"kfed-epoch", 1 << 20)
    got: dict[int, list[Any]] = {}
    for partition, data in out.items():
        for b, records in read(bytes(data)):
            assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1), "no producer: not idempotent"
            assert b.compression_type == NO_COMPRESSION and not b.is_transactional
            assert [r.offset for r in records] == list(range(len(records))), "offset deltas renumbered"
            assert b.max_timestamp == max(r.timestamp for r in records)
            assert b.first_timestamp == records[0].timestamp
            got.setdefault(partition, []).extend(records)
    expected: dict[int, list[Sent]] = {}
    for key, value, timestamp, headers in sent:
        partition = 0 if key is None else zlib.crc32(key) % 3
        stamp = [("kfed-epoch", b"3")] if key is not None and key.endswith(b"1") else []
        expected.setdefault(partition, []).append((key, value, timestamp, stamp + headers))
    assert {p: [(r.key, r.value, r.timestamp, r.headers) for r in rs] for p, rs in got.items()} == expected
    assert all(len(read(d)) == 1 for d in out.values()), "one batch per partition: brokers take no more"


@given(st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.binary(max_size=300)), max_size=60))
@settings(max_examples=60, deadline=None)
def test_any_records_regroup_into_valid_batches_that_hold_them_all(records: list[tuple[bytes | None, bytes]]) -> None:
    sent: list[Sent] = [(k, v, 1_000 + i, []) for i, (k, v) in enumerate(records)]
    raw = batch(sent) if sent else b""
    out = batches.regroup([(raw, by_crc(5, lambda key: len(key) % 2 == 1))], b"kfed-epoch", 1 << 20)
    back = [(r.key, r.value) for data in out.values() for _, rs in read(bytes(data)) for r in rs]
    assert sorted(back, key=repr) == sorted(((k, v) for k, v, _, _ in sent), key=repr)


def test_a_refused_record_leaves_nothing_half_done() -> None:
    class Wait(Exception):
        pass

    def place(key: bytes | None) -> tuple[int, bytes | None]:
        if key == b"later":
            raise Wait()
        return 0, None

    raw = batch([(b"now", b"1", 1, []), (b"later", b"2", 2, [])])
    with pytest.raises(Wait):
        batches.regroup([(raw, place)], b"kfed-epoch", 1 << 20)


def test_bad_input_is_refused_with_a_reason() -> None:
    raw = batch([(b"a", b"1", 1, []), (b"b", b"2", 2, [])])
    place = by_crc(2)
    corrupt = bytearray(raw)
    corrupt[-1] ^= 0xFF
    with pytest.raises(batches.BadBatch, match="CRC"):
        batches.regroup([(bytes(corrupt), place)], b"kfed-epoch", 1 << 20)
    with pytest.raises(batches.BadBatch, match=r"cut short|long"):
        batches.regroup([(raw[:-3], place)], b"kfed-epoch", 1 << 20)
    with pytest.raises(batches.BadBatch, match="cut short"):
        batches.regroup([(raw + raw[:20], place)], b"kfed-epoch", 1 << 20)
    snappy = bytearray(raw)
    struct.pack_into(">h", snappy, 21, SNAPPY)
    struct.pack_into(">I", snappy, 17, crc32c.crc32c(bytes(snappy[21:])))
    with pytest.raises(batches.UnsupportedCompression):
        batches.regroup([(bytes(snappy), place)], b"kfed-epoch", 1 << 20)
    big = batch([(b"k", b"x" * 100_000, 1, [])], GZIP)
    with pytest.raises(batches.BadBatch, match="inflates past"):
        batches.regroup([(big, place)], b"kfed-epoch", 10_000)
