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
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable, Iterable
from typing import Final

import crc32c

from metadata_log.errors import InvalidRequest

from . import ProtocolError
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

Place = Callable[[bytes | None], tuple[int, bytes | None]]
"""A record's key -> (the partition it goes to, the ``kfed-epoch`` header value to append, or None)."""


class BadBatch(ProtocolError):
    """Batches that cannot be read: lengths that do not add up, a CRC mismatch, a control batch."""


class UnsupportedCompression(InvalidRequest):
    """A batch compressed with a codec the gateway does not read (snappy, lz4, zstd)."""


def regroup(sources: Iterable[tuple[bytes, Place]], header_key: bytes, max_bytes: int) -> dict[int, bytes]:
    """The records of ``sources`` (a produce request's batches for each of a topic's partitions, with how to
    place their records) as one new batch per target partition: brokers take one batch per partition and
    request. ``place`` may raise to refuse a record; nothing is returned then. ``max_bytes`` bounds what a
    gzip batch may inflate to."""
    groups: dict[int, list[tuple[int, int, bytearray]]] = {}  # partition -> (attributes, timestamp, record rest)
    type_bits = 0
    for records, place in sources:
        at = 0
        while at < len(records):
            if len(records) - at < HEADER.size:
                raise BadBatch(f"a record batch header at byte {at} is cut short")
            (_, length, _, magic, crc, attributes, _, base_ts, _, _, _, _, count) = HEADER.unpack_from(records, at)
            end = at + 12 + length
            if length < HEADER.size - 12 or end > len(records):
                raise BadBatch(f"a record batch at byte {at} says it is {length} bytes long")
            if magic != 2:
                raise BadBatch(f"a record batch at byte {at} has magic {magic}; only v2 batches are read")
            if crc32c.crc32c(memoryview(records)[at + _CRC_FROM : end]) != crc:
                raise BadBatch(f"the record batch at byte {at} fails its CRC")
            if attributes & CONTROL:
                raise BadBatch(f"the record batch at byte {at} is a control batch")
            type_bits |= attributes & TIMESTAMP_TYPE
            body = _body(memoryview(records)[at + HEADER.size : end], attributes & COMPRESSION_MASK, max_bytes)
            _split(body, count, place, header_key, base_ts, groups)
            at = end
    return {partition: _batch(type_bits, records) for partition, records in groups.items()}


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


def _split(
    body: memoryview,
    count: int,
    place: Place,
    header_key: bytes,
    base_ts: int,
    groups: dict[int, list[tuple[int, int, bytearray]]],
) -> None:
    """Each record of one batch's body, placed: its attributes, timestamp and what follows its offset delta
    (key, value, headers; the stamp put first among the headers) appended to its partition's group."""
    at = 0
    for _ in range(count):
        length, at = _varint(body, at)
        start, end = at, at + length
        if length < 1 or end > len(body):
            raise BadBatch(f"a record at byte {start} says it is {length} bytes long")
        ts_delta, delta_at = _varint(body, at + 1)  # after the attributes
        _, after_delta = _varint(body, delta_at)  # the offset delta, renumbered in _batch
        key_length, at = _varint(body, after_delta)
        key = bytes(body[at : at + key_length]) if key_length >= 0 else None
        value_length, at = _varint(body, at + max(key_length, 0))
        headers_at = at + max(value_length, 0)
        headers_count, after_count = _varint(body, headers_at)
        if after_count > end or headers_count < 0:
            raise BadBatch(f"the record at byte {start} does not fit its length")
        partition, stamp = place(key)
        if stamp is None:
            rest = bytearray(body[after_delta:end])
        else:
            rest = bytearray(body[after_delta:headers_at])
            _zigzag(rest, headers_count + 1)
            _zigzag(rest, len(header_key))  # first: consumers read the first kfed-epoch header
            rest += header_key
            _zigzag(rest, len(stamp))
            rest += stamp
            rest += body[after_count:end]
        groups.setdefault(partition, []).append((body[start], base_ts + ts_delta, rest))
        at = end
    if at != len(body):
        raise BadBatch(f"a record batch's records end at byte {at} of {len(body)}")


def _batch(type_bits: int, records: list[tuple[int, int, bytearray]]) -> bytes:
    """One v2 batch of placed records: offset deltas 0.., timestamps against the first record's."""
    base_ts = records[0][1]
    body = bytearray()
    for delta, (attributes, timestamp, rest) in enumerate(records):
        record = bytearray((attributes,))
        _zigzag(record, timestamp - base_ts)
        _zigzag(record, delta)
        record += rest
        _zigzag(body, len(record))
        body += record
    max_ts = max(timestamp for _, timestamp, _ in records)
    tail = bytearray(_TAIL.pack(type_bits, len(records) - 1, base_ts, max_ts, NO_PRODUCER, NO_PRODUCER, NO_PRODUCER,
                                len(records)))  # fmt: skip
    tail += body
    return struct.pack(">qiibI", 0, len(tail) + 9, -1, 2, crc32c.crc32c(tail)) + tail


def _varint(buf: memoryview, at: int) -> tuple[int, int]:
    """A zigzag varint (up to 64 bits) at ``at``: (value, the byte after it)."""
    result = shift = 0
    while True:
        if at >= len(buf):
            raise BadBatch("a record is cut short")
        byte = buf[at]
        at += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), at
        shift += 7
        if shift > 63:
            raise BadBatch("a varint of a record is longer than 10 bytes")


def _zigzag(out: bytearray, value: int) -> None:
    uvarint(out, (value << 1) ^ (value >> 63))
