"""One seeded chaos run of the data plane: start the federation, run the workload, apply a schedule of
faults and operations, heal, let every group read what it must, check the history."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from deploy.launcher import BrokerSource
from tests.faults.checker import Anomaly
from tests.faults.cluster import NODE_IDS
from tests.faults.history import History

from .checker import Summary, check, must_read
from .federation import STRICT_NODE, ChaosFederation
from .workload import (
    Client,
    GatewayMember,
    GatewayProducer,
    JavaMember,
    JavaProducer,
    KafkaPythonMember,
    SdkMember,
    SdkProducer,
    SdkTransactions,
    _Member,
)

log = logging.getLogger("chaos")

NONE_TOPIC, STRICT_TOPIC, TXN_TOPIC = "chaos-none", "chaos-strict", "chaos-txn"
TOPICS = {NONE_TOPIC: "none", STRICT_TOPIC: "strict", TXN_TOPIC: "none"}
PARTITIONS_PER_CLUSTER = 3
FAULTS = (
    "kill_node", "pause_node", "cut_node", "cut_clients", "kill_gateway", "pause_gateway", "kill_agent",
    "pause_agent", "kill_broker", "pause_broker", "expand", "shrink", "decommission",
)  # fmt: skip
"""The catalogue (RELIABILITY.md): each applied, held, then healed before the next; ``expand`` adds c3,
``decommission`` (only after it) removes c3 again while traffic runs."""
SCHEDULE = (
    "kill_broker", "kill_node", "expand", "kill_gateway", "pause_node", "cut_clients", "pause_gateway",
    "kill_agent", "cut_node", "shrink", "pause_broker", "pause_agent", "decommission",
)  # fmt: skip
"""The explicit schedule ``make test`` runs: every fault of the catalogue once."""
RECOVERY_TIMEOUT_S = 60.0  # a liveness deadline after a fault heals: the machine is shared
READ_ALL_TIMEOUT_S = 90.0
DECOMMISSION_TIMEOUT_S = 90.0


def replay_command(seed: int, schedule: tuple[str, ...] | None, faults: int) -> str:
    if schedule is not None:
        return f"python -m tests.dataplane --seed {seed} --schedule {','.join(schedule)}"
    return f"make chaos SEED={seed} FAULTS={faults}"


@dataclass
class ChaosResult:
    seed: int
    work_dir: Path
    anomalies: list[Anomaly] = field(default_factory=list)
    summary: Summary | None = None
    faults: list[str] = field(default_factory=list)
    schedule: tuple[str, ...] | None = None
    count: int = 0

    @property
    def ok(self) -> bool:
        return not self.anomalies and self.summary is not None

    def report(self) -> str:
        lines = [f"seed {self.seed}: {len(self.faults)} faults ({', '.join(self.faults) or 'none'})"]
        if self.summary is not None:
            s = self.summary
            lines.append(f"checked {s.sent} messages sent ({s.acknowledged} acknowledged, {s.failed} failed, "
                         f"{s.unknown} unknown), {s.committed_txns} transactions committed and {s.aborted_txns} "
                         f"aborted, {s.reads} reads, {s.commits} offsets committed; read again: "
                         f"{s.excused_duplicates} after a lost session, {s.redelivered} held back on a strict "
                         f"topic when its partition moved, {s.rewritten} written again after a gateway died or "
                         f"stalled; {s.late_writes} late writes past a seal")  # fmt: skip
        lines.append(f"{len(self.anomalies)} anomalies")
        lines += [f"  {a}" for a in self.anomalies[:50]]
        history = self.work_dir / "history.jsonl"
        if not self.ok:
            lines.append(f"FAILED: seed {self.seed}; replay the run with: "
                         f"{replay_command(self.seed, self.schedule, self.count)}")  # fmt: skip
            lines.append(f"check the history again with: python -m tests.dataplane --check {history}")
        lines.append(f"history and process logs: {self.work_dir}")
        return "\n".join(lines)


class Nemesis:
    """Applies faults and operations to the federation, one at a time, each held for a drawn while and healed;
    what a fault should have caused and did not (recovery within ``RECOVERY_TIMEOUT_S``) is a problem."""

    def __init__(self, fed: ChaosFederation, history: History, rng: random.Random) -> None:
        self.fed, self.history, self.rng = fed, history, rng
        self.applied: list[str] = []
        self.problems: list[Anomaly] = []
        self.expanded = False
        self.decommissioned = False

    def record(self, kind: str, **details: Any) -> None:
        self.history.add({"op": "fault", "client": "nemesis", "kind": kind, "at": self.history.now(), **details})
        log.info("fault: %s %s", kind, details)

    def choices(self) -> list[str]:
        """What may come next: ``expand`` once, ``decommission`` once and only after it."""
        return [f for f in FAULTS if not (f == "expand" and self.expanded)
                and not (f == "decommission" and (self.decommissioned or not self.expanded))]  # fmt: skip

    def apply(self, kind: str) -> None:
        hold_s = self.rng.uniform(2.0, 4.0)
        try:
            getattr(self, kind)(hold_s)
        except TimeoutError as e:
            self.problems.append(Anomaly("not-recovered", f"{kind}: {e}"))
        self.applied.append(kind)

    def _hold(self, kind: str, target: Any, apply: Callable[[], None], heal: Callable[[], None], hold_s: float) -> None:
        self.record(kind, target=target)
        apply()
        time.sleep(hold_s)
        heal()
        self.record("healed", target=target)

    # -- the quorum ---------------------------------------------------------------------------------
    def kill_node(self, hold_s: float) -> None:
        q = self.fed.quorum
        node = q.leader() if self.rng.random() < 0.5 else None
        node = node or self.rng.choice(NODE_IDS)
        self._hold("kill_node", node, lambda: q.kill(node), lambda: q.start_node(node), hold_s)
        q.wait_ready(RECOVERY_TIMEOUT_S)

    def pause_node(self, hold_s: float) -> None:
        q = self.fed.quorum
        node = q.leader() or self.rng.choice(NODE_IDS)
        self._hold("pause_node", node, lambda: q.pause(node), lambda: q.resume(node), hold_s)
        q.wait_ready(RECOVERY_TIMEOUT_S)

    def cut_node(self, hold_s: float) -> None:
        """The strict producer's controller cut from the other two (a follower then, its log frozen)."""
        q = self.fed.quorum
        self._hold("cut_node", STRICT_NODE, lambda: q.cut(STRICT_NODE), lambda: q.heal(STRICT_NODE), hold_s + 1.0)
        q.wait_ready(RECOVERY_TIMEOUT_S)

    def cut_clients(self, hold_s: float) -> None:
        """The SDK's clients and the gateways cut from every controller; the agents still reach them."""
        proxies = self.fed.data_proxies
        self._hold("cut_clients", "all", proxies.cut, proxies.heal, hold_s)

    # -- gateways, agents, brokers ------------------------------------------------------------------
    def kill_gateway(self, hold_s: float) -> None:
        port = self.rng.choice(self.fed.gateway_ports)
        self._hold("kill_gateway", port, lambda: self.fed.kill_gateway(port),
                   lambda: self.fed.start_gateway(port), hold_s)  # fmt: skip

    def pause_gateway(self, hold_s: float) -> None:
        port = self.rng.choice(self.fed.gateway_ports)
        self._hold("pause_gateway", port, lambda: self.fed.pause(self.fed.gateways[port]), self.fed.resume, hold_s)

    def kill_agent(self, hold_s: float) -> None:
        c = self.fed.clusters[self.rng.choice(("c1", "c2"))]
        self._hold("kill_agent", c.cluster_id, c.kill_agent, c.start_agent, hold_s)
        self.fed.wait_healthy((c.cluster_id,), RECOVERY_TIMEOUT_S)

    def pause_agent(self, hold_s: float) -> None:
        c = self.fed.clusters[self.rng.choice(("c1", "c2"))]
        self._hold("pause_agent", c.cluster_id, lambda: self.fed.pause(c.agent), self.fed.resume, hold_s)
        self.fed.wait_healthy((c.cluster_id,), RECOVERY_TIMEOUT_S)

    def kill_broker(self, hold_s: float) -> None:
        """A whole sub-cluster (its one broker) killed -9 and restarted on its data."""
        c = self.fed.clusters[self.rng.choice(("c1", "c2"))]
        self._hold("kill_broker", c.cluster_id, c.kill_broker, c.start_broker, hold_s)
        self.fed.wait_healthy((c.cluster_id,), RECOVERY_TIMEOUT_S)

    def pause_broker(self, hold_s: float) -> None:
        c = self.fed.clusters[self.rng.choice(("c1", "c2"))]
        self._hold("pause_broker", c.cluster_id, lambda: self.fed.pause(self.fed.broker(c.cluster_id)),
                   self.fed.resume, hold_s)  # fmt: skip
        self.fed.wait_healthy((c.cluster_id,), RECOVERY_TIMEOUT_S)

    # -- operations while traffic runs -----------------------------------------------------------------
    def expand(self, hold_s: float) -> None:
        """c3 joins (its agent registers it) and every topic gets two partitions there."""
        self.record("expand", target="c3")
        self.expanded = True
        self.fed.clusters["c3"].start_agent()
        self.fed.wait_healthy(("c3",), RECOVERY_TIMEOUT_S)
        with self.fed.controller_client() as client:
            for topic in TOPICS:
                client.post(f"/v1/topics/{topic}/partitions", {"cluster_id": "c3", "count": 2})
        for topic in TOPICS:
            self.fed.wait_writable(topic, RECOVERY_TIMEOUT_S)
        time.sleep(hold_s)

    def shrink(self, hold_s: float) -> None:
        """One of c1's partitions of each topic stops taking writes; it is removed once its groups read it."""
        self.record("shrink", target="c1")
        with self.fed.controller_client() as client:
            for topic in TOPICS:
                partition = self.rng.randrange(PARTITIONS_PER_CLUSTER)  # c1's are the first ones
                client.post(f"/v1/topics/{topic}/shrink", {"partitions": [partition]})
        time.sleep(hold_s)

    def decommission(self, hold_s: float) -> None:
        """c3 read-only, drained, decommissioned: finished (or not) by the end of the run."""
        self.record("decommission", target="c3")
        self.decommissioned = True
        with self.fed.controller_client() as client:
            client.post("/v1/clusters/c3/decommission")
        time.sleep(hold_s)


class Workload:
    """Every client of the run: producers of each kind, transactions, a group of SDK members (one joins and
    leaves mid-run), and groups of librdkafka, kafka-python and Java members through the gateways."""

    def __init__(self, fed: ChaosFederation, history: History, java_classpath: str | None) -> None:
        urls, gateways = fed.data_urls, fed.bootstrap
        self.history = history
        self.producers: list[Client] = [
            SdkProducer("sdk-none", history, urls, NONE_TOPIC, strict=False),
            SdkProducer("sdk-strict", history, [urls[STRICT_NODE - 1]], STRICT_TOPIC, strict=True),
            SdkTransactions("sdk-txn", history, urls, TXN_TOPIC),
            GatewayProducer("rdk-none", history, gateways, NONE_TOPIC, "librdkafka", strict=False, rate=50),
            GatewayProducer("kp-strict", history, gateways, STRICT_TOPIC, "kafka-python", strict=True, rate=50),
        ]
        if java_classpath is not None:
            self.producers.append(JavaProducer("java-none", history, gateways, NONE_TOPIC, java_classpath))
        sdk_topics, gateway_topics = [NONE_TOPIC, STRICT_TOPIC, TXN_TOPIC], [NONE_TOPIC, STRICT_TOPIC]
        self.members: list[_Member] = [
            SdkMember("sdk-m1", history, urls, "sdk-g", sdk_topics),
            SdkMember("sdk-m2", history, urls, "sdk-g", sdk_topics),
            GatewayMember("gw-m1", history, gateways, "gw-g", gateway_topics),
            GatewayMember("gw-m2", history, gateways, "gw-g", gateway_topics),
            KafkaPythonMember("kp-m1", history, gateways, "kp-g", gateway_topics),
        ]
        groups = {"sdk-g": sdk_topics, "gw-g": gateway_topics, "kp-g": gateway_topics}
        if java_classpath is not None:
            self.members.append(JavaMember("java-m1", history, gateways, "java-g", NONE_TOPIC, java_classpath))
            groups["java-g"] = [NONE_TOPIC]
        self.visitor = SdkMember("sdk-m3", history, urls, "sdk-g", sdk_topics)
        for topic, order in TOPICS.items():
            history.add({"op": "topic", "topic": topic, "key_order": order, "at": 0.0})
        for group, topics in groups.items():
            for topic in topics:
                history.add({"op": "subscribe", "group": group, "topic": topic, "isolation": "read_committed",
                             "at": 0.0})  # fmt: skip

    def start(self) -> None:
        for client in (*self.members, *self.producers):
            client.start()

    def clients(self) -> list[Client]:
        return [*self.producers, *self.members, self.visitor]

    def stop_producing(self) -> None:
        for p in self.producers:
            p.stopping.set()
        for p in self.producers:
            p.finish()

    def read_everything(self, timeout_s: float) -> list[str]:
        """Until each group read every message it must (or ``timeout_s``); the groups still missing some."""
        deadline = time.monotonic() + timeout_s
        while True:
            wanted = must_read(self.history.ops)
            missing = [g for g, ids in wanted.items() if not ids <= self.read_by(g)]
            if not missing or time.monotonic() > deadline:
                return missing
            time.sleep(0.5)

    def read_by(self, group: str) -> set[str]:
        return {i for m in (*self.members, self.visitor) if m.group == group for i in m.ids}

    def finish(self) -> None:
        for m in self.members:
            m.stopping.set()
        for m in self.members:
            m.finish()
        if self.visitor.is_alive():
            self.visitor.finish()

    def errors(self) -> list[Anomaly]:
        return [Anomaly("client-died", f"{c.name}: {type(c.error).__name__}: {c.error}")
                for c in self.clients() if c.error is not None]  # fmt: skip


def run(seed: int, work_dir: Path, schedule: tuple[str, ...] | None = None, count: int = len(SCHEDULE),
        lend_brokers: BrokerSource | None = None, java_classpath: str | None = None) -> ChaosResult:  # fmt: skip
    """One run: ``schedule`` (fault names in order) when given, else ``count`` faults drawn from the seed."""
    rng = random.Random(seed)
    work_dir.mkdir(parents=True, exist_ok=True)
    history = History(work_dir / "history.jsonl")
    result = ChaosResult(seed, work_dir, schedule=schedule, count=count)
    fed = ChaosFederation(work_dir, lend_brokers)
    workload: Workload | None = None
    try:
        print(f"starting the federation in {work_dir}", flush=True)
        fed.start()
        _create_topics(fed)
        workload = Workload(fed, history, java_classpath)
        workload.start()
        time.sleep(3.0)
        nemesis = Nemesis(fed, history, rng)
        _run_faults(nemesis, workload, schedule, count)
        result.faults = nemesis.applied
        _heal(fed)
        result.anomalies += nemesis.problems
        print("faults done; producers flush, groups read what they must", flush=True)
        workload.stop_producing()
        missing = workload.read_everything(READ_ALL_TIMEOUT_S)
        workload.finish()
        _record_seals(fed, history)
        if nemesis.decommissioned:
            result.anomalies += _decommissioned(fed)
        result.anomalies += workload.errors()
        result.anomalies += [Anomaly("gateway-crashed", c) for c in fed.gateway_crashed()]
        history.close()
        anomalies, result.summary = check(history.ops)
        result.anomalies += anomalies
        if missing and not anomalies:
            result.anomalies.append(Anomaly("harness", f"groups {missing} still reading after {READ_ALL_TIMEOUT_S} s"))
        return result
    except Exception as e:
        log.exception("the chaos run failed")
        result.anomalies.append(Anomaly("harness", f"{type(e).__name__}: {e}"))
        return result
    finally:
        if workload is not None:
            for c in workload.clients():
                c.stopping.set()
        fed.stop()
        history.close()


def _create_topics(fed: ChaosFederation) -> None:
    with fed.controller_client() as client:
        for topic, order in TOPICS.items():
            client.post("/v1/topics", {"name": topic, "region": "r1", "partitions_per_cluster": PARTITIONS_PER_CLUSTER,
                                       "key_order": order})  # fmt: skip
    for topic in TOPICS:
        fed.wait_writable(topic)


def _run_faults(nemesis: Nemesis, workload: Workload, schedule: tuple[str, ...] | None, count: int) -> None:
    """The faults one by one; the visiting member joins after the first third and leaves after the second."""
    total = len(schedule) if schedule is not None else count
    for i in range(total):
        if i == total // 3:
            workload.visitor.start()
        if i == 2 * total // 3 and workload.visitor.is_alive():
            workload.visitor.finish()
        time.sleep(nemesis.rng.uniform(1.0, 2.0))
        kind = schedule[i] if schedule is not None else nemesis.rng.choice(nemesis.choices())
        print(f"fault {i + 1}/{total}: {kind}", flush=True)
        nemesis.apply(kind)


def _heal(fed: ChaosFederation) -> None:
    """Everything back: proxies healed, paused processes resumed, every node, gateway and broker running."""
    fed.resume()
    fed.data_proxies.heal()
    fed.quorum.heal()
    for n in NODE_IDS:
        fed.quorum.resume(n)
        fed.quorum.start_node(n)
    fed.quorum.wait_ready(RECOVERY_TIMEOUT_S)
    for port, proc in fed.gateways.items():
        if proc.poll() is not None:
            fed.start_gateway(port)
    fed.wait_healthy(("c1", "c2"), RECOVERY_TIMEOUT_S)


def _record_seals(fed: ChaosFederation, history: History) -> None:
    """The log's key-order seals, for the checker to tell a late write from a reorder."""
    leader = fed.quorum.wait_leader(RECOVERY_TIMEOUT_S)
    for record in fed.quorum.log_of(leader):
        if record["type"] == "KeyOrderSealed":
            data = record["data"]
            history.add({"op": "seal", "topic": data["topic"], "partition": data["partition"],
                         "offset": data["end_offset"], "at": history.now()})  # fmt: skip


def _decommissioned(fed: ChaosFederation) -> list[Anomaly]:
    deadline = time.monotonic() + DECOMMISSION_TIMEOUT_S
    state = None
    while time.monotonic() < deadline:
        state = fed.cluster_states().get("c3", {}).get("state")
        if state == "decommissioned":
            return []
        time.sleep(0.5)
    with fed.controller_client() as client:
        rows = client.get("/v1/drain", cluster_id="c3")["partitions"]
    waiting = "; ".join(f"{r['topic']}/{r['partition']} lag {r['lag']} waits for {r['waiting_for']}"
                        for r in rows if not r["drained"])  # fmt: skip
    return [Anomaly("not-recovered", f"c3 still {state} {DECOMMISSION_TIMEOUT_S:g} s after the run ended: {waiting}")]
