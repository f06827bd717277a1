"""Kafka's classic group protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) over the quorum's groups.

A Kafka group member is a member of the quorum-coordinated group of the same name (``controller/groups.py``),
under the same member id: an SDK consumer and a gateway consumer can share a group. The quorum assigns
logical partitions; the clients' own assignors are not used (every member is told another member leads, so
none runs one). A partition goes to a member only when the quorum says no other member still consumes it
(``startable``), so two members never read one partition at the same time:

- **JoinGroup** joins (or renews) the member with its subscription. The gateway picks an eager protocol
  when the member offers one (range, roundrobin, ...): an eager member gives up all its partitions before it
  joins, so it owns nothing then. A member offering only cooperative-sticky keeps the partitions its
  subscription lists as owned.
- **SyncGroup** hands out the member's assignment from the quorum, limited to what it may start. It first
  *claims* those partitions (a heartbeat reporting them owned) and keeps only what the quorum still lets it
  start after the claim: the quorum serves heartbeats one at a time, so two claims never both win.
- **Heartbeat** renews the member in the quorum, reporting what it owns. When its assignment no longer
  holds a partition it owns, or holds one it could now start, the answer is REBALANCE_IN_PROGRESS: the client
  rejoins (giving up its partitions first) and syncs again. A member cut off from the quorum for half its
  session is told the same, so it stops consuming, as an SDK consumer does.

Group state lives in the quorum; what this instance keeps per member (what it handed out) is rebuilt by a
rejoin: a member unknown here (its gateway died) is told to rejoin.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Mapping
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from metadata_log.errors import Conflict, InvalidRequest, KfedError

from . import offsets
from .context import GroupContext, JobHandler
from .holdback import TopicPartition
from .members import Member
from .server import ClientConnection

SESSION_TIMEOUT_MS_MIN: Final = 1_000  # the quorum's bounds (controller/groups.py)
SESSION_TIMEOUT_MS_MAX: Final = 120_000
QUORUM_DEADLINE_S: Final = 3.0
"""How long one group call to the quorum may retry over the controllers."""
LEADER: Final = "kfed-quorum"
"""The leader every member is told of: none of them, so no client runs its own assignor."""
COOPERATIVE: Final = frozenset({"cooperative-sticky"})
MAX_MEMBERS: Final = 100_000
"""Members this instance serves at once (beyond, JoinGroup answers COORDINATOR_NOT_AVAILABLE)."""


async def _beat(ctx: GroupContext, member: Member, owned: Iterable[TopicPartition]) -> dict[str, Any]:
    """One quorum heartbeat of ``member`` reporting ``owned``; a ``KfedError`` when it fails."""
    owned = list(owned)
    fields = ctx.members.key_order.beat_fields(member, owned, ctx.view().image)
    body = {
        "member_id": member.member_id,
        "topics": list(member.topics),
        "owned": [list(tp) for tp in owned],
        "session_timeout_ms": member.session_timeout_ms,
        **fields,
    }
    reply = await ctx.quorum.post(f"/v1/groups/{member.group}/heartbeat", body, QUORUM_DEADLINE_S)
    member.last_quorum_s = time.monotonic()
    return reply


def _error(e: KfedError) -> ErrorCode:
    """The group error a client retries (or gives up on) for a failed quorum call."""
    if isinstance(e, InvalidRequest):
        return ErrorCode.invalid_group_id
    if isinstance(e, Conflict):
        return ErrorCode.group_max_size_reached
    return ErrorCode.coordinator_not_available


def _pick_protocol(protocols: Any) -> tuple[str, kp.Subscription] | None:
    """The protocol to run for a member: its first eager one, else its first; with its subscription."""
    offered = [(p.name, p.metadata) for p in protocols]
    ranked = [p for p in offered if p[0] not in COOPERATIVE] + [p for p in offered if p[0] in COOPERATIVE]
    for name, metadata in ranked:
        try:
            return name, kp.decode_subscription(bytes(metadata))
        except kp.ProtocolError:
            continue
    return None


async def join_group(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    conn.saw("consumer")
    body = request.body
    refused = {
        "generation_id": -1,
        "protocol_name": None,
        "leader": "",
        "member_id": body.member_id or "",
        "members": (),
    }
    if body.protocol_type != "consumer":
        return {**refused, "error_code": ErrorCode.inconsistent_group_protocol}
    picked = _pick_protocol(body.protocols)
    if picked is None:
        return {**refused, "error_code": ErrorCode.inconsistent_group_protocol}
    protocol, subscription = picked
    await ctx.resolve(subscription.topics)  # what its partitions' offsets and key order are read from
    cooperative = protocol in COOPERATIVE
    session_ms = kp.milliseconds(body.session_timeout)
    if not SESSION_TIMEOUT_MS_MIN <= session_ms <= SESSION_TIMEOUT_MS_MAX:
        return {**refused, "error_code": ErrorCode.invalid_session_timeout}
    members = ctx.members
    members.forget_expired()
    if len(members.members) >= MAX_MEMBERS and (body.group_id, body.member_id) not in members.members:
        return {**refused, "error_code": ErrorCode.coordinator_not_available}
    owned = frozenset(subscription.owned) if cooperative else frozenset()
    member = Member(
        body.group_id,
        body.member_id or "",
        tuple(sorted(set(subscription.topics))),
        protocol,
        cooperative,
        session_ms,
        conn.client_id,
        conn.peer_host,
        owned,
        owned,
    )
    try:
        if member.member_id:
            async with members.lock(member.group, member.member_id):
                reply = await _join(ctx, member)
        else:
            reply = await _join(ctx, member)
    except KfedError as e:
        return {**refused, "error_code": _error(e)}
    return {
        "error_code": 0,
        "generation_id": reply["generation"],
        "protocol_type": "consumer",
        "protocol_name": protocol,
        "leader": LEADER,
        "skip_assignment": False,
        "member_id": member.member_id,
        "members": (),
    }


async def _join(ctx: GroupContext, member: Member) -> dict[str, Any]:
    body = {
        "member_id": member.member_id or None,
        "topics": list(member.topics),
        "owned": [list(tp) for tp in member.reported],
        "session_timeout_ms": member.session_timeout_ms,
        "metadata_offset": ctx.view().image.offset,
    }
    reply = await ctx.quorum.post(f"/v1/groups/{member.group}/heartbeat", body, QUORUM_DEADLINE_S)
    member.member_id = str(reply["member_id"])
    member.generation = int(reply["generation"])
    ctx.members.add(member)
    return reply


async def sync_group(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    body = request.body
    answer = {
        "protocol_type": getattr(body, "protocol_type", None) or "consumer",
        "protocol_name": getattr(body, "protocol_name", None),
    }
    member = ctx.members.members.get((body.group_id, body.member_id))
    if member is None:  # joined through another instance (that died?): join again here
        return {**answer, "error_code": ErrorCode.rebalance_in_progress, "assignment": b""}
    answer["protocol_name"] = answer["protocol_name"] or member.protocol
    async with ctx.members.lock(member.group, member.member_id):
        member.last_seen_s = time.monotonic()
        try:
            given = await _claim(ctx, member)
        except KfedError as e:
            return {**answer, "error_code": _error(e), "assignment": b""}
    return {**answer, "error_code": 0, "assignment": kp.encode_assignment(sorted(given))}


async def _claim(ctx: GroupContext, member: Member) -> frozenset[TopicPartition]:
    """The partitions ``member`` may consume now: it keeps what it owns and is still assigned, and gets
    the assigned ones no one else consumes, claimed first (see the module docstring)."""
    reply = await _beat(ctx, member, member.reported)
    assignment = {tuple(tp) for tp in reply["assignment"]}
    candidates = {tuple(tp) for tp in reply["startable"]} - member.given
    keep = {tp for tp in member.given if tp in assignment}
    granted: set[TopicPartition] = set()
    if candidates:
        claimed = member.reported | candidates
        reply = await _beat(ctx, member, claimed)
        granted = candidates & {tuple(tp) for tp in reply["startable"]}
        keep &= {tuple(tp) for tp in reply["assignment"]}
    # a cooperative client gives up what it no longer keeps only after this answer: reported until it rejoins
    member.reported = frozenset((member.given if member.cooperative else set()) | keep | granted)
    member.given = frozenset(keep | granted)
    member.generation = int(reply["generation"])
    if candidates - granted:
        await _beat(ctx, member, member.reported)  # release the claims that lost
    return member.given


async def heartbeat(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    body = request.body
    member = ctx.members.members.get((body.group_id, body.member_id))
    if member is None:
        return {"error_code": ErrorCode.rebalance_in_progress}
    async with ctx.members.lock(member.group, member.member_id):
        member.last_seen_s = time.monotonic()
        try:
            reply = await _beat(ctx, member, member.reported)
        except KfedError:
            cut_off = time.monotonic() - member.last_quorum_s > member.session_timeout_ms / 2000
            return {"error_code": ErrorCode.rebalance_in_progress if cut_off else ErrorCode.none}
    assignment = {tuple(tp) for tp in reply["assignment"]}
    startable = {tuple(tp) for tp in reply["startable"]}
    if not member.given <= assignment or startable - member.given:
        return {"error_code": ErrorCode.rebalance_in_progress}
    return {"error_code": ErrorCode.none}


async def leave_group(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    body = request.body
    leaving = [m.member_id for m in body.members] if hasattr(body, "members") else [body.member_id]
    results = []
    for member_id in leaving:
        ctx.members.drop((body.group_id, member_id))
        try:
            await ctx.quorum.post(f"/v1/groups/{body.group_id}/leave", {"member_id": member_id}, QUORUM_DEADLINE_S)
            code = ErrorCode.none
        except KfedError as e:
            code = _error(e)
        results.append({"member_id": member_id, "group_instance_id": None, "error_code": code})
    error = results[0]["error_code"] if len(results) == 1 else ErrorCode.none
    return {"error_code": error, "members": results}


# -- operators' views ------------------------------------------------------------------------------
async def describe_groups(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    image = ctx.view().image
    local = ctx.members.members
    described = []
    for group_id in request.body.groups:
        g = image.groups.get(group_id)
        members = []
        for m in g.members if g is not None else ():
            here = local.get((group_id, m.member_id))
            members.append(
                {
                    "member_id": m.member_id,
                    "group_instance_id": None,
                    "client_id": (here.client_id or "") if here else "",
                    "client_host": here.client_host if here else "",
                    "member_metadata": b"",
                    "member_assignment": kp.encode_assignment(m.assignment),
                }
            )
        state = "Dead" if g is None else "Stable" if members else "Empty"
        described.append(
            {
                "error_code": 0,
                "group_id": group_id,
                "group_state": state,
                "protocol_type": "consumer",
                "protocol_data": "range" if members else "",
                "members": members,
                "authorized_operations": -(2**31),
            }
        )
    return {"throttle_time": 0, "groups": described}


async def list_groups(ctx: GroupContext, conn: ClientConnection, request: kp.Request) -> Any:
    image = ctx.view().image
    wanted = {s.lower() for s in getattr(request.body, "states_filter", ()) or ()}
    listed = []
    for g in sorted(image.groups.values(), key=lambda g: g.group):
        state = "Stable" if g.members else "Empty"
        if not wanted or state.lower() in wanted:
            listed.append({"group_id": g.group, "protocol_type": "consumer", "group_state": state})
    return {"throttle_time": 0, "error_code": 0, "groups": listed}


HANDLERS: Final[Mapping[int, tuple[JobHandler[GroupContext], bool]]] = {
    kp.JOIN_GROUP: (join_group, False),
    kp.SYNC_GROUP: (sync_group, False),
    kp.HEARTBEAT: (heartbeat, False),
    kp.LEAVE_GROUP: (leave_group, False),
    kp.DESCRIBE_GROUPS: (describe_groups, False),
    kp.LIST_GROUPS: (list_groups, False),
    kp.OFFSET_COMMIT: (offsets.offset_commit, False),
    kp.OFFSET_FETCH: (offsets.offset_fetch, False),
}
"""What serves each group API key, and whether it is ordered (see ``KafkaServer``)."""
