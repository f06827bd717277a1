"""``python -m tests.dataplane --seed S``: one seeded chaos run of the data plane; exit 1 on anomalies.
``--check HISTORY``: the checker alone, on a run's saved history."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from tests.faults.history import load

from .checker import check
from .run import FAULTS, SCHEDULE, run

DESCRIPTION = f"""\
Seeded chaos against a real federation on loopback (free ports): three `kfed controller` processes behind
Raft and HTTP proxies, three Apache Kafka sub-clusters with their agents (c3 joins and leaves during the
run), two `kfed gateway` processes.

The workload: the SDK producing keyed and key-less messages, keyed ones on a strict topic (following one
controller), and cross-cluster transactions (every fifth aborted on purpose); unmodified clients through the
gateways (librdkafka, kafka-python, the Java kafka-clients); a group of SDK members and one of librdkafka
members through the gateways, read_committed, committing what they read; an SDK member joining and leaving.

The faults, one at a time, each held 2-4 s and healed (drawn from the seed, or --schedule):

  kill_node      kill -9 a controller (the leader half the time), restart it on its data
  pause_node     SIGSTOP the leader, SIGCONT it
  cut_node       cut the strict producer's controller from the other two
  cut_clients    cut the SDK's clients and the gateways from every controller
  kill_gateway   kill -9 a gateway, restart it on its port
  pause_gateway  SIGSTOP a gateway, SIGCONT it
  kill_agent     kill -9 an agent, restart it
  pause_agent    SIGSTOP an agent, SIGCONT it
  kill_broker    kill -9 a sub-cluster's broker (the whole sub-cluster), restart it on its data
  pause_broker   SIGSTOP a sub-cluster's broker, SIGCONT it
  expand         c3 joins; every topic gets two partitions on it
  shrink         one of c1's partitions of every topic stops taking writes and drains
  decommission   c3 (after expand) read-only, drained, decommissioned

Then every producer flushes, the groups read what they must, and the checker (tests/dataplane/checker.py)
looks for lost messages, duplicates, aborted reads, torn commits, phantom reads, key-order breaks and
offsets going backwards. Exit status 1 when anything is found; the history is kept, with the commands
that replay the run and its check. The explicit schedule of `make test`: {",".join(SCHEDULE)}.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.dataplane", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the faults, their targets and holds (default 1)")
    parser.add_argument("--faults", type=int, default=len(SCHEDULE),
                        help=f"how many faults to draw from the seed (default {len(SCHEDULE)})")  # fmt: skip
    parser.add_argument(
        "--schedule", type=lambda text: tuple(text.split(",")), default=None,
        help=f"these faults in this order, comma-separated, instead of drawing them (from: {', '.join(FAULTS)})",
    )  # fmt: skip
    parser.add_argument("--work-dir", type=Path, default=None,
                        help="where logs and history.jsonl go (default: a new directory in var/chaos)")  # fmt: skip
    parser.add_argument("--no-java", action="store_true", help="without the Java producer (no JVM client to build)")
    parser.add_argument("--check", type=Path, default=None, metavar="HISTORY",
                        help="only check a saved history.jsonl and print its anomalies")  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="log each fault as it is applied")
    args = parser.parse_args(argv)
    if args.check is not None:
        anomalies, summary = check(load(args.check))
        print(summary)
        for a in anomalies:
            print(f"  {a}")
        print(f"{len(anomalies)} anomalies")
        return 1 if anomalies else 0
    if args.schedule is not None and not set(args.schedule) <= set(FAULTS):
        unknown = sorted(set(args.schedule) - set(FAULTS))
        parser.error(f"--schedule: unknown faults {unknown}; known: {', '.join(FAULTS)}")
    if (
        args.schedule is not None
        and "decommission" in args.schedule
        and ("expand" not in args.schedule or args.schedule.index("decommission") < args.schedule.index("expand"))
    ):
        parser.error("--schedule: decommission removes the cluster expand adds: put expand before it")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("chaos").setLevel(logging.INFO if args.verbose else logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.CRITICAL)  # kafka-python logs every retry as a warning
    work_dir = args.work_dir
    if work_dir is None:
        Path("var/chaos").mkdir(parents=True, exist_ok=True)
        work_dir = Path(tempfile.mkdtemp(prefix=f"seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-", dir="var/chaos"))
    classpath = None
    if not args.no_java:
        from tests.gateway.clients import java_classpath

        print("building the Java client (tests/gateway/java) when it changed", flush=True)
        try:
            classpath = java_classpath()
        except BaseException as e:  # pytest.skip's exception when Java or Maven is missing
            if type(e).__name__ != "Skipped":
                raise
            print(f"without the Java clients: {e}", flush=True)
    result = run(args.seed, work_dir, args.schedule, args.faults, java_classpath=classpath)
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
