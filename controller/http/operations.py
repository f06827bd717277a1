"""Lossless scale-down, started and watched: decommission a cluster or shrink a topic (partitions go
read_only now and are removed once drained), and the drain status the leader decides from."""

from __future__ import annotations

from fastapi import Request
from starlette.responses import Response

from metadata_log import commands

from .bodies import ShrinkPartitions
from .clusters import render_cluster
from .deps import Service
from .encoding import respond
from .routing import Router, WritePlan
from .topics import render_topic

router = Router(prefix="/v1", tags=["operations"])


@router.write(
    "POST",
    "/clusters/{cluster_id}/decommission",
    summary="Decommission a cluster: read_only and draining now, decommissioned once drained (re-run safe)",
)
def decommission_cluster(cluster_id: str) -> WritePlan:
    return WritePlan(
        lambda image: commands.decommission_cluster(image, cluster_id),
        lambda image: render_cluster(image, cluster_id),
    )


@router.write(
    "POST",
    "/topics/{name}/shrink",
    summary="Lossless scale-down: partitions go read_only now and are removed once drained (re-run safe)",
)
def shrink_partitions(name: str, body: ShrinkPartitions) -> WritePlan:
    return WritePlan(
        lambda image: commands.shrink_partitions(image, name, body.partitions),
        lambda image: render_topic(image, name),
    )


@router.leader("GET", "/drain", summary="Partitions on their way out and what each still waits for (the leader's view)")
async def drain_status(
    request: Request, service: Service, cluster_id: str | None = None, topic: str | None = None
) -> Response:
    rows = [
        r.view()
        for r in service.drain_rows()
        if (cluster_id is None or r.cluster_id == cluster_id) and (topic is None or r.topic == topic)
    ]
    return respond(request, {"offset": service.state.image.offset, "partitions": rows})
