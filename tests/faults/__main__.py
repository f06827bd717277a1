"""``python -m tests.faults --seed S --duration D``: one seeded fault-injection run; exit 1 on anomalies."""

from __future__ import annotations

import argparse
import logging
import sys
import tempfile
import time
from pathlib import Path

from .run import AGENTS, FAULTS, replay_command, run

DESCRIPTION = """\
Seeded fault injection against a real 3-node kfed quorum on loopback (free ports).

It starts three `kfed controller` processes, each behind a TCP proxy on its Raft port and one on its
HTTP port, and sub-clusters (a Tansu broker and a `kfed agent` each); runs writers (varied admin writes
with Idempotency-Keys; unknown outcomes retried with the same key), tailers (GET /v1/log by offset,
moving between nodes; one starts late, below every node's window) and observers (/v1/node,
/v1/metadata), and applies faults drawn from the seed (or the --schedule given):

  kill                   kill -9 a node (the leader half the time), restart it on its data dir
  pause                  SIGSTOP a node, SIGCONT it
  cut                    cut a node's Raft links at the proxies (both directions), heal them
  leader_kill_mid_batch  16 concurrent writes in flight (group commit batches them), kill -9 the leader
  restart_all            kill -9 every node at once, start them all again
  http_cut               every reply of a node to its clients lost (requests still reach it), then healed
  kill_broker            kill -9 an agent cluster's broker: it must be fenced, then unfenced once back
  kill_agent             kill -9 an agent, restart it: its re-registration must change nothing

After healing it checks the recorded history (JSONL): every record tied to the one write (or agent, or
quorum duty) that asked for it, acknowledged writes at their offsets, unknown ones at most once, refused
ones never, same-key answers agreeing; logs gap-free and identical on every pair of nodes; every tailer
saw the log in order, jumping only through a snapshot after a 410; at most one leader per term;
/v1/metadata and snapshots equal to apply() of the log. Exit status 1 when anything is found; the seed
and a command that replays the schedule are printed.
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.faults", description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the fault schedule and the clients (default 1)")
    parser.add_argument("--duration", type=float, default=60, help="seconds of faults (default 60)")
    parser.add_argument(
        "--work-dir", type=Path, default=None,
        help="where node data, logs and history.jsonl go (default: a new directory under var/faults)",
    )  # fmt: skip
    parser.add_argument(
        "--schedule", type=lambda text: tuple(text.split(",")), default=None,
        help=f"these faults in this order, comma-separated, instead of --duration (from: {', '.join(FAULTS)})",
    )  # fmt: skip
    parser.add_argument("--agents", type=int, default=AGENTS, help=f"agent sub-clusters (default {AGENTS})")
    parser.add_argument(
        "--secure", action="store_true",
        help="run the controllers as deployed, with a Raft secret and an admin token (default: --insecure)",
    )  # fmt: skip
    parser.add_argument("-v", "--verbose", action="store_true", help="log each fault as it is applied")
    args = parser.parse_args(argv)
    if args.schedule is not None and not set(args.schedule) <= set(FAULTS):
        parser.error(
            f"--schedule: unknown faults {sorted(set(args.schedule) - set(FAULTS))}; known: {', '.join(FAULTS)}"
        )
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, format="%(asctime)s %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    work_dir = args.work_dir
    if work_dir is None:
        Path("var/faults").mkdir(parents=True, exist_ok=True)
        work_dir = Path(tempfile.mkdtemp(prefix=f"seed{args.seed}-{time.strftime('%Y%m%d-%H%M%S')}-",
                                         dir="var/faults"))  # fmt: skip
    print(f"fault run: seed {args.seed}, {args.duration:g} s, faults from {', '.join(FAULTS)}; in {work_dir}")
    try:
        result = run(args.seed, args.duration, work_dir, args.schedule, args.agents, args.secure)
    except KeyboardInterrupt:
        replay = replay_command(args.seed, args.duration, args.schedule, args.secure)
        print(f"interrupted; every process started was stopped. Replay: {replay}")
        return 130
    print(result.report())
    return 0 if result.ok else 1


if __name__ == "__main__":
    sys.exit(main())
