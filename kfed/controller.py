"""``kfed controller``: run one node of the controller quorum, secure by default."""

from __future__ import annotations

import argparse
import logging
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Final

from controller.config import ConfigError
from controller.leases import DEFAULT_LEASE_MS
from metadata_client.arguments import non_negative_int, positive_int

if TYPE_CHECKING:
    from metadata_quorum import RaftSettings

log = logging.getLogger(__name__)

_EPILOG = """\
The config lists every voter, e.g.:

  [[voters]]
  id = 1
  raft = "127.0.0.1:9101"
  http = "http://127.0.0.1:8001"

Run one process per voter, each with its own --data-dir. A node restarted on the same data dir rejoins
and catches up; a damaged state file stops the node with an error instead of starting empty.

Every voter needs --raft-secret-file (the same secret on all of them) and --admin-token-file: without
either it refuses to start, unless given --insecure (for a network that only trusted hosts reach).
"""


# The secrets ``kfed controller`` refuses to start without (unless --insecure), each with what is open without it.
SECURITY_FLAGS: Final = {
    "--raft-secret-file": "anyone who reaches the Raft port can read the metadata and forge Raft "
    "traffic (join the quorum, inject commands)",
    "--admin-token-file": "anyone who reaches the HTTP port can write (create and delete topics, fence "
    "and decommission clusters, change the voters)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed controller`` parser."""
    parser.description = "Run one controller node: a pysyncobj Raft voter and the HTTP API (FastAPI on uvicorn)."
    parser.epilog = _EPILOG
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    _add_node_arguments(parser)
    _add_secret_arguments(parser)
    parser.add_argument(
        "--raft-bind",
        metavar="HOST:PORT",
        help="listen for Raft traffic here instead of on this node's raft address in the config (which "
        "peers dial and which identifies the node): behind a port mapping or a proxy",
    )
    parser.add_argument(
        "--no-journal-fsync",
        action="store_true",
        help="do not fsync the Raft journal per append (faster; a power loss of a majority can "
        "then lose acknowledged writes; kill -9 cannot)",
    )
    parser.add_argument(
        "--insecure",
        action="store_true",
        help="start without --raft-secret-file and/or --admin-token-file, on a network that only trusted hosts "
        "reach: without them anyone on the Raft port can forge Raft traffic and anyone on the HTTP port can write",
    )


def _add_node_arguments(parser: argparse.ArgumentParser) -> None:
    """Which node this is, where it keeps its data, and its timings and retention."""
    parser.add_argument("--config", required=True, type=Path, help="quorum.toml listing the voters")
    parser.add_argument("--node-id", required=True, type=non_negative_int, help="this node's id in the config")
    parser.add_argument("--data-dir", required=True, type=Path, help="journal and state dump of this node")
    parser.add_argument(
        "--retention-records",
        type=positive_int,
        default=100_000,
        help="records kept in memory for readers by offset (default 100000); older ones are served as a snapshot",
    )
    parser.add_argument(
        "--commit-timeout-ms",
        type=positive_int,
        default=5000,
        help="a write not committed by then answers 504 'outcome unknown' (default 5000)",
    )
    parser.add_argument("--election-timeout-ms-min", type=positive_int, default=300)
    parser.add_argument("--election-timeout-ms-max", type=positive_int, default=900)
    parser.add_argument(
        "--lease-ms",
        type=positive_int,
        default=DEFAULT_LEASE_MS,
        help=f"an agent that has not heartbeat for this long has its cluster fenced (default {DEFAULT_LEASE_MS})",
    )
    parser.add_argument(
        "--compaction-min-entries",
        type=positive_int,
        default=100_000,
        help="Raft entries between state dumps (default 100000; each dump writes the whole image)",
    )
    parser.add_argument(
        "--compaction-period-s",
        type=positive_int,
        default=120,
        help="each node dumps its state at most once per period, in its own slice of it so that nodes "
        "never dump at the same time (default 120)",
    )
    parser.add_argument(
        "--join",
        action="store_true",
        help="first start of a node joining a running quorum: stay a silent follower until the leader adds "
        "it (kfed quorum add-voter); the config lists the current voters and this node",
    )
    parser.add_argument(
        "--drain-grace-ms",
        type=positive_int,
        default=2000,
        help="after a partition stops taking writes, wait this long before trusting its end offset for "
        "removal (covers producers that have not yet seen the change; default 2000)",
    )


def _add_secret_arguments(parser: argparse.ArgumentParser) -> None:
    """The tokens, the Raft secret and the TLS files."""
    parser.add_argument(
        "--admin-token-file",
        type=Path,
        help="admin writes (POST/PUT/DELETE, agents' reports) need 'Authorization: Bearer <this token>' "
        "(required unless --insecure)",
    )
    parser.add_argument(
        "--read-token-file",
        type=Path,
        help="reads and consumer-group calls need this token (or the admin one); default: reads are open",
    )
    parser.add_argument(
        "--raft-secret-file",
        type=Path,
        help="shared secret of the voters: Raft traffic is encrypted and authenticated with it, so a stranger "
        "on the Raft port can neither join nor inject (every voter needs the same secret; costs latency; "
        "required unless --insecure)",
    )
    parser.add_argument("--tls-cert", type=Path, help="serve the API over HTTPS with this certificate (PEM chain)")
    parser.add_argument("--tls-key", type=Path, help="private key of --tls-cert (PEM)")
    parser.add_argument(
        "--tls-ca",
        type=Path,
        help="CA bundle to verify the other voters' HTTPS certificates (default: the system's CAs)",
    )


def missing_secrets(args: argparse.Namespace) -> list[str]:
    """The ``SECURITY_FLAGS`` a ``kfed controller`` command line leaves out."""
    return [flag for flag in SECURITY_FLAGS if getattr(args, flag[2:].replace("-", "_")) is None]


def _refuse_insecure(args: argparse.Namespace) -> bool:
    """Whether to refuse to start: a secret is missing and --insecure was not given (the refusal, one line per
    missing flag, is on stderr). With --insecure each missing secret is logged as a warning instead."""
    missing = missing_secrets(args)
    if not args.insecure:
        for flag in missing:
            print(
                f"kfed controller: {flag} is required: without it {SECURITY_FLAGS[flag]}; "
                "pass --insecure to run without it on a trusted network",
                file=sys.stderr,
            )
        return bool(missing)
    for flag in missing:
        log.warning("INSECURE (--insecure): started without %s: %s", flag, SECURITY_FLAGS[flag])
    return False


def run(args: argparse.Namespace) -> int:
    """Run the node until it is stopped; a setting that cannot be used raises ``ConfigError``, and a damaged
    dump or snapshot in the data dir is said in one line (status 2), not as a traceback."""
    from metadata_quorum.state import CorruptState

    try:
        return _run(args)
    except CorruptState as e:
        print(f"kfed: {e}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace) -> int:
    if _refuse_insecure(args):  # before anything is imported, read or bound
        return 2
    from controller.auth import Tokens
    from controller.config import load_quorum
    from controller.node import NodeSettings, TlsFiles, run_node
    from metadata_client.access import read_secret

    if args.election_timeout_ms_max <= args.election_timeout_ms_min:
        raise ConfigError("--election-timeout-ms-max must be above --election-timeout-ms-min")
    if args.raft_bind is not None and not re.fullmatch(r"[^\s:,]+:\d{1,5}", args.raft_bind):
        raise ConfigError(f"--raft-bind must be host:port, got {args.raft_bind!r}")
    if (args.tls_cert is None) != (args.tls_key is None):
        raise ConfigError("--tls-cert and --tls-key go together")
    for flag in ("tls_cert", "tls_key", "tls_ca"):
        path = getattr(args, flag)
        if path is not None and not path.is_file():
            raise ConfigError(f"--{flag.replace('_', '-')} {path}: no such file")
    quorum = load_quorum(args.config)
    me = quorum.voter(args.node_id)
    if args.tls_cert and not me.http.startswith("https://"):
        raise ConfigError(f"--tls-cert given but this node's http URL in {args.config} is {me.http}, not https://")
    tokens = Tokens(
        admin=read_secret(args.admin_token_file, "--admin-token-file") if args.admin_token_file else None,
        read=read_secret(args.read_token_file, "--read-token-file") if args.read_token_file else None,
    )
    settings = NodeSettings(
        retention_records=args.retention_records,
        commit_timeout_s=args.commit_timeout_ms / 1000,
        lease_ms=args.lease_ms,
        drain_grace_ms=args.drain_grace_ms,
        join=args.join,
        tokens=tokens,
        tls=TlsFiles(args.tls_cert, args.tls_key, args.tls_ca) if args.tls_cert else None,
        raft=raft_settings(
            args, read_secret(args.raft_secret_file, "--raft-secret-file") if args.raft_secret_file else None
        ),
    )
    run_node(quorum, args.node_id, args.data_dir, settings)
    return 0


def raft_settings(args: argparse.Namespace, password: str | None) -> RaftSettings:
    """The Raft layer's settings of a ``kfed controller`` command line (its defaults are ``RaftSettings()``'s)."""
    from metadata_quorum import RaftSettings

    return RaftSettings(
        election_timeout_ms_min=args.election_timeout_ms_min,
        election_timeout_ms_max=args.election_timeout_ms_max,
        journal_fsync=not args.no_journal_fsync,
        compaction_min_entries=args.compaction_min_entries,
        compaction_min_s=args.compaction_period_s,
        bind_address=args.raft_bind,
        password=password,
    )
