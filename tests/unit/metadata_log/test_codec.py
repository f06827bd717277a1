from __future__ import annotations

import contextlib
import dataclasses
import gc
import sys
from collections.abc import Iterable

import msgpack
import pytest
from hypothesis import given
from hypothesis import strategies as st

from metadata_log import codec
from metadata_log.codec import (
    CodecError,
    decode,
    decode_rows,
    decode_runs,
    encode,
    encode_rows,
    encode_runs,
    pack,
    record_from_dict,
    record_from_wire,
    record_to_dict,
    record_to_wire,
    records_of,
)
from metadata_log.heap import gc_paused
from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.records import (
    RECORD_TYPES,
    ClusterFenced,
    ClusterRegistered,
    PartitionsAdded,
    PartitionStateChanged,
    PhysicalPartitionsReported,
    Record,
    TopicCreated,
)
from metadata_log.views import partition_view, topic_view
from tests.unit.samples import ONE_OF_EACH


def test_every_record_type_is_in_the_samples() -> None:
    assert {type(r) for r in ONE_OF_EACH} == set(RECORD_TYPES)


def test_round_trip_bytes() -> None:
    assert decode(encode(ONE_OF_EACH)) == ONE_OF_EACH


def test_round_trip_json_form() -> None:
    for record in ONE_OF_EACH:
        assert record_from_dict(record.TYPE, record_to_dict(record)) == record


def test_missing_trailing_field_takes_its_default() -> None:
    wire = record_to_wire(TopicCreated("id", "t", "r1", 5))
    assert record_from_wire(wire[:-1]) == TopicCreated("id", "t", "r1", None)


def test_unknown_trailing_fields_from_a_newer_writer_are_ignored() -> None:
    wire = [*record_to_wire(PartitionsAdded("t", 0, "c1", "t", 0)), "a field from v1"]
    assert record_from_wire(wire) == PartitionsAdded("t", 0, "c1", "t", 0)


@pytest.mark.parametrize(
    "value, message",
    [
        (["NoSuchType", 0], "unknown record type"),
        (["PartitionsAdded", 0, "t"], "needs at least"),
        (["PartitionsAdded", 0, "t", "zero", "c1", "t", 0], "must be an integer"),
        (["ClusterRegistered", 0, 1, "r1", "x:1"], "must be a string"),
        (["ClusterStateChanged", 0, "c1", 5], "state must be a string"),  # a Literal of strings
        (["TopicCreated", 0, "i", "t", "r1", "5"], "retention_ms must be an integer or null"),
        ("not a list", "must be a list"),
    ],
)
def test_malformed_records_are_refused(value: object, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        record_from_wire(value)


@given(st.binary(max_size=200))
def test_arbitrary_bytes_never_crash_the_decoder(data: bytes) -> None:
    with contextlib.suppress(CodecError):
        decode(data)


@given(st.lists(st.sampled_from(ONE_OF_EACH), max_size=30))
def test_any_sequence_round_trips(records: list) -> None:
    assert decode(encode(records)) == records


def test_bools_are_not_integers() -> None:
    wire = record_to_wire(PartitionsAdded("t", 0, "c1", "t", 0))
    wire[3] = True
    with pytest.raises(CodecError):
        record_from_wire(wire)


def test_positional_wire_is_compact() -> None:
    # A 1M-partition snapshot is dominated by PartitionsAdded; keep its encoding small.
    size = len(msgpack.packb(record_to_wire(PartitionsAdded("topic-0001", 999, "c-42", "topic-0001", 999))))
    assert size < 60
    assert all(dataclasses.is_dataclass(t) for t in RECORD_TYPES)


def test_topic_view_matches_partition_view_of_each_partition() -> None:
    image = apply(
        EMPTY_IMAGE,
        [
            ClusterRegistered("c1", "eu", "h:1"),
            ClusterRegistered("c2", "eu", "h:2"),
            TopicCreated("t1", "a", "eu"),
            *(PartitionsAdded("a", i, "c1" if i < 3 else "c2", "a", i) for i in range(6)),
            PartitionStateChanged("a", 1, "read_only"),
            PhysicalPartitionsReported("c1", "a", 0, "broker:1"),
            ClusterFenced("c2", "probe failed", 5),
        ],
    )
    topic = image.topics["a"]
    view = topic_view(image, topic)
    assert view["partitions"] == [partition_view(image, p) for p in topic.partitions]
    assert [p["writable"] for p in view["partitions"]] == [True, False, True, False, False, False]
    assert view["partitions"][0]["leader"] == "broker:1"


def test_records_from_wire_fast_path_agrees_with_record_from_wire() -> None:
    rows: list[list[object]] = [
        ["PartitionsAdded", 0, "t", 3, "c1", "t", 7],
        ["PartitionsAdded", 0, "t", 3, "c1", "t", 7, "a field from a newer writer"],
        ["ClusterRegistered", 0, "c1", "eu", "h:1"],
    ]
    assert records_of(decode_rows(rows)) == [record_from_wire(r) for r in rows]
    for bad in (
        ["PartitionsAdded", 0, "t", True, "c1", "t", 7],  # a bool is not an int
        ["PartitionsAdded", 0, "t", 3, None, "t", 7],
        ["PartitionsAdded", 0, "t", 3, "c1", "t", 7.0],
        ["PartitionsAdded", 0, "t", 3, "c1", "t"],
    ):
        with pytest.raises(CodecError):
            records_of(decode_rows([bad]))


def test_gc_paused_nests_and_restores_the_collector_as_it_found_it() -> None:
    assert gc.isenabled()
    with gc_paused():
        assert not gc.isenabled()
        with gc_paused():
            assert not gc.isenabled()
        assert not gc.isenabled(), "an inner pause ending does not resume collection"
    assert gc.isenabled()
    gc.disable()
    try:
        with gc_paused():
            pass
        assert not gc.isenabled(), "a collector that was off stays off"
    finally:
        gc.enable()
    with contextlib.suppress(ValueError), gc_paused():
        raise ValueError("boom")
    assert gc.isenabled()


@pytest.mark.parametrize("record", ONE_OF_EACH, ids=lambda r: type(r).__name__)
def test_records_build_by_position_and_keyword_and_stay_frozen(record: object) -> None:
    cls = type(record)
    values = {f.name: getattr(record, f.name) for f in dataclasses.fields(record)}  # type: ignore[arg-type]
    assert cls(*values.values()) == record == cls(**values) == dataclasses.replace(record)  # type: ignore[type-var]
    assert hash(cls(*values.values())) == hash(record)
    for name in values:
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(record, name, None)
    with pytest.raises(TypeError):
        cls(*values.values(), "one too many")


@pytest.mark.parametrize("length", [0, 1, 3, 4, 7, 15, 16, 17, 40, 70_000])
def test_chunked_packing_gives_the_same_bytes(monkeypatch: pytest.MonkeyPatch, length: int) -> None:
    """Dumps and snapshots are packed a slice at a time (the GIL is handed over between slices); the bytes
    must be exactly msgpack's: array headers of every size class, nested values, other keys around."""
    monkeypatch.setattr(codec, "PACK_CHUNK_ITEMS", 3 if length < 1000 else 4096)
    records = [["PartitionsAdded", 0, f"t{i}", i, "c1", f"t{i}", i % 7, b"\x00" * (i % 3)] for i in range(length)]
    value = {"offset": length - 1, "records": records, "keys": [["k", None, "committed", 1, 2, ""]], "raft": {"a": [1]}}
    assert codec.pack_chunked(value) == msgpack.packb(value, use_bin_type=True)
    assert codec.unpack(codec.pack_chunked(value)) == value


def test_records_from_wire_agrees_with_record_from_wire_on_mixed_runs() -> None:
    rows: list[object] = [
        ["ClusterRegistered", 0, "c1", "eu", "h:1"],
        *(["PartitionsAdded", 0, "t", i, "c1", "t", i] for i in range(5)),
        ["PartitionsAdded", 0, "u", 0, "c1", "u", 0],
        ["NoOp", 0],
        ["PartitionsAdded", 0, "t", 5, "c1", "t", 5, "a field from a newer writer"],
        ["PartitionsAdded", 0, "t", 6, "c1", "t", 6],
        *(["PartitionStateChanged", 0, "t", i, "read_only"] for i in range(3)),  # a shrink
        ["ClusterRegistered", 0, "c2", "eu", "h:2"],
        ["ClusterRegistered", 0, "c3", "eu", "h:3"],
        ["ClusterFenced", 0, "c2", "down", 17],
        ["QuorumVoterChanged", 0, 4, "h:9104", "http://h:8004", False],
        ["NoOp", 0],
        *(["PhysicalPartitionsReported", 0, "c1", "t", i, None if i == 1 else f"b{i}:9092"] for i in range(3)),
        ["TopicCreated", 0, "i1", "a", "eu", None],
        ["TopicCreated", 0, "i2", "b", "eu", 60_000],
        ["TopicCreated", 0, "i3", "c", "eu"],  # from an older writer: without retention_ms
    ]
    assert records_of(decode_rows(rows)) == [record_from_wire(r) for r in rows]
    assert records_of(decode_rows(iter(rows))) == [record_from_wire(r) for r in rows]
    runs = [(group[0][0], columns is not None) for group, columns in codec._wire_groups(rows) if len(group) > 1]
    assert runs == [  # the runs that went column by column (a row from a newer writer sends its run row by row)
        ("PartitionsAdded", True),
        ("PartitionsAdded", False),
        ("PartitionStateChanged", True),
        ("ClusterRegistered", True),
        ("PhysicalPartitionsReported", True),  # a nullable column
        ("TopicCreated", False),  # rows of two lengths
    ]
    for bad in (
        "PartitionsAdded",
        [],
        ["PartitionsAdded", 0, "t", 7, "c1", "t", False],
        ["PartitionStateChanged", 0, "t", True, "read_only"],  # a bool is not an int
        ["ClusterRegistered", 0, "c4", None, "h:4"],
        ["ClusterFenced", 0, "c2", "down"],
        ["PhysicalPartitionsReported", 0, "c1", "t", 3, 9092],
        ["TopicCreated", 0, "i4", "d", "eu", "forever"],
    ):
        with pytest.raises(CodecError):
            records_of(decode_rows([*rows, bad]))
        with pytest.raises(CodecError):
            records_of(decode_rows([bad, *rows]))


def test_records_to_wire_packs_like_record_to_wire_and_says_whether_it_round_trips() -> None:
    records = [
        *ONE_OF_EACH,
        *(PartitionsAdded("t", i, "c1", "t", i) for i in range(3)),
        ClusterFenced("c", "x", 1),
        *(PartitionStateChanged("t", i, "read_only") for i in range(3)),
        *(ClusterRegistered(f"c{i}", "eu", f"h:{i + 1}") for i in range(3)),
        *(PhysicalPartitionsReported("c1", "t", i, None if i else "b:1") for i in range(2)),
    ]
    rows, exact = encode_rows(records)
    assert pack(rows) == pack([record_to_wire(r) for r in records])
    assert exact == codec._round_trips(records)
    assert encode_rows(records[-8:])[1] is True
    for odd in (
        PartitionsAdded("t", True, "c1", "t", 0),  # type: ignore[arg-type]
        PartitionsAdded("t", 0, "c1", "t", 0.5),  # type: ignore[arg-type]
        PartitionStateChanged("t", True, "read_only"),  # type: ignore[arg-type]
        ClusterRegistered("c9", "eu", None),  # type: ignore[arg-type]
        PhysicalPartitionsReported("c1", "t", 5, 9092),  # type: ignore[arg-type]
    ):
        assert encode_rows([*records, odd])[1] is False
        assert encode_rows([odd, *records])[1] is False


def _runs(records: Iterable[Record]) -> tuple[list[object], bool]:
    """``encode_runs`` without the records it reads back: the runs written and whether they round-trip."""
    items, _read_back, exact = encode_runs(records)
    return items, exact


def _via_runs(records: list[Record]) -> list[Record]:
    items, _exact = _runs(records)
    return records_of(decode_runs(codec.unpack(pack(items))))


@given(st.lists(st.sampled_from(ONE_OF_EACH), max_size=30))
def test_any_sequence_round_trips_as_runs(records: list[Record]) -> None:
    decoded = _via_runs(records)
    assert decoded == records
    assert [type(r) for r in decoded] == [type(r) for r in records]
    assert _runs(records)[1] == codec._round_trips(records)


def test_runs_are_columns_with_repeated_values_written_once() -> None:
    topic = [
        TopicCreated("id", "t", "eu"),
        *(PartitionsAdded("t", i, "c1" if i < 2 else "c2", "t", i % 2) for i in range(4)),
    ]
    items, exact = _runs([*topic, ClusterFenced("c1", "x", 1)])
    assert exact
    assert items == [
        ["TopicCreated", 0, "id", "t", "eu", None],  # a run of one is its row
        [4, "PartitionsAdded", 0, ["t"], [0, 1, 2, 3], ["c1", "c1", "c2", "c2"], ["t"], [0, 1, 0, 1]],
        ["ClusterFenced", 0, "c1", "x", 1],
    ]
    big = [PartitionsAdded("t", i, "c1", "t", i) for i in range(500)]
    assert len(pack(_runs(big)[0])) < len(pack(encode_rows(big)[0])) / 5
    decoded = records_of(decode_runs(codec.unpack(pack(_runs(big)[0]))))
    assert decoded == big
    assert len({id(r.topic) for r in decoded}) == 1  # one string shared by the whole run


def test_a_run_with_a_value_of_another_type_is_not_shortened_and_decodes_like_its_rows() -> None:
    odd = [PartitionsAdded("t", 1, "c1", "t", 0), PartitionsAdded("t", True, "c1", "t", 0)]  # type: ignore[arg-type]
    items, exact = _runs(odd)
    assert not exact
    assert items[0][4] == [1, True]  # True == 1, yet not the same value: written out
    with pytest.raises(CodecError, match="partition must be an integer"):
        records_of(decode_runs(codec.unpack(pack(items))))


def test_a_run_from_a_newer_writer_with_an_extra_column_is_decoded_row_by_row() -> None:
    run = [2, "PartitionsAdded", 0, ["t"], [0, 1], ["c1"], ["t"], [0, 1], ["a field we do not know"]]
    assert records_of(decode_runs([run])) == [
        PartitionsAdded("t", 0, "c1", "t", 0),
        PartitionsAdded("t", 1, "c1", "t", 1),
    ]


@pytest.mark.parametrize(
    ("items", "message"),
    [
        ({"a": 1}, "must be a list"),
        ([[2, "PartitionsAdded", 0, ["t"], [0, 1, 2], ["c1"], ["t"], [0]]], "each a list of 1 or 2 values"),
        ([[2, "PartitionsAdded", 0, ["t"], (0, 1), ["c1"], ["t"], [0]]], "each a list of 1 or 2 values"),
        ([[2, "Nope", 0, ["t"]]], "malformed run"),
        ([[0, "PartitionsAdded", 0, ["t"], [0], ["c1"], ["t"], [0]]], "malformed run"),
        ([[3, "NoOp", 0]], "a run is"),
        ([[2, "TopicDeleted", 0, ["t", None]]], "must be a string"),
        ([[2, "PartitionsAdded", 0, ["t"], [0, 1]]], "needs at least 5 fields"),
        ([[5]], "a run is"),
        ([[2, "TopicDeleted"]], "a run is"),
        ([[2**63, "TopicDeleted", 0, ["t"]]], "malformed run"),  # one value repeated 2**63 times
        ([[codec.MAX_RUN_RECORDS + 1, "TopicDeleted", 0, ["t"]]], "malformed run"),
        ([[2, "QuorumVoterChanged", 0, [4], ["h:1"], ["http://h"], [1]]], "voter must be a boolean"),
    ],
)
def test_malformed_runs_are_refused(items: object, message: str) -> None:
    with pytest.raises(CodecError, match=message):
        records_of(decode_runs(items))


def test_build_records_makes_the_records_the_constructor_makes() -> None:
    built = codec.build_records(PartitionsAdded, (["t", "u"], [0, 1], ["c1", "c2"], ["t", "u"], [3, 4]), 2)
    assert built == [PartitionsAdded("t", 0, "c1", "t", 3), PartitionsAdded("u", 1, "c2", "u", 4)]
    with pytest.raises(dataclasses.FrozenInstanceError):
        built[0].partition = 5  # type: ignore[misc]


# -- take_run: the C module (metadata_log/_columns.c) and its Python fallback ---------------------------
class _Text(str):
    """A str subclass: not a str to the codec (decoding would give back a plain str)."""


_ODD_VALUES = st.one_of(
    st.sampled_from(["t", "c1", "eu", "h:1"]),
    st.integers(-3, 3),
    st.booleans(),
    st.none(),
    st.just(0.5),
    st.builds(_Text, st.sampled_from(["t", "c1"])),
)
_RUN_TYPES = [ClusterRegistered, PartitionsAdded, PartitionStateChanged, PhysicalPartitionsReported, TopicCreated]


def _any_record(cls: type[Record], values: list[object]) -> Record:
    return cls(*values[: len(dataclasses.fields(cls))])  # type: ignore[arg-type]  # any values, on purpose


_MIXED_RUNS = st.lists(
    st.one_of(
        st.sampled_from(ONE_OF_EACH),
        st.builds(_any_record, st.sampled_from(_RUN_TYPES), st.lists(_ODD_VALUES, min_size=5, max_size=5)),
    ),
    max_size=12,
).map(lambda records: sorted(records, key=lambda r: type(r).__name__)[: len(records) // 2] + records)


def _typed(value: object) -> object:
    """``value`` with each leaf paired with its type: ``1 == True`` and ``"t" == _Text("t")``, but not here."""
    if isinstance(value, list | tuple):
        return [_typed(v) for v in value]
    return (type(value), value)


def test_the_leaders_run_encoder_is_the_c_module() -> None:
    # without it a command of 100 records costs the leader 2-3x the encoding time (BENCHMARKS.md)
    assert codec._take_run is not codec._take_run_py, "metadata_log._columns was not built (a C compiler is needed)"


@given(_MIXED_RUNS)
def test_take_run_in_c_and_in_python_agree_value_for_value(records: list[Record]) -> None:
    run = tuple(records)
    at = 0
    while at < len(run):
        spec = codec._RUN_SPECS.get(type(run[at]))
        if spec is None:
            at += 1
            continue
        c = codec._take_run(run, at, type(run[at]), *spec)
        py = codec._take_run_py(run, at, type(run[at]), *spec)
        assert _typed(c) == _typed(py)
        at = c[0]


@given(_MIXED_RUNS)
def test_records_to_runs_writes_the_same_with_either_run_taker(records: list[Record]) -> None:
    with_c = _runs(records)
    original, codec._take_run = codec._take_run, codec._take_run_py
    try:
        with_python = _runs(records)
    finally:
        codec._take_run = original
    assert _typed(with_c) == _typed(with_python)
    assert with_c[1] == codec._round_trips(records)


class _Records(list[Record]):
    pass


def test_records_to_runs_takes_any_iterable_of_records() -> None:
    records = [ClusterRegistered(f"c{i}", "eu", f"h:{i}") for i in range(3)]
    expected = _runs(tuple(records))
    assert expected[0] == [[3, "ClusterRegistered", 0, ["c0", "c1", "c2"], ["eu"], ["h:0", "h:1", "h:2"]]]
    assert _runs(records) == _runs(_Records(records)) == _runs(iter(records)) == expected


def test_the_shortening_of_a_run_is_the_same_from_records_and_from_rows() -> None:
    records = (*(PartitionsAdded("t", i, "c1", "t", 0) for i in range(3)), PartitionsAdded("t", 3, "c1", "t", True))  # type: ignore[arg-type]
    rows = [record_to_wire(r)[2:] for r in records]
    from_rows = codec._run_item(PartitionsAdded, [list(c) for c in zip(*rows, strict=True)], len(rows))
    items, _read_back, exact = codec.encode_runs(records)
    assert (items, exact) == ([from_rows[0]], from_rows[1])
    assert items[0] == [4, "PartitionsAdded", 0, ["t"], [0, 1, 2, 3], ["c1"], ["t"], [0, 0, 0, True]]


@pytest.mark.parametrize("take_run", [codec._take_run, codec._take_run_py], ids=["c", "python"])
def test_take_run_gives_columns_and_says_which_are_typed_and_all_equal(take_run: codec._TakeRun) -> None:
    records = (
        TopicCreated("id", "t", "eu"),
        ClusterRegistered("c1", "eu", "h:1"),
        ClusterRegistered("c2", "eu", "h:2"),
        ClusterRegistered("c3", _Text("eu"), "h:3"),
        ClusterFenced("c1", "x", 1),
    )
    stop, columns, typed, same = take_run(records, 1, ClusterRegistered, *codec._RUN_SPECS[ClusterRegistered])
    assert stop == 4
    assert columns == [["c1", "c2", "c3"], ["eu", "eu", "eu"], ["h:1", "h:2", "h:3"]]
    assert typed == [True, False, True]
    assert same == [False, False, False]  # "eu" == _Text("eu"), yet the column is not typed: not shortened
    unset = object.__new__(ClusterRegistered)  # no field set
    with pytest.raises(AttributeError):
        take_run((unset,), 0, ClusterRegistered, *codec._RUN_SPECS[ClusterRegistered])
    with pytest.raises(ValueError, match="is not a ClusterRegistered"):
        take_run(records, 0, ClusterRegistered, *codec._RUN_SPECS[ClusterRegistered])
    with pytest.raises(ValueError, match="is not a ClusterRegistered"):
        take_run(records, 5, ClusterRegistered, *codec._RUN_SPECS[ClusterRegistered])


class _Tuple(tuple[Record, ...]):
    __slots__ = ()


def test_take_run_in_c_refuses_what_it_cannot_read_safely() -> None:
    members, types = codec._RUN_SPECS[ClusterRegistered]
    records = (ClusterRegistered("c1", "eu", "h:1"),)
    with pytest.raises(TypeError, match="not a slot of ClusterRegistered"):  # another class's slots: other offsets
        codec._take_run(records, 0, ClusterRegistered, codec._RUN_SPECS[PartitionsAdded][0][:3], types)
    with pytest.raises(TypeError, match="must be tuple, not list"):  # a finalizer could change a list under it
        codec._take_run(list(records), 0, ClusterRegistered, members, types)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a subclass"):
        codec._take_run(_Tuple(records), 0, ClusterRegistered, members, types)
    with pytest.raises(TypeError, match=r"tuple of types \(str, int, bool, NoneType\)"):  # no __eq__ of ours
        codec._take_run(records, 0, ClusterRegistered, members, ((str,), (_Text,), (str,)))
    with pytest.raises(ValueError, match="one member and one tuple of types per field"):
        codec._take_run(records, 0, ClusterRegistered, members, types[:2])


def test_take_run_in_c_keeps_references_balanced_on_every_path() -> None:
    # a missed Py_NewRef / Py_DECREF passes every other test and corrupts or leaks much later
    value = "h:" + "x" * 40  # a string of its own, referenced only here and by the records
    members, types = codec._RUN_SPECS[ClusterRegistered]
    records = tuple(ClusterRegistered(f"c{i}", "eu", value) for i in range(50))
    unset = (ClusterRegistered("c", "eu", value), object.__new__(ClusterRegistered))

    def calls() -> None:
        for _ in range(2_000):
            codec._take_run(records, 0, ClusterRegistered, members, types)
            with contextlib.suppress(AttributeError):
                codec._take_run(unset, 0, ClusterRegistered, members, types)
            with contextlib.suppress(ValueError):
                codec._take_run(records, 50, ClusterRegistered, members, types)

    calls()
    before = [sys.getrefcount(x) for x in (True, False, value, records, members, types)]
    calls()
    assert [sys.getrefcount(x) for x in (True, False, value, records, members, types)] == before
