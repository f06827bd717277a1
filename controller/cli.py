"""The ``kfed`` command line."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from metadata_log.state import CorruptState

from .config import ConfigError

_EPILOG_CONTROLLER = """\
The config lists every voter, e.g.:

  [[voters]]
  id = 1
  raft = "127.0.0.1:9101"
  http = "http://127.0.0.1:8001"

Run one process per voter, each with its own --data-dir. A node restarted on the same data dir rejoins
and catches up; a damaged state file stops the node with an error instead of starting empty.
"""


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kfed",
        description="kfed: the control plane of a federated Kafka (a Raft-replicated metadata log).",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    c = sub.add_parser(
        "controller",
        help="run one node of the controller quorum",
        description="Run one controller node: a pysyncobj Raft voter and the HTTP API (FastAPI on uvicorn).",
        epilog=_EPILOG_CONTROLLER,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("--config", required=True, type=Path, help="quorum.toml listing the voters")
    c.add_argument("--node-id", required=True, type=_positive_int, help="this node's id in the config")
    c.add_argument("--data-dir", required=True, type=Path, help="journal and state dump of this node")
    c.add_argument(
        "--retention-records",
        type=_positive_int,
        default=100_000,
        help="records kept in memory for readers by offset (default 100000); older ones are served as a snapshot",
    )
    c.add_argument(
        "--commit-timeout-ms",
        type=_positive_int,
        default=5000,
        help="a write not committed by then answers 504 'outcome unknown' (default 5000)",
    )
    c.add_argument("--election-timeout-ms-min", type=_positive_int, default=300)
    c.add_argument("--election-timeout-ms-max", type=_positive_int, default=900)
    c.add_argument(
        "--compaction-min-entries",
        type=_positive_int,
        default=100_000,
        help="Raft entries between state dumps (default 100000; each dump writes the whole image)",
    )
    c.add_argument(
        "--compaction-period-s",
        type=_positive_int,
        default=120,
        help="each node dumps its state at most once per period, in its own slice of it so that nodes "
        "never dump at the same time (default 120)",
    )
    c.add_argument(
        "--no-journal-fsync",
        action="store_true",
        help="do not fsync the Raft journal per append (faster; a power loss of a majority can "
        "then lose acknowledged writes; kill -9 cannot)",
    )

    local = sub.add_parser(
        "local",
        help="the embedded local federation",
        description="Run a whole federation on this machine for development.",
    )
    local_sub = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = local_sub.add_parser(
        "up",
        help="start 3 controllers (HTTP 8001-8003, Raft 9101-9103) and keep them running until Ctrl-C",
        description="Start the local quorum: three controller processes on loopback with their data under "
        "--data-dir, and a live status line. Ctrl-C stops everything.",
    )
    up.add_argument("--data-dir", type=Path, default=Path("var/local"), help="default: var/local")
    up.add_argument("--http-base-port", type=_positive_int, default=8001, help="default 8001 (8001-8003)")
    up.add_argument("--raft-base-port", type=_positive_int, default=9101, help="default 9101 (9101-9103)")
    up.add_argument("--once", action="store_true", help="start, wait until a leader is elected, print, stop")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        if args.command == "controller":
            return _controller(args)
        if args.command == "local" and args.local_command == "up":
            from deploy.local import local_up

            return local_up(args.data_dir, args.http_base_port, args.raft_base_port, once=args.once)
    except (ConfigError, CorruptState) as e:
        print(f"kfed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    return 2


def _controller(args: argparse.Namespace) -> int:
    from metadata_log.raft import RaftSettings

    from .config import load_quorum
    from .node import NodeSettings, run_node

    if args.election_timeout_ms_max <= args.election_timeout_ms_min:
        raise ConfigError("--election-timeout-ms-max must be above --election-timeout-ms-min")
    quorum = load_quorum(args.config)
    quorum.voter(args.node_id)
    settings = NodeSettings(
        retention_records=args.retention_records,
        commit_timeout_s=args.commit_timeout_ms / 1000,
        raft=RaftSettings(
            election_timeout_ms_min=args.election_timeout_ms_min,
            election_timeout_ms_max=args.election_timeout_ms_max,
            journal_fsync=not args.no_journal_fsync,
            compaction_min_entries=args.compaction_min_entries,
            compaction_min_s=args.compaction_period_s,
        ),
    )
    run_node(quorum, args.node_id, args.data_dir, settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
