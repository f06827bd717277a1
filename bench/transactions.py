"""Issue 28 benchmarks: transactions across sub-clusters, in one run on the same Apache Kafka brokers.

- federated transactional: ``FederatedProducer`` with ``transactional.id``, transactions of 100 100-byte
  messages, each spread over U_TopicA's 8 logical partitions (both sub-clusters), committed one after the
  other; msgs/s counts from the first ``begin_transaction`` to the last commit;
- federated, no transactions: the same messages key-less, one flush at the end (the goal's baseline);
- single-cluster Kafka transaction: a plain confluent-kafka transactional ``Producer`` on c1, the same
  transactions over c1's 4 partitions (reported, no goal);
- commit latency: each federated ``commit_transaction`` call (flush, decision, both participants' commits,
  completion), p50 and p99.

Rounds alternate which side goes first; the ratio is the median of per-round ratios.
"""

from __future__ import annotations

import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import Producer

from deploy.launcher import DEMO_TOPIC as TOPIC
from deploy.launcher import LocalFederation
from sdk import FederatedProducer

from .common import (
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    median,
    per_round,
    percentile,
    ratios,
    start_demo_federation,
)

VALUE = b"x" * 100
PER_TXN = 100
CONFIG: dict[str, Any] = {"linger.ms": 5, "enable.metrics.push": False}


def federated_transactions(fed: LocalFederation, txns: int, latencies: list[float]) -> float:
    controllers = ",".join(fed.quorum.urls)
    with FederatedProducer({**CONFIG, "kfed.controllers": controllers,
                            "transactional.id": f"bench-{uuid.uuid4().hex[:8]}"}) as p:  # fmt: skip
        p.init_transactions(60)
        started = time.perf_counter()
        for _ in range(txns):
            p.begin_transaction()
            for i in range(PER_TXN):
                p.produce(TOPIC, VALUE, None, i % 8)
            commit_started = time.perf_counter()
            p.commit_transaction(60)
            latencies.append(time.perf_counter() - commit_started)
        elapsed = time.perf_counter() - started
    return txns * PER_TXN / elapsed


def federated_plain(fed: LocalFederation, n: int) -> float:
    with FederatedProducer({**CONFIG, "kfed.controllers": ",".join(fed.quorum.urls)}) as p:
        started = time.perf_counter()
        for i in range(n):
            p.produce(TOPIC, VALUE, None, i % 8)
            if i % 5000 == 0:
                p.poll(0)
        assert p.flush(60) == 0
        return n / (time.perf_counter() - started)


def kafka_transactions(fed: LocalFederation, txns: int) -> float:
    p = Producer({**CONFIG, "bootstrap.servers": fed.clusters["c1"].bootstrap,
                  "transactional.id": f"bench-raw-{uuid.uuid4().hex[:8]}"})  # fmt: skip
    p.init_transactions(60)
    started = time.perf_counter()
    for _ in range(txns):
        p.begin_transaction()
        for i in range(PER_TXN):
            p.produce(TOPIC, VALUE, None, i % 4)
        p.commit_transaction(60)
    elapsed = time.perf_counter() - started
    p.flush(10)
    return txns * PER_TXN / elapsed


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    txns = 20 if sizes.quick else 200
    rounds = 2 if sizes.quick else 4
    fed = LocalFederation(workdir / "transactions")
    latencies: list[float] = []
    txn_rates, plain_rates, kafka_rates = [], [], []
    try:
        start_demo_federation(fed)
        for r in range(rounds):
            order = ("txn", "plain", "kafka") if r % 2 == 0 else ("kafka", "plain", "txn")
            for side in order:
                if side == "txn":
                    txn_rates.append(federated_transactions(fed, txns, latencies))
                elif side == "plain":
                    plain_rates.append(federated_plain(fed, txns * PER_TXN))
                else:
                    kafka_rates.append(kafka_transactions(fed, txns))
    finally:
        fed.stop()
    vs_plain = ratios(txn_rates, plain_rates)
    vs_kafka = ratios(txn_rates, kafka_rates)
    result.rows += [
        Row("transactional FederatedProducer msgs/s: ratio to non-transactional", median(vs_plain), "x",
            f"{fmt(median(txn_rates))} vs {fmt(median(plain_rates))} msg/s (medians); per round "
            f"{per_round(vs_plain)}",
            Goal(">=", 0.5, "x"), f"{txns} transactions x {PER_TXN} x 100 B over c1 and c2, {rounds} rounds"),
        Row("transactional FederatedProducer vs single-cluster Kafka transactions", median(vs_kafka), "x",
            f"Kafka transactions on c1 alone {fmt(median(kafka_rates))} msg/s", None, "reported, no goal"),
        Row("commit_transaction latency p50", percentile(latencies, 50) * 1000, "ms", "", None,
            f"{len(latencies)} commits over two clusters"),
        Row("commit_transaction latency p99", percentile(latencies, 99) * 1000, "ms", "", None, ""),
    ]  # fmt: skip
    result.details["transactions"] = {
        "transactions_per_round": txns, "per_transaction": PER_TXN, "federated_transactional": txn_rates,
        "federated_plain": plain_rates, "kafka_transactional": kafka_rates, "commit_latency_s": latencies,
    }  # fmt: skip
