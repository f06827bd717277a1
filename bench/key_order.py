"""Issue 27 benchmarks: what ``key_order: strict`` costs producers, and how soon an expand takes keyed traffic.

strict vs none: one FederatedProducer writes keyed messages (10,000 keys) to a strict topic and to a none
topic of the same shape (4 partitions on each of two Tansu sub-clusters), alternately, several trials;
messages/s includes the final flush. Strict routes by the epoch's 16,384-slot table and adds the
``kfed-epoch`` header to the keyed messages whose slot has moved: none on a topic never resized, a fifth
on the topic the expand below grew (8 -> 10 partitions), measured too, against a none topic grown the same
way (10 partitions over three physical topics: more partitions alone cost a producer CPU, in smaller
batches). A producing loop is CPU-bound: the
ratio is taken from the process CPU time per message (all threads: Python and librdkafka's), which other
load on a shared machine changes far less than wall time; the wall-time ratio is reported next to it.

expand -> keyed traffic: a producer writes keyed messages to a strict topic; ``POST /v1/topics/T/partitions``
adds 2 partitions on c2 (a physical topic of their own); measured from the committed reply to the first
keyed message acknowledged on a new partition. In between: the agent creates the physical topic and reports
its leaders, the leader's loop (every 500 ms) starts the epoch, the producer follows the log to it.
"""

from __future__ import annotations

import time
from pathlib import Path

from deploy.launcher import LocalFederation
from sdk import FederatedProducer

from .common import BenchResult, Goal, Producing, Row, Sizes, fmt, median, produce_when_room

KEYS = 10_000


def _create(fed: LocalFederation, name: str, key_order: str) -> None:
    with fed.quorum.controller_client() as client:
        client.post("/v1/topics", {"name": name, "region": "r1", "partitions_per_cluster": 4, "key_order": key_order})
    fed.wait_writable(name, 60)


def _throughput(fed: LocalFederation, topic: str, count: int) -> tuple[float, float]:
    """(messages/s of wall time, CPU µs per message) of ``count`` keyed messages, flush included."""
    keys = [f"key-{i}".encode() for i in range(KEYS)]
    with FederatedProducer({"kfed.controllers": ",".join(fed.quorum.urls), "linger.ms": 5}) as producer:
        producer.produce(topic, b"warm-up", key=b"w")
        producer.flush(30)
        started, cpu = time.perf_counter(), time.process_time()
        for i in range(count):
            try:
                producer.produce(topic, b"x" * 100, key=keys[i % KEYS])
            except BufferError:
                produce_when_room(producer, topic, b"x" * 100, keys[i % KEYS])
            if i % 1000 == 0:
                producer.poll(0)
        assert producer.flush(120) == 0
        return count / (time.perf_counter() - started), (time.process_time() - cpu) / count * 1e6


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    trials = 2 if sizes.quick else 5
    count = 20_000 if sizes.quick else 200_000
    fed = LocalFederation(workdir / "key-order", broker="tansu")
    strict_rates: list[float] = []
    none_rates: list[float] = []
    strict_cpu: list[float] = []
    none_cpu: list[float] = []
    resized_cpu: list[float] = []
    resized_none_cpu: list[float] = []
    expand_s: list[float] = []
    try:
        fed.start()
        fed.wait_clusters_healthy(timeout_s=60)
        _create(fed, "Strict", "strict")
        _create(fed, "None", "none")
        for trial in range(trials):  # alternately: the machine's noise falls on both
            for name, rates, cpus in (("None", none_rates, none_cpu), ("Strict", strict_rates, strict_cpu)):
                rate, cpu_us = _throughput(fed, name, count)
                rates.append(rate)
                cpus.append(cpu_us)
            print(f"    trial {trial + 1}: strict {strict_rates[-1]:.0f} msgs/s {strict_cpu[-1]:.2f} µs CPU/msg, "
                  f"none {none_rates[-1]:.0f} msgs/s {none_cpu[-1]:.2f} µs", flush=True)  # fmt: skip
        with fed.quorum.controller_client() as client:
            for trial in range(min(trials, 3)):
                name = f"Grow{trial}"
                _create(fed, name, "strict")
                producing = Producing(fed, name, keys=KEYS)
                producing.start()
                time.sleep(1.0)
                reply = client.post(f"/v1/topics/{name}/partitions",
                                    {"cluster_id": "c2", "count": 2, "physical_topic": f"{name}-more"})  # fmt: skip
                committed = time.monotonic()
                new = {p["partition"] for p in reply["partitions"] if p["partition"] >= 8}
                deadline = committed + 60
                while not new & set(producing.first_ack):
                    if time.monotonic() > deadline:
                        raise TimeoutError("no keyed message reached the new partitions")
                    time.sleep(0.02)
                expand_s.append(min(producing.first_ack[p] for p in new if p in producing.first_ack) - committed)
                producing.stop_flag.set()
                producing.join(60)
                print(f"    expand {trial + 1}: keyed traffic on the new partitions after {expand_s[-1]:.2f} s")
            _create(fed, "GrowNone", "none")  # the none topic of the same shape as Grow0
            client.post("/v1/topics/GrowNone/partitions",
                        {"cluster_id": "c2", "count": 2, "physical_topic": "GrowNone-more"})  # fmt: skip
            fed.wait_writable("GrowNone", 60)
        for trial in range(trials):  # an expanded topic: the keys that moved (a fifth, 8 -> 10) are stamped
            for name, cpus in (("GrowNone", resized_none_cpu), ("Grow0", resized_cpu)):
                cpus.append(_throughput(fed, name, count)[1])
            print(f"    trial {trial + 1} after an expand: strict {resized_cpu[-1]:.2f} µs CPU/msg, "
                  f"none {resized_none_cpu[-1]:.2f}", flush=True)  # fmt: skip
    finally:
        fed.stop()
    cpu_ratios = [n / s for s, n in zip(strict_cpu, none_cpu, strict=True)]
    wall_ratios = [s / n for s, n in zip(strict_rates, none_rates, strict=True)]
    result.rows += [
        Row("FederatedProducer keyed throughput per CPU: strict / none", median(cpu_ratios), "x none",
            f"none {fmt(median(none_cpu))} µs CPU/msg", Goal(">=", 0.9, "x none"),
            f"{trials} trials of {count} messages, strict {fmt(median(strict_cpu))} µs CPU/msg"),
        Row("same, after an expand 8 -> 10 partitions of both (a fifth of strict's keys stamped)",
            median([n / s for s, n in zip(resized_cpu, resized_none_cpu, strict=True)]), "x none",
            f"none {fmt(median(resized_none_cpu))} µs CPU/msg", Goal(">=", 0.9, "x none"),
            f"strict {fmt(median(resized_cpu))} µs CPU/msg"),
        Row("FederatedProducer keyed msgs/s (wall): strict / none", median(wall_ratios), "x none",
            f"none {fmt(median(none_rates))} msgs/s", None,
            f"strict {fmt(median(strict_rates))} msgs/s; wall time on a shared machine: noisy"),
        Row("expand (strict) -> first keyed message acknowledged on a new partition, median", median(expand_s), "s",
            "", Goal("<=", 5.0, "s"), f"{len(expand_s)} trials, max {fmt(max(expand_s))} s"),
    ]  # fmt: skip
    result.details["key_order"] = {"strict": strict_rates, "none": none_rates, "strict_cpu_us": strict_cpu,
                                   "none_cpu_us": none_cpu, "expand_s": expand_s, "resized_cpu_us": resized_cpu,
                                   "resized_none_cpu_us": resized_none_cpu}  # fmt: skip
