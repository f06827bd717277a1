"""Record batches taken apart record by record: for strict topics, whose records the gateway places itself.

A client partitions keyed records by its own hash (murmur2 for Java, crc32 or consistent-random for
librdkafka), not by a strict topic's key map (``docs/KEY_ORDER.md``). So on a strict topic the gateway reads
the records of each produced v2 batch and regroups them by the partition it places each one on, into one new
batch per target partition (brokers take one batch per partition and request), records and their order kept.

Each record is copied as it came (attributes, key, value and headers untouched); its offset delta is
renumbered within its new batch and its timestamp taken against the new batch's first, and a ``kfed-epoch``
header is put first where the placement asks for one (consumers read the first, so a client's own header of
that name cannot pass for it). New batches are uncompressed, carry no producer (id -1: clients' sequences
numbered the records of *their* partition, which no longer share a batch), keep the sources' timestamp type,
and get a fresh CRC-32C. The source's CRC is checked first, so corrupt input is refused, not laundered.

Source batches may be uncompressed or gzip (zlib, bounded by ``max_bytes``); snappy, lz4 and zstd are refused
with UNSUPPORTED_COMPRESSION_TYPE.

The per-record step (``_split``) is a C module (``_records.c``), with the same function in Python
(``_split_py``) for when it was not built, an order of magnitude slower per record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, NamedTuple

import crc32c

from metadata_log.errors import InvalidRequest, Unavailable
from metadata_log.keymap import EPOCH_HEADER, SLOT_MASK, stamp_of

from .protocol import ProtocolError
from .writer import uvarint

HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""base offset, batch length, partition leader epoch, magic, crc, attributes, last offset delta, base
timestamp, max timestamp, producer id, producer epoch, base sequence, record count (61 bytes)."""
_CRC_FROM: Final = 21  # the CRC-32C covers the batch from its attributes on
_TAIL: Final = struct.Struct(">hiqqqhii")  # attributes .. record count: what the CRC covers of the header
COMPRESSION_MASK: Final = 0x07
GZIP: Final = 1
TRANSACTIONAL: Final = 0x10
CONTROL: Final = 0x20
TIMESTAMP_TYPE: Final = 0x08
NO_PRODUCER: Final = -1
EPOCH_NAME: Final = EPOCH_HEADER.encode()

Group = list[Any]
"""One target partition's records so far: [records encoded (bytearray), count, base timestamp, max timestamp],
timestamps against its first record's, offset deltas 0, 1, ..."""


class SlotTargets(NamedTuple):
    """Where the records of one client partition go: a keyed one by its slot (``crc32(key) & 16383``) to
    ``targets[slot]`` (16,384 native int32; -1: that partition takes no writes now), with ``header`` first
    among its headers where ``stamped[slot]`` (16,384 bytes) is nonzero; a key-less one to ``keyless`` (-1:
    none takes them now)."""

    targets: bytes
    stamped: bytes
    keyless: int
    header: bytes


class BadBatch(ProtocolError):
    """Batches that cannot be read: lengths that do not add up, a CRC mismatch, a control batch."""


class UnsupportedCompression(InvalidRequest):
    """A batch compressed with a codec the gateway does not read (snappy, lz4, zstd)."""


class NoPartitionNow(Unavailable):
    """A record whose partition takes no writes now (``slot`` -1: a key-less one); nothing was placed."""

    def __init__(self, slot: int) -> None:
        super().__init__(
            f"the partition of key slot {slot} takes no writes now" if slot >= 0 else "no partition takes writes now"
        )
        self.slot = slot


def encoded_header(key: bytes, value: bytes) -> bytes:
    """A record header as a record carries it: its key and its value, each after its zigzag length."""
    out = bytearray()
    _zigzag(out, len(key))
    out += key
    _zigzag(out, len(value))
    out += value
    return bytes(out)


def regroup(sources: Iterable[tuple[bytes, SlotTargets]], max_bytes: int) -> dict[int, bytes]:
    """The records of ``sources`` (a produce request's batches for each of a topic's partitions, with where
    their records go) as one new batch per target partition: brokers take one batch per partition and
    request. ``NoPartitionNow`` when a record has none, and nothing is placed. ``max_bytes`` bounds what a
    gzip batch may inflate to."""
    groups: dict[int, Group] = {}
    type_bits = 0
    for records, placement in sources:
        for at, end, header in _batches(records, partial_ok=False):
            attributes, base_ts, count = header[5], header[7], header[12]
            if attributes & CONTROL:
                raise BadBatch(f"the record batch at byte {at} is a control batch")
            type_bits |= attributes & TIMESTAMP_TYPE
            body = _body(memoryview(records)[at + HEADER.size : end], attributes & COMPRESSION_MASK, max_bytes)
            try:
                unplaced = _split(body, count, base_ts, *placement, groups)
            except ValueError as e:
                raise BadBatch(str(e)) from None
            if unplaced is not None:
                raise NoPartitionNow(unplaced)
    return {partition: _batch(type_bits, group) for partition, group in groups.items()}


def _body(data: memoryview, codec: int, max_bytes: int) -> memoryview:
    if codec == 0:
        return data
    if codec != GZIP:
        raise UnsupportedCompression("records", f"compression codec {codec}: strict topics take uncompressed or gzip")
    inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
    try:
        body = inflate.decompress(data, max_bytes)
    except zlib.error as e:
        raise BadBatch(f"a gzip record batch does not inflate: {e}") from None
    if inflate.unconsumed_tail:
        raise BadBatch(f"a gzip record batch inflates past {max_bytes} bytes")
    return memoryview(body)


def _batch(type_bits: int, group: Group) -> bytes:
    """One v2 batch of a group's records."""
    records, count, base_ts, max_ts = group
    tail = bytearray(_TAIL.pack(type_bits, count - 1, base_ts, max_ts, NO_PRODUCER, NO_PRODUCER, NO_PRODUCER, count))
    tail += records
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c.crc32c(tail)) + tail


def _split_py(
    body: memoryview | bytes,
    count: int,
    base_ts: int,
    targets: bytes,
    stamped: bytes,
    keyless: int,
    header: bytes,
    groups: dict[int, Group],
) -> int | None:
    """``_records.split`` in Python: each record of one batch's body, placed and encoded into its partition's
    group: its attributes, its timestamp and offset delta in that group, then what followed its offset delta
    (key, value, headers), with ``header`` first among a stamped slot's headers. Returns the slot (-1: a
    key-less record) of the first record that has no partition now, else None. ValueError for records that
    do not fit."""
    table = memoryview(targets).cast("i")
    size = len(body)
    at = 0
    for _ in range(count):
        length, at = _varint(body, at, size)
        start, end = at, at + length
        if length < 1 or end > size:
            raise ValueError(f"a record at byte {start} says it is too long or cannot be read")
        ts_delta, delta_at = _varint(body, at + 1, end)  # after the attributes
        _, after_delta = _varint(body, delta_at, end)  # the offset delta: renumbered
        key_length, at = _varint(body, after_delta, end)
        if key_length < -1 or key_length > end - at:
            raise ValueError(f"the record at byte {start} has a key that does not fit")
        key = body[at : at + key_length] if key_length >= 0 else None
        value_length, at = _varint(body, at + max(key_length, 0), end)
        if value_length < -1 or value_length > end - at:
            raise ValueError(f"the record at byte {start} has a value that does not fit")
        headers_at = at + max(value_length, 0)
        if headers_at >= end:
            raise ValueError(f"the record at byte {start} does not fit its length")
        if key is None:
            if keyless < 0:
                return -1
            partition, stamp = keyless, False
        else:
            slot = zlib.crc32(key) & SLOT_MASK
            partition, stamp = table[slot], stamped[slot] != 0
            if partition < 0:
                return slot
        after_count = headers_at
        if stamp:
            headers_count, after_count = _varint(body, headers_at, end)
            if headers_count < 0:
                raise ValueError(f"the record at byte {start} has headers that cannot be read")
        timestamp = base_ts + ts_delta
        group = groups.get(partition)
        if group is None:
            group = groups[partition] = [bytearray(), 0, timestamp, timestamp]
        elif timestamp > group[3]:
            group[3] = timestamp
        record = bytearray((body[start],))
        _zigzag(record, timestamp - group[2])
        _zigzag(record, group[1])
        if stamp:
            record += body[after_delta:headers_at]
            _zigzag(record, headers_count + 1)
            record += header  # first: consumers read the first kfed-epoch header
            record += body[after_count:end]
        else:
            record += body[after_delta:end]
        _zigzag(group[0], len(record))
        group[0] += record
        group[1] += 1
        at = end
    if at != size:
        raise ValueError(f"a record batch's records end at byte {at} of {size}")
    return None


def _varint(buf: memoryview | bytes, at: int, end: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at ``at``, not past ``end``: (value, the byte after it)."""
    result = shift = 0
    while True:
        if at >= end:
            raise ValueError("a record is cut short")
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise ValueError("a varint of a record is longer than 10 bytes")


def _zigzag(out: bytearray, value: int) -> None:
    uvarint(out, (value << 1) ^ (value >> 63))


# -- fetched batches: where a Kafka client's read of a strict topic stops (gateway/holdback.py) ------------
def keyed_records(records: bytes, from_offset: int, max_bytes: int) -> Iterator[tuple[int, int, int | None]]:
    """``(offset, slot, stamp)`` of each keyed record at or after ``from_offset`` in the complete batches of a
    fetch answer's ``records`` (a trailing batch cut short by the fetch's size is not read; a client does not
    read it either), in offset order. ``stamp``: the epoch of the record's first ``kfed-epoch`` header, None
    when it has none that is an epoch. Control batches have no keys. ``UnsupportedCompression`` for snappy,
    lz4 and zstd, ``BadBatch`` for batches that cannot be read."""
    for at, end, header in _batches(records, partial_ok=True):
        base, attributes, count = header[0], header[5], header[12]
        if attributes & CONTROL:
            continue
        body = _body(memoryview(records)[at + HEADER.size : end], attributes & COMPRESSION_MASK, max_bytes)
        for delta, _, _, slot, stamp in _records_of(body, count):
            if slot >= 0 and base + delta >= from_offset:
                yield base + delta, slot, stamp


def cut(records: bytes, offset: int, max_bytes: int) -> bytes:
    """A fetch answer's ``records`` up to the record at ``offset``, not included: the batches before it whole,
    its own batch with only the records before it (uncompressed, with a fresh CRC), nothing after it. A
    client's position then stops at ``offset``: it asks for it again."""
    for at, end, header in _batches(records, partial_ok=True):
        (base, _, epoch, _, _, attributes, last_delta, base_ts, max_ts, producer, producer_epoch, sequence, count) = (
            header
        )
        if base + last_delta < offset:  # wholly before
            continue
        body = _body(memoryview(records)[at + HEADER.size : end], attributes & COMPRESSION_MASK, max_bytes)
        kept = [r for r in _records_of(body, count) if base + r[0] < offset]
        if not kept:
            return records[:at]
        if not attributes & TIMESTAMP_TYPE:  # create time: the kept records' own
            max_ts = base_ts + max(0, *(ts_delta for _, _, ts_delta, _, _ in kept))
        tail = bytearray(
            _TAIL.pack(
                attributes & ~COMPRESSION_MASK,
                kept[-1][0],
                base_ts,
                max_ts,
                producer,
                producer_epoch,
                sequence,
                len(kept),
            )
        )
        tail += body[: kept[-1][1]]
        return records[:at] + struct.pack(">qiibI", base, len(tail) + 9, epoch, 2, crc32c.crc32c(tail)) + tail
    return records


def _batches(records: bytes, partial_ok: bool) -> Iterator[tuple[int, int, tuple[Any, ...]]]:
    """``(start, end, its HEADER fields)`` of each v2 batch of ``records``, its CRC checked. A batch cut short
    at the end ends the walk when ``partial_ok`` (a fetch answer, cut by its size); it is a ``BadBatch`` in a
    produce request."""
    at = 0
    while at < len(records):
        if len(records) - at < HEADER.size:
            if partial_ok:
                return
            raise BadBatch(f"a record batch header at byte {at} is cut short")
        header = HEADER.unpack_from(records, at)
        length, magic, crc = header[1], header[3], header[4]
        end = at + 12 + length
        if end > len(records) and partial_ok and length >= HEADER.size - 12:
            return  # cut short by the fetch's size
        if length < HEADER.size - 12 or end > len(records):
            raise BadBatch(f"a record batch at byte {at} says it is {length} bytes long")
        if magic != 2:
            raise BadBatch(f"a record batch at byte {at} has magic {magic}; only v2 batches are read")
        if crc32c.crc32c(memoryview(records)[at + _CRC_FROM : end]) != crc:
            raise BadBatch(f"the record batch at byte {at} fails its CRC")
        yield at, end, header
        at = end


def _records_of(body: memoryview | bytes, count: int) -> Iterator[tuple[int, int, int, int, int | None]]:
    """``(offset delta, the byte after it, timestamp delta, slot (-1: key-less), stamp)`` of each record of a
    batch's body."""
    size = len(body)
    at = 0
    try:
        for _ in range(count):
            length, at = _varint(body, at, size)
            start, end = at, at + length
            if length < 1 or end > size:
                raise ValueError(f"a record at byte {start} says it is too long or cannot be read")
            ts_delta, at = _varint(body, at + 1, end)  # after the attributes
            delta, at = _varint(body, at, end)
            key_length, at = _varint(body, at, end)
            if key_length < -1 or key_length > end - at:
                raise ValueError(f"the record at byte {start} has a key that does not fit")
            slot = zlib.crc32(body[at : at + key_length]) & SLOT_MASK if key_length >= 0 else -1
            value_length, at = _varint(body, at + max(key_length, 0), end)
            if value_length < -1 or value_length > end - at:
                raise ValueError(f"the record at byte {start} has a value that does not fit")
            yield delta, end, ts_delta, slot, _stamp(body, at + max(value_length, 0), end) if slot >= 0 else None
            at = end
    except ValueError as e:
        raise BadBatch(str(e)) from None


def _stamp(body: memoryview | bytes, at: int, end: int) -> int | None:
    """The epoch of the first ``kfed-epoch`` header of the headers at ``at`` (as ``routing.stamp_of``)."""
    count, at = _varint(body, at, end)
    for _ in range(max(count, 0)):
        name_length, at = _varint(body, at, end)
        name = bytes(body[at : at + max(name_length, 0)])
        value_length, at = _varint(body, at + max(name_length, 0), end)
        if name == EPOCH_NAME:
            value = bytes(body[at : at + max(value_length, 0)]) if value_length >= 0 else None
            return stamp_of([(EPOCH_HEADER, value)])
        at += max(value_length, 0)
    return None


def _split_c() -> Callable[..., int | None]:
    try:
        from ._records import split  # a C extension (_records.c), built at install when it can be
    except ImportError:
        return _split_py
    return split


_split = _split_c()
