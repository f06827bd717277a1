"""The ``kfed`` command line."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from controller.config import ConfigError
from metadata_client.access import AccessError
from metadata_quorum.state import CorruptState

from . import ops, pipeline

if TYPE_CHECKING:
    from metadata_quorum import RaftSettings

log = logging.getLogger(__name__)

_EPILOG_CONTROLLER = """\
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


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be a non-negative integer")
    return value


def _add_controller_parser(sub: Any) -> None:
    c = sub.add_parser(
        "controller",
        help="run one node of the controller quorum",
        description="Run one controller node: a pysyncobj Raft voter and the HTTP API (FastAPI on uvicorn).",
        epilog=_EPILOG_CONTROLLER,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    c.add_argument("--config", required=True, type=Path, help="quorum.toml listing the voters")
    c.add_argument("--node-id", required=True, type=_non_negative_int, help="this node's id in the config")
    c.add_argument("--data-dir", required=True, type=Path, help="journal and state dump of this node")
    c.add_argument(
        "--retention-records",
        type=ops.positive_int,
        default=100_000,
        help="records kept in memory for readers by offset (default 100000); older ones are served as a snapshot",
    )
    c.add_argument(
        "--commit-timeout-ms",
        type=ops.positive_int,
        default=5000,
        help="a write not committed by then answers 504 'outcome unknown' (default 5000)",
    )
    c.add_argument("--election-timeout-ms-min", type=ops.positive_int, default=300)
    c.add_argument("--election-timeout-ms-max", type=ops.positive_int, default=900)
    c.add_argument(
        "--lease-ms",
        type=ops.positive_int,
        default=3000,
        help="an agent that has not heartbeat for this long has its cluster fenced (default 3000)",
    )
    c.add_argument(
        "--compaction-min-entries",
        type=ops.positive_int,
        default=100_000,
        help="Raft entries between state dumps (default 100000; each dump writes the whole image)",
    )
    c.add_argument(
        "--compaction-period-s",
        type=ops.positive_int,
        default=120,
        help="each node dumps its state at most once per period, in its own slice of it so that nodes "
        "never dump at the same time (default 120)",
    )
    c.add_argument(
        "--join",
        action="store_true",
        help="first start of a node joining a running quorum: stay a silent follower until the leader adds "
        "it (kfed quorum add-voter); the config lists the current voters and this node",
    )
    c.add_argument(
        "--drain-grace-ms",
        type=ops.positive_int,
        default=2000,
        help="after a partition stops taking writes, wait this long before trusting its end offset for "
        "removal (covers producers that have not yet seen the change; default 2000)",
    )
    c.add_argument(
        "--admin-token-file",
        type=Path,
        help="admin writes (POST/PUT/DELETE, agents' reports) need 'Authorization: Bearer <this token>' "
        "(required unless --insecure)",
    )
    c.add_argument(
        "--read-token-file",
        type=Path,
        help="reads and consumer-group calls need this token (or the admin one); default: reads are open",
    )
    c.add_argument(
        "--raft-secret-file",
        type=Path,
        help="shared secret of the voters: Raft traffic is encrypted and authenticated with it, so a stranger "
        "on the Raft port can neither join nor inject (every voter needs the same secret; costs latency; "
        "required unless --insecure)",
    )
    c.add_argument("--tls-cert", type=Path, help="serve the API over HTTPS with this certificate (PEM chain)")
    c.add_argument("--tls-key", type=Path, help="private key of --tls-cert (PEM)")
    c.add_argument(
        "--tls-ca",
        type=Path,
        help="CA bundle to verify the other voters' HTTPS certificates (default: the system's CAs)",
    )
    c.add_argument(
        "--raft-bind",
        metavar="HOST:PORT",
        help="listen for Raft traffic here instead of on this node's raft address in the config (which "
        "peers dial and which identifies the node): behind a port mapping or a proxy",
    )
    c.add_argument(
        "--no-journal-fsync",
        action="store_true",
        help="do not fsync the Raft journal per append (faster; a power loss of a majority can "
        "then lose acknowledged writes; kill -9 cannot)",
    )
    c.add_argument(
        "--insecure",
        action="store_true",
        help="start without --raft-secret-file and/or --admin-token-file, on a network that only trusted hosts "
        "reach: without them anyone on the Raft port can forge Raft traffic and anyone on the HTTP port can write",
    )


def _add_agent_parser(sub: Any) -> None:
    a = sub.add_parser(
        "agent",
        help="run the agent of one physical Kafka cluster",
        description="Register a physical cluster with the quorum, keep its lease, report its health and "
        "leaders, and reconcile it to the metadata log (create / delete physical topics).",
        epilog="A missed lease (the agent is gone) or a failed probe (the cluster is down) fences the cluster: its "
        "partitions stop being writable in the merged metadata until the agent reports it healthy again.",
    )
    a.add_argument("--cluster-id", required=True, help="id of the physical cluster, e.g. c1")
    a.add_argument("--region", required=True, help="region (federation group) the cluster serves")
    a.add_argument("--bootstrap", required=True, help="bootstrap servers of the cluster, host:port[,host:port]")
    a.add_argument("--controller", required=True, help="controller URLs, comma-separated")
    a.add_argument(
        "--token-file",
        type=Path,
        help="file with the admin token, when the controllers require one (agents report for their cluster)",
    )
    a.add_argument("--tls-ca", type=Path, help="CA bundle to verify the controllers' HTTPS certificates")
    a.add_argument("--heartbeat-ms", type=ops.positive_int, default=500, help="beat interval (default 500)")
    a.add_argument(
        "--probe-timeout-ms",
        type=ops.positive_int,
        default=1000,
        help="a metadata request slower than this counts as a failed probe (default 1000)",
    )
    a.add_argument(
        "--probe-failures",
        type=ops.positive_int,
        default=2,
        help="failed probes in a row before the cluster is reported unhealthy and fenced (default 2)",
    )
    a.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replication factor of the physical topics it creates (default -1: the broker's default)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kfed",
        description="kfed: the control plane of a federated Kafka (a Raft-replicated metadata log).",
    )
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    _add_controller_parser(sub)
    _add_agent_parser(sub)
    ops.add_parsers(sub)
    pipeline.add_parser(sub)
    sub.add_parser(  # listed here for `kfed --help`; `kfed gateway ...` goes to gateway.cli.main (see main)
        "gateway",
        help="serve the Kafka wire protocol: unmodified Kafka clients use logical topics (kfed gateway --help)",
        add_help=False,
    )

    local = sub.add_parser(
        "local",
        help="the embedded local federation",
        description="Run a whole federation on this machine for development.",
    )
    local_sub = local.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = local_sub.add_parser(
        "up",
        help="start 3 controllers, Apache Kafka (or Tansu) sub-clusters with their agents, and a Kafka gateway",
        description="Start the local federation on loopback, its data and logs under --data-dir: 3 controllers "
        "(HTTP 8001-8003, Raft 9101-9103); --clusters sub-clusters c1, c2, ... of --brokers-per-cluster Apache "
        "Kafka brokers in KRaft mode (c1 on 19092, c2 on 29092, ...; their KRaft controllers 100 above) or of one "
        "Tansu broker each (--broker tansu: memory storage, starts in milliseconds); an agent per sub-cluster; a "
        "Kafka gateway on 127.0.0.1:9092 for unmodified Kafka clients; the demo topic U_TopicA (4 partitions per "
        "sub-cluster); and with --spark-workers N, a Spark standalone master and N workers. Every port is checked "
        "before anything starts. A restart on the same --data-dir keeps the quorum's log and the Kafka brokers' "
        "data. Ctrl-C stops everything.",
    )
    up.add_argument("--data-dir", type=Path, default=Path("var/local"), help="default: var/local")
    up.add_argument("--http-base-port", type=ops.positive_int, default=8001, help="default 8001 (8001-8003)")
    up.add_argument("--raft-base-port", type=ops.positive_int, default=9101, help="default 9101 (9101-9103)")
    up.add_argument(
        "--broker",
        choices=["kafka", "tansu"],
        default="kafka",
        help="kafka (default): Apache Kafka brokers (make kafka installs them); tansu: light, memory only",
    )
    up.add_argument("--clusters", type=ops.positive_int, default=2, help="sub-clusters in region r1 (default 2)")
    up.add_argument(
        "--brokers-per-cluster",
        type=ops.positive_int,
        default=1,
        help="Kafka brokers per sub-cluster (default 1; 3 replicates each partition 3 times, min.insync.replicas 2)",
    )
    up.add_argument(
        "--broker-base-port",
        type=ops.positive_int,
        default=19092,
        help="c1's first broker port (default 19092); sub-cluster k listens 10000 * (k - 1) above it",
    )
    up.add_argument(
        "--gateway-port", type=ops.positive_int, default=9092, help="the Kafka gateway's port (default 9092)"
    )
    up.add_argument(
        "--spark-workers",
        type=int,
        default=0,
        metavar="N",
        help="also start a Spark standalone master (spark://127.0.0.1:7077, UI 8080) and N workers of 1 core and "
        "1 GiB each, for `kfed pipeline NAME --master spark://127.0.0.1:7077` (default 0: none)",
    )
    up.add_argument("--spark-master-port", type=ops.positive_int, default=7077, help="default 7077")
    up.add_argument("--spark-ui-port", type=ops.positive_int, default=8080, help="the master's web UI (default 8080)")
    up.add_argument("--once", action="store_true", help="start, wait until everything is up, print, stop")
    cluster = local_sub.add_parser(
        "cluster",
        help="add a sub-cluster to the running `kfed local up`",
        description="Change the running `kfed local up` federation (found through its --data-dir).",
    )
    cluster_sub = cluster.add_subparsers(dest="local_cluster_command", required=True, metavar="ACTION")
    add = cluster_sub.add_parser(
        "add",
        help="start one more sub-cluster and its agent, which registers it",
        description="Start one more sub-cluster (the kind and size `kfed local up` runs) with its agent, which "
        "registers it; then e.g. `kfed topic expand U_TopicA --cluster c3 --partitions 4` places partitions on it. "
        "The running `kfed local up` owns the new processes: its Ctrl-C stops them too.",
    )
    add.add_argument("cluster_id", help="id of the new sub-cluster, e.g. c3")
    add.add_argument("--region", default="r1", help="its region (default r1, the demo topic's)")
    add.add_argument(
        "--data-dir", type=Path, default=Path("var/local"), help="that of `kfed local up` (default: var/local)"
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["gateway"]:  # the gateway parses its own flags; its modules load only when it runs
        from gateway import cli as gateway_cli

        return gateway_cli.main(argv[1:])
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=args.log_level, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pysyncobj").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    try:
        if args.command == "controller":
            return _controller(args)
        if args.command == "agent":
            return _agent(args)
        if args.command in ("cluster", "topic", "quorum"):
            return ops.run(args)
        if args.command == "pipeline":
            result: int = args.func(args)
            return result
        if args.command == "local" and args.local_command == "up":
            from deploy.local_up import LocalLayout, local_up

            layout = LocalLayout(args.data_dir, args.http_base_port, args.raft_base_port, args.broker, args.clusters,
                                 args.brokers_per_cluster, args.broker_base_port, args.gateway_port, args.spark_workers,
                                 args.spark_master_port, args.spark_ui_port)  # fmt: skip
            return local_up(layout, once=args.once)
        if args.command == "local" and args.local_command == "cluster":
            from deploy.local_up import cluster_add

            return cluster_add(args.data_dir, args.cluster_id, args.region)
    except (ConfigError, CorruptState, AccessError) as e:
        print(f"kfed: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `kfed topic status … | head`: the reader has gone; leave without a traceback
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    return 2


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


def _controller(args: argparse.Namespace) -> int:
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


def _agent(args: argparse.Namespace) -> int:
    import signal

    from broker_agent.agent import Agent, AgentSettings
    from metadata_client.access import Access
    from metadata_log.commands import check_bootstrap, check_name
    from metadata_log.errors import InvalidRequest

    try:
        check_name(args.cluster_id, "--cluster-id")
        check_name(args.region, "--region")
        check_bootstrap(args.bootstrap, "--bootstrap")
    except InvalidRequest as e:
        raise ConfigError(e.detail) from None
    agent = Agent(
        args.cluster_id,
        args.region,
        args.bootstrap,
        args.controller,
        AgentSettings(
            args.heartbeat_ms,
            args.probe_timeout_ms,
            replication_factor=args.replication_factor,
            failures_to_fence=args.probe_failures,
        ),
        Access.from_files(args.token_file, args.tls_ca),
    )
    signal.signal(signal.SIGTERM, lambda *_: agent.stop())
    try:
        agent.run()
    except KeyboardInterrupt:
        agent.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
