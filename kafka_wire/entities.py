"""kio entities from plain values: ``build`` makes an instance of any version of a message from a mapping
(or from a kio entity of another version), and ``ZERO`` says what a required field left out takes, per Kafka
type. ``protocol`` and the compiled writers (``writer``) both fill messages this way.
"""

from __future__ import annotations

import dataclasses
import datetime
import functools
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, NamedTuple

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (  # kio's own field classification: the one way to walk its dataclasses
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_schema_field_type,
    is_optional,
)
from kio.serial.readers import tz_aware_from_i64
from kio.static.primitive import i64

from metadata_log.errors import CorruptData


class ProtocolError(CorruptData, ValueError):
    """Bytes that are not a valid message of the version they claim (the connection is closed)."""


_MISSING: Final = object()
_EPOCH: Final = tz_aware_from_i64(i64(0))


def _error_code(value: Any) -> ErrorCode:
    if isinstance(value, ErrorCode):
        return value
    try:
        return ErrorCode(value)
    except ValueError:  # a code newer than kio: pass on the nearest generic one
        return ErrorCode.unknown_server_error


def _milliseconds(value: Any) -> Any:
    return datetime.timedelta(milliseconds=value) if isinstance(value, int) else value


def _timestamp(value: Any) -> Any:
    return tz_aware_from_i64(i64(value)) if isinstance(value, int) else value


def _uuid(value: Any) -> Any:
    return uuid.UUID(value) if isinstance(value, str) else value


_CONVERTERS: Final[Mapping[str, Callable[[Any], Any]]] = {
    "error_code": _error_code,
    "timedelta_i32": _milliseconds,
    "timedelta_i64": _milliseconds,
    "datetime_i64": _timestamp,
    "uuid": _uuid,
}
ZERO: Final[Mapping[str, Any]] = {  # what a required field not given takes, per Kafka type
    "error_code": ErrorCode.none,
    "timedelta_i32": datetime.timedelta(0),
    "timedelta_i64": datetime.timedelta(0),
    "datetime_i64": _EPOCH,
    "string": "",
    "bytes": b"",
    "records": b"",
    "bool": False,
    "uuid": uuid.UUID(int=0),
    "float64": 0.0,
}


class _FieldPlan(NamedTuple):
    name: str
    convert: Callable[[Any], Any] | None  # None: the value as given
    default: Any  # _MISSING: required


@functools.cache
def _plan(cls: Any) -> tuple[_FieldPlan, ...]:
    """How to fill each field of ``cls``: its converter and its default when a value is not given."""
    plan = []
    for f in dataclasses.fields(cls):
        kind = classify_field(f)
        convert: Callable[[Any], Any] | None
        if isinstance(kind, EntityTupleField):
            convert = functools.partial(_build_all, kind.type_)
        elif isinstance(kind, EntityField):
            convert = functools.partial(_build_optional, kind.type_)
        elif isinstance(kind, PrimitiveTupleField):
            inner = _CONVERTERS.get(get_schema_field_type(f))
            convert = tuple if inner is None else functools.partial(_convert_all, inner)
        else:
            convert = _CONVERTERS.get(get_schema_field_type(f))
        if f.default is not dataclasses.MISSING:
            default = f.default
        elif f.default_factory is not dataclasses.MISSING:
            default = f.default_factory()
        elif kind.is_array:
            default = ()
        elif is_optional(f):
            default = None
        else:
            default = ZERO.get(get_schema_field_type(f), 0)
        plan.append(_FieldPlan(f.name, convert, default))
    return tuple(plan)


def _convert_all(convert: Callable[[Any], Any], values: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(map(convert, values))


def _build_all(cls: Any, values: Iterable[Any] | None) -> tuple[Any, ...] | None:
    return None if values is None else tuple(v if type(v) is cls else build(cls, v) for v in values)


def _build_optional(cls: Any, value: Any) -> Any:
    return value if value is None or type(value) is cls else build(cls, value)


def build(cls: Any, data: Any) -> Any:
    """An instance of the kio entity ``cls`` from ``data``: a mapping, or any object with the fields as
    attributes (a kio entity of another version). Fields ``cls`` lacks are ignored; missing ones take their
    default."""
    get: Callable[[str, Any], Any] = data.get if isinstance(data, Mapping) else functools.partial(getattr, data)
    values = {}
    for name, convert, default in _plan(cls):
        value = get(name, _MISSING)
        if value is _MISSING:
            if default is _MISSING:
                raise ProtocolError(f"{cls.__name__}.{name} is required")
            value = default
        elif convert is not None:
            value = convert(value)
        values[name] = value
    return cls(**values)
