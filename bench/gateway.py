"""Issue 26 benchmarks: librdkafka through the gateway vs straight to one sub-cluster, in one run.

producer: N 100-byte key-less messages, ``linger.ms=5``, acks=all. Straight: a confluent-kafka Producer on
c1's broker, over its 4 partitions. Through the gateway: the same client on one gateway instance, over the
8 logical partitions (both sub-clusters). The clock stops when every message is delivered.

The gateway's own cost: the same producer through the gateway over only the 4 logical partitions that live on
c1 (P0-P3), against straight to those same 4 physical partitions. Over all 8, two brokers each take batches
half the size at the same linger, which costs the brokers CPU per message on a machine whose 2 cores the
client, the gateway and the brokers share; the machine's CPU per message (``/proc/stat``, every process and
the kernel) is reported for both, and the producer over all 8 is also set against one producer per
sub-cluster over the same 8 physical partitions (``bench/sdk.py``'s baseline).

consumer: N messages read back with ``assign()`` from the beginning: c1's 4 partitions straight, the 8
logical ones through the gateway (and, for the gateway's own cost, c1's 4); timed from the first message.

latency: one 100-byte message at a time (produce, then flush), straight and through the gateway in
alternation; the gateway adds the difference of the p99s (and of the medians).

strict: keyed messages (10,000 keys) through the gateway to a ``key_order: strict`` topic, whose records the
gateway takes apart and places by key (``gateway/protocol/batches.py``), against the same to the ``none`` demo
topic, whose batches pass through; messages/s and the gateway's CPU per message, alternately. No goal: it
says what the strict placement costs the gateway.

CPU: the gateway process's user+system CPU seconds over the produce and consume runs, per MB/s moved:
``cpu_s * 1000 / MB`` millicores per MB/s (Kroxylicious sizes its proxy at ~25).

Before the clock, both brokers are warmed up (``warm_up``). Rounds alternate which side goes first; each summary
is the median of the per-round ratios.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.launcher import DEMO_TOPIC as TOPIC
from deploy.launcher import LocalFederation, free_ports
from deploy.processes import wait_port
from gateway.cli import spawn

from . import sdk
from .common import (
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    median,
    per_round,
    percentile,
    produce_when_room,
    ratios,
    start_demo_federation,
)

VALUE = b"x" * 100
PRODUCER_CONFIG = {"linger.ms": 5, "acks": "all", "enable.metrics.push": False}
CONSUMER_CONFIG = {"enable.metrics.push": False, "fetch.queue.backoff.ms": 10, "queued.min.messages": 200_000,
                   "enable.auto.commit": False, "auto.offset.reset": "earliest"}  # fmt: skip


def cpu_seconds(*pids: int) -> float:
    """User+system CPU seconds of these processes (every thread of each)."""
    total = 0
    for pid in pids:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def broker_pids(fed: LocalFederation) -> list[int]:
    return [p.pid for cluster in fed.clusters.values() for p in cluster.brokers.processes()]


def cpu_split(rounds: list[dict[str, float]]) -> str:
    """Each process's median CPU per message over the rounds: "client 1.20, brokers 0.85, gateway 0.00 us"."""
    return ", ".join(f"{name} {median([r[name] for r in rounds]):.2f}" for name in rounds[0]) + " us"


def machine_cpu_seconds() -> float:
    """Busy CPU seconds of the whole machine (every process, the kernel's network work included)."""
    fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    return (sum(fields) - fields[3] - fields[4]) / os.sysconf("SC_CLK_TCK")  # all but idle and iowait


def produce(bootstrap: str, n: int, partitions: int) -> float:
    delivered = [0]

    def count(err: Any, msg: Any) -> None:
        delivered[0] += err is None

    p = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap, "on_delivery": count})
    started = time.perf_counter()
    for i in range(n):
        try:
            p.produce(TOPIC, VALUE, None, i % partitions)
        except BufferError:
            produce_when_room(p, TOPIC, VALUE, None, i % partitions)
        if i % 5000 == 0:
            p.poll(0)
    p.flush(120)
    elapsed = time.perf_counter() - started
    assert delivered[0] == n, f"{n - delivered[0]} not delivered"
    return n / elapsed


def consume(bootstrap: str, n: int, partitions: int) -> float:
    c = Consumer({**CONSUMER_CONFIG, "bootstrap.servers": bootstrap, "group.id": f"bench-{time.time()}"})
    c.assign([TopicPartition(TOPIC, p, 0) for p in range(partitions)])
    read, first = 0, None
    deadline = time.monotonic() + 180
    while read < n and time.monotonic() < deadline:
        batch = c.consume(1000, 0.05)
        if batch and first is None:
            first = time.perf_counter()
        read += sum(1 for m in batch if m.error() is None)
    elapsed = time.perf_counter() - (first or time.perf_counter())
    c.close()
    assert read >= n, f"read {read} of {n}"
    return read / elapsed if elapsed > 0 else 0.0


def produce_keyed(bootstrap: str, topic: str, n: int) -> float:
    keys = [f"key-{i}".encode() for i in range(10_000)]
    p = Producer({**PRODUCER_CONFIG, "bootstrap.servers": bootstrap})
    started = time.perf_counter()
    for i in range(n):
        try:
            p.produce(topic, VALUE, keys[i % len(keys)])
        except BufferError:
            produce_when_room(p, topic, VALUE, keys[i % len(keys)])
        if i % 5000 == 0:
            p.poll(0)
    assert p.flush(120) == 0, "every keyed message delivered"
    return n / (time.perf_counter() - started)


def strict_against_none(fed: LocalFederation, gateway_pid: int, through: str, n: int, rounds: int) -> dict[str, Any]:
    """Keyed messages through the gateway to a strict topic and to the none demo topic, alternately:
    messages/s and the gateway's CPU microseconds per message of each."""
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": "StrictBench", "region": "r1", "partitions_per_cluster": 4,
                                   "key_order": "strict"})  # fmt: skip
    fed.wait_writable("StrictBench", 60)
    time.sleep(1.0)  # the gateway follows the log to the new topic
    out: dict[str, Any] = {"strict": [], "none": [], "strict_cpu_us": [], "none_cpu_us": []}
    produce_keyed(through, "StrictBench", 1000)
    sides = [("StrictBench", "strict"), (TOPIC, "none")]
    for r in range(rounds):
        for name, kind in sides if r % 2 == 0 else sides[::-1]:
            before = cpu_seconds(gateway_pid)
            out[kind].append(produce_keyed(through, name, n))
            out[f"{kind}_cpu_us"].append((cpu_seconds(gateway_pid) - before) * 1e6 / n)
    return out


def warm_up(fed: LocalFederation, through: str, straight: str, n: int) -> None:
    """Bring both brokers' JVMs to their steady state before the clock.

    Straight runs go to c1 only, so without this c1 compiles its hot paths during the first rounds while c2,
    which only the runs over 8 partitions reach, stays cold: c2 then costs two to three times c1's CPU per
    message (measured per process with ``/proc/<pid>/stat``), and the 2 cores it shares with everything else
    count that against the gateway."""
    produce(through, 1000, 8)  # the gateway's upstream connections
    for _ in range(3):
        sdk.raw_produce(fed, n)  # both sub-clusters, without the gateway
    produce(straight, n, 4)
    produce(through, n, 8)


def latencies(bootstrap: str, n: int) -> list[float]:
    """Seconds from produce() to delivery of one message at a time."""
    p = Producer({**PRODUCER_CONFIG, "linger.ms": 0, "bootstrap.servers": bootstrap})
    p.produce(TOPIC, VALUE, None, 0)  # connections and metadata before the clock
    p.flush(30)
    out = []
    for i in range(n):
        started = time.perf_counter()
        p.produce(TOPIC, VALUE, None, i % 4)
        p.flush(30)
        out.append(time.perf_counter() - started)
    return out


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    quick = sizes.quick
    n = 100_000 if quick else 400_000
    rounds = 2 if quick else 5
    samples = 300 if quick else 2000
    fed = LocalFederation(workdir / "gateway")
    gateway = None
    try:
        start_demo_federation(fed)
        port = free_ports(1)[0]
        token = ["--token-file", str(fed.quorum.token_file)] if fed.quorum.token_file else []
        with open(workdir / "gateway.log", "ab") as log:
            gateway = spawn(fed.quorum.urls, f"127.0.0.1:{port}", log, *token)
        wait_port(port, 60)
        through, straight = f"127.0.0.1:{port}", fed.clusters["c1"].bootstrap
        warm_up(fed, through, straight, n)
        raw_ps, gw_ps, gw4_ps, both_ps, raw_cs, gw_cs, gw4_cs, cpu_p, cpu_c = [], [], [], [], [], [], [], [], []
        machine: dict[str, list[float]] = {"straight": [], "gateway": []}  # CPU microseconds per message
        parts = {"client": [os.getpid()], "brokers": broker_pids(fed), "gateway": [gateway.pid]}
        split: dict[str, list[dict[str, float]]] = {"straight": [], "gateway": []}  # the same, by process
        for r in range(rounds):
            for via_gateway in (False, True) if r % 2 == 0 else (True, False):
                busy, by_process = machine_cpu_seconds(), {name: cpu_seconds(*pids) for name, pids in parts.items()}
                if via_gateway:
                    gw_ps.append(produce(through, n, 8))
                    cpu_p.append((cpu_seconds(gateway.pid) - by_process["gateway"]) * 1000 / (n * len(VALUE) / 1e6))
                else:
                    raw_ps.append(produce(straight, n, 4))
                side = "gateway" if via_gateway else "straight"
                machine[side].append((machine_cpu_seconds() - busy) * 1e6 / n)
                split[side].append({name: (cpu_seconds(*pids) - by_process[name]) * 1e6 / n
                                    for name, pids in parts.items()})  # fmt: skip
            gw4_ps.append(produce(through, n, 4))  # P0-P3: c1's, as straight
            both_ps.append(sdk.raw_produce(fed, n))  # the 8 physical partitions, one producer per sub-cluster
            for via_gateway in (False, True) if r % 2 == 0 else (True, False):
                if via_gateway:
                    before = cpu_seconds(gateway.pid)
                    gw_cs.append(consume(through, n, 8))
                    cpu_c.append((cpu_seconds(gateway.pid) - before) * 1000 / (n * len(VALUE) / 1e6))
                else:
                    raw_cs.append(consume(straight, n, 4))
            gw4_cs.append(consume(through, n, 4))
        strict = strict_against_none(fed, gateway.pid, through, n // 2, rounds)
        raw_l: list[float] = []
        gw_l: list[float] = []
        for _ in range(4):  # alternating blocks: the machine's load drifts
            raw_l += latencies(straight, samples // 4)
            gw_l += latencies(through, samples // 4)
    finally:
        if gateway is not None:
            gateway.terminate()
            gateway.wait(10)
        fed.stop()
    produce_ratios, own_ratios, spread_ratios = ratios(gw_ps, raw_ps), ratios(gw4_ps, raw_ps), ratios(gw_ps, both_ps)
    consume_ratios, own_consume_ratios = ratios(gw_cs, raw_cs), ratios(gw4_cs, raw_cs)
    p99_added = (percentile(gw_l, 99) - percentile(raw_l, 99)) * 1000
    p50_added = (percentile(gw_l, 50) - percentile(raw_l, 50)) * 1000
    result.rows += [
        Row("librdkafka producer through the gateway: ratio to straight", median(produce_ratios), "x straight",
            f"{fmt(median(gw_ps))} vs {fmt(median(raw_ps))} msg/s straight to one sub-cluster (medians); per round "
            f"{per_round(produce_ratios)}",
            Goal(">=", 0.9, "x straight"), f"{n:,} x 100 B, key-less, linger.ms=5, acks=all, {rounds} rounds"),
        Row("same, through the gateway over c1's 4 partitions only: the gateway's own cost", median(own_ratios),
            "x straight", f"{fmt(median(gw4_ps))} msg/s; per round {per_round(own_ratios)}. "
            f"Machine CPU per message over 8 partitions {median(machine['gateway']):.2f} us against "
            f"{median(machine['straight']):.2f} us straight", None, "P0-P3 live on c1: same partitions as straight"),
        Row("machine CPU per message over all 8 partitions, by process", median(machine["gateway"]), "us",
            f"through the gateway: {cpu_split(split['gateway'])}; straight to one sub-cluster "
            f"{median(machine['straight']):.2f} us: {cpu_split(split['straight'])}", None,
            "/proc: the client is this process (librdkafka's threads), the brokers both sub-clusters' JVMs"),
        Row("same, over all 8 partitions against straight to both sub-clusters", median(spread_ratios), "x straight",
            f"{fmt(median(both_ps))} msg/s with one producer per sub-cluster (bench/sdk.py's baseline); per round "
            f"{per_round(spread_ratios)}"),
        Row("librdkafka consumer through the gateway: ratio to straight", median(consume_ratios), "x straight",
            f"{fmt(median(gw_cs))} vs {fmt(median(raw_cs))} msg/s (medians); per round "
            f"{per_round(consume_ratios)}",
            Goal(">=", 0.9, "x straight"), f"{n:,} messages, assign() from the beginning"),
        Row("same, through the gateway over c1's 4 partitions only", median(own_consume_ratios), "x straight",
            f"{fmt(median(gw4_cs))} msg/s; per round {per_round(own_consume_ratios)}"),
        Row("produce latency the gateway adds, p99", p99_added, "ms",
            f"p99 {percentile(gw_l, 99) * 1000:.2f} vs {percentile(raw_l, 99) * 1000:.2f} ms straight; median adds "
            f"{p50_added:.2f} ms", Goal("<=", 1.0, "ms"), f"{len(gw_l)} one-message produce+flush each"),
        Row("librdkafka keyed producer through the gateway: strict topic / none topic",
            median(ratios(strict["strict"], strict["none"])), "x none",
            f"{fmt(median(strict['strict']))} vs {fmt(median(strict['none']))} msg/s; per round "
            f"{per_round(ratios(strict['strict'], strict['none']))}", None,
            f"{n // 2:,} keyed messages; the gateway places a strict topic's records by key"),
        Row("gateway CPU per keyed message, strict topic", median(strict["strict_cpu_us"]), "us",
            f"none topic {median(strict['none_cpu_us']):.2f} us (batches passed through)"),
        Row("gateway CPU per MB/s produced", median(cpu_p), "millicores per MB/s", "Kroxylicious: ~25",
            Goal("<=", 25.0, "millicores per MB/s"), "user+system CPU of the gateway process"),
        Row("gateway CPU per MB/s consumed", median(cpu_c), "millicores per MB/s", "Kroxylicious: ~25",
            Goal("<=", 25.0, "millicores per MB/s")),
    ]  # fmt: skip
    result.details["gateway"] = {
        "messages": n, "straight_produce": raw_ps, "gateway_produce": gw_ps, "gateway_produce_c1_partitions": gw4_ps,
        "straight_produce_both_clusters": both_ps,
        "machine_cpu_us_per_message": machine, "cpu_us_per_message_by_process": split,
        "straight_consume": raw_cs, "gateway_consume": gw_cs,
        "gateway_consume_c1_partitions": gw4_cs, "cpu_millicores_per_mb_s_produce": cpu_p,
        "cpu_millicores_per_mb_s_consume": cpu_c, "strict_against_none": strict,
        "latency_ms": {"straight_p50": percentile(raw_l, 50) * 1000, "straight_p99": percentile(raw_l, 99) * 1000,
                       "gateway_p50": percentile(gw_l, 50) * 1000, "gateway_p99": percentile(gw_l, 99) * 1000},
    }  # fmt: skip
