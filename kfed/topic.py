"""``kfed topic``: create, expand (scale up) and shrink (lossless scale-down) logical topics over the HTTP API."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TextIO

from metadata_client.arguments import positive_int
from metadata_client.client import ControllerClient
from metadata_log.records import KEY_ORDERS

from . import ops

_HELP = """\
Scale up adds partitions on a cluster (no data moves); producers use them at their next metadata
offset. Lossless scale-down retires partitions: they go read_only at once and are removed once every
consumer group reading the topic has committed to their end (or their data expired). A partition
that no group reads keeps its data until retention. Logical partition ids are never reused.
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed topic`` parser: one subcommand per action."""
    client, waits = ops.controller_flags(), ops.wait_flags()
    actions = ops.actions(parser, _HELP, "topic_command")
    create = actions.add_parser("create", parents=[client], help="create a logical topic over its region's clusters")
    create.add_argument("name")
    create.add_argument("--region", required=True)
    create.add_argument("--partitions-per-cluster", type=positive_int, required=True)
    create.add_argument("--retention-ms", type=positive_int, default=None)
    create.add_argument(
        "--key-order",
        choices=KEY_ORDERS,
        default="none",
        help="strict: a key's records are consumed in order across expand, shrink, decommission and a cluster set "
        "read-only (producers stamp a routing epoch, group members hold moved keys back; docs/KEY_ORDER.md). "
        "none (default): keys move when the writable partitions change",
    )
    create.set_defaults(func=topic_create)
    key_order = actions.add_parser(
        "key-order",
        parents=[client],
        help="switch a topic's key order to strict or none (a logged record)",
        description="strict starts a routing epoch over the partitions keys can go to now; records written "
        "before were not stamped and wait for nothing. none stops stamping and holding back.",
    )
    key_order.add_argument("name")
    key_order.add_argument("key_order", choices=KEY_ORDERS)
    key_order.set_defaults(func=topic_key_order)
    status = actions.add_parser("status", parents=[client], help="a topic's logical partitions and where they live")
    status.add_argument("name")
    status.set_defaults(func=topic_status)
    expand = actions.add_parser(
        "expand",
        parents=[client, waits],
        help="scale up: make the topic hold N live partitions on a cluster (adds only the missing ones)",
        description="Add logical partitions on CLUSTER until the topic has N partitions there that are not "
        "removed, then wait until the cluster's agent has created them. Re-running changes nothing.",
    )
    expand.add_argument("name")
    expand.add_argument("--cluster", required=True, help="the cluster that takes the new partitions")
    expand.add_argument("--partitions", type=positive_int, required=True, help="live partitions wanted there")
    expand.add_argument("--physical-topic", default=None, help="physical topic name (default: the logical name)")
    expand.set_defaults(func=topic_expand)
    shrink = actions.add_parser(
        "shrink",
        parents=[client, waits],
        help="lossless scale-down: partitions go read_only now, removed once every reading group consumed them",
        epilog=_HELP,
        formatter_class=ops.RAW,
    )
    shrink.add_argument("name")
    shrink.add_argument(
        "--partitions", required=True, nargs="+", type=_partition_ids, help="logical partition ids, e.g. 6 7 or 6,7"
    )
    shrink.set_defaults(func=topic_shrink)


run = ops.run
"""Run the ``kfed topic`` action of ``args``."""


def topic_create(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    body = {
        "name": args.name,
        "region": args.region,
        "partitions_per_cluster": args.partitions_per_cluster,
        "retention_ms": args.retention_ms,
        "key_order": args.key_order,
    }
    reply = client.post("/v1/topics", body)
    print(f"topic {reply['name']}: {reply['partition_count']} partitions, key order {reply['key_order']}", file=out)
    return 0


def topic_key_order(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    reply = client.put(f"/v1/topics/{args.name}/key_order", {"key_order": args.key_order})
    epoch = f", epoch {reply['key_epoch']}" if reply["key_order"] == "strict" else ""
    print(f"topic {reply['name']}: key order {reply['key_order']}{epoch}", file=out)
    return 0


def topic_status(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    topic = client.topic(args.name)
    rows = [["PARTITION", "CLUSTER", "PHYSICAL", "STATE", "WRITABLE", "LEADER"]]
    for p in topic["partitions"]:
        rows.append(
            [
                str(p["partition"]),
                p["cluster_id"],
                f"{p['physical_topic']}/{p['physical_partition']}",
                p["state"],
                "yes" if p["writable"] else "no",
                p["leader"] or "-",
            ]
        )
    ops.table(rows, out)
    if topic.get("key_order") == "strict":
        pending = ", ".join(f"P{p}" for p in topic["pending_seals"]) or "none"
        print(
            f"key order strict: epoch {topic['key_epoch']} ({topic['key_epoch_cause']}), "
            f"{len(topic['key_ranges'])} key ranges, seals pending: {pending}",
            file=out,
        )
    return 0


def topic_expand(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    def live_on_cluster(topic: dict[str, Any]) -> list[int]:
        return [
            p["partition"] for p in topic["partitions"] if p["cluster_id"] == args.cluster and p["state"] != "removed"
        ]

    topic = client.topic(args.name)
    live = live_on_cluster(topic)
    missing = args.partitions - len(live)
    if missing > 0:
        body: dict[str, Any] = {"cluster_id": args.cluster, "count": missing}
        if args.physical_topic:
            body["physical_topic"] = args.physical_topic
        client.post(f"/v1/topics/{args.name}/partitions", body)
        topic = client.topic(args.name)
        print(f"{args.name}: added {missing} partition(s) on {args.cluster}", file=out)
    else:
        print(f"{args.name} already has {len(live)} live partition(s) on {args.cluster}", file=out)
    wanted = live_on_cluster(topic)
    if args.no_wait:
        return 0

    def step(show: Callable[[str], None]) -> bool:
        now = client.topic(args.name)["partitions"]
        ready = [p["partition"] for p in now if p["partition"] in wanted and p["leader"]]
        show(f"{args.name} on {args.cluster}: {len(ready)}/{len(wanted)} partitions created by the agent")
        return len(ready) == len(wanted)

    return ops.watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.name}: partitions {_partition_names(wanted)} live on {args.cluster}; producers use them now",
        not_yet=f"the agent of {args.cluster} has not created them all yet",
    )


def topic_shrink(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    partitions = sorted({p for group in args.partitions for p in group})
    client.post(f"/v1/topics/{args.name}/shrink", {"partitions": partitions})
    states = {p["partition"]: p["state"] for p in client.topic(args.name)["partitions"]}
    print(f"{args.name}: partitions {_partition_names(partitions)} read_only (producers stop writing there)", file=out)
    if args.no_wait:
        return 0

    def step(show: Callable[[str], None]) -> bool:
        now = client.topic(args.name)["partitions"]
        states.update({p["partition"]: p["state"] for p in now})
        left = [p for p in partitions if states[p] != "removed"]
        if not left:
            return True
        rows = [r for r in client.get("/v1/drain", topic=args.name)["partitions"] if r["partition"] in left]
        show(ops.drain_line(f"{args.name}: {len(partitions) - len(left)}/{len(partitions)} removed", rows))
        return False

    return ops.watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.name}: partitions {_partition_names(partitions)} removed (their ids are never reused)",
        not_yet=f"{args.name} still has partitions draining",
    )


def _partition_names(ids: list[int]) -> str:
    """``P6, P7``: logical partition ids as operators read them."""
    return ", ".join(f"P{i}" for i in ids)


def _partition_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of partition ids") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError("partition ids are non-negative integers")
    return ids
