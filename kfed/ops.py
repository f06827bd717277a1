"""Operator commands over the HTTP API: ``kfed cluster …``, ``kfed topic …``, ``kfed quorum …``.

Each command is one request to start the operation, then (for the long ones) a live status until it is
done. Every one is safe to re-run: a re-run of a finished step changes nothing and goes on watching.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, Final, TextIO

from metadata_client.access import access_from, add_access_arguments
from metadata_client.client import ControllerClient
from metadata_log.errors import KfedError, NotFound
from metadata_log.records import KEY_ORDERS

DEFAULT_CONTROLLERS: Final = "http://127.0.0.1:8001,http://127.0.0.1:8002,http://127.0.0.1:8003"
POLL_S: Final = 0.5

_CLUSTER_HELP = """\
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

_TOPIC_HELP = """\
Scale up adds partitions on a cluster (no data moves); producers use them at their next metadata
offset. Lossless scale-down retires partitions: they go read_only at once and are removed once every
consumer group reading the topic has committed to their end (or their data expired). A partition
that no group reads keeps its data until retention. Logical partition ids are never reused.
"""

_QUORUM_HELP = """\
Replace a controller node without downtime, one change at a time:
  1. start the new node with a config listing the current voters and itself, and the quorum's secrets:
       kfed controller --config new.toml --node-id 4 --data-dir /var/lib/kfed/4 --join \\
         --raft-secret-file /etc/kfed/raft.secret --admin-token-file /etc/kfed/admin.token
  2. kfed quorum add-voter --id 4 --raft 10.0.0.4:9101 --http http://10.0.0.4:8001
  3. kfed quorum remove-voter --id 1   (then stop node 1)
"""


# -- parsers -----------------------------------------------------------------------------------------
def add_parsers(sub: Any) -> None:
    """Add the ``cluster``, ``topic`` and ``quorum`` commands to the ``kfed`` parser."""
    client = argparse.ArgumentParser(add_help=False)
    client.add_argument(
        "--controller",
        default=DEFAULT_CONTROLLERS,
        help="controller URLs, comma-separated (default: the local federation, 8001-8003)",
    )
    add_access_arguments(client)
    waits = argparse.ArgumentParser(add_help=False)
    waits.add_argument("--no-wait", action="store_true", help="start the operation and return at once")
    waits.add_argument(
        "--timeout-s", type=float, default=0, help="stop watching after this long (default 0: until done)"
    )
    raw = argparse.RawDescriptionHelpFormatter

    cluster = sub.add_parser(
        "cluster", help="add, inspect and decommission physical clusters", epilog=_CLUSTER_HELP, formatter_class=raw
    )
    csub = cluster.add_subparsers(dest="cluster_command", required=True, metavar="ACTION")
    add = csub.add_parser("add", parents=[client], help="register a cluster into a region (scale up)")
    add.add_argument("cluster_id")
    add.add_argument("--region", required=True, help="region (federation group) the cluster serves")
    add.add_argument("--bootstrap", required=True, help="its bootstrap servers, host:port[,host:port]")
    add.set_defaults(func=cluster_add)
    status = csub.add_parser(
        "status", parents=[client], help="state, health (fenced: why, since when) and lease of each cluster"
    )
    status.add_argument("cluster_id", nargs="?")
    status.set_defaults(func=cluster_status)
    dec = csub.add_parser(
        "decommission",
        parents=[client, waits],
        help="retire a cluster losslessly: read_only -> draining -> decommissioned, with drain progress",
        epilog=_CLUSTER_HELP,
        formatter_class=raw,
    )
    dec.add_argument("cluster_id")
    dec.set_defaults(func=cluster_decommission)

    topic = sub.add_parser(
        "topic", help="create, expand (scale up) and shrink (lossless scale-down) logical topics", epilog=_TOPIC_HELP,
        formatter_class=raw,
    )  # fmt: skip
    tsub = topic.add_subparsers(dest="topic_command", required=True, metavar="ACTION")
    create = tsub.add_parser("create", parents=[client], help="create a logical topic over its region's clusters")
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
    key_order = tsub.add_parser(
        "key-order",
        parents=[client],
        help="switch a topic's key order to strict or none (a logged record)",
        description="strict starts a routing epoch over the partitions keys can go to now; records written "
        "before were not stamped and wait for nothing. none stops stamping and holding back.",
    )
    key_order.add_argument("name")
    key_order.add_argument("key_order", choices=KEY_ORDERS)
    key_order.set_defaults(func=topic_key_order)
    show = tsub.add_parser("status", parents=[client], help="a topic's logical partitions and where they live")
    show.add_argument("name")
    show.set_defaults(func=topic_status)
    expand = tsub.add_parser(
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
    shrink = tsub.add_parser(
        "shrink",
        parents=[client, waits],
        help="lossless scale-down: partitions go read_only now, removed once every reading group consumed them",
        epilog=_TOPIC_HELP,
        formatter_class=raw,
    )
    shrink.add_argument("name")
    shrink.add_argument(
        "--partitions", required=True, nargs="+", type=_partition_ids, help="logical partition ids, e.g. 6 7 or 6,7"
    )
    shrink.set_defaults(func=topic_shrink)

    quorum = sub.add_parser(
        "quorum", help="inspect the controller quorum and change its voters", epilog=_QUORUM_HELP, formatter_class=raw
    )
    qsub = quorum.add_subparsers(dest="quorum_command", required=True, metavar="ACTION")
    qstatus = qsub.add_parser("status", parents=[client], help="voters, roles, leader and applied offsets")
    qstatus.set_defaults(func=quorum_status)
    addv = qsub.add_parser(
        "add-voter", parents=[client], help="add a started node as a voter", epilog=_QUORUM_HELP, formatter_class=raw
    )
    addv.add_argument("--id", type=int, required=True, dest="voter_id")
    addv.add_argument("--raft", required=True, help="its Raft address host:port")
    addv.add_argument("--http", required=True, help="its HTTP URL")
    addv.set_defaults(func=quorum_add_voter)
    remv = qsub.add_parser(
        "remove-voter", parents=[client], help="remove a voter", epilog=_QUORUM_HELP, formatter_class=raw
    )
    remv.add_argument("--id", type=int, required=True, dest="voter_id")
    remv.set_defaults(func=quorum_remove_voter)


def run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """Run an operator command; a refused request prints the controller's reason and exits 1."""
    with ControllerClient(args.controller, access=access_from(args)) as client:
        try:
            result: int = args.func(client, args, out or sys.stdout)
            return result
        except KfedError as e:
            print(f"kfed: {e.detail}", file=sys.stderr)
            return 1
        except KeyboardInterrupt:
            print(
                "\nkfed: stopped watching; the operation goes on. Re-run the command to watch again.", file=sys.stderr
            )
            return 130


# -- clusters ----------------------------------------------------------------------------------------
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
            [c["cluster_id"], c["region"], c["state"], health, lease_text, str(counts.get(c["cluster_id"], 0)),
             c["bootstrap_servers"]]
        )  # fmt: skip
    _table(rows, out)
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
        show(_drain_line(f"{args.cluster_id} {cluster['state']}", rows))
        return False

    return _watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.cluster_id} decommissioned: consumers dropped it; its agent deletes its physical topics",
        not_yet=f"{args.cluster_id} is not decommissioned yet",
    )


# -- topics ------------------------------------------------------------------------------------------
def topic_create(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    body = {
        "name": args.name,
        "region": args.region,
        "partitions_per_cluster": args.partitions_per_cluster,
        "retention_ms": args.retention_ms,
        "key_order": args.key_order,
    }
    reply = client.post("/v1/topics", body)
    print(f"topic {reply['name']}: {len(reply['partitions'])} partitions, key order {reply['key_order']}", file=out)
    return 0


def topic_key_order(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    reply = client.put(f"/v1/topics/{args.name}/key_order", {"key_order": args.key_order})
    epoch = f", epoch {reply['key_epoch']}" if reply["key_order"] == "strict" else ""
    print(f"topic {reply['name']}: key order {reply['key_order']}{epoch}", file=out)
    return 0


def topic_status(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    topic = client.get(f"/v1/topics/{args.name}")
    rows = [["PARTITION", "CLUSTER", "PHYSICAL", "STATE", "WRITABLE", "LEADER"]]
    for p in topic["partitions"]:
        rows.append(
            [str(p["partition"]), p["cluster_id"], f"{p['physical_topic']}/{p['physical_partition']}", p["state"],
             "yes" if p["writable"] else "no", p["leader"] or "-"]
        )  # fmt: skip
    _table(rows, out)
    if topic.get("key_order") == "strict":
        pending = ", ".join(f"P{p}" for p in topic["pending_seals"]) or "none"
        print(f"key order strict: epoch {topic['key_epoch']} ({topic['key_epoch_cause']}), "
              f"{len(topic['key_ranges'])} key ranges, seals pending: {pending}", file=out)  # fmt: skip
    return 0


def topic_expand(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    def live_on_cluster(topic: dict[str, Any]) -> list[int]:
        return [
            p["partition"] for p in topic["partitions"] if p["cluster_id"] == args.cluster and p["state"] != "removed"
        ]

    topic = client.get(f"/v1/topics/{args.name}")
    live = live_on_cluster(topic)
    missing = args.partitions - len(live)
    if missing > 0:
        body: dict[str, Any] = {"cluster_id": args.cluster, "count": missing}
        if args.physical_topic:
            body["physical_topic"] = args.physical_topic
        topic = client.post(f"/v1/topics/{args.name}/partitions", body)
        print(f"{args.name}: added {missing} partition(s) on {args.cluster}", file=out)
    else:
        print(f"{args.name} already has {len(live)} live partition(s) on {args.cluster}", file=out)
    wanted = live_on_cluster(topic)
    if args.no_wait:
        return 0

    def step(show: Callable[[str], None]) -> bool:
        now = client.get(f"/v1/topics/{args.name}")["partitions"]
        ready = [p["partition"] for p in now if p["partition"] in wanted and p["leader"]]
        show(f"{args.name} on {args.cluster}: {len(ready)}/{len(wanted)} partitions created by the agent")
        return len(ready) == len(wanted)

    return _watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.name}: partitions {_partition_names(wanted)} live on {args.cluster}; producers use them now",
        not_yet=f"the agent of {args.cluster} has not created them all yet",
    )


def topic_shrink(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    partitions = sorted({p for group in args.partitions for p in group})
    topic = client.post(f"/v1/topics/{args.name}/shrink", {"partitions": partitions})
    states = {p["partition"]: p["state"] for p in topic["partitions"]}
    print(f"{args.name}: partitions {_partition_names(partitions)} read_only (producers stop writing there)", file=out)
    if args.no_wait:
        return 0

    def step(show: Callable[[str], None]) -> bool:
        now = client.get(f"/v1/topics/{args.name}")["partitions"]
        states.update({p["partition"]: p["state"] for p in now})
        left = [p for p in partitions if states[p] != "removed"]
        if not left:
            return True
        rows = [r for r in client.get("/v1/drain", topic=args.name)["partitions"] if r["partition"] in left]
        show(_drain_line(f"{args.name}: {len(partitions) - len(left)}/{len(partitions)} removed", rows))
        return False

    return _watch(
        step,
        args.timeout_s,
        out,
        done=f"{args.name}: partitions {_partition_names(partitions)} removed (their ids are never reused)",
        not_yet=f"{args.name} still has partitions draining",
    )


# -- quorum ------------------------------------------------------------------------------------------
def quorum_status(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    q = client.get("/v1/quorum")
    rows = [["ID", "ROLE", "RAFT", "HTTP", "APPLIED"]]
    for v in q["voters"]:
        rows.append([str(v["id"]), str(v.get("role")), v["raft"], v["http"], str(v.get("applied_offset"))])
    _table(rows, out)
    print(f"leader {q['leader_id']}, high watermark {q['high_watermark']}", file=out)
    return 0


def quorum_add_voter(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    body = {"id": args.voter_id, "raft": args.raft, "http": args.http}
    reply = client.post("/v1/quorum/voters", body)
    print(f"voter {args.voter_id} added: voters {', '.join(str(v['id']) for v in reply['voters'])}", file=out)
    return 0


def quorum_remove_voter(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    reply = client.delete(f"/v1/quorum/voters/{args.voter_id}")
    print(f"voter {args.voter_id} removed: voters {', '.join(str(v['id']) for v in reply['voters'])}", file=out)
    return 0


# -- output helpers ----------------------------------------------------------------------------------
class _Progress:
    """One status line: rewritten in place on a terminal, printed when it changes otherwise."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.tty = out.isatty()
        self.last = ""

    def show(self, line: str) -> None:
        if line == self.last:
            return
        self.last = line
        if self.tty:
            self.out.write("\r\x1b[2K" + line)
        else:
            self.out.write(line + "\n")
        self.out.flush()

    def done(self, line: str) -> None:
        if self.tty and self.last:
            self.out.write("\n")
        if line:
            self.out.write(line + "\n")
        self.out.flush()


def _watch(
    step: Callable[[Callable[[str], None]], bool], timeout_s: float, out: TextIO, done: str, not_yet: str
) -> int:
    """Call ``step`` (which shows a status line) every POLL_S until it returns True, then print ``done``
    and return 0. After ``timeout_s`` (when above 0) say what is ``not_yet`` done and return 3: the
    operation goes on, and re-running the command watches it again."""
    progress = _Progress(out)
    deadline = time.monotonic() + timeout_s if timeout_s > 0 else None
    while not step(progress.show):
        if deadline is not None and time.monotonic() >= deadline:
            progress.done("")
            print(f"kfed: {not_yet}; re-run to keep watching", file=sys.stderr)
            return 3
        time.sleep(POLL_S)
    progress.done(done)
    return 0


def _drain_line(prefix: str, rows: list[dict[str, Any]]) -> str:
    drained = sum(1 for r in rows if r["drained"])
    lags = [r["lag"] for r in rows if r["lag"] is not None]
    line = f"{prefix}; draining {drained}/{len(rows)} drained, lag {sum(lags)}"
    waiting = [r for r in rows if not r["drained"]]
    if waiting:
        worst = max(waiting, key=lambda r: r["lag"] or 0)
        line += f" — {worst['topic']}/{worst['partition']} waits for {worst['waiting_for']}"
    return line


def _table(rows: list[list[str]], out: TextIO) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip(), file=out)


def _partition_names(ids: list[int]) -> str:
    """``P6, P7``: logical partition ids as operators read them."""
    return ", ".join(f"P{i}" for i in ids)


def _when(ms: int | None) -> str:
    if ms is None:
        return "?"
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def positive_int(text: str) -> int:
    """An argparse type: an integer of at least 1."""
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be a positive integer")
    return value


def _partition_ids(text: str) -> list[int]:
    try:
        ids = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a list of partition ids") from None
    if not ids or any(i < 0 for i in ids):
        raise argparse.ArgumentTypeError("partition ids are non-negative integers")
    return ids
