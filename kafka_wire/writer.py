"""Writers compiled from kio's schemas: the same bytes as ``kio.serial.entity_writer``, several times faster.

kio's writers are pure Python that builds a phantom-typed value (``uvarint(...)``, ``i32(...)``) for every
length and number they write, and they need the entity objects built first. The gateway writes an envelope
per request on its hot path, so it compiles each kio dataclass once into closures that write straight into a
``bytearray`` from plain values (a mapping, or any object with the fields as attributes, such as a decoded
entity of another version), with the defaults ``build`` would fill. The layout still comes from kio: field
order, Kafka types, flexibility, nullability and tags are read from its dataclasses; nothing here names a
message. ``tests/unit/kafka_wire/test_writer.py`` checks the output equals kio's for every API and version the
gateway serves.

Tagged fields are rare on the gateway's paths: one whose value is not its default is written by kio's own
field writer.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import io
import struct
import uuid
from collections.abc import Callable, Mapping
from typing import Any, Final

from kio.serial._implicit_defaults import get_tagged_field_default
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
    get_schema_field_type,
    is_optional,
)
from kio.serial._serialize import get_field_writer
from kio.serial.writers import write_tagged_field
from kio.static.primitive import uvarint as uvarint_value

from .entities import ZERO, build

Write = Callable[[bytearray, Any], None]

_MISSING: Final = object()
_I8, _I16, _I32, _I64 = struct.Struct(">b"), struct.Struct(">h"), struct.Struct(">i"), struct.Struct(">q")
_U8, _U16, _U32, _U64 = struct.Struct(">B"), struct.Struct(">H"), struct.Struct(">I"), struct.Struct(">Q")
_F64 = struct.Struct(">d")
_ZERO_UUID: Final = bytes(16)


def uvarint(out: bytearray, value: int) -> None:
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)


def _packer(s: struct.Struct) -> Write:
    pack = s.pack

    def write(out: bytearray, value: Any) -> None:
        out += pack(value)

    return write


def _milliseconds(s: struct.Struct) -> Write:
    pack = s.pack

    def write(out: bytearray, value: Any) -> None:
        out += pack(value if isinstance(value, int) else round(value.total_seconds() * 1000))

    return write


def _timestamp(nullable: bool) -> Write:
    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError("a timestamp field is null")
            value = -1
        elif isinstance(value, datetime.datetime):
            value = round(value.timestamp() * 1000)
        out += _I64.pack(value)

    return write


def _uuid(out: bytearray, value: Any) -> None:
    if value is None:
        out += _ZERO_UUID
    elif isinstance(value, uuid.UUID):
        out += value.bytes
    else:
        out += uuid.UUID(value).bytes


def _bool(out: bytearray, value: Any) -> None:
    out.append(1 if value else 0)


def _bytes_writer(flexible: bool, nullable: bool, legacy_length: struct.Struct) -> Write:
    """Strings (encoded UTF-8) and bytes: a length then the data; null as length -1 (legacy) or 0 (compact)."""
    pack = legacy_length.pack

    def write(out: bytearray, value: Any) -> None:
        if value is None:
            if not nullable:
                raise ValueError("a non-nullable string or bytes field is null")
            if flexible:
                out.append(0)
            else:
                out += pack(-1)
            return
        data = value.encode() if isinstance(value, str) else value
        if flexible:
            uvarint(out, len(data) + 1)
        else:
            out += pack(len(data))
        out += data

    return write


def _primitive(kafka_type: str, flexible: bool, nullable: bool) -> Write:
    match kafka_type:
        case "int8":
            return _packer(_I8)
        case "int16" | "error_code":
            return _packer(_I16)
        case "int32":
            return _packer(_I32)
        case "int64":
            return _packer(_I64)
        case "uint8":
            return _packer(_U8)
        case "uint16":
            return _packer(_U16)
        case "uint32":
            return _packer(_U32)
        case "uint64":
            return _packer(_U64)
        case "float64":
            return _packer(_F64)
        case "bool":
            return _bool
        case "uuid":
            return _uuid
        case "string":
            return _bytes_writer(flexible, nullable, _I16)
        case "bytes" | "records":
            return _bytes_writer(flexible, nullable, _I32)
        case "timedelta_i32":
            return _milliseconds(_I32)
        case "timedelta_i64":
            return _milliseconds(_I64)
        case "datetime_i64":
            return _timestamp(nullable)
    raise NotImplementedError(f"no writer for Kafka type {kafka_type!r}")


def _array(item: Write, flexible: bool) -> Write:
    def write(out: bytearray, values: Any) -> None:
        if values is None:
            if flexible:
                out.append(0)
            else:
                out += _I32.pack(-1)
            return
        if flexible:
            uvarint(out, len(values) + 1)
        else:
            out += _I32.pack(len(values))
        for value in values:
            item(out, value)

    return write


def _nullable_entity(write_entity: Write) -> Write:
    def write(out: bytearray, value: Any) -> None:  # KIP-893
        if value is None:
            out += _I8.pack(-1)
        else:
            out += _I8.pack(1)
            write_entity(out, value)

    return write


def _default(f: dataclasses.Field[Any], kind: Any) -> Any:
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if kind.is_array:
        return ()
    if is_optional(f):
        return None
    return ZERO.get(get_schema_field_type(f), 0)


@functools.cache
def compiled(cls: Any) -> Write:
    """The writer of kio entity ``cls``: a missing required field takes ``entities.ZERO`` of its Kafka type."""
    flexible = bool(cls.__flexible__)
    steps: list[tuple[str, Write, Any]] = []
    tagged: list[tuple[int, str, Any, Callable[[Any, Any], None], Callable[[Any], Any]]] = []
    request_header = cls.__name__ == "RequestHeader"
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        tag = get_field_tag(f)
        if tag is not None:
            kio_writer = get_field_writer(f, flexible=True, is_request_header=False, is_tag=True)
            as_value = _tag_value(kind)
            tagged.append((int(tag), f.name, get_tagged_field_default(f), kio_writer, as_value))
            continue
        nullable = is_optional(f)
        if isinstance(kind, EntityTupleField):
            write = _array(compiled(kind.type_), flexible)
        elif isinstance(kind, PrimitiveTupleField):
            write = _array(_primitive(get_schema_field_type(f), flexible, False), flexible)
        elif isinstance(kind, EntityField):
            inner = compiled(kind.type_)
            write = _nullable_entity(inner) if nullable else inner
        elif request_header and f.name == "client_id":  # Kafka's own exception: a legacy string, even flexible
            write = _primitive("string", False, True)
        else:
            write = _primitive(get_schema_field_type(f), flexible, nullable)
        steps.append((f.name, write, _default(f, kind)))

    def write_entity(out: bytearray, data: Any) -> None:
        get = data.get if isinstance(data, Mapping) else functools.partial(getattr, data)
        for name, write, default in steps:
            value = get(name, _MISSING)
            write(out, default if value is _MISSING else value)
        if flexible:
            _write_tags(out, get, tagged)

    return write_entity


def _tag_value(kind: Any) -> Callable[[Any], Any]:
    """A tagged field's value as kio's writer takes it (entities built from mappings)."""
    if isinstance(kind, EntityField):
        return lambda v: v if v is None or type(v) is kind.type_ else build(kind.type_, v)
    return lambda v: v


def _write_tags(
    out: bytearray, get: Callable[[str, Any], Any], tagged: list[tuple[int, str, Any, Any, Callable[[Any], Any]]]
) -> None:
    present = []
    for tag, name, default, kio_writer, as_value in tagged:
        value = get(name, _MISSING)
        if value is not _MISSING and value != default:
            present.append((tag, kio_writer, as_value(value)))
    if not present:
        out.append(0)
        return
    uvarint(out, len(present))
    buffer = io.BytesIO()
    for tag, kio_writer, value in present:
        write_tagged_field(buffer, uvarint_value(tag), kio_writer, value)
    out += buffer.getvalue()
