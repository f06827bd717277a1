"""A strict topic's batches taken apart and regrouped by target partition (``kafka_wire/batches.py``),
by the C module (``_records.c``) and by its Python fallback alike.

Batches are built and read back by kafka-python's record code, an implementation independent of the one
under test, which checks lengths and the CRC-32C."""

from __future__ import annotations

import struct
import zlib
from array import array
from collections.abc import Iterator
from typing import Any

import crc32c
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from kafka_wire import batches
from metadata_log.keymap import KEY_SLOTS, SLOT_MASK

NO_COMPRESSION, GZIP, SNAPPY = 0, 1, 2
HEADER = batches.encoded_header(b"kfed-epoch", b"3")
Sent = tuple[bytes | None, bytes, int, list[tuple[str, bytes]]]  # key, value, timestamp, headers


@pytest.fixture(params=["c", "python"])
def split(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test once with the C module, once with the Python fallback."""
    original = batches._split
    batches._split = original if request.param == "c" else batches._split_py
    try:
        yield request.param
    finally:
        batches._split = original


def test_the_gateway_places_records_with_the_c_module() -> None:
    # without it a strict topic's records cost the gateway ~20 times the CPU (BENCHMARKS.md)
    assert batches._split is not batches._split_py, "kafka_wire._records was not built (a C compiler is needed)"


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


def placement(n: int, stamp_slot: Any = lambda slot: False, keyless: int = 0, wait: Any = lambda slot: False) -> Any:
    """Slot s to partition ``s % n`` (-1 where ``wait``), stamped where ``stamp_slot``."""
    targets = array("i", [-1 if wait(s) else s % n for s in range(KEY_SLOTS)]).tobytes()
    stamped = bytes(1 if stamp_slot(s) else 0 for s in range(KEY_SLOTS))
    return batches.SlotTargets(targets, stamped, keyless, HEADER)


def slot(key: bytes) -> int:
    return zlib.crc32(key) & SLOT_MASK


@pytest.mark.parametrize("compression", [NO_COMPRESSION, GZIP])
def test_records_go_to_their_partition_in_order_with_everything_but_the_offset_delta_kept(
    split: str, compression: int
) -> None:
    sent: list[Sent] = [
        (f"k{i}".encode() if i % 4 else None, f"v{i}".encode(), 1_700_000_000_000 + 7 * i,
         [("trace", f"t{i}".encode())] if i % 3 == 0 else [])
        for i in range(40)
    ]  # fmt: skip
    first = batch(sent[:25], compression)
    raw, cut = first + batch(sent[25:], compression), len(first)  # two client partitions' batches
    stamped = placement(3, lambda s: s % 2 == 1, keyless=2)
    out = batches.regroup([(raw[:cut], stamped), (raw[cut:], stamped)], 1 << 20)
    got: dict[int, list[Any]] = {}
    for partition, data in out.items():
        assert len(read(data)) == 1, "one batch per partition: brokers take no more"
        for b, records in read(data):
            assert (b.producer_id, b.producer_epoch, b.base_sequence) == (-1, -1, -1), "no producer: not idempotent"
            assert b.compression_type == NO_COMPRESSION and not b.is_transactional
            assert [r.offset for r in records] == list(range(len(records))), "offset deltas renumbered"
            assert b.max_timestamp == max(r.timestamp for r in records)
            assert b.first_timestamp == records[0].timestamp
            got.setdefault(partition, []).extend(records)
    expected: dict[int, list[Sent]] = {}
    for key, value, timestamp, headers in sent:
        partition = 2 if key is None else slot(key) % 3
        stamp = [("kfed-epoch", b"3")] if key is not None and slot(key) % 2 == 1 else []
        expected.setdefault(partition, []).append((key, value, timestamp, stamp + headers))
    assert {p: [(r.key, r.value, r.timestamp, r.headers) for r in rs] for p, rs in got.items()} == expected


RECORDS = st.lists(
    st.tuples(st.one_of(st.none(), st.binary(max_size=40)), st.binary(max_size=300), st.integers(-(2**40), 2**40)),
    max_size=60,
)


@given(st.lists(RECORDS, max_size=3), st.integers(1, 7))
@settings(max_examples=100, deadline=None)
def test_the_c_module_and_python_place_any_records_alike_into_valid_batches(
    sources: list[list[tuple[bytes | None, bytes, int]]], n: int
) -> None:
    raws = [batch([(k, v, 1_700_000_000_000 + ts, []) for k, v, ts in records]) if records else b""
            for records in sources]  # fmt: skip
    where = placement(n, lambda s: s % 3 == 0, keyless=n - 1)
    results = []
    for split in (batches._split, batches._split_py):
        original, batches._split = batches._split, split
        try:
            results.append(batches.regroup([(raw, where) for raw in raws], 1 << 20))
        finally:
            batches._split = original
    assert results[0] == results[1], "the C module writes what the Python fallback writes, byte for byte"
    back = sorted(((r.key, r.value) for data in results[0].values() for _, rs in read(data) for r in rs), key=repr)
    assert back == sorted(((k, v) for records in sources for k, v, _ in records), key=repr)


def test_a_record_with_no_partition_now_leaves_nothing_placed(split: str) -> None:
    raw = batch([(b"now", b"1", 1, []), (b"later", b"2", 2, []), (None, b"3", 3, [])])
    with pytest.raises(batches.NoPartitionNow) as refused:
        batches.regroup([(raw, placement(2, wait=lambda s: s == slot(b"later")))], 1 << 20)
    assert refused.value.slot == slot(b"later")
    with pytest.raises(batches.NoPartitionNow) as refused:
        batches.regroup([(raw, placement(2, keyless=-1))], 1 << 20)
    assert refused.value.slot == -1, "a key-less record with no partition"


def test_bad_input_is_refused_with_a_reason(split: str) -> None:
    raw = batch([(b"a", b"1", 1, []), (b"b", b"2", 2, [])])
    where = placement(2)
    corrupt = bytearray(raw)
    corrupt[-1] ^= 0xFF
    with pytest.raises(batches.BadBatch, match="CRC"):
        batches.regroup([(bytes(corrupt), where)], 1 << 20)
    with pytest.raises(batches.BadBatch, match=r"cut short|long"):
        batches.regroup([(raw[:-3], where)], 1 << 20)
    with pytest.raises(batches.BadBatch, match="cut short"):
        batches.regroup([(raw + raw[:20], where)], 1 << 20)
    snappy = bytearray(raw)
    struct.pack_into(">h", snappy, 21, SNAPPY)
    struct.pack_into(">I", snappy, 17, crc32c.crc32c(bytes(snappy[21:])))
    with pytest.raises(batches.UnsupportedCompression):
        batches.regroup([(bytes(snappy), where)], 1 << 20)
    big = batch([(b"k", b"x" * 100_000, 1, [])], GZIP)
    with pytest.raises(batches.BadBatch, match="inflates past"):
        batches.regroup([(big, where)], 10_000)


@given(st.binary(min_size=1, max_size=200), st.integers(0, 40))
@settings(max_examples=300, deadline=None)
def test_garbage_records_under_a_valid_batch_header_are_refused_never_crash(body: bytes, count: int) -> None:
    """What a hostile client can send past the CRC check (it computes the CRC itself): the C module reads
    every length against the record's and the body's end."""
    where = placement(3, lambda s: s % 2 == 0, keyless=1)
    outcomes = []
    for split in (batches._split, batches._split_py):
        groups: dict[int, Any] = {}
        try:
            unplaced = split(body, count, 0, *where, groups)
        except ValueError:
            outcomes.append("refused")
            continue
        outcomes.append((unplaced, {p: (bytes(g[0]), *g[1:]) for p, g in groups.items()}))
    assert outcomes[0] == outcomes[1], "the C module and Python read garbage alike"


# -- fetched batches: where a Kafka client's read of a strict topic stops ---------------------------------
def at_offset(raw: bytes, base: int) -> bytes:
    """A batch as a broker answers it: its base offset set (the CRC does not cover it)."""
    return struct.pack(">q", base) + raw[8:]


def fetched(partial: bool = True) -> bytes:
    """Offsets 100-102 (uncompressed) and 103-105 (gzip), then (``partial``) a batch cut short by the fetch's
    size."""
    first = [(b"a", b"1", 1000, [("kfed-epoch", b"2"), ("kfed-epoch", b"9")]), (None, b"2", 1001, []),
             (b"b", b"3", 1005, [("other", b"x")])]  # fmt: skip
    second = [(b"c", b"4", 1002, [("kfed-epoch", b"x")]), (b"a", b"5", 1003, [("kfed-epoch", b"3")]),
              (b"d", b"6", 1004, [])]  # fmt: skip
    cut_short = at_offset(batch([(b"e", b"7", 1006, [])]), 106)[:-3] if partial else b""
    return at_offset(batch(first), 100) + at_offset(batch(second, GZIP), 103) + cut_short


def test_a_fetch_answers_keyed_records_are_read_with_their_slot_and_epoch() -> None:
    got = list(batches.keyed_records(fetched(), 101, 1 << 20))
    # the first kfed-epoch header counts; one that is not an epoch is no stamp; key-less and earlier ones skipped
    assert got == [(102, slot(b"b"), None), (103, slot(b"c"), None), (104, slot(b"a"), 3), (105, slot(b"d"), None)]
    assert [o for o, _, _ in batches.keyed_records(fetched(), 0, 1 << 20)] == [100, 102, 103, 104, 105]
    assert next(batches.keyed_records(fetched(), 0, 1 << 20))[2] == 2
    snappy = bytearray(batch([(b"k", b"v", 1, [])]))
    snappy[22] |= SNAPPY  # the attributes' codec bits (the body is not read: refused before)
    struct.pack_into(">I", snappy, 17, crc32c.crc32c(bytes(snappy[21:])))
    with pytest.raises(batches.UnsupportedCompression):
        list(batches.keyed_records(bytes(snappy), 0, 1 << 20))
    corrupt = bytearray(fetched())
    corrupt[70] ^= 1
    with pytest.raises(batches.BadBatch, match="CRC"):
        list(batches.keyed_records(bytes(corrupt), 0, 1 << 20))


@pytest.mark.parametrize("offset", range(99, 108))
def test_a_fetch_answer_cut_before_a_record_keeps_exactly_the_records_before_it(offset: int) -> None:
    """What a client reads of the cut answer: every record before ``offset``, with its offset, key, value,
    timestamp and headers, in batches with valid CRCs; nothing from ``offset`` on."""
    whole = [(b.base_offset + i, r.key, r.value, r.timestamp, r.headers)
             for b, records in read(fetched(partial=False)) for i, r in enumerate(records)]  # fmt: skip
    cut = batches.cut(fetched(), offset, 1 << 20)
    got = []
    at = 0
    while len(cut) - at >= batches.HEADER.size:
        (length,) = struct.unpack_from(">i", cut, at + 8)
        if at + 12 + length > len(cut):
            break  # the trailing partial batch, left when nothing is cut
        b = DefaultRecordBatch(cut[at : at + 12 + length])
        assert b.validate_crc()
        records = list(b)
        assert b.next_offset == b.base_offset + len(records), "the batch ends at its last kept record"
        assert b.compression_type == NO_COMPRESSION or b.base_offset + len(records) == 106
        got += [(b.base_offset + i, r.key, r.value, r.timestamp, r.headers) for i, r in enumerate(records)]
        at += 12 + length
    assert got == [r for r in whole if r[0] < offset]
    if offset >= 106:
        assert cut == fetched(), "nothing to cut: the answer as it came"
