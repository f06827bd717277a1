"""Shared pieces of the benchmarks: sizes, result rows and tables, quorums, child processes, statistics."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal, Self

import httpx

from deploy.launcher import LocalFederation, LocalQuorum, ready_demo_topic, stop_processes
from metadata_client.follower import LogFollower
from metadata_log.image import MetadataImage
from metadata_log.publisher import LogDelta
from sdk import FederatedProducer

from .httpconn import TRANSPORT_ERRORS, Connection

RESULTS_DIR = Path(__file__).resolve().parent / "results"
NO_FSYNC = "--no-journal-fsync"


# -- sizes -------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Sizes:
    """Every knob whose value depends on ``--quick`` (a smoke run) versus the full run (~10 min)."""

    quick: bool
    # 1a / 1b: writes through HTTP
    warmup_s: float
    measure_s: float
    single_clients: int
    bulk_clients: int
    bulk_partitions: int
    # 1c: Raft layer alone
    raft_seconds: float
    raft_rounds: int
    raft_records_per_command: tuple[int, ...]  # compared with raw pysyncobj against the 0.8x goal
    raft_big_command: int  # records in an extra phase of ~110 KB commands (shown, not judged); 0: none
    raft_inflight: int
    # 2: commit -> tailer latency; (tailers, writes per second) per configuration
    tailer_configs: tuple[tuple[int, float], ...]
    tailer_seconds: float
    # 3: failover
    failover_trials: int
    # 4: big image
    image_partitions: int
    image_clusters: int
    image_partitions_per_cluster: int
    compaction: bool  # make the leader compact (time or entry trigger) and watch whether it keeps leading
    # #38: the federation's shape at scale (regions of 4 clusters, each topic on its region's 4)
    scale_topics: int = 10_000
    scale_clusters: int = 1_000
    scale_partitions_per_topic: int = 10_000

    @staticmethod
    def full() -> Sizes:
        return Sizes(
            quick=False,
            warmup_s=2.0,
            measure_s=8.0,
            single_clients=64,
            bulk_clients=8,
            bulk_partitions=500,
            raft_seconds=3.0,
            raft_rounds=5,  # one round's ratio ranged 0.72-1.22 on 2 shared cores: a median of 3 was a coin toss
            raft_records_per_command=(1, 100),
            raft_big_command=2000,
            raft_inflight=64,
            tailer_configs=((1, 20.0), (100, 10.0), (1000, 4.0)),
            tailer_seconds=10.0,
            failover_trials=10,
            image_partitions=1_000_000,
            image_clusters=60,
            image_partitions_per_cluster=17,  # 1,020-partition topics: ~980 topics of ~1,000 partitions
            compaction=True,
        )

    @staticmethod
    def quick_run() -> Sizes:
        """A smoke run of the harness: only what differs from ``full()``."""
        return replace(
            Sizes.full(),
            quick=True,
            warmup_s=0.5,
            measure_s=2.0,
            bulk_clients=4,
            raft_seconds=1.5,
            raft_rounds=1,
            raft_big_command=0,
            tailer_configs=((1, 20.0), (100, 10.0)),
            tailer_seconds=2.0,
            failover_trials=2,
            image_partitions=20_000,
            image_partitions_per_cluster=4,
            compaction=False,
            scale_topics=20,
            scale_clusters=8,
            scale_partitions_per_topic=1000,
        )


# -- results -----------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Goal:
    """A target from the issue, e.g. ``Goal(">=", 2000, "records/s")``."""

    op: Literal[">=", "<="]
    target: float
    unit: str = ""

    def met(self, value: float | None) -> bool | None:
        if value is None or math.isnan(value):
            return False
        return value >= self.target if self.op == ">=" else value <= self.target

    def __str__(self) -> str:
        return f"{self.op} {fmt(self.target)} {self.unit}".rstrip()


@dataclass(frozen=True, slots=True)
class Row:
    """One measured figure. ``baseline`` is a figure from the same run to compare with (text)."""

    metric: str
    value: float | None
    unit: str
    baseline: str = ""
    goal: Goal | None = None
    note: str = ""

    @property
    def status(self) -> str:
        if self.goal is None:
            return ""
        return "PASS" if self.goal.met(self.value) else "MISS"

    def as_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["goal"] = str(self.goal) if self.goal else None
        d["status"] = self.status or None
        return d


@dataclass(slots=True)
class BenchResult:
    name: str
    title: str
    rows: list[Row] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict[str, Any] = field(default_factory=dict)
    elapsed_s: float = 0.0
    error: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "title": self.title,
            "rows": [r.as_json() for r in self.rows],
            "notes": self.notes,
            "details": self.details,
            "elapsed_s": round(self.elapsed_s, 1),
            "error": self.error,
        }


def fmt(value: float | None, digits: int = 3) -> str:
    """A human number: thousands separators, ~3 significant digits for small values."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if abs(value) >= 100 or value == int(value):
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def markdown_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [
        "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)) + " |",
        "|" + "|".join("-" * (w + 2) for w in widths) + "|",
    ]
    lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in rows]
    return "\n".join(lines)


def result_table(rows: Sequence[Row]) -> str:
    return markdown_table(
        ["metric", "measured", "baseline (same run)", "goal", "status"],
        [
            [
                r.metric + (f" ({r.note})" if r.note else ""),
                f"{fmt(r.value)} {r.unit}".strip(),
                r.baseline,
                str(r.goal) if r.goal else "",
                r.status,
            ]
            for r in rows
        ],
    )


# -- statistics --------------------------------------------------------------------------------------
def percentile(values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile (``p`` in 0..100); NaN for no values."""
    if not values:
        return math.nan
    ordered = sorted(values)
    rank = max(1, math.ceil(p / 100 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def median(values: Sequence[float]) -> float:
    """The usual median (mean of the two middle values for an even count); NaN for no values."""
    return statistics.median(values) if values else math.nan


def ratios(measured: Sequence[float], baseline: Sequence[float]) -> list[float]:
    """Round by round, ``measured`` over ``baseline`` (the rounds ran side by side)."""
    return [m / b for m, b in zip(measured, baseline, strict=True)]


def per_round(values: Sequence[float]) -> str:
    """ "0.91, 1.02, 0.87": the rounds a median was taken of."""
    return ", ".join(f"{x:.2f}" for x in values)


# -- machine -----------------------------------------------------------------------------------------
def machine_info() -> dict[str, Any]:
    model = "unknown"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "nproc": os.cpu_count(),
        "cpu_model": model,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg": load_average(),
        "git": git_state(),
    }


def git_state() -> dict[str, Any]:
    """The commit measured, and which files differed from it (the product may be edited meanwhile)."""
    root = Path(__file__).resolve().parent.parent

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=10).stdout
        except (OSError, subprocess.SubprocessError):
            return ""

    return {"head": git("rev-parse", "HEAD").strip(), "changed": git("status", "--short").splitlines()}


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS and VmHWM (peak RSS) of a process in KiB; empty when it is gone."""
    out: dict[str, int] = {}
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, rest = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(rest.split()[0])
    return out


# -- processes and quorums ---------------------------------------------------------------------------
class Children:
    """Worker processes this harness started; ``close`` ends them (SIGTERM, then SIGKILL), by PID only."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []

    def spawn(self, args: Sequence[str], log_path: Path, **kwargs: Any) -> subprocess.Popen[bytes]:
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log_file:
            proc = subprocess.Popen(
                [sys.executable, *args],
                stdout=kwargs.pop("stdout", log_file),
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches only the harness, whose finally ends the children
                cwd=Path(__file__).resolve().parent.parent,
                **kwargs,
            )
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        stop_processes(self.procs)
        self.procs.clear()

    def __enter__(self) -> Children:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def running_quorum(data_dir: Path, extra_args: Sequence[str] = (), secure: bool = False) -> Iterator[LocalQuorum]:
    """A started 3-node quorum that has a leader able to commit; always stopped on exit.

    Unsecured by default (no admin token, plain Raft traffic) so that it compares like for like with
    the raw pysyncobj baseline; ``secure`` measures the cost of the Raft secret and the token check."""
    with LocalQuorum(data_dir, extra_args=extra_args, secure=secure) as q:
        q.leader(timeout_s=30)
        wait_writable(q)
        q.wait_ready(timeout_s=30)  # also: the log at the newest metadata version (the compact command layout)
        yield q


def wait_writable(q: LocalQuorum, timeout_s: float = 30.0) -> None:
    """Until some node accepts a write (registers the cluster ``probe``): a leader that can commit."""
    deadline = time.monotonic() + timeout_s
    body = {"cluster_id": "probe", "region": "probe", "bootstrap_servers": "127.0.0.1:9"}
    while True:
        for url in q.urls:
            with contextlib.suppress(httpx.HTTPError):
                if q.client.post(url + "/v1/clusters", json=body, timeout=5).status_code < 300:
                    return
        if time.monotonic() > deadline:
            raise TimeoutError(f"no node accepted a write within {timeout_s} s; logs in {q.data_dir}")
        time.sleep(0.1)


class FenceWatch:
    """When a ``LogFollower`` (what agents, the SDK and Spark use) applies a ``ClusterFenced`` of ``cluster_id``
    committed after ``arm()``. A follower starting on a log that already holds such records (an earlier
    trial's fence) meets them again while it catches up: those do not count."""

    def __init__(self, fed: LocalFederation, cluster_id: str) -> None:
        self.cluster_id = cluster_id
        self.after: float = math.inf  # offsets above this one count
        self.seen_at: float | None = None
        self.seen = threading.Event()
        self.follower = LogFollower(fed.quorum.urls, wait_ms=5000, publisher=self)
        self.follower.poll(0)
        self.follower.start()

    def arm(self, fed: LocalFederation) -> None:
        """Just before the failure: every record committed so far is history."""
        self.after = fed.metadata()["offset"]

    def wait(self, timeout_s: float, what: str) -> float:
        """When the follower applied the fence (``time.monotonic()``); ``TimeoutError(what)`` if it did not."""
        if not self.seen.wait(timeout_s) or self.seen_at is None:
            raise TimeoutError(what)
        return self.seen_at

    def on_update(self, delta: LogDelta, image: MetadataImage) -> None:
        # A batch past arm() that leaves the cluster fenced and changed it: a fence from before arm() was lifted
        # before the trial (the harness waits for that), so the fence that changed it is the trial's.
        cluster = image.clusters.get(self.cluster_id)
        if (
            self.seen_at is None
            and image.offset > self.after
            and self.cluster_id in delta.changes.clusters_changed
            and cluster is not None
            and cluster.fenced
        ):
            self.seen_at = time.monotonic()
            self.seen.set()

    def stop(self) -> None:
        self.follower.stop()


def start_demo_federation(fed: LocalFederation, timeout_s: float = 60.0) -> None:
    """Start ``fed``, wait for its sub-clusters, create the demo topic U_TopicA and wait until it takes
    writes everywhere. The caller stops ``fed``."""
    fed.start()
    ready_demo_topic(fed, timeout_s)


class Background:
    """Runs ``_run`` in a daemon thread from ``with`` entry until exit, which sets ``_stop`` and joins."""

    def __init__(self, name: str) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def _run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


class Agents(Background):
    """Stand-in broker agents: one task per cluster heartbeats every 0.5 s on its own connection (any node
    forwards to the leader), like real agents, so the quorum does not fence the clusters after its agent
    lease (3 s) and topics can still be placed on them. Runs its own event loop in a thread."""

    def __init__(self, urls: Sequence[str], cluster_ids: Sequence[str], interval_s: float = 0.5) -> None:
        self.urls = list(urls)
        self.cluster_ids = list(cluster_ids)
        self.interval_s = interval_s
        self.failures = 0
        self.silenced: set[str] = set()  # clusters whose agent stopped beating (a dead agent)
        self.last_ok: dict[str, float] = {}  # when (time.monotonic()) each cluster's last beat was answered
        self.fenced_seen: set[str] = set()  # clusters a beat found fenced while their agent was beating
        super().__init__("agents")

    async def _agent(self, i: int, cluster_id: str) -> None:
        turn = i % len(self.urls)
        conns = [Connection(u) for u in self.urls]
        try:
            while not self._stop.is_set():
                if cluster_id in self.silenced:
                    await asyncio.sleep(self.interval_s)
                    continue
                try:
                    reply = await conns[turn].request(
                        "POST", f"/v1/agents/{cluster_id}/heartbeat", b'{"healthy":true}', timeout_s=2.0
                    )
                    ok = reply.ok
                except TRANSPORT_ERRORS:
                    ok = False
                if ok:
                    self.last_ok[cluster_id] = time.monotonic()
                    if reply.json().get("fenced"):
                        self.fenced_seen.add(cluster_id)
                else:
                    self.failures += 1
                    turn = (turn + 1) % len(conns)
                await asyncio.sleep(self.interval_s)
        finally:
            for c in conns:
                await c.close()

    async def _agents(self) -> None:
        await asyncio.gather(*(self._agent(i, c) for i, c in enumerate(self.cluster_ids)))

    def _run(self) -> None:
        asyncio.run(self._agents())


LOG_PROBLEMS = {
    "pysyncobj tick failed": "failed _onTick",
    "pickle data was truncated": "pickle data was truncated",
    "ERROR lines": " ERROR ",
    "Traceback": "Traceback (most recent call last)",
}


def count_log_errors(paths: Sequence[Path]) -> dict[str, int]:
    """How often each of ``LOG_PROBLEMS`` appears in these node logs (only problems that occurred)."""
    counts = dict.fromkeys(LOG_PROBLEMS, 0)
    for path in paths:
        with contextlib.suppress(OSError):
            text = path.read_text(errors="replace")
            for name, needle in LOG_PROBLEMS.items():
                counts[name] += text.count(needle)
    return {k: v for k, v in counts.items() if v}


def note_log_errors(q: LocalQuorum, result: BenchResult, label: str) -> None:
    """Record problems found in the quorum's node logs in ``result``."""
    found = count_log_errors(sorted(q.data_dir.glob("node-*.log")))
    result.details[f"node_log_errors ({label})"] = found
    if found:
        result.notes.append(f"node logs ({label}): {found}")


def node_status(q: LocalQuorum, node_id: int, timeout_s: float = 30.0) -> dict[str, Any]:
    """``GET /v1/node`` of one node, retried while it is too busy to answer within 0.5 s."""
    deadline = time.monotonic() + timeout_s
    while (status := q.node(node_id)) is None:
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {node_id} did not answer /v1/node within {timeout_s} s")
        time.sleep(0.1)
    return status


def leader_applied(q: LocalQuorum) -> int:
    """The current leader's applied offset."""
    return int(node_status(q, q.leader(timeout_s=30))["applied_offset"])


def wait_unfenced(q: LocalQuorum, cluster_ids: Sequence[str], timeout_s: float = 30.0) -> None:
    """Until none of these clusters is fenced. A cluster registered before its agent's first heartbeat is
    fenced by the leader's next lease check (there is no grace period for new clusters) and unfenced by
    that heartbeat; topics created in between would skip it."""
    wanted = set(cluster_ids)
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError, ValueError, KeyError, TimeoutError):
            clusters = q.client.get(q.url(q.leader()) + "/v1/clusters", timeout=5).json()["clusters"]
            if not any(c["fenced"] for c in clusters if c["cluster_id"] in wanted):
                return
        if time.monotonic() > deadline:
            raise TimeoutError(f"clusters still fenced after {timeout_s} s despite heartbeats")
        time.sleep(0.2)


def pid_of(q: LocalQuorum, node_id: int) -> int | None:
    proc = q.procs.get(node_id)
    return proc.pid if proc is not None and proc.poll() is None else None


def raise_keyboard_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def install_sigterm_handler() -> None:
    """SIGTERM unwinds like Ctrl-C, so every ``finally`` stops the processes it started."""
    signal.signal(signal.SIGTERM, raise_keyboard_interrupt)


class Producing(threading.Thread):
    """A ``FederatedProducer`` producing to ``topic`` until ``stop_flag`` is set: key-less values, or keys
    drawn in turn from ``keys`` distinct ones. ``first_ack``: logical partition -> when its first message was
    acknowledged (monotonic). The producer queues what no partition can take yet, so a resize never stops it."""

    def __init__(self, fed: LocalFederation, topic: str, keys: int = 0) -> None:
        super().__init__(daemon=True)
        self.topic = topic
        self.keys = keys
        self.first_ack: dict[int, float] = {}
        self.stop_flag = threading.Event()
        self.producer = FederatedProducer(
            {"kfed.controllers": ",".join(fed.quorum.urls), "linger.ms": 5, "on_delivery": self._report}
        )

    def _report(self, err: Any, msg: Any) -> None:
        if err is None:
            self.first_ack.setdefault(msg.partition(), time.monotonic())

    def run(self) -> None:
        i = 0
        while not self.stop_flag.is_set():
            key = f"key-{i % self.keys}".encode() if self.keys else None
            self.producer.produce(self.topic, str(i).encode(), key=key)
            i += 1
            if i % 50 == 0:
                self.producer.poll(0)
                time.sleep(0.01)
        self.producer.flush(30)
        self.producer.close()


def produce_when_room(producer: Any, *args: Any) -> None:
    """``producer.produce(*args)`` once its queue has room: what a producing loop does on ``BufferError``
    (librdkafka's queue of 100,000 messages is full, e.g. while a broker that just started answers its first
    requests), as an application must. Called only on that error, so the loop's usual path costs nothing."""
    while True:
        producer.poll(0.001)
        try:
            producer.produce(*args)
            return
        except BufferError:
            continue
