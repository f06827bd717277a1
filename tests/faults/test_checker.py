"""The checker on handcrafted histories: it must find each kind of anomaly (a checker that cannot fail
is worthless) and stay quiet on a correct history.

Each branch of ``checker.py`` has a history here that only it catches: ``python -m tests.faults.mutants``
(``make mutants``, part of ``make test``) deletes or negates every branch, moves every comparison's
boundary and shifts every index in turn, and fails if no test here notices. Histories named after a
mutant that once survived (issue 30) keep it dead."""

from __future__ import annotations

import copy
from typing import Any

from .checker import Summary, check
from .history import record_digest

CLUSTER = {"region": "r-w0", "bootstrap_servers": "127.0.0.1:9"}


def rec(offset: int, type_: str, **data: Any) -> dict[str, Any]:
    return {"offset": offset, "type": type_, "data": data}


def good_log() -> list[dict[str, Any]]:
    return [
        rec(0, "ClusterRegistered", cluster_id="w0-c0", **CLUSTER),
        rec(1, "ClusterRegistered", cluster_id="w0-c1", **CLUSTER),
        rec(2, "TopicCreated", topic_id="id-t2", name="w0-t2", region="r-w0", retention_ms=None),
        rec(3, "PartitionsAdded", topic="w0-t2", partition=0, cluster_id="w0-c0", physical_topic="w0-t2",
            physical_partition=0),
        rec(4, "PartitionsAdded", topic="w0-t2", partition=1, cluster_id="w0-c1", physical_topic="w0-t2",
            physical_partition=0),
        rec(5, "PartitionStateChanged", topic="w0-t2", partition=1, state="read_only"),
    ]  # fmt: skip


def write(key: str, kind: str, outcome: str, call: float, offset: int | None = None, **args: Any) -> dict[str, Any]:
    op = {"client": "w0", "op": "write", "key": key, "kind": kind, **args, "node": 1, "call": call,
          "ret": call + 0.1, "outcome": outcome}  # fmt: skip
    if offset is not None:
        op["offset"] = offset
    if outcome == "failed":
        op["status"] = 409
    return op


def good_history(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        write("k0", "register", "ok", 1.0, 0, cluster_id="w0-c0"),
        write("k1", "register", "unknown", 2.0, cluster_id="w0-c1"),  # timed out ...
        write("k1", "register", "ok", 3.0, 1, cluster_id="w0-c1"),  # ... the retry with its key got the outcome
        write("k2", "create_topic", "ok", 4.0, 4, name="w0-t2", partitions_per_cluster=1),
        write("k3", "partition_state", "ok", 5.0, 5, topic="w0-t2", partition=1, state="read_only"),
        write("k4", "register", "unknown", 6.0, cluster_id="w0-c9"),  # unknown, never committed: allowed
        write("k5", "delete_topic", "failed", 7.0, name="nope"),
        {"client": "t0", "op": "tail", "node": 1, "offset": 0, "call": 2.5, "ret": 2.6, "outcome": "ok",
         "records": [[r["offset"], record_digest(r)] for r in log[:3]]},
        {"client": "t0", "op": "tail", "node": 2, "offset": 3, "call": 6.0, "ret": 6.1, "outcome": "ok",
         "records": [[r["offset"], record_digest(r)] for r in log[3:]]},
        *[{"client": "o", "op": "node", "node": n, "call": t, "ret": t, "outcome": "ok", "role": role, "term": 1,
           "leader_id": 1, "applied_offset": 0} for t in (1.0, 1.1) for n, role in ((1, "leader"), (2, "follower"))],
    ]  # fmt: skip


def metadata_at(offset: int) -> dict[str, Any]:
    from metadata_log.codec import record_from_dict
    from metadata_log.image import EMPTY_IMAGE, apply
    from metadata_log.views import metadata_view

    records = [record_from_dict(r["type"], r["data"]) for r in good_log()[: offset + 1]]
    return copy.deepcopy(metadata_view(apply(EMPTY_IMAGE, records)))


def run_check(
    ops: list[dict[str, Any]] | None = None, logs: dict[int, list[dict[str, Any]]] | None = None, **kw: Any
) -> list[str]:
    log = good_log()
    logs = logs if logs is not None else {1: log, 2: copy.deepcopy(log), 3: log[2:]}  # node 3 restarted from a dump
    ops = ops if ops is not None else good_history(log)
    metadata = kw.get("metadata", {1: metadata_at(5)})
    anomalies, _ = check(ops, logs, metadata, archive=kw.get("archive", ()), ends=kw.get("ends"))
    return [a.kind for a in anomalies]


def test_a_correct_history_has_no_anomaly() -> None:
    assert run_check() == []
    _, summary = check(good_history(good_log()), {1: good_log()}, {})
    assert (summary.writes, summary.acknowledged, summary.unknown, summary.failed) == (6, 4, 1, 1)
    assert summary.unknown_attempts == 2 and summary.tail_records == 6


def test_lost_acknowledged_write() -> None:
    log = good_log()
    lost = [r for r in log if r["offset"] != 1]  # the acked registration of w0-c1 vanished ...
    for i, r in enumerate(lost):
        r["offset"] = i  # ... and the log closed up behind it
    kinds = run_check(logs={1: lost, 2: copy.deepcopy(lost)})
    assert "lost-write" in kinds


def test_acknowledged_beyond_the_log() -> None:
    ops = [*good_history(good_log()), write("k9", "register", "ok", 9.0, 17, cluster_id="w0-c17")]
    assert "lost-write" in run_check(ops=ops)


def test_duplicate_write() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="w0-c1", **CLUSTER)]  # a retry applied twice
    assert "duplicate-write" in run_check(logs={1: log, 2: copy.deepcopy(log)})


def test_refused_write_in_the_log() -> None:
    log = [*good_log(), rec(6, "TopicDeleted", name="w0-t2")]
    ops = [*good_history(good_log()), write("k6", "delete_topic", "failed", 8.0, name="w0-t2")]
    assert "failed-write-applied" in run_check(ops=ops, logs={1: log})


def test_phantom_record() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="nobody-asked", **CLUSTER)]
    assert "phantom-record" in run_check(logs={1: log})


def test_gap_in_a_nodes_log() -> None:
    log = good_log()
    gapped = log[:3] + log[4:]
    assert "log-gap" in run_check(logs={1: log, 2: gapped})


def test_nodes_disagree() -> None:
    log = good_log()
    other = copy.deepcopy(log)
    other[5]["data"]["state"] = "removed"
    kinds = run_check(logs={1: log, 2: other})
    assert "log-diverged" in kinds


def test_nodes_do_not_end_together() -> None:
    log = good_log()
    assert "log-length" in run_check(logs={1: log, 2: log[:4]})
    end = log[-1]["offset"]
    assert "log-length" in run_check(logs={1: log, 2: log[:4]}, ends={1: end, 2: end})  # serves less than applied
    assert "log-length" in run_check(logs={1: log, 2: []}, ends={1: end, 2: end - 1})


def test_a_node_caught_up_by_snapshot_serves_nothing_below_it_yet_ends_with_the_others() -> None:
    # the leader's InstallSnapshot replaced its state: its window starts after the snapshot, here empty
    log = good_log()
    end = log[-1]["offset"]
    assert run_check(logs={1: log, 2: copy.deepcopy(log), 3: []}, ends={1: end, 2: end, 3: end}) == []


def test_reordered_tail() -> None:
    log = good_log()
    ops = good_history(log)
    tail = next(op for op in ops if op["op"] == "tail" and op["offset"] == 3)
    tail["records"] = [tail["records"][1], tail["records"][0], tail["records"][2]]  # 4, 3, 5
    assert "tail-order" in run_check(ops=ops)


def test_tail_with_a_gap_or_a_duplicate() -> None:
    log = good_log()
    gap = good_history(log)
    next(op for op in gap if op["op"] == "tail" and op["offset"] == 3)["records"].pop(0)
    assert "tail-order" in run_check(ops=gap)
    dup = good_history(log)
    second = next(op for op in dup if op["op"] == "tail" and op["offset"] == 3)
    second["offset"] = 2
    second["records"].insert(0, [2, record_digest(log[2])])
    assert "tail-order" in run_check(ops=dup)


def test_tail_saw_another_record() -> None:
    ops = good_history(good_log())
    next(op for op in ops if op["op"] == "tail")["records"][1][1] = "0" * 16
    assert "tail-mismatch" in run_check(ops=ops)


def test_two_leaders_in_one_term() -> None:
    ops = good_history(good_log())
    ops += [{"client": "o", "op": "node", "node": 2, "call": t, "ret": t, "outcome": "ok", "role": "leader",
             "term": 1, "leader_id": 2, "applied_offset": 0} for t in (2.0, 2.1)]  # fmt: skip
    assert "two-leaders" in run_check(ops=ops)


def test_one_poll_of_a_deposed_leader_is_not_two_leaders() -> None:
    # term and role are read separately: a single poll can pair a deposed leader's role with its new term
    ops = good_history(good_log())
    ops += [{"client": "o", "op": "node", "node": 2, "call": 2.0, "ret": 2.0, "outcome": "ok", "role": "leader",
             "term": 1, "leader_id": 2, "applied_offset": 0}]  # fmt: skip
    assert run_check(ops=ops) == []


def test_metadata_that_is_not_apply_of_the_log() -> None:
    wrong = metadata_at(5)
    wrong["topics"][0]["partitions"][1]["state"] = "writable"
    assert "metadata-mismatch" in run_check(metadata={1: wrong})
    sample = {"client": "o", "op": "metadata", "node": 2, "call": 3, "ret": 3, "outcome": "ok", "offset": 1,
              "body": metadata_at(0) | {"offset": 1}}  # fmt: skip
    ops = [*good_history(good_log()), sample]
    assert "metadata-mismatch" in run_check(ops=ops)


def test_log_below_every_nodes_dump_comes_from_the_tailers() -> None:
    log = good_log()
    assert run_check(logs={1: log[3:], 2: log[2:]}, archive=log[:4]) == []
    assert "log-incomplete" in run_check(logs={1: log[3:], 2: log[3:]}, archive=log[:2])


# -- every pair of nodes, not neighbours (issue 30: checking nodes 1-2, or neighbours only, survived) -------
def test_nodes_one_and_three_disagree_while_node_two_serves_nothing() -> None:
    log = good_log()
    other = copy.deepcopy(log)
    other[5]["data"]["state"] = "removed"
    end = log[-1]["offset"]
    kinds = run_check(logs={1: log, 2: [], 3: other}, ends={1: end, 2: end, 3: end})
    assert "log-diverged" in kinds


def test_node_three_ends_apart_from_nodes_one_and_two() -> None:
    log = good_log()
    end = log[-1]["offset"]
    assert "log-length" in run_check(logs={1: log, 2: copy.deepcopy(log), 3: []}, ends={1: end, 2: end, 3: end - 1})


# -- state changes tied to the write that asked for them ----------------------------------------------
def test_a_lost_state_change_is_found_by_its_effect() -> None:
    # issue 30: deleting the "effect visible" branch survived. P0 was never made read-only, yet acknowledged so.
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 5, topic="w0-t2", partition=0, state="read_only")]  # fmt: skip
    assert run_check(ops=ops) == ["lost-write"]


def test_a_state_already_in_force_is_a_no_op_answered_with_the_images_offset() -> None:
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 5, topic="w0-t2", partition=1, state="read_only")]  # fmt: skip
    assert run_check(ops=ops) == []


def test_a_state_change_nobody_asked_for_is_a_phantom() -> None:
    # issue 30: deleting the state-record phantom branch survived
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=0, state="read_only")]
    assert run_check(logs={1: log}) == ["phantom-record"]


def test_a_refused_state_change_in_the_log() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=0, state="read_only")]
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "failed", 8.0, topic="w0-t2", partition=0, state="read_only")]  # fmt: skip
    assert run_check(ops=ops, logs={1: log}) == ["failed-write-applied"]


def test_a_state_change_applied_twice() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=1, state="writable"),
           rec(7, "PartitionStateChanged", topic="w0-t2", partition=1, state="read_only")]  # fmt: skip
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 6, topic="w0-t2", partition=1, state="writable")]  # fmt: skip
    assert run_check(ops=ops, logs={1: log}) == ["duplicate-write"]


def test_an_unknown_write_may_be_in_the_log_once() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER)]
    assert run_check(logs={1: log}) == []
    twice = [*log, rec(7, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER)]
    assert "duplicate-write" in run_check(logs={1: twice})


def test_an_unknown_write_sent_after_its_offset_was_acknowledged_cannot_have_made_it() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER),
           rec(7, "PartitionStateChanged", topic="w0-t2", partition=1, state="writable")]  # fmt: skip
    ops = good_history(good_log())
    ops.append(write("k6", "partition_state", "ok", 5.2, 7, topic="w0-t2", partition=1, state="writable"))
    ops[-1]["ret"] = 5.5  # offsets up to 7 were committed at 5.5; k4 (w0-c9) was sent at 6.0
    assert run_check(ops=ops, logs={1: log}) == ["phantom-record"]
    ops[-1]["ret"] = 6.5
    assert run_check(ops=ops, logs={1: log}) == []


def test_the_unknown_writer_is_preferred_over_a_refused_one() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=0, state="read_only")]
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "failed", 8.0, topic="w0-t2", partition=0, state="read_only"),
           write("k7", "partition_state", "unknown", 8.5, topic="w0-t2", partition=0, state="read_only")]  # fmt: skip
    assert run_check(ops=ops, logs={1: log}) == []


# -- idempotency keys ---------------------------------------------------------------------------------
def test_a_retry_after_an_unknown_outcome_refused_although_the_write_is_in_the_log() -> None:
    ops = [op for op in good_history(good_log()) if not (op.get("key") == "k1" and op["outcome"] == "ok")]
    ops.append(write("k1", "register", "failed", 3.0, cluster_id="w0-c1"))  # 409: "already registered"
    assert run_check(ops=ops) == ["retry-disagrees"]


def test_a_retry_after_an_unknown_outcome_answered_as_a_no_op_although_it_made_a_record() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=0, state="read_only")]
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "unknown", 8.0, topic="w0-t2", partition=0, state="read_only"),
           write("k6", "partition_state", "ok", 9.0, 6, topic="w0-t2", partition=0, state="read_only")]  # fmt: skip
    assert run_check(ops=ops, logs={1: log}) == []  # the retry was answered from the first outcome
    ops[-1]["offset"] = 7
    log.append(rec(7, "PartitionStateChanged", topic="w0-t2", partition=1, state="writable"))
    ops.append(write("k7", "partition_state", "ok", 8.5, 7, topic="w0-t2", partition=1, state="writable"))
    assert run_check(ops=ops, logs={1: log}) == ["retry-disagrees"]  # the key was forgotten: a no-op at 7


def test_two_answers_to_one_key_that_differ() -> None:
    ops = [*good_history(good_log()), write("k1", "register", "ok", 9.0, 3, cluster_id="w0-c1")]
    assert "retry-disagrees" in run_check(ops=ops)
    ops[-1]["offset"] = 1
    assert run_check(ops=ops) == []


def test_two_writes_acknowledged_at_one_offset() -> None:
    ops = [*good_history(good_log()), write("k9", "register", "ok", 1.0, 0, cluster_id="w0-c7")]
    assert run_check(ops=ops) == ["shared-offset"]


def test_an_acknowledged_register_whose_record_is_elsewhere() -> None:
    ops = [*good_history(good_log()), write("k9", "register", "ok", 3.5, 3, cluster_id="w0-c7")]
    assert run_check(ops=ops) == ["lost-write"]


def test_an_acknowledgement_below_one_given_before_the_write_was_sent() -> None:
    ops = good_history(good_log())
    create = next(op for op in ops if op.get("key") == "k2")
    create["call"], create["ret"] = 5.5, 5.6  # sent after k3 was acknowledged at 5, acknowledged at 4
    assert run_check(ops=ops) == ["ack-order"]
    stale = write("k8", "partition_state", "ok", 8.0, 4, topic="w0-t2", partition=0, state="writable")
    assert run_check(ops=[*good_history(good_log()), stale]) == ["ack-order"]  # a no-op from an old image


# -- the quorum's and the agents' own records -----------------------------------------------------------
def test_records_of_agents_and_of_the_quorum_itself() -> None:
    log = [rec(0, "MetadataVersionChanged", version=2),
           *[{**r, "offset": r["offset"] + 1} for r in good_log()],
           rec(7, "ClusterRegistered", cluster_id="a1", region="ra", bootstrap_servers="127.0.0.1:9"),
           rec(8, "PhysicalPartitionsReported", cluster_id="a1", physical_topic="x", physical_partition=0,
               leader="127.0.0.1:9"),
           rec(9, "ClusterFenced", cluster_id="a1", reason="agent lease expired", at_ms=1),
           rec(10, "ClusterUnfenced", cluster_id="a1", at_ms=2)]  # fmt: skip
    ops = [op for op in good_history(good_log()) if op["op"] != "tail"]
    for op in ops:
        if "offset" in op and op["op"] == "write":
            op["offset"] += 1

    def kinds(log: list[dict[str, Any]], agents: tuple[str, ...] = ("a1",)) -> list[str]:
        return [a.kind for a in check(ops, {1: log}, {}, agent_clusters=agents)[0]]

    assert kinds(log) == []
    assert kinds(log, agents=()) == ["phantom-record", "phantom-record"]  # nobody registered a1 nor reports it
    again = [*log, rec(11, "ClusterRegistered", cluster_id="a1", region="ra", bootstrap_servers="127.0.0.1:9")]
    assert kinds(again) == ["duplicate-write"]
    raised_twice = [*log, rec(11, "MetadataVersionChanged", version=2)]
    assert kinds(raised_twice) == ["phantom-record"]


# -- tailers and the snapshot path (issue 30: deleting the snapshot branch survived) -------------------------
def with_snapshot_tailer(ops: list[dict[str, Any]], snapshot_at: int = 3) -> list[dict[str, Any]]:
    """A second tailer, t1, that fell below every node's window: 410 at offset 0 (the window starts at 3),
    the snapshot at ``snapshot_at``, then the rest of the log."""
    log = good_log()
    gone = [{"client": "t1", "op": "tail", "node": n, "offset": 0, "call": 7.0 + n / 10, "ret": 7.05 + n / 10,
             "outcome": "failed", "status": 410, "log_start_offset": 3} for n in (1, 2)]  # fmt: skip
    snapshot = {"client": "t1", "op": "snapshot", "node": 2, "call": 7.5, "ret": 7.6, "outcome": "ok",
                "offset": snapshot_at, "metadata": metadata_at(snapshot_at)}  # fmt: skip
    rest = {"client": "t1", "op": "tail", "node": 1, "offset": snapshot_at + 1, "call": 7.7, "ret": 7.8,
            "outcome": "ok", "records": [[r["offset"], record_digest(r)] for r in log[snapshot_at + 1 :]]}  # fmt: skip
    return [*ops, *gone, snapshot, rest]


def test_a_tailer_below_the_window_goes_on_through_the_snapshot() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    assert run_check(ops=ops) == []
    _, summary = check(ops, {1: good_log()}, {})
    assert (summary.gone, summary.snapshots_loaded) == (2, 1)


def test_a_snapshot_that_is_not_apply_of_the_log() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    snapshot = next(op for op in ops if op["op"] == "snapshot")
    snapshot["metadata"] = metadata_at(2)
    assert run_check(ops=ops) == ["metadata-mismatch"]


def test_a_tailer_that_jumps_through_a_snapshot_without_a_410() -> None:
    ops = [op for op in with_snapshot_tailer(good_history(good_log())) if op.get("status") != 410]
    assert run_check(ops=ops) == ["tail-jump"]


def test_a_tailer_whose_410_came_at_another_offset() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    read_first = {"client": "t1", "op": "tail", "node": 1, "offset": 0, "call": 7.25, "ret": 7.26, "outcome": "ok",
                  "records": [[0, record_digest(good_log()[0])]]}  # fmt: skip
    ops.append(read_first)  # it read offset 0 after its 410s: it was at 1 when it loaded the snapshot
    assert run_check(ops=ops) == ["tail-jump"]


def test_a_snapshot_behind_what_the_tailer_read() -> None:
    ops = good_history(good_log())
    ops.append({"client": "t0", "op": "snapshot", "node": 2, "call": 7.5, "ret": 7.6, "outcome": "ok",
                "offset": 1, "metadata": metadata_at(1)})  # fmt: skip
    assert run_check(ops=ops) == ["tail-order"]


def test_a_410_for_an_offset_inside_the_window() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    next(op for op in ops if op.get("status") == 410)["log_start_offset"] = 0
    assert run_check(ops=ops) == ["false-410"]


# -- a tailer of one topic (topics=): its records and every federation-wide one, nothing of another topic -------
def two_topic_log() -> list[dict[str, Any]]:
    """The good log, then another writer's topic w1-t9 (offsets 6 and 7)."""
    return [*good_log(), rec(6, "TopicCreated", topic_id="id-t9", name="w1-t9", region="r-w0", retention_ms=None),
            rec(7, "PartitionsAdded", topic="w1-t9", partition=0, cluster_id="w0-c1", physical_topic="w1-t9",
                physical_partition=0)]  # fmt: skip


def selected_page(offset: int, next_offset: int, offsets: list[int], call: float) -> dict[str, Any]:
    log = two_topic_log()
    return {"client": "ts", "op": "tail", "topics": ["w0-t2"], "node": 2, "offset": offset, "call": call,
            "ret": call + 0.1, "outcome": "ok", "next_offset": next_offset,
            "records": [[o, record_digest(log[o])] for o in offsets]}  # fmt: skip


def selected_metadata_at(offset: int, whole: bool = False) -> dict[str, Any]:
    """The metadata of the two-topic log at ``offset``, as a follower of w0-t2 holds it (``whole``: all of it)."""
    from metadata_log.codec import record_from_dict
    from metadata_log.image import EMPTY_IMAGE, apply
    from metadata_log.selection import Selection
    from metadata_log.views import metadata_view

    image = apply(EMPTY_IMAGE, [record_from_dict(r["type"], r["data"]) for r in two_topic_log()[: offset + 1]])
    return copy.deepcopy(metadata_view(image if whole else Selection.of(["w0-t2"], image).image(image)))


def check_selected(*pages: dict[str, Any]) -> list[str]:
    """The good history, w1-t9 created by w1, and the pages of a tailer of w0-t2 (default: all of its log)."""
    log = two_topic_log()
    ops = [*good_history(log), write("k6", "create_topic", "ok", 8.0, 7, name="w1-t9", partitions_per_cluster=1),
           *(pages or (selected_page(0, 4, [0, 1, 2, 3], 2.0), selected_page(4, 8, [4, 5], 9.0)))]  # fmt: skip
    anomalies, _ = check(ops, {1: log, 2: copy.deepcopy(log)}, {})
    return [a.kind for a in anomalies]


def test_a_tailer_of_one_topic_sent_its_records_and_every_federation_wide_one_has_no_anomaly() -> None:
    assert check_selected() == []


def test_a_tailer_of_one_topic_not_sent_one_of_its_records_or_a_federation_wide_one() -> None:
    assert check_selected(selected_page(0, 4, [0, 1, 2, 3], 2.0), selected_page(4, 8, [4], 9.0)) == ["tail-missing"]
    assert check_selected(selected_page(0, 4, [1, 2, 3], 2.0), selected_page(4, 8, [4, 5], 9.0)) == ["tail-missing"]


def test_a_tailer_of_one_topic_sent_a_record_of_another_topic() -> None:
    foreign = selected_page(4, 8, [4, 5, 6], 9.0)
    assert check_selected(selected_page(0, 4, [0, 1, 2, 3], 2.0), foreign) == ["tail-foreign"]


def test_a_tailer_of_one_topic_sent_a_record_that_is_not_the_logs() -> None:
    wrong = selected_page(4, 8, [4, 5], 9.0)
    wrong["records"][1][1] = "0" * 16
    assert check_selected(selected_page(0, 4, [0, 1, 2, 3], 2.0), wrong) == ["tail-mismatch"]


def test_a_tailer_of_one_topic_whose_page_is_out_of_order_or_out_of_its_bounds() -> None:
    first = selected_page(0, 4, [0, 1, 2, 3], 2.0)
    reordered = selected_page(4, 8, [5, 4], 9.0)
    assert check_selected(first, reordered) == ["tail-order"]
    below = selected_page(4, 8, [3, 4, 5], 9.0)  # 3 was read already
    assert check_selected(first, below) == ["tail-order"]
    beyond = selected_page(4, 9, [4, 5], 9.0)  # the log ends at 7
    assert check_selected(first, beyond) == ["tail-mismatch"]


def test_a_tailer_of_one_topic_goes_on_through_the_snapshot_of_its_topic() -> None:
    gone = [{"client": "ts", "op": "tail", "topics": ["w0-t2"], "node": n, "offset": 0, "call": 1.0 + n / 10,
             "ret": 1.05 + n / 10, "outcome": "failed", "status": 410, "log_start_offset": 3}
            for n in (1, 2)]  # fmt: skip

    def snapshot(offset: int, metadata: dict[str, Any]) -> dict[str, Any]:
        return {"client": "ts", "op": "snapshot", "topics": ["w0-t2"], "node": 2, "call": 1.5, "ret": 1.6,
                "outcome": "ok", "offset": offset, "metadata": metadata}  # fmt: skip

    assert check_selected(*gone, snapshot(7, selected_metadata_at(7))) == []
    assert check_selected(*gone, snapshot(7, selected_metadata_at(7, whole=True))) == ["metadata-mismatch"]
    assert check_selected(*gone, snapshot(9, selected_metadata_at(7))) == ["metadata-mismatch"]  # beyond the log


# -- the rest of the branches, each with a history only it catches ------------------------------------------
def test_a_record_that_does_not_apply() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="nowhere", partition=0, state="read_only")]
    assert run_check(logs={1: log}) == ["log-invalid"]


def test_the_summary_counts_what_happened() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    ops.append({"client": "t0", "op": "tail", "node": 3, "offset": 6, "call": 8.0, "ret": 9.0, "outcome": "unknown",
                "error": "timeout"})  # fmt: skip
    ops.append(write("k0", "register", "ok", 9.5, 0, cluster_id="w0-c0") | {"replayed": True})
    anomalies, summary = check(ops, {1: good_log()}, {})
    assert anomalies == []
    assert summary == Summary(writes=6, acknowledged=4, unknown=1, failed=1, unknown_attempts=2,
                              retried_after_unknown=1, replayed=1, tail_pages=3, tail_records=8, gone=2,
                              snapshots_loaded=1, node_polls=4, metadata_checks=0, log_length=6)  # fmt: skip


def test_cluster_state_changes_are_tied_like_partition_state_changes() -> None:
    log = [*good_log(), rec(6, "ClusterStateChanged", cluster_id="w0-c1", state="read_only")]
    change = write("k6", "cluster_state", "ok", 8.0, 6, cluster_id="w0-c1", state="read_only")
    assert run_check(ops=[*good_history(good_log()), change], logs={1: log}) == []
    assert run_check(logs={1: log}) == ["phantom-record"]
    no_op = write("k7", "cluster_state", "ok", 9.0, 6, cluster_id="w0-c1", state="read_only")
    assert run_check(ops=[*good_history(good_log()), change, no_op], logs={1: log}) == []
    lost = write("k6", "cluster_state", "ok", 8.0, 5, cluster_id="w0-c1", state="read_only")
    assert run_check(ops=[*good_history(good_log()), lost]) == ["lost-write"]
    unknown_cluster = write("k6", "cluster_state", "ok", 8.0, 5, cluster_id="w0-c8", state="active")
    assert run_check(ops=[*good_history(good_log()), unknown_cluster]) == ["lost-write"]


def test_state_changes_acknowledged_where_the_log_cannot_show_them() -> None:
    def lost(**args: Any) -> list[str]:
        return run_check(ops=[*good_history(good_log()), write("k6", "partition_state", "ok", 8.0, **args)])

    assert lost(offset=17, topic="w0-t2", partition=1, state="read_only") == ["lost-write"]  # beyond the log
    assert lost(offset=5, topic="w0-t2", partition=7, state="writable") == ["lost-write"]  # no such partition
    assert lost(offset=1, topic="w0-t2", partition=0, state="writable") == ["lost-write"]  # no such topic yet


def test_partitions_added_apart_from_a_created_topic_answer_no_write() -> None:
    log = [*good_log(), rec(6, "PartitionsAdded", topic="w0-t2", partition=2, cluster_id="w0-c0",
                            physical_topic="w0-t2", physical_partition=1)]  # fmt: skip
    assert run_check(logs={1: log}) == ["phantom-record"]


def test_a_register_acknowledged_at_an_unknown_writes_record_is_lost() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER)]  # k4's, unknown
    ops = [*good_history(good_log()), write("k9", "register", "ok", 8.0, 6, cluster_id="w0-c7")]
    assert run_check(ops=ops, logs={1: log}) == ["lost-write"]


def test_a_no_op_whose_record_is_in_the_log_after_all() -> None:
    log = [*good_log(), rec(6, "PartitionStateChanged", topic="w0-t2", partition=0, state="read_only"),
           rec(7, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER)]  # fmt: skip
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 7, topic="w0-t2", partition=0, state="read_only")]  # fmt: skip
    assert run_check(ops=ops, logs={1: log}) == ["duplicate-write"]  # answered at 7, its record at 6


def test_an_agent_cluster_changes_state_only_when_asked() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="a1", region="ra", bootstrap_servers="127.0.0.1:9"),
           rec(7, "ClusterStateChanged", cluster_id="a1", state="read_only")]  # fmt: skip
    anomalies, _ = check(good_history(good_log()), {1: log}, {}, agent_clusters=["a1"])
    assert [a.kind for a in anomalies] == ["phantom-record"]


def test_a_snapshot_or_metadata_beyond_the_log() -> None:
    assert run_check(ops=with_snapshot_tailer(good_history(good_log()), snapshot_at=9)) == ["metadata-mismatch"]
    assert run_check(metadata={1: metadata_at(5) | {"offset": 9}}) == ["metadata-mismatch"]


def test_a_tail_page_that_goes_back_counts_each_record_read_again() -> None:
    log = good_log()
    ops = good_history(log)
    again = next(op for op in ops if op["op"] == "tail" and op["offset"] == 3)
    again["offset"] = 1
    again["records"] = [[r["offset"], record_digest(r)] for r in log[1:]]  # 1 and 2 a second time
    assert run_check(ops=ops) == ["tail-order", "tail-order"]


def ranged(log: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``log`` as a quorum at metadata version 4 writes it: the created topic's partitions as ranges."""
    out = []
    for r in log:
        if r["type"] == "PartitionsAdded":
            d = r["data"]
            r = rec(r["offset"], "PartitionRangeAdded", topic=d["topic"], first_partition=d["partition"], count=1,
                    cluster_id=d["cluster_id"], physical_topic=d["physical_topic"],
                    first_physical_partition=d["physical_partition"])  # fmt: skip
        out.append(r)
    return out


def test_a_topic_created_with_range_records_is_one_write() -> None:
    log = ranged(good_log())
    assert run_check(good_history(log), {1: log, 2: copy.deepcopy(log)}, metadata={}) == []
    apart = [*log, rec(6, "PartitionRangeAdded", topic="w0-t2", first_partition=2, count=3, cluster_id="w0-c0",
                       physical_topic="w0-t2", first_physical_partition=1)]  # fmt: skip
    assert run_check(good_history(log), {1: apart}, metadata={}) == ["phantom-record"]


# -- boundaries: each history sits exactly on a comparison the checker makes (``make mutants`` moves them) --------
def test_a_state_change_acknowledged_at_the_offset_just_past_the_log_is_lost() -> None:
    # the log ends at 5: an acknowledgement at 6 names a record nobody holds, though P1 is read-only at 5
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 6, topic="w0-t2", partition=1, state="read_only")]  # fmt: skip
    assert run_check(ops=ops) == ["lost-write"]


def test_a_state_change_of_a_partition_just_past_the_topics_end_is_lost() -> None:
    ops = [*good_history(good_log()),
           write("k6", "partition_state", "ok", 8.0, 5, topic="w0-t2", partition=2, state="read_only")]  # fmt: skip
    assert run_check(ops=ops) == ["lost-write"]


def test_a_write_sent_just_after_its_offset_was_acknowledged_cannot_have_made_it() -> None:
    log = [*good_log(), rec(6, "ClusterRegistered", cluster_id="w0-c9", **CLUSTER)]
    ops = good_history(good_log())
    ops.append(write("k8", "partition_state", "ok", 5.0, 6, topic="w0-t2", partition=1, state="read_only"))
    ops[-1]["ret"] = 5.5  # a no-op answered at offset 6 at 5.5: k4 (w0-c9, unknown) was sent at 6.0, too late
    assert run_check(ops=ops, logs={1: log}) == ["phantom-record"]


def test_a_410_without_the_nodes_window_start_is_no_false_410() -> None:
    ops = with_snapshot_tailer(good_history(good_log()))
    for op in ops:
        if op.get("status") == 410:
            del op["log_start_offset"]
    assert run_check(ops=ops) == []


def test_a_snapshot_where_the_tailer_stands_and_one_a_record_ahead() -> None:
    ops = good_history(good_log())
    at_its_place = {"client": "t0", "op": "snapshot", "node": 2, "call": 7.5, "ret": 7.6, "outcome": "ok",
                    "offset": 5, "metadata": metadata_at(5)}  # fmt: skip
    assert run_check(ops=[*ops, at_its_place]) == [], "t0 read up to 5: a snapshot at 5 skips nothing"
    reads = [op for op in ops if op.get("client") != "t0" or op["offset"] == 0]  # t0 read 0..2 only
    ahead = {**at_its_place, "offset": 3, "metadata": metadata_at(3)}
    assert run_check(ops=[*reads, ahead]) == ["tail-jump"], "a snapshot at 3 skips reading 3, without a 410"


def test_a_tailer_of_one_topic_sent_the_record_at_its_pages_end() -> None:
    first = selected_page(0, 4, [0, 1, 2, 3], 2.0)
    past_its_end = selected_page(4, 6, [4, 5, 6], 9.0)  # 6 is the next page's
    assert "tail-order" in check_selected(first, past_its_end, selected_page(6, 8, [], 10.0))
