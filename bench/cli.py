"""``python -m bench``: run the benchmarks, print one table each and a summary, save JSON results."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import shutil
import tempfile
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import orjson

from . import (
    failover,
    federation,
    gateway,
    image,
    key_order,
    latency,
    operations,
    raft_layer,
    scale,
    sdk,
    spark,
    spark_cluster,
    throughput,
    transactions,
)
from .common import (
    RESULTS_DIR,
    BenchResult,
    Sizes,
    fmt,
    install_sigterm_handler,
    load_average,
    machine_info,
    markdown_table,
    result_table,
)


@dataclass(frozen=True, slots=True)
class Benchmark:
    name: str
    issue: str  # the item of the issue it answers
    title: str
    run: Callable[[Sizes, Path, BenchResult], None]


BENCHMARKS: tuple[Benchmark, ...] = (
    Benchmark("writes", "1a, 1b", "Committed records/s through the HTTP API (3-node quorum)", throughput.run),
    Benchmark("raft", "1c", "Raft layer alone (RaftNode) vs raw pysyncobj, same settings", raft_layer.run),
    Benchmark("tailers", "2", "Commit -> tailer latency, long-poll and SSE", latency.run),
    Benchmark("failover", "3", "Leader kill -9 -> next acknowledged write", failover.run),
    Benchmark("image", "4", "A ~1M-partition image: snapshot, new follower, RSS, compaction", image.run),
    Benchmark(
        "scale",
        "#38",
        "10,000 topics x 10,000 partitions on 1,000 clusters: build, leaders, RSS, moves, expand, agents' CPU",
        scale.run,
    ),
    Benchmark(
        "federation",
        "#3, #25",
        "Kafka/Tansu broker kill -> fenced; 60 idle agents: log growth, leader CPU; kfed local up startup",
        federation.run,
    ),
    Benchmark(
        "sdk", "#4, #25", "FederatedProducer/Consumer vs raw confluent-kafka on Kafka; fence -> unrouted", sdk.run
    ),
    Benchmark(
        "operations", "#5", "Scale-up visible to producers; failure -> routed around; decommission", operations.run
    ),
    Benchmark(
        "transactions",
        "#28",
        "Transactional FederatedProducer over two clusters vs without; commit latency",
        transactions.run,
    ),
    Benchmark(
        "key-order", "#27", "Strict key order: producer msgs/s strict vs none; expand -> keyed traffic", key_order.run
    ),
    Benchmark("gateway", "#26", "librdkafka through the Kafka gateway vs straight to a sub-cluster", gateway.run),
    # pyspark is imported only when it runs
    Benchmark(
        "spark", "#6, #25", "kfed Spark source vs Spark's Kafka source and confluent-kafka, same partitions", spark.run
    ),
    Benchmark(
        "spark-cluster", "#29", "kfed Spark source on a 2-worker standalone cluster vs local[2]", spark_cluster.run
    ),
)
BY_NAME = {b.name: b for b in BENCHMARKS}

_EPILOG = (
    "benchmarks:\n"
    + "\n".join(f"  {b.name:<9} ({b.issue}) {b.title}" for b in BENCHMARKS)
    + """

Every benchmark starts its own processes on free 127.0.0.1 ports with data under a temporary directory
(removed afterwards unless --keep, or kept when the benchmark failed) and always stops them, also on
Ctrl-C. Results: one Markdown table per benchmark, a summary, and JSON in bench/results/.
The full run takes about 25 minutes on 2 cores; --quick is a ~1-2 minute smoke run with tiny sizes
(its numbers are not comparable with the goals)."""
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m bench",
        description="kfed benchmarks: throughput, tail latency, failover and a big image, against the goals "
        "of the issue, each with its same-run baseline.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--only",
        metavar="NAME[,NAME]",
        help="run only these benchmarks (names below)",
    )
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run of the harness")
    parser.add_argument(
        "--image-partitions", type=int, metavar="N", help="size of the image benchmark (default 1,000,000)"
    )
    parser.add_argument(
        "--scale",
        metavar="TOPICS,PARTITIONS,CLUSTERS",
        help="size of the scale benchmark: topics, partitions per topic, clusters (default 10000,10000,1000)",
    )
    parser.add_argument(
        "--compaction",
        choices=["on", "off"],
        help="run the image benchmark's compaction experiment (default: on, off with --quick)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the data directories and node logs")
    parser.add_argument(
        "--results-dir", type=Path, default=RESULTS_DIR, help=f"where JSON results go (default {RESULTS_DIR})"
    )
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.list:
        for b in BENCHMARKS:
            print(f"{b.name:<9} ({b.issue}) {b.title}")
        return 0
    selected = list(BENCHMARKS)
    if args.only:
        names = [n.strip() for n in args.only.split(",") if n.strip()]
        unknown = [n for n in names if n not in BY_NAME]
        if unknown:
            print(f"unknown benchmark(s): {', '.join(unknown)}; choose from {', '.join(BY_NAME)}")
            return 2
        selected = [BY_NAME[n] for n in names]
    install_sigterm_handler()
    sizes = Sizes.quick_run() if args.quick else Sizes.full()
    if args.image_partitions:
        sizes = dataclasses.replace(sizes, image_partitions=args.image_partitions)
    if args.compaction:
        sizes = dataclasses.replace(sizes, compaction=args.compaction == "on")
    if args.scale:
        try:
            topics, per_topic, clusters = (int(n) for n in args.scale.split(","))
        except ValueError:
            print(f"--scale takes TOPICS,PARTITIONS,CLUSTERS (three integers), not {args.scale!r}")
            return 2
        if clusters < 4 or clusters % 4 or per_topic % 4 or min(topics, per_topic) < 1:
            print("--scale: clusters come in regions of 4, and a topic's partitions are split over its region's 4")
            return 2
        sizes = dataclasses.replace(
            sizes, scale_topics=topics, scale_partitions_per_topic=per_topic, scale_clusters=clusters
        )
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    machine = machine_info()
    print(
        f"kfed bench {stamp}: {machine['nproc']} x {machine['cpu_model']}, Python {machine['python']}, "
        f"load {machine['loadavg']}{' (--quick)' if args.quick else ''}",
        flush=True,
    )
    results: list[BenchResult] = []
    started = time.monotonic()
    try:
        for bench in selected:
            results.append(_run_one(bench, sizes, args.keep))
            _save(args.results_dir, stamp, machine, sizes, results, time.monotonic() - started)
    except KeyboardInterrupt:
        print("\ninterrupted; processes stopped", flush=True)
        _save(args.results_dir, stamp, machine, sizes, results, time.monotonic() - started)
        return 130
    _print_summary(results, time.monotonic() - started)
    print(f"\nJSON results: {args.results_dir}/run-{stamp}.json", flush=True)
    return 1 if any(r.error for r in results) else 0


def _run_one(bench: Benchmark, sizes: Sizes, keep: bool) -> BenchResult:
    result = BenchResult(bench.name, f"{bench.issue}: {bench.title}")
    print(f"\n== {bench.name} ({bench.issue}): {bench.title}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix=f"kfed-bench-{bench.name}-"))
    result.details["load_average_before"] = load_average()
    t0 = time.monotonic()
    try:
        bench.run(sizes, tmp, result)
    except KeyboardInterrupt:
        print(f"  data kept in {tmp}", flush=True)
        raise
    except Exception as e:
        result.error = f"{type(e).__name__}: {e}"
        result.details["traceback"] = traceback.format_exc()
        keep = True
        print(f"  FAILED: {result.error}\n{result.details['traceback']}", flush=True)
    finally:
        result.elapsed_s = time.monotonic() - t0
        result.details["load_average_after"] = load_average()
    if keep:
        result.details["data_dir"] = str(tmp)
        print(f"  data and node logs kept in {tmp}", flush=True)
    else:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"\n### {result.title}  ({result.elapsed_s:.0f} s)\n", flush=True)
    if result.rows:
        print(result_table(result.rows), flush=True)
    for note in result.notes:
        print(f"- {note}", flush=True)
    return result


def _print_summary(results: list[BenchResult], elapsed_s: float) -> None:
    print(f"\n## Summary ({elapsed_s / 60:.1f} min)\n")
    rows = []
    for r in results:
        if r.error:
            rows.append([r.name, "ERROR", "", "", r.error[:80]])
        for row in r.rows:
            if row.goal is not None:
                rows.append([r.name, row.metric, f"{fmt(row.value)} {row.unit}", str(row.goal), row.status])
    print(markdown_table(["benchmark", "metric", "measured", "goal", "status"], rows), flush=True)


def _save(
    results_dir: Path,
    stamp: str,
    machine: dict[str, object],
    sizes: Sizes,
    results: list[BenchResult],
    elapsed_s: float,
) -> None:
    results_dir.mkdir(parents=True, exist_ok=True)
    doc = {
        "stamp": stamp,
        "machine": machine,
        "sizes": sizes,
        "elapsed_s": round(elapsed_s, 1),
        "results": [r.as_json() for r in results],
    }
    data = orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_DATACLASS | orjson.OPT_NON_STR_KEYS)
    (results_dir / f"run-{stamp}.json").write_bytes(data)
    for r in results:
        (results_dir / f"{r.name}-{stamp}.json").write_bytes(
            orjson.dumps(r.as_json(), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        )
