"""``kfed agent``: run the agent of one physical Kafka cluster."""

from __future__ import annotations

import argparse
from pathlib import Path

from controller.config import ConfigError
from metadata_client.arguments import positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed agent`` parser."""
    parser.description = (
        "Register a physical cluster with the quorum, keep its lease, report its health and "
        "leaders, and reconcile it to the metadata log (create / delete physical topics)."
    )
    parser.epilog = (
        "A missed lease (the agent is gone) or a failed probe (the cluster is down) fences the cluster: its "
        "partitions stop being writable in the merged metadata until the agent reports it healthy again."
    )
    parser.add_argument("--cluster-id", required=True, help="id of the physical cluster, e.g. c1")
    parser.add_argument("--region", required=True, help="region (federation group) the cluster serves")
    parser.add_argument("--bootstrap", required=True, help="bootstrap servers of the cluster, host:port[,host:port]")
    parser.add_argument("--controller", required=True, help="controller URLs, comma-separated")
    parser.add_argument(
        "--token-file",
        type=Path,
        help="file with the admin token, when the controllers require one (agents report for their cluster)",
    )
    parser.add_argument("--tls-ca", type=Path, help="CA bundle to verify the controllers' HTTPS certificates")
    parser.add_argument("--heartbeat-ms", type=positive_int, default=500, help="beat interval (default 500)")
    parser.add_argument(
        "--probe-timeout-ms",
        type=positive_int,
        default=1000,
        help="a metadata request slower than this counts as a failed probe (default 1000)",
    )
    parser.add_argument(
        "--probe-failures",
        type=positive_int,
        default=2,
        help="failed probes in a row before the cluster is reported unhealthy and fenced (default 2)",
    )
    parser.add_argument(
        "--replication-factor",
        type=int,
        default=-1,
        help="replication factor of the physical topics it creates (default -1: the broker's default)",
    )


def run(args: argparse.Namespace) -> int:
    """Run the agent until SIGTERM or Ctrl-C; a name or bootstrap list that cannot be used raises ``ConfigError``."""
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
