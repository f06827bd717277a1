"""Issue 6 and 25 benchmarks: the ``kfed`` Spark source vs Spark's own Kafka source and a plain confluent-kafka
read of the same partitions.

N 100-byte messages are produced straight to the physical partitions of U_TopicA (4 on each of the two
Apache Kafka sub-clusters). Then, interleaved, median of the rounds:

- kfed: ``spark.read.format("kfed")`` on a local[2] session, a batch read of the whole topic with an
  aggregate over the ``value`` column (count and total length, checked against N). The clock covers the
  whole query: resolving the partitions from the log, the watermarks, planning, the tasks.
- Spark's Kafka source (spark-sql-kafka-0-10, the JVM connector users would otherwise pick; ``make kafka``
  installs it): the same aggregate over ``spark.read.format("kafka")`` of the same physical partitions, one
  read per sub-cluster, unioned, in the same session.
- plain: the same 8 physical partitions read with confluent-kafka ``assign()`` from 0 to their ends with the
  same consumer settings, in 2 processes (one per sub-cluster: the same parallelism as local[2]), touching
  every value. Also shown: the same read in one process.

N is 2,000,000 (200,000 with --quick); ``KFED_BENCH_SPARK_MESSAGES`` overrides it. pyspark is imported only
when the benchmark runs.

The comparison is of a warm Spark session, as a long-running job or notebook sees it: the JVM's JIT is
still compiling Spark's planning, task and row-conversion code during the first queries of a fresh
session (measured here: a whole query 5.6-5.9 s for the 2nd-3rd read, 4.1-4.7 s from the 8th on; the
1-record query 1.3-1.6 s for ~12 queries, then ~0.6 s). So ``WARMUP_READS`` whole reads and
``WARMUP_SMALL_QUERIES`` 1-record queries run first. The very first query (JVM started, JIT cold) is
reported too.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, Producer, TopicPartition

from deploy.launcher import DEMO_TOPIC as TOPIC
from deploy.launcher import LocalFederation
from deploy.maven import SPARK_KAFKA_CONNECTOR

from .common import (
    BenchResult,
    Goal,
    Row,
    Sizes,
    fmt,
    median,
    per_round,
    produce_when_room,
    ratios,
    start_demo_federation,
)

VALUE = b"x" * 100
PARTITIONS_PER_CLUSTER = 4
WARMUP_READS = 5
WARMUP_SMALL_QUERIES = 12


def produce(fed: LocalFederation, n: int) -> None:
    """``n`` messages to the physical partitions of the demo topic, spread evenly (also the cluster benchmark's)."""
    producers = [Producer({"bootstrap.servers": c.bootstrap, "linger.ms": 5, "enable.metrics.push": False})
                 for c in (fed.clusters["c1"], fed.clusters["c2"])]  # fmt: skip
    for i in range(n):
        try:
            producers[i % 2].produce(TOPIC, VALUE, None, (i // 2) % PARTITIONS_PER_CLUSTER)
        except BufferError:
            produce_when_room(producers[i % 2], TOPIC, VALUE, None, (i // 2) % PARTITIONS_PER_CLUSTER)
        if i % 5000 == 0:
            producers[0].poll(0)
            producers[1].poll(0)
    for p in producers:
        if p.flush(120):
            raise RuntimeError("messages left unsent")


def plain_read(bootstrap: str, ends: dict[int, int]) -> tuple[int, int]:
    """Read partitions 0.. of TOPIC on one cluster from 0 to ``ends``; (messages, value bytes)."""
    from spark_pipeline.kafka_io import consumer_config

    consumer = Consumer(consumer_config(bootstrap, {}, fail_on_data_loss=True))
    consumer.assign([TopicPartition(TOPIC, p, 0) for p in ends])
    left = {p: end for p, end in ends.items() if end > 0}
    count = size = 0
    deadline = time.monotonic() + 300
    while left and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.1):
            if m.error() is not None:
                continue
            value = m.value()
            count += 1
            size += len(value) if value is not None else 0
            p = m.partition()
            if p in left and (m.offset() or 0) + 1 >= left[p]:
                del left[p]
    consumer.close()
    return count, size


def _noop(_: int) -> int:
    return 0


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    quick = sizes.quick
    n = int(os.environ.get("KFED_BENCH_SPARK_MESSAGES", 200_000 if quick else 2_000_000))
    rounds = 2 if quick else 4
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import functions as F

    from spark_pipeline import local_session
    from spark_pipeline.kafka_io import watermarks

    fed = LocalFederation(workdir / "spark")
    spark = None
    pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    try:
        start_demo_federation(fed)
        t0 = time.perf_counter()
        produce(fed, n)
        produce_s = time.perf_counter() - t0
        clusters = [fed.clusters["c1"], fed.clusters["c2"]]
        ends = [{tp[1]: m.high for tp, m in watermarks(c.bootstrap, [(TOPIC, p) for p in range(4)]).items()}
                for c in clusters]  # fmt: skip
        assert sum(sum(e.values()) for e in ends) == n, ends
        list(pool.map(_noop, range(2)))  # the worker processes are up before the clock starts
        jars = ",".join(str(jar) for jar in sorted(SPARK_KAFKA_CONNECTOR.installed().glob("*.jar")))
        spark = local_session("kfed-bench", "local[2]", **{"spark.driver.host": "127.0.0.1", "spark.jars": jars})
        spark.sparkContext.setLogLevel("ERROR")
        controllers = ",".join(fed.quorum.urls)

        def kfed_read() -> float:
            df = spark.read.format("kfed").option("kfed.controllers", controllers).option("subscribe", TOPIC).load()
            started = time.perf_counter()
            row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
            elapsed = time.perf_counter() - started
            assert row["n"] == n and row["bytes"] == n * len(VALUE), row
            return n / elapsed

        def spark_kafka_read() -> float:
            reads = [
                spark.read.format("kafka").option("kafka.bootstrap.servers", c.bootstrap).option("subscribe", TOPIC)
                .option("startingOffsets", "earliest").option("endingOffsets", "latest").load()
                for c in clusters
            ]  # fmt: skip
            df = reads[0].unionByName(reads[1])
            started = time.perf_counter()
            row = df.agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
            elapsed = time.perf_counter() - started
            assert row["n"] == n and row["bytes"] == n * len(VALUE), row
            return n / elapsed

        def kfed_fixed_cost() -> float:
            """Seconds for a whole query that reads one record per partition: planning, scheduling, tasks."""
            one_each = json.dumps({TOPIC: {str(p): 1 for p in range(2 * PARTITIONS_PER_CLUSTER)}})
            df = (
                spark.read.format("kfed")
                .option("kfed.controllers", controllers)
                .option("subscribe", TOPIC)
                .option("endingOffsets", one_each)
                .load()
            )
            started = time.perf_counter()
            assert df.agg(F.count(F.lit(1))).collect()[0][0] == 2 * PARTITIONS_PER_CLUSTER
            return time.perf_counter() - started

        def plain_parallel() -> float:
            started = time.perf_counter()
            counts = list(pool.map(plain_read, [c.bootstrap for c in clusters], ends))
            elapsed = time.perf_counter() - started
            assert sum(c for c, _ in counts) == n, counts
            return n / elapsed

        def plain_single() -> float:
            started = time.perf_counter()
            total = sum(plain_read(c.bootstrap, e)[0] for c, e in zip(clusters, ends, strict=True))
            elapsed = time.perf_counter() - started
            assert total == n
            return n / elapsed

        cold = kfed_read()  # the first query of a fresh session: JVM, JIT, Python workers
        spark_kafka_cold = spark_kafka_read()
        for _ in range(1 if quick else WARMUP_READS - 1):
            kfed_read()
            spark_kafka_read()
        for _ in range(2 if quick else WARMUP_SMALL_QUERIES):
            kfed_fixed_cost()
        kfed_rates: list[float] = []
        spark_kafka_rates: list[float] = []
        plain_rates: list[float] = []
        single_rates: list[float] = []
        fixed_costs: list[float] = []
        for r in range(rounds):  # who goes first alternates
            for ours in (True, False) if r % 2 == 0 else (False, True):
                (kfed_rates if ours else spark_kafka_rates).append(kfed_read() if ours else spark_kafka_read())
            plain_rates.append(plain_parallel())
            single_rates.append(plain_single())
            fixed_costs.append(kfed_fixed_cost())
    finally:
        if spark is not None:
            spark.stop()
        pool.shutdown()
        fed.stop()
    kfed, plain, single = median(kfed_rates), median(plain_rates), median(single_rates)
    theirs = median(spark_kafka_rates)
    vs_spark_kafka = ratios(kfed_rates, spark_kafka_rates)
    result.rows += [
        Row("kfed source vs Spark's Kafka source, same partitions and session", median(vs_spark_kafka), "x",
            f"kfed {fmt(kfed)} vs spark-sql-kafka {fmt(theirs)} rows/s (medians); per round "
            f"{per_round(vs_spark_kafka)}", Goal(">=", 1.0, "x"),
            f"{n:,} x 100 B, batch read + aggregate, local[2], Apache Kafka sub-clusters"),
        Row("kfed source rows/s (batch read, local[2])", kfed, "rows/s",
            f"plain confluent-kafka, 2 processes {fmt(plain)} rows/s ({kfed / plain:.2f}x)",
            Goal(">=", 0.8 * plain, "rows/s"), f"{n:,} x 100 B over 8 logical partitions, median of {rounds}, "
            f"warm session (after {WARMUP_READS} reads and {WARMUP_SMALL_QUERIES} small queries)"),
        Row("plain confluent-kafka read, 1 process", single, "rows/s", f"kfed {kfed / single:.2f}x of it", None,
            "same partitions and settings"),
        Row("kfed query reading 1 record per partition", median(fixed_costs), "s", "", None,
            "the fixed cost in every kfed query of a warm session: log, watermarks, planning worker, 8 tasks"),
        Row("kfed source rows/s, first query of the session", cold, "rows/s",
            f"Spark's Kafka source's first query {fmt(spark_kafka_cold)} rows/s", None,
            "JVM up but its JIT cold: not compared (see the module's docstring)"),
        Row("producing the data (raw Producers)", n / produce_s, "msg/s", "", None, "not part of the comparison"),
    ]  # fmt: skip
    result.details["spark"] = {"messages": n, "kfed": kfed_rates, "spark_kafka": spark_kafka_rates,
                               "spark_kafka_cold": spark_kafka_cold, "plain_2_processes": plain_rates,
                               "plain_1_process": single_rates, "kfed_fixed_cost_s": fixed_costs,
                               "kfed_cold": cold, "produce_s": produce_s}  # fmt: skip
