"""``kfed quorum``: inspect the controller quorum and change its voters over the HTTP API."""

from __future__ import annotations

import argparse
from typing import TextIO

from metadata_client.client import ControllerClient

from . import ops

_HELP = """\
Replace a controller node without downtime, one change at a time:
  1. start the new node with a config listing the current voters and itself, and the quorum's secrets:
       kfed controller --config new.toml --node-id 4 --data-dir /var/lib/kfed/4 --join \\
         --raft-secret-file /etc/kfed/raft.secret --admin-token-file /etc/kfed/admin.token
  2. kfed quorum add-voter --id 4 --raft 10.0.0.4:9101 --http http://10.0.0.4:8001
  3. kfed quorum remove-voter --id 1   (then stop node 1)
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Fill the ``kfed quorum`` parser: one subcommand per action."""
    client = ops.controller_flags()
    actions = ops.actions(parser, _HELP, "quorum_command")
    status = actions.add_parser("status", parents=[client], help="voters, roles, leader and applied offsets")
    status.set_defaults(func=quorum_status)
    add = actions.add_parser(
        "add-voter", parents=[client], help="add a started node as a voter", epilog=_HELP, formatter_class=ops.RAW
    )
    add.add_argument("--id", type=int, required=True, dest="voter_id")
    add.add_argument("--raft", required=True, help="its Raft address host:port")
    add.add_argument("--http", required=True, help="its HTTP URL")
    add.set_defaults(func=quorum_add_voter)
    remove = actions.add_parser(
        "remove-voter", parents=[client], help="remove a voter", epilog=_HELP, formatter_class=ops.RAW
    )
    remove.add_argument("--id", type=int, required=True, dest="voter_id")
    remove.set_defaults(func=quorum_remove_voter)


run = ops.run
"""Run the ``kfed quorum`` action of ``args``."""


def quorum_status(client: ControllerClient, args: argparse.Namespace, out: TextIO) -> int:
    q = client.get("/v1/quorum")
    rows = [["ID", "ROLE", "RAFT", "HTTP", "APPLIED"]]
    for v in q["voters"]:
        rows.append([str(v["id"]), str(v.get("role")), v["raft"], v["http"], str(v.get("applied_offset"))])
    ops.table(rows, out)
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
