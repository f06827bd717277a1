"""The one codec of the metadata log: records <-> msgpack, and records <-> JSON-ready dicts.

Wire form of a record: ``[type, version, field0, field1, ...]`` in declaration order. Positional fields
keep 1M-partition snapshots small; compatibility comes from the append-only field rule: a reader fills
missing trailing fields from their defaults and ignores trailing fields it does not know yet.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import gc
import itertools
import operator
import threading
import typing
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import UnionType
from typing import Any, Final, NamedTuple

import msgpack

from .errors import CorruptData
from .records import RECORD_TYPES, GroupGenerationStarted, GroupMember, PartitionsAdded, Record

WIRE_VERSION: Final = 0

MAX_DECODE_BYTES: Final = 64 * 1024 * 1024
"""Largest msgpack blob decode() accepts (a 1M-partition snapshot is ~40 MB)."""


class CodecError(CorruptData, ValueError):
    """Bytes or values that are not a valid encoding of records."""


TYPE_BY_TAG: Final[dict[str, type[Record]]] = {cls.TYPE: cls for cls in RECORD_TYPES}
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


def record_to_wire(record: Record) -> list[Any]:
    """The positional list form of one record (before msgpack)."""
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
    cls = TYPE_BY_TAG.get(tag) if isinstance(tag, str) else None
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
        record = cls(*fields)
    except (TypeError, ValueError, IndexError) as e:
        raise CodecError(f"malformed {tag}: {e}") from e
    _check_types(record)
    return record


def records_from_wire(rows: Iterable[Any]) -> list[Record]:
    """``record_from_wire`` of each row. Runs of well-formed rows of one record type whose fields are all
    plain values (``PartitionsAdded`` of every topic creation, the ``PartitionStateChanged`` of a shrink or
    a deletion, ...) are checked a column at a time (``wire_groups``) and built by ``map``, with no Python
    loop over the rows."""
    out: list[Record] = []
    for group, columns in wire_groups(rows):
        out += (
            map(record_from_wire, group)
            if columns is None
            else build_records(TYPE_BY_TAG[group[0][0]], columns, len(group))
        )
    return out


_SLOTS: Final = {cls: tuple(cls.__dict__[name] for name in _FIELDS[cls]) for cls in RECORD_TYPES}
"""Each record type's fields as its slots' member descriptors, in declaration order."""
_SETTERS: Final = {cls: tuple(slot.__set__ for slot in slots) for cls, slots in _SLOTS.items()}


def build_records(cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> list[Record]:
    """``n`` records of type ``cls`` from one checked column per field (every field, in order), each
    stored through the field's slot a column at a time (``map`` in C): no Python call per record, where
    ``map(cls, *columns)`` runs ``__init__`` once each (0.6 against 0.9 µs per ``PartitionsAdded``). The
    same objects ``cls(*row)`` makes: ``__init__`` only stores the fields."""
    records: list[Record] = list(map(object.__new__, itertools.repeat(cls, n)))
    for set_field, column in zip(_SETTERS[cls], columns, strict=True):
        collections.deque(map(set_field, records, column), maxlen=0)
    return records


def records_to_runs(records: Iterable[Record]) -> tuple[list[Any], bool]:
    """The records as *runs* (metadata version 2 commands), and whether they all ``round_trips``.

    Consecutive records of one type of ``_COLUMNAR`` go as one run ``[n, type, version, *columns]``: a
    column per field, holding its ``n`` values, or just one when all ``n`` are equal (the topic of a
    topic's partitions, its cluster...). Any other record is its ``record_to_wire`` row ``[type, version,
    *fields]``; a row starts with a string, a run with its length. A 500-partition topic is ~2 KB instead of
    ~30 KB of rows, and each repeated string is decoded once."""
    items, _read_back, exact = encode_runs(records)
    return items, exact


def encode_runs(records: Iterable[Record]) -> tuple[list[Any], list[Run | Record], bool]:
    """``records_to_runs``, and in between the records as ``read_runs`` gives them back from it: each run as
    a ``Run`` of its full columns, every other record as itself (what a proposer applies, not decoding its
    own command). Each run is taken in one pass (``take_run``): this is the leader's work per command."""
    records = records if type(records) is tuple else tuple(records)  # what take_run reads: it cannot change
    items: list[Any] = []
    read_back: list[Run | Record] = []
    exact = True
    at = 0
    while at < len(records):
        record = records[at]
        cls = type(record)
        spec = _RUN_SPECS.get(cls)
        if spec is not None and at + 1 < len(records) and type(records[at + 1]) is cls:
            stop, columns, typed, same = take_run(records, at, cls, *spec)
            n = stop - at
            items.append(_run_wire(cls, columns, same, n))
            read_back.append(Run(cls, columns, n))
            exact = exact and all(typed)
            at = stop
            continue
        items.append(record_to_wire(record))
        read_back.append(record)
        exact = exact and round_trips((record,))
        at += 1
    return items, read_back, exact


def run_item(cls: type[Record], columns: Sequence[Sequence[Any]], n: int) -> tuple[list[Any], bool]:
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


MAX_RUN_RECORDS: Final = 4_000_000
"""Most records one run may say it holds: a column written once is repeated ``n`` times when read, so ``n``
is bounded like the bytes are (the largest real run is one topic's partitions or one cluster's leaders)."""


class Run(NamedTuple):
    """A run read back by ``read_runs``: its record type and one full, checked column per field."""

    cls: type[Record]
    columns: list[list[Any]]
    n: int


def read_runs(items: Any) -> Iterator[Run | Record]:
    """The items of ``records_to_runs`` output, in order: each well-formed run as a ``Run``, every other item
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
        cls = TYPE_BY_TAG.get(tag) if isinstance(tag, str) else None
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


def records_from_runs(items: Any) -> list[Record]:
    """Inverse of ``records_to_runs`` (see ``read_runs``)."""
    return records_of(read_runs(items))


def records_of(items: Iterable[Run | Record]) -> list[Record]:
    """The records of ``read_runs`` output: each run's built (``build_records``), in order."""
    out: list[Record] = []
    for item in items:
        if isinstance(item, Run):
            out += build_records(*item)
        else:
            out.append(item)
    return out


def wire_groups(rows: Iterable[Any]) -> Iterator[tuple[list[Any], tuple[Sequence[Any], ...] | None]]:
    """The rows, in order, as consecutive groups of one tag: a run that ``run_columns`` accepts comes with
    its field columns; any other group (an odd row, a type with nested fields) with None, for
    the caller to decode row by row (``record_from_wire`` says what is wrong with a row)."""
    rows = rows if isinstance(rows, list) else list(rows)
    if not (only_type(rows, list) and all(rows)):  # something other than non-empty lists: no grouping by tag
        yield rows, None
        return
    for tag, group in itertools.groupby(rows, _TAG):
        run = list(group)
        yield run, run_columns(tag, run)


_TAG: Final = operator.itemgetter(0)


def only_type(values: Iterable[Any], cls: type) -> bool:
    """Whether every value is exactly of type ``cls`` (not a subclass: a bool is no int here) and there is
    at least one. One pass in C."""
    return set(map(type, values)) == {cls}


def run_columns(tag: Any, rows: list[Any]) -> tuple[Sequence[Any], ...] | None:
    """The field columns of wire rows of record type ``tag``, when its fields are all plain values
    (``_COLUMNAR``) and every row is exactly ``[tag, version, *fields]`` of the declared types, None where a
    field is nullable (what ``encode`` writes); None when any row differs, for the caller to decode row by
    row. For ``PartitionsAdded``: (topic, partition, cluster_id, physical_topic, physical_partition)."""
    types = _COLUMNAR.get(TYPE_BY_TAG.get(tag)) if isinstance(tag, str) else None  # type: ignore[arg-type]  # None: no entry
    if types is None or not rows or set(map(len, rows)) != {2 + len(types)}:
        return None
    _tags, _versions, *columns = zip(*rows, strict=True)
    return tuple(columns) if all(map(_column_of, columns, types)) else None


_STR: Final[tuple[type, ...]] = (str,)
_INT: Final[tuple[type, ...]] = (int,)
_BOOL: Final[tuple[type, ...]] = (bool,)


def _checks_for(cls: type[Record]) -> tuple[tuple[str, tuple[type, ...], bool], ...]:
    """(field, accepted types, nullable) for each str / int / bool field (a ``Literal`` of strings is a str),
    from the resolved type hints, so a new alias needs no entry here (computed once)."""
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


def _field_types_for(cls: type[Record]) -> tuple[frozenset[type], ...] | None:
    """Per field, the exact Python types that msgpack returns unchanged and ``record_from_wire`` accepts:
    str, int, bool, and None where declared. None for a class with other kinds of fields (nested values).
    Computed once per class."""
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
_COLUMNAR: Final[dict[type[Record], tuple[frozenset[type], ...]]] = {
    cls: types
    for cls, types in _FIELD_TYPES.items()
    if types  # plain values only (no nested field), and at least one field: map() needs a column
}
"""Record types decoded a column at a time (``run_columns``), with the exact types each field accepts."""
COLUMNAR_TYPES: Final = frozenset(_COLUMNAR)


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


TakeRun = Callable[
    [tuple[Record, ...], int, type[Record], tuple[Any, ...], tuple[tuple[type, ...], ...]],
    tuple[int, list[list[Any]], list[bool], list[bool]],
]
take_run: TakeRun
try:
    from ._columns import take_run
except ImportError:  # built at install when a C compiler is there; the same, slower, without
    take_run = _take_run_py

_RUN_SPECS: Final = {cls: (_SLOTS[cls], tuple(map(tuple, types))) for cls, types in _COLUMNAR.items()}
"""Per record type written as runs: its fields' slots (member descriptors) and the exact types each accepts,
as ``take_run`` takes them."""


def _column_of(values: Iterable[Any], types: frozenset[type]) -> bool:
    """Whether there is a value and every value is exactly of one of ``types`` (a bool is no int here)."""
    kinds = set(map(type, values))
    return bool(kinds) and kinds <= types


def round_trips(records: Iterable[Record]) -> bool:
    """Whether ``decode(encode(records))`` gives back records equal to these, field values of the same
    exact types: every field a plain str / int / bool / None of its declared type. (A bool in an int
    field, a str subclass or a nested value does not qualify: decoding would refuse or change it.)"""
    for record in records:
        cls = type(record)
        types = _FIELD_TYPES[cls]
        if types is None or not all(map(operator.contains, types, map(type, _GETTERS[cls](record)))):
            return False
    return True


_COLUMN_GETTERS: Final = {cls: tuple(map(operator.attrgetter, _FIELDS[cls])) for cls in RECORD_TYPES}


def record_columns(records: Iterable[Record], cls: type[Record] = PartitionsAdded) -> list[list[Any]]:
    """The field columns of records of type ``cls``, as ``run_columns`` gives them for rows."""
    records = records if isinstance(records, list | tuple) else list(records)
    return [list(map(get, records)) for get in _COLUMN_GETTERS[cls]]


def records_to_wire(records: Iterable[Record]) -> tuple[list[Any], bool]:
    """The wire rows of ``records`` (``record_to_wire`` of each) and whether they all ``round_trips``, in
    one pass. Runs of a type that ``run_columns`` decodes go a column at a time, without a Python call per
    record (their rows are tuples, which msgpack writes as the same arrays)."""
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
            exact = exact and round_trips(run)
    return rows, exact


def encode(records: Iterable[Record]) -> bytes:
    """msgpack bytes of a sequence of records."""
    return pack([record_to_wire(r) for r in records])


def decode(data: bytes) -> list[Record]:
    """Records from ``encode`` output; ``CodecError`` on malformed or oversize input."""
    values = unpack(data)
    if not isinstance(values, list):
        raise CodecError(f"expected a list of records, got {type(values).__name__}")
    return [record_from_wire(v) for v in values]


_gc_pauses = 0
_gc_lock = threading.Lock()
_gc_was_enabled = False


@contextlib.contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a whole image or snapshot is encoded or decoded.

    Those build or walk millions of objects, and CPython's collector runs again and again as they pile up,
    each pass longer than the last: measured on a 1,000,620-partition snapshot, ``unpack`` 1.59 -> 0.75 s and
    ``image_from_wire`` 4.11 -> 2.63 s. Nothing they build is a cycle to collect. Process-wide (the collector
    is), nestable and thread-safe: collection resumes when the last pause ends, if it was on before."""
    global _gc_pauses, _gc_was_enabled
    with _gc_lock:
        if _gc_pauses == 0:
            _gc_was_enabled = gc.isenabled()
            gc.disable()
        _gc_pauses += 1
    try:
        yield
    finally:
        with _gc_lock:
            _gc_pauses -= 1
            if _gc_pauses == 0 and _gc_was_enabled:
                gc.enable()


def freeze_survivors(collect: bool = True) -> bool:
    """Collect (``collect``), then move every object still alive to the collector's permanent generation.

    A node holds a big image as millions of immutable objects that every full collection walks again
    (``PartitionImage`` tuples stay tracked: CPython untracks only exact tuples): 0.35-0.66 s per pass
    with 1M partitions, and CPython runs one each time the surviving objects grew by a quarter. Such a
    pause costs a leader its leadership. Frozen objects are still freed by reference counting once no
    image holds them; what freezing gives up is finding *cycles* among them, and the image, its records
    and the log window form none. Skipped (False) while a ``gc_paused`` section runs on another thread:
    the collection would walk what it is building."""
    with _gc_lock:
        if _gc_pauses:
            return False
    if collect:
        gc.collect()
    gc.freeze()
    return True


def pack(value: Any) -> bytes:
    """msgpack with the settings used everywhere in kfed."""
    return msgpack.packb(value, use_bin_type=True)


PACK_CHUNK_ITEMS: Final = 4096
"""Items of a big list packed per call by ``pack_chunked``: ~1 ms of holding the GIL for 4,096 partition rows."""
PACK_CHUNK_RUNS: Final = 16
"""The same for runs (``image_to_runs``), each up to a topic's partitions or a cluster's leaders: up to 1.5 ms
each at 1M partitions, where all 2,082 runs in one call held the GIL for 0.4 s."""


def pack_chunked(value: Mapping[str, Any], chunk_items: int = PACK_CHUNK_ITEMS) -> bytes:
    """``pack(value)``, byte for byte, for a map with huge lists among its values (an image's records),
    packed ``chunk_items`` items per call. A value may also be an iterator, packed as the list of what it
    yields, taken ``chunk_items`` at a time: the whole list is never held.

    msgpack packs in one C call that holds the GIL throughout: for a 1M-partition image that is ~0.5 s in
    which the node's Raft thread cannot send a heartbeat, long enough for its followers to elect another
    leader. Between calls the interpreter hands the GIL over."""
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


def unpack(data: bytes) -> Any:
    """msgpack decode with bounded sizes; ``CodecError`` for anything malformed."""
    if len(data) > MAX_DECODE_BYTES:
        raise CodecError(f"payload of {len(data)} bytes exceeds {MAX_DECODE_BYTES}")
    try:
        return msgpack.unpackb(data, raw=False, use_list=True, strict_map_key=True)
    except (msgpack.UnpackException, ValueError, TypeError) as e:
        raise CodecError(f"malformed msgpack: {e}") from e


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
    return {name: getattr(record, name) for name in _FIELDS[type(record)]}


def record_from_dict(type_tag: str, data: Mapping[str, Any]) -> Record:
    """Inverse of ``record_to_dict`` (used by HTTP followers reading the JSON form)."""
    cls = TYPE_BY_TAG.get(type_tag)
    if cls is None:
        raise CodecError(f"unknown record type {type_tag!r}")
    if cls is GroupGenerationStarted:
        members = [[m["member_id"], m["assignment"]] for m in data.get("members", ())]
        return record_from_wire([type_tag, WIRE_VERSION, data.get("group"), data.get("generation"), members])
    names = _FIELDS[cls]
    missing = [n for n in names[: _REQUIRED[cls]] if n not in data]
    if missing:
        raise CodecError(f"{type_tag} is missing {', '.join(missing)}")
    record = cls(**{n: data[n] for n in names if n in data})
    _check_types(record)
    return record
