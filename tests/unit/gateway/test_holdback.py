"""The gateway's part of a group's strict key order (``gateway/holdback.py``): a Kafka client's read of a
strict partition ends before the first record its group must not have yet, until the quorum's heartbeat
answer releases what it waits for; the heartbeat reports the group's commits and the parents waited for too
long. The fetch answers are built by kafka-python's record code and read back by it."""

from __future__ import annotations

import struct

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder

from gateway.holdback import GroupKeyOrder
from gateway.members import Member
from metadata_log.image import apply
from metadata_log.records import GroupGenerationStarted, GroupMember, KeyRangeReleased

from ..samples import keys, shrunk, strict

MAX_BYTES = 1 << 20


def answer(base: int, records: list[tuple[bytes, list[tuple[str, bytes]]]]) -> bytes:
    builder = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False, producer_id=-1,
                                        producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)  # fmt: skip
    for i, (key, headers) in enumerate(records):
        builder.append(i, timestamp=1000 + i, key=key, value=b"v%d" % i, headers=headers)
    return struct.pack(">q", base) + bytes(builder.build())[8:]


def offsets_of(raw: bytes) -> list[int]:
    out, at = [], 0
    while at < len(raw):
        (length,) = struct.unpack_from(">i", raw, at + 8)
        b = DefaultRecordBatch(raw[at : at + 12 + length])
        assert b.validate_crc()
        out += [r.offset for r in b]
        at += 12 + length
    return out


def test_a_read_stops_before_a_moved_key_until_the_log_releases_its_parent_for_the_group() -> None:
    image = shrunk()
    moved, kept = keys(image)
    stamp = [("kfed-epoch", b"2")]
    fetched = answer(10, [(kept, stamp), (moved, []), (kept, []), (moved, stamp), (kept, stamp)])
    order = GroupKeyOrder()

    def cut(groups: list[str], offset: int) -> bytes:
        return order.cut(strict(image), groups, "S", offset, fetched, MAX_BYTES)

    assert offsets_of(cut(["g"], 10)) == [10, 11, 12], "up to the held one"
    assert cut([], 10) == fetched, "no group reads it: as it came"
    assert cut(["g"], 13) == b"", "at the held one: nothing (not 10-12 again)"
    assert offsets_of(cut(["g"], 14)) == [10, 11, 12, 13, 14], (
        "records before the fetch offset are the client's already: the held one was released to it"
    )
    image = apply(image, [KeyRangeReleased("other", "S", 2, 3, False, "")])
    assert offsets_of(cut(["g", "other"], 10)) == [10, 11, 12], "read for two groups: it stops where either must"
    image = apply(image, [KeyRangeReleased("g", "S", 2, 3, False, "")])
    assert cut(["g"], 10) == fetched, "released: all of it goes"


def test_a_fetch_is_read_for_the_groups_the_log_assigns_the_partition_narrowed_to_the_fetching_clients() -> None:
    image = apply(shrunk(), [GroupGenerationStarted("g1", 1, (GroupMember("a", (("S", 0),)),)),
                             GroupGenerationStarted("g2", 1, (GroupMember("b", (("S", 0), ("S", 1))),))])  # fmt: skip
    order = GroupKeyOrder()
    here = Member("g2", "b", ("S",), "range", False, 10_000, "app", "10.0.0.1", given=frozenset({("S", 0)}))
    assert order.readers(image, [], ("S", 0)) == ["g1", "g2"], "no member of this client here"
    assert order.readers(image, [here], ("S", 0)) == ["g2"], "this client's member here"
    assert order.readers(image, [here], ("S", 2)) == [], "no group has it: not held back"
    image = apply(image, [GroupGenerationStarted("g1", 2, (GroupMember("a", (("S", 2),)),))])
    assert order.readers(image, [], ("S", 2)) == ["g1"], "a new generation: read from the new assignments"


def test_the_heartbeat_reports_the_commits_on_owned_strict_partitions_and_the_parents_waited_too_long() -> None:
    image = shrunk()
    moved, _ = keys(image)
    member = Member("g", "m1", ("S",), "range", False, 10_000, "client", "127.0.0.1")
    order = GroupKeyOrder(max_wait_ms=0)
    order.committed(image, "g", "S", 3, 40)
    order.committed(image, "g", "S", 0, 7)
    order.committed(image, "g", "NotStrict", 0, 9)
    assert order.beat_fields(member, [("S", 3)], image) == {
        "metadata_offset": image.offset,
        "committed": [["S", 3, 40]],
        "give_up": [],
    }
    order.cut(strict(image), ["g"], "S", 0, answer(0, [(moved, [("kfed-epoch", b"2")])]), MAX_BYTES)
    assert order.beat_fields(member, [], image)["give_up"] == [["S", 2, 3]], "waited max_wait_ms (0 here)"
    image = apply(image, [KeyRangeReleased("g", "S", 2, 3, False, "")])
    assert order.beat_fields(member, [], image)["give_up"] == [], "released: no longer waited for"
    member.given = frozenset({("S", 0)})
    order.forget([member])
    assert order.beat_fields(member, [("S", 0), ("S", 3)], image)["committed"] == [["S", 0, 7]], (
        "what no member here owns is forgotten"
    )
