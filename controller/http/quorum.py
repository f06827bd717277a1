"""The quorum: this node's Raft status, every voter's as this node sees it, and voter membership changes."""

from __future__ import annotations

import asyncio
from typing import Any
from urllib.parse import urlparse

from fastapi import Request
from starlette.responses import Response

from metadata_log import commands
from metadata_log.errors import Conflict, InvalidRequest
from metadata_log.records import LATEST_METADATA_VERSION

from ..service import ControllerService
from .bodies import AddVoter
from .deps import PeerAccess, Service
from .encoding import respond
from .routing import Router

JOIN_CHECK_TIMEOUT_S = 2.0
"""How long adding a voter waits for the new node to answer as itself."""

router = Router(prefix="/v1", tags=["quorum"])


def node_status(service: ControllerService) -> dict[str, Any]:
    """This node's own status, as ``GET /v1/node`` answers it."""
    status = service.raft.status()
    leader = service.leader()
    return {
        "id": service.node_id,
        "role": status.role,
        "term": status.term,
        "leader_id": leader.id if leader else None,
        "applied_offset": service.read_model.image.offset,
        "high_watermark": service.read_model.high_watermark,
        "metadata_version": service.read_model.image.metadata_version,
        "reads_metadata_up_to": LATEST_METADATA_VERSION,
    }


@router.get("/node", summary="This node's own Raft status")
async def node(request: Request, service: Service) -> Response:
    return respond(request, node_status(service))


@router.get("/quorum", summary="Voters, their roles and applied offsets, and the leader")
async def quorum(request: Request, service: Service, peers: PeerAccess) -> Response:
    me = node_status(service)
    current = service.voters()
    others = [v for v in current.voters if v.id != service.node_id]
    answers = await asyncio.gather(*(peers.node_status(v.http) for v in others))
    by_id = {service.node_id: me} | {v.id: a for v, a in zip(others, answers, strict=True) if a}
    voters = []
    for v in current.voters:
        seen = by_id.get(v.id)
        voters.append(
            {
                "id": v.id,
                "raft": v.raft,
                "http": v.http,
                "role": seen["role"] if seen else "unreachable",
                "term": seen["term"] if seen else None,
                "applied_offset": seen["applied_offset"] if seen else None,
            }
        )
    high_watermark = max(s["high_watermark"] for s in by_id.values())
    return respond(
        request, {"leader_id": me["leader_id"], "term": me["term"], "voters": voters, "high_watermark": high_watermark}
    )


@router.leader("POST", "/quorum/voters", summary="Add a started node (kfed controller --join) as a voter")
async def add_voter(request: Request, service: Service, peers: PeerAccess, body: AddVoter) -> Response:
    raft = commands.check_bootstrap(body.raft, "raft")
    if "," in raft:
        raise InvalidRequest("raft", "raft must be one 'host:port'")
    url = urlparse(body.http)
    if url.scheme not in ("http", "https") or not url.netloc:
        raise InvalidRequest("http", "http must be an http(s) URL")
    http = body.http.rstrip("/")
    # A voter that is not running would cost the quorum its majority margin (or, for a small quorum,
    # its majority): only a started node that answers as that id is added.
    seen = await peers.node_status(http, JOIN_CHECK_TIMEOUT_S)
    if seen is None or seen.get("id") != body.id:
        raise Conflict(
            f"no kfed controller with id {body.id} answers at {http}; start it with --join first", field="http"
        )
    reads_up_to = seen.get("reads_metadata_up_to")
    reads_up_to = reads_up_to if type(reads_up_to) is int else 1  # an older node does not say: version 1
    return respond(request, await service.add_voter(body.id, raft, http, reads_up_to))


@router.leader("DELETE", "/quorum/voters/{voter_id}", summary="Remove a voter (the leader hands over leadership first)")
async def remove_voter(request: Request, service: Service, voter_id: int) -> Response:
    return respond(request, await service.remove_voter(voter_id))
