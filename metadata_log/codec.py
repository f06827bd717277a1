"""The one codec of the metadata log: records <-> msgpack, and records <-> JSON-ready dicts.

Wire form of a record (a *row*): ``[type, version, field0, field1, ...]`` in declaration order. Positional
fields keep 1M-partition snapshots small; compatibility comes from the append-only field rule: a reader fills
missing trailing fields from their defaults and ignores trailing fields it does not know yet.

Many records are written in one of two layouts:

- *rows* (commands of metadata version 1, snapshots of version 1): one row per record
  (``encode_rows`` / ``decode_rows``);
- *runs* (metadata version 2): consecutive records of one type whose fields are all plain values as one run
  ``[n, type, version, *columns]``, a column per field holding its ``n`` values, or just one when all ``n``
  are equal; any other record as its row (``encode_runs`` / ``decode_runs``). A row starts with a string, a
  run with its length. A 500-partition topic is ~2 KB instead of ~30 KB of rows, and each repeated string
  is decoded once.

Both decoders give the records as ``Run | Record`` items: each well-formed run of one type as a ``Run`` of
checked columns, which the image replays without building record objects (``records_of`` builds them when a
reader wants them). The image is written as rows or runs straight from its field values (``wire_rows`` /
``wire_runs``), again without record objects.
"""

from __future__ import annotations

import collections
import dataclasses
import itertools
import operator
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import UnionType
from typing import Any, Final, NamedTuple

import msgpack

from .errors import CorruptData
from .records import RECORD_TYPES, GroupGenerationStarted, GroupMember, Record

__all__ = [
    "MAX_DECODE_BYTES",
    "MAX_RUN_RECORDS",
    "PACK_CHUNK_ITEMS",
    "PACK_CHUNK_RUNS",
    "WIRE_VERSION",
    "CodecError",
    "RecordFields",
    "Run",
    "build_records",
    "decode",
    "decode_rows",
    "decode_runs",
    "encode",
    "encode_rows",
    "encode_runs",
    "pack",
    "pack_chunked",
    "record_columns",
    "record_from_dict",
    "record_from_wire",
    "record_to_dict",
    "record_to_wire",
    "records_of",
    "unpack",
    "wire_rows",
    "wire_runs",
]

WIRE_VERSION: Final = 0

MAX_DECODE_BYTES: Final = 64 * 1024 * 1024
"""Largest msgpack blob decode() accepts (a 1M-partition snapshot is ~40 MB)."""

MAX_RUN_RECORDS: Final = 4_000_000
"""Most records one run may say it holds (a column written once is repeated ``n`` times when read)."""

PACK_CHUNK_ITEMS: Final = 4096
"""Items of a big list packed per call by ``pack_chunked``: each call holds the GIL, so a big image is packed
in slices of about a millisecond and the event loop keeps answering in between."""
PACK_CHUNK_RUNS: Final = 16
"""The same for runs (``wire_runs``), each up to a topic's partitions or a cluster's leaders: packing every run
of a million-partition image in one call would hold the GIL for a large part of a second."""


class CodecError(CorruptData, ValueError):
    """Bytes or values that are not a valid encoding of records."""


class Run(NamedTuple):
    """Records of one type as one full, checked column per field (``n`` values each)."""

    cls: type[Record]
    columns: Sequence[Sequence[Any]]
    n: int


RecordFields = tuple[type[Record], tuple[Any, ...]]
"""A record given as its type and its field values in declaration order (``cls(*fields)`` would build it)."""


# -- per record type, computed once ---------------------------------------------------------------------
_TYPE_BY_TAG: Final[dict[str, type[Record]]] = {cls.TYPE: cls for cls in RECORD_TYPES}
_FIELDS: Final[dict[type[Record], tuple[str, ...]]] = {
    cls: tuple(f.name for f in dataclasses.fields(cls)) for cls in RECORD_TYPES
}
_REQUIRED: Final[dict[type[Record], int]] = {
    cls: sum(
        1
        for f in dataclasses.fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    )
    for cls in RECORD_TYPES
}


def _getter(names: tuple[str, ...]) -> Callable[[Record], tuple[Any, ...]]:
    """A record's field values in declaration order, as a tuple (one C call)."""
    if not names:
        return lambda record: ()
    if len(names) == 1:
        one = operator.attrgetter(names[0])
        return lambda record: (one(record),)
    return operator.attrgetter(*names)


_GETTERS: Final[dict[type[Record], Callable[[Record], tuple[Any, ...]]]] = {
    cls: _getter(names) for cls, names in _FIELDS.items()
}
_COLUMN_GETTERS: Final = {cls: tuple(map(operator.attrgetter, _FIELDS[cls])) for cls in RECORD_TYPES}
_SLOTS: Final = {cls: tuple(cls.__dict__[name] for name in _FIELDS[cls]) for cls in RECORD_TYPES}
"""Each record type's fields as its slots' member descriptors, in declaration order."""
_SETTERS: Final = {cls: tuple(slot.__set__ for slot in slots) for cls, slots in _SLOTS.items()}

_STR: Final[tuple[type, ...]] = (str,)
_INT: Final[tuple[type, ...]] = (int,)
_BOOL: Final[tuple[type, ...]] = (bool,)


def _checks_for(cls: type[Record]) -> tuple[tuple[str, tuple[type, ...], bool], ...]:
    """(field, accepted types, nullable) for each str / int / bool field (a ``Literal`` of strings is a str),
    from the resolved type hints, so a new alias needs no entry here."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        args = typing.get_args(hint)
        nullable = isinstance(hint, UnionType) and type(None) in args
        if nullable and len(args) == 2:
            hint = args[0] if args[1] is type(None) else args[1]
        if typing.get_origin(hint) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(hint)):
            hint = str
        if hint is str:
            out.append((f.name, _STR, nullable))
        elif hint is int:
            out.append((f.name, _INT, nullable))
        elif hint is bool:
            out.append((f.name, _BOOL, nullable))
    return tuple(out)


_CHECKS: Final = {cls: _checks_for(cls) for cls in RECORD_TYPES}


def _field_types_for(cls: type[Record]) -> tuple[frozenset[type], ...] | None:
    """Per field, the exact Python types that msgpack returns unchanged and ``record_from_wire`` accepts:
    str, int, bool, and None where declared. None for a class with other kinds of fields (nested values)."""
    hints = typing.get_type_hints(cls)
    per_field: list[frozenset[type]] = []
    for f in dataclasses.fields(cls):
        hint = hints[f.name]
        allowed: tuple[type, ...] = ()
        args = typing.get_args(hint)
        if isinstance(hint, UnionType) and type(None) in args and len(args) == 2:
            allowed = (type(None),)
            hint = args[0] if args[1] is type(None) else args[1]
        if typing.get_origin(hint) is typing.Literal and all(isinstance(a, str) for a in typing.get_args(hint)):
            hint = str
        if hint not in (str, int, bool):
            return None
        per_field.append(frozenset((hint, *allowed)))
    return tuple(per_field)


_FIELD_TYPES: Final = {cls: _field_types_for(cls) for cls in RECORD_TYPES}


def _tuple_fields_for(cls: type[Record]) -> tuple[tuple[int, str, type], ...]:
    """(position, field, item type) of each ``tuple[str, ...]`` or ``tuple[int, ...]`` field: a list on the wire."""
    hints = typing.get_type_hints(cls)
    return tuple(
        (at, f.name, args[0])
        for at, f in enumerate(dataclasses.fields(cls))
        if typing.get_origin(hints[f.name]) is tuple
        and (args := typing.get_args(hints[f.name]))[1:] == (Ellipsis,)
        and args[0] in (str, int)
    )


_TUPLE_FIELDS: Final = {cls: spec for cls in RECORD_TYPES if (spec := _tuple_fields_for(cls))}


def _tuple_values(cls: type[Record], fields: Sequence[Any]) -> list[Any]:
    """``fields`` (in order) with each list field of ``cls`` as a tuple, each item exactly of its type."""
    values = list(fields)
    for at, name, item in (spec for spec in _TUPLE_FIELDS[cls] if spec[0] < len(values)):
        if not isinstance(values[at], list | tuple) or not set(map(type, values[at])) <= {item}:
            raise CodecError(f"{cls.TYPE}.{name} must be a list of {'strings' if item is str else 'integers'}")
        values[at] = tuple(values[at])
    return values


_COLUMNAR: Final[dict[type[Record], tuple[frozenset[type], ...]]] = {
    cls: types
    for cls, types in _FIELD_TYPES.items()
    if types  # plain values only (no nested field), and at least one field: map() needs a column
}
"""Record types written and read a column at a time (runs), with the exact types each field accepts."""
_RUN_SPECS: Final = {cls: (_SLOTS[cls], tuple(map(tuple, types))) for cls, types in _COLUMNAR.items()}
"""Per record type written as runs: its fields' slots (member descriptors) and the exact types each accepts,
as ``_take_run`` takes them."""


# -- one record -----------------------------------------------------------------------------------------
def record_to_wire(record: Record) -> list[Any]:
    """The row of one record (before msgpack)."""
    cls = type(record)
    values: list[Any] = [cls.TYPE, WIRE_VERSION]
    if isinstance(record, GroupGenerationStarted):
        members = [[m.member_id, [list(tp) for tp in m.assignment]] for m in record.members]
        values += [record.group, record.generation, members]
        return values
    values += _GETTERS[cls](record)
    return values


def record_from_wire(value: Any) -> Record:
    """Inverse of ``record_to_wire``; raises ``CodecError`` on anything malformed."""
    if not isinstance(value, list | tuple) or len(value) < 2:
        raise CodecError(f"a record must be a list [type, version, fields...], got {type(value).__name__}")
    tag = value[0]
    cls = _TYPE_BY_TAG.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise CodecError(f"unknown record type {tag!r}")
    names = _FIELDS[cls]
    if len(value) - 2 < _REQUIRED[cls]:
        raise CodecError(f"{tag} needs at least {_REQUIRED[cls]} fields, got {len(value) - 2}")
    fields = value[2 : 2 + len(names)]  # trailing fields from a newer writer are ignored
    try:
        if cls is GroupGenerationStarted:
            group, generation, members = fields
            return GroupGenerationStarted(
                group=group,
                generation=generation,
                members=tuple(GroupMember(member_id=m[0], assignment=tuple((t, p) for t, p in m[1])) for m in members),
            )
        if cls in _TUPLE_FIELDS:
            fields = _tuple_values(cls, fields)
        record = cls(*fields)
    except (TypeError, ValueError, IndexError) as e:
        raise CodecError(f"malformed {tag}: {e}") from e
    _check_types(record)
    return record


def record_to_dict(record: Record) -> dict[str, Any]:
    """JSON-ready field mapping of one record (the ``data`` of a log entry)."""
    if isinstance(record, GroupGenerationStarted):
        return {
            "group": record.group,
            "generation": record.generation,
            "members": [
                {"member_id": m.member_id, "assignment": [list(tp) for tp in m.assignment]} for m in record.members
            ],
        }
    values = {name: getattr(record, name) for name in _FIELDS[type(record)]}
    values.update((name, list(values[name])) for _at, name, _item in _TUPLE_FIELDS.get(type(record), ()))
    return values


def record_from_dict(type_tag: str, data: Mapping[str, Any]) -> Record:
    """Inverse of ``record_to_dict`` (used by HTTP followers reading the JSON form)."""
    cls = _TYPE_BY_TAG.get(type_tag)
    if cls is None:
        raise CodecError(f"unknown record type {type_tag!r}")
    if cls is GroupGenerationStarted:
        members = [[m["member_id"], m["assignment"]] for m in data.get("members", ())]
        return record_from_wire([type_tag, WIRE_VERSION, data.get("group"), data.get("generation"), members])
    names = _FIELDS[cls]
    missing = [n for n in names[: _REQUIRED[cls]] if n not in data]
    if missing:
        raise CodecError(f"{type_tag} is missing {', '.join(missing)}")
    values = {n: data[n] for n in names if n in data}
    if cls in _TUPLE_FIELDS:
        values = dict(zip(values, _tuple_values(cls, [values[n] for n in names if n in values]), strict=True))
    record = cls(**values)
    _check_types(record)
    return record


def _check_types(record: Record) -> None:
    """Reject values whose Python type disagrees with the annotation (msgpack is untyped)."""
    for name, types, nullable in _CHECKS[type(record)]:
        v = getattr(record, name)
        if type(v) in types:  # the usual case: exactly str / int (a bool is not an int here)
            continue
        if v is None:
            if nullable:
                continue
        elif isinstance(v, types) and (types is _BOOL or not isinstance(v, bool)):
            continue
        kind = "a string" if types is _STR else "a boolean" if types is _BOOL else "an integer"
        raise CodecError(f"{record.TYPE}.{name} must be {kind}{' or null' if nullable else ''}")


def _round_trips(records: Iterable[Record]) -> bool:
    """Whether ``decode(encode(records))`` gives back records equal to these, field values of the same
    exact types: every field a plain str / int / bool / None of its declared type. (A bool in an int
    field, a str subclass or a nested value does not qualify: decoding would refuse or change it.)"""
    for record in records:
        cls = type(record)
        types = _FIELD_TYPES[cls]
        try:  # a record with list fields: whether it decodes to itself
            if types is None and (cls not in _TUPLE_FIELDS or record_from_wire(record_to_wire(record)) != record):
                return False
        except CodecError:
            return False
        if types is not None and not all(map(operator.contains, types, map(type, _GETTERS[cls](record)))):
            return False
    return True


# -- msgpack ----------------------------------------------------------------------------------------------
def pack(value: Any) -> bytes:
    """msgpack with the settings used everywhere in kfed."""
    return msgpack.packb(value, use_bin_type=True)


def pack_chunked(value: Mapping[str, Any], chunk_items: int = PACK_CHUNK_ITEMS) -> bytes:
    """``pack(value)``, byte for byte, for a map with huge lists (or iterators) among its values (an image's
    records), packed ``chunk_items`` items per call, the whole list never held. msgpack packs in one C call that
    holds the GIL: for a 1M-partition image ~0.5 s in which the Raft thread sends no heartbeat, long enough for
    its followers to elect another leader. Between calls the interpreter hands the GIL over."""
    packer = msgpack.Packer(use_bin_type=True)
    parts = [packer.pack_map_header(len(value))]
    for key, item in value.items():
        parts.append(packer.pack(key))
        if not isinstance(item, list | Iterator) or (isinstance(item, list) and len(item) <= chunk_items):
            parts.append(packer.pack(item))
            continue
        items, header_at, count = iter(item), len(parts), 0
        while chunk := list(itertools.islice(items, chunk_items)):
            packed = packer.pack(chunk)
            parts.append(packed[len(packer.pack_array_header(len(chunk))) :])  # the items, without their header
            count += len(chunk)
        parts.insert(header_at, packer.pack_array_header(count))
    return b"".join(parts)


def unpack(data: bytes, max_bytes: int | None = None) -> Any:
    """msgpack decode of at most ``max_bytes`` (``MAX_DECODE_BYTES``); ``CodecError`` for anything malformed."""
    if len(data) > (limit := MAX_DECODE_BYTES if max_bytes is None else max_bytes):
        raise CodecError(f"payload of {len(data)} bytes exceeds {limit}")
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise CodecError(f"malformed msgpack: {e}") from e


def encode(records: Iterable[Record]) -> bytes:
    """msgpack bytes of a sequence of records, as rows."""
    return pack([record_to_wire(r) for r in records])


def decode(data: bytes) -> list[Record]:
    """Records from ``encode`` output; ``CodecError`` on malformed or oversize input."""
    if not isinstance(values := unpack(data), list):
        raise CodecError(f"expected a list of records, got {type(values).__name__}")
    return [record_from_wire(v) for v in values]


# -- columns ------------------------------------------------------------------------------------------------
def record_columns(records: Iterable[Record], cls: type[Record]) -> list[list[Any]]:
    """The field columns of records of type ``cls``, as the decoders give them in a ``Run``."""
    records = records if isinstance(records, list | tuple) else list(records)
    return [list(map(get, records)) for get in _COLUMN_GETTERS[cls]]


def build_records(cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> list[Record]:
    """``n`` records of type ``cls`` from one checked column per field (every field, in order), each
    stored through the field's slot a column at a time (``map`` in C): no Python call per record, where
    ``map(cls, *columns)`` runs ``__init__`` once each (0.6 against 0.9 µs per ``PartitionsAdded``). The
    same objects ``cls(*row)`` makes: ``__init__`` only stores the fields."""
    records: list[Record] = list(map(object.__new__, itertools.repeat(cls, n)))
    for set_field, column in zip(_SETTERS[cls], columns, strict=True):
        collections.deque(map(set_field, records, column), maxlen=0)
    return records


def records_of(items: Iterable[Run | Record]) -> list[Record]:
    """The records of decoded items, in order: each run's built (``build_records``)."""
    out: list[Record] = []
    for item in items:
        if isinstance(item, Run):
            out += build_records(*item)
        else:
            out.append(item)
    return out


def _column_of(values: Iterable[Any], types: frozenset[type]) -> bool:
    """Whether there is a value and every value is exactly of one of ``types`` (a bool is no int here)."""
    kinds = set(map(type, values))
    return bool(kinds) and kinds <= types


# -- rows (metadata version 1) --------------------------------------------------------------------------
def encode_rows(records: Iterable[Record]) -> tuple[list[Any], bool]:
    """The rows of ``records`` (``record_to_wire`` of each) and whether they all round-trip (decode to equal
    records of the same exact field types), in one pass. Runs of a type with plain fields only go a column
    at a time, without a Python call per record (their rows are tuples, which msgpack writes as the same
    arrays)."""
    rows: list[Any] = []
    exact = True
    for cls, group in itertools.groupby(records, type):
        run = list(group)
        types = _COLUMNAR.get(cls)
        if types is not None:
            columns = record_columns(run, cls)
            exact = exact and all(map(_column_of, columns, types))
            rows += zip(itertools.repeat(run[0].TYPE), itertools.repeat(WIRE_VERSION), *columns)
        else:
            rows += map(record_to_wire, run)
            exact = exact and _round_trips(run)
    return rows, exact


def decode_rows(rows: Iterable[Any]) -> Iterator[Run | Record]:
    """The records of ``encode_rows`` output, in order: each run of well-formed rows of one type whose fields
    are all plain values (``PartitionsAdded`` of a topic creation, ``PartitionStateChanged`` of a shrink...)
    as a ``Run`` checked a column at a time, every other row as its record. ``CodecError`` for anything
    malformed (``record_from_wire`` says what is wrong with a row)."""
    for group, columns in _wire_groups(rows):
        if columns is None:
            yield from map(record_from_wire, group)
        else:
            yield Run(_TYPE_BY_TAG[group[0][0]], columns, len(group))


def _wire_groups(rows: Iterable[Any]) -> Iterator[tuple[list[Any], tuple[Sequence[Any], ...] | None]]:
    """The rows, in order, as consecutive groups of one tag: a run that ``_run_columns`` accepts comes with
    its field columns; any other group (an odd row, a type with nested fields) with None, to be decoded
    row by row."""
    rows = rows if isinstance(rows, list) else list(rows)
    if set(map(type, rows)) != {list} or not all(rows):  # something other than non-empty lists: no grouping
        yield rows, None
        return
    for tag, group in itertools.groupby(rows, _TAG):
        run = list(group)
        yield run, _run_columns(tag, run)


_TAG: Final = operator.itemgetter(0)


def _run_columns(tag: Any, rows: list[Any]) -> tuple[Sequence[Any], ...] | None:
    """The field columns of rows of record type ``tag``, when its fields are all plain values (``_COLUMNAR``)
    and every row is exactly ``[tag, version, *fields]`` of the declared types, None where a field is
    nullable; None when any row differs, for the caller to decode row by row."""
    types = _COLUMNAR.get(_TYPE_BY_TAG.get(tag)) if isinstance(tag, str) else None  # type: ignore[arg-type]  # None: no entry
    if types is None or not rows or set(map(len, rows)) != {2 + len(types)}:
        return None
    _tags, _versions, *columns = zip(*rows, strict=True)
    return tuple(columns) if all(map(_column_of, columns, types)) else None


# -- runs (metadata version 2) --------------------------------------------------------------------------
def encode_runs(records: Iterable[Record]) -> tuple[list[Any], list[Run | Record], bool]:
    """The records as runs, the same records as ``decode_runs`` gives them back (each run as a ``Run`` of
    its full columns, every other record as itself: what a proposer applies, not decoding its own command),
    and whether they all round-trip. Each run is taken in one pass (``_take_run``): this is the leader's
    work per command."""
    records = records if type(records) is tuple else tuple(records)  # what _take_run reads: it cannot change
    items: list[Any] = []
    read_back: list[Run | Record] = []
    exact = True
    at = 0
    while at < len(records):
        record = records[at]
        cls = type(record)
        spec = _RUN_SPECS.get(cls)
        if spec is not None and at + 1 < len(records) and type(records[at + 1]) is cls:
            stop, columns, typed, same = _take_run(records, at, cls, *spec)
            n = stop - at
            items.append(_run_wire(cls, columns, same, n))
            read_back.append(Run(cls, columns, n))
            exact = exact and all(typed)
            at = stop
            continue
        items.append(record_to_wire(record))
        read_back.append(record)
        exact = exact and _round_trips((record,))
        at += 1
    return items, read_back, exact


def decode_runs(items: Any) -> Iterator[Run | Record]:
    """The records of ``encode_runs`` output, in order: each well-formed run as a ``Run``, every other item
    as its record(s). A run is checked a column at a time; one whose values do not all have their field's
    exact type (or that comes from a newer writer, with more columns) is decoded row by row, so the error
    is ``record_from_wire``'s. ``CodecError`` for anything malformed."""
    if not isinstance(items, list):
        raise CodecError(f"runs must be a list, got {type(items).__name__}")
    for item in items:
        if not isinstance(item, list) or not item or type(item[0]) is not int:
            yield record_from_wire(item)
            continue
        if len(item) < 4:
            raise CodecError(f"a run is [n, type, version, *columns], got {len(item)} items")
        n, tag, *rest = item
        cls = _TYPE_BY_TAG.get(tag) if isinstance(tag, str) else None
        if cls is None or not 1 <= n <= MAX_RUN_RECORDS or not rest:
            raise CodecError(f"malformed run of {n!r} records of type {tag!r}")
        version, *columns = rest
        if not columns or not all(isinstance(c, list) and len(c) in (1, n) for c in columns):
            raise CodecError(f"a run of {n} {tag} needs a column per field, each a list of 1 or {n} values")
        types = _COLUMNAR.get(cls)
        if types is not None and len(columns) == len(types) and all(map(_column_of, columns, types)):
            yield Run(cls, [c * n if len(c) == 1 else c for c in columns], n)
        else:
            full = (c * n if len(c) == 1 else c for c in columns)
            yield from (record_from_wire([tag, version, *row]) for row in zip(*full, strict=True))


def _run_item(cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> tuple[list[Any], bool]:
    """The run ``[n, type, version, *columns]`` of ``n`` records of type ``cls`` (in ``_COLUMNAR``) given as
    columns, and whether every value has its field's exact type. Only such columns are shortened to their
    one value when all are equal: ``True == 1``, yet a bool is no int."""
    typed = list(map(_column_of, columns, _COLUMNAR[cls]))
    same = [ok and c.count(c[0]) == n for c, ok in zip(columns, typed, strict=True)]
    return _run_wire(cls, columns, same, n), all(typed)


def _run_wire(cls: type[Record], columns: Sequence[Sequence[Any]], same: Sequence[bool], n: int) -> list[Any]:
    """The run ``[n, type, version, *columns]``, each column marked ``same`` (its values all equal, and of
    its field's exact type) written as its one value."""
    return [n, cls.TYPE, WIRE_VERSION, *([c[0]] if one else c for c, one in zip(columns, same, strict=True))]


def _take_run_py(
    records: tuple[Record, ...],
    start: int,
    cls: type[Record],
    members: tuple[Any, ...],
    types: tuple[tuple[type, ...], ...],
) -> tuple[int, list[list[Any]], list[bool], list[bool]]:
    """``take_run`` of ``metadata_log/_columns.c`` (see its comment) in Python, for when it was not built:
    where the records of type ``cls`` from ``start`` on stop, their field columns, whether each column's
    values all have one of the field's exact ``types``, and whether, in addition, they are all equal."""
    if not 0 <= start < len(records) or type(records[start]) is not cls:
        raise ValueError(f"take_run: records[{start}] is not a {cls.__name__}")
    stop = start + 1
    while stop < len(records) and type(records[stop]) is cls:
        stop += 1
    run = records[start:stop]
    columns = [list(map(member.__get__, run)) for member in members]
    typed = [set(map(type, column)) <= set(accepted) for column, accepted in zip(columns, types, strict=True)]
    same = [ok and column.count(column[0]) == len(column) for column, ok in zip(columns, typed, strict=True)]
    return stop, columns, typed, same


_TakeRun = Callable[
    [tuple[Record, ...], int, type[Record], tuple[Any, ...], tuple[tuple[type, ...], ...]],
    tuple[int, list[list[Any]], list[bool], list[bool]],
]
_take_run: _TakeRun
try:
    from ._columns import take_run as _take_run
except ImportError:  # built at install when a C compiler is there; the same, slower, without
    _take_run = _take_run_py


# -- an image's records, written without record objects --------------------------------------------------
def wire_rows(records: Iterable[RecordFields]) -> Iterator[list[Any]]:
    """The rows of records given as (type, field values): what ``encode_rows`` writes for them."""
    for cls, fields in records:
        if cls is GroupGenerationStarted:
            yield record_to_wire(cls(*fields))
        else:
            yield [cls.TYPE, WIRE_VERSION, *fields]


def wire_runs(records: Iterable[RecordFields]) -> list[Any]:
    """The runs of records given as (type, field values): what ``encode_runs`` writes for them."""
    items: list[Any] = []
    for cls, group in itertools.groupby(records, _TAG):
        rows = [fields for _cls, fields in group]
        if cls in _COLUMNAR and len(rows) > 1:
            items.append(_run_item(cls, list(map(list, zip(*rows, strict=True))), len(rows))[0])
        else:
            items += wire_rows((cls, fields) for fields in rows)
    return items
