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

import httpx

from .checker import Anomaly, Summary, check
from .clients import Heartbeater, Observer, Tailer, Writer
from .cluster import AGENT_REGION, NODE_IDS, FaultQuorum
from .history import History

log = logging.getLogger("faults")

NODE_FAULTS = ("kill", "pause", "cut", "leader_kill_mid_batch", "restart_all", "http_cut")
AGENT_FAULTS = ("kill_broker", "kill_agent")
FAULTS = NODE_FAULTS + AGENT_FAULTS
"""The catalogue; see RELIABILITY.md. Each fault is applied, held, then reverted before the next one."""
SCHEDULE = ("http_cut", "kill", "kill_broker", "pause", "cut", "leader_kill_mid_batch", "kill_agent", "restart_all")
"""The explicit schedule of the pytest subset: every fault of the catalogue once."""
WRITERS = 4
TAILERS = 2
SELECTED_TOPICS = ("on-agents", *(f"w0-t{n}" for n in range(300)))
"""What one more tailer follows (``topics=``): the agents' topic and the first writer's, not the others'."""
AGENTS = 2
BURST_WRITES = 16  # concurrent writes in flight when the leader is killed mid-batch
START_TIMEOUT_S = 90.0  # the machine is shared: be patient
FENCE_TIMEOUT_S = 30.0  # a dead broker's agent reports it within a few beats; the machine is shared
# Small dump thresholds so that runs also restart from a dump plus the journal after it (a restarted node
# serves the log from its dump on: once every node restarted, offset 0 is gone everywhere).
CONTROLLER_ARGS = ("--compaction-min-entries", "200", "--compaction-period-s", "6")


def replay_command(seed: int, duration: float, schedule: tuple[str, ...] | None = None, secure: bool = False) -> str:
    secured = " --secure" if secure else ""
    if schedule is not None:
        return f"python -m tests.faults --seed {seed} --schedule {','.join(schedule)}{secured}"
    if secure:
        return f"python -m tests.faults --seed {seed} --duration {duration:g}{secured}"
    return f"make faults SEED={seed} DURATION={duration:g}"


@dataclass
class RunResult:
    seed: int
    duration_s: float
    work_dir: Path
    anomalies: list[Anomaly]
    summary: Summary | None
    faults: list[str] = field(default_factory=list)
    schedule: tuple[str, ...] | None = None
    secure: bool = False

    @property
    def ok(self) -> bool:
        return not self.anomalies and self.summary is not None

    def report(self) -> str:
        lines = [f"seed {self.seed}, {self.duration_s:g} s of faults: {len(self.faults)} faults "
                 f"({', '.join(self.faults) or 'none'})"]  # fmt: skip
        if self.summary is not None:
            s = self.summary
            lines.append(f"checked {s.writes} writes ({s.acknowledged} acknowledged, {s.unknown} unknown, "
                         f"{s.failed} refused; {s.unknown_attempts} unknown attempts retried, "
                         f"{s.retried_after_unknown} writes answered after an unknown attempt, {s.replayed} "
                         f"answers replayed from a first outcome), "
                         f"{s.tail_pages} tail pages ({s.tail_records} records; {s.gone} answers 410, "
                         f"{s.snapshots_loaded} snapshots loaded), "
                         f"{s.node_polls} leader polls, {s.metadata_checks} metadata comparisons; "
                         f"fenced: {', '.join(f'{c} x{n}' for c, n in sorted(s.fences.items())) or 'none'}; "
                         f"final log {s.log_length} records")  # fmt: skip
        lines.append(f"{len(self.anomalies)} anomalies")
        lines += [f"  {a}" for a in self.anomalies[:50]]
        if not self.ok:
            replay = replay_command(self.seed, self.duration_s, self.schedule, self.secure)
            lines.append(f"FAILED: seed {self.seed}; replay with: {replay}")
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
        self.problems: list[Anomaly] = []  # what the faults should have caused and did not

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
        """Faults drawn from the seed until ``until`` (monotonic)."""
        kinds = FAULTS if self.q.agents else NODE_FAULTS
        while time.monotonic() < until:
            time.sleep(self.rng.uniform(1.0, 3.0))
            if time.monotonic() >= until:
                break
            self.apply(self.rng.choice(kinds))

    def run_schedule(self, schedule: tuple[str, ...]) -> None:
        """Exactly these faults, in this order (targets and holds still drawn from the seed)."""
        for kind in schedule:
            time.sleep(self.rng.uniform(1.0, 2.0))
            self.apply(kind)

    def apply(self, kind: str) -> None:
        getattr(self, kind)(self.rng.uniform(1.0, 3.5))
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

    def http_cut(self, hold_s: float) -> None:
        """Every reply of one node to its clients is lost, while its requests still reach it."""
        self._hold("http_cut", "http_heal", self.q.lose_replies, self.q.heal, hold_s)

    def kill_broker(self, hold_s: float) -> None:
        """kill -9 of an agent cluster's broker: its agent reports it, the leader fences it; the broker comes
        back empty (memory storage), the agent recreates its topics and the fence is lifted."""
        cluster_id = self.rng.choice(sorted(self.q.agents))
        self.record("kill_broker", cluster=cluster_id)
        self.q.agents[cluster_id].kill_broker()
        self.await_fence(cluster_id, True, "its broker was killed")
        time.sleep(hold_s)
        self.q.agents[cluster_id].start_broker()
        self.record("restart_broker", cluster=cluster_id)
        self.await_fence(cluster_id, False, "its broker came back")

    def kill_agent(self, hold_s: float) -> None:
        """kill -9 of an agent: its lease runs out and its cluster is fenced; restarted, it registers again
        (which must change nothing) and its heartbeats lift the fence."""
        cluster_id = self.rng.choice(sorted(self.q.agents))
        self.record("kill_agent", cluster=cluster_id)
        self.q.agents[cluster_id].kill_agent()
        self.await_fence(cluster_id, True, "its agent was killed")
        time.sleep(hold_s)
        self.q.agents[cluster_id].start_agent()
        self.record("restart_agent", cluster=cluster_id)
        self.await_fence(cluster_id, False, "its agent was restarted")

    def await_fence(self, cluster_id: str, fenced: bool, why: str) -> None:
        """Until the leader's metadata shows ``cluster_id`` (un)fenced; past ``FENCE_TIMEOUT_S`` (a liveness
        deadline, many leases long) the miss is recorded as an anomaly of the run."""
        deadline = time.monotonic() + FENCE_TIMEOUT_S
        while time.monotonic() < deadline:
            leader = self.q.leader()
            cluster = self.q.cluster(cluster_id, leader) if leader is not None else None
            if cluster is not None and cluster["fenced"] == fenced:
                self.record("fenced" if fenced else "unfenced", cluster=cluster_id)
                return
            time.sleep(0.1)
        kind = "fence-missed" if fenced else "fence-stuck"
        self.problems.append(Anomaly(kind, f"{cluster_id} still {'un' if fenced else ''}fenced {FENCE_TIMEOUT_S:g} s "
                                     f"after {why}"))  # fmt: skip

    def restart_all(self, hold_s: float) -> None:
        self.record("restart_all")
        for n in NODE_IDS:
            self.q.kill(n)
        time.sleep(min(hold_s, 1.0))
        for n in NODE_IDS:
            self.q.start_node(n)
        self.record("restarted_all")


def run(
    seed: int,
    duration_s: float,
    work_dir: Path,
    schedule: tuple[str, ...] | None = None,
    agents: int = AGENTS,
    secure: bool = False,
) -> RunResult:
    """Run one seeded run and check its history: ``schedule`` (fault names, applied in order) when given,
    else faults drawn from the seed for ``duration_s`` seconds; ``agents`` sub-clusters with their agents;
    ``secure``: the controllers with a Raft secret and an admin token, as deployed (else ``--insecure``)."""
    work_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    run_id = f"s{seed}-{rng.randrange(1 << 32):08x}"
    history = History(work_dir / "history.jsonl")
    q = FaultQuorum(work_dir, CONTROLLER_ARGS, agents=agents, secure=secure)
    result = RunResult(seed, duration_s, work_dir, [], None, schedule=schedule, secure=secure)
    clients = _Clients(q, history, seed, run_id)
    try:
        q.start()
        q.wait_ready(START_TIMEOUT_S)
        if q.agents:
            _place_a_topic_on_the_agents(q, history, seed, run_id)
        clients.start()
        nemesis = Nemesis(q, history, rng, clients.burst)
        if schedule is not None:
            nemesis.run_schedule(schedule)
        else:
            nemesis.run(time.monotonic() + duration_s)
        result.faults = nemesis.applied
        # Heal everything, then let the clients finish: writers complete (retrying unknowns) the write in
        # hand, tailers read up to the end of the log, every agent's cluster is unfenced again.
        q.heal()
        for n in NODE_IDS:
            q.resume(n)
            q.start_node(n)
        for agent in q.agents.values():
            if not any(p.poll() is None for p in agent.brokers.processes()):  # its broker is down
                agent.start_broker()
        q.wait_ready(START_TIMEOUT_S)
        for cluster_id in q.agents:
            nemesis.await_fence(cluster_id, False, "the run healed")
        result.anomalies += nemesis.problems
        end = clients.finish()
        logs = {n: q.log_of(n) for n in NODE_IDS}
        metadata: dict[str, dict[str, Any]] = {}
        for n in NODE_IDS:
            metadata[f"{n}"] = q.metadata_of(n)
            metadata[f"{n} (snapshot)"] = q.snapshot_metadata_of(n)
        (work_dir / "final.json").write_text(json.dumps({"logs": logs, "metadata": metadata}))
        history.close()
        archive = [r for t in clients.tailers for r in t.records]
        ends = {n: metadata[f"{n}"]["offset"] for n in NODE_IDS}  # a log served after a snapshot may be empty
        anomalies, result.summary = check(history.ops, logs, metadata, archive, ends, agent_clusters=q.agents)
        result.anomalies += anomalies
        for t in clients.tailers:
            if t.next_offset < end:
                result.anomalies.append(Anomaly("tail-stuck", f"{t.client_id} stopped at {t.next_offset} of {end}"))
        return result
    except Exception as e:
        result.anomalies.append(Anomaly("harness", f"{type(e).__name__}: {e}"))
        return result
    finally:
        clients.stop()
        q.stop()
        history.close()


def _place_a_topic_on_the_agents(q: FaultQuorum, history: History, seed: int, run_id: str) -> None:
    """Once the agents registered their clusters: a topic on them (a write of the history), so that the
    agents create its physical partitions and report their leaders, and a restarted broker comes back empty."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while not all((c := q.cluster(cluster_id)) and not c["fenced"] for cluster_id in q.agents):
        if time.monotonic() > deadline:
            raise TimeoutError(f"agents {sorted(q.agents)} did not register within {START_TIMEOUT_S} s")
        time.sleep(0.2)
    setup = Writer("setup", q.client_urls, history, seed, run_id, q.admin_token)
    setup.region = AGENT_REGION
    if setup.write_once(("create_topic", {"name": "on-agents", "partitions_per_cluster": 2})) != "ok":
        raise RuntimeError("could not create the topic on the agents' clusters")


class _Clients:
    """The writers, the tailers (one of them starts late, below every node's window; one follows some topics),
    the observers and the heartbeater of the writers' clusters."""

    def __init__(self, q: FaultQuorum, history: History, seed: int, run_id: str) -> None:
        self.q, self.history, self.seed, self.run_id = q, history, seed, run_id
        self.writers = [Writer(f"w{i}", q.client_urls, history, seed, run_id, q.admin_token) for i in range(WRITERS)]
        self.tailers = [Tailer(f"t{i}", q.client_urls, history, seed) for i in range(TAILERS)]
        self.late = Tailer("t-late", q.client_urls, history, seed)
        self.tailers.append(Tailer("t-selected", q.client_urls, history, seed, topics=SELECTED_TOPICS))
        self.observers = [Observer(n, q.url(n), history) for n in NODE_IDS]
        self.heartbeater = Heartbeater(q.client_urls, AGENT_REGION, seed, token=q.admin_token)
        self.bursts = 0
        self._stop = threading.Event()
        self._watcher = threading.Thread(target=self._start_late_tailer, name="late-tailer", daemon=True)

    def start(self) -> None:
        for thread in (*self.writers, *self.tailers, *self.observers, self.heartbeater, self._watcher):
            thread.start()

    def _start_late_tailer(self) -> None:
        """The late tailer starts from offset 0 once every node answers 410 there (each restarted from a dump)."""
        while not self._stop.wait(0.5) and not self._start_late_if_gone():
            pass

    def _start_late_if_gone(self) -> bool:
        with httpx.Client(timeout=1.0) as http:
            for url in self.q.urls:
                try:
                    if http.get(url + "/v1/log", params={"offset": 0, "limit": 1}).status_code != 410:
                        return False
                except httpx.HTTPError:
                    return False
        self.tailers.append(self.late)
        self.late.start()
        return True

    def burst(self) -> None:
        """``BURST_WRITES`` registrations released at once (group commit batches them)."""
        self.bursts += 1
        threads = [
            threading.Thread(
                target=Writer(
                    f"b{self.bursts}-{i}", self.q.client_urls, self.history, self.seed, self.run_id, self.q.admin_token
                ).write_once,
                args=(("register", {"cluster_id": f"b{self.bursts}-{i}"}),),
                daemon=True,
            )
            for i in range(BURST_WRITES)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)

    def finish(self) -> int:
        """Writers finish the write in hand; tailers read to the end, which is returned (one past the last offset)."""
        self._stop.set()
        self._watcher.join(10)
        if self.late not in self.tailers:
            self._start_late_if_gone()  # the last chance: every node is up again now
        for w in self.writers:
            w.give_up_at = time.monotonic() + 60
            w.stop_flag.set()
        for w in self.writers:
            w.join(90)
        time.sleep(1.0)  # burst writers still retrying
        end = self.q.wait_converged(60) + 1
        for t in self.tailers:
            t.stop_at = end
            t.give_up_at = time.monotonic() + 60
        for t in self.tailers:
            t.join(90)
        for o in self.observers:
            o.stop_flag.set()
        for o in self.observers:
            o.join(5)
        return end  # the heartbeater beats on until stop(): a lease running out would add records

    def stop(self) -> None:
        self._stop.set()
        for w in self.writers:
            w.stop_flag.set()
            w.give_up_at = 0
        for o in (*self.observers, self.heartbeater):
            o.stop_flag.set()
        for t in self.tailers:
            t.give_up_at = 0
