"""What broker agents send the leader: lease heartbeats, physical partition leaders, drain measurements;
and the leases as the leader sees them."""

from __future__ import annotations

import time

from fastapi import Request
from starlette.responses import Response

from metadata_log import commands
from metadata_log.errors import InvalidRequest

from ..drain import PartitionDrain
from .bodies import DrainReport, Heartbeat, PartitionReport
from .clusters import render_cluster
from .deps import Service
from .encoding import respond
from .routing import Router, WritePlan

router = Router(prefix="/v1/agents", tags=["agents"])


@router.leader("POST", "/{cluster_id}/heartbeat", summary="Renew a cluster's agent lease (no log record)")
async def heartbeat(request: Request, service: Service, cluster_id: str, body: Heartbeat) -> Response:
    return respond(request, await service.heartbeat(cluster_id, body.healthy, body.reason, body.applied_offset))


@router.write("POST", "/{cluster_id}/partitions", summary="Report physical partitions; records only what changed")
def report_partitions(cluster_id: str, body: PartitionReport) -> WritePlan:
    if body.leaders:
        if body.partitions:
            raise InvalidRequest("leaders", "a report gives partitions or leaders, not both")
        ranges = [commands.LeaderRanges(r.physical_topic, r.brokers, r.ranges, r.leaders) for r in body.leaders]
        return WritePlan(
            lambda image: commands.report_leader_ranges(image, cluster_id, ranges),
            lambda image: render_cluster(image, cluster_id),
        )
    entries = [commands.PhysicalPartition(p.physical_topic, p.physical_partition, p.leader) for p in body.partitions]
    return WritePlan(
        lambda image: commands.report_physical_partitions(image, cluster_id, entries),
        lambda image: render_cluster(image, cluster_id),
    )


@router.leader("POST", "/{cluster_id}/drain", summary="Report drain measurements of a cluster (no log record)")
async def report_drain(request: Request, service: Service, cluster_id: str, body: DrainReport) -> Response:
    measured = {
        (p.physical_topic, p.physical_partition): PartitionDrain(p.start, p.end, p.committed) for p in body.partitions
    }
    return respond(request, service.report_drain(cluster_id, measured))


@router.leader("GET", "", summary="Agent leases as the leader sees them (health, applied offset, last heartbeat)")
async def agents(request: Request, service: Service) -> Response:
    return respond(request, {"agents": service.leases.view(time.monotonic()), "lease_ms": service.leases.lease_ms})
