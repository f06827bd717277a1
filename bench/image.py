"""Benchmark 4: an image of ~1,000,000 logical partitions.

Why: the federation exists to scale metadata to millions of partitions, so the image must stay cheap to
hold (node RSS; goal <= 2 GB), to hand to a new tailer (``GET /v1/snapshot`` + decode), to hand to a new
follower, and to compact without stalling the quorum.

Steps: register ``image_clusters`` clusters in one region and create topics of ``clusters x
partitions_per_cluster`` partitions (1,020 in the full run: ~980 topics of ~1,000 partitions) until the
image holds ``image_partitions``; report the build rate and node RSS; fetch the snapshot as JSON and
msgpack from a follower (the first request builds it, the second is cached), decode it and rebuild the
image as an SDK follower would; stop a follower, wipe its data dir and restart it (a new node, with the
fixed 3-voter config) and time its catch-up; push Raft entries past the nodes' compaction threshold and
watch whether the leader's compaction costs it its leadership; and time a wiped follower's catch-up once
more, now from the compacted leader (InstallSnapshot).

With ``logCompactionSplit`` a node may compact only in its own slot (30% of a third) of every compaction
period (pysyncobj ``__tryLogCompaction``, on ``CLOCK_MONOTONIC_RAW``). To see the *leader* compact within
the run, the harness computes the slots, picks the node whose slot opens soonest after the pumping, and
moves leadership there first (SIGSTOP of the current leader for 1.5 s, then SIGCONT, until it lands).
The threshold and period are read from the product's CLI defaults. The quorum runs with
``--no-journal-fsync`` so that building and pumping take less time; fsync does not change the image, the
snapshot or the compaction stall.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import math
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import msgpack
import orjson

from deploy.launcher import LocalQuorum, stop_processes
from metadata_client.client import READS
from metadata_client.follower import MSGPACK, FollowerError, LogFollower
from metadata_log.codec import MAX_DECODE_BYTES, CodecError, unpack
from metadata_quorum import RaftSettings

from .common import (
    NO_FSYNC,
    Agents,
    Background,
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    leader_applied,
    note_log_errors,
    pid_of,
    proc_status,
    running_quorum,
    wait_unfenced,
)
from .httpconn import TRANSPORT_ERRORS, Connection

RSS_GOAL = Goal("<=", 2048, "MiB")
NO_LEADER_CHANGE = Goal("<=", 0, "")
LOAD_GOAL = Goal("<=", 5.0, "s")  # a new follower or tailer loads the image (the snapshot)
BUILD_CLIENTS = 4
PUMP_CLIENTS = 4  # = the controller's MAX_INFLIGHT_COMMANDS, so each write is one Raft entry
PUMP_MARGIN = 1.05  # entries pumped, relative to the compaction threshold
STEER_S = 20.0  # time allowed to move the leadership before the target's slot opens
MAX_WAIT_S = 240.0  # longest wait for a time-triggered compaction before pumping entries instead
MB = 1_000_000


def raw_clock() -> float:
    """pysyncobj's clock (``CLOCK_MONOTONIC_RAW``), which its compaction slots are computed on."""
    return time.clock_gettime(time.CLOCK_MONOTONIC_RAW)


def node_compaction_settings() -> tuple[int, float]:
    """(entries, period in s) after which a ``kfed controller`` started with default flags compacts (its
    defaults are ``RaftSettings``'; tests/unit/kfed/test_kfed_cli.py holds them equal)."""
    defaults = RaftSettings()
    return defaults.compaction_min_entries, float(defaults.compaction_min_s)


def compaction_slot(q: LocalQuorum, node_id: int, after: float, period_s: float) -> tuple[float, float]:
    """Start and end (raw clock) of the node's first compaction slot that has not ended by ``after``.

    pysyncobj (``logCompactionSplit``): node i of n (sorted "host:port" ids) may compact only in
    [P + i * period / n, + 0.3 * period / n) of every period P.
    """
    order = sorted(v.raft for v in q.voters)
    idx = order.index(q.voters[node_id - 1].raft)
    slot = 0.3 * period_s / len(order)
    start = math.floor(after / period_s) * period_s + idx * period_s / len(order)
    while start + slot <= after:
        start += period_s
    return start, start + slot


# -- helpers ----------------------------------------------------------------------------------------
def rss_all(q: LocalQuorum) -> dict[int, dict[str, int]]:
    out = {}
    for v in q.voters:
        pid = pid_of(q, v.id)
        if pid is not None:
            out[v.id] = proc_status(pid)
    return out


def max_rss_mib(samples: list[dict[int, dict[str, int]]]) -> float:
    return max((s.get("VmHWM", s.get("VmRSS", 0)) for snap in samples for s in snap.values()), default=0) / 1024


async def post_many(
    url: str, bodies: list[tuple[str, bytes]], clients: int, progress: str, idempotent: bool, key_prefix: str = "bench"
) -> dict[str, int]:
    """POST each (path, body) once, ``clients`` at a time; returns how many ended with each status.

    With ``idempotent``, 503/504/transport errors are retried with the same Idempotency-Key (``key_prefix-i``).
    """
    statuses: dict[str, int] = {}
    next_i = 0
    started = last_print = time.monotonic()

    async def post(conn: Connection, i: int, path: str, body: bytes) -> str:
        headers = {"Idempotency-Key": f"{key_prefix}-{i}"} if idempotent else None
        for _attempt in range(20 if idempotent else 1):
            try:
                reply = await conn.request("POST", path, body, timeout_s=120, headers=headers)
            except TRANSPORT_ERRORS as e:
                status = type(e).__name__
            else:
                status = str(reply.status)
                if reply.status not in (503, 504):
                    return status
            await asyncio.sleep(0.5)
        return status

    async def client() -> None:
        nonlocal next_i, last_print
        conn = Connection(url)
        try:
            while next_i < len(bodies):
                i, next_i = next_i, next_i + 1
                status = await post(conn, i, *bodies[i])
                statuses[status] = statuses.get(status, 0) + 1
                if time.monotonic() - last_print > 15:
                    last_print = time.monotonic()
                    print(f"  {progress}: {next_i:,}/{len(bodies):,} after {last_print - started:.0f} s", flush=True)
        finally:
            await conn.close()

    await asyncio.gather(*(client() for _ in range(clients)))
    return statuses


def fetch(url: str, path: str, accept: str | None = None) -> tuple[bytes, float]:
    async def go() -> tuple[bytes, float]:
        conn = Connection(url)
        try:
            t0 = time.perf_counter()
            reply = await conn.request("GET", path, timeout_s=900, headers={"Accept": accept} if accept else None)
            if not reply.ok:
                raise RuntimeError(f"GET {path}: {reply.status} {reply.body[:300]!r}")
            return reply.body, time.perf_counter() - t0
        finally:
            await conn.close()

    return asyncio.run(go())


def timed(fn: Any, *args: Any) -> tuple[Any, float]:
    t0 = time.perf_counter()
    value = fn(*args)
    return value, time.perf_counter() - t0


def wipe_and_catch_up(q: LocalQuorum, node_id: int, target_offset: int, timeout_s: float = 900) -> dict[str, Any]:
    """Stop ``node_id``, delete its data dir, start it again and time until it has applied ``target_offset``."""
    proc = q.procs[node_id]
    stop_processes([proc])
    shutil.rmtree(q.data_dir / f"node-{node_id}")
    t0 = time.monotonic()
    q.start(node_id)
    answered = None
    deadline = t0 + timeout_s
    while True:
        status = q.node(node_id)
        if status is not None and answered is None:
            answered = time.monotonic() - t0
        if status is not None and status["applied_offset"] >= target_offset:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"node {node_id} did not catch up to {target_offset} in {timeout_s} s: {status}")
        time.sleep(0.1)
    return {
        "node": node_id,
        "catch_up_s": time.monotonic() - t0,
        "first_answer_s": answered,
        "rss_kib": proc_status(q.procs[node_id].pid),
    }


# -- leadership steering and monitoring ---------------------------------------------------------------
def steer_leader(q: LocalQuorum, target: int, attempts: int = 12) -> tuple[int, int]:
    """Move leadership to ``target`` by pausing whoever leads (SIGSTOP 1.5 s, SIGCONT); returns the leader
    and how many times a leader was paused (each forces an election the benchmark caused itself)."""
    leader = q.leader(timeout_s=30)
    paused = 0
    for _ in range(attempts):
        if leader == target:
            return leader, paused
        pid = pid_of(q, leader)
        if pid is None:
            break
        os.kill(pid, signal.SIGSTOP)
        paused += 1
        try:
            time.sleep(1.5)
            q.leader(timeout_s=15, exclude=leader)
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(1.0)
        leader = q.leader(timeout_s=15)
    return leader, paused


class RoleWatcher(Background):
    """Samples every node's role and term every 100 ms in a thread, for the whole benchmark."""

    def __init__(self, q: LocalQuorum) -> None:
        self.urls = {v.id: v.http for v in q.voters}
        self.samples: list[tuple[float, int, str, int]] = []  # (wall time, node, role, term)
        super().__init__("role-watcher")

    def _run(self) -> None:
        with httpx.Client(timeout=0.5) as client:
            while not self._stop.wait(0.1):
                for node_id, url in self.urls.items():
                    with contextlib.suppress(httpx.HTTPError, ValueError, KeyError):
                        s = client.get(url + "/v1/node").json()
                        self.samples.append((time.time(), node_id, s["role"], int(s["term"])))

    def leader_at(self, wall: float) -> int | None:
        led = [node for t, node, role, _ in self.samples if t <= wall and role == "leader"]
        return led[-1] if led else None

    def leader_terms(self, t0: float, t1: float) -> list[int]:
        return sorted({term for t, _, role, term in self.samples if t0 <= t <= t1 and role == "leader"})

    def leaders(self) -> list[tuple[int, int]]:
        """(node, term) of each leader seen, in order."""
        out: list[tuple[int, int]] = []
        for _, node, role, term in sorted(self.samples):
            if role == "leader" and (not out or out[-1] != (node, term)):
                out.append((node, term))
        return out


class ProbeWriter(Background):
    """One sequential writer in a thread (re-registers one cluster with a new port each time: one record per
    write; rotates nodes on errors): keeps entries flowing so there is something to compact, and measures
    write latency meanwhile."""

    def __init__(self, urls: list[str]) -> None:
        self.urls = urls
        self.writes: list[tuple[float, float, bool]] = []  # (wall time sent, seconds, acknowledged)
        super().__init__("probe-writer")

    def _run(self) -> None:
        turn, seq = 0, 0
        with httpx.Client(timeout=30) as client:
            while not self._stop.wait(0.02):
                seq += 1
                body = {
                    "cluster_id": "probe-w",
                    "region": "probe",
                    "bootstrap_servers": f"127.0.0.1:{1 + seq % 60_000}",
                }
                t0 = time.time()
                try:
                    ok = client.post(self.urls[turn] + "/v1/clusters", json=body).status_code < 300
                except httpx.HTTPError:
                    ok = False
                self.writes.append((t0, time.time() - t0, ok))
                if not ok:
                    turn = (turn + 1) % len(self.urls)

    def worst(self, t0: float, t1: float) -> tuple[float, int]:
        """Longest write latency and failed writes among writes sent in [t0, t1]."""
        inside = [(lat, ok) for sent, lat, ok in self.writes if t0 <= sent <= t1]
        return max((lat for lat, _ in inside), default=float("nan")), sum(1 for _, ok in inside if not ok)


_LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def log_events(path: Path, since_wall: float) -> list[tuple[float, str]]:
    """(wall time, message) of the node log lines about dumps, stalls and role changes after ``since_wall``."""
    out = []
    with contextlib.suppress(OSError):
        for line in path.read_text(errors="replace").splitlines():
            m = _LOG_TIME.match(line)
            if not m or not any(k in line for k in ("dump", "took", "raft role", "Failed")):
                continue
            at = datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            if at >= since_wall:
                out.append((at, line[m.end() :]))
    return out


def dump_duration_ms(line: str, nearby: list[str]) -> float | None:
    """How long a dump took, from its log line ("dump of N bytes written in X s") or, in older versions,
    a separate "dump took N ms" line logged next to it."""
    m = re.search(r"written in ([\d.]+) s", line)
    if m:
        return float(m.group(1)) * 1000
    for x in nearby:
        if m := re.search(r"dump took (\d+) ms", x):
            return float(m.group(1))
    return None


def dumps_in_logs(q: LocalQuorum, watcher: RoleWatcher, since_wall: float) -> list[dict[str, Any]]:
    """Every state dump (log compaction) the nodes logged since ``since_wall``: size, how long it blocked
    the Raft thread, whether its node led when it began, and the leader terms seen around it."""
    dumps = []
    for v in q.voters:
        events = log_events(q.data_dir / f"node-{v.id}.log", since_wall)
        for at, msg in events:
            size = re.search(r"dump of (\d+) bytes", msg)
            if size is None:
                continue
            took = dump_duration_ms(msg, [x for a, x in events if abs(a - at) < 1])
            began = at - (took or 0.0) / 1000
            was_leader = watcher.leader_at(began) == v.id
            terms = watcher.leader_terms(began - 0.5, at + 3.0)
            dumps.append(
                {
                    "node": v.id,
                    "at": at,
                    "bytes": int(size.group(1)),
                    "took_ms": took,
                    "was_leader": was_leader,
                    "leader_terms_around": terms,
                    "lost_leadership": was_leader and (len(terms) > 1 or watcher.leader_at(at + 3.0) != v.id),
                }
            )
    return sorted(dumps, key=lambda d: d["at"])


def compaction_experiment(q: LocalQuorum, watcher: RoleWatcher, started_raw: dict[int, float]) -> dict[str, Any]:
    """Make the leader compact (dump the whole image) and see whether it keeps its leadership.

    A node compacts in its slot once ``period`` has passed since its start or last dump, or once its log
    holds more than ``threshold`` entries. The harness picks the node whose slot comes first, moves the
    leadership there and keeps writing; when the time trigger is too far off (over ``MAX_WAIT_S``), it pushes
    ``threshold`` x 1.05 entries instead.
    """
    threshold, period = node_compaction_settings()
    info: dict[str, Any] = {"threshold_entries": threshold, "period_s": period}
    now_raw, now_wall = raw_clock(), time.time()
    ready = dict(started_raw)
    for d in dumps_in_logs(q, watcher, 0):
        ready[d["node"]] = max(ready[d["node"]], now_raw - (now_wall - d["at"]))
    earliest = now_raw + STEER_S
    slots = {n: compaction_slot(q, n, max(earliest, ready[n] + period + 2), period) for n in ready}
    target = min(slots, key=lambda n: slots[n][0])
    pump = slots[target][0] - now_raw > MAX_WAIT_S
    if pump:
        pumped_by = now_raw + threshold * PUMP_MARGIN / 300 + STEER_S
        slots = {n: compaction_slot(q, n, pumped_by, period) for n in ready}
        target = min(slots, key=lambda n: slots[n][0])
    info["slots_s_from_now"] = {n: [round(s - now_raw), round(e - now_raw)] for n, (s, e) in slots.items()}
    info["target"], info["trigger"] = target, "entries" if pump else "time"
    print(f"  compaction slots (s from now): {info['slots_s_from_now']}; leadership -> node {target}", flush=True)
    info["leader_before"], info["steering_pauses"] = steer_leader(q, target)
    since = time.time()
    with ProbeWriter(q.urls) as writer:
        if pump:
            entries = int(threshold * PUMP_MARGIN)
            bodies = [  # every write changes its cluster's bootstrap servers: one record, one Raft entry each
                (
                    "/v1/clusters",
                    orjson.dumps(
                        {
                            "cluster_id": f"pump{i % PUMP_CLIENTS}",
                            "region": "pump",
                            "bootstrap_servers": f"127.0.0.1:{1 + (i // PUMP_CLIENTS) % 50_000}",
                        }
                    ),
                )
                for i in range(entries)
            ]
            t0 = time.monotonic()
            asyncio.run(post_many(q.url(target), bodies, PUMP_CLIENTS, "pumping entries", False))
            info["pump_entries_per_s"] = entries / (time.monotonic() - t0)
        give_up = max(slots[target][1], raw_clock()) + 30
        while raw_clock() < give_up:
            mine = [d for d in dumps_in_logs(q, watcher, since) if d["node"] == target]
            if mine and time.time() - mine[-1]["at"] > 5:
                break
            time.sleep(1)
    info["dumps"] = dumps_in_logs(q, watcher, since)
    for d in info["dumps"]:
        d["max_write_latency_s"], d["failed_writes"] = writer.worst(d["at"] - 10, d["at"] + 5)
    return info


# -- the benchmark ----------------------------------------------------------------------------------
def cluster_ids(sizes: Sizes) -> list[str]:
    return [f"c{i:02d}" for i in range(sizes.image_clusters)]


def register_clusters(q: LocalQuorum, ids: list[str]) -> None:
    url = q.url(q.leader())
    for i, cluster_id in enumerate(ids):
        body = {"cluster_id": cluster_id, "region": "r1", "bootstrap_servers": f"127.0.0.1:{9092 + i}"}
        q.client.post(url + "/v1/clusters", json=body).raise_for_status()


def partition_gauge(q: LocalQuorum, node_id: int) -> int:
    """The node's ``kfed_partitions`` gauge: logical partitions in its image."""
    for line in q.client.get(q.url(node_id) + "/metrics", timeout=30).text.splitlines():
        if line.startswith("kfed_partitions "):
            return int(float(line.split()[1]))
    raise RuntimeError("no kfed_partitions gauge in /metrics")


def build_image(q: LocalQuorum, sizes: Sizes, result: BenchResult) -> int:
    """Create the topics over the registered clusters; returns the number of partitions."""
    url = q.url(q.leader())
    per_topic = sizes.image_clusters * sizes.image_partitions_per_cluster
    topics = math.ceil(sizes.image_partitions / per_topic)
    ppc = sizes.image_partitions_per_cluster
    bodies = [
        ("/v1/topics", orjson.dumps({"name": f"t{i:05d}", "region": "r1", "partitions_per_cluster": ppc}))
        for i in range(topics)
    ]
    t0 = time.monotonic()
    statuses = asyncio.run(post_many(url, bodies, BUILD_CLIENTS, "creating topics", True))
    build_s = time.monotonic() - t0
    final = leader_applied(q)
    q.wait_applied(final, timeout_s=600)
    expected = topics * per_topic
    partitions = partition_gauge(q, q.leader())
    if partitions != expected:
        result.notes.append(
            f"the image holds {partitions:,} partitions, not {expected:,}: topics are placed only on unfenced "
            "clusters, and some were fenced during the build (agent heartbeats did not reach the leader in time)"
        )
    result.details["build"] = {
        "topics": topics,
        "partitions_per_topic": per_topic,
        "partitions": partitions,
        "partitions_requested": expected,
        "records": final + 1,
        "seconds": build_s,
        "statuses": statuses,
    }
    print(f"  built {partitions:,} partitions ({topics:,} topics) in {build_s:.0f} s", flush=True)
    result.rows.append(
        Row(
            f"build: {topics:,} topics x {per_topic} partitions via POST /v1/topics, {BUILD_CLIENTS} clients",
            partitions / build_s,
            "records/s",
            f"{partitions:,} partitions in {build_s:.0f} s",
        )
    )
    result.notes.append(
        f"{expected:,} partitions requested = {topics:,} topics x {sizes.image_clusters} clusters x {ppc}; "
        f"quorum with --no-journal-fsync; metadata_log.codec.MAX_DECODE_BYTES = {MAX_DECODE_BYTES >> 20} MiB."
    )
    report_leaders(q, sizes, topics, result)
    return partitions


REPORT_CHUNK = 4000
"""Partitions per leader report (a report's JSON body must stay under the controllers' 1 MiB request limit)."""


def report_leaders(q: LocalQuorum, sizes: Sizes, topics: int, result: BenchResult) -> None:
    """What real agents do once their brokers have leaders: every cluster reports each physical partition's
    leader, so the image, its snapshots and the dumps hold one leader report per partition, as in a real
    federation (the stand-in agents only heartbeat)."""
    ppc = sizes.image_partitions_per_cluster
    bodies: list[tuple[str, bytes]] = []
    for i, cluster_id in enumerate(cluster_ids(sizes)):
        leader = f"127.0.0.1:{9092 + i}"
        parts = [
            {"physical_topic": f"t{t:05d}", "physical_partition": p, "leader": leader}
            for t in range(topics)
            for p in range(ppc)
        ]
        path = f"/v1/agents/{cluster_id}/partitions"
        bodies += (
            (path, orjson.dumps({"partitions": parts[s : s + REPORT_CHUNK]}))
            for s in range(0, len(parts), REPORT_CHUNK)
        )
    before = leader_applied(q)
    t0 = time.monotonic()
    statuses = asyncio.run(post_many(q.url(q.leader()), bodies, BUILD_CLIENTS, "reporting leaders", True, "leaders"))
    report_s = time.monotonic() - t0
    final = leader_applied(q)
    q.wait_applied(final, timeout_s=600)
    reports = final - before
    result.details["leader_reports"] = {"records": reports, "requests": len(bodies), "seconds": report_s,
                                        "statuses": statuses}  # fmt: skip
    print(f"  {reports:,} leader reports ({len(bodies)} agent reports) in {report_s:.0f} s", flush=True)
    result.rows.append(
        Row(
            f"agents report every partition's leader via POST /v1/agents/ID/partitions, {BUILD_CLIENTS} clients",
            reports / report_s,
            "records/s",
            f"{reports:,} PhysicalPartitionsReported in {report_s:.0f} s ({len(bodies)} reports of <= {REPORT_CHUNK})",
        )
    )


SNAPSHOT = f"/v1/snapshot?{urlencode(READS)}"
"""The snapshot as a reader of the records this code writes asks for it (an older reader is refused its newer
records)."""


def snapshot_for_tailer(q: LocalQuorum, partitions: int, result: BenchResult) -> int:
    """Fetch and decode the snapshot from a follower, as a new tailer would; returns the follower's id."""
    leader = q.leader()
    follower = next(v.id for v in q.voters if v.id != leader)
    url = q.url(follower)
    term0 = (q.node(leader) or {}).get("term")
    _, first_json_s = fetch(url, SNAPSHOT)
    body, json_get_s = fetch(url, SNAPSHOT)
    _, json_decode_s = timed(orjson.loads, body)
    json_size = len(body)
    del body, _
    _, first_mp_s = fetch(url, SNAPSHOT, MSGPACK)
    body, mp_get_s = fetch(url, SNAPSHOT, MSGPACK)
    mp_size = len(body)
    codec_error = None
    try:
        _, mp_decode_s = timed(unpack, body)  # the product's decoder, with its MAX_DECODE_BYTES bound
    except CodecError as e:
        codec_error = str(e)
        _, mp_decode_s = timed(lambda b: msgpack.unpackb(b, raw=False), body)
    del body, _
    _, first_runs_s = fetch(url, SNAPSHOT + "&layout=runs", MSGPACK)
    body, _runs_get_s = fetch(url, SNAPSHOT + "&layout=runs", MSGPACK)
    runs_size = len(body)
    del body, _
    # What the SDK / agents do: LogFollower.load_snapshot() = GET msgpack runs + codec.unpack + snapshot.read_runs.
    follower_error = None
    with httpx.Client(timeout=600) as client:
        tailer = LogFollower([url], client=client)
        try:
            _, load_s = timed(tailer.load_snapshot)
            rebuilt = tailer.image.partition_count()
        except FollowerError as e:
            follower_error, load_s, rebuilt = str(e), float("nan"), 0
        del tailer
    term1 = (q.node(q.leader()) or {}).get("term")
    result.details["snapshot"] = {
        "from_node": follower,
        "json_bytes": json_size,
        "msgpack_bytes": mp_size,
        "msgpack_runs_bytes": runs_size,
        "first_get_runs_s": first_runs_s,
        "first_get_json_s": first_json_s,
        "cached_get_json_s": json_get_s,
        "json_decode_s": json_decode_s,
        "first_get_msgpack_s": first_mp_s,
        "cached_get_msgpack_s": mp_get_s,
        "msgpack_decode_s": mp_decode_s,
        "codec_unpack_error": codec_error,
        "log_follower_load_snapshot_s": load_s,
        "log_follower_error": follower_error,
        "rebuilt_partitions": rebuilt,
        "leader_term_before_after": [term0, term1],
    }
    refused = f"; metadata_log.codec.unpack REFUSES it: {codec_error}" if codec_error else ""
    result.rows += [
        Row("snapshot size, JSON", json_size / MB, "MB", f"{json_size / partitions:.0f} bytes/partition"),
        Row("snapshot size, msgpack", mp_size / MB, "MB", f"{mp_size / partitions:.0f} bytes/partition{refused}"),
        Row(
            "snapshot size, msgpack, layout=runs (columns)",
            runs_size / MB,
            "MB",
            f"{runs_size / partitions:.0f} bytes/partition; the node's first GET (builds it) {fmt(first_runs_s)} s",
        ),
        Row(
            "new tailer: GET /v1/snapshot (JSON, cached on the node) + orjson decode",
            json_get_s + json_decode_s,
            "s",
            f"GET {fmt(json_get_s)} s + decode {fmt(json_decode_s)} s; the node's first GET (builds it) "
            f"{fmt(first_json_s)} s",
        ),
        Row(
            "new tailer: GET /v1/snapshot (msgpack, cached) + codec.unpack",
            mp_get_s + mp_decode_s,
            "s",
            f"GET {fmt(mp_get_s)} s + decode {fmt(mp_decode_s)} s; first msgpack GET {fmt(first_mp_s)} s",
        ),
        Row(
            "new tailer: LogFollower.load_snapshot() (GET msgpack runs + decode + read_runs)",
            load_s,
            "s",
            f"rebuilt {rebuilt:,} partitions" + (f"; FAILED: {follower_error}" if follower_error else ""),
            LOAD_GOAL,
        ),
    ]
    if term0 != term1:
        result.notes.append(f"the leader's term changed during the snapshot phase ({term0} -> {term1})")
    return follower


def catch_up_row(
    q: LocalQuorum, newbie: int, label: str, result: BenchResult, key: str, goal: Goal | None = None
) -> dict[str, Any]:
    catch = wipe_and_catch_up(q, newbie, leader_applied(q))
    result.details[key] = catch
    result.rows.append(
        Row(
            f"new follower (wiped data dir) -> caught up, {label}",
            catch["catch_up_s"],
            "s",
            f"node answered HTTP after {fmt(catch['first_answer_s'])} s; "
            f"its RSS then {catch['rss_kib'].get('VmRSS', 0) / 1024:.0f} MiB",
            goal,
        )
    )
    return catch


def dump_text(d: dict[str, Any]) -> str:
    role = "leader" if d["was_leader"] else "follower"
    outcome = ", LOST leadership" if d["lost_leadership"] else (", kept leadership" if d["was_leader"] else "")
    return f"n{d['node']} ({role}) {d['bytes'] / MB:.0f} MB in {fmt(d['took_ms'])} ms{outcome}"


def compaction_rows(info: dict[str, Any] | None, all_dumps: list[dict[str, Any]], result: BenchResult) -> None:
    leader_dumps = [d for d in all_dumps if d["was_leader"]]
    result.rows.append(
        Row(
            "log compactions (full dumps) during the benchmark",
            len(all_dumps),
            "",
            "; ".join(dump_text(d) for d in all_dumps) or "none",
        )
    )
    if info is not None:
        target = [d for d in info["dumps"] if d["node"] == info["target"] and d["was_leader"]]
        if target:
            d = target[0]
            result.rows.append(
                Row(
                    "leader compaction: time to write the dump (whole image)",
                    d["took_ms"],
                    "ms",
                    f"{d['bytes'] / MB:.0f} MB; probe writes around it: max latency "
                    f"{fmt(d['max_write_latency_s'])} s, {d['failed_writes']} failed",
                )
            )
        else:
            result.notes.append(f"the targeted leader compaction was not observed: {info}")
    if leader_dumps:
        result.rows.append(
            Row(
                "leader compactions that cost the leader its leadership",
                sum(1 for d in leader_dumps if d["lost_leadership"]),
                f"of {len(leader_dumps)}",
                "leader terms around each: " + ", ".join(str(d["leader_terms_around"]) for d in leader_dumps),
                NO_LEADER_CHANGE,
            )
        )


def run(sizes: Sizes, tmp: Path, result: BenchResult) -> None:
    began = time.time()
    with running_quorum(tmp / "quorum", (NO_FSYNC,)) as q, RoleWatcher(q) as watcher:
        started_raw = {v.id: raw_clock() - (time.time() - began) for v in q.voters}
        with Agents(q.urls, cluster_ids(sizes)) as agents:  # heartbeats keep the clusters unfenced
            register_clusters(q, cluster_ids(sizes))
            wait_unfenced(q, cluster_ids(sizes))
            run_steps(q, sizes, result, watcher, started_raw, began)
        result.details["agent_heartbeat_failures"] = agents.failures
        note_log_errors(q, result, "quorum")


def run_steps(
    q: LocalQuorum,
    sizes: Sizes,
    result: BenchResult,
    watcher: RoleWatcher,
    started_raw: dict[int, float],
    began: float,
) -> None:
    rss: list[dict[int, dict[str, int]]] = []
    partitions = build_image(q, sizes, result)
    rss.append(rss_all(q))
    follower = snapshot_for_tailer(q, partitions, result)
    rss.append(rss_all(q))
    newbie = next(v.id for v in q.voters if v.id not in (q.leader(), follower))
    started_raw[newbie] = raw_clock()
    catch_up_row(q, newbie, "leader log not compacted (log replay)", result, "catch_up_log_replay")
    rss.append(rss_all(q))
    info = None
    if sizes.compaction:
        info = compaction_experiment(q, watcher, started_raw)
        result.details["compaction"] = info
        rss.append(rss_all(q))
        leader = q.leader()
        compacted = any(d["node"] == leader for d in dumps_in_logs(q, watcher, began))
        how = "InstallSnapshot" if compacted else "log replay"
        newbie = next(v.id for v in q.voters if v.id != leader)
        goal = LOAD_GOAL if compacted else None  # through the snapshot; a log replay is shown, not judged
        catch_up_row(q, newbie, f"after the leader compacted ({how})", result, "catch_up_after_compaction", goal)
        rss.append(rss_all(q))
    else:
        result.notes.append("compaction experiment skipped (--quick, or --compaction off)")
    all_dumps = dumps_in_logs(q, watcher, began)
    compaction_rows(info, all_dumps, result)
    result.details["dumps"] = all_dumps
    leaders = watcher.leaders()
    result.details["leaders_seen"] = leaders
    steered = int(info.get("steering_pauses", 0)) if info else 0
    result.rows.append(
        Row(
            "leader elections seen during the benchmark (after the first)",
            len(leaders) - 1,
            "",
            f"{steered} forced by the harness (it pauses the leader to move leadership before compaction); "
            "(node, term): " + ", ".join(f"({n}, {t})" for n, t in leaders),
        )
    )
    result.details["rss_samples_kib"] = rss
    now = ", ".join(f"n{n} {s.get('VmRSS', 0) / 1024:.0f} MiB" for n, s in rss[-1].items())
    result.rows.append(
        Row(
            "node RSS, peak (VmHWM) of any node during the benchmark",
            max_rss_mib(rss),
            "MiB",
            f"at the end: {now}",
            RSS_GOAL,
        )
    )
