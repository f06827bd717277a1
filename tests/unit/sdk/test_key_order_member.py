"""A ``FederatedConsumer``'s part of strict key order (``sdk/key_order.py``): what it holds back, what it hands
out once the group's parent is released, each record exactly once, and the commit positions that never pass a
held or released-but-not-taken record. The records are stand-ins for confluent-kafka's ``Message`` (the member
reads only their topic, partition, offset, key, headers and error)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from metadata_client.holdback import OrderBreak
from metadata_log import commands
from metadata_log.image import EMPTY_IMAGE, MetadataImage, apply
from metadata_log.records import ClusterRegistered, KeyOrderSealed, KeyRangeReleased
from sdk import key_order
from sdk.key_order import KeyOrderMember

from ..samples import keys, shrunk

EPOCH_2 = [("kfed-epoch", b"2")]


class Record:
    def __init__(self, topic: str, partition: int, offset: int, key: bytes | None, headers: Any = None,
                 error: Any = None) -> None:  # fmt: skip
        self._at = (topic, partition, offset)
        self._key, self._headers, self._error = key, headers, error

    def topic(self) -> str:
        return self._at[0]

    def partition(self) -> int:
        return self._at[1]

    def offset(self) -> int:
        return self._at[2]

    def key(self) -> bytes | None:
        return self._key

    def headers(self) -> Any:
        return self._headers

    def error(self) -> Any:
        return self._error


def offsets(records: list[Any]) -> list[tuple[int, int]]:
    return [(r.partition(), r.offset()) for r in records]


def released(image: MetadataImage, broken: bool = False, topic: str = "S") -> MetadataImage:
    """Epoch 2's parent P3 released for group ``g`` (broken: the group gave up waiting for it)."""
    return apply(image, [KeyRangeReleased("g", topic, 2, 3, broken, "gave up" if broken else "")])


def test_a_moved_key_is_held_until_its_parent_is_released_then_handed_out_exactly_once() -> None:
    image = shrunk()
    moved, kept = keys(image)
    member = KeyOrderMember("g")
    read = [
        Record("S", 0, 10, kept, EPOCH_2),
        Record("S", 0, 11, moved, EPOCH_2),
        Record("S", 0, 12, kept),
        Record("S", 0, 13, moved, EPOCH_2),
        Record("S", 0, 14, None),
        Record("Plain", 0, 5, moved, EPOCH_2),
    ]
    handed = member.offer(image, read, consumer=None)
    assert offsets(handed) == [(0, 10), (0, 12), (0, 14), (0, 5)], "only the moved key's records wait"
    assert member.commit_position(("S", 0), 15) == 11, "a commit never passes a held record"
    assert member.commit_position(("Plain", 0), 6) == 6
    member.observe(image, {"S": [(2, 3)]}, consumer=None)
    assert member.take(10) == [], "a release the log does not have yet frees nothing"

    image = released(image)
    releases = {"S": [(2, 3)]}
    member.observe(image, releases, consumer=None)
    first = member.take(1)
    assert offsets(first) == [(0, 11)], "released records come oldest first, at most as many as asked"
    assert member.commit_position(("S", 0), 15) == 13, "nor past a released one the application has not taken"
    rest = member.take(10)
    assert offsets(rest) == [(0, 13)]
    member.observe(image, releases, consumer=None)
    member.observe(image, {"S": [(2, 3)]}, consumer=None)
    assert member.take(10) == [], "observing the same release again hands nothing out again"
    assert member.commit_position(("S", 0), 15) == 15

    counts = Counter(offsets(handed + first + rest))
    assert counts == Counter(offsets(read)), "every record read is handed out exactly once"
    assert member.stats()["S"] == {
        "held": 0,
        "held_total": 2,
        "delivered": 4,  # the keyed records of S
        "longest_hold_ms": member.stats()["S"]["longest_hold_ms"],
        "breaks": {"late_write": 0, "gave_up": 0, "after_give_up": 0},
    }


def test_a_record_after_a_held_one_of_its_key_waits_behind_it_whatever_its_stamp() -> None:
    image = shrunk()
    moved, _ = keys(image)
    member = KeyOrderMember("g")
    assert member.offer(image, [Record("S", 0, 20, moved, EPOCH_2), Record("S", 0, 21, moved)], None) == []
    member.observe(released(image), {"S": [(2, 3)]}, consumer=None)
    assert offsets(member.take(10)) == [(0, 20), (0, 21)], "per-key order within the partition"


def test_a_broken_release_hands_the_held_records_out_once_and_reports_each_order_break_once() -> None:
    image = shrunk()
    moved, _ = keys(image)
    breaks: list[OrderBreak] = []
    member = KeyOrderMember("g", max_wait_ms=0, on_order_break=lambda consumer, b: breaks.append(b))
    assert member.offer(image, [Record("S", 0, 30, moved, EPOCH_2)], None) == []
    member.observe(image, None, consumer=None)
    assert member.give_up == [("S", 2, 3)], "waited max_wait_ms (0 here): the heartbeat asks to give up"
    image = released(image, broken=True)
    member.observe(image, {"S": [(2, 3)]}, consumer=None)
    assert offsets(member.take(10)) == [(0, 30)]
    assert [(b.kind, b.epoch, b.from_partition) for b in breaks] == [("gave_up", 2, 3)]
    assert member.give_up == [], "released: no longer waited for"
    assert member.stats()["S"]["breaks"] == {"late_write": 0, "gave_up": 1, "after_give_up": 0}


def test_a_revoked_partition_drops_its_held_and_released_records_for_the_next_owner() -> None:
    image = shrunk()
    moved, _ = keys(image)
    member = KeyOrderMember("g")
    member.offer(image, [Record("S", 0, 40, moved, EPOCH_2), Record("S", 1, 7, moved, EPOCH_2)], None)
    member.observe(released(image), {"S": [(2, 3)]}, consumer=None)
    member.drop(("S", 0))
    assert offsets(member.take(10)) == [(1, 7)], "the revoked partition's released record is read again elsewhere"
    assert member.commit_position(("S", 0), 41) == 41


def test_what_is_not_a_keyed_record_of_a_strict_topic_passes_as_read() -> None:
    image = apply(shrunk(), commands.create_topic(shrunk(), "Plain", "r1", 1, "id-plain").records)
    image = apply(image, commands.change_key_order(image, "S", "none").records)  # S was strict: it is no longer
    image = shrunk("R", image)
    moved, _ = keys(image, "R")
    member = KeyOrderMember("g")
    read = [
        Record("S", 0, 1, moved, EPOCH_2),
        Record("Plain", 0, 2, moved, EPOCH_2),
        Record("R", 0, 3, moved, EPOCH_2, error="a consumer error"),
    ]
    assert member.offer(image, read, None) == read
    assert set(member.stats()) == set(), "nothing held back: no strict topic was read"
    held = Record("R", 0, 4, moved, EPOCH_2)
    assert member.offer(image, [held], None) == [] and set(member.stats()) == {"R"}


def test_a_new_image_or_new_releases_are_observed_and_the_same_ones_are_not_again() -> None:
    image = shrunk()
    moved, _ = keys(image)
    member = KeyOrderMember("g")
    releases = {"S": [(2, 3)]}
    member.offer(image, [Record("S", 0, 50, moved, EPOCH_2)], None)
    member.observe(image, releases, None)
    member.observe(released(image), releases, None)  # the same releases, the log's release in a new image
    assert offsets(member.take(10)) == [(0, 50)]
    other = KeyOrderMember("g")
    assert other.offer(image, [Record("S", 0, 51, moved, EPOCH_2)], None) == []
    image = released(image)
    other.observe(image, {}, None)
    other.observe(image, {"S": [(2, 3)]}, None)  # the same image, new releases
    assert offsets(other.take(10)) == [(0, 51)]


def test_a_commit_position_is_held_back_only_by_its_own_partitions_records() -> None:
    image = shrunk("R", shrunk())
    moved_s, _ = keys(image)
    moved_r, _ = keys(image, "R")
    member = KeyOrderMember("g")
    member.offer(image, [Record("S", 1, 60, moved_s, EPOCH_2), Record("R", 0, 61, moved_r, EPOCH_2)], None)
    member.observe(released(released(image), topic="R"), {"S": [(2, 3)], "R": [(2, 3)]}, None)
    assert member.commit_position(("S", 0), 100) == 100, "S/1's and R/0's released records do not hold S/0"
    assert member.commit_position(("S", 1), 100) == 60
    member.drop(("R", 1))
    member.drop(("S", 0))
    assert offsets(member.take(10)) == [(1, 60), (0, 61)], "each drop takes only its own partition's"


def test_the_owned_open_parents_with_a_seal_are_checked_once_per_interval() -> None:
    image = apply(shrunk(), [KeyOrderSealed("S", 2, 3, 40)])
    image = apply(image, commands.create_topic(image, "Plain", "r1", 1, "id-plain").records)
    member = KeyOrderMember("g")
    interval = key_order.COMMITTED_CHECK_S
    owned = [("S", 3), ("S", 0), ("Plain", 0)]
    without = apply(EMPTY_IMAGE, [ClusterRegistered("c1", "r1", "h:1")])
    assert member.parents_to_check(without, owned, 1000.0 - interval / 2) == [], "no key order: nothing, no wait"
    assert member.parents_to_check(image, owned, 1000.0) == [("S", 3)], "P3 is epoch 2's open parent, sealed"
    assert member.parents_to_check(image, owned, 1000.0 + interval * 0.99) == [], "less than an interval since"
    assert member.parents_to_check(image, owned, 1000.0 + interval) == [("S", 3)]
    now = 1000.0 + 3 * interval
    assert member.parents_to_check(shrunk(), owned, now) == [], "not sealed yet: nothing to read the commits of"
    assert member.parents_to_check(released(image), owned, now + interval) == [], "released: no longer open"
    assert member.parents_to_check(image, owned, now + 2 * interval) == [("S", 3)]
