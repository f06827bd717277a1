"""The cluster-level APIs: ApiVersions, Metadata, FindCoordinator, InitProducerId, CreateTopics,
DeleteTopics, and SASL/PLAIN authentication.

Topic admin maps to kfed's topic commands through the quorum, and only for a client that authenticated
with kfed's admin token (SASL/PLAIN, the token as password). kfed places a topic's partitions itself, the
same number on each active cluster of the region, so CreateTopics takes a partition count that is a
multiple of those clusters (or -1: one each) and no replica assignments.
"""

from __future__ import annotations

import hmac
import uuid
from collections.abc import Mapping
from typing import Any, Final

from kafka_wire import protocol as kp
from kafka_wire.protocol import ErrorCode
from metadata_log.errors import Conflict, InvalidRequest, KfedError, NotFound

from .context import AdminContext, JobHandler
from .producers import MAX_EPOCH, ProducerIdsExhausted
from .server import ClientConnection
from .view import NO_LEADER, ClusterView, TopicView, topic_uuid

ZERO_UUID: Final = uuid.UUID(int=0)
ADMIN_ONLY: Final = "topic admin through the gateway needs SASL/PLAIN with the kfed admin token"
AUTHORIZED_OPERATIONS_UNKNOWN: Final = -(2**31)


# -- ApiVersions, Metadata ---------------------------------------------------------------------------
async def api_versions(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    return kp.api_versions_body(ctx.served_versions)


async def metadata(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    """The federation as a cluster of gateways. Producers and consumers see different leaders (see
    ``view.py``): which one this connection is, ``ClientConnection.producer_view`` says. Named topics are
    followed before the answer; every topic is answered whole only up to a size (``followed.py``)."""
    requested = request.body.topics
    whole = True  # False: every topic was asked for, too many partitions to answer with (followed.py)
    if requested is None or (request.api_version == 0 and not requested):
        every, whole = await ctx.every_topic()
        view = ctx.view()
        names: list[str | None] = list(every)
    else:
        await ctx.resolve([t.name for t in requested if t.name is not None])
        view = ctx.view()
        names = [
            t.name if t.name is not None else view.topic_name_of(getattr(t, "topic_id", ZERO_UUID)) for t in requested
        ]
    producer = conn.producer_view()
    topics = []
    for name in names:
        topic = view.topic(name) if name is not None and whole else None
        if topic is None:
            topics.append(
                {
                    "error_code": ErrorCode.unknown_topic_or_partition if whole else ErrorCode.invalid_request,
                    "name": name,
                    "topic_id": ZERO_UUID,
                    "is_internal": False,
                    "partitions": (),
                    "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN,
                }
            )
        else:
            topics.append(ctx.topic_metadata(view, topic, producer))
            conn.memory.told(conn.client_key, topic.name, len(topic.placements))
    brokers = [{"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack} for b in view.brokers]
    return {
        "throttle_time": 0,
        "brokers": brokers,
        "cluster_id": ctx.cluster_name,
        "controller_id": view.controller_id,
        "topics": topics,
    }


def topic_metadata(view: ClusterView, topic: TopicView, producer: bool) -> dict[str, Any]:
    """One topic's Metadata entry (built once per image and view kind, see ``Gateway.topic_metadata``)."""
    partitions = []
    for p in topic.placements:
        leader = view.leader(topic, p.partition, producer)
        replicas = (leader,) if leader != NO_LEADER else ()
        partitions.append(
            {
                "error_code": ErrorCode.none if leader != NO_LEADER else ErrorCode.leader_not_available,
                "partition_index": p.partition,
                "leader_id": leader,
                # -1: clients skip leader-epoch validation (OffsetForLeaderEpoch), which the gateway does not serve
                "leader_epoch": -1,
                "replica_nodes": replicas,
                "isr_nodes": replicas,
                "offline_replicas": (),
            }
        )
    return {
        "error_code": ErrorCode.none,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": partitions,
        "topic_authorized_operations": AUTHORIZED_OPERATIONS_UNKNOWN,
    }


# -- FindCoordinator, InitProducerId ------------------------------------------------------------------
async def find_coordinator(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    key_type = int(getattr(request.body, "key_type", 0))
    if key_type != 0:
        return {
            "error_code": ErrorCode.coordinator_not_available,
            "node_id": -1,
            "host": "",
            "port": -1,
            "error_message": "the kfed gateway serves no transactions",
        }
    conn.saw("consumer")
    broker = ctx.view().coordinator(request.body.key)
    return {"error_code": 0, "error_message": None, "node_id": broker.node_id, "host": broker.host, "port": broker.port}


async def init_producer_id(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    """An id for an idempotent producer; a client that already has one (v3+) gets its epoch bumped."""
    conn.saw("producer")
    body = request.body
    if body.transactional_id is not None:
        return {"error_code": ErrorCode.transactional_id_authorization_failed, "producer_id": -1, "producer_epoch": -1}
    producer_id, epoch = int(getattr(body, "producer_id", -1)), int(getattr(body, "producer_epoch", -1))
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
        return {"error_code": 0, "producer_id": producer_id, "producer_epoch": epoch + 1}
    try:
        return {"error_code": 0, "producer_id": ctx.producers.mint(), "producer_epoch": 0}
    except ProducerIdsExhausted:
        return {"error_code": ErrorCode.coordinator_not_available, "producer_id": -1, "producer_epoch": -1}


# -- CreateTopics, DeleteTopics -----------------------------------------------------------------------
async def create_topics(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    body = request.body
    if conn.admin:
        await ctx.resolve([t.name for t in body.topics])  # whether each exists
    view = ctx.view()
    validate_only = bool(getattr(body, "validate_only", False))
    results = []
    for topic in body.topics:
        code, message, created = await _create_topic(ctx, conn, view, topic, validate_only)
        results.append(
            {
                "name": topic.name,
                "topic_id": created[0] if created else ZERO_UUID,
                "error_code": code,
                "error_message": message,
                "num_partitions": created[1] if created else -1,
                "replication_factor": 1 if created else -1,
                "configs": None,
            }
        )
    return {"throttle_time": 0, "topics": results}


async def _create_topic(
    ctx: AdminContext, conn: ClientConnection, view: ClusterView, topic: Any, validate_only: bool
) -> tuple[ErrorCode, str | None, tuple[uuid.UUID, int] | None]:
    if not conn.admin:
        return ErrorCode.topic_authorization_failed, ADMIN_ONLY, None
    if topic.assignments:
        return ErrorCode.invalid_replica_assignment, "kfed places partitions itself: give num_partitions only", None
    region = ctx.region or (view.regions()[0] if len(view.regions()) == 1 else None)
    if region is None:
        return ErrorCode.invalid_request, "the federation has several regions: start the gateway with --region", None
    clusters = view.active_clusters(region)
    if not clusters:
        return ErrorCode.invalid_request, f"region {region!r} has no active cluster", None
    count = int(topic.num_partitions)
    if count == -1:
        count = len(clusters)
    if count < 1 or count % len(clusters):
        return (
            ErrorCode.invalid_partitions,
            (
                f"num_partitions must be a multiple of the {len(clusters)} active clusters of region {region!r} "
                "(kfed puts the same number on each), or -1"
            ),
            None,
        )
    retention_ms = None
    for config in topic.configs:
        if config.name != "retention.ms":
            return ErrorCode.invalid_config, f"config {config.name!r} is not set through the gateway", None
        try:
            retention_ms = int(config.value) if config.value is not None else None
        except ValueError:
            return ErrorCode.invalid_config, f"retention.ms {config.value!r} is not an integer", None
    if view.topic(topic.name) is not None:
        return ErrorCode.topic_already_exists, f"topic {topic.name!r} exists", None
    if validate_only:
        return ErrorCode.none, None, (ZERO_UUID, count)
    try:
        reply = await ctx.quorum.post(
            "/v1/topics",
            {
                "name": topic.name,
                "region": region,
                "partitions_per_cluster": count // len(clusters),
                "retention_ms": retention_ms,
            },
        )
    except KfedError as e:
        if isinstance(e, Conflict):
            return ErrorCode.topic_already_exists, e.detail, None
        if isinstance(e, InvalidRequest):
            return ErrorCode.invalid_topic_exception, e.detail, None
        return ErrorCode.request_timed_out if e.retryable else ErrorCode.unknown_server_error, e.detail, None
    return ErrorCode.none, None, (topic_uuid(str(reply.get("topic_id", topic.name))), len(reply.get("partitions", ())))


async def delete_topics(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    body = request.body
    view = ctx.view()
    if hasattr(body, "topic_names"):
        wanted: list[tuple[str | None, uuid.UUID]] = [(name, ZERO_UUID) for name in body.topic_names]
    else:
        wanted = [(t.name, t.topic_id) for t in body.topics]
    results = []
    for name, topic_id in wanted:
        if name is None:
            name = view.topic_name_of(topic_id)
        code, message = await _delete_topic(ctx, conn, name)
        results.append({"name": name, "topic_id": topic_id, "error_code": code, "error_message": message})
    return {"throttle_time": 0, "responses": results}


async def _delete_topic(ctx: AdminContext, conn: ClientConnection, name: str | None) -> tuple[ErrorCode, str | None]:
    if not conn.admin:
        return ErrorCode.topic_authorization_failed, ADMIN_ONLY
    if name is None:
        return ErrorCode.unknown_topic_id, "no topic has this id"
    try:
        await ctx.quorum.delete(f"/v1/topics/{name}")
    except KfedError as e:
        if isinstance(e, NotFound):
            return ErrorCode.unknown_topic_or_partition, e.detail
        return ErrorCode.request_timed_out if e.retryable else ErrorCode.unknown_server_error, e.detail
    return ErrorCode.none, None


# -- SASL/PLAIN ------------------------------------------------------------------------------------
async def sasl_handshake(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    if request.body.mechanism != "PLAIN":
        return {"error_code": ErrorCode.unsupported_sasl_mechanism, "mechanisms": ["PLAIN"]}
    conn.sasl_mechanism = "PLAIN"
    return {"error_code": 0, "mechanisms": ["PLAIN"]}


async def sasl_authenticate(ctx: AdminContext, conn: ClientConnection, request: kp.Request) -> Any:
    """SASL/PLAIN (RFC 4616): ``[authzid] NUL user NUL password``; the password is a kfed token. A failure
    closes the connection after its answer, as Kafka brokers do."""
    fields = bytes(request.body.auth_bytes).split(b"\0")
    password = fields[2] if conn.sasl_mechanism == "PLAIN" and len(fields) == 3 else None
    admin = password is not None and _same(password, ctx.admin_token)
    client = password is not None and any(_same(password, t) for t in ctx.client_tokens)
    if not (admin or client):
        conn.close_after_response = True
        return {
            "error_code": ErrorCode.sasl_authentication_failed,
            "error_message": "unknown user or token",
            "auth_bytes": b"",
            "session_lifetime": 0,
        }
    conn.authenticated, conn.admin = True, admin
    conn.principal = fields[1].decode("utf-8", "replace")
    return {"error_code": 0, "error_message": None, "auth_bytes": b"", "session_lifetime": 0}


def _same(given: bytes, expected: str | None) -> bool:
    return expected is not None and hmac.compare_digest(given, expected.encode())


HANDLERS: Final[Mapping[int, tuple[JobHandler[AdminContext], bool]]] = {
    kp.API_VERSIONS: (api_versions, False),
    kp.METADATA: (metadata, False),
    kp.FIND_COORDINATOR: (find_coordinator, False),
    kp.INIT_PRODUCER_ID: (init_producer_id, False),
    kp.CREATE_TOPICS: (create_topics, False),
    kp.DELETE_TOPICS: (delete_topics, False),
    kp.SASL_HANDSHAKE: (sasl_handshake, True),
    kp.SASL_AUTHENTICATE: (sasl_authenticate, True),
}
"""What serves each cluster-level API key, and whether it is ordered (see ``KafkaServer``)."""
