"""The pure core of strict key order: routing maps, the epoch history, and the hold-back rule, case by case.

The state machine in ``test_keyorder_model.py`` checks the rule as a whole; these pin down each function's
contract, and the scenarios that the design document walks through.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from metadata_client.holdback import HoldBack, first_held
from metadata_log.image.key_order_history import (
    MAX_EPOCHS_KEPT,
    KeyOrderError,
    KeyOrderTopic,
    acted_on,
    blocking_seals,
    check_may_advance,
    may_give_up,
    moved_out,
    next_change,
    open_parents,
    parents_of,
    pending_seals,
    releasable,
    strict_topic,
    with_change,
    with_release,
    with_seal,
)
from metadata_log.keymap import (
    KEY_SLOTS,
    MAX_STRICT_PARTITIONS,
    NO_PARTITION,
    KeyMap,
    Move,
    epoch_header,
    initial_map,
    map_after,
    moves_between,
    next_map,
    slot_of,
    stamp_of,
)

# -- routing ---------------------------------------------------------------------------------------


def test_a_key_has_one_slot_in_the_hash_space() -> None:
    slots = {slot_of(f"key-{i}".encode()) for i in range(10_000)}
    assert all(0 <= s < KEY_SLOTS for s in slots)
    assert len(slots) > 4_500  # crc32's low bits spread 10,000 keys over most of 16,384 slots
    assert slot_of(b"U_TopicA-key") == slot_of(b"U_TopicA-key")


def test_a_record_carries_its_epoch_in_a_header() -> None:
    header = epoch_header(12)
    assert header == ("kfed-epoch", b"12")
    assert stamp_of([("trace", b"x"), header]) == 12
    not_stamped = [None, [], [("trace", b"1")], [("kfed-epoch", None)]]
    not_epochs = [b"0", b"-3", b"1e3", b"9" * 20, b"", b" 7"]
    for headers in (*not_stamped, *([("kfed-epoch", value)] for value in not_epochs)):
        assert stamp_of(headers) is None, headers


def test_the_first_map_gives_each_partition_one_contiguous_balanced_range() -> None:
    m = initial_map([7, 3, 5])
    assert m.epoch == 1
    assert [(first, end, owner) for first, end, owner in m.ranges()] == [
        (0, 5462, 3),
        (5462, 10923, 5),
        (10923, KEY_SLOTS, 7),
    ]
    assert m.owner(0) == 3 and m.owner(5462) == 5 and m.owner(KEY_SLOTS - 1) == 7
    assert m.table()[5461:5463] == [3, 5]


@pytest.mark.parametrize(
    "partitions, error",
    [
        ([], "at least one"),
        ([-1], "integers >= 0"),
        ([True], "integers >= 0"),
        (range(MAX_STRICT_PARTITIONS + 1), "at most"),
    ],
)
def test_a_map_needs_a_bounded_set_of_partitions(partitions: list[int], error: str) -> None:
    with pytest.raises(ValueError, match=error):
        initial_map(partitions)


def test_a_map_is_canonical() -> None:
    for starts, owners in (((0, 10), (1, 1)), ((5,), (1,)), ((0, 10, 10), (1, 2, 3)), ((0,), (-1,))):
        with pytest.raises(ValueError):
            KeyMap(1, starts, owners)


def test_expanding_8_partitions_onto_a_third_cluster_moves_a_third_of_the_keys() -> None:
    """The seeds' U_TopicA: P0-P7 on two clusters, then 4 partitions on a third cluster."""
    old = initial_map(range(8))
    new = next_map(old, range(12))
    assert new is not None and new.epoch == 2
    moved = sum(m.end_slot - m.first_slot for m in moves_between(old, new))
    assert moved == KEY_SLOTS - (4 * 1366 + 4 * 1365), "each old partition keeps its quota of 16,384 / 12"
    assert round(moved / KEY_SLOTS, 2) == 0.33
    assert {m.to_partition for m in moves_between(old, new)} == {8, 9, 10, 11}, "only the new partitions receive"
    assert next_map(new, range(12)) is None, "the same writable set changes nothing"


def _fewest_moves(old: KeyMap, writable: set[int]) -> int:
    """Independently: a balanced map keeps at most base slots of each partition, plus one more for as many
    partitions as may hold base + 1 among those that have that many now."""
    base, extra = divmod(KEY_SLOTS, len(writable))
    held = old.slot_counts()
    kept = sum(min(held.get(p, 0), base) for p in writable)
    kept += min(extra, sum(1 for p in writable if held.get(p, 0) > base))
    return KEY_SLOTS - kept


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sets(st.integers(0, 40), min_size=1, max_size=24), min_size=1, max_size=8))
def test_each_next_map_is_balanced_moves_the_fewest_keys_and_replays_from_its_moves(changes: list[set[int]]) -> None:
    old = initial_map(changes[0])
    for writable in changes[1:]:
        new = next_map(old, writable)
        if new is None:
            assert old.partitions() == frozenset(writable)
            continue
        counts = new.slot_counts()
        assert set(counts) == writable
        assert max(counts.values()) - min(counts.values()) <= 1
        moves = moves_between(old, new)
        assert sum(m.end_slot - m.first_slot for m in moves) == _fewest_moves(old, writable)
        givers, receivers = {m.from_partition for m in moves}, {m.to_partition for m in moves}
        assert not givers & receivers, "a partition gives or receives in one change, never both"
        assert map_after(old, new.epoch, moves) == new
        old = new


def test_replaying_moves_that_do_not_fit_is_refused() -> None:
    old = initial_map(range(2))  # [0, 8192) -> 0, [8192, 16384) -> 1
    bad = [
        (2, [Move(0, 10, 1, 0)], "not all owned by partition 1"),
        (2, [Move(0, 10, 0, 2), Move(5, 20, 0, 3)], "overlaps"),
        (2, [Move(0, KEY_SLOTS + 1, 0, 2)], "leaves the slot space"),
        (2, [Move(0, 10, 0, 0)], "another partition"),
        (3, [Move(0, 10, 0, 2)], "does not follow"),
    ]
    for epoch, moves, error in bad:
        with pytest.raises(ValueError, match=error):
            map_after(old, epoch, moves)
    with pytest.raises(ValueError, match="every slot an owner"):
        map_after(None, 1, [Move(0, 10, NO_PARTITION, 0)])
    assert map_after(None, 1, moves_between(None, old)) == old


# -- the history -----------------------------------------------------------------------------------


def _expanded() -> KeyOrderTopic:
    """4 partitions, then 6: partitions 0-3 each give slots to 4 and 5 in epoch 2."""
    topic = strict_topic(range(4))
    change = next_change(topic, range(6), "expand")
    assert change is not None
    return with_change(topic, change)


def test_a_strict_topic_starts_at_epoch_1_with_nothing_to_wait_for() -> None:
    topic = strict_topic(range(4))
    assert topic.epoch == 1 and pending_seals(topic) == () and open_parents(topic, "g") == []
    assert {m.from_partition for m in topic.changes[0].moves} == {NO_PARTITION}


def test_the_next_epoch_waits_for_the_seals_it_can_measure() -> None:
    topic = _expanded()
    assert pending_seals(topic) == (0, 1, 2, 3)
    shrink = next_change(topic, range(5), "shrink")
    assert shrink is not None
    with pytest.raises(KeyOrderError, match=r"seal of epoch 2 on partition\(s\) 0, 1, 2, 3"):
        check_may_advance(topic, unmeasurable=())
    assert blocking_seals(topic, unmeasurable={0, 1}) == (2, 3)
    for p in (2, 3):
        topic = with_seal(topic, 2, p, 100)
    check_may_advance(topic, unmeasurable={0, 1})  # 0 and 1 on a fenced cluster: abandoned
    after = with_change(topic, shrink)
    assert after.epoch == 3 and pending_seals(after) == (5,)


def test_a_seal_is_for_a_giver_of_the_latest_epoch_once() -> None:
    topic = _expanded()
    for epoch, partition, offset, error in [
        (1, 0, 5, "only the latest epoch"),
        (2, 4, 5, "gave no slots away"),
        (2, 0, -1, "offset >= 0"),
    ]:
        with pytest.raises(KeyOrderError, match=error):
            with_seal(topic, epoch, partition, offset)
    sealed = with_seal(topic, 2, 0, 5)
    with pytest.raises(KeyOrderError, match="already sealed"):
        with_seal(sealed, 2, 0, 6)


def test_a_group_releases_a_parent_once_it_committed_it_up_to_its_seal() -> None:
    topic = with_seal(_expanded(), 2, 0, 100)
    assert releasable(topic, "g", {0: 99}) == []
    assert releasable(topic, "g", {0: 100}) == [(2, 0)]
    assert releasable(topic, "g", {}, log_start={0: 100}) == [(2, 0)], "data expired past the seal: nothing to read"
    assert releasable(topic, "g", {}, drained={1}) == [(2, 1)], "removed once read to its end: no seal needed"
    released = with_release(topic, "g", 2, 0, broken=False, at_offset=7)
    assert releasable(released, "g", {0: 100}) == [] and (2, 0) not in open_parents(released, "g")
    assert (2, 0) in open_parents(released, "other-group")
    with pytest.raises(KeyOrderError, match="already released"):
        with_release(released, "g", 2, 0, broken=True)
    with pytest.raises(KeyOrderError, match="moved nothing away"):
        with_release(released, "g", 2, 4, broken=True)


def test_a_group_gives_up_only_on_a_parent_that_cannot_be_read_to_its_seal() -> None:
    topic = _expanded()
    assert not may_give_up(topic, (2, 0), unreadable=()), "pending, measurable: it will be sealed"
    assert may_give_up(topic, (2, 0), unreadable={0}), "on a fenced cluster"
    topic = with_seal(topic, 2, 0, 10)
    assert not may_give_up(topic, (2, 0), unreadable=()), "sealed and readable: a slow reader is no reason"
    topic = with_change(topic, next_change(topic, range(5), "shrink"))  # type: ignore[arg-type]
    assert may_give_up(topic, (2, 1), unreadable=()), "never sealed, and no longer can be"


def test_a_release_is_acted_on_once_the_old_partitions_owner_has_seen_it() -> None:
    topic = with_release(_expanded(), "g", 2, 0, broken=True, reason="c1 fenced", at_offset=50)
    assert acted_on(topic, "g", {0: 49}) == {}
    assert acted_on(topic, "g", {0: 50}).keys() == {(2, 0)}
    assert acted_on(topic, "g", {0: None}).keys() == {(2, 0)}, "nobody owns it: its next owner starts fresh"
    assert acted_on(topic, "h", {0: 50}) == {}


def test_the_history_keeps_the_last_epochs_and_replays_from_them() -> None:
    topic = strict_topic([0, 1])
    for i in range(MAX_EPOCHS_KEPT + 5):
        change = next_change(topic, [0, 1] if i % 2 else [0, 1, 2], f"change {i}")
        assert change is not None
        topic = with_change(topic, change)
        for p in pending_seals(topic):
            topic = with_release(with_seal(topic, topic.epoch, p, i), "g", topic.epoch, p, broken=False)
    assert len(topic.changes) == MAX_EPOCHS_KEPT and topic.changes[-1].epoch == topic.epoch == MAX_EPOCHS_KEPT + 6
    oldest = topic.changes[0]
    assert {m.from_partition for m in oldest.moves} == {NO_PARTITION}, "re-based: its parents count as released"
    assert all(epoch > oldest.epoch for epoch, _ in topic.seals) and all(k[1] > oldest.epoch for k in topic.releases)
    assert topic.change(oldest.epoch - 1) is None and open_parents(topic, "g") == []
    replayed = None
    for change in topic.changes:
        replayed = with_change(replayed, change)
    assert replayed is not None and replayed.map == topic.map and replayed.changes == topic.changes


def test_parents_follow_a_slot_through_every_move_up_to_the_records_epoch() -> None:
    """Slot s: partition 0 -> 2 (epoch 2, expand) -> 1 (epoch 3, partition 2 shrunk)."""
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [0, 1, 2], "expand"))  # type: ignore[arg-type]
    s = next(m.first_slot for m in topic.changes[-1].moves if m.from_partition == 0)
    topic = with_seal(with_seal(topic, 2, 0, 5), 2, 1, 5)
    topic = with_change(topic, next_change(topic, [0, 1], "shrink"))  # type: ignore[arg-type]
    moved_to = topic.map.owner(s)
    assert moved_to in (0, 1)
    assert parents_of(topic, s, 1) == []
    assert parents_of(topic, s, 2) == [(2, 0)]
    assert parents_of(topic, s, 3) == [(2, 0), (3, 2)]
    assert moved_out(topic, 0, s, 1) == (2, 0), "a record of epoch 1 in partition 0 is a parent of epoch 2"
    assert moved_out(topic, 2, s, 2) == (3, 2)
    assert moved_out(topic, moved_to, s, 3) is None


# -- the hold-back rule ----------------------------------------------------------------------------


def test_only_moved_ranges_wait_and_they_go_once_their_parent_is_released() -> None:
    """Partitions 0 and 1, then 0 shrunk: its slots move to 1. Partition 1's epoch-2 records of those slots
    wait for partition 0 to be read up to its seal; its other records never wait."""
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    kept = KEY_SLOTS - 1  # partition 1's own since epoch 1
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, {}, now_ms=0)
    assert [d.item for d in engine.offer(1, 0, kept, 2, "kept#1", now_ms=1)] == ["kept#1"]
    assert engine.offer(1, 1, moved, 2, "moved#2", now_ms=2) == []
    assert engine.offer(1, 2, moved, 2, "moved#3", now_ms=3) == []
    assert [d.item for d in engine.offer(1, 3, kept, 2, "kept#2", now_ms=4)] == ["kept#2"]
    assert [d.item for d in engine.offer(0, 7, moved, 1, "moved#1", now_ms=5)] == ["moved#1"], "the parent's own"
    assert engine.commit_position(1, 4) == 1, "never past a held record"
    assert engine.held() == 2 and engine.expired(now_ms=2 + engine.max_wait_ms) == [(2, 0)]
    topic = with_release(with_seal(topic, 2, 0, 8), "g", 2, 0, broken=False, at_offset=3)
    out = engine.observe(topic, acted_on(topic, "g", {0: 3}), now_ms=10)
    assert [(d.item, d.order_break, d.held_ms) for d in out] == [("moved#2", None, 8), ("moved#3", None, 7)]
    assert engine.held() == 0 and engine.commit_position(1, 4) == 4 and engine.expired(now_ms=10**9) == []
    assert engine.stats.longest_hold_ms == 8 and engine.stats.held_total == 2


def test_a_record_of_an_epoch_not_seen_yet_waits_for_the_metadata() -> None:
    topic = strict_topic([0, 1])
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, {}, now_ms=0)
    later = with_change(topic, next_change(topic, [0, 1, 2], "expand"))  # type: ignore[arg-type]
    stayed = next(s for s in range(KEY_SLOTS) if topic.map.owner(s) == later.map.owner(s) == 1)
    assert engine.offer(1, 0, stayed, 2, "from epoch 2", now_ms=0) == []
    assert engine.expired(now_ms=10**9) == [], "no give-up for metadata that is merely late"
    out = engine.observe(later, {}, now_ms=5)
    assert [d.item for d in out] == ["from epoch 2"], "its slot did not move in epoch 2"


def test_a_record_never_overtakes_a_held_record_of_its_slot_in_its_partition() -> None:
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, {}, now_ms=0)
    assert engine.offer(1, 0, moved, 2, "held", now_ms=0) == []
    assert engine.offer(1, 1, moved, None, "unstamped, same slot", now_ms=0) == []
    assert [d.item for d in engine.offer(1, 2, moved + 1, None, "unstamped, other slot", now_ms=0)] == [
        "unstamped, other slot"
    ]


def test_past_the_bound_only_partitions_that_hold_records_pause() -> None:
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    engine: HoldBack[int] = HoldBack("g", max_held=2)
    engine.observe(topic, {}, now_ms=0)
    engine.offer(1, 0, moved, 2, 0, now_ms=0)
    assert engine.paused() == frozenset()
    engine.offer(1, 1, moved, 2, 1, now_ms=0)
    assert engine.paused() == {1}, "partition 0, the parent, keeps being read"
    assert engine.drop(1, now_ms=0) == 2 and engine.held() == 0 and engine.paused() == frozenset()


def test_a_record_written_behind_the_seal_is_delivered_flagged() -> None:
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    topic = with_seal(topic, 2, 0, 10)
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, {}, now_ms=0)
    (before,) = engine.offer(0, 9, moved, 1, "below the seal", now_ms=0)
    (late,) = engine.offer(0, 10, moved, 1, "late", now_ms=0)
    assert before.order_break is None
    assert late.order_break is not None and late.order_break.kind == "late_write"
    assert (late.order_break.epoch, late.order_break.from_partition) == (2, 0)
    assert late.order_break.first_slot <= moved < late.order_break.end_slot
    assert engine.stats.breaks["late_write"] == 1


def test_a_give_up_flags_the_released_records_and_the_old_partitions_stragglers() -> None:
    """Partition 0's cluster is fenced; its slots moved to 1. The group gives up waiting: partition 1's held
    records go out flagged, and so do partition 0's old records read once the cluster is back."""
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "c0 fenced"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    engine: HoldBack[str] = HoldBack("g", max_wait_ms=100)
    engine.observe(topic, {}, now_ms=0)
    assert engine.offer(1, 0, moved, 2, "k#3", now_ms=0) == []
    assert engine.expired(now_ms=99) == [] and engine.expired(now_ms=100) == [(2, 0)]
    assert may_give_up(topic, (2, 0), unreadable={0})
    topic = with_release(topic, "g", 2, 0, broken=True, reason="c0 fenced for 100 ms", at_offset=4)
    (released,) = engine.observe(topic, acted_on(topic, "g", {0: 4}), now_ms=100)
    assert released.order_break is not None and released.order_break.kind == "gave_up"
    assert released.order_break.detail == "c0 fenced for 100 ms"
    (straggler,) = engine.offer(0, 5, moved, 1, "k#1", now_ms=200)
    assert straggler.order_break is not None and straggler.order_break.kind == "after_give_up"
    assert engine.stats.breaks == {"late_write": 0, "gave_up": 1, "after_give_up": 1}


def test_a_topic_switched_back_to_none_lets_everything_go() -> None:
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, {}, now_ms=0)
    engine.offer(1, 0, topic.changes[-1].moves[0].first_slot, 2, "held", now_ms=0)
    assert [(d.item, d.order_break) for d in engine.observe(None, {}, now_ms=1)] == [("held", None)]
    assert [d.item for d in engine.offer(1, 1, 0, 2, "any", now_ms=2)] == ["any"]


def test_a_release_waits_for_the_old_partitions_owner_so_that_it_flags_late_writes() -> None:
    """Why the coordinator's gate (``acted_on``). Slot s moves 0 -> 1; partition 0 is sealed at offset 10 and
    committed to it; member A owns partition 0 and has not seen the seal; member B owns partition 1. A late
    write lands in partition 0 at offset 10. If B acted on the release at once, it would deliver the key's new
    record, then A (knowing no seal) the late, older one, unflagged. With the gate, B waits until A has seen
    the release, and A then flags the late write."""
    topic = strict_topic([0, 1])
    before = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    s = before.changes[-1].moves[0].first_slot
    released = with_release(with_seal(before, 2, 0, 10), "g", 2, 0, broken=False, at_offset=12)
    a: HoldBack[str] = HoldBack("g")
    b: HoldBack[str] = HoldBack("g")
    a.observe(before, {}, now_ms=0)  # A's metadata stops before the seal (offset 11) and the release (12)
    b.observe(released, acted_on(released, "g", {0: 10}), now_ms=0)
    assert b.offer(1, 0, s, 2, "k#2", now_ms=0) == [], "held: A, who reads partition 0, has not seen the release"
    (unaware,) = a.offer(0, 10, s, 1, "k#1 (late)", now_ms=0)
    assert unaware.order_break is None, "A cannot tell: what the gate is for"
    a = HoldBack("g")
    a.observe(released, acted_on(released, "g", {0: 12}), now_ms=1)  # A has seen it now
    (k2,) = b.observe(released, acted_on(released, "g", {0: 12}), now_ms=1)
    (late,) = a.offer(0, 10, s, 1, "k#1 (late)", now_ms=1)
    assert k2.item == "k#2" and late.order_break is not None and late.order_break.kind == "late_write"


def test_a_record_is_flagged_for_a_give_up_only_if_it_waited_for_that_parent() -> None:
    """Slot s: 0 -> 1 in epoch 2 (given up: partition 0's cluster was fenced), then 1 -> 2 in epoch 3. A record
    of epoch 3 read after that give-up waits for partition 1 only, and once that is read normally, it goes
    unflagged: the break was reported with the records the give-up let go."""
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "c0 fenced"))  # type: ignore[arg-type]
    s = topic.changes[-1].moves[0].first_slot
    topic = with_release(topic, "g", 2, 0, broken=True, reason="c0 fenced", at_offset=3)
    topic = with_change(with_seal(topic, 2, 0, 0), next_change(topic, [2], "expand, shrink 1"))  # type: ignore[arg-type]
    assert parents_of(topic, s, 3) == [(2, 0), (3, 1)]
    engine: HoldBack[str] = HoldBack("g")
    engine.observe(topic, acted_on(topic, "g", {}), now_ms=0)
    assert engine.offer(2, 0, s, 3, "k#9", now_ms=0) == []
    topic = with_release(with_seal(topic, 3, 1, 4), "g", 3, 1, broken=False, at_offset=9)
    (d,) = engine.observe(topic, acted_on(topic, "g", {}), now_ms=1)
    assert d.item == "k#9" and d.order_break is None


def test_a_reader_that_cannot_skip_stops_at_the_first_record_that_waits() -> None:
    """``first_held``, the gateway's rule for Kafka clients (they read by offset): the first record of a
    moved range waits, with its parent, and everything after it in its partition waits behind it, kept
    slots included; unstamped records, kept slots and released parents never stop the reader; a record of an
    epoch the metadata does not know yet stops it with no parent known."""
    topic = strict_topic([0, 1])
    topic = with_change(topic, next_change(topic, [1], "shrink 0"))  # type: ignore[arg-type]
    moved = topic.changes[-1].moves[0].first_slot
    kept = KEY_SLOTS - 1
    records = [(10, kept, 2), (11, moved, None), (12, moved, 2), (13, kept, 2)]
    assert first_held(topic, set(), records) == (12, ((2, 0),))
    assert first_held(topic, {(2, 0)}, records) is None, "released: it goes"
    assert first_held(None, set(), records) is None, "the topic is not strict (any more)"
    assert first_held(topic, set(), [(5, moved, 3)]) == (5, ()), "epoch 3 is not known yet"
    assert first_held(topic, set(), [(5, moved, 0)]) is None, "not an epoch: unstamped"
    engine: HoldBack[str] = HoldBack("g")  # the same verdicts as the member that holds records
    engine.observe(topic, {}, now_ms=0)
    assert [o for o, s, e in records if engine.offer(1, o, s, e, "r", now_ms=0) == []] == [12]
