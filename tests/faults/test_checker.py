"""The checker on handcrafted histories: it must find each kind of anomaly (a checker that cannot fail
is worthless) and stay quiet on a correct history."""

from __future__ import annotations

import copy
from typing import Any

from .checker import check
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
