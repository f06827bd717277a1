"""Benchmark 3: leader kill -9 -> next acknowledged write, median of N trials (goal <= 1 s).

Why: while there is no leader, no fence, scale-up or group change can commit; this is the write outage a
leader crash causes. Clients write continuously (each re-registers its own cluster with a new port: one
record per write), retrying on 503/504/connection errors against every node URL in turn; the leader gets
SIGKILL, and the outage is the time from the kill to the acknowledgement of the first write sent after
it. The killed node is restarted on its data dir and caught up between trials. The quorum runs with the product defaults
(election timeout 300-900 ms, journal fsync on).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from deploy.launcher import LocalQuorum

from .common import (
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    median,
    node_status,
    note_log_errors,
    percentile,
    running_quorum,
)
from .httpconn import TRANSPORT_ERRORS, Connection

GOAL = Goal("<=", 1.0, "s")
WRITERS = 4
REQUEST_TIMEOUT_S = 2.0
TRIAL_TIMEOUT_S = 20.0


@dataclass(slots=True)
class Writers:
    """Continuous writers; ``acks`` holds (sent, acknowledged) monotonic times of every acknowledged write."""

    urls: list[str]
    acks: list[tuple[float, float]] = field(default_factory=list)
    failures: dict[str, int] = field(default_factory=dict)
    stop: bool = False

    async def writer(self, w: int) -> None:
        conns = [Connection(u) for u in self.urls]
        turn = w % len(conns)
        seq = 0
        try:
            while not self.stop:
                seq += 1  # each write moves this writer's cluster to a new port: always one new record
                body = orjson.dumps(
                    {"cluster_id": f"fo{w}", "region": "failover", "bootstrap_servers": f"127.0.0.1:{1 + seq % 60_000}"}
                )
                conn = conns[turn]
                sent = time.monotonic()
                try:
                    reply = await conn.request("POST", "/v1/clusters", body, timeout_s=REQUEST_TIMEOUT_S)
                    if reply.ok:
                        self.acks.append((sent, time.monotonic()))
                        continue
                    reason = str(reply.status)
                except TRANSPORT_ERRORS as e:
                    reason = type(e).__name__
                self.failures[reason] = self.failures.get(reason, 0) + 1
                turn = (turn + 1) % len(conns)  # try the next node
                await asyncio.sleep(0.005)
        finally:
            for c in conns:
                await c.close()

    def first_ack_after(self, t: float) -> float | None:
        """When the first write *sent* after ``t`` was acknowledged (a reply already on its way at ``t``
        belongs to a write the old leader committed, so it does not count)."""
        later = [acked for sent, acked in self.acks[-200:] if sent > t]
        return min(later) if later else None


async def trials(q: LocalQuorum, count: int) -> list[dict[str, Any]]:
    writers = Writers(q.urls)
    tasks = [asyncio.create_task(writers.writer(w)) for w in range(WRITERS)]
    out: list[dict[str, Any]] = []
    try:
        for trial in range(count):
            leader = await asyncio.to_thread(q.leader, 30.0)
            before = node_status(q, leader)
            t_ready = time.monotonic()
            while writers.first_ack_after(t_ready) is None:  # writes flow before the kill
                await asyncio.sleep(0.02)
            t_kill = time.monotonic()
            q.kill(leader)  # SIGKILL, and reaped
            while (first := writers.first_ack_after(t_kill)) is None:
                if time.monotonic() - t_kill > TRIAL_TIMEOUT_S:
                    raise TimeoutError(f"trial {trial}: no write acknowledged {TRIAL_TIMEOUT_S} s after the kill")
                await asyncio.sleep(0.002)
            outage = first - t_kill
            new_leader = await asyncio.to_thread(q.leader, 10.0, leader)
            after = node_status(q, new_leader)
            print(
                f"  trial {trial + 1}: killed node {leader} (term {before.get('term')}), first ack after "
                f"{outage * 1000:.0f} ms, new leader {new_leader} (term {after.get('term')})",
                flush=True,
            )
            out.append(
                {
                    "killed": leader,
                    "term_before": before.get("term"),
                    "outage_s": outage,
                    "new_leader": new_leader,
                    "term_after": after.get("term"),
                }
            )
            # Restart the killed node on its data dir and let it catch up before the next trial.
            q.start(leader)
            t_restart = time.monotonic()
            hw = int(after.get("high_watermark", 0))
            await asyncio.to_thread(q.wait_applied, hw - 1, [leader], 60.0)
            out[-1]["restart_catch_up_s"] = time.monotonic() - t_restart
            await asyncio.sleep(0.5)
            term_now = (q.node(new_leader) or {}).get("term")
            out[-1]["term_changed_by_restart"] = term_now != after.get("term")
    finally:
        writers.stop = True
        await asyncio.gather(*tasks, return_exceptions=True)
    out.append({"write_failures_total": writers.failures})
    return out


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    with running_quorum(tmp / "quorum") as q:
        records = asyncio.run(trials(q, sizes.failover_trials))
        note_log_errors(q, result, "quorum")
    runs = [r for r in records if "outage_s" in r]
    outages = [r["outage_s"] for r in runs]
    result.details["trials"] = records
    restarts = [r.get("restart_catch_up_s", float("nan")) for r in runs]
    disturbed = sum(1 for r in runs if r.get("term_changed_by_restart"))
    result.rows.append(
        Row(
            f"kill -9 leader -> next acknowledged write, median of {len(outages)}",
            median(outages),
            "s",
            f"min {fmt(min(outages))}, p90 {fmt(percentile(outages, 90))}, max {fmt(max(outages))} s",
            GOAL,
        )
    )
    result.rows.append(
        Row(
            "restart of the killed node -> caught up, median",
            median(restarts),
            "s",
            f"{disturbed} of {len(runs)} restarts changed the term (deposed the new leader)",
        )
    )
    result.notes.append(
        f"{WRITERS} concurrent writers, each rotating over all 3 node URLs on 503/504/connection errors "
        f"(request timeout {REQUEST_TIMEOUT_S:g} s); quorum with product defaults."
    )
