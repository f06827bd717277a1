from __future__ import annotations

import asyncio

import orjson
import pytest

from controller import readmodel
from controller.config import ConfigError, Voter, parse_quorum, render_quorum
from controller.readmodel import ReadModel
from metadata_log.codec import pack, pack_chunked, record_to_dict, unpack
from metadata_log.errors import Gone
from metadata_log.image import EMPTY_IMAGE, apply
from metadata_log.publisher import LogDelta
from metadata_log.records import NoOp, Record
from metadata_log.snapshot import write_records, write_rows, write_runs
from tests.unit.samples import ONE_OF_EACH

from ..samples import log_delta


def test_quorum_round_trip() -> None:
    import tomllib

    voters = [Voter(1, "127.0.0.1:9101", "http://127.0.0.1:8001"), Voter(2, "127.0.0.1:9102", "http://127.0.0.1:8002")]
    assert list(parse_quorum(tomllib.loads(render_quorum(voters))).voters) == voters


@pytest.mark.parametrize(
    "data, message",
    [
        ({}, "at least one"),
        ({"voters": [{"id": -1, "raft": "h:1", "http": "http://h:2"}]}, "non-negative integer"),
        ({"voters": [{"id": 1, "raft": "h", "http": "http://h:2"}]}, "host:port"),
        ({"voters": [{"id": 1, "raft": "h:1", "http": "h:2"}]}, "http"),
        ({"voters": [{"id": 1, "raft": "h:1", "http": "http://h:2", "x": 1}]}, "unknown keys"),
        (
            {
                "voters": [
                    {"id": 1, "raft": "h:1", "http": "http://h:2"},
                    {"id": 1, "raft": "h:3", "http": "http://h:4"},
                ]
            },
            "share the same id",
        ),
    ],
)
def test_bad_quorum_configs_name_the_problem(data: dict, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_quorum(data)


def publish_noops(model: ReadModel, count: int) -> None:
    records: list[Record] = [NoOp() for _ in range(count)]
    model.on_update(log_delta(model.image, records), apply(model.image, records))


async def test_window_keeps_between_n_and_five_quarters_n() -> None:
    model = ReadModel(retention_records=100)
    for _ in range(50):
        publish_noops(model, 7)
    assert model.high_watermark == 350
    assert 100 <= model.high_watermark - model.log_start_offset <= 125
    page = model.read(model.log_start_offset, 10)
    assert [e.offset for e in page.entries] == list(range(model.log_start_offset, model.log_start_offset + 10))
    with pytest.raises(Gone) as e:
        model.read(model.log_start_offset - 1, 10)
    assert e.value.extra == {"log_start_offset": model.log_start_offset, "snapshot_offset": 349}


async def test_read_past_the_end_is_empty_and_wait_wakes_on_publish() -> None:
    model = ReadModel()
    publish_noops(model, 3)
    page = model.read(3, 10)
    assert page.entries == [] and page.next_offset == 3 and page.high_watermark == 3
    waiter = asyncio.create_task(model.wait_beyond(3, 5.0))
    await asyncio.sleep(0)
    publish_noops(model, 1)
    assert await waiter is True
    assert await model.wait_beyond(10, 0.01) is False


async def test_a_gap_in_published_offsets_is_a_crash_not_a_skip() -> None:
    model = ReadModel()
    with pytest.raises(AssertionError):
        model.on_update(log_delta(apply(EMPTY_IMAGE, [NoOp()] * 5), [NoOp()]), apply(EMPTY_IMAGE, [NoOp()] * 6))


async def test_reset_starts_the_window_after_the_loaded_image() -> None:
    model = ReadModel()
    image = apply(EMPTY_IMAGE, [NoOp()] * 10)
    model.on_update(LogDelta.replaced(EMPTY_IMAGE, image), image)
    assert model.log_start_offset == 10 and model.high_watermark == 10
    assert model.snapshot().offset == 9


async def test_entries_are_encoded_on_first_read_and_shared_by_later_readers() -> None:
    model = ReadModel()
    publish_noops(model, 5)
    first = model.read(1, 3).entries
    assert [e.offset for e in first] == [1, 2, 3]
    assert orjson.loads(first[0].json) == {"offset": 1, "type": "NoOp", "data": {}}
    again = model.read(0, 10).entries
    assert [e.offset for e in again] == [0, 1, 2, 3, 4]
    assert again[1] is first[0] and again[1].json is first[0].json  # one Entry, one encoding
    assert model.read(2, 0).entries == [] and model.read(4, -1).entries == []


async def test_a_recent_snapshot_is_reused_while_the_window_still_continues_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr(readmodel.time, "monotonic", lambda: clock[0])
    model = ReadModel(retention_records=100)
    publish_noops(model, 10)
    first = model.snapshot()
    assert first.offset == 9
    publish_noops(model, 5)
    assert model.snapshot() is first, "reused: a reader goes on at offset 10, still in the window"
    assert model.snapshot(min_offset=14).offset == 14, "min_offset asks for one at least that new"
    newest = model.snapshot()
    assert newest.offset == 14
    publish_noops(model, 5)
    clock[0] += readmodel.SNAPSHOT_REUSE_S
    assert model.snapshot().offset == 19, "too old"
    kept = model.snapshot()
    publish_noops(model, 200)  # the window moves past the snapshot's next offset
    assert model.log_start_offset > kept.offset + 1
    assert model.snapshot().offset == 219


@pytest.mark.parametrize("length", [0, 1, 3, 4, 10])
def test_snapshot_json_is_encoded_in_slices_with_the_same_bytes(monkeypatch: pytest.MonkeyPatch, length: int) -> None:
    monkeypatch.setattr(readmodel, "PACK_CHUNK_ITEMS", 3)
    records = [{"type": "NoOp", "data": {"i": i, "s": 'é"x'}} for i in range(length)]
    assert readmodel.json_chunked(41, records) == orjson.dumps({"offset": 41, "records": records})


@pytest.mark.parametrize("length", [0, 1, 3, 4, 10])
def test_snapshot_msgpack_is_packed_from_an_iterator_in_slices_with_the_same_bytes(length: int) -> None:
    rows = [["NoOp", 0, i, 'é"x', [i] * i] for i in range(length)]
    assert pack_chunked({"offset": 41, "records": iter(rows)}, 3) == pack({"offset": 41, "records": rows})


def test_the_snapshot_encodings_hold_the_image(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(readmodel, "PACK_CHUNK_ITEMS", 4)
    image = apply(EMPTY_IMAGE, ONE_OF_EACH)
    snap = readmodel.Snapshot(image)
    records = list(write_records(image))
    assert orjson.loads(snap.json) == {
        "offset": image.offset,
        "records": [{"type": r.TYPE, "data": record_to_dict(r)} for r in records],
    }
    # through msgpack, as a reader gets them (a list field of a record is written from a tuple)
    assert unpack(snap.msgpack) == unpack(pack({"offset": image.offset, "records": list(write_rows(image))}))
    assert unpack(snap.runs) == unpack(pack({"offset": image.offset, "runs": write_runs(image)}))
