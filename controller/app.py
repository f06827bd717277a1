"""The HTTP API of one controller node (FastAPI). Routes parse, delegate to the service, and encode.

JSON by default, msgpack with ``Accept: application/msgpack``; errors are problem+json (``problems.py``).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Annotated, Any, Final, Literal
from urllib.parse import urlparse

import httpx
import orjson
from fastapi import APIRouter, Body, FastAPI, Header, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from metadata_log import commands
from metadata_log.codec import pack
from metadata_log.commands import check_name
from metadata_log.errors import (
    Conflict,
    Gone,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    TooManyRequests,
    Unavailable,
)
from metadata_log.image import MetadataImage
from metadata_log.raft import STALL_GUARD_MS
from metadata_log.records import LATEST_METADATA_VERSION
from metadata_log.views import cluster_view, metadata_view, topic_view

from . import auth, dashboard, gateways, metrics, problems
from .drain import PartitionDrain
from .groups import SESSION_TIMEOUT_MS_DEFAULT, SESSION_TIMEOUT_MS_MAX, SESSION_TIMEOUT_MS_MIN
from .hotpath import MSGPACK, HotRoute, HotWrites, LeaderForwarder, WritePlan, commit, encode, write_response
from .service import ControllerService

MAX_REQUEST_BYTES: Final = 1024 * 1024
LOG_LIMIT_DEFAULT: Final = 1000
LOG_LIMIT_MAX: Final = 10_000
WAIT_MS_MAX: Final = 30_000
MIN_OFFSET_WAIT_S: Final = 5.0
SSE_KEEPALIVE_S: Final = 15.0
SSE_MAX_SUBSCRIBERS: Final = 2000
SSE_MAX_PER_CLIENT: Final = 64  # open streams per client address; a dashboard or a tailer needs one
INT64_MAX: Final = 2**63 - 1  # offsets and times: what Kafka and msgpack carry
INT32_MAX: Final = 2**31 - 1  # Kafka partition ids


IdemKey = Annotated[
    str | None,
    Header(
        alias="Idempotency-Key",
        description="Retry-safe write key: a retry with the same key returns the "
        "first outcome and commits nothing new.",
    ),
]


# -- request bodies (unknown fields are refused) ---------------------------------------------------
class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RegisterCluster(_Strict):
    cluster_id: str = Field(description="Unique id of the physical cluster, e.g. 'c1'.")
    region: str = Field(description="Federation group the cluster serves; topics of a region spread over its clusters.")
    bootstrap_servers: str = Field(description="Kafka bootstrap list, 'host:port[,host:port...]'.")


class ChangeState(_Strict):
    state: str = Field(description="Target state.")


class CreateTopic(_Strict):
    name: str = Field(description="Logical topic name.")
    region: str = Field(description="Region whose active clusters take the partitions.")
    partitions_per_cluster: int = Field(le=INT32_MAX, description="Logical partitions placed on each active cluster.")
    physical_topic: str | None = Field(None, description="Physical topic name; defaults to the logical name.")
    retention_ms: int | None = Field(None, le=INT64_MAX, description="Retention of the data (used by drain decisions).")


class AddPartitions(_Strict):
    cluster_id: str = Field(description="Cluster that takes the new partitions.")
    count: int = Field(le=INT32_MAX, description="How many logical partitions to add.")
    physical_topic: str | None = Field(None, description="Physical topic name; defaults to the logical name.")


class ShrinkPartitions(_Strict):
    partitions: list[Annotated[int, Field(ge=0, le=INT32_MAX)]] = Field(
        min_length=1,
        max_length=100_000,
        description="Logical partition ids to retire (read_only now, removed once drained).",
    )


class AddVoter(_Strict):
    id: int = Field(ge=0, le=INT32_MAX, description="The new node's id (its --node-id).")
    raft: str = Field(description="Its Raft address, 'host:port'.")
    http: str = Field(description="Its HTTP base URL.")


class DrainedPartition(_Strict):
    physical_topic: str
    physical_partition: int = Field(ge=0, le=INT32_MAX)
    start: int = Field(ge=0, le=INT64_MAX, description="First offset the cluster still holds.")
    end: int = Field(ge=0, le=INT64_MAX, description="Next offset to be written (the high watermark).")
    committed: dict[str, Annotated[int, Field(ge=-1, le=INT64_MAX)]] = Field(
        default_factory=dict, max_length=10_000, description="Committed offset per consumer group with a commit here."
    )


class DrainReport(_Strict):
    partitions: list[DrainedPartition] = Field(max_length=100_000)


class Heartbeat(_Strict):
    applied_offset: int = Field(-1, ge=-1, le=INT64_MAX, description="Last metadata offset the agent has applied.")
    healthy: bool = Field(True, description="False when the agent's probe of its cluster failed.")
    reason: str | None = Field(None, max_length=500, description="Why the cluster is unhealthy.")


class ReportedPartition(_Strict):
    physical_topic: str
    physical_partition: int = Field(ge=0, le=INT32_MAX)
    leader: str | None = Field(description="Leader endpoint 'host:port', or null when there is none.")


class PartitionReport(_Strict):
    partitions: list[ReportedPartition] = Field(max_length=100_000)


class GroupHeartbeat(_Strict):
    member_id: str | None = Field(None, max_length=200, description="Null to join; then the id returned.")
    topics: list[str] = Field(max_length=100, description="Logical topics the member subscribes to.")
    owned: list[tuple[str, int]] = Field(
        default_factory=list, max_length=100_000, description="Logical partitions the member consumes right now."
    )
    session_timeout_ms: int = Field(
        SESSION_TIMEOUT_MS_DEFAULT, ge=SESSION_TIMEOUT_MS_MIN, le=SESSION_TIMEOUT_MS_MAX,
        description="The member is dropped (and stops consuming) after this long without a heartbeat.",
    )  # fmt: skip


class GroupLeave(_Strict):
    member_id: str = Field(max_length=200)


# -- encoding --------------------------------------------------------------------------------------
def wants_msgpack(request: Request) -> bool:
    return MSGPACK in request.headers.get("accept", "")


def respond(request: Request, body: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return encode(body, wants_msgpack(request), status, headers)


# -- what each write commits (shared by the FastAPI routes and the hot path) ------------------------
def register_cluster_plan(body: RegisterCluster) -> WritePlan:
    return WritePlan(
        lambda image: commands.register_cluster(image, body.cluster_id, body.region, body.bootstrap_servers),
        lambda image: _render_cluster(image, body.cluster_id),
    )


def cluster_state_plan(cluster_id: str, body: ChangeState) -> WritePlan:
    return WritePlan(
        lambda image: commands.change_cluster_state(image, cluster_id, body.state),
        lambda image: _render_cluster(image, cluster_id),
    )


def create_topic_plan(body: CreateTopic) -> WritePlan:
    topic_id = str(uuid.uuid4())
    return WritePlan(
        lambda image: commands.create_topic(
            image,
            body.name,
            body.region,
            body.partitions_per_cluster,
            topic_id,
            body.physical_topic,
            body.retention_ms,
        ),
        lambda image: _render_topic(image, body.name),
    )


def partition_state_plan(name: str, partition: int, body: ChangeState) -> WritePlan:
    return WritePlan(
        lambda image: commands.change_partition_state(image, name, partition, body.state),
        lambda image: _render_topic(image, name),
    )


def report_partitions_plan(cluster_id: str, body: PartitionReport) -> WritePlan:
    entries = [commands.PhysicalPartition(p.physical_topic, p.physical_partition, p.leader) for p in body.partitions]
    return WritePlan(
        lambda image: commands.report_physical_partitions(image, cluster_id, entries),
        lambda image: _render_cluster(image, cluster_id),
    )


HOT_WRITES: Final = [
    HotRoute("PUT", "/v1/topics/{name}/partitions/{partition}/state", ChangeState, partition_state_plan,
             int_params=frozenset({"partition"})),
    HotRoute("PUT", "/v1/clusters/{cluster_id}/state", ChangeState, cluster_state_plan),
    HotRoute("POST", "/v1/clusters", RegisterCluster, register_cluster_plan, status=201),
    HotRoute("POST", "/v1/topics", CreateTopic, create_topic_plan, status=201),
    HotRoute("POST", "/v1/agents/{cluster_id}/partitions", PartitionReport, report_partitions_plan),
]  # fmt: skip
"""The write routes ``HotWrites`` serves on the leader (see ``hotpath.py``); each is also a FastAPI route."""


def build_app(
    service: ControllerService,
    lifespan: Any = None,
    tokens: auth.Tokens = auth.Tokens(),  # noqa: B008 - immutable
    peer_verify: ssl.SSLContext | bool = True,
) -> FastAPI:
    """``tokens``: what requests need (see ``auth``); ``peer_verify``: how this node verifies the other
    voters' HTTPS certificates when it forwards to the leader or asks them for their status."""
    app = FastAPI(
        title="kfed controller",
        version="1",
        summary="Federated Kafka metadata: a Raft-replicated event log, merged metadata and admin writes.",
        lifespan=lifespan,
    )
    problems.install(app)
    auth.document(app, tokens)
    latency = metrics.RequestLatency()
    forwarder = httpx.AsyncClient(timeout=httpx.Timeout(service.commit_timeout_s + 2, connect=1.0), verify=peer_verify)
    to_leader = LeaderForwarder(service, service.commit_timeout_s + 2, peer_verify)
    # The node's own token for its status calls to the other voters (forwarded requests carry the caller's).
    own_token = tokens.admin or tokens.read
    peer_headers = {"Authorization": f"Bearer {own_token}"} if own_token else {}
    sse_subscribers = 0
    sse_by_client: collections.Counter[str] = collections.Counter()
    full_view = _RenderedView()

    # Starlette wraps the last added outermost: requests meet the limits, then the token check, then the hot path.
    app.add_middleware(HotWrites, service=service, routes=HOT_WRITES, to_leader=to_leader)
    if tokens.enabled:  # an open node pays nothing per request
        app.add_middleware(auth.Authorize, tokens=tokens)
    app.add_middleware(_MeasureAndLimit, latency=latency)  # added last: outermost, so refusals are measured too

    async def forward_to_leader(request: Request) -> Response | None:
        """A leader-only request (a write, a lease, a group call) on a follower is sent on to the leader;
        returns None when this node leads."""
        if service.is_leader():
            return None
        # the path as received (still percent-encoded): a decoded one may not even be a valid URL
        path = request.scope.get("raw_path", b"").decode("latin-1") or request.url.path
        return await to_leader(request.method, path, request.url.query, request.headers, await request.body())

    def leader_only(route: Callable[..., Awaitable[Response]]) -> Callable[..., Awaitable[Response]]:
        """Serve ``route`` on the leader only: on a follower the request is forwarded to the leader."""

        @functools.wraps(route)  # FastAPI reads the route's parameters through __wrapped__
        async def on_leader(request: Request, **params: Any) -> Response:
            forwarded = await forward_to_leader(request)
            return forwarded if forwarded is not None else await route(request, **params)

        return on_leader

    async def do_write(request: Request, key: str | None, plan: WritePlan, status: int = 200) -> Response:
        forwarded = await forward_to_leader(request)
        if forwarded is not None:
            return forwarded
        reply = await commit(service, plan, key, request.method, request.url.path, await request.body())
        return write_response(reply, wants_msgpack(request), status)

    v1 = APIRouter(prefix="/v1")

    # -- reads -------------------------------------------------------------------------------------
    @v1.get("/node", summary="This node's own Raft status")
    async def node(request: Request) -> Response:
        return respond(request, node_status())

    def node_status() -> dict[str, Any]:
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

    async def node_status_of(voter_http: str, timeout: float = 0.5) -> dict[str, Any] | None:
        """Another node's ``/v1/node``; None when it does not answer it."""
        try:
            r = await forwarder.get(voter_http + "/v1/node", timeout=timeout, headers=peer_headers)
            answer = r.json() if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        return answer if isinstance(answer, dict) else None

    service.node_status_of = node_status_of

    @v1.get("/quorum", summary="Voters, their roles and applied offsets, and the leader")
    async def quorum(request: Request) -> Response:
        me = node_status()

        current = service.voters()
        others = [v for v in current.voters if v.id != service.node_id]
        answers = await asyncio.gather(*(node_status_of(v.http) for v in others))
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
            request,
            {"leader_id": me["leader_id"], "term": me["term"], "voters": voters, "high_watermark": high_watermark},
        )

    @v1.get("/metadata", summary="Merged metadata (clusters and logical topics) at this node's offset")
    async def metadata(
        request: Request,
        topic: Annotated[str | None, Query(description="Only this logical topic.")] = None,
        min_offset: Annotated[
            int | None, Query(ge=-1, le=INT64_MAX, description="Wait until this offset is applied.")
        ] = None,
    ) -> Response:
        image = await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
        if topic is not None:
            if topic not in image.topics:
                raise NotFound(f"topic {topic!r} does not exist", offset=image.offset)
            return respond(request, metadata_view(image, topic))
        encoding = MSGPACK if wants_msgpack(request) else "application/json"
        return Response(await full_view.get(image, encoding), media_type=encoding)

    @v1.get("/clusters", summary="Registered clusters")
    async def list_clusters(request: Request) -> Response:
        image = service.read_model.image
        clusters = [cluster_view(c) for _, c in sorted(image.clusters.items())]
        return respond(request, {"offset": image.offset, "clusters": clusters})

    @v1.get("/clusters/{cluster_id}", summary="One cluster")
    async def get_cluster(request: Request, cluster_id: str) -> Response:
        image = service.read_model.image
        cluster = image.clusters.get(cluster_id)
        if cluster is None:
            raise NotFound(f"cluster {cluster_id!r} is not registered")
        return respond(request, {**cluster_view(cluster), "offset": image.offset})

    @v1.get("/topics/{name}", summary="One logical topic with its partitions")
    async def get_topic(request: Request, name: str) -> Response:
        image = service.read_model.image
        topic = image.topics.get(name)
        if topic is None:
            raise NotFound(f"topic {name!r} does not exist")
        return respond(request, {**topic_view(image, topic), "offset": image.offset})

    @v1.get("/log", summary="Records from an offset (long-poll with wait_ms); 410 below the retention window")
    async def read_log(
        request: Request,
        offset: Annotated[int, Query(ge=0, le=INT64_MAX, description="First offset wanted.")],
        limit: Annotated[int, Query(ge=1, le=LOG_LIMIT_MAX, description="Most records returned.")] = LOG_LIMIT_DEFAULT,
        wait_ms: Annotated[
            int, Query(ge=0, le=WAIT_MS_MAX, description="Wait this long when there is nothing yet.")
        ] = 0,
    ) -> Response:
        rm = service.read_model
        rm.read(offset, 1)  # 410 now, before waiting, when below the window
        if wait_ms and rm.high_watermark <= offset:
            await rm.wait_beyond(offset, wait_ms / 1000)
        page = rm.read(offset, limit)
        if wants_msgpack(request):
            body = pack(
                {
                    "records": [e.as_dict() for e in page.entries],
                    "next_offset": page.next_offset,
                    "high_watermark": page.high_watermark,
                    "log_start_offset": page.log_start_offset,
                }
            )
            return Response(body, media_type=MSGPACK)
        body = (
            b'{"records":['
            + b",".join(e.json for e in page.entries)
            + b"],"
            + orjson.dumps(
                {
                    "next_offset": page.next_offset,
                    "high_watermark": page.high_watermark,
                    "log_start_offset": page.log_start_offset,
                }
            )[1:]
        )
        return Response(body, media_type="application/json")

    @v1.get("/log/stream", summary="Server-Sent Events, one per record, id = offset; resume with Last-Event-ID")
    async def stream_log(
        request: Request,
        offset: Annotated[
            int | None, Query(ge=0, le=INT64_MAX, description="First offset wanted (default: the next one).")
        ] = None,
        last_event_id: Annotated[str | None, Header(alias="Last-Event-ID")] = None,
    ) -> Response:
        nonlocal sse_subscribers
        rm = service.read_model
        if last_event_id is not None:
            text = last_event_id.strip()
            if not text.lstrip("-").isdigit() or len(text) > 19 or not -1 <= int(text) < INT64_MAX:
                raise InvalidRequest("Last-Event-ID", "Last-Event-ID must be the offset of the last event seen")
            start = int(last_event_id) + 1
        else:
            start = offset if offset is not None else rm.high_watermark
        rm.read(start, 1)  # 410 before the stream starts
        if sse_subscribers >= SSE_MAX_SUBSCRIBERS:
            raise Unavailable(f"this node serves at most {SSE_MAX_SUBSCRIBERS} streams", retry_after_s=5)
        client = request.client.host if request.client else "?"
        if sse_by_client[client] >= SSE_MAX_PER_CLIENT:
            raise TooManyRequests(f"{client} has {SSE_MAX_PER_CLIENT} log streams open on this node already",
                                  retry_after_s=5, limit=SSE_MAX_PER_CLIENT)  # fmt: skip
        sse_subscribers += 1
        sse_by_client[client] += 1

        async def events() -> AsyncIterator[bytes]:
            nonlocal sse_subscribers
            position = start
            try:
                yield b"retry: 1000\n\n"
                while True:
                    try:
                        page = rm.read(position, LOG_LIMIT_DEFAULT)
                    except Gone as e:  # the reader fell below the window: tell it, then end
                        yield b"event: gone\ndata: " + orjson.dumps({"detail": e.detail, **e.extra}) + b"\n\n"
                        return
                    if page.entries:
                        yield b"".join(
                            b"id: %d\nevent: record\ndata: %s\n\n" % (e.offset, e.json) for e in page.entries
                        )
                        position = page.next_offset
                        continue
                    if not await rm.wait_beyond(position, SSE_KEEPALIVE_S):
                        yield b": keepalive\n\n"
            finally:
                sse_subscribers -= 1
                sse_by_client[client] -= 1
                if not sse_by_client[client]:
                    del sse_by_client[client]

        return StreamingResponse(
            events(), media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
        )

    @v1.get(
        "/snapshot",
        summary="The image at offset S written as records; continue reading the log at S+1. S is recent, "
        "not always the newest: an encoded snapshot is reused for a while (at least min_offset when given)",
    )
    async def snapshot(
        request: Request,
        min_offset: Annotated[
            int | None, Query(ge=-1, le=INT64_MAX, description="A snapshot at this offset or later (waits for it).")
        ] = None,
        layout: Annotated[
            Literal["records", "runs"],
            Query(
                description="msgpack only: 'runs' writes runs of one record type as columns, "
                '{"offset", "runs": [[n, type, version, *columns] or a record row, ...]}'
            ),
        ] = "records",
    ) -> Response:
        if min_offset is not None:
            await service.image_at_least(min_offset, MIN_OFFSET_WAIT_S)
        # encodings are built once per snapshot, off the event loop
        snap = service.read_model.snapshot(-1 if min_offset is None else min_offset)
        if wants_msgpack(request):
            encoded = (lambda: snap.runs) if layout == "runs" else (lambda: snap.msgpack)
            return Response(await asyncio.to_thread(encoded), media_type=MSGPACK)
        return Response(await asyncio.to_thread(lambda: snap.json), media_type="application/json")

    @v1.post("/quorum/voters", summary="Add a started node (kfed controller --join) as a voter")
    @leader_only
    async def add_voter(request: Request, body: AddVoter) -> Response:
        raft = commands.check_bootstrap(body.raft, "raft")
        if "," in raft:
            raise InvalidRequest("raft", "raft must be one 'host:port'")
        url = urlparse(body.http)
        if url.scheme not in ("http", "https") or not url.netloc:
            raise InvalidRequest("http", "http must be an http(s) URL")
        http = body.http.rstrip("/")
        # A voter that is not running would cost the quorum its majority margin (or, for a small quorum,
        # its majority): only a started node that answers as that id is added.
        seen = await node_status_of(http, timeout=2.0)
        if seen is None or seen.get("id") != body.id:
            raise Conflict(f"no kfed controller with id {body.id} answers at {http}; start it with --join first",
                           field="http")  # fmt: skip
        reads_up_to = seen.get("reads_metadata_up_to")
        reads_up_to = reads_up_to if type(reads_up_to) is int else 1  # an older node does not say: version 1
        return respond(request, await service.add_voter(body.id, raft, http, reads_up_to))

    @v1.delete("/quorum/voters/{voter_id}", summary="Remove a voter (the leader hands over leadership first)")
    @leader_only
    async def remove_voter(request: Request, voter_id: int) -> Response:
        return respond(request, await service.remove_voter(voter_id))

    # -- cluster admin -----------------------------------------------------------------------------
    @v1.post("/clusters", status_code=201, summary="Register a physical cluster (idempotent)")
    async def register_cluster(request: Request, body: RegisterCluster, key: IdemKey = None) -> Response:
        return await do_write(request, key, register_cluster_plan(body), status=201)

    @v1.put("/clusters/{cluster_id}/state", summary="Change a cluster's admin state")
    async def change_cluster_state(
        request: Request,
        cluster_id: str,
        body: Annotated[ChangeState, Body(openapi_examples={"read_only": {"value": {"state": "read_only"}}})],
        key: IdemKey = None,
    ) -> Response:
        return await do_write(request, key, cluster_state_plan(cluster_id, body))

    @v1.post(
        "/clusters/{cluster_id}/decommission",
        summary="Decommission a cluster: read_only and draining now, decommissioned once drained (re-run safe)",
    )
    async def decommission_cluster(request: Request, cluster_id: str, key: IdemKey = None) -> Response:
        plan = WritePlan(
            lambda image: commands.decommission_cluster(image, cluster_id),
            lambda image: _render_cluster(image, cluster_id),
        )
        return await do_write(request, key, plan)

    @v1.get("/drain", summary="Partitions on their way out and what each still waits for (the leader's view)")
    @leader_only
    async def drain_status(request: Request, cluster_id: str | None = None, topic: str | None = None) -> Response:
        rows = [
            r.view()
            for r in service.drain_rows()
            if (cluster_id is None or r.cluster_id == cluster_id) and (topic is None or r.topic == topic)
        ]
        return respond(request, {"offset": service.state.image.offset, "partitions": rows})

    # -- topic admin -------------------------------------------------------------------------------
    @v1.post("/topics", status_code=201, summary="Create a logical topic over its region's active clusters")
    async def create_topic(request: Request, body: CreateTopic, key: IdemKey = None) -> Response:
        return await do_write(request, key, create_topic_plan(body), status=201)

    @v1.post("/topics/{name}/partitions", summary="Add logical partitions on one cluster (scale up)")
    async def add_partitions(request: Request, name: str, body: AddPartitions, key: IdemKey = None) -> Response:
        plan = WritePlan(
            lambda image: commands.add_partitions(image, name, body.cluster_id, body.count, body.physical_topic),
            lambda image: _render_topic(image, name),
        )
        return await do_write(request, key, plan)

    @v1.put("/topics/{name}/partitions/{partition}/state", summary="Change one logical partition's state")
    async def change_partition_state(
        request: Request, name: str, partition: int, body: ChangeState, key: IdemKey = None
    ) -> Response:
        return await do_write(request, key, partition_state_plan(name, partition, body))

    @v1.post(
        "/topics/{name}/shrink",
        summary="Lossless scale-down: partitions go read_only now and are removed once drained (re-run safe)",
    )
    async def shrink_partitions(request: Request, name: str, body: ShrinkPartitions, key: IdemKey = None) -> Response:
        plan = WritePlan(
            lambda image: commands.shrink_partitions(image, name, body.partitions),
            lambda image: _render_topic(image, name),
        )
        return await do_write(request, key, plan)

    @v1.delete("/topics/{name}", summary="Delete a logical topic")
    async def delete_topic(request: Request, name: str, key: IdemKey = None) -> Response:
        plan = WritePlan(
            lambda image: commands.delete_topic(image, name),
            lambda image: {"name": name, "deleted": name not in image.topics},
        )
        return await do_write(request, key, plan)

    # -- agents ------------------------------------------------------------------------------------
    @v1.post("/agents/{cluster_id}/heartbeat", summary="Renew a cluster's agent lease (no log record)")
    @leader_only
    async def heartbeat(request: Request, cluster_id: str, body: Heartbeat) -> Response:
        return respond(request, await service.heartbeat(cluster_id, body.healthy, body.reason, body.applied_offset))

    @v1.post("/agents/{cluster_id}/partitions", summary="Report physical partitions; records only what changed")
    async def report_partitions(
        request: Request, cluster_id: str, body: PartitionReport, key: IdemKey = None
    ) -> Response:
        return await do_write(request, key, report_partitions_plan(cluster_id, body))

    @v1.post("/agents/{cluster_id}/drain", summary="Report drain measurements of a cluster (no log record)")
    @leader_only
    async def report_drain(request: Request, cluster_id: str, body: DrainReport) -> Response:
        measured = {
            (p.physical_topic, p.physical_partition): PartitionDrain(p.start, p.end, p.committed)
            for p in body.partitions
        }
        return respond(request, service.report_drain(cluster_id, measured))

    @v1.get("/agents", summary="Agent leases as the leader sees them (health, applied offset, last heartbeat)")
    @leader_only
    async def agents(request: Request) -> Response:
        return respond(request, {"agents": service.leases.view(time.monotonic()), "lease_ms": service.leases.lease_ms})

    # -- consumer groups ---------------------------------------------------------------------------
    @v1.get("/groups/{group}/coordinator", summary="The group's coordinator (the quorum leader)")
    async def group_coordinator(request: Request, group: str) -> Response:
        check_name(group, "group")
        leader = service.leader()
        if leader is None:
            raise Unavailable("no leader elected yet", retry_after_s=1.0)
        recorded = service.read_model.image.groups.get(group)
        return respond(request, {"group": group, "coordinator_id": leader.id, "http": leader.http,
                                 "recorded_coordinator_id": recorded.coordinator_id if recorded else None})  # fmt: skip

    @v1.post("/groups/{group}/heartbeat", summary="Join or renew a group member; its assignment and what it may start")
    @leader_only
    async def group_heartbeat(request: Request, group: str, body: GroupHeartbeat) -> Response:
        check_name(group, "group")
        owned = [(t, p) for t, p in body.owned]
        return respond(request, await service.group_heartbeat(
            group, body.member_id, body.topics, owned, body.session_timeout_ms))  # fmt: skip

    @v1.post("/groups/{group}/leave", summary="Leave a group (its partitions go to the other members)")
    @leader_only
    async def group_leave(request: Request, group: str, body: GroupLeave) -> Response:
        return respond(request, await service.group_leave(group, body.member_id))

    @v1.get("/groups/{group}", summary="A group's generation and assignment (from the log)")
    async def get_group(request: Request, group: str) -> Response:
        image = service.read_model.image
        g = image.groups.get(group)
        if g is None:
            raise NotFound(f"group {group!r} has never had a member")
        members = [{"member_id": m.member_id, "assignment": [list(tp) for tp in m.assignment]} for m in g.members]
        return respond(request, {"group": group, "generation": g.generation, "coordinator_id": g.coordinator_id,
                                 "members": members, "offset": image.offset})  # fmt: skip

    app.include_router(v1)
    app.include_router(gateways.router(service, forward_to_leader, respond))  # gateway: issue 26

    # -- operations --------------------------------------------------------------------------------
    @app.get("/healthz", summary="The process and its Raft thread are alive")
    async def healthz() -> Response:
        if not service.raft.alive():
            return problems.problem(503, "Unhealthy", "the Raft thread is not running")
        return Response(b'{"status":"ok"}', media_type="application/json")

    @app.get("/readyz", summary="This node knows a leader and has caught up with the log")
    async def readyz() -> Response:
        leader = service.leader()
        if leader is None:
            return problems.problem(503, "Not ready", "no leader known yet", {"Retry-After": "1"})
        if not service.raft.caught_up():
            return problems.problem(503, "Not ready", "still applying the log", {"Retry-After": "1"})
        return Response(orjson.dumps({"status": "ready", "leader_id": leader.id}), media_type="application/json")

    @app.get("/metrics", summary="Prometheus metrics")
    async def prometheus() -> Response:
        status = service.raft.status()
        rm = service.read_model
        lines = []
        for role in ("leader", "follower", "candidate"):
            lines += metrics.gauge(
                "kfed_raft_role",
                "1 for this node's current Raft role.",
                1 if status.role == role else 0,
                f'role="{role}"',
            )
        lines += metrics.gauge("kfed_raft_term", "Current Raft term.", status.term)
        lines += metrics.counter(
            "kfed_raft_stalls_total",
            f"Raft ticks that could not read their sockets for {STALL_GUARD_MS} ms beyond their wait.",
            status.stalls,
        )
        lines += metrics.gauge("kfed_applied_offset", "Offset of the last applied record.", rm.image.offset)
        lines += metrics.gauge("kfed_high_watermark", "Offset the next committed record will get.", rm.high_watermark)
        lines += metrics.gauge("kfed_log_start_offset", "First offset in the in-memory window.", rm.log_start_offset)
        lines += metrics.gauge("kfed_partitions", "Logical partitions in the image.", rm.image.partition_count())
        lines += metrics.counter(
            "kfed_raft_commands_total", "Raft commands proposed by this node.", service.committer.commands
        )
        lines += metrics.counter(
            "kfed_write_proposals_total", "Client writes proposed by this node.", service.committer.proposals
        )
        lines += metrics.gauge("kfed_sse_subscribers", "Open log streams.", sse_subscribers)
        lines += latency.render()
        return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

    @app.get("/", include_in_schema=False)
    async def root() -> Response:
        return Response(
            orjson.dumps({"service": "kfed controller", "node_id": service.node_id, "docs": "/docs"}),
            media_type="application/json",
        )

    dashboard.mount(app)
    app.state.forwarder = forwarder
    app.state.to_leader = to_leader
    return app


class _RenderedView:
    """The full merged metadata, encoded once per image offset and encoding. Big images are rendered in
    a worker thread so that tailers on the event loop are not held up (1M partitions take seconds)."""

    THREAD_ABOVE_PARTITIONS: Final = 20_000

    def __init__(self) -> None:
        self._cache: dict[str, tuple[int, bytes]] = {}

    async def get(self, image: MetadataImage, encoding: str) -> bytes:
        cached = self._cache.get(encoding)
        if cached is not None and cached[0] == image.offset:
            return cached[1]

        def render() -> bytes:
            view = metadata_view(image)
            return pack(view) if encoding == MSGPACK else orjson.dumps(view)

        if image.partition_count() > self.THREAD_ABOVE_PARTITIONS:
            body = await asyncio.to_thread(render)
        else:
            body = render()
        self._cache[encoding] = (image.offset, body)
        return body


class _MeasureAndLimit:
    """Refuses bodies over MAX_REQUEST_BYTES (413, also when chunked) and records request latency by route.

    Plain ASGI rather than ``@app.middleware("http")``: Starlette's BaseHTTPMiddleware adds a task group
    and a response stream per request, which cost a measurable share of requests/s here."""

    def __init__(self, app: ASGIApp, latency: metrics.RequestLatency) -> None:
        self.app = app
        self.latency = latency

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = 500

        async def send_and_note(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        too_large = PayloadTooLarge(f"request body exceeds {MAX_REQUEST_BYTES} bytes", limit_bytes=MAX_REQUEST_BYTES)
        received = 0

        async def receive_at_most() -> Message:
            """A chunked body has no Content-Length: count what arrives and stop at the limit."""
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > MAX_REQUEST_BYTES:
                    raise too_large
            return message

        try:
            length = next((v for k, v in scope["headers"] if k == b"content-length"), None)
            if length is not None and (not length.isdigit() or int(length) > MAX_REQUEST_BYTES):
                await problems.kfed_error_response(too_large)(scope, receive, send_and_note)
            else:
                await self.app(scope, receive_at_most, send_and_note)
        finally:
            route = scope.get("route")
            self.latency.observe(
                scope["method"], getattr(route, "path", "unmatched"), status, time.perf_counter() - started
            )


def _render_cluster(image: MetadataImage, cluster_id: str) -> dict[str, Any]:
    cluster = image.clusters.get(cluster_id)
    return cluster_view(cluster) if cluster else {"cluster_id": cluster_id}


def _render_topic(image: MetadataImage, name: str) -> dict[str, Any]:
    topic = image.topics.get(name)
    return topic_view(image, topic) if topic else {"name": name}
