"""Consumer groups: the quorum leader coordinates them. Members join, renew and leave through the leader;
every node answers who coordinates a group and the generation the log holds."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from metadata_log.commands import check_name
from metadata_log.errors import NotFound, Unavailable

from .bodies import GroupHeartbeat, GroupLeave
from .deps import Service
from .encoding import respond
from .routing import Router

router = Router(prefix="/v1/groups", tags=["groups"])


@router.get("/{group}/coordinator", summary="The group's coordinator (the quorum leader)")
async def group_coordinator(request: Request, service: Service, group: str) -> Response:
    check_name(group, "group")
    leader = service.leader()
    if leader is None:
        raise Unavailable("no leader elected yet", retry_after_s=1.0)
    recorded = service.read_model.image.groups.get(group)
    return respond(
        request,
        {
            "group": group,
            "coordinator_id": leader.id,
            "http": leader.http,
            "recorded_coordinator_id": recorded.coordinator_id if recorded else None,
        },
    )


@router.leader(
    "POST", "/{group}/heartbeat", summary="Join or renew a group member; its assignment and what it may start"
)
async def group_heartbeat(request: Request, service: Service, group: str, body: GroupHeartbeat) -> Response:
    check_name(group, "group")
    owned = [(t, p) for t, p in body.owned]
    return respond(
        request,
        await service.group_heartbeat(
            group,
            body.member_id,
            body.topics,
            owned,
            body.session_timeout_ms,
            body.metadata_offset,
            body.committed,
            body.give_up,
        ),
    )


@router.leader("POST", "/{group}/leave", summary="Leave a group (its partitions go to the other members)")
async def group_leave(request: Request, service: Service, group: str, body: GroupLeave) -> Response:
    return respond(request, await service.group_leave(group, body.member_id))


@router.get("/{group}", summary="A group's generation and assignment (from the log)")
async def get_group(request: Request, service: Service, group: str) -> Response:
    image = service.read_model.image
    g = image.groups.get(group)
    if g is None:
        raise NotFound(f"group {group!r} has never had a member")
    members = [{"member_id": m.member_id, "assignment": [list(tp) for tp in m.assignment]} for m in g.members]
    return respond(
        request,
        {
            "group": group,
            "generation": g.generation,
            "coordinator_id": g.coordinator_id,
            "members": members,
            "offset": image.offset,
        },
    )
