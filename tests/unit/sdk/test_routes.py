"""A producer's routing decisions (``sdk/routes.py``), without Kafka: what becomes of a failed delivery, where a
keyed, key-less or pinned message may go, why a partition takes no writes, a strict topic's slot table. These
are the decisions ``make mutants`` mutates: each test pins one down."""

from __future__ import annotations

import zlib
from itertools import cycle

from confluent_kafka import KafkaError

from metadata_log.image.cluster import ClusterImage
from metadata_log.keymap import KEY_SLOTS, SLOT_MASK, epoch_header
from sdk.messages import Origin
from sdk.routes import AfterFailure, Route, Target, after_failure, strict_table, why_not_writable, with_epoch_header

from ..samples import shrunk, strict


def target(partition: int, cluster: str = "c1") -> Target:
    return Target(Origin("T", partition, cluster), "T", partition)


def test_a_key_less_message_purged_before_it_was_sent_is_produced_again_elsewhere_unless_in_a_transaction() -> None:
    purged = KafkaError._PURGE_QUEUE
    assert after_failure(purged, rerouted=True, transactional=False) == AfterFailure(reroute=True, mute=False)
    assert after_failure(purged, rerouted=True, transactional=True) == AfterFailure(reroute=False, mute=False), (
        "a transaction's message stays on its participant: the transaction aborts instead"
    )
    assert after_failure(purged, rerouted=False, transactional=False) == AfterFailure(reroute=False, mute=False), (
        "a keyed or pinned message is reported: its partition was the application's choice"
    )


def test_a_cluster_error_mutes_the_cluster_and_a_message_error_does_not() -> None:
    for code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._MSG_TIMED_OUT, KafkaError.NOT_LEADER_FOR_PARTITION):
        assert after_failure(code, rerouted=True, transactional=False) == AfterFailure(reroute=False, mute=True)
    for code in (KafkaError.MSG_SIZE_TOO_LARGE, KafkaError.INVALID_RECORD):
        assert after_failure(code, rerouted=True, transactional=False) == AfterFailure(reroute=False, mute=False)


def test_a_keyed_message_goes_by_its_keys_hash_over_the_writable_partitions_or_waits_when_there_is_none() -> None:
    writable = (target(0), target(1), target(2))
    route = Route(writable, cycle(()), {p: t for p, t in enumerate(writable)}, {})
    for key in (b"k1", b"k2", "text", 17):
        raw = key if isinstance(key, bytes) else str(key).encode()
        assert route.keyed(key) is writable[zlib.crc32(raw) % 3]
        assert route.takes(None, key)
    empty = Route((), cycle(()), {0: target(0)}, {0: "partition is read_only"})
    assert empty.keyed(b"k1") is None and not empty.takes(None, b"k1") and not empty.takes(None, None)
    assert route.takes(None, None)


def test_a_pinned_message_goes_to_an_existing_writable_partition_and_waits_only_for_a_leader_or_metadata() -> None:
    route = Route((target(0),), cycle(()), {0: target(0), 1: target(1)}, {1: "partition is read_only"},
                  leaderless=frozenset({2}))  # fmt: skip
    assert route.takes(0, None) and not route.takes(1, None) and not route.takes(5, None)
    assert route.waits(2) and not route.waits(1)
    assert Route((), cycle(()), {}, {}, loaded=False).waits(0), "metadata not loaded yet: everything waits"


def test_a_strict_topic_routes_a_key_by_its_slot_and_stamps_only_slots_that_moved() -> None:
    history = strict(shrunk())
    writable = [target(p) for p in range(3)]
    table, stamp, stamps = strict_table(history, writable)
    assert len(table) == len(stamps) == KEY_SLOTS
    assert stamp == epoch_header(history.epoch) == ("kfed-epoch", b"2")
    by_partition = {t.origin.partition: t for t in writable}
    for first, end, partition in history.map.ranges():
        assert table[first] is by_partition.get(partition) and table[end - 1] is by_partition.get(partition)
    moved = {s for m in history.changes[-1].moves if m.from_partition == 3 for s in range(m.first_slot, m.end_slot)}
    assert all((stamps[s] == [stamp]) == (s in moved) for s in range(KEY_SLOTS))
    route = Route(tuple(writable), cycle(()), {t.origin.partition: t for t in writable}, {}, table=table)
    key = next(k for k in (b"k%d" % i for i in range(1000))
               if table[zlib.crc32(k) & SLOT_MASK] is not writable[zlib.crc32(k) % 3])  # fmt: skip
    assert route.keyed(key) is table[zlib.crc32(key) & SLOT_MASK], "by the table, not by the hash"
    waiting = Route((writable[0],), cycle(()), {0: writable[0]}, {}, table=[None] * KEY_SLOTS)
    assert waiting.takes(None, None) and not waiting.takes(None, b"k1"), (
        "every slot waits, yet key-less messages go round robin"
    )
    only_two = strict_table(history, writable[:2])[0]
    assert {t.origin.partition for t in only_two if t is not None} == {0, 1} and None in only_two, (
        "a slot of a partition that takes no writes waits"
    )


def test_why_a_partition_takes_no_writes() -> None:
    active = ClusterImage("c1", "r1", "h:1")
    assert why_not_writable("read_only", active) == "partition is read_only"
    assert why_not_writable("writable", None) == "its cluster is not registered"
    fenced = ClusterImage("c1", "r1", "h:1", fenced=True, fenced_reason="broker down")
    assert why_not_writable("writable", fenced) == "cluster c1 is fenced (broker down)"
    assert why_not_writable("writable", ClusterImage("c1", "r1", "h:1", state="draining")) == "cluster c1 is draining"


def test_the_epoch_header_joins_whatever_headers_a_message_has() -> None:
    stamp = ("kfed-epoch", b"2")
    assert with_epoch_header(None, stamp) == [stamp]
    assert with_epoch_header({"a": b"1"}, stamp) == [("a", b"1"), stamp]
    assert with_epoch_header([("a", b"1")], stamp) == [("a", b"1"), stamp]
