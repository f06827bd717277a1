"""Probes and metrics: liveness (``/healthz``), readiness (``/readyz``), Prometheus (``/metrics``)."""

from __future__ import annotations

import orjson
from fastapi import APIRouter
from starlette.responses import Response

from metadata_quorum import STALL_GUARD_MS

from .. import metrics, problems
from .deps import Latency, Service
from .encoding import JSON
from .log import Streams

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="The process and its Raft thread are alive")
async def healthz(service: Service) -> Response:
    if not service.raft.alive():
        return problems.problem(503, "Unhealthy", "the Raft thread is not running")
    return Response(b'{"status":"ok"}', media_type=JSON)


@router.get("/readyz", summary="This node knows a leader and has caught up with the log")
async def readyz(service: Service) -> Response:
    leader = service.leader()
    if leader is None:
        return problems.problem(503, "Not ready", "no leader known yet", {"Retry-After": "1"})
    if not service.raft.caught_up():
        return problems.problem(503, "Not ready", "still applying the log", {"Retry-After": "1"})
    return Response(orjson.dumps({"status": "ready", "leader_id": leader.id}), media_type=JSON)


@router.get("/metrics", summary="Prometheus metrics")
async def prometheus(service: Service, latency: Latency, streams: Streams) -> Response:
    status = service.raft.status()
    rm = service.read_model
    lines = []
    for role in ("leader", "follower", "candidate"):
        lines += metrics.gauge(
            "kfed_raft_role", "1 for this node's current Raft role.", 1 if status.role == role else 0, f'role="{role}"'
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
    lines += metrics.gauge("kfed_sse_subscribers", "Open log streams.", streams.open)
    lines += latency.render()
    return Response("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")


@router.get("/", include_in_schema=False)
async def root(service: Service) -> Response:
    body = {"service": "kfed controller", "node_id": service.node_id, "docs": "/docs"}
    return Response(orjson.dumps(body), media_type=JSON)
