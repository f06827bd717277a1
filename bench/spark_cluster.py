"""Issue 29 benchmark: the ``kfed`` source on a 2-worker Spark standalone cluster vs ``local[2]``, same data.

N 100-byte messages are produced straight to the physical partitions of U_TopicA (4 on each of the two
sub-clusters). Two drivers then run side by side, each in its own process with its own warm session: one on
``local[2]``, one on a standalone master with 2 workers of 1 core each (``deploy/spark.py``), whose executors
import kfed from the shipped archive. They take turns (the order alternates per round, median of the rounds),
so they read the same data under the same load:

- whole read: ``spark.read.format("kfed")`` of the whole topic with an aggregate over ``value`` (count and
  total length, checked against N); the clock covers the whole query (log, watermarks, planning, tasks);
- fixed cost: a query reading 1 record per partition (planning, scheduling, 8 tasks).

Both cases have 2 cores for tasks; the cluster's run in two executor JVMs, each with its own Python workers,
and ship their rows to the driver over the network. N is 2,000,000 (200,000 with --quick);
``KFED_BENCH_SPARK_CLUSTER_MESSAGES`` overrides it. ``python -m bench.spark_cluster --reader`` is one driver.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import IO, Any

from deploy.launcher import DEMO_TOPIC as TOPIC
from deploy.launcher import LocalFederation
from deploy.spark import SparkCluster

from .common import BenchResult, Row, Sizes, fmt, median, start_demo_federation
from .spark import VALUE, produce

PARTITIONS = 8  # the demo topic: 4 on each of c1 and c2
WARMUP_READS = 4
WARMUP_SMALL_QUERIES = 8
DRIVER_CONF = ("spark.executor.memory=1g", "spark.driver.memory=1g")


class Reader:
    """A driver process answering ``read`` / ``fixed`` / ``quit`` lines with one JSON line each."""

    def __init__(self, master: str, controllers: str, n: int, log: Path) -> None:
        self.log = log
        err: IO[bytes] = open(log, "wb")  # noqa: SIM115 - owned by the child
        args = [sys.executable, "-m", "bench.spark_cluster", "--reader", "--master", master, "--controllers",
                controllers, "--expect", str(n)]  # fmt: skip
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1"}
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err, env=env,
                                         text=True, start_new_session=True)  # fmt: skip
        finally:
            err.close()

    def ask(self, command: str) -> float:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the {command!r} driver exited; see {self.log}")
        return float(json.loads(line)["value"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            assert self.proc.stdin is not None
            self.proc.stdin.close()  # EOF: the reader stops its session and exits
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def run(sizes: Sizes, workdir: Path, result: BenchResult) -> None:
    n = int(os.environ.get("KFED_BENCH_SPARK_CLUSTER_MESSAGES", 200_000 if sizes.quick else 2_000_000))
    rounds = 1 if sizes.quick else 5  # one round ranged 0.7-1.4x here on a shared machine
    fed = LocalFederation(workdir / "fed")
    cluster = SparkCluster(workdir / "spark", 2)
    readers: dict[str, Reader] = {}
    try:
        start_demo_federation(fed)
        produce(fed, n)
        cluster.start()
        controllers = ",".join(fed.quorum.urls)
        readers = {"local[2]": Reader("local[2]", controllers, n, workdir / "local.log"),
                   "cluster": Reader(cluster.master_url, controllers, n, workdir / "cluster.log")}  # fmt: skip
        cold = {name: r.ask("read") for name, r in readers.items()}
        for r in readers.values():
            for _ in range(1 if sizes.quick else WARMUP_READS - 1):
                r.ask("read")
            for _ in range(2 if sizes.quick else WARMUP_SMALL_QUERIES):
                r.ask("fixed")
        rates: dict[str, list[float]] = {name: [] for name in readers}
        fixed: dict[str, list[float]] = {name: [] for name in readers}
        for i in range(rounds):
            order = list(readers) if i % 2 == 0 else list(reversed(readers))
            for name in order:
                rates[name].append(readers[name].ask("read"))
            for name in order:
                fixed[name].append(readers[name].ask("fixed"))
        apps = [a for a in cluster.state()["activeapps"] if a["name"] == "kfed-bench-cluster"]
        result.details["cluster_app"] = apps
    finally:
        for r in readers.values():
            r.stop()
        cluster.stop()
        fed.stop()
    on_cluster, local = median(rates["cluster"]), median(rates["local[2]"])
    result.rows += [
        Row("kfed source rows/s, 2-worker standalone cluster", on_cluster, "rows/s",
            f"local[2] {fmt(local)} rows/s (cluster {on_cluster / local:.2f}x)", None,
            f"{n:,} x 100 B over {PARTITIONS} logical partitions; 2 workers x 1 core; median of {rounds}, warm"),
        Row("kfed source rows/s, local[2]", local, "rows/s", "", None, "the same data, the same run"),
        Row("kfed query reading 1 record per partition, cluster", median(fixed["cluster"]), "s",
            f"local[2] {median(fixed['local[2]']):.2f} s", None, "fixed cost: log, watermarks, planning, 8 tasks"),
        Row("kfed source rows/s, first query, cluster", cold["cluster"], "rows/s",
            f"local[2] {fmt(cold['local[2]'])} rows/s", None, "executors' Python workers start, JIT cold"),
    ]  # fmt: skip
    result.details["spark_cluster"] = {"messages": n, "rates": rates, "fixed_cost_s": fixed, "cold": cold}


# -- one driver -------------------------------------------------------------------------------------------------
def reader_main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.spark_cluster", description="one driver of the benchmark")
    p.add_argument("--reader", action="store_true", required=True)
    p.add_argument("--master", required=True)
    p.add_argument("--controllers", required=True)
    p.add_argument("--expect", type=int, required=True, help="messages in the topic")
    args = p.parse_args(argv)
    from pyspark.sql import functions as F

    from spark_pipeline import local_session

    conf = dict(item.split("=", 1) for item in DRIVER_CONF)
    name = "kfed-bench-local" if args.master.startswith("local") else "kfed-bench-cluster"
    spark = local_session(name, args.master, **conf)
    spark.sparkContext.setLogLevel("ERROR")

    def load(**options: str) -> Any:
        reader = spark.read.format("kfed").option("kfed.controllers", args.controllers).option("subscribe", TOPIC)
        return reader.options(**options).load()

    def read() -> float:
        started = time.perf_counter()
        row = load().agg(F.count(F.lit(1)).alias("n"), F.sum(F.length("value")).alias("bytes")).collect()[0]
        elapsed = time.perf_counter() - started
        assert row["n"] == args.expect and row["bytes"] == args.expect * len(VALUE), row
        return float(args.expect / elapsed)

    def fixed() -> float:
        one_each = json.dumps({TOPIC: {str(p): 1 for p in range(PARTITIONS)}})
        started = time.perf_counter()
        assert load(endingOffsets=one_each).agg(F.count(F.lit(1))).collect()[0][0] == PARTITIONS
        return time.perf_counter() - started

    commands = {"read": read, "fixed": fixed}
    try:
        for line in sys.stdin:
            value = commands[line.strip()]()
            print(json.dumps({"value": value}), flush=True)
    finally:
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(reader_main(sys.argv[1:]))
