"""``kfed local up`` and ``kfed local cluster add``: the embedded local federation (``deploy.local_up``).

``deploy`` is imported only when one of them runs."""

from __future__ import annotations

import argparse
from pathlib import Path

from metadata_client.arguments import positive_int

_UP = (
    "Start the local federation on loopback, its data and logs under --data-dir: 3 controllers "
    "(HTTP 8001-8003, Raft 9101-9103); --clusters sub-clusters c1, c2, ... of --brokers-per-cluster Apache "
    "Kafka brokers in KRaft mode (c1 on 19092, c2 on 29092, ...; their KRaft controllers 100 above) or of one "
    "Tansu broker each (--broker tansu: memory storage, starts in milliseconds); an agent per sub-cluster; a "
    "Kafka gateway on 127.0.0.1:9092 for unmodified Kafka clients; the demo topic U_TopicA (4 partitions per "
    "sub-cluster); and with --spark-workers N, a Spark standalone master and N workers. Every port is checked "
    "before anything starts. A restart on the same --data-dir keeps the quorum's log and the Kafka brokers' "
    "data. Ctrl-C stops everything."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed local`` parser: ``up`` and ``cluster add``."""
    parser.description = "Run a whole federation on this machine for development."
    actions = parser.add_subparsers(dest="local_command", required=True, metavar="ACTION")
    up = actions.add_parser(
        "up",
        help="start 3 controllers, Apache Kafka (or Tansu) sub-clusters with their agents, and a Kafka gateway",
        description=_UP,
    )
    _add_up_arguments(up)
    up.set_defaults(func=_up)
    cluster = actions.add_parser(
        "cluster",
        help="add a sub-cluster to the running `kfed local up`",
        description="Change the running `kfed local up` federation (found through its --data-dir).",
    )
    cluster_actions = cluster.add_subparsers(dest="local_cluster_command", required=True, metavar="ACTION")
    add = cluster_actions.add_parser(
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
    add.set_defaults(func=_cluster_add)


def _add_up_arguments(up: argparse.ArgumentParser) -> None:
    """The flags of ``kfed local up``: where, which ports, and the shape of the federation."""
    up.add_argument("--data-dir", type=Path, default=Path("var/local"), help="default: var/local")
    up.add_argument("--http-base-port", type=positive_int, default=8001, help="default 8001 (8001-8003)")
    up.add_argument("--raft-base-port", type=positive_int, default=9101, help="default 9101 (9101-9103)")
    up.add_argument(
        "--broker",
        choices=["kafka", "tansu"],
        default="kafka",
        help="kafka (default): Apache Kafka brokers (make kafka installs them); tansu: light, memory only",
    )
    up.add_argument("--clusters", type=positive_int, default=2, help="sub-clusters in region r1 (default 2)")
    up.add_argument(
        "--brokers-per-cluster",
        type=positive_int,
        default=1,
        help="Kafka brokers per sub-cluster (default 1; 3 replicates each partition 3 times, min.insync.replicas 2)",
    )
    up.add_argument(
        "--broker-base-port",
        type=positive_int,
        default=19092,
        help="c1's first broker port (default 19092); sub-cluster k listens 10000 * (k - 1) above it",
    )
    up.add_argument("--gateway-port", type=positive_int, default=9092, help="the Kafka gateway's port (default 9092)")
    up.add_argument(
        "--spark-workers",
        type=int,
        default=0,
        metavar="N",
        help="also start a Spark standalone master (spark://127.0.0.1:7077, UI 8080) and N workers of 1 core and "
        "1 GiB each, for `kfed pipeline NAME --master spark://127.0.0.1:7077` (default 0: none)",
    )
    up.add_argument("--spark-master-port", type=positive_int, default=7077, help="default 7077")
    up.add_argument("--spark-ui-port", type=positive_int, default=8080, help="the master's web UI (default 8080)")
    up.add_argument("--once", action="store_true", help="start, wait until everything is up, print, stop")


def run(args: argparse.Namespace) -> int:
    """Run the ``kfed local`` action of ``args``."""
    result: int = args.func(args)
    return result


def _up(args: argparse.Namespace) -> int:
    from deploy.local_up import LocalLayout, local_up

    layout = LocalLayout(
        args.data_dir,
        args.http_base_port,
        args.raft_base_port,
        args.broker,
        args.clusters,
        args.brokers_per_cluster,
        args.broker_base_port,
        args.gateway_port,
        args.spark_workers,
        args.spark_master_port,
        args.spark_ui_port,
    )
    return local_up(layout, once=args.once)


def _cluster_add(args: argparse.Namespace) -> int:
    from deploy.local_up import cluster_add

    return cluster_add(args.data_dir, args.cluster_id, args.region)
