"""One seeded run: start the quorum, run clients, apply a schedule of faults, heal, collect, check."""

from __future__ import annotations

import json
import logging
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .checker import Anomaly, Summary, check
from .clients import Observer, Tailer, Writer
from .cluster import NODE_IDS, FaultQuorum
from .history import History

log = logging.getLogger("faults")

FAULTS = ("kill", "pause", "cut", "leader_kill_mid_batch", "restart_all")
"""The catalogue; see RELIABILITY.md. Each fault is applied, held, then reverted before the next one."""
WRITERS = 4
TAILERS = 2
BURST_WRITES = 16  # concurrent writes in flight when the leader is killed mid-batch
START_TIMEOUT_S = 90.0  # the machine is shared: be patient
# Small dump thresholds so that runs also restart from a dump plus the journal after it.
CONTROLLER_ARGS = ("--compaction-min-entries", "200", "--compaction-period-s", "6")


def replay_command(seed: int, duration: float) -> str:
    return f"make faults SEED={seed} DURATION={duration:g}"


@dataclass
class RunResult:
    seed: int
    duration_s: float
    work_dir: Path
    anomalies: list[Anomaly]
    summary: Summary | None
    faults: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.anomalies and self.summary is not None

    def report(self) -> str:
        lines = [f"seed {self.seed}, {self.duration_s:g} s of faults: {len(self.faults)} faults "
                 f"({', '.join(self.faults) or 'none'})"]  # fmt: skip
        if self.summary is not None:
            s = self.summary
            lines.append(f"checked {s.writes} writes ({s.acknowledged} acknowledged, {s.unknown} unknown, "
                         f"{s.failed} refused; {s.unknown_attempts} unknown attempts retried), "
                         f"{s.tail_pages} tail pages ({s.tail_records} records), "
                         f"{s.node_polls} leader polls, {s.metadata_checks} metadata comparisons; "
                         f"final log {s.log_length} records")  # fmt: skip
        lines.append(f"{len(self.anomalies)} anomalies")
        lines += [f"  {a}" for a in self.anomalies[:50]]
        if not self.ok:
            lines.append(f"FAILED: seed {self.seed}; replay with: {replay_command(self.seed, self.duration_s)}")
        lines.append(f"history and node logs: {self.work_dir}")
        return "\n".join(lines)


class Nemesis:
    """Draws faults from the seeded RNG and applies them to the quorum, one at a time."""

    def __init__(self, quorum: FaultQuorum, history: History, rng: random.Random, burst: Callable[[], None]) -> None:
        self.q = quorum
        self.history = history
        self.rng = rng
        self.burst = burst
        self.applied: list[str] = []

    def record(self, kind: str, **details: Any) -> None:
        self.history.add({"client": "nemesis", "op": "fault", "kind": kind, "call": self.history.now(),
                          "ret": self.history.now(), "outcome": "ok", **details})  # fmt: skip
        log.info("fault: %s %s", kind, details)

    def target(self) -> int:
        """The leader half the time (the interesting node), else any node; drawn from the seed."""
        wants_leader = self.rng.random() < 0.5
        node = self.rng.choice(NODE_IDS)
        if wants_leader:
            leader = self.q.leader()
            if leader is not None:
                return leader
        return node

    def run(self, until: float) -> None:
        while time.monotonic() < until:
            time.sleep(self.rng.uniform(1.0, 3.0))
            if time.monotonic() >= until:
                break
            kind = self.rng.choice(FAULTS)
            hold_s = self.rng.uniform(1.0, 3.5)
            getattr(self, kind)(hold_s)
            self.applied.append(kind)
            # Let the quorum settle a little (a node restarted from its journal needs a moment).
            try:
                self.q.wait_leader(30)
            except TimeoutError:
                self.record("no-leader-after-fault")

    def _hold(self, fault: str, undo: str, apply: Callable[[int], None], revert: Callable[[int], None],
              hold_s: float) -> None:  # fmt: skip
        """Apply a fault to the drawn node, hold it, revert it; both ends recorded in the history."""
        node = self.target()
        self.record(fault, node=node)
        apply(node)
        time.sleep(hold_s)
        revert(node)
        self.record(undo, node=node)

    def kill(self, hold_s: float) -> None:
        self._hold("kill", "restart", self.q.kill, self.q.start_node, hold_s)

    def pause(self, hold_s: float) -> None:
        self._hold("pause", "resume", self.q.pause, self.q.resume, hold_s)

    def cut(self, hold_s: float) -> None:
        # at least an election timeout (0.9 s) more, so an isolated leader steps down
        self._hold("cut", "heal", self.q.cut, self.q.heal, hold_s + 1.0)

    def leader_kill_mid_batch(self, hold_s: float) -> None:
        leader = self.q.leader()
        if leader is None:
            leader = self.rng.choice(NODE_IDS)
        delay_s = self.rng.uniform(0.0, 0.03)
        threading.Thread(target=self.burst, daemon=True, name="burst").start()
        time.sleep(delay_s)
        self.record("leader_kill_mid_batch", node=leader, delay_ms=round(delay_s * 1000, 1))
        self.q.kill(leader)
        time.sleep(hold_s)
        self.q.start_node(leader)
        self.record("restart", node=leader)

    def restart_all(self, hold_s: float) -> None:
        self.record("restart_all")
        for n in NODE_IDS:
            self.q.kill(n)
        time.sleep(min(hold_s, 1.0))
        for n in NODE_IDS:
            self.q.start_node(n)
        self.record("restarted_all")


def run(seed: int, duration_s: float, work_dir: Path) -> RunResult:
    """Run one seeded schedule for ``duration_s`` seconds of faults and check the history."""
    work_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    run_id = f"s{seed}-{rng.randrange(1 << 32):08x}"
    history = History(work_dir / "history.jsonl")
    q = FaultQuorum(work_dir, CONTROLLER_ARGS)
    result = RunResult(seed, duration_s, work_dir, [], None)
    writers: list[Writer] = []
    tailers: list[Tailer] = []
    observers: list[Observer] = []
    try:
        q.start()
        q.wait_ready(START_TIMEOUT_S)
        writers = [Writer(f"w{i}", q.urls, history, seed, run_id) for i in range(WRITERS)]
        tailers = [Tailer(f"t{i}", q.urls, history, seed) for i in range(TAILERS)]
        observers = [Observer(n, q.url(n), history) for n in NODE_IDS]
        for thread in (*writers, *tailers, *observers):
            thread.start()
        burst_count = 0

        def burst() -> None:
            nonlocal burst_count
            burst_count += 1
            threads = [
                threading.Thread(
                    target=Writer(f"b{burst_count}-{i}", q.urls, history, seed, run_id).write_once,
                    args=(("register", {"cluster_id": f"b{burst_count}-{i}"}),),
                    daemon=True,
                )
                for i in range(BURST_WRITES)
            ]
            for t in threads:
                t.start()
            for t in threads:
                t.join(120)

        nemesis = Nemesis(q, history, rng, burst)
        nemesis.run(time.monotonic() + duration_s)
        result.faults = nemesis.applied

        # Heal everything, then let the clients finish: writers complete (retrying unknowns) the write in
        # hand, tailers read up to the end of the log.
        q.heal()
        for n in NODE_IDS:
            q.resume(n)
            q.start_node(n)
        q.wait_ready(START_TIMEOUT_S)
        for w in writers:
            w.give_up_at = time.monotonic() + 60
            w.stop_flag.set()
        for w in writers:
            w.join(90)
        time.sleep(1.0)  # burst writers still retrying
        end = q.wait_converged(60) + 1
        for t in tailers:
            t.stop_at = end
            t.give_up_at = time.monotonic() + 60
        for t in tailers:
            t.join(90)
        for o in observers:
            o.stop_flag.set()
        for o in observers:
            o.join(5)
        logs = {n: q.log_of(n) for n in NODE_IDS}
        metadata: dict[str, dict[str, Any]] = {}
        for n in NODE_IDS:
            metadata[f"{n}"] = q.metadata_of(n)
            metadata[f"{n} (snapshot)"] = q.snapshot_metadata_of(n)
        (work_dir / "final.json").write_text(json.dumps({"logs": logs, "metadata": metadata}))
        history.close()
        archive = [r for t in tailers for r in t.records]
        ends = {n: metadata[f"{n}"]["offset"] for n in NODE_IDS}  # a log served after a snapshot may be empty
        result.anomalies, result.summary = check(history.ops, logs, metadata, archive, ends)
        for t in tailers:
            if t.next_offset < end:
                result.anomalies.append(Anomaly("tail-stuck", f"{t.client_id} stopped at {t.next_offset} of {end}"))
        return result
    except Exception as e:
        result.anomalies.append(Anomaly("harness", f"{type(e).__name__}: {e}"))
        return result
    finally:
        for w in writers:
            w.stop_flag.set()
            w.give_up_at = 0
        for o in observers:
            o.stop_flag.set()
        for t in tailers:
            t.give_up_at = 0
        q.stop()
        history.close()
