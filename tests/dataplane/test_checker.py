"""The data-plane checker on handcrafted histories: it finds each anomaly in a history planted with it, and
none in a correct one. ``make mutants`` mutates ``checker.py`` and fails when no test here notices."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from .checker import Summary, check, must_read


def send(mid: str, topic: str = "T", key: str | None = None, seq: int | None = None,
         txn: str | None = None, at: float = 1.0) -> dict[str, Any]:  # fmt: skip
    return {"op": "send", "client": "p", "id": mid, "topic": topic, "key": key, "seq": seq, "txn": txn, "call": at}


def ack(mid: str, partition: int | None = None, offset: int | None = None, outcome: str = "ok",
        at: float = 1.5) -> dict[str, Any]:  # fmt: skip
    """An acknowledgement; only an ``ok`` one says where the message is."""
    op = {"op": "ack", "id": mid, "outcome": outcome, "ret": at}
    return {**op, "partition": partition, "offset": offset} if outcome == "ok" else op


def read(mid: str, partition: int, offset: int, at: float, member: str = "m1", group: str = "g",
         topic: str = "T") -> dict[str, Any]:  # fmt: skip
    return {"op": "read", "group": group, "member": member, "id": mid, "topic": topic, "partition": partition,
            "offset": offset, "at": at}  # fmt: skip


def member_op(op: str, member: str, at: float, partition: int = 0, topic: str = "T", **more: Any) -> dict[str, Any]:
    return {"op": op, "group": "g", "member": member, "topic": topic, "partition": partition, "at": at, **more}


def correct() -> list[dict[str, Any]]:
    """Two keys and a key-less message on a strict topic; on another, two committed transactions, an aborted
    one and one whose outcome its producer never learned; one member that reads, commits and leaves, a second
    that takes over from its commit; another group that reads the second topic only, read_uncommitted."""
    # fmt: off
    return [
        {"op": "topic", "topic": "T", "key_order": "strict"},
        {"op": "topic", "topic": "X", "key_order": "none"},
        {"op": "subscribe", "group": "g", "topic": "T", "isolation": "read_committed"},
        {"op": "subscribe", "group": "g", "topic": "X", "isolation": "read_committed"},
        {"op": "subscribe", "group": "h", "topic": "X", "isolation": "read_uncommitted"},
        send("a1", key="a", seq=1), ack("a1", 0, 0),
        send("b1", key="b", seq=1), ack("b1", 0, 1),
        send("a2", key="a", seq=2, at=1.1), ack("a2", 0, 2),
        send("u", key="a", seq=3, at=1.2), ack("u", outcome="unknown"),  # may or may not be read
        send("n", at=1.25), ack("n", 0, 5), send("n2", at=1.26), ack("n2", 0, 6),  # key-less: no order
        send("f", key="b", seq=2, at=1.3), ack("f", outcome="failed"),
        send("c1", "X", txn="tc"), send("c2", "X", txn="tc"), ack("c1", 0, 0), ack("c2", 1, 0),
        {"op": "txn", "txn": "tc", "outcome": "commit", "ret": 1.6},
        send("d1", "X", txn="td"), send("d2", "X", txn="td"), ack("d1", 0, 1), ack("d2", 1, 1),
        {"op": "txn", "txn": "td", "outcome": "abort", "ret": 1.7},
        send("e1", "X", txn="te"), ack("e1", 0, 2), {"op": "txn", "txn": "te", "outcome": "commit", "ret": 1.8},
        send("v1", "X", txn="tv"), ack("v1", 1, 2), {"op": "txn", "txn": "tv", "outcome": "unknown", "ret": 1.9},
        send("w1", "X", txn="tw"), ack("w1", 0, 3), {"op": "txn", "txn": "tw", "outcome": "abort", "ret": 1.95},
        member_op("assign", "m1", 2.0),
        read("a1", 0, 0, 2.1), read("b1", 0, 1, 2.2),
        member_op("commit", "m1", 2.25, offset=3, outcome="failed"),
        member_op("commit", "m1", 2.3, offset=2, outcome="ok"),
        member_op("revoke", "m1", 2.4), member_op("member_end", "m1", 2.5, how="left"),
        member_op("assign", "m2", 2.6),
        read("a2", 0, 2, 2.7, member="m2"), read("u", 0, 3, 2.72, member="m2"),
        read("n", 0, 5, 2.75, member="m2"), read("n2", 0, 6, 2.77, member="m2"),
        read("c1", 0, 0, 2.8, member="m2", topic="X"), read("c2", 1, 0, 2.9, member="m2", topic="X"),
        read("e1", 0, 2, 2.95, member="m2", topic="X"), read("v1", 1, 2, 2.97, member="m2", topic="X"),
        *[read(mid, p, o, 3.1 + i / 10, group="h", member="h1", topic="X")
          for i, (mid, p, o) in enumerate([("c1", 0, 0), ("c2", 1, 0), ("e1", 0, 2), ("v1", 1, 2)])],
    ]
    # fmt: on


def kinds(ops: list[dict[str, Any]]) -> list[str]:
    return [a.kind for a in check(ops)[0]]


def relaxed(ops: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The history with T a ``none`` topic: no hold-back, so no redelivery is excused and offsets only grow."""
    for op in ops:
        if op["op"] == "topic" and op["topic"] == "T":
            op["key_order"] = "none"
    return ops


def test_a_correct_history_has_no_anomaly_and_is_counted() -> None:
    anomalies, summary = check(correct())
    assert anomalies == []
    assert summary == Summary(sent=14, acknowledged=12, failed=1, unknown=1, committed_txns=2, aborted_txns=2,
                              reads=14, commits=1, excused_duplicates=0)  # fmt: skip


def test_an_acknowledged_message_never_read_is_lost() -> None:
    ops = [op for op in correct() if not (op["op"] == "read" and op["id"] == "a2")]
    assert kinds(ops) == ["lost"]


def test_a_committed_transactions_message_never_read_is_lost_and_tears_the_transaction() -> None:
    ops = [op for op in correct() if not (op["op"] == "read" and op["group"] == "g" and op["id"] == "c2")]
    assert sorted(kinds(ops)) == ["lost", "torn-commit"]


def test_a_message_of_an_aborted_transaction_read_committed() -> None:
    ops = [*correct(), read("d1", 0, 1, 3.0, member="m3", topic="X")]
    assert kinds(ops) == ["aborted-read"], "one of its two messages: aborted, not torn"


def test_a_committed_transaction_nobody_read_is_lost_not_torn() -> None:
    ops = [op for op in correct() if not (op["op"] == "read" and op["group"] == "g" and op["id"] in ("c1", "c2"))]
    assert kinds(ops) == ["lost", "lost"]


def test_a_read_uncommitted_group_is_never_torn() -> None:
    ops = [op for op in correct() if not (op["op"] == "read" and op["group"] == "h" and op["id"] == "c2")]
    assert kinds(ops) == ["lost"]


def test_an_aborted_transactions_message_may_be_read_uncommitted() -> None:
    ops = [*correct(), read("d1", 0, 1, 3.0, member="m3", topic="X")]
    for op in ops:
        if op["op"] == "subscribe" and op["topic"] == "X":
            op["isolation"] = "read_uncommitted"
    assert kinds(ops) == []


def test_a_message_read_twice_by_one_group_is_a_duplicate() -> None:
    assert kinds([*relaxed(correct()), read("a1", 0, 0, 3.0, member="m2")]) == ["duplicate", "offset-backwards"]
    assert kinds([*relaxed(correct()), read("a2", 0, 2, 3.0, member="m2")]) == ["duplicate", "offset-backwards"]


def test_an_offset_read_twice_in_a_row_goes_back() -> None:
    assert kinds([*relaxed(correct()), read("n2", 0, 6, 2.78, member="m2")]) == ["duplicate", "offset-backwards"]


def test_a_message_read_at_two_positions_was_written_twice() -> None:
    anomalies, _ = check([*correct(), send("a9", key="a", seq=9, at=1.4), ack("a9", 0, 7), read("a9", 0, 7, 2.8,
                          member="m2"), read("a9", 0, 8, 2.85, member="m2")])  # fmt: skip
    assert [a.kind for a in anomalies] == ["phantom-read", "duplicate"]
    assert "written twice: at 0/7 and 0/8" in anomalies[1].detail


def rewritten_through_a_gateway(fault_at: float, via: str = "gateway", offsets: tuple[int, int] = (7, 8),
                                kind: str = "kill_gateway") -> list[dict[str, Any]]:  # fmt: skip
    """a9, sent at 1.4 and acknowledged at 1.6 at T/0/8, read at T/0/7 and T/0/8; a gateway fault at ``fault_at``."""
    a9 = {**send("a9", at=1.4), "via": via}
    return [*correct(), a9, ack("a9", 0, offsets[1], at=1.6), {"op": "fault", "kind": kind, "at": fault_at},
            read("a9", 0, offsets[0], 2.8, member="m2"), read("a9", 0, offsets[1], 2.85, member="m2")]  # fmt: skip


def test_a_message_written_twice_after_its_gateway_died_before_the_acknowledgement_is_excused() -> None:
    for at, kind in ((1.4, "kill_gateway"), (1.5, "pause_gateway"), (1.6, "kill_gateway")):
        anomalies, summary = check(rewritten_through_a_gateway(at, kind=kind))
        assert anomalies == [] and summary.rewritten == 1, (at, kind)
    for history in (rewritten_through_a_gateway(1.39), rewritten_through_a_gateway(1.61),
                    rewritten_through_a_gateway(1.5, via="sdk"), rewritten_through_a_gateway(1.5, offsets=(8, 8)),
                    rewritten_through_a_gateway(1.5, kind="kill_node")):  # fmt: skip
        assert "duplicate" in kinds(history)
    assert kinds(rewritten_through_a_gateway(1.61))[0] == "phantom-read", "the copy not acknowledged is a phantom"


def test_an_sdk_key_less_message_written_twice_after_a_broker_stalled_was_re_routed() -> None:
    for kind in ("kill_broker", "pause_broker"):
        anomalies, summary = check(rewritten_through_a_gateway(1.5, via="sdk", kind=kind))
        assert anomalies == [] and summary.rewritten == 1, kind
    keyed = rewritten_through_a_gateway(1.5, via="sdk", kind="kill_broker")
    next(op for op in keyed if op["op"] == "send" and op["id"] == "a9")["key"] = "z"
    assert "duplicate" in kinds(keyed), "a keyed message is not re-routed: its partition deduplicates it"
    in_txn = rewritten_through_a_gateway(1.5, via="sdk", kind="kill_broker")
    next(op for op in in_txn if op["op"] == "send" and op["id"] == "a9")["txn"] = "tc"
    assert "duplicate" in kinds(in_txn), "a transaction's message stays on its participant"
    assert "duplicate" in kinds(rewritten_through_a_gateway(1.5, via="sdk", kind="kill_gateway"))
    assert "duplicate" in kinds(rewritten_through_a_gateway(1.5, via="spark", kind="kill_broker")), (
        "only the SDK re-routes"
    )


def test_a_message_written_twice_after_a_broker_stalled_is_excused_on_a_strict_topic_only() -> None:
    for kind in ("kill_broker", "pause_broker"):
        anomalies, summary = check(rewritten_through_a_gateway(1.5, kind=kind))
        assert anomalies == [] and summary.rewritten == 1, "T is strict: the key map placed the resend anew"
        assert "duplicate" in kinds(relaxed(rewritten_through_a_gateway(1.5, kind=kind))), (
            "on a none topic the resend goes to the same partition, which deduplicates it"
        )


def test_on_a_strict_topic_a_read_again_after_the_partition_left_its_reader_is_a_redelivery() -> None:
    anomalies, summary = check([*correct(), read("a1", 0, 0, 2.8, member="m2")])
    assert anomalies == [] and summary.redelivered == 1, "m1 read a1, then T/0 was revoked: held-back redelivery"
    assert kinds([*correct(), read("a1", 0, 0, 2.15)]) == ["duplicate"], "m1 again, before its revocation"
    ops = [op for op in correct() if op["op"] != "revoke"]
    assert kinds([*ops, read("a1", 0, 0, 2.45, member="m2")]) == ["duplicate"], "m1 still held T/0"
    anomalies, summary = check([*ops, read("a1", 0, 0, 2.5, member="m2")])
    assert anomalies == [] and summary.redelivered == 1, "m1's end (at 2.5) gave its partitions up"


def test_on_a_strict_topic_a_partition_leaves_its_reader_at_the_instant_of_its_revocation_or_end() -> None:
    anomalies, summary = check([*correct(), read("a1", 0, 0, 2.4, member="m2")])
    assert anomalies == [] and summary.redelivered == 1, "read again at the instant of m1's revocation"
    a8 = [send("a8", at=1.4), ack("a8", 0, 9), read("a8", 0, 9, 2.4), read("a8", 0, 9, 2.7, member="m2")]
    anomalies, summary = check([*[op for op in correct() if op["op"] != "member_end"], *a8])
    assert anomalies == [] and summary.redelivered == 1, "m1 read a8 at the instant T/0 was revoked"
    a8[2]["at"] = 2.5
    anomalies, summary = check([*[op for op in correct() if op["op"] != "revoke"], *a8])
    assert anomalies == [] and summary.redelivered == 1, "m1 read a8 at the instant it ended"
    ended = [*[op for op in correct() if op["op"] != "revoke"], read("a1", 0, 0, 2.5, member="m2")]
    assert kinds(ended) == [], "read again at the instant m1 ended"


def test_what_each_group_must_read() -> None:
    assert must_read(correct()) == {"g": {"a1", "b1", "a2", "n", "n2", "c1", "c2", "e1"}, "h": {"c1", "c2", "e1"}}


def test_on_a_strict_topic_offsets_may_go_back_when_held_records_are_released() -> None:
    ops = correct()
    next(op for op in ops if op["op"] == "read" and op["id"] == "b1")["at"] = 2.05
    assert kinds(ops) == []


def test_a_message_acknowledged_without_a_position_may_be_read_anywhere() -> None:
    ops = correct()
    a2 = next(op for op in ops if op["op"] == "ack" and op["id"] == "a2")
    a2["partition"] = a2["offset"] = None  # the gateway answers -1 on a strict topic
    next(op for op in ops if op["op"] == "read" and op["id"] == "a2")["offset"] = 4
    assert kinds(ops) == []


def test_a_read_again_after_a_killed_member_that_had_not_committed_it_is_excused() -> None:
    ops = relaxed(correct())
    end = next(op for op in ops if op["op"] == "member_end")
    end["how"] = "killed"
    commit = next(op for op in ops if op["op"] == "commit" and op["outcome"] == "ok")
    commit["offset"] = 1  # it committed up to b1 (offset 1) only; its commit past it failed
    anomalies, summary = check([*ops, read("b1", 0, 1, 2.65, member="m2")])
    assert anomalies == [] and summary.excused_duplicates == 1
    assert kinds([*ops, read("a1", 0, 0, 2.65, member="m2")]) == ["duplicate"], "a1 was committed before the kill"


def test_a_read_again_after_a_graceful_leave_is_a_duplicate_whatever_it_committed() -> None:
    ops = relaxed(correct())
    next(op for op in ops if op["op"] == "commit" and op["outcome"] == "ok")["offset"] = 1
    assert kinds([*ops, read("b1", 0, 1, 2.65, member="m2")]) == ["duplicate"]


def test_a_read_again_before_the_first_readers_kill_is_a_duplicate() -> None:
    ops = relaxed(correct())
    end = next(op for op in ops if op["op"] == "member_end")
    end["how"], end["at"] = "expired", 2.9
    next(op for op in ops if op["op"] == "commit" and op["outcome"] == "ok")["offset"] = 1
    assert kinds([*ops, read("b1", 0, 1, 2.65, member="m2")]) == ["duplicate"]


def test_a_read_again_at_the_instant_its_first_reader_was_killed_is_excused() -> None:
    ops = relaxed(correct())
    end = next(op for op in ops if op["op"] == "member_end")
    end["how"], end["at"] = "killed", 2.65
    next(op for op in ops if op["op"] == "commit" and op["outcome"] == "ok")["offset"] = 1
    assert kinds([*ops, read("b1", 0, 1, 2.65, member="m2")]) == []


def test_a_read_again_after_a_killed_member_that_committed_nothing_is_excused() -> None:
    ops = [op for op in relaxed(correct()) if op["op"] != "commit"]
    next(op for op in ops if op["op"] == "member_end")["how"] = "killed"
    assert kinds([*ops, read("b1", 0, 1, 2.65, member="m2")]) == []


def test_a_read_of_a_message_nobody_sent_or_at_another_offset_is_a_phantom() -> None:
    assert kinds([*correct(), read("zz", 0, 9, 3.0, member="m2")]) == ["phantom-read"]
    ops = correct()
    next(op for op in ops if op["op"] == "read" and op["id"] == "a2")["offset"] = 1
    assert kinds(ops) == ["phantom-read"]
    assert kinds([*correct(), read("c1", 0, 7, 3.0, member="m2")]) == ["phantom-read"], "sent to X, read on T"


def test_a_keys_messages_read_out_of_their_sequence_on_a_strict_topic() -> None:
    ops = correct()
    a2 = next(op for op in ops if op["op"] == "read" and op["id"] == "a2")
    a2["at"], a2["member"], a2["offset"] = 2.05, "m1", 2  # before a1
    assert "key-order" in kinds(ops)
    for op in ops:
        if op["op"] == "topic" and op["topic"] == "T":
            op["key_order"] = "none"
    assert "key-order" not in kinds(ops), "no order is promised on a none topic"


def test_a_keys_message_read_late_is_excused_only_at_or_past_a_seal_of_its_partition() -> None:
    ops = correct()
    next(op for op in ops if op["op"] == "read" and op["id"] == "a2")["at"] = 2.05  # before a1 (seq 1)
    for seal, excused in ((0, True), (1, False)):  # a1 was acknowledged at T/0/0
        anomalies, summary = check([*ops, {"op": "seal", "topic": "T", "partition": 0, "offset": seal, "at": 1.0}])
        assert ([a.kind for a in anomalies] == []) == excused and summary.late_writes == int(excused), seal
    other = [*ops, {"op": "seal", "topic": "T", "partition": 1, "offset": 0, "at": 1.0},
             {"op": "seal", "topic": "X", "partition": 0, "offset": 0, "at": 1.0}]  # fmt: skip
    assert kinds(other) == ["key-order"], "a seal of another partition, or of another topic, excuses nothing"
    lowest = [*ops, *({"op": "seal", "topic": "T", "partition": 0, "offset": o, "at": 1.0} for o in (5, 0, 3))]
    assert kinds(lowest) == [], "the partition's first seal counts"


def test_only_a_late_write_acknowledged_at_a_position_is_excused() -> None:
    ops = correct()
    next(op for op in ops if op["op"] == "read" and op["id"] == "a2")["at"] = 2.05  # a1 read after a2
    a1 = next(op for op in ops if op["op"] == "ack" and op["id"] == "a1")
    sealed = [*ops, {"op": "seal", "topic": "T", "partition": 0, "offset": 0, "at": 1.0}]
    for outcome in ("failed", "unknown"):
        a1.clear()
        a1.update(ack("a1", outcome=outcome))
        assert kinds(sealed) == ["key-order"], outcome
    a1.update(ack("a1"), partition=None, offset=None)  # the gateway's answer on a strict topic
    assert kinds(sealed) == ["key-order"], "no position: not known to lie past the seal"


def test_a_keyed_message_without_a_sequence_has_no_order_to_keep() -> None:
    ops = [*correct(), send("j1", key="a", at=1.35), ack("j1", 0, 7), read("j1", 0, 7, 2.8, member="m2")]
    assert kinds(ops) == [], "a client that numbers nothing (GatewayClient's keys) is not in the key's order"


def test_key_order_is_checked_past_an_excused_late_write() -> None:
    ops = correct()
    next(op for op in ops if op["op"] == "read" and op["id"] == "a2")["at"] = 2.05  # a1 late, past T/0's seal
    sealed = {"op": "seal", "topic": "T", "partition": 0, "offset": 0, "at": 1.0}

    def later(partition: int) -> list[dict[str, Any]]:
        """a5 read before a4, both on ``partition``."""
        return [send("a4", key="a", seq=4, at=1.3), ack("a4", partition, 8), send("a5", key="a", seq=5, at=1.31),
                ack("a5", partition, 9), read("a5", partition, 9, 2.8, member="m2"),
                read("a4", partition, 8, 2.9, member="m2")]  # fmt: skip

    anomalies, summary = check([*ops, *later(1), sealed])
    assert [a.kind for a in anomalies] == ["key-order"] and "'a4' (seq 4)" in anomalies[0].detail
    assert summary.late_writes == 1
    anomalies, summary = check([*ops, *later(0), sealed])
    assert anomalies == [] and summary.late_writes == 2


def test_offsets_that_go_back_while_a_member_holds_its_partition() -> None:
    ops = relaxed(correct())
    b1 = next(op for op in ops if op["op"] == "read" and op["id"] == "b1")
    b1["at"] = 2.05  # read before a1 (offset 0), though at offset 1
    assert kinds(ops) == ["offset-backwards"]
    reassigned = [*copy.deepcopy(ops), member_op("revoke", "m1", 2.07), member_op("assign", "m1", 2.08)]
    assert kinds(reassigned) == [], "a partition assigned again starts afresh"


def test_the_visibility_of_all_parts_together_is_refused_until_empty_polls_are_recorded() -> None:
    with pytest.raises(ValueError, match="empty polls"):
        check(correct(), visibility="together")
