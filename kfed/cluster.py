"""``kfed cluster``: add, inspect and decommission physical clusters over the HTTP API."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TextIO

from metadata_client.client import ControllerClient
from metadata_log.errors import NotFound

from . import ops

_HELP = """\
Scale up: register the new cluster (or start its agent, which registers it), then give topics
partitions on it:
  kfed cluster add c3 --region r1 --bootstrap 10.0.0.3:9092
  kfed topic expand U_TopicA --cluster c3 --partitions 4

Decommission (lossless): the cluster goes read_only (producers stop writing to it, consumers go on
reading) and draining; once every consumer group reading its partitions has committed to their end
(or their data has expired) it is decommissioned, consumers drop it and its agent deletes its physical
topics:
  kfed cluster decommission c2

Failover is automatic: a cluster whose agent stops beating or reports it down is fenced within
seconds and unfenced when healthy; `kfed cluster status` shows why and since when.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed cluster`` parser: one subcommand per action."""
    client = ops.controller_flags()
    actions = ops.actions(parser, _HELP, "cluster_command")
    add = actions.add_parser("add", parents=[client], help="register a cluster into a region (scale up)")
    add.add_argument("cluster_id")
    add.add_argument("--region", required=True, help="region (federation group) the cluster serves")
    add.add_argument("--bootstrap", required=True, help="its bootstrap servers, host:port[,host:port]")
    add.set_defaults(func=cluster_add)
    status = actions.add_parser(
        "status", parents=[client], help="state, health (fenced: why, since when) and lease of each cluster"
    )
    status.add_argument("cluster_id", nargs="?")
    status.set_defaults(func=cluster_status)
    decommission = actions.add_parser(
        "decommission",
        parents=[client, ops.wait_flags()],
        help="retire a cluster losslessly: read_only -> draining -> decommissioned, with drain progress",
        epilog=_HELP,
        formatter_class=ops.RAW,
    )
    decommission.add_argument("cluster_id")
    decommission.set_defaults(func=cluster_decommission)


run = ops.run
"""Run the ``kfed cluster`` action of ``args``."""


def cluster_add(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    body = {"cluster_id": args.cluster_id, "region": args.region, "bootstrap_servers": args.bootstrap}
    reply = client.post("/v1/clusters", body)
    print(f"cluster {reply['cluster_id']} registered in {reply['region']} ({reply['state']})", file=out)
    print(f"next: start its agent, then `kfed topic expand TOPIC --cluster {args.cluster_id} --partitions N`", file=out)
    return 0


def cluster_status(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    metadata = client.get("/v1/metadata")
    leases = {a["cluster_id"]: a for a in client.get("/v1/agents")["agents"]}
    clusters = [c for c in metadata["clusters"] if args.cluster_id in (None, c["cluster_id"])]
    if args.cluster_id is not None and not clusters:
        raise NotFound(f"cluster {args.cluster_id!r} is not registered")
    counts: dict[str, int] = {}
    for topic in metadata["topics"]:
        for p in topic["partitions"]:
            if p["state"] != "removed":
                counts[p["cluster_id"]] = counts.get(p["cluster_id"], 0) + 1
    rows = [["CLUSTER", "REGION", "STATE", "HEALTH", "LEASE", "PARTITIONS", "BOOTSTRAP"]]
    for c in clusters:
        lease = leases.get(c["cluster_id"])
        health = "ok"
        if c["fenced"]:
            health = f"FENCED since {_when(c['fenced_since_ms'])}: {c['fenced_reason']}"
        lease_text = f"{lease['lease_remaining_ms']} ms left" if lease else "no agent"
        rows.append(
            [
                c["cluster_id"],
                c["region"],
                c["state"],
                health,
                lease_text,
                str(counts.get(c["cluster_id"], 0)),
                c["bootstrap_servers"],
            ]
        )
    ops.table(rows, out)
    print(f"metadata offset {metadata['offset']}", file=out)
    return 0


def cluster_decommission(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    reply = client.post(f"/v1/clusters/{args.cluster_id}/decommission")
    print(f"cluster {args.cluster_id} is {reply['state']}", file=out)
    if args.no_wait:
        return 0

    def step(show: Callable[[str], None]) -> bool:
        cluster = client.get(f"/v1/clusters/{args.cluster_id}")
        if cluster["state"] == "decommissioned":
            return True
        rows = client.get("/v1/drain", cluster_id=args.cluster_id)["partitions"]
        show(ops.drain_line(f"{args.cluster_id} {cluster['state']}", rows))
        return False

    return ops.watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.cluster_id} decommissioned: consumers dropped it; its agent deletes its physical topics",
        not_yet=f"{args.cluster_id} is not decommissioned yet",
    )


def _when(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
