"""Physical clusters: register one, change its admin state, read them."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import Body, Request
from starlette.responses import Response

from metadata_log import commands
from metadata_log.errors import NotFound
from metadata_log.image import MetadataImage
from metadata_log.views import cluster_view

from .bodies import ChangeState, RegisterCluster
from .deps import Service
from .encoding import respond
from .routing import Router, WritePlan

router = Router(prefix="/v1/clusters", tags=["clusters"])


def render_cluster(image: MetadataImage, cluster_id: str) -> dict[str, Any]:
    cluster = image.clusters.get(cluster_id)
    return cluster_view(cluster) if cluster else {"cluster_id": cluster_id}


@router.get("", summary="Registered clusters")
async def list_clusters(request: Request, service: Service) -> Response:
    image = service.read_model.image
    clusters = [cluster_view(c) for _, c in sorted(image.clusters.items())]
    return respond(request, {"offset": image.offset, "clusters": clusters})


@router.get("/{cluster_id}", summary="One cluster")
async def get_cluster(request: Request, service: Service, cluster_id: str) -> Response:
    image = service.read_model.image
    cluster = image.clusters.get(cluster_id)
    if cluster is None:
        raise NotFound(f"cluster {cluster_id!r} is not registered")
    return respond(request, {**cluster_view(cluster), "offset": image.offset})


@router.write("POST", "", status_code=201, summary="Register a physical cluster (idempotent)")
def register_cluster(body: RegisterCluster) -> WritePlan:
    return WritePlan(
        lambda image: commands.register_cluster(image, body.cluster_id, body.region, body.bootstrap_servers),
        lambda image: render_cluster(image, body.cluster_id),
    )


@router.write("PUT", "/{cluster_id}/state", summary="Change a cluster's admin state")
def change_cluster_state(
    cluster_id: str,
    body: Annotated[ChangeState, Body(openapi_examples={"read_only": {"value": {"state": "read_only"}}})],
) -> WritePlan:
    return WritePlan(
        lambda image: commands.change_cluster_state(image, cluster_id, body.state),
        lambda image: render_cluster(image, cluster_id),
    )
