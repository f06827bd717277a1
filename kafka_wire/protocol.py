"""The Kafka wire protocol at the gateway's edges; with ``entities`` and ``writer``, all of kfed that imports ``kio``.

Message layouts come from ``kio`` (dataclasses generated from Kafka's own JSON schemas, every API key and
version); nothing here writes a schema by hand. What this module adds:

- framing: a request frame's fixed prefix (api key, version, correlation id) read before anything else, so a
  frame the gateway does not translate is refused before kio parses it;
- ``decode_request`` / ``encode_response`` for the gateway's clients, and ``encode_request`` /
  ``decode_response`` for the sub-clusters' brokers (the gateway is itself a Kafka client upstream);
- ``build`` (from ``entities``): a response or request of *any* version from plain values (mappings, or
  kio entities of another version). Handlers describe a reply once, version-agnostic; fields a version lacks
  are dropped, fields a version needs and the handler left out take their schema default or the type's
  zero. Times are milliseconds, UUIDs ``uuid.UUID``, error codes ints;
- the consumer group protocol's embedded messages (subscription, assignment), also from kio's schemas.

Record batches are never parsed here: ``records`` fields are bytes that pass through.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

import crc32c
from kio.index import load_entity_schema, load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.schema.index import api_key_map, schema_name_map
from kio.serial import entity_reader, entity_writer
from kio.static.constants import EntityType

from .entities import ProtocolError, build
from .writer import compiled

__all__ = ["ErrorCode", "ProtocolError", "build"]

# -- API keys the gateway knows by name ------------------------------------------------------------
PRODUCE: Final = 0
FETCH: Final = 1
LIST_OFFSETS: Final = 2
METADATA: Final = 3
OFFSET_COMMIT: Final = 8
OFFSET_FETCH: Final = 9
FIND_COORDINATOR: Final = 10
JOIN_GROUP: Final = 11
HEARTBEAT: Final = 12
LEAVE_GROUP: Final = 13
SYNC_GROUP: Final = 14
DESCRIBE_GROUPS: Final = 15
LIST_GROUPS: Final = 16
SASL_HANDSHAKE: Final = 17
API_VERSIONS: Final = 18
CREATE_TOPICS: Final = 19
DELETE_TOPICS: Final = 20
INIT_PRODUCER_ID: Final = 22
SASL_AUTHENTICATE: Final = 36

SERVED_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {
    # Produce and Fetch stop at 12 and 11: from 13 and 13 on they name topics by id, which a pass-through of
    # batches does not need (the same cap as Kroxylicious' routing design). Every client tested negotiates
    # down to these.
    PRODUCE: (3, 11),
    FETCH: (4, 12),
    LIST_OFFSETS: (1, 7),
    METADATA: (0, 12),
    # OffsetFetch 8+ and FindCoordinator 4+ batch several groups per request; OffsetCommit 9+ carries
    # KIP-848 member epochs. Clients fall back to the single-group versions.
    OFFSET_COMMIT: (2, 8),
    OFFSET_FETCH: (1, 7),
    FIND_COORDINATOR: (0, 3),
    JOIN_GROUP: (0, 9),
    HEARTBEAT: (0, 4),
    LEAVE_GROUP: (0, 5),
    SYNC_GROUP: (0, 5),
    DESCRIBE_GROUPS: (0, 5),
    LIST_GROUPS: (0, 4),
    API_VERSIONS: (0, 3),
    CREATE_TOPICS: (2, 7),
    DELETE_TOPICS: (1, 6),
    INIT_PRODUCER_ID: (0, 4),
}
"""What the gateway translates, by API key: (lowest, highest) version. ApiVersions advertises exactly this
(plus the SASL keys when SASL is on); GetTelemetrySubscriptions and the transactional APIs are absent."""

SASL_VERSIONS: Final[Mapping[int, tuple[int, int]]] = {SASL_HANDSHAKE: (1, 1), SASL_AUTHENTICATE: (0, 2)}

REQUEST_PREFIX: Final = struct.Struct(">hhi")  # api key, api version, correlation id: every request header
SIZE: Final = struct.Struct(">i")
CORRELATION: Final = struct.Struct(">i")


def api_name(api_key: int) -> str:
    return api_key_map.get(api_key, f"api key {api_key}")


def kio_versions(api_key: int) -> tuple[int, int] | None:
    """The versions kio has schemas for, or None for a key it does not know."""
    name = api_key_map.get(api_key)
    versions = schema_name_map.get(name) if name else None
    return (min(versions), max(versions)) if versions else None


# -- decoding and encoding -------------------------------------------------------------------------
class RequestPrefix(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int


def request_prefix(frame: bytes | memoryview) -> RequestPrefix:
    """The fixed start of every request header; ``ProtocolError`` for a frame shorter than it."""
    if len(frame) < REQUEST_PREFIX.size:
        raise ProtocolError(f"a request frame of {len(frame)} bytes is shorter than a request header")
    return RequestPrefix(*REQUEST_PREFIX.unpack_from(frame))


class Request(NamedTuple):
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the kio request entity


def decode_request(frame: bytes, prefix: RequestPrefix) -> Request:
    """A whole request frame (without its size) as a kio entity; ``ProtocolError`` if it does not parse
    (truncated, a bad length or string). Bytes after the request are ignored, as Kafka brokers ignore them:
    librdkafka 2.16's admin client sends three more with a Metadata v12 request."""
    cls = request_class(prefix.api_key, prefix.api_version)
    try:
        header, used = _reader(cls.__header_schema__)(frame, 0)
        body, _ = _reader(cls)(frame, used)
    except Exception as e:  # kio's readers raise several types (DecodeError, ValueError, ...) on bad input
        raise ProtocolError(f"{api_name(prefix.api_key)} v{prefix.api_version}: {type(e).__name__}: {e}") from None
    return Request(prefix.api_key, prefix.api_version, prefix.correlation_id, header.client_id, body)


def encode_response(api_key: int, api_version: int, correlation_id: int, data: Any) -> bytearray:
    """A size-prefixed response frame; ``data`` as ``build`` takes it."""
    cls = response_class(api_key, api_version)
    out = bytearray(4)
    _compiled(cls.__header_schema__)(out, {"correlation_id": correlation_id})
    _compiled(cls)(out, data)
    SIZE.pack_into(out, 0, len(out) - 4)
    return out  # not copied: the frame is written as it is, and never changed after


def encode_request(api_key: int, api_version: int, correlation_id: int, client_id: str, data: Any) -> bytearray:
    """A size-prefixed request frame, for a broker."""
    cls = request_class(api_key, api_version)
    header = io.BytesIO()  # kio's writer: the header's client id is a legacy string even in flexible versions
    _writer(cls.__header_schema__)(
        header,
        cls.__header_schema__(
            request_api_key=api_key, request_api_version=api_version, correlation_id=correlation_id, client_id=client_id
        ),
    )
    out = bytearray(4)
    out += header.getvalue()
    _compiled(cls)(out, data)
    SIZE.pack_into(out, 0, len(out) - 4)
    return out  # not copied: the frame is written as it is, and never changed after


def decode_response(api_key: int, api_version: int, frame: bytes) -> tuple[int, Any]:
    """(correlation id, kio response entity) of a broker's response frame (without its size)."""
    cls = response_class(api_key, api_version)
    try:
        header, used = _reader(cls.__header_schema__)(frame, 0)
        body, _ = _reader(cls)(frame, used)
    except Exception as e:  # as in decode_request
        raise ProtocolError(f"{api_name(api_key)} v{api_version} response: {type(e).__name__}: {e}") from None
    return header.correlation_id, body


def response_correlation_id(frame: bytes) -> int:
    if len(frame) < 4:
        raise ProtocolError("a response frame shorter than its correlation id")
    return int(CORRELATION.unpack_from(frame)[0])


@functools.cache
def request_class(api_key: int, api_version: int) -> Any:
    return load_request_schema(api_key, api_version)


@functools.cache
def response_class(api_key: int, api_version: int) -> Any:
    return load_response_schema(api_key, api_version)


@functools.cache
def _reader(cls: Any) -> Callable[[bytes, int], tuple[Any, int]]:
    return entity_reader(cls)


@functools.cache
def _writer(cls: Any) -> Callable[[io.BytesIO, Any], None]:
    return entity_writer(cls)


def _compiled(cls: Any) -> Callable[[bytearray, Any], None]:
    return compiled(cls)


def milliseconds(value: datetime.timedelta | int) -> int:
    """A decoded time field (kio gives ``timedelta``) in milliseconds."""
    return value if isinstance(value, int) else round(value.total_seconds() * 1000)


def epoch_milliseconds(value: datetime.datetime | int | None) -> int:
    if value is None:
        return -1
    return value if isinstance(value, int) else round(value.timestamp() * 1000)


# -- ApiVersions -----------------------------------------------------------------------------------
def api_versions_body(versions: Mapping[int, tuple[int, int]], error: int = 0) -> dict[str, Any]:
    return {
        "error_code": error,
        "api_keys": [{"api_key": k, "min_version": lo, "max_version": hi} for k, (lo, hi) in sorted(versions.items())],
        "throttle_time": 0,
    }


def encode_unsupported_api_versions(correlation_id: int, versions: Mapping[int, tuple[int, int]]) -> bytearray:
    """The answer to an ApiVersions request of a version the gateway does not speak: v0, UNSUPPORTED_VERSION
    and the versions it does (KIP-511: the client retries with the highest it shares)."""
    return encode_response(API_VERSIONS, 0, correlation_id, api_versions_body(versions, ErrorCode.unsupported_version))


# -- the consumer group protocol's embedded messages ------------------------------------------------
class Subscription(NamedTuple):
    topics: tuple[str, ...]
    owned: tuple[tuple[str, int], ...]  # (topic, partition), version 1+ (cooperative rebalancing)


def decode_subscription(metadata: bytes) -> Subscription:
    """A ``ConsumerProtocolSubscription`` (JoinGroup's protocol metadata); ``ProtocolError`` if it is not one."""
    version = _embedded_version(metadata, "consumer_protocol_subscription")
    cls = load_entity_schema("consumer_protocol_subscription", version, EntityType.data)
    try:
        value, _ = _reader(cls)(metadata, 2)
    except Exception as e:  # as in decode_request
        raise ProtocolError(f"consumer subscription v{version}: {type(e).__name__}: {e}") from None
    owned = tuple((tp.topic, int(p)) for tp in getattr(value, "owned_partitions", ()) for p in tp.partitions)
    return Subscription(tuple(value.topics), owned)


def encode_assignment(partitions: Iterable[tuple[str, int]], version: int = 0) -> bytes:
    """A ``ConsumerProtocolAssignment`` (SyncGroup's assignment) of these (topic, partition)s."""
    by_topic: dict[str, list[int]] = {}
    for topic, partition in partitions:
        by_topic.setdefault(topic, []).append(partition)
    cls = load_entity_schema("consumer_protocol_assignment", version, EntityType.data)
    data = {
        "assigned_partitions": [{"topic": t, "partitions": sorted(ps)} for t, ps in sorted(by_topic.items())],
        "user_data": None,
    }
    out = io.BytesIO()
    out.write(struct.pack(">h", version))
    _writer(cls)(out, build(cls, data))
    return out.getvalue()


def decode_assignment(data: bytes) -> list[tuple[str, int]]:
    if not data:
        return []
    version = _embedded_version(data, "consumer_protocol_assignment")
    cls = load_entity_schema("consumer_protocol_assignment", version, EntityType.data)
    try:
        value, _ = _reader(cls)(data, 2)
    except Exception as e:  # as in decode_request
        raise ProtocolError(f"consumer assignment v{version}: {type(e).__name__}: {e}") from None
    return [(tp.topic, int(p)) for tp in value.assigned_partitions for p in tp.partitions]


def _embedded_version(data: bytes, name: str) -> int:
    if len(data) < 2:
        raise ProtocolError(f"{name}: {len(data)} bytes, shorter than its version")
    version = int(struct.unpack_from(">h", data)[0])
    known = schema_name_map[name]
    if version < 0:
        raise ProtocolError(f"{name}: negative version {version}")
    # A newer version is read as the newest kio knows: the embedded messages only append fields.
    return min(version, max(known))


# -- record batches (headers only: the records stay opaque) ----------------------------------------
BATCH_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
"""A v2 record batch header: base offset, batch length, partition leader epoch, magic, crc, attributes,
last offset delta, base timestamp, max timestamp, producer id, producer epoch, base sequence, record count."""


class BatchProducer(NamedTuple):
    producer_id: int
    producer_epoch: int
    base_sequence: int  # of the first batch
    last_sequence: int  # of the last record of the last batch
    transactional: bool


def batch_producer(records: bytes | None) -> BatchProducer | None:
    """The producer fields of the v2 batches of ``records`` (one produce request's batches for a partition
    share them), or None when there is no v2 batch header to read. ``ProtocolError`` for lengths that do not
    add up."""
    if not records or len(records) < BATCH_HEADER.size:
        return None
    first = BATCH_HEADER.unpack_from(records)
    if first[3] != 2:
        return None
    last, at = first, 0
    while True:
        end = at + 12 + last[1]
        if last[1] < BATCH_HEADER.size - 12 or end > len(records):
            raise ProtocolError(f"a record batch at byte {at} says it is {last[1]} bytes long")
        if end == len(records):
            break
        if len(records) - end < BATCH_HEADER.size:
            raise ProtocolError(f"a record batch header at byte {end} is cut short")
        at, last = end, BATCH_HEADER.unpack_from(records, end)
    return BatchProducer(first[9], first[10], first[11], last[11] + last[6], bool(first[5] & 0x10))


_PRODUCER_AT: Final = 43  # offset of producer id, epoch and base sequence in a v2 batch header (BATCH_HEADER)
_PRODUCER: Final = struct.Struct(">qhi")
_CRC_AT: Final = 17
_CRC_FROM: Final = 21  # the CRC-32C covers the batch from its attributes on


def rewrite_producer(records: bytes, producer_id: int, producer_epoch: int, sequence_shift: int = 0) -> bytes:
    """``records`` with the producer id and epoch of every v2 batch replaced and its base sequence lowered by
    ``sequence_shift``, each batch's CRC-32C recomputed (it covers them; the partition leader epoch before
    it, which is not rewritten, is outside). ``ProtocolError`` for batches whose lengths do not add up."""
    out = bytearray(records)
    at = 0
    while at < len(out):
        if len(out) - at < BATCH_HEADER.size:
            raise ProtocolError(f"a record batch header at byte {at} is cut short")
        (length,) = SIZE.unpack_from(out, at + 8)
        end = at + 12 + length
        if length < BATCH_HEADER.size - 12 or end > len(out):
            raise ProtocolError(f"a record batch at byte {at} says it is {length} bytes long")
        if out[at + 16] == 2:
            (sequence,) = SIZE.unpack_from(out, at + _PRODUCER_AT + 10)
            _PRODUCER.pack_into(out, at + _PRODUCER_AT, producer_id, producer_epoch, sequence - sequence_shift)
            struct.pack_into(">I", out, at + _CRC_AT, crc32c.crc32c(memoryview(out)[at + _CRC_FROM : end]))
        at = end
    return bytes(out)


def fields_of(entity: Any, **changes: Any) -> dict[str, Any]:
    """A decoded entity's fields as a mapping for ``build`` (of any version), with some replaced."""
    values = {f.name: getattr(entity, f.name) for f in dataclasses.fields(entity)}
    values.update(changes)
    return values
