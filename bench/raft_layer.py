"""Benchmark 1c: our Raft layer alone (``RaftNode``, 3 processes, no HTTP) vs raw pysyncobj, same run.

Why: the HTTP numbers of 1a/1b mix the web stack with replication; this isolates what ``RaftNode`` +
``LogState`` cost on top of pysyncobj. Both sides use the same ``SyncObjConf`` (``RaftSettings.conf``:
``appendEntriesUseBatch=False``, the same timeouts, journal + full dump, compaction thresholds), the same
command bytes (``encode_command`` of the same records), the same number of records per command and the
same number of commands in flight; the leader process generates the load itself. pysyncobj's journal
never fsyncs, so the comparison (goal: ours >= 0.8x raw) runs ours without fsync too; ours with the
product default (journal fsynced per append) is shown alongside. Variants alternate, ``raft_rounds``
rounds each, and the median round is reported.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

from deploy.launcher import free_ports
from metadata_quorum.state import Proposal, encode_command

from .common import BenchResult, Children, Goal, Row, Sizes, count_log_errors, fmt, median
from .raft_worker import records_for

VARIANTS: tuple[tuple[str, str, bool], ...] = (
    ("raw pysyncobj (no fsync)", "raw", False),
    ("kfed RaftNode (no fsync)", "kfed", False),
    ("kfed RaftNode (fsync, default)", "kfed", True),
)
RATIO_GOAL = Goal(">=", 0.8, "x raw")
WARMUP_S = 1.0


def record_counts(sizes: Sizes) -> list[int]:
    return [*sizes.raft_records_per_command, *([sizes.raft_big_command] if sizes.raft_big_command else [])]


def run_variant(impl: str, fsync: bool, sizes: Sizes, tmp: Path) -> dict[str, Any]:
    """Start 3 voters of one implementation, let the leader run the plan, return its report."""
    ports = free_ports(3)
    addrs = [f"127.0.0.1:{p}" for p in ports]
    plan = [[k, sizes.raft_seconds] for k in record_counts(sizes)]
    out = tmp / "result.json"
    with Children() as children:
        for i, addr in enumerate(addrs):
            args = [
                "-m", "bench.raft_worker", "--impl", impl, "--self", addr,
                "--peers", ",".join(a for a in addrs if a != addr), "--data-dir", str(tmp / f"node-{i + 1}"),
                "--plan", json.dumps(plan), "--warmup-s", str(WARMUP_S), "--inflight", str(sizes.raft_inflight),
                "--out", str(out),
            ]  # fmt: skip
            if fsync:
                args.append("--fsync")
            children.spawn(args, tmp / f"node-{i + 1}.log")
        budget = 40 + len(plan) * (WARMUP_S + sizes.raft_seconds + 15)
        deadline = time.monotonic() + budget
        while not out.exists():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{impl}: no result within {budget:.0f} s; logs in {tmp}")
            if all(p.poll() is not None for p in children.procs):
                raise RuntimeError(f"{impl}: every voter exited; logs in {tmp}")
            time.sleep(0.2)
        report: dict[str, Any] = json.loads(out.read_text())
    # After the voters stopped: each wrote how many journal appends it made.
    stats = [json.loads(p.read_text()) for p in sorted(tmp.glob("result.json.*.stats"))]
    leader = next((s for s in stats if s["self"] == report["self"]), None)
    followers = [s for s in stats if s["self"] != report["self"]]
    if leader and leader["appends"] and followers:
        report["follower_appends_per_leader_append"] = (
            sum(f["appends"] for f in followers) / len(followers) / leader["appends"]
        )
    report["journal_stats"] = stats
    report["node_log_errors"] = count_log_errors(sorted(tmp.glob("node-*.log")))
    return report


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    # rounds[variant][records_per_command] -> list of phase summaries
    rounds: dict[str, dict[int, list[dict[str, Any]]]] = {name: {} for name, _, _ in VARIANTS}
    confs: dict[str, dict[str, Any]] = {}
    rewrites: dict[str, list[float]] = {}
    errors: dict[str, dict[str, int]] = {}
    for r in range(sizes.raft_rounds):
        for name, impl, fsync in VARIANTS:
            vdir = tmp / f"round{r}-{impl}-{'fsync' if fsync else 'nofsync'}"
            report = run_variant(impl, fsync, sizes, vdir)
            confs[name] = report["conf"]
            rewrites.setdefault(name, []).append(report.get("follower_appends_per_leader_append", float("nan")))
            for pattern, n in report["node_log_errors"].items():
                errors.setdefault(name, {})[pattern] = errors.get(name, {}).get(pattern, 0) + n
            for ph in report["phases"]:
                rounds[name].setdefault(ph["records_per_command"], []).append(ph)
                print(
                    f"  round {r + 1} {name}, {ph['records_per_command']} records/command: "
                    f"{fmt(ph['commands_per_s'])} commands/s, {fmt(ph['records_per_s'])} records/s",
                    flush=True,
                )
            if report["node_log_errors"]:  # keep what explains them
                result.notes.append(f"round {r + 1} {name}: node logs with problems in {vdir} (kept with --keep)")
            else:
                shutil.rmtree(vdir, ignore_errors=True)
    result.details["rounds"] = rounds
    result.details["conf"] = confs
    result.details["node_log_errors"] = errors
    result.details["follower_appends_per_leader_append"] = rewrites
    result.notes.append(
        "journal appends per follower for each leader append (1.0 = each entry written once; more = followers "
        "truncate and rewrite entries they already hold), median over rounds: "
        + ", ".join(f"{name} {fmt(median(v))}" for name, v in rewrites.items())
    )
    raw_conf, kfed_conf = (
        {k: Path(v).name if k.endswith("File") and v else v for k, v in confs[v[0]].items()} for v in VARIANTS[:2]
    )
    differ = sorted(k for k in raw_conf.keys() | kfed_conf.keys() if raw_conf.get(k) != kfed_conf.get(k))
    result.notes.append(
        "SyncObjConf options that differ between raw and ours: "
        + (", ".join(f"{k} ({raw_conf.get(k)!r} vs {kfed_conf.get(k)!r})" for k in differ) or "none")
        + " (plain values, file names without their directory; our serializer and callbacks are functions)"
    )
    if any(errors.values()):
        result.notes.append(f"problems in the voters' logs, all rounds: {errors}")

    def med(name: str, k: int, key: str) -> float:
        return median([ph[key] for ph in rounds[name].get(k, [])])

    raw_name = VARIANTS[0][0]
    for k in record_counts(sizes):
        judged = k in sizes.raft_records_per_command
        size = len(encode_command([Proposal(records_for(k, 0))]))
        raw_rate = med(raw_name, k, "records_per_s")  # medians over rounds
        for name, impl, fsync in VARIANTS:
            rate = med(name, k, "records_per_s")
            lat = f"p50 {fmt(med(name, k, 'p50_ms'))} / p99 {fmt(med(name, k, 'p99_ms'))} ms per command"
            if impl == "raw":
                result.rows.append(Row(f"{name}, {k} records/command ({size:,} B)", rate, "records/s", lat))
                continue
            # Each round runs raw and ours back to back: the ratio is taken per round, then its median.
            ratios = [
                ours["records_per_s"] / raw["records_per_s"]
                for ours, raw in zip(rounds[name].get(k, []), rounds[raw_name].get(k, []), strict=False)
                if raw["records_per_s"]
            ]
            result.rows.append(
                Row(
                    f"{name}, {k} records/command: ratio to raw",
                    median(ratios),
                    "x raw",
                    f"{fmt(rate)} records/s vs raw {fmt(raw_rate)}; per round "
                    f"{', '.join(fmt(r) for r in ratios)}; {lat}",
                    RATIO_GOAL if judged and not fsync else None,
                    "durability differs: shown, not judged" if fsync else ("" if judged else "shown, not judged"),
                )
            )
    if sizes.raft_big_command:
        result.notes.append(
            f"the {sizes.raft_big_command}-record phase sends commands over pysyncobj's appendEntriesBatchSizeBytes "
            "(64 KiB), which go through its chunked-transmission path (see BENCHMARKS.md)."
        )
    result.notes.append(
        f"{sizes.raft_inflight} commands in flight, {fmt(sizes.raft_seconds)} s per phase after "
        f"{fmt(WARMUP_S)} s warm-up; {sizes.raft_rounds} round(s) of raw, ours, ours+fsync back to back; rates "
        "are medians over rounds, ratios the median of the per-round ratios; records are "
        "~70-byte ClusterRegistered (re-registering one of 100 clusters), identical bytes for both sides."
    )
