"""Logical topics: create one over its region's clusters, add partitions (scale up), change a partition's
state, switch its key order, delete, read. Scaling down is an operation (``operations.py``).

A change of a strict topic's writable set starts its next routing epoch in the same batch (the command does,
docs/KEY_ORDER.md); an expand's epoch starts from the leader's loop once the new partitions have leaders."""

from __future__ import annotations

import uuid
from typing import Annotated, Any

from fastapi import Query, Request
from starlette.responses import Response

from metadata_log import commands
from metadata_log.errors import NotFound
from metadata_log.image import MetadataImage
from metadata_log.views import MAX_PARTITIONS_PAGE, PARTITIONS_PAGE, topic_view

from .bodies import INT64_MAX, AddPartitions, ChangeKeyOrder, ChangeState, CreateTopic
from .deps import Service
from .encoding import respond
from .routing import Router, WritePlan

router = Router(prefix="/v1/topics", tags=["topics"])


def render_topic(image: MetadataImage, name: str) -> dict[str, Any]:
    topic = image.topics.get(name)
    return topic_view(image, topic) if topic else {"name": name}


@router.get("/{name}", summary="One logical topic with a page of its partitions (next_partition: the next page)")
async def get_topic(
    request: Request,
    service: Service,
    name: str,
    first_partition: Annotated[int, Query(ge=0, le=INT64_MAX, description="The page's first partition.")] = 0,
    partition_limit: Annotated[
        int, Query(ge=1, le=MAX_PARTITIONS_PAGE, description="Most partitions in the page.")
    ] = PARTITIONS_PAGE,
) -> Response:
    image = service.read_model.image
    topic = image.topics.get(name)
    if topic is None:
        raise NotFound(f"topic {name!r} does not exist")
    return respond(request, {**topic_view(image, topic, first_partition, partition_limit), "offset": image.offset})


@router.write("POST", "", status_code=201, summary="Create a logical topic over its region's active clusters")
def create_topic(body: CreateTopic) -> WritePlan:
    topic_id = str(uuid.uuid4())  # chosen by the proposer: apply has no randomness
    return WritePlan(
        lambda image: commands.create_topic(
            image,
            body.name,
            body.region,
            body.partitions_per_cluster,
            topic_id,
            body.physical_topic,
            body.retention_ms,
            body.key_order,
        ),
        lambda image: render_topic(image, body.name),
    )


@router.write("POST", "/{name}/partitions", summary="Add logical partitions on one cluster (scale up)")
def add_partitions(name: str, body: AddPartitions) -> WritePlan:
    return WritePlan(
        lambda image: commands.add_partitions(image, name, body.cluster_id, body.count, body.physical_topic),
        lambda image: render_topic(image, name),
    )


@router.write("PUT", "/{name}/partitions/{partition}/state", summary="Change one logical partition's state")
def change_partition_state(name: str, partition: int, body: ChangeState) -> WritePlan:
    return WritePlan(
        lambda image: commands.change_partition_state(image, name, partition, body.state),
        lambda image: render_topic(image, name),
    )


@router.write("PUT", "/{name}/key_order", summary="Switch a topic's key order: 'strict' or 'none' (docs/KEY_ORDER.md)")
def change_key_order(name: str, body: ChangeKeyOrder) -> WritePlan:
    return WritePlan(
        lambda image: commands.change_key_order(image, name, body.key_order),
        lambda image: render_topic(image, name),
    )


@router.write("DELETE", "/{name}", summary="Delete a logical topic")
def delete_topic(name: str) -> WritePlan:
    return WritePlan(
        lambda image: commands.delete_topic(image, name),
        lambda image: {"name": name, "deleted": name not in image.topics},
    )
