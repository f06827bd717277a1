"""Benchmark 2: commit -> tailer latency with 1, 100 and 1,000 concurrent tailers, long-poll and SSE.

Why: brokers' agents, SDKs and Spark jobs learn about metadata changes only by tailing the log, so this
delay is how fast a fence or a new partition reaches clients (goal: p99 <= 50 ms at 100 tailers).

A writer re-registers one cluster ``lat<run>`` on the leader at a steady rate, with bootstrap servers
``127.0.0.1:<seq + 1>`` (so each write is one new record that names its sequence number), and keeps
``seq -> wall-clock send time`` (and acknowledgement time); tailers in one or two separate processes
(``bench.tailer_worker``), spread over the three nodes and connecting from loopback addresses 127.0.0.2 and up
(32 tailers per address, as if on separate hosts), note when each record arrives. The headline is
send -> arrival, which includes the commit itself (an upper bound of commit -> tailer); acknowledgement ->
arrival is shown too (negative when a tailer saw the record before the writer got its reply).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import orjson

from deploy.launcher import LocalQuorum

from .common import (
    BenchResult,
    Children,
    Goal,
    Row,
    Sizes,
    fmt,
    node_status,
    note_log_errors,
    percentile,
    running_quorum,
)
from .httpconn import TRANSPORT_ERRORS, Connection

GOAL = Goal("<=", 50, "ms")
GOAL_TAILERS = 100
SETTLE_S = 0.5


async def write_sequence(url: str, cluster_id: str, rate: float, count: int) -> dict[int, tuple[float, float]]:
    """``count`` single-record writes at ``rate``/s (open loop); returns seq -> (sent, acknowledged) wall time."""
    conn = Connection(url)
    loop = asyncio.get_running_loop()
    start = loop.time()
    out: dict[int, tuple[float, float]] = {}
    try:
        for seq in range(count):
            await asyncio.sleep(max(0.0, start + seq / rate - loop.time()))
            body = orjson.dumps(
                {"cluster_id": cluster_id, "region": "lat", "bootstrap_servers": f"127.0.0.1:{seq + 1}"}
            )
            sent = time.time()
            try:
                reply = await conn.request("POST", "/v1/clusters", body, timeout_s=10)
            except TRANSPORT_ERRORS:
                continue
            if reply.ok:
                out[seq] = (sent, time.time())
    finally:
        await conn.close()
    return out


def run_config(q: LocalQuorum, tmp: Path, mode: str, tailers: int, rate: float, seconds: float, run_id: int) -> Any:
    """One (mode, tailers) configuration; returns a summary dict."""
    leader = q.leader()
    offset = int(node_status(q, leader)["high_watermark"])
    cluster_id = f"lat{run_id}"
    count = min(60_000, max(1, int(rate * seconds)))
    processes = 1 if tailers < 100 else 2
    outs = [tmp / f"tailers-{run_id}-{i}.json" for i in range(processes)]
    with Children() as children:
        first = 0
        for i in range(processes):
            n = tailers // processes + (1 if i < tailers % processes else 0)
            children.spawn(
                ["-m", "bench.tailer_worker", "--urls", ",".join(q.urls), "--first", str(first), "--mode", mode,
                 "--tailers", str(n), "--offset", str(offset), "--cluster", cluster_id, "--count", str(count),
                 "--deadline-s", str(seconds + 60), "--out", str(outs[i])],
                tmp / f"tailers-{run_id}-{i}.log",
            )  # fmt: skip
            first += n
        _wait_files([Path(str(o) + ".ready") for o in outs], children, 60, tmp)
        time.sleep(SETTLE_S)
        writes = asyncio.run(write_sequence(q.url(leader), cluster_id, rate, count))
        _wait_files(outs, children, 60, tmp)
    send_lat: list[float] = []
    ack_lat: list[float] = []
    received = 0
    complete = 0
    errors: dict[str, int] = {}
    for out in outs:
        doc = orjson.loads(out.read_bytes())
        complete += doc["complete_tailers"]
        for k, v in doc["errors"].items():
            errors[k] = errors.get(k, 0) + v
        for seq, at in doc["arrivals"]:
            if seq in writes:
                sent, acked = writes[seq]
                send_lat.append((at - sent) * 1000)
                ack_lat.append((at - acked) * 1000)
                received += 1
    write_lat = [(a - s) * 1000 for s, a in writes.values()]
    return {
        "mode": mode,
        "tailers": tailers,
        "tailer_processes": processes,
        "writes_per_s": rate,
        "writes_acked": len(writes),
        "writes_sent": count,
        "expected_arrivals": len(writes) * tailers,
        "arrivals": received,
        "complete_tailers": complete,
        "tailer_errors": errors,
        "send_to_tailer_ms": _stats(send_lat),
        "ack_to_tailer_ms": _stats(ack_lat),
        "write_send_to_ack_ms": _stats(write_lat),
    }


def _stats(values: list[float]) -> dict[str, float]:
    return {
        "p50": round(percentile(values, 50), 2),
        "p99": round(percentile(values, 99), 2),
        "max": round(max(values), 2) if values else float("nan"),
        "n": len(values),
    }


def _wait_files(paths: list[Path], children: Children, timeout_s: float, tmp: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise TimeoutError(f"tailer processes did not report within {timeout_s} s; logs in {tmp}")
        if any(p.poll() not in (None, 0) for p in children.procs):
            raise RuntimeError(f"a tailer process failed; logs in {tmp}")
        time.sleep(0.05)


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    run_id = 0
    with running_quorum(tmp / "quorum") as q:
        for mode in ("poll", "sse"):
            for tailers, rate in sizes.tailer_configs:
                run_id += 1
                s = run_config(q, tmp, mode, tailers, rate, sizes.tailer_seconds, run_id)
                label = "long-poll" if mode == "poll" else "SSE"
                send, ack, write = s["send_to_tailer_ms"], s["ack_to_tailer_ms"], s["write_send_to_ack_ms"]
                print(
                    f"  {label}, {tailers} tailers: p50 {fmt(send['p50'])} / p99 {fmt(send['p99'])} ms, "
                    f"{s['arrivals']}/{s['expected_arrivals']} arrivals",
                    flush=True,
                )
                missing = s["expected_arrivals"] - s["arrivals"]
                result.rows.append(
                    Row(
                        f"{label}, {tailers} tailer(s), {fmt(rate)} writes/s: p99 write sent -> tailer",
                        send["p99"],
                        "ms",
                        f"p50 {fmt(send['p50'])}, max {fmt(send['max'])}; ack->tailer p50 {fmt(ack['p50'])} / "
                        f"p99 {fmt(ack['p99'])}; write send->ack p50 {fmt(write['p50'])} / p99 {fmt(write['p99'])}"
                        + (f"; {missing} arrivals MISSING" if missing else ""),
                        GOAL if tailers == GOAL_TAILERS else None,
                    )
                )
                result.details[f"{mode}-{tailers}"] = s
        note_log_errors(q, result, "quorum")
    result.notes.append(
        "quorum with product defaults (journal fsync on); writes go to the leader; tailer i follows node i % 3; "
        f"{fmt(sizes.tailer_seconds)} s of writes per configuration; tailers run in 1 process (<100) or 2."
    )
